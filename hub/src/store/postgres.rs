//! The Postgres store, for production and for several hub replicas sharing one database.
//!
//! Transactions run at READ COMMITTED. Where a write depends on what it read (placements, work
//! revisions, credential rotation) the row is locked first (`FOR UPDATE`, or the row lock an
//! `ON CONFLICT DO UPDATE` takes), so concurrent writers queue on it instead of both acting on
//! the same old value.

use std::str::FromStr;
use std::time::Duration;

use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgQueryResult};

use super::contract::{Backend, StoreError};
use super::sql::{Dialect, SqlStore, connect_error, migrate};

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
}

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
        let pool = pool
            .connect_with(options)
            .await
            .map_err(connect_error::<Postgres>)?;
        migrate(&MIGRATOR, pool).await
    }
}
