//! The Job controller, after upstream `pkg/controller/job` (`job_controller.go`,
//! `indexed_job_utils.go`, `backoff_utils.go`) as of 1.32, and the TTL-after-finished controller.
//!
//! ```text
//!  Job ──► pods (parallelism at a time, up to completions)
//!   ▲        │ kubelet: Running, then Succeeded / Failed after the run time
//!   └────────┘ count succeeded / failed, replace failures after a back-off,
//!              SuccessCriteriaMet + Complete, or FailureTarget + Failed; TTL deletes it
//! ```
//!
//! As upstream: `parallelism`, `completions` (none: work-queue semantics, the first success
//! completes the Job once no pod runs), `NonIndexed` and `Indexed` completion (the index as
//! annotation and label `batch.kubernetes.io/job-completion-index`, hostname `<job>-<index>`,
//! `generateName` `<job>-<index>-`, env `JOB_COMPLETION_INDEX`, `completedIndexes` such as
//! `"0-3,7"`), `backoffLimit` (and restart counts under `restartPolicy: OnFailure`),
//! `backoffLimitPerIndex` with `maxFailedIndexes` and `failedIndexes`, exponential back-off before
//! a failed pod is replaced, `activeDeadlineSeconds`, `suspend` (active pods deleted, none
//! created; `Suspended` condition; `startTime` reset on resume), `podReplacementPolicy`,
//! `managedBy` (Jobs managed by another controller are left alone), the 1.31+ conditions
//! (`SuccessCriteriaMet` then `Complete`; `FailureTarget` then `Failed` once no pod is
//! terminating), `ready` and `terminating` counts, the events, and `ttlSecondsAfterFinished`
//! (the finished Job is deleted in the foreground, so its pods go first).
//!
//! Simplified: pods carry no `batch.kubernetes.io/job-tracking` finalizer; the controller counts
//! each finished pod once as it sees it (also when it sees a pod deleted before it was counted),
//! remembering in memory which pods it counted (the control plane lives as long as the API
//! server's store, so the count cannot be lost), and `uncountedTerminatedPods` stays `{}`. The
//! back-off counts from when the controller saw a failure rather than from the container's
//! finish time, and its first step is `timing.jobBackoffMillis` (upstream: 10 s).
//! `podFailurePolicy` and `successPolicy` are not evaluated.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::cache::{Key, key_of, run_queue};
pub use super::kubelet_status::COMPLETION_INDEX_ANNOTATION;
use super::pods::{controller_of, deletion_order, is_ready, selector_is_empty, selector_matches};
use super::resources::is_terminal;
use super::rollout::whole_seconds;
use super::{Ctx, MANAGER_CONTROLLERS, api_code, events};

const COMPONENT: &str = "job-controller";

/// The Job's name, as a label the API server puts on the template (and so on every pod).
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// The Job's uid, as a label the API server puts on the template and in the selector.
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// The pre-1.27 spelling of [`JOB_NAME_LABEL`], still set.
pub const LEGACY_JOB_NAME_LABEL: &str = "job-name";
/// The pre-1.27 spelling of [`CONTROLLER_UID_LABEL`], still set.
pub const LEGACY_CONTROLLER_UID_LABEL: &str = "controller-uid";
/// How many times the pods of this index failed before (with `backoffLimitPerIndex`).
pub const INDEX_FAILURE_COUNT_ANNOTATION: &str = "batch.kubernetes.io/job-index-failure-count";
/// The environment variable giving an Indexed Job's pod its index.
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";
/// `spec.managedBy` of Jobs this controller manages (or none).
pub const MANAGED_BY_DEFAULT: &str = "kubernetes.io/job-controller";
/// Longest `generateName` (upstream `names.MaxGeneratedNameLength`).
const MAX_GENERATE_NAME: usize = 58;
/// Upstream creates or deletes at most 500 pods per sync.
const BURST: usize = 500;

const COMPLETIONS_REACHED: &str = "CompletionsReached";
const COMPLETIONS_REACHED_MESSAGE: &str = "Reached expected number of succeeded pods";

/// What the controller remembers of one Job between syncs (upstream keeps this in the pods'
/// tracking finalizers and its back-off store).
#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// Pods whose outcome is in the Job's status counts.
    counted: HashSet<String>,
    /// Pods the controller deleted on purpose (suspend, surplus): not failures.
    ignored: HashSet<String>,
    /// Pods deleted before they were counted, as last seen.
    gone: Vec<Arc<Pod>>,
    /// Failures since the last success, and when the last was seen (the back-off).
    failures: u32,
    last_failure: Option<Instant>,
    /// Per index: failures so far and when the last was seen.
    index_failures: BTreeMap<u32, (i32, Instant)>,
}

/// Enqueues a Job when it or one of its pods changes; keeps the pods deleted before they were
/// counted.
pub(super) fn register(ctx: &Arc<Ctx>) {
    let q = ctx.job_queue.clone();
    let weak = Arc::downgrade(ctx);
    ctx.jobs.on_change(move |old, new| match (old, new) {
        (_, Some(j)) => q.add(key_of(j)),
        (Some(j), None) => {
            if let (Some(ctx), Some(uid)) = (weak.upgrade(), j.metadata.uid.as_deref()) {
                ctx.sim().jobs.remove(uid);
            }
        }
        (None, None) => {}
    });
    let q = ctx.job_queue.clone();
    let jobs = ctx.jobs.clone();
    let weak = Arc::downgrade(ctx);
    ctx.pods.on_change(move |old, new| {
        for pod in [old, new].into_iter().flatten() {
            match controller_of(pod.metadata.owner_references.as_ref()) {
                Some(owner) if owner.kind == "Job" => {
                    if let Some(j) = jobs.get_uid(&owner.uid) {
                        q.add(key_of(j.as_ref()));
                    }
                }
                Some(_) => {}
                None => {
                    let ns = pod.metadata.namespace.clone().unwrap_or_default();
                    let labels = pod.metadata.labels.clone().unwrap_or_default();
                    for j in jobs.filter(|j| {
                        j.metadata.namespace.as_deref() == Some(ns.as_str())
                            && j.spec
                                .as_ref()
                                .and_then(|s| s.selector.as_ref())
                                .is_some_and(|s| !selector_is_empty(s) && selector_matches(s, &labels))
                    }) {
                        q.add(key_of(j.as_ref()));
                    }
                }
            }
        }
        if let (Some(gone), None) = (old, new)
            && let Some(owner) = controller_of(gone.metadata.owner_references.as_ref())
            && owner.kind == "Job"
            && let Some(ctx) = weak.upgrade()
        {
            let uid = gone.metadata.uid.clone().unwrap_or_default();
            let mut sim = ctx.sim();
            if let Some(ledger) = sim.jobs.get_mut(&owner.uid)
                && !ledger.counted.contains(&uid)
            {
                ledger.gone.push(Arc::new(gone.clone()));
            }
        }
    });
}

/// The controller loop.
pub(super) async fn run(ctx: Arc<Ctx>) {
    ctx.jobs.wait_synced().await;
    ctx.pods.wait_synced().await;
    let q = ctx.job_queue.clone();
    let shutdown = ctx.shutdown.clone();
    run_queue(q, 8, shutdown, |key| {
        let ctx = ctx.clone();
        async move { reconcile(&ctx, key).await }
    })
    .await;
}

/// Parses a list of indexes such as `"0-3,7"`; malformed parts are skipped.
pub fn parse_indexes(s: &str) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>())
                    && a <= b
                {
                    out.extend(a..=b.min(a.saturating_add(1_000_000)));
                }
            }
            None => {
                if let Ok(i) = part.parse() {
                    out.insert(i);
                }
            }
        }
    }
    out
}

/// Formats indexes as upstream does: ascending intervals, `a-b` for a run, `a` alone.
pub fn format_indexes(indexes: &BTreeSet<u32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(u32, u32)> = None;
    for &i in indexes {
        run = match run {
            Some((a, b)) if i == b + 1 => Some((a, i)),
            Some((a, b)) => {
                parts.push(interval(a, b));
                Some((i, i))
            }
            None => Some((i, i)),
        };
    }
    if let Some((a, b)) = run {
        parts.push(interval(a, b));
    }
    parts.join(",")
}

fn interval(a: u32, b: u32) -> String {
    if a == b { a.to_string() } else { format!("{a}-{b}") }
}

/// The `count` lowest indexes below `completions` that are neither taken (succeeded, failed or
/// running) (upstream `firstPendingIndexes`).
pub fn first_pending_indexes(completions: u32, taken: &BTreeSet<u32>, count: usize) -> Vec<u32> {
    (0..completions)
        .filter(|i| !taken.contains(i))
        .take(count)
        .collect()
}

/// The back-off before replacing a failed pod after `failures` failures in a row: `base`
/// doubling, at most 36 times `base` (upstream: 10 s up to 6 min).
pub fn backoff(base: Duration, failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let max = base.saturating_mul(36);
    base.saturating_mul(1u32 << (failures - 1).min(20)).min(max)
}

/// The completion index of a pod, if it has a valid one.
pub fn completion_index(pod: &Pod) -> Option<u32> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(COMPLETION_INDEX_ANNOTATION))
        .and_then(|v| v.parse().ok())
}

/// The `generateName` of a pod of an Indexed Job (upstream `podGenerateNameWithIndex`).
fn generate_name(job: &str, index: Option<u32>) -> String {
    let suffix = match index {
        Some(i) => format!("-{i}-"),
        None => "-".to_owned(),
    };
    let keep = MAX_GENERATE_NAME.saturating_sub(suffix.len()).min(job.len());
    let mut cut = keep;
    while !job.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{suffix}", &job[..cut])
}

/// A new pod of `job` (upstream `manageJob`'s pod template): for an Indexed Job with its index
/// as annotation and label, its hostname and the `JOB_COMPLETION_INDEX` variable, and with
/// `backoffLimitPerIndex` the failures of its index so far.
pub fn new_pod(job: &Job, index: Option<u32>, index_failures: Option<i32>) -> Pod {
    let name = job.name_any();
    let spec = job.spec.clone().unwrap_or_default();
    let template: PodTemplateSpec = spec.template;
    let meta = template.metadata.unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    let mut pod_spec = template.spec.unwrap_or_default();
    if let Some(i) = index {
        annotations.insert(COMPLETION_INDEX_ANNOTATION.into(), i.to_string());
        labels.insert(COMPLETION_INDEX_ANNOTATION.into(), i.to_string());
        if let Some(n) = index_failures {
            annotations.insert(INDEX_FAILURE_COUNT_ANNOTATION.into(), n.to_string());
        }
        pod_spec.hostname = Some(format!("{name}-{i}"));
        let env = EnvVar {
            name: COMPLETION_INDEX_ENV.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: Some("v1".into()),
                    field_path: format!("metadata.labels['{COMPLETION_INDEX_ANNOTATION}']"),
                }),
                ..Default::default()
            }),
        };
        let containers = pod_spec
            .init_containers
            .iter_mut()
            .flatten()
            .chain(pod_spec.containers.iter_mut());
        for c in containers {
            let vars = c.env.get_or_insert_with(Vec::new);
            if !vars.iter().any(|v| v.name == COMPLETION_INDEX_ENV) {
                vars.push(env.clone());
            }
        }
    }
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name(&name, index)),
            namespace: job.metadata.namespace.clone(),
            labels: (!labels.is_empty()).then_some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: meta.finalizers,
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name,
                uid: job.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(pod_spec),
        status: None,
    }
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn new_condition(type_: &str, status: &str, reason: &str, message: &str, now: Timestamp) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// Upstream `ensureJobConditionStatus`: sets a condition, replacing it when its status, reason or
/// message differ; a `False` one is not added where there was none. Answers whether it changed.
pub fn ensure_condition(
    list: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    if let Some(c) = list.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status || c.reason.as_deref() != Some(reason) || c.message.as_deref() != Some(message)
        {
            *c = new_condition(type_, status, reason, message, now);
            return true;
        }
        return false;
    }
    if status == "False" {
        return false;
    }
    list.push(new_condition(type_, status, reason, message, now));
    true
}

fn condition_true<'a>(list: &'a [JobCondition], type_: &str) -> Option<&'a JobCondition> {
    list.iter().find(|c| c.type_ == type_ && c.status == "True")
}

/// Whether the Job has finished (`Complete` or `Failed`), and when.
pub fn finished_at(job: &Job) -> Option<Timestamp> {
    finish_time(job.status.as_ref()?)
}

fn finish_time(status: &JobStatus) -> Option<Timestamp> {
    let conditions = status.conditions.as_deref()?;
    ["Complete", "Failed"]
        .iter()
        .find_map(|t| condition_true(conditions, t))
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0)
        })
}

/// The status as a merge patch: absent fields become `null` so they are removed.
fn status_patch(status: &JobStatus) -> Value {
    let mut v = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    if let Some(o) = v.as_object_mut() {
        for k in [
            "active",
            "succeeded",
            "failed",
            "ready",
            "terminating",
            "startTime",
            "completionTime",
            "conditions",
            "completedIndexes",
            "failedIndexes",
        ] {
            o.entry(k).or_insert(Value::Null);
        }
    }
    json!({ "status": v })
}

/// How a finished Job ended.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Success,
    Failure { reason: String, message: String },
}

fn failure(reason: &str, message: &str) -> Outcome {
    Outcome::Failure {
        reason: reason.into(),
        message: message.into(),
    }
}

fn soonest(a: Option<Duration>, b: Duration) -> Option<Duration> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// Upstream `pastBackoffLimitOnFailure`: under `restartPolicy: OnFailure`, container restarts
/// of running and pending pods count against the back-off limit.
fn past_backoff_limit_on_failure(job: &Job, pods: &[Arc<Pod>], limit: i32) -> bool {
    let restart = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.restart_policy.as_deref());
    if restart != Some("OnFailure") {
        return false;
    }
    let restarts: i32 = pods
        .iter()
        .filter(|p| matches!(phase(p), "Running" | "Pending"))
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .map(|c| c.restart_count)
        .sum();
    if limit == 0 {
        restarts > 0
    } else {
        restarts >= limit
    }
}

/// What one sync needs besides the cache.
struct JobSync<'a> {
    ctx: &'a Arc<Ctx>,
    job: &'a Job,
    pods: Api<Pod>,
    pp: PatchParams,
}

impl JobSync<'_> {
    fn event(&self, type_: &str, reason: &str, message: String) {
        self.ctx
            .events
            .record(events::reference(self.job), type_, reason, message, COMPONENT);
    }

    /// Deletes pods; `on_purpose` ones are not counted as failures. Answers `(deleted, deleted
    /// ready, still terminating)`.
    async fn delete_pods(&self, pods: &[Arc<Pod>], on_purpose: bool) -> (i32, i32, i32) {
        if on_purpose {
            let uid = self.job.metadata.uid.clone().unwrap_or_default();
            let mut sim = self.ctx.sim();
            let ledger = sim.jobs.entry(uid).or_default();
            ledger
                .ignored
                .extend(pods.iter().filter_map(|p| p.metadata.uid.clone()));
        }
        let results: Vec<_> = futures::stream::iter(pods.iter().take(BURST).cloned())
            .map(|p| {
                let api = self.pods.clone();
                async move {
                    let dp = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: p.metadata.uid.clone(),
                            resource_version: None,
                        }),
                        ..Default::default()
                    };
                    (api.delete(&p.name_any(), &dp).await, p)
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        let (mut deleted, mut ready, mut still) = (0, 0, 0);
        for (r, p) in results {
            match r {
                Ok(either) => {
                    deleted += 1;
                    if is_ready(&p) {
                        ready += 1;
                    }
                    self.event(
                        "Normal",
                        "SuccessfulDelete",
                        format!("Deleted pod: {}", p.name_any()),
                    );
                    match either.left() {
                        Some(deleting) => {
                            still += 1;
                            self.ctx.pods.apply(deleting);
                        }
                        None => self
                            .ctx
                            .pods
                            .forget(&key_of(p.as_ref()), p.metadata.uid.as_deref().unwrap_or("")),
                    }
                }
                Err(e) if api_code(&e) == Some(404) => deleted += 1,
                Err(e) => tracing::debug!(pod = %p.name_any(), error = %e, "deleting a job pod failed"),
            }
        }
        (deleted, ready, still)
    }

    /// Creates pods, for these indexes or `count` non-indexed ones; answers how many were created
    /// and whether a creation failed.
    async fn create_pods(
        &self,
        indexes: Option<Vec<u32>>,
        count: usize,
        failures: &BTreeMap<u32, i32>,
    ) -> (i32, bool) {
        let per_index = self
            .job
            .spec
            .as_ref()
            .is_some_and(|s| s.backoff_limit_per_index.is_some());
        let pods: Vec<Pod> = match indexes {
            Some(ix) => ix
                .into_iter()
                .map(|i| {
                    let n = per_index.then(|| failures.get(&i).copied().unwrap_or(0));
                    new_pod(self.job, Some(i), n)
                })
                .collect(),
            None => (0..count).map(|_| new_pod(self.job, None, None)).collect(),
        };
        let post = PostParams {
            field_manager: Some(MANAGER_CONTROLLERS.into()),
            ..Default::default()
        };
        let results: Vec<Result<Pod, kube::Error>> = futures::stream::iter(pods.into_iter().take(BURST))
            .map(|p| {
                let (api, post) = (self.pods.clone(), post.clone());
                async move { api.create(&post, &p).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        let (mut created, mut failed) = (0, false);
        for r in results {
            match r {
                Ok(p) => {
                    created += 1;
                    self.event(
                        "Normal",
                        "SuccessfulCreate",
                        format!("Created pod: {}", p.name_any()),
                    );
                    self.ctx.pods.apply(p);
                }
                Err(e) => {
                    failed = true;
                    self.event("Warning", "FailedCreate", format!("Error creating: {e}"));
                }
            }
        }
        (created, failed)
    }
}

/// The pods this Job manages: its own that still match its selector, plus matching orphans it
/// adopts.
async fn claim_pods(s: &JobSync<'_>) -> Vec<Arc<Pod>> {
    let job = s.job;
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let selector = job
        .spec
        .as_ref()
        .and_then(|s| s.selector.clone())
        .unwrap_or_default();
    let empty = BTreeMap::new();
    let matches = |p: &Pod| {
        !selector_is_empty(&selector)
            && selector_matches(&selector, p.metadata.labels.as_ref().unwrap_or(&empty))
    };
    let mut pods = Vec::new();
    for p in s.ctx.pods.owned_by(&uid) {
        if matches(&p) {
            pods.push(p);
            continue;
        }
        let refs: Vec<_> = p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|r| r.uid != uid)
            .cloned()
            .collect();
        let patch = json!({"metadata": {"ownerReferences": refs}});
        if let Ok(p) = s.pods.patch(&p.name_any(), &s.pp, &Patch::Merge(&patch)).await {
            s.ctx.pods.apply(p);
        }
    }
    let orphans = s.ctx.pods.filter(|p| {
        p.metadata.namespace.as_deref() == Some(ns.as_str())
            && controller_of(p.metadata.owner_references.as_ref()).is_none()
            && p.metadata.deletion_timestamp.is_none()
            && matches(p)
    });
    for p in orphans {
        let mut refs = p.metadata.owner_references.clone().unwrap_or_default();
        refs.extend(
            new_pod(job, None, None)
                .metadata
                .owner_references
                .unwrap_or_default(),
        );
        let patch = json!({"metadata": {"ownerReferences": refs, "uid": p.metadata.uid}});
        match s.pods.patch(&p.name_any(), &s.pp, &Patch::Merge(&patch)).await {
            Ok(p) => {
                let p = Arc::new(p);
                s.ctx.pods.apply((*p).clone());
                pods.push(p);
            }
            Err(e) => tracing::debug!(pod = %p.name_any(), error = %e, "adoption failed"),
        }
    }
    pods
}

/// The finished pods not counted yet, from the pods and those deleted before they were counted.
#[derive(Debug, Default)]
struct NewlyFinished {
    /// Uids of every pod counted now.
    uids: Vec<String>,
    /// Succeeded pods (non-indexed) and the indexes of succeeded pods (indexed).
    succeeded: i32,
    succeeded_indexes: BTreeSet<u32>,
    /// Failed pods, with their index when they have a valid one.
    failed: i32,
    failed_indexes: Vec<u32>,
    /// Uids of the deleted pods among them.
    gone: Vec<String>,
}

fn newly_finished(
    sim: &super::SimState,
    job_uid: &str,
    pods: &[Arc<Pod>],
    completions: Option<u32>,
    indexed: bool,
    only_failed: bool,
) -> NewlyFinished {
    let mut out = NewlyFinished::default();
    let Some(l) = sim.jobs.get(job_uid) else {
        return NewlyFinished::default();
    };
    let valid = |p: &Pod| -> Option<Option<u32>> {
        if !indexed {
            return Some(None);
        }
        completion_index(p)
            .filter(|i| completions.is_some_and(|c| *i < c))
            .map(Some)
    };
    let live = pods.iter().map(|p| (p, false));
    let gone = l.gone.iter().map(|p| (p, true));
    let mut seen: HashSet<String> = HashSet::new();
    for (p, deleted) in live.chain(gone) {
        let uid = p.metadata.uid.clone().unwrap_or_default();
        if l.counted.contains(&uid) || !seen.insert(uid.clone()) {
            continue;
        }
        let succeeded = phase(p) == "Succeeded";
        let failed = phase(p) == "Failed"
            || (!succeeded
                && !l.ignored.contains(&uid)
                && (deleted || (p.metadata.deletion_timestamp.is_some() && !only_failed)));
        if deleted {
            out.gone.push(uid.clone());
        }
        if !(succeeded || failed) {
            continue;
        }
        out.uids.push(uid);
        let Some(index) = valid(p) else { continue };
        match (succeeded, index) {
            (true, Some(i)) => {
                out.succeeded_indexes.insert(i);
            }
            (true, None) => out.succeeded += 1,
            (false, i) => {
                out.failed += 1;
                out.failed_indexes.extend(i);
            }
        }
    }
    out
}

async fn reconcile(ctx: &Arc<Ctx>, key: Key) -> Result<Option<Duration>, kube::Error> {
    let Some(job) = ctx.jobs.get(&key) else {
        return Ok(None);
    };
    let Some(spec) = job.spec.clone() else {
        return Ok(None);
    };
    if spec
        .managed_by
        .as_deref()
        .is_some_and(|m| m != MANAGED_BY_DEFAULT)
    {
        return Ok(None);
    }
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    if let Some(at) = finished_at(&job) {
        return expire(ctx, &job, at).await;
    }
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let s = JobSync {
        ctx,
        job: &job,
        pods: Api::namespaced(ctx.client.clone(), &key.0),
        pp: PatchParams {
            field_manager: Some(MANAGER_CONTROLLERS.into()),
            ..Default::default()
        },
    };
    let pods = claim_pods(&s).await;
    let indexed = spec.completion_mode.as_deref() == Some("Indexed") && spec.completions.is_some();
    let completions = spec.completions.map(|c| u32::try_from(c).unwrap_or(0));
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let per_index = spec.backoff_limit_per_index.filter(|_| indexed);
    let only_failed =
        spec.pod_replacement_policy.as_deref() == Some("Failed") || spec.pod_failure_policy.is_some();
    let suspended = spec.suspend == Some(true);
    let old = job.status.clone().unwrap_or_default();
    let now = whole_seconds(Timestamp::now());
    let instant = Instant::now();
    let base = Duration::from_millis(ctx.config.timing.job_backoff_millis);

    // Count what finished since the last sync.
    let (new, backoff_left, index_failures) = {
        let mut sim = ctx.sim();
        sim.jobs.entry(uid.clone()).or_default();
        let new = newly_finished(&sim, &uid, &pods, completions, indexed, only_failed);
        let l = sim
            .jobs
            .get(&uid)
            .map(|l| (l.failures, l.last_failure, l.index_failures.clone()));
        let (mut failures, mut last, mut per) = l.unwrap_or_default();
        if new.failed > 0 {
            failures += u32::try_from(new.failed).unwrap_or(0);
            last = Some(instant);
            for i in &new.failed_indexes {
                let e = per.entry(*i).or_insert((0, instant));
                *e = (e.0 + 1, instant);
            }
        } else if new.succeeded > 0 || !new.succeeded_indexes.is_empty() {
            failures = 0;
        }
        let left = last.map_or(Duration::ZERO, |at| {
            (at + backoff(base, failures)).saturating_duration_since(instant)
        });
        (new, (failures, last, left), per)
    };
    let (failures_now, last_failure_now, global_backoff_left) = backoff_left;

    let mut succeeded_indexes = parse_indexes(old.completed_indexes.as_deref().unwrap_or(""));
    succeeded_indexes.extend(new.succeeded_indexes.iter().copied());
    if let Some(c) = completions {
        succeeded_indexes.retain(|i| *i < c);
    }
    let succeeded = if indexed {
        i32::try_from(succeeded_indexes.len()).unwrap_or(i32::MAX)
    } else {
        old.succeeded.unwrap_or(0) + new.succeeded
    };
    let failed = old.failed.unwrap_or(0) + new.failed;
    let mut failed_indexes = parse_indexes(old.failed_indexes.as_deref().unwrap_or(""));
    if let Some(limit) = per_index {
        failed_indexes.extend(
            index_failures
                .iter()
                .filter(|(_, (n, _))| *n > limit)
                .map(|(i, _)| *i),
        );
        failed_indexes.retain(|i| !succeeded_indexes.contains(i));
    }

    let active: Vec<Arc<Pod>> = pods
        .iter()
        .filter(|p| !is_terminal(p) && p.metadata.deletion_timestamp.is_none())
        .cloned()
        .collect();
    let mut active_n = i32::try_from(active.len()).unwrap_or(i32::MAX);
    let mut ready_n = i32::try_from(active.iter().filter(|p| is_ready(p)).count()).unwrap_or(0);
    let mut terminating_n = i32::try_from(
        pods.iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some() && !is_terminal(p))
            .count(),
    )
    .unwrap_or(0);

    let mut start_time = old.start_time.clone();
    if start_time.is_none() && !suspended {
        start_time = Some(Time(now));
    }
    let mut conditions = old.conditions.clone().unwrap_or_default();
    let mut requeue: Option<Duration> = None;

    let mut outcome: Option<Outcome> = if condition_true(&conditions, "SuccessCriteriaMet").is_some() {
        Some(Outcome::Success)
    } else {
        condition_true(&conditions, "FailureTarget").map(|c| Outcome::Failure {
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        })
    };
    if outcome.is_none() {
        let deadline = spec
            .active_deadline_seconds
            .filter(|_| !suspended)
            .zip(start_time.as_ref())
            .map(|(secs, start)| start.0 + jiff::SignedDuration::from_secs(secs));
        if failed > backoff_limit || past_backoff_limit_on_failure(&job, &pods, backoff_limit) {
            outcome = Some(failure(
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            ));
        } else if deadline.is_some_and(|d| Timestamp::now() >= d) {
            outcome = Some(failure(
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            ));
        } else if let Some(d) = deadline {
            let left = d.duration_since(Timestamp::now()).as_millis().max(0) as u64;
            requeue = soonest(requeue, Duration::from_millis(left + 10));
        }
    }
    if outcome.is_none() && per_index.is_some() {
        let total = completions.unwrap_or(0) as usize;
        if spec
            .max_failed_indexes
            .is_some_and(|m| failed_indexes.len() > usize::try_from(m).unwrap_or(0))
        {
            outcome = Some(failure(
                "MaxFailedIndexesExceeded",
                "Job has exceeded the specified maximal number of failed indexes",
            ));
        } else if !failed_indexes.is_empty() && failed_indexes.len() + succeeded_indexes.len() >= total {
            outcome = Some(failure("FailedIndexes", "Job has failed indexes"));
        }
    }

    let mut create_failed = false;
    if let Some(Outcome::Failure { .. }) = &outcome {
        // A failing Job loses its running pods; they count as failed.
        let (deleted, deleted_ready, still) = s.delete_pods(&active, false).await;
        active_n -= deleted;
        ready_n -= deleted_ready;
        terminating_n += still;
    } else if outcome.is_none() {
        if suspended {
            let (deleted, deleted_ready, still) = s.delete_pods(&active, true).await;
            active_n -= deleted;
            ready_n -= deleted_ready;
            terminating_n += still;
        } else {
            let want = match completions {
                None if succeeded > 0 => active_n,
                None => parallelism,
                Some(c) => (i32::try_from(c).unwrap_or(i32::MAX) - succeeded).clamp(0, parallelism),
            };
            // Surplus: duplicated or invalid indexes first, then upstream's ActivePods order.
            let mut surplus: Vec<Arc<Pod>> = Vec::new();
            let mut keep: Vec<Arc<Pod>> = Vec::new();
            if indexed {
                let mut sorted = active.clone();
                sorted.sort_by(|a, b| deletion_order(b, a));
                let mut seen = BTreeSet::new();
                for p in sorted {
                    match completion_index(&p) {
                        Some(i) if completions.is_some_and(|c| i < c) && seen.insert(i) => keep.push(p),
                        _ => surplus.push(p),
                    }
                }
            } else {
                keep = active.clone();
            }
            let rm_at_least = usize::try_from(active_n - want).unwrap_or(0);
            if surplus.len() < rm_at_least {
                keep.sort_by(|a, b| deletion_order(a, b));
                surplus.extend(keep.iter().take(rm_at_least - surplus.len()).cloned());
            }
            if !surplus.is_empty() {
                let (deleted, deleted_ready, still) = s.delete_pods(&surplus, true).await;
                active_n -= deleted;
                ready_n -= deleted_ready;
                terminating_n += still;
            } else {
                let replacing = if only_failed { terminating_n } else { 0 };
                let diff = usize::try_from(want - replacing - active_n).unwrap_or(0);
                if diff > 0 && per_index.is_none() && !global_backoff_left.is_zero() {
                    requeue = soonest(requeue, global_backoff_left);
                } else if diff > 0 {
                    let indexes = if indexed {
                        let mut taken: BTreeSet<u32> = succeeded_indexes.clone();
                        taken.extend(failed_indexes.iter().copied());
                        taken.extend(active.iter().filter_map(|p| completion_index(p)));
                        let mut pending = first_pending_indexes(completions.unwrap_or(0), &taken, usize::MAX);
                        if per_index.is_some() {
                            // Each index waits out its own back-off.
                            let mut wait: Option<Duration> = None;
                            pending.retain(|i| {
                                let left = index_failures.get(i).map_or(Duration::ZERO, |(n, at)| {
                                    (*at + backoff(base, u32::try_from(*n).unwrap_or(0)))
                                        .saturating_duration_since(instant)
                                });
                                if !left.is_zero() {
                                    wait = soonest(wait, left);
                                }
                                left.is_zero()
                            });
                            if let Some(w) = wait {
                                requeue = soonest(requeue, w);
                            }
                        }
                        pending.truncate(diff);
                        Some(pending)
                    } else {
                        None
                    };
                    let counts: BTreeMap<u32, i32> =
                        index_failures.iter().map(|(i, (n, _))| (*i, *n)).collect();
                    let (created, failed_create) = s.create_pods(indexes, diff, &counts).await;
                    active_n += created;
                    create_failed = failed_create;
                }
            }
        }
        let complete = match completions {
            None => succeeded > 0 && active_n == 0,
            Some(c) => succeeded >= i32::try_from(c).unwrap_or(i32::MAX) && active_n == 0,
        };
        if complete {
            outcome = Some(Outcome::Success);
        } else if suspended {
            if ensure_condition(
                &mut conditions,
                "Suspended",
                "True",
                "JobSuspended",
                "Job suspended",
                now,
            ) {
                s.event("Normal", "Suspended", "Job suspended".into());
            }
        } else if ensure_condition(
            &mut conditions,
            "Suspended",
            "False",
            "JobResumed",
            "Job resumed",
            now,
        ) {
            s.event("Normal", "Resumed", "Job resumed".into());
            // The deadline counts from the resumption (upstream resets startTime).
            start_time = Some(Time(now));
        }
    }

    let mut completion_time = old.completion_time.clone();
    let mut finished_event: Option<(String, String, String)> = None;
    match &outcome {
        Some(Outcome::Success) => {
            ensure_condition(
                &mut conditions,
                "SuccessCriteriaMet",
                "True",
                COMPLETIONS_REACHED,
                COMPLETIONS_REACHED_MESSAGE,
                now,
            );
            if terminating_n == 0 {
                ensure_condition(
                    &mut conditions,
                    "Complete",
                    "True",
                    COMPLETIONS_REACHED,
                    COMPLETIONS_REACHED_MESSAGE,
                    now,
                );
                completion_time = Some(Time(now));
                finished_event = Some(("Normal".into(), "Completed".into(), "Job completed".into()));
            }
        }
        Some(Outcome::Failure { reason, message }) => {
            ensure_condition(&mut conditions, "FailureTarget", "True", reason, message, now);
            if terminating_n == 0 && active_n == 0 {
                ensure_condition(&mut conditions, "Failed", "True", reason, message, now);
                finished_event = Some(("Warning".into(), reason.clone(), message.clone()));
            }
        }
        None => {}
    }

    let nz = |v: i32| (v != 0).then_some(v);
    let status = JobStatus {
        active: nz(active_n.max(0)),
        succeeded: nz(succeeded),
        failed: nz(failed),
        ready: Some(ready_n.max(0)),
        terminating: Some(terminating_n.max(0)),
        start_time,
        completion_time,
        conditions: (!conditions.is_empty()).then_some(conditions),
        completed_indexes: indexed
            .then(|| format_indexes(&succeeded_indexes))
            .filter(|s| !s.is_empty()),
        failed_indexes: per_index.map(|_| format_indexes(&failed_indexes)),
        uncounted_terminated_pods: Some(UncountedTerminatedPods::default()),
    };
    if status != old {
        let api: Api<Job> = Api::namespaced(ctx.client.clone(), &key.0);
        let updated = api
            .patch_status(&key.1, &s.pp, &Patch::Merge(&status_patch(&status)))
            .await?;
        ctx.jobs.apply(updated);
    }
    if let Some((type_, reason, message)) = finished_event {
        s.event(&type_, &reason, message);
    }
    // The counts are written: remember which pods they include.
    {
        let mut sim = ctx.sim();
        let l = sim.jobs.entry(uid).or_default();
        l.counted.extend(new.uids.iter().cloned());
        l.gone.retain(|p| {
            !new.gone
                .iter()
                .any(|u| p.metadata.uid.as_deref() == Some(u.as_str()))
        });
        l.failures = failures_now;
        l.last_failure = last_failure_now;
        l.index_failures = index_failures;
    }
    if create_failed {
        requeue = soonest(requeue, Duration::from_secs(1));
    }
    if let Some(at) = finish_time(&status) {
        return expire(ctx, &job, at).await;
    }
    Ok(requeue)
}

/// The TTL-after-finished controller: deletes a finished Job `ttlSecondsAfterFinished` after it
/// finished, in the foreground (its pods go first), as upstream `ttlafterfinished` does.
async fn expire(ctx: &Arc<Ctx>, job: &Job, finished: Timestamp) -> Result<Option<Duration>, kube::Error> {
    let Some(ttl) = job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished) else {
        return Ok(None);
    };
    let due = finished + jiff::SignedDuration::from_secs(i64::from(ttl.max(0)));
    let now = Timestamp::now();
    if now < due {
        let left = due.duration_since(now).as_millis().max(0) as u64;
        return Ok(Some(Duration::from_millis(left + 10)));
    }
    let api: Api<Job> = Api::namespaced(
        ctx.client.clone(),
        job.metadata.namespace.as_deref().unwrap_or(""),
    );
    let dp = DeleteParams {
        propagation_policy: Some(kube::api::PropagationPolicy::Foreground),
        preconditions: Some(Preconditions {
            uid: job.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&job.name_any(), &dp).await {
        Ok(either) => {
            if let Some(deleting) = either.left() {
                ctx.jobs.apply(deleting);
            }
            Ok(None)
        }
        Err(e) if matches!(api_code(&e), Some(404 | 409)) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
