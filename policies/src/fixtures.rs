//! Terse builders for tests: `mk_cluster("eu-1").cpu(8).nodes(3)`, `ask(10).best_fit()`.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{
    Bursting, Capacity, CapacityModel, Cluster, Coordinates, Decision, Demand, Fleet, LabelSelector,
    LabelSelectorOperator, LabelSelectorRequirement, Labels, Ledger, Node, NodeGroup, NodeSelectorOperator,
    NodeSelectorRequirement, Origin, Policy, REGION_LABEL, Request, Resources, Strategy, Taint, ZONE_LABEL,
    decide,
};

pub(crate) const MIB: u64 = 1 << 20;
pub(crate) const GIB: u64 = 1 << 30;

/// A cluster of `nodes` identical nodes (default: one node of 8 cores, 64 GiB, 110 pods, empty).
#[derive(Debug, Clone)]
pub(crate) struct ClusterBuilder {
    cluster: Cluster,
    labels: Labels,
    taints: Vec<Taint>,
    allocatable: Resources,
    requested: Resources,
    nodes: usize,
    extra: Vec<NodeGroup>,
    unknown: bool,
    usage: Option<Resources>,
}

pub(crate) fn mk_cluster(name: &str) -> ClusterBuilder {
    ClusterBuilder {
        cluster: Cluster::new(name, Capacity::Unknown),
        labels: Labels::new(),
        taints: Vec::new(),
        allocatable: Resources::new(8000, 64 * GIB, 110),
        requested: Resources::ZERO,
        nodes: 1,
        extra: Vec::new(),
        unknown: false,
        usage: None,
    }
}

impl ClusterBuilder {
    pub(crate) fn cpu(self, cores: u64) -> Self {
        self.cpu_millis(cores * 1000)
    }
    pub(crate) fn cpu_millis(mut self, millis: u64) -> Self {
        self.allocatable.cpu_millis = millis;
        self
    }
    pub(crate) fn mem_gib(mut self, gib: u64) -> Self {
        self.allocatable.memory_bytes = gib * GIB;
        self
    }
    pub(crate) fn pods(mut self, pods: u64) -> Self {
        self.allocatable.pods = pods;
        self
    }
    pub(crate) fn nodes(mut self, n: usize) -> Self {
        self.nodes = n;
        self
    }
    /// Requested per node, as already-running pods would.
    pub(crate) fn requested(mut self, cpu_millis: u64, mem_gib: u64, pods: u64) -> Self {
        self.requested = Resources::new(cpu_millis, mem_gib * GIB, pods);
        self
    }
    pub(crate) fn usage(mut self, usage: Resources) -> Self {
        self.usage = Some(usage);
        self
    }
    pub(crate) fn node_label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }
    pub(crate) fn node_taint(mut self, taint: Taint) -> Self {
        self.taints.push(taint);
        self
    }
    /// Another group of nodes beside the main one.
    pub(crate) fn group(mut self, group: NodeGroup) -> Self {
        self.extra.push(group);
        self
    }
    pub(crate) fn label(mut self, key: &str, value: &str) -> Self {
        self.cluster.labels.insert(key.to_owned(), value.to_owned());
        self
    }
    pub(crate) fn region(self, region: &str) -> Self {
        self.label(REGION_LABEL, region)
    }
    pub(crate) fn zone(self, zone: &str) -> Self {
        self.label(ZONE_LABEL, zone)
    }
    pub(crate) fn unaccepted(mut self) -> Self {
        self.cluster.unaccepted = true;
        self
    }
    pub(crate) fn cordoned(mut self) -> Self {
        self.cluster.unschedulable = true;
        self
    }
    /// A cluster taint, added `age_secs` ago.
    pub(crate) fn tainted(mut self, taint: Taint, age_secs: u64) -> Self {
        self.cluster.taints.push(crate::ClusterTaint {
            taint,
            age: Duration::from_secs(age_secs),
        });
        self
    }
    pub(crate) fn not_ready(mut self) -> Self {
        self.cluster.ready = false;
        self
    }
    pub(crate) fn burst_only(mut self) -> Self {
        self.cluster.burst_only = true;
        self
    }
    pub(crate) fn unknown_capacity(mut self) -> Self {
        self.unknown = true;
        self
    }
    pub(crate) fn at(mut self, latitude: f64, longitude: f64) -> Self {
        self.cluster.coordinates = Some(Coordinates::new(latitude, longitude));
        self
    }
    pub(crate) fn latency(mut self, to: &str, millis: u64) -> Self {
        self.cluster
            .latencies
            .insert(to.to_owned(), Duration::from_millis(millis));
        self
    }
    /// A trusted network coordinate at `(x, y)` ms in the plane, with a 1 ms height.
    pub(crate) fn network(mut self, x: f64, y: f64) -> Self {
        self.cluster.network = Some(crate::NetworkCoordinate {
            position: [x, y],
            height: 1.0,
            error: 0.0,
            links: crate::network::MIN_LINKS,
        });
        self
    }
    pub(crate) fn build(self) -> Cluster {
        let mut cluster = self.cluster;
        if !self.unknown {
            let node = Node::new(self.allocatable, self.requested);
            let mut groups = vec![NodeGroup {
                labels: self.labels,
                taints: self.taints,
                nodes: vec![node; self.nodes],
            }];
            groups.extend(self.extra);
            cluster.capacity = Capacity::Known(CapacityModel {
                groups,
                usage: self.usage,
            });
        }
        cluster
    }
}

impl From<ClusterBuilder> for Cluster {
    fn from(builder: ClusterBuilder) -> Cluster {
        builder.build()
    }
}

pub(crate) fn fleet(clusters: impl IntoIterator<Item = ClusterBuilder>) -> Fleet {
    clusters.into_iter().map(ClusterBuilder::build).collect()
}

/// `n` nodes of `cores` cores and `gib` GiB with these labels, for [`ClusterBuilder::group`].
pub(crate) fn node_group(labels: &[(&str, &str)], n: usize, cores: u64, gib: u64) -> NodeGroup {
    NodeGroup::new(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        vec![Node::new(Resources::new(cores * 1000, gib * GIB, 110), Resources::ZERO); n],
    )
}

pub(crate) fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

pub(crate) fn node_req(
    key: &str,
    operator: NodeSelectorOperator,
    values: &[&str],
) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_owned(),
        operator,
        values: values.iter().map(|v| (*v).to_owned()).collect(),
    }
}

pub(crate) fn label_req(
    key: &str,
    operator: LabelSelectorOperator,
    values: &[&str],
) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_owned(),
        operator,
        values: values.iter().map(|v| (*v).to_owned()).collect(),
    }
}

/// A request for `replicas` of 1 core and 1 GiB each, worst-fit, placed from scratch.
#[derive(Debug, Clone)]
pub(crate) struct Ask(pub(crate) Request);

pub(crate) fn ask(replicas: u32) -> Ask {
    Ask(Request::new(replicas, Demand::new(1000, GIB), Policy::default()))
}

impl Ask {
    pub(crate) fn demand(mut self, demand: Demand) -> Self {
        self.0.demand = demand;
        self
    }
    pub(crate) fn each(mut self, cpu_millis: u64, memory_mib: u64) -> Self {
        self.0.demand.cpu_millis = cpu_millis;
        self.0.demand.memory_bytes = memory_mib * MIB;
        self
    }
    pub(crate) fn strategy(mut self, strategy: Strategy) -> Self {
        self.0.policy.strategy = strategy;
        self
    }
    pub(crate) fn best_fit(self) -> Self {
        self.strategy(Strategy::BestFit)
    }
    pub(crate) fn spread(self) -> Self {
        self.strategy(Strategy::Spread)
    }
    pub(crate) fn near(self, origin: Origin) -> Self {
        self.strategy(Strategy::Proximity(origin))
    }
    pub(crate) fn max(mut self, n: u32) -> Self {
        self.0.policy.max_clusters = Some(n);
        self
    }
    pub(crate) fn min(mut self, n: u32) -> Self {
        self.0.policy.min_clusters = Some(n);
        self
    }
    pub(crate) fn weights(mut self, weights: &[(&str, u32)]) -> Self {
        self.0.policy.weights = weights.iter().map(|(k, w)| ((*k).to_owned(), *w)).collect();
        self
    }
    pub(crate) fn allow(mut self, names: &[&str]) -> Self {
        self.0.policy.clusters = names.iter().map(|n| (*n).to_owned()).collect();
        self
    }
    pub(crate) fn selector(mut self, selector: LabelSelector) -> Self {
        self.0.policy.cluster_selector = Some(selector);
        self
    }
    pub(crate) fn bursting(mut self, bursting: Bursting) -> Self {
        self.0.policy.bursting = bursting;
        self
    }
    /// A toleration of cluster taints, for `seconds` when given.
    pub(crate) fn tolerate(mut self, toleration: crate::Toleration, seconds: Option<u64>) -> Self {
        self.0.policy.tolerations.push(crate::ClusterToleration {
            toleration,
            seconds: seconds.map(Duration::from_secs),
        });
        self
    }
    pub(crate) fn current(mut self, current: &[(&str, u32)]) -> Self {
        self.0.current = to_map(current);
        self
    }
    pub(crate) fn ordinals(mut self, order: &[&str]) -> Self {
        self.0.ordinal_order = order.iter().map(|c| (*c).to_owned()).collect();
        self
    }

    pub(crate) fn evacuate(mut self, cluster: &str, replicas: u32) -> Self {
        self.0.evacuate.insert(cluster.to_owned(), replicas);
        self
    }
    pub(crate) fn on(&self, fleet: &Fleet) -> Decision {
        decide(fleet, &Ledger::new(), &self.0)
    }
}

pub(crate) fn to_map(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
    pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
}
