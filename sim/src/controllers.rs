//! The simulated control plane of one cluster: node setup, scheduler, ReplicaSet, Deployment,
//! StatefulSet and Job controllers, kubelet-like pod lifecycle, node lifecycle, foreign pods, the
//! kube-state-metrics view, and the usage model behind `metrics.k8s.io`.
//!
//! Every controller is an ordinary kube-rs client of the cluster's API (over the in-process
//! transport), so watches see the same event sequences a real control plane produces. Writes carry
//! the upstream field managers: `kube-controller-manager` (ReplicaSets, Deployments,
//! StatefulSets, Jobs),
//! `default-scheduler` (bindings, unschedulable status), `kubelet` (pod and node status),
//! `node-controller` (taints, evictions).
//!
//! ```text
//!                 ┌──────────── one watch per kind ────────────┐
//!  API server ──► │ Cache<Node> Cache<Pod> Cache<ReplicaSet> … │ ──► render_metrics(), resource_usage()
//!      ▲          └──────┬──────────────┬──────────────┬───────┘
//!      │          scheduler   rs / deployment /     kubelet, node lifecycle
//!      │                      statefulset / job
//!      └──────────── binding, status, create/scale/delete, taints ◄────┘
//! ```
//!
//! The decisions are plain functions, tested without a server: [`fit`] (scheduler filters and
//! messages), [`pods`] (selectors, readiness, surplus order), [`rollout`] (Deployment plan and
//! status), [`kubelet_status`] (pod status shapes), [`node_objects`] (nodes and taints),
//! [`crate::metrics`] (exposition text).
//!
//! # Admin routes
//!
//! [`ControlPlane::admin_router`] serves these (the server mounts them under `/_sim/v1`); bodies
//! and answers are JSON, errors are `{"error": <reason>, "message": <text>}` with a 4xx status.
//!
//! | method | path | body | effect |
//! |---|---|---|---|
//! | `GET` | `/nodes` | – | every node: name, ready, unschedulable, allocatable, requested, pods |
//! | `POST` | `/nodes` | `{"name"?, "pool"?, "cpu"?, "memory"?, "pods"?, "labels"?, "taints"?: [{key, value?, effect}]}` | adds a Ready node (defaults: the first pool's shape; name `<cluster>-<pool>-<n>`) |
//! | `DELETE` | `/nodes/{name}` | – | removes the node; its pods are deleted (pod GC) |
//! | `PUT` | `/nodes/{name}/ready` | `{"status": "True" \| "False" \| "Unknown"}` | sets the Ready condition; the lifecycle controller adds or removes the taints |
//! | `PUT` | `/nodes/{name}/allocatable` | `{"cpu"?: "2", "memory"?: "4Gi", "pods"?: "20", ...}` | merges into `status.allocatable` (and capacity, when larger) |
//! | `PUT` | `/nodes/{name}/usage` | `{"cpu"?: "1500m", "memory"?: "2Gi"}` (`null` clears) | overrides the node's simulated usage in the usage metrics |
//! | `PUT` | `/usage` | `{"factor": 0.8}` | sets the usage factor (usage = requests × factor) |
//! | `GET` | `/traffic` | – | the simulated ingress traffic: namespace, service, requestsPerSecond |
//! | `PUT` | `/traffic/{namespace}/{service}` | `{"requestsPerSecond": 12.5}` (0 removes) | sets the requests per second arriving at the cluster's ingress for a Service, exported as `nave_sim_ingress_requests_per_second{namespace, service}` (as an ingress controller would count them, whether or not the Service runs here) |
//! | `GET` | `/foreign-pods` | – | the foreign pods: namespace, name, node, cpu, memory |
//! | `POST` | `/foreign-pods` | `{"namespace"?: "default", "count"?: 1, "cpu"?: "0", "memory"?: "0", "nodes"?: ["n1"], "labels"?: {}}` | creates pods owned by nothing, bound to the given nodes round-robin (all nodes when absent); answers their names |
//! | `DELETE` | `/foreign-pods` | – (query `?node=n1` optional) | deletes foreign pods (all, or those on one node) |
//!
//! # Annotations read from pods
//!
//! `sim.nave.dev/start-delay-millis` or kwok's `pod-ready.stage.kwok.x-k8s.io/delay` (a Go
//! duration) override the start delay; `sim.nave.dev/fault` (`Failed`, `CrashLoopBackOff`,
//! `ImagePullBackOff`, `NeverReady`, `Succeeded`) injects failures; `sim.nave.dev/cpu-usage` and
//! `sim.nave.dev/memory-usage` set the simulated usage.
//!
//! Pods that run to completion (those of a Job, or any pod with `sim.nave.dev/exit-code`) run
//! for `sim.nave.dev/run-millis` (or kwok's `pod-complete.stage.kwok.x-k8s.io/delay`, default
//! `timing.podRunMillis`) and then exit with `sim.nave.dev/exit-code` (default 0): `Succeeded`,
//! or `Failed` (a crash loop under `restartPolicy` `OnFailure` or `Always`);
//! `sim.nave.dev/fail-indexes: "1,3-4"` makes only those completion indexes of an Indexed Job fail.

pub mod cache;
pub mod fit;
pub mod job;
pub mod kubelet_status;
pub mod node_objects;
pub mod pods;
pub mod resources;
pub mod rollout;
pub mod statefulset;

mod admin;
mod deployment;
mod events;
mod foreign;
mod kubelet;
mod nodes;
mod replicaset;
mod scheduler;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Pod};
use kube::Api;
use tokio_util::sync::CancellationToken;

use self::cache::{Cache, Key, WorkQueue};
use self::kubelet_status::IpAllocator;
use crate::config::ClusterConfig;

pub use self::foreign::{FOREIGN_LABEL, ForeignPod, ForeignPodsRequest};
pub use self::nodes::{NewNode, NodeSummary};

/// Field manager of the ReplicaSet, Deployment, StatefulSet and Job controllers.
pub const MANAGER_CONTROLLERS: &str = "kube-controller-manager";
/// Field manager of the scheduler.
pub const MANAGER_SCHEDULER: &str = "default-scheduler";
/// Field manager of the kubelet.
pub const MANAGER_KUBELET: &str = "kubelet";
/// Field manager of the node-lifecycle controller.
pub const MANAGER_NODE_CONTROLLER: &str = "node-controller";

/// Why a control-plane operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    /// The API refused or failed a request.
    #[error("{operation}: {source}")]
    Api {
        /// What was being done.
        operation: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The named object does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The request makes no sense.
    #[error("{0}")]
    Invalid(String),
}

/// The HTTP status code of an API error, if it is one.
pub(crate) fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Mutable simulation state shared by the controllers.
#[derive(Debug, Default)]
pub(crate) struct SimState {
    /// Index of the next node created by the control plane (picks its IP and pod CIDR).
    next_node_index: u32,
    /// Pod IPs.
    ips: IpAllocator,
    /// Per-node usage overrides `(cpu milli, memory milli)` set through the admin routes.
    node_usage: HashMap<String, (Option<i128>, Option<i128>)>,
    /// Usage factor (starts as `config.usage.factor`).
    usage_factor: f64,
    /// Simulated requests per second arriving at the ingress, by (namespace, Service).
    traffic: std::collections::BTreeMap<(String, String), f64>,
    /// Counters of the usage metrics.
    usage: crate::metrics::UsageCounters,
    /// The kubelet's per-pod timers.
    kubelet: kubelet::Timers,
    /// The Job controller's record of counted pods and back-offs, by Job uid.
    jobs: HashMap<String, job::Ledger>,
}

/// Everything the controllers share. Every field is read by several controllers.
pub(crate) struct Ctx {
    /// Client of the cluster's API.
    client: kube::Client,
    /// The cluster's configuration.
    config: Arc<ClusterConfig>,
    /// Nodes, indexed by nothing.
    nodes: Arc<Cache<Node>>,
    /// Pods, indexed by `spec.nodeName`.
    pods: Arc<Cache<Pod>>,
    /// ReplicaSets (owner index: Deployment uid).
    replicasets: Arc<Cache<ReplicaSet>>,
    /// Deployments.
    deployments: Arc<Cache<Deployment>>,
    /// StatefulSets.
    statefulsets: Arc<Cache<StatefulSet>>,
    /// ControllerRevisions (owner index: StatefulSet uid).
    revisions: Arc<Cache<ControllerRevision>>,
    /// PersistentVolumeClaims (StatefulSets' claims).
    claims: Arc<Cache<PersistentVolumeClaim>>,
    /// Jobs.
    jobs: Arc<Cache<Job>>,
    /// Namespaces (metrics only).
    namespaces: Arc<Cache<Namespace>>,
    /// ReplicaSet keys to sync.
    rs_queue: Arc<WorkQueue<Key>>,
    /// Deployment keys to sync.
    deploy_queue: Arc<WorkQueue<Key>>,
    /// StatefulSet keys to sync.
    sts_queue: Arc<WorkQueue<Key>>,
    /// Job keys to sync.
    job_queue: Arc<WorkQueue<Key>>,
    /// Pod keys the kubelet should look at.
    kubelet_queue: Arc<WorkQueue<Key>>,
    /// Node names the node-lifecycle controller should look at.
    node_queue: Arc<WorkQueue<String>>,
    /// Wakes the scheduler.
    scheduler_wake: Arc<tokio::sync::Notify>,
    /// Whether the scheduler's last round left a pod unschedulable (then freed room wakes it).
    some_unschedulable: Arc<std::sync::atomic::AtomicBool>,
    /// Writes Events without blocking the controllers.
    events: events::Recorder,
    /// Simulation state.
    sim: Mutex<SimState>,
    /// Stops everything.
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("cluster", &self.config.name)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    fn sim(&self) -> std::sync::MutexGuard<'_, SimState> {
        self.sim.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now() -> jiff::Timestamp {
        jiff::Timestamp::now()
    }
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
}

/// The running control plane of one simulated cluster.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    ctx: Arc<Ctx>,
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl ControlPlane {
    /// Creates the configured nodes and starts every controller; they stop when `shutdown` is
    /// cancelled.
    pub async fn start(
        client: kube::Client,
        config: Arc<ClusterConfig>,
        shutdown: CancellationToken,
    ) -> Result<ControlPlane, kube::Error> {
        let (events, events_task) = events::Recorder::start(client.clone(), shutdown.clone());
        let ctx = Arc::new(Ctx {
            client: client.clone(),
            nodes: Cache::new(None),
            pods: Cache::new(Some(node_of)),
            replicasets: Cache::new(None),
            deployments: Cache::new(None),
            statefulsets: Cache::new(None),
            revisions: Cache::new(None),
            claims: Cache::new(None),
            jobs: Cache::new(None),
            namespaces: Cache::new(None),
            rs_queue: WorkQueue::new(),
            deploy_queue: WorkQueue::new(),
            sts_queue: WorkQueue::new(),
            job_queue: WorkQueue::new(),
            kubelet_queue: WorkQueue::new(),
            node_queue: WorkQueue::new(),
            scheduler_wake: Arc::new(tokio::sync::Notify::new()),
            some_unschedulable: Arc::default(),
            events,
            sim: Mutex::new(SimState {
                usage_factor: config.usage.factor,
                ..Default::default()
            }),
            config,
            shutdown: shutdown.clone(),
        });
        scheduler::register(&ctx);
        replicaset::register(&ctx);
        deployment::register(&ctx);
        statefulset::register(&ctx);
        job::register(&ctx);
        kubelet::register(&ctx);
        nodes::register(&ctx);

        let mut tasks = vec![events_task];
        tasks.push(tokio::spawn(cache::run_informer(
            Api::all(client.clone()),
            ctx.nodes.clone(),
            shutdown.clone(),
        )));
        tasks.push(tokio::spawn(cache::run_informer(
            Api::all(client.clone()),
            ctx.pods.clone(),
            shutdown.clone(),
        )));
        tasks.push(tokio::spawn(cache::run_informer(
            Api::all(client.clone()),
            ctx.replicasets.clone(),
            shutdown.clone(),
        )));
        tasks.push(tokio::spawn(cache::run_informer(
            Api::all(client.clone()),
            ctx.deployments.clone(),
            shutdown.clone(),
        )));
        tasks.push(tokio::spawn(cache::run_informer(
            Api::all(client.clone()),
            ctx.statefulsets.clone(),
            shutdown.clone(),
        )));
        tasks.push(tokio::spawn(cache::run_informer(
            Api::all(client.clone()),
            ctx.revisions.clone(),
            shutdown.clone(),
        )));
        tasks.push(tokio::spawn(cache::run_informer(
            Api::all(client.clone()),
            ctx.claims.clone(),
            shutdown.clone(),
        )));
        tasks.push(tokio::spawn(cache::run_informer(
            Api::all(client.clone()),
            ctx.jobs.clone(),
            shutdown.clone(),
        )));
        tasks.push(tokio::spawn(cache::run_informer(
            Api::all(client.clone()),
            ctx.namespaces.clone(),
            shutdown,
        )));

        nodes::create_configured(&ctx).await?;

        tasks.push(tokio::spawn(scheduler::run(ctx.clone())));
        tasks.push(tokio::spawn(replicaset::run(ctx.clone())));
        tasks.push(tokio::spawn(deployment::run(ctx.clone())));
        tasks.push(tokio::spawn(statefulset::run(ctx.clone())));
        tasks.push(tokio::spawn(job::run(ctx.clone())));
        tasks.push(tokio::spawn(kubelet::run(ctx.clone())));
        tasks.push(tokio::spawn(nodes::run(ctx.clone())));
        if ctx.config.timing.node_heartbeat_millis > 0 {
            tasks.push(tokio::spawn(nodes::heartbeat(ctx.clone())));
        }
        Ok(ControlPlane {
            ctx,
            tasks: Arc::new(Mutex::new(tasks)),
        })
    }

    /// Waits until the control plane has seen the first list of every kind it watches.
    pub async fn wait_synced(&self) {
        self.ctx.nodes.wait_synced().await;
        self.ctx.pods.wait_synced().await;
        self.ctx.replicasets.wait_synced().await;
        self.ctx.deployments.wait_synced().await;
        self.ctx.statefulsets.wait_synced().await;
        self.ctx.revisions.wait_synced().await;
        self.ctx.claims.wait_synced().await;
        self.ctx.jobs.wait_synced().await;
        self.ctx.namespaces.wait_synced().await;
    }

    /// The kube-state-metrics-style exposition of the cluster's current state (Prometheus text),
    /// plus the simulated usage series.
    pub fn render_metrics(&self) -> String {
        let ctx = &self.ctx;
        let (nodes, pods) = (ctx.nodes.list(), ctx.pods.list());
        let (deployments, replicasets, namespaces) = (
            ctx.deployments.list(),
            ctx.replicasets.list(),
            ctx.namespaces.list(),
        );
        let mut sim = ctx.sim();
        let node_usage = sim.node_usage.clone();
        let traffic = sim.traffic.clone();
        let snapshot = crate::metrics::Snapshot {
            nodes: &nodes,
            pods: &pods,
            deployments: &deployments,
            replicasets: &replicasets,
            namespaces: &namespaces,
            usage_factor: sim.usage_factor,
            node_usage: &node_usage,
            traffic: &traffic,
        };
        crate::metrics::render(
            &snapshot,
            &mut sim.usage,
            std::time::Instant::now(),
            jiff::Timestamp::now(),
        )
    }

    /// The usage model applied to the control plane's current view of the cluster, under the
    /// current usage factor and node overrides (`PUT /usage`, `PUT /nodes/{name}/usage`): what the
    /// resource metrics API (`metrics.k8s.io`) serves.
    pub fn resource_usage(&self) -> crate::metrics::ResourceUsage {
        let ctx = &self.ctx;
        let (nodes, pods) = (ctx.nodes.list(), ctx.pods.list());
        let (factor, overrides) = {
            let sim = ctx.sim();
            (sim.usage_factor, sim.node_usage.clone())
        };
        crate::metrics::resource_usage(&nodes, &pods, factor, &overrides)
    }

    /// Admin routes of the control plane (node control, foreign pods, usage), mounted under
    /// `/_sim/v1` by the server. See the module documentation for the list.
    pub fn admin_router(&self) -> axum::Router {
        admin::router(self.ctx.clone())
    }

    /// Adds a node (see `POST /nodes`); answers its name.
    pub async fn add_node(&self, node: NewNode) -> Result<String, ControlPlaneError> {
        nodes::add_node(&self.ctx, node).await
    }

    /// Removes a node; its pods are deleted.
    pub async fn remove_node(&self, name: &str) -> Result<(), ControlPlaneError> {
        nodes::remove_node(&self.ctx, name).await
    }

    /// Sets a node's Ready condition to `True`, `False` or `Unknown`.
    pub async fn set_node_ready(&self, name: &str, status: &str) -> Result<(), ControlPlaneError> {
        nodes::set_ready(&self.ctx, name, status).await
    }

    /// Merges quantities into a node's allocatable.
    pub async fn set_node_allocatable(
        &self,
        name: &str,
        resources: BTreeMap<String, String>,
    ) -> Result<(), ControlPlaneError> {
        nodes::set_allocatable(&self.ctx, name, resources).await
    }

    /// Creates foreign pods (owned by no controller, already bound); answers their names.
    pub async fn add_foreign_pods(
        &self,
        request: ForeignPodsRequest,
    ) -> Result<Vec<String>, ControlPlaneError> {
        foreign::create(&self.ctx, request).await
    }

    /// Deletes foreign pods, all or those on `node`; answers how many.
    pub async fn remove_foreign_pods(&self, node: Option<&str>) -> Result<usize, ControlPlaneError> {
        foreign::remove(&self.ctx, node).await
    }

    /// Waits for every controller task to finish (after shutdown).
    pub async fn join(self) {
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for task in tasks {
            let _ = task.await;
        }
    }
}
