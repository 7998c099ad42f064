//! `GET /api/v1/clusters` and `GET /api/v1/clusters/{name}`.

use std::collections::BTreeMap;

use axum::extract::State;
use nave_api::WorkloadCluster;
use nave_api::wire::{self, LatencySample};
use serde::{Deserialize as _, Serialize};
use tracing::instrument;
use utoipa::ToSchema;

use super::state::RestState;
use crate::api_error::{ApiError, ErrorBody, Json, Path};
use crate::fleet::FleetView;
use crate::placement::stored::StoredDecision;
use crate::store::{ClusterRecord, PlacementRecord};

/// The clusters, by name.
#[derive(Serialize, Debug, ToSchema)]
pub(super) struct ClusterList {
    /// Every registered cluster and every declared WorkloadCluster, by name (not paginated).
    items: Vec<ClusterView>,
}

/// A taint of a cluster.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct TaintView {
    /// `key=value:Effect`, or `key:Effect` without a value.
    taint: String,
    /// Whole seconds since it was added (its `timeAdded`, else since the hub first saw it).
    age_seconds: u64,
}

/// A workload cluster as the hub sees it.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct ClusterView {
    /// The cluster's name (its WorkloadCluster's name).
    name: String,
    /// Region, from the WorkloadCluster or the agent.
    region: Option<String>,
    /// Zone within the region.
    zone: Option<String>,
    /// Labels that cluster selectors match, including the region and zone labels.
    labels: BTreeMap<String, String>,
    /// Its agent sent a heartbeat within the grace period: it can take new replicas.
    ready: bool,
    /// Its agent has registered with the hub.
    joined: bool,
    /// The hub may place work on it: an admin accepted it, it joined with a join token, or the
    /// hub accepts new clusters. A joined cluster that is not accepted runs nothing.
    accepted: bool,
    /// Cordoned (`unschedulable`): takes no new replicas.
    cordoned: bool,
    /// Its taints, as `key=value:Effect` (`nave.dev/drain:NoExecute` while it drains), with
    /// how long each has been there: workloads that do not tolerate one keep off.
    taints: Vec<TaintView>,
    /// Used only for overflow, and emptied first.
    burst_only: bool,
    /// When its agent first registered (RFC 3339).
    registered_at: Option<String>,
    /// When the hub received its last heartbeat (RFC 3339); `null` before the first.
    last_heartbeat_time: Option<String>,
    /// Whole seconds since the last heartbeat; `null` before the first.
    last_heartbeat_age_seconds: Option<u64>,
    /// Version of its agent.
    agent_version: Option<String>,
    /// Its Kubernetes version.
    kubernetes_version: Option<String>,
    /// Capacity of its schedulable nodes, from the last heartbeat; `null` before the first.
    capacity: Option<CapacityView>,
    /// Requested over allocatable; `null` without capacity.
    utilization: Option<UtilizationView>,
    /// What Prometheus measured, when the hub reads it (`--prometheus-url`) and the values are
    /// younger than `--prometheus-ttl`; `null` otherwise, and placement then counts requests.
    usage: Option<UsageView>,
    /// Round-trip times its agent measured, from the last heartbeat: to the hub, and to the
    /// agents of other clusters that give a probe URL. `null` before the agent reported any.
    latency: Option<LatencyView>,
    /// Its place in the network coordinates fitted to every measured round trip, from which
    /// the hub estimates latency between clusters that never measured each other. `null` while
    /// it has no measurements.
    network_coordinate: Option<NetworkCoordinateView>,
    /// The placements that assign replicas to it.
    assigned: AssignedView,
}

/// Amounts in the units the scheduler counts.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct ResourcesView {
    /// CPU in millicores.
    cpu_millis: u64,
    /// Memory in bytes.
    memory_bytes: u64,
    /// Pod slots (allocatable, free) or pods (requested).
    pods: u64,
}

impl From<wire::Resources> for ResourcesView {
    fn from(r: wire::Resources) -> Self {
        ResourcesView {
            cpu_millis: r.cpu_millis,
            memory_bytes: r.memory_bytes,
            pods: r.pods,
        }
    }
}

/// Capacity summed over the schedulable (ready, not cordoned) nodes.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct CapacityView {
    /// Allocatable.
    allocatable: ResourcesView,
    /// Requested by the pods bound to the nodes.
    requested: ResourcesView,
    /// Allocatable minus requested.
    free: ResourcesView,
    /// All nodes.
    nodes: u64,
    /// Nodes that are ready and not cordoned.
    schedulable_nodes: u64,
}

/// Requested over allocatable, in percent.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct UtilizationView {
    /// CPU; `null` when nothing is allocatable.
    cpu_percent: Option<f64>,
    /// Memory; `null` when nothing is allocatable.
    memory_percent: Option<f64>,
}

/// Usage measured by Prometheus. Measured CPU and memory replace requests in the cluster's
/// utilization for placement (the bursting threshold) and rank it by the headroom they leave.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct UsageView {
    /// CPU in use, in millicores; `null` when not measured.
    cpu_millis: Option<u64>,
    /// Memory in use, in bytes; `null` when not measured.
    memory_bytes: Option<u64>,
    /// The traffic query's value (`--prometheus-traffic-query`); `null` without one.
    traffic: Option<f64>,
    /// When the oldest of these values was read (RFC 3339).
    measured_at: String,
}

/// Round-trip times measured by the cluster's agent.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct LatencyView {
    /// To the hub, in milliseconds, when measured.
    hub_millis: Option<f64>,
    /// To other clusters, in milliseconds, by cluster name.
    peers: BTreeMap<String, f64>,
    /// When the heartbeat carrying them was received (RFC 3339).
    measured_at: String,
}

/// A network coordinate (Vivaldi): a point in a plane plus a height, in milliseconds; the
/// estimated round trip between two clusters is the distance of their points plus both heights.
#[derive(Serialize, Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct NetworkCoordinateView {
    /// The point in the plane, `[x, y]`, in milliseconds.
    position: [f64; 2],
    /// The height (its access link's share of every round trip), in milliseconds.
    height_millis: f64,
    /// Median relative error of the fitted round trips against the measured ones on its links.
    error: f64,
    /// Measured links (peers and the hub) it was fitted on.
    links: u32,
    /// Whether estimates use it: at least 3 links and an error of at most 0.25.
    trusted: bool,
}

/// What is placed on a cluster.
#[derive(Serialize, Debug, Default, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct AssignedView {
    /// Placements with at least one replica on it.
    placements: u64,
    /// Replicas assigned to it, summed over the placements.
    replicas: u64,
}

fn percent(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 * 100.0 / whole as f64)
}

fn capacity(record: Option<&ClusterRecord>) -> Option<wire::CapacityModel> {
    wire::CapacityModel::deserialize(record?.capacity.as_deref()?).ok()
}

fn assigned(placements: &[PlacementRecord], cluster: &str) -> AssignedView {
    placements
        .iter()
        .filter_map(|p| {
            StoredDecision::from_json(&p.decision)
                .assignment
                .get(cluster)
                .copied()
        })
        .filter(|n| *n > 0)
        .fold(AssignedView::default(), |acc, n| AssignedView {
            placements: acc.placements + 1,
            replicas: acc.replicas + u64::from(n),
        })
}

async fn latency(state: &RestState, cluster: &str) -> Result<Option<LatencyView>, ApiError> {
    let newest = state.store.list_heartbeats(cluster, 1).await?;
    let Some(beat) = newest.first() else {
        return Ok(None);
    };
    let samples: Vec<LatencySample> =
        serde_json::from_value(beat.payload["latencySamples"].clone()).unwrap_or_default();
    if samples.is_empty() {
        return Ok(None);
    }
    let hub_millis = samples
        .iter()
        .find(|s| s.peer == LatencySample::HUB)
        .map(|s| s.rtt_millis);
    let peers = samples
        .into_iter()
        .filter(|s| s.peer != LatencySample::HUB)
        .map(|s| (s.peer, s.rtt_millis))
        .collect();
    Ok(Some(LatencyView {
        hub_millis,
        peers,
        measured_at: beat.received_at.to_string(),
    }))
}

async fn view(
    state: &RestState,
    fleet: &FleetView,
    placements: &[PlacementRecord],
    name: &str,
) -> Result<ClusterView, ApiError> {
    let record = fleet.records.get(name).map(std::sync::Arc::as_ref);
    let object: Option<&WorkloadCluster> = fleet.objects.get(name).map(std::sync::Arc::as_ref);
    let cluster = fleet.fleet.get(name);
    let model = capacity(record);
    let capacity = model.as_ref().map(|m| CapacityView {
        allocatable: m.totals.allocatable.into(),
        requested: m.totals.requested.into(),
        free: m.totals.allocatable.saturating_sub(m.totals.requested).into(),
        nodes: m.totals.nodes,
        schedulable_nodes: m.totals.schedulable_nodes,
    });
    let utilization = model.as_ref().map(|m| UtilizationView {
        cpu_percent: percent(m.totals.requested.cpu_millis, m.totals.allocatable.cpu_millis),
        memory_percent: percent(m.totals.requested.memory_bytes, m.totals.allocatable.memory_bytes),
    });
    let last_heartbeat = record.and_then(|r| r.last_heartbeat_at);
    Ok(ClusterView {
        name: name.to_owned(),
        region: object
            .and_then(|o| o.spec.region.clone())
            .or_else(|| record.and_then(|r| r.region.clone())),
        zone: object
            .and_then(|o| o.spec.zone.clone())
            .or_else(|| record.and_then(|r| r.zone.clone())),
        labels: cluster.map(|c| c.labels.clone()).unwrap_or_default(),
        ready: cluster.is_some_and(|c| c.ready),
        joined: record.is_some(),
        accepted: record.is_some_and(|r| r.accepted),
        cordoned: cluster.is_some_and(|c| c.unschedulable),
        taints: cluster
            .map(|c| {
                c.taints
                    .iter()
                    .map(|t| TaintView {
                        taint: t.taint.to_string(),
                        age_seconds: t.age.as_secs(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        burst_only: cluster.is_some_and(|c| c.burst_only),
        registered_at: record.map(|r| r.registered_at.to_string()),
        last_heartbeat_time: last_heartbeat.map(|at| at.to_string()),
        last_heartbeat_age_seconds: last_heartbeat
            .map(|at| fleet.now.duration_since(at).as_secs().max(0).unsigned_abs()),
        agent_version: record.and_then(|r| r.agent_version.clone()),
        kubernetes_version: record.and_then(|r| r.kubernetes_version.clone()),
        capacity,
        utilization,
        usage: fleet.usage.get(name).map(|m| UsageView {
            cpu_millis: m.cpu_millis,
            memory_bytes: m.memory_bytes,
            traffic: m.traffic,
            measured_at: m.at.to_string(),
        }),
        latency: if record.is_some() {
            latency(state, name).await?
        } else {
            None
        },
        network_coordinate: cluster.and_then(|c| c.network).map(|n| NetworkCoordinateView {
            position: n.position,
            height_millis: n.height,
            error: n.error,
            links: n.links,
            trusted: n.is_trusted(),
        }),
        assigned: assigned(placements, name),
    })
}

async fn gather(state: &RestState) -> Result<(std::sync::Arc<FleetView>, Vec<PlacementRecord>), ApiError> {
    state.sources.ready().await?;
    let fleet = state.sources.view();
    let placements = state.store.list_placements(None).await?;
    Ok((fleet, placements))
}

/// Lists every cluster: health, capacity, utilization, and what is placed on it.
#[utoipa::path(
    get,
    path = "/api/v1/clusters",
    tag = "clusters",
    responses(
        (status = 200, description = "The clusters, by name.", body = ClusterList),
        (status = 401, description = "No valid token.", body = ErrorBody),
        (status = 503, description = "The store or the management cluster cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all)]
pub(super) async fn list(State(state): State<RestState>) -> Result<Json<ClusterList>, ApiError> {
    let (fleet, placements) = gather(&state).await?;
    let mut items = Vec::new();
    for cluster in fleet.fleet.iter() {
        items.push(view(&state, &fleet, &placements, &cluster.name).await?);
    }
    Ok(Json(ClusterList { items }))
}

/// One cluster.
#[utoipa::path(
    get,
    path = "/api/v1/clusters/{name}",
    tag = "clusters",
    params(("name" = String, Path, description = "The cluster's name.")),
    responses(
        (status = 200, description = "The cluster.", body = ClusterView),
        (status = 401, description = "No valid token.", body = ErrorBody),
        (status = 404, description = "No such cluster.", body = ErrorBody),
        (status = 503, description = "The store or the management cluster cannot be reached.", body = ErrorBody),
    )
)]
#[instrument(skip_all, fields(cluster = %name))]
pub(super) async fn get(
    State(state): State<RestState>,
    Path(name): Path<String>,
) -> Result<Json<ClusterView>, ApiError> {
    let (fleet, placements) = gather(&state).await?;
    if fleet.fleet.get(&name).is_none() {
        return Err(ApiError::NotFound(format!(
            "cluster {name:?} is neither registered nor declared"
        )));
    }
    Ok(Json(view(&state, &fleet, &placements, &name).await?))
}
