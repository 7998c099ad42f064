//! The management cluster's objects the hub keeps in memory rather than listing on every
//! reconcile: WorkloadClusters (labels, cordon, burst-only: what placement reads) and
//! MultiClusterServices (the Services that follow a workload), each kept by a reflector, and the
//! reconciles their changes ask for.
//!
//! ```text
//!  watch WorkloadClusters ─► reflector ─► Watched::clusters ─► fleet::Sources::view
//!        spec or labels changed, or deleted ─► ReconcileTrigger::trigger (every workload)
//!  watch MultiClusterServices ─► reflector ─► Watched::services ─► the workload's Services
//!        any change ─► ReconcileTrigger::workloads (the workload it names)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use nave_api::wire::WorkloadRef;
use nave_api::{MultiClusterService, WorkloadCluster};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::error::Error;
use crate::signals::ReconcileTrigger;

/// The reflected objects.
#[derive(Clone)]
pub struct Watched {
    /// Every WorkloadCluster.
    pub clusters: Store<WorkloadCluster>,
    /// Whether `clusters` has been listed once.
    pub clusters_ready: Ready,
    /// Grows when a WorkloadCluster's spec or labels change, or one comes or goes.
    pub clusters_version: Arc<std::sync::atomic::AtomicU64>,
    /// Every MultiClusterService.
    pub services: Store<MultiClusterService>,
    /// Whether `services` has been listed once.
    pub services_ready: Ready,
}

/// Whether a reflector has listed its objects once. Kept in a `watch` channel rather than read
/// from the reflector store's own `wait_until_ready`, which wakes only the last of several
/// callers waiting at once: at start-up the reconciles and the REST handlers all wait together,
/// and the others would wait forever.
#[derive(Clone, Debug)]
pub struct Ready(watch::Receiver<bool>);

impl Ready {
    /// Ready now (for a store filled by hand, as in tests).
    pub fn now() -> Ready {
        Ready(watch::channel(true).1)
    }

    /// Waits until the reflector has listed once; `Err` when it stopped before (shutdown).
    pub async fn wait(&self, what: &'static str) -> Result<(), Error> {
        let mut ready = self.0.clone();
        ready
            .wait_for(|listed| *listed)
            .await
            .map(drop)
            .map_err(|_| Error::NotWatching(what))
    }
}

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("clusters", &self.clusters.state().len())
            .field("services", &self.services.state().len())
            .finish()
    }
}

impl Watched {
    /// Waits until both reflectors have listed once, so that a reconcile never plans on an
    /// empty fleet only because the hub has just started.
    pub async fn ready(&self) -> Result<(), Error> {
        self.clusters_ready.wait("WorkloadClusters").await?;
        self.services_ready.wait("MultiClusterServices").await
    }

    /// The MultiClusterServices in `workload`'s namespace that follow it.
    pub fn services_of(&self, workload: &WorkloadRef) -> Vec<Arc<MultiClusterService>> {
        let mut services: Vec<Arc<MultiClusterService>> = self
            .services
            .state()
            .into_iter()
            .filter(|s| {
                s.namespace().as_deref() == Some(workload.namespace.as_str())
                    && s.spec.deployment.as_deref() == Some(workload.name.as_str())
            })
            .collect();
        services.sort_by_key(|s| s.name_any());
        services
    }
}

/// The last-applied annotation `kubectl apply` writes: the whole object again, as JSON.
pub(crate) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops from an object the hub keeps in a reflector what no part of the hub reads: its
/// `managedFields` (each writer's field set, several times the size of a small MCD's spec) and
/// `kubectl apply`'s copy of the object in its last-applied annotation. The hub writes its
/// objects with patches only, so what it keeps is never written back.
pub(crate) fn forget_unread<K: kube::Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// Starts both reflectors; the returned future runs them until `shutdown` and asks `trigger` for
/// the reconciles their changes need.
pub fn start(
    client: kube::Client,
    trigger: ReconcileTrigger,
    shutdown: CancellationToken,
) -> (Watched, impl Future<Output = ()> + Send) {
    let (clusters, cluster_writer) = reflector::store();
    let (services, service_writer) = reflector::store();
    let (clusters_listed, clusters_ready) = watch::channel(false);
    let (services_listed, services_ready) = watch::channel(false);
    let clusters_version: Arc<std::sync::atomic::AtomicU64> = Arc::default();
    let version = clusters_version.clone();
    let watched = Watched {
        clusters,
        clusters_ready: Ready(clusters_ready),
        clusters_version,
        services,
        services_ready: Ready(services_ready),
    };
    let cluster_trigger = trigger.clone();
    let cluster_events = reflector::reflector(
        cluster_writer,
        watcher::watcher(
            Api::<WorkloadCluster>::all(client.clone()),
            watcher::Config::default(),
        )
        .modify(forget_unread),
    )
    .default_backoff();
    let service_events = reflector::reflector(
        service_writer,
        watcher::watcher(
            Api::<MultiClusterService>::all(client),
            watcher::Config::default(),
        )
        .modify(forget_unread),
    )
    .default_backoff();
    let run = async move {
        let mut edits = ClusterEdits::default();
        let clusters = cluster_events.for_each(|event| {
            // The reflector has applied the event to its store before passing it on.
            if let Ok(Event::InitDone) = event {
                version.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                clusters_listed.send_replace(true);
            }
            if let Ok(event) = event
                && edits.changed(&event)
            {
                version.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                cluster_trigger.trigger();
            }
            futures::future::ready(())
        });
        // The workload each MultiClusterService followed, so that one it stops following drops
        // the Service at once (not at its next resync).
        let mut followed: HashMap<(String, String), String> = HashMap::new();
        let services = service_events.for_each(move |event| {
            if let Ok(Event::InitDone) = event {
                services_listed.send_replace(true);
            }
            if let Ok(Event::Apply(mcs) | Event::Delete(mcs) | Event::InitApply(mcs)) = &event {
                let namespace = mcs.namespace().unwrap_or_default();
                let key = (namespace.clone(), mcs.name_any());
                let now = match &event {
                    Ok(Event::Delete(_)) => None,
                    _ => mcs.spec.deployment.clone(),
                };
                if now.is_none() && !matches!(event, Ok(Event::Delete(_))) {
                    // Written before spec.deployment was required: nothing follows it.
                    warn!(
                        service = %format!("{}/{}", key.0, key.1),
                        "MultiClusterService without spec.deployment: a Service of its own is not \
                         supported, so nothing creates it; set spec.deployment"
                    );
                }
                let before = match &now {
                    Some(name) => followed.insert(key, name.clone()),
                    None => followed.remove(&key),
                };
                let names: std::collections::BTreeSet<String> = before.into_iter().chain(now).collect();
                trigger.workloads(names.iter().map(|name| WorkloadRef::new(&namespace, name)));
            }
            futures::future::ready(())
        });
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = clusters => {}
            () = services => {}
        }
    };
    (watched, run)
}

/// Tells the WorkloadCluster changes that placement reads (its spec or labels; not its status,
/// which the hub writes itself on heartbeats) from the others.
#[derive(Debug, Default)]
struct ClusterEdits {
    seen: HashMap<String, Seen>,
}

/// What placement reads of a WorkloadCluster: its spec (by generation), its labels, and whether
/// it is being deleted.
type Seen = (Option<i64>, Option<BTreeMap<String, String>>, bool);

fn seen(wcl: &WorkloadCluster) -> Seen {
    (
        wcl.metadata.generation,
        wcl.metadata.labels.clone(),
        wcl.metadata.deletion_timestamp.is_some(),
    )
}

impl ClusterEdits {
    fn changed(&mut self, event: &Event<WorkloadCluster>) -> bool {
        match event {
            Event::InitApply(wcl) => {
                self.seen.insert(wcl.name_any(), seen(wcl));
                false
            }
            Event::Apply(wcl) => {
                let key = seen(wcl);
                self.seen.insert(wcl.name_any(), key.clone()) != Some(key)
            }
            Event::Delete(wcl) => self.seen.remove(&wcl.name_any()).is_some(),
            Event::Init | Event::InitDone => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
    use nave_api::{MultiClusterDeployment, MultiClusterDeploymentSpec, WorkloadClusterSpec};

    use super::*;

    fn wcl(name: &str, generation: i64, label: &str) -> WorkloadCluster {
        let mut object = WorkloadCluster::new(name, WorkloadClusterSpec::default());
        object.metadata.generation = Some(generation);
        object.metadata.labels = Some([("tier".to_owned(), label.to_owned())].into());
        object
    }

    #[tokio::test]
    async fn every_caller_waiting_for_the_first_list_wakes_not_only_the_last() {
        let (listed, ready) = watch::channel(false);
        let ready = Ready(ready);
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let ready = ready.clone();
                tokio::spawn(async move { ready.wait("WorkloadClusters").await })
            })
            .collect();
        tokio::task::yield_now().await;
        listed.send_replace(true);
        for waiter in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                .await
                .expect("each of the waiters wakes")
                .unwrap()
                .expect("ready");
        }
        drop(listed);
        assert!(ready.wait("WorkloadClusters").await.is_ok(), "ready stays ready");
        let (never, not_ready) = watch::channel(false);
        drop(never);
        assert!(
            Ready(not_ready).wait("WorkloadClusters").await.is_err(),
            "stopped before listing"
        );
    }

    #[test]
    fn only_spec_label_and_membership_changes_ask_for_a_pass() {
        let mut edits = ClusterEdits::default();
        assert!(
            !edits.changed(&Event::InitApply(wcl("eu-1", 1, "a"))),
            "the initial list"
        );
        assert!(
            !edits.changed(&Event::Apply(wcl("eu-1", 1, "a"))),
            "a status write"
        );
        assert!(edits.changed(&Event::Apply(wcl("eu-1", 2, "a"))), "a spec edit");
        assert!(edits.changed(&Event::Apply(wcl("eu-1", 2, "b"))), "a label edit");
        let mut deleting = wcl("eu-1", 2, "b");
        deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
        assert!(
            edits.changed(&Event::Apply(deleting)),
            "a deletion (the generation may stay)"
        );
        assert!(edits.changed(&Event::Apply(wcl("us-1", 1, "a"))), "a new cluster");
        assert!(
            edits.changed(&Event::Delete(wcl("us-1", 1, "a"))),
            "a deleted cluster"
        );
        assert!(
            !edits.changed(&Event::Delete(wcl("ap-1", 1, "a"))),
            "one never seen"
        );
    }

    #[test]
    fn what_the_hub_keeps_of_an_object_leaves_out_managed_fields_and_the_last_applied_copy() {
        let spec: MultiClusterDeploymentSpec = serde_json::from_value(serde_json::json!({
            "replicas": 2,
            "template": {"spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
                }
            }},
        }))
        .expect("a spec");
        let mut mcd = MultiClusterDeployment::new("web", spec);
        mcd.metadata.annotations = Some(
            [
                (
                    LAST_APPLIED.to_owned(),
                    r#"{"kind":"MultiClusterDeployment"}"#.to_owned(),
                ),
                ("team".to_owned(), "shop".to_owned()),
            ]
            .into(),
        );
        mcd.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            ..ManagedFieldsEntry::default()
        }]);
        let before = mcd.clone();
        forget_unread(&mut mcd);
        assert_eq!(mcd.metadata.managed_fields, None, "expected no managedFields");
        assert_eq!(
            mcd.metadata.annotations,
            Some([("team".to_owned(), "shop".to_owned())].into()),
            "expected the other annotations kept and the last-applied one gone"
        );
        assert_eq!(mcd.spec, before.spec, "expected the spec untouched");
    }
}
