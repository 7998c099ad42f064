//! Where a workload may run and how its replicas are divided: `spec.placement`.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Error, default_true};

/// Go-style durations as Kubernetes writes them (`30s`, `5m`, `1h30m`, `1.5h`).
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";

/// Default of `rescheduling.pendingTimeout`.
pub const DEFAULT_PENDING_TIMEOUT: &str = "5m";
/// Default of `rescheduling.cooldown`.
pub const DEFAULT_RESCHEDULING_COOLDOWN: &str = "10m";
/// Default of `bursting.threshold`, in percent.
pub const DEFAULT_BURST_THRESHOLD_PERCENT: i32 = 80;

/// Which clusters a workload may use and how its replicas are divided among them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.minClusters) || !has(self.maxClusters) || self.minClusters <= self.maxClusters",
        "message": "minClusters must not be greater than maxClusters",
        "fieldPath": ".minClusters",
        "reason": "FieldValueInvalid"
    },
    {
        "rule": "!has(self.policy) || self.policy != 'proximity' || has(self.proximity)",
        "message": "policy proximity needs proximity.origin (a cluster, a region or coordinates)",
        "fieldPath": ".proximity",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "!has(self.policy) || self.policy != 'everywhere' || (!has(self.maxClusters) && !has(self.minClusters) && !has(self.weights) && !has(self.bursting) && !has(self.proximity))",
        "message": "policy everywhere runs spec.replicas in every selected cluster, so maxClusters, minClusters, weights, bursting and proximity do not apply: remove them",
        "fieldPath": ".policy",
        "reason": "FieldValueForbidden"
    },
    {
        "rule": "!has(self.policy) || self.policy != 'traffic' || !has(self.weights)",
        "message": "policy traffic divides replicas by the traffic measured at each cluster, weights by fixed shares: set one of them",
        "fieldPath": ".weights",
        "reason": "FieldValueForbidden"
    }
]))]
pub struct Placement {
    /// How clusters are ranked when replicas are divided:
    ///
    /// - `worst-fit` (default) puts replicas where there is the most free room, spreading load.
    /// - `best-fit` packs them into the clusters with the least room that still fits.
    /// - `proximity` prefers the clusters nearest to `proximity.origin`.
    /// - `spread` divides as evenly as capacity allows over at least `minClusters` clusters.
    /// - `everywhere` runs `spec.replicas` in EVERY selected cluster (per cluster, not in
    ///   total), as a DaemonSet does per node: for agents, ingress controllers, log collectors.
    ///   It follows clusters as they join, leave or stop matching `clusters`/`clusterSelector`;
    ///   replicas never move between clusters (no rescheduling, failover or bursting), a cluster
    ///   short of room gets what fits and the rest are counted unplaced. `maxClusters`,
    ///   `minClusters`, `weights`, `bursting` and `proximity` do not apply and are refused.
    /// - `traffic` divides replicas in proportion to the traffic arriving at each cluster (the
    ///   hub's `--prometheus-traffic-query`: this workload's own series when the query labels
    ///   them with `namespace` and `workload`, else each cluster's total), so requests are served
    ///   where they arrive; clusters without traffic take only overflow, nearest to those with
    ///   it. `minClusters` keeps one replica in each of that many clusters. Replicas follow the
    ///   workload's own traffic as it shifts, make-before-break, at most once per
    ///   `rescheduling.cooldown` and only when that serves 5 percentage points more of its
    ///   requests where they arrive (`rescheduling.enabled: false` keeps them where they are).
    ///   With no traffic measured it places as `worst-fit`, and the explanation says so. Not
    ///   with `weights`.
    #[serde(default)]
    pub policy: PlacementPolicy,

    /// Allow-list of WorkloadCluster names. When set, no other cluster is used, not even for
    /// overflow or bursting. Empty (the default) allows every cluster. Example: `[eu-1, eu-2]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,

    /// Only clusters whose WorkloadCluster labels match this selector are used. Combined with
    /// `clusters` when both are set (a cluster must pass both). Unset selects every cluster.
    /// Example: `matchLabels: {topology.kubernetes.io/region: eu-west}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,

    /// The most clusters that receive replicas (burst clusters not counted). Unset means no limit.
    /// Example: `3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_clusters: Option<i32>,

    /// The fewest clusters that receive replicas when there are enough replicas and eligible
    /// clusters; mostly useful with `spread` for availability. Must not exceed `maxClusters`.
    /// Unset means 1. Example: `2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_clusters: Option<i32>,

    /// Static weights by WorkloadCluster name. When set, replicas are divided among the listed
    /// clusters in proportion to their weights (Sainte-Laguë rounding, ties broken by name), each
    /// still limited to what fits; clusters not listed receive only overflow. Weights are
    /// positive integers. Example: `{eu-1: 3, us-1: 1}` puts 6 of 8 replicas in eu-1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("additionalProperties" = {"type": "integer", "format": "int32", "minimum": 1}))]
    pub weights: BTreeMap<String, i32>,

    /// Where "near" is for the `proximity` policy (required with it), and for choosing where
    /// overflow and burst replicas go with any policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proximity: Option<Proximity>,

    /// Utilization-driven bursting: when the chosen clusters are busier than `threshold`, new
    /// replicas go to burst target clusters. Unset disables bursting by utilization; replicas that
    /// do not fit anywhere else still overflow to `burstOnly` clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bursting: Option<Bursting>,

    /// Moving replicas that stay Pending in a cluster to clusters with room. Enabled by default.
    #[serde(default)]
    pub rescheduling: Rescheduling,

    /// What happens to replicas that failover moved away from a cluster whose heartbeats stopped,
    /// once that cluster is Ready again:
    /// `Never` (default) leaves them where they moved, and the returned cluster only receives new
    /// replicas (scale-up, later moves); `Immediate` moves the workload back to where this
    /// placement would put it from scratch, once the cluster has been Ready for the hub's
    /// settle period (`nave-hub run --failback-settle`, default 5m).
    #[serde(default)]
    pub failback: Failback,

    /// Cluster taints this workload tolerates (`WorkloadCluster.spec.taints`), as pod
    /// tolerations read node taints. Example: `{key: dedicated, value: batch, effect:
    /// NoSchedule}`; `{key: nave.dev/drain, operator: Exists, effect: NoExecute,
    /// tolerationSeconds: 3600}` stays an hour in a drained cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub tolerations: Vec<crate::ClusterToleration>,
}

/// Failback policy; see `spec.placement.failback`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Failback {
    /// Replicas stay where failover moved them; a returned cluster only receives new replicas.
    #[default]
    Never,
    /// Once the cluster has been Ready for the settle period, the workload is placed again from
    /// scratch, so replicas move back to where the policy puts them.
    Immediate,
}

impl Failback {
    /// The name as written in manifests, e.g. `Never`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Never => "Never",
            Self::Immediate => "Immediate",
        }
    }
}

impl std::fmt::Display for Failback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How clusters are ranked; see `spec.placement.policy`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PlacementPolicy {
    /// The clusters with the most free room first: spreads load.
    #[default]
    WorstFit,
    /// The clusters with the least room that still fits first: packs.
    BestFit,
    /// The clusters nearest to `proximity.origin` first.
    Proximity,
    /// As even as capacity allows over at least `minClusters` clusters.
    Spread,
    /// `spec.replicas` in every selected cluster.
    Everywhere,
    /// In proportion to the traffic arriving at each cluster.
    Traffic,
}

impl PlacementPolicy {
    /// The name as written in manifests, e.g. `worst-fit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WorstFit => "worst-fit",
            Self::BestFit => "best-fit",
            Self::Proximity => "proximity",
            Self::Spread => "spread",
            Self::Everywhere => "everywhere",
            Self::Traffic => "traffic",
        }
    }
}

impl std::fmt::Display for PlacementPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The reference point of the `proximity` policy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Proximity {
    /// The point replicas should be near: exactly one of `cluster`, `region` or `coordinates`.
    /// Clusters are ranked by the round trip the agents measured to it when known, else by the
    /// round trip estimated from network coordinates (for an origin cluster), then by distance
    /// between coordinates, then by matching region and zone.
    pub origin: ProximityOrigin,
}

/// A point of reference: exactly one field is set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.cluster) || has(self.region) || has(self.coordinates)",
        "message": "set one of cluster, region or coordinates",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "!(has(self.cluster) && has(self.region)) && !(has(self.cluster) && has(self.coordinates)) && !(has(self.region) && has(self.coordinates))",
        "message": "set only one of cluster, region or coordinates"
    }
]))]
pub struct ProximityOrigin {
    /// Name of a WorkloadCluster: replicas go to that cluster first, then to those nearest to it.
    /// Example: `eu-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub cluster: Option<String>,

    /// A region, matched against WorkloadCluster `spec.region`: clusters in it come first.
    /// Example: `eu-west`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub region: Option<String>,

    /// A place on Earth, e.g. where most users are: clusters are ranked by great-circle distance
    /// from it, using WorkloadCluster `spec.coordinates`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinates: Option<Coordinates>,
}

/// A position in decimal degrees (WGS 84).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, JsonSchema)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Coordinates {
    /// Latitude in decimal degrees, from -90 (south) to 90 (north). Example: `50.11`.
    #[schemars(range(min = -90.0, max = 90.0))]
    #[cfg_attr(feature = "openapi", schema(minimum = -90.0, maximum = 90.0))]
    pub latitude: f64,

    /// Longitude in decimal degrees, from -180 (west) to 180 (east). Example: `8.68`.
    #[schemars(range(min = -180.0, max = 180.0))]
    #[cfg_attr(feature = "openapi", schema(minimum = -180.0, maximum = 180.0))]
    pub longitude: f64,
}

/// Utilization-driven bursting into extra clusters.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bursting {
    /// Utilization ceiling of the preferred clusters, in percent (1-100): a cluster whose
    /// requested CPU or memory (the higher of the two, as a share of allocatable) would pass this
    /// value takes no more replicas, and the rest burst to `targets`. Default `80`.
    #[serde(default = "default_burst_threshold")]
    #[schemars(range(min = 1, max = 100))]
    pub threshold: i32,

    /// Which WorkloadClusters may receive burst replicas, by label. Unset means the clusters
    /// with `spec.burstOnly: true`. Nearest clusters (see `proximity`) are used first.
    /// Example: `matchLabels: {nave.dev/tier: burst}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<LabelSelector>,

    /// On scale-in, remove replicas from burst clusters before any preferred cluster, and move
    /// burst replicas back when the preferred clusters drop below the threshold. Default `true`.
    #[serde(default = "default_true")]
    pub retract_first: bool,
}

impl Default for Bursting {
    fn default() -> Self {
        Self {
            threshold: DEFAULT_BURST_THRESHOLD_PERCENT,
            targets: None,
            retract_first: true,
        }
    }
}

/// Moving replicas that cannot be scheduled in a cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rescheduling {
    /// Whether replicas Pending for longer than `pendingTimeout` are moved to clusters with room.
    /// A move starts the new replicas before the old ones are removed. Default `true`.
    #[serde(default = "default_true")]
    pub enabled: bool,

    /// How long a replica may stay Pending (unschedulable) in a cluster before it is moved,
    /// as a duration such as `90s`, `5m` or `1h`. Default `5m`.
    #[serde(default = "default_pending_timeout")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub pending_timeout: String,

    /// The least time between two moves of this workload's replicas, against flapping,
    /// as a duration such as `10m`. Default `10m`.
    #[serde(default = "default_cooldown")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub cooldown: String,
}

impl Default for Rescheduling {
    fn default() -> Self {
        Self {
            enabled: true,
            pending_timeout: DEFAULT_PENDING_TIMEOUT.to_owned(),
            cooldown: DEFAULT_RESCHEDULING_COOLDOWN.to_owned(),
        }
    }
}

impl Rescheduling {
    /// `pendingTimeout` as a duration.
    pub fn pending_timeout(&self) -> Result<Duration, Error> {
        parse_duration(
            "spec.placement.rescheduling.pendingTimeout",
            &self.pending_timeout,
        )
    }

    /// `cooldown` as a duration.
    pub fn cooldown(&self) -> Result<Duration, Error> {
        parse_duration("spec.placement.rescheduling.cooldown", &self.cooldown)
    }
}

/// Parses a Go-style duration (`5m`, `1h30m`); negative durations are rejected.
pub(crate) fn parse_duration(path: &str, value: &str) -> Result<Duration, Error> {
    let parsed: kube::core::Duration = value.parse().map_err(|source| Error::ParseDuration {
        path: path.to_owned(),
        value: value.to_owned(),
        source,
    })?;
    if parsed.is_negative() {
        return Err(Error::NegativeDuration {
            path: path.to_owned(),
            value: value.to_owned(),
        });
    }
    Ok(parsed.into())
}

fn default_burst_threshold() -> i32 {
    DEFAULT_BURST_THRESHOLD_PERCENT
}

fn default_pending_timeout() -> String {
    DEFAULT_PENDING_TIMEOUT.to_owned()
}

fn default_cooldown() -> String {
    DEFAULT_RESCHEDULING_COOLDOWN.to_owned()
}
