//! The status of a MultiClusterDeployment, from its decision and the agents' reports: per
//! cluster, totals, and the conditions (`Scheduled`, `Available`, `Progressing`, `Degraded`,
//! `Bursting`). Pure.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nave_api::conditions::{self, reasons, types};
use nave_api::wire::{ObjectStatus, WORKLOAD_LABEL};
use nave_api::{ClusterPlacementStatus, MultiClusterDeployment, MultiClusterDeploymentStatus};
use nave_policies::{Decision, Fleet, Role};

use crate::placement::Reports;
use crate::placement::reports::{deployment_counts, deployment_failure, deployment_of};
use crate::placement::stored::StoredDecision;

/// A condition of `type_`, as of now.
pub(crate) fn condition(
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

pub(crate) use crate::render::truncate;

/// The ready replicas of one cluster's Deployment known to run the template `hash`: none until
/// its controller has seen that template, then its ready replicas less the pods that are not of
/// it (which may all be ready), as a lower bound.
fn updated_ready_of(deployment: &ObjectStatus, hash: &str) -> i32 {
    if deployment.template_hash.as_deref() != Some(hash) || deployment.observed_current != Some(true) {
        return 0;
    }
    let updated = deployment.updated_replicas.unwrap_or(0).max(0);
    let old = deployment
        .all_replicas
        .unwrap_or(0)
        .saturating_sub(updated)
        .max(0);
    deployment
        .ready_replicas
        .unwrap_or(0)
        .saturating_sub(old)
        .clamp(0, updated)
}

/// The agents' latest reports a status reads: all of them, and those that list apply errors
/// (few), which it reads for those instead of walking every cluster's report.
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    /// Every cluster's latest report.
    pub all: &'a Reports,
    /// Those that list apply errors, or more of them (every report, say).
    pub erring: &'a Reports,
}

#[cfg(test)]
impl<'a> Seen<'a> {
    /// Every report, read for apply errors too.
    pub fn whole(reports: &'a Reports) -> Self {
        Seen {
            all: reports,
            erring: reports,
        }
    }
}

/// The status of an MCD: per cluster from the decision and the reports, totals as sums.
pub fn status_of(
    mcd: &MultiClusterDeployment,
    decision: &Decision,
    fleet: &Fleet,
    reports: Seen<'_>,
    template_hash: &str,
    missing_dependencies: &[String],
    stored: &StoredDecision,
) -> MultiClusterDeploymentStatus {
    let moving = stored.moving.as_ref();
    let ordinals = &crate::placement::ordinals::describe(stored);
    let generation = mcd.metadata.generation;
    let workload = &crate::render::workload_ref(mcd);
    let mut status = mcd.status.clone().unwrap_or_default();
    let mut clusters = Vec::new();
    // The clusters given replicas, those a move keeps old ones running in until the new ones
    // are ready, and those listed before whose agent still reports replicas (its prune is on its
    // way): what runs there counts, or a move would look like an outage and a drain would look
    // finished before it is.
    let held = moving.map(|m| &m.held);
    let still_running = mcd.status.iter().flat_map(|s| &s.clusters).filter(|c| {
        deployment_of(reports.all.get(&c.name).map(Arc::as_ref), workload)
            .map(deployment_counts)
            .is_some_and(|(ready, available, _)| ready > 0 || available > 0)
    });
    let mut names: Vec<&String> = decision
        .assignment
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(name, _)| name)
        .chain(
            held.into_iter()
                .flatten()
                .filter(|(_, n)| **n > 0)
                .map(|(name, _)| name),
        )
        .chain(still_running.map(|c| &c.name))
        // A StatefulSet's clusters still stopping ordinals they gave up.
        .chain(ordinals.keys())
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut failing = Vec::new();
    let mut updated_ready = 0i32;
    for name in names {
        let desired = decision.assignment.get(name).copied().unwrap_or(0);
        // One lookup in the report for the counts and what fails.
        let object = deployment_of(reports.all.get(name).map(Arc::as_ref), workload);
        let (ready, available, pending) = object.map_or((0, 0, 0), deployment_counts);
        let burst = decision.cluster(name).is_some_and(|c| c.role == Role::Burst);
        let kept = held.and_then(|h| h.get(name)).copied().unwrap_or(0);
        let failure = object.and_then(deployment_failure);
        // A StatefulSet whose cluster dropped `spec.ordinals` numbers its pods from 0: they may
        // clash with another cluster's.
        let failure = match (object, stored.ordinals.get(name)) {
            (Some(o), Some(&start)) if o.kind == "StatefulSet" && o.observed_current == Some(true) => {
                let has = o.first_ordinal.and_then(|f| u32::try_from(f).ok()).unwrap_or(0);
                let dropped = (has != start).then(|| {
                    format!(
                        "spec.ordinals.start is {has} there, not the {start} sent: the cluster does not keep it (Kubernetes before 1.27, or the StatefulSetStartOrdinal gate off), so its ordinals may clash with another cluster's"
                    )
                });
                match (failure, dropped) {
                    (Some(f), Some(d)) => Some(format!("{d}; {f}")),
                    (f, d) => f.or(d),
                }
            }
            _ => failure,
        };
        updated_ready =
            updated_ready.saturating_add(object.map_or(0, |d| updated_ready_of(d, template_hash)));
        if let Some(failure) = &failure {
            failing.push(format!("{name}: {failure}"));
        }
        let message = decision.cluster(name).map(|c| {
            let mut line = c.to_string();
            if kept > 0 {
                line = format!("{line}; {kept} old replica(s) kept running until the new ones are ready");
            }
            // What fails comes first: the message is cut at 256 characters.
            if let Some(failure) = &failure {
                let kind = object.map_or("Deployment", |o| o.kind.as_str());
                line = format!("{kind} failing: {failure}; {line}");
            }
            truncate(&line, 256)
        });
        // Replicas the cluster owns (`spec.retainReplicas`): what it wants is what its
        // Deployment says, once there is one.
        let desired = match object.and_then(|d| d.replicas) {
            Some(own) if mcd.spec.retain_replicas && desired > 0 => own,
            _ => i32::try_from(desired).unwrap_or(i32::MAX),
        };
        clusters.push(ClusterPlacementStatus {
            name: name.to_string(),
            desired,
            ready,
            available,
            pending,
            burst,
            ordinals: ordinals.get(name).cloned(),
            message,
        });
    }
    let sum = |f: fn(&ClusterPlacementStatus) -> i32| clusters.iter().map(f).fold(0i32, i32::saturating_add);
    status.observed_generation = generation;
    status.replicas = sum(|c| c.desired);
    status.ready_replicas = sum(|c| c.ready);
    status.available_replicas = sum(|c| c.available);
    status.updated_ready_replicas = updated_ready;
    status.pending_replicas = sum(|c| c.pending);
    status.unplaced_replicas = i32::try_from(decision.unplaced).unwrap_or(i32::MAX);
    let given = || clusters.iter().filter(|c| c.desired > 0);
    status.cluster_count = i32::try_from(given().count()).unwrap_or(i32::MAX);
    status.placement_summary = Some(
        given()
            .map(|c| format!("{}={}", c.name, c.desired))
            .collect::<Vec<_>>()
            .join(","),
    );
    status.selector = Some(format!("{WORKLOAD_LABEL}={}", workload.label_value()));
    let placed = status.replicas;
    let wanted = mcd.spec.replicas;
    // The summary alone: the whole explanation would pick the clusters to name out of the fleet.
    let summary = decision.summary().lines().next().unwrap_or_default().to_owned();

    // Policy `everywhere` asks nothing of a fleet where no cluster is eligible: that is not
    // "every replica placed" for a user who asked for replicas.
    let nowhere = decision.replicas == 0 && wanted > 0;
    let scheduled = if decision.unplaced == 0 && !nowhere {
        condition(
            types::SCHEDULED,
            conditions::TRUE,
            reasons::ALL_REPLICAS_PLACED,
            &summary,
            generation,
        )
    } else {
        let eligible = decision.clusters.iter().any(|c| c.filter.is_none());
        let waiting: u32 = decision
            .notes
            .iter()
            .map(nave_policies::Note::waiting_replicas)
            .sum();
        let reason = if waiting > 0 && waiting == decision.unplaced {
            reasons::WAITING_FOR_ORDINALS
        } else if placed > 0 {
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
    let apply_errors = crate::placement::reports::apply_errors(reports.erring, workload);
    let not_ready: Vec<(&str, i32)> = clusters
        .iter()
        .filter(|c| fleet.get(&c.name).is_some_and(|f| !f.ready))
        .map(|c| {
            let kept = held.and_then(|h| h.get(&c.name)).copied().unwrap_or(0);
            (
                c.name.as_str(),
                c.desired.saturating_add(i32::try_from(kept).unwrap_or(i32::MAX)),
            )
        })
        .collect();
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
    } else if !not_ready.is_empty() {
        condition(
            types::DEGRADED,
            conditions::TRUE,
            reasons::CLUSTER_NOT_READY,
            format!(
                "{} replicas are in clusters without a recent heartbeat: {}",
                not_ready.iter().map(|(_, n)| n).sum::<i32>(),
                not_ready
                    .iter()
                    .map(|(c, n)| format!("{c}={n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            generation,
        )
    } else if !apply_errors.is_empty() {
        condition(
            types::DEGRADED,
            conditions::TRUE,
            reasons::APPLY_FAILED,
            truncate(&apply_errors.join("; "), 1024),
            generation,
        )
    } else if !failing.is_empty() {
        condition(
            types::DEGRADED,
            conditions::TRUE,
            reasons::DEPLOYMENT_FAILING,
            truncate(&failing.join("; "), 1024),
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

#[cfg(test)]
mod tests;
