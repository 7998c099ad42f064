//! The hub's in-memory index of the operational state that every reconcile reads, written
//! through to the store.
//!
//! ```text
//!  registration ──► put_cluster ─► cluster records ─┐
//!  heartbeat    ──► heartbeat ───► cluster records ─┤
//!  agent status ──► put_report ──► store + reports ─┤
//!  heartbeat    ──► put_pending ─► Pending pods ────┤
//!  heartbeat    ──► network ─────► round trips ─────┤
//!  reconcile    ──► book ────────► bookings ────────┼─► ledger / status of one workload
//!  reconcile    ──► WorkSets::put ► store + sets ───┘   (no store reads on the hot path)
//!  start-up     ──► load (clusters, their reports, placements) from the store
//! ```
//!
//! The store stays the record: a restarted hub loads the index from it. Without the index a
//! reconcile read and parsed every placement (for the ledger), every agent's report and every
//! cluster's work set, so a pass over N workloads cost N² reads; with 1,000 workloads that was
//! minutes of CPU and a gigabyte of transient JSON. One hub writes the store, so what the index
//! holds is what the store holds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use nave_api::wire::{ObjectStatus, PendingPod, StatusReport, WorkloadRef};
use nave_policies::{Demand, Ledger};
use serde_json::Value;

use crate::error::Error;
use crate::network::Network;
use crate::placement::reports::counted_replicas;
use crate::placement::stored::StoredDecision;
use crate::placement::{Pending, Reports};
use crate::store::{ClusterRecord, PlacementRecord, Store, WorkStatus, WorkWrite};

/// The replicas a workload's placement assigns, and what each needs: the ledger's input.
#[derive(Clone, Debug, PartialEq)]
pub struct Booking {
    /// Per-replica demand.
    pub demand: Demand,
    /// Replicas per cluster, as dispatched (a move's old replicas included until it completes).
    pub replicas: BTreeMap<String, u32>,
}

impl Booking {
    /// The booking of a stored decision.
    pub fn of_stored(decision: &StoredDecision) -> Booking {
        Booking {
            demand: decision.demand(),
            replicas: decision.dispatched(),
        }
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct Index {
    /// The registered clusters' records, as the store holds them.
    clusters: RwLock<BTreeMap<String, Arc<ClusterRecord>>>,
    reports: RwLock<Reports>,
    /// Each cluster's Pending pods, from its latest heartbeat.
    pending: RwLock<Pending>,
    bookings: RwLock<BTreeMap<WorkloadRef, Booking>>,
    /// Workloads whose placement may change when capacity changes (see [`Index::settle`]).
    unsettled: Mutex<BTreeSet<WorkloadRef>>,
    /// See [`Index::planning`].
    planning: Mutex<()>,
    /// Measured round trips, probe URLs and network coordinates.
    network: Network,
    /// Each cluster's work set; the lock serializes their read-modify-write, since several
    /// workloads share a set and two reconciles writing at once would lose one's objects.
    work: tokio::sync::Mutex<WorkSets>,
}

impl Index {
    /// An index loaded from `store`: every registered cluster's latest report, its latest
    /// latency samples, and every placement.
    pub async fn load(store: Arc<dyn Store>) -> Result<Index, Error> {
        let mut reports = Reports::new();
        let network = Network::default();
        let records = store
            .list_clusters()
            .await
            .map_err(Error::store("listing clusters"))?;
        let clusters = records
            .iter()
            .map(|r| (r.name.clone(), Arc::new(r.clone())))
            .collect();
        for cluster in records {
            let newest = store
                .list_heartbeats(&cluster.name, 1)
                .await
                .map_err(Error::store("reading heartbeats"))?;
            if let Some(beat) = newest.first() {
                network.load(&cluster.name, &beat.payload);
            }
            let status = store
                .get_work_status(&cluster.name)
                .await
                .map_err(Error::store("reading work status"))?;
            if let Some(report) = status.and_then(|s| parse_report(&s)) {
                reports.insert(cluster.name, Arc::new(report));
            }
        }
        let bookings = store
            .list_placements(None)
            .await
            .map_err(Error::store("listing placements"))?
            .iter()
            .map(|p: &PlacementRecord| {
                (
                    WorkloadRef::new(&p.namespace, &p.name),
                    Booking::of_stored(&StoredDecision::from_json(&p.decision)),
                )
            })
            .collect();
        Ok(Index {
            clusters: RwLock::new(clusters),
            reports: RwLock::new(reports),
            pending: RwLock::default(),
            bookings: RwLock::new(bookings),
            unsettled: Mutex::default(),
            planning: Mutex::default(),
            network,
            work: tokio::sync::Mutex::new(WorkSets {
                store,
                sets: HashMap::new(),
            }),
        })
    }

    /// An empty index over `store` (for tests that start from an empty store).
    pub fn empty(store: Arc<dyn Store>) -> Index {
        Index {
            clusters: RwLock::default(),
            reports: RwLock::default(),
            pending: RwLock::default(),
            bookings: RwLock::default(),
            unsettled: Mutex::default(),
            planning: Mutex::default(),
            network: Network::default(),
            work: tokio::sync::Mutex::new(WorkSets {
                store,
                sets: HashMap::new(),
            }),
        }
    }

    /// Every registered cluster's record, by name.
    pub fn clusters(&self) -> BTreeMap<String, Arc<ClusterRecord>> {
        self.clusters.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `cluster`'s record.
    pub fn cluster(&self, cluster: &str) -> Option<Arc<ClusterRecord>> {
        self.clusters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(cluster)
            .cloned()
    }

    /// Keeps `record` (after the store wrote it).
    pub fn put_cluster(&self, record: ClusterRecord) {
        self.clusters
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(record.name.clone(), Arc::new(record));
    }

    /// Forgets a removed cluster's record and Pending pods.
    pub fn forget_cluster(&self, cluster: &str) {
        self.clusters
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(cluster);
        self.put_pending(cluster, Vec::new());
    }

    /// Applies a heartbeat the store recorded to `cluster`'s record, as the store does: a
    /// heartbeat older than the newest one seen does not roll the record back, and what it does
    /// not carry keeps its last value.
    pub fn heartbeat(
        &self,
        cluster: &str,
        at: jiff::Timestamp,
        capacity: Option<Value>,
        agent_version: Option<String>,
        kubernetes_version: Option<String>,
    ) {
        let mut clusters = self.clusters.write().unwrap_or_else(|e| e.into_inner());
        let Some(record) = clusters.get_mut(cluster) else {
            return;
        };
        if record.last_heartbeat_at.is_some_and(|last| last > at) {
            return;
        }
        let record = Arc::make_mut(record);
        record.last_heartbeat_at = Some(at);
        if capacity.is_some() {
            record.capacity = capacity;
        }
        if agent_version.is_some() {
            record.agent_version = agent_version;
        }
        if kubernetes_version.is_some() {
            record.kubernetes_version = kubernetes_version;
        }
    }

    /// The fleet's measured round trips and network coordinates.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// The latest report of every cluster that reported.
    pub fn reports(&self) -> Reports {
        self.reports.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stores `cluster`'s report and returns the workloads whose objects' status it changed (so
    /// that only those are reconciled), or `None` when nothing changed at all.
    pub async fn put_report(
        &self,
        store: &dyn Store,
        cluster: &str,
        report: StatusReport,
        at: jiff::Timestamp,
    ) -> Result<Option<BTreeSet<WorkloadRef>>, crate::store::StoreError> {
        let before = self
            .reports
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(cluster)
            .cloned();
        if before.as_deref() == Some(&report) {
            return Ok(None);
        }
        store
            .put_work_status(&WorkStatus {
                cluster: cluster.to_owned(),
                applied_revision: report.applied_revision.unwrap_or(0),
                objects: serde_json::to_value(&report).unwrap_or_default(),
                reported_at: at,
            })
            .await?;
        let mut changed = changed_workloads(before.as_ref().map(|b| b.objects.as_slice()), &report.objects);
        // Workloads whose apply errors came or went: their Degraded condition changes.
        let errors_before = before
            .as_ref()
            .map(|b| b.apply_errors.as_slice())
            .unwrap_or_default();
        for error in errors_before.iter().chain(&report.apply_errors) {
            let in_both = errors_before.contains(error) && report.apply_errors.contains(error);
            if !in_both {
                changed.extend(error.workload.clone());
            }
        }
        self.reports
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(cluster.to_owned(), Arc::new(report));
        Ok(Some(changed))
    }

    /// Keeps `cluster`'s Pending pods from its latest heartbeat.
    pub fn put_pending(&self, cluster: &str, pods: Vec<PendingPod>) {
        self.pending
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(cluster.to_owned(), Arc::new(pods));
    }

    /// Every cluster's Pending pods, from their latest heartbeats.
    pub fn pending(&self) -> Pending {
        self.pending.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records what `workload`'s placement now books, and returns what it booked before.
    pub fn book(&self, workload: &WorkloadRef, booking: Booking) -> Option<Booking> {
        self.bookings
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(workload.clone(), booking)
    }

    /// Puts back what [`Index::book`] returned, when the placement it booked was not stored.
    pub fn rebook(&self, workload: &WorkloadRef, before: Option<Booking>) {
        let mut bookings = self.bookings.write().unwrap_or_else(|e| e.into_inner());
        match before {
            Some(booking) => bookings.insert(workload.clone(), booking),
            None => bookings.remove(workload),
        };
    }

    /// Held from reading the ledger to booking a decision: one plan at a time sees every booking
    /// made before it. Plans are pure and in memory, so the lock is held for microseconds.
    pub fn planning(&self) -> std::sync::MutexGuard<'_, ()> {
        self.planning.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets `workload` (its placement was deleted).
    pub fn forget(&self, workload: &WorkloadRef) {
        self.bookings
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(workload);
        self.settle(workload, true);
    }

    /// The room replicas take that their agents' capacity reports do not count yet: every
    /// booking, each cluster's replicas minus those its agent reported ready there (Pending ones
    /// keep their reservation, see [`counted_replicas`]). The workload being
    /// decided is included: its own replicas that do not run yet take room too, or a move would
    /// count the same free room twice.
    pub fn ledger(&self, reports: &Reports) -> Ledger {
        let mut ledger = Ledger::new();
        let bookings = self.bookings.read().unwrap_or_else(|e| e.into_inner());
        for (other, booking) in bookings.iter() {
            for (cluster, &assigned) in &booking.replicas {
                let counted = counted_replicas(reports.get(cluster).map(Arc::as_ref), other);
                ledger.reserve(
                    cluster,
                    &other.to_string(),
                    &booking.demand,
                    assigned.saturating_sub(counted),
                );
            }
        }
        ledger
    }

    /// Marks `workload` settled (its placement cannot gain from more room: everything placed,
    /// nothing Pending, nothing in burst clusters, no move under way) or not. A change of a
    /// cluster's capacity reconciles the unsettled workloads only.
    pub fn settle(&self, workload: &WorkloadRef, settled: bool) {
        let mut unsettled = self.unsettled.lock().unwrap_or_else(|e| e.into_inner());
        if settled {
            unsettled.remove(workload);
        } else {
            unsettled.insert(workload.clone());
        }
    }

    /// The workloads not settled (see [`Index::settle`]).
    pub fn unsettled(&self) -> Vec<WorkloadRef> {
        self.unsettled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Exclusive access to the clusters' work sets.
    pub async fn work(&self) -> tokio::sync::MutexGuard<'_, WorkSets> {
        self.work.lock().await
    }
}

/// The clusters' work sets, read from the store once and then kept.
#[derive(Debug)]
pub struct WorkSets {
    store: Arc<dyn Store>,
    sets: HashMap<String, Vec<Value>>,
}

impl WorkSets {
    /// `cluster`'s current objects.
    pub async fn get(&mut self, cluster: &str) -> Result<&[Value], Error> {
        if !self.sets.contains_key(cluster) {
            let objects = self
                .store
                .get_work(cluster)
                .await
                .map_err(Error::store("reading work"))?
                .map(|w| w.objects)
                .unwrap_or_default();
            self.sets.insert(cluster.to_owned(), objects);
        }
        Ok(self.sets.get(cluster).map(Vec::as_slice).unwrap_or_default())
    }

    /// Stores `objects` as `cluster`'s work set.
    pub async fn put(&mut self, cluster: &str, objects: Vec<Value>) -> Result<WorkWrite, Error> {
        let write = self
            .store
            .put_work(cluster, &objects)
            .await
            .map_err(Error::store("writing work"))?;
        self.sets.insert(cluster.to_owned(), objects);
        Ok(write)
    }
}

/// Parses a stored report.
pub fn parse_report(status: &WorkStatus) -> Option<StatusReport> {
    serde_json::from_value(status.objects.clone()).ok()
}

/// The workloads with an object whose status differs between `before` and `after` (or that is
/// in only one of them).
fn changed_workloads(before: Option<&[ObjectStatus]>, after: &[ObjectStatus]) -> BTreeSet<WorkloadRef> {
    let key = |o: &ObjectStatus| (o.kind.clone(), o.namespace.clone(), o.name.clone());
    let before: BTreeMap<_, &ObjectStatus> = before.unwrap_or_default().iter().map(|o| (key(o), o)).collect();
    let after_keys: BTreeMap<_, &ObjectStatus> = after.iter().map(|o| (key(o), o)).collect();
    let mut changed = BTreeSet::new();
    for (k, object) in &after_keys {
        if before.get(k) != Some(object) {
            changed.extend(object.workload.clone());
        }
    }
    for (k, object) in &before {
        if !after_keys.contains_key(k) {
            changed.extend(object.workload.clone());
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(name: &str, ready: i32) -> ObjectStatus {
        ObjectStatus {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("shop".into()),
            name: name.into(),
            workload: Some(WorkloadRef::new("shop", name)),
            ready_replicas: Some(ready),
            ..ObjectStatus::default()
        }
    }

    #[test]
    fn a_report_changes_only_the_workloads_whose_objects_changed() {
        let before = [deployment("web", 1), deployment("api", 2), deployment("old", 1)];
        let after = [deployment("web", 2), deployment("api", 2), deployment("new", 0)];
        let changed = changed_workloads(Some(&before), &after);
        let names: Vec<&str> = changed.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(
            names,
            ["new", "old", "web"],
            "web changed, old left, new came; api did not"
        );
        let first = changed_workloads(None, &after);
        assert_eq!(
            first.len(),
            3,
            "a first report changes every workload it names: {first:?}"
        );
    }
}
