//! The capacity model of one cluster and how many replicas of a demand fit in it.

use std::collections::BTreeMap;
use std::fmt;

use crate::demand::{Bound, Demand, Limit, NodeMatch};
use crate::ledger::Reservation;
use crate::resources::Resources;
use crate::selector::Labels;
use crate::taints::Taint;

#[cfg(test)]
mod tests;

/// One node's amounts, as its agent reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Node {
    /// `status.allocatable`.
    pub allocatable: Resources,
    /// Sum of the requests of the pods bound to the node, and the number of those pods.
    pub requested: Resources,
}

impl Node {
    /// A node from its allocatable and requested amounts.
    pub const fn new(allocatable: Resources, requested: Resources) -> Self {
        Node {
            allocatable,
            requested,
        }
    }

    /// Room left for new pods: allocatable - requested, never negative.
    pub fn free(&self) -> Resources {
        self.allocatable.saturating_sub(self.requested)
    }
}

/// Nodes that share labels and taints, so selectors and tolerations are checked once per group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeGroup {
    /// Labels every node of the group carries.
    pub labels: Labels,
    /// Taints every node of the group carries.
    pub taints: Vec<Taint>,
    /// The nodes, each with its own amounts.
    pub nodes: Vec<Node>,
}

impl NodeGroup {
    /// A group of nodes with the given labels and no taints.
    pub fn new(labels: Labels, nodes: Vec<Node>) -> Self {
        NodeGroup {
            labels,
            taints: Vec::new(),
            nodes,
        }
    }
}

/// What a cluster's agent reported about its nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CapacityModel {
    /// Node groups.
    pub groups: Vec<NodeGroup>,
    /// Measured usage of the whole cluster (from metrics), when known. It replaces `requested`
    /// in [`Utilization`]; room for new replicas is always counted from requests, because that
    /// is what the Kubernetes scheduler admits pods by.
    pub usage: Option<Resources>,
}

/// A cluster's capacity: known from an agent report, or not yet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Capacity {
    /// No report yet (an agent that just joined, or a cluster registered by hand). Such a cluster
    /// gets no new replicas: placing blind would be the overcommit the ledger exists to prevent.
    #[default]
    Unknown,
    /// The latest report.
    Known(CapacityModel),
}

/// How many more replicas of a demand a cluster can take.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Room {
    /// Replicas that fit, summed over eligible nodes.
    pub replicas: u64,
    /// What runs out first, or why no node is eligible.
    pub limit: Limit,
    /// Nodes whose labels and taints admit the pod.
    pub nodes_eligible: u32,
    /// All nodes of the cluster.
    pub nodes_total: u32,
}

impl fmt::Display for Room {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.replicas {
            0 => write!(f, "no room ({}", self.limit)?,
            1 => write!(f, "room for 1 replica ({}", self.limit)?,
            n => write!(f, "room for {n} replicas ({}", self.limit)?,
        }
        if self.nodes_eligible > 0 && self.nodes_eligible < self.nodes_total {
            write!(
                f,
                ", {} of {} nodes eligible",
                self.nodes_eligible, self.nodes_total
            )?;
        }
        f.write_str(")")
    }
}

/// How full a cluster is: used (requested, or measured usage when present, plus reservations)
/// against allocatable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Utilization {
    /// Requested or measured usage, plus reserved replicas.
    pub used: Resources,
    /// Allocatable, summed over nodes.
    pub allocatable: Resources,
    /// `used` counts measured usage rather than requests.
    pub measured: bool,
}

impl Utilization {
    /// CPU utilization in whole percent, rounded down.
    pub fn cpu_percent(&self) -> u64 {
        percent(self.used.cpu_millis, self.allocatable.cpu_millis)
    }

    /// Memory utilization in whole percent, rounded down.
    pub fn memory_percent(&self) -> u64 {
        percent(self.used.memory_bytes, self.allocatable.memory_bytes)
    }

    /// The higher of CPU and memory utilization, in whole percent.
    pub fn percent(&self) -> u64 {
        self.cpu_percent().max(self.memory_percent())
    }

    /// Whether CPU or memory utilization is strictly above `threshold_percent`, computed exactly
    /// (no rounding), so a cluster exactly at the ceiling is not above it.
    pub fn exceeds(&self, threshold_percent: u32) -> bool {
        let above = |used: u64, alloc: u64| {
            u128::from(used) * 100 > u128::from(threshold_percent) * u128::from(alloc)
        };
        above(self.used.cpu_millis, self.allocatable.cpu_millis)
            || above(self.used.memory_bytes, self.allocatable.memory_bytes)
    }
}

fn percent(used: u64, allocatable: u64) -> u64 {
    match allocatable {
        0 if used == 0 => 0,
        // Something used on nothing allocatable is full, not a division by zero.
        0 => 100,
        a => (u128::from(used) * 100 / u128::from(a)) as u64,
    }
}

impl fmt::Display for Utilization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cpu {}%, memory {}%",
            self.cpu_percent(),
            self.memory_percent()
        )?;
        if self.measured {
            f.write_str(" (measured usage)")?;
        }
        Ok(())
    }
}

impl CapacityModel {
    /// A model with one group per distinct (labels, taints) among `nodes`, in a stable order.
    pub fn from_nodes(nodes: impl IntoIterator<Item = (Labels, Vec<Taint>, Node)>) -> Self {
        let mut groups: BTreeMap<(Labels, Vec<Taint>), Vec<Node>> = BTreeMap::new();
        for (labels, mut taints, node) in nodes {
            taints.sort();
            groups.entry((labels, taints)).or_default().push(node);
        }
        let groups = groups
            .into_iter()
            .map(|((labels, taints), nodes)| NodeGroup {
                labels,
                taints,
                nodes,
            })
            .collect();
        CapacityModel { groups, usage: None }
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.groups.iter().map(|g| g.nodes.len()).sum()
    }

    /// How many replicas of `demand` fit once `reservations` have taken their room.
    ///
    /// Per eligible node: min(free cpu / cpu request, free memory / memory request, free pods).
    /// Reserved replicas are laid on their own eligible nodes first-fit in group order; the
    /// scheduler may choose other nodes, but the ledger only bridges the time until the agent
    /// reports real requests, and first-fit never counts the same room twice.
    pub fn room(&self, demand: &Demand, reservations: &[Reservation]) -> Room {
        let free = self.free_after(reservations);
        let fitter = demand.fitter();
        count_room(
            |free: &[Resources]| Tally::of(free, |&free| fitter.fit_in(free)),
            self.groups.iter().zip(&free).map(|(g, free)| {
                (
                    demand.node_match(&g.labels, &g.taints),
                    free.len(),
                    free.as_slice(),
                )
            }),
        )
    }

    /// Utilization counting `reservations` as used.
    pub fn utilization(&self, reservations: &[Reservation]) -> Utilization {
        let mut allocatable = Resources::ZERO;
        let mut requested = Resources::ZERO;
        for node in self.groups.iter().flat_map(|g| &g.nodes) {
            allocatable = allocatable.saturating_add(node.allocatable);
            requested = requested.saturating_add(node.requested);
        }
        let reserved = reservations.iter().fold(Resources::ZERO, |acc, r| {
            acc.saturating_add(r.demand.per_replica().saturating_mul(u64::from(r.replicas)))
        });
        let used = self.usage.unwrap_or(requested).saturating_add(reserved);
        Utilization {
            used,
            allocatable,
            measured: self.usage.is_some(),
        }
    }

    /// How many replicas of `demand` fit in what measured usage leaves of allocatable, once
    /// `reservations` are counted; `None` without measured usage.
    ///
    /// Only CPU and memory count, summed over the cluster: usage is measured per cluster, and
    /// pod slots and per-node fit are already in [`CapacityModel::room`]. A zero request does
    /// not limit.
    pub fn headroom(&self, demand: &Demand, reservations: &[Reservation]) -> Option<u64> {
        self.usage?;
        let u = self.utilization(reservations);
        let left = u.allocatable.saturating_sub(u.used);
        let fit = |free: u64, want: u64| free.checked_div(want).unwrap_or(u64::MAX);
        Some(fit(left.cpu_millis, demand.cpu_millis).min(fit(left.memory_bytes, demand.memory_bytes)))
    }

    fn free_after(&self, reservations: &[Reservation]) -> Vec<Vec<Resources>> {
        let mut free: Vec<Vec<Resources>> = self
            .groups
            .iter()
            .map(|g| g.nodes.iter().map(Node::free).collect())
            .collect();
        for reservation in reservations {
            let mut left = u64::from(reservation.replicas);
            let per = reservation.demand.per_replica();
            let fitter = reservation.demand.fitter();
            for (group, free) in self.groups.iter().zip(free.iter_mut()) {
                if left == 0 {
                    break;
                }
                if !reservation.demand.admits(&group.labels, &group.taints) {
                    continue;
                }
                for room in free.iter_mut() {
                    let take = fitter.fit_in(*room).0.min(left);
                    *room = room.saturating_sub(per.saturating_mul(take));
                    left -= take;
                    if left == 0 {
                        break;
                    }
                }
            }
        }
        free
    }
}

/// What the eligible nodes of one node group hold for a demand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Replicas that fit, summed over the nodes.
    pub(crate) replicas: u64,
    /// Nodes where CPU runs out first.
    pub(crate) cpu_bound: usize,
    /// Nodes where memory runs out first.
    pub(crate) memory_bound: usize,
}

impl Tally {
    /// The tally of `nodes`, with `fit` saying how many replicas fit on a node and what bounds
    /// them.
    #[inline]
    pub(crate) fn of<N>(nodes: &[N], fit: impl Fn(&N) -> (u64, Bound)) -> Tally {
        let mut tally = Tally::default();
        for node in nodes {
            let (fit, bound) = fit(node);
            tally.replicas = tally.replicas.saturating_add(fit);
            // Counted apart rather than in an array indexed by the bound: each node's count
            // would wait on the previous node's store to the same place.
            tally.cpu_bound += usize::from(bound == Bound::Cpu);
            tally.memory_bound += usize::from(bound == Bound::Memory);
        }
        tally
    }
}

/// Room for a demand over node groups, each given as how the pod matches the group, its number
/// of nodes and the group itself, with `tally` counting a group the pod may use.
#[inline]
pub(crate) fn count_room<'a, G>(
    tally: impl Fn(G) -> Tally,
    groups: impl Iterator<Item = (NodeMatch<'a>, usize, G)>,
) -> Room {
    let mut replicas = 0u64;
    let (mut cpu_bound, mut memory_bound) = (0usize, 0usize);
    let mut nodes_eligible = 0;
    let mut nodes_total = 0;
    let mut selected_any = false;
    let mut first_taint: Option<&Taint> = None;
    for (matched, nodes, group) in groups {
        nodes_total += nodes;
        match matched {
            NodeMatch::Selector => continue,
            NodeMatch::Taint(taint) => {
                selected_any |= nodes > 0;
                if first_taint.is_none() && nodes > 0 {
                    first_taint = Some(taint);
                }
                continue;
            }
            NodeMatch::Yes => {}
        }
        nodes_eligible += nodes;
        let counted = tally(group);
        replicas = replicas.saturating_add(counted.replicas);
        cpu_bound += counted.cpu_bound;
        memory_bound += counted.memory_bound;
    }
    let limit = if nodes_eligible > 0 {
        // The resource that bounds the most nodes; on a tie the earlier of cpu, memory, pods.
        let pods_bound = nodes_eligible - cpu_bound - memory_bound;
        if cpu_bound >= memory_bound && cpu_bound >= pods_bound {
            Limit::Cpu
        } else if memory_bound >= pods_bound {
            Limit::Memory
        } else {
            Limit::Pods
        }
    } else if nodes_total == 0 {
        Limit::NoNodes
    } else if let (true, Some(taint)) = (selected_any, first_taint) {
        Limit::Taint(Box::new(taint.clone()))
    } else {
        Limit::NoMatchingNode
    };
    Room {
        replicas,
        limit,
        // Counts of nodes fit 32 bits; a room is moved once per cluster in every decision.
        nodes_eligible: u32::try_from(nodes_eligible).unwrap_or(u32::MAX),
        nodes_total: u32::try_from(nodes_total).unwrap_or(u32::MAX),
    }
}
