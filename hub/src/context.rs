//! State shared by the controllers, the agent endpoints and the loops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::runtime::events::{Recorder, Reporter};
use nave_api::wire::WorkloadRef;
use tokio::sync::{mpsc, watch};

use crate::health::FleetHealth;
use crate::index::Index;
use crate::metrics::HubMetrics;
use crate::prometheus::UsageCache;
use crate::store::Store;

/// Field manager and event reporter name of the hub.
pub const HUB_NAME: &str = nave_api::HUB_FIELD_MANAGER;

/// Timings of the hub.
#[derive(Clone, Debug)]
pub struct Timings {
    /// Heartbeat interval asked of agents.
    pub heartbeat_interval: Duration,
    /// A cluster without a heartbeat for this long is not Ready: no new replicas, and the health
    /// loop fails it over (see [`crate::health`]).
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

/// Per-cluster notification of new work revisions, for the agents' long-polls.
///
/// A `watch` channel per cluster rather than one `Notify`: a poller that subscribes and then
/// reads the store cannot miss a revision put between the two, since `changed()` sees every
/// send after the subscription.
#[derive(Debug, Default)]
pub struct WorkSignals {
    senders: Mutex<HashMap<String, watch::Sender<u64>>>,
    closed: std::sync::atomic::AtomicBool,
}

impl WorkSignals {
    /// A receiver that wakes when `cluster`'s work revision changes.
    pub fn subscribe(&self, cluster: &str) -> watch::Receiver<u64> {
        let mut senders = self.senders.lock().unwrap_or_else(|e| e.into_inner());
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            // Shutting down: a receiver whose sender is gone ends its poll at once.
            return watch::channel(0).1;
        }
        senders
            .entry(cluster.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Ends every long-poll, now and later (they answer 204 and the agents poll again, elsewhere
    /// or after a restart): the hub is shutting down and must not wait out the polls.
    pub fn close(&self) {
        let mut senders = self.senders.lock().unwrap_or_else(|e| e.into_inner());
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        senders.clear();
    }

    /// Wakes `cluster`'s long-pollers: its work is now at `revision`.
    pub fn notify(&self, cluster: &str, revision: u64) {
        let senders = self.senders.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = senders.get(cluster) {
            sender.send_replace(revision);
        }
    }
}

/// Asks the controllers to reconcile MultiClusterDeployments: every one (a cluster joined, came
/// back or was edited), or named ones (an agent reported their objects' status, or capacity
/// changed and they are not settled; see [`crate::index::Index::settle`]).
///
/// Requests for every object go through a channel of capacity one, so a burst of them while a
/// pass is pending coalesces into that pass; the controller's queue merges repeated names.
#[derive(Clone, Debug)]
pub struct ReconcileTrigger {
    all: mpsc::Sender<()>,
    some: mpsc::UnboundedSender<WorkloadRef>,
}

/// The receiving ends of a [`ReconcileTrigger`], read by the controller.
#[derive(Debug)]
pub struct Triggered {
    /// A pass over every object.
    pub all: mpsc::Receiver<()>,
    /// One object.
    pub some: mpsc::UnboundedReceiver<WorkloadRef>,
}

impl ReconcileTrigger {
    /// A trigger and what the controller reads.
    pub fn new() -> (ReconcileTrigger, Triggered) {
        let (all, all_rx) = mpsc::channel(1);
        let (some, some_rx) = mpsc::unbounded_channel();
        (
            ReconcileTrigger { all, some },
            Triggered {
                all: all_rx,
                some: some_rx,
            },
        )
    }

    /// Requests a pass over every object; a no-op when one is already pending.
    pub fn trigger(&self) {
        let _ = self.all.try_send(());
    }

    /// Requests a reconcile of each of `workloads`.
    pub fn workloads(&self, workloads: impl IntoIterator<Item = WorkloadRef>) {
        for workload in workloads {
            let _ = self.some.send(workload);
        }
    }
}

/// What every reconcile and handler needs.
#[derive(Clone)]
pub struct Context {
    /// Client of the management cluster (CRDs, ConfigMaps/Secrets to copy, events).
    pub client: kube::Client,
    /// Operational state: clusters, heartbeats, placements, work, status.
    pub store: Arc<dyn Store>,
    /// Publishes Kubernetes Events on the objects the controllers reconcile.
    pub recorder: Recorder,
    /// Wakes agents' long-polls when a cluster's work changes.
    pub signals: Arc<WorkSignals>,
    /// What reconciles read on every pass, kept in memory: agents' reports, every workload's
    /// booked replicas, the clusters' work sets.
    pub index: Arc<Index>,
    /// Timings (heartbeat grace, resync, ...).
    pub timings: Timings,
    /// Failed reconciles in a row per object (`namespace/name`), for the retry backoff.
    pub backoff: Arc<Mutex<HashMap<String, u32>>>,
    /// The fleet's health as the health loop last saw it: which clusters are failed over.
    pub health: Arc<FleetHealth>,
    /// Prometheus metrics, served on `/metrics`.
    pub metrics: Arc<HubMetrics>,
    /// Per-cluster usage measured by Prometheus; disabled (always empty) without
    /// `--prometheus-url`.
    pub usage: Arc<UsageCache>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("store", &self.store)
            .field("timings", &self.timings)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context over a client and a store.
    pub fn new(
        client: kube::Client,
        store: Arc<dyn Store>,
        signals: Arc<WorkSignals>,
        index: Arc<Index>,
        timings: Timings,
    ) -> Self {
        let reporter = Reporter {
            controller: HUB_NAME.to_owned(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            store,
            signals,
            index,
            timings,
            backoff: Arc::default(),
            health: Arc::default(),
            metrics: Arc::default(),
            usage: Arc::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn closing_ends_every_long_poll_now_and_later() {
        let signals = WorkSignals::default();
        let mut waiting = signals.subscribe("eu-1");
        signals.close();
        assert!(waiting.changed().await.is_err(), "a poll waiting at close ends");
        let mut late = signals.subscribe("eu-1");
        assert!(
            late.changed().await.is_err(),
            "a poll that starts after close ends at once"
        );
    }
}
