//! The hub's in-memory index of the operational state that every reconcile reads, written
//! through to the store.
//!
//! ```text
//!  registration ──► put_cluster ─► cluster records ─┐
//!  heartbeat    ──► heartbeat ───► cluster records ─┤
//!  agent status ──► put_report ──► store + reports ─┤
//!  heartbeat    ──► put_pending ─► Pending pods ────┤
//!  heartbeat    ──► network ─────► round trips ─────┤
//!  heartbeat    ──► put_usage ───► workloads' usage ┤ (read by the autoscaler)
//!  reconcile    ──► book ────────► bookings ────────┼─► ledger / status of one workload
//!  reconcile    ──► WorkSets::put ► store + sets ───┘   (no store reads on the hot path)
//!  start-up     ──► load (clusters, their reports, Pending pods, placements) from the store
//!  other replicas' writes (crate::feed) ──► the same entry points, read back from the store
//!  becoming leader ──► reload: everything again, from the store
//! ```
//!
//! The store stays the record: a restarted hub loads the index from it. Without the index a
//! reconcile read and parsed every placement (for the ledger), every agent's report and every
//! cluster's work set, so a pass over N workloads cost N² reads; with 1,000 workloads that was
//! minutes of CPU and a gigabyte of transient JSON.
//!
//! With several hub replicas each keeps its own index: what the replica itself receives goes
//! in directly, what the others write reaches it through the store's change feed. The leader
//! alone books placements and writes work sets; a replica that becomes leader reloads the whole
//! index from the store after claiming its term, so nothing its predecessor wrote is lost or
//! counted twice.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use nave_api::wire::{
    Heartbeat, ObjectStatus, PendingPod, StatusDelta, StatusReport, WorkloadRef, WorkloadUsage,
};
use nave_policies::{Demand, Ledger};
use serde_json::Value;

use crate::error::Error;
use crate::network::Network;
use crate::placement::reports::counted_replicas;
use crate::placement::stored::StoredDecision;
use crate::placement::{Pending, Reports};
use crate::render::ClusterWork;
use crate::store::{ClusterRecord, PlacementRecord, Store, WorkStatus, WorkWrite};

/// A workload's placement as stored: what the next plan of it reads. Only the decision itself
/// is kept, not its words (the explanation, each named cluster's line): no plan reads them, the
/// REST API reads them from the store, and they were most of what a kept placement weighed.
#[derive(Debug)]
pub struct KeptPlacement {
    /// The uid of the MCD it was made for.
    pub uid: String,
    /// The generation of the newest write.
    pub generation: i64,
    /// Its decision, without its words.
    pub decision: StoredDecision,
}

impl KeptPlacement {
    /// The row, its decision read and its words left out.
    pub fn new(record: &PlacementRecord) -> KeptPlacement {
        KeptPlacement::of(
            record.uid.clone(),
            record.generation,
            StoredDecision::from_json(&record.decision),
        )
    }

    /// `decision`, its words left out.
    pub fn of(uid: String, generation: i64, mut decision: StoredDecision) -> KeptPlacement {
        decision.explanation = String::new();
        decision.clusters = BTreeMap::new();
        KeptPlacement {
            uid,
            generation,
            decision,
        }
    }
}

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
    /// The latest reports that list apply errors (few): a status reads these instead of walking
    /// every cluster's report. Written under `reports`' lock, with it.
    erring: RwLock<Reports>,
    /// Each cluster's report as it stood when its latest heartbeat's capacity arrived: the
    /// replicas it reports ready are those that capacity counts (see [`Index::with_ledger`]).
    counted: RwLock<Reports>,
    /// Each cluster's Pending pods, from its latest heartbeat.
    pending: RwLock<Pending>,
    /// Each accepted cluster's workloads' usage, from its latest heartbeat (read from the
    /// newest stored heartbeat on a reload, so a new leader autoscales at once).
    usage: RwLock<HashMap<String, Arc<ReportedUsage>>>,
    bookings: RwLock<BTreeMap<WorkloadRef, Booking>>,
    /// Each workload's placement as the store holds it (its decision read once): what the next
    /// plan of the workload starts from, without a read of the store.
    placements: RwLock<HashMap<WorkloadRef, Arc<KeptPlacement>>>,
    /// The replicas of each booking that its clusters' reports do not count yet, and the ledger
    /// they make, both kept as bookings and reports change: a plan reads the ledger in place
    /// instead of building it from every booking and report. Locked before `bookings` and
    /// `reports` whenever several are held.
    reserved: RwLock<Reserved>,
    /// Workloads whose placement may change when capacity changes (see [`Index::settle`]).
    unsettled: Mutex<BTreeSet<WorkloadRef>>,
    /// See [`Index::planning`].
    planning: Mutex<()>,
    /// Measured round trips, probe URLs and network coordinates.
    network: Network,
    /// Each cluster's work set; the lock serializes their read-modify-write, since several
    /// workloads share a set and two reconciles writing at once would lose one's objects.
    work: tokio::sync::Mutex<WorkSets>,
    /// Grows whenever a cluster's record changes in what placement reads of it (registered,
    /// removed, accepted or not, its capacity or versions); a fleet view is current while it
    /// does not.
    clusters_version: std::sync::atomic::AtomicU64,
    /// While [`Index::reload`] reads the store: the clusters and workloads written meanwhile,
    /// which keep what was written rather than what the reload read before.
    touched: Mutex<Option<Touched>>,
    /// Held through a reload: two at once (a new term's and the change feed's) would share
    /// [`Index::touched`], and the one that ended last would put back what it read before the
    /// other began, losing the clusters registered in between.
    reloading: tokio::sync::Mutex<()>,
}

/// What was written during a reload (see [`Index::touched`]).
#[derive(Debug, Default)]
struct Touched {
    clusters: BTreeSet<String>,
    workloads: BTreeSet<WorkloadRef>,
}

impl Index {
    /// An index loaded from `store`: every registered cluster's record, latest report, Pending
    /// pods and latency samples (from its newest heartbeat), and every placement.
    pub async fn load(store: Arc<dyn Store>) -> Result<Index, Error> {
        let index = Index::empty(store);
        index.reload(Reload::Everything).await?;
        Ok(index)
    }

    /// Reads `what` again from the store, replacing what the index held: everything when a
    /// replica becomes leader (after claiming its term, so no earlier term writes after the
    /// read) and when a follower's change feed may have missed changes; what the agents report
    /// when the leader's feed may have (its own placements and work sets are the record: a
    /// placement booked and not yet stored must not be replaced by the stored one). After
    /// everything, the work sets are read again on their next use and no workload is unsettled
    /// until reconciled again. What is written to the index while the store is read wins over
    /// what was read (see [`Index::touched`]).
    pub async fn reload(&self, what: Reload) -> Result<(), Error> {
        let _one_at_a_time = self.reloading.lock().await;
        let store = self.work.lock().await.store.clone();
        *self.touched.lock().unwrap_or_else(|e| e.into_inner()) = Some(Touched::default());
        let read = self.read_all(&store, what).await;
        {
            // Held through the swap: a writer records what it writes before writing it, so a
            // write is either merged here or lands after the swap.
            let mut touched_guard = self.touched.lock().unwrap_or_else(|e| e.into_inner());
            let touched = touched_guard.take().unwrap_or_default();
            let (clusters, reports, pending, bookings) = read?;
            merge(&self.clusters, clusters, &touched.clusters);
            merge(&self.reports, reports, &touched.clusters);
            {
                let reports = self.reports.read().unwrap_or_else(|e| e.into_inner());
                *self.erring.write().unwrap_or_else(|e| e.into_inner()) = reports
                    .iter()
                    .filter(|(_, report)| !report.apply_errors.is_empty())
                    .map(|(cluster, report)| (cluster.clone(), report.clone()))
                    .collect();
            }
            merge(&self.pending, pending, &touched.clusters);
            if let Some((bookings, kept)) = bookings {
                merge(&self.bookings, bookings, &touched.workloads);
                let mut placements = self.placements.write().unwrap_or_else(|e| e.into_inner());
                let mut kept: HashMap<_, _> = kept.into_iter().collect();
                for workload in &touched.workloads {
                    match placements.get(workload) {
                        Some(current) => kept.insert(workload.clone(), current.clone()),
                        None => kept.remove(workload),
                    };
                }
                *placements = kept;
            }
        }
        self.reserve_all();
        self.clusters_changed();
        if what == Reload::Everything {
            self.unsettled.lock().unwrap_or_else(|e| e.into_inner()).clear();
            self.work.lock().await.clear();
        }
        Ok(())
    }

    /// What [`Index::reload`] reads: clusters, reports, Pending pods, and with everything, the
    /// bookings.
    async fn read_all(&self, store: &Arc<dyn Store>, what: Reload) -> Result<ReadAll, Error> {
        let records = store
            .list_clusters()
            .await
            .map_err(Error::store("listing clusters"))?;
        let mut reports = Reports::new();
        let mut pending = Pending::new();
        for cluster in &records {
            let newest = store
                .list_heartbeats(&cluster.name, 1)
                .await
                .map_err(Error::store("reading heartbeats"))?;
            if let Some(record) = newest.first() {
                self.network.load(&cluster.name, &record.payload);
                if let Ok(beat) = serde_json::from_value::<Heartbeat>(record.payload.clone()) {
                    let pods = kept_pending(&beat);
                    if !pods.is_empty() {
                        pending.insert(cluster.name.clone(), Arc::new(pods));
                    }
                    // A new leader reads the usage at once rather than a heartbeat later; a
                    // newer report kept meanwhile is not replaced.
                    if cluster.accepted {
                        self.put_usage(&cluster.name, record.received_at, beat.workload_usage.as_deref());
                    }
                }
            }
            let status = store
                .get_work_status(&cluster.name)
                .await
                .map_err(Error::store("reading work status"))?;
            if let Some(report) = status.and_then(|s| parse_report(&s)) {
                reports.insert(cluster.name.clone(), Arc::new(report));
            }
        }
        let mut bookings = None;
        if what == Reload::Everything {
            let kept: BTreeMap<WorkloadRef, Arc<KeptPlacement>> = store
                .list_placements(None)
                .await
                .map_err(Error::store("listing placements"))?
                .into_iter()
                .map(|p: PlacementRecord| {
                    (
                        WorkloadRef::new(&p.namespace, &p.name),
                        Arc::new(KeptPlacement::new(&p)),
                    )
                })
                .collect();
            let booked = kept
                .iter()
                .map(|(w, p)| (w.clone(), Booking::of_stored(&p.decision)))
                .collect();
            bookings = Some((booked, kept));
        }
        let clusters = records
            .into_iter()
            .map(|r| (r.name.clone(), Arc::new(r)))
            .collect();
        Ok((clusters, reports, pending, bookings))
    }

    /// Records that `cluster` is about to be written (see [`Index::touched`]).
    fn touch_cluster(&self, cluster: &str) {
        if let Some(touched) = self.touched.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            touched.clusters.insert(cluster.to_owned());
        }
    }

    /// Records that `workload`'s booking is about to be written (see [`Index::touched`]).
    fn touch_workload(&self, workload: &WorkloadRef) {
        if let Some(touched) = self.touched.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            touched.workloads.insert(workload.clone());
        }
    }

    /// An empty index over `store` (for tests that start from an empty store).
    pub fn empty(store: Arc<dyn Store>) -> Index {
        Index {
            clusters: RwLock::default(),
            reports: RwLock::default(),
            erring: RwLock::default(),
            counted: RwLock::default(),
            pending: RwLock::default(),
            usage: RwLock::default(),
            bookings: RwLock::default(),
            placements: RwLock::default(),
            reserved: RwLock::default(),
            unsettled: Mutex::default(),
            planning: Mutex::default(),
            touched: Mutex::default(),
            reloading: tokio::sync::Mutex::default(),
            clusters_version: Default::default(),
            network: Network::default(),
            work: tokio::sync::Mutex::new(WorkSets {
                store,
                sets: BTreeMap::new(),
                holders: HashMap::new(),
                dirty: BTreeSet::new(),
                changed: Arc::default(),
            }),
        }
    }

    /// See [`Index::clusters_version`](Index#structfield.clusters_version).
    pub fn clusters_version(&self) -> u64 {
        self.clusters_version.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Records that what placement reads of the clusters changed (a record, or their health):
    /// fleet views taken before are not current.
    pub fn clusters_changed(&self) {
        self.clusters_version
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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
        self.touch_cluster(&record.name);
        self.clusters
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(record.name.clone(), Arc::new(record));
        self.clusters_changed();
    }

    /// Forgets a removed cluster's record, Pending pods, usage, round trips and latest report.
    pub fn forget_cluster(&self, cluster: &str) {
        self.touch_cluster(cluster);
        self.clusters
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(cluster);
        self.clusters_changed();
        self.put_pending(cluster, Vec::new());
        self.usage
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(cluster);
        self.counted
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(cluster);
        {
            // Its status went from the store with it (a reload would not read it either).
            let mut reports = self.reports.write().unwrap_or_else(|e| e.into_inner());
            let mut erring = self.erring.write().unwrap_or_else(|e| e.into_inner());
            if reports.contains_key(cluster) {
                reports.remove(cluster);
            }
            if erring.contains_key(cluster) {
                erring.remove(cluster);
            }
        }
        self.network.forget(cluster);
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
        self.touch_cluster(cluster);
        let mut clusters = self.clusters.write().unwrap_or_else(|e| e.into_inner());
        let Some(record) = clusters.get_mut(cluster) else {
            return;
        };
        if record.last_heartbeat_at.is_some_and(|last| last > at) {
            return;
        }
        let record = Arc::make_mut(record);
        let first = record.last_heartbeat_at.is_none();
        record.last_heartbeat_at = Some(at);
        let mut changed = first;
        let counts = capacity.is_some();
        if let Some(capacity) = capacity
            && record.capacity.as_deref() != Some(&capacity)
        {
            record.capacity = Some(Arc::new(capacity));
            changed = true;
        }
        if agent_version.is_some() && agent_version != record.agent_version {
            record.agent_version = agent_version;
            changed = true;
        }
        if kubernetes_version.is_some() && kubernetes_version != record.kubernetes_version {
            record.kubernetes_version = kubernetes_version;
            changed = true;
        }
        drop(clusters);
        if counts {
            self.count_reported(cluster);
        }
        if changed {
            self.clusters_changed();
        }
    }

    /// Takes `cluster`'s latest report as what its capacity, just received, counts: the ready
    /// replicas it reports are in that capacity's requests, so they no longer hold a reservation.
    /// Until then they keep it, though the report came first: a capacity sent before they
    /// started does not count them, and freeing their room early placed replicas twice in it.
    fn count_reported(&self, cluster: &str) {
        // No report yet: nothing counted (not "whatever comes next").
        let report = self.report(cluster).unwrap_or_default();
        let before = self
            .counted
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(cluster.to_owned(), report.clone());
        if before.as_ref().is_some_and(|b| Arc::ptr_eq(b, &report)) {
            return;
        }
        let changed = changed_workloads(before.as_ref().map(|b| b.objects.as_slice()), &report.objects);
        for workload in &changed {
            self.reserve(workload);
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

    /// The latest reports that list apply errors, by cluster (a subset of [`Index::reports`]).
    pub fn erring(&self) -> Reports {
        self.erring.read().unwrap_or_else(|e| e.into_inner()).clone()
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
        if self.report(cluster).as_deref() == Some(&report) {
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
        Ok(self.keep_report(cluster, report))
    }

    /// The report `delta` makes of `cluster`'s latest, which it must follow (its `base`):
    /// otherwise the agent is to send its whole report. Refused too when the result would hold
    /// more objects than a report may, or its id is too long.
    pub fn follow_report(&self, cluster: &str, delta: StatusDelta) -> Result<StatusReport, DeltaRefused> {
        let kept = self.report(cluster);
        let Some(kept) = kept.filter(|k| k.id.as_deref() == Some(delta.base.as_str())) else {
            let held = match self.report(cluster) {
                Some(report) => match &report.id {
                    Some(id) => format!("report {id}"),
                    None => "a report without an id".to_owned(),
                },
                None => "no report".to_owned(),
            };
            let base: String = delta.base.chars().take(StatusReport::MAX_ID_CHARS).collect();
            return Err(DeltaRefused::UnknownBase(format!(
                "base: the delta follows report {base}, and the hub holds {held} of this cluster: send the whole report"
            )));
        };
        kept.with_delta(delta).map_err(DeltaRefused::Invalid)
    }

    /// `cluster`'s latest report.
    fn report(&self, cluster: &str) -> Option<Arc<StatusReport>> {
        self.reports
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(cluster)
            .cloned()
    }

    /// Keeps `cluster`'s report (the store has it) and returns the workloads whose objects'
    /// status it changed, or `None` when nothing changed at all.
    pub fn keep_report(&self, cluster: &str, report: StatusReport) -> Option<BTreeSet<WorkloadRef>> {
        self.touch_cluster(cluster);
        let before = self.report(cluster);
        if before.as_deref() == Some(&report) {
            return None;
        }
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
        {
            let mut reports = self.reports.write().unwrap_or_else(|e| e.into_inner());
            let mut erring = self.erring.write().unwrap_or_else(|e| e.into_inner());
            let report = Arc::new(report);
            if !report.apply_errors.is_empty() {
                erring.insert(cluster.to_owned(), report.clone());
            } else if erring.contains_key(cluster) {
                erring.remove(cluster);
            }
            reports.insert(cluster.to_owned(), report);
        }
        for workload in &changed {
            self.reserve(workload);
        }
        Some(changed)
    }

    /// Applies a heartbeat the store recorded at `at` to `cluster`'s record, Pending pods and
    /// round trips, and says what it changed for placement. `capacity` is the heartbeat's
    /// capacity model as the store holds it (JSON, serialized once). A cluster not accepted neither
    /// publishes a probe URL (other agents would probe whatever it names) nor feeds the fleet's
    /// network coordinates.
    pub fn observe_heartbeat(
        &self,
        cluster: &str,
        at: jiff::Timestamp,
        beat: &Heartbeat,
        capacity: Option<serde_json::Value>,
        grace: std::time::Duration,
    ) -> Observed {
        let before = self.cluster(cluster);
        let capacity_changed = before.as_ref().and_then(|c| c.capacity.as_deref()) != capacity.as_ref();
        let was_ready = before
            .as_ref()
            .and_then(|c| c.last_heartbeat_at)
            .is_some_and(|last| at.duration_since(last).unsigned_abs() < grace);
        let accepted = before.as_ref().is_some_and(|c| c.accepted);
        self.heartbeat(
            cluster,
            at,
            capacity,
            Some(beat.agent_version.clone()),
            beat.kubernetes_version.clone(),
        );
        self.put_pending(cluster, kept_pending(beat));
        if accepted {
            self.network
                .put(cluster, beat.probe_url.as_deref(), &beat.latency_samples);
            self.put_usage(cluster, at, beat.workload_usage.as_deref());
        } else {
            self.network.put(cluster, None, &[]);
            self.usage
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(cluster);
        }
        if !was_ready {
            // Back (or new): a view that had it not Ready is not current.
            self.clusters_changed();
        }
        // Placement is steady: settled workloads keep their placement whatever the room, so
        // new capacity concerns the unsettled ones; a cluster coming back concerns all.
        let wake = if !was_ready {
            Wake::All
        } else if capacity_changed {
            Wake::Unsettled
        } else {
            Wake::Nothing
        };
        Observed {
            wake,
            was_ready,
            accepted,
        }
    }

    /// Keeps `cluster`'s report of its workloads' usage made at `at` (`None`: the cluster
    /// measures nothing now), unless a newer one is kept (heartbeats can arrive out of order);
    /// at most [`Heartbeat::MAX_WORKLOAD_USAGE`] workloads of it, whatever the agent sent.
    pub fn put_usage(&self, cluster: &str, at: jiff::Timestamp, reported: Option<&[WorkloadUsage]>) {
        let workloads = reported.map(|reported| {
            reported
                .iter()
                .take(Heartbeat::MAX_WORKLOAD_USAGE)
                .map(|u| (u.workload.clone(), u.clone()))
                .collect()
        });
        let mut usage = self.usage.write().unwrap_or_else(|e| e.into_inner());
        if usage.get(cluster).is_some_and(|kept| kept.at > at) {
            return;
        }
        usage.insert(cluster.to_owned(), Arc::new(ReportedUsage { at, workloads }));
    }

    /// What `cluster` last reported `workload`'s pods to use, and when: nothing measured (no
    /// pods) when the cluster measured and listed none of them; `None` when the cluster measures
    /// nothing (no metrics API) or is not accepted now.
    pub fn workload_usage(
        &self,
        cluster: &str,
        workload: &WorkloadRef,
    ) -> Option<(jiff::Timestamp, WorkloadUsage)> {
        if !self.cluster(cluster).is_some_and(|c| c.accepted) {
            return None;
        }
        let usage = self.usage.read().unwrap_or_else(|e| e.into_inner());
        let reported = usage.get(cluster)?;
        let measured = reported.workloads.as_ref()?.get(workload).cloned();
        Some((
            reported.at,
            measured.unwrap_or_else(|| WorkloadUsage {
                workload: workload.clone(),
                ..WorkloadUsage::default()
            }),
        ))
    }

    /// Keeps `record` as the store now holds it, or forgets the cluster when the store has
    /// none (it was removed).
    pub fn refresh_cluster(&self, cluster: &str, record: Option<ClusterRecord>) {
        match record {
            Some(record) => self.put_cluster(record),
            None => self.forget_cluster(cluster),
        }
    }

    /// Keeps `workload`'s placement as the store now holds it (another replica wrote it), or
    /// forgets it.
    pub fn refresh_placement(&self, workload: &WorkloadRef, placement: Option<&PlacementRecord>) {
        self.touch_workload(workload);
        let kept = placement.map(|p| Arc::new(KeptPlacement::new(p)));
        let mut bookings = self.bookings.write().unwrap_or_else(|e| e.into_inner());
        match &kept {
            Some(p) => bookings.insert(workload.clone(), Booking::of_stored(&p.decision)),
            None => bookings.remove(workload),
        };
        drop(bookings);
        self.keep_placement(workload, kept);
        self.reserve(workload);
    }

    /// `workload`'s placement as the store holds it.
    pub fn placement(&self, workload: &WorkloadRef) -> Option<Arc<KeptPlacement>> {
        self.placements
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(workload)
            .cloned()
    }

    /// Keeps `workload`'s placement as just written to the store, or forgets it (deleted).
    pub fn keep_placement(&self, workload: &WorkloadRef, placement: Option<Arc<KeptPlacement>>) {
        self.touch_workload(workload);
        let mut placements = self.placements.write().unwrap_or_else(|e| e.into_inner());
        match placement {
            Some(p) => placements.insert(workload.clone(), p),
            None => placements.remove(workload),
        };
    }

    /// Keeps `cluster`'s Pending pods from its latest heartbeat. Only clusters with Pending pods
    /// are held: every plan looks through them all for its own.
    pub fn put_pending(&self, cluster: &str, pods: Vec<PendingPod>) {
        self.touch_cluster(cluster);
        let mut pending = self.pending.write().unwrap_or_else(|e| e.into_inner());
        if pods.is_empty() {
            // Looked up first: a removal copies the path to the key even when it is absent,
            // and nearly every heartbeat says no Pending pods.
            if pending.contains_key(cluster) {
                pending.remove(cluster);
            }
        } else {
            pending.insert(cluster.to_owned(), Arc::new(pods));
        }
    }

    /// Every cluster's Pending pods, from their latest heartbeats.
    pub fn pending(&self) -> Pending {
        self.pending.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records what `workload`'s placement now books, and returns what it booked before.
    pub fn book(&self, workload: &WorkloadRef, booking: Booking) -> Option<Booking> {
        self.touch_workload(workload);
        let before = self
            .bookings
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(workload.clone(), booking);
        self.reserve(workload);
        before
    }

    /// Puts back what [`Index::book`] returned, when the placement it booked was not stored.
    pub fn rebook(&self, workload: &WorkloadRef, before: Option<Booking>) {
        self.touch_workload(workload);
        let mut bookings = self.bookings.write().unwrap_or_else(|e| e.into_inner());
        match before {
            Some(booking) => bookings.insert(workload.clone(), booking),
            None => bookings.remove(workload),
        };
        drop(bookings);
        self.reserve(workload);
    }

    /// Held from reading the ledger to booking a decision: one plan at a time sees every booking
    /// made before it. Plans are pure and in memory, so the lock is held for microseconds.
    pub fn planning(&self) -> std::sync::MutexGuard<'_, ()> {
        self.planning.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets `workload` (its placement was deleted).
    pub fn forget(&self, workload: &WorkloadRef) {
        self.touch_workload(workload);
        self.bookings
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(workload);
        self.keep_placement(workload, None);
        self.reserve(workload);
        self.settle(workload, true);
    }

    /// The room replicas take that their agents' capacity reports do not count yet: every
    /// booking, each cluster's replicas minus those its agent reported ready there by the time
    /// its latest capacity came (Pending ones keep their reservation, see [`counted_replicas`]). The workload being
    /// decided is included: its own replicas that do not run yet take room too, or a move would
    /// count the same free room twice.
    ///
    /// `read` is given the ledger in place, under a read lock: call no other method of the index
    /// from it.
    pub fn with_ledger<R>(&self, read: impl FnOnce(&Ledger) -> R) -> R {
        read(&self.reserved.read().unwrap_or_else(|e| e.into_inner()).ledger)
    }

    /// Computes again what `workload`'s booking reserves: per cluster, its replicas minus those
    /// the cluster's report counts.
    fn reserve(&self, workload: &WorkloadRef) {
        let mut reserved = self.reserved.write().unwrap_or_else(|e| e.into_inner());
        let bookings = self.bookings.read().unwrap_or_else(|e| e.into_inner());
        let reports = self.reports.read().unwrap_or_else(|e| e.into_inner());
        let counted = self.counted.read().unwrap_or_else(|e| e.into_inner());
        // What the booking reserves now, with the demand it reserves it for: a new demand with the
        // same replicas still changes the ledger.
        let now = bookings
            .get(workload)
            .map(|booking| {
                (
                    booking.demand.clone(),
                    reservations(booking, &counted, &reports, workload),
                )
            })
            .filter(|(_, clusters)| !clusters.is_empty());
        let Reserved { by_workload, ledger } = &mut *reserved;
        let before = by_workload.get(workload);
        if before == now.as_ref() {
            return;
        }
        let name = workload.to_string();
        for (cluster, &replicas) in before.into_iter().flat_map(|(_, clusters)| clusters) {
            ledger.release(cluster, &name, replicas);
        }
        match now {
            Some((demand, clusters)) => {
                for (cluster, &replicas) in &clusters {
                    ledger.reserve(cluster, &name, &demand, replicas);
                }
                by_workload.insert(workload.clone(), (demand, clusters));
            }
            None => {
                by_workload.remove(workload);
            }
        }
    }

    /// Computes again what every booking reserves.
    fn reserve_all(&self) {
        let mut reserved = self.reserved.write().unwrap_or_else(|e| e.into_inner());
        let bookings = self.bookings.read().unwrap_or_else(|e| e.into_inner());
        let reports = self.reports.read().unwrap_or_else(|e| e.into_inner());
        let counted = self.counted.read().unwrap_or_else(|e| e.into_inner());
        let mut ledger = Ledger::new();
        let by_workload = bookings
            .iter()
            .map(|(workload, booking)| {
                let clusters = reservations(booking, &counted, &reports, workload);
                let name = workload.to_string();
                for (cluster, &replicas) in &clusters {
                    ledger.reserve(cluster, &name, &booking.demand, replicas);
                }
                (workload.clone(), (booking.demand.clone(), clusters))
            })
            .filter(|(_, (_, clusters))| !clusters.is_empty())
            .collect();
        *reserved = Reserved { by_workload, ledger };
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

    /// Woken whenever a work set changed and waits to be written.
    pub async fn work_changed(&self) -> Arc<tokio::sync::Notify> {
        self.work.lock().await.changed.clone()
    }
}

/// Why a status delta was not taken (see [`Index::follow_report`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeltaRefused {
    /// The hub holds another report than the one the delta follows.
    UnknownBase(String),
    /// An id too long, or a report of more objects than a report may hold.
    Invalid(String),
}

/// The clusters' work sets, read from the store once and then kept, with which clusters hold
/// each workload's objects: a change of one workload touches only the sets that hold its
/// objects or will, and only the objects it contributes (see [`ClusterWork`]); the sets it
/// changed are written by [`WorkSets::flush`], so changes that come together (a burst of
/// reconciles) are written, and fetched by the agents, once.
#[derive(Debug)]
pub struct WorkSets {
    store: Arc<dyn Store>,
    /// By cluster, in name order: [`WorkSets::holding`] walks them beside the fleet's names.
    sets: BTreeMap<String, ClusterWork>,
    /// For each workload ([`WorkloadRef::label_value`]), the clusters whose sets hold objects
    /// it contributes, over the sets read so far.
    holders: HashMap<String, BTreeSet<String>>,
    /// The clusters whose set changed since it was last written.
    dirty: BTreeSet<String>,
    /// Woken when a set becomes dirty (see [`Index::work_changed`]).
    changed: Arc<tokio::sync::Notify>,
}

impl WorkSets {
    /// `cluster`'s set, read from the store on first use.
    async fn load(&mut self, cluster: &str) -> Result<&mut ClusterWork, Error> {
        if !self.sets.contains_key(cluster) {
            let objects = self
                .store
                .get_work(cluster)
                .await
                .map_err(Error::store("reading work"))?
                .map(|w| w.objects)
                .unwrap_or_default();
            let set = ClusterWork::from_stored(&objects);
            if set.is_unwritten() {
                self.dirty.insert(cluster.to_owned());
                self.changed.notify_one();
            }
            for workload in set.workloads() {
                self.holders
                    .entry(workload.clone())
                    .or_default()
                    .insert(cluster.to_owned());
            }
            self.sets.insert(cluster.to_owned(), set);
        }
        Ok(self.sets.get_mut(cluster).expect("just read"))
    }

    /// `cluster`'s current objects, as they are (or are about to be) stored.
    pub async fn get(&mut self, cluster: &str) -> Result<Vec<Value>, Error> {
        Ok(self.load(cluster).await?.to_objects())
    }

    /// The Deployment `workload` has in `cluster`'s set, as last rendered.
    pub async fn deployment(
        &mut self,
        cluster: &str,
        workload: &WorkloadRef,
    ) -> Result<Option<Value>, Error> {
        Ok(self.load(cluster).await?.deployment(workload))
    }

    /// Every object `workload` contributes to `cluster`'s set, as last rendered.
    pub async fn objects_of(&mut self, cluster: &str, workload: &WorkloadRef) -> Result<Vec<Value>, Error> {
        Ok(self.load(cluster).await?.objects_of(workload))
    }

    /// Of `objects`, those another contributor holds in `cluster`'s set already (see
    /// [`ClusterWork::held_by_others`]).
    pub async fn held_by_others(
        &mut self,
        cluster: &str,
        workload: &WorkloadRef,
        objects: &[Value],
    ) -> Result<Vec<(crate::render::Key, String)>, Error> {
        Ok(self.load(cluster).await?.held_by_others(workload, objects))
    }

    /// The clusters among `clusters` (sorted) whose sets hold objects `workload` contributes;
    /// reads the sets of `clusters` not read yet first.
    pub async fn holding(
        &mut self,
        clusters: &[String],
        workload: &WorkloadRef,
    ) -> Result<BTreeSet<String>, Error> {
        // Both sorted (the index keeps clusters by name): the sets read so far are walked beside
        // `clusters` instead of searched once per cluster, which every reconcile did for each of
        // thousands of clusters.
        let unread: Vec<String> = {
            let mut read = self.sets.keys().peekable();
            clusters
                .iter()
                .filter(|cluster| {
                    while read.next_if(|r| r < cluster).is_some() {}
                    read.peek() != Some(cluster)
                })
                .cloned()
                .collect()
        };
        for cluster in &unread {
            self.load(cluster).await?;
        }
        let held = self.holders.get(&workload.label_value());
        Ok(held
            .into_iter()
            .flatten()
            .filter(|c| clusters.binary_search(c).is_ok())
            .cloned()
            .collect())
    }

    /// Replaces `workload`'s objects in `cluster`'s set (see [`ClusterWork::replace`]); a set
    /// that changed is written by the next [`flush`](WorkSets::flush).
    pub async fn replace(
        &mut self,
        cluster: &str,
        workload: &WorkloadRef,
        objects: Vec<Value>,
    ) -> Result<bool, Error> {
        let set = self.load(cluster).await?;
        let changed = set.replace(workload, objects);
        let holds = set.workloads().any(|w| *w == workload.label_value());
        let me = workload.label_value();
        if holds {
            self.holders.entry(me).or_default().insert(cluster.to_owned());
        } else if let Some(clusters) = self.holders.get_mut(&me) {
            clusters.remove(cluster);
            if clusters.is_empty() {
                self.holders.remove(&me);
            }
        }
        if changed {
            self.dirty.insert(cluster.to_owned());
            self.changed.notify_one();
        }
        Ok(changed)
    }

    /// Writes every set that changed since it was last written, in cluster order; answers the
    /// writes. A set whose write fails stays to be written, with those after it.
    pub async fn flush(&mut self) -> Result<Vec<(String, WorkWrite)>, Error> {
        let mut writes = Vec::new();
        while let Some(cluster) = self.dirty.first().cloned() {
            // Only what changed is written: the cost is the changes', not the set's.
            if let Some(set) = self.sets.get_mut(&cluster).filter(|set| set.is_unwritten()) {
                let (changed, removed) = set.unwritten();
                let write = self
                    .store
                    .change_work(&cluster, &changed, &removed)
                    .await
                    .map_err(Error::store("writing work"))?;
                set.written();
                writes.push((cluster.clone(), write));
            }
            self.dirty.remove(&cluster);
        }
        Ok(writes)
    }

    /// Forgets every set read (they are read again on their next use), and what was not
    /// written of them.
    fn clear(&mut self) {
        self.sets.clear();
        self.holders.clear();
        self.dirty.clear();
    }
}

/// What the bookings reserve that the reports do not count yet: see [`Index::with_ledger`].
#[derive(Debug, Default)]
struct Reserved {
    /// Per workload, the demand of one replica and the replicas reserved per cluster (none
    /// empty).
    by_workload: BTreeMap<WorkloadRef, (Demand, BTreeMap<String, u32>)>,
    /// The same, as the engine reads it.
    ledger: Ledger,
}

/// What `booking` reserves of `workload`: per cluster, its replicas that the cluster's capacity
/// does not count yet, as its report stood when that capacity came (zeros left out).
fn reservations(
    booking: &Booking,
    counted: &Reports,
    reports: &Reports,
    workload: &WorkloadRef,
) -> BTreeMap<String, u32> {
    booking
        .replicas
        .iter()
        .map(|(cluster, &assigned)| {
            // Ready as of the cluster's latest capacity; before this hub saw one, its latest
            // report.
            let report = counted.get(cluster).or_else(|| reports.get(cluster));
            let counted = counted_replicas(report.map(Arc::as_ref), workload);
            (cluster.clone(), assigned.saturating_sub(counted))
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// What [`Index::read_all`] answers: clusters, reports, Pending pods, bookings.
type ReadAll = (
    BTreeMap<String, Arc<ClusterRecord>>,
    Reports,
    Pending,
    Option<(
        BTreeMap<WorkloadRef, Booking>,
        BTreeMap<WorkloadRef, Arc<KeptPlacement>>,
    )>,
);

/// Replaces `map` with `read`, except for the keys in `touched`, which keep what `map` holds
/// (or stay absent when it holds nothing).
fn merge<K: Ord + Clone, V: Clone, M: Keyed<K, V>>(map: &RwLock<M>, mut read: M, touched: &BTreeSet<K>) {
    let mut map = map.write().unwrap_or_else(|e| e.into_inner());
    for key in touched {
        match map.get(key) {
            Some(value) => read.put(key.clone(), value.clone()),
            None => read.take(key),
        }
    }
    *map = read;
}

/// The maps [`merge`] merges: the standard one and the persistent one of reports and Pending
/// pods (see [`Reports`]).
trait Keyed<K, V> {
    fn get(&self, key: &K) -> Option<&V>;
    fn put(&mut self, key: K, value: V);
    fn take(&mut self, key: &K);
}

impl<K: Ord, V> Keyed<K, V> for BTreeMap<K, V> {
    fn get(&self, key: &K) -> Option<&V> {
        BTreeMap::get(self, key)
    }
    fn put(&mut self, key: K, value: V) {
        self.insert(key, value);
    }
    fn take(&mut self, key: &K) {
        self.remove(key);
    }
}

impl<K: Ord + Clone, V: Clone> Keyed<K, V> for imbl::OrdMap<K, V> {
    fn get(&self, key: &K) -> Option<&V> {
        imbl::OrdMap::get(self, key)
    }
    fn put(&mut self, key: K, value: V) {
        self.insert(key, value);
    }
    fn take(&mut self, key: &K) {
        self.remove(key);
    }
}

/// What [`Index::reload`] reads again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// Everything, placements included.
    Everything,
    /// What agents and admins write: clusters, reports, Pending pods, round trips.
    Observations,
}

/// A cluster's report of what its workloads' pods use (see [`Heartbeat::workload_usage`]).
#[derive(Debug)]
struct ReportedUsage {
    /// When the heartbeat carrying it arrived.
    at: jiff::Timestamp,
    /// Per workload; `None` when the cluster measured nothing (no metrics API).
    workloads: Option<HashMap<WorkloadRef, WorkloadUsage>>,
}

/// What a heartbeat changed for placement (see [`Index::observe_heartbeat`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Nothing placement reads.
    Nothing,
    /// Capacity: the unsettled workloads may gain from it.
    Unsettled,
    /// The cluster was not Ready and is back: every workload may use it.
    All,
}

/// What [`Index::observe_heartbeat`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed {
    /// What to reconcile.
    pub wake: Wake,
    /// Whether the cluster was Ready before this heartbeat.
    pub was_ready: bool,
    /// Whether the cluster is accepted into the fleet.
    pub accepted: bool,
}

/// The Pending pods of a heartbeat that the hub keeps: at most what an agent sends, however
/// many it lists.
fn kept_pending(beat: &Heartbeat) -> Vec<PendingPod> {
    let mut pending = beat.pending_pods.clone();
    pending.truncate(Heartbeat::MAX_PENDING_PODS);
    pending
}

/// Parses a stored report.
pub fn parse_report(status: &WorkStatus) -> Option<StatusReport> {
    serde_json::from_value(status.objects.clone()).ok()
}

/// The workloads with an object whose status differs between `before` and `after` (or that is
/// in only one of them).
fn changed_workloads(before: Option<&[ObjectStatus]>, after: &[ObjectStatus]) -> BTreeSet<WorkloadRef> {
    // Keys borrowed from the reports: a report of n objects costs no copy of their names.
    fn key(o: &ObjectStatus) -> (&str, Option<&str>, &str) {
        (o.kind.as_str(), o.namespace.as_deref(), o.name.as_str())
    }
    let before: HashMap<_, &ObjectStatus> = before.unwrap_or_default().iter().map(|o| (key(o), o)).collect();
    let after_keys: HashMap<_, &ObjectStatus> = after.iter().map(|o| (key(o), o)).collect();
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
pub(crate) mod tests {
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
    fn a_kept_placement_is_the_stored_decision_without_its_words() {
        let decision = crate::placement::stored::tests::full_row();
        let record = PlacementRecord {
            namespace: "shop".into(),
            name: "web".into(),
            uid: "uid-1".into(),
            generation: 3,
            decision: decision.clone(),
            updated_at: jiff::Timestamp::UNIX_EPOCH,
        };
        let kept = KeptPlacement::new(&record);
        assert!(
            kept.decision.explanation.is_empty() && kept.decision.clusters.is_empty(),
            "expected the words left out, kept {:?} and {:?}",
            kept.decision.explanation,
            kept.decision.clusters
        );
        let read = StoredDecision::from_json(&decision);
        assert!(
            kept.decision.same_but_prose(&read),
            "expected the same decision as the row's, kept {:?}, the row {read:?}",
            kept.decision
        );
        assert_eq!(kept.decision.dispatched(), read.dispatched());
        assert_eq!((kept.uid.as_str(), kept.generation), ("uid-1", 3));
    }

    /// A registered, accepted cluster that has not heartbeated yet.
    pub(crate) fn bare_record(name: &str) -> ClusterRecord {
        ClusterRecord {
            name: name.to_owned(),
            labels: BTreeMap::new(),
            region: None,
            zone: None,
            coordinates: None,
            registered_at: jiff::Timestamp::UNIX_EPOCH,
            agent_version: None,
            kubernetes_version: None,
            last_heartbeat_at: None,
            capacity: None,
            cordoned: false,
            burst_only: false,
            accepted: true,
            prune_confirmed: None,
        }
    }

    /// A store of its own in a temporary directory, kept as long as the directory.
    async fn scratch_store() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("hub.db").display());
        let store = crate::store::connect(&url).await.unwrap();
        (dir, store)
    }

    /// Registers `name` in `store`, with every other field at its default.
    async fn register(store: &dyn Store, name: &str) -> ClusterRecord {
        store
            .upsert_cluster(&crate::store::ClusterUpsert {
                name: name.to_owned(),
                ..Default::default()
            })
            .await
            .unwrap()
    }

    /// The ledger as it was computed before it was kept incrementally: every booking, every
    /// report as of its cluster's latest capacity (the latest report before any).
    fn ledger_from_scratch(index: &Index) -> Ledger {
        let reports = index.reports();
        let counted_reports = index.counted.read().unwrap().clone();
        let mut ledger = Ledger::new();
        for (workload, booking) in index.bookings.read().unwrap().iter() {
            for (cluster, &assigned) in &booking.replicas {
                let report = counted_reports.get(cluster).or_else(|| reports.get(cluster));
                let counted = counted_replicas(report.map(Arc::as_ref), workload);
                ledger.reserve(
                    cluster,
                    &workload.to_string(),
                    &booking.demand,
                    assigned.saturating_sub(counted),
                );
            }
        }
        ledger
    }

    #[tokio::test]
    async fn a_cluster_s_usage_report_is_kept_while_accepted_and_never_rolled_back() {
        let (_dir, store) = scratch_store().await;
        let index = Index::empty(store);
        index.put_cluster(bare_record("eu-1"));
        index.put_cluster(ClusterRecord {
            accepted: false,
            ..bare_record("stranger")
        });
        let web = WorkloadRef::new("shop", "web");
        let beat = |cpu: u64| Heartbeat {
            workload_usage: Some(vec![WorkloadUsage {
                workload: web.clone(),
                used: nave_api::wire::Resources::new(cpu, 0, 1),
                requested: nave_api::wire::Resources::new(100, 0, 1),
            }]),
            ..Heartbeat::default()
        };
        let grace = std::time::Duration::from_secs(40);
        let observe = |cluster: &str, at, beat: Heartbeat| {
            let capacity = serde_json::to_value(&beat.capacity).ok();
            index.observe_heartbeat(cluster, at, &beat, capacity, grace)
        };
        let t0 = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let t1 = t0 + jiff::SignedDuration::from_secs(10);
        observe("eu-1", t1, beat(50));
        // A retried, older heartbeat arrives last: it does not replace the newer measurement.
        observe("eu-1", t0, beat(90));
        let (at, usage) = index.workload_usage("eu-1", &web).expect("kept");
        assert_eq!((at, usage.used.cpu_millis), (t1, 50));
        // Measured, and none of db's pods: no pods, which is not "not measured".
        let db = index.workload_usage("eu-1", &WorkloadRef::new("shop", "db"));
        assert_eq!(db.map(|(_, u)| u.used.pods), Some(0));

        // A cluster the admin has not accepted reports nothing that is read.
        observe("stranger", t1, beat(50));
        assert_eq!(index.workload_usage("stranger", &web), None);

        // However many workloads an agent sends, no more than a heartbeat may carry are kept.
        let many: Vec<WorkloadUsage> = (0..Heartbeat::MAX_WORKLOAD_USAGE + 1)
            .map(|i| WorkloadUsage {
                workload: WorkloadRef::new("shop", format!("w{i}")),
                ..WorkloadUsage::default()
            })
            .collect();
        let t2 = t1 + jiff::SignedDuration::from_secs(10);
        let many = many
            .into_iter()
            .map(|u| WorkloadUsage {
                used: nave_api::wire::Resources::new(1, 0, 1),
                ..u
            })
            .collect::<Vec<_>>();
        index.put_usage("eu-1", t2, Some(&many));
        let pods = |name: String| {
            index
                .workload_usage("eu-1", &WorkloadRef::new("shop", name))
                .map(|(_, u)| u.used.pods)
        };
        assert_eq!(pods("w0".to_owned()), Some(1));
        assert_eq!(
            pods(format!("w{}", Heartbeat::MAX_WORKLOAD_USAGE)),
            Some(0),
            "not kept"
        );

        // The agent lost its metrics API: the cluster measures nothing, which is not zero.
        index.put_usage("eu-1", t2 + jiff::SignedDuration::from_secs(10), None);
        assert_eq!(index.workload_usage("eu-1", &web), None);

        // Acceptance withdrawn: what it reported before is not read either.
        observe("eu-1", t2 + jiff::SignedDuration::from_secs(20), beat(50));
        assert!(index.workload_usage("eu-1", &web).is_some());
        index.put_cluster(ClusterRecord {
            accepted: false,
            ..bare_record("eu-1")
        });
        assert_eq!(index.workload_usage("eu-1", &web), None);

        // A removed cluster's report goes with it.
        index.forget_cluster("eu-1");
        assert_eq!(index.workload_usage("eu-1", &web), None);
    }

    #[tokio::test]
    async fn the_ledger_kept_as_bookings_and_reports_change_is_the_one_computed_from_scratch() {
        let (_dir, store) = scratch_store().await;
        let index = Index::empty(store);
        let clusters = ["a", "b", "c"];
        for cluster in clusters {
            index.put_cluster(bare_record(cluster));
        }
        let names = ["web", "api", "db", "cache"];
        let demand = Demand {
            cpu_millis: 100,
            memory_bytes: 1 << 20,
            ..Demand::default()
        };
        // A fixed pseudo-random walk: bookings move, reports come and go.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for step in 0..600 {
            let workload = WorkloadRef::new("shop", names[next(4) as usize]);
            match next(5) {
                // A heartbeat with capacity: the reports so far are what it counts.
                3 => {
                    let capacity = Some(serde_json::json!({"step": step}));
                    index.heartbeat(
                        clusters[next(3) as usize],
                        jiff::Timestamp::now(),
                        capacity,
                        None,
                        None,
                    );
                }
                0 | 1 => {
                    let mut replicas = BTreeMap::new();
                    for cluster in clusters {
                        if next(2) == 0 {
                            replicas.insert(cluster.to_owned(), next(4) as u32);
                        }
                    }
                    // Sometimes the same replicas with a new demand (a changed request).
                    let demand = Demand {
                        cpu_millis: demand.cpu_millis * (1 + next(2)),
                        ..demand.clone()
                    };
                    index.book(&workload, Booking { demand, replicas });
                }
                2 => {
                    let cluster = clusters[next(3) as usize];
                    let mut objects = Vec::new();
                    for name in names {
                        if next(2) == 0 {
                            objects.push(deployment(name, next(4) as i32));
                        }
                    }
                    index.keep_report(
                        cluster,
                        StatusReport {
                            objects,
                            ..StatusReport::default()
                        },
                    );
                }
                _ => index.forget(&workload),
            }
            assert_eq!(
                index.with_ledger(Ledger::clone),
                ledger_from_scratch(&index),
                "after step {step}"
            );
        }
    }

    /// Pods a report shows ready keep their room reserved until a capacity that counts them
    /// comes: the capacity the cluster sent before they started does not.
    #[tokio::test]
    async fn replicas_reported_ready_hold_their_room_until_a_capacity_counts_them() {
        let (_dir, store) = scratch_store().await;
        let index = Index::empty(store);
        index.put_cluster(bare_record("a"));
        let web = WorkloadRef::new("shop", "web");
        let demand = Demand {
            cpu_millis: 1500,
            ..Demand::default()
        };
        let beat = |n: i64| {
            index.heartbeat(
                "a",
                jiff::Timestamp::from_second(1_800_000_000 + n).unwrap(),
                Some(serde_json::json!({"beat": n})),
                None,
                None,
            );
        };
        beat(0);
        index.book(
            &web,
            Booking {
                demand,
                replicas: BTreeMap::from([("a".to_owned(), 6)]),
            },
        );
        let reserved = || index.with_ledger(|l| l.reserved_replicas("a"));
        assert_eq!(reserved(), 6, "booked, nothing runs");
        index.keep_report(
            "a",
            StatusReport {
                objects: vec![deployment("web", 6)],
                ..StatusReport::default()
            },
        );
        assert_eq!(
            reserved(),
            6,
            "reported ready, but the capacity placement reads is from before they started"
        );
        beat(1);
        assert_eq!(reserved(), 0, "the next capacity counts them");
        assert_eq!(index.with_ledger(Ledger::clone), ledger_from_scratch(&index));
    }

    /// A new term's reload and the change feed's run at once when a replica starts; a cluster
    /// registered meanwhile must stay in the index, whichever reload ends last.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cluster_registered_during_two_reloads_stays_known() {
        let (_dir, store) = scratch_store().await;
        for n in 0..20 {
            register(&*store, &format!("old-{n}")).await;
        }
        let index = Arc::new(Index::empty(store.clone()));
        let mut lost = Vec::new();
        for round in 0..60 {
            let name = format!("new-{round}");
            let everything = {
                let index = index.clone();
                tokio::spawn(async move { index.reload(Reload::Everything).await })
            };
            let observations = {
                let index = index.clone();
                tokio::spawn(async move {
                    tokio::task::yield_now().await;
                    index.reload(Reload::Observations).await
                })
            };
            let record = register(&*store, &name).await;
            index.put_cluster(record);
            everything.await.unwrap().unwrap();
            observations.await.unwrap().unwrap();
            if index.cluster(&name).is_none() {
                lost.push(name);
            }
        }
        assert!(
            lost.is_empty(),
            "every cluster registered while the index reloaded is in it; lost: {lost:?}"
        );
    }

    #[tokio::test]
    async fn a_reloaded_index_reads_each_accepted_cluster_s_latest_usage_from_the_store() {
        let (_dir, store) = scratch_store().await;
        store.claim_term(None, "test").await.unwrap();
        for (cluster, accepted) in [("eu-1", true), ("stranger", false)] {
            store
                .upsert_cluster(&crate::store::ClusterUpsert {
                    name: cluster.to_owned(),
                    accepted,
                    ..Default::default()
                })
                .await
                .unwrap();
        }
        let web = WorkloadRef::new("shop", "web");
        let at = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        for cluster in ["eu-1", "stranger"] {
            let beat = Heartbeat {
                workload_usage: Some(vec![WorkloadUsage {
                    workload: web.clone(),
                    used: nave_api::wire::Resources::new(70, 0, 1),
                    requested: nave_api::wire::Resources::new(100, 0, 1),
                }]),
                ..Heartbeat::default()
            };
            store
                .record_heartbeat(&crate::store::NewHeartbeat {
                    cluster: cluster.to_owned(),
                    received_at: at,
                    payload: serde_json::to_value(&beat).unwrap(),
                    capacity: None,
                    agent_version: None,
                    kubernetes_version: None,
                })
                .await
                .unwrap();
        }
        let index = Index::empty(store);
        index.reload(Reload::Everything).await.unwrap();
        let kept = index
            .workload_usage("eu-1", &web)
            .map(|(at, u)| (at, u.used.cpu_millis));
        assert_eq!(kept, Some((at, 70)), "the stored heartbeat's usage");
        assert_eq!(
            index.workload_usage("stranger", &web),
            None,
            "not accepted: not read"
        );
    }

    #[tokio::test]
    async fn a_workload_touches_only_the_sets_that_hold_its_objects() {
        let (_dir, store) = scratch_store().await;
        store.claim_term(None, "test").await.unwrap();
        for cluster in ["a", "b", "c"] {
            register(&*store, cluster).await;
        }
        let object = |workload: &str, name: &str| {
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"namespace": "shop", "name": name,
                    "labels": {nave_api::wire::WORKLOAD_LABEL: format!("shop.{workload}")}}})
        };
        // b already holds web's objects in the store, from before this hub started.
        let mut held = ClusterWork::default();
        held.replace(
            &WorkloadRef::new("shop", "web"),
            vec![object("web", "web-config")],
        );
        store.put_work("b", &held.to_objects()).await.unwrap();
        let index = Index::empty(store);
        let clusters = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let web = WorkloadRef::new("shop", "web");
        let api = WorkloadRef::new("shop", "api");
        let mut work = index.work().await;
        assert_eq!(
            work.holding(&clusters, &web).await.unwrap(),
            BTreeSet::from(["b".to_owned()])
        );
        work.replace("a", &web, vec![object("web", "web-config")])
            .await
            .unwrap();
        work.replace("a", &api, vec![object("api", "api-config")])
            .await
            .unwrap();
        assert_eq!(
            work.holding(&clusters, &web).await.unwrap(),
            BTreeSet::from(["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(
            work.holding(&clusters, &api).await.unwrap(),
            BTreeSet::from(["a".to_owned()])
        );
        assert!(
            !work
                .replace("a", &api, vec![object("api", "api-config")])
                .await
                .unwrap(),
            "the same objects again change nothing"
        );
        work.replace("a", &web, Vec::new()).await.unwrap();
        assert_eq!(
            work.holding(&clusters, &web).await.unwrap(),
            BTreeSet::from(["b".to_owned()]),
            "a set that no longer holds web's objects is not touched for web"
        );
        // Written once, with every change since the last write.
        let writes = work.flush().await.unwrap();
        assert_eq!(
            writes
                .iter()
                .map(|(c, w)| (c.as_str(), w.revision))
                .collect::<Vec<_>>(),
            [("a", 1)]
        );
        assert!(work.flush().await.unwrap().is_empty(), "nothing more to write");
        let stored = work.store.get_work("a").await.unwrap().unwrap();
        assert_eq!(
            stored.objects.len(),
            2,
            "api's ConfigMap and its Namespace: {:?}",
            stored.objects
        );
        assert!(
            work.holding(&clusters[..1], &web).await.unwrap().is_empty(),
            "only the clusters asked"
        );
    }

    #[tokio::test]
    async fn the_sets_not_read_yet_are_read_between_and_around_those_read() {
        let (_dir, store) = scratch_store().await;
        store.claim_term(None, "test").await.unwrap();
        let web = WorkloadRef::new("shop", "web");
        let mut held = ClusterWork::default();
        held.replace(
            &web,
            vec![serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"namespace": "shop", "name": "web-config",
                    "labels": {nave_api::wire::WORKLOAD_LABEL: "shop.web"}}})],
        );
        for cluster in ["a", "b", "c", "d", "e"] {
            register(&*store, cluster).await;
            if cluster != "c" {
                store.put_work(cluster, &held.to_objects()).await.unwrap();
            }
        }
        let index = Index::empty(store);
        let mut work = index.work().await;
        // Read first: b and d, between and around the others.
        for cluster in ["b", "d"] {
            work.get(cluster).await.unwrap();
        }
        let clusters: Vec<String> = ["a", "b", "c", "d", "e"].map(str::to_owned).into();
        assert_eq!(
            work.holding(&clusters, &web).await.unwrap(),
            BTreeSet::from(["a", "b", "d", "e"].map(str::to_owned)),
            "every set holding web's objects, read before or not"
        );
    }

    #[test]
    fn a_reload_keeps_what_was_written_while_it_read() {
        let map = RwLock::new(BTreeMap::from([("a", 1), ("b", 2), ("d", 4)]));
        let read = BTreeMap::from([("a", 10), ("b", 20), ("c", 30), ("e", 50)]);
        // b and d were written during the reload; e was removed during it.
        merge(&map, read, &BTreeSet::from(["b", "d", "e"]));
        assert_eq!(
            *map.read().unwrap(),
            BTreeMap::from([("a", 10), ("b", 2), ("c", 30), ("d", 4)]),
            "untouched keys as read, touched keys as written (or gone)"
        );
    }

    #[tokio::test]
    async fn the_reports_listing_apply_errors_are_kept_apart_as_reports_come_and_a_reload_reads_them() {
        let (_dir, store) = scratch_store().await;
        let index = Index::empty(store);
        let refused = nave_api::wire::ApplyError {
            kind: "Deployment".to_owned(),
            namespace: Some("shop".to_owned()),
            name: "web".to_owned(),
            message: "exceeded quota".to_owned(),
            ..nave_api::wire::ApplyError::default()
        };
        let failing = StatusReport {
            apply_errors: vec![refused],
            ..StatusReport::default()
        };
        let erring = |index: &Index| index.erring().keys().cloned().collect::<Vec<_>>();
        index.keep_report("a", failing.clone());
        index.keep_report("b", StatusReport::default());
        index.keep_report("c", failing.clone());
        assert_eq!(
            erring(&index),
            ["a", "c"],
            "the clusters whose reports list apply errors"
        );
        assert_eq!(index.erring()["a"], index.reports()["a"], "the same report");
        index.keep_report("a", StatusReport::default());
        index.keep_report("b", failing);
        assert_eq!(erring(&index), ["b", "c"], "a's errors went, b's came");
        index.forget_cluster("c");
        assert_eq!(erring(&index), ["b"], "a removed cluster's errors went with it");
        // The store holds none of these reports: a reload reads none, and none lists errors.
        index.reload(Reload::Everything).await.unwrap();
        assert!(index.reports().is_empty(), "{:?}", index.reports());
        assert_eq!(
            erring(&index),
            Vec::<String>::new(),
            "after a reload that read no report"
        );
    }

    #[tokio::test]
    async fn a_plan_s_copy_of_reports_and_pending_pods_stays_as_it_was_taken() {
        let (_dir, store) = scratch_store().await;
        let index = Index::empty(store);
        let stuck = |name: &str| PendingPod {
            name: name.to_owned(),
            ..PendingPod::default()
        };
        index.put_pending("a", vec![stuck("p1")]);
        index.keep_report(
            "a",
            StatusReport {
                objects: vec![deployment("web", 1)],
                ..StatusReport::default()
            },
        );
        let (reports, pending) = (index.reports(), index.pending());

        index.keep_report(
            "a",
            StatusReport {
                objects: vec![deployment("web", 2)],
                ..StatusReport::default()
            },
        );
        index.keep_report("b", StatusReport::default());
        index.put_pending("a", vec![stuck("p1"), stuck("p2")]);
        index.put_pending("b", vec![stuck("q1")]);
        assert_eq!(
            (reports["a"].objects.clone(), reports.len()),
            (vec![deployment("web", 1)], 1),
            "the copy taken before keeps a's first report and no b"
        );
        assert_eq!(
            (pending["a"].len(), pending.len()),
            (1, 1),
            "the copy taken before keeps a's one Pending pod and no b: {pending:?}"
        );
        assert_eq!(
            index.reports()["a"].objects,
            [deployment("web", 2)],
            "the index has the new one"
        );

        index.put_pending("a", Vec::new());
        index.forget_cluster("b");
        assert!(
            index.pending().is_empty(),
            "a cluster without Pending pods, and a removed one, are not held: {:?}",
            index.pending()
        );
        assert!(
            !index.reports().contains_key("b"),
            "a removed cluster's report is not held"
        );
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
