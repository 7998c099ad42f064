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
//!
//! Then, for each size, a second table, read in the workload clusters themselves:
//!
//! - whether every MCD's replica exists exactly once in the fleet (one Deployment of one
//!   replica in one cluster, one live pod), after the burst;
//! - a fifth of the MCDs deleted at once: the time until none of their Deployments or pods is
//!   left in any cluster, and the others still each exactly once;
//! - the hub killed (SIGKILL) and started again: the time until it has reconciled every MCD and
//!   published the work sets again (its log says so), its CPU for that, and, once every agent
//!   has applied its cluster's current work (read in the hub's store), every MCD still exactly
//!   once, in the cluster it was in before.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nave_api::MultiClusterDeployment;
use nave_api::wire::WORKLOAD_LABEL;
use nave_e2e::procs::{AvailableWatch, FleetOptions, ProcessFleet, Store, cpu_seconds, memory_mib};
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
    let mut checks = Vec::new();
    for size in sizes.split(',').filter(|s| !s.is_empty()) {
        let (clusters, mcds) = size
            .split_once('x')
            .and_then(|(c, m)| Some((c.trim().parse().ok()?, m.trim().parse().ok()?)))
            .ok_or_else(|| anyhow::anyhow!("NAVE_SCALE takes sizes such as 20x500, not {size:?}"))?;
        checks.push(runtime.block_on(run(clusters, mcds))?);
    }
    println!();
    println!(
        "| clusters | MCDs | exactly once after the burst | a fifth deleted -> gone from every cluster | hub killed -> every MCD reconciled and published | exactly once after the restart |"
    );
    println!("|---|---|---|---|---|---|");
    for row in checks {
        println!("{row}");
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

/// Runs one size; prints its row of the first table and answers its row of the second.
async fn run(clusters: usize, mcds: usize) -> anyhow::Result<String> {
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
    let mut watching = AvailableWatch::start(api.clone());
    let available = watching.at.clone();

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
    watching.wait(mcds, Duration::from_secs(3600)).await?;
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
    drop(watching);
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
    let placed = exactly_once(&fleet, mcds, &BTreeSet::new()).await?;

    // A fifth deleted at once.
    let deleted: BTreeSet<String> = (0..mcds).step_by(5).map(|i| format!("w{i:06}")).collect();
    let deleting = Instant::now();
    for name in &deleted {
        api.delete(name, &DeleteParams::default()).await?;
    }
    let gone = nave_testkit::wait_for(
        "nothing of the deleted MCDs left in any cluster",
        Duration::from_secs(1800),
        || async {
            let seen = exactly_once(&fleet, mcds, &deleted)
                .await
                .map_err(|e| e.to_string())?;
            match seen.deleted_left {
                0 => Ok((deleting.elapsed(), seen)),
                left => Err(format!("{left} Deployments or pods left")),
            }
        },
    )
    .await;

    // The hub killed and started again: the first pass over every MCD, then the sets published.
    let (republished, restart_cpu) = fleet
        .restart_hub_until_published(0, Duration::from_secs(1800))
        .await?;
    // Every agent has applied the set it now has: a hub that moved replicas on its restart
    // wrote new revisions, and their pods would be in the clusters by then.
    let store = sqlx::SqlitePool::connect(&fleet.database_url()).await?;
    nave_testkit::wait_for(
        "every agent to have applied its cluster's current work",
        Duration::from_secs(1800),
        || async {
            let behind: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM work w LEFT JOIN work_status s ON s.cluster = w.cluster \
                 WHERE s.applied_revision IS NULL OR s.applied_revision < w.revision",
            )
            .fetch_one(&store)
            .await
            .map_err(|e| e.to_string())?;
            if behind == 0 {
                Ok(())
            } else {
                Err(format!("{behind} cluster(s) behind"))
            }
        },
    )
    .await;
    store.close().await;
    let after = exactly_once(&fleet, mcds, &deleted).await?;
    let moved = after
        .placement
        .iter()
        .filter(|(mcd, cluster)| gone.1.placement.get(*mcd) != Some(*cluster))
        .count();
    let verdict = |s: &Census| {
        if s.wrong.is_empty() {
            format!("{} of {}", s.once, s.expected)
        } else {
            format!(
                "{} of {}; wrong: {}",
                s.once,
                s.expected,
                s.wrong.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
            )
        }
    };
    let row = format!(
        "| {clusters} | {mcds} | {} | {:.1} s ({} deleted; the rest {}) | {:.1} s, {:.1} s CPU | {}, {moved} moved |",
        verdict(&placed),
        gone.0.as_secs_f64(),
        deleted.len(),
        verdict(&gone.1),
        republished.as_secs_f64(),
        restart_cpu,
        verdict(&after),
    );
    if !(placed.wrong.is_empty() && gone.1.wrong.is_empty() && after.wrong.is_empty() && moved == 0) {
        anyhow::bail!("replicas not exactly once in the fleet: {row}");
    }

    if std::env::var_os("NAVE_SCALE_HOLD").is_some() {
        // For a profiler attached to the hub: keep everything up until killed.
        eprintln!("holding; the hub's pid is {hub_pid}");
        std::future::pending::<()>().await;
    }
    fleet.stop().await;
    Ok(row)
}

/// What the workload clusters hold of the benchmark's MCDs.
struct Census {
    /// MCDs expected (not deleted).
    expected: usize,
    /// Of which exactly once: one Deployment of one replica in one cluster, one live pod.
    once: usize,
    /// The others, with what was seen.
    wrong: Vec<String>,
    /// Deployments and pods of deleted MCDs still in the clusters.
    deleted_left: usize,
    /// The cluster of each MCD that is there exactly once.
    placement: BTreeMap<String, String>,
}

/// Lists every cluster's Deployments and pods of the benchmark and counts each MCD's.
async fn exactly_once(
    fleet: &ProcessFleet,
    mcds: usize,
    deleted: &BTreeSet<String>,
) -> anyhow::Result<Census> {
    // Per MCD: (Deployments, their replicas, live pods, clusters).
    let mut seen: BTreeMap<String, (u32, i32, u32, BTreeSet<String>)> = BTreeMap::new();
    let with_label = ListParams::default().labels(WORKLOAD_LABEL);
    for cluster in &fleet.fleet.clusters {
        let client = cluster.client().await?;
        let name = cluster.name().to_owned();
        for deployment in Api::<Deployment>::namespaced(client.clone(), "default")
            .list(&with_label)
            .await?
        {
            let Some(mcd) = workload(&deployment.metadata) else {
                continue;
            };
            let entry = seen.entry(mcd).or_default();
            entry.0 += 1;
            entry.1 += deployment.spec.replicas.unwrap_or(1);
            entry.3.insert(name.clone());
        }
        for pod in Api::<Pod>::namespaced(client, "default")
            .list(&with_label)
            .await?
        {
            let finished = matches!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            );
            let Some(mcd) = workload(&pod.metadata) else {
                continue;
            };
            // A deleted MCD's pod counts until it is gone, terminating or not; another's only
            // while it lives.
            if deleted.contains(&mcd) || !(pod.metadata.deletion_timestamp.is_some() || finished) {
                seen.entry(mcd).or_default().2 += 1;
            }
        }
    }
    let mut census = Census {
        expected: 0,
        once: 0,
        wrong: Vec::new(),
        deleted_left: 0,
        placement: BTreeMap::new(),
    };
    for i in 0..mcds {
        let name = format!("w{i:06}");
        let found = seen.get(&name);
        if deleted.contains(&name) {
            census.deleted_left += found.map_or(0, |(d, _, p, _)| (d + p) as usize);
            continue;
        }
        census.expected += 1;
        match found {
            Some((1, 1, 1, clusters)) if clusters.len() == 1 => {
                census.once += 1;
                census
                    .placement
                    .extend(clusters.iter().map(|c| (name.clone(), c.clone())));
            }
            other => census.wrong.push(format!(
                "{name}: {:?}",
                other.map(|(d, r, p, c)| format!("{d} Deployment(s), {r} replica(s), {p} pod(s) in {c:?}"))
            )),
        }
    }
    Ok(census)
}

/// The MCD a Deployment or pod of the benchmark belongs to (its workload label `default.<name>`).
fn workload(metadata: &kube::api::ObjectMeta) -> Option<String> {
    let value = metadata.labels.as_ref()?.get(WORKLOAD_LABEL)?;
    value.strip_prefix("default.").map(str::to_owned)
}
