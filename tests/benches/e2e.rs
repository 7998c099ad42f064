//! End-to-end figures for BENCHMARKS.md: `cargo bench -p nave-e2e --bench e2e`.
//!
//! 1. `kubectl apply` of a MultiClusterDeployment to every replica Ready across 3 clusters:
//!    median and p99 of 20 runs (the hub and agents in this process, on real sockets).
//! 2. Memory of the hub and of an agent, idle and with 1,000 MultiClusterDeployments: the hub and
//!    the agents run as separate processes (this binary re-executed with `role hub|agent`), and
//!    their resident set is read from `/proc`.
//!
//! Set `NAVE_BENCH_ONLY=latency` or `memory` to run one part; `NAVE_BENCH_MCDS` changes the 1,000.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser as _;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nave_api::{MultiClusterDeployment, WorkloadCluster};
use nave_e2e::{Database, Env, fleet};
use nave_sim::config::{ClusterConfig, FleetConfig, NodePool};
use nave_sim::{ServeOptions, SimCluster, SimFleet};
use nave_testkit::{Mcd, wait_for};

const RUNS: usize = 20;

#[global_allocator]
static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;

fn main() -> anyhow::Result<()> {
    nave_sim::install_crypto_provider();
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "role") {
        return child(&args[i + 1..]);
    }
    // `cargo bench` passes `--bench`; a filter argument is accepted and ignored.
    let only = std::env::var("NAVE_BENCH_ONLY").unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        if only.is_empty() || only == "latency" {
            latency().await?;
        }
        if only.is_empty() || only == "memory" {
            memory().await?;
        }
        Ok(())
    })
}

/// A hub or an agent in a process of its own, as the binaries run them.
fn child(args: &[String]) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match args.first().map(String::as_str) {
        Some("hub") => {
            let cli = nave_hub::cli::Cli::parse_from(
                std::iter::once("nave-hub".to_owned()).chain(args[1..].iter().cloned()),
            );
            let nave_hub::cli::Command::Run(run) = cli.command else {
                anyhow::bail!("the hub role takes `run ...`");
            };
            runtime.block_on(nave_hub::run(run))?;
        }
        Some("agent") => {
            let parsed = nave_agent::Args::parse_from(
                std::iter::once("nave-agent".to_owned()).chain(args[1..].iter().cloned()),
            );
            runtime.block_on(nave_agent::run(parsed))?;
        }
        other => anyhow::bail!("unknown role {other:?}"),
    }
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// When each hop of one apply ended, as watches outside Nave saw it: the MCD in the management
/// cluster, the last cluster's Deployment created and Ready, the MCD reporting every replica
/// Ready.
#[derive(Debug, Default)]
struct Hops {
    /// Watches that have listed and now watch.
    listening: usize,
    created: Option<Instant>,
    dispatched: BTreeMap<String, Instant>,
    ready: BTreeMap<String, Instant>,
    reported: Option<Instant>,
}

/// Records `hops` for the MCD `name` of `replicas` until aborted: one task per cluster watching
/// the Deployments Nave renders for it, one watching the MCD.
fn watch_hops(
    env: &Env,
    name: &str,
    replicas: i32,
    hops: &std::sync::Arc<std::sync::Mutex<Hops>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::runtime::watcher;
    let mut tasks = Vec::new();
    for cluster in env.cluster_names() {
        let api: Api<Deployment> = Api::namespaced(env.cluster_client(&cluster), "default");
        let config =
            watcher::Config::default().labels(&format!("{}={name}", nave_hub::render::MCD_NAME_LABEL));
        tasks.push(record_each(api, config, hops.clone(), move |h, d, at| {
            let wanted = d.spec.replicas.unwrap_or(1);
            let status = d.status.clone().unwrap_or_default();
            let ready = wanted > 0
                && status.ready_replicas.unwrap_or(0) >= wanted
                && status.observed_generation == d.metadata.generation;
            h.dispatched.entry(cluster.clone()).or_insert(at);
            if ready {
                h.ready.entry(cluster.clone()).or_insert(at);
            }
        }));
    }
    let api: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), "default");
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tasks.push(record_each(api, config, hops.clone(), move |h, mcd, at| {
        let status = mcd.status.clone().unwrap_or_default();
        h.created.get_or_insert(at);
        if status.ready_replicas >= replicas && status.observed_generation == mcd.metadata.generation {
            h.reported.get_or_insert(at);
        }
    }));
    tasks
}

/// Watches `api` and records into `hops`, with the instant each event arrived, every object it
/// sees (`record`) and the end of its first list (`listening`).
fn record_each<K>(
    api: Api<K>,
    config: kube::runtime::watcher::Config,
    hops: std::sync::Arc<std::sync::Mutex<Hops>>,
    mut record: impl FnMut(&mut Hops, K, Instant) + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    use futures::StreamExt as _;
    use kube::runtime::watcher;
    tokio::spawn(async move {
        let mut stream = watcher(api, config).boxed();
        while let Some(Ok(event)) = stream.next().await {
            let at = Instant::now();
            let mut h = hops.lock().unwrap_or_else(|e| e.into_inner());
            match event {
                watcher::Event::InitDone => h.listening += 1,
                watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                    record(&mut h, object, at)
                }
                _ => {}
            }
        }
    })
}

async fn latency() -> anyhow::Result<()> {
    let env = Env::start(fleet(3), Database::Sqlite).await?;
    let kubectl = nave_sim::kubectl::find_kubectl();
    let cache = tempfile::tempdir()?;
    let manifest = env.dir().join("mcd.json");
    let api: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), "default");
    let replicas = 6;
    let mut samples = Vec::with_capacity(RUNS);
    // Per run: submit (kubectl until the MCD exists), dispatch (until the last cluster's
    // Deployment exists: the hub's decision, store, work set, the agent's wake-up and apply),
    // cluster (until the last one is Ready: the simulated scheduler, kubelet and controllers),
    // report (until the MCD says so: the agent's status report and the hub's status write).
    let mut hops: [Vec<Duration>; 4] = Default::default();
    for run in 0..RUNS {
        let name = format!("bench-{run}");
        let object = Mcd::new(&name).replicas(replicas).policy("spread").build();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Hops::default()));
        let watches = watch_hops(&env, &name, replicas, &seen);
        // The watches list before they watch; start once each has.
        let watching = watches.len();
        wait_for("the watches to list", Duration::from_secs(30), || {
            let seen = seen.clone();
            async move {
                let listening = seen.lock().unwrap_or_else(|e| e.into_inner()).listening;
                if listening == watching {
                    Ok(())
                } else {
                    Err(format!("{listening} of {watching} listening"))
                }
            }
        })
        .await;
        let start = Instant::now();
        if let Some(kubectl) = &kubectl {
            std::fs::write(&manifest, serde_json::to_vec(&object)?)?;
            let out = Command::new(kubectl)
                .arg("--kubeconfig")
                .arg(nave_e2e::kubeconfig_path(&env))
                .arg("--cache-dir")
                .arg(cache.path())
                .args(["apply", "-f"])
                .arg(&manifest)
                .output()?;
            anyhow::ensure!(
                out.status.success(),
                "kubectl apply failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        } else {
            api.create(&PostParams::default(), &object).await?;
        }
        env.wait_rolled_out("default", &name, replicas).await;
        samples.push(start.elapsed());
        wait_for(
            "the watches to see the MCD report Ready",
            Duration::from_secs(30),
            || {
                let seen = seen.clone();
                async move {
                    let h = seen.lock().unwrap_or_else(|e| e.into_inner());
                    if h.reported.is_some() && h.ready.len() == 3 {
                        Ok(())
                    } else {
                        Err(format!("{h:?}"))
                    }
                }
            },
        )
        .await;
        for watch in watches {
            watch.abort();
        }
        let (created, dispatched, ready, reported) = {
            let h = seen.lock().unwrap_or_else(|e| e.into_inner());
            let (Some(created), Some(reported)) = (h.created, h.reported) else {
                anyhow::bail!("run {run}: the watches missed the MCD: {h:?}");
            };
            let dispatched = h.dispatched.values().max().copied().unwrap_or(created);
            let ready = h.ready.values().max().copied().unwrap_or(dispatched);
            (created, dispatched, ready, reported)
        };
        for (hop, (from, to)) in hops.iter_mut().zip([
            (start, created),
            (created, dispatched),
            (dispatched, ready),
            (ready, reported),
        ]) {
            hop.push(to.saturating_duration_since(from));
        }
        api.delete(&name, &DeleteParams::default()).await?;
        env.wait_mcd_gone("default", &name).await;
    }
    samples.sort();
    println!(
        "\napply -> all {replicas} replicas Ready across 3 clusters ({RUNS} runs, {}; simulated pod start {} ms)",
        if kubectl.is_some() {
            "kubectl apply"
        } else {
            "kube-rs create (kubectl.1.32 not found)"
        },
        nave_sim::config::Timing::default().pod_start_millis
    );
    println!("| min | median | p99 | max |");
    println!("|---|---|---|---|");
    println!(
        "| {} | {} | {} | {} |",
        ms(samples[0]),
        ms(percentile(&samples, 50.0)),
        ms(percentile(&samples, 99.0)),
        ms(samples[samples.len() - 1])
    );
    let mut nave: Vec<Duration> = (0..RUNS).map(|i| hops[1][i] + hops[3][i]).collect();
    nave.sort();
    println!("\nby hop, as watches outside Nave saw each end");
    println!("| hop | whose | median | p99 |");
    println!("|---|---|---|---|");
    for (hop, (what, whose)) in hops.iter_mut().zip([
        ("submit: the client until the MCD exists", "client"),
        (
            "dispatch: until the last cluster's Deployment exists",
            "Nave (hub and agent)",
        ),
        ("cluster: until the last one is Ready", "the simulated cluster"),
        (
            "report: until the MCD says every replica is Ready",
            "Nave (agent and hub)",
        ),
    ]) {
        hop.sort();
        println!(
            "| {what} | {whose} | {} | {} |",
            ms(percentile(hop, 50.0)),
            ms(percentile(hop, 99.0))
        );
    }
    println!(
        "| Nave's share (dispatch + report, per run) | Nave | {} | {} |",
        ms(percentile(&nave, 50.0)),
        ms(percentile(&nave, 99.0))
    );
    env.shutdown().await;
    Ok(())
}

/// Resident and peak resident memory of a process, in MiB.
fn rss_mib(pid: u32) -> anyhow::Result<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    Ok((field("VmRSS:"), field("VmHWM:")))
}

struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(role: &[&str], dir: &Path, log: &str) -> anyhow::Result<Child> {
    let exe = std::env::current_exe()?;
    let log = std::fs::File::create(dir.join(log))?;
    Ok(Command::new(exe)
        .arg("role")
        .args(role)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?)
}

/// The memory fleet: 3 clusters of 10 nodes (16 CPU, 64 GiB, 110 pods each), room for every
/// replica of the 1,000 workloads.
fn memory_fleet() -> FleetConfig {
    let clusters = ["eu-west-1", "us-east-1", "ap-south-1"]
        .iter()
        .map(|name| ClusterConfig {
            name: (*name).to_owned(),
            node_pools: vec![NodePool {
                name: "general".to_owned(),
                count: 10,
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

async fn memory() -> anyhow::Result<()> {
    let count: usize = std::env::var("NAVE_BENCH_MCDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir()?;
    let management = SimCluster::start(
        ClusterConfig {
            name: "management".to_owned(),
            ..ClusterConfig::default()
        },
        ServeOptions::default(),
    )
    .await?;
    let client = management.client().await?;
    nave_playground::up::install_crds(&client).await?;
    let fleet_config = memory_fleet();
    let fleet = SimFleet::start(fleet_config.clone(), ServeOptions::default()).await?;
    let kubeconfig = dir.path().join("kubeconfig");
    management.write_kubeconfig(&kubeconfig)?;
    let token = dir.path().join("bootstrap-token");
    std::fs::write(&token, uuid::Uuid::new_v4().simple().to_string())?;
    let listen = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    // As a fleet runs it: HTTPS, agents pinning the hub's CA, Secrets sealed in the store.
    let pki = nave_testkit::TestPki::generate(dir.path(), "hub");
    let hub_url = format!("https://{listen}");
    let store_key = dir.path().join("store-key");
    std::fs::write(&store_key, uuid::Uuid::new_v4().simple().to_string())?;
    let db = format!("sqlite://{}", dir.path().join("hub.db").display());
    let mut children = Children(Vec::new());
    children.0.push(spawn(
        &[
            "hub",
            "run",
            "--database-url",
            &db,
            "--listen",
            &listen.to_string(),
            "--bootstrap-token-file",
            &token.display().to_string(),
            "--kubeconfig",
            &kubeconfig.display().to_string(),
            "--metrics-listen",
            "127.0.0.1:0",
            "--accept-new-clusters",
            "--tls-cert-file",
            &pki.chain_file.display().to_string(),
            "--tls-key-file",
            &pki.key_file.display().to_string(),
            "--store-key-file",
            &store_key.display().to_string(),
        ],
        dir.path(),
        "hub.log",
    )?);
    for c in &fleet.clusters {
        let path = dir.path().join(format!("{}.kubeconfig", c.name()));
        c.write_kubeconfig(&path)?;
        children.0.push(spawn(
            &[
                "agent",
                "--hub-url",
                &hub_url,
                "--hub-ca-sha256",
                &pki.ca_sha256,
                "--cluster-name",
                c.name(),
                "--bootstrap-token-file",
                &token.display().to_string(),
                "--kubeconfig",
                &path.display().to_string(),
                // Several agents on one machine: each takes a free port for /metrics.
                "--metrics-listen",
                "127.0.0.1:0",
            ],
            dir.path(),
            &format!("agent-{}.log", c.name()),
        )?);
    }
    let wcls: Api<WorkloadCluster> = Api::all(client.clone());
    wait_for("every agent to report", Duration::from_secs(120), || {
        let wcls = wcls.clone();
        async move {
            let n = wcls
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .iter()
                .filter(|w| w.status.as_ref().is_some_and(|s| s.capacity.is_some()))
                .count();
            if n == 3 {
                Ok(())
            } else {
                Err(format!("{n} of 3 reporting"))
            }
        }
    })
    .await;
    // Idle: registered, heartbeating, nothing to run. Let start-up allocations settle first.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let pids: Vec<u32> = children.0.iter().map(Child::id).collect();
    let idle: Vec<(f64, f64)> = pids.iter().map(|p| rss_mib(*p)).collect::<Result<_, _>>()?;

    let api: Api<MultiClusterDeployment> = Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    for i in 0..count {
        let object = Mcd::new(&format!("w{i:04}"))
            .replicas(1)
            .policy("worst-fit")
            .cpu("10m")
            .memory("16Mi")
            .build();
        api.create(&PostParams::default(), &object).await?;
    }
    let created = start.elapsed();
    let ready = wait_for(&format!("{count} MCDs ready"), Duration::from_secs(1800), || {
        let api = api.clone();
        async move {
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let ready = list
                .items
                .iter()
                .filter(|m| m.status.as_ref().is_some_and(|s| s.ready_replicas == 1))
                .count();
            if ready == count {
                Ok(start.elapsed())
            } else {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Err(format!("{ready} of {count} ready"))
            }
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let loaded: Vec<(f64, f64)> = pids.iter().map(|p| rss_mib(*p)).collect::<Result<_, _>>()?;
    let per_cluster: BTreeMap<String, usize> = {
        let mut m = BTreeMap::new();
        for mcd in api.list(&ListParams::default()).await?.items {
            for c in mcd.status.map(|s| s.clusters).unwrap_or_default() {
                *m.entry(c.name).or_insert(0) += 1;
            }
        }
        m
    };

    println!(
        "\nmemory (resident set, MiB; separate processes; {count} MCDs of 1 replica created in {:.1} s, all Ready after {:.1} s; per cluster {per_cluster:?})",
        created.as_secs_f64(),
        ready.as_secs_f64()
    );
    println!("| process | idle RSS | RSS with {count} MCDs | peak RSS |");
    println!("|---|---|---|---|");
    let names: Vec<String> = std::iter::once("hub".to_owned())
        .chain(fleet_config.clusters.iter().map(|c| format!("agent {}", c.name)))
        .collect();
    for ((name, (idle_rss, _)), (rss, peak)) in names.iter().zip(&idle).zip(&loaded) {
        println!("| {name} | {idle_rss:.1} | {rss:.1} | {peak:.1} |");
    }
    drop(children);
    fleet.shutdown().await;
    management.shutdown().await;
    Ok(())
}
