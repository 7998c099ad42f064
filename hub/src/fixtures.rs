//! Builders shared by the hub's unit tests.

use std::sync::Arc;

use nave_api::wire::{ObjectStatus, StatusReport, WorkloadRef};
use nave_policies::{
    Capacity, CapacityModel, Cluster, Demand, Fleet, Node, NodeGroup, Policy, Request, Resources, Strategy,
};

/// Health in which `cluster` failed over at 100 s, after its last heartbeat at 0 s.
pub(crate) fn failed_over(cluster: &str) -> crate::cluster_health::HealthSnapshot {
    crate::cluster_health::HealthSnapshot {
        failed_over: [(
            cluster.to_owned(),
            crate::cluster_health::FailedOver {
                since: at(100),
                last_heartbeat: Some(at(0)),
            },
        )]
        .into(),
        ..Default::default()
    }
}

/// A fixed instant `seconds` after an arbitrary origin.
pub(crate) fn at(seconds: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_700_000_000 + seconds).unwrap()
}

/// A ready cluster with room for `replicas` more replicas of 1 CPU (its running pods are already
/// counted in what the agent reports as requested).
pub(crate) fn cluster(name: &str, replicas: u64) -> Cluster {
    let node = Node::new(
        Resources::new(replicas * 1000, 64 << 30, 110),
        Resources::default(),
    );
    Cluster::new(
        name,
        Capacity::Known(CapacityModel {
            groups: vec![NodeGroup::new(Default::default(), vec![node])],
            usage: None,
        }),
    )
}

/// A fleet of `clusters`.
pub(crate) fn fleet(clusters: Vec<Cluster>) -> Fleet {
    let mut fleet = Fleet::new();
    for c in clusters {
        fleet.insert(c);
    }
    fleet
}

/// `replicas` of 1 CPU under `spread`, steady from `current`.
pub(crate) fn request(replicas: u32, current: &[(&str, u32)]) -> Request {
    let policy = Policy {
        strategy: Strategy::Spread,
        ..Policy::default()
    };
    Request::new(replicas, Demand::new(1000, 0), policy)
        .with_current(current.iter().map(|(c, n)| ((*c).to_owned(), *n)).collect())
}

/// Agents' reports in which `workload`'s Deployment has, per cluster, `ready` ready (and
/// available) replicas and `pending` Pending pods.
pub(crate) fn reports(workload: &WorkloadRef, clusters: &[(&str, i32, u32)]) -> crate::placement::Reports {
    clusters
        .iter()
        .map(|(cluster, ready, pending)| {
            let report = StatusReport {
                objects: vec![ObjectStatus {
                    kind: "Deployment".to_owned(),
                    namespace: Some(workload.namespace.clone()),
                    name: workload.name.clone(),
                    workload: Some(workload.clone()),
                    ready_replicas: Some(*ready),
                    available_replicas: Some(*ready),
                    pending_pods: Some(*pending),
                    ..ObjectStatus::default()
                }],
                ..StatusReport::default()
            };
            ((*cluster).to_owned(), Arc::new(report))
        })
        .collect()
}
