//! Prometheus as a scoring input: per-cluster usage (and traffic) read with PromQL, kept for a
//! TTL, so that placement scores by what clusters use rather than only by what pods request.
//!
//! ```text
//!  --prometheus-url ─► Refresher, every TTL/3: one instant query per signal ──► Prometheus
//!        │   answer: a vector keyed by the `cluster` label ─► { cluster: value }
//!        │   failure: logged, counted (nave_prometheus_query_errors_total), values kept
//!        ▼
//!   UsageCache: value and time per (cluster, signal)
//!        └─ fresh(now): values younger than --prometheus-ttl; older ones are gone
//!             ├─► FleetView::with_usage ─► CapacityModel::usage ─► utilization and scores
//!             ├─► GET /metrics (nave_cluster_used) and GET /api/v1/clusters (`usage`)
//!             └─► WorkloadCluster status.capacity.usage (rate-limited; removed when stale)
//! ```
//!
//! Usage is optional all the way: without `--prometheus-url`, or for a cluster Prometheus has
//! no series for, or once the values are older than the TTL (Prometheus down, a query broken),
//! placement counts requests, as it always did. A resource measured for a cluster replaces its
//! requests in utilization; an unmeasured one keeps the requests (see [`Measured::usage`]).
//!
//! The default queries read cAdvisor's container series, as kubelets (and nave-sim) expose
//! them; the scrape configuration must give each workload cluster's series a `cluster` label
//! with the WorkloadCluster's name. The traffic query has no default: there is no standard
//! series for it. Its answer is read twice: summed by cluster (each cluster's traffic, shown in
//! the REST API) and, for the series that also carry `namespace` and `workload` labels, by
//! workload and cluster: policy `traffic` divides a workload's replicas by its own traffic when
//! there is some, else by its clusters' (see [`TrafficView::of`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nave_api::ResourceAmounts;
use nave_api::cluster::{cpu_quantity, memory_quantity};
use nave_policies::{Resources, Traffic, TrafficScope};
use prometheus_http_query::response::Data;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use nave_api::wire::WorkloadRef;

use crate::error::Error;
use crate::workload_clusters::ClusterObjects;

/// The label that names the workload cluster in every answer.
pub const CLUSTER_LABEL: &str = "cluster";

/// The label of a traffic series that names the workload's namespace.
pub const NAMESPACE_LABEL: &str = "namespace";

/// The label of a traffic series that names the workload (the MultiClusterDeployment).
pub const WORKLOAD_LABEL: &str = "workload";

/// The most workloads one traffic answer is kept for: a query that labels far more series
/// (by pod, say) is a mistake, and its answer must not fill the hub's memory.
pub const MAX_TRAFFIC_WORKLOADS: usize = 100_000;

/// The most clusters one workload's traffic is kept for.
pub const MAX_TRAFFIC_CLUSTERS: usize = 10_000;

pub use crate::placement::traffic::{TrafficView, WorkloadTraffic};

/// Default CPU query: cores in use per cluster, from cAdvisor. `container!=""` leaves out the
/// pod-level cgroup series and `container!="POD"` the pause containers, which would count twice.
pub const DEFAULT_CPU_QUERY: &str =
    r#"sum by (cluster) (rate(container_cpu_usage_seconds_total{container!="",container!="POD"}[2m]))"#;

/// Default memory query: working-set bytes per cluster, from cAdvisor (what the kubelet evicts by).
pub const DEFAULT_MEMORY_QUERY: &str =
    r#"sum by (cluster) (container_memory_working_set_bytes{container!="",container!="POD"})"#;

/// What a query measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    /// CPU in use, in cores.
    Cpu,
    /// Memory in use, in bytes.
    Memory,
    /// Traffic, in whatever unit the query returns (requests per second, typically).
    Traffic,
}

impl Signal {
    /// The name used in logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Cpu => "cpu",
            Signal::Memory => "memory",
            Signal::Traffic => "traffic",
        }
    }
}

/// What Prometheus measured of one cluster, each value younger than the TTL.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// CPU in use, in millicores.
    pub cpu_millis: Option<u64>,
    /// Memory in use, in bytes.
    pub memory_bytes: Option<u64>,
    /// The traffic query's value.
    pub traffic: Option<f64>,
    /// When the oldest of these values was read.
    pub at: jiff::Timestamp,
}

impl Measured {
    /// Usage as placement counts it: the measured CPU and memory, and the `requested` amount of
    /// what was not measured (pods are never measured). `None` when neither CPU nor memory was.
    pub fn usage(&self, requested: Resources) -> Option<Resources> {
        if self.cpu_millis.is_none() && self.memory_bytes.is_none() {
            return None;
        }
        Some(Resources::new(
            self.cpu_millis.unwrap_or(requested.cpu_millis),
            self.memory_bytes.unwrap_or(requested.memory_bytes),
            requested.pods,
        ))
    }

    /// The measured amounts as a WorkloadCluster shows them; `None` when neither was measured.
    pub fn amounts(&self) -> Option<ResourceAmounts> {
        if self.cpu_millis.is_none() && self.memory_bytes.is_none() {
            return None;
        }
        Some(ResourceAmounts {
            cpu: self.cpu_millis.map(cpu_quantity),
            memory: self.memory_bytes.map(memory_quantity),
            pods: None,
        })
    }
}

/// Fresh measurements by cluster name.
pub type Usage = BTreeMap<String, Measured>;

/// The latest answer of each query, per cluster, with the time it was read.
///
/// The default cache is disabled: it holds nothing and [`UsageCache::fresh`] is always empty, which
/// is the hub without `--prometheus-url`.
#[derive(Debug, Default)]
pub struct UsageCache {
    ttl: Option<Duration>,
    values: Mutex<BTreeMap<(String, Signal), (f64, jiff::Timestamp)>>,
    /// The traffic query's answer by workload, and when it was read.
    workloads: Mutex<Option<(Arc<WorkloadTraffic>, jiff::Timestamp)>>,
    /// Grows with every answer recorded, so that a view of the fleet taken before it is not
    /// reused after it.
    generation: std::sync::atomic::AtomicU64,
}

impl UsageCache {
    /// A cache whose values expire `ttl` after they were read.
    pub fn new(ttl: Duration) -> Self {
        UsageCache {
            ttl: Some(ttl),
            values: Mutex::default(),
            workloads: Mutex::default(),
            generation: Default::default(),
        }
    }

    /// Whether the hub reads usage at all.
    pub fn enabled(&self) -> bool {
        self.ttl.is_some()
    }

    /// Replaces `signal`'s values with a successful answer read `at`: a cluster missing from it
    /// is no longer measured.
    pub fn record(&self, signal: Signal, answer: &BTreeMap<String, f64>, at: jiff::Timestamp) {
        let mut values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        values.retain(|(_, s), _| *s != signal);
        for (cluster, value) in answer {
            values.insert((cluster.clone(), signal), (*value, at));
        }
        self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Replaces the traffic by workload with a successful answer read `at`.
    pub fn record_workloads(&self, answer: Arc<WorkloadTraffic>, at: jiff::Timestamp) {
        *self.workloads.lock().unwrap_or_else(|e| e.into_inner()) = Some((answer, at));
        self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many answers have been recorded.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The traffic by workload, when younger than the TTL as of `now`; else empty.
    pub fn fresh_workloads(&self, now: jiff::Timestamp) -> Arc<WorkloadTraffic> {
        let Some(ttl) = self.ttl else {
            return Arc::default();
        };
        let workloads = self.workloads.lock().unwrap_or_else(|e| e.into_inner());
        match workloads.as_ref() {
            Some((answer, at)) if is_fresh(now, *at, ttl) => answer.clone(),
            _ => Arc::default(),
        }
    }

    /// The values younger than the TTL as of `now`, by cluster.
    pub fn fresh(&self, now: jiff::Timestamp) -> Usage {
        let Some(ttl) = self.ttl else {
            return Usage::new();
        };
        let values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Usage::new();
        for ((cluster, signal), (value, at)) in values.iter() {
            if !is_fresh(now, *at, ttl) {
                continue;
            }
            let entry = out.entry(cluster.clone()).or_insert(Measured {
                cpu_millis: None,
                memory_bytes: None,
                traffic: None,
                at: *at,
            });
            entry.at = entry.at.min(*at);
            match signal {
                Signal::Cpu => entry.cpu_millis = Some(to_u64(value * 1000.0)),
                Signal::Memory => entry.memory_bytes = Some(to_u64(*value)),
                Signal::Traffic => entry.traffic = Some(*value),
            }
        }
        out
    }
}

/// Whether a value read `at` is younger than `ttl` as of `now`. A value read after `now` (a
/// round that finished while the caller gathered) is fresh.
fn is_fresh(now: jiff::Timestamp, at: jiff::Timestamp, ttl: Duration) -> bool {
    let age = now.duration_since(at);
    age.is_negative() || age.unsigned_abs() < ttl
}

/// A non-negative finite float to an integer, rounded; saturating at `u64::MAX`.
fn to_u64(value: f64) -> u64 {
    // `as` saturates; values were checked finite and non-negative when parsed.
    value.round() as u64
}

/// The per-cluster values of an instant query's answer.
///
/// The answer must be a vector; each series names its cluster in the `cluster` label. Series
/// of the same cluster are added up; series without the label, and values that are not finite
/// non-negative numbers (NaN from a division by zero, say), are left out. An answer with
/// series but none labelled is an error: the query or the scrape configuration is wrong.
pub fn per_cluster(data: &Data) -> Result<BTreeMap<String, f64>, String> {
    let vector = match data {
        Data::Vector(v) => v,
        Data::Matrix(_) => return Err("the query returned a range vector; use an instant vector".to_owned()),
        Data::Scalar(_) => {
            return Err(format!(
                "the query returned a scalar; aggregate `by ({CLUSTER_LABEL})` to get one value per cluster"
            ));
        }
    };
    let mut out = BTreeMap::new();
    let mut unlabelled = 0usize;
    for series in vector {
        let Some(cluster) = series.metric().get(CLUSTER_LABEL).filter(|c| !c.is_empty()) else {
            unlabelled += 1;
            continue;
        };
        let value = series.sample().value();
        if value.is_finite() && value >= 0.0 {
            let sum = out.entry(cluster.clone()).or_insert(0.0);
            *sum = (*sum + value).min(f64::MAX);
        }
    }
    if out.is_empty() && unlabelled > 0 {
        return Err(format!(
            "none of the {unlabelled} series has a `{CLUSTER_LABEL}` label; aggregate `by ({CLUSTER_LABEL})` \
             and give each workload cluster's targets that label"
        ));
    }
    Ok(out)
}

/// The traffic by workload and cluster in a traffic query's answer: the series that carry the
/// `cluster`, `namespace` and `workload` labels, added up per triple, finite non-negative
/// values only. At most [`MAX_TRAFFIC_WORKLOADS`] workloads (the first in name order) of at most
/// [`MAX_TRAFFIC_CLUSTERS`] clusters each are kept, bounded while the answer is read, and how
/// many series were left out for it is returned beside (0 when none was).
pub fn per_workload(data: &Data) -> (WorkloadTraffic, usize) {
    let mut out = WorkloadTraffic::new();
    let mut left_out = 0;
    let Data::Vector(vector) = data else {
        return (out, 0);
    };
    let label = |series: &prometheus_http_query::response::InstantVector, key: &str| {
        series.metric().get(key).filter(|v| !v.is_empty()).cloned()
    };
    for series in vector {
        let (Some(cluster), Some(namespace), Some(workload)) = (
            label(series, CLUSTER_LABEL),
            label(series, NAMESPACE_LABEL),
            label(series, WORKLOAD_LABEL),
        ) else {
            continue;
        };
        let value = series.sample().value();
        if !(value.is_finite() && value >= 0.0) {
            continue;
        }
        let key = (namespace, workload);
        if out.len() >= MAX_TRAFFIC_WORKLOADS && !out.contains_key(&key) {
            // Kept bounded as it is read: the last in name order goes.
            match out.last_key_value() {
                Some((last, _)) if *last > key => {
                    out.pop_last();
                }
                _ => {
                    left_out += 1;
                    continue;
                }
            }
            left_out += 1;
        }
        let by_cluster = out.entry(key).or_default();
        if by_cluster.len() >= MAX_TRAFFIC_CLUSTERS && !by_cluster.contains_key(&cluster) {
            continue;
        }
        let sum = by_cluster.entry(cluster).or_insert(0.0);
        *sum = (*sum + value).min(f64::MAX);
    }
    (out, left_out)
}

/// Where the Prometheus is and what to ask it (`--prometheus-*`).
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    /// Base URL of the server.
    pub url: String,
    /// PromQL for each cluster's CPU use in cores; empty turns the signal off.
    pub cpu_query: String,
    /// PromQL for each cluster's memory use in bytes; empty turns the signal off.
    pub memory_query: String,
    /// PromQL for each cluster's traffic, if any.
    pub traffic_query: Option<String>,
    /// How long a value counts; the queries run every third of it.
    pub ttl: Duration,
}

/// Told which signals are read and how each query went (the hub's metrics count them), so that
/// this module needs nothing of the metrics.
pub trait QueryObserver: Send + Sync {
    /// `signal` has a query and will be read.
    fn signal_configured(&self, signal: &'static str);
    /// One query of `signal` answered (`failed: false`) or failed.
    fn query_done(&self, signal: &'static str, failed: bool);
}

/// Reads the queries on a period and keeps [`UsageCache`] current; mirrors fresh usage into
/// WorkloadCluster status when given the objects.
pub struct Refresher {
    client: prometheus_http_query::Client,
    queries: Vec<(Signal, String)>,
    interval: Duration,
    cache: Arc<UsageCache>,
    observer: Arc<dyn QueryObserver>,
    objects: Option<ClusterObjects>,
    status_interval: Duration,
    /// What each WorkloadCluster's status says now, and when it was written.
    written: BTreeMap<String, (Option<ResourceAmounts>, Instant)>,
    /// Asks for a plan of the workloads whose traffic shifted (policy `traffic` follows it).
    trigger: Option<(crate::signals::ReconcileTrigger, Arc<Followers>)>,
    /// Each following workload's traffic as of the last plan asked for it (a shift is measured
    /// from there, so a slow drift adds up to one).
    planned_with: WorkloadTraffic,
}

/// Points by which a cluster's share of a workload's traffic must move before the workload is
/// planned again: rates measured over a window wobble, and every wobble is not worth a plan.
pub const TRAFFIC_SHIFT_PERCENT: f64 = 2.0;

/// The workloads placed by policy `traffic`, which the refresher plans again when their traffic
/// shifts (kept by the MultiClusterDeployment controller).
#[derive(Debug, Default)]
pub struct Followers(Mutex<std::collections::BTreeSet<(String, String)>>);

impl Followers {
    /// Records whether `workload` follows its traffic.
    pub fn set(&self, workload: &WorkloadRef, follows: bool) {
        let mut set = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let key = (workload.namespace.clone(), workload.name.clone());
        if follows {
            set.insert(key);
        } else {
            set.remove(&key);
        }
    }

    /// Forgets every workload (a new term learns them again).
    pub fn clear(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The workloads that follow their traffic.
    pub fn snapshot(&self) -> Vec<(String, String)> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

/// Whether a workload's traffic shifted from `before` to `now`: it appeared or disappeared, or a
/// cluster's share moved by [`TRAFFIC_SHIFT_PERCENT`] points or more.
pub fn shifted(before: Option<&BTreeMap<String, f64>>, now: Option<&BTreeMap<String, f64>>) -> bool {
    let (a, b) = match (before, now) {
        (None, None) => return false,
        (Some(a), Some(b)) => (
            Traffic::new(a.clone(), TrafficScope::Workload),
            Traffic::new(b.clone(), TrafficScope::Workload),
        ),
        _ => return true,
    };
    a.by_cluster()
        .keys()
        .chain(b.by_cluster().keys())
        .any(|c| (a.share(c) - b.share(c)).abs() * 100.0 >= TRAFFIC_SHIFT_PERCENT)
}

/// The following workloads whose traffic in `now` shifted since their last plan; records
/// `now` as what they are planned with.
fn shifted_followers(
    planned_with: &mut WorkloadTraffic,
    followers: &Followers,
    now: &WorkloadTraffic,
) -> Vec<WorkloadRef> {
    let following = followers.snapshot();
    let mut moved = Vec::new();
    for key in &following {
        if !shifted(planned_with.get(key), now.get(key)) {
            continue;
        }
        match now.get(key) {
            Some(t) => planned_with.insert(key.clone(), t.clone()),
            None => planned_with.remove(key),
        };
        moved.push(WorkloadRef::new(key.0.clone(), key.1.clone()));
    }
    let following: std::collections::BTreeSet<_> = following.into_iter().collect();
    planned_with.retain(|key, _| following.contains(key));
    moved
}

impl std::fmt::Debug for Refresher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refresher")
            .field("url", &self.client.base_url().as_str())
            .field("queries", &self.queries)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl Refresher {
    /// A refresher of `cache` from `source`, querying every third of the TTL (so one failed
    /// round does not expire the values) with that as the timeout; an error when the URL does
    /// not parse.
    pub fn new(
        source: &Source,
        cache: Arc<UsageCache>,
        observer: Arc<dyn QueryObserver>,
    ) -> Result<Refresher, Error> {
        let url = source.url.as_str();
        let interval = (source.ttl / 3).max(Duration::from_millis(100));
        let http = reqwest::Client::builder()
            .timeout(interval.max(Duration::from_secs(1)))
            .build()
            .map_err(|e| Error::Prometheus {
                url: url.to_owned(),
                message: e.to_string(),
            })?;
        let client = prometheus_http_query::Client::from(http, url).map_err(|e| Error::Prometheus {
            url: url.to_owned(),
            message: e.to_string(),
        })?;
        let queries: Vec<(Signal, String)> = [
            (Signal::Cpu, Some(&source.cpu_query)),
            (Signal::Memory, Some(&source.memory_query)),
            (Signal::Traffic, source.traffic_query.as_ref()),
        ]
        .into_iter()
        .filter_map(|(signal, query)| {
            let query = query?.trim();
            (!query.is_empty()).then(|| (signal, query.to_owned()))
        })
        .collect();
        for (signal, _) in &queries {
            observer.signal_configured(signal.name());
        }
        Ok(Refresher {
            client,
            queries,
            interval,
            cache,
            observer,
            objects: None,
            status_interval: Duration::from_secs(30),
            written: BTreeMap::new(),
            trigger: None,
            planned_with: WorkloadTraffic::new(),
        })
    }

    /// Also writes fresh usage into WorkloadCluster status, at most once per `interval` per
    /// cluster unless usage appears or expires.
    pub fn with_status(mut self, objects: ClusterObjects, interval: Duration) -> Self {
        self.objects = Some(objects);
        self.status_interval = interval;
        self
    }

    /// Asks `trigger` for a plan of each of `followers` whose own traffic shifts (see
    /// [`shifted`]).
    pub fn with_trigger(
        mut self,
        trigger: crate::signals::ReconcileTrigger,
        followers: Arc<Followers>,
    ) -> Self {
        self.trigger = Some((trigger, followers));
        self
    }

    /// Queries until `shutdown`.
    pub async fn run(&mut self, shutdown: CancellationToken) {
        info!(
            url = %self.client.base_url(),
            every = ?self.interval,
            signals = ?self.queries.iter().map(|(s, _)| s.name()).collect::<Vec<_>>(),
            "reading usage from Prometheus"
        );
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = self.refresh() => {}
            }
        }
    }

    /// One round: every query, then the WorkloadCluster status. Returns how many queries failed.
    pub async fn refresh(&mut self) -> usize {
        let client = &self.client;
        let answers = futures::future::join_all(self.queries.iter().map(|(signal, query)| async move {
            let answer = client.query(query).get().await;
            (*signal, query, answer)
        }))
        .await;
        let at = jiff::Timestamp::now();
        let mut failed = 0;
        for (signal, query, answer) in answers {
            let answer = answer.map_err(|e| e.to_string());
            let values = answer
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|r| per_cluster(r.data()));
            match values {
                Ok(values) => {
                    debug!(signal = signal.name(), clusters = values.len(), "usage read");
                    self.observer.query_done(signal.name(), false);
                    self.cache.record(signal, &values, at);
                    if signal == Signal::Traffic
                        && let Ok(answer) = &answer
                    {
                        let (workloads, left_out) = per_workload(answer.data());
                        if left_out > 0 {
                            warn!(
                                query = %query,
                                kept = workloads.len(),
                                left_out,
                                "the traffic query labels more workloads than the hub keeps; aggregate it by cluster, namespace and workload"
                            );
                        }
                        // Recorded first: the plans asked for must see it.
                        let workloads = Arc::new(workloads);
                        self.cache.record_workloads(workloads.clone(), at);
                        if let Some((trigger, followers)) = self.trigger.clone() {
                            let moved = shifted_followers(&mut self.planned_with, &followers, &workloads);
                            if !moved.is_empty() {
                                debug!(workloads = moved.len(), "traffic shifted; planning them again");
                                trigger.workloads(moved);
                            }
                        }
                    }
                }
                Err(error) => {
                    failed += 1;
                    self.observer.query_done(signal.name(), true);
                    warn!(
                        signal = signal.name(),
                        query = %query,
                        error = %error,
                        "Prometheus query failed; keeping the last values until they expire"
                    );
                }
            }
        }
        self.write_status().await;
        failed
    }

    async fn write_status(&mut self) {
        let Some(objects) = &self.objects else {
            return;
        };
        let fresh = self.cache.fresh(jiff::Timestamp::now());
        let mut names: Vec<String> = fresh.keys().cloned().collect();
        names.extend(self.written.keys().filter(|n| !fresh.contains_key(*n)).cloned());
        for name in names {
            let now = fresh.get(&name).and_then(Measured::amounts);
            let due = match self.written.get(&name) {
                None => now.is_some(),
                Some((before, _)) if before.is_some() != now.is_some() => true,
                Some((before, when)) => *before != now && when.elapsed() >= self.status_interval,
            };
            if !due {
                continue;
            }
            match objects.set_usage(&name, now.as_ref()).await {
                // Nothing to show it on (no object, or no capacity yet): tried again next round
                // while there is usage to show.
                Ok(false) | Ok(true) if now.is_none() => {
                    self.written.remove(&name);
                }
                Ok(false) => {}
                Ok(true) => {
                    self.written.insert(name, (now, Instant::now()));
                }
                Err(error) => {
                    warn!(cluster = %name, error = %error, "cannot write the measured usage into WorkloadCluster status");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn data(value: serde_json::Value) -> Data {
        serde_json::from_value(value).expect("a well-formed answer")
    }

    fn series(labels: serde_json::Value, value: &str) -> serde_json::Value {
        json!({"metric": labels, "value": [1_700_000_000.0, value]})
    }

    #[test]
    fn answers_become_values_per_cluster() {
        let answer = data(json!({"resultType": "vector", "result": [
            series(json!({"cluster": "eu-1"}), "1.5"),
            series(json!({"cluster": "us-1"}), "0.25"),
            series(json!({"cluster": "us-1", "node": "b"}), "0.25"),
            series(json!({"cluster": "ap-1"}), "NaN"),
            series(json!({"cluster": "ap-2"}), "-1"),
            series(json!({"node": "unlabelled"}), "9"),
        ]}));
        let values = per_cluster(&answer).expect("a vector keyed by cluster");
        assert_eq!(
            values,
            BTreeMap::from([("eu-1".to_owned(), 1.5), ("us-1".to_owned(), 0.5)]),
            "same-cluster series add up; NaN, negative and unlabelled series are left out"
        );
        let empty = data(json!({"resultType": "vector", "result": []}));
        assert_eq!(
            per_cluster(&empty),
            Ok(BTreeMap::new()),
            "nothing measured is not an error"
        );
    }

    #[test]
    fn traffic_answers_are_kept_by_workload_and_a_shift_names_the_workloads_it_moved() {
        let answer = data(json!({"resultType": "vector", "result": [
            series(json!({"cluster": "eu-1", "namespace": "shop", "workload": "web"}), "60"),
            series(json!({"cluster": "us-1", "namespace": "shop", "workload": "web"}), "30"),
            series(json!({"cluster": "us-1", "namespace": "shop", "workload": "web", "code": "500"}), "10"),
            series(json!({"cluster": "us-1", "namespace": "shop", "workload": "api"}), "NaN"),
            series(json!({"cluster": "us-1", "namespace": "shop"}), "7"),
            series(json!({"cluster": "eu-1"}), "5"),
        ]}));
        let (workloads, left_out) = per_workload(&answer);
        assert_eq!(left_out, 0);
        let key = ("shop".to_owned(), "web".to_owned());
        assert_eq!(
            workloads,
            WorkloadTraffic::from([(
                key.clone(),
                BTreeMap::from([("eu-1".to_owned(), 60.0), ("us-1".to_owned(), 40.0)])
            )]),
            "series of the same workload and cluster add up; NaN and series without a workload are left out"
        );
        assert_eq!(
            per_cluster(&answer).expect("by cluster"),
            BTreeMap::from([("eu-1".to_owned(), 65.0), ("us-1".to_owned(), 47.0)]),
            "each cluster's traffic counts every series"
        );
        let view = TrafficView {
            clusters: per_cluster(&answer).expect("by cluster"),
            workloads: Arc::new(workloads.clone()),
        };
        assert_eq!(view.of("shop", "web").scope, TrafficScope::Workload);
        assert_eq!(view.of("shop", "web").of("us-1"), 40.0);
        let other = view.of("shop", "db");
        assert_eq!(
            other.scope,
            TrafficScope::Cluster,
            "no traffic of its own: the clusters'"
        );
        assert_eq!(other.of("eu-1"), 65.0);

        let at = |eu: f64, us: f64| BTreeMap::from([("eu-1".to_owned(), eu), ("us-1".to_owned(), us)]);
        assert!(
            !shifted(Some(&at(60.0, 40.0)), Some(&at(61.0, 40.0))),
            "a wobble is no shift"
        );
        assert!(
            !shifted(Some(&at(60.0, 40.0)), Some(&at(120.0, 80.0))),
            "twice the traffic, same shares"
        );
        assert!(shifted(Some(&at(60.0, 40.0)), Some(&at(40.0, 60.0))));
        assert!(shifted(None, Some(&at(1.0, 0.0))), "new traffic");
        assert!(shifted(Some(&at(1.0, 0.0)), None), "traffic gone");
        assert!(!shifted(None, None));
    }

    #[test]
    fn a_traffic_answer_with_too_many_workloads_keeps_the_first_in_name_order() {
        let result: Vec<serde_json::Value> = (0..MAX_TRAFFIC_WORKLOADS + 3)
            .rev()
            .map(|i| {
                series(
                    json!({"cluster": "eu-1", "namespace": "ns", "workload": format!("w{i:06}")}),
                    "1",
                )
            })
            .collect();
        let (kept, left_out) = per_workload(&data(json!({"resultType": "vector", "result": result})));
        assert_eq!(kept.len(), MAX_TRAFFIC_WORKLOADS);
        assert_eq!(left_out, 3);
        assert!(kept.contains_key(&("ns".to_owned(), "w000000".to_owned())));
        assert!(!kept.contains_key(&("ns".to_owned(), format!("w{:06}", MAX_TRAFFIC_WORKLOADS))));
        let huge = data(json!({"resultType": "vector", "result": [
            series(json!({"cluster": "eu-1"}), "1e308"),
            series(json!({"cluster": "eu-1"}), "1e308"),
        ]}));
        assert_eq!(
            per_cluster(&huge).expect("by cluster")["eu-1"],
            f64::MAX,
            "sums saturate"
        );
    }

    #[test]
    fn only_followers_are_planned_again_and_a_slow_drift_adds_up_to_a_shift() {
        let followers = Followers::default();
        let web = WorkloadRef::new("shop", "web");
        followers.set(&web, true);
        let at = |eu: f64, us: f64| {
            WorkloadTraffic::from([
                (
                    ("shop".to_owned(), "web".to_owned()),
                    BTreeMap::from([("eu-1".to_owned(), eu), ("us-1".to_owned(), us)]),
                ),
                (
                    ("shop".to_owned(), "api".to_owned()),
                    BTreeMap::from([("eu-1".to_owned(), us), ("us-1".to_owned(), eu)]),
                ),
            ])
        };
        let mut planned = WorkloadTraffic::new();
        assert_eq!(
            shifted_followers(&mut planned, &followers, &at(50.0, 50.0)),
            vec![web.clone()],
            "new traffic of a follower; api does not follow its traffic"
        );
        // One point per refresh: no single step is a shift, the third adds up to one.
        assert!(shifted_followers(&mut planned, &followers, &at(51.0, 49.0)).is_empty());
        assert!(shifted_followers(&mut planned, &followers, &at(51.5, 48.5)).is_empty());
        assert_eq!(
            shifted_followers(&mut planned, &followers, &at(52.0, 48.0)),
            vec![web.clone()]
        );
        followers.set(&web, false);
        assert!(shifted_followers(&mut planned, &followers, &at(90.0, 10.0)).is_empty());
        assert!(
            planned.is_empty(),
            "what was kept for a workload that stopped following is dropped"
        );
    }

    #[test]
    fn answers_of_the_wrong_shape_are_errors_that_say_what_to_fix() {
        let scalar = data(json!({"resultType": "scalar", "result": [1_700_000_000.0, "3"]}));
        let error = per_cluster(&scalar).expect_err("a scalar names no cluster");
        assert!(error.contains("by (cluster)"), "{error}");
        let unlabelled = data(json!({"resultType": "vector", "result": [series(json!({}), "3")]}));
        let error = per_cluster(&unlabelled).expect_err("no cluster label");
        assert!(error.contains("`cluster` label"), "{error}");
        let matrix = data(json!({"resultType": "matrix", "result": [
            {"metric": {"cluster": "eu-1"}, "values": [[1_700_000_000.0, "1"]]}]}));
        assert!(per_cluster(&matrix).is_err(), "a range vector is refused");
    }

    #[test]
    fn values_expire_after_the_ttl_and_answers_replace_each_other() {
        let cache = UsageCache::new(Duration::from_secs(30));
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let secs = |s: i64| t0 + jiff::SignedDuration::from_secs(s);
        cache.record(
            Signal::Cpu,
            &BTreeMap::from([("eu-1".to_owned(), 1.2345), ("us-1".to_owned(), 2.0)]),
            t0,
        );
        cache.record(
            Signal::Memory,
            &BTreeMap::from([("eu-1".to_owned(), 1024.4)]),
            secs(10),
        );
        let fresh = cache.fresh(secs(20));
        assert_eq!(
            fresh.get("eu-1"),
            Some(&Measured {
                cpu_millis: Some(1235),
                memory_bytes: Some(1024),
                traffic: None,
                at: t0,
            }),
            "cores to millicores, bytes rounded, the oldest time; seen {fresh:?}"
        );
        let later = cache.fresh(secs(35));
        assert_eq!(
            later.get("eu-1").map(|m| (m.cpu_millis, m.memory_bytes)),
            Some((None, Some(1024))),
            "the CPU value expired, the memory value has not; seen {later:?}"
        );
        assert!(!later.contains_key("us-1"), "us-1 expired; seen {later:?}");
        cache.record(Signal::Cpu, &BTreeMap::from([("us-1".to_owned(), 1.0)]), secs(36));
        let replaced = cache.fresh(secs(36));
        assert_eq!(
            replaced.keys().collect::<Vec<_>>(),
            ["eu-1", "us-1"],
            "seen {replaced:?}"
        );
        assert_eq!(
            replaced["eu-1"].cpu_millis, None,
            "a new answer without eu-1 drops it"
        );
        assert!(
            UsageCache::default().fresh(secs(0)).is_empty() && !UsageCache::default().enabled(),
            "the default cache is disabled"
        );
    }

    #[test]
    fn usage_takes_the_measured_parts_and_requests_for_the_rest() {
        let at = jiff::Timestamp::UNIX_EPOCH;
        let requested = Resources::new(500, 1 << 30, 7);
        let cpu_only = Measured {
            cpu_millis: Some(3000),
            memory_bytes: None,
            traffic: Some(12.0),
            at,
        };
        assert_eq!(cpu_only.usage(requested), Some(Resources::new(3000, 1 << 30, 7)));
        assert_eq!(
            cpu_only.amounts(),
            Some(ResourceAmounts {
                cpu: Some(cpu_quantity(3000)),
                memory: None,
                pods: None,
            })
        );
        let traffic_only = Measured {
            cpu_millis: None,
            memory_bytes: None,
            ..cpu_only
        };
        assert_eq!(traffic_only.usage(requested), None, "traffic is not usage");
        assert_eq!(traffic_only.amounts(), None);
    }
}
