//! The fleet as the placement engine sees it, and everything else a plan reads, gathered from
//! memory. Shared by the MultiClusterDeployment controller (which acts on a plan) and the REST
//! API (which shows clusters and simulates plans without acting), so both see the same inputs.
//!
//! ```text
//!  index: cluster records (capacity, last heartbeat) ─┐
//!  reflector: WorkloadClusters (labels, cordon, burst) ┴─► Sources::view ─► Fleet
//!  Prometheus (usage) ──────────────────────────────────────────► with_usage
//!  agents' round trips, network coordinates ────────────────────► with_network
//!  index: reports, Pending pods; health snapshot ─► Sources::gather ─┐
//!  index: the ledger, read in place ────────────────────────────────┴► placement Inputs
//! ```
//!
//! A reconcile reads no list over the network: the store is read at start-up (into the index)
//! and written through; the management cluster's objects come from reflectors.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::reflector;
use nave_api::wire::WorkloadRef;
use nave_api::{MultiClusterDeployment, WorkloadCluster};
use nave_policies::{Capacity, Fleet, Ledger};

use crate::cluster_health::{FleetHealth, HealthSnapshot};
use crate::error::Error;
use crate::index::Index;
use crate::network::Network;
use crate::placement::{Inputs, Pending, Previous, Reports, Valid, inputs};
use crate::store::ClusterRecord;
use crate::usage::{TrafficView, Usage, UsageCache};
use crate::watch::Ready;

/// Every cluster the hub knows of, at one instant.
#[derive(Debug)]
pub struct FleetView {
    /// The placement engine's clusters: every registered cluster and every WorkloadCluster.
    pub fleet: Fleet,
    /// The records of the registered clusters, by name.
    pub records: BTreeMap<String, Arc<ClusterRecord>>,
    /// The WorkloadCluster objects, by name.
    pub objects: BTreeMap<String, Arc<WorkloadCluster>>,
    /// Names of the registered clusters (those with an agent), sorted.
    pub registered: Vec<String>,
    /// When the view was taken; readiness is judged against it.
    pub now: jiff::Timestamp,
    /// Fresh measured usage by cluster ([`FleetView::with_usage`]); empty without Prometheus.
    pub usage: Usage,
    /// Fresh traffic by cluster and by workload ([`FleetView::with_usage`]); empty without a
    /// traffic query.
    pub traffic: TrafficView,
}

impl FleetView {
    /// The view with `cache`'s fresh usage put into the clusters' capacity models, where it
    /// replaces requests in utilization and ranks by measured headroom (see `nave-policies`).
    /// Clusters without fresh values, or with unknown capacity, keep counting requests.
    pub fn with_usage(mut self, cache: &UsageCache) -> FleetView {
        self.usage = cache.fresh(self.now);
        self.traffic = TrafficView {
            clusters: self
                .usage
                .iter()
                .filter_map(|(name, m)| m.traffic.map(|t| (name.clone(), t)))
                .collect(),
            workloads: cache.fresh_workloads(self.now),
        };
        for (name, measured) in &self.usage {
            let Some(mut cluster) = self.fleet.get(name).cloned() else {
                continue;
            };
            if let Capacity::Known(model) = &mut cluster.capacity {
                model.usage = measured.usage(model.utilization(&[]).used);
                self.fleet.insert(cluster);
            }
        }
        self
    }

    /// The view with the round trips the agents measured ([`Cluster::latencies`]) and the
    /// network coordinates fitted to them ([`Cluster::network`]), which proximity ranks by.
    ///
    /// [`Cluster::latencies`]: nave_policies::Cluster::latencies
    /// [`Cluster::network`]: nave_policies::Cluster::network
    pub fn with_network(mut self, network: &Network) -> FleetView {
        let measured = network.measured();
        let coordinates = network.coordinates();
        let names: Vec<String> = self.fleet.iter().map(|c| c.name.clone()).collect();
        for name in names {
            let latencies = measured.get(&name);
            let coordinate = coordinates.get(&name).copied();
            if latencies.is_none() && coordinate.is_none() {
                continue;
            }
            let Some(mut cluster) = self.fleet.get(&name).cloned() else {
                continue;
            };
            if let Some(latencies) = latencies {
                cluster.latencies = latencies.clone();
            }
            cluster.network = coordinate;
            self.fleet.insert(cluster);
        }
        self
    }
}

/// What placement reads, all held in memory, with the handles to read it: the controller plans
/// with it and the REST API shows and simulates with it, so both see the same fleet.
#[derive(Clone)]
pub struct Sources {
    /// The WorkloadCluster objects, kept by a reflector ([`crate::watch`]).
    pub objects: reflector::Store<WorkloadCluster>,
    /// Whether `objects` has been listed once.
    pub objects_ready: Ready,
    /// Cluster records, agents' reports, Pending pods, bookings, round trips.
    pub index: Arc<Index>,
    /// The fleet's health as the health loop last saw it.
    pub health: Arc<FleetHealth>,
    /// Per-cluster usage measured by Prometheus (always empty without `--prometheus-url`).
    pub usage: Arc<UsageCache>,
    /// A cluster without a heartbeat for this long is not Ready.
    pub grace: Duration,
    /// Grows when a WorkloadCluster's spec or labels change (see [`crate::watch`]).
    pub objects_version: Arc<AtomicU64>,
    /// The last view, reused while it is current (see [`Sources::view`]).
    pub cache: ViewCache,
    /// The replicas each workload's latest plan left unplaced, for a provisioner.
    pub unplaced: Arc<crate::provisioner::Unplaced>,
    /// The workloads placed by policy `traffic`, planned again when their traffic shifts.
    pub followers: Arc<crate::usage::Followers>,
}

/// How long a view of the fleet is reused while no cluster changed: readiness (a heartbeat's
/// age against the grace) and round trips may be this much behind; a new answer from Prometheus
/// takes a new view (policy `traffic` is planned again when it shifts).
pub const VIEW_TTL: Duration = Duration::from_millis(250);

/// The last view of the fleet (see [`Sources::view`]), when each cluster taint without a
/// `timeAdded` was first seen (its tolerations count from then), and each cluster's capacity
/// as last read from its model.
#[derive(Clone, Debug, Default)]
pub struct ViewCache {
    last: Arc<Mutex<Option<CachedView>>>,
    taints_seen: Arc<Mutex<inputs::TaintsSeen>>,
    capacities: Arc<Mutex<HashMap<String, ReadCapacity>>>,
}

/// A capacity model as stored and the capacity read from it. A view is built several times a
/// second while thousands of clusters heartbeat, and their capacity rarely changes: the model is
/// read again only when it is another one, which its address nearly always tells (a heartbeat
/// carrying the same model keeps the one held), its content otherwise.
#[derive(Debug)]
struct ReadCapacity {
    model: Option<Arc<serde_json::Value>>,
    capacity: Capacity,
}

impl ReadCapacity {
    fn reads(&self, model: Option<&Arc<serde_json::Value>>) -> bool {
        match (&self.model, model) {
            (Some(read), Some(model)) => Arc::ptr_eq(read, model) || read == model,
            (read, model) => read.is_none() && model.is_none(),
        }
    }
}

/// A view of the fleet, when it was taken and the versions of what it was taken of.
#[derive(Debug)]
struct CachedView {
    at: Instant,
    versions: (u64, u64, u64, u64),
    view: Arc<FleetView>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

/// Everything a plan of one workload reads, owned, but the ledger (read in place, see
/// [`crate::index::Index::with_ledger`]); [`Gathered::inputs`] lends it to
/// [`crate::placement::plan`].
#[derive(Debug)]
pub struct Gathered {
    /// The fleet.
    pub view: Arc<FleetView>,
    /// The agents' latest reports.
    pub reports: Reports,
    /// Those of them that list apply errors (taken after `reports`: it holds every cluster
    /// whose report there lists some, unless a newer report without any came meanwhile).
    pub erring: Reports,
    /// The clusters' Pending pods.
    pub pending: Pending,
    /// The fleet's health.
    pub health: Arc<HealthSnapshot>,
    /// The workload's stored placement, when there is one of this incarnation.
    pub previous: Option<Previous>,
    /// When it was gathered: what the plan's clocks (timeouts, cooldowns) read, and the time
    /// its placement is recorded at. The view may be a little older (see [`VIEW_TTL`]).
    pub now: jiff::Timestamp,
}

impl Gathered {
    /// The plan's inputs for `mcd`, with the room taken by replicas not reported running.
    pub fn inputs<'a>(
        &'a self,
        workload: &'a WorkloadRef,
        mcd: &'a MultiClusterDeployment,
        valid: &'a Valid,
        ledger: &'a Ledger,
    ) -> Inputs<'a> {
        Inputs {
            workload,
            mcd,
            valid,
            previous: self.previous.as_ref(),
            fleet: &self.view.fleet,
            traffic: &self.view.traffic,
            ledger,
            reports: &self.reports,
            pending: &self.pending,
            health: &self.health,
            now: self.now,
        }
    }
}

impl Sources {
    /// Waits until the WorkloadClusters have been listed once (at start-up), so that nothing
    /// plans or answers on a fleet that only looks empty.
    pub async fn ready(&self) -> Result<(), Error> {
        self.objects_ready.wait("WorkloadClusters").await
    }

    /// The fleet now: every registered cluster and every WorkloadCluster, with measured usage
    /// and round trips. Reads memory only. A view is shared by the plans that ask within
    /// [`VIEW_TTL`] of it while no cluster's record, object or round trips changed: building it
    /// reads every cluster's capacity model, which a burst of reconciles would otherwise do for
    /// each one. (A round trip measured for the first time must reach the next plan: placement
    /// is steady, so a plan made on a view without it would keep its choice.)
    pub fn view(&self) -> Arc<FleetView> {
        let version = (
            self.index.clusters_version(),
            self.objects_version.load(Ordering::SeqCst),
            self.index.network().generation(),
            self.usage.generation(),
        );
        let mut cache = self.cache.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cached) = cache.as_ref()
            && cached.versions == version
            && cached.at.elapsed() < VIEW_TTL
        {
            return cached.view.clone();
        }
        let view = Arc::new(self.build_view());
        *cache = Some(CachedView {
            at: Instant::now(),
            versions: version,
            view: view.clone(),
        });
        view
    }

    fn build_view(&self) -> FleetView {
        let records = self.index.clusters();
        let objects: BTreeMap<String, Arc<WorkloadCluster>> = self
            .objects
            .state()
            .into_iter()
            .map(|o| (o.name_any(), o))
            .collect();
        let names: BTreeSet<&String> = records.keys().chain(objects.keys()).collect();
        let now = jiff::Timestamp::now();
        let mut fleet = Fleet::new();
        let mut taints_seen = self.cache.taints_seen.lock().unwrap_or_else(|e| e.into_inner());
        taints_seen.keep_only(&objects);
        let mut capacities = self.cache.capacities.lock().unwrap_or_else(|e| e.into_inner());
        let mut read = HashMap::with_capacity(names.len());
        for name in &names {
            let object = objects.get(*name).map(Arc::as_ref);
            let record = records.get(*name).map(Arc::as_ref);
            let model = record.and_then(|r| r.capacity.as_ref());
            let known = capacities
                .remove(*name)
                .filter(|known| known.reads(model))
                .unwrap_or_else(|| ReadCapacity {
                    model: model.cloned(),
                    capacity: inputs::record_capacity(model.map(Arc::as_ref)),
                });
            let mut cluster =
                inputs::fleet_cluster(name, record, object, now, self.grace, known.capacity.clone());
            cluster.taints = inputs::cluster_taints(name, object, now, &mut taints_seen);
            fleet.insert(cluster);
            read.insert((*name).clone(), known);
        }
        *capacities = read;
        drop(capacities);
        drop(taints_seen);
        let registered = records.keys().cloned().collect();
        FleetView {
            fleet,
            records,
            objects,
            registered,
            now,
            usage: Usage::new(),
            traffic: TrafficView::default(),
        }
        .with_usage(&self.usage)
        .with_network(self.index.network())
    }

    /// What a plan of one workload reads, with its stored placement `previous` (read by the
    /// caller: one row of the store).
    pub fn gather(&self, previous: Option<Previous>) -> Gathered {
        let view = self.view();
        let reports = self.index.reports();
        Gathered {
            view,
            reports,
            erring: self.index.erring(),
            pending: self.index.pending(),
            health: self.health.snapshot(),
            previous,
            now: jiff::Timestamp::now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use nave_api::wire;

    use super::*;

    fn model(cpu_millis: u64) -> serde_json::Value {
        let node = wire::NodeCapacity {
            name: "n1".to_owned(),
            allocatable: wire::Resources::new(cpu_millis, 1 << 30, 110),
            ready: true,
            ..wire::NodeCapacity::default()
        };
        serde_json::to_value(wire::CapacityModel {
            node_groups: vec![wire::NodeGroup {
                nodes: vec![node],
                ..wire::NodeGroup::default()
            }],
            ..wire::CapacityModel::default()
        })
        .unwrap()
    }

    #[tokio::test]
    async fn a_view_reads_a_cluster_s_capacity_again_only_when_its_model_changed() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::connect(&format!("sqlite://{}", dir.path().join("hub.db").display()))
            .await
            .unwrap();
        let index = Arc::new(Index::empty(store));
        index.put_cluster(crate::index::tests::bare_record("a"));
        let (objects, _writer) = reflector::store();
        let sources = Sources {
            objects,
            objects_ready: Ready::now(),
            index: index.clone(),
            health: Arc::default(),
            usage: Arc::default(),
            grace: Duration::from_secs(40),
            objects_version: Arc::default(),
            cache: ViewCache::default(),
            unplaced: Arc::default(),
            followers: Arc::default(),
        };
        let capacity_in_view = || {
            sources
                .view()
                .fleet
                .get("a")
                .expect("a in the view")
                .capacity
                .clone()
        };
        assert_eq!(capacity_in_view(), Capacity::Unknown, "no heartbeat yet");

        let mut at = jiff::Timestamp::now();
        for cpu in [1000, 1000, 4000, 4000, 1000] {
            at += jiff::SignedDuration::from_secs(10);
            index.heartbeat("a", at, Some(model(cpu)), None, None);
            assert_eq!(
                capacity_in_view(),
                inputs::record_capacity(Some(&model(cpu))),
                "the view after a heartbeat of {cpu}m CPU"
            );
        }
        let held = || {
            index
                .cluster("a")
                .and_then(|r| r.capacity.clone())
                .expect("a's capacity")
        };
        let before = held();
        index.heartbeat(
            "a",
            at + jiff::SignedDuration::from_secs(10),
            Some(model(1000)),
            None,
            None,
        );
        assert!(
            Arc::ptr_eq(&before, &held()),
            "expected a heartbeat carrying the same model to keep the one held, saw another"
        );
        let read = sources.cache.capacities.lock().unwrap();
        assert_eq!(read.len(), 1, "one capacity kept per cluster");
        assert_eq!(
            read["a"].model.as_deref(),
            Some(&model(1000)),
            "the model last read"
        );
        assert!(
            read["a"].model.as_ref().is_some_and(|m| Arc::ptr_eq(m, &before)),
            "expected the view to share the model the index holds, not a copy"
        );
    }
}
