//! Hub failover figures for BENCHMARKS.md: `cargo bench -p nave-e2e --bench failover`, with
//! Postgres at `NAVE_TEST_DATABASE_URL`. Hubs and agents run as processes of their own (this
//! binary run again as `role hub|agent`) over simulated clusters, as in `tests/chaos.rs`.
//!
//! 1. **Takeover.** Three replicas on Postgres with the chart's timings (8 s lease, 5 s renew
//!    deadline, 1 s retry period). `NAVE_BENCH_KILLS` times (10): the leader is killed
//!    (SIGKILL), an MCD is created at once, and the time until its status says `Scheduled`
//!    (the next placement decision) is taken. Then the same with SIGTERM (a clean stop, which
//!    releases the Lease).
//! 2. **Throughput.** 300 one-replica MCDs created at once, time until every one is Available:
//!    without faults, then with the leader SIGKILLed every 5 s.
//! 3. **One hub on SQLite.** SIGKILL, started again at once, an MCD created: the time until it
//!    is `Scheduled`, from the kill.

use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nave_api::MultiClusterDeployment;
use nave_api::conditions::{self, types};
use nave_e2e::procs::{FleetOptions, ProcessFleet, Store};
use nave_sim::config::{ClusterConfig, FleetConfig, NodePool};
use nave_testkit::Mcd;

/// The chart's election timings: lease duration, renew deadline, retry period.
const CHART_LEASE: [Duration; 3] = [
    Duration::from_secs(8),
    Duration::from_secs(5),
    Duration::from_secs(1),
];

#[global_allocator]
static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;

fn main() -> anyhow::Result<()> {
    if let Some(result) = nave_e2e::procs::child_role() {
        return result;
    }
    nave_sim::install_crypto_provider();
    let Some(url) = std::env::var(nave_e2e::PG_URL_VAR).ok().filter(|u| !u.is_empty()) else {
        anyhow::bail!("set {} to a Postgres database", nave_e2e::PG_URL_VAR);
    };
    let kills: usize = std::env::var("NAVE_BENCH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        takeover(&url, kills).await?;
        throughput(&url).await?;
        sqlite(kills).await
    })
}

fn fleet() -> FleetConfig {
    let clusters = ["eu-west-1", "us-east-1", "ap-south-1"]
        .iter()
        .map(|name| ClusterConfig {
            name: (*name).to_owned(),
            node_pools: vec![NodePool {
                name: "general".to_owned(),
                count: 4,
                cpu: "16".to_owned(),
                memory: "64Gi".to_owned(),
                ..NodePool::default()
            }],
            ..ClusterConfig::default()
        })
        .collect();
    FleetConfig {
        clusters,
        ..FleetConfig::default()
    }
}

fn mcd(name: &str) -> MultiClusterDeployment {
    Mcd::new(name)
        .replicas(1)
        .policy("worst-fit")
        .cpu("10m")
        .memory("16Mi")
        .build()
}

fn scheduled(mcd: &MultiClusterDeployment) -> bool {
    mcd.status.as_ref().is_some_and(|s| {
        s.observed_generation == mcd.metadata.generation
            && conditions::is_true(&s.conditions, types::SCHEDULED)
    })
}

fn available(mcd: &MultiClusterDeployment) -> bool {
    mcd.status.as_ref().is_some_and(|s| {
        s.observed_generation == mcd.metadata.generation
            && conditions::is_true(&s.conditions, types::AVAILABLE)
    })
}

/// Creates `name` and answers how long after `since` its status said Scheduled.
async fn decided(api: &Api<MultiClusterDeployment>, name: &str, since: Instant) -> anyhow::Result<Duration> {
    api.create(&PostParams::default(), &mcd(name)).await?;
    let deadline = since + Duration::from_secs(120);
    loop {
        if let Some(object) = api.get_opt(name).await?
            && scheduled(&object)
        {
            return Ok(since.elapsed());
        }
        anyhow::ensure!(Instant::now() < deadline, "{name} was not scheduled within 120 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn row(label: &str, samples: &mut [Duration]) {
    samples.sort();
    let s = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    println!(
        "| {label} | {} | {} | {} | {} | {} |",
        samples.len(),
        s(samples[0]),
        s(percentile(samples, 50.0)),
        s(percentile(samples, 99.0)),
        s(samples[samples.len() - 1])
    );
}

async fn takeover(url: &str, kills: usize) -> anyhow::Result<()> {
    let mut run = ProcessFleet::start(FleetOptions {
        hubs: 3,
        store: Store::Postgres(url.to_owned()),
        lease: Some(CHART_LEASE),
        fleet: fleet(),
    })
    .await?;
    let api: Api<MultiClusterDeployment> = Api::namespaced(run.client.clone(), "default");
    let mut killed = Vec::new();
    let mut terminated = Vec::new();
    for round in 0..kills + kills / 2 {
        // A leader that has placed: the round starts from a working fleet.
        let leader = run.running_leader(Duration::from_secs(60)).await?;
        decided(&api, &format!("warm-{round}"), Instant::now()).await?;
        let clean = round >= kills;
        let since = Instant::now();
        let hub = run.hub(leader).expect("the leader runs");
        if clean {
            hub.terminate()?;
        } else {
            hub.kill();
        }
        let took = decided(&api, &format!("after-{round}"), since).await?;
        if clean {
            terminated.push(took);
        } else {
            killed.push(took);
        }
        // The stopped replica comes back as a follower.
        if let Some(hub) = run.hub(leader) {
            let deadline = Instant::now() + Duration::from_secs(30);
            while hub.exited().is_none() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        run.start_hub(leader)?;
    }
    println!(
        "\nleader stopped -> the next placement decision (3 replicas on Postgres, lease 8 s, renew deadline 5 s, retry 1 s)"
    );
    println!("| how | runs | min | p50 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    row("SIGKILL", &mut killed);
    row("SIGTERM (Lease released)", &mut terminated);
    run.stop().await;
    Ok(())
}

/// Creates `count` MCDs named `prefix-i` at once; the time until every one is Available,
/// with `chaos` run meanwhile.
async fn burst(
    run: &mut ProcessFleet,
    prefix: &str,
    count: usize,
    kill_every: Option<Duration>,
) -> anyhow::Result<(Duration, usize)> {
    let api: Api<MultiClusterDeployment> = Api::namespaced(run.client.clone(), "default");
    let start = Instant::now();
    for i in 0..count {
        api.create(&PostParams::default(), &mcd(&format!("{prefix}-{i:03}")))
            .await?;
    }
    let mut kills = 0;
    let mut last_kill = Instant::now();
    loop {
        let list = api.list(&ListParams::default()).await?;
        let ready = list
            .items
            .iter()
            .filter(|m| m.metadata.name.as_deref().is_some_and(|n| n.starts_with(prefix)))
            .filter(|m| available(m))
            .count();
        if ready == count {
            return Ok((start.elapsed(), kills));
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(900),
            "{ready} of {count} Available after 15 min"
        );
        if let Some(every) = kill_every
            && last_kill.elapsed() >= every
        {
            run.restart_ended()?;
            if let Ok(leader) = run.running_leader(Duration::from_secs(60)).await {
                run.hub(leader).expect("running").kill();
                run.start_hub(leader)?;
                kills += 1;
            }
            last_kill = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn throughput(url: &str) -> anyhow::Result<()> {
    let count = 300;
    let mut run = ProcessFleet::start(FleetOptions {
        hubs: 3,
        store: Store::Postgres(url.to_owned()),
        lease: Some(CHART_LEASE),
        fleet: fleet(),
    })
    .await?;
    let (calm, _) = burst(&mut run, "calm", count, None).await?;
    let (chaos, kills) = burst(&mut run, "chaos", count, Some(Duration::from_secs(5))).await?;
    println!("\n{count} one-replica MCDs created at once -> every one Available (3 replicas on Postgres)");
    println!("| run | took | MCDs per second | leader kills |");
    println!("|---|---|---|---|");
    for (label, took, kills) in [
        ("no faults", calm, 0),
        ("leader SIGKILLed every 5 s", chaos, kills),
    ] {
        println!(
            "| {label} | {:.1} s | {:.1} | {kills} |",
            took.as_secs_f64(),
            count as f64 / took.as_secs_f64()
        );
    }
    let api: Api<MultiClusterDeployment> = Api::namespaced(run.client.clone(), "default");
    let _ = api
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    run.stop().await;
    Ok(())
}

async fn sqlite(kills: usize) -> anyhow::Result<()> {
    let mut run = ProcessFleet::start(FleetOptions {
        hubs: 1,
        store: Store::Sqlite,
        lease: None,
        fleet: fleet(),
    })
    .await?;
    let api: Api<MultiClusterDeployment> = Api::namespaced(run.client.clone(), "default");
    let mut samples = Vec::new();
    for round in 0..kills {
        decided(&api, &format!("warm-{round}"), Instant::now()).await?;
        let since = Instant::now();
        run.hub(0).expect("the hub runs").kill();
        run.start_hub(0)?;
        samples.push(decided(&api, &format!("after-{round}"), since).await?);
    }
    println!("\none hub on SQLite: SIGKILL, started again at once -> the next placement decision");
    println!("| how | runs | min | p50 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    row("SIGKILL and restart", &mut samples);
    run.stop().await;
    Ok(())
}
