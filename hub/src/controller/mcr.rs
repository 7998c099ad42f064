//! Reconciles a MultiClusterResource: validate, select clusters, render, write, report.
//!
//! ```text
//!  MCR ─► render::resource::validate (kinds the admin allows, namespace, overrides)
//!   │        └─invalid─► Accepted=False + Warning event; the clusters keep what they had
//!   ├─► clusters: registered, accepted, not being removed, selected by spec.clusters/clusterSelector
//!   ├─► render per cluster ─► its objects replace its previous ones in each cluster's work set
//!   │        (a cluster where another contributor sends the same object gets none: Conflict)
//!   └─► agents' reports ─► status per cluster (Applied / Pending / Failed / Conflict), Ready
//! ```
//!
//! Deleting one runs the finalizer: its object leaves every work set (the agents prune it).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::runtime::finalizer::{Event, finalizer};
use kube::{Resource, ResourceExt};
use nave_api::conditions::{self, reasons, types};
use nave_api::wire::{StatusReport, WorkloadRef};
use nave_api::{ClusterResourceStatus, MultiClusterResource, MultiClusterResourceStatus, ResourceState};
use serde_json::{Value, json};
use tracing::{debug, info, instrument, warn};

use super::context::Context;
use super::mcd::{FINALIZER, condition, truncate};
use crate::error::Error;
use crate::render::resource::{self, ResourceError};
use crate::settings::HUB_NAME;

/// Longest message kept in a condition or an event.
const MAX_MESSAGE: usize = 1000;

/// Longest message kept per cluster (an agent's words about the object).
const MAX_CLUSTER_MESSAGE: usize = 300;

/// The `namespace/name` a MultiClusterResource is known by in the first pass (apart from the
/// MultiClusterDeployments' names).
pub fn first_pass_key(mcr: &MultiClusterResource) -> String {
    format!(
        "MultiClusterResource {}/{}",
        mcr.namespace().unwrap_or_default(),
        mcr.name_any()
    )
}

/// Its contributor reference in the work sets.
fn contributor(mcr: &MultiClusterResource) -> WorkloadRef {
    WorkloadRef::resource(mcr.namespace().unwrap_or_default(), &mcr.name_any())
}

/// Reconciles one MultiClusterResource through its finalizer.
#[instrument(skip_all, fields(namespace = %mcr.namespace().unwrap_or_default(), name = %mcr.name_any()))]
pub async fn reconcile(mcr: Arc<MultiClusterResource>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = mcr.namespace().ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<MultiClusterResource> = Api::namespaced(ctx.client.clone(), &namespace);
    let key = first_pass_key(&mcr);
    ctx.watched.ready().await?;
    if !ctx.awaited_clusters().is_empty() {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let result = finalizer(&api, FINALIZER, mcr, |event| async {
        match event {
            Event::Apply(mcr) => apply(mcr, &ctx).await,
            Event::Cleanup(mcr) => cleanup(mcr, &ctx).await,
        }
    })
    .await
    .map_err(|source| Error::Finalizer {
        object: key.clone(),
        source: Box::new(source),
    });
    if result.is_ok() {
        ctx.reconciled(&key);
        ctx.succeeded(&key);
    }
    result
}

/// Transient failure: retry with a per-object exponential backoff (1 s doubling up to 5 min).
pub fn error_policy(mcr: Arc<MultiClusterResource>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.retry_after_failure(&first_pass_key(&mcr), error)
}

async fn apply(mcr: Arc<MultiClusterResource>, ctx: &Context) -> Result<Action, Error> {
    let generation = mcr.metadata.generation;
    let scope = match resource::validate(&mcr, &ctx.resource_kinds) {
        Ok(scope) => scope,
        Err(error) => return invalid(&mcr, ctx, &error).await,
    };
    let workload = contributor(&mcr);
    let view = ctx.sources.view();
    // The clusters selected: registered (they have a work set), accepted, not being removed.
    let mut selected: Vec<String> = Vec::new();
    for name in &view.registered {
        let removing = view
            .objects
            .get(name)
            .is_some_and(|o| o.metadata.deletion_timestamp.is_some());
        let Some(cluster) = view.fleet.get(name) else {
            continue;
        };
        if removing || cluster.unaccepted {
            continue;
        }
        match mcr.spec.selects(name, &cluster.labels) {
            Ok(true) => selected.push(name.clone()),
            Ok(false) => {}
            Err(e) => return invalid(&mcr, ctx, &ResourceError::Invalid(e.to_string())).await,
        }
    }
    let mut rendered: BTreeMap<String, Value> = BTreeMap::new();
    for name in &selected {
        let labels = view.fleet.get(name).map(|c| c.labels.clone()).unwrap_or_default();
        match resource::render(&mcr, scope, name, &labels) {
            Ok(object) => {
                rendered.insert(name.clone(), object);
            }
            Err(error) => return invalid(&mcr, ctx, &error).await,
        }
    }
    // Dispatch, keeping away from what another contributor sends there.
    let mut conflicts: BTreeMap<String, String> = BTreeMap::new();
    {
        let mut work = ctx.sources.index.work().await;
        let mut touched = work.holding(&view.registered, &workload).await?;
        touched.extend(rendered.keys().cloned());
        for cluster in &touched {
            let mine: Vec<Value> = rendered.get(cluster).cloned().into_iter().collect();
            let taken = work.held_by_others(cluster, &workload, &mine).await?;
            let mine = match taken.first() {
                Some(((kind, namespace, name), other)) => {
                    let other = match WorkloadRef::from_label_value(other) {
                        Some(w) => describe(&w),
                        None => other.clone(),
                    };
                    let at = if namespace.is_empty() {
                        name.clone()
                    } else {
                        format!("{namespace}/{name}")
                    };
                    conflicts.insert(cluster.clone(), format!("{kind} {at} is already sent by {other}"));
                    Vec::new()
                }
                None => mine,
            };
            work.replace(cluster, &workload, mine).await?;
        }
    }
    let reports = ctx.sources.index.reports();
    let clusters: Vec<ClusterResourceStatus> = selected
        .iter()
        .map(|cluster| {
            let (state, message) = match (conflicts.get(cluster), rendered.get(cluster)) {
                (Some(conflict), _) => (ResourceState::Conflict, Some(conflict.clone())),
                (None, Some(object)) => state_in(reports.get(cluster).map(AsRef::as_ref), &workload, object),
                (None, None) => (ResourceState::Pending, None),
            };
            ClusterResourceStatus {
                name: cluster.clone(),
                state,
                message: message.map(|m| truncate(&m, MAX_CLUSTER_MESSAGE)),
            }
        })
        .collect();
    let applied = clusters
        .iter()
        .filter(|c| c.state == ResourceState::Applied)
        .count();
    let mut status = mcr.status.clone().unwrap_or_default();
    let (api_version, kind) = mcr.spec.manifest_kind();
    conditions::upsert(
        &mut status.conditions,
        condition(
            types::ACCEPTED,
            conditions::TRUE,
            reasons::SENT,
            format!(
                "{kind} ({api_version}) sent to {} selected clusters",
                selected.len()
            ),
            generation,
        ),
    );
    let not_applied: Vec<String> = clusters
        .iter()
        .filter(|c| c.state != ResourceState::Applied)
        .map(|c| match &c.message {
            Some(m) => format!("{}: {:?}: {m}", c.name, c.state),
            None => format!("{}: {:?}", c.name, c.state),
        })
        .collect();
    let ready = if selected.is_empty() {
        condition(
            types::READY,
            conditions::FALSE,
            reasons::NO_CLUSTERS_SELECTED,
            "no cluster of the fleet is selected",
            generation,
        )
    } else if not_applied.is_empty() {
        condition(
            types::READY,
            conditions::TRUE,
            reasons::APPLIED,
            format!("applied in {applied} clusters"),
            generation,
        )
    } else {
        let reason = if !conflicts.is_empty() {
            reasons::CONFLICT
        } else if clusters.iter().any(|c| c.state == ResourceState::Failed) {
            reasons::APPLY_FAILED
        } else {
            reasons::APPLY_PENDING
        };
        condition(
            types::READY,
            conditions::FALSE,
            reason,
            truncate(&format!("not applied in {}", not_applied.join("; ")), MAX_MESSAGE),
            generation,
        )
    };
    let was_ready = status.condition(types::READY).cloned();
    conditions::upsert(&mut status.conditions, ready.clone());
    status.observed_generation = generation;
    status.cluster_count = i32::try_from(selected.len()).unwrap_or(i32::MAX);
    status.applied_count = i32::try_from(applied).unwrap_or(i32::MAX);
    status.clusters = clusters;
    let newly_failing = ready.reason != reasons::APPLY_PENDING
        && ready.status == conditions::FALSE
        && was_ready.is_none_or(|c| c.reason != ready.reason || c.message != ready.message);
    if newly_failing {
        publish(ctx, &mcr, EventType::Warning, &ready.reason, &ready.message).await;
    }
    write_status(ctx, &mcr, &status).await?;
    debug!(selected = selected.len(), applied, "reconciled");
    // Reports of the agents reconcile it again; a resync catches the rest.
    Ok(Action::requeue(ctx.resync))
}

/// How a contributor reads in a message.
fn describe(workload: &WorkloadRef) -> String {
    match workload.resource_name() {
        Some(name) => format!("MultiClusterResource {}/{name}", workload.namespace),
        None => format!("MultiClusterDeployment {workload}"),
    }
}

/// Where `object` stands in the cluster whose latest report is `report`.
fn state_in(
    report: Option<&StatusReport>,
    workload: &WorkloadRef,
    object: &Value,
) -> (ResourceState, Option<String>) {
    let Some(report) = report else {
        return (
            ResourceState::Pending,
            Some("its agent has not reported yet".to_owned()),
        );
    };
    let (kind, namespace, name) = crate::render::object_key(object);
    let namespace = Some(namespace).filter(|n| !n.is_empty());
    let hash = object["metadata"]["annotations"][nave_api::TEMPLATE_HASH_ANNOTATION].as_str();
    let reported = report.objects.iter().find(|o| {
        o.kind == kind && o.name == name && o.namespace == namespace && o.workload.as_ref() == Some(workload)
    });
    let error = reported.and_then(|o| o.error.clone()).or_else(|| {
        report
            .apply_errors
            .iter()
            .find(|e| e.kind == kind && e.name == name && e.namespace == namespace)
            .map(|e| e.message.clone())
    });
    match (reported, error) {
        (_, Some(error)) => (ResourceState::Failed, Some(error)),
        (Some(o), None) if o.template_hash.is_some() && o.template_hash.as_deref() == hash => {
            (ResourceState::Applied, None)
        }
        _ => (ResourceState::Pending, None),
    }
}

/// Records why the spec cannot be sent: `Accepted=False`, a Warning event (once per distinct
/// problem). What the clusters were sent before stays: a spec gone wrong takes nothing away.
async fn invalid(mcr: &MultiClusterResource, ctx: &Context, error: &ResourceError) -> Result<Action, Error> {
    let generation = mcr.metadata.generation;
    let reason = match error {
        ResourceError::KindNotAllowed(_) => reasons::KIND_NOT_ALLOWED,
        ResourceError::Invalid(_) => reasons::INVALID_SPEC,
    };
    let message = truncate(
        &format!("{error}; the clusters keep what they were sent before"),
        MAX_MESSAGE,
    );
    let mut status = mcr.status.clone().unwrap_or_default();
    let was = status.condition(types::ACCEPTED).cloned();
    conditions::upsert(
        &mut status.conditions,
        condition(types::ACCEPTED, conditions::FALSE, reason, &message, generation),
    );
    // This generation is not what the clusters run: not Ready, whatever the last one was.
    conditions::upsert(
        &mut status.conditions,
        condition(types::READY, conditions::FALSE, reason, &message, generation),
    );
    status.observed_generation = generation;
    if was.is_none_or(|c| c.reason != reason || c.message != message) {
        info!(message = %message, "not sent");
        publish(ctx, mcr, EventType::Warning, reason, &message).await;
    }
    write_status(ctx, mcr, &status).await?;
    Ok(Action::await_change())
}

async fn publish(ctx: &Context, mcr: &MultiClusterResource, type_: EventType, reason: &str, note: &str) {
    let event = KubeEvent {
        type_,
        reason: reason.to_owned(),
        note: Some(truncate(note, MAX_MESSAGE)),
        action: "Send".to_owned(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &mcr.object_ref(&())).await {
        warn!(error = %error, reason, "publishing an event failed");
    }
}

async fn write_status(
    ctx: &Context,
    mcr: &MultiClusterResource,
    status: &MultiClusterResourceStatus,
) -> Result<(), Error> {
    if mcr.status.as_ref() == Some(status) {
        return Ok(());
    }
    let api: Api<MultiClusterResource> =
        Api::namespaced(ctx.client.clone(), &mcr.namespace().unwrap_or_default());
    let mut patch = json!({
        "apiVersion": nave_api::API_VERSION,
        "kind": "MultiClusterResource",
        "status": status,
    });
    // A merge patch leaves out what is absent: an emptied list is written as empty.
    if status.clusters.is_empty() {
        patch["status"]["clusters"] = json!([]);
    }
    api.patch_status(
        &mcr.name_any(),
        &PatchParams::apply(HUB_NAME),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::kube("writing MultiClusterResource status"))?;
    Ok(())
}

async fn cleanup(mcr: Arc<MultiClusterResource>, ctx: &Context) -> Result<Action, Error> {
    let workload = contributor(&mcr);
    ctx.withdraw(&workload).await?;
    info!(resource = %workload, "removed from every cluster");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nave_api::wire::{ApplyError, ObjectStatus};

    fn role(hash: &str) -> Value {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "reader", "namespace": "shop",
                "annotations": {"nave.dev/template-hash": hash}},
        })
    }

    fn reported(hash: Option<&str>, error: Option<&str>) -> ObjectStatus {
        ObjectStatus {
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: "Role".into(),
            namespace: Some("shop".into()),
            name: "reader".into(),
            workload: Some(WorkloadRef::resource("shop", "reader")),
            template_hash: hash.map(str::to_owned),
            error: error.map(str::to_owned),
            ..Default::default()
        }
    }

    #[test]
    fn applied_means_the_agent_reports_the_content_sent_now() {
        let me = WorkloadRef::resource("shop", "reader");
        let report = |objects, apply_errors| StatusReport {
            objects,
            apply_errors,
            ..Default::default()
        };
        assert_eq!(state_in(None, &me, &role("a")).0, ResourceState::Pending);
        assert_eq!(
            state_in(
                Some(&report(vec![reported(Some("a"), None)], vec![])),
                &me,
                &role("a")
            ),
            (ResourceState::Applied, None)
        );
        assert_eq!(
            state_in(
                Some(&report(vec![reported(Some("old"), None)], vec![])),
                &me,
                &role("a")
            )
            .0,
            ResourceState::Pending,
            "the content before an edit is not the content now"
        );
        let refused = "kind Role.rbac.authorization.k8s.io is not in this agent's allow-list";
        assert_eq!(
            state_in(
                Some(&report(vec![reported(None, Some(refused))], vec![])),
                &me,
                &role("a")
            ),
            (ResourceState::Failed, Some(refused.to_owned()))
        );
        let error = ApplyError {
            kind: "Role".into(),
            namespace: Some("shop".into()),
            name: "reader".into(),
            message: "forbidden".into(),
            ..Default::default()
        };
        assert_eq!(
            state_in(Some(&report(vec![], vec![error])), &me, &role("a")).0,
            ResourceState::Failed
        );
        let mut other = reported(Some("a"), None);
        other.workload = Some(WorkloadRef::new("shop", "reader"));
        assert_eq!(
            state_in(Some(&report(vec![other], vec![])), &me, &role("a")).0,
            ResourceState::Pending,
            "the same object sent for another contributor is not this one's"
        );
    }
}
