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

mod admin;
mod clusters;
mod placements;
mod simulate;
mod state;

pub use self::state::{AdminHandles, RestState};

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api_error::{self, ApiError};
use crate::fleet::Sources;
use crate::store::Store;
pub use crate::tokens::{ApiTokens, Live, Scope, TokensError};

/// Prefix of every REST path.
pub const PREFIX: &str = "/api/v1";

/// Path of the OpenAPI document.
pub const OPENAPI_PATH: &str = "/api/v1/openapi.json";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Nave hub REST API",
        description = "Read the fleet and the placements the hub decided, and simulate a \
            placement without applying it.\n\n\
            Every request needs `Authorization: Bearer <token>`. Tokens have a scope: `read` \
            allows every endpoint but those tagged `admin` (the simulation writes nothing); \
            `admin` includes `read` and allows the `admin` endpoints, which change who may \
            join and what a cluster may do. A request without a valid token gets `401`; a token \
            whose scope is too small gets `403`. Errors are JSON \
            `{\"error\": <code>, \"message\": <text>}`."
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "clusters", description = "Workload clusters: health, capacity, utilization."),
        (name = "placements", description = "Where workloads run, why, and what-if."),
        (name = "admin", description = "Joining, acceptance, credentials, removal (scope `admin`)."),
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
        .routes(routes!(clusters::get, admin::remove_cluster))
        .routes(routes!(placements::list))
        .routes(routes!(placements::get))
        .routes(routes!(placements::history))
        .routes(routes!(simulate::simulate))
        .routes(routes!(admin::create_join_token, admin::list_join_tokens))
        .routes(routes!(admin::set_acceptance))
        .routes(routes!(admin::confirm_prune))
        .routes(routes!(admin::list_credentials))
        .routes(routes!(admin::revoke_credentials))
        .routes(routes!(openapi_document))
}

/// The OpenAPI document of the REST API.
pub fn openapi() -> utoipa::openapi::OpenApi {
    routes().into_openapi()
}

/// The REST API, with its state applied, ready to merge with the hub's other routes. Every
/// request needs a token of `tokens`; with none configured every request gets `401`.
pub fn router(
    sources: Sources,
    store: Arc<dyn Store>,
    tokens: impl Into<Live<ApiTokens>>,
    admin: AdminHandles,
) -> Router {
    let tokens: Live<ApiTokens> = tokens.into();
    let (routes, document) = routes().split_for_parts();
    let document = serde_json::to_string(&document).unwrap_or_else(|_| "{}".to_owned());
    let state = RestState {
        sources,
        store,
        document: Arc::from(document),
        admin,
    };
    routes
        // Unknown paths under the prefix get a JSON 404 here rather than another router's
        // fallback, so that they are authenticated like the rest.
        .route(PREFIX, any(not_found))
        .route(&format!("{PREFIX}/"), any(not_found))
        .route(&format!("{PREFIX}/{{*rest}}"), any(not_found))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(tokens, require_read))
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

const NO_TOKENS_CONFIGURED: &str = "the REST API has no tokens configured, so it refuses \
     every request; start the hub with --api-tokens-file FILE (or NAVE_API_TOKENS_FILE), one \
     `<scope> <token>` per line with scope read or admin";
const MISSING_TOKEN: &str = "missing bearer token: send `Authorization: Bearer <token>`";
const UNKNOWN_TOKEN: &str = "unknown API token";

/// Middleware: lets a request through when it carries a token of at least `read` scope, and
/// puts the token's [`Scope`] in the request's extensions for handlers that need more.
async fn require_read(
    State(tokens): State<Live<ApiTokens>>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let tokens = tokens.get();
    if tokens.is_empty() {
        return Err(ApiError::Unauthorized(NO_TOKENS_CONFIGURED));
    }
    let token = crate::tokens::bearer(request.headers()).ok_or(ApiError::Unauthorized(MISSING_TOKEN))?;
    let scope = tokens
        .scope_of(token)
        .ok_or(ApiError::Unauthorized(UNKNOWN_TOKEN))?;
    if !scope.allows(Scope::Read) {
        return Err(ApiError::Forbidden(format!(
            "this token's scope {scope} does not allow reading"
        )));
    }
    request.extensions_mut().insert(scope);
    Ok(next.run(request).await)
}
