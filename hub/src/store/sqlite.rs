//! The SQLite store: one file, nothing to install.
//!
//! SQLite lets one writer in at a time. Every write transaction starts with `BEGIN IMMEDIATE`,
//! taking the write lock up front: a deferred transaction that reads first and writes later can
//! fail with `SQLITE_BUSY` when another writer got in between, without waiting for the busy
//! timeout. That lock covers the whole database, so no query needs row locks. WAL lets readers go
//! on while a write is in progress.

use std::str::FromStr;
use std::time::Duration;

use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteQueryResult};

use super::contract::{Backend, ChangeFeed, StoreError};
use super::sql::{Dialect, SqlStore, connect_error, migrate};

/// The embedded migrations of `migrations/sqlite`.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// How long a statement waits for another connection's write lock before failing as busy.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections in the pool: several readers can work beside the one writer in WAL mode.
const MAX_CONNECTIONS: u32 = 8;

/// The store in a SQLite file.
pub type SqliteStore = SqlStore<Sqlite>;

impl Dialect for Sqlite {
    const BACKEND: Backend = Backend::Sqlite;
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";
    const ROW_LOCKS: bool = false;

    fn rows_affected(done: &SqliteQueryResult) -> u64 {
        done.rows_affected()
    }

    const NOTIFY: Option<&'static str> = None;
    // One writer at a time (BEGIN IMMEDIATE), one hub per file: the term read in the
    // transaction is the check.
    const SET_TERM: Option<&'static str> = None;
    const CLAIM_LOCK_TIMEOUT: Option<&'static str> = None;

    async fn listen(
        _pool: &sqlx::Pool<Sqlite>,
        _channel: &str,
        _origin: &str,
    ) -> Result<Option<ChangeFeed>, StoreError> {
        Ok(None)
    }
}

impl SqlStore<Sqlite> {
    /// Opens (creating if missing) the database named by a SQLite URL such as `sqlite://nave.db`,
    /// with WAL, a busy timeout and foreign keys on, and applies the migrations.
    ///
    /// `sqlite::memory:` gives a private in-memory database that lives as long as the store.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        // `synchronous` stays at sqlx's default, FULL: with NORMAL a power cut can lose the last
        // commits, and a work revision an agent has already seen could then be handed out again
        // for a different object set.
        let options = SqliteConnectOptions::from_str(url)
            .map_err(connect_error::<Sqlite>)?
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
        .map_err(connect_error::<Sqlite>)?;
        migrate(&MIGRATOR, pool).await
    }
}
