//! Failover and failback of one MultiClusterDeployment, from the fleet's health
//! ([`crate::cluster_health`]). Pure: [`super::plan`] hands it the inputs, [`Plan`] turns them into
//! the placement request and says what to record.
//!
//! ```text
//!  HealthSnapshot (failed-over clusters, ready-since) ┐
//!  spec.placement.failback                            ├─► Plan ─► Request.evacuate (failover)
//!  stored decision (failedOverFrom), current          ┘        └► Request.current = {} (failback)
//!                     decide ─► history (trigger failover/failback, reason) + Event
//! ```
//!
//! - **Failover**: replicas in a failed-over cluster are evacuated: [`nave_policies::decide`]
//!   places them in clusters with room. Only as many move as fit elsewhere; the rest stay
//!   assigned to the lost cluster (they may still run there) and move on a later pass when room
//!   appears. The lost cluster's work set loses the moved replicas; its agent prunes them when
//!   it comes back.
//! - **Failback** (`spec.placement.failback`): `Never` leaves moved replicas where they are; the
//!   returned cluster takes new replicas only. `Immediate` places the workload again from
//!   scratch once the cluster has been Ready for the settle period, so replicas go back to where
//!   the policy puts them.
//!
//! The clusters a workload was moved away from are kept in its stored decision
//! ([`StoredDecision::failed_over_from`]) so that failback still happens after a hub restart.

use std::collections::{BTreeMap, BTreeSet};

use kube::runtime::events::EventType;
use nave_api::Failback;
use nave_policies::{Decision, Fleet, Ledger, Request, decide};

use super::moves::evacuate_what_fits;
use super::stored::StoredDecision;
use crate::cluster_health::HealthSnapshot;

/// History trigger of a placement change caused by failover.
pub const TRIGGER_FAILOVER: &str = "failover";
/// History trigger of a placement change caused by failback.
pub const TRIGGER_FAILBACK: &str = "failback";
/// Event reason on the MCD when replicas moved away from lost clusters.
pub const FAILED_OVER: &str = "FailedOver";
/// Event reason on the MCD when replicas moved back after clusters returned.
pub const FAILED_BACK: &str = "FailedBack";

/// What failover and failback do to one workload in one reconcile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    current: BTreeMap<String, u32>,
    /// Replicas in failed-over clusters, which should move.
    wanted: BTreeMap<String, u32>,
    /// Replicas that the decision moves (what fits elsewhere), after [`Plan::decide`].
    evacuated: BTreeMap<String, u32>,
    /// Returned, settled clusters this workload fails back to now.
    failing_back: BTreeSet<String>,
    /// Clusters replicas were moved away from and not failed back to.
    failed_over_from: BTreeSet<String>,
    /// Last heartbeat of each failed-over cluster, for the reason.
    silent_since: BTreeMap<String, Option<jiff::Timestamp>>,
}

impl Plan {
    /// The plan for a workload whose replicas are at `current`, with its `stored` decision.
    pub fn new(
        health: &HealthSnapshot,
        failback: Failback,
        stored: Option<&StoredDecision>,
        current: &BTreeMap<String, u32>,
        fleet: &Fleet,
        now: jiff::Timestamp,
    ) -> Plan {
        let mut failed_over_from: BTreeSet<String> =
            stored.map(|d| d.failed_over_from.clone()).unwrap_or_default();
        failed_over_from.retain(|c| fleet.get(c).is_some());
        // The fleet is read from the store at this reconcile, the health view up to one check
        // ago: a failed-over cluster whose heartbeat just arrived is Ready and keeps its replicas.
        let wanted = current
            .iter()
            .filter(|(cluster, n)| {
                **n > 0
                    && health.failed_over.contains_key(*cluster)
                    && !fleet.get(cluster).is_some_and(|c| c.ready)
            })
            .map(|(cluster, n)| (cluster.clone(), *n))
            .collect();
        let failing_back = match failback {
            Failback::Never => BTreeSet::new(),
            Failback::Immediate => failed_over_from
                .iter()
                .filter(|c| {
                    !health.failed_over.contains_key(*c)
                        && fleet.get(c).is_some_and(|c| c.ready)
                        && health.settled(c, now)
                })
                .cloned()
                .collect(),
        };
        Plan {
            current: current.clone(),
            wanted,
            evacuated: BTreeMap::new(),
            failing_back,
            failed_over_from,
            silent_since: health
                .failed_over
                .iter()
                .map(|(c, f)| (c.clone(), f.last_heartbeat))
                .collect(),
        }
    }

    /// Decides with failover or failback applied to `request`.
    pub fn decide(&mut self, fleet: &Fleet, ledger: &Ledger, request: &Request) -> Decision {
        if !self.failing_back.is_empty() {
            let mut fresh = request.clone();
            fresh.current = BTreeMap::new();
            for cluster in &self.failing_back {
                self.failed_over_from.remove(cluster);
            }
            return decide(fleet, ledger, &fresh);
        }
        let baseline = decide(fleet, ledger, request);
        match evacuate_what_fits(fleet, ledger, request, &baseline, self.wanted.clone()) {
            Some((decision, evacuated)) => {
                self.failed_over_from.extend(evacuated.keys().cloned());
                self.evacuated = evacuated;
                decision
            }
            None => baseline,
        }
    }

    /// The history trigger when failover or failback changed this decision.
    pub fn trigger(&self) -> Option<&'static str> {
        if !self.failing_back.is_empty() {
            Some(TRIGGER_FAILBACK)
        } else if !self.evacuated.is_empty() {
            Some(TRIGGER_FAILOVER)
        } else {
            None
        }
    }

    /// Replicas moved away from lost clusters in this decision.
    pub fn evacuated(&self) -> &BTreeMap<String, u32> {
        &self.evacuated
    }

    /// One line for the history and the Event: what moved, from where, to where, and why.
    pub fn reason(&self, decision: &Decision) -> Option<String> {
        let added: Vec<String> = decision
            .assignment
            .iter()
            .filter_map(|(cluster, n)| {
                let before = self.current.get(cluster).copied().unwrap_or(0);
                (*n > before).then(|| format!("{cluster} +{}", n - before))
            })
            .collect();
        let added = if added.is_empty() {
            "nowhere".to_owned()
        } else {
            added.join(", ")
        };
        if !self.failing_back.is_empty() {
            let clusters: Vec<&str> = self.failing_back.iter().map(String::as_str).collect();
            return Some(format!(
                "failback: {} Ready again for the settle period; placed anew ({added})",
                clusters.join(", ")
            ));
        }
        if self.evacuated.is_empty() {
            return None;
        }
        let from: Vec<String> = self
            .evacuated
            .iter()
            .map(|(cluster, n)| {
                let silence = match self.silent_since.get(cluster).copied().flatten() {
                    Some(at) => format!("no heartbeat since {at:.0}"),
                    None => "no heartbeat".to_owned(),
                };
                format!("{n} from {cluster} ({silence})")
            })
            .collect();
        let kept: u32 = self
            .wanted
            .iter()
            .map(|(c, n)| n.saturating_sub(self.evacuated.get(c).copied().unwrap_or(0)))
            .sum();
        let kept = if kept > 0 {
            format!("; {kept} stay until another cluster has room")
        } else {
            String::new()
        };
        Some(format!("failover: moved {} to {added}{kept}", from.join(", ")))
    }

    /// The Event to publish on the MCD when the placement changed: type, reason and note.
    /// Failover is a Warning (a cluster was lost), failback Normal.
    pub fn event(&self, decision: &Decision) -> Option<(EventType, &'static str, String)> {
        let (type_, reason) = match self.trigger()? {
            TRIGGER_FAILBACK => (EventType::Normal, FAILED_BACK),
            _ => (EventType::Warning, FAILED_OVER),
        };
        Some((type_, reason, self.reason(decision)?))
    }

    /// Records in the stored decision the clusters this workload was moved away from.
    pub fn annotate(&self, stored: &mut StoredDecision) {
        stored.failed_over_from = self.failed_over_from.clone();
    }
}

#[cfg(test)]
mod tests;
