//! Deleting a WorkloadCluster removes the cluster from the fleet, in order and without surprises:
//!
//! ```text
//!  kubectl delete workloadcluster eu-2   (or nave unjoin eu-2)
//!   └► deletionTimestamp set; the hub's finalizer holds the object
//!       ├► placement: a NoExecute taint `nave.dev/removing` since the deletion, so every workload
//!       │  moves away make-before-break, as from a drain (replicas with no room elsewhere stay)
//!       ├► Removing=True WithdrawingWork: what is left, and whom the hub waits for
//!       ├► once the work set is empty and the agent has applied it (or, with the annotation
//!       │  nave.dev/remove-without-agent=true, at once):
//!       │    store: the cluster forgotten (credentials revoked, name remembered as removed)
//!       └► finalizer removed: the object goes, and stays gone
//! ```
//!
//! When most of the fleet's WorkloadClusters are being deleted at once (the CRD deleted, a wrong
//! selector), none is removed but those annotated to go without their agent; the `Removing`
//! condition says so.
//!
//! A removed name comes back only through a join token an admin issues for it: the fleet's
//! bootstrap token is refused for it, and a heartbeat never writes a WorkloadCluster. The loop
//! also puts the finalizer on registered clusters' objects that lack it (created before the
//! hub had it, or by hand).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::events::{Event, EventType, Recorder};
use nave_api::{CLUSTER_FINALIZER, REMOVE_WITHOUT_AGENT_ANNOTATION, WorkloadCluster};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::heartbeats::reference;
use crate::index::Index;
use crate::signals::ReconcileTrigger;
use crate::store::{Store, StoreError};
use crate::watch::Watched;
use crate::workload_clusters::ClusterObjects;

/// How often the loop looks at the reflected WorkloadClusters.
const INTERVAL: Duration = Duration::from_secs(1);

/// Event reasons on WorkloadClusters.
pub mod event_reasons {
    /// The WorkloadCluster is being deleted: its work moves away.
    pub const REMOVING: &str = "Removing";
    /// The hub forgot the cluster and let its object go.
    pub const REMOVED: &str = "Removed";
}

/// What is left of a cluster's work, as far as its removal is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withdrawal {
    /// The workloads (`namespace/name`) whose objects are still in the cluster's work set.
    pub workloads: BTreeSet<String>,
    /// Objects in the set.
    pub objects: usize,
    /// The set's revision (0: the cluster never had one).
    pub revision: u64,
    /// The revision its agent last applied.
    pub applied: Option<u64>,
}

impl Withdrawal {
    /// Reads what is left of `cluster`'s work.
    pub async fn read(store: &dyn Store, cluster: &str) -> Result<Withdrawal, StoreError> {
        let work = store.get_work(cluster).await?;
        let status = store.get_work_status(cluster).await?;
        let (objects, revision, workloads) = match &work {
            None => (0, 0, BTreeSet::new()),
            Some(w) => (
                w.objects.len(),
                w.revision,
                w.objects
                    .iter()
                    .filter_map(|o| {
                        o.pointer("/metadata/labels")
                            .and_then(|l| l.get(nave_api::wire::WORKLOAD_LABEL))
                    })
                    .filter_map(|v| v.as_str())
                    .map(|w| w.replacen('.', "/", 1))
                    .collect(),
            ),
        };
        Ok(Withdrawal {
            workloads,
            objects,
            revision,
            applied: status.map(|s| s.applied_revision),
        })
    }

    /// Whether the cluster runs nothing of the hub's: it never had a set, or its set is empty
    /// and either was empty from the start (revision 1) or its agent has applied it.
    pub fn done(&self) -> bool {
        self.revision == 0
            || (self.objects == 0 && (self.revision == 1 || self.applied.is_some_and(|a| a >= self.revision)))
    }

    /// What the removal waits for, for people.
    pub fn waiting_for(&self) -> String {
        if self.objects > 0 {
            let mut names: Vec<&str> = self.workloads.iter().map(String::as_str).take(5).collect();
            if self.workloads.len() > names.len() {
                names.push("...");
            }
            format!(
                "waiting for {} object(s) of {} workload(s) ({}) to move away (make-before-break; \
                 replicas with no room elsewhere stay)",
                self.objects,
                self.workloads.len(),
                names.join(", ")
            )
        } else {
            format!(
                "waiting for the agent to apply the empty work set (revision {}; applied {}); if \
                 the cluster is gone for good: nave unjoin --force",
                self.revision,
                self.applied.map_or_else(|| "none".to_owned(), |a| a.to_string())
            )
        }
    }
}

/// What the loop reads and writes.
#[derive(Clone)]
pub struct Remover {
    /// The reflected WorkloadClusters.
    pub watched: Watched,
    /// Where clusters are forgotten.
    pub store: Arc<dyn Store>,
    /// The clusters placement sees.
    pub index: Arc<Index>,
    /// Writes finalizers and the `Removing` condition.
    pub objects: ClusterObjects,
    /// Publishes Events on WorkloadClusters.
    pub recorder: Recorder,
    /// Asks for a pass over every workload when a cluster is forgotten.
    pub trigger: ReconcileTrigger,
}

impl std::fmt::Debug for Remover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remover").finish_non_exhaustive()
    }
}

fn has_finalizer(object: &WorkloadCluster) -> bool {
    object.finalizers().iter().any(|f| f == CLUSTER_FINALIZER)
}

fn without_agent(object: &WorkloadCluster) -> bool {
    object
        .annotations()
        .get(REMOVE_WITHOUT_AGENT_ANNOTATION)
        .is_some_and(|v| v == "true")
}

impl Remover {
    async fn publish(&self, cluster: &str, type_: EventType, reason: &str, note: String) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: "RemoveCluster".to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &reference(cluster)).await {
            warn!(error = %error, cluster, reason, "publishing an event failed");
        }
    }

    /// One look at every WorkloadCluster.
    async fn pass(&self, missing_reported: &mut BTreeSet<String>, was_mass: &mut bool) {
        let objects = self.watched.clusters.state();
        let names: BTreeSet<String> = objects.iter().map(|o| o.name_any()).collect();
        for name in self.index.clusters().keys() {
            if !names.contains(name) && missing_reported.insert(name.clone()) {
                warn!(
                    cluster = %name,
                    "a registered cluster has no WorkloadCluster (deleted past the hub's finalizer, \
                     or never written); the hub keeps placing on it: register its agent again to \
                     write the object, or remove it with DELETE /api/v1/clusters/{name}"
                );
            }
        }
        missing_reported.retain(|n| !names.contains(n));
        // Most of the fleet deleted at once is a surprise (the CRD deleted, a wrong selector),
        // not a plan: none is removed then but those marked to go without their agent.
        let deleting = objects
            .iter()
            .filter(|o| o.metadata.deletion_timestamp.is_some() && has_finalizer(o))
            .count();
        let mass = deleting > 1 && deleting * 2 > objects.len();
        match (mass, std::mem::replace(was_mass, mass)) {
            (true, false) => warn!(
                deleting,
                clusters = objects.len(),
                "most WorkloadClusters are being deleted at once; removing none of them (the CRD deleted?)"
            ),
            (false, true) => {
                info!("fewer than half of the WorkloadClusters are being deleted now; removals go on")
            }
            _ => {}
        }
        for object in objects {
            let name = object.name_any();
            let result = if object.metadata.deletion_timestamp.is_some() {
                if !has_finalizer(&object) {
                    Ok(())
                } else if mass && !without_agent(&object) {
                    let message = format!(
                        "held: {deleting} of {} WorkloadClusters are being deleted at once (was the \
                         CRD deleted?); the hub removes none until fewer than half are, or one is \
                         annotated {REMOVE_WITHOUT_AGENT_ANNOTATION}=true",
                        names.len()
                    );
                    self.objects
                        .set_removing(&object, &message)
                        .await
                        .map_err(|e| e.to_string())
                } else {
                    self.remove(&object).await
                }
            } else if !has_finalizer(&object) && self.index.cluster(&name).is_some() {
                let mut finalizers = object.finalizers().to_vec();
                finalizers.push(CLUSTER_FINALIZER.to_owned());
                self.objects
                    .set_finalizers(&object, finalizers)
                    .await
                    .map_err(|e| e.to_string())
            } else {
                Ok(())
            };
            if let Err(error) = result {
                warn!(cluster = %name, error = %error, "removing a WorkloadCluster; retrying");
            }
        }
    }

    /// Takes one step of removing a cluster whose object is being deleted.
    async fn remove(&self, object: &WorkloadCluster) -> Result<(), String> {
        let name = object.name_any();
        let registered = self.store.get_cluster(&name).await.map_err(|e| e.to_string())?;
        if registered.is_some() {
            let left = Withdrawal::read(self.store.as_ref(), &name)
                .await
                .map_err(|e| e.to_string())?;
            let forced = without_agent(object);
            if !left.done() && !forced {
                let first = !object.status.as_ref().is_some_and(|s| {
                    nave_api::conditions::find(&s.conditions, nave_api::conditions::types::REMOVING).is_some()
                });
                if first {
                    info!(cluster = %name, "WorkloadCluster deleted: moving its work away before removing it");
                    self.publish(
                        &name,
                        EventType::Normal,
                        event_reasons::REMOVING,
                        "the WorkloadCluster is being deleted: its workloads move away \
                         (make-before-break), then the hub forgets the cluster"
                            .to_owned(),
                    )
                    .await;
                }
                return self
                    .objects
                    .set_removing(object, &left.waiting_for())
                    .await
                    .map_err(|e| e.to_string());
            }
            self.store
                .delete_cluster(&name)
                .await
                .map_err(|e| e.to_string())?;
            self.index.forget_cluster(&name);
            self.trigger.trigger();
            let how = if left.done() {
                "its work moved away and its agent applied the empty set"
            } else {
                "without waiting for its agent (nave.dev/remove-without-agent)"
            };
            warn!(cluster = %name, forced = !left.done(), "cluster removed: its credentials are revoked");
            self.publish(
                &name,
                EventType::Normal,
                event_reasons::REMOVED,
                format!(
                    "removed {how}; its credentials are revoked and only a join token issued for it \
                     brings it back"
                ),
            )
            .await;
        }
        let finalizers: Vec<String> = object
            .finalizers()
            .iter()
            .filter(|f| *f != CLUSTER_FINALIZER)
            .cloned()
            .collect();
        match self.objects.set_finalizers(object, finalizers).await {
            Ok(()) => Ok(()),
            // Gone already.
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Removes deleted WorkloadClusters' clusters until `shutdown` (the leader only).
pub async fn run(remover: Remover, shutdown: CancellationToken) {
    if remover
        .watched
        .clusters_ready
        .wait("WorkloadClusters")
        .await
        .is_err()
    {
        return;
    }
    let mut ticks = tokio::time::interval(INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut missing_reported = BTreeSet::new();
    let mut mass = false;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        remover.pass(&mut missing_reported, &mut mass).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn left(objects: usize, revision: u64, applied: Option<u64>) -> Withdrawal {
        Withdrawal {
            workloads: (0..objects).map(|i| format!("default/w{i}")).collect(),
            objects,
            revision,
            applied,
        }
    }

    #[test]
    fn a_cluster_is_withdrawn_once_its_agent_applied_an_empty_set() {
        assert!(left(0, 0, None).done(), "never had a set");
        assert!(left(0, 1, None).done(), "empty from the start");
        assert!(
            !left(0, 4, Some(3)).done(),
            "the agent has not applied the empty set"
        );
        assert!(left(0, 4, Some(4)).done());
        assert!(!left(2, 4, Some(4)).done(), "objects left");
        let waiting = left(7, 4, Some(4)).waiting_for();
        assert!(
            waiting.contains("7 object(s) of 7 workload(s)")
                && waiting.contains("default/w0")
                && waiting
                    .ends_with("...) to move away (make-before-break; replicas with no room elsewhere stay)"),
            "{waiting}"
        );
        assert!(left(0, 4, Some(3)).waiting_for().contains("--force"));
    }
}
