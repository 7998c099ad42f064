//! What the MultiClusterDeployment controller's reconciles read and write through.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::runtime::events::{Recorder, Reporter};

use crate::fleet::Sources;
use crate::metrics::HubMetrics;
use crate::settings::HUB_NAME;
use crate::signals::WorkSignals;
use crate::store::Store;
use crate::watch::Watched;

/// What the MultiClusterDeployment controller's reconciles need, and nothing else.
#[derive(Clone)]
pub struct Context {
    /// Client of the management cluster (ConfigMaps and Secrets to copy, status, finalizers).
    pub client: kube::Client,
    /// Placements and work sets are written here.
    pub store: Arc<dyn Store>,
    /// Publishes Kubernetes Events on the MultiClusterDeployments.
    pub recorder: Recorder,
    /// Wakes agents' long-polls when a cluster's work changes.
    pub signals: Arc<WorkSignals>,
    /// What plans read: the fleet, the index, health and usage.
    pub sources: Sources,
    /// The reflected WorkloadClusters and MultiClusterServices.
    pub watched: Watched,
    /// Prometheus metrics.
    pub metrics: Arc<HubMetrics>,
    /// Longest time between two reconciles of one object.
    pub resync: Duration,
    /// Failed reconciles in a row per object (`namespace/name`), for the retry backoff.
    pub backoff: Arc<Mutex<HashMap<String, u32>>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("store", &self.store)
            .field("resync", &self.resync)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// The controller's context; its Events name the hub (and the pod, from `POD_NAME`).
    pub fn new(
        client: kube::Client,
        store: Arc<dyn Store>,
        signals: Arc<WorkSignals>,
        sources: Sources,
        watched: Watched,
        metrics: Arc<HubMetrics>,
        resync: Duration,
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
            sources,
            watched,
            metrics,
            resync,
            backoff: Arc::default(),
        }
    }
}
