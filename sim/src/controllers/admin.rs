//! The control plane's admin routes (listed in the parent module's documentation).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::{ControlPlaneError, Ctx, ForeignPodsRequest, NewNode, foreign, nodes};

/// An admin-route failure, answered as `{"error", "message"}`.
#[derive(Debug)]
struct AdminError(StatusCode, &'static str, String);

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(json!({"error": self.1, "message": self.2}))).into_response()
    }
}

impl From<ControlPlaneError> for AdminError {
    fn from(e: ControlPlaneError) -> Self {
        match e {
            ControlPlaneError::NotFound(what) => {
                AdminError(StatusCode::NOT_FOUND, "NotFound", format!("{what} not found"))
            }
            ControlPlaneError::Invalid(msg) => AdminError(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", msg),
            ControlPlaneError::Api { operation, source } => {
                let code = super::api_code(&source).and_then(|c| StatusCode::from_u16(c).ok());
                match code {
                    Some(c) if c.is_client_error() => {
                        AdminError(c, "ApiError", format!("{operation}: {source}"))
                    }
                    _ => {
                        tracing::warn!(operation, error = %source, "admin operation failed");
                        AdminError(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "InternalError",
                            format!("{operation} failed"),
                        )
                    }
                }
            }
        }
    }
}

/// Parses a JSON body with the error shape of every other failure; an empty body is `{}`.
fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, AdminError> {
    let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(text).map_err(|e| {
        AdminError(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("invalid body: {e}"),
        )
    })
}

type AdminResult = Result<Response, AdminError>;

/// The admin router.
pub(super) fn router(ctx: Arc<Ctx>) -> Router {
    Router::new()
        .route("/nodes", get(list_nodes).post(add_node))
        .route("/nodes/{name}", axum::routing::delete(remove_node))
        .route("/nodes/{name}/ready", put(set_ready))
        .route("/nodes/{name}/allocatable", put(set_allocatable))
        .route("/nodes/{name}/usage", put(set_usage))
        .route("/usage", put(set_factor))
        .route("/traffic", get(list_traffic))
        .route("/traffic/{namespace}/{service}", put(set_traffic))
        .route(
            "/foreign-pods",
            get(list_foreign).post(add_foreign).delete(remove_foreign),
        )
        .with_state(ctx)
}

async fn list_nodes(State(ctx): State<Arc<Ctx>>) -> AdminResult {
    Ok(axum::Json(nodes::summaries(&ctx)).into_response())
}

async fn add_node(State(ctx): State<Arc<Ctx>>, bytes: Bytes) -> AdminResult {
    let new: NewNode = body(&bytes)?;
    let name = nodes::add_node(&ctx, new).await?;
    Ok((StatusCode::CREATED, axum::Json(json!({"name": name}))).into_response())
}

async fn remove_node(State(ctx): State<Arc<Ctx>>, Path(name): Path<String>) -> AdminResult {
    nodes::remove_node(&ctx, &name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadyBody {
    status: String,
}

async fn set_ready(State(ctx): State<Arc<Ctx>>, Path(name): Path<String>, bytes: Bytes) -> AdminResult {
    let b: ReadyBody = body(&bytes)?;
    nodes::set_ready(&ctx, &name, &b.status).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn set_allocatable(State(ctx): State<Arc<Ctx>>, Path(name): Path<String>, bytes: Bytes) -> AdminResult {
    let b: BTreeMap<String, String> = body(&bytes)?;
    nodes::set_allocatable(&ctx, &name, b).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageBody {
    #[serde(default)]
    cpu: Option<String>,
    #[serde(default)]
    memory: Option<String>,
}

async fn set_usage(State(ctx): State<Arc<Ctx>>, Path(name): Path<String>, bytes: Bytes) -> AdminResult {
    let b: UsageBody = body(&bytes)?;
    if ctx.nodes.get_named(&name).is_none() {
        return Err(AdminError(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("node {name:?} not found"),
        ));
    }
    let parse = |field: &str, v: Option<String>| -> Result<Option<i128>, AdminError> {
        v.map(|v| {
            nave_sim_core::quantity::parse_milli(&v)
                .ok()
                .filter(|m| *m >= 0)
                .ok_or_else(|| {
                    AdminError(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "Invalid",
                        format!("{field}: invalid quantity {v:?}"),
                    )
                })
        })
        .transpose()
    };
    let usage = (parse("cpu", b.cpu)?, parse("memory", b.memory)?);
    let mut sim = ctx.sim();
    if usage == (None, None) {
        sim.node_usage.remove(&name);
    } else {
        sim.node_usage.insert(name, usage);
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FactorBody {
    factor: f64,
}

async fn set_factor(State(ctx): State<Arc<Ctx>>, bytes: Bytes) -> AdminResult {
    let b: FactorBody = body(&bytes)?;
    if !(b.factor.is_finite() && b.factor >= 0.0) {
        return Err(AdminError(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!("factor: invalid value {}: must be >= 0", b.factor),
        ));
    }
    ctx.sim().usage_factor = b.factor;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TrafficBody {
    requests_per_second: f64,
}

/// The most (namespace, Service) pairs the simulated ingress keeps.
const MAX_TRAFFIC_SERVICES: usize = 10_000;

async fn set_traffic(
    State(ctx): State<Arc<Ctx>>,
    Path((namespace, service)): Path<(String, String)>,
    bytes: Bytes,
) -> AdminResult {
    let b: TrafficBody = body(&bytes)?;
    if !(b.requests_per_second.is_finite() && b.requests_per_second >= 0.0) {
        return Err(AdminError(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!(
                "requestsPerSecond: invalid value {}: must be a number >= 0",
                b.requests_per_second
            ),
        ));
    }
    let mut sim = ctx.sim();
    let key = (namespace, service);
    if b.requests_per_second == 0.0 {
        sim.traffic.remove(&key);
    } else {
        if !sim.traffic.contains_key(&key) && sim.traffic.len() >= MAX_TRAFFIC_SERVICES {
            return Err(AdminError(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!("at most {MAX_TRAFFIC_SERVICES} Services have simulated traffic"),
            ));
        }
        sim.traffic.insert(key, b.requests_per_second);
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn list_traffic(State(ctx): State<Arc<Ctx>>) -> AdminResult {
    let traffic: Vec<serde_json::Value> = ctx
        .sim()
        .traffic
        .iter()
        .map(|((namespace, service), rate)| {
            json!({"namespace": namespace, "service": service, "requestsPerSecond": rate})
        })
        .collect();
    Ok(axum::Json(traffic).into_response())
}

async fn list_foreign(State(ctx): State<Arc<Ctx>>) -> AdminResult {
    Ok(axum::Json(foreign::list(&ctx)).into_response())
}

async fn add_foreign(State(ctx): State<Arc<Ctx>>, bytes: Bytes) -> AdminResult {
    let req: ForeignPodsRequest = body(&bytes)?;
    let names = foreign::create(&ctx, req).await?;
    Ok((StatusCode::CREATED, axum::Json(json!({"pods": names}))).into_response())
}

#[derive(Debug, Deserialize)]
struct RemoveQuery {
    node: Option<String>,
}

async fn remove_foreign(State(ctx): State<Arc<Ctx>>, Query(q): Query<RemoveQuery>) -> AdminResult {
    let n = foreign::remove(&ctx, q.node.as_deref()).await?;
    Ok(axum::Json(json!({"deleted": n})).into_response())
}
