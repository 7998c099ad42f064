//! The hub's Prometheus metrics, served as OpenMetrics text on `GET /metrics`.
//!
//! ```text
//!  controller::mcd ── observe_mcd / forget_mcd ─► nave_mcd_{desired,ready}_replicas
//!        │        ── time_scheduling ───────────► nave_scheduling_duration_seconds
//!        │        ── record_placement_change ───► nave_placements_total
//!        └─────── record_reconcile_error ───────► nave_reconcile_errors_total
//!  rescheduling, bursting, failover ── record_* ─► nave_{reschedules,bursts,failovers}_total
//!  usage::Refresher ── QueryObserver::query_done ─► nave_prometheus_quer{ies,y_errors}_total
//!
//!  GET /metrics ─► store.list_clusters() ─► nave_cluster_* (computed per scrape)
//!               ├► UsageCache::fresh()  ─► nave_cluster_used
//!               └► the registry above     ─► OpenMetrics text
//! ```
//!
//! The per-cluster families are computed at scrape time from the store's cluster records, so
//! heartbeat ages are current and a cluster that leaves the store leaves the output. The amounts
//! are the agent's totals over the schedulable nodes (ready and not cordoned), the same numbers
//! placement counts with; readiness follows placement's rule (a heartbeat within the grace
//! period, [`crate::placement::inputs::fleet_cluster`]).
//!
//! Measured usage (`nave_cluster_used`) comes from Prometheus ([`crate::usage`]) when the
//! hub reads it: the fresh values at scrape time, absent when there are none.
//!
//! Every metric is documented in `docs/metrics.md`.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use nave_api::MultiClusterDeploymentStatus;
use nave_api::wire::{self, WorkloadRef};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use serde::Deserialize;
use serde_json::json;
use tracing::warn;

use crate::placement::inputs;
use crate::store::ClusterRecord;
use crate::store::Store;
use crate::usage::{QueryObserver, Usage, UsageCache};

/// Path of the metrics endpoint.
pub const METRICS_PATH: &str = "/metrics";

/// Content type of the OpenMetrics text format.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds (seconds) of the scheduling-duration buckets: a decision over a small fleet takes
/// well under a millisecond, a large fleet with many constraints can take a good part of a second.
const SCHEDULING_BUCKETS: [f64; 13] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// A float gauge (amounts, ratios, ages).
type FloatGauge = Gauge<f64, AtomicU64>;

/// Labels of the per-MCD, per-cluster gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct McdLabels {
    namespace: String,
    name: String,
    cluster: String,
}

/// Labels of the per-MCD gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkloadLabels {
    namespace: String,
    name: String,
}

/// Labels of the per-cluster gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    cluster: String,
}

/// Labels of the Prometheus query counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SignalLabels {
    signal: &'static str,
}

/// Labels of the unplaced-demand gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DemandLabels {
    resource: &'static str,
}

/// Labels of the provisioner webhook's request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: String,
}

/// Labels of the per-cluster, per-resource gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    cluster: String,
    resource: &'static str,
}

/// The hub's metrics: a registry of the metrics updated as things happen, and the methods that
/// update them. One per hub, shared by the parts that record and by [`router`].
#[derive(Debug)]
pub struct HubMetrics {
    registry: Registry,
    scheduling_duration: Histogram,
    placements: Counter,
    reschedules: Counter,
    bursts: Counter,
    failovers: Counter,
    reconcile_errors: Counter,
    scrape_errors: Counter,
    leader: Gauge,
    leader_transitions: Counter,
    term: Gauge,
    mcd_desired: Family<McdLabels, Gauge>,
    mcd_ready: Family<McdLabels, Gauge>,
    mcd_failing: Family<McdLabels, Gauge>,
    mcd_traffic_locality: Family<WorkloadLabels, FloatGauge>,
    prometheus_queries: Family<SignalLabels, Counter>,
    prometheus_errors: Family<SignalLabels, Counter>,
    unplaced_replicas: Gauge,
    unplaced_demand: Family<DemandLabels, FloatGauge>,
    provisioner_requests: Family<CodeLabels, Counter>,
    /// The clusters each MCD has series for, so that clusters it left and deleted MCDs lose
    /// theirs. The lock is held across the family updates so that an observe and a forget of
    /// the same MCD cannot interleave.
    mcd_clusters: Mutex<HashMap<WorkloadRef, BTreeSet<String>>>,
}

impl Default for HubMetrics {
    fn default() -> Self {
        HubMetrics::new()
    }
}

impl HubMetrics {
    /// A registry with every hub metric at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let scheduling_duration = Histogram::new(SCHEDULING_BUCKETS);
        registry.register_with_unit(
            "nave_scheduling_duration",
            "Time of one placement decision (the decide step of a MultiClusterDeployment reconcile)",
            Unit::Seconds,
            scheduling_duration.clone(),
        );
        let placements = Counter::default();
        registry.register(
            "nave_placements",
            "Placement decisions that changed a MultiClusterDeployment's placement",
            placements.clone(),
        );
        let reschedules = Counter::default();
        registry.register(
            "nave_reschedules",
            "Replicas moved off a cluster by rescheduling",
            reschedules.clone(),
        );
        let bursts = Counter::default();
        registry.register(
            "nave_bursts",
            "Burst placements: replicas sent to burst clusters because the preferred ones were full",
            bursts.clone(),
        );
        let failovers = Counter::default();
        registry.register(
            "nave_failovers",
            "Failovers: replicas moved away from a cluster that stopped being ready",
            failovers.clone(),
        );
        let reconcile_errors = Counter::default();
        registry.register(
            "nave_reconcile_errors",
            "MultiClusterDeployment reconciles that failed and were retried",
            reconcile_errors.clone(),
        );
        let scrape_errors = Counter::default();
        registry.register(
            "nave_hub_scrape_errors",
            "Scrapes of /metrics that could not read the clusters from the store (the per-cluster \
             families were left out)",
            scrape_errors.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "nave_hub_leader",
            "1 while this hub replica leads (runs the controllers and writes placements and work), else 0",
            leader.clone(),
        );
        let leader_transitions = Counter::default();
        registry.register(
            "nave_hub_leader_transitions",
            "Times the hub's leader changed, as this replica saw the Lease change holder (its own \
             takeovers included)",
            leader_transitions.clone(),
        );
        let term = Gauge::default();
        registry.register(
            "nave_hub_term",
            "The term this replica leads in (the Lease's transitions, claimed in the store); 0 while it follows",
            term.clone(),
        );
        let mcd_desired = Family::<McdLabels, Gauge>::default();
        registry.register(
            "nave_mcd_desired_replicas",
            "Replicas of a MultiClusterDeployment placed in a cluster",
            mcd_desired.clone(),
        );
        let mcd_ready = Family::<McdLabels, Gauge>::default();
        registry.register(
            "nave_mcd_ready_replicas",
            "Ready replicas of a MultiClusterDeployment in a cluster, as its agent reported",
            mcd_ready.clone(),
        );
        let mcd_failing = Family::<McdLabels, Gauge>::default();
        registry.register(
            "nave_mcd_failing",
            "1 while a cluster's agent reports a MultiClusterDeployment's objects not applied or its Deployment unable to progress, else 0",
            mcd_failing.clone(),
        );
        let mcd_traffic_locality = Family::<WorkloadLabels, FloatGauge>::default();
        registry.register(
            "nave_mcd_traffic_locality",
            "Policy traffic: share of a MultiClusterDeployment's requests its placement serves in the cluster they arrive at (0 to 1; each replica serving an equal part)",
            mcd_traffic_locality.clone(),
        );
        let prometheus_queries = Family::<SignalLabels, Counter>::default();
        registry.register(
            "nave_prometheus_queries",
            "Usage queries sent to Prometheus, by signal (cpu, memory, traffic)",
            prometheus_queries.clone(),
        );
        let prometheus_errors = Family::<SignalLabels, Counter>::default();
        registry.register(
            "nave_prometheus_query_errors",
            "Usage queries that failed (no answer, an error, or an answer not keyed by cluster); \
             the last values stay until their TTL",
            prometheus_errors.clone(),
        );
        let unplaced_replicas = Gauge::default();
        registry.register(
            "nave_unplaced_replicas",
            "Replicas of MultiClusterDeployments that fit in no cluster (policy everywhere left out), \
             as the leader's latest plans left them",
            unplaced_replicas.clone(),
        );
        let unplaced_demand = Family::<DemandLabels, FloatGauge>::default();
        registry.register(
            "nave_unplaced_demand",
            "What the replicas that fit in no cluster request together: resource=\"cpu\" in cores, \
             \"memory\" in bytes",
            unplaced_demand.clone(),
        );
        let provisioner_requests = Family::<CodeLabels, Counter>::default();
        registry.register(
            "nave_provisioner_webhook_requests",
            "Requests to the provisioner webhook (--provisioner-webhook), by HTTP status; \
             code=\"error\" when no answer came",
            provisioner_requests.clone(),
        );
        HubMetrics {
            registry,
            unplaced_replicas,
            unplaced_demand,
            provisioner_requests,
            scheduling_duration,
            placements,
            reschedules,
            bursts,
            failovers,
            reconcile_errors,
            scrape_errors,
            leader,
            leader_transitions,
            term,
            mcd_desired,
            mcd_ready,
            mcd_failing,
            mcd_traffic_locality,
            prometheus_queries,
            prometheus_errors,
            mcd_clusters: Mutex::default(),
        }
    }

    /// Runs the placement decision `decide`, observing how long it took.
    pub fn time_scheduling<T>(&self, decide: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let decision = decide();
        self.observe_scheduling(started.elapsed());
        decision
    }

    /// Observes one placement decision that took `took`.
    pub fn observe_scheduling(&self, took: Duration) {
        self.scheduling_duration.observe(took.as_secs_f64());
    }

    /// Counts a placement decision that changed an MCD's placement.
    pub fn record_placement_change(&self) {
        self.placements.inc();
    }

    /// Counts `replicas` replicas moved by rescheduling (to be called by the rescheduler).
    pub fn record_reschedule(&self, replicas: u64) {
        self.reschedules.inc_by(replicas);
    }

    /// Counts a burst: an MCD's placement started using burst clusters (to be called by bursting).
    pub fn record_burst(&self) {
        self.bursts.inc();
    }

    /// Counts a failover: an MCD's replicas moved away from a cluster that stopped being ready.
    pub fn record_failover(&self) {
        self.failovers.inc();
    }

    /// Records whether this replica leads, and in which term (`0`: it follows).
    pub fn set_leading(&self, term: u64) {
        self.leader.set(i64::from(term > 0));
        self.term.set(i64::try_from(term).unwrap_or(i64::MAX));
    }

    /// Counts a change of the hub's leader.
    pub fn record_leader_transition(&self) {
        self.leader_transitions.inc();
    }

    /// Creates `signal`'s query counters at zero, so that they are there before the first query.
    pub fn prometheus_signal(&self, signal: &'static str) {
        let labels = SignalLabels { signal };
        let _ = self.prometheus_queries.get_or_create(&labels);
        let _ = self.prometheus_errors.get_or_create(&labels);
    }

    /// Counts one Prometheus query of `signal`, and whether it failed.
    pub fn record_prometheus_query(&self, signal: &'static str, failed: bool) {
        let labels = SignalLabels { signal };
        self.prometheus_queries.get_or_create(&labels).inc();
        if failed {
            self.prometheus_errors.get_or_create(&labels).inc();
        }
    }

    /// Sets the replicas that fit nowhere and what they request (millicores, bytes).
    pub fn set_unplaced(&self, replicas: u64, cpu_millis: u64, memory_bytes: u64) {
        self.unplaced_replicas
            .set(i64::try_from(replicas).unwrap_or(i64::MAX));
        let amounts = [
            ("cpu", cpu_millis as f64 / 1000.0),
            ("memory", memory_bytes as f64),
        ];
        for (resource, value) in amounts {
            self.unplaced_demand
                .get_or_create(&DemandLabels { resource })
                .set(value);
        }
    }

    /// Counts a request to the provisioner webhook by its answer's status (`error`: none).
    pub fn record_provisioner_request(&self, code: &str) {
        self.provisioner_requests
            .get_or_create(&CodeLabels {
                code: code.to_owned(),
            })
            .inc();
    }

    /// Counts a failed reconcile.
    pub fn record_reconcile_error(&self) {
        self.reconcile_errors.inc();
    }

    /// Sets an MCD's desired and ready replicas per cluster from the status the controller
    /// writes; clusters no longer in it lose their series.
    pub fn observe_mcd(
        &self,
        workload: &WorkloadRef,
        status: &MultiClusterDeploymentStatus,
        failing: &BTreeSet<String>,
    ) {
        let mut known = self.mcd_clusters.lock().unwrap_or_else(|e| e.into_inner());
        let now: BTreeSet<String> = status.clusters.iter().map(|c| c.name.clone()).collect();
        let before = known.remove(workload).unwrap_or_default();
        for gone in before.difference(&now) {
            self.remove_mcd_series(workload, gone);
        }
        for cluster in &status.clusters {
            let labels = mcd_labels(workload, &cluster.name);
            self.mcd_desired
                .get_or_create(&labels)
                .set(i64::from(cluster.desired));
            self.mcd_ready
                .get_or_create(&labels)
                .set(i64::from(cluster.ready));
            self.mcd_failing
                .get_or_create(&labels)
                .set(i64::from(failing.contains(&cluster.name)));
        }
        if !now.is_empty() {
            known.insert(workload.clone(), now);
        }
    }

    /// Sets the share of an MCD's requests its placement serves where they arrive; `None` (not
    /// placed by traffic, or no traffic measured) removes the series.
    pub fn observe_traffic_locality(&self, workload: &WorkloadRef, locality: Option<f64>) {
        let labels = WorkloadLabels {
            namespace: workload.namespace.clone(),
            name: workload.name.clone(),
        };
        match locality {
            Some(share) => {
                self.mcd_traffic_locality.get_or_create(&labels).set(share);
            }
            None => {
                self.mcd_traffic_locality.remove(&labels);
            }
        }
    }

    /// Removes every MCD's traffic locality (a new term sets them again as it plans).
    pub fn forget_traffic_locality(&self) {
        self.mcd_traffic_locality.clear();
    }

    /// Removes every series of a deleted MCD.
    pub fn forget_mcd(&self, workload: &WorkloadRef) {
        self.observe_traffic_locality(workload, None);
        let mut known = self.mcd_clusters.lock().unwrap_or_else(|e| e.into_inner());
        for cluster in known.remove(workload).unwrap_or_default() {
            self.remove_mcd_series(workload, &cluster);
        }
    }

    fn remove_mcd_series(&self, workload: &WorkloadRef, cluster: &str) {
        let labels = mcd_labels(workload, cluster);
        self.mcd_desired.remove(&labels);
        self.mcd_ready.remove(&labels);
        self.mcd_failing.remove(&labels);
    }

    /// The OpenMetrics text of every hub metric, with the per-cluster families computed from
    /// `clusters` (`None`: the store could not be read; the families are left out and the
    /// failure counted) as of `now`.
    pub fn encode(
        &self,
        clusters: Option<&[ClusterRecord]>,
        now: jiff::Timestamp,
        grace: Duration,
    ) -> Result<String, std::fmt::Error> {
        self.encode_with_usage(clusters, &Usage::new(), now, grace)
    }

    /// As [`HubMetrics::encode`], with `nave_cluster_used` from the measured `usage` of the
    /// clusters in `clusters`.
    pub fn encode_with_usage(
        &self,
        clusters: Option<&[ClusterRecord]>,
        usage: &Usage,
        now: jiff::Timestamp,
        grace: Duration,
    ) -> Result<String, std::fmt::Error> {
        if clusters.is_none() {
            self.scrape_errors.inc();
        }
        let mut text = String::new();
        encode_registry(&mut text, &self.registry)?;
        if let Some(clusters) = clusters {
            encode_registry(&mut text, &cluster_registry(clusters, usage, now, grace))?;
        }
        encode_eof(&mut text)?;
        Ok(text)
    }
}

fn mcd_labels(workload: &WorkloadRef, cluster: &str) -> McdLabels {
    McdLabels {
        namespace: workload.namespace.clone(),
        name: workload.name.clone(),
        cluster: cluster.to_owned(),
    }
}

/// A registry of the per-cluster families as of `now`, built afresh for each scrape.
fn cluster_registry(
    clusters: &[ClusterRecord],
    usage: &Usage,
    now: jiff::Timestamp,
    grace: Duration,
) -> Registry {
    let mut registry = Registry::default();
    let allocatable = Family::<ResourceLabels, FloatGauge>::default();
    registry.register(
        "nave_cluster_allocatable",
        "Allocatable resources of the cluster's schedulable nodes, as its agent reported: cpu in \
         cores, memory in bytes, pods in pod slots",
        allocatable.clone(),
    );
    let requested = Family::<ResourceLabels, FloatGauge>::default();
    registry.register(
        "nave_cluster_requested",
        "Resources requested by the pods on the cluster's schedulable nodes: cpu in cores, memory \
         in bytes, pods in pods",
        requested.clone(),
    );
    let used = Family::<ResourceLabels, FloatGauge>::default();
    registry.register(
        "nave_cluster_used",
        "Resources the cluster uses, as Prometheus measured them (fresh values only): cpu in \
         cores, memory in bytes; absent when not measured",
        used.clone(),
    );
    let utilization = Family::<ResourceLabels, FloatGauge>::default();
    registry.register_with_unit(
        "nave_cluster_utilization",
        "Requested over allocatable per resource (0 to 1); absent when nothing is allocatable",
        Unit::Other("ratio".to_owned()),
        utilization.clone(),
    );
    let ready = Family::<ClusterLabels, Gauge>::default();
    registry.register(
        "nave_cluster_ready",
        "1 when the cluster's agent heartbeated within the grace period (the cluster takes new \
         replicas), else 0",
        ready.clone(),
    );
    let heartbeat_age = Family::<ClusterLabels, FloatGauge>::default();
    registry.register_with_unit(
        "nave_cluster_heartbeat_age",
        "Time since the cluster's newest heartbeat; absent before the first",
        Unit::Seconds,
        heartbeat_age.clone(),
    );
    let nodes = Family::<ClusterLabels, Gauge>::default();
    registry.register(
        "nave_cluster_nodes",
        "Nodes of the cluster, as its agent reported",
        nodes.clone(),
    );
    let schedulable_nodes = Family::<ClusterLabels, Gauge>::default();
    registry.register(
        "nave_cluster_schedulable_nodes",
        "Nodes of the cluster that are ready and not cordoned",
        schedulable_nodes.clone(),
    );

    for record in clusters {
        let cluster = ClusterLabels {
            cluster: record.name.clone(),
        };
        // Only its readiness is read: its capacity model is not.
        let fleet = inputs::fleet_cluster(
            &record.name,
            Some(record),
            None,
            now,
            grace,
            nave_policies::Capacity::Unknown,
        );
        ready.get_or_create(&cluster).set(i64::from(fleet.ready));
        if let Some(measured) = usage.get(&record.name) {
            let resource = |resource| ResourceLabels {
                cluster: record.name.clone(),
                resource,
            };
            if let Some(cpu) = measured.cpu_millis {
                used.get_or_create(&resource("cpu")).set(cpu as f64 / 1000.0);
            }
            if let Some(memory) = measured.memory_bytes {
                used.get_or_create(&resource("memory")).set(memory as f64);
            }
        }
        if let Some(at) = record.last_heartbeat_at {
            let age = now.duration_since(at).as_secs_f64().max(0.0);
            heartbeat_age.get_or_create(&cluster).set(age);
        }
        let Some(model) = record
            .capacity
            .as_deref()
            .and_then(|c| wire::CapacityModel::deserialize(c).ok())
        else {
            continue;
        };
        let totals = &model.totals;
        nodes
            .get_or_create(&cluster)
            .set(i64::try_from(totals.nodes).unwrap_or(i64::MAX));
        schedulable_nodes
            .get_or_create(&cluster)
            .set(i64::try_from(totals.schedulable_nodes).unwrap_or(i64::MAX));
        for (resource, alloc, req) in amounts(totals.allocatable, totals.requested) {
            let labels = ResourceLabels {
                cluster: record.name.clone(),
                resource,
            };
            allocatable.get_or_create(&labels).set(alloc);
            requested.get_or_create(&labels).set(req);
            if alloc > 0.0 {
                utilization.get_or_create(&labels).set(req / alloc);
            }
        }
    }
    registry
}

/// `(resource, allocatable, requested)` in base units: cores, bytes, pods.
fn amounts(allocatable: wire::Resources, requested: wire::Resources) -> [(&'static str, f64, f64); 3] {
    [
        (
            "cpu",
            allocatable.cpu_millis as f64 / 1000.0,
            requested.cpu_millis as f64 / 1000.0,
        ),
        (
            "memory",
            allocatable.memory_bytes as f64,
            requested.memory_bytes as f64,
        ),
        ("pods", allocatable.pods as f64, requested.pods as f64),
    ]
}

impl QueryObserver for HubMetrics {
    fn signal_configured(&self, signal: &'static str) {
        self.prometheus_signal(signal);
    }

    fn query_done(&self, signal: &'static str, failed: bool) {
        self.record_prometheus_query(signal, failed);
    }
}

/// What `GET /metrics` reads.
#[derive(Clone, Debug)]
pub struct MetricsState {
    /// The registry the hub's parts update.
    pub metrics: Arc<HubMetrics>,
    /// The clusters' records, for the per-cluster families.
    pub store: Arc<dyn Store>,
    /// Measured usage, for `nave_cluster_used`.
    pub usage: Arc<UsageCache>,
    /// Readiness follows placement's rule: a heartbeat within this grace period.
    pub grace: Duration,
}

/// `GET /metrics` on the hub's listener, outside the agent and REST routers.
pub fn router(state: MetricsState) -> Router {
    Router::new().route(METRICS_PATH, get(scrape)).with_state(state)
}

async fn scrape(State(ctx): State<MetricsState>) -> Response {
    let clusters = match ctx.store.list_clusters().await {
        Ok(clusters) => Some(clusters),
        Err(error) => {
            warn!(error = %error, "metrics: cannot list the clusters; leaving their families out");
            None
        }
    };
    let now = jiff::Timestamp::now();
    let usage = ctx.usage.fresh(now);
    match ctx
        .metrics
        .encode_with_usage(clusters.as_deref(), &usage, now, ctx.grace)
    {
        Ok(text) => ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], text).into_response(),
        Err(error) => {
            warn!(error = %error, "metrics: encoding failed");
            let body = json!({"error": "internal", "message": "encoding the metrics failed"});
            (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response()
        }
    }
}

#[cfg(test)]
mod tests;
