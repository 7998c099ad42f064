{{/* Name of the chart, overridable. */}}
{{- define "nave-hub.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of the release's objects: the release name, with the chart name unless it has it. */}}
{{- define "nave-hub.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "nave-hub.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "nave-hub.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: nave
{{- end }}

{{/* Labels that select the hub's pod: never change them on upgrade (selectors are immutable). */}}
{{- define "nave-hub.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nave-hub.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "nave-hub.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "nave-hub.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "nave-hub.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret holding the bootstrap token agents register with, and its key. */}}
{{- define "nave-hub.bootstrapSecretName" -}}
{{- default (printf "%s-bootstrap-token" (include "nave-hub.fullname" .)) .Values.bootstrapToken.existingSecret }}
{{- end }}

{{- define "nave-hub.bootstrapSecretKey" -}}
{{- if .Values.bootstrapToken.existingSecret }}{{ .Values.bootstrapToken.existingSecretKey }}{{ else }}token{{ end }}
{{- end }}

{{/* The Secret of the REST API tokens the hub reads (`--api-tokens-secret`); empty for none. */}}
{{- define "nave-hub.apiTokensSecretName" -}}
{{- if .Values.apiTokens.existingSecret }}
{{- .Values.apiTokens.existingSecret }}
{{- else if .Values.apiTokens.tokens }}
{{- printf "%s-api-tokens" (include "nave-hub.fullname" .) }}
{{- end }}
{{- end }}

{{/* The Secret holding the Postgres URL, and its key. */}}
{{- define "nave-hub.postgresSecretName" -}}
{{- default (printf "%s-database" (include "nave-hub.fullname" .)) .Values.database.postgres.existingSecret }}
{{- end }}

{{- define "nave-hub.postgresSecretKey" -}}
{{- if .Values.database.postgres.existingSecret }}{{ .Values.database.postgres.existingSecretKey }}{{ else }}url{{ end }}
{{- end }}

{{/* The PersistentVolumeClaim of the SQLite store. */}}
{{- define "nave-hub.claimName" -}}
{{- default (printf "%s-data" (include "nave-hub.fullname" .)) .Values.database.sqlite.persistence.existingClaim }}
{{- end }}

{{/* Fails the render on a database choice the hub cannot run with. */}}
{{- define "nave-hub.validateDatabase" -}}
{{- if not (has .Values.database.type (list "sqlite" "postgres")) }}
{{- fail (printf "database.type must be sqlite or postgres, not %q" .Values.database.type) }}
{{- end }}
{{- if and (eq .Values.database.type "postgres") (not .Values.database.postgres.url) (not .Values.database.postgres.existingSecret) }}
{{- fail "database.type=postgres needs database.postgres.existingSecret (a Secret with the URL) or database.postgres.url" }}
{{- end }}
{{- if and (eq .Values.database.type "sqlite") (gt (int (include "nave-hub.replicas" .)) 1) }}
{{- fail (printf "replicas=%v needs database.type=postgres: a SQLite file has one writer, so the hub runs as one replica on it" .Values.replicas) }}
{{- end }}
{{- if lt (int (include "nave-hub.replicas" .)) 1 }}
{{- fail (printf "replicas must be at least 1, not %v" .Values.replicas) }}
{{- end }}
{{- if not (has .Values.highAvailability.podAntiAffinity (list "soft" "hard" "")) }}
{{- fail (printf "highAvailability.podAntiAffinity must be soft, hard or empty, not %q" .Values.highAvailability.podAntiAffinity) }}
{{- end }}
{{- end }}

{{/* Hub replicas: as given, else 2 with Postgres and 1 with SQLite. */}}
{{- define "nave-hub.replicas" -}}
{{- if ne (toString .Values.replicas) "" }}{{ .Values.replicas }}{{ else if eq .Values.database.type "postgres" }}2{{ else }}1{{ end }}
{{- end }}

{{/* Whether the replicas elect a leader: always on Postgres, never on SQLite (one replica). */}}
{{- define "nave-hub.leaderElection" -}}
{{- if eq .Values.database.type "postgres" }}true{{ end }}
{{- end }}

{{/* The Secret with the hub's serving certificate (tls.crt, tls.key). */}}
{{- define "nave-hub.tlsSecretName" -}}
{{- .Values.tls.existingSecret | default (printf "%s-tls" (include "nave-hub.fullname" .)) }}
{{- end }}

{{/* The Secret with the store key. */}}
{{- define "nave-hub.storeKeySecretName" -}}
{{- .Values.storeKey.existingSecret | default (printf "%s-store-key" (include "nave-hub.fullname" .)) }}
{{- end }}
{{- define "nave-hub.storeKeySecretKey" -}}
{{- if .Values.storeKey.existingSecret }}{{ .Values.storeKey.existingSecretKey }}{{ else }}key{{ end }}
{{- end }}

{{/*
The drop-in path's MutatingWebhookConfiguration, with the CA bundle given as "caBundle".
*/}}
{{- define "nave-hub.dropInWebhook" -}}
{{- $root := .root }}
{{- if not (has $root.Values.dropIn.failurePolicy (list "Fail" "Ignore")) }}
{{- fail (printf "dropIn.failurePolicy must be Fail or Ignore, not %q" $root.Values.dropIn.failurePolicy) }}
{{- end }}
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: {{ include "nave-hub.fullname" $root }}-drop-in
  labels:
    {{- include "nave-hub.labels" $root | nindent 4 }}
  {{- with $root.Values.dropIn.webhookAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
webhooks:
  # Gates the pods of annotated Deployments so the management cluster never runs them.
  - name: pods.drop-in.nave.dev
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: {{ $root.Values.dropIn.failurePolicy }}
    timeoutSeconds: {{ int $root.Values.dropIn.timeoutSeconds }}
    clientConfig:
      service:
        name: {{ include "nave-hub.fullname" $root }}
        namespace: {{ $root.Release.Namespace }}
        port: {{ $root.Values.service.port }}
        path: /admission/v1/drop-in/pods
      {{- with .caBundle }}
      caBundle: {{ . }}
      {{- end }}
    rules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        resources: ["pods"]
        operations: ["CREATE"]
        scope: Namespaced
    # Only the namespaces the fleet's admin opened, never the hub's own (it could not start
    # again), and only Deployments' pods: nothing else waits on the hub.
    namespaceSelector:
      matchLabels:
        nave.dev/drop-in: enabled
      matchExpressions:
        - key: kubernetes.io/metadata.name
          operator: NotIn
          values: [{{ $root.Release.Namespace | quote }}]
    objectSelector:
      matchExpressions:
        - key: pod-template-hash
          operator: Exists
{{- end }}
