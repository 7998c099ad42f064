//! What every backend of the store provides ([`Store`]), its errors, and the helpers the SQL
//! shares: timestamps and revisions as stored, token and content hashes, page sizes.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jiff::Timestamp;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::types::*;

/// The future returned by every [`Store`] method.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Other replicas' writes to the store, as they commit (see [`Store::changes`]).
pub type ChangeFeed = Pin<Box<dyn futures::Stream<Item = FeedEvent> + Send>>;

/// The hub's operational state and history. Implemented by [`SqliteStore`] and [`PgStore`]; the
/// conformance suite (`tests/store_conformance.rs`) runs the same cases against both.
///
/// Every write that touches several rows is one transaction.
pub trait Store: Send + Sync + fmt::Debug {
    /// Which database this store uses.
    fn backend(&self) -> Backend;

    /// Closes the connection pool, waiting for checked-out connections to come back.
    fn close(&self) -> StoreFuture<'_, ()>;

    /// `Ok` when the store takes writes now: a write transaction that changes nothing. Fails on
    /// a full disk, a read-only file or volume, or a read-only Postgres (a standby).
    fn check_writable(&self) -> StoreFuture<'_, ()>;

    /// The store's identity: created with its schema, the same for every connection to it and
    /// for as long as it lives, different for every other store (a new file, a new database).
    /// Agents compare it to tell a replaced store from the one they followed.
    fn identity(&self) -> StoreFuture<'_, String>;

    /// The store's leadership record: the current term, its holder, and whether its leader
    /// published every workload's objects.
    fn leadership(&self) -> StoreFuture<'_, Leadership>;

    /// Claims `term` for `holder` (`None`: the term after the store's current one). It succeeds
    /// only when `term` is above the store's current term, which it becomes; from then on this
    /// handle (and its clones) writes placements and work sets under it, and the store refuses
    /// those writes from every other term, in the same transaction as the write. A replica that
    /// lost the lead without knowing it (paused, partitioned) is refused once its successor
    /// claimed, and [`fenced`](Store::fenced) tells it.
    fn claim_term<'a>(&'a self, term: Option<u64>, holder: &'a str) -> StoreFuture<'a, Claim>;

    /// The term this handle writes under; `None` before a claim (it writes no placements or
    /// work then).
    fn term(&self) -> Option<u64>;

    /// Cancelled the first time the store refuses a write of this handle because another term
    /// was claimed since: this handle's replica no longer leads.
    fn fenced(&self) -> tokio_util::sync::CancellationToken;

    /// Records that this handle's term has published every workload's objects; fenced as
    /// placements and work are.
    fn mark_published(&self) -> StoreFuture<'_, ()>;

    /// What other replicas write, as it commits, for the replicas that keep state in memory;
    /// `None` where the backend announces nothing (SQLite: one hub per file). Announcements are
    /// at most once: after a lost connection the feed says [`FeedEvent::Resync`].
    fn changes(&self) -> StoreFuture<'_, Option<ChangeFeed>>;

    /// Announces [`StoreChange::Ping`], which this handle's own feed hears too (every other
    /// change of its own it skips): a feed that stops hearing its pings has lost its connection
    /// without noticing. A no-op where the backend announces nothing.
    fn ping(&self) -> StoreFuture<'_, ()>;

    /// Inserts a cluster or updates its descriptive fields, returning the stored row.
    /// `registered_at` is set on insert and kept afterwards.
    fn upsert_cluster<'a>(&'a self, cluster: &'a ClusterUpsert) -> StoreFuture<'a, ClusterRecord>;

    /// One cluster, if registered.
    fn get_cluster<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<ClusterRecord>>;

    /// All clusters, by name.
    fn list_clusters(&self) -> StoreFuture<'_, Vec<ClusterRecord>>;

    /// Issues a new credential for a registered cluster; other credentials stay valid.
    fn issue_credential<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, IssuedCredential>;

    /// Issues a new credential and revokes every other valid one of the cluster, atomically.
    fn rotate_credential<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, IssuedCredential>;

    /// Revokes one credential; `false` if it does not exist or was already revoked.
    fn revoke_credential(&self, id: i64) -> StoreFuture<'_, bool>;

    /// The cluster a presented agent token is scoped to; `None` if the token is unknown or revoked.
    fn authenticate_agent<'a>(&'a self, token: &'a str) -> StoreFuture<'a, Option<AgentIdentity>>;

    /// A cluster's credentials, oldest first, without their tokens.
    fn list_credentials<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, Vec<CredentialInfo>>;

    /// Accepts a cluster or withdraws its acceptance; the stored row, `None` if unknown.
    fn set_accepted<'a>(&'a self, cluster: &'a str, accepted: bool)
    -> StoreFuture<'a, Option<ClusterRecord>>;

    /// Records that `cluster`'s agent may remove most of what it runs at once, in work sets up
    /// to `revision`; the stored row, `None` if unknown.
    fn confirm_prune<'a>(&'a self, cluster: &'a str, revision: u64)
    -> StoreFuture<'a, Option<ClusterRecord>>;

    /// Forgets a cluster: its row, credentials, heartbeats, work set and status, and remembers
    /// that it was removed ([`Store::removed_at`]). `false` if unknown.
    fn delete_cluster<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, bool>;

    /// When an admin removed `cluster`, if it was removed and has not been registered again
    /// since ([`Store::upsert_cluster`] forgets the removal).
    fn removed_at<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, Option<Timestamp>>;

    /// Issues a join token for `cluster`, usable once until `expires_at`.
    fn create_join_token<'a>(
        &'a self,
        cluster: &'a str,
        expires_at: Timestamp,
    ) -> StoreFuture<'a, IssuedJoinToken>;

    /// The join token `token` is, if it is one and still usable at `now` (unused, unexpired).
    fn find_join_token<'a>(
        &'a self,
        token: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<JoinTokenInfo>>;

    /// Uses join token `token` to register `cluster`: `true` (and it is spent) only when it is
    /// usable at `now` and issued for `cluster`; two redemptions of one token never both succeed.
    fn redeem_join_token<'a>(
        &'a self,
        token: &'a str,
        cluster: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, bool>;

    /// Every join token, newest first, without their secrets.
    fn list_join_tokens(&self) -> StoreFuture<'_, Vec<JoinTokenInfo>>;

    /// Records a heartbeat and, unless a newer one was already recorded, makes its capacity and
    /// versions the cluster's latest. Returns the heartbeat's id.
    fn record_heartbeat<'a>(&'a self, heartbeat: &'a NewHeartbeat) -> StoreFuture<'a, i64> {
        Box::pin(async move {
            let ids = self.record_heartbeats(std::slice::from_ref(heartbeat)).await?;
            Ok(ids.first().copied().unwrap_or_default())
        })
    }

    /// Records heartbeats in one transaction, in order, each as
    /// [`record_heartbeat`](Store::record_heartbeat) does; returns their ids in the same order.
    /// One that cannot be written (its cluster is gone) fails them all.
    fn record_heartbeats<'a>(&'a self, heartbeats: &'a [NewHeartbeat]) -> StoreFuture<'a, Vec<i64>>;

    /// A cluster's newest heartbeats, newest first, at most `limit` (clamped to [`MAX_PAGE_SIZE`]).
    fn list_heartbeats<'a>(&'a self, cluster: &'a str, limit: u32) -> StoreFuture<'a, Vec<HeartbeatRecord>>;

    /// Deletes the heartbeats `retention` does not keep; returns how many.
    fn prune_heartbeats(&self, retention: HeartbeatRetention) -> StoreFuture<'_, u64>;

    /// Deletes placement history outside `retention`; returns how many entries were deleted.
    fn prune_history(&self, retention: HistoryRetention) -> StoreFuture<'_, u64>;

    /// Stores an MCD's placement decision. A history entry is written only when the decision
    /// differs from the stored one (compared as canonical JSON), or the MCD is new or re-created
    /// (its uid changed); otherwise only the generation and `updated_at` move.
    fn put_placement<'a>(&'a self, placement: &'a PlacementUpdate) -> StoreFuture<'a, PlacementWrite>;

    /// An MCD's current placement.
    fn get_placement<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> StoreFuture<'a, Option<PlacementRecord>>;

    /// Current placements, by namespace and name, optionally of one namespace.
    fn list_placements<'a>(&'a self, namespace: Option<&'a str>) -> StoreFuture<'a, Vec<PlacementRecord>>;

    /// Forgets an MCD's current placement (it was deleted); its history stays.
    fn delete_placement<'a>(&'a self, namespace: &'a str, name: &'a str) -> StoreFuture<'a, bool>;

    /// A page of placement history, newest first.
    fn placement_history<'a>(&'a self, query: &'a HistoryQuery) -> StoreFuture<'a, HistoryPage>;

    /// Replaces a cluster's desired object set. The set is kept by object
    /// ([`nave_api::wire::work_key`]; of two objects with one key the last is kept): the
    /// revision goes up by one when any object differs from the stored one (compared by a hash
    /// of its canonical JSON; the order of the objects does not count) and stays otherwise; it
    /// never goes backwards. The first set gets revision 1.
    fn put_work<'a>(&'a self, cluster: &'a str, objects: &'a [Value]) -> StoreFuture<'a, WorkWrite>;

    /// Changes part of a cluster's set: each of `changed` replaces (or adds) the object of its
    /// key, and the objects of the keys in `removed` go (a key in both stays, changed). The
    /// revision goes up as with [`put_work`](Store::put_work), by one when anything changed;
    /// the cost is that of the changes, not of the set. Creates an empty set first when the
    /// cluster has none.
    fn change_work<'a>(
        &'a self,
        cluster: &'a str,
        changed: &'a [Value],
        removed: &'a [String],
    ) -> StoreFuture<'a, WorkWrite>;

    /// A cluster's desired object set; `None` before the first [`put_work`](Store::put_work).
    fn get_work<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, Option<WorkSet>>;

    /// What changed in a cluster's set after revision `after`: the objects written since, and
    /// the keys of those removed since. `None` when the cluster has no set, when `after` is
    /// ahead of its revision, or when it is so old that removals since were forgotten (the
    /// store keeps them for [`TOMBSTONE_REVISIONS`] revisions): then only the whole set
    /// ([`get_work`](Store::get_work)) tells.
    fn get_work_since<'a>(&'a self, cluster: &'a str, after: u64) -> StoreFuture<'a, Option<WorkDelta>>;

    /// Stores an agent's status report, replacing the previous one.
    fn put_work_status<'a>(&'a self, status: &'a WorkStatus) -> StoreFuture<'a, ()>;

    /// The newest status report of a cluster.
    fn get_work_status<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, Option<WorkStatus>>;
}

/// A database the store can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// A SQLite file.
    Sqlite,
    /// A Postgres server.
    Postgres,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "Postgres",
        })
    }
}

/// The store operation that failed, for error messages, logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // Each variant is the `Store` method of the same name.
pub enum StoreOp {
    CheckWritable,
    Identity,
    Leadership,
    ClaimTerm,
    MarkPublished,
    Listen,
    UpsertCluster,
    GetCluster,
    ListClusters,
    IssueCredential,
    RotateCredential,
    RevokeCredential,
    AuthenticateAgent,
    ListCredentials,
    SetAccepted,
    ConfirmPrune,
    DeleteCluster,
    RemovedAt,
    CreateJoinToken,
    FindJoinToken,
    RedeemJoinToken,
    ListJoinTokens,
    RecordHeartbeat,
    ListHeartbeats,
    PruneHeartbeats,
    /// [`Store::prune_history`].
    PruneHistory,
    PutPlacement,
    GetPlacement,
    ListPlacements,
    DeletePlacement,
    PlacementHistory,
    PutWork,
    GetWork,
    PutWorkStatus,
    GetWorkStatus,
}

impl StoreOp {
    /// The operation's name as the `Store` method is spelled (a stable label for metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            StoreOp::CheckWritable => "check_writable",
            StoreOp::Identity => "identity",
            StoreOp::Leadership => "leadership",
            StoreOp::ClaimTerm => "claim_term",
            StoreOp::MarkPublished => "mark_published",
            StoreOp::Listen => "listen",
            StoreOp::UpsertCluster => "upsert_cluster",
            StoreOp::GetCluster => "get_cluster",
            StoreOp::ListClusters => "list_clusters",
            StoreOp::IssueCredential => "issue_credential",
            StoreOp::RotateCredential => "rotate_credential",
            StoreOp::RevokeCredential => "revoke_credential",
            StoreOp::AuthenticateAgent => "authenticate_agent",
            StoreOp::ListCredentials => "list_credentials",
            StoreOp::SetAccepted => "set_accepted",
            StoreOp::ConfirmPrune => "confirm_prune",
            StoreOp::DeleteCluster => "delete_cluster",
            StoreOp::RemovedAt => "removed_at",
            StoreOp::CreateJoinToken => "create_join_token",
            StoreOp::FindJoinToken => "find_join_token",
            StoreOp::RedeemJoinToken => "redeem_join_token",
            StoreOp::ListJoinTokens => "list_join_tokens",
            StoreOp::RecordHeartbeat => "record_heartbeat",
            StoreOp::ListHeartbeats => "list_heartbeats",
            StoreOp::PruneHeartbeats => "prune_heartbeats",
            StoreOp::PruneHistory => "prune_history",
            StoreOp::PutPlacement => "put_placement",
            StoreOp::GetPlacement => "get_placement",
            StoreOp::ListPlacements => "list_placements",
            StoreOp::DeletePlacement => "delete_placement",
            StoreOp::PlacementHistory => "placement_history",
            StoreOp::PutWork => "put_work",
            StoreOp::GetWork => "get_work",
            StoreOp::PutWorkStatus => "put_work_status",
            StoreOp::GetWorkStatus => "get_work_status",
        }
    }
}

impl fmt::Display for StoreOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything that can go wrong in the store.
///
/// `Display` and the `source` chain are for logs: they may carry database text (table names,
/// constraint names, values). A response to an API client or an agent uses
/// [`StoreError::client_message`] and [`StoreError::kind`] instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The URL names neither SQLite nor Postgres.
    #[error("unsupported store URL scheme {scheme:?} (expected sqlite:// or postgres://)")]
    UnsupportedUrl {
        /// The scheme found (the URL itself is not kept: it may hold a password).
        scheme: String,
    },
    /// Parsing the URL, creating the file or connecting failed.
    #[error("connecting to the {backend} store")]
    Connect {
        /// The backend being opened.
        backend: Backend,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// Applying the embedded migrations failed.
    #[error("migrating the {backend} store")]
    Migrate {
        /// The backend being migrated.
        backend: Backend,
        /// The migrator's error.
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// A query (or the transaction around it) failed.
    #[error("store operation {op} failed")]
    Query {
        /// The operation.
        op: StoreOp,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The operation names a cluster that is not registered.
    #[error("store operation {op}: cluster {cluster:?} is not registered")]
    UnknownCluster {
        /// The operation.
        op: StoreOp,
        /// The cluster named.
        cluster: String,
        /// The foreign-key violation that revealed it.
        #[source]
        source: sqlx::Error,
    },
    /// An argument cannot be stored (a revision beyond the database's integer range).
    #[error("store operation {op}: {what} is out of range")]
    OutOfRange {
        /// The operation.
        op: StoreOp,
        /// Which argument.
        what: &'static str,
        /// The conversion error.
        #[source]
        source: std::num::TryFromIntError,
    },
    /// A stored value cannot be read back (a timestamp or revision out of range): the database
    /// was written by something else.
    #[error("store operation {op} read an invalid {what}")]
    Corrupt {
        /// The operation.
        op: StoreOp,
        /// Which value.
        what: &'static str,
        /// The conversion error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A write of placements or work from a handle whose term is not the store's: another
    /// replica claimed the store since (or this handle never claimed it).
    #[error(
        "store operation {op}: the store is at term {current}, this replica writes under {term:?}; it does not lead"
    )]
    Fenced {
        /// The operation.
        op: StoreOp,
        /// The term of the handle, if it claimed one.
        term: Option<u64>,
        /// The store's current term.
        current: u64,
    },
    /// The operating system's random number generator failed while issuing a token.
    #[error("store operation {op}: generating a token")]
    Random {
        /// The operation.
        op: StoreOp,
        /// The generator's error.
        #[source]
        source: getrandom::Error,
    },
}

/// How a [`StoreError`] should be reported to a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreErrorKind {
    /// The request named a cluster that is not registered (404 or 409 at the API).
    UnknownCluster,
    /// The request carried a value the store cannot hold (400).
    InvalidInput,
    /// The database is unreachable, overloaded or busy; retrying later may work (503).
    Unavailable,
    /// Anything else (500).
    Internal,
}

impl StoreError {
    /// How to report this error to a client.
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            StoreError::UnknownCluster { .. } => StoreErrorKind::UnknownCluster,
            StoreError::OutOfRange { .. } => StoreErrorKind::InvalidInput,
            StoreError::Fenced { .. } => StoreErrorKind::Unavailable,
            StoreError::Connect { source, .. } | StoreError::Query { source, .. } if is_transient(source) => {
                StoreErrorKind::Unavailable
            }
            _ => StoreErrorKind::Internal,
        }
    }

    /// The operation that failed, when the error comes from one.
    pub fn op(&self) -> Option<StoreOp> {
        match self {
            StoreError::Query { op, .. }
            | StoreError::UnknownCluster { op, .. }
            | StoreError::OutOfRange { op, .. }
            | StoreError::Corrupt { op, .. }
            | StoreError::Fenced { op, .. }
            | StoreError::Random { op, .. } => Some(*op),
            StoreError::UnsupportedUrl { .. } | StoreError::Connect { .. } | StoreError::Migrate { .. } => {
                None
            }
        }
    }

    /// A message safe to send to an API client or an agent: built only from the request's own
    /// values, never from database text. Log the error itself (with its source chain) next to it.
    pub fn client_message(&self) -> String {
        match (self, self.kind()) {
            (StoreError::UnknownCluster { cluster, .. }, _) => {
                format!("cluster {cluster:?} is not registered")
            }
            (StoreError::OutOfRange { what, .. }, _) => format!("{what} is out of range"),
            (_, StoreErrorKind::Unavailable) => "the store is temporarily unavailable".to_owned(),
            _ => "internal store error".to_owned(),
        }
    }
}

/// Errors that say "not now" rather than "never": the pool or the server is overloaded, the
/// connection dropped, or a lock or serialization conflict aborted the statement.
pub(super) fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                // The primary result code is the low byte of SQLite's extended code:
                // SQLITE_BUSY (5) and SQLITE_LOCKED (6), e.g. a busy timeout that ran out.
                code.parse::<i32>().is_ok_and(|c| matches!(c & 0xff, 5 | 6))
            } else {
                // Postgres: connection exceptions (08xxx), serialization failure, deadlock, a
                // lock not available in time, too many connections, the server shutting down or
                // not yet accepting connections.
                code.starts_with("08")
                    || matches!(
                        &*code,
                        "40001" | "40P01" | "55P03" | "53300" | "57P01" | "57P02" | "57P03"
                    )
            }
        }
        _ => false,
    }
}

/// Maps a driver error of `op`.
pub(super) fn query_error(op: StoreOp) -> impl Fn(sqlx::Error) -> StoreError {
    move |source| StoreError::Query { op, source }
}

/// Maps a driver error of `op`, a write that references `cluster`: a foreign-key violation means
/// the cluster is not registered.
pub(super) fn cluster_write_error(op: StoreOp, cluster: &str) -> impl Fn(sqlx::Error) -> StoreError + '_ {
    move |source| match &source {
        sqlx::Error::Database(db) if db.is_foreign_key_violation() => StoreError::UnknownCluster {
            op,
            cluster: cluster.to_owned(),
            source,
        },
        _ => StoreError::Query { op, source },
    }
}

/// Milliseconds since the Unix epoch, the portable encoding of every timestamp column (`BIGINT`
/// in Postgres, `INTEGER` in SQLite): the same on both backends, ordered and compared as plain
/// integers, and with no date-time feature of sqlx (and so no `chrono` or `time`) needed.
pub(super) fn millis(at: Timestamp) -> i64 {
    at.as_millisecond()
}

pub(super) fn timestamp(op: StoreOp, what: &'static str, ms: i64) -> Result<Timestamp, StoreError> {
    Timestamp::from_millisecond(ms).map_err(|e| StoreError::Corrupt {
        op,
        what,
        source: Box::new(e),
    })
}

pub(super) fn opt_timestamp(
    op: StoreOp,
    what: &'static str,
    ms: Option<i64>,
) -> Result<Option<Timestamp>, StoreError> {
    ms.map(|ms| timestamp(op, what, ms)).transpose()
}

/// Revisions are `u64` in the API and `BIGINT` in the database.
pub(super) fn revision_in(op: StoreOp, what: &'static str, revision: u64) -> Result<i64, StoreError> {
    i64::try_from(revision).map_err(|source| StoreError::OutOfRange { op, what, source })
}

pub(super) fn revision_out(op: StoreOp, what: &'static str, revision: i64) -> Result<u64, StoreError> {
    u64::try_from(revision).map_err(|e| StoreError::Corrupt {
        op,
        what,
        source: Box::new(e),
    })
}

/// Clamps a caller's page size to 1..=[`MAX_PAGE_SIZE`].
pub(super) fn page_size(limit: u32) -> i64 {
    i64::from(limit.clamp(1, MAX_PAGE_SIZE))
}

/// A new agent token: 256 bits from the operating system's generator, URL-safe, with a prefix that
/// makes a leaked token recognisable to secret scanners.
pub(super) fn new_token(op: StoreOp) -> Result<AgentToken, StoreError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|source| StoreError::Random { op, source })?;
    Ok(AgentToken(format!("nave_{}", URL_SAFE_NO_PAD.encode(bytes))))
}

/// Prefix of join tokens: `nave-join-<id>.<secret>`.
pub const JOIN_TOKEN_PREFIX: &str = "nave-join-";

/// A new join token: an id of 8 hex digits, a 256-bit secret, and the token's whole text.
pub(super) fn new_join_token(op: StoreOp) -> Result<(String, String, AgentToken), StoreError> {
    let mut id = [0u8; 4];
    let mut secret = [0u8; 32];
    getrandom::fill(&mut id).map_err(|source| StoreError::Random { op, source })?;
    getrandom::fill(&mut secret).map_err(|source| StoreError::Random { op, source })?;
    let id = hex(&id);
    let secret = URL_SAFE_NO_PAD.encode(secret);
    let token = format!("{JOIN_TOKEN_PREFIX}{id}.{secret}");
    Ok((id, secret, AgentToken(token)))
}

/// The id and secret of a join token's text; `None` when it is not one.
pub(super) fn split_join_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.strip_prefix(JOIN_TOKEN_PREFIX)?.split_once('.')?;
    (id.len() == 8 && id.bytes().all(|b| b.is_ascii_hexdigit()) && !secret.is_empty()).then_some((id, secret))
}

/// The stored form of an agent token: hex SHA-256 of its text.
///
/// One fast, unsalted hash is right for these tokens, unlike for passwords: a token is 256 random
/// bits, so guessing is hopeless however cheap each guess is, and a slow KDF (argon2, bcrypt)
/// would only cost CPU on every agent request. Without a salt the hash is a direct index key, so
/// lookup is one indexed query. A copy of the database yields hashes, not usable tokens; and
/// timing differences in the index lookup reveal at most hash prefixes, which do not help find a
/// token that hashes to them.
pub(super) fn token_hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// Lowercase hexadecimal of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// Hex SHA-256 of a JSON document in canonical form (object keys sorted, no whitespace), so that
/// equal documents hash equally however their maps were ordered when built.
pub(super) fn json_hash(value: &Value) -> String {
    let mut text = String::new();
    write_canonical(value, &mut text);
    hex(&Sha256::digest(text.as_bytes()))
}

/// Members of a stored decision that explain it, or track how it is carried out (a move's old
/// replicas kept until the new ones run), rather than make it: see [`PlacementUpdate::decision`].
pub(super) const NOT_DECIDED: [&str; 3] = ["explanation", "clusters", "moving"];

/// Whether two stored decisions are the same but for their prose and fresh numbers (the
/// `explanation` and `clusters` members): writing one over the other would change nothing a
/// plan or an agent reads.
pub fn same_but_prose(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let prose = |k: &String| k == "explanation" || k == "clusters";
            a.len() - a.keys().filter(|k| prose(k)).count() == b.len() - b.keys().filter(|k| prose(k)).count()
                && a.iter()
                    .filter(|(k, _)| !prose(k))
                    .all(|(k, v)| b.get(k) == Some(v))
        }
        _ => a == b,
    }
}

/// Hex SHA-256 of what a decision decides (explanations left out), to tell a new decision from a
/// re-explained one.
pub(super) fn decision_hash(decision: &Value) -> String {
    match decision {
        Value::Object(members) => {
            let mut decided = members.clone();
            for key in NOT_DECIDED {
                decided.remove(key);
            }
            json_hash(&Value::Object(decided))
        }
        other => json_hash(other),
    }
}

/// For how many revisions a set remembers the keys of removed objects, so an agent that far
/// behind can still be sent only what changed ([`Store::get_work_since`]).
pub const TOMBSTONE_REVISIONS: i64 = 1_000;

/// Hex SHA-256 of one object's canonical JSON.
pub(super) fn object_hash(object: &Value) -> String {
    json_hash(object)
}

/// Writes `value` as compact JSON with object keys sorted. Written out rather than relying on
/// `serde_json`'s map order, which becomes insertion order when any crate in the build enables its
/// `preserve_order` feature.
pub(super) fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn canonical_json_ignores_key_order() {
        let a = json!({"b": 1, "a": {"y": [1, 2], "x": null}});
        let mut b = serde_json::Map::new();
        b.insert("a".into(), json!({"x": null, "y": [1, 2]}));
        b.insert("b".into(), json!(1));
        assert_eq!(json_hash(&a), json_hash(&Value::Object(b)));
        assert_ne!(
            json_hash(&a),
            json_hash(&json!({"b": 1, "a": {"y": [2, 1], "x": null}}))
        );
    }

    #[test]
    fn tokens_are_random_and_hash_to_64_hex_digits() {
        let a = new_token(StoreOp::IssueCredential).expect("token");
        let b = new_token(StoreOp::IssueCredential).expect("token");
        assert_ne!(a, b);
        assert!(
            a.expose().starts_with("nave_") && a.expose().len() == 5 + 43,
            "seen {:?}",
            a.expose()
        );
        let hash = token_hash(a.expose());
        assert_eq!(hash.len(), 64);
        assert!(
            hash.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert!(!format!("{a:?}").contains(a.expose()));
    }

    #[test]
    fn history_cursor_round_trips_and_rejects_garbage() {
        let cursor = HistoryCursor {
            at_ms: 1_763_700_000_123,
            id: 42,
        };
        assert_eq!(cursor.to_string().parse::<HistoryCursor>(), Ok(cursor));
        assert_eq!("not-a-cursor!".parse::<HistoryCursor>(), Err(InvalidCursor));
        assert_eq!(
            URL_SAFE_NO_PAD.encode("12").parse::<HistoryCursor>(),
            Err(InvalidCursor)
        );
    }

    #[test]
    fn client_message_never_includes_database_text() {
        let error = StoreError::Query {
            op: StoreOp::GetWork,
            source: sqlx::Error::Protocol("relation \"work\" secret detail".into()),
        };
        assert_eq!(error.client_message(), "internal store error");
        assert_eq!(error.kind(), StoreErrorKind::Internal);
        let busy = StoreError::Query {
            op: StoreOp::PutWork,
            source: sqlx::Error::PoolTimedOut,
        };
        assert_eq!(busy.kind(), StoreErrorKind::Unavailable);
        assert_eq!(busy.client_message(), "the store is temporarily unavailable");
    }
}
