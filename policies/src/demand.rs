//! What one replica of a workload needs from a node.

use crate::capacity::Tally;
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
}

/// Amounts below this are counted in doubles ([`Fitter::doubles`]); 2^50 bytes is a pebibyte.
pub(crate) const WHOLE_IN_DOUBLES: u64 = 1 << 50;

/// How many replicas fit in a node, counted in doubles holding whole numbers below
/// [`WHOLE_IN_DOUBLES`]: no conversion between integers and doubles and no branch per node, so a
/// decision streams through the fleet's nodes several at a time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Doubles {
    cpu: WholeDivisor,
    memory: WholeDivisor,
}

impl Fitter {
    /// This fitter in doubles, when both requests are below [`WHOLE_IN_DOUBLES`].
    pub(crate) fn doubles(&self) -> Option<Doubles> {
        Some(Doubles {
            cpu: WholeDivisor::new(self.cpu.value)?,
            memory: WholeDivisor::new(self.memory.value)?,
        })
    }
}

impl Doubles {
    /// The same as [`Fitter::fit_in`] for nodes whose free amounts are whole numbers below
    /// [`WHOLE_IN_DOUBLES`], given as doubles, and whose pods sum to less than 2^52 (so the sum
    /// of what fits, never more than the pods, is exact).
    #[inline]
    pub(crate) fn tally(&self, cpu: &[f64], memory: &[f64], pods: &[f64]) -> Tally {
        // Four independent sums, so no node waits for the previous node's addition.
        let mut replicas = [0.0f64; 4];
        let mut cpu_bound = [0u64; 4];
        let mut memory_bound = [0u64; 4];
        let n = cpu.len().min(memory.len()).min(pods.len());
        let (cpu, memory, pods) = (&cpu[..n], &memory[..n], &pods[..n]);
        let mut node = |lane: usize, c: f64, m: f64, p: f64| {
            let by_cpu_q = self.cpu.quotient(c);
            let by_memory_q = self.memory.quotient(m);
            // Ties name CPU before memory before pods.
            let by_cpu = by_cpu_q <= by_memory_q.min(p);
            let by_memory = !by_cpu && by_memory_q <= p;
            let fit = if by_cpu {
                by_cpu_q
            } else if by_memory {
                by_memory_q
            } else {
                p
            };
            replicas[lane] += fit;
            cpu_bound[lane] += u64::from(by_cpu);
            memory_bound[lane] += u64::from(by_memory);
        };
        let whole = n - n % 4;
        for i in (0..whole).step_by(4) {
            for lane in 0..4 {
                node(lane, cpu[i + lane], memory[i + lane], pods[i + lane]);
            }
        }
        for i in whole..n {
            node(0, cpu[i], memory[i], pods[i]);
        }
        let replicas: f64 = replicas.iter().sum();
        Tally {
            replicas: replicas as u64,
            cpu_bound: cpu_bound.iter().sum::<u64>() as usize,
            memory_bound: memory_bound.iter().sum::<u64>() as usize,
        }
    }
}

/// A request as a double, with its reciprocal.
#[derive(Debug, Clone, Copy)]
struct WholeDivisor {
    value: f64,
    reciprocal: f64,
}

/// 2^52: adding and then taking it away rounds a double in [0, 2^52) to the nearest whole number.
const ROUNDING: f64 = 4_503_599_627_370_496.0;

impl WholeDivisor {
    fn new(value: u64) -> Option<Self> {
        (value < WHOLE_IN_DOUBLES).then(|| WholeDivisor {
            value: value as f64,
            reciprocal: if value == 0 { 0.0 } else { 1.0 / value as f64 },
        })
    }

    /// `n / value` rounded down, exactly, for a whole `n` below [`WHOLE_IN_DOUBLES`]; infinite
    /// when the request is zero.
    ///
    /// The estimate `n * (1 / value)` is within a quarter of the exact quotient x (two roundings
    /// of 2^-53 each, x below 2^50), so the whole number nearest to it is floor(x) or the one
    /// above; that one is too many exactly when its product with the request, exact in doubles
    /// (below 2^51), exceeds `n`.
    #[inline(always)]
    fn quotient(self, n: f64) -> f64 {
        let estimate = n * self.reciprocal;
        let nearest = (estimate + ROUNDING) - ROUNDING;
        let quotient = if nearest * self.value > n {
            nearest - 1.0
        } else {
            nearest
        };
        // A zero request does not limit.
        if self.value > 0.0 { quotient } else { f64::INFINITY }
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
    /// tolerate; this is the first such taint seen. (Boxed: it is rare, and a room is moved
    /// once per cluster in every decision.)
    Taint(Box<Taint>),
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
