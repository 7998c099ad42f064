//! `MultiClusterResource`: any Kubernetes object (a NetworkPolicy, a Role, a custom resource)
//! sent to the workload clusters a selector picks, with per-cluster overrides, status per
//! cluster, and removal from the clusters that stop being selected.
//!
//! Which kinds may be sent is the fleet admin's decision, twice over: the hub's
//! `--resource-kind` (namespaced kinds) and `--cluster-resource-kind` (cluster-scoped kinds,
//! accepted only from MultiClusterResources in the hub's own namespace), and each agent's
//! `--allow-kind`. A MultiClusterResource's author chooses neither.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{
    CustomResource,
    core::{Selector, SelectorExt},
};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ClusterOverride, Error};

/// Desired state of a MultiClusterResource.
// Printer columns repeat `type_ = ...` and `priority = ...` inside `printcolumn(...)`, which the
// lint mistakes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "nave.dev",
    version = "v1alpha1",
    kind = "MultiClusterResource",
    namespaced,
    shortname = "mcr",
    category = "nave",
    status = "MultiClusterResourceStatus",
    derive = "PartialEq",
    doc = "Any Kubernetes object sent to the workload clusters `spec.clusters` and \
           `spec.clusterSelector` pick: `spec.manifest` is the object, as `kubectl apply` would \
           take it. It is removed from a cluster that stops being selected and from every \
           cluster when this object is deleted. The kinds that may be sent are the fleet \
           admin's choice (the hub's `--resource-kind`, each agent's `--allow-kind`).",
    printcolumn(
        name = "Kind",
        type_ = "string",
        description = "Kind of the object sent",
        json_path = ".spec.manifest.kind"
    ),
    printcolumn(
        name = "Clusters",
        type_ = "integer",
        description = "Clusters selected",
        json_path = ".status.clusterCount"
    ),
    printcolumn(
        name = "Applied",
        type_ = "integer",
        description = "Clusters whose agent applied the object as it is now",
        json_path = ".status.appliedCount"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        description = "Applied in every selected cluster",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "Message",
        type_ = "string",
        description = "What is missing",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterResourceSpec {
    /// The object to send, as `kubectl apply` takes it: `apiVersion`, `kind`, `metadata.name`,
    /// and the rest of the object (`spec`, `rules`, `data`, ...). A namespaced object goes to
    /// this MultiClusterResource's namespace (`metadata.namespace` may be left out, or must name
    /// it). Labels and annotations are kept; `status` and server-set metadata are dropped.
    #[schemars(schema_with = "manifest_schema")]
    pub manifest: Value,

    /// Names of the WorkloadClusters to send the object to. Combined with `clusterSelector` when
    /// both are set (a cluster must pass both). Example: `[eu-1, eu-2]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,

    /// Only clusters whose WorkloadCluster labels match this selector get the object. With
    /// neither `clusters` nor `clusterSelector`, every cluster of the fleet gets it, including
    /// clusters that join later. Example: `matchLabels: {env: prod}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,

    /// Per-cluster changes to the object, as JSON patches on the whole manifest. Applied in
    /// order; every entry whose clusters match is applied. They may change anything but which
    /// object it is (`apiVersion`, `kind`, `metadata.name`, `metadata.namespace`) and Nave's own
    /// labels and annotations (`nave.dev/...`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<ClusterOverride>,
}

impl MultiClusterResourceSpec {
    /// Whether the cluster with this name and these labels is selected.
    pub fn selects(&self, cluster: &str, labels: &BTreeMap<String, String>) -> Result<bool, Error> {
        if !self.clusters.is_empty() && !self.clusters.iter().any(|c| c == cluster) {
            return Ok(false);
        }
        match &self.cluster_selector {
            None => Ok(true),
            Some(selector) => {
                let selector =
                    Selector::try_from(selector.clone()).map_err(|source| Error::ParseSelector {
                        path: "spec.clusterSelector".to_owned(),
                        source,
                    })?;
                Ok(selector.matches(labels))
            }
        }
    }

    /// `apiVersion` and `kind` of the manifest, empty where missing.
    pub fn manifest_kind(&self) -> (&str, &str) {
        let text = |key: &str| self.manifest.get(key).and_then(Value::as_str).unwrap_or_default();
        (text("apiVersion"), text("kind"))
    }
}

/// Observed state of a MultiClusterResource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterResourceStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// How many clusters are selected.
    #[serde(default)]
    pub cluster_count: i32,

    /// How many selected clusters' agents applied the object as it is now.
    #[serde(default)]
    pub applied_count: i32,

    /// The object in each selected cluster, by cluster name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterResourceStatus>,

    /// `Accepted` (the hub sends the object: its kind is allowed and the spec is valid) and
    /// `Ready` (applied in every selected cluster).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl MultiClusterResourceStatus {
    /// The condition of this type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        crate::conditions::find(&self.conditions, type_)
    }
}

/// Where the object stands in one cluster.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ResourceState {
    /// The agent applied the object as it is now.
    Applied,
    /// Sent; the agent has not reported it applied yet.
    Pending,
    /// The agent could not apply it (the message says why: refused by its allow-list, no such
    /// kind in the cluster, rejected by the cluster's API server).
    Failed,
    /// Another of the hub's objects (a MultiClusterDeployment's, another
    /// MultiClusterResource's) already sends an object of this kind, namespace and name there;
    /// this one is not sent.
    Conflict,
}

/// The object in one cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterResourceStatus {
    /// WorkloadCluster name.
    pub name: String,

    /// `Applied`, `Pending`, `Failed` or `Conflict`.
    pub state: ResourceState,

    /// Why it is not applied, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The manifest's schema: an open object whose identity fields are declared, so the API server
/// checks them and `kubectl explain` shows them.
fn manifest_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "The object to send, as `kubectl apply` takes it. A namespaced object goes to this MultiClusterResource's namespace.",
        "x-kubernetes-preserve-unknown-fields": true,
        "required": ["apiVersion", "kind", "metadata"],
        "properties": {
            "apiVersion": {
                "type": "string",
                "minLength": 1,
                "maxLength": 317,
                "description": "API version of the object. Example: `networking.k8s.io/v1`.",
            },
            "kind": {
                "type": "string",
                "minLength": 1,
                "maxLength": 63,
                "description": "Kind of the object. Example: `NetworkPolicy`. The hub sends only the kinds its admin allows (`--resource-kind`).",
            },
            "metadata": {
                "type": "object",
                "description": "Name, namespace, labels and annotations of the object.",
                "required": ["name"],
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 253, "description": "Name of the object in each cluster."},
                    "namespace": {"type": "string", "description": "Leave out, or this MultiClusterResource's own namespace; cluster-scoped objects have none."},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Labels of the object."},
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Annotations of the object."},
                },
            },
        },
    })
}
