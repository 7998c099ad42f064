//! The fleet's nodes laid out for decisions.
//!
//! A decision over 1,000 clusters of 10 nodes looks at 10,000 nodes. Read through the clusters
//! themselves, each node is behind three pointers (the cluster, its capacity model, the group's
//! node list) and each group's labels and taints are matched against the pod again, although
//! most groups of a fleet share a handful of node kinds. Here every node's free room is in one
//! array in cluster order, and every distinct (labels, taints) of a node group is kept once, so
//! a decision matches the pod against each kind once and then streams through the array.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use crate::capacity::{Capacity, Room, count_room};
use crate::demand::{Demand, Fitter, NodeMatch};
use crate::fleet::Cluster;
use crate::resources::Resources;
use crate::selector::Labels;
use crate::taints::Taint;

/// Free room of every node, grouped by cluster and node group.
#[derive(Debug, Clone, Default)]
pub(crate) struct Layout {
    /// Names of the clusters in name order, shared with the decisions that name them.
    names: Vec<Arc<str>>,
    /// Per cluster, in name order: its groups in `groups`, or `None` when its capacity is unknown.
    clusters: Vec<Option<Range<usize>>>,
    /// Per node group: its kind in `kinds` and its nodes in `free`.
    groups: Vec<(usize, Range<usize>)>,
    /// Free room (allocatable - requested) of every node.
    free: Vec<Free>,
    /// Each distinct (labels, taints) of the fleet's node groups.
    kinds: Vec<(Labels, Vec<Taint>)>,
}

impl Layout {
    /// The layout of `clusters`, given in name order.
    pub(crate) fn of<'a>(clusters: impl Iterator<Item = &'a Cluster>) -> Self {
        let mut layout = Layout::default();
        let mut kinds: HashMap<(&Labels, &[Taint]), usize> = HashMap::new();
        for cluster in clusters {
            layout.names.push(cluster.name.as_str().into());
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
                layout.free.extend(group.nodes.iter().map(|n| Free::of(n.free())));
                layout.groups.push((kind, start..(layout.free.len())));
            }
            layout.clusters.push(Some(first..(layout.groups.len())));
        }
        layout
    }

    /// Room for `demand` in the `index`-th cluster in name order, with nothing reserved; the same
    /// as [`CapacityModel::room`](crate::CapacityModel::room) with no reservations.
    pub(crate) fn room<'a>(
        &'a self,
        index: usize,
        demand: &Demand,
        prepared: &mut Prepared<'a>,
    ) -> Option<Room> {
        let groups = self.clusters.get(index)?.clone()?;
        let fitter = prepared.fitter;
        let matches = &mut prepared.matches;
        let groups = self.groups[groups].iter().map(|(kind, nodes)| {
            let matched = *matches[*kind].get_or_insert_with(|| {
                let (labels, taints) = &self.kinds[*kind];
                demand.node_match(labels, taints)
            });
            (matched, &self.free[nodes.clone()])
        });
        Some(count_room(
            |n: &Free| fitter.fit_in_with(n.exact, n.cpu, n.memory),
            groups,
        ))
    }

    /// The name of the `index`-th cluster in name order.
    pub(crate) fn name(&self, index: usize) -> Arc<str> {
        self.names[index].clone()
    }

    /// What one decision works out once for the whole fleet.
    pub(crate) fn prepare(&self, demand: &Demand) -> Prepared<'_> {
        Prepared {
            fitter: demand.fitter(),
            matches: vec![None; self.kinds.len()],
        }
    }
}

/// A node's free room, with CPU and memory also as doubles for [`Fitter::fit_in_with`].
#[derive(Debug, Clone, Copy)]
struct Free {
    exact: Resources,
    cpu: f64,
    memory: f64,
}

impl Free {
    fn of(exact: Resources) -> Self {
        Free {
            exact,
            cpu: exact.cpu_millis as f64,
            memory: exact.memory_bytes as f64,
        }
    }
}

/// A demand prepared for one decision: its per-node count, and how it matches each node kind
/// (worked out the first time a kind is met).
#[derive(Debug)]
pub(crate) struct Prepared<'a> {
    fitter: Fitter,
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
