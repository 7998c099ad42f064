//! Kubernetes probes on the hub's listener, outside the traced agent and REST routers.
//!
//! - `GET /healthz` (liveness): the process serves HTTP. It never looks at the store, so a
//!   database outage does not get the hub restarted over and over.
//! - `GET /readyz` (readiness): the store answers, so agents and the REST API can be served.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tracing::warn;

use crate::store::Store;

/// Path of the liveness probe.
pub const HEALTHZ_PATH: &str = "/healthz";
/// Path of the readiness probe.
pub const READYZ_PATH: &str = "/readyz";

/// `GET /healthz` and `GET /readyz`.
pub fn router(store: Arc<dyn Store>) -> Router {
    Router::new()
        .route(HEALTHZ_PATH, get(|| async { "ok\n" }))
        .route(READYZ_PATH, get(ready))
        .with_state(store)
}

async fn ready(State(store): State<Arc<dyn Store>>) -> Response {
    if let Err(error) = store.list_clusters().await {
        warn!(error = %error, "readiness: the store does not answer");
        // The database's own text stays in the log (STYLE: never to a client).
        return (StatusCode::SERVICE_UNAVAILABLE, "the store does not answer\n").into_response();
    }
    // A store that reads but cannot write (a full disk, a read-only volume, a Postgres standby)
    // would fail every heartbeat, report and placement while the hub looked healthy.
    if let Err(error) = store.check_writable().await {
        warn!(error = %error, "readiness: the store does not take writes");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "the store does not take writes\n",
        )
            .into_response();
    }
    "ok\n".into_response()
}
