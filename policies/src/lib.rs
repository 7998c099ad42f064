//! Nave's placement engine: where should the replicas of a MultiClusterDeployment run, and why?
//!
//! Pure functions over plain data: no Kubernetes client, no async runtime, no store. The hub
//! converts its objects (WorkloadClusters, agent heartbeats, the MCD spec and status) into these
//! types, calls [`decide`], writes the assignment out and shows the explanation.
//!
//! ```text
//!  agent heartbeats ──► Cluster { labels, flags, Capacity::Known(CapacityModel) } ─┐
//!  earlier decisions ─► Ledger (replicas assigned, not yet in `requested`) ────────┤
//!  MCD spec/status ───► Request { replicas, Demand, Policy, current, evacuate } ───┤
//!                                                                                  ▼
//!                                         decide(&Fleet, &Ledger, &Request)
//!        per cluster: filter ─► room (per node, minus ledger) ─► rank by strategy
//!        then: keep current ─► divide new replicas among preferred clusters
//!              (fill in order / spread / Webster by weight, minClusters first)
//!              ─► overflow to the nearest other clusters ─► burst clusters
//!              (or, on scale-down: burst clusters first, then proportionally)
//!                                                                                  ▼
//!  Decision { assignment, unplaced, clusters: [ClusterDecision], notes } ─► Display
//!       └─► Ledger::record(workload, demand, &decision) before the next decision
//! ```
//!
//! Rules the engine keeps, each covered by tests:
//! - **Room** in a cluster is the sum, over nodes that match the pod's `nodeSelector` and
//!   required node affinity and whose blocking taints it tolerates, of min(free cpu / cpu
//!   request, free memory / memory request, free pods), with free = allocatable - requested and
//!   the ledger's reservations taken out. A zero request does not limit.
//! - **Measured usage** ([`CapacityModel::usage`], from metrics), when the caller has it,
//!   replaces requests in [`Utilization`] (the bursting threshold) and ranks worst-fit,
//!   best-fit and spread by the lower of room and [`CapacityModel::headroom`]; the explanation
//!   says so ([`Score::MeasuredHeadroom`]). Filling still stops at room by requests, because the
//!   Kubernetes scheduler admits pods by requests.
//! - **Capacity unknown** (no agent report yet) is a filter: the cluster keeps what it has and
//!   gets nothing new, because placing blind is how clusters get overcommitted.
//! - **Filters** (allow-list, `clusterSelector`, not Ready, cordoned, capacity unknown,
//!   evacuating, above the bursting threshold) give no new replicas. Only the allow-list, the
//!   selector and a cluster gone from the fleet also move existing replicas away; a cluster that
//!   is not Ready keeps them until the caller evacuates it.
//! - **Steady**: existing replicas never move without one of those reasons; a scale-up places
//!   only the new ones; a scale-down adds nowhere and empties burst clusters first.
//! - **Partial**: what fits is placed and the rest is counted in [`Decision::unplaced`].
//! - **Deterministic**: ordered maps and sorted vectors only; every tie goes to the earlier name.
//!
//! [`autoscale`] holds the arithmetic of multi-cluster autoscaling: the HPA's proposal,
//! stabilization and rate rules over metrics aggregated across clusters.
//!
//! The pieces the adaptive behaviour builds on are here too: [`Utilization`] per cluster and the
//! bursting threshold ([`Bursting`]), and [`Request::evacuate`] to move stuck replicas away.
#![forbid(unsafe_code)]

pub mod autoscale;
mod capacity;
mod decide;
mod decision;
mod demand;
mod divide;
mod fleet;
mod ledger;
mod name;
pub mod network;
mod policy;
mod proximity;
mod resources;
mod selector;
mod taints;
mod traffic;

#[cfg(test)]
mod fixtures;

pub use capacity::{Capacity, CapacityModel, Node, NodeGroup, Room, Utilization};
pub use decide::decide;
pub use decision::{
    Addition, Change, ClusterDecision, Decision, Filter, Idle, Named, Note, Rank, Removal, Role, Score,
};
pub use demand::{Demand, Limit};
pub use fleet::{Cluster, Coordinates, Fleet, REGION_LABEL, ZONE_LABEL};
pub use ledger::{Ledger, Reservation};
pub use name::ClusterName;
pub use network::NetworkCoordinate;
pub use policy::{Bursting, Policy, Request, Strategy};
pub use proximity::{Origin, Proximity, Topology};
pub use resources::Resources;
pub use selector::{
    LabelSelector, LabelSelectorOperator, LabelSelectorRequirement, Labels, NodeSelector,
    NodeSelectorOperator, NodeSelectorRequirement, NodeSelectorTerm,
};
pub use taints::{
    ClusterTaint, ClusterToleration, Taint, TaintEffect, TaintVerdict, Toleration, TolerationOperator,
    blocking_taint, taint_verdict, toleration_expires_in,
};
pub use traffic::{Traffic, TrafficScope};
