//! The hub's placement core: one synchronous, pure function composes a workload's decision from
//! what the hub knows now. The MultiClusterDeployment controller acts on what it returns; the
//! REST API's simulation shows it. Both gather the same [`Inputs`] ([`crate::fleet`]), so a
//! simulation answers exactly what an apply would do now, moves included.
//!
//! ```text
//!  Inputs: spec (validated) ─┐
//!   stored decision ─────────┤   failover::Plan ─► failover or failback (health)
//!   fleet, ledger ───────────┼─► else moves::Adapt ─► rescheduling, burst retraction (cooldown)
//!   reports, Pending pods ───┤   around nave_policies::decide
//!   health, now ─────────────┘   moves::Adapt::hold ─► make-before-break
//!        ─► Planned: decision, StoredDecision, history trigger and reason, Events, next look
//! ```
//!
//! Modules: [`inputs`] turns the hub's objects into the engine's inputs; [`reports`] reads what
//! agents report; [`stored`] is what the store keeps of a decision; [`failover`] and [`moves`] are
//! the two ways a decision departs from the steady one.

pub mod failover;
pub mod inputs;
pub mod jobs;
pub mod moves;
pub mod ordinals;
pub mod reports;
pub mod stored;
pub mod traffic;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DeploymentSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::runtime::events::EventType;
use nave_api::wire::WorkloadRef;
use nave_api::{MultiClusterDeployment, PlacementPolicy, WorkloadKind};
use nave_policies::{Decision, Fleet, Ledger, Request, Strategy};

use self::moves::Adapt;
pub use self::reports::{Pending, Reports, deployment_status};
use self::stored::{Moving, StoredDecision};
use crate::cluster_health::HealthSnapshot;

/// History trigger of a decision made because the spec changed (or the first one).
pub const TRIGGER_SPEC: &str = "spec";
/// History trigger of a decision made because the fleet changed.
pub const TRIGGER_FLEET: &str = "fleet";
/// History trigger of a decision placed again from scratch on request (the rebalance annotation).
pub const TRIGGER_REBALANCE: &str = "rebalance";

/// How soon a plan looks again while a StatefulSet's ordinals are stopping somewhere: the
/// status reports of that cluster wake it as soon as they change; this is only a safety net
/// (and cheap while the cluster is silent).
const RELEASE_RECHECK: Duration = Duration::from_secs(10);

/// Reasons of the Events a plan asks to publish on the MultiClusterDeployment.
pub mod event_reasons {
    /// A placement was decided or changed.
    pub const SCHEDULED: &str = "Scheduled";
    /// Some replicas have no cluster.
    pub const FAILED_SCHEDULING: &str = "FailedScheduling";
    /// Placed again from scratch, as the rebalance annotation asked.
    pub const REBALANCED: &str = "Rebalanced";
    pub use super::failover::{FAILED_BACK, FAILED_OVER};
    pub use super::moves::{BURST, BURST_RETRACTED, FOLLOWED_TRAFFIC, RESCHEDULED};
}

/// A MultiClusterDeployment's spec as placement reads it, once it has been checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Valid {
    /// What runs in each cluster.
    pub kind: WorkloadKind,
    /// The Deployment spec of the template; of a StatefulSet, its selector and pod template
    /// ([`nave_api::DeploymentTemplate::workload_spec`]).
    pub deployment: DeploymentSpec,
    /// `rescheduling.pendingTimeout`, also a move's deadline.
    pub pending_timeout: Duration,
    /// `rescheduling.cooldown`.
    pub cooldown: Duration,
    /// `spec.rollout`, checked (no waves when absent).
    pub rollout: nave_api::Waves,
}

/// Why the spec cannot be acted on, with the field path; the parts placement reads when it can.
pub fn validate(mcd: &MultiClusterDeployment) -> Result<Valid, String> {
    if mcd.spec.replicas < 0 {
        return Err(format!(
            "spec.replicas: must not be negative, got {}",
            mcd.spec.replicas
        ));
    }
    let kind = mcd.spec.template.kind;
    let deployment = mcd.spec.template.workload_spec().map_err(|e| e.to_string())?;
    let placement = &mcd.spec.placement;
    if kind == WorkloadKind::StatefulSet {
        // Each would move or multiply a StatefulSet's numbered replicas behind its back.
        let refused = [
            (
                "spec.placement.policy",
                placement.policy == PlacementPolicy::Everywhere,
                "everywhere would run the same ordinals in every cluster; a StatefulSet's replicas are numbered across the fleet",
            ),
            (
                "spec.placement.bursting",
                placement.bursting.is_some(),
                "bursting moves replicas back and forth; a StatefulSet's replica stays with its volume in its cluster",
            ),
            (
                "spec.retainReplicas",
                mcd.spec.retain_replicas,
                "a cluster scaling its own StatefulSet would run into the ordinals of the next cluster",
            ),
        ];
        if let Some((field, _, why)) = refused.iter().find(|(_, set, _)| *set) {
            return Err(format!(
                "{field}: Forbidden: with template.kind StatefulSet, {why}"
            ));
        }
    }
    let selectors = [
        (
            "spec.placement.clusterSelector",
            placement.cluster_selector.as_ref(),
        ),
        (
            "spec.placement.bursting.targets",
            placement.bursting.as_ref().and_then(|b| b.targets.as_ref()),
        ),
    ];
    for (field, selector) in selectors {
        check_selector(field, selector)?;
    }
    if placement.policy == PlacementPolicy::Everywhere {
        let set = [
            ("maxClusters", placement.max_clusters.is_some()),
            ("minClusters", placement.min_clusters.is_some()),
            ("weights", !placement.weights.is_empty()),
            ("bursting", placement.bursting.is_some()),
            ("proximity", placement.proximity.is_some()),
        ];
        if let Some((field, _)) = set.iter().find(|(_, set)| *set) {
            return Err(format!(
                "spec.placement.{field}: Forbidden: policy everywhere runs spec.replicas in every selected cluster, so {field} does not apply"
            ));
        }
    }
    let rescheduling = &placement.rescheduling;
    let pending_timeout = rescheduling.pending_timeout().map_err(|e| e.to_string())?;
    let cooldown = rescheduling.cooldown().map_err(|e| e.to_string())?;
    for (index, over) in mcd.spec.overrides.iter().enumerate() {
        over.applies_to(index, "", &BTreeMap::new())
            .map_err(|e| e.to_string())?;
    }
    crate::render::check_override_paths(&mcd.spec.overrides)?;
    let rollout = mcd
        .spec
        .rollout
        .clone()
        .unwrap_or_default()
        .waves()
        .map_err(|e| e.to_string())?;
    // A wave is done when a cluster runs the new template on every replica; a StatefulSet that
    // updates only on deletion or above a partition never does.
    if kind == WorkloadKind::StatefulSet && rollout.staged() {
        let strategy = mcd
            .spec
            .template
            .stateful_set_spec()
            .map_err(|e| e.to_string())?
            .update_strategy
            .unwrap_or_default();
        let partitioned = strategy
            .rolling_update
            .as_ref()
            .and_then(|r| r.partition)
            .is_some_and(|p| p > 0);
        if strategy.type_.as_deref() == Some("OnDelete") || partitioned {
            return Err("spec.rollout: Forbidden: waves wait for every replica of a cluster to run the new template, which a StatefulSet with updateStrategy OnDelete or a partition never does; roll it out with the StatefulSet's own strategy, without waves".to_owned());
        }
    }
    for (i, wave) in mcd.spec.rollout.iter().flat_map(|r| r.waves.iter()).enumerate() {
        check_selector(
            &format!("spec.rollout.waves[{i}].clusterSelector"),
            wave.cluster_selector.as_ref(),
        )?;
    }
    Ok(Valid {
        kind,
        deployment,
        pending_timeout,
        cooldown,
        rollout,
    })
}

/// Refuses what a Kubernetes API server refuses in a label selector: an operator other than
/// `In`, `NotIn`, `Exists` and `DoesNotExist` (the engine would otherwise read a typo such as
/// `exists` as `DoesNotExist` and select the clusters *without* the label), values for `Exists`
/// and `DoesNotExist`, none for `In` and `NotIn`.
fn check_selector(field: &str, selector: Option<&LabelSelector>) -> Result<(), String> {
    let requirements = selector.and_then(|s| s.match_expressions.as_ref());
    for (i, requirement) in requirements.into_iter().flatten().enumerate() {
        let at = format!("{field}.matchExpressions[{i}]");
        let values = requirement.values.as_ref().map_or(0, Vec::len);
        match requirement.operator.as_str() {
            "In" | "NotIn" if values == 0 => {
                return Err(format!(
                    "{at}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
                ));
            }
            "Exists" | "DoesNotExist" if values > 0 => {
                return Err(format!(
                    "{at}.values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                ));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => {
                return Err(format!(
                    "{at}.operator: Unsupported value: {other:?}: supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\""
                ));
            }
        }
    }
    Ok(())
}

/// The stored placement a plan starts from: this incarnation's (same uid) decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Previous {
    /// The stored decision.
    pub decision: StoredDecision,
    /// The `metadata.generation` it was decided for.
    pub generation: i64,
}

/// Everything a plan reads, borrowed: the caller gathers it (from memory, see
/// [`crate::fleet::Sources`]), the plan reads nothing else.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// The workload.
    pub workload: &'a WorkloadRef,
    /// Its object (spec, generation).
    pub mcd: &'a MultiClusterDeployment,
    /// Its checked spec ([`validate`]).
    pub valid: &'a Valid,
    /// Its stored placement, when there is one of this incarnation.
    pub previous: Option<&'a Previous>,
    /// The fleet, with usage and network measurements.
    pub fleet: &'a Fleet,
    /// The traffic measured by cluster and by workload (policy `traffic`).
    pub traffic: &'a traffic::TrafficView,
    /// Room taken by replicas not reported running yet (this workload's included).
    pub ledger: &'a Ledger,
    /// The agents' latest reports.
    pub reports: &'a Reports,
    /// The clusters' Pending pods.
    pub pending: &'a Pending,
    /// Which clusters are failed over, and since when others are Ready.
    pub health: &'a HealthSnapshot,
    /// The instant decided at.
    pub now: jiff::Timestamp,
}

/// An Event a plan asks to publish when its placement is a change.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedEvent {
    /// Normal or Warning.
    pub type_: EventType,
    /// One of [`event_reasons`].
    pub reason: &'static str,
    /// What happened (the explanation, or what moved where and why).
    pub note: String,
}

/// What a plan decided, and what to record and say about it.
#[derive(Clone, Debug)]
pub struct Planned {
    /// The engine's decision (assignment and explanations).
    pub decision: Decision,
    /// What the store keeps (with failover's and moves' state).
    pub stored: StoredDecision,
    /// Why the placement was decided: `spec`, `fleet`, `failover`, `failback`, `reschedule`,
    /// `burst-retract` or `rebalance`.
    pub trigger: &'static str,
    /// What failover or a move says of itself, when one of them decided: see [`Planned::reason`].
    departure: Option<String>,
    /// The move under way after this decision (old replicas kept until the new ones run).
    pub moving: Option<Moving>,
    /// Events of failover, moves and bursting, after the decision's own: see [`Planned::events`].
    more_events: Vec<PlannedEvent>,
    /// Replicas moved away from failed-over clusters by this decision.
    pub failed_over: bool,
    /// Replicas moved by rescheduling or burst retraction in this decision.
    pub moved: u32,
    /// This decision starts using burst clusters.
    pub burst_started: bool,
    /// Whether more room could not improve the placement: everything placed, nothing Pending,
    /// nothing in burst clusters or kept in a cluster a taint moves it away from, no move
    /// under way.
    pub settled: bool,
    /// When to look again, before the resync: a Pending pod passing the timeout, the cooldown
    /// ending while there is something to move, or a move's deadline.
    pub next: Option<Duration>,
}

impl Planned {
    /// Replicas dispatched per cluster: the assignment and the replicas a move holds.
    pub fn dispatched(&self) -> BTreeMap<String, u32> {
        self.stored.dispatched()
    }

    /// One line for the history: what failover or a move did, else the decision's summary.
    pub fn reason(&self) -> String {
        self.departure.clone().unwrap_or_else(|| self.decision.summary())
    }

    /// What the store keeps, with the explanation in words. Most plans decide what is stored
    /// already and are not written, so the words are built here, for those that are.
    pub fn explained(&self) -> StoredDecision {
        let mut stored = self.stored.clone();
        stored.explain(&self.decision);
        stored
    }

    /// Events to publish when the stored placement changed, in order: `Scheduled` (or
    /// `FailedScheduling` when replicas are unplaced) with the explanation, then those of
    /// failover, moves and bursting.
    pub fn events(&self) -> Vec<PlannedEvent> {
        let (type_, reason) = if self.decision.unplaced > 0 {
            (EventType::Warning, event_reasons::FAILED_SCHEDULING)
        } else {
            (EventType::Normal, event_reasons::SCHEDULED)
        };
        let mut events = vec![PlannedEvent {
            type_,
            reason,
            note: self.decision.to_string(),
        }];
        events.extend(self.more_events.iter().cloned());
        events
    }
}

/// Decides where the workload's replicas go now, with failover, rescheduling, burst retraction
/// and make-before-break applied, and says what to record. Pure: same inputs, same plan.
pub fn plan(inputs: &Inputs<'_>) -> Planned {
    let Inputs {
        workload,
        mcd,
        valid,
        previous,
        fleet,
        traffic,
        ledger,
        reports,
        pending,
        health,
        now,
    } = *inputs;
    let spec = &mcd.spec;
    let generation = mcd.metadata.generation.unwrap_or(0);
    let stored = previous.map(|p| &p.decision);
    let demand = inputs::demand(&valid.deployment);
    let stateful = valid.kind == WorkloadKind::StatefulSet;
    // A StatefulSet's layout as stored; when none is (a lost or damaged row), as the clusters
    // report it, so that ordinals that run are never given out again.
    let previously = stateful.then(|| {
        let mut previously = match stored.filter(|s| !s.ordinals.is_empty()) {
            Some(s) => ordinals::Previously {
                starts: s.ordinals.clone(),
                counts: s.assignment.clone(),
                releasing: s.releasing.clone(),
            },
            None => {
                let status = mcd.status.as_ref().map_or(&[][..], |s| &s.clusters[..]);
                ordinals::adopt(reports, workload, status)
            }
        };
        // Whatever the record says, pods a cluster reports beyond it stop there first.
        ordinals::reported_beyond(&mut previously, reports, workload);
        previously
    });
    let current = match &previously {
        Some(p) => p.counts.clone(),
        None => stored.map(|d| d.assignment.clone()).unwrap_or_default(),
    };
    let replicas = u32::try_from(spec.replicas).unwrap_or(0);
    // Without a stored layout, ordinals are laid out only once every Ready cluster has reported:
    // one not heard from may run some of them. Until then the StatefulSet keeps what is known.
    let unheard: Vec<String> = match (&previously, stored.is_some_and(|s| !s.ordinals.is_empty())) {
        (Some(_), false) => ordinals::unheard(fleet, reports),
        _ => Vec::new(),
    };
    let wanted_replicas = replicas;
    let replicas = match unheard.is_empty() {
        true => replicas,
        false => replicas.min(current.values().sum()),
    };
    // A new value of the rebalance annotation: placed from scratch, as a new workload would be,
    // the replicas that move kept running until their successors are ready.
    let asked_rebalance = mcd
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(nave_api::REBALANCE_ANNOTATION))
        .cloned();
    // A StatefulSet is never placed again from scratch: that would move its numbered replicas.
    let rebalance =
        !stateful && stored.is_some_and(|s| asked_rebalance.is_some() && s.rebalanced != asked_rebalance);
    let mut policy = inputs::policy(&spec.placement);
    if let Strategy::Traffic(by) = &mut policy.strategy {
        *by = traffic.of(&workload.namespace, &workload.name);
    }
    let mut request = Request::new(replicas, demand.clone(), policy).with_current(if rebalance {
        BTreeMap::new()
    } else {
        current.clone()
    });
    if let Some(previously) = &previously {
        request.ordinal_order = ordinals::order(&previously.starts);
        request.min_kubernetes_minor = Some(ordinals::MIN_KUBERNETES_MINOR);
    }

    let mut failover = failover::Plan::new(
        health,
        spec.placement.failback,
        stored,
        &request.current,
        fleet,
        now,
    );
    let (stuck, next_stuck) = moves::stuck(pending, workload, valid.pending_timeout, now);
    let mut adapt = Adapt::new(
        stored,
        spec.placement.rescheduling.enabled,
        valid.pending_timeout,
        valid.cooldown,
        stuck,
        now,
    );
    // `everywhere` moves nothing between clusters: a lost cluster keeps its replicas (they run
    // there if only the hub lost it, and every other cluster already runs its own), a stuck one
    // waits for room there, and there is no burst to retract. Nor does a StatefulSet: a replica
    // is its ordinal and its volume, both in its cluster (see `ordinals`).
    let everywhere = spec.placement.policy == PlacementPolicy::Everywhere || stateful;
    // Failover first: a lost cluster's replicas move before stuck or burst ones. A rebalance
    // decides from scratch, which already leaves lost clusters out.
    let decision = if everywhere || rebalance {
        nave_policies::decide(fleet, ledger, &request)
    } else {
        failover.decide(fleet, ledger, &request)
    };
    let mut decision = if everywhere || rebalance || failover.trigger().is_some() {
        decision
    } else {
        adapt.decide(fleet, ledger, &request, decision)
    };
    // A StatefulSet's ranges, with replicas held back where their ordinals still run elsewhere.
    let layout = previously.as_ref().map(|previously| {
        let clusters = ordinals::Reported {
            reports,
            workload,
            fleet,
        };
        let layout = ordinals::lay_out(previously, &decision.assignment, &clusters);
        for cluster in &mut decision.clusters {
            let laid = layout.assignment.get(&*cluster.cluster).copied().unwrap_or(0);
            // Held back: fewer added than the engine said (the notes say why).
            let mut held = cluster.replicas.saturating_sub(laid);
            for change in cluster.changes.iter_mut().rev() {
                if let nave_policies::Change::Added { replicas, .. } = change {
                    let less = held.min(*replicas);
                    *replicas -= less;
                    held -= less;
                }
            }
            cluster
                .changes
                .retain(|c| !matches!(c, nave_policies::Change::Added { replicas: 0, .. }));
            cluster.replicas = laid;
        }
        decision.assignment = layout.assignment.clone();
        decision.unplaced += layout.held_back();
        decision.notes.extend(layout.waiting.iter().cloned());
        if wanted_replicas > decision.replicas {
            let waiting = wanted_replicas - decision.replicas;
            decision.replicas = wanted_replicas;
            decision.unplaced += waiting;
            decision.notes.push(nave_policies::Note::AwaitingReports {
                clusters: unheard.iter().take(5).cloned().collect(),
                replicas: waiting,
            });
        }
        layout
    });
    let moving = if everywhere {
        None
    } else {
        // What ran before, so that what a rebalance moves is kept until its successors run.
        adapt.hold(&current, &decision, fleet, reports, workload).cloned()
    };

    let departed = if everywhere || rebalance {
        None
    } else {
        failover.trigger().or(adapt.trigger())
    };
    let trigger = match departed {
        Some(trigger) => trigger,
        None if rebalance => TRIGGER_REBALANCE,
        None if previous.is_none_or(|p| p.generation != generation) => TRIGGER_SPEC,
        None => TRIGGER_FLEET,
    };
    // No words yet: they are built only for a plan that is written (`Planned::explained`).
    let mut stored = StoredDecision::of(&decision, &demand);
    if let Some(layout) = &layout {
        stored.ordinals = layout.starts.clone();
        stored.releasing = layout.releasing.clone();
    }
    if !everywhere {
        failover.annotate(&mut stored);
        adapt.annotate(&mut stored);
    }
    stored.rebalanced = asked_rebalance.clone();
    let mut departure = departed.and_then(|_| failover.reason(&decision).or_else(|| adapt.reason(&decision)));

    let mut events = Vec::new();
    let mut failed_over = false;
    if let Some((type_, reason, note)) = departed.and_then(|_| failover.event(&decision)) {
        failed_over = reason == event_reasons::FAILED_OVER;
        events.push(PlannedEvent { type_, reason, note });
    }
    let mut moved = 0;
    if let Some((type_, reason, note)) = departed.and_then(|_| adapt.event(&decision)) {
        moved = adapt.moved();
        events.push(PlannedEvent { type_, reason, note });
    }
    if rebalance {
        let note = format!(
            "placed again from scratch, as {}={} asked: {}",
            nave_api::REBALANCE_ANNOTATION,
            asked_rebalance.as_deref().unwrap_or_default(),
            moves::added(&decision)
        );
        departure = Some(note.clone());
        events.push(PlannedEvent {
            type_: EventType::Normal,
            reason: event_reasons::REBALANCED,
            note,
        });
    }
    let in_burst = moves::in_burst_clusters(&decision);
    let burst_before: u32 = in_burst
        .keys()
        .map(|c| request.current.get(c).copied().unwrap_or(0))
        .sum();
    let burst_started = !in_burst.is_empty() && burst_before == 0;
    if burst_started {
        events.push(PlannedEvent {
            type_: EventType::Normal,
            reason: event_reasons::BURST,
            note: format!(
                "{} replicas went to burst clusters ({})",
                in_burst.values().sum::<u32>(),
                moves::added(&decision)
            ),
        });
    }

    let pods_pending = decision.assignment.iter().any(|(cluster, n)| {
        *n > 0
            && deployment_status(reports.get(cluster).map(Arc::as_ref), workload)
                .is_some_and(|(_, _, pending)| pending > 0)
    });
    // Replicas a taint moves away that stayed for want of room elsewhere wait for room as
    // unplaced ones do.
    let stay_for_room = decision
        .notes
        .iter()
        .any(|n| matches!(n, nave_policies::Note::StayForRoom { .. }));
    let settled = decision.unplaced == 0
        && !stay_for_room
        && !pods_pending
        && in_burst.is_empty()
        && moving.is_none()
        && stored.releasing.is_empty();
    let mut next = next_stuck;
    let mut sooner = |at: Duration| next = Some(next.map_or(at, |n| n.min(at)));
    // Traffic that shifted during the cooldown is followed when it ends.
    let follows_traffic = matches!(&request.policy.strategy, Strategy::Traffic(t) if t.measured())
        && spec.placement.rescheduling.enabled;
    if adapt.trigger().is_none() && (pods_pending || !in_burst.is_empty() || follows_traffic) {
        let cooling = adapt.cooling();
        if !cooling.is_zero() {
            sooner(cooling);
        }
    }
    if let Some(m) = &moving {
        let elapsed = now.duration_since(m.since).unsigned_abs();
        sooner(valid.pending_timeout.saturating_sub(elapsed));
    }
    // Ordinals stopping: their cluster's reports say when, and the hub looks again meanwhile.
    if !stored.releasing.is_empty() {
        sooner(RELEASE_RECHECK);
    }
    if !unheard.is_empty() {
        sooner(Duration::from_secs(1));
    }
    // A taint's toleration running out where replicas run: they move then.
    for (cluster, _) in request.current.iter().filter(|(_, n)| **n > 0) {
        if let Some(at) = fleet
            .get(cluster)
            .and_then(|c| nave_policies::toleration_expires_in(&c.taints, &request.policy.tolerations))
        {
            // Just past the moment, so the plan then sees it expired.
            sooner(at + Duration::from_millis(100));
        }
    }
    Planned {
        decision,
        stored,
        trigger,
        departure,
        moving,
        more_events: events,
        failed_over,
        moved,
        burst_started,
        settled,
        next,
    }
}

#[cfg(test)]
mod tests;
