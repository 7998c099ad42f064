//! One placement decision over fleets of growing size.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use nave_policies::{
    Capacity, CapacityModel, Cluster, Demand, Fleet, Ledger, Node, NodeGroup, Policy, REGION_LABEL, Request,
    Resources, Strategy, Taint, TaintEffect, Toleration, TolerationOperator, decide,
};

const GIB: u64 = 1 << 30;

/// `clusters` clusters of `nodes` nodes each, in two node groups (general, and tainted spot
/// nodes), with requested amounts that vary from node to node.
fn fleet(clusters: usize, nodes: usize) -> Fleet {
    (0..clusters)
        .map(|c| {
            let node = |n: usize| {
                let used = ((c * 7 + n * 13) % 12) as u64;
                Node::new(
                    Resources::new(16_000, 64 * GIB, 110),
                    Resources::new(used * 1000, used * 4 * GIB, used * 5),
                )
            };
            let general = nodes / 2;
            let mut spot = NodeGroup::new(
                [("node.kubernetes.io/instance-type".to_owned(), "spot".to_owned())].into(),
                (general..nodes).map(node).collect(),
            );
            spot.taints
                .push(Taint::new("spot", "true", TaintEffect::NoSchedule));
            let model = CapacityModel {
                groups: vec![
                    NodeGroup::new(Default::default(), (0..general).map(node).collect()),
                    spot,
                ],
                usage: None,
            };
            let mut cluster = Cluster::new(format!("cluster-{c:05}"), Capacity::Known(model));
            cluster
                .labels
                .insert(REGION_LABEL.to_owned(), ["eu", "us", "ap"][c % 3].to_owned());
            cluster
        })
        .collect()
}

fn request(strategy: Strategy) -> Request {
    let mut demand = Demand::new(500, GIB);
    demand.tolerations.push(Toleration {
        key: "spot".to_owned(),
        operator: TolerationOperator::Exists,
        ..Toleration::default()
    });
    Request::new(
        50,
        demand,
        Policy {
            strategy,
            max_clusters: Some(5),
            ..Policy::default()
        },
    )
}

fn bench_decide(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide");
    let ledger = Ledger::new();
    for (clusters, nodes) in [(10, 10), (100, 10), (1_000, 10), (5_000, 10), (100, 1_000)] {
        let fleet = fleet(clusters, nodes);
        for strategy in [Strategy::WorstFit, Strategy::Spread] {
            let request = request(strategy.clone());
            let id = BenchmarkId::new(strategy.name(), format!("{clusters}x{nodes}"));
            group.bench_with_input(id, &request, |b, request| {
                b.iter(|| decide(black_box(&fleet), &ledger, black_box(request)))
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    targets = bench_decide
}
criterion_main!(benches);
