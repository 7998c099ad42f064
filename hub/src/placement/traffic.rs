//! The traffic a plan reads (policy `traffic`): each cluster's, and each workload's where the
//! hub's traffic query labels it. Filled by [`crate::usage`]; pure data here, so that placement
//! stays free of the Prometheus client.

use std::collections::BTreeMap;
use std::sync::Arc;

use nave_policies::{Traffic, TrafficScope};

/// Traffic by workload (namespace, name), then by cluster.
pub type WorkloadTraffic = BTreeMap<(String, String), BTreeMap<String, f64>>;

/// The traffic placement reads: by cluster, and by workload where the query labels it.
#[derive(Clone, Debug, Default)]
pub struct TrafficView {
    /// Each cluster's traffic in all.
    pub clusters: BTreeMap<String, f64>,
    /// Each workload's traffic by cluster, for the workloads the query labels.
    pub workloads: Arc<WorkloadTraffic>,
}

impl TrafficView {
    /// The traffic `workload`'s replicas are divided by: its own where the query measured
    /// some, else its clusters' (empty when neither was measured).
    pub fn of(&self, namespace: &str, name: &str) -> Traffic {
        let own = self
            .workloads
            .get(&(namespace.to_owned(), name.to_owned()))
            .filter(|by_cluster| by_cluster.values().any(|v| v.is_finite() && *v > 0.0));
        match own {
            Some(by_cluster) => Traffic::new(by_cluster.clone(), TrafficScope::Workload),
            None => Traffic::new(self.clusters.clone(), TrafficScope::Cluster),
        }
    }
}
