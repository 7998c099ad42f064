//! The values the store takes and returns.
//!
//! JSON documents whose shape belongs to other crates (capacity models, heartbeat payloads,
//! placement decisions, Kubernetes objects, per-object status) are carried as
//! [`serde_json::Value`]: the store keeps them verbatim and never interprets them, so the wire and
//! policy types can evolve without a migration. Timestamps are stored at millisecond precision;
//! anything finer is truncated on the way in.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most rows one listing call returns; larger limits are clamped to it.
pub const MAX_PAGE_SIZE: u32 = 1000;

/// The page size used when a [`HistoryQuery`] does not set one.
pub const DEFAULT_PAGE_SIZE: u32 = 50;

/// A point on the globe, for proximity placement.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Coordinates {
    /// Degrees north of the equator (negative south).
    pub latitude: f64,
    /// Degrees east of Greenwich (negative west).
    pub longitude: f64,
}

/// What the hub knows about a workload cluster from its `WorkloadCluster` and its agent, written
/// by [`Store::upsert_cluster`](super::Store::upsert_cluster).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterUpsert {
    /// The cluster's name (the `WorkloadCluster`'s name); the key.
    pub name: String,
    /// Labels used by cluster selectors.
    pub labels: BTreeMap<String, String>,
    /// Region, for proximity and spread.
    pub region: Option<String>,
    /// Zone within the region.
    pub zone: Option<String>,
    /// Coordinates, for proximity.
    pub coordinates: Option<Coordinates>,
    /// The agent's version; `None` keeps the stored one (the controller writing the spec fields
    /// does not know it).
    pub agent_version: Option<String>,
    /// The cluster's Kubernetes version; `None` keeps the stored one.
    pub kubernetes_version: Option<String>,
    /// Cordoned (`unschedulable`): no new replicas, as last seen on the `WorkloadCluster`.
    pub cordoned: bool,
    /// Used only for overflow, as last seen on the `WorkloadCluster`.
    pub burst_only: bool,
    /// Whether the hub may place work on the cluster (an admin accepted it, or it joined with
    /// a join token, or the hub accepts new clusters).
    pub accepted: bool,
}

/// A registered cluster as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterRecord {
    /// The cluster's name.
    pub name: String,
    /// Labels used by cluster selectors.
    pub labels: BTreeMap<String, String>,
    /// Region, for proximity and spread.
    pub region: Option<String>,
    /// Zone within the region.
    pub zone: Option<String>,
    /// Coordinates, for proximity.
    pub coordinates: Option<Coordinates>,
    /// When the cluster was first written to the store; later upserts keep it.
    pub registered_at: Timestamp,
    /// The agent's version, from registration or the latest heartbeat that carried one.
    pub agent_version: Option<String>,
    /// The cluster's Kubernetes version, likewise.
    pub kubernetes_version: Option<String>,
    /// When the newest heartbeat was received; `None` before the first one.
    pub last_heartbeat_at: Option<Timestamp>,
    /// The capacity model from the newest heartbeat that carried one. Shared: a heartbeat that
    /// carries the same model keeps this one, so whoever holds it can tell a changed model by
    /// its address alone (see [`std::sync::Arc::ptr_eq`]).
    pub capacity: Option<std::sync::Arc<Value>>,
    /// Cordoned, as last seen.
    pub cordoned: bool,
    /// Burst-only, as last seen.
    pub burst_only: bool,
    /// Whether the hub may place work on it.
    pub accepted: bool,
    /// The newest work revision up to which an admin confirmed that the agent may remove most
    /// of what it runs at once ([`nave_api::wire::WorkSet::prune_confirmed`]).
    pub prune_confirmed: Option<u64>,
}

/// A join token just issued: the only time its text is available.
#[derive(Clone, Debug, PartialEq)]
pub struct IssuedJoinToken {
    /// The public part, for lists.
    pub id: String,
    /// The one cluster name it registers.
    pub cluster: String,
    /// The whole token, `nave-join-<id>.<secret>`, for the agent's bootstrap token file.
    pub token: AgentToken,
    /// When it stops working.
    pub expires_at: Timestamp,
}

/// A stored join token, without its secret.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinTokenInfo {
    /// The public part.
    pub id: String,
    /// The one cluster name it registers.
    pub cluster: String,
    /// When it was issued.
    pub created_at: Timestamp,
    /// When it stops working.
    pub expires_at: Timestamp,
    /// When it was used; `None` while unused.
    pub used_at: Option<Timestamp>,
}

/// A per-cluster agent token, shown once when it is issued. The store keeps only its hash.
///
/// `Debug` does not print the token, so it cannot leak through logs of the surrounding value.
#[derive(Clone, PartialEq, Eq)]
pub struct AgentToken(pub(super) String);

impl AgentToken {
    /// The token text, to hand to the agent (and nowhere else).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for AgentToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AgentToken(<redacted>)")
    }
}

/// A credential just issued: the only time its token is available.
#[derive(Clone, Debug, PartialEq)]
pub struct IssuedCredential {
    /// The credential's id, for listing and revocation.
    pub id: i64,
    /// The cluster the credential is scoped to.
    pub cluster: String,
    /// The token the agent presents.
    pub token: AgentToken,
    /// When it was issued.
    pub created_at: Timestamp,
}

/// A stored credential, without any form of its token.
#[derive(Clone, Debug, PartialEq)]
pub struct CredentialInfo {
    /// The credential's id.
    pub id: i64,
    /// The cluster the credential is scoped to.
    pub cluster: String,
    /// When it was issued.
    pub created_at: Timestamp,
    /// When it was revoked; `None` while it is valid.
    pub revoked_at: Option<Timestamp>,
}

/// Who presented a valid agent token: the only cluster whose work and status it may touch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentIdentity {
    /// The credential that matched.
    pub credential_id: i64,
    /// The cluster the credential is scoped to.
    pub cluster: String,
}

/// A heartbeat to record.
#[derive(Clone, Debug, PartialEq)]
pub struct NewHeartbeat {
    /// The cluster whose agent sent it (from its credential, never from the body).
    pub cluster: String,
    /// When the hub received it.
    pub received_at: Timestamp,
    /// The heartbeat as received (capacity, pending pods, latency samples), kept as history.
    pub payload: Value,
    /// The capacity model it carried; becomes the cluster's latest unless a newer heartbeat was
    /// already recorded.
    pub capacity: Option<Value>,
    /// The agent version it carried, if any; `None` keeps the stored one.
    pub agent_version: Option<String>,
    /// The Kubernetes version it carried, if any; `None` keeps the stored one.
    pub kubernetes_version: Option<String>,
}

/// A recorded heartbeat.
#[derive(Clone, Debug, PartialEq)]
pub struct HeartbeatRecord {
    /// Insertion order, unique across clusters.
    pub id: i64,
    /// The cluster whose agent sent it.
    pub cluster: String,
    /// When the hub received it.
    pub received_at: Timestamp,
    /// The heartbeat as received.
    pub payload: Value,
}

/// Which heartbeats [`Store::prune_heartbeats`](super::Store::prune_heartbeats) keeps: a row
/// survives if it is among the newest `keep_last` of its cluster *or* newer than `keep_newer_than`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeartbeatRetention {
    /// How many of each cluster's newest heartbeats to keep regardless of age.
    pub keep_last: u32,
    /// Keep every heartbeat received at or after this instant; `None` keeps by count alone.
    pub keep_newer_than: Option<Timestamp>,
}

/// Which placement history entries [`Store::prune_history`](super::Store::prune_history) keeps:
/// an entry survives if it is among the newest `keep_last` of its MultiClusterDeployment
/// (namespace and name) *or* newer than `keep_newer_than`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryRetention {
    /// How many of each MultiClusterDeployment's newest entries to keep regardless of age.
    pub keep_last: u32,
    /// Keep every entry decided at or after this instant; `None` keeps by count alone.
    pub keep_newer_than: Option<Timestamp>,
}

/// A placement decision for one `MultiClusterDeployment`, written by
/// [`Store::put_placement`](super::Store::put_placement).
#[derive(Clone, Debug, PartialEq)]
pub struct PlacementUpdate {
    /// The MCD's namespace.
    pub namespace: String,
    /// The MCD's name.
    pub name: String,
    /// The MCD's uid: a deleted and re-created MCD has a new one.
    pub uid: String,
    /// The MCD's `metadata.generation` the decision was made for.
    pub generation: i64,
    /// Replicas per cluster plus the per-cluster explanation. Its top-level `explanation` and
    /// `clusters` members are prose and fresh numbers, and `moving` is the progress of a move,
    /// not the decision itself: a write that changes only those updates the current placement
    /// but is not a change (no history row).
    pub decision: Value,
    /// What caused the decision, as a short keyword (`spec`, `capacity`, `reschedule`, `burst`,
    /// `failover`, ...), for filtering the history.
    pub trigger: String,
    /// Why, in words, for people reading the history.
    pub reason: String,
    /// When the decision was made.
    pub at: Timestamp,
}

/// The outcome of [`Store::put_placement`](super::Store::put_placement).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlacementWrite {
    /// Whether the decision differs from the stored one (or there was none, or the uid changed),
    /// explanations aside.
    pub changed: bool,
    /// The history row written when it changed.
    pub history_id: Option<i64>,
}

/// The current placement of one `MultiClusterDeployment`.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacementRecord {
    /// The MCD's namespace.
    pub namespace: String,
    /// The MCD's name.
    pub name: String,
    /// The MCD's uid.
    pub uid: String,
    /// The generation of the newest write.
    pub generation: i64,
    /// Replicas per cluster plus the per-cluster explanation. Its top-level `explanation` and
    /// `clusters` members are prose and fresh numbers, not the decision itself: a write that
    /// changes only those updates the current placement but is not a change (no history row).
    pub decision: Value,
    /// When the decision was last written, changed or not.
    pub updated_at: Timestamp,
}

/// One change of placement.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacementHistoryEntry {
    /// Insertion order, unique.
    pub id: i64,
    /// The MCD's namespace.
    pub namespace: String,
    /// The MCD's name.
    pub name: String,
    /// The MCD's uid at the time.
    pub uid: String,
    /// When the decision was made.
    pub at: Timestamp,
    /// The generation the decision was made for.
    pub generation: i64,
    /// What caused it (a short keyword).
    pub trigger: String,
    /// Why, in words.
    pub reason: String,
    /// The decision.
    pub decision: Value,
}

/// A filter and a page over the placement history, newest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryQuery {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only MCDs of this name.
    pub name: Option<String>,
    /// Only this incarnation of an MCD.
    pub uid: Option<String>,
    /// Only this trigger.
    pub trigger: Option<String>,
    /// Only entries at or after this instant.
    pub since: Option<Timestamp>,
    /// Only entries before this instant.
    pub until: Option<Timestamp>,
    /// Continue after this position (from [`HistoryPage::next`]).
    pub after: Option<HistoryCursor>,
    /// At most this many entries, clamped to 1..=[`MAX_PAGE_SIZE`].
    pub limit: u32,
}

impl Default for HistoryQuery {
    fn default() -> Self {
        HistoryQuery {
            namespace: None,
            name: None,
            uid: None,
            trigger: None,
            since: None,
            until: None,
            after: None,
            limit: DEFAULT_PAGE_SIZE,
        }
    }
}

/// One page of placement history.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryPage {
    /// Entries, newest first.
    pub entries: Vec<PlacementHistoryEntry>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<HistoryCursor>,
}

/// A position in the placement history, opaque to clients.
///
/// Keyset pagination (rather than an offset) so that entries written while a client pages
/// through neither repeat nor go missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryCursor {
    pub(super) at_ms: i64,
    pub(super) id: i64,
}

impl fmt::Display for HistoryCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Encoded so that clients treat it as a token, not as numbers to compute with.
        f.write_str(&URL_SAFE_NO_PAD.encode(format!("{}.{}", self.at_ms, self.id)))
    }
}

/// A cursor string that this store did not produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid history cursor")]
pub struct InvalidCursor;

impl FromStr for HistoryCursor {
    type Err = InvalidCursor;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = URL_SAFE_NO_PAD.decode(s).map_err(|_| InvalidCursor)?;
        let text = String::from_utf8(bytes).map_err(|_| InvalidCursor)?;
        let (at, id) = text.split_once('.').ok_or(InvalidCursor)?;
        Ok(HistoryCursor {
            at_ms: at.parse().map_err(|_| InvalidCursor)?,
            id: id.parse().map_err(|_| InvalidCursor)?,
        })
    }
}

/// The outcome of [`Store::put_work`](super::Store::put_work).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkWrite {
    /// The revision that now holds the cluster's object set.
    pub revision: u64,
    /// Whether the object set differed from the stored one (so the revision was bumped).
    pub changed: bool,
}

/// A cluster's full desired object set.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkSet {
    /// The cluster.
    pub cluster: String,
    /// Increases with every change of the object set; never goes backwards.
    pub revision: u64,
    /// The Kubernetes objects the cluster's agent should have applied, in key order
    /// ([`nave_api::wire::work_key`]).
    pub objects: Vec<Value>,
    /// When the object set last changed.
    pub updated_at: Timestamp,
}

/// What changed in a cluster's object set since a revision: see [`Store::get_work_since`].
///
/// [`Store::get_work_since`]: super::Store::get_work_since
#[derive(Clone, Debug, PartialEq)]
pub struct WorkDelta {
    /// The cluster.
    pub cluster: String,
    /// The set's current revision.
    pub revision: u64,
    /// The revision the changes are counted from.
    pub since: u64,
    /// The objects added or changed since `since`, in key order.
    pub changed: Vec<Value>,
    /// The keys ([`nave_api::wire::work_key`]) of the objects removed since `since`.
    pub removed: Vec<String>,
    /// When the object set last changed.
    pub updated_at: Timestamp,
}

/// What an agent reported about the work it applied. The newest report replaces the previous.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkStatus {
    /// The cluster (from the agent's credential).
    pub cluster: String,
    /// The revision the agent has applied.
    pub applied_revision: u64,
    /// Per-object status (Deployment replicas, pending pods with reasons, ...).
    pub objects: Value,
    /// When the hub received the report.
    pub reported_at: Timestamp,
}

/// Who leads the hub's replicas, as the store records it (see [`Store::claim_term`]).
///
/// [`Store::claim_term`]: super::Store::claim_term
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Leadership {
    /// The current term: only a store handle that claimed it writes placements and work.
    pub term: u64,
    /// Who claimed it (a replica's identity).
    pub holder: String,
    /// The newest term whose leader published every workload's objects; the work sets are
    /// complete when it equals `term`.
    pub published_term: u64,
}

impl Leadership {
    /// Whether the current term's leader has published every workload's objects.
    pub fn published(&self) -> bool {
        self.term > 0 && self.published_term == self.term
    }
}

/// The outcome of [`Store::claim_term`](super::Store::claim_term).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// This handle now writes under this term.
    Claimed(u64),
    /// The store is at this term already, or past it: another replica leads, or led later.
    Stale {
        /// The store's current term.
        current: u64,
    },
}

/// A write another hub replica made to the store, as the store announces it to the others
/// (Postgres `LISTEN/NOTIFY`), so each can update what it keeps in memory and wake its
/// long-polls. Each names what changed; the receiver reads the rest from the store.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StoreChange {
    /// A cluster was registered, accepted or withdrawn, confirmed a prune, or removed.
    Cluster(String),
    /// A cluster's credentials were revoked or rotated: a replica takes none it kept of them.
    Credentials(String),
    /// A cluster's heartbeat was recorded.
    Heartbeat(String),
    /// A cluster's agent reported status.
    Status(String),
    /// A cluster's work set changed to `revision`.
    Work {
        /// The cluster.
        cluster: String,
        /// Its new revision.
        revision: u64,
    },
    /// A workload's placement was written or deleted.
    Placement {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A term was claimed, or its leader published every workload's objects.
    Leadership,
    /// Nothing changed: a replica checks that its feed still hears (its own pings come back).
    Ping,
}

/// What a store's change feed yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FeedEvent {
    /// Another replica wrote this.
    Change(StoreChange),
    /// Changes may have been missed (the feed's connection was lost and made again): read
    /// everything kept in memory again.
    Resync,
}
