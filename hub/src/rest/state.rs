//! What the REST handlers read.

use std::sync::Arc;

use crate::fleet::Sources;
use crate::signals::ReconcileTrigger;
use crate::store::Store;
use crate::workload_clusters::ClusterObjects;

/// What the admin endpoints change besides the store; `None` where there is no management
/// cluster or controller (tests).
#[derive(Clone, Default)]
pub struct AdminHandles {
    /// Writes the WorkloadClusters' `Accepted` and `Joined` conditions.
    pub objects: Option<ClusterObjects>,
    /// Asks the controllers for a pass when the fleet changed.
    pub trigger: Option<ReconcileTrigger>,
    /// SHA-256 of the CA of the hub's TLS chain, shown with join tokens; `None` over plain HTTP.
    pub hub_ca_sha256: Option<String>,
    /// Wakes a cluster's long-polls when what its agent may do changed (a prune confirmed).
    pub signals: Option<std::sync::Arc<crate::signals::WorkSignals>>,
}

impl std::fmt::Debug for AdminHandles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminHandles")
            .field("objects", &self.objects.is_some())
            .field("trigger", &self.trigger.is_some())
            .finish()
    }
}

/// State of the REST handlers.
#[derive(Clone, Debug)]
pub struct RestState {
    /// What placement reads (the fleet, the index, health, usage), as the controller sees it.
    pub(super) sources: Sources,
    /// Placements, their history, heartbeats.
    pub(super) store: Arc<dyn Store>,
    /// The OpenAPI document, serialized once.
    pub(super) document: Arc<str>,
    /// What the admin endpoints change besides the store.
    pub(super) admin: AdminHandles,
}
