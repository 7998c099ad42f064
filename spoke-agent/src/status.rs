//! Status reports: per object of the work set, Deployment and StatefulSet replicas, Job
//! completions, and pending
//! pods per workload, sent after each apply, when those objects or pods change, and periodically.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{ObjectRef as StoreRef, Store};
use nave_api::wire::{ConditionSummary, ObjectStatus, StatusDelta, StatusReport};
use tokio_util::sync::CancellationToken;
use tracing::{debug, instrument, warn};

use crate::apply::ObjectRef;
use crate::backoff::Backoff;
use crate::capacity::{PodSummary, pending_by_workload, waiting_by_workload};
use crate::error::Result;
use crate::{Agent, WorkState};

/// The reflectors of the workload objects the agent applied (by its ownership label).
#[derive(Clone)]
#[allow(missing_debug_implementations)] // reflector stores have no Debug
pub struct WorkloadStores {
    /// Deployments.
    pub deployments: Store<Deployment>,
    /// StatefulSets.
    pub stateful_sets: Store<StatefulSet>,
    /// Jobs.
    pub jobs: Store<Job>,
}

/// What a Deployment's or a StatefulSet's spec and status say, as the report carries it.
struct Counts {
    spec_replicas: Option<i32>,
    ready: Option<i32>,
    available: Option<i32>,
    updated: Option<i32>,
    all: Option<i32>,
    observed_generation: Option<i64>,
    /// The generation this agent's last apply of the object made, if it applied it.
    applied_generation: Option<i64>,
    conditions: Vec<ConditionSummary>,
}

impl Counts {
    fn fill(self, meta: &ObjectMeta, status: &mut ObjectStatus) {
        status.replicas = Some(self.spec_replicas.unwrap_or(1));
        status.ready_replicas = Some(self.ready.unwrap_or(0));
        status.available_replicas = Some(self.available.unwrap_or(0));
        status.updated_replicas = Some(self.updated.unwrap_or(0));
        status.all_replicas = Some(self.all.unwrap_or(0));
        status.template_hash = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(nave_api::TEMPLATE_HASH_ANNOTATION))
            .cloned();
        // Current: the controller saw the object as the watch has it, and the watch has seen
        // this agent's last apply (a report sent right after an apply may read the object from
        // before it).
        let generation = meta.generation.unwrap_or(0);
        status.observed_current = Some(
            self.observed_generation.unwrap_or(0) >= generation
                && generation >= self.applied_generation.unwrap_or(0),
        );
        status.conditions = self.conditions;
    }
}

fn summary(
    type_: Option<String>,
    status: Option<String>,
    reason: Option<String>,
    message: Option<String>,
) -> ConditionSummary {
    ConditionSummary {
        type_: type_.unwrap_or_default(),
        status: status.unwrap_or_default(),
        reason,
        message,
    }
}

/// A Deployment's replica counts, template digest and conditions, into its report.
fn deployment_status(d: &Deployment, applied_generation: Option<i64>, status: &mut ObjectStatus) {
    let s = d.status.clone().unwrap_or_default();
    let conditions = s.conditions.unwrap_or_default().into_iter();
    Counts {
        spec_replicas: d.spec.replicas,
        ready: s.ready_replicas,
        available: s.available_replicas,
        updated: s.updated_replicas,
        all: s.replicas,
        observed_generation: s.observed_generation,
        applied_generation,
        conditions: conditions
            .map(|c| summary(c.type_, c.status, c.reason, c.message))
            .collect(),
    }
    .fill(&d.metadata, status);
}

/// A StatefulSet's, as a Deployment's: `status.replicas` counts every pod it still has, so the
/// hub knows when ordinals it gave up are gone.
fn stateful_set_status(set: &StatefulSet, applied_generation: Option<i64>, status: &mut ObjectStatus) {
    let s = set.status.clone().unwrap_or_default();
    let conditions = s.conditions.unwrap_or_default().into_iter();
    Counts {
        spec_replicas: set.spec.replicas,
        ready: s.ready_replicas,
        available: s.available_replicas,
        updated: s.updated_replicas,
        all: Some(s.replicas),
        observed_generation: s.observed_generation,
        applied_generation,
        conditions: conditions
            .map(|c| summary(c.type_, c.status, c.reason, c.message))
            .collect(),
    }
    .fill(&set.metadata, status);
    status.first_ordinal = set.spec.ordinals.as_ref().and_then(|o| o.start);
}

/// A Job's pods and completions, its conditions and the template digest it was applied with.
/// `ready_replicas` is its ready pods, which the hub's ledger counts as it counts a Deployment's.
fn job_status(job: &Job, status: &mut ObjectStatus) {
    let s = job.status.clone().unwrap_or_default();
    status.active = Some(s.active.unwrap_or(0));
    status.succeeded = Some(s.succeeded.unwrap_or(0));
    status.failed = Some(s.failed.unwrap_or(0));
    status.ready_replicas = Some(s.ready.unwrap_or(0));
    status.completed_indexes = s.completed_indexes.filter(|c| !c.is_empty());
    status.template_hash = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(nave_api::TEMPLATE_HASH_ANNOTATION))
        .cloned();
    status.conditions = s
        .conditions
        .unwrap_or_default()
        .into_iter()
        .map(|c| summary(Some(c.type_), Some(c.status), c.reason, c.message))
        .collect();
}

/// Builds the report from what was applied and the reflectors' view.
pub fn build_report(
    cluster: &str,
    work: &WorkState,
    workloads: &WorkloadStores,
    applied_generations: &HashMap<ObjectRef, i64>,
    pods: &[Arc<PodSummary>],
) -> StatusReport {
    let pending = pending_by_workload(pods.iter().map(|p| p.as_ref()));
    let waiting = waiting_by_workload(pods.iter().map(|p| p.as_ref()));
    let objects = work
        .objects
        .iter()
        .map(|(object_ref, workload)| {
            let mut status = ObjectStatus {
                api_version: object_ref.api_version.clone(),
                kind: object_ref.kind.clone(),
                namespace: object_ref.namespace.clone(),
                name: object_ref.name.clone(),
                workload: workload.clone(),
                error: work
                    .errors
                    .iter()
                    .find(|e| {
                        e.kind == object_ref.kind
                            && e.name == object_ref.name
                            && e.namespace == object_ref.namespace
                    })
                    .map(|e| e.message.clone()),
                ..Default::default()
            };
            let workload_kind = (object_ref.api_version == "apps/v1"
                && matches!(object_ref.kind.as_str(), "Deployment" | "StatefulSet"))
                || (object_ref.api_version == "batch/v1" && object_ref.kind == "Job");
            // Any other object: the content digest the hub gave it, as applied (only when the
            // whole set it came in was applied, and the object did not fail).
            if status.error.is_none()
                && !workload_kind
                && let Some(known) = work
                    .known
                    .as_ref()
                    .filter(|k| Some(k.revision) == work.state.revision)
            {
                let key = nave_api::wire::work_key_of(
                    &object_ref.kind,
                    object_ref.namespace.as_deref().unwrap_or_default(),
                    &object_ref.name,
                );
                status.template_hash = known
                    .objects
                    .get(&key)
                    .and_then(|o| o["metadata"]["annotations"][nave_api::TEMPLATE_HASH_ANNOTATION].as_str())
                    .map(str::to_owned);
            }
            if workload_kind {
                let namespace = object_ref.namespace.as_deref().unwrap_or("");
                match object_ref.kind.as_str() {
                    "Deployment" => {
                        let key = StoreRef::new(&object_ref.name).within(namespace);
                        if let Some(d) = workloads.deployments.get(&key) {
                            deployment_status(&d, applied_generations.get(object_ref).copied(), &mut status);
                        }
                    }
                    "Job" => {
                        let key = StoreRef::new(&object_ref.name).within(namespace);
                        if let Some(job) = workloads.jobs.get(&key) {
                            job_status(&job, &mut status);
                        }
                    }
                    _ => {
                        let key = StoreRef::new(&object_ref.name).within(namespace);
                        if let Some(s) = workloads.stateful_sets.get(&key) {
                            stateful_set_status(
                                &s,
                                applied_generations.get(object_ref).copied(),
                                &mut status,
                            );
                        }
                    }
                }
                status.waiting_pods = workload
                    .as_ref()
                    .and_then(|w| waiting.get(w))
                    .cloned()
                    .unwrap_or_default();
                status.pending_pods = Some(
                    workload
                        .as_ref()
                        .and_then(|w| pending.get(w))
                        .copied()
                        .unwrap_or(0),
                );
            }
            status
        })
        .collect();
    StatusReport {
        cluster_name: Some(cluster.to_owned()),
        applied_revision: work.state.revision,
        attempted_revision: work.attempted.filter(|a| Some(*a) != work.state.revision),
        objects,
        apply_errors: work.errors.clone(),
        id: None,
    }
}

/// Sends a report whenever it changed (woken by applies and watch events) and at least every
/// `status_interval`; retries with backoff while the hub is unreachable. To a hub that takes
/// them, a report goes as what changed since the last one it took ([`StatusDelta`]); whole after
/// a start, a new registration or store, and whenever the hub does not hold the report the
/// changes follow.
#[instrument(skip_all, fields(cluster = %agent.config.cluster_name))]
pub async fn status_loop(agent: Arc<Agent>, shutdown: CancellationToken) -> Result<()> {
    let mut backoff = Backoff::new(agent.config.retry_initial, agent.config.retry_max);
    // The last report the hub took, with the id its content goes by.
    let mut last_sent: Option<StatusReport> = None;
    // The registrations and the store followed when the last report was sent: a hub that
    // registered the agent again, or a new store, may not have the report, so it is sent again.
    let mut sent_at = (u64::MAX, None::<String>);
    let mut due = tokio::time::Instant::now();
    let mut pace = Pace::new(std::time::Instant::now());
    let mut ids = ReportIds::new();
    loop {
        let mut report = {
            let work = agent.work.read().await;
            let pods = agent.pods.state();
            build_report(
                &agent.config.cluster_name,
                &work,
                &agent.workloads,
                &agent.applier.applied_generations(),
                &pods,
            )
        };
        report.id = match &last_sent {
            Some(last) if last.same_content(&report) => last.id.clone(),
            _ => Some(ids.next()),
        };
        let periodic = tokio::time::Instant::now() >= due;
        let now_at = (
            agent.identity.registrations(),
            agent.work.read().await.state.store.clone(),
        );
        let mut retry_in = None;
        if periodic || last_sent.as_ref() != Some(&report) || sent_at != now_at {
            pace.take(std::time::Instant::now());
            let delta = last_sent
                .as_ref()
                .filter(|_| sent_at == now_at && agent.status_deltas.load(Ordering::Relaxed))
                .and_then(|last| report.delta_from(last));
            match send(&agent, &shutdown, &report, delta.as_ref()).await {
                Ok(()) => {
                    debug!(applied_revision = ?report.applied_revision, objects = report.objects.len(),
                        changed = delta.as_ref().map(|d| d.changed.len()), "status sent");
                    last_sent = Some(report);
                    sent_at = now_at;
                    due = tokio::time::Instant::now() + agent.config.status_interval;
                    backoff.reset();
                }
                Err(crate::Error::ShuttingDown) => return Ok(()),
                Err(e) => {
                    let delay = backoff.next_delay();
                    warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "status report failed");
                    retry_in = Some(delay);
                }
            }
        }
        let sleep = retry_in.unwrap_or_else(|| due.saturating_duration_since(tokio::time::Instant::now()));
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = agent.status_wake.notified(), if retry_in.is_none() => {
                // Reported at once while reports are sparse; under a stream of changes (a
                // rollout touches many pods) they wait for the pace and go together.
                tokio::time::sleep(pace.wait(std::time::Instant::now())).await;
            }
            () = agent.identity.registered(), if retry_in.is_none() => {}
            () = tokio::time::sleep(sleep) => {}
        }
    }
}

/// Sends `delta` when given, and `report` whole when there is none or the hub refuses it: it
/// holds another report than the delta's base (`409`, after a restart from an older store or a
/// lost answer), or does not take deltas there (`404`, `405`: a replica of an earlier version
/// behind the same address), or the result would be too large (`422`).
async fn send(
    agent: &Agent,
    shutdown: &CancellationToken,
    report: &StatusReport,
    delta: Option<&StatusDelta>,
) -> Result<()> {
    if let Some(delta) = delta {
        let sent = agent
            .identity
            .call(shutdown, |credential| {
                let hub = agent.identity.hub();
                async move { hub.status_delta(&credential, delta).await }
            })
            .await;
        match sent {
            Err(crate::Error::HubStatus {
                status: 404 | 405 | 409 | 422,
                message,
                ..
            }) => {
                debug!(%message, "the hub did not take the report's changes; sending it whole");
            }
            sent => return sent,
        }
    }
    agent
        .identity
        .call(shutdown, |credential| {
            let hub = agent.identity.hub();
            async move { hub.status(&credential, report).await }
        })
        .await
}

/// Names for the contents of this process's reports: a random prefix, so that no other run's
/// report goes by the same name, and a count.
#[derive(Debug)]
struct ReportIds {
    prefix: u64,
    count: u64,
}

impl ReportIds {
    fn new() -> ReportIds {
        ReportIds {
            prefix: rand::random(),
            count: 0,
        }
    }

    fn next(&mut self) -> String {
        self.count += 1;
        format!("{:016x}-{}", self.prefix, self.count)
    }
}

/// Status reports at once, up to a burst of [`Pace::BURST`], then one per [`Pace::EVERY`]: a
/// change is reported without delay unless reports are already streaming, and a stream of
/// changes is gathered into a report per interval (a token bucket).
#[derive(Debug)]
struct Pace {
    tokens: f64,
    at: std::time::Instant,
}

impl Pace {
    /// Reports that may go at once after a quiet spell.
    const BURST: f64 = 4.0;
    /// One more report may go per this much time.
    const EVERY: Duration = Duration::from_millis(100);

    fn new(now: std::time::Instant) -> Pace {
        Pace {
            tokens: Self::BURST,
            at: now,
        }
    }

    fn refill(&mut self, now: std::time::Instant) {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() / Self::EVERY.as_secs_f64();
        self.tokens = (self.tokens + earned).min(Self::BURST);
        self.at = now;
    }

    /// A report was sent (or tried) at `now`.
    fn take(&mut self, now: std::time::Instant) {
        self.refill(now);
        self.tokens -= 1.0;
    }

    /// How long the next report must wait from `now`.
    fn wait(&mut self, now: std::time::Instant) -> Duration {
        self.refill(now);
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Self::EVERY.mul_f64(1.0 - self.tokens)
        }
    }
}

#[cfg(test)]
mod pace_tests {
    use std::time::{Duration, Instant};

    use super::Pace;

    #[test]
    fn reports_go_at_once_until_the_burst_is_spent_then_one_per_interval() {
        let start = Instant::now();
        let mut pace = Pace::new(start);
        for i in 0..4 {
            assert_eq!(pace.wait(start), Duration::ZERO, "report {i} of the burst waits");
            pace.take(start);
        }
        let wait = pace.wait(start);
        assert_eq!(wait, Pace::EVERY, "the fifth report at once waits one interval");
        pace.take(start + wait);
        assert_eq!(pace.wait(start + wait), Pace::EVERY, "and the next one another");
        // After a quiet spell the burst is back, never more than it.
        let later = start + Duration::from_secs(60);
        for _ in 0..4 {
            assert_eq!(pace.wait(later), Duration::ZERO);
            pace.take(later);
        }
        assert!(pace.wait(later) > Duration::ZERO);
    }
}
