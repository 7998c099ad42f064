//! What one replica of a workload needs from a node.

use crate::resources::Resources;
use crate::selector::{Labels, NodeSelector};
use crate::taints::{Taint, Toleration, blocking_taint};

/// The per-replica demand of a workload: resources and the constraints on its nodes.
///
/// The caller computes the pod's effective requests (containers summed, the largest init
/// container, pod overhead) the way the scheduler does; the engine takes the totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Demand {
    /// CPU request per replica in millicores; zero means CPU does not limit the count.
    pub cpu_millis: u64,
    /// Memory request per replica in bytes; zero means memory does not limit the count.
    pub memory_bytes: u64,
    /// The pod's `nodeSelector`: every pair must be a label of the node.
    pub node_selector: Labels,
    /// The pod's required node affinity, if any.
    pub node_affinity: Option<NodeSelector>,
    /// The pod's tolerations.
    pub tolerations: Vec<Toleration>,
}

/// Why a node can or cannot take a replica, before counting resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeMatch<'a> {
    /// The node's labels and taints admit the pod.
    Yes,
    /// `nodeSelector` or required node affinity rules the node out.
    Selector,
    /// A blocking taint is not tolerated.
    Taint(&'a Taint),
}

impl Demand {
    /// A demand of `cpu_millis` and `memory_bytes` per replica, with no node constraints.
    pub fn new(cpu_millis: u64, memory_bytes: u64) -> Self {
        Demand {
            cpu_millis,
            memory_bytes,
            ..Demand::default()
        }
    }

    /// The resources one replica takes on a node: its requests and one pod slot.
    pub fn per_replica(&self) -> Resources {
        Resources::new(self.cpu_millis, self.memory_bytes, 1)
    }

    /// Whether a node with these `labels` and `taints` admits the pod at all.
    pub fn admits(&self, labels: &Labels, taints: &[Taint]) -> bool {
        self.node_match(labels, taints) == NodeMatch::Yes
    }

    pub(crate) fn node_match<'a>(&self, labels: &Labels, taints: &'a [Taint]) -> NodeMatch<'a> {
        let selected = self.node_selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.node_affinity.as_ref().is_none_or(|a| a.matches(labels));
        if !selected {
            return NodeMatch::Selector;
        }
        match blocking_taint(taints, &self.tolerations) {
            Some(taint) => NodeMatch::Taint(taint),
            None => NodeMatch::Yes,
        }
    }

    /// How many replicas fit in `free` room, and which resource runs out first.
    ///
    /// Ties name CPU before memory before pods, so the reported bound is stable. Called once per
    /// node per decision, so a multiplication rules a resource out before any division is paid.
    pub(crate) fn fit_in(&self, free: Resources) -> (u64, Bound) {
        let mut best = (free.pods, Bound::Pods);
        for (free, want, bound) in [
            (free.memory_bytes, self.memory_bytes, Bound::Memory),
            (free.cpu_millis, self.cpu_millis, Bound::Cpu),
        ] {
            // Divide only when the fit could be at most the best so far: free < want * (best + 1).
            // Ties go to the resource checked later (cpu, then memory), hence `<=` below.
            if want != 0 && u128::from(want) * (u128::from(best.0) + 1) > u128::from(free) {
                let fit = free / want;
                if fit <= best.0 {
                    best = (fit, bound);
                }
            }
        }
        best
    }
}

/// The resource that runs out first on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    Cpu,
    Memory,
    Pods,
}

/// What limits how many replicas of a demand fit in a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Limit {
    /// CPU runs out first on most eligible nodes.
    Cpu,
    /// Memory runs out first on most eligible nodes.
    Memory,
    /// Pod slots run out first on most eligible nodes.
    Pods,
    /// The cluster reports no nodes.
    NoNodes,
    /// No node satisfies the `nodeSelector` and required node affinity.
    NoMatchingNode,
    /// Nodes match the selector, but every one carries a blocking taint the pod does not
    /// tolerate; this is the first such taint seen.
    Taint(Taint),
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::Cpu => f.write_str("cpu-bound"),
            Limit::Memory => f.write_str("memory-bound"),
            Limit::Pods => f.write_str("pods-bound"),
            Limit::NoNodes => f.write_str("no nodes"),
            Limit::NoMatchingNode => f.write_str("no node matches nodeSelector/affinity"),
            Limit::Taint(t) => write!(f, "taint {t} not tolerated"),
        }
    }
}
