//! The controllers over Nave's CRDs in the management cluster.
//!
//! One controller today: [`mcd`] reconciles MultiClusterDeployments, and with them what follows
//! them: a change to a MultiClusterService reconciles the MultiClusterDeployment it names, and a
//! change to a ConfigMap or Secret reconciles every MultiClusterDeployment whose pod template
//! refers to it (so the copies in the workload clusters follow the source). Agents' reports reach
//! it through the reconcile trigger (the workloads a report concerns), and so do changes of the
//! objects [`crate::watch`] keeps: a MultiClusterService reconciles the workload it names, an
//! admin's edit of a WorkloadCluster (labels, cordon, burst-only) every MultiClusterDeployment,
//! since any may be placed there.

mod context;
pub mod heartbeats;
pub mod mcd;

pub use self::context::Context;

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store as Reflected};
use kube::runtime::{Controller, watcher};
use nave_api::wire::WorkloadRef;
use nave_api::{DependencyKind, MultiClusterDeployment};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

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
    let controller = Controller::new(mcds, watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY));
    let known = controller.store();
    let known_too = known.clone();
    controller
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
        })
        .await;
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
