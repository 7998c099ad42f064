//! The candidate clusters, as the hub knows them from WorkloadClusters and agent heartbeats.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use crate::capacity::Capacity;
use crate::network::NetworkCoordinate;
use crate::selector::Labels;

mod layout;

pub(crate) use layout::Layout;

/// Cluster label naming its region, as on Kubernetes nodes.
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// Cluster label naming its zone, as on Kubernetes nodes.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// A point on Earth, in degrees.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Coordinates {
    /// Latitude, -90 to 90.
    pub latitude: f64,
    /// Longitude, -180 to 180.
    pub longitude: f64,
}

impl Coordinates {
    /// A point from latitude and longitude in degrees.
    pub const fn new(latitude: f64, longitude: f64) -> Self {
        Coordinates { latitude, longitude }
    }

    /// Great-circle distance in kilometres (haversine on a sphere of radius 6371 km).
    pub fn distance_km(&self, other: &Coordinates) -> f64 {
        const EARTH_RADIUS_KM: f64 = 6371.0;
        let (lat1, lat2) = (self.latitude.to_radians(), other.latitude.to_radians());
        let dlat = lat2 - lat1;
        let dlon = (other.longitude - self.longitude).to_radians();
        let a = (dlat / 2.0).sin().powi(2) + lat1.cos() * lat2.cos() * (dlon / 2.0).sin().powi(2);
        2.0 * EARTH_RADIUS_KM * a.sqrt().min(1.0).asin()
    }
}

/// One workload cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cluster {
    /// Name of the WorkloadCluster; unique in a fleet, and the tie-break everywhere.
    pub name: String,
    /// WorkloadCluster labels (region, zone, anything a `clusterSelector` may use).
    pub labels: Labels,
    /// Cordoned: keeps its replicas, gets no new ones.
    pub unschedulable: bool,
    /// Joined but not accepted by the fleet's admin: gets no replicas, and those it has move
    /// away. Its labels select nothing meanwhile.
    pub unaccepted: bool,
    /// Condition `Ready`. A cluster that is not ready gets no new replicas and keeps its
    /// current ones here; moving them (failover after a grace period) is the caller's call,
    /// through [`Request::evacuate`](crate::Request::evacuate).
    pub ready: bool,
    /// Used only for overflow, and emptied first on scale-down.
    pub burst_only: bool,
    /// Taints: a workload that does not tolerate one takes no new replicas here, and moves
    /// those it has away when the taint is `NoExecute`.
    pub taints: Vec<crate::ClusterTaint>,
    /// Location, for proximity.
    pub coordinates: Option<Coordinates>,
    /// Measured round-trip latency from this cluster to others, by cluster name.
    pub latencies: BTreeMap<String, Duration>,
    /// Network coordinate fitted to the fleet's measured latencies, for pairs never measured.
    pub network: Option<NetworkCoordinate>,
    /// What the agent last reported.
    pub capacity: Capacity,
    /// The minor version of the cluster's Kubernetes (`32` for 1.32), when its agent said.
    pub kubernetes_minor: Option<u32>,
}

impl Cluster {
    /// A ready, schedulable, regular cluster with no labels.
    pub fn new(name: impl Into<String>, capacity: Capacity) -> Self {
        Cluster {
            name: name.into(),
            ready: true,
            capacity,
            ..Cluster::default()
        }
    }

    /// The value of [`REGION_LABEL`].
    pub fn region(&self) -> Option<&str> {
        self.labels.get(REGION_LABEL).map(String::as_str)
    }

    /// The value of [`ZONE_LABEL`].
    pub fn zone(&self) -> Option<&str> {
        self.labels.get(ZONE_LABEL).map(String::as_str)
    }

    /// Measured latency between this cluster and `other`, from either side's samples; the lower
    /// one when both sides measured.
    pub fn latency_to(&self, other: &Cluster) -> Option<Duration> {
        match (self.latencies.get(&other.name), other.latencies.get(&self.name)) {
            (Some(a), Some(b)) => Some(*a.min(b)),
            (a, b) => a.or(b).copied(),
        }
    }

    /// Latency between this cluster and `other` estimated from both network coordinates, when
    /// both are trusted.
    pub fn estimated_latency_to(&self, other: &Cluster) -> Option<Duration> {
        self.network?.estimate_to(&other.network?)
    }
}

/// The clusters a decision may use, by name.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    clusters: BTreeMap<String, Cluster>,
    /// Their nodes laid out for decisions, made by the first decision after a change.
    layout: OnceLock<Layout>,
}

impl PartialEq for Fleet {
    fn eq(&self, other: &Self) -> bool {
        self.clusters == other.clusters
    }
}

impl Fleet {
    /// An empty fleet.
    pub fn new() -> Self {
        Fleet::default()
    }

    /// Adds or replaces the cluster of that name.
    pub fn insert(&mut self, cluster: Cluster) {
        self.clusters.insert(cluster.name.clone(), cluster);
        self.layout = OnceLock::new();
    }

    /// The cluster of that name.
    pub fn get(&self, name: &str) -> Option<&Cluster> {
        self.clusters.get(name)
    }

    /// Clusters in name order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Cluster> + ExactSizeIterator {
        self.clusters.values()
    }

    /// The nodes of the clusters, in name order, laid out for decisions.
    pub(crate) fn layout(&self) -> &Layout {
        self.layout.get_or_init(|| Layout::of(self.clusters.values()))
    }

    /// Number of clusters.
    pub fn len(&self) -> usize {
        self.clusters.len()
    }

    /// Whether the fleet has no clusters.
    pub fn is_empty(&self) -> bool {
        self.clusters.is_empty()
    }
}

impl FromIterator<Cluster> for Fleet {
    fn from_iter<I: IntoIterator<Item = Cluster>>(iter: I) -> Self {
        let mut fleet = Fleet::new();
        for cluster in iter {
            fleet.insert(cluster);
        }
        fleet
    }
}
