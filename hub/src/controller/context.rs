//! What the MultiClusterDeployment controller's reconciles read and write through.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use nave_api::conditions::{self, types};

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
    /// The kinds MultiClusterResources may send (the hub's `--resource-kind`).
    pub resource_kinds: Arc<crate::render::resource::ResourceKinds>,
    /// Longest time between two reconciles of one object.
    pub resync: Duration,
    /// Failed reconciles in a row per object (`namespace/name`), for the retry backoff.
    pub backoff: Arc<Mutex<HashMap<String, u32>>>,
    /// When the controllers started: placement waits at most the heartbeat grace from then for
    /// clusters that joined before to be heard from.
    pub started: Instant,
    /// The clusters placement waits for after the start (see [`Context::awaited_clusters`]);
    /// taken on first use, then only shrinks.
    awaited: Arc<Mutex<Option<std::collections::BTreeSet<String>>>>,
    /// The objects reconciled with the whole fleet in view since the start, as `namespace/name`;
    /// `None` once the first pass is over and the work sets are published.
    first_pass: Arc<Mutex<Option<HashSet<String>>>>,
    /// Deleted StatefulSets: the work-set revision that sent each cluster its zero replicas, by
    /// workload ([`WorkloadRef::label_value`](nave_api::wire::WorkloadRef::label_value)) and
    /// cluster; a report of an older set does not say its pods stopped.
    pub stopping: Arc<Mutex<std::collections::HashMap<(String, String), u64>>>,
    /// MultiClusterJobs' statuses as this hub last wrote them, by uid: the pieces a reconcile
    /// starts from when the watch has not caught up with the hub's own write.
    pub jobs: Arc<Mutex<HashMap<String, nave_api::MultiClusterJobStatus>>>,
    /// The MultiClusterJobs waiting for room, as the jobs behind them see them.
    pub job_queue: Arc<
        Mutex<std::collections::BTreeMap<nave_api::wire::WorkloadRef, crate::placement::jobs::QueuedJob>>,
    >,
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
            resource_kinds: Arc::default(),
            backoff: Arc::default(),
            started: Instant::now(),
            awaited: Arc::default(),
            first_pass: Arc::new(Mutex::new(Some(HashSet::new()))),
            stopping: Arc::default(),
            jobs: Arc::default(),
            job_queue: Arc::default(),
        }
    }

    /// The clusters placement still waits for: while the store knows no heartbeat of a
    /// cluster whose WorkloadCluster said an agent had joined when the controllers first
    /// looked (the store was lost or replaced and the agents are registering again), a
    /// placement would see part of the fleet, so it waits for them, for at most the heartbeat
    /// grace after the start. The set is taken once; clusters that join later are not waited for.
    pub fn awaited_clusters(&self) -> Vec<String> {
        if self.started.elapsed() >= self.sources.grace {
            return Vec::new();
        }
        let mut awaited = self.awaited.lock().unwrap_or_else(|e| e.into_inner());
        let awaited = awaited.get_or_insert_with(|| {
            self.sources
                .objects
                .state()
                .iter()
                .filter(|object| {
                    object
                        .status
                        .as_ref()
                        .is_some_and(|s| conditions::is_true(&s.conditions, types::JOINED))
                })
                .map(|object| object.name_any())
                .collect()
        });
        awaited.retain(|name| {
            self.sources
                .index
                .cluster(name)
                .is_none_or(|record| record.last_heartbeat_at.is_none())
        });
        awaited.iter().cloned().collect()
    }

    /// Takes what `workload` contributes out of every cluster's work set (the agents prune it)
    /// and writes the sets at once: called before a finalizer goes, since once the object is
    /// gone nothing would remove its objects any more.
    pub async fn withdraw(&self, workload: &nave_api::wire::WorkloadRef) -> Result<(), crate::error::Error> {
        let clusters: Vec<String> = self.sources.index.clusters().into_keys().collect();
        let mut work = self.sources.index.work().await;
        for cluster in &work.holding(&clusters, workload).await? {
            work.replace(cluster, workload, Vec::new()).await?;
        }
        for (cluster, write) in work.flush().await? {
            if write.changed {
                self.signals.notify(&cluster, write.revision);
            }
        }
        Ok(())
    }

    /// Records that `object` (`namespace/name`) was reconciled with the whole fleet in view.
    pub fn reconciled(&self, object: &str) {
        let mut first_pass = self.first_pass.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(done) = first_pass.as_mut() {
            done.insert(object.to_owned());
        }
    }

    /// How many of `objects` the first pass has not reconciled yet.
    pub fn first_pass_missing(&self, objects: &[String]) -> usize {
        let first_pass = self.first_pass.lock().unwrap_or_else(|e| e.into_inner());
        match first_pass.as_ref() {
            Some(done) => objects.iter().filter(|o| !done.contains(*o)).count(),
            None => 0,
        }
    }

    /// After a failed reconcile of `object` (`namespace/name`): counts it, and answers when to
    /// try again, 1 s doubling with each failure in a row up to 5 min.
    pub fn retry_after_failure(&self, object: &str, error: &crate::error::Error) -> Action {
        self.metrics.record_reconcile_error();
        let mut backoff = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        let attempts = backoff.entry(object.to_owned()).or_insert(0);
        *attempts = attempts.saturating_add(1);
        let delay = Duration::from_secs(1u64 << (*attempts).min(9)).min(Duration::from_secs(300));
        tracing::warn!(object, error = %error, source = ?std::error::Error::source(error), retry_in = ?delay, "reconcile failed");
        Action::requeue(delay)
    }

    /// `object` reconciled: its next failure starts the backoff again.
    pub fn succeeded(&self, object: &str) {
        self.backoff
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(object);
    }

    /// Whether the first pass is over: every object was reconciled once in this term, so what
    /// each running job books is in the ledger and each waiting job is in the queue.
    pub fn first_pass_over(&self) -> bool {
        self.first_pass
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// The first pass is over: nothing more is recorded.
    pub fn end_first_pass(&self) {
        *self.first_pass.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}
