//! Rescheduling, burst retraction and make-before-break moves of one MultiClusterDeployment.
//! Pure, like [`super::failover`]: [`super::plan`] hands it the inputs, [`Adapt`] turns them into
//! a decision and says what to record.
//!
//! ```text
//!  agents' heartbeats: Pending pods (since when, why) ─► stuck past pendingTimeout ─┐
//!  decision's burst clusters with replicas ──────────────────────────────────────────┤
//!  stored decision (movedAt, moving) + cooldown ─────────────────────────────────────┴─► Adapt::decide
//!       ─► Request.evacuate: only what fits elsewhere ─► history (reschedule, burst-retract) + Event
//!  previous and new assignment + reports ─► Adapt::hold ─► old replicas kept until the new run
//! ```
//!
//! - **Rescheduling**: replicas whose pods stayed Pending (unschedulable) in a cluster longer
//!   than `spec.placement.rescheduling.pendingTimeout` are evacuated from it and placed where
//!   there is room, with the workload's younger Pending pods in that cluster (see [`stuck`]).
//!   Only as many move as fit elsewhere.
//! - **Burst retraction**: replicas in burst clusters come back to regular clusters as soon as
//!   those have room; burst clusters are emptied first. With a bursting threshold, only as many
//!   come back as leave each receiving cluster [`RETRACT_MARGIN_PERCENT`] points under it
//!   (hysteresis): a cluster brought back to just under the threshold would burst again at the
//!   next arrival, and the same replicas would go out and come back with every cooldown.
//! - **Following traffic** (policy `traffic`): when the traffic has shifted so that placing the
//!   workload again would serve at least [`TRAFFIC_MARGIN_PERCENT`] more of its requests in the
//!   cluster they arrive at, the replicas beyond each cluster's new share move to the clusters
//!   short of theirs (only as many as fit there). The margin keeps small swings of traffic from
//!   moving anything.
//! - **Cooldown**: after a move, the workload's replicas do not move again (for any of these
//!   reasons) until `rescheduling.cooldown` has passed, so a cluster that fills and empties, or
//!   traffic that swings back and forth, cannot make them flap.
//! - **Make-before-break**: when a decision takes running replicas out of a Ready cluster and
//!   adds replicas elsewhere, the old ones stay dispatched ([`Moving::held`]) until the clusters
//!   that gained report them ready, or until the move's deadline (`pendingTimeout`) passes.
//!
//! Pending pods come from the agents' heartbeats with the time the cluster's scheduler gave up on
//! them, so the timeout counts from the cluster's own clock and survives a hub restart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::events::EventType;
use nave_api::wire::{PendingPod, WorkloadRef};
use nave_policies::{Decision, Fleet, Ledger, Request, Role, Strategy, Traffic, TrafficScope, decide};

use super::reports::{Pending, Reports, deployment_status};
use super::stored::{Moving, StoredDecision};

/// History trigger of a move of Pending replicas.
pub const TRIGGER_RESCHEDULE: &str = "reschedule";
/// History trigger of a move of burst replicas back to regular clusters.
pub const TRIGGER_RETRACT: &str = "burst-retract";
/// Event reason: Pending replicas were moved.
pub const RESCHEDULED: &str = "Rescheduled";
/// Event reason: replicas went to burst clusters.
pub const BURST: &str = "Burst";
/// Event reason: burst replicas came back to regular clusters.
pub const BURST_RETRACTED: &str = "BurstRetracted";
/// History trigger of a move towards where the workload's traffic arrives.
pub const TRIGGER_TRAFFIC: &str = "traffic";
/// Event reason: replicas moved towards where the workload's traffic arrives.
pub const FOLLOWED_TRAFFIC: &str = "FollowedTraffic";

/// Points by which placing again must raise the share of requests served where they arrive
/// before replicas follow the traffic (see the module documentation).
pub const TRAFFIC_MARGIN_PERCENT: u32 = 5;

/// How many attempts [`evacuate_what_fits`] makes to evacuate only what fits elsewhere.
const FIT_ATTEMPTS: usize = 3;

/// Points under the bursting threshold a regular cluster must stay at after burst replicas come
/// back to it (see the module documentation).
pub const RETRACT_MARGIN_PERCENT: u32 = 10;

/// One workload's Pending pods in one cluster, past the timeout.
#[derive(Clone, Debug, PartialEq)]
pub struct Stuck {
    /// How many.
    pub pods: u32,
    /// Since when the oldest has been Pending.
    pub since: jiff::Timestamp,
    /// The scheduler's message for the oldest one.
    pub message: String,
}

/// The workload's stuck pods per cluster, and when the next cluster's will be (for a requeue),
/// from the clusters' latest heartbeats. A cluster's pods are stuck once the oldest has been
/// Pending for `timeout`: then every Pending pod of the workload there counts, since the cluster
/// has shown for that long that it cannot place them, and moving the younger ones a cooldown
/// later would only keep them waiting.
pub fn stuck(
    pending: &Pending,
    workload: &WorkloadRef,
    timeout: Duration,
    now: jiff::Timestamp,
) -> (BTreeMap<String, Stuck>, Option<Duration>) {
    let mut stuck: BTreeMap<String, Stuck> = BTreeMap::new();
    let mut next: Option<Duration> = None;
    for (cluster, pods) in pending {
        let mine: Vec<&PendingPod> = pods
            .iter()
            .filter(|p| p.workload.as_ref() == Some(workload))
            .collect();
        // A pod without a time is as old as the hub's first sight of it would be: now.
        let since = |pod: &PendingPod| pod.since.as_ref().map_or(now, |t| t.0);
        let Some(oldest) = mine.iter().min_by_key(|p| since(p)) else {
            continue;
        };
        let pending_for = now.duration_since(since(oldest)).unsigned_abs();
        if pending_for < timeout {
            let left = timeout - pending_for;
            next = Some(next.map_or(left, |n| n.min(left)));
            continue;
        }
        stuck.insert(
            cluster.clone(),
            Stuck {
                pods: u32::try_from(mine.len()).unwrap_or(u32::MAX),
                since: since(oldest),
                message: oldest.message.clone(),
            },
        );
    }
    (stuck, next)
}

/// Decides with `wanted` replicas evacuated, keeping only as many as fit elsewhere: each attempt
/// that would leave replicas unplaced (beyond `baseline`'s) evacuates fewer, from the last
/// clusters in name order. `None` when nothing can move.
pub fn evacuate_what_fits(
    fleet: &Fleet,
    ledger: &Ledger,
    request: &Request,
    baseline: &Decision,
    mut wanted: BTreeMap<String, u32>,
) -> Option<(Decision, BTreeMap<String, u32>)> {
    for _ in 0..FIT_ATTEMPTS {
        if wanted.is_empty() {
            return None;
        }
        let mut moving = request.clone();
        moving.evacuate = wanted.clone();
        let decision = decide(fleet, ledger, &moving);
        let extra = decision.unplaced.saturating_sub(baseline.unplaced);
        if extra == 0 {
            return Some((decision, wanted));
        }
        shrink(&mut wanted, extra);
    }
    None
}

/// Burst replicas `wanted` back, only as many as fit elsewhere and, with a bursting threshold,
/// leave every regular cluster that takes some [`RETRACT_MARGIN_PERCENT`] under it.
fn retract_with_margin(
    fleet: &Fleet,
    ledger: &Ledger,
    request: &Request,
    baseline: &Decision,
    mut wanted: BTreeMap<String, u32>,
) -> Option<(Decision, BTreeMap<String, u32>)> {
    let Some(threshold) = request.policy.bursting.threshold_percent else {
        return evacuate_what_fits(fleet, ledger, request, baseline, wanted);
    };
    // A low threshold keeps at least half of itself as the ceiling, or nothing would come back.
    let ceiling = u128::from(
        threshold
            .saturating_sub(RETRACT_MARGIN_PERCENT)
            .max(threshold / 2),
    );
    // What the baseline adds anyway (a scale-up) is not the retraction's doing.
    let anyway: BTreeMap<&str, u32> = baseline
        .clusters
        .iter()
        .map(|c| (&*c.cluster, c.added()))
        .collect();
    for _ in 0..FIT_ATTEMPTS {
        let (decision, moved) = evacuate_what_fits(fleet, ledger, request, baseline, wanted)?;
        // Replicas over the ceiling, summed over the regular clusters that would take them.
        let excess: u64 = decision
            .clusters
            .iter()
            .filter(|c| c.role == Role::Regular)
            .filter_map(|c| {
                let anyway = anyway.get(&*c.cluster).copied().unwrap_or(0);
                let back = c.added().saturating_sub(anyway);
                (back > 0).then_some((back, anyway, c.utilization?))
            })
            .map(|(back, anyway, u)| {
                let fits = |used: u64, alloc: u64, each: u64| -> u64 {
                    if each == 0 {
                        return u64::MAX;
                    }
                    let limit = u128::from(alloc) * ceiling / 100;
                    let left = limit.saturating_sub(u128::from(used));
                    u64::try_from(left / u128::from(each)).unwrap_or(u64::MAX)
                };
                let allowed = fits(
                    u.used.cpu_millis,
                    u.allocatable.cpu_millis,
                    request.demand.cpu_millis,
                )
                .min(fits(
                    u.used.memory_bytes,
                    u.allocatable.memory_bytes,
                    request.demand.memory_bytes,
                ))
                .saturating_sub(u64::from(anyway));
                u64::from(back).saturating_sub(allowed)
            })
            .sum();
        if excess == 0 {
            return Some((decision, moved));
        }
        wanted = moved;
        shrink(&mut wanted, u32::try_from(excess).unwrap_or(u32::MAX));
        if wanted.is_empty() {
            return None;
        }
    }
    None
}

/// A move that follows the traffic: the decision, what moved from where, and the share of
/// requests served where they arrive before and after.
type TrafficMove = (Decision, BTreeMap<String, u32>, (f64, f64));

/// Replicas moved to where `traffic` arrives when that raises the share of requests served where
/// they arrive by [`TRAFFIC_MARGIN_PERCENT`] points: the replicas each cluster holds beyond its
/// share of the traffic (among the clusters that may take replicas, room aside) are evacuated,
/// as many as fit elsewhere. Only the workload's own traffic moves replicas: the clusters' traffic
/// stands in for it at placement, not for a move (a workload whose own series comes and goes
/// would otherwise move between the two). Returns the decision, what moved, and the share
/// before and after.
fn follow_traffic(
    fleet: &Fleet,
    ledger: &Ledger,
    request: &Request,
    baseline: &Decision,
    traffic: &Traffic,
) -> Option<TrafficMove> {
    if traffic.scope != TrafficScope::Workload {
        return None;
    }
    let before = traffic.locality(&baseline.assignment)?;
    // Room aside: this workload's own replicas take room in the clusters that hold them, which
    // a placement from scratch would count against those clusters.
    let open = baseline
        .clusters
        .iter()
        .filter(|c| c.filter.is_none() && c.role == Role::Regular)
        .map(|c| &*c.cluster);
    let ideal = traffic.apportion(baseline.placed(), open);
    let margin = f64::from(TRAFFIC_MARGIN_PERCENT) / 100.0;
    if traffic.locality(&ideal)? < before + margin {
        return None;
    }
    // One replica stays in each of the first `minClusters` holders (most traffic, then most
    // replicas), as a scale-down keeps them: the traffic alone would take it from a cluster
    // without any.
    let mut protected: Vec<&String> = request
        .current
        .iter()
        .filter(|(c, n)| **n > 0 && fleet.get(c).is_some_and(|cl| !cl.burst_only))
        .map(|(c, _)| c)
        .collect();
    protected.sort_by(|a, b| {
        traffic
            .of(b)
            .total_cmp(&traffic.of(a))
            .then(request.current[*b].cmp(&request.current[*a]))
            .then(a.cmp(b))
    });
    protected.truncate(request.policy.min_clusters.unwrap_or(0).min(request.replicas) as usize);
    let surplus: BTreeMap<String, u32> = request
        .current
        .iter()
        .filter_map(|(cluster, &n)| {
            let share = ideal.get(cluster).copied().unwrap_or(0);
            let keep = share.max(u32::from(protected.contains(&cluster)));
            (n > keep).then(|| (cluster.clone(), n - keep))
        })
        .collect();
    let (decision, moved) = evacuate_what_fits(fleet, ledger, request, baseline, surplus)?;
    let short = |d: &Decision| {
        d.notes
            .iter()
            .any(|n| matches!(n, nave_policies::Note::MinClustersNotMet { .. }))
    };
    if short(&decision) && !short(baseline) {
        return None;
    }
    let after = traffic.locality(&decision.assignment)?;
    (after >= before + margin).then_some((decision, moved, (before, after)))
}

/// Takes `count` replicas out of `wanted`, from the last clusters in name order.
fn shrink(wanted: &mut BTreeMap<String, u32>, count: u32) {
    let mut left = count;
    while left > 0 {
        let Some(mut entry) = wanted.last_entry() else {
            return;
        };
        let take = left.min(*entry.get());
        *entry.get_mut() -= take;
        left -= take;
        if *entry.get() == 0 {
            entry.remove();
        }
    }
}

/// What rescheduling and burst retraction do to one workload in one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct Adapt {
    now: jiff::Timestamp,
    /// When the replicas last moved (for the cooldown).
    moved_at: Option<jiff::Timestamp>,
    /// The move under way, from the stored decision.
    moving: Option<Moving>,
    cooldown: Duration,
    deadline: Duration,
    rescheduling: bool,
    /// What this reconcile moved, and why.
    trigger: Option<&'static str>,
    moved: BTreeMap<String, u32>,
    stuck: BTreeMap<String, Stuck>,
    /// The share of requests served where they arrive before and after a move that followed
    /// the traffic.
    locality: Option<(f64, f64)>,
}

impl Adapt {
    /// The plan for a workload with its `stored` decision; `timeout` is `pendingTimeout` (also
    /// the deadline of a move), `cooldown` the least time between two moves.
    pub fn new(
        stored: Option<&StoredDecision>,
        rescheduling: bool,
        timeout: Duration,
        cooldown: Duration,
        stuck: BTreeMap<String, Stuck>,
        now: jiff::Timestamp,
    ) -> Adapt {
        Adapt {
            now,
            moved_at: stored.and_then(|d| d.moved_at),
            moving: stored.and_then(|d| d.moving.clone()),
            cooldown,
            deadline: timeout,
            rescheduling,
            trigger: None,
            moved: BTreeMap::new(),
            stuck,
            locality: None,
        }
    }

    /// How long until the cooldown ends; zero when it has.
    pub fn cooling(&self) -> Duration {
        self.moved_at.map_or(Duration::ZERO, |at| {
            self.cooldown
                .saturating_sub(self.now.duration_since(at).unsigned_abs())
        })
    }

    /// `baseline`, or a decision that moves stuck replicas or retracts burst replicas when one is
    /// due, no move is under way and the cooldown has passed.
    pub fn decide(
        &mut self,
        fleet: &Fleet,
        ledger: &Ledger,
        request: &Request,
        baseline: Decision,
    ) -> Decision {
        if self.moving.is_some() || !self.cooling().is_zero() {
            return baseline;
        }
        if self.rescheduling {
            let wanted: BTreeMap<String, u32> = self
                .stuck
                .iter()
                .map(|(c, s)| {
                    (
                        c.clone(),
                        s.pods.min(request.current.get(c).copied().unwrap_or(0)),
                    )
                })
                .filter(|(_, n)| *n > 0)
                .collect();
            if let Some((decision, moved)) = evacuate_what_fits(fleet, ledger, request, &baseline, wanted) {
                self.trigger = Some(TRIGGER_RESCHEDULE);
                self.moved = moved;
                self.moved_at = Some(self.now);
                return decision;
            }
        }
        let in_burst = |d: &Decision| -> u32 { in_burst_clusters(d).values().sum() };
        let bursting: BTreeMap<String, u32> = baseline
            .clusters
            .iter()
            .filter(|c| c.role == Role::Burst && c.previous > 0)
            .map(|c| (c.cluster.to_string(), c.previous))
            .collect();
        if let Some((decision, moved)) = retract_with_margin(fleet, ledger, request, &baseline, bursting)
            && in_burst(&decision) < in_burst(&baseline)
        {
            self.trigger = Some(TRIGGER_RETRACT);
            self.moved = moved;
            self.moved_at = Some(self.now);
            return decision;
        }
        if self.rescheduling
            && let Strategy::Traffic(traffic) = &request.policy.strategy
            && request.policy.weights.is_empty()
            && let Some((decision, moved, locality)) =
                follow_traffic(fleet, ledger, request, &baseline, traffic)
        {
            self.trigger = Some(TRIGGER_TRAFFIC);
            self.moved = moved;
            self.moved_at = Some(self.now);
            self.locality = Some(locality);
            return decision;
        }
        baseline
    }

    /// The history trigger when this reconcile moved replicas.
    pub fn trigger(&self) -> Option<&'static str> {
        self.trigger
    }

    /// Replicas moved by this reconcile, in all.
    pub fn moved(&self) -> u32 {
        self.moved.values().sum()
    }

    /// One line for the history and the Event: what moved, from where, to where, and why.
    pub fn reason(&self, decision: &Decision) -> Option<String> {
        let trigger = self.trigger?;
        let to = added(decision);
        let from: Vec<String> = self
            .moved
            .iter()
            .map(|(cluster, n)| match (trigger, self.stuck.get(cluster)) {
                (TRIGGER_RESCHEDULE, Some(stuck)) => {
                    let minutes = self.now.duration_since(stuck.since).unsigned_abs().as_secs() / 60;
                    let message = stuck.message.trim();
                    let why = if message.is_empty() {
                        String::new()
                    } else {
                        format!(": {message}")
                    };
                    format!("{n} from {cluster} (Pending for {minutes}m{why})")
                }
                _ => format!("{n} from {cluster}"),
            })
            .collect();
        let percent = |share: f64| (share * 100.0).round();
        Some(match trigger {
            TRIGGER_RESCHEDULE => format!("rescheduled: moved {} to {to}", from.join(", ")),
            TRIGGER_TRAFFIC => {
                let (before, after) = self.locality.unwrap_or_default();
                format!(
                    "followed the traffic: moved {} to {to}; requests served in the cluster they arrive at: {}% -> {}%",
                    from.join(", "),
                    percent(before),
                    percent(after)
                )
            }
            _ => format!(
                "burst retracted: moved {} back to {to}, which have room again",
                from.join(", ")
            ),
        })
    }

    /// The Event to publish when this reconcile moved replicas.
    pub fn event(&self, decision: &Decision) -> Option<(EventType, &'static str, String)> {
        let reason = match self.trigger? {
            TRIGGER_RESCHEDULE => RESCHEDULED,
            TRIGGER_TRAFFIC => FOLLOWED_TRAFFIC,
            _ => BURST_RETRACTED,
        };
        Some((EventType::Normal, reason, self.reason(decision)?))
    }

    /// The move under way after `decision`: the stored one until the clusters that gained report
    /// their replicas ready (or its deadline passes), plus the running replicas this decision
    /// takes out of Ready clusters while it adds elsewhere.
    pub fn hold(
        &mut self,
        previous: &BTreeMap<String, u32>,
        decision: &Decision,
        fleet: &Fleet,
        reports: &Reports,
        workload: &WorkloadRef,
    ) -> Option<&Moving> {
        let ready_in = |cluster: &str| -> u32 {
            deployment_status(reports.get(cluster).map(Arc::as_ref), workload)
                .map_or(0, |(ready, _, _)| u32::try_from(ready).unwrap_or(0))
        };
        let mut moving = self.moving.take().filter(|m| {
            let expired = self.now.duration_since(m.since).unsigned_abs() >= self.deadline;
            let arrived =
                m.to.keys()
                    .all(|c| ready_in(c) >= decision.assignment.get(c).copied().unwrap_or(0));
            !expired && !arrived
        });
        let added: u32 = decision
            .assignment
            .iter()
            .map(|(c, n)| n.saturating_sub(previous.get(c).copied().unwrap_or(0)))
            .sum();
        let mut budget = added;
        for (cluster, &before) in previous {
            let after = decision.assignment.get(cluster).copied().unwrap_or(0);
            if budget == 0 || after >= before || !fleet.get(cluster).is_some_and(|c| c.ready) {
                continue;
            }
            // Only running replicas are worth keeping: Pending ones serve nothing.
            let running_taken = ready_in(cluster).min(before).saturating_sub(after);
            let keep = running_taken.min(budget);
            if keep == 0 {
                continue;
            }
            budget -= keep;
            let m = moving.get_or_insert_with(|| Moving {
                since: self.now,
                ..Moving::default()
            });
            *m.held.entry(cluster.clone()).or_default() += keep;
            m.since = self.now;
        }
        if let Some(m) = moving.as_mut() {
            for (cluster, &n) in &decision.assignment {
                if n > previous.get(cluster).copied().unwrap_or(0) {
                    m.to.insert(cluster.clone(), n);
                }
            }
            m.to.retain(|c, _| decision.assignment.get(c).is_some_and(|n| *n > 0));
            m.held.retain(|_, n| *n > 0);
        }
        self.moving = moving.filter(|m| !m.held.is_empty());
        self.moving.as_ref()
    }

    /// Records in the stored decision the time of the last move and the move under way.
    pub fn annotate(&self, stored: &mut StoredDecision) {
        stored.moved_at = self.moved_at;
        stored.moving = self.moving.clone();
    }
}

/// `cluster +n, ...` for the clusters `decision` added replicas to, or `nowhere`.
pub fn added(decision: &Decision) -> String {
    let added: Vec<String> = decision
        .clusters
        .iter()
        .filter(|c| c.replicas > c.previous)
        .map(|c| format!("{} +{}", c.cluster, c.replicas - c.previous))
        .collect();
    if added.is_empty() {
        "nowhere".to_owned()
    } else {
        added.join(", ")
    }
}

/// Replicas `decision` assigns to burst clusters, by cluster.
pub fn in_burst_clusters(decision: &Decision) -> BTreeMap<String, u32> {
    decision
        .clusters
        .iter()
        .filter(|c| c.role == Role::Burst && c.replicas > 0)
        .map(|c| (c.cluster.to_string(), c.replicas))
        .collect()
}

#[cfg(test)]
mod tests;
