//! The Deployment a MultiClusterDeployment runs in each cluster: `spec.template`.
//!
//! `spec.template.spec` is kept as raw JSON rather than as a typed `DeploymentSpec`, for two
//! reasons. The generated schema of `DeploymentSpec` is hundreds of kilobytes: it would push the
//! CRD past the 256 KiB limit of the `kubectl.kubernetes.io/last-applied-configuration`
//! annotation, so a client-side `kubectl apply -f crds/` would fail. And a typed field would let
//! one object with a template the Rust types reject fail the deserialization of a whole watch
//! list; as raw JSON it deserializes always, and [`DeploymentTemplate::deployment_spec`] reports
//! what is wrong, with the field path, for that object alone.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DeploymentSpec, StatefulSetSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::Error;

/// Path of the template's Deployment spec, as reported in errors and `kubectl explain`.
pub const TEMPLATE_SPEC_PATH: &str = "spec.template.spec";

/// `{kind, metadata, spec}` of an `apps/v1` Deployment or StatefulSet.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.kind) ? self.kind : 'Deployment') == (has(oldSelf.kind) ? oldSelf.kind : 'Deployment')",
        "message": "template.kind cannot change: delete the MultiClusterDeployment and create it again with the other kind",
        "fieldPath": ".kind",
        "reason": "FieldValueForbidden"
    },
    {
        "rule": "!has(self.kind) || self.kind != 'StatefulSet' || !has(self.spec.ordinals)",
        "message": "Nave sets each cluster's spec.ordinals.start (its range of the fleet's ordinals); leave ordinals out of the template",
        "fieldPath": ".spec.ordinals",
        "reason": "FieldValueForbidden"
    }
]))]
pub struct DeploymentTemplate {
    /// What runs in each cluster: `Deployment` (the default) or `StatefulSet`. A StatefulSet's
    /// replicas are numbered across the fleet: each cluster's StatefulSet gets its own range of
    /// ordinals (`spec.ordinals.start`), so `db-0` exists in one cluster only; it scales down
    /// from the highest ordinals and grows at them, and its replicas never move between clusters
    /// on their own (a replica's volume stays in its cluster). Cannot change once set.
    #[serde(default, skip_serializing_if = "WorkloadKind::is_deployment")]
    pub kind: WorkloadKind,

    /// Labels and annotations of the Deployment created in each cluster (not of its pods: those
    /// are in `spec.template.metadata`). Nave adds its own `nave.dev/*` labels.
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,

    /// An ordinary `apps/v1` DeploymentSpec (a StatefulSetSpec with `kind: StatefulSet`):
    /// `selector`, `template` (the pod template), `strategy` and so on, exactly as in its
    /// manifest. Its `replicas` is ignored: each cluster's object gets its share of the
    /// MultiClusterDeployment's `spec.replicas`. Fields not
    /// described here are kept as written and checked when the Deployment is built.
    #[schemars(schema_with = "deployment_spec_schema")]
    pub spec: serde_json::Value,
}

/// The kind of workload a MultiClusterDeployment runs in each cluster.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum WorkloadKind {
    /// An `apps/v1` Deployment: interchangeable replicas, moved make-before-break.
    #[default]
    Deployment,
    /// An `apps/v1` StatefulSet: numbered replicas, each ordinal in one cluster of the fleet.
    StatefulSet,
}

impl WorkloadKind {
    /// True for the default, [`WorkloadKind::Deployment`] (left out when serialized).
    pub fn is_deployment(&self) -> bool {
        *self == WorkloadKind::Deployment
    }

    /// The kind's name, as in a manifest.
    pub fn as_str(&self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
        }
    }
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Labels and annotations of a generated object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels to set on the object. Example: `{app: web}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,

    /// Annotations to set on the object.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl TemplateMetadata {
    /// True when there are neither labels nor annotations.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

impl DeploymentTemplate {
    /// A template from a typed spec (for tests and for tools that build objects in code).
    pub fn from_spec(metadata: TemplateMetadata, spec: &DeploymentSpec) -> Self {
        let spec = serde_json::to_value(spec).expect("a DeploymentSpec always serializes to JSON");
        Self {
            kind: WorkloadKind::Deployment,
            metadata,
            spec,
        }
    }

    /// A StatefulSet's template from a typed spec (for tests and tools).
    pub fn from_stateful_set_spec(metadata: TemplateMetadata, spec: &StatefulSetSpec) -> Self {
        let spec = serde_json::to_value(spec).expect("a StatefulSetSpec always serializes to JSON");
        Self {
            kind: WorkloadKind::StatefulSet,
            metadata,
            spec,
        }
    }

    /// The pod-level view placement reads of any kind: selector, pod template (and, for a
    /// Deployment, its rollout fields), as a DeploymentSpec. A StatefulSet's spec is parsed and
    /// checked as one ([`DeploymentTemplate::stateful_set_spec`]) and its selector and pod
    /// template carried over.
    pub fn workload_spec(&self) -> Result<DeploymentSpec, Error> {
        match self.kind {
            WorkloadKind::Deployment => self.deployment_spec(),
            WorkloadKind::StatefulSet => {
                let spec = self.stateful_set_spec()?;
                Ok(DeploymentSpec {
                    selector: spec.selector,
                    template: spec.template,
                    min_ready_seconds: spec.min_ready_seconds,
                    revision_history_limit: spec.revision_history_limit,
                    ..DeploymentSpec::default()
                })
            }
        }
    }

    /// Parses `spec` as an `apps/v1` StatefulSetSpec and checks it as
    /// [`DeploymentTemplate::deployment_spec`] checks a Deployment's, and that `ordinals` is
    /// left to Nave.
    pub fn stateful_set_spec(&self) -> Result<StatefulSetSpec, Error> {
        let spec: StatefulSetSpec = parse_at_path(&self.spec)?;
        if spec.ordinals.is_some() {
            return Err(Error::InvalidTemplate {
                path: format!("{TEMPLATE_SPEC_PATH}.ordinals"),
                message: "Nave sets each cluster's ordinals.start (its range of the fleet's ordinals); leave ordinals out of the template",
            });
        }
        check_pods(&spec.selector, &spec.template)?;
        Ok(spec)
    }

    /// Parses `spec` as an `apps/v1` DeploymentSpec and checks the rules the CRD's schema
    /// enforces: a non-empty selector matching the pod labels, and at least one container, each
    /// with a name and an image.
    ///
    /// The error names the offending field from the root of the MultiClusterDeployment, e.g.
    /// `spec.template.spec.template.spec.containers[0].image: invalid type: integer `1`, expected a string`.
    pub fn deployment_spec(&self) -> Result<DeploymentSpec, Error> {
        let spec: DeploymentSpec = parse_at_path(&self.spec)?;
        check_pods(&spec.selector, &spec.template)?;
        Ok(spec)
    }
}

/// `spec` parsed as `T`, an error naming the field from the root of the MultiClusterDeployment.
fn parse_at_path<T: serde::de::DeserializeOwned>(spec: &serde_json::Value) -> Result<T, Error> {
    serde_path_to_error::deserialize(spec).map_err(|err| {
        let inner = err.path().to_string();
        let path = match inner.as_str() {
            "." | "" => TEMPLATE_SPEC_PATH.to_owned(),
            _ if inner.starts_with('[') => format!("{TEMPLATE_SPEC_PATH}{inner}"),
            _ => format!("{TEMPLATE_SPEC_PATH}.{inner}"),
        };
        Error::ParseTemplate {
            path,
            source: err.into_inner(),
        }
    })
}

/// The checks of the CEL rules in [`deployment_spec_schema`], on the typed selector and pod
/// template of either kind.
fn check_pods(selector: &LabelSelector, template: &PodTemplateSpec) -> Result<(), Error> {
    let invalid = |path: &str, message: &'static str| Error::InvalidTemplate {
        path: format!("{TEMPLATE_SPEC_PATH}{path}"),
        message,
    };
    let match_labels = selector.match_labels.as_ref().filter(|l| !l.is_empty());
    let match_expressions = selector.match_expressions.as_ref().filter(|e| !e.is_empty());
    if match_labels.is_none() && match_expressions.is_none() {
        return Err(invalid(
            ".selector",
            "selector must not be empty: set matchLabels or matchExpressions",
        ));
    }
    if let Some(match_labels) = match_labels {
        let pod_labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
        let matches = pod_labels.is_some_and(|pod| match_labels.iter().all(|(k, v)| pod.get(k) == Some(v)));
        if !matches {
            return Err(invalid(
                ".selector",
                "selector.matchLabels must match template.metadata.labels",
            ));
        }
    }
    let Some(pod) = &template.spec else {
        return Err(invalid(".template.spec", "the pod template needs a spec"));
    };
    if pod.containers.is_empty() {
        return Err(invalid(
            ".template.spec.containers",
            "at least one container is required",
        ));
    }
    for (i, container) in pod.containers.iter().enumerate() {
        if container.name.is_empty() {
            return Err(invalid(
                &format!(".template.spec.containers[{i}].name"),
                "every container needs a name",
            ));
        }
        if container.image.as_deref().is_none_or(str::is_empty) {
            return Err(invalid(
                &format!(".template.spec.containers[{i}].image"),
                "every container needs an image",
            ));
        }
    }
    Ok(())
}

/// A compact structural schema for `spec.template.spec`.
///
/// Every object keeps unknown fields (`x-kubernetes-preserve-unknown-fields`), so any valid
/// DeploymentSpec is accepted and stored as written; the fields that matter to placement and the
/// common mistakes are described and checked.
fn deployment_spec_schema(_: &mut SchemaGenerator) -> Schema {
    let open_object = |description: &str| {
        json_schema!({
            "type": "object",
            "description": description,
            "x-kubernetes-preserve-unknown-fields": true,
        })
    };
    let open_list = |description: &str| {
        json_schema!({
            "type": "array",
            "description": description,
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        })
    };
    let string_list = |description: &str| json_schema!({"type": "array", "description": description, "items": {"type": "string"}});
    let labels = |description: &str| {
        json_schema!({
            "type": "object",
            "description": description,
            "maxProperties": 64,
            "additionalProperties": {"type": "string", "maxLength": 63},
        })
    };
    let quantities = |description: &str| {
        json_schema!({
            "type": "object",
            "description": description,
            "additionalProperties": {"x-kubernetes-int-or-string": true},
        })
    };

    let container = json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "x-kubernetes-validations": [
            {
                "rule": "has(self.name) && size(self.name) > 0",
                "message": "every container needs a name",
                "fieldPath": ".name",
                "reason": "FieldValueRequired",
            },
            {
                "rule": "has(self.image) && size(self.image) > 0",
                "message": "every container needs an image",
                "fieldPath": ".image",
                "reason": "FieldValueRequired",
            },
        ],
        "properties": {
            "name": {"type": "string", "description": "Name of the container, unique in the pod. Example: `web`."},
            "image": {"type": "string", "description": "Container image. Example: `nginx:1.27`. Per-cluster images go in `spec.overrides`."},
            "command": string_list("Entrypoint; the image's ENTRYPOINT when unset."),
            "args": string_list("Arguments to the entrypoint; the image's CMD when unset."),
            "env": open_list("Environment variables. ConfigMaps and Secrets referenced here follow the workload (see `spec.dependencies`)."),
            "envFrom": open_list("Environment variables from whole ConfigMaps or Secrets, which follow the workload (see `spec.dependencies`)."),
            "ports": {
                "type": "array",
                "description": "Ports the container listens on.",
                "items": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {
                        "name": {"type": "string", "description": "Port name, referable from a Service's targetPort."},
                        "containerPort": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 65535, "description": "Port number."},
                        "protocol": {"type": "string", "description": "TCP (default), UDP or SCTP."},
                    },
                },
            },
            "resources": {
                "type": "object",
                "description": "CPU and memory per replica. Placement counts how many replicas fit in each cluster from `requests`: set them.",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {
                    "requests": quantities("Resources reserved per replica, used for placement. Example: `{cpu: 250m, memory: 256Mi}`."),
                    "limits": quantities("Upper bounds per replica. Example: `{memory: 512Mi}`."),
                },
            },
            "volumeMounts": open_list("Volumes mounted into the container."),
            "readinessProbe": open_object("When the container is ready for traffic; ready replicas are counted in status."),
            "livenessProbe": open_object("When the container is restarted."),
        },
    });

    let pod_spec = json_schema!({
        "type": "object",
        "description": "The pod spec, as in a Deployment or StatefulSet (core/v1 PodSpec).",
        "x-kubernetes-preserve-unknown-fields": true,
        "x-kubernetes-validations": [
            {
                "rule": "has(self.containers) && size(self.containers) > 0",
                "message": "at least one container is required",
                "fieldPath": ".containers",
                "reason": "FieldValueRequired",
            },
        ],
        "properties": {
            "containers": {
                "type": "array",
                "description": "The containers of each replica; at least one, each with a name and an image.",
                "maxItems": 64,
                "items": container,
            },
            "initContainers": open_list("Containers run to completion before the others start."),
            "volumes": open_list("Volumes; ConfigMaps and Secrets used here follow the workload (see `spec.dependencies`)."),
            "nodeSelector": {
                "type": "object",
                "description": "Node labels a replica needs; only clusters with such nodes are candidates.",
                "additionalProperties": {"type": "string"},
            },
            "affinity": open_object("Node and pod affinity; required node affinity limits the candidate clusters."),
            "tolerations": open_list("Taints the replicas tolerate; nodes with other NoSchedule taints are not counted."),
            "topologySpreadConstraints": open_list("How replicas spread over nodes and zones within one cluster."),
            "serviceAccountName": {"type": "string", "description": "Service account of the pods; it must exist in every cluster used."},
            "priorityClassName": {"type": "string", "description": "Priority class of the pods; it must exist in every cluster used."},
            "imagePullSecrets": open_list("Secrets for pulling images; they follow the workload (see `spec.dependencies`)."),
        },
    });

    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "required": ["selector", "template"],
        "x-kubernetes-validations": [
            {
                "rule": "!has(self.selector) || !has(self.selector.matchLabels) || (has(self.template) && has(self.template.metadata) && has(self.template.metadata.labels) && self.selector.matchLabels.all(k, k in self.template.metadata.labels && self.template.metadata.labels[k] == self.selector.matchLabels[k]))",
                "message": "selector.matchLabels must match template.metadata.labels",
                "fieldPath": ".selector",
                "reason": "FieldValueInvalid",
            },
        ],
        "properties": {
            "replicas": {
                "type": "integer",
                "format": "int32",
                "description": "Ignored: the MultiClusterDeployment's spec.replicas is the total, divided among clusters.",
            },
            "selector": {
                "type": "object",
                "description": "Label selector of the pods, as in a Deployment (required, not empty). It must match template.metadata.labels.",
                "x-kubernetes-preserve-unknown-fields": true,
                "x-kubernetes-validations": [
                    {
                        "rule": "(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",
                        "message": "selector must not be empty: set matchLabels or matchExpressions",
                        "reason": "FieldValueRequired",
                    },
                ],
                "properties": {
                    "matchLabels": labels("Labels the pods must have. Example: `{app: web}`."),
                    "matchExpressions": open_list("Set-based requirements on pod labels."),
                },
            },
            "template": {
                "type": "object",
                "description": "The pod template (required), as in a Deployment.",
                "x-kubernetes-preserve-unknown-fields": true,
                "required": ["spec"],
                "properties": {
                    "metadata": {
                        "type": "object",
                        "description": "Labels and annotations of the pods.",
                        "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {
                            "labels": labels("Pod labels; they must include selector.matchLabels."),
                            "annotations": {"type": "object", "description": "Pod annotations.", "additionalProperties": {"type": "string"}},
                        },
                    },
                    "spec": pod_spec,
                },
            },
            "strategy": open_object("How each cluster's Deployment replaces old pods: RollingUpdate (default) or Recreate."),
            "minReadySeconds": {"type": "integer", "format": "int32", "minimum": 0, "description": "Seconds a new pod must be ready before it counts as available."},
            "revisionHistoryLimit": {"type": "integer", "format": "int32", "minimum": 0, "description": "Old ReplicaSets kept per cluster for rollback."},
            "progressDeadlineSeconds": {"type": "integer", "format": "int32", "minimum": 1, "description": "Seconds before a stalled rollout is reported as not progressing."},
            "paused": {"type": "boolean", "description": "Pauses rollouts in every cluster."},
            "serviceName": {"type": "string", "description": "StatefulSet only: the headless Service giving the pods their DNS names, in every cluster used (a MultiClusterService with `headless: true` following this workload creates it)."},
            "volumeClaimTemplates": open_list("StatefulSet only: a PersistentVolumeClaim per replica, made in the replica's cluster; a claim stays in its cluster, which is why a StatefulSet's replicas never move between clusters on their own."),
            "ordinals": open_object("StatefulSet only, and set by Nave: each cluster's `start` is its range of the fleet's ordinals. Leave it out of the template."),
            "podManagementPolicy": {"type": "string", "description": "StatefulSet only: OrderedReady (default) or Parallel, within each cluster."},
            "updateStrategy": open_object("StatefulSet only: how each cluster's StatefulSet replaces old pods (RollingUpdate from its highest ordinal, or OnDelete)."),
            "persistentVolumeClaimRetentionPolicy": open_object("StatefulSet only: whether claims are deleted with the StatefulSet (whenDeleted) or when it scales down (whenScaled); kept by default."),
        },
    })
}
