{{/* Name of the chart, overridable. */}}
{{- define "nave-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of the release's objects: the release name, with the chart name unless it has it. */}}
{{- define "nave-agent.fullname" -}}
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
{{- define "nave-agent.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "nave-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: nave
{{- end }}

{{/* Labels that select the agent's pod: never change them on upgrade (selectors are immutable). */}}
{{- define "nave-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nave-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "nave-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "nave-agent.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "nave-agent.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret holding the bootstrap token, and its key. */}}
{{- define "nave-agent.bootstrapSecretName" -}}
{{- default (printf "%s-bootstrap-token" (include "nave-agent.fullname" .)) .Values.bootstrapToken.existingSecret }}
{{- end }}

{{- define "nave-agent.bootstrapSecretKey" -}}
{{- if .Values.bootstrapToken.existingSecret }}{{ .Values.bootstrapToken.existingSecretKey }}{{ else }}token{{ end }}
{{- end }}
