//! What the workload asks for: replicas, per-replica demand, placement policy, current state.

use std::collections::BTreeMap;
use std::fmt;

use crate::demand::Demand;
use crate::proximity::Origin;
use crate::selector::LabelSelector;
use crate::traffic::Traffic;

/// The order in which clusters are filled (`spec.placement.policy`).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Strategy {
    /// Most room first: each workload lands where there is the most room, which spreads load
    /// across the fleet. The default.
    #[default]
    WorstFit,
    /// The least room that still takes all new replicas first, then the largest of the rest:
    /// packs workloads and keeps big clusters free for big workloads.
    BestFit,
    /// Nearest to the origin first.
    Proximity(Origin),
    /// As even as capacity allows over the chosen clusters.
    Spread,
    /// [`Request::replicas`] in every eligible cluster, burst clusters included (as Karmada's
    /// `Duplicated` replica scheduling, or a DaemonSet with clusters for nodes): nothing is
    /// ranked, divided, overflowed or moved, and a cluster short of room gets what fits, the
    /// rest counted unplaced.
    Everywhere,
    /// In proportion to the traffic arriving at each cluster (Webster), so requests are served
    /// where they arrive; clusters without traffic only take overflow, nearest to those with
    /// it. Without any traffic measured, as [`Strategy::WorstFit`], and the explanation says so.
    Traffic(Traffic),
}

impl Strategy {
    /// The name users write in the spec.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::WorstFit => "worst-fit",
            Strategy::BestFit => "best-fit",
            Strategy::Proximity(_) => "proximity",
            Strategy::Spread => "spread",
            Strategy::Everywhere => "everywhere",
            Strategy::Traffic(_) => "traffic",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Proximity(origin) => write!(f, "proximity to {origin}"),
            Strategy::Traffic(t) if t.measured() => write!(f, "traffic (by {})", t.scope),
            Strategy::Traffic(_) => f.write_str("traffic (none measured: as worst-fit)"),
            other => f.write_str(other.name()),
        }
    }
}

/// Bursting parameters (`spec.placement.bursting`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bursting {
    /// Utilization ceiling in percent: a regular cluster whose CPU or memory utilization is above
    /// it gets no new replicas, so they overflow to other clusters and burst targets.
    pub threshold_percent: Option<u32>,
    /// Clusters matching this selector are burst targets for this workload, like clusters
    /// marked `burstOnly`.
    pub targets: Option<LabelSelector>,
}

/// Placement parameters (`spec.placement`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policy {
    /// Fill order.
    pub strategy: Strategy,
    /// Allow-list of cluster names (`clusters`); empty allows every cluster.
    pub clusters: Vec<String>,
    /// Cluster label selector (`clusterSelector`); `None` selects every cluster.
    pub cluster_selector: Option<LabelSelector>,
    /// The number of regular clusters chosen by the strategy. When they are full, new replicas
    /// overflow to further clusters (nearest to the chosen ones first) rather than stay
    /// unplaced; the explanation says so.
    pub max_clusters: Option<u32>,
    /// At least this many clusters should hold replicas: the first ones in strategy order share
    /// the replicas evenly (as capacity allows) before the rest are filled in order.
    pub min_clusters: Option<u32>,
    /// Static weights by cluster name. When any is set, replicas are divided among the clusters
    /// of positive weight by Webster/Sainte-Laguë (ties to the earlier name), each up to its
    /// room; clusters without weight only take overflow. Replaces the strategy's division, not
    /// its ranking (which still picks the clusters when `max_clusters` is set), and with
    /// [`Strategy::Traffic`] the traffic's division.
    pub weights: BTreeMap<String, u32>,
    /// Bursting parameters.
    pub bursting: Bursting,
    /// Cluster taints tolerated (`tolerations`).
    pub tolerations: Vec<crate::ClusterToleration>,
}

/// One placement question: how should `replicas` of this workload be placed, given where they
/// are now?
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    /// Total replicas wanted across clusters; with [`Strategy::Everywhere`], replicas wanted in
    /// each cluster.
    pub replicas: u32,
    /// What one replica needs.
    pub demand: Demand,
    /// How to place.
    pub policy: Policy,
    /// Replicas per cluster now. Steady placement keeps them where they are; pass an empty map
    /// to place from scratch (a deliberate rebalance).
    pub current: BTreeMap<String, u32>,
    /// Replicas to take out of a cluster and place elsewhere (stuck Pending past the timeout, or
    /// failover from a cluster that stopped reporting). The cluster gets no new replicas in
    /// this decision.
    pub evacuate: BTreeMap<String, u32>,
    /// A StatefulSet's clusters in the order of their ordinal ranges, lowest first; empty for a
    /// workload without ordinals. When set, a scale-down removes replicas from the last cluster
    /// first (the highest ordinals, as a StatefulSet scales down), and only the last cluster
    /// holding replicas and clusters holding none may gain replicas: any other would need the
    /// ordinals the clusters after it hold.
    pub ordinal_order: Vec<String>,
    /// Clusters whose Kubernetes minor version is below this, or unknown, take no new replicas
    /// (they keep those they have): a StatefulSet's `spec.ordinals` needs 1.27.
    pub min_kubernetes_minor: Option<u32>,
}

impl Request {
    /// A request for `replicas` of `demand` under `policy`, placed from scratch.
    pub fn new(replicas: u32, demand: Demand, policy: Policy) -> Self {
        Request {
            replicas,
            demand,
            policy,
            ..Request::default()
        }
    }

    /// The same request, steady from `current`.
    pub fn with_current(mut self, current: BTreeMap<String, u32>) -> Self {
        self.current = current;
        self
    }
}
