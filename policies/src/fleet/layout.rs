//! The fleet's nodes laid out for decisions.
//!
//! A decision over 1,000 clusters of 10 nodes looks at 10,000 nodes. Read through the clusters
//! themselves, each node is behind three pointers (the cluster, its capacity model, the group's
//! node list) and each group's labels and taints are matched against the pod again, although
//! most groups of a fleet share a handful of node kinds. Here every node's free room is in one
//! array per resource in cluster order, as doubles (whole numbers, counted exactly without a
//! conversion or a branch per node), and every distinct (labels, taints) of a node group is
//! kept once, so a decision matches the pod against each kind once and then streams through
//! the arrays.

use std::collections::HashMap;
use std::ops::Range;

use crate::capacity::{Capacity, Room, Tally, count_room};
use crate::demand::{Demand, Doubles, Fitter, NodeMatch, WHOLE_IN_DOUBLES};
use crate::fleet::Cluster;
use crate::name::ClusterName;
use crate::resources::Resources;
use crate::selector::Labels;
use crate::taints::Taint;

/// Free room of every node, grouped by cluster and node group.
#[derive(Debug, Clone, Default)]
pub(crate) struct Layout {
    /// Names of the clusters in name order.
    names: Vec<ClusterName>,
    /// Per cluster, in name order: its groups in `groups`, or `None` when its capacity is unknown.
    clusters: Vec<Option<Range<usize>>>,
    /// Per node group: its kind in `kinds`, its nodes, and whether they can be counted in doubles.
    groups: Vec<Group>,
    /// Free room (allocatable - requested) of every node.
    free: Vec<Resources>,
    /// The same as doubles, one array per resource, so a decision streams through each.
    cpu: Vec<f64>,
    memory: Vec<f64>,
    pods: Vec<f64>,
    /// Each distinct (labels, taints) of the fleet's node groups.
    kinds: Vec<(Labels, Vec<Taint>)>,
}

#[derive(Debug, Clone)]
struct Group {
    kind: usize,
    nodes: Range<usize>,
    /// Every amount is a whole number below [`WHOLE_IN_DOUBLES`] and the pods sum to less than
    /// 2^52, so [`Doubles::tally`] counts the group exactly.
    in_doubles: bool,
}

impl Layout {
    /// The layout of `clusters`, given in name order.
    pub(crate) fn of<'a>(clusters: impl Iterator<Item = &'a Cluster>) -> Self {
        let mut layout = Layout::default();
        let mut kinds: HashMap<(&Labels, &[Taint]), usize> = HashMap::new();
        for cluster in clusters {
            layout.names.push(ClusterName::of_fleet(&cluster.name));
            let Capacity::Known(model) = &cluster.capacity else {
                layout.clusters.push(None);
                continue;
            };
            let first = layout.groups.len();
            for group in &model.groups {
                let next = layout.kinds.len();
                let kind = *kinds
                    .entry((&group.labels, group.taints.as_slice()))
                    .or_insert_with(|| {
                        layout.kinds.push((group.labels.clone(), group.taints.clone()));
                        next
                    });
                let start = layout.free.len();
                let mut pods = 0u64;
                let mut in_doubles = true;
                for node in &group.nodes {
                    let free = node.free();
                    in_doubles &= free.cpu_millis < WHOLE_IN_DOUBLES
                        && free.memory_bytes < WHOLE_IN_DOUBLES
                        && free.pods < WHOLE_IN_DOUBLES;
                    pods = pods.saturating_add(free.pods);
                    layout.free.push(free);
                    layout.cpu.push(free.cpu_millis as f64);
                    layout.memory.push(free.memory_bytes as f64);
                    layout.pods.push(free.pods as f64);
                }
                layout.groups.push(Group {
                    kind,
                    nodes: start..layout.free.len(),
                    in_doubles: in_doubles && pods < 1 << 52,
                });
            }
            layout.clusters.push(Some(first..(layout.groups.len())));
        }
        layout
    }

    /// Room for `demand` in the `index`-th cluster in name order, with nothing reserved; the same
    /// as [`CapacityModel::room`](crate::CapacityModel::room) with no reservations.
    #[inline]
    pub(crate) fn room<'a>(
        &'a self,
        index: usize,
        demand: &Demand,
        prepared: &mut Prepared<'a>,
    ) -> Option<Room> {
        let groups = self.clusters.get(index)?.clone()?;
        let (fitter, doubles) = (&prepared.fitter, &prepared.doubles);
        let matches = &mut prepared.matches;
        let mut groups = self.groups[groups]
            .iter()
            .map(|group| {
                let matched = *matches[group.kind].get_or_insert_with(|| {
                    let (labels, taints) = &self.kinds[group.kind];
                    demand.node_match(labels, taints)
                });
                let in_doubles = doubles.is_some() && group.in_doubles;
                (matched, group.nodes.clone(), in_doubles)
            })
            .peekable();
        // A cluster's groups that the pod may use and that are counted in doubles are counted
        // as one run of nodes (a cluster's nodes are laid out one after the other).
        let runs = std::iter::from_fn(move || {
            let (matched, mut nodes, in_doubles) = groups.next()?;
            if matched == NodeMatch::Yes && in_doubles {
                while let Some((NodeMatch::Yes, next, true)) = groups.peek()
                    && next.start == nodes.end
                {
                    nodes.end = next.end;
                    groups.next();
                }
            }
            Some((matched, nodes.len(), (nodes, in_doubles)))
        });
        Some(count_room(
            |(nodes, in_doubles): (Range<usize>, bool)| match doubles {
                // Matched by reference: a copy of the prepared demand per run, read back at
                // once, waited for its own stores.
                Some(doubles) if in_doubles => doubles.tally(
                    &self.cpu[nodes.clone()],
                    &self.memory[nodes.clone()],
                    &self.pods[nodes],
                ),
                _ => Tally::of(&self.free[nodes], |&free| fitter.fit_in(free)),
            },
            runs,
        ))
    }

    /// The name of the `index`-th cluster in name order.
    pub(crate) fn name(&self, index: usize) -> ClusterName {
        self.names[index].clone()
    }

    /// What one decision works out once for the whole fleet.
    pub(crate) fn prepare(&self, demand: &Demand) -> Prepared<'_> {
        let fitter = demand.fitter();
        Prepared {
            fitter,
            doubles: fitter.doubles(),
            matches: vec![None; self.kinds.len()],
        }
    }
}

/// A demand prepared for one decision: its per-node count, and how it matches each node kind
/// (worked out the first time a kind is met).
#[derive(Debug)]
pub(crate) struct Prepared<'a> {
    fitter: Fitter,
    doubles: Option<Doubles>,
    matches: Vec<Option<NodeMatch<'a>>>,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::capacity::{CapacityModel, Node, NodeGroup};
    use crate::taints::{TaintEffect, Toleration, TolerationOperator};
    use crate::{Capacity, Cluster, Demand, Fleet, Resources, Taint};

    fn node() -> impl Strategy<Value = Node> {
        let amount = prop_oneof![0u64..64_000, Just(0u64), any::<u64>()];
        let memory = prop_oneof![0u64..(256 << 30), (0u64..64).prop_map(|g| g << 30), any::<u64>()];
        (
            amount.clone(),
            memory.clone(),
            0u64..120,
            amount,
            memory,
            0u64..120,
        )
            .prop_map(|(c, m, p, rc, rm, rp)| Node::new(Resources::new(c, m, p), Resources::new(rc, rm, rp)))
    }

    fn group() -> impl Strategy<Value = NodeGroup> {
        (
            prop::sample::select(vec!["", "gpu", "spot"]),
            prop::bool::ANY,
            prop::collection::vec(node(), 0..6),
        )
            .prop_map(|(kind, tainted, nodes)| {
                let labels = match kind {
                    "" => Default::default(),
                    k => [("pool".to_owned(), k.to_owned())].into(),
                };
                let mut group = NodeGroup::new(labels, nodes);
                if tainted {
                    group
                        .taints
                        .push(Taint::new("dedicated", kind, TaintEffect::NoSchedule));
                }
                group
            })
    }

    fn cluster(name: usize) -> impl Strategy<Value = Cluster> {
        prop::option::of(prop::collection::vec(group(), 0..4)).prop_map(move |groups| {
            let capacity = match groups {
                None => Capacity::Unknown,
                Some(groups) => Capacity::Known(CapacityModel { groups, usage: None }),
            };
            Cluster::new(format!("c-{name:02}"), capacity)
        })
    }

    fn demand() -> impl Strategy<Value = Demand> {
        (
            prop_oneof![Just(0u64), 1u64..4_000, any::<u64>()],
            prop_oneof![
                Just(0u64),
                (1u64..8).prop_map(|g| g << 30),
                1u64..(8 << 30),
                any::<u64>()
            ],
            prop::option::of(prop::sample::select(vec!["gpu", "spot"])),
            prop::bool::ANY,
        )
            .prop_map(|(cpu, memory, pool, tolerates)| {
                let mut demand = Demand::new(cpu, memory);
                if let Some(pool) = pool {
                    demand.node_selector = [("pool".to_owned(), pool.to_owned())].into();
                }
                if tolerates {
                    demand.tolerations.push(Toleration {
                        key: "dedicated".to_owned(),
                        operator: TolerationOperator::Exists,
                        ..Toleration::default()
                    });
                }
                demand
            })
    }

    fn fleet() -> impl Strategy<Value = Fleet> {
        (1usize..8).prop_flat_map(|n| (0..n).map(cluster).collect::<Vec<_>>().prop_map(Fleet::from_iter))
    }

    proptest! {
        #[test]
        fn room_from_the_layout_is_the_room_from_the_model(fleet in fleet(), demand in demand()) {
            let layout = fleet.layout();
            let mut prepared = layout.prepare(&demand);
            for (i, cluster) in fleet.iter().enumerate() {
                let laid_out = layout.room(i, &demand, &mut prepared);
                let from_model = match &cluster.capacity {
                    Capacity::Known(model) => Some(model.room(&demand, &[])),
                    Capacity::Unknown => None,
                };
                prop_assert_eq!(laid_out, from_model, "cluster {}", cluster.name);
            }
        }
    }

    #[test]
    fn a_changed_fleet_is_laid_out_again() {
        let model = |cores: u64| {
            Capacity::Known(CapacityModel {
                groups: vec![NodeGroup::new(
                    Default::default(),
                    vec![Node::new(
                        Resources::new(cores * 1000, 1 << 40, 110),
                        Resources::ZERO,
                    )],
                )],
                usage: None,
            })
        };
        let mut fleet: Fleet = [Cluster::new("a", model(4))].into_iter().collect();
        let demand = Demand::new(1000, 0);
        let room = |fleet: &Fleet| {
            let layout = fleet.layout();
            layout
                .room(0, &demand, &mut layout.prepare(&demand))
                .map(|r| r.replicas)
        };
        assert_eq!(room(&fleet), Some(4));
        fleet.insert(Cluster::new("a", model(8)));
        assert_eq!(room(&fleet), Some(8), "the layout must follow a replaced cluster");
    }
}
