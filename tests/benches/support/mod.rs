//! What the benches that run the hub and agents over simulated clusters share.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt as _};
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use nave_api::{MultiClusterDeployment, WorkloadCluster};

/// The sizes in the comma-separated environment variable `var`, else in `default`.
pub fn sizes(var: &str, default: &str) -> Vec<usize> {
    std::env::var(var)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect()
}

/// Replicas available, summed over the workloads.
pub fn available<M: std::borrow::Borrow<MultiClusterDeployment>>(mcds: &[M]) -> i32 {
    mcds.iter()
        .filter_map(|m| m.borrow().status.as_ref())
        .map(|s| s.available_replicas)
        .sum()
}

/// Whether a watch event says the watch has listed every object.
fn listed<K>(event: &Result<watcher::Event<K>, watcher::Error>) -> bool {
    matches!(event, Ok(watcher::Event::InitDone))
}

/// Every MultiClusterDeployment and WorkloadCluster as their watches deliver them: each status
/// the hub writes is seen, with no sampling interval.
pub struct Follower {
    events: BoxStream<'static, bool>,
    /// The MultiClusterDeployments now.
    pub mcds: Store<MultiClusterDeployment>,
    /// The WorkloadClusters now.
    pub clusters: Store<WorkloadCluster>,
}

impl Follower {
    /// Starts both watches; answers once both have listed.
    pub async fn start(client: &kube::Client, namespace: &str) -> anyhow::Result<Follower> {
        let (mcds, mcd_writer) = reflector::store();
        let (clusters, cluster_writer) = reflector::store();
        let mcd_events = reflector::reflector(
            mcd_writer,
            watcher(
                Api::<MultiClusterDeployment>::namespaced(client.clone(), namespace),
                watcher::Config::default(),
            ),
        )
        .default_backoff()
        .map(|e| listed(&e));
        let cluster_events = reflector::reflector(
            cluster_writer,
            watcher(
                Api::<WorkloadCluster>::all(client.clone()),
                watcher::Config::default(),
            ),
        )
        .default_backoff()
        .map(|e| listed(&e));
        let mut follower = Follower {
            events: futures::stream::select(mcd_events, cluster_events).boxed(),
            mcds,
            clusters,
        };
        let mut lists = 0;
        while lists < 2 {
            match follower.events.next().await {
                Some(true) => lists += 1,
                Some(false) => {}
                None => anyhow::bail!("a watch ended before it listed"),
            }
        }
        Ok(follower)
    }

    /// Follows every change until `done` holds of the MultiClusterDeployments and
    /// WorkloadClusters, at most `limit`; answers the fewest replicas available at any change.
    pub async fn until(
        &mut self,
        limit: Duration,
        what: &str,
        mut done: impl FnMut(&[Arc<MultiClusterDeployment>], &[Arc<WorkloadCluster>]) -> bool,
    ) -> anyhow::Result<i32> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut fewest = i32::MAX;
        loop {
            let (mcds, clusters) = (self.mcds.state(), self.clusters.state());
            fewest = fewest.min(available(&mcds));
            if done(&mcds, &clusters) {
                return Ok(fewest);
            }
            match tokio::time::timeout_at(deadline, self.events.next()).await {
                Ok(Some(_)) => {}
                Ok(None) => anyhow::bail!("a watch ended before {what}"),
                Err(_) => anyhow::bail!("not {what} after {} s", limit.as_secs()),
            }
        }
    }
}
