//! One run: a fresh environment, the plan's events at their moments, the measurements, and the
//! environment torn down.
//!
//! A Nave run talks to the hub only as a user would: it creates, scales and deletes
//! MultiClusterDeployments in the management cluster, and afterwards reads the placement history
//! from the REST API and the counters from `/metrics`. The `static` run has no hub: the runner
//! itself divides each workload evenly over the regular clusters and creates the Deployments in
//! them, as KubeFed does with a ReplicaSchedulingPreference without rebalancing.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nave_api::{MultiClusterDeployment, MultiClusterJob, PlacementPolicy};
use nave_sim::cluster::{ServeOptions, SimCluster, SimFleet};
use nave_sim::controllers::FOREIGN_LABEL;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::measure::Monitor;
use super::plan::{
    BURST_CLUSTER, Event, JOB_LABEL, JobSpec, NAMESPACE, Plan, TENANT_LABEL, TIER_LABEL, WORKLOAD_LABEL,
    WorkloadSpec, even_split, real, real_millis, tenant_pod_size,
};
use super::report::{HubCounters, Report, RunResult, moved_replicas};
use crate::up::{Playground, PlaygroundClusters, UpOptions};

/// The agents' heartbeat interval, in scenario time (production: 10 s of real time).
const AGENT_HEARTBEAT: Duration = Duration::from_secs(15);
/// The agents' longest time between status reports, in scenario time.
const AGENT_STATUS: Duration = Duration::from_secs(60);
/// `rescheduling.pendingTimeout` of the workloads, in scenario time.
const PENDING_TIMEOUT: Duration = Duration::from_secs(120);
/// `rescheduling.cooldown` of the workloads, in scenario time.
const RESCHEDULING_COOLDOWN: Duration = Duration::from_secs(300);
/// `bursting.threshold` of the workloads, in percent.
const BURST_THRESHOLD: i32 = 80;
/// The image of every pod (the simulator runs nothing).
const IMAGE: &str = "registry.k8s.io/pause:3.10";
/// Longest a run waits for its environment (clusters, hub, agents, watches) to be ready.
const START_DEADLINE: Duration = Duration::from_secs(90);
/// How often Prometheus scrapes in a `traffic` run, and how long the hub counts a value, in
/// scenario time (production: 15-60 s and 30 s of real time).
const TRAFFIC_SCRAPE: Duration = Duration::from_secs(60);
const TRAFFIC_TTL: Duration = Duration::from_secs(180);

/// What one run places the workloads with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// KubeFed-like: even division over the regular clusters, nothing moves, no bursting.
    Static,
    /// Nave's hub with this placement policy, rescheduling and bursting.
    Nave(PlacementPolicy),
}

impl RunKind {
    /// Every run of the comparison, in the order they run by default.
    pub const ALL: [RunKind; 5] = [
        RunKind::Nave(PlacementPolicy::WorstFit),
        RunKind::Nave(PlacementPolicy::BestFit),
        RunKind::Nave(PlacementPolicy::Spread),
        RunKind::Nave(PlacementPolicy::Proximity),
        RunKind::Static,
    ];

    /// Every run there is: [`RunKind::ALL`] and `traffic`, which needs Prometheus (the hub reads
    /// the simulated ingress traffic from it) and so is not among the default runs.
    pub const KNOWN: [RunKind; 6] = [
        RunKind::Nave(PlacementPolicy::WorstFit),
        RunKind::Nave(PlacementPolicy::BestFit),
        RunKind::Nave(PlacementPolicy::Spread),
        RunKind::Nave(PlacementPolicy::Proximity),
        RunKind::Nave(PlacementPolicy::Traffic),
        RunKind::Static,
    ];

    /// `static` or the policy's name.
    pub fn name(self) -> &'static str {
        match self {
            RunKind::Static => "static",
            RunKind::Nave(policy) => policy.as_str(),
        }
    }
}

impl std::fmt::Display for RunKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for RunKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunKind::KNOWN.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<&str> = RunKind::KNOWN.iter().map(|k| k.name()).collect();
            format!("unknown run {s:?}; expected one of {}", names.join(", "))
        })
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The scenario.
    pub plan: Plan,
    /// Scenario seconds per real second (60: a scenario minute lasts a real second).
    pub time_scale: f64,
    /// The runs, in order.
    pub runs: Vec<RunKind>,
}

/// Fastest and slowest time scales: faster than 600 the hub's and agents' own latencies (tens of
/// real milliseconds) become minutes of scenario time.
pub const TIME_SCALES: std::ops::RangeInclusive<f64> = 1.0..=600.0;

/// Runs every run of `options` in order, each in a fresh environment; `progress` sees each
/// result as it comes. Fails at the first run that fails, naming it.
pub async fn run(options: &Options, mut progress: impl FnMut(&RunResult)) -> anyhow::Result<Report> {
    if !TIME_SCALES.contains(&options.time_scale) {
        anyhow::bail!(
            "time scale {} is not between {} and {}",
            options.time_scale,
            TIME_SCALES.start(),
            TIME_SCALES.end()
        );
    }
    if options.runs.is_empty() {
        anyhow::bail!("no runs to make");
    }
    let mut runs = Vec::new();
    for kind in &options.runs {
        let started = Instant::now();
        let mut result = run_one(&options.plan, *kind, options.time_scale)
            .await
            .with_context(|| format!("the {kind} run failed"))?;
        result.wall_seconds = (started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
        progress(&result);
        runs.push(result);
    }
    Ok(Report {
        scenario: "testbed".to_owned(),
        seed: options.plan.seed,
        time_scale: options.time_scale,
        duration_s: options.plan.shape.duration.as_secs_f64(),
        runs,
    })
}

async fn run_one(plan: &Plan, kind: RunKind, scale: f64) -> anyhow::Result<RunResult> {
    let mut env = Env::start(plan, kind, scale).await?;
    let result = drive(&mut env, plan, kind, scale).await;
    env.shutdown().await;
    result
}

/// The clusters of a run, and for Nave runs the hub and the agents.
enum Env {
    Static {
        fleet: SimFleet,
    },
    Nave {
        playground: Box<Playground>,
        /// The hub's store and the playground's files; removed when dropped.
        _dir: tempfile::TempDir,
    },
}

impl Env {
    async fn start(plan: &Plan, kind: RunKind, scale: f64) -> anyhow::Result<Env> {
        match kind {
            RunKind::Static => {
                let fleet = SimFleet::start(plan.fleet(false, scale), ServeOptions::default()).await?;
                match fill_background(&fleet.clusters, plan).await {
                    Ok(()) => Ok(Env::Static { fleet }),
                    Err(e) => {
                        fleet.shutdown().await;
                        Err(e)
                    }
                }
            }
            RunKind::Nave(policy) => {
                let dir = tempfile::tempdir().context("creating the run's directory")?;
                let floor = |d: Duration, min: u64| d.max(Duration::from_millis(min));
                let by_traffic = policy == PlacementPolicy::Traffic;
                if by_traffic && crate::prometheus::find_binary().is_none() {
                    anyhow::bail!(
                        "the traffic run reads the simulated traffic through Prometheus, and `{}` is not on PATH \
                         (install the Debian package `prometheus`, or leave traffic out of --policies)",
                        crate::prometheus::BINARY
                    );
                }
                let opts = UpOptions {
                    agent_heartbeat: Some(floor(real(AGENT_HEARTBEAT, scale), 100)),
                    agent_status_interval: Some(floor(real(AGENT_STATUS, scale), 200)),
                    prometheus: by_traffic,
                    scrape_interval: Some(floor(real(TRAFFIC_SCRAPE, scale), 500)),
                    prometheus_ttl: Some(floor(real(TRAFFIC_TTL, scale), 1500)),
                    ..UpOptions::new(plan.fleet(true, scale), dir.path())
                };
                let clusters = PlaygroundClusters::start(opts).await?;
                // The other tenants are there before Nave: the agents' first reports count them.
                if let Err(e) = fill_background(&clusters.fleet.clusters, plan).await {
                    clusters.shutdown().await;
                    return Err(e);
                }
                let playground = clusters.start_nave().await?;
                if by_traffic {
                    // The clock starts once every cluster has been scraped: traffic set before
                    // then would reach the hub late, and the run would measure the scrape.
                    let ready = match &playground.prometheus {
                        Some(prometheus) => prometheus.wait_targets_up(START_DEADLINE).await,
                        None => Err(anyhow::anyhow!(
                            "{}",
                            playground.prometheus_absent.clone().unwrap_or_default()
                        )),
                    };
                    if let Err(e) = ready {
                        playground.shutdown().await;
                        anyhow::bail!("the traffic run needs Prometheus scraping every cluster: {e}");
                    }
                }
                Ok(Env::Nave {
                    playground: Box::new(playground),
                    _dir: dir,
                })
            }
        }
    }

    fn workload_clusters(&self) -> &[SimCluster] {
        match self {
            Env::Static { fleet } => &fleet.clusters,
            Env::Nave { playground, .. } => &playground.fleet.clusters,
        }
    }

    fn check_running(&mut self) -> anyhow::Result<()> {
        match self {
            Env::Static { .. } => Ok(()),
            Env::Nave { playground, .. } => playground.check_running(),
        }
    }

    async fn shutdown(self) {
        match self {
            Env::Static { fleet } => fleet.shutdown().await,
            Env::Nave { playground, .. } => playground.shutdown().await,
        }
    }
}

/// How the workloads reach the clusters.
enum Placer {
    /// MultiClusterDeployments in the management cluster.
    Nave {
        api: Box<Api<MultiClusterDeployment>>,
        /// MultiClusterJobs, for the batch jobs.
        jobs: Box<Api<MultiClusterJob>>,
        policy: PlacementPolicy,
        origin: String,
        scale: f64,
    },
    /// Deployments (and the batch jobs' Jobs) in every regular cluster.
    Static {
        clusters: Vec<Api<Deployment>>,
        scale: f64,
    },
}

impl Placer {
    async fn arrive(&self, w: &WorkloadSpec) -> anyhow::Result<()> {
        match self {
            Placer::Nave {
                api,
                policy,
                origin,
                scale,
                ..
            } => {
                let mcd = mcd(w, *policy, origin, *scale)?;
                api.create(&PostParams::default(), &mcd)
                    .await
                    .with_context(|| format!("creating MultiClusterDeployment {}", w.name))?;
            }
            Placer::Static { clusters, .. } => {
                for (api, share) in clusters
                    .iter()
                    .zip(even_split(w.replicas, clusters.len(), &w.name))
                {
                    let deployment: Deployment = serde_json::from_value(json!({
                        "apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": w.name, "namespace": NAMESPACE},
                        "spec": {"replicas": share, "selector": {"matchLabels": {WORKLOAD_LABEL: w.name}},
                                 "template": pod_template(w)},
                    }))?;
                    api.create(&PostParams::default(), &deployment)
                        .await
                        .with_context(|| format!("creating Deployment {}", w.name))?;
                }
            }
        }
        Ok(())
    }

    async fn scale(&self, name: &str, replicas: u32) -> anyhow::Result<()> {
        match self {
            Placer::Nave { api, .. } => {
                api.patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                )
                .await
                .with_context(|| format!("scaling MultiClusterDeployment {name} to {replicas}"))?;
            }
            Placer::Static { clusters, .. } => {
                for (api, share) in clusters.iter().zip(even_split(replicas, clusters.len(), name)) {
                    api.patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"replicas": share}})),
                    )
                    .await
                    .with_context(|| format!("scaling Deployment {name} to {share}"))?;
                }
            }
        }
        Ok(())
    }

    async fn leave(&self, name: &str) -> anyhow::Result<()> {
        match self {
            Placer::Nave { api, .. } => {
                api.delete(name, &DeleteParams::default())
                    .await
                    .with_context(|| format!("deleting MultiClusterDeployment {name}"))?;
            }
            Placer::Static { clusters, .. } => {
                for api in clusters {
                    api.delete(name, &DeleteParams::default())
                        .await
                        .with_context(|| format!("deleting Deployment {name}"))?;
                }
            }
        }
        Ok(())
    }
}

impl Placer {
    /// Submits a batch job: a MultiClusterJob (its pods divided by the run's policy, or
    /// worst-fit for a policy that does not apply to jobs), or in
    /// the static run a Job in every regular cluster with an even share of the completions and
    /// of the pods at once.
    async fn submit(&self, j: &JobSpec) -> anyhow::Result<()> {
        match self {
            Placer::Nave {
                jobs, policy, scale, ..
            } => {
                let policy = match policy {
                    PlacementPolicy::BestFit => "best-fit",
                    PlacementPolicy::Spread => "spread",
                    _ => "worst-fit",
                };
                let mcj: MultiClusterJob = serde_json::from_value(json!({
                    "apiVersion": "nave.dev/v1alpha1",
                    "kind": "MultiClusterJob",
                    "metadata": {"name": j.name, "namespace": NAMESPACE},
                    "spec": {
                        "placement": {"policy": policy},
                        "template": {"spec": {
                            "completions": j.completions,
                            "parallelism": j.parallelism,
                            "template": job_pod_template(j, *scale),
                        }},
                    },
                }))?;
                jobs.create(&PostParams::default(), &mcj)
                    .await
                    .with_context(|| format!("creating MultiClusterJob {}", j.name))?;
            }
            Placer::Static { clusters, scale } => {
                let completions = even_split(j.completions, clusters.len(), &j.name);
                let pods = even_split(j.parallelism, clusters.len(), &j.name);
                for ((deployments, completions), pods) in clusters.iter().zip(completions).zip(pods) {
                    let api: Api<Job> = Api::namespaced(deployments.clone().into_client(), NAMESPACE);
                    if completions == 0 {
                        continue;
                    }
                    let job: Job = serde_json::from_value(json!({
                        "apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": j.name, "namespace": NAMESPACE},
                        "spec": {"completions": completions, "parallelism": pods.clamp(1, completions),
                                 "template": job_pod_template(j, *scale)},
                    }))?;
                    api.create(&PostParams::default(), &job)
                        .await
                        .with_context(|| format!("creating Job {}", j.name))?;
                }
            }
        }
        Ok(())
    }
}

/// The pod template of a batch job: its pods run for `run` (scaled) and succeed.
fn job_pod_template(j: &JobSpec, scale: f64) -> Value {
    json!({
        "metadata": {
            "labels": {WORKLOAD_LABEL: j.name, JOB_LABEL: j.name},
            "annotations": {"sim.nave.dev/run-millis": real_millis(j.run, scale).to_string()},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "work",
                "image": IMAGE,
                "resources": {"requests": {
                    "cpu": format!("{}m", j.cpu_millis),
                    "memory": format!("{}Mi", j.memory_mib),
                }},
            }],
        },
    })
}

async fn drive(env: &mut Env, plan: &Plan, kind: RunKind, scale: f64) -> anyhow::Result<RunResult> {
    let mut clients = BTreeMap::new();
    for cluster in env.workload_clusters() {
        clients.insert(cluster.name().to_owned(), cluster.client().await?);
    }
    let names: Vec<&str> = env.workload_clusters().iter().map(|c| c.name()).collect();
    let burst = names.iter().position(|n| *n == BURST_CLUSTER);
    let monitor = Monitor::start(names.iter().map(|n| clients[*n].clone()).collect(), burst);
    monitor.wait_synced(START_DEADLINE).await?;
    let placer = match (kind, &*env) {
        (RunKind::Nave(policy), Env::Nave { playground, .. }) => {
            let client = playground.management.client().await?;
            Placer::Nave {
                api: Box::new(Api::namespaced(client.clone(), NAMESPACE)),
                jobs: Box::new(Api::namespaced(client, NAMESPACE)),
                policy,
                origin: plan.regular[0].name.clone(),
                scale,
            }
        }
        _ => Placer::Static {
            clusters: plan
                .regular
                .iter()
                .map(|c| Api::namespaced(clients[&c.name].clone(), NAMESPACE))
                .collect(),
            scale,
        },
    };

    let traffic = Traffic::new(env.workload_clusters(), plan);
    let t0 = Instant::now();
    monitor.begin(t0);
    let mut shifted = false;
    for timed in &plan.events {
        tokio::time::sleep_until(t0 + real(timed.at, scale)).await;
        env.check_running()?;
        let now = Instant::now();
        match &timed.event {
            Event::Arrive(w) => {
                monitor.desired(&w.name, w.replicas, now);
                let rates = plan.traffic(&w.name, shifted);
                traffic.set(&w.name, &rates).await?;
                monitor.traffic(&w.name, traffic.by_index(&rates), now);
                placer.arrive(w).await?;
            }
            Event::Scale { name, replicas } => {
                monitor.desired(name, *replicas, now);
                placer.scale(name, *replicas).await?;
            }
            Event::Leave { name } => {
                monitor.gone(name, now);
                traffic.set(name, &[]).await?;
                placer.leave(name).await?;
            }
            Event::JobArrives(j) => {
                monitor.job(&j.name, j.completions, now);
                placer.submit(j).await?;
            }
            Event::TrafficShifts => {
                shifted = true;
                for name in monitor.live() {
                    let rates = plan.traffic(&name, shifted);
                    traffic.set(&name, &rates).await?;
                    monitor.traffic(&name, traffic.by_index(&rates), now);
                }
            }
            Event::TenantArrives { cluster, group, pods } => {
                let client = clients.get(cluster).context("a tenant in an unknown cluster")?;
                create_tenant_pods(client, group, *pods, None, plan).await?;
            }
            Event::TenantLeaves { cluster, group } => {
                let client = clients.get(cluster).context("a tenant in an unknown cluster")?;
                remove_tenant_pods(client, group).await?;
            }
        }
    }
    tokio::time::sleep_until(t0 + real(plan.shape.duration, scale)).await;
    env.check_running()?;
    let measured = monitor.finish(Instant::now()).await;
    let (moved, counters) = match &*env {
        Env::Nave { playground, .. } => {
            let (moved, counters) = hub_figures(playground, plan).await?;
            (moved, Some(counters))
        }
        Env::Static { .. } => (0, None),
    };
    Ok(RunResult::new(kind.name(), &measured, scale, moved, counters))
}

/// The simulated ingress traffic of the regular clusters: set through each cluster's admin
/// routes, where Prometheus scrapes it in a `traffic` run.
struct Traffic {
    http: reqwest::Client,
    /// The regular clusters' API servers, in the plan's order.
    urls: Vec<String>,
    /// Each regular cluster's index among the monitor's clusters.
    index: Vec<usize>,
    /// How many clusters the monitor watches.
    watched: usize,
}

impl Traffic {
    fn new(clusters: &[SimCluster], plan: &Plan) -> Traffic {
        let position = |name: &str| clusters.iter().position(|c| c.name() == name);
        let regular: Vec<(usize, String)> = plan
            .regular
            .iter()
            .filter_map(|c| position(&c.name).map(|i| (i, clusters[i].url().to_owned())))
            .collect();
        Traffic {
            http: reqwest::Client::new(),
            urls: regular.iter().map(|(_, url)| url.clone()).collect(),
            index: regular.iter().map(|(i, _)| *i).collect(),
            watched: clusters.len(),
        }
    }

    /// Sets the requests per second arriving for Service `name` at each regular cluster
    /// (`rates` in the plan's order; empty clears them).
    async fn set(&self, name: &str, rates: &[f64]) -> anyhow::Result<()> {
        for (i, url) in self.urls.iter().enumerate() {
            let rate = rates.get(i).copied().unwrap_or(0.0);
            let answer = self
                .http
                .put(format!("{url}/_sim/v1/traffic/{NAMESPACE}/{name}"))
                .json(&json!({"requestsPerSecond": rate}))
                .send()
                .await
                .with_context(|| format!("setting the traffic of {name}"))?;
            if !answer.status().is_success() {
                anyhow::bail!("setting the traffic of {name}: {}", answer.status());
            }
        }
        Ok(())
    }

    /// `rates` (in the plan's order) by the monitor's cluster index.
    fn by_index(&self, rates: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; self.watched];
        for (rate, &i) in rates.iter().zip(&self.index) {
            out[i] = *rate;
        }
        out
    }
}

/// The pod template of a workload's Deployments.
fn pod_template(w: &WorkloadSpec) -> Value {
    json!({
        "metadata": {"labels": {WORKLOAD_LABEL: w.name}},
        "spec": {"containers": [{
            "name": "app",
            "image": IMAGE,
            "resources": {"requests": {
                "cpu": format!("{}m", w.cpu_millis),
                "memory": format!("{}Mi", w.memory_mib),
            }},
        }]},
    })
}

/// A workload as a MultiClusterDeployment: `policy`, rescheduling after a short Pending time,
/// bursting above the threshold into the burst cluster, and for `proximity` the origin cluster.
fn mcd(
    w: &WorkloadSpec,
    policy: PlacementPolicy,
    origin: &str,
    scale: f64,
) -> anyhow::Result<MultiClusterDeployment> {
    let mut placement = json!({
        "policy": policy.as_str(),
        "rescheduling": {
            "enabled": true,
            "pendingTimeout": format!("{}ms", real_millis(PENDING_TIMEOUT, scale)),
            "cooldown": format!("{}ms", real_millis(RESCHEDULING_COOLDOWN, scale)),
        },
        "bursting": {
            "threshold": BURST_THRESHOLD,
            "targets": {"matchLabels": {TIER_LABEL: "burst"}},
            "retractFirst": true,
        },
    });
    if policy == PlacementPolicy::Proximity {
        placement["proximity"] = json!({"origin": {"cluster": origin}});
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "nave.dev/v1alpha1",
        "kind": "MultiClusterDeployment",
        "metadata": {"name": w.name, "namespace": NAMESPACE},
        "spec": {
            "replicas": w.replicas,
            "placement": placement,
            "template": {"spec": {
                "selector": {"matchLabels": {WORKLOAD_LABEL: w.name}},
                "template": pod_template(w),
            }},
        },
    }))?)
}

/// Creates the other tenants' pods present at the start, bound to their nodes.
async fn fill_background(clusters: &[SimCluster], plan: &Plan) -> anyhow::Result<()> {
    for cluster in clusters {
        let groups: Vec<_> = plan
            .background
            .iter()
            .filter(|b| b.cluster == cluster.name())
            .collect();
        if groups.is_empty() {
            continue;
        }
        let client = cluster.client().await?;
        let mut nodes: Vec<String> = Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing the nodes of {}", cluster.name()))?
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        nodes.sort();
        for b in groups {
            let node = nodes
                .get(b.node)
                .with_context(|| format!("{} has no node #{}", b.cluster, b.node))?;
            create_tenant_pods(&client, &b.group, b.pods, Some(node), plan).await?;
        }
    }
    Ok(())
}

/// Creates `count` tenant pods of `group`, bound to `node` or left to the cluster's scheduler.
async fn create_tenant_pods(
    client: &kube::Client,
    group: &str,
    count: u32,
    node: Option<&str>,
    plan: &Plan,
) -> anyhow::Result<()> {
    let (cpu, memory) = tenant_pod_size(&plan.shape);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "tenant-", "namespace": NAMESPACE,
                     "labels": {TENANT_LABEL: group, FOREIGN_LABEL: "true"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": IMAGE, "resources": {"requests": {
                "cpu": format!("{cpu}m"), "memory": memory.to_string(),
            }}}],
        },
    }))?;
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let created: Vec<Result<Pod, kube::Error>> = futures::stream::iter(0..count)
        .map(|_| {
            let (api, pod) = (api.clone(), pod.clone());
            async move { api.create(&PostParams::default(), &pod).await }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for result in created {
        result.with_context(|| format!("creating a pod of tenant {group}"))?;
    }
    Ok(())
}

/// Deletes the pods of tenant `group` at once.
async fn remove_tenant_pods(client: &kube::Client, group: &str) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let pods = api
        .list(&ListParams::default().labels(&format!("{TENANT_LABEL}={group}")))
        .await
        .with_context(|| format!("listing the pods of tenant {group}"))?;
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    for pod in pods.items {
        let name = pod.metadata.name.unwrap_or_default();
        match api.delete(&name, &now).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting tenant pod {name}")),
        }
    }
    Ok(())
}

/// Replicas moved (from the REST API's placement history of every workload) and the hub's
/// counters (from `/metrics`).
async fn hub_figures(playground: &Playground, plan: &Plan) -> anyhow::Result<(u64, HubCounters)> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .context("building an HTTP client")?;
    let mut moved = 0;
    for timed in &plan.events {
        let Event::Arrive(w) = &timed.event else {
            continue;
        };
        let mut history: Vec<BTreeMap<String, u32>> = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let mut request = http
                .get(format!(
                    "{}/api/v1/placements/{NAMESPACE}/{}/history",
                    playground.hub_url, w.name
                ))
                .bearer_auth(playground.admin_token())
                .query(&[("limit", "500")]);
            if let Some(token) = &next {
                request = request.query(&[("continue", token)]);
            }
            let response = request
                .send()
                .await
                .with_context(|| format!("reading the placement history of {}", w.name))?;
            // A workload the hub never placed has no history.
            if response.status() == reqwest::StatusCode::NOT_FOUND {
                break;
            }
            let page: Value = response
                .error_for_status()
                .with_context(|| format!("reading the placement history of {}", w.name))?
                .json()
                .await
                .with_context(|| format!("decoding the placement history of {}", w.name))?;
            for item in page["items"].as_array().into_iter().flatten() {
                history.push(serde_json::from_value(item["assignment"].clone()).unwrap_or_default());
            }
            next = page["continue"].as_str().map(str::to_owned);
            if next.is_none() {
                break;
            }
        }
        // The API answers newest first.
        history.reverse();
        moved += moved_replicas(&history);
    }
    let metrics = http
        .get(format!("{}/metrics", playground.hub_metrics_url))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .context("reading the hub's /metrics")?
        .text()
        .await
        .context("reading the hub's /metrics")?;
    Ok((moved, HubCounters::parse(&metrics)))
}
