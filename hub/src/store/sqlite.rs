//! The SQLite store: one file, nothing to install.
//!
//! SQLite lets one writer in at a time. Every write transaction starts with `BEGIN IMMEDIATE`,
//! taking the write lock up front: a deferred transaction that reads first and writes later can
//! fail with `SQLITE_BUSY` when another writer got in between, without waiting for the busy
//! timeout. WAL lets readers go on while a write is in progress.

use std::str::FromStr;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::types::Json;
use sqlx::{Sqlite, Transaction};

use super::*;

/// The embedded migrations of `migrations/sqlite`.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// How long a statement waits for another connection's write lock before failing as busy.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections in the pool: several readers can work beside the one writer in WAL mode.
const MAX_CONNECTIONS: u32 = 8;

/// The store in a SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if missing) the database named by a SQLite URL such as `sqlite://nave.db`,
    /// with WAL, a busy timeout and foreign keys on, and applies the migrations.
    ///
    /// `sqlite::memory:` gives a private in-memory database that lives as long as the store.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        // `synchronous` stays at sqlx's default, FULL: with NORMAL a power cut can lose the last
        // commits, and a work revision an agent has already seen could then be handed out again
        // for a different object set.
        let options = SqliteConnectOptions::from_str(url)
            .map_err(connect_error)?
            .create_if_missing(true)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let pool = if in_memory {
            // An in-memory database lives as long as a connection to it: keep exactly one.
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
                .connect_with(options)
                .await
        } else {
            SqlitePoolOptions::new()
                .max_connections(MAX_CONNECTIONS)
                .connect_with(options.journal_mode(SqliteJournalMode::Wal))
                .await
        }
        .map_err(connect_error)?;
        MIGRATOR.run(&pool).await.map_err(|source| StoreError::Migrate {
            backend: Backend::Sqlite,
            source,
        })?;
        Ok(SqliteStore { pool })
    }

    /// The connection pool, for callers that need SQL of their own (tests, maintenance).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    async fn begin_write(&self, op: StoreOp) -> Result<Transaction<'static, Sqlite>, StoreError> {
        self.pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(query_error(op))
    }

    async fn insert_credential(
        tx: &mut Transaction<'static, Sqlite>,
        op: StoreOp,
        cluster: &str,
        now: Timestamp,
    ) -> Result<IssuedCredential, StoreError> {
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
            created_at: truncate(now),
        })
    }
}

fn connect_error(source: sqlx::Error) -> StoreError {
    StoreError::Connect {
        backend: Backend::Sqlite,
        source,
    }
}

/// `now` as it reads back from the database (millisecond precision).
fn truncate(now: Timestamp) -> Timestamp {
    Timestamp::from_millisecond(millis(now)).unwrap_or(now)
}

impl Store for SqliteStore {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    fn close(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            self.pool.close().await;
            Ok(())
        })
    }

    fn upsert_cluster<'a>(&'a self, cluster: &'a ClusterUpsert) -> StoreFuture<'a, ClusterRecord> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::UpsertCluster;
            let row: ClusterRow = sqlx::query_as(concat!(
                "INSERT INTO clusters (name, labels, region, zone, latitude, longitude, registered_at_ms, \
                 agent_version, kubernetes_version, cordoned, burst_only) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (name) DO UPDATE SET labels = excluded.labels, region = excluded.region, \
                 zone = excluded.zone, latitude = excluded.latitude, longitude = excluded.longitude, \
                 agent_version = COALESCE(excluded.agent_version, clusters.agent_version), \
                 kubernetes_version = COALESCE(excluded.kubernetes_version, clusters.kubernetes_version), \
                 cordoned = excluded.cordoned, burst_only = excluded.burst_only \
                 RETURNING ",
                cluster_columns!()
            ))
            .bind(&cluster.name)
            .bind(Json(&cluster.labels))
            .bind(&cluster.region)
            .bind(&cluster.zone)
            .bind(cluster.coordinates.map(|c| c.latitude))
            .bind(cluster.coordinates.map(|c| c.longitude))
            .bind(millis(Timestamp::now()))
            .bind(&cluster.agent_version)
            .bind(&cluster.kubernetes_version)
            .bind(cluster.cordoned)
            .bind(cluster.burst_only)
            .fetch_one(&self.pool)
            .await
            .map_err(query_error(OP))?;
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
            let issued = Self::insert_credential(&mut tx, OP, cluster, Timestamp::now()).await?;
            tx.commit().await.map_err(query_error(OP))?;
            Ok(issued)
        })
    }

    fn rotate_credential<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, IssuedCredential> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::RotateCredential;
            let now = Timestamp::now();
            let mut tx = self.begin_write(OP).await?;
            let issued = Self::insert_credential(&mut tx, OP, cluster, now).await?;
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
            tx.commit().await.map_err(query_error(OP))?;
            Ok(issued)
        })
    }

    fn revoke_credential(&self, id: i64) -> StoreFuture<'_, bool> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::RevokeCredential;
            let done = sqlx::query(
                "UPDATE agent_credentials SET revoked_at_ms = $1 WHERE id = $2 AND revoked_at_ms IS NULL",
            )
            .bind(millis(Timestamp::now()))
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(query_error(OP))?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn authenticate_agent<'a>(&'a self, token: &'a str) -> StoreFuture<'a, Option<AgentIdentity>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::AuthenticateAgent;
            let row: Option<(i64, String)> = sqlx::query_as(
                "SELECT id, cluster FROM agent_credentials WHERE token_sha256 = $1 AND revoked_at_ms IS NULL",
            )
            .bind(token_hash(token))
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error(OP))?;
            Ok(row.map(|(credential_id, cluster)| AgentIdentity {
                credential_id,
                cluster,
            }))
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

    fn record_heartbeat<'a>(&'a self, heartbeat: &'a NewHeartbeat) -> StoreFuture<'a, i64> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::RecordHeartbeat;
            let received_at = millis(heartbeat.received_at);
            let mut tx = self.begin_write(OP).await?;
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO heartbeats (cluster, received_at_ms, payload) VALUES ($1, $2, $3) RETURNING id",
            )
            .bind(&heartbeat.cluster)
            .bind(received_at)
            .bind(Json(&heartbeat.payload))
            .fetch_one(&mut *tx)
            .await
            .map_err(cluster_write_error(OP, &heartbeat.cluster))?;
            // A heartbeat that arrives after a newer one (a retried request) goes into the history
            // but does not roll the cluster's latest state back.
            sqlx::query(
                "UPDATE clusters SET last_heartbeat_at_ms = $2, capacity = COALESCE($3, capacity), \
                 agent_version = COALESCE($4, agent_version), \
                 kubernetes_version = COALESCE($5, kubernetes_version) \
                 WHERE name = $1 AND (last_heartbeat_at_ms IS NULL OR last_heartbeat_at_ms <= $2)",
            )
            .bind(&heartbeat.cluster)
            .bind(received_at)
            .bind(heartbeat.capacity.as_ref().map(Json))
            .bind(&heartbeat.agent_version)
            .bind(&heartbeat.kubernetes_version)
            .execute(&mut *tx)
            .await
            .map_err(query_error(OP))?;
            tx.commit().await.map_err(query_error(OP))?;
            Ok(id)
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
            Ok(done.rows_affected())
        })
    }

    fn put_placement<'a>(&'a self, placement: &'a PlacementUpdate) -> StoreFuture<'a, PlacementWrite> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::PutPlacement;
            let hash = decision_hash(&placement.decision);
            let at = millis(placement.at);
            let mut tx = self.begin_write(OP).await?;
            let current: Option<(String, String)> = sqlx::query_as(
                "SELECT uid, decision_sha256 FROM placements WHERE namespace = $1 AND name = $2",
            )
            .bind(&placement.namespace)
            .bind(&placement.name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_error(OP))?;
            let changed = current.is_none_or(|(uid, stored)| uid != placement.uid || stored != hash);
            sqlx::query(
                "INSERT INTO placements (namespace, name, uid, generation, decision, decision_sha256, \
                 updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (namespace, name) DO UPDATE SET uid = excluded.uid, \
                 generation = excluded.generation, decision = excluded.decision, \
                 decision_sha256 = excluded.decision_sha256, updated_at_ms = excluded.updated_at_ms",
            )
            .bind(&placement.namespace)
            .bind(&placement.name)
            .bind(&placement.uid)
            .bind(placement.generation)
            .bind(Json(&placement.decision))
            .bind(&hash)
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(query_error(OP))?;
            let history_id = if changed {
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO placement_history (namespace, name, uid, at_ms, generation, trigger, \
                     reason, decision) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
                )
                .bind(&placement.namespace)
                .bind(&placement.name)
                .bind(&placement.uid)
                .bind(at)
                .bind(placement.generation)
                .bind(&placement.trigger)
                .bind(&placement.reason)
                .bind(Json(&placement.decision))
                .fetch_one(&mut *tx)
                .await
                .map_err(query_error(OP))?;
                Some(id)
            } else {
                None
            };
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
            let done = sqlx::query("DELETE FROM placements WHERE namespace = $1 AND name = $2")
                .bind(namespace)
                .bind(name)
                .execute(&self.pool)
                .await
                .map_err(query_error(OP))?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn placement_history<'a>(&'a self, query: &'a HistoryQuery) -> StoreFuture<'a, HistoryPage> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::PlacementHistory;
            let (mut sql, limit) = history_query::<Sqlite>(query);
            let rows: Vec<HistoryRow> = sql
                .build_query_as()
                .fetch_all(&self.pool)
                .await
                .map_err(query_error(OP))?;
            history_page(OP, rows, limit)
        })
    }

    fn put_work<'a>(&'a self, cluster: &'a str, objects: &'a [Value]) -> StoreFuture<'a, WorkWrite> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::PutWork;
            let mut tx = self.begin_write(OP).await?;
            // The conditional upsert bumps the revision only when the content hash differs; it
            // returns no row when it changed nothing.
            let bumped: Option<i64> = sqlx::query_scalar(
                "INSERT INTO work (cluster, revision, content_sha256, objects, updated_at_ms) \
                 VALUES ($1, 1, $2, $3, $4) \
                 ON CONFLICT (cluster) DO UPDATE SET revision = work.revision + 1, \
                 content_sha256 = excluded.content_sha256, objects = excluded.objects, \
                 updated_at_ms = excluded.updated_at_ms \
                 WHERE work.content_sha256 <> excluded.content_sha256 \
                 RETURNING revision",
            )
            .bind(cluster)
            .bind(object_set_hash(objects))
            .bind(Json(objects))
            .bind(millis(Timestamp::now()))
            .fetch_optional(&mut *tx)
            .await
            .map_err(cluster_write_error(OP, cluster))?;
            let (revision, changed) = match bumped {
                Some(revision) => (revision, true),
                None => {
                    let revision: i64 = sqlx::query_scalar("SELECT revision FROM work WHERE cluster = $1")
                        .bind(cluster)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(query_error(OP))?;
                    (revision, false)
                }
            };
            tx.commit().await.map_err(query_error(OP))?;
            Ok(WorkWrite {
                revision: revision_out(OP, "revision", revision)?,
                changed,
            })
        })
    }

    fn get_work<'a>(&'a self, cluster: &'a str) -> StoreFuture<'a, Option<WorkSet>> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::GetWork;
            let row: Option<WorkRow> = sqlx::query_as(
                "SELECT cluster, revision, objects, updated_at_ms FROM work WHERE cluster = $1",
            )
            .bind(cluster)
            .fetch_optional(&self.pool)
            .await
            .map_err(query_error(OP))?;
            row.map(|row| row.into_set(OP)).transpose()
        })
    }

    fn put_work_status<'a>(&'a self, status: &'a WorkStatus) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            const OP: StoreOp = StoreOp::PutWorkStatus;
            sqlx::query(
                "INSERT INTO work_status (cluster, applied_revision, objects, reported_at_ms) \
                 VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (cluster) DO UPDATE SET applied_revision = excluded.applied_revision, \
                 objects = excluded.objects, reported_at_ms = excluded.reported_at_ms",
            )
            .bind(&status.cluster)
            .bind(revision_in(OP, "applied revision", status.applied_revision)?)
            .bind(Json(&status.objects))
            .bind(millis(status.reported_at))
            .execute(&self.pool)
            .await
            .map_err(cluster_write_error(OP, &status.cluster))?;
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
