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
    /// Ties name CPU before memory before pods, so the reported bound is stable.
    #[cfg(test)]
    pub(crate) fn fit_in(&self, free: Resources) -> (u64, Bound) {
        self.fitter().fit_in(free)
    }

    /// The per-node count of this demand, prepared once for the many nodes of a decision.
    pub(crate) fn fitter(&self) -> Fitter {
        Fitter {
            cpu: Divisor::new(self.cpu_millis),
            memory: Divisor::new(self.memory_bytes),
        }
    }
}

/// How many replicas of a demand fit in a node's free room, prepared once per decision: each
/// request is kept with its reciprocal, so a node costs two multiplications instead of two
/// divisions (a division is most of the cost of a node, and a decision over 1,000 clusters
/// looks at 10,000 nodes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fitter {
    cpu: Divisor,
    memory: Divisor,
}

impl Fitter {
    /// The same as [`Demand::fit_in`]; ties name CPU before memory before pods.
    #[inline]
    pub(crate) fn fit_in(&self, free: Resources) -> (u64, Bound) {
        let mut best = (free.pods, Bound::Pods);
        let memory = self.memory.quotient(free.memory_bytes);
        if memory <= best.0 {
            best = (memory, Bound::Memory);
        }
        let cpu = self.cpu.quotient(free.cpu_millis);
        if cpu <= best.0 {
            best = (cpu, Bound::Cpu);
        }
        best
    }
}

impl Fitter {
    /// The same as [`Fitter::fit_in`] for a node whose free CPU and memory are also given as
    /// doubles (converted once, when the fleet was laid out).
    #[inline]
    pub(crate) fn fit_in_with(&self, free: Resources, cpu: f64, memory: f64) -> (u64, Bound) {
        let mut best = (free.pods, Bound::Pods);
        let memory = self.memory.quotient_with(free.memory_bytes, memory);
        if memory <= best.0 {
            best = (memory, Bound::Memory);
        }
        let cpu = self.cpu.quotient_with(free.cpu_millis, cpu);
        if cpu <= best.0 {
            best = (cpu, Bound::Cpu);
        }
        best
    }
}

/// A divisor with its reciprocal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Divisor {
    value: u64,
    reciprocal: f64,
}

impl Divisor {
    pub(crate) fn new(value: u64) -> Self {
        let reciprocal = if value == 0 { 0.0 } else { 1.0 / value as f64 };
        Divisor { value, reciprocal }
    }

    /// `n / value` rounded down, exactly; `u64::MAX` when the divisor is zero (a zero request
    /// does not limit).
    ///
    /// The estimate `n * (1 / value)` in doubles is off by less than one while the quotient is
    /// below 2^50 (three roundings of 2^-53 each), so one step up or down corrects it; a larger
    /// quotient is divided exactly.
    #[inline]
    pub(crate) fn quotient(self, n: u64) -> u64 {
        if self.value == 0 {
            return u64::MAX;
        }
        let estimate = (n as f64 * self.reciprocal) as u64;
        if estimate >= 1 << 50 {
            return n / self.value;
        }
        let product = u128::from(estimate) * u128::from(self.value);
        if product > u128::from(n) {
            estimate - 1
        } else if product + u128::from(self.value) <= u128::from(n) {
            estimate + 1
        } else {
            estimate
        }
    }

    /// [`Divisor::quotient`] of `n`, given also as the double `n_f64`, with one multiplication
    /// of doubles and at most one of integers.
    ///
    /// Below 2^32 the estimate `n_f64 * (1 / value)` is within 2^-19 of the exact quotient, so
    /// its whole part is the answer unless the estimate is within 10^-5 of a whole number; then
    /// the answer is that whole number or the one below, and one multiplication says which.
    #[inline]
    pub(crate) fn quotient_with(self, n: u64, n_f64: f64) -> u64 {
        if self.value == 0 {
            return u64::MAX;
        }
        let estimate = n_f64 * self.reciprocal;
        if estimate >= 4_294_967_296.0 {
            return self.quotient(n);
        }
        // Through i64, which converts in one instruction each way; the estimate is below 2^32.
        let whole = estimate as i64;
        let fraction = estimate - whole as f64;
        let whole = whole as u64;
        let candidate = if fraction <= 1e-5 {
            whole
        } else if fraction >= 1.0 - 1e-5 {
            whole + 1
        } else {
            return whole;
        };
        match candidate.checked_mul(self.value) {
            Some(product) if product <= n => candidate,
            _ => candidate - 1,
        }
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
