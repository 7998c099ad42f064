//! The store's SQL and row mapping, written once for both backends.
//!
//! The two backends run the same statements. sqlx numbers parameters `$1`, `$2`, ... for SQLite
//! as for Postgres; `INSERT ... ON CONFLICT ... DO UPDATE` and `RETURNING` are spelled the same;
//! JSON columns are bound and read through sqlx's [`Json`] (TEXT in SQLite, JSONB in Postgres);
//! timestamps are integer milliseconds in both. What differs is small and named by [`Dialect`]:
//! how a write transaction starts, and whether it must lock the rows it reads before writing
//! what depends on them. Opening a pool and the migrations stay in `sqlite.rs` and `postgres.rs`.
//!
//! ```text
//!   SqliteStore = SqlStore<Sqlite>   ─┐                    ┌─ Dialect for Sqlite (BEGIN IMMEDIATE)
//!                                     ├─ impl Store (here) ┤
//!   PgStore     = SqlStore<Postgres> ─┘                    └─ Dialect for Postgres (FOR UPDATE)
//! ```
//!
//! # Why generic over the database
//! [`SqlStore`] is generic over sqlx's [`Database`], bounded by what its queries bind and read.
//! The shared code is then ordinary Rust: rustfmt formats it, the compiler checks it once, and an
//! error points at the line that is wrong. The price is the `where` clause on the `Store` impl,
//! which lists, type by type, what the SQL binds and reads. A macro stamping the methods out per
//! pool would need no bounds, but it would be checked once per backend, never formatted, and
//! report errors inside the macro. `sqlx::Any` is no option: it has no JSON and no compile-time
//! types.

use std::collections::BTreeMap;

use futures::StreamExt as _;
use jiff::Timestamp;
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Pool, Transaction, Type};

use super::contract::*;
use super::credentials::CredentialCache;
use super::types::*;

/// What differs between the backends' SQL. Implemented for [`sqlx::Sqlite`] and
/// [`sqlx::Postgres`].
pub trait Dialect: Database {
    /// The backend, for [`Store::backend`] and error messages.
    const BACKEND: Backend;

    /// The statement that starts a write transaction.
    const BEGIN_WRITE: &'static str;

    /// Whether a write that depends on what it read must lock the rows it read
    /// (`SELECT ... FOR UPDATE`), so that concurrent writers queue instead of both acting on the
    /// same old value. `false` where [`BEGIN_WRITE`](Dialect::BEGIN_WRITE) already takes a lock
    /// on the whole database.
    const ROW_LOCKS: bool;

    /// How many rows a statement changed (sqlx has no trait for it).
    fn rows_affected(done: &Self::QueryResult) -> u64;

    /// The statement that announces a change to the other replicas, binding the channel and the
    /// payload; `None` where nothing listens (SQLite: one hub per file).
    const NOTIFY: Option<&'static str>;

    /// The statement that names, for the rest of the transaction, the term the write is made
    /// under (binding it as text), where the database checks it itself; `None` elsewhere.
    const SET_TERM: Option<&'static str>;

    /// The statement that bounds how long a claim of a term waits for the writes in flight.
    const CLAIM_LOCK_TIMEOUT: Option<&'static str>;

    /// The other replicas' announcements on `channel`, skipping those of `origin` (this
    /// process); `None` where the backend has none.
    fn listen(
        pool: &Pool<Self>,
        channel: &str,
        origin: &str,
    ) -> impl std::future::Future<Output = Result<Option<ChangeFeed>, StoreError>> + Send;
}

/// The store on a pool of either backend: [`SqliteStore`] or [`PgStore`].
#[derive(Debug)]
pub struct SqlStore<DB: Database> {
    pub(super) pool: Pool<DB>,
    /// Seals Secret payloads in work sets; `None`: stored as they come.
    pub(super) sealer: Option<std::sync::Arc<super::sealed::Sealer>>,
    /// What this handle (and its clones) writes placements and work under.
    fence: std::sync::Arc<Fence>,
    /// Where changes are announced: one channel per store (its identity), so stores in other
    /// schemas of the same database do not hear each other.
    channel: std::sync::Arc<str>,
    /// This process's mark on its announcements, so it skips its own.
    origin: std::sync::Arc<str>,
    /// Valid agent credentials read lately (see [`super::credentials`]).
    credentials: std::sync::Arc<CredentialCache>,
}

/// The term a store handle claimed, and the signal that another term was claimed since (a new
/// one with every claim).
#[derive(Debug, Default)]
struct Fence {
    term: std::sync::Mutex<Option<u64>>,
    lost: std::sync::Mutex<tokio_util::sync::CancellationToken>,
}

impl Fence {
    fn lose(&self) {
        self.lost.lock().unwrap_or_else(|e| e.into_inner()).cancel();
    }
}

/// An announcement as it travels: who wrote, and what.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct Notice {
    /// The writing process's [`SqlStore::origin`].
    pub(super) o: String,
    /// The change.
    pub(super) c: StoreChange,
}

impl<DB: Database> Clone for SqlStore<DB> {
    fn clone(&self) -> Self {
        SqlStore {
            pool: self.pool.clone(),
            sealer: self.sealer.clone(),
            fence: self.fence.clone(),
            channel: self.channel.clone(),
            origin: self.origin.clone(),
            credentials: self.credentials.clone(),
        }
    }
}

impl<DB: Dialect> SqlStore<DB> {
    /// The same store, sealing the Secret payloads of work sets with `sealer`.
    pub fn with_sealer(mut self, sealer: Option<std::sync::Arc<super::sealed::Sealer>>) -> Self {
        self.sealer = sealer;
        self
    }

    /// The same store, announcing its changes on `channel` (see [`Dialect::NOTIFY`]).
    pub(super) fn announcing_on(mut self, channel: String) -> Self {
        self.channel = channel.into();
        self
    }

    /// The connection pool, for callers that need SQL of their own (tests, maintenance).
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    async fn begin_write(&self, op: StoreOp) -> Result<Transaction<'static, DB>, StoreError> {
        self.pool
            .begin_with(DB::BEGIN_WRITE)
            .await
            .map_err(query_error(op))
    }

    /// The announcement of `change`, as the statement [`Dialect::NOTIFY`] binds: channel and
    /// payload; `None` where the backend announces nothing.
    fn notice(&self, change: StoreChange) -> Option<(&'static str, &str, String)> {
        let sql = DB::NOTIFY?;
        let payload = serde_json::to_string(&Notice {
            o: self.origin.to_string(),
            c: change,
        })
        .ok()?;
        Some((sql, &self.channel, payload))
    }

    /// Refuses with [`StoreError::Fenced`] unless `current`, the store's term read in the
    /// writing transaction, is the one this handle claimed; the first refusal after a claim
    /// cancels [`Store::fenced`].
    fn check_term(&self, op: StoreOp, current: i64) -> Result<u64, StoreError> {
        let current = revision_out(op, "term", current)?;
        let mine = *self.fence.term.lock().unwrap_or_else(|e| e.into_inner());
        if mine == Some(current) {
            return Ok(current);
        }
        if mine.is_some() {
            self.fence.lose();
        }
        Err(StoreError::Fenced {
            op,
            term: mine,
            current,
        })
    }
}

/// Reads the store's term in a writing transaction; on Postgres with a share lock, so that a
/// claim of a new term waits for the writes in flight and every write after it sees it.
const TERM_FOR_WRITE: &str = "SELECT term FROM leadership WHERE singleton = 1";
const TERM_FOR_WRITE_LOCKED: &str = "SELECT term FROM leadership WHERE singleton = 1 FOR SHARE";
/// Reads the store's term to claim the next; on Postgres locking the row for the update.
const TERM_FOR_CLAIM_LOCKED: &str = "SELECT term FROM leadership WHERE singleton = 1 FOR UPDATE";

/// The query that reads the term to change the leadership row: locking the row where the
/// database has row locks, else as a write reads it (SQLite's writer holds the whole database).
fn term_for_update<DB: Dialect>() -> &'static str {
    if DB::ROW_LOCKS {
        TERM_FOR_CLAIM_LOCKED
    } else {
        TERM_FOR_WRITE
    }
}

/// Announces `$change` to the other replicas through `$executor` (a transaction, so it is heard
/// when the write commits, or the pool), where the backend announces anything.
macro_rules! announce {
    ($store:expr, $executor:expr, $op:expr, $change:expr) => {
        if let Some((sql, channel, payload)) = $store.notice($change) {
            sqlx::query(sql)
                .bind(channel)
                .bind(payload)
                .execute($executor)
                .await
                .map_err(query_error($op))?;
        }
    };
}

/// Objects as stored, with sealed Secrets opened.
fn open_objects(
    sealer: Option<&super::sealed::Sealer>,
    op: StoreOp,
    objects: Vec<Value>,
) -> Result<Vec<Value>, StoreError> {
    super::sealed::open(sealer, objects).map_err(|source| StoreError::Corrupt {
        op,
        what: "sealed Secret data",
        source: Box::new(source),
    })
}

/// Reads the store's term in the writing transaction `$tx` and refuses unless this handle
/// claimed it (see [`SqlStore::check_term`]).
macro_rules! fence {
    ($store:expr, $tx:expr, $op:expr) => {{
        let current: i64 = sqlx::query_scalar(if DB::ROW_LOCKS {
            TERM_FOR_WRITE_LOCKED
        } else {
            TERM_FOR_WRITE
        })
        .fetch_one(&mut *$tx)
        .await
        .map_err(query_error($op))?;
        let term = $store.check_term($op, current)?;
        if let Some(sql) = DB::SET_TERM {
            sqlx::query(sql)
                .bind(term.to_string())
                .execute(&mut *$tx)
                .await
                .map_err(query_error($op))?;
        }
        term
    }};
}

/// Maps an error opening a pool of `DB`.
pub(super) fn connect_error<DB: Dialect>(source: sqlx::Error) -> StoreError {
    StoreError::Connect {
        backend: DB::BACKEND,
        source,
    }
}

/// Applies `migrator` to a freshly opened pool.
pub(super) async fn migrate<DB: Dialect>(
    migrator: &sqlx::migrate::Migrator,
    pool: Pool<DB>,
) -> Result<SqlStore<DB>, StoreError>
where
    DB::Connection: sqlx::migrate::Migrate,
{
    migrator.run(&pool).await.map_err(|source| StoreError::Migrate {
        backend: DB::BACKEND,
        source,
    })?;
    let mut origin = [0u8; 8];
    getrandom::fill(&mut origin).map_err(|source| StoreError::Random {
        op: StoreOp::Identity,
        source,
    })?;
    Ok(SqlStore {
        pool,
        sealer: None,
        fence: Default::default(),
        channel: "".into(),
        origin: origin
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
            .into(),
        credentials: Default::default(),
    })
}

// Column lists, as macros so that `concat!` can splice them into `&'static str` SQL (sqlx accepts
// only static strings as safe SQL).
macro_rules! cluster_columns {
    () => {
        "name, labels, region, zone, latitude, longitude, registered_at_ms, agent_version, \
         kubernetes_version, last_heartbeat_at_ms, capacity, cordoned, burst_only, accepted, \
         prune_confirmed_revision"
    };
}
macro_rules! placement_columns {
    () => {
        "namespace, name, uid, generation, decision, updated_at_ms"
    };
}
macro_rules! history_columns {
    () => {
        "id, namespace, name, uid, at_ms, generation, trigger, reason, decision"
    };
}

/// Writes `$objects` into `$cluster`'s set (see [`Store::put_work`] and
/// [`Store::change_work`]): with `$removed` (`Some` keys), those objects change and the objects
/// of those keys go, else they replace the whole set. Objects whose content is stored already are
/// not written; the revision goes up by one when anything changed, and the set is created at
/// revision 1 when there was none. A macro, as [`fence!`] is, for the bounds of the `Store` impl.
macro_rules! write_work {
    ($store:expr, $op:expr, $cluster:expr, $objects:expr, $removed:expr) => {{
        let (this, op, cluster, objects, removed): (
            &SqlStore<DB>,
            StoreOp,
            &str,
            &[Value],
            Option<&[String]>,
        ) = ($store, $op, $cluster, $objects, $removed);
        // Hashed in clear, stored sealed: sealing is deterministic, so an unchanged object keeps
        // its digest either way. A key given twice keeps the last object.
        let mut wanted: BTreeMap<String, (String, &Value)> = BTreeMap::new();
        for object in objects {
            wanted.insert(nave_api::wire::work_key(object), (object_hash(object), object));
        }
        let mut tx = this.begin_write(op).await?;
        fence!(this, tx, op);
        let now = millis(Timestamp::now());
        // Creating the row (or finding it) first locks it on Postgres until commit, so concurrent
        // writers of one cluster go one after another from the latest committed revision.
        let created: Option<i64> = sqlx::query_scalar(
            "INSERT INTO work (cluster, revision, updated_at_ms, deltas_from) VALUES ($1, 1, $2, 0) \
             ON CONFLICT (cluster) DO NOTHING RETURNING revision",
        )
        .bind(cluster)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await
        .map_err(cluster_write_error(op, cluster))?;
        let (current, deltas_from) = match created {
            Some(_) => (0, 0),
            None => sqlx::query_as::<_, (i64, i64)>(if DB::ROW_LOCKS {
                "SELECT revision, deltas_from FROM work WHERE cluster = $1 FOR UPDATE"
            } else {
                "SELECT revision, deltas_from FROM work WHERE cluster = $1"
            })
            .bind(cluster)
            .fetch_one(&mut *tx)
            .await
            .map_err(query_error(op))?,
        };
        let next = current + 1;
        let gone: Vec<String> = match removed {
            Some(removed) => removed
                .iter()
                .filter(|k| !wanted.contains_key(*k))
                .cloned()
                .collect(),
            None => {
                let stored: Vec<String> = sqlx::query_scalar(
                    "SELECT key FROM work_objects WHERE cluster = $1 AND object IS NOT NULL",
                )
                .bind(cluster)
                .fetch_all(&mut *tx)
                .await
                .map_err(query_error(op))?;
                stored.into_iter().filter(|k| !wanted.contains_key(k)).collect()
            }
        };
        let mut changes = 0;
        for (key, (hash, object)) in &wanted {
            let stored = super::sealed::seal(this.sealer.as_deref(), std::slice::from_ref(*object));
            let done = sqlx::query(
                "INSERT INTO work_objects (cluster, key, revision, content_sha256, object) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (cluster, key) DO UPDATE SET revision = excluded.revision, \
                 content_sha256 = excluded.content_sha256, object = excluded.object \
                 WHERE work_objects.content_sha256 <> excluded.content_sha256 \
                 OR work_objects.object IS NULL",
            )
            .bind(cluster)
            .bind(key.as_str())
            .bind(next)
            .bind(hash.as_str())
            .bind(Json(&stored[0]))
            .execute(&mut *tx)
            .await
            .map_err(query_error(op))?;
            changes += DB::rows_affected(&done);
        }
        for key in &gone {
            let done = sqlx::query(
                "UPDATE work_objects SET object = NULL, content_sha256 = '', revision = $3 \
                 WHERE cluster = $1 AND key = $2 AND object IS NOT NULL",
            )
            .bind(cluster)
            .bind(key.as_str())
            .bind(next)
            .execute(&mut *tx)
            .await
            .map_err(query_error(op))?;
            changes += DB::rows_affected(&done);
        }
        if created.is_none() && changes == 0 {
            tx.commit().await.map_err(query_error(op))?;
            let revision = revision_out(op, "revision", current)?;
            return Ok::<WorkWrite, StoreError>(WorkWrite {
                revision,
                changed: false,
            });
        }
        // Tombstones are kept for TOMBSTONE_REVISIONS revisions, swept every hundredth.
        let horizon = next - TOMBSTONE_REVISIONS;
        let sweep = next % 100 == 0 && horizon > deltas_from;
        if sweep {
            sqlx::query("DELETE FROM work_objects WHERE cluster = $1 AND object IS NULL AND revision <= $2")
                .bind(cluster)
                .bind(horizon)
                .execute(&mut *tx)
                .await
                .map_err(query_error(op))?;
        }
        if created.is_none() {
            sqlx::query(
                "UPDATE work SET revision = $2, updated_at_ms = $3, \
                 deltas_from = CASE WHEN $4 THEN $5 ELSE deltas_from END WHERE cluster = $1",
            )
            .bind(cluster)
            .bind(next)
            .bind(now)
            .bind(sweep)
            .bind(horizon)
            .execute(&mut *tx)
            .await
            .map_err(query_error(op))?;
        }
        let revision = revision_out(op, "revision", next)?;
        announce!(
            this,
            &mut *tx,
            op,
            StoreChange::Work {
                cluster: cluster.to_owned(),
                revision,
            }
        );
        tx.commit().await.map_err(query_error(op))?;
        Ok::<WorkWrite, StoreError>(WorkWrite {
            revision,
            changed: true,
        })
    }};
}

impl<DB> Store for SqlStore<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    // What the statements bind.
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    String: for<'q> Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    Option<i64>: for<'q> Encode<'q, DB>,
    Option<f64>: for<'q> Encode<'q, DB> + Type<DB>,
    bool: for<'q> Encode<'q, DB> + Type<DB>,
    for<'q> Json<&'q BTreeMap<String, String>>: Encode<'q, DB> + Type<DB>,
    for<'q> Json<&'q Value>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<Json<&'q Value>>: Encode<'q, DB>,
    for<'q> Json<&'q [Value]>: Encode<'q, DB> + Type<DB>,
    // What they read.
    (i64,): for<'r> FromRow<'r, DB::Row>,
    (String,): for<'r> FromRow<'r, DB::Row>,
    (i64, String): for<'r> FromRow<'r, DB::Row>,
    (String, String): for<'r> FromRow<'r, DB::Row>,
    (i64, String, i64): for<'r> FromRow<'r, DB::Row>,
    ClusterRow: for<'r> FromRow<'r, DB::Row>,
    CredentialRow: for<'r> FromRow<'r, DB::Row>,
    JoinTokenRow: for<'r> FromRow<'r, DB::Row>,
    HeartbeatRow: for<'r> FromRow<'r, DB::Row>,
    PlacementRow: for<'r> FromRow<'r, DB::Row>,
    HistoryRow: for<'r> FromRow<'r, DB::Row>,
    (i64, i64): for<'r> FromRow<'r, DB::Row>,
    (i64, i64, Option<Json<Value>>): for<'r> FromRow<'r, DB::Row>,
    DeltaRow: for<'r> FromRow<'r, DB::Row>,
    WorkStatusRow: for<'r> FromRow<'r, DB::Row>,
{
    fn backend(&self) -> Backend {
        DB::BACKEND
    }

    fn close(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            self.pool.close().await;
            Ok(())
        })
    }

    fn check_writable(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::CheckWritable;
            let mut tx = self.begin_write(OP).await?;
            sqlx::query("UPDATE store_identity SET created_at_ms = created_at_ms WHERE singleton = 1")
                .execute(&mut *tx)
                .await
                .map_err(query_error(OP))?;
            tx.commit().await.map_err(query_error(OP))?;
            Ok(())
        })
    }

    fn identity(&self) -> StoreFuture<'_, String> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::Identity;
            sqlx::query_scalar("SELECT id FROM store_identity WHERE singleton = 1")
                .fetch_one(&self.pool)
                .await
                .map_err(query_error(OP))
        })
    }

    fn leadership(&self) -> StoreFuture<'_, Leadership> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::Leadership;
            let (term, holder, published): (i64, String, i64) =
                sqlx::query_as("SELECT term, holder, published_term FROM leadership WHERE singleton = 1")
                    .fetch_one(&self.pool)
                    .await
                    .map_err(query_error(OP))?;
            Ok(Leadership {
                term: revision_out(OP, "term", term)?,
                holder,
                published_term: revision_out(OP, "published term", published)?,
            })
        })
    }

    fn claim_term<'a>(&'a self, term: Option<u64>, holder: &'a str) -> StoreFuture<'a, Claim> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::ClaimTerm;
            let mut tx = self.begin_write(OP).await?;
            // A writer that holds the term's row (a leader that stopped in the middle of a
            // transaction) makes the claim fail soon, to be tried again, rather than wait.
            if let Some(sql) = DB::CLAIM_LOCK_TIMEOUT {
                sqlx::query(sql)
                    .execute(&mut *tx)
                    .await
                    .map_err(query_error(OP))?;
            }
            let current: i64 = sqlx::query_scalar(term_for_update::<DB>())
                .fetch_one(&mut *tx)
                .await
                .map_err(query_error(OP))?;
            let current = revision_out(OP, "term", current)?;
            let wanted = term.unwrap_or(current + 1);
            if wanted <= current {
                tx.rollback().await.map_err(query_error(OP))?;
                if self.term().is_some_and(|mine| mine < current) {
                    self.fence.lose();
                }
                return Ok(Claim::Stale { current });
            }
            sqlx::query(
                "UPDATE leadership SET term = $1, holder = $2, changed_at_ms = $3 WHERE singleton = 1",
            )
            .bind(revision_in(OP, "term", wanted)?)
            .bind(holder)
            .bind(millis(Timestamp::now()))
            .execute(&mut *tx)
            .await
            .map_err(query_error(OP))?;
            announce!(self, &mut *tx, OP, StoreChange::Leadership);
            tx.commit().await.map_err(query_error(OP))?;
            *self.fence.term.lock().unwrap_or_else(|e| e.into_inner()) = Some(wanted);
            *self.fence.lost.lock().unwrap_or_else(|e| e.into_inner()) = Default::default();
            Ok(Claim::Claimed(wanted))
        })
    }

    fn term(&self) -> Option<u64> {
        *self.fence.term.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fenced(&self) -> tokio_util::sync::CancellationToken {
        self.fence.lost.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn mark_published(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::MarkPublished;
            let mut tx = self.begin_write(OP).await?;
            // The row is updated below: locked for that at once, rather than shared first.
            let current: i64 = sqlx::query_scalar(term_for_update::<DB>())
                .fetch_one(&mut *tx)
                .await
                .map_err(query_error(OP))?;
            let term = self.check_term(OP, current)?;
            sqlx::query("UPDATE leadership SET published_term = $1 WHERE singleton = 1")
                .bind(revision_in(OP, "term", term)?)
                .execute(&mut *tx)
                .await
                .map_err(query_error(OP))?;
            announce!(self, &mut *tx, OP, StoreChange::Leadership);
            tx.commit().await.map_err(query_error(OP))?;
            Ok(())
        })
    }

    fn changes(&self) -> StoreFuture<'_, Option<ChangeFeed>> {
        Box::pin(async move {
            let feed = DB::listen(&self.pool, &self.channel, &self.origin).await?;
            // Listening anew: what other replicas revoked before may not have been heard.
            self.credentials.forget_all();
            Ok(feed.map(|feed| {
                let credentials = self.credentials.clone();
                Box::pin(feed.inspect(move |event| credentials.follow(event))) as ChangeFeed
            }))
        })
    }

    fn ping(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::Listen;
            announce!(self, &self.pool, OP, StoreChange::Ping);
            Ok(())
        })
    }

    fn upsert_cluster<'a>(&'a self, cluster: &'a ClusterUpsert) -> StoreFuture<'a, ClusterRecord> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::UpsertCluster;
            let mut tx = self.begin_write(OP).await?;
            let row: ClusterRow = sqlx::query_as(concat!(
                "INSERT INTO clusters (name, labels, region, zone, latitude, longitude, registered_at_ms, \
                 agent_version, kubernetes_version, cordoned, burst_only, accepted) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                 ON CONFLICT (name) DO UPDATE SET labels = excluded.labels, region = excluded.region, \
                 zone = excluded.zone, latitude = excluded.latitude, longitude = excluded.longitude, \
                 agent_version = COALESCE(excluded.agent_version, clusters.agent_version), \
                 kubernetes_version = COALESCE(excluded.kubernetes_version, clusters.kubernetes_version), \
                 cordoned = excluded.cordoned, burst_only = excluded.burst_only, \
                 accepted = excluded.accepted \
                 RETURNING ",
                cluster_columns!()
            ))
            .bind(cluster.name.as_str())
            .bind(Json(&cluster.labels))
            .bind(cluster.region.as_deref())
            .bind(cluster.zone.as_deref())
            .bind(cluster.coordinates.map(|c| c.latitude))
            .bind(cluster.coordinates.map(|c| c.longitude))
            .bind(millis(Timestamp::now()))
            .bind(cluster.agent_version.as_deref())
            .bind(cluster.kubernetes_version.as_deref())
            .bind(cluster.cordoned)
            .bind(cluster.burst_only)
            .bind(cluster.accepted)
            .fetch_one(&mut *tx)
            .await
            .map_err(query_error(OP))?;
            // Registered again: no longer a removed name.
            sqlx::query("DELETE FROM removed_clusters WHERE name = $1")
                .bind(cluster.name.as_str())
                .execute(&mut *tx)
                .await
                .map_err(query_error(OP))?;
            announce!(self, &mut *tx, OP, StoreChange::Cluster(cluster.name.clone()));
            tx.commit().await.map_err(query_error(OP))?;
            row.into_record(OP)
        })
    }

    fn get_cluster<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<ClusterRecord>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::GetCluster;
            let row: Option<ClusterRow> = sqlx::query_as(concat!(
                "SELECT ",
                cluster_columns!(),
                " FROM clusters WHERE name = $1"
            ))
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error(OP))?;
            row.map(|row| row.into_record(OP)).transpose()
        })
    }

    fn list_clusters(&self) -> StoreFuture<'_, Vec<ClusterRecord>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::ListClusters;
            let rows: Vec<ClusterRow> = sqlx::query_as(concat!(
                "SELECT ",
                cluster_columns!(),
                " FROM clusters ORDER BY name"
            ))
            .fetch_all(&self.pool)
            .await
            .map_err(query_error(OP))?;
            rows.into_iter().map(|row| row.into_record(OP)).collect()
        })
    }

    fn issue_credential<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, IssuedCredential> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::IssueCredential;
            let mut tx = self.begin_write(OP).await?;
            let issued = insert_credential(&mut tx, OP, cluster, Timestamp::now()).await?;
            tx.commit().await.map_err(query_error(OP))?;
            Ok(issued)
        })
    }

    fn rotate_credential<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, IssuedCredential> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::RotateCredential;
            let now = Timestamp::now();
            let rotated = async {
                let mut tx = self.begin_write(OP).await?;
                if DB::ROW_LOCKS {
                    // Rotations of one cluster queue on its row. Otherwise each one's UPDATE sees
                    // only committed credentials, misses the new one of a rotation still in
                    // flight, and both new credentials stay valid.
                    sqlx::query("SELECT name FROM clusters WHERE name = $1 FOR UPDATE")
                        .bind(cluster)
                        .execute(&mut *tx)
                        .await
                        .map_err(query_error(OP))?;
                }
                let issued = insert_credential(&mut tx, OP, cluster, now).await?;
                sqlx::query(
                    "UPDATE agent_credentials SET revoked_at_ms = $1 \
                     WHERE cluster = $2 AND revoked_at_ms IS NULL AND id <> $3",
                )
                .bind(millis(now))
                .bind(cluster)
                .bind(issued.id)
                .execute(&mut *tx)
                .await
                .map_err(query_error(OP))?;
                announce!(self, &mut *tx, OP, StoreChange::Credentials(cluster.to_owned()));
                tx.commit().await.map_err(query_error(OP))?;
                Ok(issued)
            }
            .await;
            // Whatever the outcome (a commit whose answer was lost may have landed).
            self.credentials.forget_cluster(cluster);
            rotated
        })
    }

    fn revoke_credential(&self, id: i64) -> StoreFuture<'_, bool> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::RevokeCredential;
            let mut cluster = None;
            let revoked = async {
                let mut tx = self.begin_write(OP).await?;
                let of: Option<(String,)> = sqlx::query_as(
                    "SELECT cluster FROM agent_credentials WHERE id = $1 AND revoked_at_ms IS NULL",
                )
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(query_error(OP))?;
                let Some((of,)) = of else {
                    return Ok(false);
                };
                cluster = Some(of.clone());
                let done = sqlx::query(
                    "UPDATE agent_credentials SET revoked_at_ms = $1 WHERE id = $2 AND revoked_at_ms IS NULL",
                )
                .bind(millis(Timestamp::now()))
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(query_error(OP))?;
                announce!(self, &mut *tx, OP, StoreChange::Credentials(of));
                tx.commit().await.map_err(query_error(OP))?;
                Ok(DB::rows_affected(&done) == 1)
            }
            .await;
            match &cluster {
                Some(cluster) => self.credentials.forget_cluster(cluster),
                None if revoked.is_err() => self.credentials.forget_all(),
                None => {}
            }
            revoked
        })
    }

    fn authenticate_agent<'a>(&'a self, token: &'a str) -> StoreFuture<'a, Option<AgentIdentity>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::AuthenticateAgent;
            let digest = token_hash(token);
            if let Some(identity) = self.credentials.get(&digest) {
                return Ok(Some(identity));
            }
            let read_under = self.credentials.generation();
            let row: Option<(i64, String)> = sqlx::query_as(
                "SELECT id, cluster FROM agent_credentials WHERE token_sha256 = $1 AND revoked_at_ms IS NULL",
            )
            .bind(&digest)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error(OP))?;
            let identity = row.map(|(credential_id, cluster)| AgentIdentity {
                credential_id,
                cluster,
            });
            if let Some(identity) = &identity {
                self.credentials.keep(digest, identity.clone(), read_under);
            }
            Ok(identity)
        })
    }

    fn list_credentials<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, Vec<CredentialInfo>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::ListCredentials;
            let rows: Vec<CredentialRow> = sqlx::query_as(
                "SELECT id, cluster, created_at_ms, revoked_at_ms FROM agent_credentials \
                 WHERE cluster = $1 ORDER BY id",
            )
            .bind(cluster)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error(OP))?;
            rows.into_iter().map(|row| row.into_info(OP)).collect()
        })
    }

    fn set_accepted<'a>(
        &'a self,
        cluster: &'a str,
        accepted: bool,
    ) -> StoreFuture<'a, Option<ClusterRecord>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::SetAccepted;
            // A plain UPDATE, then a read: on SQLite an `UPDATE ... RETURNING` read with
            // `fetch_optional` can leave its statement, and so its transaction, open.
            let mut tx = self.begin_write(OP).await?;
            sqlx::query("UPDATE clusters SET accepted = $1 WHERE name = $2")
                .bind(accepted)
                .bind(cluster)
                .execute(&mut *tx)
                .await
                .map_err(query_error(OP))?;
            announce!(self, &mut *tx, OP, StoreChange::Cluster(cluster.to_owned()));
            tx.commit().await.map_err(query_error(OP))?;
            self.get_cluster(cluster).await
        })
    }

    fn confirm_prune<'a>(
        &'a self,
        cluster: &'a str,
        revision: u64,
    ) -> StoreFuture<'a, Option<ClusterRecord>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::ConfirmPrune;
            let mut tx = self.begin_write(OP).await?;
            sqlx::query("UPDATE clusters SET prune_confirmed_revision = $1 WHERE name = $2")
                .bind(revision_in(OP, "revision", revision)?)
                .bind(cluster)
                .execute(&mut *tx)
                .await
                .map_err(query_error(OP))?;
            announce!(self, &mut *tx, OP, StoreChange::Cluster(cluster.to_owned()));
            tx.commit().await.map_err(query_error(OP))?;
            self.get_cluster(cluster).await
        })
    }

    fn delete_cluster<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::DeleteCluster;
            let mut tx = self.begin_write(OP).await?;
            // Credentials and heartbeats go with the row (ON DELETE CASCADE); the work set
            // does not, on purpose (see the schema), so it goes first, explicitly.
            for statement in [
                "DELETE FROM work_status WHERE cluster = $1",
                "DELETE FROM work_objects WHERE cluster = $1",
                "DELETE FROM work WHERE cluster = $1",
            ] {
                sqlx::query(statement)
                    .bind(cluster)
                    .execute(&mut *tx)
                    .await
                    .map_err(query_error(OP))?;
            }
            let done = sqlx::query("DELETE FROM clusters WHERE name = $1")
                .bind(cluster)
                .execute(&mut *tx)
                .await
                .map_err(query_error(OP))?;
            let removed = DB::rows_affected(&done) == 1;
            if removed {
                sqlx::query(
                    "INSERT INTO removed_clusters (name, removed_at_ms) VALUES ($1, $2) \
                     ON CONFLICT (name) DO UPDATE SET removed_at_ms = excluded.removed_at_ms",
                )
                .bind(cluster)
                .bind(millis(Timestamp::now()))
                .execute(&mut *tx)
                .await
                .map_err(query_error(OP))?;
            }
            announce!(self, &mut *tx, OP, StoreChange::Cluster(cluster.to_owned()));
            let committed = tx.commit().await.map_err(query_error(OP));
            // Its credentials went with it (whatever the outcome: an answer lost may hide a commit).
            self.credentials.forget_cluster(cluster);
            committed?;
            Ok(removed)
        })
    }

    fn removed_at<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, Option<Timestamp>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::RemovedAt;
            let ms: Option<i64> =
                sqlx::query_scalar("SELECT removed_at_ms FROM removed_clusters WHERE name = $1")
                    .bind(cluster)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(query_error(OP))?;
            opt_timestamp(OP, "removed_at", ms)
        })
    }

    fn create_join_token<'a>(
        &'a self,
        cluster: &'a str,
        expires_at: Timestamp,
    ) -> StoreFuture<'a, IssuedJoinToken> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::CreateJoinToken;
            let (id, secret, token) = new_join_token(OP)?;
            sqlx::query(
                "INSERT INTO join_tokens (id, cluster, secret_sha256, created_at_ms, expires_at_ms) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(id.as_str())
            .bind(cluster)
            .bind(token_hash(&secret))
            .bind(millis(Timestamp::now()))
            .bind(millis(expires_at))
            .execute(&self.pool)
            .await
            .map_err(query_error(OP))?;
            Ok(IssuedJoinToken {
                id,
                cluster: cluster.to_owned(),
                token,
                expires_at,
            })
        })
    }

    fn find_join_token<'a>(
        &'a self,
        token: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<JoinTokenInfo>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::FindJoinToken;
            let Some((id, secret)) = split_join_token(token) else {
                return Ok(None);
            };
            // `fetch_all`, not `fetch_optional`: every row read, so the statement (and on SQLite
            // its read transaction) ends here rather than when the connection is next used.
            let rows: Vec<JoinTokenRow> = sqlx::query_as(
                "SELECT id, cluster, created_at_ms, expires_at_ms, used_at_ms FROM join_tokens \
                 WHERE id = $1 AND secret_sha256 = $2 AND used_at_ms IS NULL AND expires_at_ms > $3",
            )
            .bind(id)
            .bind(token_hash(secret))
            .bind(millis(now))
            .fetch_all(&self.pool)
            .await
            .map_err(query_error(OP))?;
            rows.into_iter().next().map(|row| row.into_info(OP)).transpose()
        })
    }

    fn redeem_join_token<'a>(
        &'a self,
        token: &'a str,
        cluster: &'a str,
        now: Timestamp,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::RedeemJoinToken;
            let Some((id, secret)) = split_join_token(token) else {
                return Ok(false);
            };
            // One conditional UPDATE: of two concurrent redemptions, the second finds the row
            // already used (Postgres re-checks the WHERE on the updated row; SQLite serializes).
            let done = sqlx::query(
                "UPDATE join_tokens SET used_at_ms = $1 WHERE id = $2 AND secret_sha256 = $3 \
                 AND cluster = $4 AND used_at_ms IS NULL AND expires_at_ms > $1",
            )
            .bind(millis(now))
            .bind(id)
            .bind(token_hash(secret))
            .bind(cluster)
            .execute(&self.pool)
            .await
            .map_err(query_error(OP))?;
            Ok(DB::rows_affected(&done) == 1)
        })
    }

    fn list_join_tokens(&self) -> StoreFuture<'_, Vec<JoinTokenInfo>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::ListJoinTokens;
            let rows: Vec<JoinTokenRow> = sqlx::query_as(
                "SELECT id, cluster, created_at_ms, expires_at_ms, used_at_ms FROM join_tokens \
                 ORDER BY created_at_ms DESC, id",
            )
            .fetch_all(&self.pool)
            .await
            .map_err(query_error(OP))?;
            rows.into_iter().map(|row| row.into_info(OP)).collect()
        })
    }

    fn record_heartbeats<'a>(&'a self, heartbeats: &'a [NewHeartbeat]) -> StoreFuture<'a, Vec<i64>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::RecordHeartbeat;
            let mut ids = Vec::with_capacity(heartbeats.len());
            if heartbeats.is_empty() {
                return Ok(ids);
            }
            let mut tx = self.begin_write(OP).await?;
            for heartbeat in heartbeats {
                let received_at = millis(heartbeat.received_at);
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO heartbeats (cluster, received_at_ms, payload) VALUES ($1, $2, $3) RETURNING id",
                )
                .bind(heartbeat.cluster.as_str())
                .bind(received_at)
                .bind(Json(&heartbeat.payload))
                .fetch_one(&mut *tx)
                .await
                .map_err(cluster_write_error(OP, &heartbeat.cluster))?;
                // A heartbeat that arrives after a newer one (a retried request) goes into the
                // history but does not roll the cluster's latest state back.
                sqlx::query(
                    "UPDATE clusters SET last_heartbeat_at_ms = $2, capacity = COALESCE($3, capacity), \
                     agent_version = COALESCE($4, agent_version), \
                     kubernetes_version = COALESCE($5, kubernetes_version) \
                     WHERE name = $1 AND (last_heartbeat_at_ms IS NULL OR last_heartbeat_at_ms <= $2)",
                )
                .bind(heartbeat.cluster.as_str())
                .bind(received_at)
                .bind(heartbeat.capacity.as_ref().map(Json))
                .bind(heartbeat.agent_version.as_deref())
                .bind(heartbeat.kubernetes_version.as_deref())
                .execute(&mut *tx)
                .await
                .map_err(query_error(OP))?;
                announce!(
                    self,
                    &mut *tx,
                    OP,
                    StoreChange::Heartbeat(heartbeat.cluster.clone())
                );
                ids.push(id);
            }
            tx.commit().await.map_err(query_error(OP))?;
            Ok(ids)
        })
    }

    fn list_heartbeats<'a>(&'a self, cluster: &'a str, limit: u32) -> StoreFuture<'a, Vec<HeartbeatRecord>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::ListHeartbeats;
            let rows: Vec<HeartbeatRow> = sqlx::query_as(
                "SELECT id, cluster, received_at_ms, payload FROM heartbeats WHERE cluster = $1 \
                 ORDER BY received_at_ms DESC, id DESC LIMIT $2",
            )
            .bind(cluster)
            .bind(page_size(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(query_error(OP))?;
            rows.into_iter().map(|row| row.into_record(OP)).collect()
        })
    }

    fn prune_heartbeats(&self, retention: HeartbeatRetention) -> StoreFuture<'_, u64> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::PruneHeartbeats;
            let done = sqlx::query(
                "DELETE FROM heartbeats WHERE id IN ( \
                   SELECT id FROM ( \
                     SELECT id, received_at_ms, ROW_NUMBER() OVER ( \
                       PARTITION BY cluster ORDER BY received_at_ms DESC, id DESC) AS newest \
                     FROM heartbeats) AS ranked \
                   WHERE newest > $1 AND ($2 IS NULL OR received_at_ms < $2))",
            )
            .bind(i64::from(retention.keep_last))
            .bind(retention.keep_newer_than.map(millis))
            .execute(&self.pool)
            .await
            .map_err(query_error(OP))?;
            Ok(DB::rows_affected(&done))
        })
    }

    fn prune_history(&self, retention: HistoryRetention) -> StoreFuture<'_, u64> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::PruneHistory;
            let done = sqlx::query(
                "DELETE FROM placement_history WHERE id IN ( \
                   SELECT id FROM ( \
                     SELECT id, at_ms, ROW_NUMBER() OVER ( \
                       PARTITION BY namespace, name ORDER BY at_ms DESC, id DESC) AS newest \
                     FROM placement_history) AS ranked \
                   WHERE newest > $1 AND ($2 IS NULL OR at_ms < $2))",
            )
            .bind(i64::from(retention.keep_last))
            .bind(retention.keep_newer_than.map(millis))
            .execute(&self.pool)
            .await
            .map_err(query_error(OP))?;
            Ok(DB::rows_affected(&done))
        })
    }

    fn put_placement<'a>(&'a self, placement: &'a PlacementUpdate) -> StoreFuture<'a, PlacementWrite> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::PutPlacement;
            let hash = decision_hash(&placement.decision);
            let at = millis(placement.at);
            let mut tx = self.begin_write(OP).await?;
            fence!(self, tx, OP);
            // Insert if new; otherwise read (and, with row locks, lock) the stored row before
            // comparing, so that two writers of the same MCD cannot both see the old decision and
            // both record a change.
            let inserted = sqlx::query(
                "INSERT INTO placements (namespace, name, uid, generation, decision, decision_sha256, \
                 updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (namespace, name) DO NOTHING",
            )
            .bind(placement.namespace.as_str())
            .bind(placement.name.as_str())
            .bind(placement.uid.as_str())
            .bind(placement.generation)
            .bind(Json(&placement.decision))
            .bind(hash.as_str())
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(query_error(OP))?;
            let changed = if DB::rows_affected(&inserted) == 1 {
                true
            } else {
                let (uid, stored): (String, String) = sqlx::query_as(if DB::ROW_LOCKS {
                    "SELECT uid, decision_sha256 FROM placements WHERE namespace = $1 AND name = $2 \
                     FOR UPDATE"
                } else {
                    "SELECT uid, decision_sha256 FROM placements WHERE namespace = $1 AND name = $2"
                })
                .bind(placement.namespace.as_str())
                .bind(placement.name.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(query_error(OP))?;
                sqlx::query(
                    "UPDATE placements SET uid = $3, generation = $4, decision = $5, \
                     decision_sha256 = $6, updated_at_ms = $7 WHERE namespace = $1 AND name = $2",
                )
                .bind(placement.namespace.as_str())
                .bind(placement.name.as_str())
                .bind(placement.uid.as_str())
                .bind(placement.generation)
                .bind(Json(&placement.decision))
                .bind(hash.as_str())
                .bind(at)
                .execute(&mut *tx)
                .await
                .map_err(query_error(OP))?;
                uid != placement.uid || stored != hash
            };
            let history_id = if changed {
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO placement_history (namespace, name, uid, at_ms, generation, trigger, \
                     reason, decision) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
                )
                .bind(placement.namespace.as_str())
                .bind(placement.name.as_str())
                .bind(placement.uid.as_str())
                .bind(at)
                .bind(placement.generation)
                .bind(placement.trigger.as_str())
                .bind(placement.reason.as_str())
                .bind(Json(&placement.decision))
                .fetch_one(&mut *tx)
                .await
                .map_err(query_error(OP))?;
                Some(id)
            } else {
                None
            };
            if changed {
                let change = StoreChange::Placement {
                    namespace: placement.namespace.clone(),
                    name: placement.name.clone(),
                };
                announce!(self, &mut *tx, OP, change);
            }
            tx.commit().await.map_err(query_error(OP))?;
            Ok(PlacementWrite { changed, history_id })
        })
    }

    fn get_placement<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> StoreFuture<'a, Option<PlacementRecord>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::GetPlacement;
            let row: Option<PlacementRow> = sqlx::query_as(concat!(
                "SELECT ",
                placement_columns!(),
                " FROM placements WHERE namespace = $1 AND name = $2"
            ))
            .bind(namespace)
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error(OP))?;
            row.map(|row| row.into_record(OP)).transpose()
        })
    }

    fn list_placements<'a>(&'a self, namespace: Option<&'a str>) -> StoreFuture<'a, Vec<PlacementRecord>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::ListPlacements;
            let rows: Vec<PlacementRow> = sqlx::query_as(concat!(
                "SELECT ",
                placement_columns!(),
                " FROM placements WHERE ($1 IS NULL OR namespace = $1) ORDER BY namespace, name"
            ))
            .bind(namespace)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error(OP))?;
            rows.into_iter().map(|row| row.into_record(OP)).collect()
        })
    }

    fn delete_placement<'a>(&'a self, namespace: &'a str, name: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::DeletePlacement;
            let mut tx = self.begin_write(OP).await?;
            fence!(self, tx, OP);
            let done = sqlx::query("DELETE FROM placements WHERE namespace = $1 AND name = $2")
                .bind(namespace)
                .bind(name)
                .execute(&mut *tx)
                .await
                .map_err(query_error(OP))?;
            let change = StoreChange::Placement {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            };
            announce!(self, &mut *tx, OP, change);
            tx.commit().await.map_err(query_error(OP))?;
            Ok(DB::rows_affected(&done) == 1)
        })
    }

    fn placement_history<'a>(&'a self, query: &'a HistoryQuery) -> StoreFuture<'a, HistoryPage> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::PlacementHistory;
            let (mut sql, limit) = history_query::<DB>(query);
            let rows: Vec<HistoryRow> = sql
                .build_query_as()
                .fetch_all(&self.pool)
                .await
                .map_err(query_error(OP))?;
            history_page(OP, rows, limit)
        })
    }

    fn put_work<'a>(&'a self, cluster: &'a str, objects: &'a [Value]) -> StoreFuture<'a, WorkWrite> {
        Box::pin(async move { write_work!(self, StoreOp::PutWork, cluster, objects, None) })
    }

    fn change_work<'a>(
        &'a self,
        cluster: &'a str,
        changed: &'a [Value],
        removed: &'a [String],
    ) -> StoreFuture<'a, WorkWrite> {
        Box::pin(async move { write_work!(self, StoreOp::PutWork, cluster, changed, Some(removed)) })
    }

    fn get_work<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, Option<WorkSet>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::GetWork;
            // One statement, so the set and its revision are read from one snapshot.
            let rows: Vec<(i64, i64, Option<Json<Value>>)> = sqlx::query_as(
                "SELECT w.revision, w.updated_at_ms, o.object FROM work AS w \
                 LEFT JOIN work_objects AS o ON o.cluster = w.cluster AND o.object IS NOT NULL \
                 WHERE w.cluster = $1 ORDER BY o.key",
            )
            .bind(cluster)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error(OP))?;
            let Some(&(revision, updated_at_ms, _)) = rows.first() else {
                return Ok(None);
            };
            let objects = rows.into_iter().filter_map(|(_, _, o)| o.map(|o| o.0)).collect();
            Ok(Some(WorkSet {
                cluster: cluster.to_owned(),
                revision: revision_out(OP, "revision", revision)?,
                objects: open_objects(self.sealer.as_deref(), OP, objects)?,
                updated_at: timestamp(OP, "updated_at", updated_at_ms)?,
            }))
        })
    }

    fn get_work_since<'a>(&'a self, cluster: &'a str, after: u64) -> StoreFuture<'a, Option<WorkDelta>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::GetWork;
            let since = revision_in(OP, "revision", after)?;
            let rows: Vec<DeltaRow> = sqlx::query_as(
                "SELECT w.revision, w.updated_at_ms, w.deltas_from, o.key, o.object FROM work AS w \
                 LEFT JOIN work_objects AS o ON o.cluster = w.cluster AND o.revision > $2 \
                 WHERE w.cluster = $1 ORDER BY o.key",
            )
            .bind(cluster)
            .bind(since)
            .fetch_all(&self.pool)
            .await
            .map_err(query_error(OP))?;
            let Some(&(revision, updated_at_ms, deltas_from, _, _)) = rows.first() else {
                return Ok(None);
            };
            // Removals before `deltas_from` are forgotten; a revision ahead of the store's is
            // another store's (or a rolled-back one's): neither has a delta.
            if since < deltas_from || since > revision {
                return Ok(None);
            }
            let mut changed = Vec::new();
            let mut removed = Vec::new();
            for (_, _, _, key, object) in rows {
                match (key, object) {
                    (Some(_), Some(object)) => changed.push(object.0),
                    (Some(key), None) => removed.push(key),
                    (None, _) => {}
                }
            }
            Ok(Some(WorkDelta {
                cluster: cluster.to_owned(),
                revision: revision_out(OP, "revision", revision)?,
                since: after,
                changed: open_objects(self.sealer.as_deref(), OP, changed)?,
                removed,
                updated_at: timestamp(OP, "updated_at", updated_at_ms)?,
            }))
        })
    }

    fn put_work_status<'a>(&'a self, status: &'a WorkStatus) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::PutWorkStatus;
            let mut tx = self.begin_write(OP).await?;
            sqlx::query(
                "INSERT INTO work_status (cluster, applied_revision, objects, reported_at_ms) \
                 VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (cluster) DO UPDATE SET applied_revision = excluded.applied_revision, \
                 objects = excluded.objects, reported_at_ms = excluded.reported_at_ms",
            )
            .bind(status.cluster.as_str())
            .bind(revision_in(OP, "applied revision", status.applied_revision)?)
            .bind(Json(&status.objects))
            .bind(millis(status.reported_at))
            .execute(&mut *tx)
            .await
            .map_err(cluster_write_error(OP, &status.cluster))?;
            announce!(self, &mut *tx, OP, StoreChange::Status(status.cluster.clone()));
            tx.commit().await.map_err(query_error(OP))?;
            Ok(())
        })
    }

    fn get_work_status<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, Option<WorkStatus>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::GetWorkStatus;
            let row: Option<WorkStatusRow> = sqlx::query_as(
                "SELECT cluster, applied_revision, objects, reported_at_ms FROM work_status WHERE cluster = $1",
            )
            .bind(cluster)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error(OP))?;
            row.map(|row| row.into_status(OP)).transpose()
        })
    }
}

/// Issues a credential for `cluster` inside a write transaction: [`Store::issue_credential`]
/// alone, [`Store::rotate_credential`] before revoking the others.
async fn insert_credential<DB>(
    tx: &mut Transaction<'static, DB>,
    op: StoreOp,
    cluster: &str,
    now: Timestamp,
) -> Result<IssuedCredential, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    String: for<'q> Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    (i64,): for<'r> FromRow<'r, DB::Row>,
    (String,): for<'r> FromRow<'r, DB::Row>,
{
    let token = new_token(op)?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO agent_credentials (cluster, token_sha256, created_at_ms) VALUES ($1, $2, $3) \
         RETURNING id",
    )
    .bind(cluster)
    .bind(token_hash(token.expose()))
    .bind(millis(now))
    .fetch_one(&mut **tx)
    .await
    .map_err(cluster_write_error(op, cluster))?;
    Ok(IssuedCredential {
        id,
        cluster: cluster.to_owned(),
        token,
        // `now` as it reads back from the database (millisecond precision).
        created_at: Timestamp::from_millisecond(millis(now)).unwrap_or(now),
    })
}

/// Builds the history query: the filters are plain comparisons, the page is a keyset on
/// `(at_ms, id)`, newest first. Fetches one row more than the page to learn whether another page
/// follows. Returns the builder and the page size.
fn history_query<DB>(query: &HistoryQuery) -> (sqlx::QueryBuilder<DB>, i64)
where
    DB: Database,
    String: for<'q> Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
{
    let limit = page_size(query.limit);
    let mut sql = sqlx::QueryBuilder::new(concat!(
        "SELECT ",
        history_columns!(),
        " FROM placement_history WHERE 1 = 1"
    ));
    let text_filters = [
        ("namespace", &query.namespace),
        ("name", &query.name),
        ("uid", &query.uid),
        ("trigger", &query.trigger),
    ];
    for (column, value) in text_filters {
        if let Some(value) = value {
            sql.push(format_args!(" AND {column} = "))
                .push_bind(value.clone());
        }
    }
    if let Some(since) = query.since {
        sql.push(" AND at_ms >= ").push_bind(millis(since));
    }
    if let Some(until) = query.until {
        sql.push(" AND at_ms < ").push_bind(millis(until));
    }
    if let Some(after) = query.after {
        sql.push(" AND (at_ms < ")
            .push_bind(after.at_ms)
            .push(" OR (at_ms = ")
            .push_bind(after.at_ms)
            .push(" AND id < ")
            .push_bind(after.id)
            .push("))");
    }
    sql.push(" ORDER BY at_ms DESC, id DESC LIMIT ")
        .push_bind(limit + 1);
    (sql, limit)
}

/// Turns `limit + 1` fetched rows into a page: the extra row only says that another page exists.
fn history_page(op: StoreOp, mut rows: Vec<HistoryRow>, limit: i64) -> Result<HistoryPage, StoreError> {
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = if more {
        rows.last().map(|row| HistoryCursor {
            at_ms: row.at_ms,
            id: row.id,
        })
    } else {
        None
    };
    let entries = rows
        .into_iter()
        .map(|row| {
            Ok(PlacementHistoryEntry {
                id: row.id,
                namespace: row.namespace,
                name: row.name,
                uid: row.uid,
                at: timestamp(op, "at", row.at_ms)?,
                generation: row.generation,
                trigger: row.trigger,
                reason: row.reason,
                decision: row.decision.0,
            })
        })
        .collect::<Result<_, StoreError>>()?;
    Ok(HistoryPage { entries, next })
}

// Rows as both backends return them, and their conversion to the store's types.

#[derive(sqlx::FromRow)]
struct ClusterRow {
    name: String,
    labels: Json<BTreeMap<String, String>>,
    region: Option<String>,
    zone: Option<String>,
    latitude: Option<f64>,
    longitude: Option<f64>,
    registered_at_ms: i64,
    agent_version: Option<String>,
    kubernetes_version: Option<String>,
    last_heartbeat_at_ms: Option<i64>,
    capacity: Option<Json<Value>>,
    cordoned: bool,
    burst_only: bool,
    accepted: bool,
    prune_confirmed_revision: Option<i64>,
}

impl ClusterRow {
    fn into_record(self, op: StoreOp) -> Result<ClusterRecord, StoreError> {
        Ok(ClusterRecord {
            name: self.name,
            labels: self.labels.0,
            region: self.region,
            zone: self.zone,
            coordinates: match (self.latitude, self.longitude) {
                (Some(latitude), Some(longitude)) => Some(Coordinates { latitude, longitude }),
                _ => None,
            },
            registered_at: timestamp(op, "registered_at", self.registered_at_ms)?,
            agent_version: self.agent_version,
            kubernetes_version: self.kubernetes_version,
            last_heartbeat_at: opt_timestamp(op, "last_heartbeat_at", self.last_heartbeat_at_ms)?,
            capacity: self.capacity.map(|c| std::sync::Arc::new(c.0)),
            cordoned: self.cordoned,
            burst_only: self.burst_only,
            accepted: self.accepted,
            prune_confirmed: self
                .prune_confirmed_revision
                .map(|r| revision_out(op, "prune_confirmed_revision", r))
                .transpose()?,
        })
    }
}

#[derive(sqlx::FromRow)]
struct CredentialRow {
    id: i64,
    cluster: String,
    created_at_ms: i64,
    revoked_at_ms: Option<i64>,
}

impl CredentialRow {
    fn into_info(self, op: StoreOp) -> Result<CredentialInfo, StoreError> {
        Ok(CredentialInfo {
            id: self.id,
            cluster: self.cluster,
            created_at: timestamp(op, "created_at", self.created_at_ms)?,
            revoked_at: opt_timestamp(op, "revoked_at", self.revoked_at_ms)?,
        })
    }
}

#[derive(sqlx::FromRow)]
struct JoinTokenRow {
    id: String,
    cluster: String,
    created_at_ms: i64,
    expires_at_ms: i64,
    used_at_ms: Option<i64>,
}

impl JoinTokenRow {
    fn into_info(self, op: StoreOp) -> Result<JoinTokenInfo, StoreError> {
        Ok(JoinTokenInfo {
            id: self.id,
            cluster: self.cluster,
            created_at: timestamp(op, "created_at", self.created_at_ms)?,
            expires_at: timestamp(op, "expires_at", self.expires_at_ms)?,
            used_at: opt_timestamp(op, "used_at", self.used_at_ms)?,
        })
    }
}

#[derive(sqlx::FromRow)]
struct HeartbeatRow {
    id: i64,
    cluster: String,
    received_at_ms: i64,
    payload: Json<Value>,
}

impl HeartbeatRow {
    fn into_record(self, op: StoreOp) -> Result<HeartbeatRecord, StoreError> {
        Ok(HeartbeatRecord {
            id: self.id,
            cluster: self.cluster,
            received_at: timestamp(op, "received_at", self.received_at_ms)?,
            payload: self.payload.0,
        })
    }
}

#[derive(sqlx::FromRow)]
struct PlacementRow {
    namespace: String,
    name: String,
    uid: String,
    generation: i64,
    decision: Json<Value>,
    updated_at_ms: i64,
}

impl PlacementRow {
    fn into_record(self, op: StoreOp) -> Result<PlacementRecord, StoreError> {
        Ok(PlacementRecord {
            namespace: self.namespace,
            name: self.name,
            uid: self.uid,
            generation: self.generation,
            decision: self.decision.0,
            updated_at: timestamp(op, "updated_at", self.updated_at_ms)?,
        })
    }
}

#[derive(sqlx::FromRow)]
struct HistoryRow {
    id: i64,
    namespace: String,
    name: String,
    uid: String,
    at_ms: i64,
    generation: i64,
    trigger: String,
    reason: String,
    decision: Json<Value>,
}

/// A row of [`Store::get_work_since`]'s query: the set's revision, when it changed, the
/// revision deltas start from, and one object (key and content; no content: removed) changed
/// since, if any.
type DeltaRow = (i64, i64, i64, Option<String>, Option<Json<Value>>);

#[derive(sqlx::FromRow)]
struct WorkStatusRow {
    cluster: String,
    applied_revision: i64,
    objects: Json<Value>,
    reported_at_ms: i64,
}

impl WorkStatusRow {
    fn into_status(self, op: StoreOp) -> Result<WorkStatus, StoreError> {
        Ok(WorkStatus {
            cluster: self.cluster,
            applied_revision: revision_out(op, "applied_revision", self.applied_revision)?,
            objects: self.objects.0,
            reported_at: timestamp(op, "reported_at", self.reported_at_ms)?,
        })
    }
}
