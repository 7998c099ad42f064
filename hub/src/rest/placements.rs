//! `GET /api/v1/placements`, `GET /api/v1/placements/{namespace}/{name}` and its history.

use std::collections::BTreeMap;

use axum::extract::State;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use tracing::instrument;
use utoipa::{IntoParams, ToSchema};

use super::state::RestState;
use crate::api_error::{ApiError, ErrorBody, Json, Path, Query};
use crate::placement::stored::StoredDecision;
use crate::store::{HistoryCursor, HistoryQuery, PlacementHistoryEntry, PlacementRecord};

/// Page size when `limit` is not given.
pub(super) const DEFAULT_LIMIT: u32 = 50;
/// Largest page; a larger `limit` is refused, as the OpenAPI document says.
pub(super) const MAX_LIMIT: u32 = 500;

/// The placement policies, as `spec.placement.policy` spells them.
pub(super) const POLICIES: [&str; 6] = [
    "worst-fit",
    "best-fit",
    "proximity",
    "spread",
    "everywhere",
    "traffic",
];

/// A placement in a listing.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct PlacementSummary {
    /// The MultiClusterDeployment's namespace.
    namespace: String,
    /// The MultiClusterDeployment's name.
    name: String,
    /// The MultiClusterDeployment's uid.
    uid: String,
    /// The `metadata.generation` the decision was last written for.
    generation: i64,
    /// The placement policy (`worst-fit`, `best-fit`, `proximity`, `spread`, `everywhere`, `traffic`).
    policy: String,
    /// Replicas asked for in total (with `everywhere`, the count per cluster times the
    /// clusters).
    replicas: u32,
    /// Replicas per cluster; clusters without replicas are left out.
    assignment: BTreeMap<String, u32>,
    /// Replicas that fit nowhere.
    unplaced: u32,
    /// When the decision was last written, changed or not (RFC 3339).
    updated_at: String,
}

impl PlacementSummary {
    fn of(record: &PlacementRecord, decision: &StoredDecision) -> Self {
        PlacementSummary {
            namespace: record.namespace.clone(),
            name: record.name.clone(),
            uid: record.uid.clone(),
            generation: record.generation,
            policy: decision.strategy.clone(),
            replicas: decision.replicas,
            assignment: decision.assignment.clone(),
            unplaced: decision.unplaced,
            updated_at: record.updated_at.to_string(),
        }
    }
}

/// A page of placements.
#[derive(Serialize, Debug, ToSchema)]
pub(super) struct PlacementList {
    /// Placements by namespace and name.
    items: Vec<PlacementSummary>,
    /// Pass as `continue` to get the next page; `null` on the last page.
    #[serde(rename = "continue")]
    continue_: Option<String>,
}

/// One cluster's part in a decision.
#[derive(Serialize, Debug, ToSchema)]
pub(super) struct ClusterExplanation {
    /// The cluster.
    name: String,
    /// Replicas assigned to it.
    replicas: u32,
    /// Why: filtered out by what, its rank and room, what changed.
    explanation: String,
    /// What the cluster's agent reports failing of the workload (objects not applied, a
    /// Deployment unable to progress); absent when nothing fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    failing: Option<String>,
}

/// A placement with the reasons for it.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct PlacementDetail {
    /// The placement.
    #[serde(flatten)]
    summary: PlacementSummary,
    /// The clusters the decision names, by name, with why each got what it got: every cluster
    /// that holds or held replicas, and in a fleet of more than 20 clusters up to 20 in all
    /// (one filtered out for each reason, then the best ranked); `POST
    /// /api/v1/placements/simulate` with the MCD's name and spec explains every cluster.
    clusters: Vec<ClusterExplanation>,
    /// The whole explanation: a summary line, one line per cluster named, a line counting the
    /// others by reason, then notes.
    explanation: String,
}

/// Query of `GET /api/v1/placements`.
#[derive(Deserialize, Debug, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct ListQuery {
    /// Only placements in this namespace.
    namespace: Option<String>,
    /// Only placements with at least one replica in this cluster.
    cluster: Option<String>,
    /// Only placements of this policy: `worst-fit`, `best-fit`, `proximity`, `spread`, `everywhere`
    /// or `traffic`.
    #[param(pattern = "^(worst-fit|best-fit|proximity|spread|everywhere|traffic)$")]
    policy: Option<String>,
    /// Page size, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// The `continue` value of the previous page; absent or empty: the first page.
    #[serde(rename = "continue")]
    #[param(rename = "continue")]
    continue_: Option<String>,
}

/// Query of the history endpoint.
#[derive(Deserialize, Debug, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct HistoryParams {
    /// Page size, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// The `continue` value of the previous page; absent or empty: the first page.
    #[serde(rename = "continue")]
    #[param(rename = "continue")]
    continue_: Option<String>,
}

fn limit(limit: Option<u32>) -> Result<usize, ApiError> {
    match limit {
        None => Ok(DEFAULT_LIMIT as usize),
        Some(n @ 1..=MAX_LIMIT) => Ok(n as usize),
        Some(n) => Err(ApiError::BadRequest(format!(
            "limit must be between 1 and {MAX_LIMIT}, got {n}"
        ))),
    }
}

const BAD_CONTINUE: &str = "invalid continue token; pass the `continue` value of the previous page unchanged";

/// The position after `namespace/name`, as an opaque token.
fn continue_token(namespace: &str, name: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{namespace}/{name}"))
}

fn parse_continue(token: &str) -> Result<(String, String), ApiError> {
    let bad = || ApiError::BadRequest(BAD_CONTINUE.to_owned());
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (namespace, name) = text.split_once('/').ok_or_else(bad)?;
    Ok((namespace.to_owned(), name.to_owned()))
}

/// Lists placements, filtered and paged by namespace and name.
#[utoipa::path(
    get,
    path = "/api/v1/placements",
    tag = "placements",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of placements.", body = PlacementList),
        (status = 400, description = "A query parameter is unknown or has a bad value.", body = ErrorBody),
        (status = 401, description = "No valid token.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all)]
pub(super) async fn list(
    State(state): State<RestState>,
    Query(query): Query<ListQuery>,
) -> Result<Json<PlacementList>, ApiError> {
    let limit = limit(query.limit)?;
    if let Some(policy) = &query.policy
        && !POLICIES.contains(&policy.as_str())
    {
        return Err(ApiError::BadRequest(format!(
            "unknown policy {policy:?}; expected one of {}",
            POLICIES.join(", ")
        )));
    }
    // An empty `continue` is the first page, as no `continue` is.
    let after = query
        .continue_
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(parse_continue)
        .transpose()?;
    // The store lists by namespace and name; the filters and the page are applied here.
    let records = state.store.list_placements(query.namespace.as_deref()).await?;
    let mut matching = records
        .iter()
        .filter(|r| {
            after.as_ref().is_none_or(|(ns, name)| {
                (r.namespace.as_str(), r.name.as_str()) > (ns.as_str(), name.as_str())
            })
        })
        .map(|r| (r, StoredDecision::from_json(&r.decision)))
        .filter(|(_, d)| query.policy.as_ref().is_none_or(|p| *p == d.strategy))
        .filter(|(_, d)| {
            query
                .cluster
                .as_ref()
                .is_none_or(|c| d.assignment.get(c).is_some_and(|n| *n > 0))
        });
    let items: Vec<PlacementSummary> = matching
        .by_ref()
        .take(limit)
        .map(|(r, d)| PlacementSummary::of(r, &d))
        .collect();
    let more = matching.next().is_some();
    let continue_ = match items.last() {
        Some(last) if more => Some(continue_token(&last.namespace, &last.name)),
        _ => None,
    };
    Ok(Json(PlacementList { items, continue_ }))
}

/// One placement, with the per-cluster explanation.
#[utoipa::path(
    get,
    path = "/api/v1/placements/{namespace}/{name}",
    tag = "placements",
    params(
        ("namespace" = String, Path, description = "The MultiClusterDeployment's namespace."),
        ("name" = String, Path, description = "The MultiClusterDeployment's name."),
    ),
    responses(
        (status = 200, description = "The placement.", body = PlacementDetail),
        (status = 401, description = "No valid token.", body = ErrorBody),
        (status = 404, description = "No placement of that name.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all, fields(namespace = %namespace, name = %name))]
pub(super) async fn get(
    State(state): State<RestState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<PlacementDetail>, ApiError> {
    let record = state
        .store
        .get_placement(&namespace, &name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no placement for {namespace}/{name}")))?;
    let decision = StoredDecision::from_json(&record.decision);
    let reports = state.sources.index.reports();
    let workload = nave_api::wire::WorkloadRef::new(&namespace, &name);
    let clusters = decision
        .clusters
        .iter()
        .map(|(cluster, explanation)| ClusterExplanation {
            name: cluster.clone(),
            replicas: decision.assignment.get(cluster).copied().unwrap_or(0),
            explanation: explanation.clone(),
            failing: crate::placement::reports::cluster_failure(
                reports.get(cluster).map(AsRef::as_ref),
                &workload,
            ),
        })
        .collect();
    Ok(Json(PlacementDetail {
        summary: PlacementSummary::of(&record, &decision),
        clusters,
        explanation: decision.explanation.clone(),
    }))
}

/// One change of a placement.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct HistoryItem {
    /// When the decision was made (RFC 3339).
    at: String,
    /// The MultiClusterDeployment's uid then (a re-created one has a new uid).
    uid: String,
    /// The generation the decision was made for.
    generation: i64,
    /// What caused it: `spec` (the spec changed), `fleet` (clusters or their capacity changed),
    /// `failover`, `failback`, `reschedule` (Pending replicas moved), `burst-retract` (burst
    /// replicas came back) or `rebalance` (placed again from scratch on request).
    trigger: String,
    /// Why, in words: the decision's summary line.
    reason: String,
    /// The placement policy.
    policy: String,
    /// Replicas per cluster after the change.
    assignment: BTreeMap<String, u32>,
    /// Replicas that fit nowhere.
    unplaced: u32,
}

impl From<&PlacementHistoryEntry> for HistoryItem {
    fn from(entry: &PlacementHistoryEntry) -> Self {
        let decision = StoredDecision::from_json(&entry.decision);
        HistoryItem {
            at: entry.at.to_string(),
            uid: entry.uid.clone(),
            generation: entry.generation,
            trigger: entry.trigger.clone(),
            reason: entry.reason.clone(),
            policy: decision.strategy,
            assignment: decision.assignment,
            unplaced: decision.unplaced,
        }
    }
}

/// A page of placement history, newest first.
#[derive(Serialize, Debug, ToSchema)]
pub(super) struct HistoryList {
    /// Changes, newest first.
    items: Vec<HistoryItem>,
    /// Pass as `continue` to get the next (older) page; `null` on the last page.
    #[serde(rename = "continue")]
    continue_: Option<String>,
}

/// How a placement changed over time, newest first. The history outlives the placement: it is
/// kept after the MultiClusterDeployment is deleted.
#[utoipa::path(
    get,
    path = "/api/v1/placements/{namespace}/{name}/history",
    tag = "placements",
    params(
        ("namespace" = String, Path, description = "The MultiClusterDeployment's namespace."),
        ("name" = String, Path, description = "The MultiClusterDeployment's name."),
        HistoryParams,
    ),
    responses(
        (status = 200, description = "A page of changes, newest first.", body = HistoryList),
        (status = 400, description = "A query parameter is unknown or has a bad value.", body = ErrorBody),
        (status = 401, description = "No valid token.", body = ErrorBody),
        (status = 404, description = "Neither a placement nor any history of that name.", body = ErrorBody),
        (status = 503, description = "The store cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all, fields(namespace = %namespace, name = %name))]
pub(super) async fn history(
    State(state): State<RestState>,
    Path((namespace, name)): Path<(String, String)>,
    Query(query): Query<HistoryParams>,
) -> Result<Json<HistoryList>, ApiError> {
    let limit = limit(query.limit)?;
    let after = query
        .continue_
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<HistoryCursor>())
        .transpose()
        .map_err(|_| ApiError::BadRequest(BAD_CONTINUE.to_owned()))?;
    let page = state
        .store
        .placement_history(&HistoryQuery {
            namespace: Some(namespace.clone()),
            name: Some(name.clone()),
            after,
            limit: u32::try_from(limit).unwrap_or(MAX_LIMIT),
            ..HistoryQuery::default()
        })
        .await?;
    if page.entries.is_empty()
        && after.is_none()
        && state.store.get_placement(&namespace, &name).await?.is_none()
    {
        return Err(ApiError::NotFound(format!(
            "no placement and no history for {namespace}/{name}"
        )));
    }
    Ok(Json(HistoryList {
        items: page.entries.iter().map(HistoryItem::from).collect(),
        continue_: page.next.map(|c| c.to_string()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_garbage_is_rejected() {
        let token = continue_token("team-a", "web");
        assert_eq!(
            parse_continue(&token).unwrap(),
            ("team-a".to_owned(), "web".to_owned())
        );
        for bad in ["", "!!!", &URL_SAFE_NO_PAD.encode("no-slash")] {
            assert!(
                matches!(parse_continue(bad), Err(ApiError::BadRequest(_))),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn limits_default_and_refuse_what_the_document_does_not_allow() {
        assert_eq!(limit(None).unwrap(), 50);
        assert_eq!(limit(Some(7)).unwrap(), 7);
        assert_eq!(limit(Some(500)).unwrap(), 500);
        assert!(matches!(limit(Some(501)), Err(ApiError::BadRequest(_))));
        assert!(matches!(limit(Some(0)), Err(ApiError::BadRequest(_))));
    }
}
