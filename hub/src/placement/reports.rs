//! What the agents report, as plans read it: their latest status reports and Pending pods.

use std::collections::BTreeMap;
use std::sync::Arc;

use nave_api::wire::{PendingPod, StatusReport, WorkloadRef};

/// The agents' latest status reports, by cluster.
pub type Reports = BTreeMap<String, Arc<StatusReport>>;

/// Each cluster's Pending pods, from its latest heartbeat.
pub type Pending = BTreeMap<String, Arc<Vec<PendingPod>>>;

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
