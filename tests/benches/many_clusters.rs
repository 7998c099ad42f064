//! The hub over thousands of clusters: `cargo bench -p nave-e2e --bench many_clusters`.
//!
//! One agent process and one simulated cluster per cluster, as the scale benchmark runs them, do
//! not fit thousands of clusters on one machine. Here the hub is the same process as in
//! production (this binary run again as `role hub`, on SQLite, over TLS), and each cluster's agent
//! is simulated in this process by two tasks speaking the agent protocol to it, as the agent does:
//!
//! - it registers with the fleet's bootstrap token, then heartbeats at the interval the hub gives
//!   (10 s), each heartbeat carrying a capacity of 10 nodes (16 CPU, 16 GiB, 110 pods each) and
//!   a probe URL (so the hub answers each with peers to probe, as it answers agents; nothing
//!   probes them);
//! - it long-polls its work set (`wait` 30 s, as the agent), and reports every Deployment of each
//!   new set with all its replicas ready at once, as changes since its last report the hub took
//!   (whole when the hub refuses them), and again, unchanged, whenever a long-poll ends empty.
//!
//! No API server and no pods stand behind these agents: what is measured is the hub's side of
//! the protocol, the placement and the store. For each size `clusters x MCDs` (`NAVE_FLEET`,
//! default `1000x10000,5000x3000`) it prints:
//!
//! - joining: the time until every cluster is registered and has heartbeated (its
//!   WorkloadCluster shows capacity), and the hub's CPU for it;
//! - idle: the hub's CPU over 60 s with every agent heartbeating and long-polling, as a share of
//!   one core, and its resident memory;
//! - burst: every one-replica MCD created at once, until each is `Available`: MCDs per second and
//!   the hub's CPU per MCD, how many plans it made per MCD and their mean time (its scheduling
//!   histogram); then the hub's resident memory;
//! - steady: the hub's CPU over 60 s with the MCDs placed (heartbeats, periodic reports);
//! - restart: the hub killed (SIGKILL) and started again, the time until it has reconciled every
//!   MCD and published the work sets, and its CPU for that.
//!
//! It checks, in what the simulated agents were sent, that every MCD is in exactly one cluster's
//! set with one replica, after the burst and, once every agent has fetched its current set, after
//! the restart, in the same cluster as before; it fails otherwise.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::{Api, PostParams};
use nave_api::MultiClusterDeployment;
use nave_api::wire::{
    self, Heartbeat, RegisterRequest, RegisterResponse, StatusReport, WorkQuery, WorkSet, WorkloadRef,
};
use nave_e2e::procs::{AvailableWatch, FleetOptions, ProcessFleet, Store, cpu_seconds, memory_mib};
use nave_sim::config::FleetConfig;
use nave_testkit::Mcd;
use nave_testkit::{all_ready, idle_capacity};
use tokio_util::sync::CancellationToken;

#[global_allocator]
static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;

/// How long each idle and steady measurement lasts.
const SPAN: Duration = Duration::from_secs(60);

fn main() -> anyhow::Result<()> {
    if let Some(result) = nave_e2e::procs::child_role() {
        return result;
    }
    nave_sim::install_crypto_provider();
    let sizes = std::env::var("NAVE_FLEET").unwrap_or_else(|_| "1000x10000,5000x3000".to_owned());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    println!(
        "| clusters | MCDs | joined in | hub CPU to join | idle: hub CPU | idle: hub RSS | MCDs per second | hub CPU per MCD | plans per MCD | time per plan | hub RSS | steady: hub CPU | restart: published in | restart CPU | exactly once |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for size in sizes.split(',').filter(|s| !s.is_empty()) {
        let (clusters, mcds) = size
            .split_once('x')
            .and_then(|(c, m)| Some((c.trim().parse().ok()?, m.trim().parse().ok()?)))
            .ok_or_else(|| anyhow::anyhow!("NAVE_FLEET takes sizes such as 1000x10000, not {size:?}"))?;
        runtime.block_on(run(clusters, mcds))?;
    }
    Ok(())
}

/// What the simulated agents were last sent: each cluster's revision, and its Deployments (by
/// MCD) with their replicas.
type Sent = Arc<Mutex<HashMap<String, (u64, BTreeMap<String, i64>)>>>;

/// One simulated agent's connection to the hub.
#[derive(Clone)]
struct Thin {
    http: reqwest::Client,
    hub: String,
    cluster: String,
    credential: String,
    /// How often the hub asked for heartbeats when the cluster registered.
    heartbeat_interval: Duration,
}

impl Thin {
    /// Registers `cluster`, retrying while the hub does not answer `200`, for at most ten
    /// minutes (thousands register at once).
    async fn register(http: reqwest::Client, hub: String, cluster: String, token: &str) -> Thin {
        let request = RegisterRequest {
            cluster_name: cluster.clone(),
            agent_version: "0.1.0".to_owned(),
            kubernetes_version: Some("v1.32.0".to_owned()),
            ..RegisterRequest::default()
        };
        let what = format!("{cluster} to register");
        let registered = nave_testkit::wait_for(&what, Duration::from_secs(600), || async {
            let answer = http
                .post(format!("{hub}{}", wire::REGISTER_PATH))
                .bearer_auth(token)
                .json(&request)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            match answer.status().as_u16() {
                200 => answer.json::<RegisterResponse>().await.map_err(|e| e.to_string()),
                status => Err(format!("answer {status}")),
            }
        })
        .await;
        Thin {
            http,
            hub,
            cluster,
            credential: registered.credential,
            heartbeat_interval: Duration::from_secs(registered.heartbeat_interval_seconds.max(1)),
        }
    }

    async fn post(&self, path: &str, body: &impl serde::Serialize) -> Option<u16> {
        let answer = self
            .http
            .post(format!("{}{path}", self.hub))
            .bearer_auth(&self.credential)
            .json(body)
            .send()
            .await
            .ok()?;
        Some(answer.status().as_u16())
    }

    /// Heartbeats at the interval the hub asked for until `stop`, each a capacity of 10 idle
    /// nodes and a probe URL.
    async fn heartbeats(self, stop: CancellationToken) {
        let beat = Heartbeat {
            cluster_name: Some(self.cluster.clone()),
            agent_version: "0.1.0".to_owned(),
            kubernetes_version: Some("v1.32.0".to_owned()),
            capacity: idle_capacity(&self.cluster, 10, 16_000),
            // As an agent sends it: the hub then names peers to probe in every answer.
            probe_url: Some(format!("http://{}.probe.invalid:8081/probe", self.cluster)),
            ..Heartbeat::default()
        };
        let mut every = tokio::time::interval(self.heartbeat_interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = every.tick() => {}
            }
            let _ = self.post(wire::HEARTBEAT_PATH, &beat).await;
        }
    }

    /// Long-polls the work set until `stop`, reporting each new set all ready, and records what
    /// it was sent in `sent`.
    async fn work(self, stop: CancellationToken, sent: Sent) {
        let mut after: Option<u64> = None;
        let mut last: Option<StatusReport> = None;
        let mut reports = 0_u64;
        // A poll that failed is tried again at most once a second: a hub that is restarting
        // refuses at once.
        let mut retries = tokio::time::interval(Duration::from_secs(1));
        retries.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let query = WorkQuery {
                after,
                wait: Some(30),
                ..WorkQuery::default()
            };
            let polled = tokio::select! {
                () = stop.cancelled() => return,
                polled = self
                    .http
                    .get(format!("{}{}", self.hub, wire::WORK_PATH))
                    .bearer_auth(&self.credential)
                    .query(&query)
                    .timeout(Duration::from_secs(60))
                    .send() => polled,
            };
            let set = match polled {
                Ok(answer) if answer.status() == 200 => answer.json::<WorkSet>().await.ok(),
                Ok(answer) if answer.status() == 204 => None,
                _ => {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        _ = retries.tick() => continue,
                    }
                }
            };
            let mut report = match &set {
                Some(set) => {
                    let deployments = set
                        .objects
                        .iter()
                        .filter(|o| o["kind"] == "Deployment")
                        .map(|o| {
                            let name = o["metadata"]["labels"][wire::WORKLOAD_LABEL]
                                .as_str()
                                .and_then(WorkloadRef::from_label_value)
                                .map_or_else(String::new, |w| w.name);
                            (name, o["spec"]["replicas"].as_i64().unwrap_or(1))
                        })
                        .collect();
                    sent.lock()
                        .unwrap()
                        .insert(self.cluster.clone(), (set.revision, deployments));
                    after = Some(set.revision);
                    StatusReport {
                        cluster_name: Some(self.cluster.clone()),
                        applied_revision: Some(set.revision),
                        objects: set.objects.iter().map(all_ready).collect(),
                        ..StatusReport::default()
                    }
                }
                // Nothing new within the wait: the periodic report, unchanged.
                None => match &last {
                    Some(last) => last.clone(),
                    None => continue,
                },
            };
            report.id = match &last {
                Some(last) if last.same_content(&report) => last.id.clone(),
                _ => {
                    reports += 1;
                    Some(format!("{}-{reports}", self.cluster))
                }
            };
            let delta = last.as_ref().and_then(|last| report.delta_from(last));
            let taken = match &delta {
                Some(delta) => self.post(wire::STATUS_DELTA_PATH, delta).await == Some(204),
                None => false,
            };
            if taken || self.post(wire::STATUS_PATH, &report).await == Some(204) {
                last = Some(report);
            }
        }
    }
}

/// CPU seconds the hub spends over [`SPAN`], as a share of one core.
async fn share_over_span(hub: u32) -> anyhow::Result<f64> {
    let before = cpu_seconds(&hub.to_string())?;
    tokio::time::sleep(SPAN).await;
    Ok((cpu_seconds(&hub.to_string())? - before) / SPAN.as_secs_f64())
}

/// How many plans the hub has made, and their time in seconds in all (its scheduling histogram).
async fn plans(fleet: &ProcessFleet) -> anyhow::Result<(f64, f64)> {
    let count = fleet
        .hub_metric(0, "nave_scheduling_duration_seconds_count")
        .await;
    let sum = fleet.hub_metric(0, "nave_scheduling_duration_seconds_sum").await;
    Ok((
        count.map_err(anyhow::Error::msg)?,
        sum.map_err(anyhow::Error::msg)?,
    ))
}

/// Every MCD in exactly one cluster's set with one replica: the count of those that are, up to
/// five that are not, and the cluster of each.
fn exactly_once(sent: &Sent, mcds: usize) -> (usize, Vec<String>, HashMap<String, String>) {
    let mut seen: HashMap<String, Vec<(String, i64)>> = HashMap::new();
    for (cluster, (_, deployments)) in sent.lock().unwrap().iter() {
        for (name, replicas) in deployments {
            seen.entry(name.clone())
                .or_default()
                .push((cluster.clone(), *replicas));
        }
    }
    let mut once = 0;
    let mut wrong = Vec::new();
    let mut placement = HashMap::new();
    for i in 0..mcds {
        let name = format!("w{i:06}");
        match seen.get(&name).map(Vec::as_slice) {
            Some([(cluster, 1)]) => {
                once += 1;
                placement.insert(name, cluster.clone());
            }
            other => {
                if wrong.len() < 5 {
                    wrong.push(format!("{name}: {other:?}"));
                }
            }
        }
    }
    (once, wrong, placement)
}

async fn run(clusters: usize, mcds: usize) -> anyhow::Result<()> {
    let mut fleet = ProcessFleet::start(FleetOptions {
        hubs: 1,
        store: Store::Sqlite,
        lease: None,
        fleet: FleetConfig::default(),
    })
    .await?;
    let hub_pid = fleet.hub(0).expect("the hub runs").pid();
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(&fleet.hub_ca)?)?)
        .build()?;
    // Straight to the hub, not through the fleet's proxy: one connection per agent.
    let hub = format!("https://{}", fleet.hub_listen(0));
    let token = fleet.bootstrap_token.clone();
    let stop = CancellationToken::new();
    let sent: Sent = Arc::default();

    // Joining: every cluster registered and heartbeating.
    let joining = Instant::now();
    let cpu_before = cpu_seconds(&hub_pid.to_string())?;
    let registering = Arc::new(tokio::sync::Semaphore::new(64));
    for i in 0..clusters {
        let (http, hub, token, stop, sent, registering) = (
            http.clone(),
            hub.clone(),
            token.clone(),
            stop.clone(),
            sent.clone(),
            registering.clone(),
        );
        tokio::spawn(async move {
            let thin = {
                let _turn = registering.acquire().await;
                Thin::register(http, hub, format!("c{i:05}"), &token).await
            };
            tokio::spawn(thin.clone().heartbeats(stop.clone()));
            thin.work(stop, sent).await;
        });
    }
    fleet.wait_reporting(clusters, Duration::from_secs(1800)).await;
    let joined = joining.elapsed();
    let join_cpu = cpu_seconds(&hub_pid.to_string())? - cpu_before;

    let idle = share_over_span(hub_pid).await?;
    let idle_rss = memory_mib(hub_pid).0;

    // The burst.
    let api: Api<MultiClusterDeployment> = Api::namespaced(fleet.client.clone(), "default");
    let mut watching = AvailableWatch::start(api.clone());
    let cpu_before = cpu_seconds(&hub_pid.to_string())?;
    let plans_before = plans(&fleet).await?;
    let start = Instant::now();
    for i in 0..mcds {
        let object = Mcd::new(&format!("w{i:06}"))
            .replicas(1)
            .policy("worst-fit")
            .cpu("10m")
            .memory("16Mi")
            .build();
        api.create(&PostParams::default(), &object).await?;
    }
    watching.wait(mcds, Duration::from_secs(3600)).await?;
    let took = start.elapsed();
    let burst_cpu = cpu_seconds(&hub_pid.to_string())? - cpu_before;
    let plans_after = plans(&fleet).await?;
    let planned = plans_after.0 - plans_before.0;
    drop(watching);
    let burst_rss = memory_mib(hub_pid).0;
    let (placed, wrong, before) = exactly_once(&sent, mcds);

    let steady = share_over_span(hub_pid).await?;

    // The hub killed and started again.
    let (republished, restart_cpu) = fleet
        .restart_hub_until_published(0, Duration::from_secs(1800))
        .await?;
    // Every agent has fetched its cluster's current set: a hub that moved replicas on its
    // restart wrote new revisions.
    let store = sqlx::SqlitePool::connect(&fleet.database_url()).await?;
    nave_testkit::wait_for(
        "every agent to have fetched its cluster's current work",
        Duration::from_secs(1800),
        || async {
            let revisions: Vec<(String, i64)> = sqlx::query_as("SELECT cluster, revision FROM work")
                .fetch_all(&store)
                .await
                .map_err(|e| e.to_string())?;
            let sent = sent.lock().unwrap();
            let behind = revisions
                .iter()
                .filter(|(cluster, revision)| {
                    sent.get(cluster)
                        .is_none_or(|(fetched, _)| i64::try_from(*fetched).ok() != Some(*revision))
                })
                .count();
            if behind == 0 {
                Ok(())
            } else {
                Err(format!("{behind} cluster(s) behind"))
            }
        },
    )
    .await;
    store.close().await;
    let (after, wrong_after, placement) = exactly_once(&sent, mcds);
    let moved = placement
        .iter()
        .filter(|(mcd, cluster)| before.get(*mcd) != Some(*cluster))
        .count();
    stop.cancel();
    println!(
        "| {clusters} | {mcds} | {:.1} s | {:.1} s | {:.1} % of a core | {:.0} MiB | {:.1} | {:.2} ms | {:.2} | {:.2} ms | {:.0} MiB | {:.1} % of a core | {:.1} s | {:.1} s | {placed} of {mcds}; after the restart {after}, {moved} moved |",
        joined.as_secs_f64(),
        join_cpu,
        idle * 100.0,
        idle_rss,
        mcds as f64 / took.as_secs_f64(),
        burst_cpu * 1000.0 / mcds as f64,
        planned / mcds as f64,
        (plans_after.1 - plans_before.1) * 1000.0 / planned.max(1.0),
        burst_rss,
        steady * 100.0,
        republished.as_secs_f64(),
        restart_cpu,
    );
    if !wrong.is_empty() || !wrong_after.is_empty() || moved > 0 {
        anyhow::bail!("not exactly once: {wrong:?} {wrong_after:?}");
    }
    fleet.stop().await;
    Ok(())
}
