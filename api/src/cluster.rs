//! `WorkloadCluster`: one workload cluster as the hub sees it.

use k8s_openapi::apimachinery::pkg::{
    api::resource::Quantity,
    apis::meta::v1::{Condition, Time},
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Coordinates;

/// Well-known label of a WorkloadCluster's region, for `clusterSelector`s.
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// Well-known label of a WorkloadCluster's zone, for `clusterSelector`s.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Desired state of a WorkloadCluster, set by an admin or at registration.
// Printer columns repeat `type_ = ...` and `priority = ...` inside `printcolumn(...)`, which the
// lint mistakes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "nave.dev",
    version = "v1alpha1",
    kind = "WorkloadCluster",
    shortname = "wcl",
    category = "nave",
    status = "WorkloadClusterStatus",
    derive = "PartialEq",
    doc = "A workload cluster that Nave may place replicas in. Created when its agent registers \
           (or by an admin beforehand). `clusterSelector`s of placements match its metadata.labels; \
           the spec says where it is and whether new replicas may go there.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        description = "Heartbeats arrive",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Region", type_ = "string", json_path = ".spec.region"),
    printcolumn(name = "Zone", type_ = "string", json_path = ".spec.zone", priority = 1),
    printcolumn(
        name = "Nodes",
        type_ = "integer",
        description = "Ready nodes",
        json_path = ".status.capacity.nodes"
    ),
    printcolumn(
        name = "CPU",
        type_ = "string",
        description = "Allocatable CPU",
        json_path = ".status.capacity.allocatable.cpu"
    ),
    printcolumn(
        name = "Memory",
        type_ = "string",
        description = "Allocatable memory",
        json_path = ".status.capacity.allocatable.memory"
    ),
    printcolumn(
        name = "CPU-Req%",
        type_ = "integer",
        description = "Requested CPU as a percentage of allocatable",
        json_path = ".status.capacity.cpuRequestedPercent",
        priority = 1
    ),
    printcolumn(
        name = "Mem-Req%",
        type_ = "integer",
        description = "Requested memory as a percentage of allocatable",
        json_path = ".status.capacity.memoryRequestedPercent",
        priority = 1
    ),
    printcolumn(
        name = "Unschedulable",
        type_ = "boolean",
        description = "Cordoned: no new replicas",
        json_path = ".spec.unschedulable",
        priority = 1
    ),
    printcolumn(
        name = "Burst-Only",
        type_ = "boolean",
        description = "Used only for overflow and bursting",
        json_path = ".spec.burstOnly",
        priority = 1
    ),
    printcolumn(
        name = "Heartbeat",
        type_ = "date",
        description = "Last heartbeat",
        json_path = ".status.lastHeartbeatTime",
        priority = 1
    ),
    printcolumn(
        name = "Kubernetes",
        type_ = "string",
        json_path = ".status.kubernetesVersion",
        priority = 1
    ),
    printcolumn(
        name = "Agent",
        type_ = "string",
        json_path = ".status.agentVersion",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadClusterSpec {
    /// The region the cluster is in, used by the `proximity` policy (`proximity.origin.region`)
    /// and to keep overflow near. Also set it as the `topology.kubernetes.io/region` label to
    /// select clusters by region. Example: `eu-west`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,

    /// The zone within the region, a tie-breaker for proximity. Example: `eu-west-1a`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,

    /// Where the cluster is, for the `proximity` policy when no latency has been measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinates: Option<Coordinates>,

    /// Cordon: no new replicas are placed here; replicas already here stay until moved for
    /// another reason. Default `false`.
    #[serde(default)]
    pub unschedulable: bool,

    /// Use this cluster only for overflow and bursting: it receives replicas only when the other
    /// clusters are full or over their bursting threshold, and is emptied first. Default `false`.
    #[serde(default)]
    pub burst_only: bool,

    /// Taints: workloads that do not tolerate one (`spec.placement.tolerations`) get no new
    /// replicas here (`NoSchedule`), or also move those they have elsewhere (`NoExecute`: a
    /// drain, make-before-break). One per key and effect.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key", "effect"]))]
    pub taints: Vec<crate::ClusterTaint>,
}

/// Observed state of a WorkloadCluster, written by the hub from its agent's heartbeats.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadClusterStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Joined` (an agent registered) and `Ready` (heartbeats arrive on time).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// Summary of the cluster's capacity from the last heartbeat. Status is written at a
    /// limited rate; the hub's store keeps every heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<ClusterCapacity>,

    /// When the hub last heard from the agent (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,

    /// Version of the Nave agent. Example: `0.1.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,

    /// Kubernetes version of the cluster. Example: `v1.33.1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
}

/// What a cluster has and what is used.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCapacity {
    /// Ready, schedulable nodes.
    #[serde(default)]
    pub nodes: i32,

    /// Sum of the nodes' allocatable resources.
    #[serde(default)]
    pub allocatable: ResourceAmounts,

    /// Sum of the requests of the pods scheduled on those nodes.
    #[serde(default)]
    pub requested: ResourceAmounts,

    /// Measured usage (from metrics-server or Prometheus), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ResourceAmounts>,

    /// Requested CPU as a whole percentage of allocatable CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_requested_percent: Option<i32>,

    /// Requested memory as a whole percentage of allocatable memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_requested_percent: Option<i32>,
}

/// Amounts of resources, as in a node's `status.allocatable`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceAmounts {
    /// CPU as a quantity: whole cores when exact, else millicores. Example: `16` or `15500m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,

    /// Memory as a quantity: the largest exact binary suffix, else rounded to `Mi`. Example:
    /// `64Gi` or `1536Mi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,

    /// Pods, a count. Example: `330`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<Quantity>,
}

impl ResourceAmounts {
    /// Quantities in the form people read: CPU in whole cores when exact, else millicores
    /// (`8`, `15500m`); memory with the largest exact binary suffix from `Mi` up, else rounded to
    /// `Mi` (`16Gi`, `1536Mi`, `7748Mi`); pods as a plain number.
    pub fn from_resources(r: crate::wire::Resources) -> Self {
        ResourceAmounts {
            cpu: Some(cpu_quantity(r.cpu_millis)),
            memory: Some(memory_quantity(r.memory_bytes)),
            pods: Some(Quantity(r.pods.to_string())),
        }
    }
}

/// CPU as a quantity: whole cores when exact (`8`), else millicores (`15500m`).
pub fn cpu_quantity(millis: u64) -> Quantity {
    if millis.is_multiple_of(1000) {
        Quantity((millis / 1000).to_string())
    } else {
        Quantity(format!("{millis}m"))
    }
}

/// Memory as a quantity: the largest binary suffix that is exact, from `Mi` to `Ei` (`16Gi`,
/// `1536Mi`), else rounded to the nearest `Mi`.  Less than half a `Mi` stays exact (`512Ki`, `100`)
/// so that a small non-zero amount never reads as zero.
pub fn memory_quantity(bytes: u64) -> Quantity {
    const MI: u64 = 1 << 20;
    const SUFFIXES: [(&str, u32); 5] = [("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20)];
    if bytes == 0 {
        return Quantity("0".to_owned());
    }
    for (suffix, shift) in SUFFIXES {
        if bytes.trailing_zeros() >= shift {
            return Quantity(format!("{}{suffix}", bytes >> shift));
        }
    }
    let mebibytes = (bytes + MI / 2) / MI;
    if mebibytes > 0 {
        return Quantity(format!("{mebibytes}Mi"));
    }
    if bytes.is_multiple_of(1024) {
        Quantity(format!("{}Ki", bytes / 1024))
    } else {
        Quantity(bytes.to_string())
    }
}

impl WorkloadClusterStatus {
    /// The condition of this type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        crate::conditions::find(&self.conditions, type_)
    }
}

impl WorkloadCluster {
    /// Whether new replicas may be placed here: `Ready=True` and not cordoned.
    pub fn is_schedulable(&self) -> bool {
        !self.spec.unschedulable
            && self
                .status
                .as_ref()
                .is_some_and(|s| crate::conditions::is_true(&s.conditions, crate::conditions::types::READY))
    }
}
