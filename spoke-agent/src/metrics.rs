//! The agent's Prometheus metrics and its small HTTP listener (`/metrics`, `/healthz`).
//!
//! ```text
//!  work loop ─── apply_set ──► nave_agent_apply_duration_seconds, nave_agent_apply_errors_total,
//!                              nave_agent_applied_objects, nave_agent_work_revision
//!             └─ fence::hold ─► nave_agent_work_held{reason}
//!  heartbeat loop ───────────► nave_agent_last_heartbeat_timestamp_seconds, nave_agent_pending_pods
//!  HubClient (every request) ► nave_agent_hub_requests_total{endpoint, code}
//!  round trips (probe) ──────► nave_agent_round_trip_seconds{peer}
//!
//!  GET /metrics ─► OpenMetrics text   GET /healthz ─► 200 ok   GET /probe ─► 204 (other agents)
//! ```
//!
//! Every metric is documented in `docs/metrics.md`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use nave_api::wire::ApplyError;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::{Error, Result};

/// Content type of the OpenMetrics text format.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds (seconds) of the apply-duration buckets: a set of a few objects applies in tens
/// of milliseconds, a large one against a slow API server in tens of seconds.
const APPLY_BUCKETS: [f64; 12] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Labels of the apply-error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApplyErrorLabels {
    /// `apply` or `prune`.
    operation: String,
    /// Kubernetes kind of the object.
    kind: String,
}

/// Labels of the hub-request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HubRequestLabels {
    /// `register`, `heartbeat`, `work` or `status`.
    endpoint: &'static str,
    /// The HTTP status, or `error` when no answer came (connection, timeout).
    code: String,
}

/// Labels of the held-work gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HeldLabels {
    /// `StoreChanged`, `RevisionWentBack` or `NoWork`.
    reason: &'static str,
}

/// Labels of the round-trip gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabels {
    /// `hub` or the other cluster's name.
    peer: String,
}

/// The agent's metrics and the registry they are served from.
#[derive(Debug)]
pub struct AgentMetrics {
    registry: Registry,
    apply_duration: Histogram,
    apply_errors: Family<ApplyErrorLabels, Counter>,
    applied_objects: Gauge,
    work_revision: Gauge,
    hub_requests: Family<HubRequestLabels, Counter>,
    last_heartbeat: Gauge<f64, AtomicU64>,
    pending_pods: Gauge,
    round_trips: Family<PeerLabels, Gauge<f64, AtomicU64>>,
    work_held: Family<HeldLabels, Gauge>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        AgentMetrics::new()
    }
}

impl AgentMetrics {
    /// A registry with every agent metric at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let apply_duration = Histogram::new(APPLY_BUCKETS);
        registry.register_with_unit(
            "nave_agent_apply_duration",
            "Time to apply one work set: server-side apply of every object, then pruning",
            Unit::Seconds,
            apply_duration.clone(),
        );
        let apply_errors = Family::<ApplyErrorLabels, Counter>::default();
        registry.register(
            "nave_agent_apply_errors",
            "Objects that failed to apply or prune, by operation and kind",
            apply_errors.clone(),
        );
        let applied_objects = Gauge::default();
        registry.register(
            "nave_agent_applied_objects",
            "Objects the agent applied and has not pruned",
            applied_objects.clone(),
        );
        let work_revision = Gauge::default();
        registry.register(
            "nave_agent_work_revision",
            "The work revision fully applied (0 before the first)",
            work_revision.clone(),
        );
        let hub_requests = Family::<HubRequestLabels, Counter>::default();
        registry.register(
            "nave_agent_hub_requests",
            "Requests to the hub by endpoint and HTTP status (code=\"error\": no answer)",
            hub_requests.clone(),
        );
        let last_heartbeat = Gauge::<f64, AtomicU64>::default();
        registry.register_with_unit(
            "nave_agent_last_heartbeat_timestamp",
            "Unix time of the newest heartbeat the hub accepted (0 before the first)",
            Unit::Seconds,
            last_heartbeat.clone(),
        );
        let pending_pods = Gauge::default();
        registry.register(
            "nave_agent_pending_pods",
            "Pods in the cluster the scheduler could not place, as of the newest heartbeat",
            pending_pods.clone(),
        );
        let round_trips = Family::<PeerLabels, Gauge<f64, AtomicU64>>::default();
        registry.register_with_unit(
            "nave_agent_round_trip",
            "Median of the recent round trips to the hub (peer=\"hub\") and to other agents",
            Unit::Seconds,
            round_trips.clone(),
        );
        let work_held = Family::<HeldLabels, Gauge>::default();
        registry.register(
            "nave_agent_work_held",
            "1 while the agent keeps what runs instead of following the hub's work set (a new or \
             rolled-back hub store, or no work), by reason",
            work_held.clone(),
        );
        let metrics = AgentMetrics {
            registry,
            work_held,
            apply_duration,
            apply_errors,
            applied_objects,
            work_revision,
            hub_requests,
            last_heartbeat,
            pending_pods,
            round_trips,
        };
        metrics.set_held(None);
        metrics
    }

    /// Records one work-set apply: how long it took and what failed.
    pub fn observe_apply(&self, took: Duration, errors: &[ApplyError]) {
        self.apply_duration.observe(took.as_secs_f64());
        for error in errors {
            self.apply_errors
                .get_or_create(&ApplyErrorLabels {
                    operation: error.operation.clone(),
                    kind: error.kind.clone(),
                })
                .inc();
        }
    }

    /// Sets what is applied: the revision (`None` before the first) and the number of objects.
    pub fn set_applied(&self, revision: Option<u64>, objects: usize) {
        self.work_revision
            .set(revision.map_or(0, |r| i64::try_from(r).unwrap_or(i64::MAX)));
        self.applied_objects
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
    }

    /// Sets why the agent holds the hub's work set; `None`: it follows it.
    pub fn set_held(&self, reason: Option<nave_api::wire::HeldReason>) {
        for known in [
            nave_api::wire::HeldReason::StoreChanged,
            nave_api::wire::HeldReason::RevisionWentBack,
            nave_api::wire::HeldReason::NoWork,
        ] {
            let value = i64::from(reason == Some(known));
            self.work_held
                .get_or_create(&HeldLabels {
                    reason: known.as_str(),
                })
                .set(value);
        }
    }

    /// Counts a request to the hub: `status` is the HTTP status, `None` when no answer came.
    pub fn record_hub_request(&self, endpoint: &'static str, status: Option<u16>) {
        let code = status.map_or_else(|| "error".to_owned(), |s| s.to_string());
        self.hub_requests
            .get_or_create(&HubRequestLabels { endpoint, code })
            .inc();
    }

    /// Records a heartbeat the hub accepted at `at`.
    pub fn record_heartbeat(&self, at: SystemTime) {
        let seconds = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        self.last_heartbeat.set(seconds);
    }

    /// Sets the number of pending pods in the cluster.
    pub fn set_pending_pods(&self, pods: u64) {
        self.pending_pods.set(i64::try_from(pods).unwrap_or(i64::MAX));
    }

    /// Sets the round trip to `peer`; `None` removes the peer.
    pub fn set_round_trip(&self, peer: &str, rtt: Option<Duration>) {
        let labels = PeerLabels {
            peer: peer.to_owned(),
        };
        match rtt {
            Some(rtt) => {
                self.round_trips.get_or_create(&labels).set(rtt.as_secs_f64());
            }
            None => {
                self.round_trips.remove(&labels);
            }
        }
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> std::result::Result<String, std::fmt::Error> {
        let mut text = String::new();
        encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// Path of the metrics endpoint.
pub const METRICS_PATH: &str = "/metrics";
/// Path of the liveness probe: `200 ok` while the process serves.
pub const HEALTHZ_PATH: &str = "/healthz";

/// `GET /metrics`, `GET /healthz` and `GET /probe` (`204`, for other agents' round trips).
pub fn router(metrics: Arc<AgentMetrics>) -> Router {
    Router::new()
        .route(METRICS_PATH, get(scrape))
        .route(HEALTHZ_PATH, get(|| async { "ok\n" }))
        .route(crate::probe::PROBE_PATH, get(|| async { StatusCode::NO_CONTENT }))
        .with_state(metrics)
}

async fn scrape(State(metrics): State<Arc<AgentMetrics>>) -> Response {
    match metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], text).into_response(),
        Err(error) => {
            warn!(error = %error, "metrics: encoding failed");
            let body = serde_json::json!({"error": "internal", "message": "encoding the metrics failed"});
            (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response()
        }
    }
}

/// Binds `addr` now (so a taken port fails the start, not a scrape later) and returns the
/// server, which runs until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<AgentMetrics>,
    shutdown: CancellationToken,
) -> Result<impl Future<Output = ()> + Send + 'static> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::MetricsListen { addr, source })?;
    let bound = listener.local_addr().unwrap_or(addr);
    info!(addr = %bound, "serving /metrics, /healthz and /probe");
    Ok(async move {
        let served = axum::serve(listener, router(metrics))
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(error) = served {
            warn!(error = %error, "the metrics listener stopped");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(operation: &str, kind: &str) -> ApplyError {
        ApplyError {
            operation: operation.to_owned(),
            kind: kind.to_owned(),
            ..ApplyError::default()
        }
    }

    #[track_caller]
    fn assert_line(text: &str, expected: &str) {
        assert!(
            text.lines().any(|l| l == expected),
            "expected the line {expected:?} in:\n{text}"
        );
    }

    #[test]
    fn known_values_encode_as_openmetrics_lines() {
        let metrics = AgentMetrics::new();
        metrics.observe_apply(
            Duration::from_millis(30),
            &[
                error("apply", "Deployment"),
                error("apply", "Deployment"),
                error("prune", "Service"),
            ],
        );
        metrics.set_applied(Some(7), 4);
        metrics.record_hub_request("heartbeat", Some(204));
        metrics.record_hub_request("heartbeat", Some(204));
        metrics.record_hub_request("work", None);
        metrics.record_heartbeat(UNIX_EPOCH + Duration::from_millis(1_700_000_000_500));
        metrics.set_pending_pods(2);
        metrics.set_round_trip("hub", Some(Duration::from_millis(12)));
        metrics.set_round_trip("eu-2", Some(Duration::from_millis(30)));
        metrics.set_round_trip("eu-2", None);
        let text = metrics.encode().unwrap();

        assert_line(&text, "nave_agent_apply_duration_seconds_count 1");
        assert_line(&text, "nave_agent_apply_duration_seconds_bucket{le=\"0.025\"} 0");
        assert_line(&text, "nave_agent_apply_duration_seconds_bucket{le=\"0.05\"} 1");
        assert_line(
            &text,
            "nave_agent_apply_errors_total{operation=\"apply\",kind=\"Deployment\"} 2",
        );
        assert_line(
            &text,
            "nave_agent_apply_errors_total{operation=\"prune\",kind=\"Service\"} 1",
        );
        assert_line(&text, "nave_agent_work_revision 7");
        assert_line(&text, "nave_agent_applied_objects 4");
        assert_line(
            &text,
            "nave_agent_hub_requests_total{endpoint=\"heartbeat\",code=\"204\"} 2",
        );
        assert_line(
            &text,
            "nave_agent_hub_requests_total{endpoint=\"work\",code=\"error\"} 1",
        );
        assert_line(&text, "nave_agent_last_heartbeat_timestamp_seconds 1700000000.5");
        assert_line(&text, "nave_agent_pending_pods 2");
        assert_line(&text, "nave_agent_round_trip_seconds{peer=\"hub\"} 0.012");
        assert!(!text.contains("eu-2"), "a forgotten peer is removed:\n{text}");
        assert_eq!(text.lines().last(), Some("# EOF"));
    }

    #[test]
    fn nothing_applied_yet_is_revision_zero() {
        let metrics = AgentMetrics::new();
        metrics.set_applied(None, 0);
        let text = metrics.encode().unwrap();
        assert_line(&text, "nave_agent_work_revision 0");
        assert_line(&text, "nave_agent_last_heartbeat_timestamp_seconds 0.0");
    }
}
