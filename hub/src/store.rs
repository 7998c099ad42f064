//! The hub's store: operational state and history, in SQLite or Postgres.
//!
//! The CRDs are the source of desired state; the store holds what the hub learned and decided:
//!
//! ```text
//!   agent register ──► clusters, agent_credentials (hashed tokens)
//!   agent heartbeat ─► heartbeats (history) ──► clusters.capacity / last_heartbeat_at
//!   scheduler ───────► placements (current) + placement_history (every change, with a reason)
//!   scheduler ───────► work (per cluster: full object set at a revision) ──► agent pulls it
//!   agent status ────► work_status (applied revision, per-object status)
//! ```
//!
//! [`connect`] picks the backend from the URL (`sqlite://PATH` or `postgres://...`), applies the
//! embedded migrations (`migrations/sqlite`, `migrations/postgres`) and returns the store as an
//! `Arc<dyn Store>`. Both backends run the same SQL (runtime queries, no `sqlx::Any`), written
//! once in `store/sql.rs` over sqlx's `Database` trait; `sqlite.rs` and `postgres.rs` keep only
//! what differs: opening the pool, the migrations, and how a write keeps concurrent writers apart.
//!
//! # Why boxed futures
//! The hub holds the store as `Arc<dyn Store>` in its controller context and HTTP state, so that
//! neither has to be generic over the backend. Methods returning `impl Future` would make the trait
//! unusable as `dyn`; returning a boxed future ([`StoreFuture`]) keeps it object-safe without
//! `async_trait`, and call sites stay `store.get_work(name).await?`. The allocation is noise next to
//! a database round trip.

mod contract;
mod credentials;
pub mod postgres;
pub mod retention;
pub mod sealed;
mod sql;
pub mod sqlite;
pub mod types;

use std::sync::Arc;

pub(crate) use self::contract::hex;
pub use self::contract::{
    Backend, ChangeFeed, JOIN_TOKEN_PREFIX, Store, StoreError, StoreErrorKind, StoreFuture, StoreOp,
    TOMBSTONE_REVISIONS, same_but_prose,
};
pub use self::postgres::PgStore;
pub use self::sql::{Dialect, SqlStore};
pub use self::sqlite::SqliteStore;
pub use self::types::*;

/// Opens the store named by `url` and brings its schema up to date.
///
/// - `sqlite://PATH` (or any URL sqlx accepts for SQLite, such as `sqlite::memory:`): the file is
///   created if missing; WAL journal, a busy timeout, foreign keys on.
/// - `postgres://...` or `postgresql://...`.
///
/// Running it again on an up-to-date database changes nothing.
pub async fn connect(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    connect_sealed(url, None).await
}

/// As [`connect`], sealing Secret payloads in work sets with `sealer` (see [`sealed`]).
pub async fn connect_sealed(
    url: &str,
    sealer: Option<Arc<sealed::Sealer>>,
) -> Result<Arc<dyn Store>, StoreError> {
    let scheme = url.split_once(':').map_or("", |(scheme, _)| scheme);
    match scheme {
        "sqlite" => Ok(Arc::new(SqliteStore::connect(url).await?.with_sealer(sealer))),
        "postgres" | "postgresql" => Ok(Arc::new(PgStore::connect(url).await?.with_sealer(sealer))),
        _ => Err(StoreError::UnsupportedUrl {
            scheme: scheme.to_owned(),
        }),
    }
}
