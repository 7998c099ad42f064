//! `nave unjoin`: takes a cluster out of the fleet by deleting its WorkloadCluster. The hub's
//! finalizer does the rest: the workloads move away make-before-break, the hub waits until the
//! agent has applied the empty work set, forgets the cluster (its credentials revoked, its name
//! refused to the fleet's bootstrap token) and lets the object go.

use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use nave_api::conditions::{self, types};
use nave_api::{REMOVE_WITHOUT_AGENT_ANNOTATION, WorkloadCluster};
use serde_json::json;

use crate::output::render;
use crate::{CliError, Format, Global, kube_client};

/// What the hub says it waits for, from the object's `Removing` condition.
fn waiting_for(object: &WorkloadCluster) -> Option<String> {
    let conds = &object.status.as_ref()?.conditions;
    conditions::find(conds, types::REMOVING).map(|c| c.message.clone())
}

/// Deletes `cluster`'s WorkloadCluster; with `force`, first lets the hub forget it without
/// waiting for its agent. With `wait`, follows the object until it is gone, printing what the
/// hub waits for as it changes, and fails when `wait` passes.
pub async fn unjoin(
    global: &Global,
    cluster: &str,
    force: bool,
    wait: Option<Duration>,
) -> Result<String, CliError> {
    let client = kube_client(global).await?;
    let api: Api<WorkloadCluster> = Api::all(client);
    let what = format!("WorkloadCluster {cluster}");
    if force {
        let patch = json!({"metadata": {"annotations": {REMOVE_WITHOUT_AGENT_ANNOTATION: "true"}}});
        api.patch(cluster, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|e| CliError::kube(&what, e))?;
    }
    let deleted = api
        .delete(cluster, &DeleteParams::default())
        .await
        .map_err(|e| CliError::kube(&what, e))?;
    // Without the hub's finalizer (a hub older than it, or none running) the object is gone at
    // once and nothing was withdrawn.
    let finalized = deleted.left().is_some_and(|o| {
        o.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == nave_api::CLUSTER_FINALIZER))
    });
    let mut last = None;
    if let (Some(limit), true) = (wait, finalized) {
        let deadline = tokio::time::Instant::now().checked_add(limit);
        let mut events = watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .boxed();
        let ours = |o: &WorkloadCluster| o.metadata.name.as_deref() == Some(cluster);
        loop {
            let next = crate::next_until(&mut events, deadline).await;
            let event = match next {
                None => {
                    return Err(CliError::failed(format!(
                        "cluster {cluster} not removed after {} s: {}",
                        limit.as_secs(),
                        last.as_deref()
                            .unwrap_or("the hub has not said why (is it running?)")
                    )));
                }
                Some(None) => return Err(CliError::failed("the watch of the WorkloadCluster ended")),
                Some(Some(event)) => event,
            };
            let object = match event {
                Err(e) => {
                    eprintln!("watching {what}: {e}; trying again");
                    continue;
                }
                Ok(watcher::Event::Delete(object)) if ours(&object) => break,
                Ok(watcher::Event::InitDone) => match api.get_opt(cluster).await {
                    Ok(None) => break,
                    Ok(Some(object)) => object,
                    Err(e) => return Err(CliError::kube(&what, e)),
                },
                Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) if ours(&object) => {
                    object
                }
                Ok(_) => continue,
            };
            let now = waiting_for(&object);
            if now.is_some() && now != last {
                if global.output == Format::Table {
                    eprintln!("{}", now.as_deref().unwrap_or_default());
                }
                last = now;
            }
        }
    }
    let removed = wait.is_some() || !finalized;
    let result = json!({"cluster": cluster, "removed": removed, "force": force, "hubFinalizer": finalized});
    render(global.output, &result, |_| {
        if !finalized {
            format!(
                "WorkloadCluster {cluster} deleted; the hub's finalizer was not on it, so nothing was \
                 withdrawn: remove the cluster from the hub with `nave-hub admin remove {cluster}`\n"
            )
        } else if removed {
            format!(
                "cluster {cluster} removed: its work moved away, its agent's credentials are revoked; \
                 `nave join {cluster}` brings it back\n"
            )
        } else {
            format!(
                "cluster {cluster} is being removed: its work moves away, then the hub forgets it \
                 (`nave clusters` shows Removing; --wait follows it)\n"
            )
        }
    })
}
