//! One placement decision over fleets of growing size, and one fit of network coordinates to the
//! round trips of fleets of growing size.
//!
//! Decisions are measured twice: wall-clock time (`decide`), and the benchmark thread's own CPU
//! time (`decide-cpu`, `CLOCK_THREAD_CPUTIME_ID`), which stays meaningful when other work shares
//! the machine's cores. Fits are measured in CPU time only (`network-fit-cpu`): from nothing
//! (`cold`, the hub's first fit) and from the previous fit after one round trip changed (`warm`,
//! every later one).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BenchmarkId, Criterion, criterion_group};
use nave_policies::network::{Sample, fit};
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

/// Room given away and not yet reported, as a burst of one-replica workloads leaves it (the
/// replicas of the last second or so): one replica of a workload of its own reserved in every
/// fiftieth cluster.
fn busy_ledger(clusters: usize) -> Ledger {
    let mut ledger = Ledger::new();
    for c in (0..clusters).step_by(50) {
        ledger.reserve(
            &format!("cluster-{c:05}"),
            &format!("burst/w-{c}"),
            &Demand::new(10, 16 << 20),
            1,
        );
    }
    ledger
}

fn bench_decide<M: Measurement>(c: &mut Criterion<M>, name: &str) {
    let mut group = c.benchmark_group(name);
    let empty = Ledger::new();
    for (clusters, nodes) in [(10, 10), (100, 10), (1_000, 10), (5_000, 10), (100, 1_000)] {
        let fleet = fleet(clusters, nodes);
        for strategy in [Strategy::WorstFit, Strategy::Spread] {
            let request = request(strategy.clone());
            let id = BenchmarkId::new(strategy.name(), format!("{clusters}x{nodes}"));
            group.bench_with_input(id, &request, |b, request| {
                b.iter(|| decide(black_box(&fleet), &empty, black_box(request)))
            });
        }
        // The hub decides while earlier decisions' replicas are still on their way.
        if nodes == 10 && clusters >= 1_000 {
            let ledger = busy_ledger(clusters);
            let request = request(Strategy::WorstFit);
            let id = BenchmarkId::new("worst-fit, busy ledger", format!("{clusters}x{nodes}"));
            group.bench_with_input(id, &request, |b, request| {
                b.iter(|| decide(black_box(&fleet), &ledger, black_box(request)))
            });
        }
    }
    group.finish();
}

/// Round trips of `nodes` nodes scattered over a 200 x 200 ms plane with access links of 1-5 ms,
/// each measuring its 16 next nodes by index (as the hub rotates peers), plus the hub.
fn samples(nodes: usize) -> Vec<Sample> {
    let place = |i: usize| {
        let x = (i * 7919 % 200) as f64;
        let y = (i * 104_729 % 200) as f64;
        let height = 1.0 + (i % 5) as f64;
        (x, y, height)
    };
    let rtt = |a: usize, b: usize| {
        let ((ax, ay, ah), (bx, by, bh)) = (place(a), place(b));
        ((ax - bx).powi(2) + (ay - by).powi(2)).sqrt() + ah + bh
    };
    let name = |i: usize| format!("cluster-{i}");
    let mut out = Vec::new();
    for a in 0..nodes {
        for step in 1..=16.min(nodes.saturating_sub(1)) {
            let b = (a + step) % nodes;
            out.push(Sample {
                a: name(a),
                b: name(b),
                rtt: Duration::from_secs_f64(rtt(a, b) / 1000.0),
            });
        }
        out.push(Sample {
            a: name(a),
            b: "(hub)".to_owned(),
            rtt: Duration::from_secs_f64(rtt(a, nodes) / 1000.0),
        });
    }
    out
}

fn bench_fit<M: Measurement>(c: &mut Criterion<M>) {
    let mut group = c.benchmark_group("network-fit-cpu");
    for nodes in [10, 100, 1_000] {
        let samples = samples(nodes);
        let cold = fit(&samples, &BTreeMap::new());
        let mut changed = samples.clone();
        changed[0].rtt += Duration::from_millis(20);
        group.bench_with_input(BenchmarkId::new("cold", nodes), &samples, |b, samples| {
            b.iter(|| fit(black_box(samples), &BTreeMap::new()))
        });
        group.bench_with_input(BenchmarkId::new("warm", nodes), &changed, |b, changed| {
            b.iter(|| fit(black_box(changed), &cold))
        });
    }
    group.finish();
}

/// CPU time of the calling thread, in nanoseconds.
#[derive(Debug)]
struct ThreadCpuTime;

fn thread_cpu_nanos() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_nanos()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_nanos().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // Values are nanoseconds, like wall time's, so its formatter fits.
        static NANOS: WallTime = WallTime;
        NANOS.formatter()
    }
}

fn config<M: Measurement>(measurement: M) -> Criterion<M> {
    Criterion::default()
        .with_measurement(measurement)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

fn wall(c: &mut Criterion<WallTime>) {
    bench_decide(c, "decide");
}

fn cpu(c: &mut Criterion<ThreadCpuTime>) {
    bench_decide(c, "decide-cpu");
    bench_fit(c);
}

criterion_group! {
    name = wall_clock;
    config = config(WallTime);
    targets = wall
}

criterion_group! {
    name = cpu_time;
    config = config(ThreadCpuTime);
    targets = cpu
}

fn main() {
    wall_clock();
    cpu_time();
    Criterion::default().configure_from_args().final_summary();
}
