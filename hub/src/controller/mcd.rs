//! Reconciles a MultiClusterDeployment: decide, render, dispatch, report.
//!
//! ```text
//!  MCD ─► validate (template, overrides) ──invalid──► Scheduled=False/InvalidSpec + Warning event
//!   │
//!   ├─► Fleet (store records + WorkloadClusters) ┐
//!   ├─► Request (spec, current from the store)   ├─► decide ─► store placement (+ history)
//!   ├─► Ledger (others' replicas not yet seen)   ┘
//!   ├─► render per cluster ─► merge into each cluster's work set ─► put_work ─► wake agents
//!   └─► agents' status reports ─► status (per cluster, totals, conditions) + Events
//! ```
//!
//! Deleting an MCD runs the finalizer: its objects leave every work set (the agents prune them)
//! and its current placement is forgotten (its history stays).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::runtime::finalizer::{Event, finalizer};
use kube::{Resource, ResourceExt};
use nave_api::conditions::{self, reasons, types};
use nave_api::wire::{StatusReport, WORKLOAD_LABEL, WorkloadRef};
use nave_api::{
    ClusterPlacementStatus, DependencyKind, MultiClusterDeployment, MultiClusterDeploymentStatus,
    MultiClusterService,
};
use nave_policies::{Decision, Request, Role};
use serde_json::{Value, json};
use tracing::{debug, info, instrument, warn};

use crate::context::{Context, HUB_NAME};
use crate::error::Error;
use crate::failover;
use crate::fleet::{self, FleetView, deployment_status};
use crate::render::{self, merge_work};
use crate::scheduler;
use crate::store::PlacementUpdate;

/// Finalizer that removes an MCD's objects from every cluster before the MCD goes.
pub const FINALIZER: &str = "nave.dev/cleanup";

/// Event reasons.
pub mod event_reasons {
    /// A placement was decided or changed.
    pub const SCHEDULED: &str = "Scheduled";
    /// Some replicas have no cluster.
    pub const FAILED_SCHEDULING: &str = "FailedScheduling";
    /// The spec cannot be acted on.
    pub const INVALID_SPEC: &str = nave_api::conditions::reasons::INVALID_SPEC;
}

/// Event actions (what the hub did).
const ACTION_SCHEDULE: &str = "Schedule";
const ACTION_VALIDATE: &str = "Validate";

/// History triggers.
const TRIGGER_SPEC: &str = "spec";
const TRIGGER_FLEET: &str = "fleet";

/// Most characters of an Event note (the API server caps it at 1 KiB).
const MAX_NOTE: usize = 1000;

/// Reconciles one MultiClusterDeployment through its finalizer.
#[instrument(skip_all, fields(namespace = %mcd.namespace().unwrap_or_default(), name = %mcd.name_any()))]
pub async fn reconcile(mcd: Arc<MultiClusterDeployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = mcd.namespace().ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<MultiClusterDeployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let object = format!("{namespace}/{}", mcd.name_any());
    let result = finalizer(&api, FINALIZER, mcd, |event| async {
        match event {
            Event::Apply(mcd) => apply(mcd, &ctx).await,
            Event::Cleanup(mcd) => cleanup(mcd, &ctx).await,
        }
    })
    .await
    .map_err(|source| Error::Finalizer {
        object: object.clone(),
        source: Box::new(source),
    });
    let mut backoff = ctx.backoff.lock().unwrap_or_else(|e| e.into_inner());
    if result.is_ok() {
        backoff.remove(&object);
    }
    result
}

/// Transient failure: retry with a per-object exponential backoff (1 s doubling up to 5 min).
pub fn error_policy(mcd: Arc<MultiClusterDeployment>, error: &Error, ctx: Arc<Context>) -> Action {
    let object = format!("{}/{}", mcd.namespace().unwrap_or_default(), mcd.name_any());
    ctx.metrics.record_reconcile_error();
    let mut backoff = ctx.backoff.lock().unwrap_or_else(|e| e.into_inner());
    let attempts = backoff.entry(object.clone()).or_insert(0);
    *attempts = attempts.saturating_add(1);
    let delay = Duration::from_secs(1u64 << (*attempts).min(9)).min(Duration::from_secs(300));
    warn!(object = %object, error = %error, source = ?std::error::Error::source(error), retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        last_transition_time: Time(jiff::Timestamp::now()),
        observed_generation: generation,
    }
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_owned(),
    }
}

async fn publish(
    ctx: &Context,
    mcd: &MultiClusterDeployment,
    type_: EventType,
    reason: &str,
    action: &str,
    note: &str,
) {
    // One line: `kubectl describe` prints events as table rows.
    let note = note
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let event = KubeEvent {
        type_,
        reason: reason.to_owned(),
        note: Some(truncate(&note, MAX_NOTE)),
        action: action.to_owned(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &mcd.object_ref(&())).await {
        warn!(error = %error, reason, "publishing an event failed");
    }
}

async fn write_status(
    ctx: &Context,
    mcd: &MultiClusterDeployment,
    status: &MultiClusterDeploymentStatus,
) -> Result<(), Error> {
    if mcd.status.as_ref() == Some(status) {
        return Ok(());
    }
    let namespace = mcd.namespace().unwrap_or_default();
    let api: Api<MultiClusterDeployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = json!({
        "apiVersion": nave_api::API_VERSION,
        "kind": "MultiClusterDeployment",
        "status": status,
    });
    api.patch_status(
        &mcd.name_any(),
        &PatchParams::apply(HUB_NAME),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::kube("writing MultiClusterDeployment status"))?;
    Ok(())
}

/// Why the spec cannot be acted on, with the field path; `None` when it can.
pub(crate) fn validate(
    mcd: &MultiClusterDeployment,
) -> Result<k8s_openapi::api::apps::v1::DeploymentSpec, String> {
    if mcd.spec.replicas < 0 {
        return Err(format!(
            "spec.replicas: must not be negative, got {}",
            mcd.spec.replicas
        ));
    }
    let spec = mcd.spec.template.deployment_spec().map_err(|e| e.to_string())?;
    for (index, over) in mcd.spec.overrides.iter().enumerate() {
        over.applies_to(index, "", &BTreeMap::new())
            .map_err(|e| e.to_string())?;
    }
    Ok(spec)
}

async fn invalid(mcd: &MultiClusterDeployment, ctx: &Context, message: String) -> Result<Action, Error> {
    let generation = mcd.metadata.generation;
    let mut status = mcd.status.clone().unwrap_or_default();
    let was = conditions::find(&status.conditions, types::SCHEDULED).cloned();
    conditions::upsert(
        &mut status.conditions,
        condition(
            types::SCHEDULED,
            conditions::FALSE,
            reasons::INVALID_SPEC,
            &message,
            generation,
        ),
    );
    conditions::upsert(
        &mut status.conditions,
        condition(
            types::DEGRADED,
            conditions::TRUE,
            reasons::INVALID_SPEC,
            &message,
            generation,
        ),
    );
    status.observed_generation = generation;
    // One event per distinct problem, not one per resync.
    let new = was.is_none_or(|c| c.reason != reasons::INVALID_SPEC || c.message != message);
    if new {
        info!(message = %message, "invalid spec");
        publish(
            ctx,
            mcd,
            EventType::Warning,
            event_reasons::INVALID_SPEC,
            ACTION_VALIDATE,
            &message,
        )
        .await;
    }
    write_status(ctx, mcd, &status).await?;
    Ok(Action::await_change())
}

async fn apply(mcd: Arc<MultiClusterDeployment>, ctx: &Context) -> Result<Action, Error> {
    let deployment_spec = match validate(&mcd) {
        Ok(spec) => spec,
        Err(message) => return invalid(&mcd, ctx, message).await,
    };
    let workload = render::workload_ref(&mcd);
    let key = workload.to_string();
    let uid = mcd.uid().unwrap_or_default();
    let generation = mcd.metadata.generation.unwrap_or(0);

    // The fleet: every registered cluster and every WorkloadCluster.
    let FleetView {
        fleet,
        registered,
        now,
        ..
    } = fleet::gather(&ctx.client, ctx.store.as_ref(), ctx.timings.heartbeat_grace)
        .await?
        .with_usage(&ctx.usage);
    let reports = fleet::reports(ctx.store.as_ref(), &registered).await?;

    // The request, steady from the stored placement of this incarnation.
    let demand = scheduler::demand(&deployment_spec);
    let previous = ctx
        .store
        .get_placement(&workload.namespace, &workload.name)
        .await
        .map_err(Error::store("reading the placement"))?
        .filter(|p| p.uid == uid);
    let current = previous
        .as_ref()
        .map(|p| scheduler::stored_assignment(&p.decision))
        .unwrap_or_default();
    let replicas = u32::try_from(mcd.spec.replicas).unwrap_or(0);
    let request =
        Request::new(replicas, demand.clone(), scheduler::policy(&mcd.spec.placement)).with_current(current);
    let mut failover = failover::Plan::new(
        &ctx.health.snapshot(),
        mcd.spec.placement.failback,
        previous.as_ref().map(|p| &p.decision),
        &request.current,
        &fleet,
        now,
    );

    // Other workloads' replicas that agents have not reported running yet take room too.
    let ledger = fleet::ledger(ctx.store.as_ref(), &reports, Some(&workload)).await?;

    let decision = ctx
        .metrics
        .time_scheduling(|| failover.decide(&fleet, &ledger, &request));
    debug!(assignment = ?decision.assignment, unplaced = decision.unplaced, "decided");
    let trigger = if let Some(trigger) = failover.trigger() {
        trigger
    } else if previous.as_ref().is_none_or(|p| p.generation != generation) {
        TRIGGER_SPEC
    } else {
        TRIGGER_FLEET
    };
    let explanation = decision.to_string();
    let written = ctx
        .store
        .put_placement(&PlacementUpdate {
            namespace: workload.namespace.clone(),
            name: workload.name.clone(),
            uid,
            generation,
            decision: failover.annotate(scheduler::stored_decision(&decision, &demand)),
            trigger: trigger.to_owned(),
            reason: failover
                .reason(&decision)
                .unwrap_or_else(|| explanation.lines().next().unwrap_or_default().to_owned()),
            at: now,
        })
        .await
        .map_err(Error::store("storing the placement"))?;

    // Render every cluster's share.
    let mut rendered: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut shared = Vec::new();
    let mut missing = Vec::new();
    for (kind, name) in render::dependencies(&mcd.spec.template.spec, &mcd.spec.dependencies) {
        let object = match kind {
            DependencyKind::ConfigMap => {
                Api::<ConfigMap>::namespaced(ctx.client.clone(), &workload.namespace)
                    .get_opt(&name)
                    .await
                    .map(|o| o.map(|o| serde_json::to_value(o).unwrap_or_default()))
            }
            DependencyKind::Secret => Api::<Secret>::namespaced(ctx.client.clone(), &workload.namespace)
                .get_opt(&name)
                .await
                .map(|o| o.map(|o| serde_json::to_value(o).unwrap_or_default())),
        }
        .map_err(Error::kube("reading a dependency"))?;
        match object {
            Some(mut object) => {
                object["kind"] = json!(match kind {
                    DependencyKind::ConfigMap => "ConfigMap",
                    DependencyKind::Secret => "Secret",
                });
                shared.push(render::copy_dependency(&object, &workload));
            }
            None => missing.push(format!("{kind:?} {name}")),
        }
    }
    let services: Api<MultiClusterService> = Api::namespaced(ctx.client.clone(), &workload.namespace);
    let services: Vec<MultiClusterService> = services
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing MultiClusterServices"))?
        .items
        .into_iter()
        .filter(|s| s.spec.deployment.as_deref() == Some(workload.name.as_str()))
        .collect();
    let pod_selector = deployment_spec.selector.match_labels.clone().unwrap_or_default();
    for service in &services {
        shared.push(
            render::render_service(service, &workload, &pod_selector).map_err(|source| Error::Serialize {
                what: "a Service",
                source,
            })?,
        );
    }
    for (cluster, &n) in decision.assignment.iter().filter(|(_, n)| **n > 0) {
        let labels = fleet.get(cluster).map(|c| c.labels.clone()).unwrap_or_default();
        let deployment = match render::render_deployment(&mcd, cluster, &labels, n) {
            Ok(d) => d,
            Err(e) => return invalid(&mcd, ctx, e.to_string()).await,
        };
        let mut objects = vec![deployment];
        objects.extend(shared.iter().cloned());
        rendered.insert(cluster.clone(), objects);
    }

    // Dispatch: this workload's objects replace its previous ones in every cluster's set.
    {
        let _guard = ctx.work_lock.lock().await;
        for cluster in &registered {
            let current = ctx
                .store
                .get_work(cluster)
                .await
                .map_err(Error::store("reading work"))?;
            let mine = rendered.remove(cluster).unwrap_or_default();
            let before = current.map(|w| w.objects).unwrap_or_default();
            let merged = merge_work(&before, &workload, mine);
            if merged == before {
                continue;
            }
            let write = ctx
                .store
                .put_work(cluster, &merged)
                .await
                .map_err(Error::store("writing work"))?;
            if write.changed {
                info!(cluster = %cluster, revision = write.revision, "work changed");
                ctx.signals.notify(cluster, write.revision);
            }
        }
    }

    // Status from the decision and the agents' reports.
    let status = status_of(&mcd, &decision, &reports, &workload, &missing);
    write_status(ctx, &mcd, &status).await?;
    ctx.metrics.observe_mcd(&workload, &status);
    if !services.is_empty() {
        write_service_status(ctx, &services, &decision, &reports).await;
    }
    if written.changed {
        ctx.metrics.record_placement_change();
        let summary = explanation.lines().next().unwrap_or_default();
        if decision.unplaced > 0 {
            publish(
                ctx,
                &mcd,
                EventType::Warning,
                event_reasons::FAILED_SCHEDULING,
                ACTION_SCHEDULE,
                &explanation,
            )
            .await;
        } else {
            publish(
                ctx,
                &mcd,
                EventType::Normal,
                event_reasons::SCHEDULED,
                ACTION_SCHEDULE,
                &explanation,
            )
            .await;
        }
        info!(key = %key, summary = %summary, "placement changed");
        if let Some((type_, reason, note)) = failover.event(&decision) {
            if reason == crate::failover::FAILED_OVER {
                ctx.metrics.record_failover();
            }
            publish(ctx, &mcd, type_, reason, ACTION_SCHEDULE, &note).await;
        }
    }
    Ok(Action::requeue(ctx.timings.resync))
}

/// The status of an MCD: per cluster from the decision and the reports, totals as sums.
pub fn status_of(
    mcd: &MultiClusterDeployment,
    decision: &Decision,
    reports: &BTreeMap<String, StatusReport>,
    workload: &WorkloadRef,
    missing_dependencies: &[String],
) -> MultiClusterDeploymentStatus {
    let generation = mcd.metadata.generation;
    let mut status = mcd.status.clone().unwrap_or_default();
    let mut clusters = Vec::new();
    for (name, &desired) in decision.assignment.iter().filter(|(_, n)| **n > 0) {
        let (ready, available, pending) = deployment_status(reports.get(name), workload).unwrap_or((0, 0, 0));
        let burst = decision.cluster(name).is_some_and(|c| c.role == Role::Burst);
        clusters.push(ClusterPlacementStatus {
            name: name.clone(),
            desired: i32::try_from(desired).unwrap_or(i32::MAX),
            ready,
            available,
            pending,
            burst,
            message: decision.cluster(name).map(|c| truncate(&c.to_string(), 256)),
        });
    }
    let sum = |f: fn(&ClusterPlacementStatus) -> i32| clusters.iter().map(f).fold(0i32, i32::saturating_add);
    status.observed_generation = generation;
    status.replicas = sum(|c| c.desired);
    status.ready_replicas = sum(|c| c.ready);
    status.available_replicas = sum(|c| c.available);
    status.pending_replicas = sum(|c| c.pending);
    status.unplaced_replicas = i32::try_from(decision.unplaced).unwrap_or(i32::MAX);
    status.cluster_count = i32::try_from(clusters.len()).unwrap_or(i32::MAX);
    status.placement_summary = Some(
        clusters
            .iter()
            .map(|c| format!("{}={}", c.name, c.desired))
            .collect::<Vec<_>>()
            .join(","),
    );
    status.selector = Some(format!("{WORKLOAD_LABEL}={}", workload.label_value()));
    let placed = status.replicas;
    let wanted = mcd.spec.replicas;
    let summary = decision.to_string().lines().next().unwrap_or_default().to_owned();

    let scheduled = if decision.unplaced == 0 {
        condition(
            types::SCHEDULED,
            conditions::TRUE,
            reasons::ALL_REPLICAS_PLACED,
            &summary,
            generation,
        )
    } else {
        let eligible = decision.clusters.iter().any(|c| c.filter.is_none());
        let reason = if placed > 0 {
            reasons::PARTIALLY_PLACED
        } else if eligible {
            reasons::INSUFFICIENT_CAPACITY
        } else {
            reasons::NO_ELIGIBLE_CLUSTERS
        };
        condition(types::SCHEDULED, conditions::FALSE, reason, &summary, generation)
    };
    let available = if status.available_replicas >= placed && (placed > 0 || wanted == 0) {
        condition(
            types::AVAILABLE,
            conditions::TRUE,
            reasons::MINIMUM_REPLICAS_AVAILABLE,
            format!(
                "{} of {placed} placed replicas available",
                status.available_replicas
            ),
            generation,
        )
    } else {
        condition(
            types::AVAILABLE,
            conditions::FALSE,
            reasons::MINIMUM_REPLICAS_UNAVAILABLE,
            format!(
                "{} of {placed} placed replicas available",
                status.available_replicas
            ),
            generation,
        )
    };
    let rolled_out = clusters
        .iter()
        .all(|c| c.ready == c.desired && c.available == c.desired);
    let progressing = if rolled_out {
        condition(
            types::PROGRESSING,
            conditions::FALSE,
            reasons::ROLLOUT_COMPLETE,
            "every cluster runs its replicas",
            generation,
        )
    } else {
        condition(
            types::PROGRESSING,
            conditions::TRUE,
            reasons::ROLLOUT_IN_PROGRESS,
            format!("{} of {placed} placed replicas ready", status.ready_replicas),
            generation,
        )
    };
    let degraded = if decision.unplaced > 0 {
        condition(
            types::DEGRADED,
            conditions::TRUE,
            reasons::REPLICAS_UNPLACED,
            format!(
                "{} of {wanted} replicas have no cluster with room ({placed} placed)",
                decision.unplaced
            ),
            generation,
        )
    } else if status.pending_replicas > 0 {
        condition(
            types::DEGRADED,
            conditions::TRUE,
            reasons::PODS_PENDING,
            format!("{} replicas are Pending", status.pending_replicas),
            generation,
        )
    } else if !missing_dependencies.is_empty() {
        condition(
            types::DEGRADED,
            conditions::TRUE,
            reasons::DEPENDENCY_MISSING,
            format!(
                "referenced by the pod template but not found in namespace {}: {}",
                workload.namespace,
                missing_dependencies.join(", ")
            ),
            generation,
        )
    } else {
        condition(
            types::DEGRADED,
            conditions::FALSE,
            reasons::AS_EXPECTED,
            "every replica is placed and none is Pending",
            generation,
        )
    };
    for c in [scheduled, available, progressing, degraded] {
        conditions::upsert(&mut status.conditions, c);
    }
    status.clusters = clusters;
    status
}

/// Lists, in each MultiClusterService following this MCD, the clusters its Service goes to.
async fn write_service_status(
    ctx: &Context,
    services: &[MultiClusterService],
    decision: &Decision,
    reports: &BTreeMap<String, StatusReport>,
) {
    for service in services {
        let name = service.name_any();
        let namespace = service.namespace().unwrap_or_default();
        let clusters: Vec<Value> = decision
            .assignment
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(cluster, _)| {
                let ready = reports.get(cluster).is_some_and(|r| {
                    r.objects.iter().any(|o| {
                        o.kind == "Service" && o.name == name && o.namespace.as_deref() == Some(&namespace)
                    })
                });
                json!({"name": cluster, "ready": ready})
            })
            .collect();
        let all_ready = clusters.iter().all(|c| c["ready"] == true);
        let mut conds = service.status.clone().map(|s| s.conditions).unwrap_or_default();
        conditions::upsert(
            &mut conds,
            if all_ready {
                condition(
                    types::READY,
                    conditions::TRUE,
                    reasons::SERVICES_READY,
                    "",
                    service.metadata.generation,
                )
            } else {
                condition(
                    types::READY,
                    conditions::FALSE,
                    reasons::SERVICES_PENDING,
                    "not yet reported by every cluster",
                    service.metadata.generation,
                )
            },
        );
        let status = json!({
            "observedGeneration": service.metadata.generation,
            "clusterCount": clusters.len(),
            "clusters": clusters,
            "conditions": conds,
        });
        if service
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok())
            .as_ref()
            == Some(&status)
        {
            continue;
        }
        let api: Api<MultiClusterService> = Api::namespaced(ctx.client.clone(), &namespace);
        let patch =
            json!({"apiVersion": nave_api::API_VERSION, "kind": "MultiClusterService", "status": status});
        if let Err(error) = api
            .patch_status(&name, &PatchParams::apply(HUB_NAME), &Patch::Merge(&patch))
            .await
        {
            warn!(service = %name, error = %error, "writing MultiClusterService status failed");
        }
    }
}

async fn cleanup(mcd: Arc<MultiClusterDeployment>, ctx: &Context) -> Result<Action, Error> {
    let workload = render::workload_ref(&mcd);
    let clusters = ctx
        .store
        .list_clusters()
        .await
        .map_err(Error::store("listing clusters"))?;
    {
        let _guard = ctx.work_lock.lock().await;
        for cluster in clusters {
            let Some(current) = ctx
                .store
                .get_work(&cluster.name)
                .await
                .map_err(Error::store("reading work"))?
            else {
                continue;
            };
            let merged = merge_work(&current.objects, &workload, Vec::new());
            if merged == current.objects {
                continue;
            }
            let write = ctx
                .store
                .put_work(&cluster.name, &merged)
                .await
                .map_err(Error::store("writing work"))?;
            if write.changed {
                ctx.signals.notify(&cluster.name, write.revision);
            }
        }
    }
    ctx.store
        .delete_placement(&workload.namespace, &workload.name)
        .await
        .map_err(Error::store("deleting the placement"))?;
    ctx.metrics.forget_mcd(&workload);
    info!(workload = %workload, "removed from every cluster");
    Ok(Action::await_change())
}
