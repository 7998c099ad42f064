//! The agent endpoints under `/agent/v1` (see `nave_api::wire` for the protocol).
//!
//! ```text
//!  register  (bootstrap token) ─► store: cluster + rotated credential ─► WorkloadCluster (Joined)
//!  heartbeat (credential)      ─► store: heartbeat ─► WorkloadCluster status (rate-limited)
//!                              ─► index: round trips; answers the peers to probe
//!                                                  └► capacity changed: reconcile the unsettled
//!                                                     workloads; cluster back: reconcile all
//!  work      (credential)      ◄─ store: work set; waits on the cluster's WorkSignals
//!  status    (credential)      ─► index + store: report ─► reconcile the workloads it changed
//! ```
//!
//! A credential is scoped to its cluster: naming another cluster is `403`, because another
//! cluster's work may hold Secrets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use nave_api::wire::{
    self, Heartbeat, HeartbeatAnswer, RegisterRequest, RegisterResponse, StatusDelta, StatusReport,
    WorkQuery, WorkSet, WorkloadRef,
};
use tracing::{debug, info, instrument, warn};

use crate::api_error::{ApiError, ErrorBody, Json, Query};
use crate::index::{DeltaRefused, Index};
use crate::settings::Timings;
use crate::signals::{ReconcileTrigger, WorkSignals};
use crate::store::{AgentIdentity, ClusterUpsert, JoinTokenInfo, NewHeartbeat, Store};
use crate::tokens::{self, Live};
use crate::workload_clusters::{self, ClusterObjects};

mod heartbeats;
#[cfg(test)]
mod tests;

/// State of the agent endpoints.
#[derive(Clone)]
pub struct AgentState {
    /// Clusters, credentials, heartbeats, work and status.
    pub store: Arc<dyn Store>,
    /// Agents' status reports as reconciles read them (written through to the store), and which
    /// workloads are not settled.
    pub index: Arc<Index>,
    /// Wakes long-polls when work changes.
    pub signals: Arc<WorkSignals>,
    /// The fleet's bootstrap token, accepted by `register` only; replaced when its file changes.
    pub bootstrap_token: Live<Arc<str>>,
    /// Writes WorkloadCluster objects; `None` where there is no management cluster (tests).
    pub cluster_objects: Option<ClusterObjects>,
    /// Asks the controllers for a pass when capacity or status changed.
    pub trigger: Option<ReconcileTrigger>,
    /// Heartbeat interval and grace.
    pub timings: Timings,
    /// Whether a cluster that joins with the fleet's bootstrap token is accepted at once.
    pub accept_new_clusters: bool,
    /// Most clusters that may wait for acceptance at once (see `--max-unaccepted-clusters`).
    pub max_unaccepted_clusters: usize,
    /// The store's identity, read on first use and sent with every work set.
    store_identity: Arc<tokio::sync::OnceCell<String>>,
    /// When each cluster's WorkloadCluster status was last written, and what it said.
    last_status_write: Arc<Mutex<HashMap<String, (Instant, serde_json::Value)>>>,
    /// Records heartbeats, those that arrive together in one transaction.
    heartbeats: heartbeats::HeartbeatWriter,
}

impl std::fmt::Debug for AgentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The bootstrap token is a secret.
        f.debug_struct("AgentState")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl AgentState {
    /// The state of the endpoints.
    pub fn new(
        store: Arc<dyn Store>,
        index: Arc<Index>,
        signals: Arc<WorkSignals>,
        bootstrap_token: &str,
        cluster_objects: Option<ClusterObjects>,
        trigger: Option<ReconcileTrigger>,
        timings: Timings,
    ) -> Self {
        AgentState {
            heartbeats: heartbeats::HeartbeatWriter::new(store.clone()),
            store,
            index,
            signals,
            bootstrap_token: Live::new(Arc::from(bootstrap_token)),
            cluster_objects,
            trigger,
            timings,
            accept_new_clusters: false,
            max_unaccepted_clusters: DEFAULT_MAX_UNACCEPTED_CLUSTERS,
            store_identity: Arc::default(),
            last_status_write: Arc::default(),
        }
    }

    /// The same state, accepting clusters that join with the fleet's bootstrap token at once.
    pub fn accepting_new_clusters(mut self, accept: bool) -> Self {
        self.accept_new_clusters = accept;
        self
    }

    /// The same state, with at most `max` clusters waiting for acceptance at once.
    pub fn with_max_unaccepted_clusters(mut self, max: usize) -> Self {
        self.max_unaccepted_clusters = max;
        self
    }

    async fn store_identity(&self) -> Result<String, ApiError> {
        let identity = self
            .store_identity
            .get_or_try_init(|| self.store.identity())
            .await?;
        Ok(identity.clone())
    }

    fn trigger(&self) {
        if let Some(trigger) = &self.trigger {
            trigger.trigger();
        }
    }

    fn trigger_workloads(&self, workloads: impl IntoIterator<Item = WorkloadRef>) {
        if let Some(trigger) = &self.trigger {
            trigger.workloads(workloads);
        }
    }
}

/// Path of the agent API's OpenAPI document.
pub const OPENAPI_PATH: &str = "/agent/v1/openapi.json";

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Nave hub agent API",
        description = "What a workload cluster's agent calls: join the fleet, report capacity \
            and status, pull the cluster's work.\n\n\
            `register` takes the fleet's bootstrap token, a join token issued for the cluster's \
            name, or the cluster's current credential, and answers a new credential; every other \
            endpoint takes that credential, which is scoped to its cluster (naming another is \
            `403`). Credentials are checked before the body is read. Errors are JSON \
            `{\"error\": <code>, \"message\": <text>}`."
    ),
    paths(register, heartbeat, work, status, status_delta, openapi_document),
    modifiers(&AgentAuth),
    security(("bearer" = [])),
)]
struct AgentApiDoc;

struct AgentAuth;

impl utoipa::Modify for AgentAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The cluster's credential; for `register`, a bootstrap or join token too.",
                    ))
                    .build(),
            ),
        );
    }
}

/// The OpenAPI document of the agent endpoints.
pub fn openapi() -> utoipa::openapi::OpenApi {
    <AgentApiDoc as utoipa::OpenApi>::openapi()
}

/// The OpenAPI 3.1 document of the agent API; needs no credential (it holds nothing secret).
#[utoipa::path(
    get,
    path = "/agent/v1/openapi.json",
    tag = "meta",
    security(()),
    responses((status = 200, description = "The OpenAPI document.", body = Object))
)]
async fn openapi_document() -> Response {
    static DOCUMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let text = DOCUMENT.get_or_init(|| openapi().to_json().unwrap_or_default());
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        text.clone(),
    )
        .into_response()
}

/// The agent endpoints, with their state applied.
pub fn router(state: AgentState) -> Router {
    Router::new()
        .route(OPENAPI_PATH, get(openapi_document))
        .route(
            wire::REGISTER_PATH,
            post(register).layer(DefaultBodyLimit::max(MAX_REGISTER_BYTES)),
        )
        .route(
            wire::HEARTBEAT_PATH,
            post(heartbeat).layer(DefaultBodyLimit::max(MAX_REPORT_BYTES)),
        )
        .route(wire::WORK_PATH, get(work))
        .route(
            wire::STATUS_PATH,
            post(status).layer(DefaultBodyLimit::max(MAX_REPORT_BYTES)),
        )
        .route(
            wire::STATUS_DELTA_PATH,
            post(status_delta).layer(DefaultBodyLimit::max(MAX_REPORT_BYTES)),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Most clusters that wait for acceptance at once, unless configured.
pub const DEFAULT_MAX_UNACCEPTED_CLUSTERS: usize = 100;

/// Largest registration body: a name, versions, a few labels and coordinates.
pub const MAX_REGISTER_BYTES: usize = 64 * 1024;

/// Largest heartbeat or status report: a heartbeat of a cluster of 5,000 nodes is about 1 MB,
/// a status report of 1,000 workloads' objects a few hundred KB.
pub const MAX_REPORT_BYTES: usize = 4 * 1024 * 1024;

/// The agent a request comes from, authenticated by its per-cluster credential from the
/// `Authorization` header. As an extractor it runs before the body is read: a request without a
/// valid credential is answered `401` without its body being buffered or parsed.
#[derive(Clone, Debug)]
struct Authenticated(AgentIdentity);

impl FromRequestParts<AgentState> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AgentState) -> Result<Self, Self::Rejection> {
        authenticate(state, &parts.headers).await.map(Authenticated)
    }
}

/// What a registration presents, checked, like [`Authenticated`], before the body is read.
#[derive(Clone, Debug)]
enum Joining {
    /// The fleet's bootstrap token: joins a new name only.
    Fleet,
    /// A join token an admin issued for one name, usable once, and its text (to spend it).
    JoinToken(JoinTokenInfo, String),
    /// The cluster's current credential: rotates it.
    Credential(AgentIdentity),
}

impl FromRequestParts<AgentState> for Joining {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AgentState) -> Result<Self, Self::Rejection> {
        let token = bearer(&parts.headers)?;
        if constant_time_eq(token, &state.bootstrap_token.get()) {
            return Ok(Joining::Fleet);
        }
        if token.starts_with(crate::store::JOIN_TOKEN_PREFIX) {
            return match state.store.find_join_token(token, jiff::Timestamp::now()).await? {
                Some(info) => Ok(Joining::JoinToken(info, token.to_owned())),
                None => Err(ApiError::Unauthorized(BAD_JOIN_TOKEN)),
            };
        }
        match state.store.authenticate_agent(token).await? {
            Some(identity) => Ok(Joining::Credential(identity)),
            None => Err(ApiError::Unauthorized(BAD_BOOTSTRAP_TOKEN)),
        }
    }
}

async fn not_found() -> ApiError {
    ApiError::NotFound(format!(
        "no such endpoint; the endpoints are listed in {OPENAPI_PATH}"
    ))
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

const MISSING_TOKEN: &str = "missing bearer token in the Authorization header";
const BAD_BOOTSTRAP_TOKEN: &str = "invalid token: registration takes the fleet's bootstrap token, a join token, or the cluster's current credential";
const BAD_JOIN_TOKEN: &str = "unknown, used or expired join token; ask an admin for a new one";
const BAD_CREDENTIAL: &str = "unknown or revoked credential; register again";

fn bearer(headers: &HeaderMap) -> Result<&str, ApiError> {
    tokens::bearer(headers).ok_or(ApiError::Unauthorized(MISSING_TOKEN))
}

/// Compares two secrets in time independent of where they differ: both are hashed first, so the
/// comparison also does not reveal the expected length.
fn constant_time_eq(presented: &str, expected: &str) -> bool {
    tokens::digests_equal(&tokens::digest(presented), &tokens::digest(expected))
}

async fn authenticate(state: &AgentState, headers: &HeaderMap) -> Result<AgentIdentity, ApiError> {
    let token = bearer(headers)?;
    state
        .store
        .authenticate_agent(token)
        .await?
        .ok_or(ApiError::Unauthorized(BAD_CREDENTIAL))
}

fn check_scope(identity: &AgentIdentity, named: Option<&str>) -> Result<(), ApiError> {
    match named {
        Some(name) if name != identity.cluster => Err(ApiError::Forbidden(format!(
            "this credential is for cluster {:?}, not {name:?}",
            identity.cluster
        ))),
        _ => Ok(()),
    }
}

/// Joins the fleet, or registers again: answers a new credential for the cluster and revokes
/// its previous ones.
#[utoipa::path(
    post,
    path = "/agent/v1/register",
    tag = "agent",
    request_body(content = RegisterRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Registered; the credential is shown only here.", body = RegisterResponse),
        (status = 400, description = "The body is not JSON.", body = ErrorBody),
        (status = 401, description = "Not the bootstrap token, a usable join token or a valid credential.", body = ErrorBody),
        (status = 403, description = "The join token or credential is for another cluster.", body = ErrorBody),
        (status = 409, description = "The name has joined already: register with its credential or a join token.", body = ErrorBody),
        (status = 413, description = "The body is larger than 64 KiB.", body = ErrorBody),
        (status = 415, description = "The body is not sent as `application/json`.", body = ErrorBody),
        (status = 422, description = "A field a WorkloadCluster cannot hold; the message names it.", body = ErrorBody),
        (status = 429, description = "Too many clusters await acceptance.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all, fields(cluster = %request.cluster_name))]
async fn register(
    State(state): State<AgentState>,
    joining: Joining,
    Json(request): Json<RegisterRequest>,
) -> Result<Json<RegisterResponse>, ApiError> {
    request.validate().map_err(ApiError::Invalid)?;
    let name = request.cluster_name.as_str();
    let existing = state.store.get_cluster(name).await?;
    // Who may claim the name: a name that joined is claimed again only with its credential or
    // a join token an admin issued for it, so the fleet's token cannot take a cluster over.
    if let Some(objects) = &state.cluster_objects
        && objects.terminating(name).await.unwrap_or(false)
    {
        return Err(ApiError::Conflict(format!(
            "cluster {name:?} is being removed (its WorkloadCluster is being deleted); \
             it can join again once the object is gone"
        )));
    }
    // A removed name stays removed for the fleet's token: only an admin brings it back.
    if matches!(joining, Joining::Fleet)
        && existing.is_none()
        && let Some(at) = state.store.removed_at(name).await?
    {
        return Err(ApiError::Conflict(format!(
            "cluster {name:?} was removed by an admin at {at}; it joins again only with a join \
             token an admin issues for it (nave join {name})"
        )));
    }
    let accepted = match &joining {
        Joining::Fleet => match &existing {
            Some(_) => {
                return Err(ApiError::Conflict(format!(
                    "cluster {name:?} has joined already; register with its current credential, \
                     or with a join token an admin issues for {name:?} (POST /api/v1/join-tokens)"
                )));
            }
            None if state.accept_new_clusters => true,
            None => {
                let waiting = state
                    .store
                    .list_clusters()
                    .await?
                    .iter()
                    .filter(|c| !c.accepted)
                    .count();
                if waiting >= state.max_unaccepted_clusters {
                    warn!(
                        waiting,
                        "a new cluster was refused: too many clusters await acceptance"
                    );
                    return Err(ApiError::TooManyRequests(format!(
                        "{waiting} clusters await acceptance already, the most this hub keeps; \
                         an admin accepts or removes them, or issues a join token for {name:?}"
                    )));
                }
                false
            }
        },
        Joining::JoinToken(info, token) => {
            if info.cluster != name {
                return Err(ApiError::Forbidden(format!(
                    "this join token is for cluster {:?}, not {name:?}",
                    info.cluster
                )));
            }
            if !state
                .store
                .redeem_join_token(token, name, jiff::Timestamp::now())
                .await?
            {
                return Err(ApiError::Unauthorized(BAD_JOIN_TOKEN));
            }
            true
        }
        Joining::Credential(identity) => {
            check_scope(identity, Some(name))?;
            existing.as_ref().is_some_and(|record| record.accepted)
        }
    };
    // An existing cluster keeps what an admin set (labels, cordon, burst-only); a new one takes
    // what the agent proposes, which selects nothing until the cluster is accepted.
    let upsert = match &existing {
        Some(record) => ClusterUpsert {
            name: record.name.clone(),
            labels: record.labels.clone(),
            region: record.region.clone().or(request.region.clone()),
            zone: record.zone.clone().or(request.zone.clone()),
            coordinates: record.coordinates.or(request.coordinates.map(store_coordinates)),
            agent_version: Some(request.agent_version.clone()),
            kubernetes_version: request.kubernetes_version.clone(),
            cordoned: record.cordoned,
            burst_only: record.burst_only,
            accepted,
        },
        None => ClusterUpsert {
            name: request.cluster_name.clone(),
            labels: request.labels.clone(),
            region: request.region.clone(),
            zone: request.zone.clone(),
            coordinates: request.coordinates.map(store_coordinates),
            agent_version: Some(request.agent_version.clone()),
            kubernetes_version: request.kubernetes_version.clone(),
            cordoned: false,
            burst_only: false,
            accepted,
        },
    };
    let record = state.store.upsert_cluster(&upsert).await?;
    state.index.put_cluster(record);
    // Registering again revokes the previous credential.
    let issued = state.store.rotate_credential(&request.cluster_name).await?;
    if let Some(objects) = &state.cluster_objects
        && let Err(error) = objects.joined(&request, accepted).await
    {
        // The store is the record of registration; the object is written again on heartbeats.
        warn!(error = %error, "writing the WorkloadCluster after registration failed");
    }
    state.trigger();
    let how = match &joining {
        Joining::Fleet => "bootstrap token",
        Joining::JoinToken(..) => "join token",
        Joining::Credential(_) => "credential",
    };
    if accepted {
        info!(credential_id = issued.id, with = how, "agent registered");
    } else {
        warn!(
            credential_id = issued.id,
            with = how,
            "a new cluster joined and waits for an admin to accept it before it gets work"
        );
    }
    Ok(Json(RegisterResponse {
        cluster_name: request.cluster_name,
        credential: issued.token.expose().to_owned(),
        heartbeat_interval_seconds: state.timings.heartbeat_interval.as_secs(),
        max_work_wait_seconds: wire::MAX_WORK_WAIT_SECONDS,
    }))
}

fn store_coordinates(c: nave_api::Coordinates) -> crate::store::Coordinates {
    crate::store::Coordinates {
        latitude: c.latitude,
        longitude: c.longitude,
    }
}

/// Reports the cluster's capacity, Pending pods, round trips and what the agent holds; answers
/// the peers to probe.
#[utoipa::path(
    post,
    path = "/agent/v1/heartbeat",
    tag = "agent",
    request_body(content = Heartbeat, content_type = "application/json"),
    responses(
        (status = 200, description = "Recorded.", body = HeartbeatAnswer),
        (status = 400, description = "The body is not JSON.", body = ErrorBody),
        (status = 401, description = "No valid credential.", body = ErrorBody),
        (status = 403, description = "The body names another cluster than the credential's.", body = ErrorBody),
        (status = 413, description = "The body is larger than 4 MiB.", body = ErrorBody),
        (status = 415, description = "The body is not sent as `application/json`.", body = ErrorBody),
        (status = 422, description = "JSON that is not a heartbeat; the message names the field.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all, fields(cluster = tracing::field::Empty))]
async fn heartbeat(
    State(state): State<AgentState>,
    Authenticated(identity): Authenticated,
    Json(beat): Json<Heartbeat>,
) -> Result<Json<HeartbeatAnswer>, ApiError> {
    tracing::Span::current().record("cluster", identity.cluster.as_str());
    check_scope(&identity, beat.cluster_name.as_deref())?;
    let now = jiff::Timestamp::now();
    // Serialized once: the capacity model is most of a heartbeat.
    let payload = serde_json::to_value(&beat).unwrap_or_default();
    let capacity = payload.get("capacity").cloned();
    let record = NewHeartbeat {
        cluster: identity.cluster.clone(),
        received_at: now,
        payload,
        capacity: capacity.clone(),
        agent_version: Some(beat.agent_version.clone()),
        kubernetes_version: beat.kubernetes_version.clone(),
    };
    state.heartbeats.record(record).await?;
    if state.index.cluster(&identity.cluster).is_none() {
        // The store knows the cluster (its credential was just checked there) and the index
        // does not: read it, or its heartbeats would never count and placement would not see it.
        warn!(cluster = %identity.cluster, "a heartbeat from a cluster the index did not hold; reading it from the store");
        let stored = state.store.get_cluster(&identity.cluster).await?;
        state.index.refresh_cluster(&identity.cluster, stored);
    }
    let observed = state.index.observe_heartbeat(
        &identity.cluster,
        now,
        &beat,
        capacity,
        state.timings.heartbeat_grace,
    );
    if let Some(trigger) = &state.trigger {
        trigger.wake(observed.wake, &state.index);
    }
    let (was_ready, accepted) = (observed.was_ready, observed.accepted);
    let network = state.index.network();
    if let Some(objects) = &state.cluster_objects {
        let summary = workload_clusters::status_summary(&beat);
        let due = {
            let last = state.last_status_write.lock().unwrap_or_else(|e| e.into_inner());
            match last.get(&identity.cluster) {
                Some((at, said)) => {
                    at.elapsed() >= state.timings.cluster_status_interval || *said != summary || !was_ready
                }
                None => true,
            }
        };
        if due {
            match objects.heartbeat(&identity.cluster, &beat, now).await {
                Ok(found) => {
                    if !found {
                        debug!("no WorkloadCluster for this cluster; only a registration writes one");
                    }
                    let mut last = state.last_status_write.lock().unwrap_or_else(|e| e.into_inner());
                    last.insert(identity.cluster.clone(), (Instant::now(), summary));
                }
                Err(error) => warn!(error = %error, "writing WorkloadCluster status failed"),
            }
        }
    }
    let mut answer = if accepted {
        network.answer(&identity.cluster, state.timings.heartbeat_grace)
    } else {
        HeartbeatAnswer::default()
    };
    answer.status_deltas = true;
    Ok(Json(answer))
}

/// The cluster's work set: at once, or once its revision differs from `after` (a long-poll of
/// at most `wait` seconds).
#[utoipa::path(
    get,
    path = "/agent/v1/work",
    tag = "agent",
    params(WorkQuery),
    responses(
        (status = 200, description = "The cluster's current set.", body = WorkSet),
        (status = 204, description = "Nothing changed within `wait` (or the hub is shutting down)."),
        (status = 400, description = "A query parameter of the wrong type, or an unknown one.", body = ErrorBody),
        (status = 401, description = "No valid credential.", body = ErrorBody),
        (status = 403, description = "`cluster` names another cluster than the credential's.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all, fields(cluster = tracing::field::Empty, after, wait))]
async fn work(
    State(state): State<AgentState>,
    Authenticated(identity): Authenticated,
    Query(query): Query<WorkQuery>,
) -> Result<Response, ApiError> {
    tracing::Span::current().record("cluster", identity.cluster.as_str());
    check_scope(&identity, query.cluster.as_deref())?;
    let wait = Duration::from_secs(query.wait.unwrap_or(0).min(wire::MAX_WORK_WAIT_SECONDS));
    let deadline = tokio::time::Instant::now() + wait;
    // Subscribe before reading, so a revision put in between still wakes this poll.
    let mut changes = state.signals.subscribe(&identity.cluster);
    let store = state.store_identity().await?;
    loop {
        changes.borrow_and_update();
        let complete = state.signals.published();
        let current = current_work(&state, &identity.cluster, &query).await?;
        let revision = current.as_ref().map_or(0, |w| w.revision);
        let prune_confirmed = prune_confirmed(state.index.cluster(&identity.cluster).as_deref(), revision);
        // A held set is answered again, unchanged, once it is complete or its prune confirmed:
        // that releases it.
        if query.after != Some(revision)
            || (query.held && complete)
            || query
                .prune_confirmed
                .is_some_and(|seen| query.after.is_some() && seen != prune_confirmed.unwrap_or(0))
        {
            // No work row is "no opinion" (revision 0): agents never prune on it.
            let current = current.unwrap_or_default();
            let set = WorkSet {
                cluster: identity.cluster.clone(),
                revision: current.revision,
                objects: current.objects,
                store: Some(store),
                complete,
                prune_confirmed,
                since: current.since,
                removed: current.removed,
            };
            return Ok(Json(set).into_response());
        }
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return Ok(StatusCode::NO_CONTENT.into_response());
                }
            }
            () = tokio::time::sleep_until(deadline) => return Ok(StatusCode::NO_CONTENT.into_response()),
        }
    }
}

/// A cluster's set as the work endpoint answers it: whole, or what changed since the revision
/// the agent holds when it asked for that and the store still knows.
#[derive(Default)]
struct Current {
    revision: u64,
    objects: Vec<serde_json::Value>,
    since: Option<u64>,
    removed: Vec<String>,
}

async fn current_work(
    state: &AgentState,
    cluster: &str,
    query: &WorkQuery,
) -> Result<Option<Current>, ApiError> {
    if let (true, Some(after)) = (query.delta, query.after)
        && let Some(delta) = state.store.get_work_since(cluster, after).await?
    {
        return Ok(Some(Current {
            revision: delta.revision,
            objects: delta.changed,
            since: Some(delta.since),
            removed: delta.removed,
        }));
    }
    Ok(state.store.get_work(cluster).await?.map(|set| Current {
        revision: set.revision,
        objects: set.objects,
        since: None,
        removed: Vec::new(),
    }))
}

/// Up to which revision `cluster`'s agent may remove most of what it runs at once: every
/// revision while the cluster is withdrawn from the fleet (not accepted: its work leaves on an
/// admin's decision), else what an admin confirmed.
fn prune_confirmed(cluster: Option<&crate::store::ClusterRecord>, revision: u64) -> Option<u64> {
    let cluster = cluster?;
    if !cluster.accepted {
        return Some(revision);
    }
    cluster.prune_confirmed
}

/// Reports what the agent applied and how each object is doing.
#[utoipa::path(
    post,
    path = "/agent/v1/status",
    tag = "agent",
    request_body(content = StatusReport, content_type = "application/json"),
    responses(
        (status = 204, description = "Recorded."),
        (status = 400, description = "The body is not JSON.", body = ErrorBody),
        (status = 401, description = "No valid credential.", body = ErrorBody),
        (status = 403, description = "The body names another cluster than the credential's.", body = ErrorBody),
        (status = 413, description = "The body is larger than 4 MiB.", body = ErrorBody),
        (status = 415, description = "The body is not sent as `application/json`.", body = ErrorBody),
        (status = 422, description = "JSON that is not a status report; the message names the field.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all, fields(cluster = tracing::field::Empty))]
async fn status(
    State(state): State<AgentState>,
    Authenticated(identity): Authenticated,
    Json(report): Json<StatusReport>,
) -> Result<StatusCode, ApiError> {
    tracing::Span::current().record("cluster", identity.cluster.as_str());
    check_scope(&identity, report.cluster_name.as_deref())?;
    if let Some(why) = report.id_refused() {
        return Err(ApiError::Invalid(why));
    }
    if report.objects.len() > StatusReport::MAX_OBJECTS {
        return Err(ApiError::Invalid(format!(
            "objects: {} objects, more than the {} a report may hold",
            report.objects.len(),
            StatusReport::MAX_OBJECTS
        )));
    }
    record_report(&state, &identity.cluster, report).await
}

/// Records what changed in the cluster's status since the report the delta follows.
#[utoipa::path(
    post,
    path = "/agent/v1/status/delta",
    tag = "agent",
    request_body = StatusDelta,
    responses(
        (status = 204, description = "Recorded."),
        (status = 400, description = "The body is not JSON.", body = ErrorBody),
        (status = 401, description = "No valid credential.", body = ErrorBody),
        (status = 403, description = "The body names another cluster than the credential's.", body = ErrorBody),
        (status = 409, description = "The hub does not hold the report the delta follows (`base`): send the whole report.", body = ErrorBody),
        (status = 413, description = "The body is larger than 4 MiB.", body = ErrorBody),
        (status = 415, description = "The body is not sent as `application/json`.", body = ErrorBody),
        (status = 422, description = "JSON that is not a status delta, or one that would make a report of more objects than a report may hold; the message names the field.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all, fields(cluster = tracing::field::Empty))]
async fn status_delta(
    State(state): State<AgentState>,
    Authenticated(identity): Authenticated,
    Json(delta): Json<StatusDelta>,
) -> Result<StatusCode, ApiError> {
    tracing::Span::current().record("cluster", identity.cluster.as_str());
    check_scope(&identity, delta.cluster_name.as_deref())?;
    let report = state
        .index
        .follow_report(&identity.cluster, delta)
        .map_err(|refused| match refused {
            DeltaRefused::UnknownBase(message) => ApiError::Conflict(message),
            DeltaRefused::Invalid(message) => ApiError::Invalid(message),
        })?;
    record_report(&state, &identity.cluster, report).await
}

/// Stores and keeps `cluster`'s report, and reconciles the workloads whose status it changed.
async fn record_report(
    state: &AgentState,
    cluster: &str,
    report: StatusReport,
) -> Result<StatusCode, ApiError> {
    let changed = state
        .index
        .put_report(state.store.as_ref(), cluster, report, jiff::Timestamp::now())
        .await?;
    if let Some(workloads) = changed {
        state.trigger_workloads(workloads);
    }
    Ok(StatusCode::NO_CONTENT)
}
