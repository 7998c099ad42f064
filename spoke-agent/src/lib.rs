//! nave-agent: the spoke of Nave in one workload cluster.
//!
//! It registers with the hub (bootstrap token -> per-cluster credential, kept in a Secret),
//! reports the cluster's capacity and pending pods, pulls the cluster's work set by revision,
//! applies it with server-side apply, prunes what it applied before and is no longer wanted, and
//! reports status. Only outbound HTTP to the hub; nothing on the hub reaches into the cluster.
//!
//! ```text
//!            reflectors (watch)                         hub /agent/v1
//!   Nodes ──┐                                  ┌──────────────────────────────┐
//!   Pods  ──┼─► capacity model, pending pods ──┼─► heartbeat loop  POST heartbeat
//!           │                                  │
//!           │         ┌── long-poll ───────────┼── work loop       GET work?after=R&wait=S
//!           │         ▼                        │
//!           │   SSA apply + prune ──► ConfigMap nave-agent-state (revision, applied objects)
//!           │         │ wake                   │
//!  Deploys ─┴─► status loop ───────────────────┼─► POST status
//!                                              └──────────────────────────────┘
//!   probe loop: round trips to the peers the hub names ──► next heartbeat (see [`probe`])
//!   usage loop: PodMetrics (metrics.k8s.io) of Nave's pods ──► next heartbeat (see [`usage`])
//!   one CancellationToken (SIGTERM / Ctrl-C) stops every loop
//! ```
//!
//! The loops record [`metrics`], served with `/healthz` and `/probe` on a small listener of their
//! own ([`Config::metrics_listen`]).
//!
//! While the hub is unreachable nothing in the cluster changes: the loops log at warn and retry
//! with exponential backoff and jitter; workloads keep running. A restarted agent reads its
//! credential and the last applied revision back, so it neither registers again nor re-applies.
#![forbid(unsafe_code)]

pub mod allowed;
pub mod apply;
pub mod backoff;
pub mod capacity;
mod error;
pub mod fence;
pub mod hub;
pub mod identity;
pub mod metrics;
mod pinned;
pub mod probe;
pub mod slim;
pub mod status;
pub mod trim;
pub mod usage;

/// The allocator's settings for the agent, as environment (mimalloc reads it when the process
/// starts); the Helm chart and the test fleet set them. Freed memory goes back to the system at
/// once instead of after a delay, and memory is committed as it is used: the agent's resident
/// memory then follows what it keeps (in a cluster of 5,000 nodes and 20,000 pods, 41 MiB
/// instead of 54 MiB with the allocator's defaults; BENCHMARKS.md).
pub const ALLOCATOR_ENV: [(&str, &str); 2] = [
    ("MIMALLOC_PURGE_DELAY", "0"),
    ("MIMALLOC_ARENA_EAGER_COMMIT", "0"),
];

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use nave_api::Coordinates;
use nave_api::wire::{
    ApplyError, Heartbeat, HeldReason, LatencySample, WorkHeld, WorkQuery, WorkSet, WorkloadRef,
};
use tokio::sync::{Notify, RwLock};
use tokio_util::sync::CancellationToken;
use tracing::{info, instrument, warn};

use crate::apply::Applier;
pub use crate::apply::{AppliedState, ObjectRef};
use crate::backoff::Backoff;
use crate::capacity::{capacity_model, pending_pods};
pub use crate::error::{Error, Result};
use crate::hub::HubClient;
use crate::identity::Identity;
use crate::metrics::AgentMetrics;
use crate::probe::RoundTrips;

/// Version of this agent, sent to the hub.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Labels of the agent's own state (credential Secret, state ConfigMap). Deliberately not the
/// ownership label: pruning must never find them.
pub(crate) fn own_state_labels() -> BTreeMap<String, String> {
    BTreeMap::from([("app.kubernetes.io/name".to_owned(), "nave-agent".to_owned())])
}

/// Command line of `nave-agent`.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "nave-agent", version, about = "Nave's agent in a workload cluster")]
pub struct Args {
    /// Base URL of the hub, e.g. `https://nave-hub.example:8443`.
    #[arg(long, env = "NAVE_HUB_URL")]
    pub hub_url: String,
    /// Name of this workload cluster at the hub.
    #[arg(long, env = "NAVE_CLUSTER_NAME")]
    pub cluster_name: String,
    /// PEM file of the CA(s) that sign the hub's certificate; the public CAs are then not
    /// trusted.
    #[arg(long, env = "NAVE_HUB_CA_FILE")]
    pub hub_ca_file: Option<PathBuf>,
    /// SHA-256 (hex) of the hub's CA certificate, as a join token shows it: the agent trusts
    /// the CA in the hub's chain that hashes to it, and no other.
    #[arg(long, env = "NAVE_HUB_CA_SHA256")]
    pub hub_ca_sha256: Option<String>,
    /// Allow an `http://` hub URL (credentials and Secrets cross the network in clear); for
    /// playgrounds and tests only.
    #[arg(long, env = "NAVE_INSECURE_HTTP")]
    pub insecure_http: bool,
    /// File holding the bootstrap token (read again at every registration).
    #[arg(long, env = "NAVE_BOOTSTRAP_TOKEN_FILE")]
    pub bootstrap_token_file: PathBuf,
    /// Kubeconfig of the workload cluster; default: in-cluster config or `$KUBECONFIG`.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the agent's own state (credential Secret, state ConfigMap).
    #[arg(long, env = "POD_NAMESPACE", default_value = "nave-system")]
    pub namespace: String,
    /// Region of the cluster, sent at registration.
    #[arg(long, env = "NAVE_REGION")]
    pub region: Option<String>,
    /// Zone of the cluster, sent at registration.
    #[arg(long, env = "NAVE_ZONE")]
    pub zone: Option<String>,
    /// Cluster label proposed at registration, `key=value`; repeatable.
    #[arg(long = "label", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Log as JSON lines instead of plain text.
    #[arg(long, env = "NAVE_LOG_JSON")]
    pub log_json: bool,
    /// Address of the listener for `/metrics` (Prometheus), `/healthz` and `/probe`.
    #[arg(long, env = "NAVE_AGENT_METRICS_LISTEN", default_value = "0.0.0.0:9090")]
    pub metrics_listen: SocketAddr,
    /// URL at which other clusters' agents reach this agent's `/probe` to measure round trips,
    /// e.g. `http://10.0.3.7:9090/probe`; without it this agent is not probed (it still probes).
    #[arg(long, env = "NAVE_PROBE_URL")]
    pub probe_url: Option<String>,
    /// Seconds between two rounds of probes to the peers the hub names.
    #[arg(long, env = "NAVE_PROBE_INTERVAL_SECONDS", default_value_t = 10)]
    pub probe_interval_seconds: u64,
    /// Name of this agent installation, labelled on every object it applies
    /// (`nave.dev/installation`); it changes and prunes only objects of its own installation.
    /// Default: the agent's namespace.
    #[arg(long, env = "NAVE_INSTALLATION")]
    pub installation: Option<String>,
    /// Kinds the agent applies, `Kind.group` or `Kind` for the core group (`Deployment.apps`,
    /// `Service`); repeatable or comma-separated. Default: what the hub sends (Deployment.apps,
    /// StatefulSet.apps, Job.batch, Service, ServiceExport.multicluster.x-k8s.io, ConfigMap, Secret,
    /// Namespace). Anything else in a work set is refused.
    #[arg(long = "allow-kind", env = "NAVE_ALLOW_KINDS", value_delimiter = ',')]
    pub allow_kinds: Vec<String>,
    /// Namespaces the agent may write to, names or prefixes ending in `*`; repeatable or
    /// comma-separated. Default: any namespace not denied.
    #[arg(
        long = "allow-namespace",
        env = "NAVE_ALLOW_NAMESPACES",
        value_delimiter = ','
    )]
    pub allow_namespaces: Vec<String>,
    /// Namespaces the agent never writes to, names or prefixes ending in `*`; repeatable or
    /// comma-separated. The agent's own namespace is always denied.
    #[arg(
        long = "deny-namespace",
        env = "NAVE_DENY_NAMESPACES",
        value_delimiter = ',',
        default_value = "kube-*"
    )]
    pub deny_namespaces: Vec<String>,
    /// A work set that would remove more than this percentage of the workloads the agent runs
    /// (and at least `--mass-prune-min-workloads` of them) is held until an admin confirms it;
    /// `100` never holds.
    #[arg(long, env = "NAVE_MASS_PRUNE_PERCENT", default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub mass_prune_percent: u8,
    /// Fewer removed workloads than this are never held as a mass prune.
    #[arg(long, env = "NAVE_MASS_PRUNE_MIN_WORKLOADS", default_value_t = 10)]
    pub mass_prune_min_workloads: u32,
    /// Extra delay on the link to a peer (`hub` for the hub), `PEER=MILLISECONDS`, added to
    /// every round trip measured on it; repeatable. Emulates distance for tests and
    /// demonstrations; never needed on real networks.
    #[arg(long = "link-latency", value_parser = parse_link_latency)]
    pub link_latency: Vec<(String, Duration)>,
}

fn parse_link_latency(s: &str) -> std::result::Result<(String, Duration), String> {
    let (peer, millis) = s
        .split_once('=')
        .ok_or_else(|| format!("expected PEER=MILLISECONDS, got {s:?}"))?;
    let millis: u64 = millis
        .parse()
        .map_err(|_| format!("expected whole milliseconds after {peer}=, got {millis:?}"))?;
    if peer.is_empty() {
        return Err(format!("expected a peer name before ={millis}"));
    }
    Ok((peer.to_owned(), Duration::from_millis(millis)))
}

fn parse_label(s: &str) -> std::result::Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

/// What the agent needs to run; [`Config::new`] has the production defaults.
#[derive(Debug, Clone)]
pub struct Config {
    /// Base URL of the hub.
    pub hub_url: String,
    /// Name of this cluster at the hub.
    pub cluster_name: String,
    /// How the hub is trusted (its CA; whether `http://` is allowed).
    pub trust: hub::HubTrust,
    /// File holding the bootstrap token.
    pub bootstrap_token_file: PathBuf,
    /// Namespace of the agent's own state.
    pub namespace: String,
    /// Labels proposed at registration.
    pub labels: BTreeMap<String, String>,
    /// Region, sent at registration.
    pub region: Option<String>,
    /// Zone, sent at registration.
    pub zone: Option<String>,
    /// Coordinates, sent at registration.
    pub coordinates: Option<Coordinates>,
    /// Heartbeat interval; `None` takes the hub's.
    pub heartbeat_interval: Option<Duration>,
    /// Longest time between two status reports.
    pub status_interval: Duration,
    /// `wait` of the work long-poll (capped by the hub).
    pub work_wait: Duration,
    /// How often the whole current set is fetched and applied again, to repair drift.
    pub resync_interval: Duration,
    /// First retry delay after a failure.
    pub retry_initial: Duration,
    /// Longest retry delay.
    pub retry_max: Duration,
    /// Where to serve `/metrics`, `/healthz` and `/probe`; `None` serves nothing (the metrics
    /// are still kept). The binary listens on `0.0.0.0:9090` unless told otherwise.
    pub metrics_listen: Option<SocketAddr>,
    /// Where other agents reach this one's `/probe`, sent in heartbeats; `None`: not probed.
    pub probe_url: Option<String>,
    /// Time between two rounds of probes.
    pub probe_interval: Duration,
    /// Extra delay per link, by peer (`hub` for the hub), added inside every round trip
    /// measured on it: emulated distance for tests and the playground.
    pub link_latency: BTreeMap<String, Duration>,
    /// The installation labelled on applied objects; `None`: the namespace.
    pub installation: Option<String>,
    /// Kinds applied (`Kind.group`); empty: [`allowed::DEFAULT_KINDS`].
    pub allow_kinds: Vec<String>,
    /// Namespace patterns written to; empty: any not denied.
    pub allow_namespaces: Vec<String>,
    /// Namespace patterns never written to; `None`: [`allowed::DEFAULT_DENIED_NAMESPACES`].
    pub deny_namespaces: Option<Vec<String>>,
    /// How much of what runs a set may remove without an admin's confirmation.
    pub prune_limits: fence::PruneLimits,
}

impl Config {
    /// The installation name its objects carry.
    pub fn installation(&self) -> &str {
        self.installation.as_deref().unwrap_or(&self.namespace)
    }

    /// What the agent applies, from the configuration.
    pub fn allowed(&self) -> allowed::Allowed {
        let mut allowed = allowed::Allowed::defaults(&self.namespace);
        if !self.allow_kinds.is_empty() {
            allowed.kinds = self.allow_kinds.iter().cloned().collect();
        }
        allowed.namespaces = self.allow_namespaces.clone();
        if let Some(denied) = &self.deny_namespaces {
            allowed.denied_namespaces = denied.clone();
        }
        allowed
    }
}

impl Config {
    /// A configuration with the production defaults.
    pub fn new(
        hub_url: impl Into<String>,
        cluster_name: impl Into<String>,
        token_file: impl Into<PathBuf>,
    ) -> Self {
        Config {
            hub_url: hub_url.into(),
            cluster_name: cluster_name.into(),
            trust: hub::HubTrust::default(),
            bootstrap_token_file: token_file.into(),
            namespace: "nave-system".to_owned(),
            labels: BTreeMap::new(),
            region: None,
            zone: None,
            coordinates: None,
            heartbeat_interval: None,
            status_interval: Duration::from_secs(30),
            work_wait: Duration::from_secs(30),
            resync_interval: Duration::from_secs(600),
            retry_initial: Duration::from_millis(500),
            retry_max: Duration::from_secs(30),
            metrics_listen: None,
            probe_url: None,
            probe_interval: Duration::from_secs(10),
            link_latency: BTreeMap::new(),
            installation: None,
            allow_kinds: Vec::new(),
            allow_namespaces: Vec::new(),
            deny_namespaces: None,
            prune_limits: fence::PruneLimits::default(),
        }
    }
}

/// What the work loop last did, read by the status loop.
#[derive(Debug, Clone, Default)]
pub struct WorkState {
    /// What is applied (persisted).
    pub state: AppliedState,
    /// The revision last attempted.
    pub attempted: Option<u64>,
    /// Objects of the last attempted (or, after a restart, the applied) set.
    pub objects: Vec<(ObjectRef, Option<WorkloadRef>)>,
    /// Failures of the last attempt.
    pub errors: Vec<ApplyError>,
    /// Why the newest set from the hub is not followed (see [`fence`]); `None` while it is.
    pub held: Option<WorkHeld>,
    /// The prune confirmation of the newest set from the hub ([`WorkSet::prune_confirmed`]).
    pub prune_confirmed: Option<u64>,
    /// The whole set this process last applied, by key: what the hub's deltas build on.
    pub known: Option<KnownSet>,
}

/// A whole work set as this process last applied it, to which a delta from the hub
/// ([`WorkSet::since`]) is applied.
#[derive(Debug, Default, Clone)]
pub struct KnownSet {
    /// Its revision.
    pub revision: u64,
    /// The store it came from.
    pub store: Option<String>,
    /// Its objects, by [`work_key`](nave_api::wire::work_key).
    pub objects: BTreeMap<String, serde_json::Value>,
}

impl KnownSet {
    /// `set` (a whole set) as known.
    fn of(set: &WorkSet) -> KnownSet {
        KnownSet {
            revision: set.revision,
            store: set.store.clone(),
            objects: set
                .objects
                .iter()
                .map(|o| (nave_api::wire::work_key(o), o.clone()))
                .collect(),
        }
    }

    /// The whole set that `delta` makes of this one; `None` when the delta does not start from
    /// it (another revision or another store).
    fn with(&self, delta: WorkSet) -> Option<WorkSet> {
        if delta.since != Some(self.revision) || delta.store != self.store {
            return None;
        }
        let mut objects = self.objects.clone();
        for key in &delta.removed {
            objects.remove(key);
        }
        objects.extend(
            delta
                .objects
                .into_iter()
                .map(|o| (nave_api::wire::work_key(&o), o)),
        );
        Some(WorkSet {
            objects: objects.into_values().collect(),
            since: None,
            removed: Vec::new(),
            ..delta
        })
    }
}

/// A running agent's shared parts.
pub struct Agent {
    config: Arc<Config>,
    identity: Identity,
    applier: Applier,
    nodes: trim::Nodes,
    pods: trim::Pods,
    workloads: status::WorkloadStores,
    kubernetes_version: Option<String>,
    work: RwLock<WorkState>,
    status_wake: Notify,
    /// Whether the hub's latest heartbeat answer said it takes status reports as changes.
    status_deltas: std::sync::atomic::AtomicBool,
    metrics: Arc<AgentMetrics>,
    round_trips: RoundTrips,
    /// The workload cluster's API server.
    client: Client,
    /// What the workloads' pods use, for the heartbeats.
    usage: usage::Sampler,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("cluster", &self.config.cluster_name)
            .finish_non_exhaustive()
    }
}

/// Entry point of the binary: logs, Kubernetes client, signals, then [`run_agent`].
pub async fn run(args: Args) -> anyhow::Result<()> {
    nave_runtime::init_tracing(args.log_json);
    let client = kube_client(args.kubeconfig.as_deref()).await?;
    let mut config = Config::new(args.hub_url, args.cluster_name, args.bootstrap_token_file);
    config.namespace = args.namespace;
    config.region = args.region;
    config.zone = args.zone;
    config.labels = args.labels.into_iter().collect();
    config.metrics_listen = Some(args.metrics_listen);
    config.probe_url = args.probe_url;
    config.probe_interval = Duration::from_secs(args.probe_interval_seconds.max(1));
    config.link_latency = args.link_latency.into_iter().collect();
    config.installation = args.installation;
    config.trust = hub::HubTrust {
        ca_file: args.hub_ca_file,
        ca_sha256: args.hub_ca_sha256,
        insecure_http: args.insecure_http,
    };
    config.allow_kinds = args.allow_kinds;
    config.allow_namespaces = args.allow_namespaces;
    config.deny_namespaces = Some(args.deny_namespaces);
    config.prune_limits = fence::PruneLimits {
        max_percent: args.mass_prune_percent,
        min_workloads: args.mass_prune_min_workloads,
    };

    let shutdown = CancellationToken::new();
    tokio::spawn(nave_runtime::cancel_on_signal(shutdown.clone()));
    run_agent(config, client, shutdown).await?;
    Ok(())
}

/// The `User-Agent` of the agent's requests, to its cluster's API server and to the hub.
pub const USER_AGENT: &str = concat!("nave-agent/", env!("CARGO_PKG_VERSION"));

/// The client of the workload cluster, as the binary builds it: from `kubeconfig`, else the
/// in-cluster config or `$KUBECONFIG`; its requests carry [`USER_AGENT`].
pub async fn kube_client(kubeconfig: Option<&std::path::Path>) -> Result<Client> {
    nave_runtime::kube_client(kubeconfig, USER_AGENT)
        .await
        .map_err(|source| Error::KubeConfig {
            source: Box::new(source),
        })
}

/// Runs the agent against `client` until `shutdown` is cancelled.
#[instrument(skip_all, fields(cluster = %config.cluster_name, hub = %config.hub_url))]
pub async fn run_agent(config: Config, client: Client, shutdown: CancellationToken) -> Result<()> {
    let config = Arc::new(config);
    let metrics = Arc::new(AgentMetrics::new());
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(addr) = config.metrics_listen {
        tasks.spawn(metrics::serve(addr, metrics.clone(), shutdown.clone()).await?);
    }
    let kubernetes_version = match client.apiserver_version().await {
        Ok(info) => Some(info.git_version),
        Err(e) => {
            warn!(error = %e, "cannot read the Kubernetes version");
            None
        }
    };
    let hub = HubClient::with_trust(&config.hub_url, &config.trust)?.with_metrics(metrics.clone());
    let applier =
        Applier::new(client.clone(), &config.namespace).with_policy(config.installation(), config.allowed());
    info!(installation = config.installation(), allowed = ?config.allowed(), "applying only what this agent allows");
    ensure_with_retries(&applier, &config, &shutdown).await?;
    let state = load_with_retries(&applier, &config, &shutdown).await?;
    info!(applied_revision = ?state.revision, objects = state.objects.len(), "resuming");
    metrics.set_applied(state.revision, state.objects.len());

    let (deployments, deployments_writer) = reflector::store::<Deployment>();
    let (stateful_sets, stateful_sets_writer) = reflector::store::<StatefulSet>();
    let (jobs, jobs_writer) = reflector::store::<Job>();
    let agent = Arc::new(Agent {
        identity: Identity::new(hub, client.clone(), config.clone(), kubernetes_version.clone()),
        applier,
        nodes: trim::Nodes::new(),
        pods: trim::Pods::new(),
        workloads: status::WorkloadStores {
            deployments,
            stateful_sets,
            jobs,
        },
        kubernetes_version,
        work: RwLock::new(WorkState {
            objects: state
                .objects
                .iter()
                .map(|(r, w)| (r.clone(), w.clone()))
                .collect(),
            state,
            ..Default::default()
        }),
        status_wake: Notify::new(),
        status_deltas: std::sync::atomic::AtomicBool::new(false),
        round_trips: RoundTrips::new(metrics.clone()),
        usage: usage::Sampler::new(),
        client: client.clone(),
        metrics,
        config,
    });

    // Reflectors: their watch events only wake the status loop; the heartbeat reads snapshots.
    let wake = |agent: &Arc<Agent>| {
        let agent = agent.clone();
        move || agent.status_wake.notify_one()
    };
    // Nodes and pods are kept as summaries, not whole (see `trim`). A node's change shows in
    // the next heartbeat; it changes no status report.
    let nodes_agent = agent.clone();
    let stream = watcher(
        Api::<slim::SlimNode>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .map(move |event| {
        if let Ok(event) = &event {
            nodes_agent.nodes.apply(event);
        }
        event.map(|_| ())
    })
    .boxed();
    tasks.spawn(drain_items(stream, shutdown.clone(), "nodes"));
    let pod_wake = wake(&agent);
    let pods_agent = agent.clone();
    let stream = watcher(
        Api::<slim::SlimPod>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .map(move |event| {
        if let Ok(event) = &event
            && pods_agent.pods.apply(event)
        {
            pod_wake();
        }
        event.map(|_| ())
    })
    .boxed();
    tasks.spawn(drain_items(stream, shutdown.clone(), "pods"));
    let selector = Applier::owned_selector(agent.config.installation());
    let stream = reflector::reflector(
        deployments_writer,
        watcher(
            Api::<Deployment>::all(client.clone()),
            watcher::Config::default().labels(&selector),
        ),
    );
    tasks.spawn(drain(
        stream.default_backoff().boxed(),
        shutdown.clone(),
        "deployments",
        Some(Box::new(wake(&agent))),
    ));
    // StatefulSets likewise; not waited for below: an agent whose role predates them (no
    // list/watch on statefulsets) still starts, and reports no StatefulSet status.
    let stream = reflector::reflector(
        stateful_sets_writer,
        watcher(
            Api::<StatefulSet>::all(client.clone()),
            watcher::Config::default().labels(&selector),
        ),
    );
    tasks.spawn(drain(
        stream.default_backoff().boxed(),
        shutdown.clone(),
        "statefulsets",
        Some(Box::new(wake(&agent))),
    ));
    // Jobs likewise (an agent whose role predates them reports no Job status).
    let stream = reflector::reflector(
        jobs_writer,
        watcher(
            Api::<Job>::all(client.clone()),
            watcher::Config::default().labels(&selector),
        ),
    );
    tasks.spawn(drain(
        stream.default_backoff().boxed(),
        shutdown.clone(),
        "jobs",
        Some(Box::new(wake(&agent))),
    ));

    let ready = async {
        agent.nodes.wait_until_ready().await;
        agent.pods.wait_until_ready().await;
        agent
            .workloads
            .deployments
            .wait_until_ready()
            .await
            .map_err(|_| Error::ReflectorStopped("deployments"))
    };
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        ready = ready => ready?,
    }

    tasks.spawn(log_exit(
        "heartbeat",
        heartbeat_loop(agent.clone(), shutdown.clone()),
    ));
    tasks.spawn(log_exit("work", work_loop(agent.clone(), shutdown.clone())));
    tasks.spawn(log_exit(
        "probe",
        probe::probe_loop(agent.clone(), shutdown.clone()),
    ));
    tasks.spawn(log_exit(
        "status",
        status::status_loop(agent.clone(), shutdown.clone()),
    ));
    tasks.spawn(log_exit(
        "usage",
        usage::usage_loop(agent.clone(), shutdown.clone()),
    ));
    while tasks.join_next().await.is_some() {}
    info!("stopped");
    Ok(())
}

async fn ensure_with_retries(applier: &Applier, config: &Config, shutdown: &CancellationToken) -> Result<()> {
    let mut backoff = Backoff::new(config.retry_initial, config.retry_max);
    loop {
        match applier.ensure_own_namespace().await {
            Ok(()) => return Ok(()),
            Err(e) => {
                let delay = backoff.next_delay();
                warn!(error = %e, namespace = %config.namespace, retry_in_ms = delay.as_millis() as u64,
                    "cannot ensure the agent namespace");
                tokio::select! {
                    () = shutdown.cancelled() => return Err(Error::ShuttingDown),
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

async fn load_with_retries(
    applier: &Applier,
    config: &Config,
    shutdown: &CancellationToken,
) -> Result<AppliedState> {
    let mut backoff = Backoff::new(config.retry_initial, config.retry_max);
    loop {
        match applier.load_state().await {
            Ok(state) => return Ok(state),
            // A state that cannot be decoded is not going to improve: start afresh (pruning by
            // label still finds what was applied before).
            Err(e @ Error::Decode { .. }) => {
                warn!(error = %e, "discarding unreadable agent state");
                return Ok(AppliedState::default());
            }
            Err(e) => {
                let delay = backoff.next_delay();
                warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "cannot read the agent state");
                tokio::select! {
                    () = shutdown.cancelled() => return Err(Error::ShuttingDown),
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

type BoxedEvents<K> =
    futures::stream::BoxStream<'static, std::result::Result<watcher::Event<K>, watcher::Error>>;

/// Drives a reflector stream until shutdown; `on_event` runs on every event.
async fn drain<K: Send + 'static>(
    mut stream: BoxedEvents<K>,
    shutdown: CancellationToken,
    kind: &'static str,
    on_event: Option<Box<dyn Fn() + Send + Sync>>,
) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            event = stream.next() => match event {
                Some(Ok(_)) => if let Some(f) = &on_event { f() },
                // The stream backs off by itself; the store keeps its last view meanwhile.
                Some(Err(e)) => warn!(kind, error = %e, "watch failed"),
                None => return,
            }
        }
    }
}

async fn drain_items(
    mut stream: futures::stream::BoxStream<'static, std::result::Result<(), watcher::Error>>,
    shutdown: CancellationToken,
    kind: &'static str,
) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            item = stream.next() => match item {
                Some(Ok(())) => {}
                Some(Err(e)) => warn!(kind, error = %e, "watch failed"),
                None => return,
            }
        }
    }
}

async fn log_exit(name: &'static str, task: impl Future<Output = Result<()>>) {
    if let Err(e) = task.await {
        warn!(task = name, error = %e, "loop stopped");
    }
}

/// Sends the capacity model and the round trips every heartbeat interval, and takes the peers to
/// probe from the answer; on failure retries sooner, with backoff, never faster than the backoff
/// allows.
#[instrument(skip_all, fields(cluster = %agent.config.cluster_name))]
async fn heartbeat_loop(agent: Arc<Agent>, shutdown: CancellationToken) -> Result<()> {
    let mut backoff = Backoff::new(agent.config.retry_initial, agent.config.retry_max);
    let hub_delay = agent
        .config
        .link_latency
        .get(LatencySample::HUB)
        .copied()
        .unwrap_or_default();
    loop {
        let heartbeat = {
            let nodes = agent.nodes.state();
            let pods = agent.pods.state();
            let (pending, omitted) = pending_pods(pods.iter().map(|p| p.as_ref()));
            agent
                .metrics
                .set_pending_pods((pending.len() as u64).saturating_add(omitted));
            Heartbeat {
                cluster_name: Some(agent.config.cluster_name.clone()),
                agent_version: AGENT_VERSION.to_owned(),
                kubernetes_version: agent.kubernetes_version.clone(),
                capacity: capacity_model(nodes.iter().map(|n| n.as_ref()), pods.iter().map(|p| p.as_ref())),
                pending_pods: pending,
                pending_pods_omitted: omitted,
                usage: None,
                workload_usage: agent.usage.current(),
                latency_samples: agent.round_trips.samples(),
                probe_url: agent.config.probe_url.clone(),
                applied_revision: agent.work.read().await.state.revision,
                work_held: agent.work.read().await.held.clone(),
            }
        };
        let sent = agent
            .identity
            .call(&shutdown, |credential| {
                let heartbeat = &heartbeat;
                let hub = agent.identity.hub();
                async move {
                    let (rtt, answer) = hub.heartbeat(&credential, heartbeat).await?;
                    // Emulated distance to the hub counts in the round trip like a real one.
                    Ok((rtt + hub_delay, answer))
                }
            })
            .await;
        match sent {
            Ok((rtt, answer)) => {
                agent.metrics.record_heartbeat(std::time::SystemTime::now());
                agent.round_trips.record(LatencySample::HUB, rtt);
                agent.round_trips.set_peers(answer.peers);
                agent
                    .status_deltas
                    .store(answer.status_deltas, std::sync::atomic::Ordering::Relaxed);
                backoff.reset();
                let interval = agent.identity.heartbeat_interval(&shutdown).await?;
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    () = tokio::time::sleep(interval) => {}
                }
            }
            Err(Error::ShuttingDown) => return Ok(()),
            Err(e) => {
                warn!(error = %e, hub = %agent.config.hub_url, "heartbeat failed; workloads stay as they are");
                if let Err(Error::ShuttingDown) = agent.identity.back_off(&mut backoff, &shutdown).await {
                    return Ok(());
                }
            }
        }
    }
}

/// Long-polls for work and applies each new revision. On failure the applied revision stays, so
/// the next poll returns the current set at once and the apply is retried after a backoff.
#[instrument(skip_all, fields(cluster = %agent.config.cluster_name))]
async fn work_loop(agent: Arc<Agent>, shutdown: CancellationToken) -> Result<()> {
    let mut backoff = Backoff::new(agent.config.retry_initial, agent.config.retry_max);
    let mut last_full = tokio::time::Instant::now();
    loop {
        let (applied, held, prune_confirmed, known) = {
            let work = agent.work.read().await;
            let known = work.known.as_ref().map(|k| k.revision);
            (
                work.state.revision,
                work.held.clone(),
                work.prune_confirmed,
                known,
            )
        };
        // Asking without `after` returns the current set at once: a periodic re-apply repairs
        // objects someone changed or deleted behind the agent's back.
        let resync = last_full.elapsed() >= agent.config.resync_interval;
        let wait = match agent.identity.work_wait(&shutdown).await {
            Ok(wait) => wait,
            Err(Error::ShuttingDown) => return Ok(()),
            Err(e) => return Err(e),
        };
        // While a set is held, wait for the next one, or for that one to become complete (which
        // releases a set held for the store's sake; "no work" is released only by a set, a
        // mass prune by a confirmation).
        let query = WorkQuery {
            after: if resync {
                None
            } else {
                Some(held.as_ref().map(|h| h.revision).or(applied).unwrap_or(0))
            },
            wait: Some(wait),
            cluster: Some(agent.config.cluster_name.clone()),
            held: held
                .as_ref()
                .is_some_and(|h| matches!(h.reason, HeldReason::StoreChanged | HeldReason::RevisionWentBack)),
            // Always sent (`0`: none), so the hub answers when it changes.
            prune_confirmed: Some(prune_confirmed.unwrap_or(0)),
            // What changed is enough when this process holds the whole set it applied last.
            delta: !resync && held.is_none() && known.is_some() && known == applied,
        };
        let polled = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            polled = agent.identity.call(&shutdown, |credential| {
                let query = &query;
                let hub = agent.identity.hub();
                async move { hub.work(&credential, query).await }
            }) => polled,
        };
        let retry = match polled {
            Ok(None) => {
                backoff.reset();
                false
            }
            Ok(Some(set)) => {
                if resync {
                    last_full = tokio::time::Instant::now();
                }
                let set = match set.since {
                    None => Some(set),
                    Some(_) => agent.work.read().await.known.as_ref().and_then(|k| k.with(set)),
                };
                if let Some(set) = set.as_ref().filter(|s| s.cluster != agent.config.cluster_name) {
                    warn!(got = %set.cluster, "the hub sent another cluster's work; ignoring it");
                    true
                } else if let Some(set) = set {
                    if hold_set(&agent, &set).await {
                        false
                    } else {
                        !apply_set(&agent, &set, resync).await
                    }
                } else {
                    // A delta from another revision than the one held: ask for the whole set.
                    warn!("the hub sent changes to a set this agent does not hold; asking for the whole set");
                    agent.work.write().await.known = None;
                    true
                }
            }
            Err(Error::ShuttingDown) => return Ok(()),
            Err(e) => {
                warn!(error = %e, hub = %agent.config.hub_url, "polling for work failed; workloads stay as they are");
                true
            }
        };
        if retry {
            if let Err(Error::ShuttingDown) = agent.identity.back_off(&mut backoff, &shutdown).await {
                return Ok(());
            }
        } else {
            backoff.reset();
        }
    }
}

/// Whether `set` is held rather than applied (see [`fence`]); records why, or that nothing is
/// held any more, for the heartbeat and the metrics.
async fn hold_set(agent: &Agent, set: &WorkSet) -> bool {
    let mut work = agent.work.write().await;
    let held = fence::hold(&work.state, set, agent.config.prune_limits);
    work.prune_confirmed = set.prune_confirmed;
    match (&held, &work.held) {
        (Some(now), before) if before.as_ref().map(|b| b.reason) != Some(now.reason) => {
            warn!(
                reason = now.reason.as_str(),
                revision = now.revision,
                "{}",
                now.message
            );
        }
        (None, Some(before)) => {
            info!(
                reason = before.reason.as_str(),
                revision = set.revision,
                "following the hub's work again"
            );
        }
        _ => {}
    }
    agent.metrics.set_held(held.as_ref().map(|h| h.reason));
    let is_held = held.is_some();
    work.held = held;
    is_held
}

/// Applies a set (every object with `full`, else what changed: see [`Applier::apply`]),
/// persists the state, wakes the status loop; answers whether it all worked.
async fn apply_set(agent: &Agent, set: &nave_api::wire::WorkSet, full: bool) -> bool {
    let mut state = agent.work.read().await.state.clone();
    let started = tokio::time::Instant::now();
    let outcome = agent.applier.apply(set, &mut state, full).await;
    agent.metrics.observe_apply(started.elapsed(), &outcome.errors);
    agent.metrics.set_applied(state.revision, state.objects.len());
    let mut ok = !outcome.blocked;
    if let Err(e) = agent.applier.save_state(&state).await {
        // Unsaved, a restart would re-apply (harmless) and prune by label (still correct); retry.
        warn!(error = %e, "cannot persist the applied state");
        ok = false;
    }
    {
        let mut work = agent.work.write().await;
        // The base of the next delta: the set as applied, or (not applied) the one before.
        if state.revision == Some(set.revision) {
            work.known = Some(KnownSet::of(set));
        } else if work.known.as_ref().map(|k| k.revision) != state.revision {
            work.known = None;
        }
        work.state = state;
        work.attempted = Some(outcome.revision);
        work.objects = outcome.objects;
        work.errors = outcome.errors;
    }
    agent.status_wake.notify_one();
    ok
}

#[cfg(test)]
mod known_tests {
    use serde_json::json;

    use super::*;

    fn config_map(name: &str, value: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "shop"}, "data": {"v": value}})
    }

    fn whole(revision: u64, objects: Vec<serde_json::Value>) -> WorkSet {
        WorkSet {
            cluster: "eu-1".into(),
            revision,
            objects,
            store: Some("a".into()),
            ..WorkSet::default()
        }
    }

    #[test]
    fn a_delta_on_the_set_it_starts_from_gives_the_whole_new_set() {
        let known = KnownSet::of(&whole(3, vec![config_map("a", "1"), config_map("b", "1")]));
        let delta = WorkSet {
            since: Some(3),
            removed: vec!["ConfigMap/shop/a".into()],
            ..whole(5, vec![config_map("b", "2"), config_map("c", "1")])
        };
        assert_eq!(
            known.with(delta.clone()),
            Some(whole(5, vec![config_map("b", "2"), config_map("c", "1")])),
            "a removed, b changed, c added"
        );
        for (what, wrong) in [
            (
                "another revision",
                WorkSet {
                    since: Some(4),
                    ..delta.clone()
                },
            ),
            (
                "another store",
                WorkSet {
                    store: Some("b".into()),
                    ..delta.clone()
                },
            ),
            ("a whole set", WorkSet { since: None, ..delta }),
        ] {
            assert_eq!(known.with(wrong), None, "a delta from {what} is not applied");
        }
    }
}
