//! Reconciles a MultiClusterDeployment: gather, plan, write.
//!
//! ```text
//!  MCD ─► placement::validate ──invalid──► Scheduled=False/InvalidSpec + Warning event
//!   │
//!   ├─► gather (memory: fleet, ledger, reports, health; one store row: the stored placement)
//!   ├─► placement::plan (pure) ─► store placement (+ history) ─► index booking
//!   ├─► render per cluster ─► merge into each cluster's work set ─► put_work ─► wake agents
//!   └─► agents' status reports ─► status (status.rs: per cluster, totals, conditions) + Events
//! ```
//!
//! Deleting an MCD runs the finalizer: its objects leave every work set (the agents prune them)
//! and its current placement is forgotten (its history stays).

mod status;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::runtime::finalizer::{Event, finalizer};
use kube::{Resource, ResourceExt};
use nave_api::conditions::{self, reasons, types};
use nave_api::wire::WorkloadRef;
use nave_api::{
    ClusterServiceStatus, DependencyKind, MultiClusterDeployment, MultiClusterDeploymentStatus,
    MultiClusterService, MultiClusterServiceStatus,
};
use serde_json::{Value, json};
use tracing::{debug, info, instrument, warn};

pub use self::status::status_of;
pub(crate) use self::status::{condition, truncate};
use super::context::Context;
use crate::error::Error;
use crate::placement::{self, Previous, Reports};
use crate::render;
use crate::rollout;
use crate::settings::HUB_NAME;
use crate::store::PlacementUpdate;

/// Finalizer that removes an MCD's objects from every cluster before the MCD goes.
pub const FINALIZER: &str = "nave.dev/cleanup";

/// Event reasons: the spec's, and those a plan asks for ([`placement::event_reasons`]).
pub mod event_reasons {
    pub use crate::placement::event_reasons::*;
    /// The spec cannot be acted on.
    pub const INVALID_SPEC: &str = nave_api::conditions::reasons::INVALID_SPEC;
}

/// Event actions (what the hub did).
const ACTION_SCHEDULE: &str = "Schedule";
const ACTION_VALIDATE: &str = "Validate";

/// Most characters of an Event note (the API server caps it at 1 KiB).
const MAX_NOTE: usize = 1000;

/// Reconciles one MultiClusterDeployment through its finalizer.
#[instrument(skip_all, fields(namespace = %mcd.namespace().unwrap_or_default(), name = %mcd.name_any()))]
pub async fn reconcile(mcd: Arc<MultiClusterDeployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = mcd.namespace().ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<MultiClusterDeployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let object = format!("{namespace}/{}", mcd.name_any());
    ctx.watched.ready().await?;
    let awaited = ctx.awaited_clusters();
    if !awaited.is_empty() {
        debug!(object = %object, ?awaited, "waiting for the clusters that joined before to report");
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    // A StatefulSet placed before whose stored layout is gone (a lost store row) is laid out
    // from what every Ready cluster reports running: until each has reported (for at most the
    // heartbeat grace after the hub's start), nothing is written, nor is it counted done for the
    // first pass, so agents that lost their hub's store keep what runs.
    if mcd.metadata.deletion_timestamp.is_none() && ctx.started.elapsed() < ctx.sources.grace {
        let unheard = unheard_for_layout(&mcd, &ctx);
        if !unheard.is_empty() {
            debug!(object = %object, ?unheard, "StatefulSet: waiting for every cluster's report before laying out ordinals");
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
    }
    // A deleted StatefulSet stops everywhere before the finalizer lets it go (the finalizer's
    // cleanup, once started, ends with the finalizer removed).
    if mcd.metadata.deletion_timestamp.is_some() && mcd.finalizers().iter().any(|f| f == FINALIZER) {
        let clusters: Vec<String> = ctx.sources.index.clusters().into_keys().collect();
        if let Some(wait) = stop_stateful_sets_first(&mcd, &ctx, &clusters).await? {
            // Its zero-replica sets are written: the first pass need not wait for its pods.
            ctx.reconciled(&object);
            return Ok(wait);
        }
    }
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
    if result.is_ok() {
        ctx.reconciled(&object);
        ctx.succeeded(&object);
    }
    result
}

/// Transient failure: retry with a per-object exponential backoff (1 s doubling up to 5 min).
pub fn error_policy(mcd: Arc<MultiClusterDeployment>, error: &Error, ctx: Arc<Context>) -> Action {
    let object = format!("{}/{}", mcd.namespace().unwrap_or_default(), mcd.name_any());
    ctx.retry_after_failure(&object, error)
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
    let mut patch = json!({
        "apiVersion": nave_api::API_VERSION,
        "kind": "MultiClusterDeployment",
        "status": status,
    });
    // A merge patch leaves out what is absent: a rollout status without waves is cleared.
    if status.rollout.is_none() && mcd.status.as_ref().is_some_and(|s| s.rollout.is_some()) {
        patch["status"]["rollout"] = Value::Null;
    }
    api.patch_status(
        &mcd.name_any(),
        &PatchParams::apply(HUB_NAME),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::kube("writing MultiClusterDeployment status"))?;
    Ok(())
}

/// Records why the spec cannot be acted on and waits for a change: `Scheduled=False/InvalidSpec`,
/// a Warning event, and `Degraded=True` with `reason` (`InvalidSpec`, or `OverrideFailed` when an
/// override does not apply to the rendered Deployment).
async fn invalid(
    mcd: &MultiClusterDeployment,
    ctx: &Context,
    reason: &'static str,
    message: String,
) -> Result<Action, Error> {
    // Not planned: what it asked of a provisioner no longer stands, nor does its traffic count.
    ctx.sources.unplaced.set(&render::workload_ref(mcd), None);
    ctx.sources.followers.set(&render::workload_ref(mcd), false);
    ctx.metrics
        .observe_traffic_locality(&render::workload_ref(mcd), None);
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
        condition(types::DEGRADED, conditions::TRUE, reason, &message, generation),
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
    let valid = match placement::validate(&mcd) {
        Ok(valid) => valid,
        Err(message) => return invalid(&mcd, ctx, reasons::INVALID_SPEC, message).await,
    };
    let workload = render::workload_ref(&mcd);
    let uid = mcd.uid().unwrap_or_default();
    let generation = mcd.metadata.generation.unwrap_or(0);

    // Gather: everything is in memory, this workload's stored placement included.
    ctx.watched.ready().await?;
    let kept = ctx.sources.index.placement(&workload).filter(|p| p.uid == uid);
    let previous = kept.as_ref().map(|p| Previous {
        decision: p.decision.clone(),
        generation: p.generation,
    });
    // Gather, plan and book under the planning lock, so that workloads reconciled at once do not
    // read the ledger before each other's bookings and are not given the same room. All three
    // are in memory; the store write follows, and a failed write takes the booking back.
    let (gathered, planned, booked_before) = {
        let _planning = ctx.sources.index.planning();
        let gathered = ctx.sources.gather(previous);
        let planned = ctx.sources.index.with_ledger(|ledger| {
            let inputs = gathered.inputs(&workload, &mcd, &valid, ledger);
            ctx.metrics.time_scheduling(|| placement::plan(&inputs))
        });
        let before = ctx
            .sources
            .index
            .book(&workload, crate::index::Booking::of_stored(&planned.stored));
        (gathered, planned, before)
    };
    let decision = &planned.decision;
    debug!(assignment = ?decision.assignment, unplaced = decision.unplaced, "decided");
    // What fits nowhere, for a provisioner; a new cluster does not help `everywhere`, which it
    // would only give more replicas to run.
    let placement_spec = &mcd.spec.placement;
    let by_traffic = placement_spec.policy == nave_api::PlacementPolicy::Traffic;
    ctx.sources
        .followers
        .set(&workload, by_traffic && placement_spec.rescheduling.enabled);
    ctx.metrics.observe_traffic_locality(
        &workload,
        by_traffic
            .then(|| gathered.view.traffic.of(&workload.namespace, &workload.name))
            .filter(|t| t.scope == nave_policies::TrafficScope::Workload)
            .and_then(|t| t.locality(&decision.assignment)),
    );
    // Replicas a StatefulSet holds back until another cluster stops their ordinals need no room.
    let waiting_for_ordinals: u32 = decision
        .notes
        .iter()
        .map(nave_policies::Note::waiting_replicas)
        .sum();
    let lacking_room = decision.unplaced.saturating_sub(waiting_for_ordinals);
    ctx.sources.unplaced.set(
        &workload,
        // Built only when something is unplaced: most reconciles place everything.
        (lacking_room > 0 && placement_spec.policy != nave_api::PlacementPolicy::Everywhere).then(|| {
            crate::provisioner::WorkloadDemand {
                namespace: workload.namespace.clone(),
                name: workload.name.clone(),
                replicas: lacking_room,
                per_replica: crate::provisioner::Amounts {
                    cpu_millis: planned.stored.demand.cpu_millis,
                    memory_bytes: planned.stored.demand.memory_bytes,
                },
                clusters: placement_spec.clusters.clone(),
                cluster_selector: placement_spec.cluster_selector.clone(),
                since: gathered.now,
            }
        }),
    );

    // Write: the placement (unless it decides what the stored one does, for the same
    // generation: most reconciles only follow the agents' reports), then every cluster's work,
    // then the status.
    let unchanged = kept
        .as_ref()
        .is_some_and(|p| p.generation == generation && p.decision.same_but_prose(&planned.stored));
    let written = if unchanged {
        crate::store::PlacementWrite {
            changed: false,
            history_id: None,
        }
    } else {
        let update = PlacementUpdate {
            namespace: workload.namespace.clone(),
            name: workload.name.clone(),
            uid,
            generation,
            decision: planned.explained().to_json(),
            trigger: planned.trigger.to_owned(),
            reason: planned.reason(),
            at: gathered.now,
        };
        match ctx.store.put_placement(&update).await {
            Ok(written) => {
                ctx.sources.index.keep_placement(
                    &workload,
                    Some(Arc::new(crate::index::KeptPlacement::of(
                        update.uid,
                        update.generation,
                        planned.stored.clone(),
                    ))),
                );
                written
            }
            Err(source) => {
                ctx.sources.index.rebook(&workload, booked_before);
                return Err(Error::store("storing the placement")(source));
            }
        }
    };
    let mut dispatched = planned.dispatched();
    // A StatefulSet's first ordinal in each cluster; a cluster still stopping the ordinals it gave
    // up keeps its StatefulSet (at zero replicas if it runs none now) until it reports them gone.
    let first_ordinals = &planned.stored.ordinals;
    for cluster in first_ordinals.keys() {
        dispatched.entry(cluster.clone()).or_insert(0);
    }

    // Render every cluster's share.
    let mut rendered: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut shared = Vec::new();
    let mut missing = Vec::new();
    // The ConfigMaps and Secrets each cluster's Deployment refers to, copied: the template's,
    // and (below) those of a Deployment a cluster keeps while a rollout has not reached it.
    let mut copies: BTreeMap<(DependencyKind, String), Value> = BTreeMap::new();
    for (kind, name) in render::dependencies(&mcd.spec.template.spec, &mcd.spec.dependencies) {
        match fetch_dependency(ctx, &workload, kind, &name).await? {
            Some(copy) => {
                copies.insert((kind, name), copy);
            }
            None => missing.push(format!("{kind:?} {name}")),
        }
    }
    // The Services that follow the workload go wherever it runs, with their ServiceExports;
    // a Service also goes to the clusters of its `spec.placement` that call it.
    let services = ctx.watched.services_of(&workload);
    let pod_selector = valid.deployment.selector.match_labels.clone().unwrap_or_default();
    let mut service_objects = Vec::with_capacity(services.len());
    for service in &services {
        let object =
            render::render_service(service, &workload, &pod_selector).map_err(|source| Error::Serialize {
                what: "a Service",
                source,
            })?;
        shared.push(object.clone());
        if service.spec.service_export {
            shared.push(render::render_service_export(service, &workload));
        }
        service_objects.push(object);
    }
    // Which clusters get the template now (all of them, without rollout waves); the others keep
    // the Deployment they hold, with their new share of replicas.
    let hash = render::template_hash(&mcd);
    let labels_of = |cluster: &str| {
        gathered
            .view
            .fleet
            .get(cluster)
            .map(|c| c.labels.clone())
            .unwrap_or_default()
    };
    // The Deployment's own deadline (its default, 600 s, when unset).
    let progress_deadline = Duration::from_secs(
        valid
            .deployment
            .progress_deadline_seconds
            .and_then(|s| u64::try_from(s).ok())
            .unwrap_or(600),
    );
    let mut held: BTreeMap<String, Value> = BTreeMap::new();
    if valid.rollout.staged() {
        let mut work = ctx.sources.index.work().await;
        for cluster in dispatched.iter().filter(|(_, n)| **n > 0).map(|(c, _)| c) {
            if let Some(deployment) = work.deployment(cluster, &workload).await? {
                held.insert(cluster.clone(), deployment);
            }
        }
    }
    let rollout = {
        let clusters: Vec<rollout::Cluster> = dispatched
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(cluster, _)| {
                RolloutView {
                    waves: &valid.rollout,
                    held: &held,
                    reports: &gathered.reports,
                    workload: &workload,
                    hash: &hash,
                    progress_deadline,
                }
                .cluster(cluster, &labels_of(cluster))
            })
            .collect();
        rollout::plan(
            &valid.rollout,
            &hash,
            mcd.status.as_ref().and_then(|s| s.rollout.as_ref()),
            &clusters,
            gathered.now,
        )
    };
    for (cluster, &n) in dispatched
        .iter()
        .filter(|(c, n)| **n > 0 || first_ordinals.contains_key(*c))
    {
        let kept = held.remove(cluster).filter(|_| !rollout.update.contains(cluster));
        let first_ordinal = first_ordinals.get(cluster).copied();
        let deployment = match kept {
            Some(mut deployment) => {
                deployment["spec"]["replicas"] = json!(n);
                if let Some(start) = first_ordinal {
                    deployment["spec"]["ordinals"] = json!({"start": start});
                }
                deployment
            }
            None => {
                match render::render_deployment(&mcd, cluster, &labels_of(cluster), n, first_ordinal, &hash) {
                    Ok(d) => d,
                    Err(e) => return invalid(&mcd, ctx, reasons::OVERRIDE_FAILED, e.to_string()).await,
                }
            }
        };
        let mut objects = Vec::new();
        for key in render::dependencies(&deployment["spec"], &mcd.spec.dependencies) {
            if !copies.contains_key(&key)
                && let Some(copy) = fetch_dependency(ctx, &workload, key.0, &key.1).await?
            {
                copies.insert(key.clone(), copy);
            }
            objects.extend(copies.get(&key).cloned());
        }
        objects.push(deployment);
        objects.extend(shared.iter().cloned());
        rendered.insert(cluster.clone(), objects);
    }
    let running: Vec<String> = rendered.keys().cloned().collect();
    let tolerations = crate::placement::inputs::cluster_tolerations(&mcd.spec.placement);
    let callers: Vec<Result<Vec<String>, String>> = services
        .iter()
        .map(|service| calling_clusters(service, &gathered.view, &running, &tolerations))
        .collect();
    for (object, callers) in service_objects.iter().zip(&callers) {
        for cluster in callers.iter().flatten() {
            rendered.entry(cluster.clone()).or_default().push(object.clone());
        }
    }

    // Dispatch: this workload's objects replace its previous ones in every cluster's set that
    // holds them or will; the sets that changed are written by the work flusher, with the
    // changes of the other reconciles that come meanwhile (see `crate::controller::flush_work`).
    {
        let mut work = ctx.sources.index.work().await;
        let mut touched = work.holding(&gathered.view.registered, &workload).await?;
        touched.extend(
            rendered
                .keys()
                .filter(|c| gathered.view.registered.contains(c))
                .cloned(),
        );
        for cluster in &touched {
            let mine = rendered.remove(cluster).unwrap_or_default();
            work.replace(cluster, &workload, mine).await?;
        }
    }

    // Status from the decision and the agents' reports.
    let mut status = status_of(
        &mcd,
        decision,
        &gathered.view.fleet,
        status::Seen {
            all: &gathered.reports,
            erring: &gathered.erring,
        },
        &hash,
        &missing,
        &planned.stored,
    );
    // What a workload cluster reports failing (an object not applied, a Deployment that cannot
    // progress): a Warning Event when it starts or changes, besides the condition.
    let failing = |status: Option<&MultiClusterDeploymentStatus>| {
        status
            .and_then(|s| conditions::find(&s.conditions, types::DEGRADED))
            .and_then(|c| {
                [reasons::APPLY_FAILED, reasons::DEPLOYMENT_FAILING]
                    .into_iter()
                    .find(|r| *r == c.reason)
                    .map(|reason| (reason, c.message.clone()))
            })
    };
    status.rollout = rollout.status.clone();
    if let Some(halted) = rollout
        .status
        .as_ref()
        .filter(|r| r.phase == nave_api::RolloutPhase::Halted)
        && conditions::find(&status.conditions, types::DEGRADED).is_none_or(|c| c.status != conditions::TRUE)
    {
        let message = halted.message.clone().unwrap_or_default();
        let mut degraded = condition(
            types::DEGRADED,
            conditions::TRUE,
            reasons::ROLLOUT_HALTED,
            message,
            Some(generation),
        );
        // Halted since before: since then, or every reconcile would write a new time.
        if let Some(before) = mcd
            .status
            .as_ref()
            .and_then(|s| conditions::find(&s.conditions, types::DEGRADED))
            .filter(|c| c.status == conditions::TRUE && c.reason == reasons::ROLLOUT_HALTED)
        {
            degraded.last_transition_time = before.last_transition_time.clone();
        }
        conditions::upsert(&mut status.conditions, degraded);
    }
    let newly_failing =
        failing(Some(&status)).filter(|now| failing(mcd.status.as_ref()).as_ref() != Some(now));
    write_status(ctx, &mcd, &status).await?;
    if let Some((reason, message)) = newly_failing {
        publish(ctx, &mcd, EventType::Warning, reason, ACTION_SCHEDULE, &message).await;
    }
    ctx.sources.index.settle(&workload, planned.settled);
    // Only the clusters the status lists have series: only their reports are read.
    let failing_in: std::collections::BTreeSet<String> = status
        .clusters
        .iter()
        .filter(|c| {
            crate::placement::reports::cluster_failure(
                gathered.reports.get(&c.name).map(AsRef::as_ref),
                &workload,
            )
            .is_some()
        })
        .map(|c| c.name.clone())
        .collect();
    ctx.metrics.observe_mcd(&workload, &status, &failing_in);
    if !services.is_empty() {
        write_service_status(ctx, &services, &running, &callers, &gathered.reports).await;
    }
    if written.changed {
        ctx.metrics.record_placement_change();
        info!(workload = %workload, summary = %planned.reason(), "placement changed");
        if planned.failed_over {
            ctx.metrics.record_failover();
        }
        if planned.moved > 0 {
            ctx.metrics.record_reschedule(u64::from(planned.moved));
        }
        if planned.burst_started {
            ctx.metrics.record_burst();
        }
        for event in &planned.events() {
            publish(ctx, &mcd, event.type_, event.reason, ACTION_SCHEDULE, &event.note).await;
        }
    }
    if rollout
        .status
        .as_ref()
        .is_some_and(|r| r.phase == nave_api::RolloutPhase::Complete)
    {
        record_stable_template(ctx, &mcd).await;
    }
    for note in &rollout.notes {
        let type_ = if note.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        publish(ctx, &mcd, type_, note.reason, ACTION_SCHEDULE, &note.text).await;
    }
    // Come back when a Pending pod passes the timeout, the cooldown ends, a move's deadline, or
    // a rollout's deadline or pause.
    let next = [planned.next, rollout.next]
        .into_iter()
        .flatten()
        .fold(ctx.resync, Duration::min);
    Ok(Action::requeue(next + Duration::from_secs(1)))
}

/// The clusters of `service`'s `spec.placement` that call it without running the workload:
/// registered and accepted, not being removed, with no taint the workload does not tolerate
/// (a cluster kept from the workload is kept from its Service too), and not among `running`.
/// `Err` names an invalid selector.
fn calling_clusters(
    service: &MultiClusterService,
    view: &crate::fleet::FleetView,
    running: &[String],
    tolerations: &[nave_policies::ClusterToleration],
) -> Result<Vec<String>, String> {
    let Some(placement) = &service.spec.placement else {
        return Ok(Vec::new());
    };
    let mut callers = Vec::new();
    for name in &view.registered {
        let deleting = view
            .objects
            .get(name)
            .is_some_and(|o| o.metadata.deletion_timestamp.is_some());
        let Some(cluster) = view.fleet.get(name) else {
            continue;
        };
        if running.contains(name)
            || deleting
            || cluster.unaccepted
            || nave_policies::taint_verdict(&cluster.taints, tolerations).is_some()
        {
            continue;
        }
        if placement
            .selects(name, &cluster.labels)
            .map_err(|e| e.to_string())?
        {
            callers.push(name.clone());
        }
    }
    Ok(callers)
}

/// Writes each MultiClusterService's status: the clusters its Service goes to (those that run
/// the workload, then those that call it), whether each agent reports it applied (with its
/// ServiceExport where asked for), and `Ready`.
async fn write_service_status(
    ctx: &Context,
    services: &[Arc<MultiClusterService>],
    running: &[String],
    callers: &[Result<Vec<String>, String>],
    reports: &Reports,
) {
    for (service, callers) in services.iter().zip(callers) {
        let name = service.name_any();
        let namespace = service.namespace().unwrap_or_default();
        let (calling, invalid) = match callers {
            Ok(clusters) => (clusters.as_slice(), None),
            Err(message) => (&[][..], Some(message.clone())),
        };
        let clusters: Vec<ClusterServiceStatus> = running
            .iter()
            .map(|c| (c, true))
            .chain(calling.iter().map(|c| (c, false)))
            .map(|(cluster, runs_workload)| {
                let mut kinds = vec!["Service"];
                if runs_workload && service.spec.service_export {
                    kinds.push(nave_api::SERVICE_EXPORT_KIND);
                }
                let report = reports.get(cluster);
                let problem = kinds.iter().find_map(|kind| {
                    let this = |k: &str, n: &str, ns: Option<&str>| {
                        k == *kind && n == name && ns == Some(namespace.as_str())
                    };
                    let failed = report.and_then(|r| {
                        r.apply_errors.iter().find(|e| {
                            e.operation == "apply" && this(&e.kind, &e.name, e.namespace.as_deref())
                        })
                    });
                    if let Some(error) = failed {
                        return Some(format!("{kind}: {}", truncate(&error.message, 300)));
                    }
                    let reported = report.and_then(|r| {
                        r.objects
                            .iter()
                            .find(|o| this(&o.kind, &o.name, o.namespace.as_deref()))
                    });
                    match reported {
                        None => Some(format!("{kind} not yet reported")),
                        Some(o) => o.error.as_ref().map(|e| format!("{kind}: {}", truncate(e, 300))),
                    }
                });
                ClusterServiceStatus {
                    name: cluster.clone(),
                    ready: problem.is_none(),
                    runs_workload,
                    message: problem,
                }
            })
            .collect();
        let missing: Vec<String> = clusters
            .iter()
            .filter(|c| !c.ready)
            .map(|c| format!("{}: {}", c.name, c.message.as_deref().unwrap_or_default()))
            .collect();
        let mut conds = service.status.clone().map(|s| s.conditions).unwrap_or_default();
        let generation = service.metadata.generation;
        conditions::upsert(
            &mut conds,
            match (invalid, missing.is_empty()) {
                (Some(message), _) => condition(
                    types::READY,
                    conditions::FALSE,
                    reasons::INVALID_SPEC,
                    message,
                    generation,
                ),
                (None, true) => condition(
                    types::READY,
                    conditions::TRUE,
                    reasons::SERVICES_READY,
                    "",
                    generation,
                ),
                (None, false) => condition(
                    types::READY,
                    conditions::FALSE,
                    reasons::SERVICES_PENDING,
                    truncate(&missing.join("; "), 1000),
                    generation,
                ),
            },
        );
        let status = MultiClusterServiceStatus {
            observed_generation: generation,
            cluster_count: i32::try_from(clusters.len()).unwrap_or(i32::MAX),
            clusters,
            conditions: conds,
        };
        if service.status.as_ref() == Some(&status) {
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

/// The Ready clusters a StatefulSet waits to hear from before laying its ordinals out: every one
/// that has sent no status report yet, when the hub keeps no layout of this incarnation.
fn unheard_for_layout(mcd: &MultiClusterDeployment, ctx: &Context) -> Vec<String> {
    let placed_before = mcd.status.as_ref().is_some_and(|s| !s.clusters.is_empty());
    if mcd.spec.template.kind != nave_api::WorkloadKind::StatefulSet || !placed_before {
        return Vec::new();
    }
    let workload = render::workload_ref(mcd);
    let uid = mcd.uid().unwrap_or_default();
    let laid_out = ctx
        .sources
        .index
        .placement(&workload)
        .is_some_and(|p| p.uid == uid && !p.decision.ordinals.is_empty());
    if laid_out {
        return Vec::new();
    }
    crate::placement::ordinals::unheard(&ctx.sources.view().fleet, &ctx.sources.index.reports())
}

/// How often a deleted StatefulSet's clusters are looked at while their pods stop.
const STATEFUL_STOP_RECHECK: Duration = Duration::from_secs(1);

/// A deleted StatefulSet stops before it goes: every cluster holding it is sent it at zero
/// replicas, and its objects leave the work sets once each cluster reports its pods gone (or is
/// silent: its agent prunes it when it returns). Otherwise a MultiClusterDeployment created again
/// under the same name could start ordinals another cluster is still stopping. `Some` while it
/// waits, with when to look again.
async fn stop_stateful_sets_first(
    mcd: &MultiClusterDeployment,
    ctx: &Context,
    clusters: &[String],
) -> Result<Option<Action>, Error> {
    if mcd.spec.template.kind != nave_api::WorkloadKind::StatefulSet {
        return Ok(None);
    }
    let workload = render::workload_ref(mcd);
    let (view, reports) = (ctx.sources.view(), ctx.sources.index.reports());
    let mut waiting = Vec::new();
    let mut work = ctx.sources.index.work().await;
    for cluster in &work.holding(clusters, &workload).await? {
        let Some(mut set) = work
            .deployment(cluster, &workload)
            .await?
            .filter(|o| o["kind"] == "StatefulSet")
        else {
            continue;
        };
        let start = set["spec"]["ordinals"]["start"]
            .as_u64()
            .and_then(|s| u32::try_from(s).ok())
            .unwrap_or(0);
        if set["spec"]["replicas"] != 0 {
            // Only the count changes: the headless Service, the ConfigMaps and Secrets stay
            // while the pods stop (a pod left without its peers' names or its Secret may never
            // stop in order).
            set["spec"]["replicas"] = json!(0);
            let mut objects = work.objects_of(cluster, &workload).await?;
            for object in &mut objects {
                if object["kind"] == "StatefulSet" && object["metadata"]["name"] == set["metadata"]["name"] {
                    *object = set.clone();
                }
            }
            work.replace(cluster, &workload, objects).await?;
            waiting.push(cluster.clone());
            continue;
        }
        let report = reports.get(cluster).map(Arc::as_ref);
        let reporting = view.fleet.get(cluster).is_some_and(|c| c.ready);
        // Only a report of the zero-replica set (or a later one) says the pods stopped; after a
        // hub restart the revision is not known, and any report of zero replicas counts.
        let after = ctx
            .stopping
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(workload.label_value(), cluster.clone()))
            .map(|revision| revision.saturating_sub(1));
        if reporting && !crate::placement::ordinals::stopped_beyond(report, &workload, 0, start, after) {
            waiting.push(cluster.clone());
        }
    }
    for (cluster, write) in work.flush().await? {
        if write.changed {
            ctx.signals.notify(&cluster, write.revision);
            if waiting.contains(&cluster) {
                ctx.stopping
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert((workload.label_value(), cluster.clone()), write.revision);
            }
        }
    }
    if waiting.is_empty() {
        ctx.stopping
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(label, _), _| *label != workload.label_value());
    }
    if waiting.is_empty() {
        return Ok(None);
    }
    debug!(workload = %workload, clusters = ?waiting, "deleted StatefulSet: waiting for its pods to stop");
    Ok(Some(Action::requeue(STATEFUL_STOP_RECHECK)))
}

async fn cleanup(mcd: Arc<MultiClusterDeployment>, ctx: &Context) -> Result<Action, Error> {
    let workload = render::workload_ref(&mcd);
    let clusters: Vec<String> = ctx.sources.index.clusters().into_keys().collect();
    {
        let mut work = ctx.sources.index.work().await;
        for cluster in &work.holding(&clusters, &workload).await? {
            work.replace(cluster, &workload, Vec::new()).await?;
        }
        // Written before the finalizer goes: once the MCD is gone, nothing would remove its
        // objects from the sets any more.
        for (cluster, write) in work.flush().await? {
            if write.changed {
                ctx.signals.notify(&cluster, write.revision);
            }
        }
    }
    ctx.store
        .delete_placement(&workload.namespace, &workload.name)
        .await
        .map_err(Error::store("deleting the placement"))?;
    ctx.sources.index.forget(&workload);
    ctx.sources.unplaced.set(&workload, None);
    ctx.sources.followers.set(&workload, false);
    ctx.metrics.forget_mcd(&workload);
    info!(workload = %workload, "removed from every cluster");
    Ok(Action::await_change())
}

/// How long after its wave started an apply error of a cluster counts against a rollout: the
/// agent applies a new set within seconds, and reports the errors of the set before until then.
const APPLY_ERROR_GRACE: Duration = Duration::from_secs(30);

/// What the rollout reads of each cluster.
struct RolloutView<'a> {
    waves: &'a nave_api::Waves,
    /// The Deployments the clusters' work sets hold.
    held: &'a BTreeMap<String, Value>,
    reports: &'a crate::placement::reports::Reports,
    workload: &'a WorkloadRef,
    /// The template being rolled out.
    hash: &'a str,
    /// The Deployment's `progressDeadlineSeconds`.
    progress_deadline: Duration,
}

impl RolloutView<'_> {
    /// A cluster as the rollout sees it: its wave, the template of the Deployment it holds, and
    /// what its agent reports of that Deployment.
    fn cluster(&self, cluster: &str, labels: &BTreeMap<String, String>) -> rollout::Cluster {
        use crate::placement::reports::{deployment_failure, deployment_of};
        let held = self.held.get(cluster).map(|d| {
            d["metadata"]["annotations"][nave_api::TEMPLATE_HASH_ANNOTATION]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        });
        let reported = deployment_of(self.reports.get(cluster).map(AsRef::as_ref), self.workload);
        let rolled_out = reported
            .filter(|d| {
                let replicas = d.replicas.unwrap_or(0);
                // As `kubectl rollout status`: every pod of the new ReplicaSet, none of the old, all
                // available.
                d.observed_current == Some(true)
                    && d.updated_replicas == Some(replicas)
                    && d.all_replicas == Some(replicas)
                    && d.available_replicas == Some(replicas)
            })
            .and_then(|d| d.template_hash.clone());
        // Only failures of this template count, once its Deployment controller has seen it: a fix
        // must not be halted by what it fixes.
        let failing = reported.and_then(|d| {
            let applied = d.template_hash.as_deref() == Some(self.hash) && d.observed_current == Some(true);
            let holding = held.as_deref() == Some(self.hash);
            match (&d.error, applied) {
                (Some(error), _) if holding => Some((format!("not applied: {error}"), APPLY_ERROR_GRACE)),
                (_, true) => deployment_failure(d).map(|why| (why, self.progress_deadline)),
                _ => None,
            }
        });
        rollout::Cluster {
            name: cluster.to_owned(),
            wave: self.waves.wave_of(cluster, labels),
            held,
            rolled_out,
            failing,
        }
    }
}

/// Keeps the template every cluster runs in the annotation `nave.dev/stable-template`, which
/// `nave rollout undo` puts back; written when a rollout completes with another template.
async fn record_stable_template(ctx: &Context, mcd: &MultiClusterDeployment) {
    let Ok(template) = serde_json::to_string(&mcd.spec.template) else {
        return;
    };
    if mcd.annotations().get(nave_api::STABLE_TEMPLATE_ANNOTATION) == Some(&template) {
        return;
    }
    let api: Api<MultiClusterDeployment> =
        Api::namespaced(ctx.client.clone(), &mcd.namespace().unwrap_or_default());
    let patch = json!({"metadata": {"annotations": {nave_api::STABLE_TEMPLATE_ANNOTATION: template}}});
    let params = PatchParams {
        field_manager: Some(HUB_NAME.to_owned()),
        ..PatchParams::default()
    };
    if let Err(error) = api.patch(&mcd.name_any(), &params, &Patch::Merge(&patch)).await {
        warn!(error = %error, "recording the stable template failed; retried on the next reconcile");
    }
}

/// A copy of the ConfigMap or Secret `name` of the workload's namespace for its clusters; `None`
/// when it does not exist.
async fn fetch_dependency(
    ctx: &Context,
    workload: &WorkloadRef,
    kind: DependencyKind,
    name: &str,
) -> Result<Option<Value>, Error> {
    let object = match kind {
        DependencyKind::ConfigMap => Api::<ConfigMap>::namespaced(ctx.client.clone(), &workload.namespace)
            .get_opt(name)
            .await
            .map(|o| o.map(|o| serde_json::to_value(o).unwrap_or_default())),
        DependencyKind::Secret => Api::<Secret>::namespaced(ctx.client.clone(), &workload.namespace)
            .get_opt(name)
            .await
            .map(|o| o.map(|o| serde_json::to_value(o).unwrap_or_default())),
    }
    .map_err(Error::kube("reading a dependency"))?;
    Ok(object.map(|mut object| {
        object["kind"] = json!(match kind {
            DependencyKind::ConfigMap => "ConfigMap",
            DependencyKind::Secret => "Secret",
        });
        render::copy_dependency(&object, workload)
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use nave_policies::{Capacity, Cluster, ClusterTaint, Fleet, Taint, TaintEffect};

    use super::*;

    fn view(clusters: Vec<Cluster>) -> crate::fleet::FleetView {
        let mut registered: Vec<String> = clusters.iter().map(|c| c.name.clone()).collect();
        registered.sort();
        let mut fleet = Fleet::new();
        for cluster in clusters {
            fleet.insert(cluster);
        }
        crate::fleet::FleetView {
            fleet,
            records: BTreeMap::new(),
            objects: BTreeMap::new(),
            registered,
            now: jiff::Timestamp::now(),
            usage: BTreeMap::new(),
            traffic: Default::default(),
        }
    }

    fn frontend(name: &str) -> Cluster {
        let mut cluster = Cluster::new(name, Capacity::Unknown);
        cluster.labels = [("tier".to_owned(), "frontend".to_owned())].into();
        cluster
    }

    #[test]
    fn a_service_calls_from_accepted_clusters_its_workload_tolerates_only() {
        let service: MultiClusterService = serde_json::from_value(json!({
            "apiVersion": "nave.dev/v1alpha1", "kind": "MultiClusterService",
            "metadata": {"name": "api", "namespace": "shop"},
            "spec": {"deployment": "api", "ports": [{"port": 80}],
                     "placement": {"clusterSelector": {"matchLabels": {"tier": "frontend"}}}}
        }))
        .unwrap();
        let mut unaccepted = frontend("joined-by-anyone");
        unaccepted.unaccepted = true;
        let mut dedicated = frontend("dedicated");
        dedicated.taints = vec![ClusterTaint {
            taint: Taint::new("team", "b", TaintEffect::NoSchedule),
            age: std::time::Duration::ZERO,
        }];
        let mut other = Cluster::new("backend-2", Capacity::Unknown);
        other.labels = [("tier".to_owned(), "backend".to_owned())].into();
        let fleet = view(vec![
            frontend("web-1"),
            frontend("runs-it"),
            unaccepted,
            dedicated,
            other,
        ]);
        let callers = calling_clusters(&service, &fleet, &["runs-it".to_owned()], &[]).unwrap();
        assert_eq!(
            callers,
            ["web-1"],
            "not the unaccepted, tainted, running or unselected ones"
        );

        let tolerated = nave_policies::ClusterToleration {
            toleration: nave_policies::Toleration {
                key: "team".to_owned(),
                operator: nave_policies::TolerationOperator::Equal,
                value: "b".to_owned(),
                effect: None,
            },
            seconds: None,
        };
        let callers = calling_clusters(&service, &fleet, &[], &[tolerated]).unwrap();
        assert_eq!(
            callers,
            ["dedicated", "runs-it", "web-1"],
            "a tolerated taint does not keep it out"
        );
    }
}
