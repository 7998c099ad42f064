//! The fleet as the placement engine sees it, gathered from the store and the management
//! cluster. Shared by the MultiClusterDeployment controller (which acts on a decision) and the
//! REST API (which shows clusters and simulates decisions without acting).
//!
//! ```text
//!  store: clusters (capacity, last heartbeat) ─┐
//!  WorkloadClusters (labels, cordon, burst) ───┴─► gather ─► Fleet (+ the records and objects)
//!  Prometheus (usage) ────────────────────────────────────► with_usage
//!  agents' round trips, network coordinates ──────────────► with_network
//! ```
//!
//! The agents' reports and the ledger of other workloads' replicas come from
//! [`crate::index::Index`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, ListParams};
use nave_api::WorkloadCluster;
use nave_api::wire::{StatusReport, WorkloadRef};
use nave_policies::{Capacity, Fleet};

use crate::error::Error;
use crate::network::Network;
use crate::prometheus::{Usage, UsageCache};
use crate::scheduler;
use crate::store::{ClusterRecord, Store};

/// Every cluster the hub knows of, at one instant.
#[derive(Debug)]
pub struct FleetView {
    /// The placement engine's clusters: every registered cluster and every WorkloadCluster.
    pub fleet: Fleet,
    /// The store's records of the registered clusters, by name.
    pub records: BTreeMap<String, ClusterRecord>,
    /// The WorkloadCluster objects, by name.
    pub objects: BTreeMap<String, WorkloadCluster>,
    /// Names of the registered clusters (those with an agent), sorted.
    pub registered: Vec<String>,
    /// When the view was taken; readiness is judged against it.
    pub now: jiff::Timestamp,
    /// Fresh measured usage by cluster ([`FleetView::with_usage`]); empty without Prometheus.
    pub usage: Usage,
}

impl FleetView {
    /// The view with `cache`'s fresh usage put into the clusters' capacity models, where it
    /// replaces requests in utilization and ranks by measured headroom (see `nave-policies`).
    /// Clusters without fresh values, or with unknown capacity, keep counting requests.
    pub fn with_usage(mut self, cache: &UsageCache) -> FleetView {
        self.usage = cache.fresh(self.now);
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

/// Reads the registered clusters and the WorkloadClusters and builds the placement engine's
/// fleet from them. A cluster is ready when its last heartbeat is younger than `grace`.
pub async fn gather(client: &kube::Client, store: &dyn Store, grace: Duration) -> Result<FleetView, Error> {
    let records = store
        .list_clusters()
        .await
        .map_err(Error::store("listing clusters"))?;
    let objects: Api<WorkloadCluster> = Api::all(client.clone());
    let objects = objects
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing WorkloadClusters"))?;
    let objects: BTreeMap<String, WorkloadCluster> =
        objects.items.into_iter().map(|o| (o.name_any(), o)).collect();
    let records: BTreeMap<String, ClusterRecord> = records.into_iter().map(|r| (r.name.clone(), r)).collect();
    let names: BTreeSet<&String> = records.keys().chain(objects.keys()).collect();
    let now = jiff::Timestamp::now();
    let mut fleet = Fleet::new();
    for name in &names {
        fleet.insert(scheduler::fleet_cluster(
            name,
            records.get(*name),
            objects.get(*name),
            now,
            grace,
        ));
    }
    let registered = records.keys().cloned().collect();
    Ok(FleetView {
        fleet,
        records,
        objects,
        registered,
        now,
        usage: Usage::new(),
    })
}

/// `(ready, available, pending)` of the workload's Deployment in one report.
pub fn deployment_status(report: Option<&StatusReport>, workload: &WorkloadRef) -> Option<(i32, i32, i32)> {
    let object = report?.objects.iter().find(|o| {
        o.kind == "Deployment"
            && o.name == workload.name
            && o.namespace.as_deref() == Some(&workload.namespace)
    })?;
    Some((
        object.ready_replicas.unwrap_or(0),
        object.available_replicas.unwrap_or(0),
        object
            .pending_pods
            .map_or(0, |p| i32::try_from(p).unwrap_or(i32::MAX)),
    ))
}
