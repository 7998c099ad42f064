//! The controllers over Nave's CRDs in the management cluster.
//!
//! Three controllers: [`mcr`] reconciles MultiClusterResources (any object to the clusters a
//! selector picks), [`mcj`] MultiClusterJobs (batch Jobs divided among clusters, with a queue),
//! and [`mcd`] reconciles MultiClusterDeployments, and with them what follows
//! them: a change to a MultiClusterService reconciles the MultiClusterDeployment it names, and a
//! change to a ConfigMap or Secret reconciles every MultiClusterDeployment whose pod template
//! refers to it (so the copies in the workload clusters follow the source). Agents' reports reach
//! it through the reconcile trigger (the workloads a report concerns), and so do changes of the
//! objects [`crate::watch`] keeps: a MultiClusterService reconciles the workload it names, an
//! admin's edit of a WorkloadCluster (labels, cordon, burst-only) every MultiClusterDeployment,
//! since any may be placed there.
//!
//! The controllers run on the leading replica only, from when it took the lead.
//!
//! When every MultiClusterDeployment and MultiClusterResource known at start has been
//! reconciled once, and every known
//! cluster has a work set (empty where nothing is placed), the work sets are complete: the hub
//! records it in the store for its term (the other replicas hear of it) and says so to the
//! agents ([`crate::signals::WorkSignals::publish`]), which is what releases a set an agent holds
//! after the store changed under it.

mod context;
pub mod heartbeats;
pub mod mcd;
pub mod mcj;
pub mod mcr;
pub mod removal;

pub use self::context::Context;

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt as _, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store as Reflected};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use nave_api::wire::WorkloadRef;
use nave_api::{DependencyKind, MultiClusterDeployment, MultiClusterJob, MultiClusterResource};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::signals::Triggered;

/// Most reconciles at once. Each holds a rendered workload and its cluster's work sets are
/// written one reconcile at a time anyway; unbounded, a pass over thousands of workloads held
/// thousands of them in memory at once.
const CONCURRENCY: u16 = 8;

/// Runs the controllers until `shutdown` is cancelled. `triggered` asks for a pass over every
/// MultiClusterDeployment or for named ones (see [`crate::signals::ReconcileTrigger`]).
pub async fn run(ctx: Arc<Context>, triggered: Triggered, shutdown: CancellationToken) {
    let mcds: Api<MultiClusterDeployment> = Api::all(ctx.client.clone());
    let Triggered { all, some } = triggered;
    // The trigger reaches both controllers: a pass over every object goes to each, a named
    // workload to the controller of its kind.
    let Routed {
        all,
        resources_all,
        jobs_all,
        some,
        resources_some,
        jobs_some,
        route,
    } = route_triggers(all, some, shutdown.clone());
    let all = futures::stream::unfold(all, |mut rx| async move { rx.recv().await.map(|()| ((), rx)) });
    let some = futures::stream::unfold(some, |mut rx| async move {
        rx.recv().await.map(|w: WorkloadRef| {
            (
                ObjectRef::<MultiClusterDeployment>::new(&w.name).within(&w.namespace),
                rx,
            )
        })
    });
    let configmaps: Api<ConfigMap> = Api::all(ctx.client.clone());
    let secrets: Api<Secret> = Api::all(ctx.client.clone());
    // The hub's own status writes change an MCD too; reconciling on them would plan every
    // workload again after each of its own writes. What a plan reads of the object is its spec
    // (generation), its finalizers, its deletion and its annotations (what people poke);
    // everything else that matters reaches the controller through the reconcile trigger.
    let (reader, writer) = kube::runtime::reflector::store();
    let changes = watcher(mcds, watcher::Config::default())
        .default_backoff()
        .modify(crate::watch::forget_unread)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(what_a_plan_reads, Default::default());
    let controller = Controller::for_stream(changes, reader)
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY));
    let known = controller.store();
    let known_too = known.clone();
    let known_at_stop = known.clone();
    let stopping = shutdown.clone();
    let (resources, resources_known) = side_controller(
        ctx.clone(),
        resources_all,
        resources_some,
        shutdown.clone(),
        mcr::reconcile,
        mcr::error_policy,
    );
    let (jobs, jobs_known) = side_controller(
        ctx.clone(),
        jobs_all,
        jobs_some,
        shutdown.clone(),
        mcj::reconcile,
        mcj::error_policy,
    );
    let first_pass = publish_after_first_pass(
        known.clone(),
        resources_known,
        jobs_known,
        ctx.clone(),
        shutdown.clone(),
    );
    let controller = controller
        .watches(configmaps, watcher::Config::default(), move |cm| {
            referring(&known, DependencyKind::ConfigMap, &cm)
        })
        .watches(secrets, watcher::Config::default(), move |secret| {
            referring(&known_too, DependencyKind::Secret, &secret)
        })
        .reconcile_all_on(all)
        .reconcile_on(some)
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(mcd::reconcile, mcd::error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => debug!(object = %object, "reconciled"),
                Err(error) => warn!(error = %error, "reconcile failed"),
            }
        });
    // The controller stops gracefully: reconciles under way finish. But one stopped before its
    // view of the MultiClusterDeployments was complete waits for that view forever (kube-runtime
    // holds its runner until the store is ready, and the store's watch stops with the
    // controller), which hung the hub's shutdown when it came within moments of the start. Then
    // nothing is under way and the controller is dropped at once; otherwise it gets a grace period.
    let stop = async move {
        stopping.cancelled().await;
        if known_at_stop.wait_until_ready().now_or_never().is_none() {
            debug!("stopping before the controller's first list: nothing under way");
            return;
        }
        tokio::time::sleep(SHUTDOWN_GRACE).await;
        warn!(
            grace_secs = SHUTDOWN_GRACE.as_secs(),
            "reconciles still under way at shutdown after the grace period; stopping them"
        );
    };
    let controller = async {
        tokio::select! {
            () = controller => {}
            () = stop => {}
        }
    };
    tokio::join!(controller, resources, jobs, first_pass, route);
}

/// The trigger's requests, split by controller ([`route_triggers`]).
struct Routed<F> {
    all: tokio::sync::mpsc::Receiver<()>,
    resources_all: tokio::sync::mpsc::Receiver<()>,
    jobs_all: tokio::sync::mpsc::Receiver<()>,
    some: tokio::sync::mpsc::UnboundedReceiver<WorkloadRef>,
    resources_some: tokio::sync::mpsc::UnboundedReceiver<WorkloadRef>,
    jobs_some: tokio::sync::mpsc::UnboundedReceiver<WorkloadRef>,
    /// The task that routes, until `shutdown` (the trigger's senders outlive a term).
    route: F,
}

/// Splits the trigger's requests between the controllers: every pass to each, a named workload
/// to the controller of its kind: the MultiClusterResource controller when it names one
/// ([`WorkloadRef::resource_name`]), the MultiClusterJob controller when it names one
/// ([`WorkloadRef::job_name`]), else the MultiClusterDeployment controller.
fn route_triggers(
    mut all: tokio::sync::mpsc::Receiver<()>,
    mut some: tokio::sync::mpsc::UnboundedReceiver<WorkloadRef>,
    shutdown: CancellationToken,
) -> Routed<impl std::future::Future<Output = ()>> {
    use tokio::sync::mpsc;
    // Capacity one, as the trigger's own: passes asked while one is pending coalesce.
    let (mcd_all, mcd_all_rx) = mpsc::channel(1);
    let (mcr_all, mcr_all_rx) = mpsc::channel(1);
    let (mcj_all, mcj_all_rx) = mpsc::channel(1);
    let (mcd_some, mcd_some_rx) = mpsc::unbounded_channel();
    let (mcr_some, mcr_some_rx) = mpsc::unbounded_channel();
    let (mcj_some, mcj_some_rx) = mpsc::unbounded_channel();
    let route = async move {
        let passes = async {
            while all.recv().await.is_some() {
                let _ = mcd_all.try_send(());
                let _ = mcr_all.try_send(());
                let _ = mcj_all.try_send(());
            }
        };
        let named = async {
            while let Some(workload) = some.recv().await {
                let _ = if let Some(name) = workload.resource_name() {
                    mcr_some.send(WorkloadRef::new(workload.namespace.clone(), name))
                } else if let Some(name) = workload.job_name() {
                    mcj_some.send(WorkloadRef::new(workload.namespace.clone(), name))
                } else {
                    mcd_some.send(workload)
                };
            }
        };
        tokio::select! {
            _ = async { tokio::join!(passes, named) } => {}
            () = shutdown.cancelled() => {}
        }
    };
    Routed {
        all: mcd_all_rx,
        resources_all: mcr_all_rx,
        jobs_all: mcj_all_rx,
        some: mcd_some_rx,
        resources_some: mcr_some_rx,
        jobs_some: mcj_some_rx,
        route,
    }
}

/// The controller of a kind reconciled apart from the MultiClusterDeployments
/// (MultiClusterResources, MultiClusterJobs), and its view of the objects (for the first pass).
fn side_controller<K, F>(
    ctx: Arc<Context>,
    all: tokio::sync::mpsc::Receiver<()>,
    some: tokio::sync::mpsc::UnboundedReceiver<WorkloadRef>,
    shutdown: CancellationToken,
    reconcile: impl FnMut(Arc<K>, Arc<Context>) -> F + Send + 'static,
    error_policy: impl Fn(Arc<K>, &crate::error::Error, Arc<Context>) -> kube::runtime::controller::Action
    + Send
    + Sync
    + 'static,
) -> (impl std::future::Future<Output = ()>, Reflected<K>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    F: std::future::Future<Output = Result<kube::runtime::controller::Action, crate::error::Error>>
        + Send
        + 'static,
{
    let api: Api<K> = Api::all(ctx.client.clone());
    let all = futures::stream::unfold(all, |mut rx| async move { rx.recv().await.map(|()| ((), rx)) });
    let some = futures::stream::unfold(some, |mut rx| async move {
        rx.recv()
            .await
            .map(|w: WorkloadRef| (ObjectRef::<K>::new(&w.name).within(&w.namespace), rx))
    });
    let (reader, writer) = kube::runtime::reflector::store();
    // Its own status writes are not a reason to reconcile (see `what_a_plan_reads`).
    let changes = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(crate::watch::forget_unread)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(
            |object: &K| {
                use std::hash::{Hash, Hasher};
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                let metadata = object.meta();
                metadata.uid.hash(&mut hasher);
                metadata.generation.hash(&mut hasher);
                metadata.finalizers.hash(&mut hasher);
                metadata
                    .deletion_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
                    .hash(&mut hasher);
                Some(hasher.finish())
            },
            Default::default(),
        );
    let controller = Controller::for_stream(changes, reader)
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY));
    let known = controller.store();
    let known_at_stop = known.clone();
    let stopping = shutdown.clone();
    let controller = controller
        .reconcile_all_on(all)
        .reconcile_on(some)
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => debug!(object = %object, "reconciled"),
                Err(error) => warn!(error = %error, "reconcile failed"),
            }
        });
    // As for the MultiClusterDeployments' controller (see `run`).
    let stop = async move {
        stopping.cancelled().await;
        if known_at_stop.wait_until_ready().now_or_never().is_none() {
            return;
        }
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let running = async {
        tokio::select! {
            () = controller => {}
            () = stop => {}
        }
    };
    (running, known)
}

/// How long reconciles under way at shutdown may take to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Waits until every MultiClusterDeployment, MultiClusterResource and MultiClusterJob known once
/// the controllers' views are complete has
/// been reconciled with the whole fleet in view (see [`Context::awaited_clusters`]), gives every
/// known cluster a work set, then publishes. An object whose reconcile keeps failing keeps the
/// sets incomplete: agents that hold a set keep holding it, which is the safe side.
async fn publish_after_first_pass(
    known: Reflected<MultiClusterDeployment>,
    resources: Reflected<MultiClusterResource>,
    jobs: Reflected<MultiClusterJob>,
    ctx: Arc<Context>,
    shutdown: CancellationToken,
) {
    tokio::select! {
        () = shutdown.cancelled() => return,
        ready = async {
            tokio::try_join!(known.wait_until_ready(), resources.wait_until_ready(), jobs.wait_until_ready())
        } => {
            if ready.is_err() { return }
        }
    }
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mut objects: Vec<String> = known
            .state()
            .iter()
            .map(|mcd| format!("{}/{}", mcd.namespace().unwrap_or_default(), mcd.name_any()))
            .collect();
        objects.extend(resources.state().iter().map(|mcr| mcr::first_pass_key(mcr)));
        objects.extend(jobs.state().iter().map(|mcj| mcj::first_pass_key(mcj)));
        if ctx.first_pass_missing(&objects) == 0 {
            break;
        }
    }
    let mut backoff = Duration::from_millis(200);
    loop {
        let published = async {
            let created = give_every_cluster_a_set(&ctx).await?;
            ctx.store
                .mark_published()
                .await
                .map_err(crate::error::Error::store("publishing the work sets"))?;
            Ok::<_, crate::error::Error>(created)
        };
        match published.await {
            Ok(created) => {
                ctx.signals.publish();
                ctx.end_first_pass();
                info!(
                    empty_sets_created = created,
                    "every workload's objects are published"
                );
                return;
            }
            Err(error) => {
                warn!(error = %error, "cannot give every cluster a work set and publish; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// Writes an empty work set for every known cluster that has none, under the work sets' lock so
/// no reconcile writes in between; answers how many it wrote.
async fn give_every_cluster_a_set(ctx: &Context) -> Result<usize, crate::error::Error> {
    let index = &ctx.sources.index;
    let mut work = index.work().await;
    // The first pass's changes are in the store before the sets are said complete.
    for (cluster, write) in work.flush().await? {
        if write.changed {
            ctx.signals.notify(&cluster, write.revision);
        }
    }
    let mut created = 0;
    for cluster in index.clusters().keys() {
        let store = crate::error::Error::store;
        if ctx
            .store
            .get_work(cluster)
            .await
            .map_err(store("reading a work set"))?
            .is_none()
        {
            let write = ctx
                .store
                .put_work(cluster, &[])
                .await
                .map_err(store("giving a cluster its first work set"))?;
            ctx.signals.notify(cluster, write.revision);
            created += 1;
        }
    }
    Ok(created)
}

/// Writes the work sets the reconciles changed, until `shutdown` (then once more): woken by
/// each change, it writes every set that changed since it last wrote, so the changes of
/// reconciles that come together are written, and fetched by each agent, once.
pub async fn flush_work(ctx: Arc<Context>, shutdown: CancellationToken) {
    let index = &ctx.sources.index;
    let changed = index.work_changed().await;
    let mut backoff = Duration::from_millis(100);
    loop {
        let stopping = tokio::select! {
            () = shutdown.cancelled() => true,
            () = changed.notified() => false,
        };
        let written = index.work().await.flush().await;
        match written {
            Ok(writes) => {
                backoff = Duration::from_millis(100);
                for (cluster, write) in writes {
                    if write.changed {
                        debug!(cluster = %cluster, revision = write.revision, "work changed");
                        ctx.signals.notify(&cluster, write.revision);
                    }
                }
            }
            Err(error) => {
                warn!(error = %error, retry_in = ?backoff, "writing the work sets failed; retrying");
                changed.notify_one();
                if !stopping {
                    tokio::select! {
                        () = shutdown.cancelled() => {}
                        () = tokio::time::sleep(backoff) => {}
                    }
                }
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
        if stopping {
            return;
        }
    }
}

/// A hash of what a plan reads of a MultiClusterDeployment's metadata and spec (not its status).
fn what_a_plan_reads(mcd: &MultiClusterDeployment) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let metadata = &mcd.metadata;
    metadata.uid.hash(&mut hasher);
    metadata.generation.hash(&mut hasher);
    metadata.finalizers.hash(&mut hasher);
    metadata.annotations.hash(&mut hasher);
    metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// The MultiClusterDeployments in `object`'s namespace whose pod template (or
/// `spec.dependencies.include`) refers to it.
fn referring<K: kube::Resource>(
    known: &Reflected<MultiClusterDeployment>,
    kind: DependencyKind,
    object: &K,
) -> Vec<ObjectRef<MultiClusterDeployment>> {
    let namespace = object.namespace();
    let name = object.name_any();
    known
        .state()
        .iter()
        .filter(|mcd| mcd.namespace() == namespace)
        .filter(|mcd| {
            crate::render::dependencies(&mcd.spec.template.spec, &mcd.spec.dependencies)
                .contains(&(kind, name.clone()))
        })
        .map(|mcd| ObjectRef::from_obj(mcd.as_ref()))
        .collect()
}
