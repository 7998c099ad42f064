//! `MultiClusterHorizontalPodAutoscaler`: a MultiClusterDeployment's total replicas scaled from
//! metrics aggregated over every cluster it runs in, with the fields and semantics of
//! `autoscaling/v2` HorizontalPodAutoscaler (mck8s's MultiClusterHPA).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a MultiClusterHorizontalPodAutoscaler.
// Printer columns repeat `type_ = ...` inside `printcolumn(...)`, which the lint mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "nave.dev",
    version = "v1alpha1",
    kind = "MultiClusterHorizontalPodAutoscaler",
    namespaced,
    shortname = "mchpa",
    category = "nave",
    status = "MultiClusterHorizontalPodAutoscalerStatus",
    derive = "PartialEq",
    doc = "Scales a MultiClusterDeployment's total replicas (`spec.replicas`) from the CPU or \
           memory utilization of its pods in every cluster it runs in, against their requests, or \
           from a metric the fleet's admin defined on the hub (requests per second, say), as a \
           HorizontalPodAutoscaler scales a Deployment: the same `minReplicas`, `maxReplicas`, \
           `metrics` and `behavior`. The new replicas are placed by the workload's policy and a \
           scale-down empties burst clusters first. Reads the clusters' usage from the hub's \
           Prometheus (`--prometheus-url`).",
    printcolumn(
        name = "Reference",
        type_ = "string",
        description = "The MultiClusterDeployment it scales",
        json_path = ".spec.scaleTargetRef.name"
    ),
    printcolumn(name = "MinPods", type_ = "integer", json_path = ".spec.minReplicas"),
    printcolumn(name = "MaxPods", type_ = "integer", json_path = ".spec.maxReplicas"),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        description = "Replicas the workload has",
        json_path = ".status.currentReplicas"
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        description = "Replicas it should have",
        json_path = ".status.desiredReplicas"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",
        "message": "minReplicas must not be greater than maxReplicas",
        "fieldPath": ".minReplicas",
        "reason": "FieldValueInvalid"
    }
]))]
pub struct MultiClusterHorizontalPodAutoscalerSpec {
    /// The MultiClusterDeployment to scale, in the same namespace.
    pub scale_target_ref: ScaleTargetRef,

    /// The fewest replicas in all. Default 1.
    #[serde(default = "default_min_replicas", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_replicas: Option<i32>,

    /// The most replicas in all.
    #[schemars(range(min = 1))]
    pub max_replicas: i32,

    /// What to scale by; the one that asks for the most replicas wins. `Resource` utilization
    /// (`cpu` or `memory`, against the pods' requests), or an `External` metric the fleet's admin
    /// defined on the hub by name (`--autoscale-metric NAME=QUERY`); other metric types are
    /// refused.
    #[schemars(length(min = 1, max = 8))]
    pub metrics: Vec<MetricSpec>,

    /// How fast to scale each way, as in `autoscaling/v2`: by default up to double or 4 more
    /// replicas (whichever is more) every 15 s, and down to the highest proposal of the last 5
    /// minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behavior: Option<ScalingBehavior>,
}

fn default_min_replicas() -> Option<i32> {
    Some(1)
}

/// The scaled object.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.kind) || self.kind == 'MultiClusterDeployment'",
        "message": "a MultiClusterHorizontalPodAutoscaler scales a MultiClusterDeployment",
        "fieldPath": ".kind",
        "reason": "FieldValueInvalid"
    }
]))]
pub struct ScaleTargetRef {
    /// `nave.dev/v1alpha1`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `MultiClusterDeployment`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The MultiClusterDeployment's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// One metric (`autoscaling/v2` MetricSpec, types `Resource` and `External`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.type != 'Resource' || has(self.resource)",
        "message": "type Resource needs resource",
        "fieldPath": ".resource",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "self.type != 'External' || has(self.external)",
        "message": "type External needs external",
        "fieldPath": ".external",
        "reason": "FieldValueRequired"
    }
]))]
pub struct MetricSpec {
    /// `Resource` or `External`.
    #[serde(rename = "type")]
    pub type_: MetricType,
    /// The resource and its target (type `Resource`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceMetricSource>,
    /// The admin's metric and its target (type `External`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalMetricSource>,
}

/// The metric types supported.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum MetricType {
    /// CPU or memory of the workload's pods, against their requests.
    Resource,
    /// A metric the fleet's admin defined on the hub, by name: requests per second, queue
    /// length, anything Prometheus has. An author names it and sets a target, and never writes
    /// a query.
    External,
}

/// An `External` metric: which of the hub's metrics, and its target.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalMetricSource {
    /// Which metric.
    pub metric: MetricIdentifier,
    /// The target.
    pub target: ExternalMetricTarget,
}

/// A metric of the hub's `--autoscale-metric` list.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricIdentifier {
    /// Its name in the hub's list. Example: `requests-per-second`.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
}

/// An `External` metric's target: its value over the whole workload (`Value`), or that value
/// per replica (`AverageValue`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.type != 'Value' || has(self.value)",
        "message": "type Value needs value",
        "fieldPath": ".value",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "self.type != 'AverageValue' || has(self.averageValue)",
        "message": "type AverageValue needs averageValue",
        "fieldPath": ".averageValue",
        "reason": "FieldValueRequired"
    }
]))]
pub struct ExternalMetricTarget {
    /// `Value` or `AverageValue`.
    #[serde(rename = "type")]
    pub type_: ExternalTargetType,
    /// The value wanted over the whole workload, a quantity. Example: `500` or `1500m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub value: Option<IntOrString>,
    /// The value wanted per replica, a quantity. Example: `100` (requests per second per
    /// replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub average_value: Option<IntOrString>,
}

/// The target types of an `External` metric.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ExternalTargetType {
    /// The metric's value over the whole workload.
    Value,
    /// The metric's value divided by the workload's replicas.
    AverageValue,
}

/// A quantity as Kubernetes writes it: an integer or a string (`500m`, `2k`).
fn quantity_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-int-or-string": true})
}

/// A resource metric: which resource, and its target.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceMetricSource {
    /// `cpu` or `memory`.
    pub name: ResourceName,
    /// The target.
    pub target: MetricTarget,
}

/// The resources a metric may read.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResourceName {
    /// CPU in use.
    Cpu,
    /// Memory in use (working set).
    Memory,
}

impl ResourceName {
    /// The name as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceName::Cpu => "cpu",
            ResourceName::Memory => "memory",
        }
    }
}

/// A target (`type: Utilization` only).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricTarget {
    /// `Utilization`: of the pods' requests, in percent, averaged over every pod in every
    /// cluster.
    #[serde(rename = "type")]
    pub type_: TargetType,
    /// The utilization wanted, in percent of the requests. Example: `60`.
    #[schemars(range(min = 1))]
    pub average_utilization: i32,
}

/// The target types supported.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum TargetType {
    /// In percent of the pods' requests.
    Utilization,
}

/// Scaling behaviour each way.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalingBehavior {
    /// Scaling up (default: no stabilization; 100% or 4 pods per 15 s, the larger).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_up: Option<ScalingRules>,
    /// Scaling down (default: 300 s stabilization; 100% per 15 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down: Option<ScalingRules>,
}

/// Scaling rules of one direction.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalingRules {
    /// Seconds of past proposals to consider (0 to 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub stabilization_window_seconds: Option<i32>,
    /// `Max` (default), `Min` or `Disabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub select_policy: Option<SelectPolicy>,
    /// How much may change per period; unset keeps the default policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10))]
    pub policies: Option<Vec<HpaScalingPolicy>>,
}

/// Which policy applies.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SelectPolicy {
    /// The policy that allows the largest change.
    Max,
    /// The policy that allows the smallest change.
    Min,
    /// No change this way.
    Disabled,
}

/// One scaling policy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HpaScalingPolicy {
    /// `Pods` or `Percent`.
    #[serde(rename = "type")]
    pub type_: PolicyType,
    /// How many pods, or what percentage of the replicas at the start of the period.
    #[schemars(range(min = 1))]
    pub value: i32,
    /// The period, 1 to 1800 seconds.
    #[schemars(range(min = 1, max = 1800))]
    pub period_seconds: i32,
}

/// The kinds of scaling policy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PolicyType {
    /// A number of pods.
    Pods,
    /// A percentage of the replicas.
    Percent,
}

/// What the autoscaler saw and did.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterHorizontalPodAutoscalerStatus {
    /// The generation this status is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The workload's replicas when last evaluated.
    #[serde(default)]
    pub current_replicas: i32,
    /// The replicas it should have.
    #[serde(default)]
    pub desired_replicas: i32,
    /// When it last changed the workload's replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
    /// Each metric's value when last evaluated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub current_metrics: Vec<MetricStatus>,
    /// `AbleToScale`, `ScalingActive`, `ScalingLimited`, as a HorizontalPodAutoscaler's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One metric's value.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricStatus {
    /// `Resource` or `External`.
    #[serde(rename = "type")]
    pub type_: MetricType,
    /// The resource and its value (type `Resource`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceMetricStatus>,
    /// The metric and its value (type `External`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalMetricStatus>,
}

/// An `External` metric's value.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalMetricStatus {
    /// Which metric.
    pub metric: MetricIdentifier,
    /// Its value now.
    pub current: ExternalValueStatus,
}

/// A measured `External` value: over the workload, and per replica.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalValueStatus {
    /// Over the whole workload, a quantity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Per replica, a quantity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub average_value: Option<String>,
}

/// A resource metric's value.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceMetricStatus {
    /// `cpu` or `memory`.
    pub name: ResourceName,
    /// The value.
    pub current: MetricValueStatus,
}

/// A measured utilization.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricValueStatus {
    /// Utilization in percent of the pods' requests, over every pod in every cluster.
    pub average_utilization: i32,
}
