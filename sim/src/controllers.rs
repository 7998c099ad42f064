//! The simulated control plane of one cluster: node setup, scheduler, ReplicaSet and Deployment
//! controllers, kubelet-like pod lifecycle, node lifecycle, and the kube-state-metrics view.
//!
//! Every controller is an ordinary kube-rs client of the cluster's API (over the in-process
//! transport), so watches see the same event sequences a real control plane produces.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::ClusterConfig;

/// The running control plane of one simulated cluster.
#[derive(Debug, Default)]
pub struct ControlPlane {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ControlPlane {
    /// Creates the configured nodes and starts every controller; they stop when `shutdown` is
    /// cancelled.
    pub async fn start(
        client: kube::Client,
        config: Arc<ClusterConfig>,
        shutdown: CancellationToken,
    ) -> Result<ControlPlane, kube::Error> {
        let _ = (client, config, shutdown);
        Ok(ControlPlane::default())
    }

    /// The kube-state-metrics-style exposition of the cluster's current state (Prometheus text).
    pub fn render_metrics(&self) -> String {
        String::new()
    }

    /// Admin routes of the control plane (node control, foreign pods, usage), mounted under
    /// `/_sim/v1` by the server.
    pub fn admin_router(&self) -> axum::Router {
        axum::Router::new()
    }

    /// Waits for every controller task to finish (after shutdown).
    pub async fn join(self) {
        for task in self.tasks {
            let _ = task.await;
        }
    }
}
