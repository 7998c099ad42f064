//! The admin endpoints (scope `admin`): who may join, and taking a cluster's access away.
//!
//! ```text
//!  POST   /join-tokens                     ─► store: a join token for one name, usable once, with a TTL
//!  GET    /join-tokens                     ◄─ store: every join token, without its secret
//!  PUT    /clusters/{name}/acceptance      ─► store + index: accepted or not ─► reconcile every workload
//!  GET    /clusters/{name}/credentials     ◄─ store: the cluster's credentials, without tokens
//!  POST   /clusters/{name}/credentials/revoke ─► store: every valid credential revoked
//!  DELETE /clusters/{name}                 ─► store: the cluster forgotten (only once it runs nothing)
//!  POST   /clusters/{name}/prune-confirmation ─► store: the agent may remove most of what it runs
//! ```
//!
//! Withdrawing acceptance is how a cluster's work is withdrawn cleanly: its workloads are placed
//! elsewhere (make-before-break), its work set empties, its agent prunes; then it can be removed.

use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use jiff::Timestamp;
use nave_api::wire::is_dns_subdomain;
use serde::{Deserialize, Serialize};
use tracing::{info, instrument, warn};
use utoipa::ToSchema;

use super::state::RestState;
use crate::api_error::{ApiError, ErrorBody, Json};
use crate::tokens::Scope;

/// Default lifetime of a join token.
const DEFAULT_JOIN_TOKEN_TTL: Duration = Duration::from_secs(60 * 60);
/// Longest lifetime of a join token: a week, as kubeadm's tokens are short-lived by design.
const MAX_JOIN_TOKEN_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);

fn require_admin(scope: Scope) -> Result<(), ApiError> {
    if scope.allows(Scope::Admin) {
        Ok(())
    } else {
        Err(ApiError::Forbidden(format!(
            "this token's scope {scope} does not allow changes; they need an admin token"
        )))
    }
}

fn check_cluster_name(field: &str, name: &str) -> Result<(), ApiError> {
    if is_dns_subdomain(name) {
        Ok(())
    } else {
        Err(ApiError::Invalid(format!(
            "{field}: {name:?} is not a valid cluster name (a lowercase RFC 1123 subdomain)"
        )))
    }
}

fn rfc3339(at: Timestamp) -> String {
    at.to_string()
}

/// A join token to issue.
#[derive(Deserialize, Debug, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct JoinTokenRequest {
    /// The one cluster name the token registers. A name that has joined already is claimed
    /// again with it (an agent that lost its credential, or was revoked).
    #[schema(
        min_length = 1,
        max_length = 253,
        pattern = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
    )]
    cluster: String,
    /// Seconds until the token stops working: 60 to 604800 (a week); default 3600.
    #[schema(minimum = 60, maximum = 604800)]
    ttl_seconds: Option<u64>,
}

/// A join token just issued: the only time its text is shown.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct IssuedJoinTokenView {
    /// The public part, as lists show it.
    id: String,
    /// The cluster name it registers.
    cluster: String,
    /// The token: put it in the agent's bootstrap token file (the agent chart's
    /// `bootstrapToken`). Usable once.
    token: String,
    /// When it stops working (RFC 3339).
    expires_at: String,
    /// SHA-256 (hex) of the CA of the hub's TLS chain: give it to the agent as `hubCaSha256` so
    /// it trusts this hub and no other. `null` when the hub serves plain HTTP.
    hub_ca_sha256: Option<String>,
}

/// A join token, without its secret.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct JoinTokenView {
    /// The public part.
    id: String,
    /// The cluster name it registers.
    cluster: String,
    /// When it was issued (RFC 3339).
    created_at: String,
    /// When it stops working (RFC 3339).
    expires_at: String,
    /// When it was used (RFC 3339); `null` while unused.
    used_at: Option<String>,
    /// `usable`, `used` or `expired`.
    state: String,
}

/// Join tokens, newest first.
#[derive(Serialize, Debug, ToSchema)]
pub(super) struct JoinTokenList {
    items: Vec<JoinTokenView>,
}

/// Issues a join token for one cluster name: an agent registering with it joins under that name
/// and is accepted at once. Usable once, until it expires; only its hash is stored.
#[utoipa::path(
    post,
    path = "/api/v1/join-tokens",
    tag = "admin",
    request_body(content = JoinTokenRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "The token; shown this once.", body = IssuedJoinTokenView),
        (status = 400, description = "The body is not JSON.", body = ErrorBody),
        (status = 401, description = "No valid token.", body = ErrorBody),
        (status = 403, description = "The token is not an admin token.", body = ErrorBody),
        (status = 415, description = "The body is not sent as `application/json`.", body = ErrorBody),
        (status = 422, description = "Invalid cluster name or TTL; the message names the field.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all)]
pub(super) async fn create_join_token(
    State(state): State<RestState>,
    Extension(scope): Extension<Scope>,
    Json(body): Json<JoinTokenRequest>,
) -> Result<(StatusCode, Json<IssuedJoinTokenView>), ApiError> {
    require_admin(scope)?;
    check_cluster_name("cluster", &body.cluster)?;
    let ttl = body
        .ttl_seconds
        .map_or(DEFAULT_JOIN_TOKEN_TTL, Duration::from_secs);
    if ttl < Duration::from_secs(60) || ttl > MAX_JOIN_TOKEN_TTL {
        return Err(ApiError::Invalid(format!(
            "ttlSeconds: {} is outside 60 to {}",
            ttl.as_secs(),
            MAX_JOIN_TOKEN_TTL.as_secs()
        )));
    }
    let expires_at = Timestamp::now()
        .checked_add(ttl)
        .map_err(|_| ApiError::Invalid("ttlSeconds: too large".to_owned()))?;
    let issued = state.store.create_join_token(&body.cluster, expires_at).await?;
    info!(id = %issued.id, cluster = %issued.cluster, expires_at = %issued.expires_at, "join token issued");
    Ok((
        StatusCode::CREATED,
        Json(IssuedJoinTokenView {
            id: issued.id,
            cluster: issued.cluster,
            token: issued.token.expose().to_owned(),
            expires_at: rfc3339(issued.expires_at),
            hub_ca_sha256: state.admin.hub_ca_sha256.clone(),
        }),
    ))
}

/// Every join token, newest first, without their secrets.
#[utoipa::path(
    get,
    path = "/api/v1/join-tokens",
    tag = "admin",
    responses(
        (status = 200, description = "The join tokens.", body = JoinTokenList),
        (status = 401, description = "No valid token.", body = ErrorBody),
        (status = 403, description = "The token is not an admin token.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all)]
pub(super) async fn list_join_tokens(
    State(state): State<RestState>,
    Extension(scope): Extension<Scope>,
) -> Result<Json<JoinTokenList>, ApiError> {
    require_admin(scope)?;
    let now = Timestamp::now();
    let items = state
        .store
        .list_join_tokens()
        .await?
        .into_iter()
        .map(|t| JoinTokenView {
            state: if t.used_at.is_some() {
                "used"
            } else if t.expires_at <= now {
                "expired"
            } else {
                "usable"
            }
            .to_owned(),
            id: t.id,
            cluster: t.cluster,
            created_at: rfc3339(t.created_at),
            expires_at: rfc3339(t.expires_at),
            used_at: t.used_at.map(rfc3339),
        })
        .collect();
    Ok(Json(JoinTokenList { items }))
}

/// Whether the hub may place work on a cluster.
#[derive(Deserialize, Serialize, Debug, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Acceptance {
    /// `true`: the cluster gets work and its labels select. `false`: its workloads are placed
    /// elsewhere and its work set empties (its agent prunes what it ran).
    accepted: bool,
}

/// Accepts a cluster that joined with the fleet's bootstrap token, or withdraws a cluster's
/// acceptance, which withdraws its work.
#[utoipa::path(
    put,
    path = "/api/v1/clusters/{name}/acceptance",
    tag = "admin",
    params(("name" = String, Path, description = "The cluster's name.")),
    request_body(content = Acceptance, content_type = "application/json"),
    responses(
        (status = 200, description = "The cluster's acceptance now.", body = Acceptance),
        (status = 400, description = "The body is not JSON.", body = ErrorBody),
        (status = 401, description = "No valid token.", body = ErrorBody),
        (status = 403, description = "The token is not an admin token.", body = ErrorBody),
        (status = 404, description = "No such registered cluster.", body = ErrorBody),
        (status = 415, description = "The body is not sent as `application/json`.", body = ErrorBody),
        (status = 422, description = "The body is not an acceptance; the message names the field.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all, fields(cluster = %name))]
pub(super) async fn set_acceptance(
    State(state): State<RestState>,
    Extension(scope): Extension<Scope>,
    Path(name): Path<String>,
    Json(body): Json<Acceptance>,
) -> Result<Json<Acceptance>, ApiError> {
    require_admin(scope)?;
    let record = state
        .store
        .set_accepted(&name, body.accepted)
        .await?
        .ok_or_else(|| unknown_cluster(&name))?;
    let accepted = record.accepted;
    state.sources.index.put_cluster(record);
    if let Some(objects) = &state.admin.objects
        && let Err(error) = objects.accepted(&name, accepted).await
    {
        warn!(error = %error, "writing the WorkloadCluster's Accepted condition failed");
    }
    if let Some(trigger) = &state.admin.trigger {
        trigger.trigger();
    }
    info!(accepted, "cluster acceptance set");
    Ok(Json(Acceptance { accepted }))
}

/// Which work revision a prune confirmation covers.
#[derive(Deserialize, Serialize, Debug, Default, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct PruneConfirmation {
    /// The newest revision the agent may follow although it removes most of what the cluster
    /// runs. Absent: the cluster's current revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    revision: Option<u64>,
}

/// Confirms that a cluster's agent may follow a work set that removes most of the workloads it
/// runs (it holds such a set, `HubStoreChanged` with reason `MassPrune`, until this is called).
/// Only a revision that exists can be confirmed: a confirmation never covers sets not yet
/// written.
#[utoipa::path(
    post,
    path = "/api/v1/clusters/{name}/prune-confirmation",
    tag = "admin",
    params(("name" = String, Path, description = "The cluster's name.")),
    request_body(content = Option<PruneConfirmation>, content_type = "application/json"),
    responses(
        (status = 200, description = "The revision now confirmed.", body = PruneConfirmation),
        (status = 400, description = "The body is not JSON.", body = ErrorBody),
        (status = 401, description = "No valid token.", body = ErrorBody),
        (status = 403, description = "The token is not an admin token.", body = ErrorBody),
        (status = 404, description = "No such registered cluster.", body = ErrorBody),
        (status = 409, description = "The cluster has no work set yet.", body = ErrorBody),
        (status = 415, description = "The body is not sent as `application/json`.", body = ErrorBody),
        (status = 422, description = "The revision is not one the cluster's work has reached; the message names it.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all, fields(cluster = %name))]
pub(super) async fn confirm_prune(
    State(state): State<RestState>,
    Extension(scope): Extension<Scope>,
    Path(name): Path<String>,
    body: Option<Json<PruneConfirmation>>,
) -> Result<Json<PruneConfirmation>, ApiError> {
    require_admin(scope)?;
    if state.store.get_cluster(&name).await?.is_none() {
        return Err(unknown_cluster(&name));
    }
    let current = state
        .store
        .get_work(&name)
        .await?
        .map(|w| w.revision)
        .ok_or_else(|| ApiError::Conflict(format!("cluster {name:?} has no work set yet")))?;
    let revision = match body.and_then(|Json(b)| b.revision) {
        None => current,
        Some(r) if (1..=current).contains(&r) => r,
        Some(r) => {
            return Err(ApiError::Invalid(format!(
                "revision: {r} is not a revision of cluster {name:?}'s work (1 to {current})"
            )));
        }
    };
    let record = state
        .store
        .confirm_prune(&name, revision)
        .await?
        .ok_or_else(|| unknown_cluster(&name))?;
    state.sources.index.put_cluster(record);
    if let Some(signals) = &state.admin.signals {
        signals.notify(&name, current);
    }
    warn!(
        revision,
        "an admin confirmed that the cluster's agent may remove most of what it runs"
    );
    Ok(Json(PruneConfirmation {
        revision: Some(revision),
    }))
}

fn unknown_cluster(name: &str) -> ApiError {
    ApiError::NotFound(format!("no registered cluster named {name:?}"))
}

/// A credential of a cluster's agent, without its token.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct CredentialView {
    /// The credential's id.
    id: i64,
    /// When it was issued (RFC 3339).
    created_at: String,
    /// When it was revoked (RFC 3339); `null` while valid.
    revoked_at: Option<String>,
}

/// A cluster's credentials, oldest first.
#[derive(Serialize, Debug, ToSchema)]
pub(super) struct CredentialList {
    items: Vec<CredentialView>,
}

/// The cluster removed.
#[derive(Serialize, Debug, ToSchema)]
pub(super) struct Removed {
    removed: String,
}

/// How many credentials were revoked.
#[derive(Serialize, Debug, ToSchema)]
pub(super) struct Revoked {
    revoked: u64,
}

/// A cluster's agent credentials, oldest first, without their tokens.
#[utoipa::path(
    get,
    path = "/api/v1/clusters/{name}/credentials",
    tag = "admin",
    params(("name" = String, Path, description = "The cluster's name.")),
    responses(
        (status = 200, description = "The credentials.", body = CredentialList),
        (status = 401, description = "No valid token.", body = ErrorBody),
        (status = 403, description = "The token is not an admin token.", body = ErrorBody),
        (status = 404, description = "No such registered cluster.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all, fields(cluster = %name))]
pub(super) async fn list_credentials(
    State(state): State<RestState>,
    Extension(scope): Extension<Scope>,
    Path(name): Path<String>,
) -> Result<Json<CredentialList>, ApiError> {
    require_admin(scope)?;
    if state.store.get_cluster(&name).await?.is_none() {
        return Err(unknown_cluster(&name));
    }
    let items = state
        .store
        .list_credentials(&name)
        .await?
        .into_iter()
        .map(|c| CredentialView {
            id: c.id,
            created_at: rfc3339(c.created_at),
            revoked_at: c.revoked_at.map(rfc3339),
        })
        .collect();
    Ok(Json(CredentialList { items }))
}

/// Revokes every valid credential of a cluster's agent. The agent's next request is `401`; it
/// can join again only with a join token an admin issues for its name. What it runs keeps
/// running: nothing is deleted in the cluster.
#[utoipa::path(
    post,
    path = "/api/v1/clusters/{name}/credentials/revoke",
    tag = "admin",
    params(("name" = String, Path, description = "The cluster's name.")),
    responses(
        (status = 200, description = "How many were revoked.", body = Revoked),
        (status = 401, description = "No valid token.", body = ErrorBody),
        (status = 403, description = "The token is not an admin token.", body = ErrorBody),
        (status = 404, description = "No such registered cluster.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all, fields(cluster = %name))]
pub(super) async fn revoke_credentials(
    State(state): State<RestState>,
    Extension(scope): Extension<Scope>,
    Path(name): Path<String>,
) -> Result<Json<Revoked>, ApiError> {
    require_admin(scope)?;
    if state.store.get_cluster(&name).await?.is_none() {
        return Err(unknown_cluster(&name));
    }
    let mut revoked = 0;
    for credential in state.store.list_credentials(&name).await? {
        if credential.revoked_at.is_none() && state.store.revoke_credential(credential.id).await? {
            revoked += 1;
        }
    }
    warn!(revoked, "cluster credentials revoked by an admin");
    Ok(Json(Revoked { revoked }))
}

/// Forgets a cluster: its record, credentials, heartbeats and work. Only a cluster that runs
/// nothing of the hub's can be removed: withdraw its acceptance first and wait until its agent
/// has applied the empty work set, so nothing is left behind unmanaged.
#[utoipa::path(
    delete,
    path = "/api/v1/clusters/{name}",
    tag = "admin",
    params(("name" = String, Path, description = "The cluster's name.")),
    responses(
        (status = 200, description = "The cluster is removed.", body = Removed),
        (status = 401, description = "No valid token.", body = ErrorBody),
        (status = 403, description = "The token is not an admin token.", body = ErrorBody),
        (status = 404, description = "No such registered cluster.", body = ErrorBody),
        (status = 409, description = "The cluster is accepted or still runs work; the message says what to do.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all, fields(cluster = %name))]
pub(super) async fn remove_cluster(
    State(state): State<RestState>,
    Extension(scope): Extension<Scope>,
    Path(name): Path<String>,
) -> Result<Json<Removed>, ApiError> {
    require_admin(scope)?;
    let record = state
        .store
        .get_cluster(&name)
        .await?
        .ok_or_else(|| unknown_cluster(&name))?;
    if record.accepted {
        return Err(ApiError::Conflict(format!(
            "cluster {name:?} is accepted; withdraw its work first: PUT /api/v1/clusters/{name}/acceptance \
             {{\"accepted\": false}}, then remove it once its agent has applied the empty work set"
        )));
    }
    let left = crate::controller::removal::Withdrawal::read(state.store.as_ref(), &name).await?;
    if !left.done() {
        return Err(ApiError::Conflict(format!(
            "cluster {name:?} still runs work ({} object(s) in its set, or its agent has not \
             applied the empty set yet); retry once it has",
            left.objects
        )));
    }
    state.store.delete_cluster(&name).await?;
    state.sources.index.forget_cluster(&name);
    if let Some(objects) = &state.admin.objects
        && let Err(error) = objects.removed(&name).await
    {
        warn!(error = %error, "marking the WorkloadCluster removed failed");
    }
    if let Some(trigger) = &state.admin.trigger {
        trigger.trigger();
    }
    warn!("cluster removed by an admin");
    Ok(Json(Removed { removed: name }))
}
