//! Cluster taints (`WorkloadCluster.spec.taints`) and the tolerations of a placement
//! (`spec.placement.tolerations`), with the meaning Kubernetes gives them on nodes.
//!
//! ```text
//!  taint NoSchedule ── not tolerated ──► no new replicas; those there stay (a cordon)
//!  taint NoExecute ─── not tolerated ──► no new replicas; those there move away, make-before-
//!                 │                      break, as far as the rest of the fleet has room (a drain)
//!                 └─ tolerated for tolerationSeconds ─► they stay that long after timeAdded
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The taint `nave drain` sets: NoExecute, so every workload that does not tolerate it moves
/// away.
pub const DRAIN_TAINT_KEY: &str = "nave.dev/drain";

/// The taint a WorkloadCluster being deleted carries for placement (NoExecute, since its
/// deletion): its workloads move away make-before-break before the hub forgets it. It is not
/// written to the object; placement explanations name it.
pub const REMOVING_TAINT_KEY: &str = "nave.dev/removing";

/// What a taint does to the workloads that do not tolerate it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
pub enum ClusterTaintEffect {
    /// No new replicas; those already there stay.
    NoSchedule,
    /// No new replicas, and those already there move to other clusters (make-before-break,
    /// as far as the rest of the fleet has room).
    NoExecute,
}

impl ClusterTaintEffect {
    /// The name as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }
}

/// A taint on a workload cluster: workloads without a matching toleration keep off it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTaint {
    /// The taint's key, a qualified name. Example: `nave.dev/drain`, `dedicated`.
    #[schemars(
        length(min = 1, max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
        )
    )]
    pub key: String,

    /// The taint's value; may be empty. Example: `gpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub value: Option<String>,

    /// `NoSchedule` or `NoExecute`.
    pub effect: ClusterTaintEffect,

    /// When the taint was added (RFC 3339): `tolerationSeconds` count from it. When unset, they
    /// count from when the hub first saw the taint (again from its start after a hub restart,
    /// so replicas stay longer rather than shorter). `nave drain` sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<Time>,
}

/// How a toleration compares values.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum TolerationOperator {
    /// The taint's value must equal `value` (the default).
    #[default]
    Equal,
    /// Any value; with an empty `key`, any taint.
    Exists,
}

/// A taint a workload tolerates, as a pod's toleration reads a node's taint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
        "message": "an empty key tolerates every taint only with operator Exists",
        "fieldPath": ".key",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
        "message": "operator Exists matches any value: remove value",
        "fieldPath": ".value",
        "reason": "FieldValueForbidden"
    },
    {
        "rule": "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
        "message": "tolerationSeconds applies only to effect NoExecute",
        "fieldPath": ".tolerationSeconds",
        "reason": "FieldValueForbidden"
    }
]))]
pub struct ClusterToleration {
    /// The taint key tolerated; empty (with `Exists`) tolerates every taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 316))]
    pub key: Option<String>,

    /// `Equal` (default) or `Exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<TolerationOperator>,

    /// The value tolerated, with `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub value: Option<String>,

    /// The effect tolerated; unset tolerates both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<ClusterTaintEffect>,

    /// With `NoExecute`: the replicas stay this many seconds after the taint was added, then
    /// move; meanwhile the cluster gets no new ones. Unset: they stay for good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub toleration_seconds: Option<i64>,
}
