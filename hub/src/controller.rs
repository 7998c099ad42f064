//! The controllers over Nave's CRDs in the management cluster.
//!
//! One controller today: [`mcd`] reconciles MultiClusterDeployments, and with them the
//! MultiClusterServices that follow them (a change to a MultiClusterService reconciles the
//! MultiClusterDeployment it names). Agents' reports reach it through the reconcile trigger.

pub mod mcd;

use std::sync::Arc;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use nave_api::{MultiClusterDeployment, MultiClusterService};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::context::Context;

/// Runs the controllers until `shutdown` is cancelled. Every message on `triggered` reconciles
/// every MultiClusterDeployment (agents reported new capacity or status).
pub async fn run(ctx: Arc<Context>, triggered: mpsc::Receiver<()>, shutdown: CancellationToken) {
    let mcds: Api<MultiClusterDeployment> = Api::all(ctx.client.clone());
    let services: Api<MultiClusterService> = Api::all(ctx.client.clone());
    let trigger = futures::stream::unfold(
        triggered,
        |mut rx| async move { rx.recv().await.map(|()| ((), rx)) },
    );
    Controller::new(mcds, watcher::Config::default())
        .watches(services, watcher::Config::default(), |mcs| {
            let namespace = mcs.metadata.namespace.clone()?;
            let name = mcs.spec.deployment.clone()?;
            Some(ObjectRef::<MultiClusterDeployment>::new(&name).within(&namespace))
        })
        .reconcile_all_on(trigger)
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
