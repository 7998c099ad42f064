//! `MultiClusterDeployment`: one Deployment, its replicas divided among workload clusters.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{
    CustomResource,
    core::{Selector, SelectorExt},
};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::{DeploymentTemplate, Error, Placement, default_true};

/// Default of `spec.replicas`, as for a Deployment.
pub const DEFAULT_REPLICAS: i32 = 1;

/// Desired state of a MultiClusterDeployment.
// Printer columns repeat `type_ = ...` and `priority = ...` inside `printcolumn(...)`, which the
// lint mistakes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "nave.dev",
    version = "v1alpha1",
    kind = "MultiClusterDeployment",
    namespaced,
    shortname = "mcd",
    category = "nave",
    status = "MultiClusterDeploymentStatus",
    derive = "PartialEq",
    doc = "A Deployment whose replicas Nave divides among workload clusters. `spec.template` is an \
           ordinary apps/v1 Deployment's metadata and spec; `spec.replicas` is the total across \
           clusters; `spec.placement` says which clusters may run it and how replicas are divided.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        description = "Total replicas wanted across clusters",
        json_path = ".spec.replicas"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        description = "Ready replicas across clusters",
        json_path = ".status.readyReplicas"
    ),
    printcolumn(
        name = "Available",
        type_ = "integer",
        description = "Available replicas across clusters",
        json_path = ".status.availableReplicas",
        priority = 1
    ),
    printcolumn(
        name = "Unplaced",
        type_ = "integer",
        description = "Replicas no cluster has room for",
        json_path = ".status.unplacedReplicas",
        priority = 1
    ),
    printcolumn(
        name = "Clusters",
        type_ = "integer",
        description = "Clusters with replicas",
        json_path = ".status.clusterCount"
    ),
    printcolumn(
        name = "Policy",
        type_ = "string",
        description = "Placement policy",
        json_path = ".spec.placement.policy"
    ),
    printcolumn(
        name = "Placement",
        type_ = "string",
        description = "Replicas per cluster",
        json_path = ".status.placementSummary",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "Message",
        type_ = "string",
        description = "Why replicas are where they are",
        json_path = ".status.conditions[?(@.type==\"Scheduled\")].message",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterDeploymentSpec {
    /// Total number of replicas across ALL clusters (not per cluster): `6` with two clusters
    /// used may run 3 + 3, or 4 + 2 as capacity allows. Default `1`. `kubectl scale mcd` and
    /// HorizontalPodAutoscalers set this field. The one exception is policy `everywhere`, where
    /// it is the count in EACH selected cluster (`status.replicas` is then the total); do not
    /// point a HorizontalPodAutoscaler at such an MCD.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0))]
    pub replicas: i32,

    /// The Deployment (or, with `kind: StatefulSet`, the StatefulSet) to run in each chosen
    /// cluster: `metadata` (labels, annotations) and `spec`, an ordinary apps/v1 DeploymentSpec
    /// or StatefulSetSpec. To convert a manifest, move its kind, metadata labels and spec one
    /// level down, under `template`.
    pub template: DeploymentTemplate,

    /// Which clusters may run the replicas and how they are divided. Defaults to the `worst-fit`
    /// policy over all schedulable clusters, with rescheduling of Pending replicas enabled.
    #[serde(default)]
    pub placement: Placement,

    /// Per-cluster changes to the generated Deployment (image mirror, environment, resources),
    /// as JSON patches. Applied in order; every entry whose clusters match is applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<ClusterOverride>,

    /// Copying of the ConfigMaps and Secrets the pod template references into every cluster
    /// that runs replicas. Enabled by default.
    #[serde(default)]
    pub dependencies: Dependencies,

    /// How a change of `template` reaches the clusters: in waves (a canary cluster first, then
    /// a region, then the rest), each waiting until the one before has rolled out, and halting
    /// when one fails. Default: every cluster at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::RolloutStrategy>,

    /// Leave each cluster's `spec.replicas` to that cluster: Nave sets it when it creates the
    /// Deployment there (the cluster's share) and never again, so a HorizontalPodAutoscaler in
    /// the cluster owns it without the agent setting it back. The template and everything else
    /// still follow this object. Placement keeps dividing `replicas` as the first size and for
    /// clusters that join later; status shows what each cluster runs. Default `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retain_replicas: bool,
}

/// JSON patches for the Deployment in some clusters.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.clusters) && size(self.clusters) > 0) || has(self.clusterSelector)",
        "message": "set clusters or clusterSelector to say which clusters this override applies to",
        "reason": "FieldValueRequired"
    }
]))]
pub struct ClusterOverride {
    /// Names of the WorkloadClusters this override applies to. Example: `[eu-1]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,

    /// The override also applies to clusters whose WorkloadCluster labels match this selector.
    /// Example: `matchLabels: {topology.kubernetes.io/region: cn-north}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,

    /// RFC 6902 JSON patch operations on that cluster's Deployment, whose paths start at the
    /// Deployment's root. They may change `/spec/...` (not `/spec/replicas`, each cluster's share,
    /// nor `/spec/selector`) and single labels or annotations other than Nave's own
    /// (`nave.dev/...`); a path that would change which object it is (kind, apiVersion, name,
    /// namespace) makes the spec invalid. Example:
    /// `[{op: replace, path: /spec/template/spec/containers/0/image, value: mirror.cn/nginx:1.27}]`.
    #[schemars(length(min = 1))]
    pub patches: Vec<JsonPatchOperation>,
}

impl ClusterOverride {
    /// Whether this override applies to the cluster with this name and these labels
    /// (`index` is the override's position in `spec.overrides`, for the error message).
    pub fn applies_to(
        &self,
        index: usize,
        cluster: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<bool, Error> {
        if self.clusters.iter().any(|name| name == cluster) {
            return Ok(true);
        }
        let Some(selector) = &self.cluster_selector else {
            return Ok(false);
        };
        let selector = Selector::try_from(selector.clone()).map_err(|source| Error::ParseSelector {
            path: format!("spec.overrides[{index}].clusterSelector"),
            source,
        })?;
        Ok(selector.matches(labels))
    }
}

/// One RFC 6902 JSON patch operation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!(self.op in ['add', 'replace', 'test']) || has(self.value)",
        "message": "add, replace and test operations need a value",
        "fieldPath": ".value",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "!(self.op in ['move', 'copy']) || has(self.from)",
        "message": "move and copy operations need from",
        "fieldPath": ".from",
        "reason": "FieldValueRequired"
    }
]))]
pub struct JsonPatchOperation {
    /// The operation: `add`, `remove`, `replace`, `move`, `copy` or `test`.
    pub op: PatchOp,

    /// JSON pointer to the target in the Deployment. Example: `/spec/template/spec/containers/0/image`.
    #[schemars(pattern(JSON_POINTER_PATTERN))]
    pub path: String,

    /// Source JSON pointer, for `move` and `copy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(JSON_POINTER_PATTERN))]
    pub from: Option<String>,

    /// The value, for `add`, `replace` and `test`: any JSON (a string, number, object, list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value_schema")]
    pub value: Option<serde_json::Value>,
}

/// RFC 6901 JSON pointer: empty (the whole document) or `/`-separated tokens, `~` escaped.
pub const JSON_POINTER_PATTERN: &str = "^(/([^~]|~[01])*)*$";

/// An RFC 6902 operation name.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PatchOp {
    /// Add a value (or insert into a list).
    Add,
    /// Remove the value at `path`.
    Remove,
    /// Replace the value at `path`.
    Replace,
    /// Move the value at `from` to `path`.
    Move,
    /// Copy the value at `from` to `path`.
    Copy,
    /// Fail the whole patch unless the value at `path` equals `value`.
    Test,
}

fn any_value_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}

/// Which objects follow the workload into its clusters.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dependencies {
    /// Copy the ConfigMaps and Secrets referenced by the pod template (volumes, env, envFrom,
    /// imagePullSecrets), from this namespace into the same namespace of every cluster that runs
    /// replicas, and remove them when no longer used there. Default `true`.
    #[serde(default = "default_true")]
    pub enabled: bool,

    /// More objects to copy that the pod template does not reference, e.g. a ConfigMap the
    /// application reads through the API. Example: `[{kind: ConfigMap, name: feature-flags}]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<DependencyRef>,

    /// Referenced objects NOT to copy, because each cluster provides its own (e.g. a Secret
    /// created by an external secrets operator). Example: `[{kind: Secret, name: db-password}]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<DependencyRef>,
}

impl Default for Dependencies {
    fn default() -> Self {
        Self {
            enabled: true,
            include: Vec::new(),
            exclude: Vec::new(),
        }
    }
}

/// A ConfigMap or Secret in the MultiClusterDeployment's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DependencyRef {
    /// `ConfigMap` or `Secret`.
    pub kind: DependencyKind,

    /// Name of the object. Example: `web-config`.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Kinds of objects that follow a workload.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub enum DependencyKind {
    /// A core/v1 ConfigMap.
    ConfigMap,
    /// A core/v1 Secret.
    Secret,
}

/// Observed state of a MultiClusterDeployment, written by the hub.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterDeploymentStatus {
    /// The `metadata.generation` this status describes; older means the hub has not yet acted
    /// on the latest change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Replicas (pods) that exist, summed over clusters.
    #[serde(default)]
    pub replicas: i32,

    /// Ready replicas, summed over clusters.
    #[serde(default)]
    pub ready_replicas: i32,

    /// Available replicas (ready for at least minReadySeconds), summed over clusters.
    #[serde(default)]
    pub available_replicas: i32,

    /// Ready replicas known to run the current `spec.template`, summed over clusters: in each
    /// cluster whose Deployment has taken the template, its ready replicas less those that may
    /// still be of an older one. Equal to `spec.replicas` once a rollout has finished.
    #[serde(default)]
    pub updated_ready_replicas: i32,

    /// Replicas of `spec.replicas` that no cluster has room for. They are placed as soon as
    /// capacity appears; the `Degraded` condition says why.
    #[serde(default)]
    pub unplaced_replicas: i32,

    /// Replicas that exist but are Pending (not scheduled to a node), summed over clusters.
    #[serde(default)]
    pub pending_replicas: i32,

    /// Number of clusters with replicas assigned.
    #[serde(default)]
    pub cluster_count: i32,

    /// Replicas per cluster in one line, e.g. `eu-1=4,us-1=2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_summary: Option<String>,

    /// The pod label selector in string form (`app=web`), for the scale subresource and
    /// HorizontalPodAutoscalers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,

    /// One entry per cluster with replicas assigned or still running.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub clusters: Vec<ClusterPlacementStatus>,

    /// `Scheduled`, `Available`, `Progressing`, `Degraded` and `Bursting`, as for a Deployment:
    /// `kubectl wait --for=condition=Available mcd/web` works.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// How far the current template has got through `spec.rollout.waves` (absent without waves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::RolloutStatus>,
}

/// The replicas of a MultiClusterDeployment in one cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPlacementStatus {
    /// WorkloadCluster name.
    pub name: String,

    /// Replicas assigned to this cluster.
    #[serde(default)]
    pub desired: i32,

    /// Ready replicas in this cluster.
    #[serde(default)]
    pub ready: i32,

    /// Available replicas in this cluster.
    #[serde(default)]
    pub available: i32,

    /// Pending (unscheduled) replicas in this cluster.
    #[serde(default)]
    pub pending: i32,

    /// True when these are burst replicas (see `spec.placement.bursting`), removed first on
    /// scale-in.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub burst: bool,

    /// StatefulSets: the ordinals this cluster runs, e.g. `2-4`, and those it still stops after
    /// giving them up (`2-3, 4 stopping`), which no other cluster runs until it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinals: Option<String>,

    /// Why the cluster was chosen and how it is doing, e.g.
    /// `worst-fit: most free room (cpu 12 of 16 free)` or `2 pods Pending: Insufficient cpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl MultiClusterDeploymentStatus {
    /// The condition of this type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        crate::conditions::find(&self.conditions, type_)
    }
}

fn default_replicas() -> i32 {
    DEFAULT_REPLICAS
}
