//! Reconciles a MultiClusterJob: validate, follow its pieces, admit what waits, write, send.
//!
//! ```text
//!  MCJ ─► validate (JobSpec, completions, restartPolicy, name length)
//!   │        └─invalid─► Accepted=False + Warning event; what runs keeps running
//!   ├─► pieces: this hub's latest (memory) or status.pieces (they survive the store)
//!   ├─► observe each Running piece in its cluster's report; lose those of failed-over or
//!   │   removed clusters (their unfinished indexes queue again)
//!   ├─► admit queued pieces, under the planning lock, on a copy of the ledger that the jobs
//!   │   ahead in the queue (priority, then age) have booked first: a piece goes only when the
//!   │   engine fits ALL its pods; it is cut among the clusters by their pods (placement::jobs)
//!   ├─► status first (the record of what runs where), then the work sets, then the booking
//!   └─► finished + ttlSecondsAfterFinished passed ─► delete it (the finalizer removes its Jobs)
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::runtime::finalizer::{Event, finalizer};
use kube::{Resource, ResourceExt};
use nave_api::conditions::{self, reasons, types};
use nave_api::job::MAX_JOB_NAME;
use nave_api::wire::WorkloadRef;
use nave_api::{JobPhase, JobPiece, JobPolicy, MultiClusterJob, MultiClusterJobStatus, PieceState};
use nave_policies::{Decision, Demand, Policy, Strategy};
use serde_json::json;
use tracing::{debug, info, instrument, warn};

use super::context::Context;
use super::mcd::{FINALIZER, condition, truncate};
use crate::error::Error;
use crate::placement::inputs;
use crate::placement::jobs::{self, Indexes, QueuedJob};
use crate::settings::HUB_NAME;

/// Longest message kept in a condition or an event.
const MAX_MESSAGE: usize = 1000;

/// How often a queued job looks for room again (room also frees when jobs end, which reconciles
/// them).
const QUEUED_RETRY: Duration = Duration::from_secs(2);

/// How often a running job is looked at without news (reports and health changes wake it).
const RUNNING_RESYNC: Duration = Duration::from_secs(15);

/// The `namespace/name` a MultiClusterJob is known by in the first pass.
pub fn first_pass_key(mcj: &MultiClusterJob) -> String {
    format!(
        "MultiClusterJob {}/{}",
        mcj.namespace().unwrap_or_default(),
        mcj.name_any()
    )
}

/// Its contributor reference in the work sets.
fn contributor(mcj: &MultiClusterJob) -> WorkloadRef {
    WorkloadRef::job(mcj.namespace().unwrap_or_default(), &mcj.name_any())
}

/// What the controller reads of a valid MultiClusterJob.
#[derive(Clone, Debug)]
pub struct ValidJob {
    /// `completionMode: Indexed`.
    pub indexed: bool,
    /// Completions of the whole job.
    pub completions: u32,
    /// Pods of the whole job at once.
    pub parallelism: u32,
    /// What one pod takes.
    pub demand: Demand,
    /// The engine's policy from `spec.placement`.
    pub policy: Policy,
}

/// Checks what the schema cannot: the JobSpec as Kubernetes types read it, and the name's room
/// for the pieces' suffixes. The message names the field.
pub fn validate(mcj: &MultiClusterJob) -> Result<ValidJob, String> {
    let name = mcj.name_any();
    if name.len() > MAX_JOB_NAME {
        return Err(format!(
            "metadata.name: at most {MAX_JOB_NAME} characters (the clusters' Jobs are named after it with a suffix), not {}",
            name.len()
        ));
    }
    contributor(mcj)
        .label_fits()
        .map_err(|why| format!("metadata.name: {why}"))?;
    // Fields that speak of the whole job and would mean something else in each piece.
    for (field, why) in [
        (
            "successPolicy",
            "its rules name indexes of the whole job, and each cluster's Job holds a part of them",
        ),
        (
            "maxFailedIndexes",
            "it would apply to each cluster's part, not to the whole job",
        ),
        (
            "managedBy",
            "the clusters' Jobs are managed by their own Job controller",
        ),
        ("suspend", "a MultiClusterJob waits in the hub's queue instead"),
    ] {
        let set = mcj
            .spec
            .template
            .spec
            .get(field)
            .is_some_and(|v| !v.is_null() && *v != serde_json::Value::Bool(false));
        if set {
            return Err(format!(
                "spec.template.spec.{field}: not supported in a MultiClusterJob: {why}"
            ));
        }
    }
    let spec: JobSpec = serde_json::from_value(mcj.spec.template.spec.clone())
        .map_err(|e| format!("spec.template.spec: not a batch/v1 JobSpec: {e}"))?;
    let completions = spec
        .completions
        .ok_or("spec.template.spec.completions: required (the completions are divided among the clusters)")?;
    let completions = u32::try_from(completions)
        .ok()
        .filter(|c| *c > 0)
        .ok_or("spec.template.spec.completions: must be at least 1")?;
    let parallelism = match spec.parallelism {
        None => 1,
        Some(p) => u32::try_from(p)
            .ok()
            .filter(|p| *p > 0)
            .ok_or("spec.template.spec.parallelism: must be at least 1")?,
    };
    if parallelism > completions {
        return Err("spec.template.spec.parallelism: cannot exceed completions".to_owned());
    }
    let indexed = match spec.completion_mode.as_deref() {
        None | Some("NonIndexed") => false,
        Some("Indexed") => true,
        Some(other) => {
            return Err(format!(
                "spec.template.spec.completionMode: {other:?} is neither Indexed nor NonIndexed"
            ));
        }
    };
    let pod = spec
        .template
        .spec
        .as_ref()
        .ok_or("spec.template.spec.template.spec: the pod spec is required")?;
    if !matches!(pod.restart_policy.as_deref(), Some("Never" | "OnFailure")) {
        return Err("spec.template.spec.template.spec.restartPolicy: must be Never or OnFailure".to_owned());
    }
    if pod.containers.is_empty() {
        return Err(
            "spec.template.spec.template.spec.containers: at least one container is required".to_owned(),
        );
    }
    let placement = &mcj.spec.placement;
    let policy = Policy {
        strategy: match placement.policy {
            JobPolicy::WorstFit => Strategy::WorstFit,
            JobPolicy::BestFit => Strategy::BestFit,
            JobPolicy::Spread => Strategy::Spread,
        },
        clusters: placement.clusters.clone(),
        cluster_selector: placement.cluster_selector.as_ref().map(inputs::label_selector),
        max_clusters: placement
            .max_clusters
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0),
        ..Policy::default()
    };
    Ok(ValidJob {
        indexed,
        completions,
        parallelism,
        demand: inputs::pod_demand(pod),
        policy,
    })
}

/// Reconciles one MultiClusterJob through its finalizer.
#[instrument(skip_all, fields(namespace = %mcj.namespace().unwrap_or_default(), name = %mcj.name_any()))]
pub async fn reconcile(mcj: Arc<MultiClusterJob>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = mcj.namespace().ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<MultiClusterJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let key = first_pass_key(&mcj);
    ctx.watched.ready().await?;
    if !ctx.awaited_clusters().is_empty() {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let result = finalizer(&api, FINALIZER, mcj, |event| async {
        match event {
            Event::Apply(mcj) => apply(mcj, &ctx).await,
            Event::Cleanup(mcj) => cleanup(mcj, &ctx).await,
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

/// Transient failure: retry with a per-object exponential backoff.
pub fn error_policy(mcj: Arc<MultiClusterJob>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.retry_after_failure(&first_pass_key(&mcj), error)
}

/// The job's status as this hub last wrote it (its watch may not have caught up), else as the
/// object holds it.
fn latest_status(mcj: &MultiClusterJob, ctx: &Context) -> MultiClusterJobStatus {
    let uid = mcj.uid().unwrap_or_default();
    let remembered = ctx
        .jobs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&uid)
        .cloned();
    remembered.unwrap_or_else(|| mcj.status.clone().unwrap_or_default())
}

async fn apply(mcj: Arc<MultiClusterJob>, ctx: &Context) -> Result<Action, Error> {
    let generation = mcj.metadata.generation;
    let valid = match validate(&mcj) {
        Ok(valid) => valid,
        Err(message) => return invalid(&mcj, ctx, &message).await,
    };
    let workload = contributor(&mcj);
    let name = mcj.name_any();
    let mut status = latest_status(&mcj, ctx);
    let before = status.clone();
    // Valid now: an earlier generation's refusal no longer stands.
    status.conditions.retain(|c| c.type_ != types::ACCEPTED);
    if status.pieces.is_empty() {
        status
            .pieces
            .push(jobs::first_piece(valid.completions, valid.parallelism));
    }
    let finished_before = matches!(status.phase, Some(JobPhase::Complete | JobPhase::Failed));

    // Follow the pieces in their clusters' reports; lose those whose cluster is gone.
    let gathered = ctx.sources.gather(None);
    for piece in status
        .pieces
        .iter_mut()
        .filter(|p| p.state == PieceState::Running)
    {
        let report = gathered.reports.get(&piece.cluster).map(|r| &**r);
        jobs::follow(piece, report, &workload, valid.indexed);
    }
    let mut lost: BTreeMap<String, String> = BTreeMap::new();
    if !finished_before {
        for piece in status.pieces.iter().filter(|p| p.state == PieceState::Running) {
            if gathered.health.failed_over.contains_key(&piece.cluster) {
                lost.insert(
                    piece.cluster.clone(),
                    "its agent has not been heard from".to_owned(),
                );
            } else if gathered
                .view
                .objects
                .get(&piece.cluster)
                .is_some_and(|o| o.metadata.deletion_timestamp.is_some())
            {
                lost.insert(
                    piece.cluster.clone(),
                    "it is being removed from the fleet".to_owned(),
                );
            } else if !gathered.view.records.contains_key(&piece.cluster)
                && !gathered.view.objects.contains_key(&piece.cluster)
            {
                // Neither registered nor declared: removed. A cluster whose agent has not
                // registered again (after a lost store) is neither lost nor failed over: its
                // piece keeps running there.
                lost.insert(piece.cluster.clone(), "it left the fleet".to_owned());
            }
        }
    }
    let lost_pieces = jobs::lose(&mut status.pieces, &lost, valid.indexed);
    if lost_pieces > 0 {
        let clusters: Vec<&str> = lost.keys().map(String::as_str).collect();
        let note = format!(
            "{lost_pieces} piece(s) lost with {}: what they had not completed runs again elsewhere",
            clusters.join(", ")
        );
        warn!(%note, "cluster lost");
        publish(ctx, &mcj, EventType::Warning, reasons::CLUSTER_LOST, &note).await;
    }

    // Admit what waits, unless the job already failed.
    let failed = status.pieces.iter().any(|p| p.state == PieceState::Failed);
    let mut ahead = 0usize;
    let mut waiting_reason: Option<String> = None;
    let mut admitted: Vec<String> = Vec::new();
    let queued_pods: Vec<u32> = status
        .pieces
        .iter()
        .filter(|p| p.state == PieceState::Queued)
        .map(|p| u32::try_from(p.parallelism).unwrap_or(1))
        .collect();
    if !failed && !queued_pods.is_empty() {
        let entry = QueuedJob {
            priority: mcj.spec.priority,
            created: mcj.metadata.creation_timestamp.as_ref().map(|t| t.0),
            demand: valid.demand.clone(),
            policy: valid.policy.clone(),
            pods: queued_pods,
        };
        let mine = entry.order(&workload);
        let index = &ctx.sources.index;
        let _planning = index.planning();
        // The jobs ahead, in queue order, taken before the ledger's lock.
        let mut queue: Vec<(WorkloadRef, QueuedJob)> = {
            let mut queue = ctx.job_queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.insert(workload.clone(), entry.clone());
            queue
                .iter()
                .filter(|(w, q)| **w != workload && q.order(w) < mine)
                .map(|(w, q)| (w.clone(), q.clone()))
                .collect()
        };
        queue.sort_by_key(|(w, q)| q.order(w));
        ahead = queue.len();
        let fleet = &gathered.view.fleet;
        // Nothing is admitted before every job was reconciled once in this term: until then the
        // ledger lacks what the others run and the queue what they wait for.
        let decisions: Vec<Decision> = if !ctx.first_pass_over() {
            waiting_reason = Some(
                "no job is admitted until the hub has reconciled every workload since it started leading and published their work (a workload whose reconcile keeps failing holds this back; see the hub's log)"
                    .to_owned(),
            );
            Vec::new()
        } else {
            index.with_ledger(|ledger| {
                let mut ledger = ledger.clone();
                // Best-effort order: each job ahead takes its room first where it fits; one that
                // does not fit holds nothing back.
                for (other, job) in &queue {
                    job.fit(other, fleet, &mut ledger);
                }
                entry.fit(&workload, fleet, &mut ledger)
            })
        };
        let attempts = jobs::attempts(&status.pieces);
        let stem = jobs::stem(&name, mcj.metadata.uid.as_deref());
        let mut decisions = decisions.into_iter();
        let mut pieces = Vec::with_capacity(status.pieces.len());
        for piece in std::mem::take(&mut status.pieces) {
            if piece.state != PieceState::Queued {
                pieces.push(piece);
                continue;
            }
            let Some(decision) = decisions.next() else {
                pieces.push(piece);
                continue;
            };
            if decision.unplaced == 0 {
                let cut = jobs::divide(&stem, &piece, &decision.assignment, &attempts);
                admitted.extend(cut.iter().map(|p| {
                    format!(
                        "{} {}-{} ({} at once)",
                        p.cluster,
                        p.start,
                        p.start + p.completions - 1,
                        p.parallelism
                    )
                }));
                pieces.extend(cut);
            } else {
                waiting_reason.get_or_insert_with(|| {
                    format!(
                        "{} of its {} pods at once fit in the fleet now ({})",
                        decision.placed(),
                        decision.replicas,
                        decision.summary()
                    )
                });
                pieces.push(piece);
            }
        }
        status.pieces = pieces;
        index.book(&workload, booking(&valid, &status.pieces, failed));
    } else {
        ctx.sources
            .index
            .book(&workload, booking(&valid, &status.pieces, failed));
    }
    let still_queued = status.pieces.iter().any(|p| p.state == PieceState::Queued) && !failed;
    {
        let mut queue = ctx.job_queue.lock().unwrap_or_else(|e| e.into_inner());
        if still_queued {
            if let Some(entry) = queue.get_mut(&workload) {
                entry.pods = status
                    .pieces
                    .iter()
                    .filter(|p| p.state == PieceState::Queued)
                    .map(|p| u32::try_from(p.parallelism).unwrap_or(1))
                    .collect();
            }
        } else {
            queue.remove(&workload);
        }
    }
    if !admitted.is_empty() {
        let note = format!("admitted: {}", admitted.join(", "));
        info!(%note, "admitted");
        publish(ctx, &mcj, EventType::Normal, reasons::PIECES_PLACED, &note).await;
    }

    // Status: the record of what runs where, written before anything is sent.
    let summary = jobs::summarize(&status.pieces, valid.completions, valid.indexed);
    let now = jiff::Timestamp::now();
    status.observed_generation = generation;
    status.phase = Some(summary.phase);
    status.completions = i32::try_from(valid.completions).unwrap_or(i32::MAX);
    status.succeeded = i32::try_from(summary.succeeded).unwrap_or(i32::MAX);
    status.failed = summary.failed;
    status.active = summary.active;
    status.progress = Some(format!("{}/{}", summary.succeeded, valid.completions));
    status.completed_indexes = summary
        .completed
        .as_ref()
        .filter(|c| c.count() > 0)
        .map(Indexes::to_string);
    status.cluster_count = i32::try_from(summary.clusters.len()).unwrap_or(i32::MAX);
    status.queue_position = still_queued.then(|| i32::try_from(ahead + 1).unwrap_or(i32::MAX));
    if status.start_time.is_none() && status.pieces.iter().any(|p| !p.cluster.is_empty()) {
        status.start_time = Some(Time(now));
    }
    let admitted_condition = if still_queued {
        let why = waiting_reason.unwrap_or_else(|| "waiting for room".to_owned());
        let ahead_text = match ahead {
            0 => "first in the queue".to_owned(),
            n => format!("{n} job(s) ahead in the queue"),
        };
        condition(
            types::ADMITTED,
            conditions::FALSE,
            reasons::QUEUED,
            truncate(&format!("queued, {ahead_text}: {why}"), MAX_MESSAGE),
            generation,
        )
    } else {
        condition(
            types::ADMITTED,
            conditions::TRUE,
            reasons::PIECES_PLACED,
            format!(
                "{} piece(s) in {} cluster(s)",
                status.pieces.iter().filter(|p| !p.cluster.is_empty()).count(),
                summary.clusters.len()
            ),
            generation,
        )
    };
    let mut message = Some(admitted_condition.message.clone());
    conditions::upsert(&mut status.conditions, admitted_condition);
    // A piece its cluster reports trouble with (not applied: refused by the agent's allow-list,
    // invalid there; or a status that cannot be read) keeps its room booked, since it may yet
    // run, and is named here until it does.
    let troubled: Vec<String> = status
        .pieces
        .iter()
        .filter(|p| p.state == PieceState::Running)
        .filter_map(|p| Some(format!("{} ({}): {}", p.cluster, p.job, p.message.as_deref()?)))
        .collect();
    let degraded_before = status.condition(types::DEGRADED).cloned();
    let degraded = if troubled.is_empty() {
        condition(
            types::DEGRADED,
            conditions::FALSE,
            reasons::AS_EXPECTED,
            "every piece sent is applied in its cluster",
            generation,
        )
    } else {
        condition(
            types::DEGRADED,
            conditions::TRUE,
            reasons::APPLY_FAILED,
            truncate(&troubled.join("; "), MAX_MESSAGE),
            generation,
        )
    };
    if degraded.status == conditions::TRUE
        && degraded_before
            .as_ref()
            .is_none_or(|c| c.status != conditions::TRUE || c.message != degraded.message)
    {
        warn!(message = %degraded.message, "pieces not applied");
        publish(
            ctx,
            &mcj,
            EventType::Warning,
            reasons::APPLY_FAILED,
            &degraded.message,
        )
        .await;
    }
    if degraded.status == conditions::TRUE {
        message = Some(degraded.message.clone());
    }
    conditions::upsert(&mut status.conditions, degraded);
    match summary.phase {
        JobPhase::Complete => {
            let text = format!(
                "{} of {} completions succeeded",
                summary.succeeded, valid.completions
            );
            conditions::upsert(
                &mut status.conditions,
                condition(
                    types::COMPLETE,
                    conditions::TRUE,
                    reasons::COMPLETIONS_REACHED,
                    &text,
                    generation,
                ),
            );
            message = Some(text);
        }
        JobPhase::Failed => {
            let text = status
                .pieces
                .iter()
                .filter(|p| p.state == PieceState::Failed)
                .map(|p| {
                    format!(
                        "{} ({}): {}",
                        p.cluster,
                        p.job,
                        p.message.as_deref().unwrap_or("failed")
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            let text = truncate(&format!("{text}; the other pieces are suspended"), MAX_MESSAGE);
            conditions::upsert(
                &mut status.conditions,
                condition(
                    types::FAILED,
                    conditions::TRUE,
                    reasons::PIECE_FAILED,
                    &text,
                    generation,
                ),
            );
            message = Some(text);
        }
        JobPhase::Queued | JobPhase::Running => {}
    }
    status.message = message;
    let finished = matches!(summary.phase, JobPhase::Complete | JobPhase::Failed);
    if finished && status.completion_time.is_none() {
        status.completion_time = Some(Time(now));
        let (type_, reason) = if summary.phase == JobPhase::Complete {
            (EventType::Normal, reasons::COMPLETIONS_REACHED)
        } else {
            (EventType::Warning, reasons::PIECE_FAILED)
        };
        publish(
            ctx,
            &mcj,
            type_,
            reason,
            status.message.as_deref().unwrap_or_default(),
        )
        .await;
    }
    if status != before {
        write_status(ctx, &mcj, &status).await?;
    }
    ctx.jobs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(mcj.uid().unwrap_or_default(), status.clone());

    // Send: each cluster's pieces (finished ones stay until the job goes, with their status).
    let hash = crate::render::short_digest(&mcj.spec.template);
    let mut rendered: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for piece in status.pieces.iter().filter(|p| {
        matches!(
            p.state,
            PieceState::Running | PieceState::Complete | PieceState::Failed
        )
    }) {
        let suspend = failed && piece.state == PieceState::Running;
        rendered
            .entry(piece.cluster.clone())
            .or_default()
            .push(crate::render::render_job(&mcj, piece, suspend, &hash));
    }
    let mut conflicts: BTreeSet<String> = BTreeSet::new();
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
            let mine = rendered.get(cluster).cloned().unwrap_or_default();
            let taken = work.held_by_others(cluster, &workload, &mine).await?;
            let mine = if taken.is_empty() {
                mine
            } else {
                conflicts.insert(cluster.clone());
                Vec::new()
            };
            work.replace(cluster, &workload, mine).await?;
        }
    }
    if !conflicts.is_empty() {
        let note = format!(
            "another of the hub's objects already sends a Job of the same name to {}; this job's pieces are not sent there",
            conflicts.into_iter().collect::<Vec<_>>().join(", ")
        );
        publish(ctx, &mcj, EventType::Warning, reasons::CONFLICT, &note).await;
    }
    debug!(phase = ?summary.phase, succeeded = summary.succeeded, "reconciled");

    // Time to live, counted from the end.
    if finished
        && let (Some(ttl), Some(done)) = (mcj.spec.ttl_seconds_after_finished, &status.completion_time)
    {
        let ttl = Duration::from_secs(u64::try_from(ttl).unwrap_or(0));
        let elapsed = Duration::try_from(now.duration_since(done.0)).unwrap_or_default();
        if elapsed >= ttl {
            info!(
                ttl_secs = ttl.as_secs(),
                "finished and past its time to live: deleting it"
            );
            let api: Api<MultiClusterJob> = Api::namespaced(ctx.client.clone(), &workload.namespace);
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(Error::kube("deleting a MultiClusterJob past its TTL")(e)),
            }
            return Ok(Action::await_change());
        }
        return Ok(Action::requeue(ttl - elapsed + Duration::from_millis(100)));
    }
    Ok(Action::requeue(if still_queued {
        QUEUED_RETRY
    } else if finished {
        ctx.resync
    } else {
        RUNNING_RESYNC
    }))
}

/// The room the job's running pieces take: their pods, in each cluster; nothing once the job
/// failed (its pieces are suspended).
fn booking(valid: &ValidJob, pieces: &[JobPiece], failed: bool) -> crate::index::Booking {
    crate::index::Booking {
        demand: valid.demand.clone(),
        replicas: if failed {
            BTreeMap::new()
        } else {
            jobs::running_pods(pieces)
        },
    }
}

/// Records why the job cannot run: `Accepted=False` and a Warning event, once per problem.
/// Pieces already sent keep running.
async fn invalid(mcj: &MultiClusterJob, ctx: &Context, message: &str) -> Result<Action, Error> {
    let generation = mcj.metadata.generation;
    let message = truncate(message, MAX_MESSAGE);
    let mut status = latest_status(mcj, ctx);
    let was = status.condition(types::ACCEPTED).cloned();
    conditions::upsert(
        &mut status.conditions,
        condition(
            types::ACCEPTED,
            conditions::FALSE,
            reasons::INVALID_SPEC,
            &message,
            generation,
        ),
    );
    status.observed_generation = generation;
    status.message = Some(message.clone());
    if was.is_none_or(|c| c.reason != reasons::INVALID_SPEC || c.message != message) {
        info!(message = %message, "invalid");
        publish(ctx, mcj, EventType::Warning, reasons::INVALID_SPEC, &message).await;
    }
    write_status(ctx, mcj, &status).await?;
    ctx.jobs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(mcj.uid().unwrap_or_default(), status);
    Ok(Action::await_change())
}

async fn publish(ctx: &Context, mcj: &MultiClusterJob, type_: EventType, reason: &str, note: &str) {
    let event = KubeEvent {
        type_,
        reason: reason.to_owned(),
        note: Some(truncate(note, MAX_MESSAGE)),
        action: "Schedule".to_owned(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &mcj.object_ref(&())).await {
        warn!(error = %error, reason, "publishing an event failed");
    }
}

async fn write_status(
    ctx: &Context,
    mcj: &MultiClusterJob,
    status: &MultiClusterJobStatus,
) -> Result<(), Error> {
    let api: Api<MultiClusterJob> = Api::namespaced(ctx.client.clone(), &mcj.namespace().unwrap_or_default());
    let mut patch = json!({
        "apiVersion": nave_api::API_VERSION,
        "kind": "MultiClusterJob",
        "status": status,
    });
    // A merge patch leaves out what is absent: emptied fields are written empty.
    for field in ["pieces", "conditions"] {
        if patch["status"].get(field).is_none() {
            patch["status"][field] = json!([]);
        }
    }
    for field in ["queuePosition", "completedIndexes", "message"] {
        if patch["status"].get(field).is_none() {
            patch["status"][field] = serde_json::Value::Null;
        }
    }
    api.patch_status(
        &mcj.name_any(),
        &PatchParams::apply(HUB_NAME),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::kube("writing MultiClusterJob status"))?;
    Ok(())
}

async fn cleanup(mcj: Arc<MultiClusterJob>, ctx: &Context) -> Result<Action, Error> {
    let workload = contributor(&mcj);
    ctx.withdraw(&workload).await?;
    ctx.sources.index.rebook(&workload, None);
    ctx.job_queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&workload);
    ctx.jobs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&mcj.uid().unwrap_or_default());
    info!(job = %workload, "removed from every cluster");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use nave_api::wire::WORKLOAD_LABEL;

    use super::*;

    fn mcj(spec: serde_json::Value) -> MultiClusterJob {
        serde_json::from_value(json!({
            "apiVersion": "nave.dev/v1alpha1", "kind": "MultiClusterJob",
            "metadata": {"name": "render", "namespace": "batch"},
            "spec": {"template": {"spec": spec}},
        }))
        .expect("a MultiClusterJob")
    }

    fn pod() -> serde_json::Value {
        json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": "250m"}}}]}})
    }

    #[test]
    fn what_the_schema_cannot_check_is_refused_with_the_field_named() {
        let valid = validate(&mcj(
            json!({"completions": 10, "parallelism": 4, "completionMode": "Indexed", "template": pod()}),
        ))
        .expect("valid");
        assert_eq!(
            (valid.completions, valid.parallelism, valid.indexed),
            (10, 4, true)
        );
        assert_eq!(valid.demand.cpu_millis, 250);
        for (spec, field) in [
            (json!({"parallelism": 2, "template": pod()}), "completions"),
            (json!({"completions": 0, "template": pod()}), "completions"),
            (
                json!({"completions": 2, "parallelism": 3, "template": pod()}),
                "parallelism",
            ),
            (
                json!({"completions": 2, "completionMode": "Sometimes", "template": pod()}),
                "completionMode",
            ),
            (
                json!({"completions": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}),
                "restartPolicy",
            ),
            (
                json!({"completions": "many", "template": pod()}),
                "spec.template.spec",
            ),
            (
                json!({"completions": 2, "successPolicy": {"rules": [{"succeededIndexes": "0"}]}, "template": pod()}),
                "spec.template.spec.successPolicy",
            ),
            (
                json!({"completions": 2, "completionMode": "Indexed", "backoffLimitPerIndex": 1, "maxFailedIndexes": 1, "template": pod()}),
                "spec.template.spec.maxFailedIndexes",
            ),
            (
                json!({"completions": 2, "managedBy": "example.com/other", "template": pod()}),
                "spec.template.spec.managedBy",
            ),
            (
                json!({"completions": 2, "suspend": true, "template": pod()}),
                "spec.template.spec.suspend",
            ),
        ] {
            let error = validate(&mcj(spec.clone())).expect_err(&format!("{spec} must be refused"));
            assert!(error.contains(field), "{error:?} should name {field}");
        }
        let mut long = mcj(json!({"completions": 1, "template": pod()}));
        long.metadata.name = Some("x".repeat(MAX_JOB_NAME + 1));
        assert!(
            validate(&long)
                .expect_err("too long")
                .starts_with("metadata.name")
        );
        // The name fits, but not with the namespace in the label the clusters' Jobs carry.
        let mut crowded = mcj(json!({"completions": 1, "template": pod()}));
        crowded.metadata.name = Some("x".repeat(MAX_JOB_NAME));
        crowded.metadata.namespace = Some("n".repeat(20));
        let error = validate(&crowded).expect_err("label too long");
        assert!(error.contains(WORKLOAD_LABEL), "{error}");
    }

    #[test]
    fn the_queue_puts_higher_priority_first_then_older() {
        let at = |s: i64| Some(jiff::Timestamp::from_second(s).unwrap());
        let job = |priority, created| QueuedJob {
            priority,
            created,
            demand: Demand::default(),
            policy: Policy::default(),
            pods: vec![1],
        };
        let mut queue = [
            (WorkloadRef::job("b", "new-high"), job(5, at(200))),
            (WorkloadRef::job("b", "old-low"), job(0, at(100))),
            (WorkloadRef::job("b", "old-high"), job(5, at(100))),
        ];
        queue.sort_by_key(|(w, q)| q.order(w));
        let names: Vec<&str> = queue.iter().filter_map(|(w, _)| w.job_name()).collect();
        assert_eq!(names, ["old-high", "new-high", "old-low"]);
    }
}
