//! `POST /api/v1/placements/simulate`: what the hub would decide for a spec, now, without
//! writing anything.

use std::collections::BTreeMap;

use axum::extract::State;
use nave_api::wire::WorkloadRef;
use nave_api::{MultiClusterDeployment, MultiClusterDeploymentSpec};
use nave_policies::Role;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::instrument;
use utoipa::ToSchema;

use super::state::RestState;
use crate::api_error::{ApiError, ErrorBody, Json};
use crate::placement::stored::StoredDecision;
use crate::placement::{self, Previous};

/// A spec to place.
#[derive(Deserialize, Debug, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SimulateRequest {
    /// Namespace of the MultiClusterDeployment (default `default`). With `name`, the simulation
    /// starts from that placement as applying the spec would: its current assignment, a move under
    /// way, the clusters it failed over from, its Pending pods and its last move (cooldown). Its
    /// own replicas that do not run yet take room, as they do for every placement.
    #[schema(
        min_length = 1,
        max_length = 253,
        pattern = "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
    )]
    namespace: Option<String>,
    /// Name of the MultiClusterDeployment, to simulate a change of an existing one.
    #[schema(
        min_length = 1,
        max_length = 253,
        pattern = "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
    )]
    name: Option<String>,
    /// A MultiClusterDeployment spec, as written under `spec:` in its manifest (`replicas`,
    /// `template`, `placement`, `overrides`, `dependencies`).
    #[schema(value_type = Object)]
    spec: Value,
}

/// One cluster's part in a simulated decision.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct SimulatedCluster {
    /// The cluster.
    name: String,
    /// `regular`, or `burst` (used only for overflow).
    role: String,
    /// Why it takes no new replicas; `null` when it is eligible.
    filtered_out: Option<String>,
    /// Replicas before (the current assignment when simulating an existing placement).
    previous: u32,
    /// Replicas after.
    replicas: u32,
    /// Why: filtered out by what, its rank and room, what changed.
    explanation: String,
}

/// A move under way: old replicas kept running until the new ones are ready.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct SimulatedMove {
    /// Old replicas kept per cluster, on top of the assignment.
    held: BTreeMap<String, u32>,
    /// The clusters that gain replicas, with the replicas they are to run.
    to: BTreeMap<String, u32>,
    /// When the move started (RFC 3339).
    since: String,
}

/// What the hub would decide.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct SimulateResponse {
    /// The namespace simulated in.
    namespace: String,
    /// The MultiClusterDeployment simulated, when named.
    name: Option<String>,
    /// The placement policy.
    policy: String,
    /// Replicas asked for.
    replicas: u32,
    /// Replicas per cluster; clusters without replicas are left out.
    assignment: BTreeMap<String, u32>,
    /// Replicas that fit nowhere.
    unplaced: u32,
    /// Replicas the clusters would be sent: the assignment plus the old replicas a move keeps
    /// running until the new ones are ready.
    dispatched: BTreeMap<String, u32>,
    /// What the history would record as the cause: `spec` (a new or changed spec), `fleet`,
    /// `failover`, `failback`, `reschedule` (Pending past `pendingTimeout`), `burst-retract` or
    /// `rebalance`.
    trigger: String,
    /// The history's one-line reason: what moved from where to where, and why.
    reason: String,
    /// The move the decision would start or continue (make-before-break); `null` when none.
    moving: Option<SimulatedMove>,
    /// The assignment the simulation started from (the named placement's); `null` for a new one.
    current: Option<BTreeMap<String, u32>>,
    /// Every cluster considered, by name.
    clusters: Vec<SimulatedCluster>,
    /// The explanation in words: a summary line, one line per cluster named (at most 20 and those
    /// with replicas), a line counting the others, then notes; `clusters` has every cluster.
    explanation: String,
}

fn check_name(field: &str, value: &str) -> Result<(), ApiError> {
    let valid = !value.is_empty()
        && value.len() <= 253
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if valid {
        Ok(())
    } else {
        Err(ApiError::Invalid(format!(
            "{field}: {value:?} is not a valid Kubernetes name (lowercase letters, digits, '-' and '.')"
        )))
    }
}

/// The spec as the controller would see it; an error names the field path from `spec`.
fn parse_spec(spec: Value) -> Result<MultiClusterDeploymentSpec, ApiError> {
    serde_path_to_error::deserialize(spec).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." {
            "spec".to_owned()
        } else {
            format!("spec.{path}")
        };
        ApiError::Invalid(format!("{at}: {}", e.into_inner()))
    })
}

/// Plans a spec on the current fleet exactly as applying it would now (failover, rescheduling
/// and burst retraction included) and returns the plan. Nothing is written: no placement, no
/// history, no work for the agents.
#[utoipa::path(
    post,
    path = "/api/v1/placements/simulate",
    tag = "placements",
    request_body(content = SimulateRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The decision the hub would make now.", body = SimulateResponse),
        (status = 400, description = "The body is not JSON.", body = ErrorBody),
        (status = 401, description = "No valid token.", body = ErrorBody),
        (status = 415, description = "The body is not sent as `application/json`.", body = ErrorBody),
        (status = 422, description = "The spec is invalid; the message names the field path.", body = ErrorBody),
        (status = 503, description = "The store or the management cluster cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all)]
pub(super) async fn simulate(
    State(state): State<RestState>,
    Json(body): Json<SimulateRequest>,
) -> Result<Json<SimulateResponse>, ApiError> {
    let namespace = body.namespace.unwrap_or_else(|| "default".to_owned());
    check_name("namespace", &namespace)?;
    if let Some(name) = &body.name {
        check_name("name", name)?;
    }
    let spec = parse_spec(body.spec)?;
    let name = body.name.as_deref().unwrap_or("simulation");
    let mut object = MultiClusterDeployment::new(name, spec);
    object.metadata.namespace = Some(namespace.clone());
    let valid = placement::validate(&object).map_err(ApiError::Invalid)?;

    // The stored placement of the named workload, as an apply of this spec would start from.
    let workload = WorkloadRef::new(&namespace, name);
    let previous = match &body.name {
        Some(_) => state
            .store
            .get_placement(&namespace, name)
            .await?
            .map(|p| Previous {
                decision: StoredDecision::from_json(&p.decision),
                generation: p.generation,
            }),
        None => None,
    };
    // A simulation is a change of the spec as far as the history goes.
    object.metadata.generation = Some(previous.as_ref().map_or(1, |p| p.generation + 1));
    state.sources.ready().await?;
    let gathered = state.sources.gather(previous);
    let current = gathered.previous.as_ref().map(|p| p.decision.assignment.clone());
    let planned = state
        .sources
        .index
        .with_ledger(|ledger| placement::plan(&gathered.inputs(&workload, &object, &valid, ledger)));
    let decision = &planned.decision;

    let clusters = decision
        .clusters
        .iter()
        .map(|c| SimulatedCluster {
            name: c.cluster.to_string(),
            role: match c.role {
                Role::Regular => "regular",
                Role::Burst => "burst",
            }
            .to_owned(),
            filtered_out: c.filter.as_ref().map(ToString::to_string),
            previous: c.previous,
            replicas: c.replicas,
            explanation: c.to_string(),
        })
        .collect();
    Ok(Json(SimulateResponse {
        namespace,
        name: body.name,
        policy: decision.strategy.name().to_owned(),
        replicas: decision.replicas,
        assignment: decision.assignment.clone(),
        unplaced: decision.unplaced,
        dispatched: planned.dispatched(),
        trigger: planned.trigger.to_owned(),
        reason: planned.reason(),
        moving: planned.moving.as_ref().map(|m| SimulatedMove {
            held: m.held.clone(),
            to: m.to.clone(),
            since: m.since.to_string(),
        }),
        current,
        clusters,
        explanation: decision.to_string(),
    }))
}
