//! Fleet scale figures for BENCHMARKS.md: `cargo bench -p nave-e2e --bench scale`.
//!
//! The hub and one agent per cluster run as processes of their own (this binary run again as
//! `role hub|agent`), over simulated clusters in this process; the hub on SQLite, as the default
//! install. For each size `clusters x mcds` (`NAVE_SCALE`, default `20x500,100x2000`), every
//! one-replica MultiClusterDeployment is created at once and the run waits until each is
//! Available. It prints:
//!
//! - MCDs per second: MCDs over the time from the first create to the last Available;
//! - the hub's CPU (user + system, from `/proc`) per MCD, every agent's together, and the
//!   simulator's (this process: the API servers, schedulers and kubelets of every cluster, and
//!   the benchmark itself);
//! - apply -> Available per MCD (from its create to the first status that says Available, as a
//!   watch sees it): p50 and p99. Every MCD is created at once, so when they are created faster
//!   than the hub places them these include the wait in that queue: they describe the burst,
//!   not one MCD's path (the e2e benchmark measures that, hop by hop);
//! - the hub's and the largest agent's resident memory at the end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use nave_api::MultiClusterDeployment;
use nave_api::conditions::{self, types};
use nave_e2e::procs::{FleetOptions, ProcessFleet, Store, cpu_seconds, memory_mib};
use nave_sim::config::{ClusterConfig, FleetConfig, NodePool};
use nave_testkit::Mcd;

#[global_allocator]
static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;

fn main() -> anyhow::Result<()> {
    if let Some(result) = nave_e2e::procs::child_role() {
        return result;
    }
    nave_sim::install_crypto_provider();
    let sizes = std::env::var("NAVE_SCALE").unwrap_or_else(|_| "20x500,100x2000".to_owned());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    println!(
        "| clusters | MCDs | MCDs per second | hub CPU per MCD | agents' CPU per MCD | simulator CPU per MCD | apply -> Available p50 | p99 | hub RSS | largest agent RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for size in sizes.split(',').filter(|s| !s.is_empty()) {
        let (clusters, mcds) = size
            .split_once('x')
            .and_then(|(c, m)| Some((c.trim().parse().ok()?, m.trim().parse().ok()?)))
            .ok_or_else(|| anyhow::anyhow!("NAVE_SCALE takes sizes such as 20x500, not {size:?}"))?;
        runtime.block_on(run(clusters, mcds))?;
    }
    Ok(())
}

fn fleet(clusters: usize) -> FleetConfig {
    FleetConfig {
        clusters: (0..clusters)
            .map(|i| ClusterConfig {
                name: format!("c{i:04}"),
                node_pools: vec![NodePool {
                    name: "general".to_owned(),
                    count: 4,
                    cpu: "32".to_owned(),
                    memory: "128Gi".to_owned(),
                    pods: 250,
                    ..NodePool::default()
                }],
                ..ClusterConfig::default()
            })
            .collect(),
        ..FleetConfig::default()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn run(clusters: usize, mcds: usize) -> anyhow::Result<()> {
    let mut fleet = ProcessFleet::start(FleetOptions {
        hubs: 1,
        store: Store::Sqlite,
        lease: None,
        fleet: fleet(clusters),
    })
    .await?;
    let hub_pid = fleet.hub(0).expect("the hub runs").pid();
    let api: Api<MultiClusterDeployment> = Api::namespaced(fleet.client.clone(), "default");

    // When each MCD was created, and when a status first said it was Available.
    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let available: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    // How many are Available, for the wait below.
    let (count_tx, mut count) = tokio::sync::watch::channel(0_usize);
    let watching = {
        let available = available.clone();
        let api = api.clone();
        tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                let (Ok(watcher::Event::Apply(mcd)) | Ok(watcher::Event::InitApply(mcd))) = event else {
                    continue;
                };
                let is_available = mcd.status.as_ref().is_some_and(|s| {
                    s.ready_replicas >= 1 && conditions::is_true(&s.conditions, types::AVAILABLE)
                });
                if is_available {
                    let now = Instant::now();
                    let mut available = available.lock().unwrap();
                    available
                        .entry(mcd.metadata.name.clone().unwrap_or_default())
                        .or_insert(now);
                    count_tx.send_replace(available.len());
                }
            }
        })
    };

    let agent_pids: Vec<String> = fleet
        .agents
        .values()
        .flatten()
        .map(|a| a.pid().to_string())
        .collect();
    let agents_cpu = || -> anyhow::Result<f64> { agent_pids.iter().map(|pid| cpu_seconds(pid)).sum() };
    let hub_cpu = cpu_seconds(&hub_pid.to_string())?;
    let agent_cpu = agents_cpu()?;
    let sim_cpu = cpu_seconds("self")?;
    let start = Instant::now();
    for i in 0..mcds {
        let name = format!("w{i:06}");
        let object = Mcd::new(&name)
            .replicas(1)
            .policy("worst-fit")
            .cpu("10m")
            .memory("16Mi")
            .build();
        created.lock().unwrap().insert(name, Instant::now());
        api.create(&PostParams::default(), &object).await?;
    }
    let deadline = Duration::from_secs(3600);
    if tokio::time::timeout(deadline, count.wait_for(|done| *done >= mcds))
        .await
        .is_err()
    {
        let done = *count.borrow();
        anyhow::bail!("{done} of {mcds} Available after an hour");
    }
    let last = available
        .lock()
        .unwrap()
        .values()
        .max()
        .copied()
        .unwrap_or_else(Instant::now);
    let took = last.duration_since(start);
    let hub_cpu = cpu_seconds(&hub_pid.to_string())? - hub_cpu;
    let agent_cpu = agents_cpu()? - agent_cpu;
    let sim_cpu = cpu_seconds("self")? - sim_cpu;
    watching.abort();
    let mut latencies: Vec<Duration> = {
        let created = created.lock().unwrap();
        available
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(name, at)| created.get(name).map(|c| at.saturating_duration_since(*c)))
            .collect()
    };
    latencies.sort();
    let hub_rss = memory_mib(hub_pid).0;
    let agent_rss = fleet
        .agents
        .values()
        .flatten()
        .map(|a| memory_mib(a.pid()).0)
        .fold(0.0_f64, f64::max);
    println!(
        "| {clusters} | {mcds} | {:.1} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} s | {:.2} s | {:.0} MiB | {:.0} MiB |",
        mcds as f64 / took.as_secs_f64(),
        hub_cpu * 1000.0 / mcds as f64,
        agent_cpu * 1000.0 / mcds as f64,
        sim_cpu * 1000.0 / mcds as f64,
        percentile(&latencies, 50.0).as_secs_f64(),
        percentile(&latencies, 99.0).as_secs_f64(),
        hub_rss,
        agent_rss
    );
    if std::env::var_os("NAVE_SCALE_HOLD").is_some() {
        // For a profiler attached to the hub: keep everything up until killed.
        eprintln!("holding; the hub's pid is {hub_pid}");
        std::future::pending::<()>().await;
    }
    fleet.stop().await;
    Ok(())
}
