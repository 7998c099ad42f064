//! The Postgres store, for production and for several hub replicas sharing one database.
//!
//! Transactions run at READ COMMITTED. Where a write depends on what it read (placements, work
//! revisions, credential rotation) the row is locked first (`FOR UPDATE`, or the row lock an
//! `ON CONFLICT DO UPDATE` takes), so concurrent writers queue on it instead of both acting on
//! the same old value.

use std::str::FromStr;
use std::time::Duration;

use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions, PgQueryResult};
use tracing::{debug, warn};

use super::contract::{Backend, ChangeFeed, StoreError, StoreOp, query_error};
use super::sql::{Dialect, Notice, SqlStore, connect_error, migrate};
use super::types::{FeedEvent, StoreChange};

/// The embedded migrations of `migrations/postgres`.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// Connections per hub replica; the server's `max_connections` is shared by all replicas.
const MAX_CONNECTIONS: u32 = 10;

/// How long a query waits for a free connection before failing as unavailable.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The store in a Postgres database.
pub type PgStore = SqlStore<Postgres>;

impl Dialect for Postgres {
    const BACKEND: Backend = Backend::Postgres;
    const BEGIN_WRITE: &'static str = "BEGIN";
    const ROW_LOCKS: bool = true;

    fn rows_affected(done: &PgQueryResult) -> u64 {
        done.rows_affected()
    }

    const NOTIFY: Option<&'static str> = Some("SELECT pg_notify($1, $2)");
    // Checked again by the tables' trigger (migration 0004), which also stops a writer that
    // knows nothing of terms (a hub of an older version during an upgrade).
    const SET_TERM: Option<&'static str> = Some("SELECT set_config('nave.term', $1, true)");
    const CLAIM_LOCK_TIMEOUT: Option<&'static str> = Some("SET LOCAL lock_timeout = '2s'");

    async fn listen(
        pool: &sqlx::Pool<Postgres>,
        channel: &str,
        origin: &str,
    ) -> Result<Option<ChangeFeed>, StoreError> {
        let mut listener = PgListener::connect_with(pool)
            .await
            .map_err(query_error(StoreOp::Listen))?;
        listener
            .listen(channel)
            .await
            .map_err(query_error(StoreOp::Listen))?;
        let origin = origin.to_owned();
        let channel = channel.to_owned();
        let feed = futures::stream::unfold(
            (listener, origin, channel),
            |(mut listener, origin, channel)| async move {
                loop {
                    match listener.try_recv().await {
                        Ok(Some(notification)) => {
                            match serde_json::from_str::<Notice>(notification.payload()) {
                                // Its own pings come back: the connection hears.
                                Ok(notice) if notice.c == StoreChange::Ping && notice.o == origin => {
                                    return Some((FeedEvent::Change(notice.c), (listener, origin, channel)));
                                }
                                Ok(notice) if notice.o == origin || notice.c == StoreChange::Ping => continue,
                                Ok(notice) => {
                                    return Some((FeedEvent::Change(notice.c), (listener, origin, channel)));
                                }
                                // A change this version does not know (a newer replica during a rolling
                                // upgrade): nothing it keeps depends on it.
                                Err(error) => {
                                    debug!(error = %error, "an announcement this version does not know; ignored");
                                    continue;
                                }
                            }
                        }
                        // The connection was lost and made again (listening again) on this call:
                        // whatever was announced meanwhile is missed.
                        Ok(None) => return Some((FeedEvent::Resync, (listener, origin, channel))),
                        Err(error) => {
                            // Reconnecting failed: listen again until it works, and only then say
                            // that changes may have been missed, so the reading that follows
                            // misses nothing announced after it.
                            warn!(error = %error, "listening to the store failed; retrying");
                            loop {
                                tokio::time::sleep(LISTEN_RETRY).await;
                                match listener.listen(&channel).await {
                                    Ok(()) => break,
                                    Err(error) => {
                                        warn!(error = %error, "listening to the store failed; retrying")
                                    }
                                }
                            }
                            return Some((FeedEvent::Resync, (listener, origin, channel)));
                        }
                    }
                }
            },
        );
        Ok(Some(Box::pin(feed)))
    }
}

/// How long the change feed waits before listening again after a failure.
const LISTEN_RETRY: Duration = Duration::from_secs(1);

impl SqlStore<Postgres> {
    /// Connects to the database named by a `postgres://` URL and applies the migrations.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url).map_err(connect_error::<Postgres>)?;
        Self::connect_with(Self::pool_options(), options).await
    }

    /// The pool settings [`PgStore::connect`] uses, to start from when adding more (such as an
    /// `after_connect` hook).
    pub fn pool_options() -> PgPoolOptions {
        PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
    }

    /// Connects with explicit pool and connection options and applies the migrations. The
    /// migrations and every query use the connection's `search_path`, so a store can live in a
    /// schema of its own.
    pub async fn connect_with(pool: PgPoolOptions, options: PgConnectOptions) -> Result<Self, StoreError> {
        // A hub that dies or stops in the middle of a transaction must not hold its locks for
        // long (the term's row above all, which a new leader's claim waits for): the server
        // ends such a session after 10 s idle in a transaction, and probes a silent client's
        // connection after 10 s.
        let options = options.options([
            ("idle_in_transaction_session_timeout", "10s"),
            ("tcp_keepalives_idle", "10"),
            ("tcp_keepalives_interval", "5"),
            ("tcp_keepalives_count", "3"),
        ]);
        let pool = pool
            .connect_with(options)
            .await
            .map_err(connect_error::<Postgres>)?;
        let store = migrate(&MIGRATOR, pool).await?;
        // One channel per store: stores in other schemas of the same database (Postgres
        // channels are per database) do not hear each other.
        let identity: String = sqlx::query_scalar("SELECT id FROM store_identity WHERE singleton = 1")
            .fetch_one(store.pool())
            .await
            .map_err(query_error(StoreOp::Identity))?;
        Ok(store.announcing_on(format!("nave_{identity}")))
    }
}
