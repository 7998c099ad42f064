//! The hub <-> agent protocol: HTTP/JSON under [`PREFIX`] (`/agent/v1`), pulled by the agent.
//!
//! The hub never opens a connection to a workload cluster; each agent needs only an outbound route
//! to the hub. Every body is JSON with camelCase fields.
//!
//! ```text
//!  agent                                              hub
//!    │ POST /agent/v1/register   (bootstrap token)      │  RegisterRequest -> RegisterResponse
//!    │ ───────────────────────────────────────────────► │  (per-cluster credential, stored hashed)
//!    │ POST /agent/v1/heartbeat  (credential)           │  Heartbeat -> 200 HeartbeatAnswer
//!    │ GET  /agent/v1/work?after=R&wait=S (credential)  │  200 WorkSet | 204 nothing newer
//!    │ POST /agent/v1/status     (credential)           │  StatusReport -> 204
//!    │ POST /agent/v1/status/delta (credential)         │  StatusDelta -> 204 | 409 send it whole
//! ```
//!
//! # Authentication
//!
//! Every request carries `Authorization: Bearer <token>`. `register` takes a bootstrap token (one
//! per fleet, given to every agent at install time); the other endpoints take the per-cluster
//! credential that `register` returned. A credential grants access to its own cluster only:
//! requests that name another cluster (in [`Heartbeat::cluster_name`],
//! [`StatusReport::cluster_name`] or [`WorkQuery::cluster`]) get `403`, because another
//! cluster's work may hold Secrets. Unknown or revoked tokens get `401`; the agent then registers
//! again with its bootstrap token. Registering a cluster name again issues a new credential and
//! revokes the previous one (an agent that lost its stored credential re-joins as itself).
//!
//! # Work and revisions
//!
//! The hub keeps, per cluster, the full desired object set at a revision, a `u64` that grows by
//! one whenever the set changes (`0`: nothing was ever assigned). `GET` [`WORK_PATH`] with the
//! [`WorkQuery`] `after` (the revision the agent has applied) and `wait` (seconds) answers:
//! - `200` with a [`WorkSet`] as soon as the cluster's current revision differs from `after`
//!   (at once when it already does), or, with `held`, as soon as the hub's sets are complete.
//!   A set from another store, or of a lower revision, is followed only once it is complete; a
//!   set of revision 0 ("no work") never deletes anything (see [`WorkHeld`]).
//! - `204 No Content` when the revision is still `after` after `wait` seconds. The hub caps
//!   `wait` at [`MAX_WORK_WAIT_SECONDS`]; `wait=0` or no `wait` answers at once. `204` rather than
//!   `304`: this is not an HTTP conditional request, and proxies and caches treat `304` specially.
//!
//! Applying a work set is idempotent. The agent applies every object with server-side apply (field
//! manager [`crate::AGENT_FIELD_MANAGER`]), adds [`MANAGED_BY_LABEL`]=[`MANAGED_BY_VALUE`],
//! [`INSTALLATION_LABEL`] and [`REVISION_ANNOTATION`], and then deletes the objects it applied
//! before that are not in the set. Between periodic full re-applies (which repair what others
//! changed), a new revision sends the cluster only the objects whose content changed. Objects
//! that are not its installation's are never changed or
//! deleted: one that exists with the same name is reported as an [`ApplyError`], not taken over.
//! Namespaces are never deleted, since that would delete what others keep in them. The agent
//! applies only the kinds and namespaces its own configuration allows, whatever the set holds.
//!
//! # Status reports
//!
//! The agent reports the status of every object of its set. To a hub whose heartbeat answer
//! says so ([`HeartbeatAnswer::status_deltas`]) it sends, after a first whole report, only what
//! changed since the last report the hub took ([`StatusDelta`], to [`STATUS_DELTA_PATH`]): a
//! report goes by an [`id`](StatusReport::id) that changes with its content, and a delta names
//! the report it follows. A hub holding another report answers `409` and the agent sends its
//! whole report, so a hub restarted from an older store, a lost answer, or another replica never
//! builds a report from the wrong base. A hub that does not answer deltas is sent whole reports.
//!
//! # Workloads
//!
//! The hub labels each object it sends (and the pod template of each Deployment) with
//! [`WORKLOAD_LABEL`] = [`WorkloadRef::label_value`] of the MultiClusterDeployment it comes from;
//! the agent reports status and pending pods per workload from that label (and adds it to a
//! Deployment's pod template when the hub left it out).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Coordinates;

#[cfg(test)]
mod tests;

/// Path prefix of every agent endpoint.
pub const PREFIX: &str = "/agent/v1";
/// `POST`: [`RegisterRequest`] -> [`RegisterResponse`], with the bootstrap token.
pub const REGISTER_PATH: &str = "/agent/v1/register";
/// `POST`: [`Heartbeat`] -> `200` [`HeartbeatAnswer`]. Earlier hubs answered `204` with no body;
/// agents take that as an answer without peers.
pub const HEARTBEAT_PATH: &str = "/agent/v1/heartbeat";
/// `GET` with [`WorkQuery`]: `200` [`WorkSet`] or `204` (long-poll, see the module docs).
pub const WORK_PATH: &str = "/agent/v1/work";
/// `POST`: [`StatusReport`] -> `204`.
pub const STATUS_PATH: &str = "/agent/v1/status";
/// `POST`: [`StatusDelta`] -> `204`; `409` when the hub does not hold the report it follows
/// (the agent then sends its whole report to [`STATUS_PATH`]).
pub const STATUS_DELTA_PATH: &str = "/agent/v1/status/delta";

/// Label on every object the agent applied; the agent prunes only objects that carry it.
pub const MANAGED_BY_LABEL: &str = "nave.dev/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY_VALUE: &str = "nave-agent";
/// Label naming the agent installation that applied an object (the agent's namespace unless
/// configured): two installations in one cluster never touch each other's objects.
pub const INSTALLATION_LABEL: &str = "nave.dev/installation";
/// Label naming the workload (MultiClusterDeployment) an object or pod belongs to, as
/// `<namespace>.<name>` (label values cannot hold `/`; namespaces cannot hold `.`).
pub const WORKLOAD_LABEL: &str = "nave.dev/workload";

/// What begins the name of a MultiClusterResource's [`WorkloadRef`] (see
/// [`WorkloadRef::resource`]): `kubectl get -l nave.dev/workload=shop.mcr_deny-all`.
pub const RESOURCE_PREFIX: &str = "mcr_";
/// What begins the name of a MultiClusterJob's [`WorkloadRef`] (see [`WorkloadRef::job`]).
pub const JOB_PREFIX: &str = "mcj_";
/// Annotation with the work revision that last changed the object (or re-applied it in a full
/// resync): an object a new revision leaves unchanged keeps the revision it was sent at.
pub const REVISION_ANNOTATION: &str = "nave.dev/work-revision";

/// Heartbeat interval the hub asks for unless configured otherwise.
pub const DEFAULT_HEARTBEAT_INTERVAL_SECONDS: u64 = 10;
/// Longest `wait` of a work long-poll the hub honours.
pub const MAX_WORK_WAIT_SECONDS: u64 = 60;

/// `POST /agent/v1/register` body. The bootstrap token goes in the `Authorization` header.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RegisterRequest {
    /// Name of the WorkloadCluster this agent speaks for; created by the hub when missing.
    /// Example: `eu-west-1`.
    #[cfg_attr(
        feature = "openapi",
        schema(
            max_length = 253,
            pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
        )
    )]
    pub cluster_name: String,
    /// Version of the agent. Example: `0.1.0`.
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 64, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")
    )]
    pub agent_version: String,
    /// Kubernetes version of the cluster (`/version` gitVersion), when known. Example: `v1.33.1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 64, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")
    )]
    pub kubernetes_version: Option<String>,
    /// Labels proposed for a WorkloadCluster the hub creates; an existing one keeps its own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Region of the cluster (a label value). Example: `eu-west`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 63, pattern = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
    )]
    pub region: Option<String>,
    /// Zone of the cluster (a label value). Example: `eu-west-1a`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 63, pattern = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
    )]
    pub zone: Option<String>,
    /// Where the cluster is, for proximity placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinates: Option<Coordinates>,
}

/// `200` answer to a registration.
#[derive(Serialize, Deserialize, Clone, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RegisterResponse {
    /// The cluster the credential is for (echoes the request).
    pub cluster_name: String,
    /// The per-cluster bearer token for every other endpoint. The hub stores only its hash, so
    /// this answer is the only place it appears; the agent keeps it in a Secret.
    pub credential: String,
    /// How often the hub wants heartbeats.
    pub heartbeat_interval_seconds: u64,
    /// Longest `wait` the hub honours on [`WORK_PATH`].
    #[serde(default = "default_max_wait")]
    pub max_work_wait_seconds: u64,
}

fn default_max_wait() -> u64 {
    MAX_WORK_WAIT_SECONDS
}

// The credential is a secret: keep it out of logs and panic messages.
impl RegisterRequest {
    /// Why the hub refuses this registration, naming the field; `Ok` when every field is what a
    /// WorkloadCluster can hold. Checked before anything is stored, so the store and the
    /// WorkloadCluster never disagree about a cluster the API server would not take.
    pub fn validate(&self) -> Result<(), String> {
        if !is_dns_subdomain(&self.cluster_name) {
            return Err(format!(
                "clusterName: Invalid value: {:?}: a lowercase RFC 1123 subdomain (dot-separated labels of \
                 lowercase letters, digits and '-', each starting and ending with a letter or digit)",
                self.cluster_name
            ));
        }
        for (field, value) in [
            ("agentVersion", Some(&self.agent_version)),
            ("kubernetesVersion", self.kubernetes_version.as_ref()),
        ] {
            if let Some(value) = value
                && (value.len() > 64 || value.chars().any(char::is_control))
            {
                return Err(format!(
                    "{field}: Invalid value: at most 64 characters without control characters"
                ));
            }
        }
        for (key, value) in &self.labels {
            check_label_key(key).map_err(|why| format!("labels: Invalid value: {key:?}: {why}"))?;
            check_label_value(value)
                .map_err(|why| format!("labels[{key}]: Invalid value: {value:?}: {why}"))?;
        }
        for (field, value) in [("region", &self.region), ("zone", &self.zone)] {
            if let Some(value) = value {
                check_label_value(value)
                    .map_err(|why| format!("{field}: Invalid value: {value:?}: {why}"))?;
            }
        }
        if let Some(c) = &self.coordinates {
            if !(c.latitude.is_finite() && (-90.0..=90.0).contains(&c.latitude)) {
                return Err(format!(
                    "coordinates.latitude: Invalid value: {}: must be from -90 to 90",
                    c.latitude
                ));
            }
            if !(c.longitude.is_finite() && (-180.0..=180.0).contains(&c.longitude)) {
                return Err(format!(
                    "coordinates.longitude: Invalid value: {}: must be from -180 to 180",
                    c.longitude
                ));
            }
        }
        Ok(())
    }
}

/// A lowercase RFC 1123 label: 1 to 63 of `[a-z0-9-]`, starting and ending alphanumeric.
pub fn is_dns_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// A lowercase RFC 1123 subdomain: at most 253 characters of dot-separated labels.
pub fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty() && name.len() <= 253 && name.split('.').all(is_dns_label)
}

/// A Kubernetes label name or value body: 1 to 63 of `[A-Za-z0-9-_.]`, starting and ending
/// alphanumeric.
fn is_label_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn check_label_key(key: &str) -> Result<(), &'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if prefix.is_some_and(|p| !is_dns_subdomain(p)) {
        return Err("the prefix must be a lowercase RFC 1123 subdomain");
    }
    if !is_label_name(name) {
        return Err("the name must be 1 to 63 of [A-Za-z0-9-_.], starting and ending alphanumeric");
    }
    Ok(())
}

fn check_label_value(value: &str) -> Result<(), &'static str> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err("must be empty or 1 to 63 of [A-Za-z0-9-_.], starting and ending alphanumeric")
    }
}

impl fmt::Debug for RegisterResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisterResponse")
            .field("cluster_name", &self.cluster_name)
            .field("credential", &"<redacted>")
            .field("heartbeat_interval_seconds", &self.heartbeat_interval_seconds)
            .field("max_work_wait_seconds", &self.max_work_wait_seconds)
            .finish()
    }
}

/// `POST /agent/v1/heartbeat` body: what the cluster has, what waits, and how the agent is.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Heartbeat {
    /// The cluster; when present it must be the credential's cluster (else `403`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// Version of the agent.
    pub agent_version: String,
    /// Kubernetes version of the cluster, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// Nodes and their free room.
    pub capacity: CapacityModel,
    /// Pods not scheduled (condition `PodScheduled=False`), Nave's first, at most
    /// [`Heartbeat::MAX_PENDING_PODS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_pods: Vec<PendingPod>,
    /// Pending pods left out of `pendingPods` to keep the heartbeat small.
    #[serde(
        deserialize_with = "int64::required",
        default,
        skip_serializing_if = "is_zero"
    )]
    pub pending_pods_omitted: u64,
    /// Measured usage of the whole cluster (metrics), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Resources>,
    /// Measured usage of each Nave workload's pods in the cluster, from the cluster's resource
    /// metrics API (`metrics.k8s.io`, metrics-server), by workload; at most
    /// [`Heartbeat::MAX_WORKLOAD_USAGE`]. Absent when the agent has no recent answer of the
    /// metrics API (none served, not allowed, failing); present and without a workload when the
    /// API answered and measured none of its pods. What MultiClusterHorizontalPodAutoscalers
    /// scale by when the hub reads no Prometheus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_usage: Option<Vec<WorkloadUsage>>,
    /// Round-trip times the agent measured: to the hub ([`LatencySample::HUB`]) and to the peers
    /// the hub named in its recent [`HeartbeatAnswer`]s, each the median of the last rounds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_samples: Vec<LatencySample>,
    /// Where other agents can reach this one to measure round trips: a URL answering `GET` with
    /// `204` (the agent's `/probe`). Absent: the agent is not probed, and measures only what the
    /// hub asks of it. Example: `http://10.0.3.7:9090/probe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_url: Option<String>,
    /// The work revision the agent has fully applied (`None` before the first).
    #[serde(
        deserialize_with = "int64::optional",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub applied_revision: Option<u64>,
    /// Set while the agent refuses to follow the hub's work set because following it could
    /// delete what runs (see [`WorkHeld`]); the hub shows it as the WorkloadCluster condition
    /// `HubStoreChanged`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_held: Option<WorkHeld>,
}

/// Why an agent keeps what it runs instead of following the work set the hub sent. The agent
/// holds a set that comes from another store than the one it last followed, a revision below
/// the one it applied, or revision 0 (the hub has no work for the cluster) while it runs objects,
/// until the hub says it has published every workload's objects again ([`WorkSet::complete`]).
/// "No work" from a hub is never read as "delete everything".
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WorkHeld {
    /// What the agent saw.
    pub reason: HeldReason,
    /// The same, for people: what was expected and what came.
    pub message: String,
    /// The revision of the held set.
    #[serde(deserialize_with = "int64::required")]
    pub revision: u64,
    /// How many objects the agent keeps running meanwhile.
    #[serde(deserialize_with = "int64::required")]
    pub objects_kept: u64,
}

/// What made an agent hold a work set.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum HeldReason {
    /// The set comes from a store with another identity than the last set followed: a new or
    /// replaced store.
    StoreChanged,
    /// The set's revision is below the one applied, in the same store: a store restored from
    /// an older backup.
    RevisionWentBack,
    /// The hub has no work for this cluster (revision 0) while the agent runs objects.
    NoWork,
    /// The set would remove most of the workloads the agent runs (more than its limits allow at
    /// once), and no admin confirmed it ([`WorkSet::prune_confirmed`]).
    MassPrune,
}

impl HeldReason {
    /// The reason as a condition reason.
    pub fn as_str(self) -> &'static str {
        match self {
            HeldReason::StoreChanged => "StoreChanged",
            HeldReason::RevisionWentBack => "RevisionWentBack",
            HeldReason::NoWork => "NoWork",
            HeldReason::MassPrune => "MassPrune",
        }
    }
}

impl Heartbeat {
    /// Most pending pods one heartbeat lists.
    pub const MAX_PENDING_PODS: usize = 500;

    /// Most workloads one heartbeat reports the usage of: about 1.5 MB of JSON, within the
    /// hub's limit on a heartbeat's body.
    pub const MAX_WORKLOAD_USAGE: usize = 10_000;
}

/// What one workload's pods in a cluster use and request, as the cluster's resource metrics API
/// measured them: only the pods it has a sample of, and not being deleted, count, in both sums,
/// and only their containers' requests (no init containers, no overhead), so that the ratio is
/// the utilization a HorizontalPodAutoscaler computes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WorkloadUsage {
    /// The workload (its pods' [`WORKLOAD_LABEL`]).
    pub workload: WorkloadRef,
    /// What the measured pods use; `pods` is how many were measured.
    pub used: Resources,
    /// What the same pods request.
    pub requested: Resources,
}

/// `200` answer of `POST /agent/v1/heartbeat`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatAnswer {
    /// Other agents to measure round trips to until the next answer: Ready clusters that gave a
    /// [`Heartbeat::probe_url`], at most [`HeartbeatAnswer::MAX_PEERS`].
    #[serde(default)]
    pub peers: Vec<Peer>,
    /// Whether this hub takes status reports as changes ([`STATUS_DELTA_PATH`]); an agent sends
    /// whole reports to a hub that does not say so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub status_deltas: bool,
}

impl HeartbeatAnswer {
    /// Most peers one answer names; in larger fleets the hub rotates which ones, and network
    /// coordinates estimate the pairs never measured.
    pub const MAX_PEERS: usize = 16;
}

/// Another agent to probe.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Peer {
    /// Its cluster; the name of the [`LatencySample`] reporting the measurement.
    pub cluster: String,
    /// Its [`Heartbeat::probe_url`].
    pub probe_url: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A cluster's nodes, grouped by identical labels and taints, each node with its own amounts.
///
/// Maps onto `nave_policies::CapacityModel`: one `NodeGroup` per group (labels, taints), one
/// `Node { allocatable, requested }` per node that is `ready` and not `unschedulable` (the others
/// take no new pods).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct CapacityModel {
    /// Groups in a stable order (by labels, then taints); nodes in name order.
    pub node_groups: Vec<NodeGroup>,
    /// Sums over the nodes.
    pub totals: CapacityTotals,
}

/// Nodes that share labels (per-node ones like `kubernetes.io/hostname` left out) and taints.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct NodeGroup {
    /// Labels of every node of the group, without per-node labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Taints of every node of the group, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// The nodes.
    pub nodes: Vec<NodeCapacity>,
}

/// A node taint.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value; may be empty.
    #[serde(default)]
    pub value: String,
    /// Effect on pods that do not tolerate it.
    pub effect: TaintEffect,
}

/// What a taint does to pods that do not tolerate it (Kubernetes spelling).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TaintEffect {
    /// New pods are not scheduled.
    NoSchedule,
    /// The scheduler avoids the node when it can.
    PreferNoSchedule,
    /// New pods are not scheduled and running ones are evicted.
    NoExecute,
}

/// One node's amounts and state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct NodeCapacity {
    /// Node name.
    pub name: String,
    /// `status.allocatable`.
    pub allocatable: Resources,
    /// Requests of the non-terminal pods bound to the node (per pod the larger of its containers'
    /// sum and its largest init container, plus overhead); `pods` counts those pods.
    pub requested: Resources,
    /// Condition `Ready` is `True`.
    pub ready: bool,
    /// `spec.unschedulable` (cordoned).
    #[serde(default)]
    pub unschedulable: bool,
}

impl NodeCapacity {
    /// Room for new pods: allocatable - requested, never negative.
    pub fn free(&self) -> Resources {
        self.allocatable.saturating_sub(self.requested)
    }

    /// Whether new pods can go to this node at all.
    pub fn schedulable(&self) -> bool {
        self.ready && !self.unschedulable
    }
}

/// Sums over a cluster's nodes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct CapacityTotals {
    /// All nodes.
    #[serde(deserialize_with = "int64::required")]
    pub nodes: u64,
    /// Nodes that are ready and not cordoned; the sums below are over these.
    #[serde(deserialize_with = "int64::required")]
    pub schedulable_nodes: u64,
    /// Allocatable of the schedulable nodes.
    pub allocatable: Resources,
    /// Requests on the schedulable nodes.
    pub requested: Resources,
}

/// Amounts of CPU, memory and pod slots, in the units the scheduler counts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// CPU in millicores (1 core = 1000).
    #[serde(deserialize_with = "int64::required")]
    pub cpu_millis: u64,
    /// Memory in bytes.
    #[serde(deserialize_with = "int64::required")]
    pub memory_bytes: u64,
    /// Pod slots (allocatable) or pods (requested).
    #[serde(deserialize_with = "int64::required")]
    pub pods: u64,
}

impl Resources {
    /// An amount from its parts.
    pub const fn new(cpu_millis: u64, memory_bytes: u64, pods: u64) -> Self {
        Resources {
            cpu_millis,
            memory_bytes,
            pods,
        }
    }

    /// `self - other` per resource, stopping at zero.
    pub fn saturating_sub(self, other: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_sub(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
            pods: self.pods.saturating_sub(other.pods),
        }
    }

    /// `self + other` per resource, stopping at `u64::MAX`.
    pub fn saturating_add(self, other: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
            pods: self.pods.saturating_add(other.pods),
        }
    }
}

/// A pod the scheduler could not place yet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PendingPod {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// The Nave workload the pod belongs to (from [`WORKLOAD_LABEL`]); `None` for other pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadRef>,
    /// Reason of `PodScheduled=False`. Example: `Unschedulable`.
    pub reason: String,
    /// The scheduler's message. Example: `0/3 nodes are available: 3 Insufficient cpu.`
    #[serde(default)]
    pub message: String,
    /// When the pod became unschedulable (`lastTransitionTime` of the condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub since: Option<Time>,
}

/// A MultiClusterDeployment, by namespace and name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRef {
    /// Namespace of the MultiClusterDeployment.
    pub namespace: String,
    /// Name of the MultiClusterDeployment.
    pub name: String,
}

impl WorkloadRef {
    /// A reference from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        WorkloadRef {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The value of [`WORKLOAD_LABEL`]: `<namespace>.<name>`.
    pub fn label_value(&self) -> String {
        format!("{}.{}", self.namespace, self.name)
    }

    /// Whether its [`WORKLOAD_LABEL`] value fits in a label value (63 characters); if not, how
    /// long the namespace and the object's own name (behind any prefix) may be together.
    pub fn label_fits(&self) -> Result<(), String> {
        let value = self.label_value().len();
        if value <= 63 {
            return Ok(());
        }
        let own = self
            .resource_name()
            .or_else(|| self.job_name())
            .unwrap_or(&self.name);
        let given = self.namespace.len() + own.len();
        Err(format!(
            "the namespace and the name together must be at most {} characters, not {given}, so that the label {WORKLOAD_LABEL} on the objects sent fits in 63",
            63 - (value - given)
        ))
    }

    /// The contributor reference of a MultiClusterResource: its objects are labelled and kept in
    /// work sets under it. Its name is the resource's behind [`RESOURCE_PREFIX`], which holds a
    /// `_` no MultiClusterDeployment's name can hold, so the two never meet.
    pub fn resource(namespace: impl Into<String>, name: &str) -> WorkloadRef {
        WorkloadRef::new(namespace, format!("{RESOURCE_PREFIX}{name}"))
    }

    /// The MultiClusterResource's name when this is one's reference ([`WorkloadRef::resource`]);
    /// `None` for a MultiClusterDeployment's.
    pub fn resource_name(&self) -> Option<&str> {
        self.name.strip_prefix(RESOURCE_PREFIX)
    }

    /// The contributor reference of a MultiClusterJob, as [`WorkloadRef::resource`] is of a
    /// MultiClusterResource, behind [`JOB_PREFIX`].
    pub fn job(namespace: impl Into<String>, name: &str) -> WorkloadRef {
        WorkloadRef::new(namespace, format!("{JOB_PREFIX}{name}"))
    }

    /// The MultiClusterJob's name when this is one's reference ([`WorkloadRef::job`]).
    pub fn job_name(&self) -> Option<&str> {
        self.name.strip_prefix(JOB_PREFIX)
    }

    /// Parses a [`WORKLOAD_LABEL`] value; namespaces hold no `.`, so the first one splits.
    pub fn from_label_value(value: &str) -> Option<WorkloadRef> {
        let (namespace, name) = value.split_once('.')?;
        (!namespace.is_empty() && !name.is_empty()).then(|| WorkloadRef::new(namespace, name))
    }
}

impl fmt::Display for WorkloadRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A measured round-trip time.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct LatencySample {
    /// What was measured: [`LatencySample::HUB`] or another cluster's name.
    pub peer: String,
    /// Round-trip time in milliseconds.
    pub rtt_millis: f64,
}

impl LatencySample {
    /// [`LatencySample::peer`] of a sample towards the hub.
    pub const HUB: &str = "hub";
}

/// Query of `GET /agent/v1/work`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(rename_all = "camelCase")]
pub struct WorkQuery {
    /// The revision the agent has applied; an answer comes once the current one differs.
    /// Absent: answer with the current set at once.
    #[serde(
        deserialize_with = "int64::optional",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub after: Option<u64>,
    /// Seconds to wait for a different revision before `204`; capped at
    /// [`MAX_WORK_WAIT_SECONDS`]. Absent or `0`: answer at once.
    #[serde(
        deserialize_with = "int64::optional",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub wait: Option<u64>,
    /// The cluster; when present it must be the credential's cluster (else `403`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The agent holds the set at `after` (see [`WorkHeld`]): answer also, with that same set,
    /// as soon as the hub has published every workload's objects ([`WorkSet::complete`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
    /// The [`WorkSet::prune_confirmed`] of the set at `after`, as the agent last saw it (`0`:
    /// none): an answer comes also when it changes (an admin confirmed a prune the agent
    /// holds). Absent (an agent that knows nothing of confirmations): not compared.
    #[serde(
        deserialize_with = "int64::optional",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub prune_confirmed: Option<u64>,
    /// The agent holds the whole set at `after` and takes what changed since: the answer may
    /// then be a delta ([`WorkSet::since`]). Without it the answer is always the whole set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delta: bool,
}

/// The key of an object in a work set, unique within it: `kind/namespace/name` (the namespace
/// empty for cluster-scoped kinds). [`WorkSet::removed`] names objects by it.
pub fn work_key(object: &Value) -> String {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    work_key_of(text("/kind"), text("/metadata/namespace"), text("/metadata/name"))
}

/// A kind as `kubectl api-resources` names it: `Kind.group`, or `Kind` for the core group
/// (`Deployment.apps`, `Service`). The hub's and the agents' allow-lists are written so, and
/// compared through this one function.
pub fn kind_key(api_version: &str, kind: &str) -> String {
    match api_version.split_once('/') {
        Some((group, _)) => format!("{kind}.{group}"),
        None => kind.to_owned(),
    }
}

/// [`work_key`] from its parts.
pub fn work_key_of(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

/// `200` answer of `GET /agent/v1/work`: everything the cluster should run, at one revision.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WorkSet {
    /// The cluster this set is for.
    pub cluster: String,
    /// Revision of the set; grows by one with every change.
    #[serde(deserialize_with = "int64::required")]
    pub revision: u64,
    /// The full desired set of objects: complete manifests with `apiVersion`, `kind` and
    /// `metadata.name` (and `metadata.namespace` for namespaced kinds): Deployments, Services,
    /// ConfigMaps, Secrets, and Namespaces when needed. Objects absent here that the agent
    /// applied before are deleted.
    pub objects: Vec<Value>,
    /// Identity of the hub's store the set comes from, created with the store. Revisions count
    /// within one store; an agent that sees another store holds the set (see [`WorkHeld`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// Whether the hub has published every workload's objects since it started (its first
    /// pass over all MultiClusterDeployments is done, and every known cluster has a set). Only
    /// a complete set releases a held one.
    #[serde(default)]
    pub complete: bool,
    /// The newest revision up to which removing most of what the cluster runs is confirmed:
    /// by an admin (`POST /api/v1/clusters/{name}/prune-confirmation`), or because the cluster
    /// is withdrawn from the fleet (not accepted). An agent follows a set that would prune more
    /// than its limits allow only when this is at least the set's revision
    /// ([`HeldReason::MassPrune`]).
    #[serde(
        deserialize_with = "int64::optional",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub prune_confirmed: Option<u64>,
    /// Present when the set is a delta (asked for with [`WorkQuery::delta`]): `objects` holds
    /// only the objects added or changed since this revision, and [`removed`](WorkSet::removed)
    /// the keys of those removed since; the whole set at `revision` is the one at `since` with
    /// both applied. Absent: `objects` is the whole set.
    #[serde(
        deserialize_with = "int64::optional",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub since: Option<u64>,
    /// In a delta, the [`work_key`]s of the objects removed since [`since`](WorkSet::since).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
}

/// `POST /agent/v1/status` body: what the agent applied and how it is going.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// The cluster; when present it must be the credential's cluster (else `403`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// The work revision fully applied (every object applied, pruning done); `None` before the
    /// first.
    #[serde(
        deserialize_with = "int64::optional",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub applied_revision: Option<u64>,
    /// The revision last attempted, when it failed and differs from `appliedRevision`.
    #[serde(
        deserialize_with = "int64::optional",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub attempted_revision: Option<u64>,
    /// One entry per object of the applied (or attempted) set.
    #[serde(default)]
    pub objects: Vec<ObjectStatus>,
    /// What failed in the last apply and prune.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apply_errors: Vec<ApplyError>,
    /// The agent's name for this report's content, when it sends changes ([`StatusDelta`]): a
    /// delta names the report it follows by it. The same while the content is the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

impl StatusReport {
    /// The most objects a report holds, sent whole or built from deltas: about what the largest
    /// body the hub takes can carry, so deltas cannot grow a report past what a whole one could be.
    pub const MAX_OBJECTS: usize = 50_000;

    /// The longest [`id`](StatusReport::id) a hub keeps (an agent's are 20 to 40 characters).
    pub const MAX_ID_CHARS: usize = 128;

    /// Why a hub does not keep this report's id, naming the field; `None` when it may.
    pub fn id_refused(&self) -> Option<String> {
        self.id
            .as_ref()
            .filter(|id| id.chars().count() > Self::MAX_ID_CHARS)
            .map(|_| format!("id: longer than {} characters", Self::MAX_ID_CHARS))
    }

    /// What changed from `base` to this report, as a delta following `base`; `None` when either
    /// has no [`id`](StatusReport::id).
    pub fn delta_from(&self, base: &StatusReport) -> Option<StatusDelta> {
        let (Some(base_id), Some(id)) = (&base.id, &self.id) else {
            return None;
        };
        let before: HashMap<ObjectName<'_>, &ObjectStatus> =
            base.objects.iter().map(|o| (o.object_name(), o)).collect();
        let after: HashSet<ObjectName<'_>> = self.objects.iter().map(ObjectStatus::object_name).collect();
        Some(StatusDelta {
            cluster_name: self.cluster_name.clone(),
            base: base_id.clone(),
            id: id.clone(),
            applied_revision: self.applied_revision,
            attempted_revision: self.attempted_revision,
            changed: self
                .objects
                .iter()
                .filter(|o| before.get(&o.object_name()) != Some(o))
                .cloned()
                .collect(),
            removed: base
                .objects
                .iter()
                .filter(|o| !after.contains(&o.object_name()))
                .map(|o| RemovedObject::from(o.object_name()))
                .collect(),
            apply_errors: self.apply_errors.clone(),
        })
    }

    /// This report with `delta` (which follows it) applied: changed objects replaced where they
    /// were, new ones after the rest, removed ones left out. Refused when the result would hold
    /// more than [`StatusReport::MAX_OBJECTS`].
    pub fn with_delta(&self, delta: StatusDelta) -> Result<StatusReport, String> {
        if delta.id.chars().count() > Self::MAX_ID_CHARS {
            return Err(format!("id: longer than {} characters", Self::MAX_ID_CHARS));
        }
        // Where each changed object goes: over the object of the same name, or after the rest
        // (`None`: a name sent again later in the delta, whose last entry counts).
        let targets: Vec<Option<Option<usize>>> = {
            let at: HashMap<ObjectName<'_>, usize> = self
                .objects
                .iter()
                .enumerate()
                .map(|(i, o)| (o.object_name(), i))
                .collect();
            let last: HashMap<ObjectName<'_>, usize> = delta
                .changed
                .iter()
                .enumerate()
                .map(|(i, o)| (o.object_name(), i))
                .collect();
            delta
                .changed
                .iter()
                .enumerate()
                .map(|(i, o)| {
                    let name = o.object_name();
                    (last.get(&name) == Some(&i)).then(|| at.get(&name).copied())
                })
                .collect()
        };
        let mut objects = self.objects.clone();
        for (object, target) in delta.changed.into_iter().zip(targets) {
            match target {
                Some(Some(i)) => objects[i] = object,
                Some(None) => objects.push(object),
                None => {}
            }
        }
        if !delta.removed.is_empty() {
            let removed: HashSet<ObjectName<'_>> =
                delta.removed.iter().map(RemovedObject::object_name).collect();
            objects.retain(|o| !removed.contains(&o.object_name()));
        }
        if objects.len() > Self::MAX_OBJECTS {
            return Err(format!(
                "changed: the report would hold {} objects, more than the {} a report may hold",
                objects.len(),
                Self::MAX_OBJECTS
            ));
        }
        Ok(StatusReport {
            cluster_name: delta.cluster_name.or_else(|| self.cluster_name.clone()),
            applied_revision: delta.applied_revision,
            attempted_revision: delta.attempted_revision,
            objects,
            apply_errors: delta.apply_errors,
            id: Some(delta.id),
        })
    }

    /// Whether `other` says the same, whatever either's [`id`](StatusReport::id).
    pub fn same_content(&self, other: &StatusReport) -> bool {
        self.cluster_name == other.cluster_name
            && self.applied_revision == other.applied_revision
            && self.attempted_revision == other.attempted_revision
            && self.objects == other.objects
            && self.apply_errors == other.apply_errors
    }
}

/// `POST /agent/v1/status/delta` body: what changed in the agent's report since the one named
/// [`base`](StatusDelta::base). The hub applies it to the report it holds when that is `base`,
/// and answers `409` otherwise (it restarted from an older store, another replica took the
/// report, a report was lost): the agent then sends its whole report. Revisions and apply errors
/// are sent whole, as in a report.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct StatusDelta {
    /// The cluster; when present it must be the credential's cluster (else `403`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// The [`StatusReport::id`] of the report this one follows.
    pub base: String,
    /// The id of the report this delta makes.
    pub id: String,
    /// As in [`StatusReport::applied_revision`].
    #[serde(
        deserialize_with = "int64::optional",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub applied_revision: Option<u64>,
    /// As in [`StatusReport::attempted_revision`].
    #[serde(
        deserialize_with = "int64::optional",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub attempted_revision: Option<u64>,
    /// The objects whose status changed since `base`, or that are new, each whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<ObjectStatus>,
    /// The objects in `base` that are no longer reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<RemovedObject>,
    /// What failed in the last apply and prune, whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apply_errors: Vec<ApplyError>,
}

/// An object left out of a report since the one a [`StatusDelta`] follows.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RemovedObject {
    /// `apiVersion` of the object.
    pub api_version: String,
    /// `kind` of the object.
    pub kind: String,
    /// Namespace; absent for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl RemovedObject {
    fn object_name(&self) -> ObjectName<'_> {
        (
            &self.api_version,
            &self.kind,
            self.namespace.as_deref(),
            &self.name,
        )
    }
}

impl From<ObjectName<'_>> for RemovedObject {
    fn from((api_version, kind, namespace, name): ObjectName<'_>) -> Self {
        RemovedObject {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }
}

/// An object of a report by `(apiVersion, kind, namespace, name)`.
type ObjectName<'a> = (&'a str, &'a str, Option<&'a str>, &'a str);

/// Status of one object of the work set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ObjectStatus {
    /// `apiVersion` of the object.
    pub api_version: String,
    /// `kind` of the object.
    pub kind: String,
    /// Namespace; absent for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// The workload, from [`WORKLOAD_LABEL`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadRef>,
    /// Deployments: `spec.replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Deployments: `status.readyReplicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Deployments: `status.availableReplicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Deployments: `status.updatedReplicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// Deployments: pods of the workload the scheduler could not place.
    #[serde(
        deserialize_with = "int64::optional_int32",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub pending_pods: Option<u32>,
    /// The object's conditions, without timestamps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ConditionSummary>,
    /// Deployments: the workload's pods whose containers cannot run, by reason as `kubectl get
    /// pods` shows it (`ImagePullBackOff`, `CrashLoopBackOff`, `CreateContainerConfigError`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub waiting_pods: BTreeMap<String, i32>,
    /// Deployments: `status.replicas`, the pods of its old and new ReplicaSets (more than
    /// `replicas` while a rollout replaces pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_replicas: Option<i32>,
    /// Deployments: its `nave.dev/template-hash` annotation as applied (which template it runs).
    /// Other objects: that annotation as the hub sent it, once the whole set it came in is
    /// applied (which content of a MultiClusterResource's object the cluster has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_hash: Option<String>,
    /// Deployments: whether its controller has seen its latest spec (`status.observedGeneration`
    /// at least `metadata.generation`, itself at least the generation the agent's last apply
    /// made), so the replica counts are of the spec the agent applied last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_current: Option<bool>,
    /// Jobs: `status.active`, pods running or pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<i32>,
    /// Jobs: `status.succeeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    /// Jobs: `status.failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    /// Indexed Jobs: `status.completedIndexes` (`0-3,7`), the Job's own indexes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_indexes: Option<String>,
    /// StatefulSets: `spec.ordinals.start` as the cluster holds it (absent when it holds none:
    /// numbered from 0, or a cluster that does not know the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_ordinal: Option<i32>,
    /// Why the object could not be applied, if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ObjectStatus {
    fn object_name(&self) -> ObjectName<'_> {
        (
            &self.api_version,
            &self.kind,
            self.namespace.as_deref(),
            &self.name,
        )
    }
}

/// A condition without its timestamps, so status reports compare equal while nothing changes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConditionSummary {
    /// Condition type. Example: `Available`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A failed apply or prune of one object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ApplyError {
    /// `apply` or `prune`.
    pub operation: String,
    /// `apiVersion` of the object.
    pub api_version: String,
    /// `kind` of the object.
    pub kind: String,
    /// Namespace; absent for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// What the API server (or the agent) said.
    pub message: String,
    /// The workload the object belongs to (its [`WORKLOAD_LABEL`]), when it carries one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadRef>,
}

/// Body of every error answer of the hub: the agent endpoints and the REST API.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// Machine-readable code: `bad_request`, `unauthorized`, `forbidden`, `not_found`,
    /// `method_not_allowed`, `payload_too_large`, `unsupported_media_type`, `invalid`,
    /// `internal` or `unavailable`.
    pub error: String,
    /// What went wrong, for people.
    pub message: String,
}

/// Integers of the protocol are JSON integers within int64 (int32 for counts of pods), what JSON
/// parsers agree on and the hub's store keeps; larger ones are refused as invalid, as the
/// OpenAPI documents say.
mod int64 {
    use serde::{Deserialize, Deserializer};

    fn check<E: serde::de::Error>(value: u64) -> Result<u64, E> {
        if value > i64::MAX as u64 {
            return Err(E::custom(format!(
                "{value} is larger than the largest integer this field takes, {}",
                i64::MAX
            )));
        }
        Ok(value)
    }

    pub(super) fn required<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
        check(u64::deserialize(deserializer)?)
    }

    pub(super) fn optional<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
        Option::<u64>::deserialize(deserializer)?.map(check).transpose()
    }

    /// An unsigned field documented as int32 (counts of pods): at most `i32::MAX`.
    pub(super) fn optional_int32<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<u32>, D::Error> {
        match Option::<u32>::deserialize(deserializer)? {
            Some(value) if value > i32::MAX as u32 => Err(serde::de::Error::custom(format!(
                "{value} is larger than the largest integer this field takes, {}",
                i32::MAX
            ))),
            other => Ok(other),
        }
    }
}

/// Values of [`ErrorBody::error`].
pub mod error_codes {
    /// `400`: malformed request or body.
    pub const BAD_REQUEST: &str = "bad_request";
    /// `401`: missing, unknown or revoked token; the agent registers again.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// `403`: the credential is for another cluster.
    pub const FORBIDDEN: &str = "forbidden";
    /// `404`: no such endpoint or object.
    pub const NOT_FOUND: &str = "not_found";
    /// `405`: the path exists, the method does not.
    pub const METHOD_NOT_ALLOWED: &str = "method_not_allowed";
    /// `409`: the request conflicts with the current state (a cluster name that has joined
    /// already, a cluster that still has work).
    pub const CONFLICT: &str = "conflict";
    /// `413`: the body is larger than the hub accepts.
    pub const PAYLOAD_TOO_LARGE: &str = "payload_too_large";
    /// `415`: the body is not `application/json`.
    pub const UNSUPPORTED_MEDIA_TYPE: &str = "unsupported_media_type";
    /// `422`: well-formed JSON that is not a valid request (the message names the field).
    pub const INVALID: &str = "invalid";
    /// `429`: a limit is reached (too many clusters await acceptance); retry later.
    pub const TOO_MANY_REQUESTS: &str = "too_many_requests";
    /// `500`: the hub failed; retry with backoff.
    pub const INTERNAL: &str = "internal";
    /// `503`: the store or the management cluster cannot be reached; retry with backoff.
    pub const UNAVAILABLE: &str = "unavailable";
}
