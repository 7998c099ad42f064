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
use nave_api::wire::{WORKLOAD_LABEL, WorkloadRef};
use nave_api::{
    ClusterPlacementStatus, DependencyKind, MultiClusterDeployment, MultiClusterDeploymentStatus,
    MultiClusterService,
};
use nave_policies::{Decision, Request, Role};
use serde_json::{Value, json};
use tracing::{debug, info, instrument, warn};

use crate::adapt::{self, Adapt, Moving};
use crate::context::{Context, HUB_NAME};
use crate::error::Error;
use crate::failover;
use crate::fleet::{self, FleetView, deployment_status};
use crate::index::{Booking, Reports};
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
    rescheduling_timings(mcd)?;
    for (index, over) in mcd.spec.overrides.iter().enumerate() {
        over.applies_to(index, "", &BTreeMap::new())
            .map_err(|e| e.to_string())?;
    }
    Ok(spec)
}

/// `rescheduling.pendingTimeout` and `rescheduling.cooldown`, or why they do not parse.
fn rescheduling_timings(mcd: &MultiClusterDeployment) -> Result<(Duration, Duration), String> {
    let rescheduling = &mcd.spec.placement.rescheduling;
    let timeout = rescheduling.pending_timeout().map_err(|e| e.to_string())?;
    let cooldown = rescheduling.cooldown().map_err(|e| e.to_string())?;
    Ok((timeout, cooldown))
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
    let (deployment_spec, (pending_timeout, cooldown)) =
        match validate(&mcd).and_then(|spec| Ok((spec, rescheduling_timings(&mcd)?))) {
            Ok(valid) => valid,
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
        .with_usage(&ctx.usage)
        .with_network(ctx.index.network());
    let reports = ctx.index.reports();

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

    // Replicas that agents have not reported running yet take room too.
    let ledger = ctx.index.ledger(&reports);

    // Rescheduling of stuck replicas and burst retraction, when failover moved nothing.
    let (stuck, next_stuck) = adapt::stuck(&ctx.index.pending(), &workload, pending_timeout, now);
    let mut adapt = Adapt::new(
        previous.as_ref().map(|p| &p.decision),
        mcd.spec.placement.rescheduling.enabled,
        pending_timeout,
        cooldown,
        stuck,
        now,
    );
    let decision = ctx.metrics.time_scheduling(|| {
        let decision = failover.decide(&fleet, &ledger, &request);
        if failover.trigger().is_some() {
            decision
        } else {
            adapt.decide(&fleet, &ledger, &request, decision)
        }
    });
    debug!(assignment = ?decision.assignment, unplaced = decision.unplaced, "decided");
    // Make-before-break: running replicas leaving a Ready cluster stay until the new ones run.
    let moving = adapt
        .hold(&request.current, &decision, &fleet, &reports, &workload)
        .cloned();
    let trigger = if let Some(trigger) = failover.trigger().or(adapt.trigger()) {
        trigger
    } else if previous.as_ref().is_none_or(|p| p.generation != generation) {
        TRIGGER_SPEC
    } else {
        TRIGGER_FLEET
    };
    let explanation = decision.to_string();
    let stored = adapt.annotate(failover.annotate(scheduler::stored_decision(&decision, &demand)));
    let booking = Booking::of_stored(&stored);
    let dispatched = booking.replicas.clone();
    let written = ctx
        .store
        .put_placement(&PlacementUpdate {
            namespace: workload.namespace.clone(),
            name: workload.name.clone(),
            uid,
            generation,
            decision: stored,
            trigger: trigger.to_owned(),
            reason: failover
                .reason(&decision)
                .or_else(|| adapt.reason(&decision))
                .unwrap_or_else(|| explanation.lines().next().unwrap_or_default().to_owned()),
            at: now,
        })
        .await
        .map_err(Error::store("storing the placement"))?;
    ctx.index.book(&workload, booking);

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
    for (cluster, &n) in dispatched.iter().filter(|(_, n)| **n > 0) {
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
        let mut work = ctx.index.work().await;
        for cluster in &registered {
            let mine = rendered.remove(cluster).unwrap_or_default();
            let before = work.get(cluster).await?;
            let merged = merge_work(before, &workload, mine);
            if merged == before {
                continue;
            }
            let write = work.put(cluster, merged).await?;
            if write.changed {
                info!(cluster = %cluster, revision = write.revision, "work changed");
                ctx.signals.notify(cluster, write.revision);
            }
        }
    }

    // Status from the decision and the agents' reports.
    let status = status_of(&mcd, &decision, &reports, &workload, &missing, moving.as_ref());
    write_status(ctx, &mcd, &status).await?;
    let in_burst = adapt::in_burst_clusters(&decision);
    ctx.index.settle(
        &workload,
        decision.unplaced == 0 && status.pending_replicas == 0 && in_burst.is_empty() && moving.is_none(),
    );
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
        if let Some((type_, reason, note)) = adapt.event(&decision) {
            ctx.metrics.record_reschedule(u64::from(adapt.moved()));
            publish(ctx, &mcd, type_, reason, ACTION_SCHEDULE, &note).await;
        }
        let burst_before: u32 = in_burst
            .keys()
            .map(|c| request.current.get(c).copied().unwrap_or(0))
            .sum();
        if !in_burst.is_empty() && burst_before == 0 {
            ctx.metrics.record_burst();
            let note = format!(
                "{} replicas went to burst clusters ({})",
                in_burst.values().sum::<u32>(),
                adapt::added(&decision)
            );
            publish(ctx, &mcd, EventType::Normal, adapt::BURST, ACTION_SCHEDULE, &note).await;
        }
    }
    // Come back when a Pending pod passes the timeout, the cooldown ends, or a move's deadline.
    let mut next = ctx.timings.resync;
    if let Some(at) = next_stuck {
        next = next.min(at);
    }
    if adapt.trigger().is_none() && (!status.clusters.iter().all(|c| c.pending == 0) || !in_burst.is_empty())
    {
        let cooling = adapt.cooling();
        if !cooling.is_zero() {
            next = next.min(cooling);
        }
    }
    if let Some(m) = &moving {
        let elapsed = now.duration_since(m.since).unsigned_abs();
        next = next.min(pending_timeout.saturating_sub(elapsed));
    }
    Ok(Action::requeue(next + Duration::from_secs(1)))
}

/// The status of an MCD: per cluster from the decision and the reports, totals as sums.
pub fn status_of(
    mcd: &MultiClusterDeployment,
    decision: &Decision,
    reports: &Reports,
    workload: &WorkloadRef,
    missing_dependencies: &[String],
    moving: Option<&Moving>,
) -> MultiClusterDeploymentStatus {
    let generation = mcd.metadata.generation;
    let mut status = mcd.status.clone().unwrap_or_default();
    let mut clusters = Vec::new();
    for (name, &desired) in decision.assignment.iter().filter(|(_, n)| **n > 0) {
        let (ready, available, pending) =
            deployment_status(reports.get(name).map(Arc::as_ref), workload).unwrap_or((0, 0, 0));
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
    let progressing = if let Some(moving) = moving {
        let held: Vec<String> = moving.held.iter().map(|(c, n)| format!("{n} in {c}")).collect();
        let to: Vec<&str> = moving.to.keys().map(String::as_str).collect();
        condition(
            types::PROGRESSING,
            conditions::TRUE,
            reasons::MOVING_REPLICAS,
            format!(
                "moving replicas to {}; the old ones ({}) stay until the new ones are ready",
                to.join(", "),
                held.join(", ")
            ),
            generation,
        )
    } else if rolled_out {
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
    let burst: Vec<String> = clusters
        .iter()
        .filter(|c| c.burst && c.desired > 0)
        .map(|c| format!("{}={}", c.name, c.desired))
        .collect();
    let bursting = if burst.is_empty() {
        condition(
            types::BURSTING,
            conditions::FALSE,
            reasons::NOT_BURSTING,
            "no replica runs in a burst cluster",
            generation,
        )
    } else {
        let reason = if mcd.spec.placement.bursting.is_some() {
            reasons::THRESHOLD_EXCEEDED
        } else {
            reasons::OVERFLOW
        };
        condition(
            types::BURSTING,
            conditions::TRUE,
            reason,
            format!(
                "replicas in burst clusters ({}); they come back when the regular clusters have room",
                burst.join(", ")
            ),
            generation,
        )
    };
    for c in [scheduled, available, progressing, degraded, bursting] {
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
    reports: &Reports,
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
        let mut work = ctx.index.work().await;
        for cluster in clusters {
            let before = work.get(&cluster.name).await?;
            let merged = merge_work(before, &workload, Vec::new());
            if merged == before {
                continue;
            }
            let write = work.put(&cluster.name, merged).await?;
            if write.changed {
                ctx.signals.notify(&cluster.name, write.revision);
            }
        }
    }
    ctx.store
        .delete_placement(&workload.namespace, &workload.name)
        .await
        .map_err(Error::store("deleting the placement"))?;
    ctx.index.forget(&workload);
    ctx.metrics.forget_mcd(&workload);
    info!(workload = %workload, "removed from every cluster");
    Ok(Action::await_change())
}
