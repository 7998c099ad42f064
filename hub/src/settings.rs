//! The hub's name towards the management cluster, its allocator's settings, and its timings.

use std::time::Duration;

/// Field manager and event reporter name of the hub.
pub const HUB_NAME: &str = nave_api::HUB_FIELD_MANAGER;

/// The allocator's settings for the hub, as environment (mimalloc reads it when the process
/// starts); the Helm chart and the test fleet set them. Freed memory stays with the process for a
/// second before it goes back to the system, instead of 10 ms: every placement over a fleet of
/// thousands of clusters builds tables of about 2 MiB and drops them, and with the default the
/// next one found that memory given back and faulted it in again, page by page (at 5,000
/// clusters 15-20 % of the hub's CPU per MCD; BENCHMARKS.md, "Walks in name order, and memory
/// kept a second").
pub const ALLOCATOR_ENV: [(&str, &str); 1] = [("MIMALLOC_PURGE_DELAY", "1000")];

/// Timings of the hub.
#[derive(Clone, Debug)]
pub struct Timings {
    /// Heartbeat interval asked of agents.
    pub heartbeat_interval: Duration,
    /// A cluster without a heartbeat for this long is not Ready: no new replicas, and the health
    /// loop fails it over (see [`crate::cluster_health`]).
    pub heartbeat_grace: Duration,
    /// How long a returned cluster must be Ready before `failback: Immediate` moves replicas back.
    pub failback_settle: Duration,
    /// Shortest interval between two WorkloadCluster status writes of one cluster, unless its
    /// capacity summary or readiness changed: every heartbeat is stored, but writing each to the
    /// API server would load it for nothing.
    pub cluster_status_interval: Duration,
    /// Resync period of the controllers.
    pub resync: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            heartbeat_interval: Duration::from_secs(nave_api::wire::DEFAULT_HEARTBEAT_INTERVAL_SECONDS),
            heartbeat_grace: Duration::from_secs(40),
            failback_settle: Duration::from_secs(300),
            cluster_status_interval: Duration::from_secs(30),
            resync: Duration::from_secs(300),
        }
    }
}
