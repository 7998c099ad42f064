//! Test hooks under `/_sim/v1`: dump, reset, compact, drop-watches, fault injection
//! (latency, error rules with counts or rates, 429 with `Retry-After`), stop/start of the listener,
//! and the request log.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::ClusterState;
use super::error::ApiError;
use super::store::ObjKey;

/// One fault rule: requests matching `method` and `path_regex` get `code` back.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct FaultRule {
    /// HTTP method to match (any when absent).
    #[serde(default)]
    pub method: Option<String>,
    /// Regular expression matched against the path (any when absent).
    #[serde(default)]
    pub path_regex: Option<String>,
    /// How many matching requests fail; unlimited when absent.
    #[serde(default)]
    pub count: Option<u64>,
    /// Fraction (0..=1) of matching requests that fail; 1 when absent.
    #[serde(default)]
    pub rate: Option<f64>,
    /// Status code to return (500, 429, 409, 503, ...).
    pub code: u16,
    /// Status reason; derived from the code when absent.
    #[serde(default)]
    pub reason: Option<String>,
    /// Status message.
    #[serde(default)]
    pub message: Option<String>,
    /// `Retry-After` seconds (429/503).
    #[serde(default)]
    pub retry_after_seconds: Option<u64>,
}

#[derive(Debug)]
struct CompiledRule {
    rule: FaultRule,
    path: Option<regex::Regex>,
    remaining: Option<u64>,
}

/// Fault injection state of one cluster.
#[derive(Debug, Default)]
pub struct Faults {
    latency_ms: AtomicU64,
    rules: Mutex<Vec<CompiledRule>>,
    counter: AtomicU64,
}

fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

impl Faults {
    /// Extra latency added to every API request.
    pub fn latency(&self) -> Duration {
        Duration::from_millis(self.latency_ms.load(Ordering::Relaxed))
    }

    /// Sets the added latency.
    pub fn set_latency(&self, d: Duration) {
        self.latency_ms.store(
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Adds a rule; fails when its regex does not compile.
    pub fn add_rule(&self, rule: FaultRule) -> Result<(), String> {
        let path = match &rule.path_regex {
            Some(p) => Some(regex::Regex::new(p).map_err(|e| e.to_string())?),
            None => None,
        };
        let remaining = rule.count;
        self.rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(CompiledRule {
                rule,
                path,
                remaining,
            });
        Ok(())
    }

    /// Removes every rule and the latency.
    pub fn clear(&self) {
        self.rules.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.latency_ms.store(0, Ordering::Relaxed);
    }

    /// The active rules.
    pub fn rules(&self) -> Vec<FaultRule> {
        self.rules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|r| r.rule.clone())
            .collect()
    }

    /// The error a request should get, if a rule fires.
    pub fn check(&self, method: &str, path: &str) -> Option<ApiError> {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut fired = None;
        for r in rules.iter_mut() {
            if r.rule
                .method
                .as_deref()
                .is_some_and(|m| !m.eq_ignore_ascii_case(method))
            {
                continue;
            }
            if r.path.as_ref().is_some_and(|re| !re.is_match(path)) {
                continue;
            }
            if r.remaining == Some(0) {
                continue;
            }
            if let Some(rate) = r.rule.rate {
                // Deterministic spread: fire on a fraction of the request sequence.
                let bucket = (n.wrapping_mul(2_654_435_761) % 10_000) as f64 / 10_000.0;
                if bucket >= rate {
                    continue;
                }
            }
            if let Some(rem) = r.remaining.as_mut() {
                *rem -= 1;
            }
            let code = r.rule.code;
            let reason = r
                .rule
                .reason
                .clone()
                .unwrap_or_else(|| reason_for(code).to_owned());
            let message = r
                .rule
                .message
                .clone()
                .unwrap_or_else(|| format!("injected fault: {code} {reason}"));
            let mut e = ApiError::new(code, &reason, message);
            e.retry_after = r
                .rule
                .retry_after_seconds
                .or(if code == 429 { Some(1) } else { None });
            fired = Some(e);
            break;
        }
        rules.retain(|r| r.remaining != Some(0));
        fired
    }
}

/// One logged request, as the request log hook returns it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoggedRequest {
    /// Method.
    pub method: String,
    /// Path.
    pub path: String,
    /// Raw query.
    pub query: String,
    /// Request Content-Type.
    pub content_type: String,
    /// Request Accept.
    pub accept: String,
    /// User-Agent.
    pub user_agent: String,
    /// `fieldManager` query parameter.
    pub manager: String,
    /// Response status code.
    pub code: u16,
    /// Time to the response head, in milliseconds.
    pub millis: u64,
}

/// A bounded request log.
#[derive(Debug, Default)]
pub struct RequestLog {
    entries: Mutex<VecDeque<LoggedRequest>>,
}

/// How many requests the log keeps; older ones are dropped.
pub const LOG_CAPACITY: usize = 2000;

impl RequestLog {
    /// Appends an entry, dropping the oldest beyond capacity.
    pub fn push(&self, r: LoggedRequest) {
        let mut e = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        e.push_back(r);
        while e.len() > LOG_CAPACITY {
            e.pop_front();
        }
    }

    /// All entries, oldest first.
    pub fn entries(&self) -> Vec<LoggedRequest> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Forgets everything.
    pub fn clear(&self) {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FaultsBody {
    #[serde(default)]
    latency_millis: Option<u64>,
    #[serde(default)]
    rules: Vec<FaultRule>,
}

#[derive(Debug, Deserialize)]
struct StopQuery {
    seconds: Option<u64>,
}

/// The hook routes, to be nested under `/_sim/v1`.
pub fn router(state: Arc<ClusterState>) -> axum::Router {
    axum::Router::new()
        .route("/dump", get(dump))
        .route("/reset", post(reset))
        .route("/compact", post(compact))
        .route("/drop-watches", post(drop_watches))
        .route("/faults", get(get_faults).post(post_faults).delete(delete_faults))
        .route("/requests", get(get_requests).delete(delete_requests))
        .route("/stop", post(stop))
        .route("/info", get(info))
        .route("/clusters", get(peers))
        .route("/clusters/{name}/stop", post(stop_peer))
        .route("/clusters/{name}/start", post(start_peer))
        .with_state(state)
}

async fn dump(State(s): State<Arc<ClusterState>>) -> Response {
    let objects: serde_json::Map<String, Value> = s
        .store
        .dump()
        .into_iter()
        .map(|(k, v)| (k, Value::Array(v.iter().map(|o| (**o).clone()).collect())))
        .collect();
    Json(json!({"cluster": s.name, "resourceVersion": s.store.rv().to_string(), "objects": objects}))
        .into_response()
}

async fn reset(State(s): State<Arc<ClusterState>>) -> Response {
    s.reset();
    Json(json!({"reset": true, "resourceVersion": s.store.rv().to_string()})).into_response()
}

async fn compact(State(s): State<Arc<ClusterState>>) -> Response {
    s.store.compact();
    Json(json!({"compactedThrough": s.store.rv().to_string()})).into_response()
}

async fn drop_watches(State(s): State<Arc<ClusterState>>) -> Response {
    s.drop_watches();
    Json(json!({"dropped": true})).into_response()
}

async fn get_faults(State(s): State<Arc<ClusterState>>) -> Response {
    Json(json!({"latencyMillis": s.faults.latency().as_millis() as u64, "rules": s.faults.rules()}))
        .into_response()
}

async fn post_faults(State(s): State<Arc<ClusterState>>, body: axum::body::Bytes) -> Response {
    let parsed: FaultsBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return ApiError::bad_request(format!("invalid fault specification: {e}")).into_response(),
    };
    if let Some(ms) = parsed.latency_millis {
        s.faults.set_latency(Duration::from_millis(ms));
    }
    for r in parsed.rules {
        if let Err(e) = s.faults.add_rule(r) {
            return ApiError::bad_request(format!("invalid pathRegex: {e}")).into_response();
        }
    }
    get_faults(State(s)).await
}

async fn delete_faults(State(s): State<Arc<ClusterState>>) -> Response {
    s.faults.clear();
    StatusCode::NO_CONTENT.into_response()
}

async fn get_requests(State(s): State<Arc<ClusterState>>) -> Response {
    Json(json!({"requests": s.requests.entries()})).into_response()
}

async fn delete_requests(State(s): State<Arc<ClusterState>>) -> Response {
    s.requests.clear();
    StatusCode::NO_CONTENT.into_response()
}

async fn stop(State(s): State<Arc<ClusterState>>, Query(q): Query<StopQuery>) -> Response {
    let Some(ctl) = s.listener() else {
        return ApiError::bad_request("this cluster has no listener (in-process only)").into_response();
    };
    let secs = q.seconds.unwrap_or(0);
    // Answer first, then close the listener: the caller gets a response, later clients get refused.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        ctl.stop();
        if secs > 0 {
            tokio::time::sleep(Duration::from_secs(secs)).await;
            if let Err(e) = ctl.start().await {
                tracing::warn!(error = %e, "restarting the listener failed");
            }
        }
    });
    Json(json!({"stopping": true, "restartAfterSeconds": secs})).into_response()
}

fn peer(s: &ClusterState, name: &str) -> Option<Arc<super::ListenerCtl>> {
    s.peers
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(name)
        .cloned()
}

async fn peers(State(s): State<Arc<ClusterState>>) -> Response {
    let list: Vec<Value> = s
        .peers
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(n, l)| json!({"name": n, "address": l.addr().to_string(), "running": l.is_running()}))
        .collect();
    Json(json!({"clusters": list})).into_response()
}

async fn stop_peer(
    State(s): State<Arc<ClusterState>>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Response {
    let Some(l) = peer(&s, &name) else {
        return ApiError::bad_request(format!("no cluster {name:?} in this fleet")).into_response();
    };
    if l.addr().to_string() == s.address() {
        return ApiError::bad_request("use /_sim/v1/stop to stop this cluster itself").into_response();
    }
    l.stop();
    Json(json!({"name": name, "running": false})).into_response()
}

async fn start_peer(
    State(s): State<Arc<ClusterState>>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Response {
    let Some(l) = peer(&s, &name) else {
        return ApiError::bad_request(format!("no cluster {name:?} in this fleet")).into_response();
    };
    match l.start().await {
        Ok(()) => Json(json!({"name": name, "running": true})).into_response(),
        Err(e) => ApiError::internal(format!("restarting {name}: {e}")).into_response(),
    }
}

async fn info(State(s): State<Arc<ClusterState>>) -> Response {
    Json(json!({
        "cluster": s.name,
        "address": s.address(),
        "resourceVersion": s.store.rv().to_string(),
        "objects": s.store.len(),
        "oldestResumable": s.store.oldest_resumable().to_string(),
    }))
    .into_response()
}

/// Objects the reset hook keeps: the system namespaces, nodes and their leases.
pub fn kept_on_reset(table: &str, key: &ObjKey) -> bool {
    match table {
        "/namespaces" => matches!(
            key.1.as_str(),
            "default" | "kube-system" | "kube-public" | "kube-node-lease"
        ),
        "/nodes" => true,
        "coordination.k8s.io/leases" => key.0 == "kube-node-lease",
        _ => false,
    }
}
