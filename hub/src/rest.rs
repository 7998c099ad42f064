//! The REST API under `/api/v1`: what operators read (clusters, placements and why, history)
//! and what-if simulations, described by an OpenAPI 3.1 document at `/api/v1/openapi.json`.
//!
//! ```text
//!  Authorization: Bearer <token> ─► auth (tokens file; scope read ⊆ admin)
//!    GET  /clusters[/{name}]               ◄─ fleet::Sources::view + store (heartbeats, placements)
//!    GET  /placements[/{ns}/{name}]        ◄─ store placements (decision + explanation)
//!    GET  /placements/{ns}/{name}/history  ◄─ store placement history (paged, newest first)
//!    POST /placements/simulate             ─► placement::validate ─► fleet::Sources::gather
//!                                             ─► placement::plan, as an apply would (nothing is written)
//! ```
//!
//! Routes and the document come from the same `#[utoipa::path]` annotations
//! ([`utoipa_axum::routes!`]), so a route cannot be served without being documented. Every error
//! is JSON ([`crate::api_error::ErrorBody`]), including unknown paths (`404`), wrong methods (`405`) and
//! rejected bodies (`400`, `415`, `422`).

pub mod auth;
mod clusters;
mod placements;
mod simulate;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::middleware;
use axum::response::IntoResponse;
use axum::routing::any;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use self::auth::{ApiTokens, Scope, TokensError};
use crate::api_error::{self, ApiError};
use crate::fleet::Sources;
use crate::store::Store;

/// Prefix of every REST path.
pub const PREFIX: &str = "/api/v1";

/// Path of the OpenAPI document.
pub const OPENAPI_PATH: &str = "/api/v1/openapi.json";

/// State of the REST handlers.
#[derive(Clone, Debug)]
pub struct RestState {
    /// What placement reads (the fleet, the index, health, usage), as the controller sees it.
    sources: Sources,
    /// Placements, their history, heartbeats.
    store: Arc<dyn Store>,
    /// The OpenAPI document, serialized once.
    document: Arc<str>,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Nave hub REST API",
        description = "Read the fleet and the placements the hub decided, and simulate a \
            placement without applying it.\n\n\
            Every request needs `Authorization: Bearer <token>`. Tokens have a scope: `read` \
            allows every endpoint of this version (all of them read, and the simulation writes \
            nothing); `admin` includes `read` and is reserved for endpoints that change state \
            (none yet). A request without a valid token gets `401`; a token whose scope is too \
            small gets `403`. Errors are JSON `{\"error\": <code>, \"message\": <text>}`."
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "clusters", description = "Workload clusters: health, capacity, utilization."),
        (name = "placements", description = "Where workloads run, why, and what-if."),
        (name = "meta", description = "This document.")
    )
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A token from the hub's API tokens file; scope `read` or `admin`.",
                    ))
                    .build(),
            ),
        );
    }
}

fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(clusters::list))
        .routes(routes!(clusters::get))
        .routes(routes!(placements::list))
        .routes(routes!(placements::get))
        .routes(routes!(placements::history))
        .routes(routes!(simulate::simulate))
        .routes(routes!(openapi_document))
}

/// The OpenAPI document of the REST API.
pub fn openapi() -> utoipa::openapi::OpenApi {
    routes().into_openapi()
}

/// The REST API, with its state applied, ready to merge with the hub's other routes. Every
/// request needs a token of `tokens`; with none configured every request gets `401`.
pub fn router(sources: Sources, store: Arc<dyn Store>, tokens: ApiTokens) -> Router {
    let (routes, document) = routes().split_for_parts();
    let document = serde_json::to_string(&document).unwrap_or_else(|_| "{}".to_owned());
    let state = RestState {
        sources,
        store,
        document: Arc::from(document),
    };
    routes
        // Unknown paths under the prefix get a JSON 404 here rather than another router's
        // fallback, so that they are authenticated like the rest.
        .route(PREFIX, any(not_found))
        .route(&format!("{PREFIX}/"), any(not_found))
        .route(&format!("{PREFIX}/{{*rest}}"), any(not_found))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(tokens, auth::require_read))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::NotFound(format!(
        "no such endpoint; the endpoints are listed in {OPENAPI_PATH}"
    ))
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// The OpenAPI 3.1 document of this API.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "meta",
    responses(
        (status = 200, description = "The OpenAPI document.", body = Object),
        (status = 401, description = "No valid token.", body = api_error::ErrorBody),
    )
)]
async fn openapi_document(State(state): State<RestState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        state.document.to_string(),
    )
}
