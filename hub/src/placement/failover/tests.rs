use std::time::Duration;

use nave_policies::Cluster;

use super::*;
use crate::fixtures::{at, cluster, fleet, request};

/// `eu-1` failed over at 100 s after its last heartbeat at 0 s; `us-1` Ready since 0 s.
fn eu_lost() -> HealthSnapshot {
    HealthSnapshot {
        stale: ["eu-1".to_owned()].into(),
        ready_since: [("us-1".to_owned(), at(0))].into(),
        partitioned: false,
        settle: Duration::from_secs(300),
        ..crate::fixtures::failed_over("eu-1")
    }
}

fn annotated(plan: &Plan) -> StoredDecision {
    let mut stored = StoredDecision::default();
    plan.annotate(&mut stored);
    stored
}

fn lost(mut c: Cluster) -> Cluster {
    c.ready = false;
    c
}

#[test]
fn replicas_of_a_failed_over_cluster_move_to_clusters_with_room() {
    let fleet = fleet(vec![lost(cluster("eu-1", 8)), cluster("us-1", 8)]);
    let request = request(6, &[("eu-1", 3), ("us-1", 3)]);
    let mut plan = Plan::new(
        &eu_lost(),
        Failback::Never,
        None,
        &request.current,
        &fleet,
        at(100),
    );
    let decision = plan.decide(&fleet, &Ledger::new(), &request);
    assert_eq!(decision.assignment, [("us-1".to_owned(), 6)].into(), "{decision}");
    assert_eq!(decision.unplaced, 0);
    assert_eq!(plan.trigger(), Some(TRIGGER_FAILOVER));
    assert_eq!(plan.evacuated(), &[("eu-1".to_owned(), 3)].into());
    let reason = plan.reason(&decision).unwrap();
    assert_eq!(
        reason,
        "failover: moved 3 from eu-1 (no heartbeat since 2023-11-14T22:13:20Z) to us-1 +3"
    );
    let (type_, event, note) = plan.event(&decision).unwrap();
    assert_eq!(type_, EventType::Warning);
    assert_eq!((event, note.as_str()), (FAILED_OVER, reason.as_str()));
    assert_eq!(annotated(&plan).failed_over_from, ["eu-1".to_owned()].into());
}

#[test]
fn only_what_fits_elsewhere_moves_the_rest_stays_on_the_lost_cluster() {
    let fleet = fleet(vec![lost(cluster("eu-1", 8)), cluster("us-1", 1)]);
    let request = request(6, &[("eu-1", 3), ("us-1", 3)]);
    let mut plan = Plan::new(
        &eu_lost(),
        Failback::Never,
        None,
        &request.current,
        &fleet,
        at(100),
    );
    let decision = plan.decide(&fleet, &Ledger::new(), &request);
    assert_eq!(
        decision.assignment,
        [("eu-1".to_owned(), 2), ("us-1".to_owned(), 4)].into(),
        "{decision}"
    );
    assert_eq!(decision.unplaced, 0, "nothing becomes unplaced by failover");
    let reason = plan.reason(&decision).unwrap();
    assert!(
        reason.ends_with("to us-1 +1; 2 stay until another cluster has room"),
        "{reason}"
    );
}

#[test]
fn with_no_room_anywhere_nothing_moves() {
    let fleet = fleet(vec![lost(cluster("eu-1", 8)), cluster("us-1", 0)]);
    let request = request(6, &[("eu-1", 3), ("us-1", 3)]);
    let mut plan = Plan::new(
        &eu_lost(),
        Failback::Never,
        None,
        &request.current,
        &fleet,
        at(100),
    );
    let decision = plan.decide(&fleet, &Ledger::new(), &request);
    assert_eq!(decision.assignment.get("eu-1"), Some(&3), "{decision}");
    assert_eq!(plan.trigger(), None);
    assert_eq!(plan.reason(&decision), None);
    assert_eq!(annotated(&plan).failed_over_from, BTreeSet::new());
}

#[test]
fn a_failed_over_cluster_whose_heartbeat_just_arrived_keeps_its_replicas() {
    // The health view lags the store by up to one check: the fleet already sees eu-1 Ready.
    let fleet = fleet(vec![cluster("eu-1", 8), cluster("us-1", 8)]);
    let request = request(8, &[("eu-1", 2), ("us-1", 6)]);
    let mut plan = Plan::new(
        &eu_lost(),
        Failback::Never,
        None,
        &request.current,
        &fleet,
        at(100),
    );
    let decision = plan.decide(&fleet, &Ledger::new(), &request);
    assert_eq!(decision.assignment.get("eu-1"), Some(&2), "{decision}");
    assert_eq!(plan.trigger(), None);
}

#[test]
fn a_workload_without_replicas_on_lost_clusters_is_left_alone() {
    let fleet = fleet(vec![lost(cluster("eu-1", 8)), cluster("us-1", 8)]);
    let request = request(3, &[("us-1", 3)]);
    let mut plan = Plan::new(
        &eu_lost(),
        Failback::Immediate,
        None,
        &request.current,
        &fleet,
        at(100),
    );
    let decision = plan.decide(&fleet, &Ledger::new(), &request);
    assert_eq!(decision.assignment.get("us-1"), Some(&3));
    assert_eq!(plan.trigger(), None);
}

/// eu-1 came back at `since` and has no replicas; the stored decision remembers the failover.
fn returned(since: jiff::Timestamp) -> HealthSnapshot {
    HealthSnapshot {
        ready_since: [("eu-1".to_owned(), since), ("us-1".to_owned(), at(0))].into(),
        settle: Duration::from_secs(300),
        ..HealthSnapshot::default()
    }
}

#[test]
fn failback_never_keeps_replicas_where_they_moved() {
    let fleet = fleet(vec![cluster("eu-1", 8), cluster("us-1", 8)]);
    let request = request(6, &[("us-1", 6)]);
    let stored = StoredDecision {
        failed_over_from: ["eu-1".to_owned()].into(),
        ..StoredDecision::default()
    };
    let mut plan = Plan::new(
        &returned(at(200)),
        Failback::Never,
        Some(&stored),
        &request.current,
        &fleet,
        at(10_000),
    );
    let decision = plan.decide(&fleet, &Ledger::new(), &request);
    assert_eq!(decision.assignment.get("us-1"), Some(&6), "{decision}");
    assert_eq!(plan.trigger(), None);
    assert_eq!(
        annotated(&plan).failed_over_from,
        BTreeSet::from(["eu-1".to_owned()]),
        "the record stays, should the policy change to Immediate"
    );
}

#[test]
fn failback_immediate_places_anew_once_the_cluster_has_settled() {
    let fleet = fleet(vec![cluster("eu-1", 8), cluster("us-1", 8)]);
    let request = request(6, &[("us-1", 6)]);
    let stored = StoredDecision {
        failed_over_from: ["eu-1".to_owned()].into(),
        ..StoredDecision::default()
    };

    // Ready for 299 s of the 300 s settle period: not yet.
    let mut plan = Plan::new(
        &returned(at(200)),
        Failback::Immediate,
        Some(&stored),
        &request.current,
        &fleet,
        at(499),
    );
    let decision = plan.decide(&fleet, &Ledger::new(), &request);
    assert_eq!(decision.assignment.get("us-1"), Some(&6), "{decision}");
    assert_eq!(plan.trigger(), None);

    let mut plan = Plan::new(
        &returned(at(200)),
        Failback::Immediate,
        Some(&stored),
        &request.current,
        &fleet,
        at(500),
    );
    let decision = plan.decide(&fleet, &Ledger::new(), &request);
    assert_eq!(
        decision.assignment,
        [("eu-1".to_owned(), 3), ("us-1".to_owned(), 3)].into(),
        "{decision}"
    );
    assert_eq!(plan.trigger(), Some(TRIGGER_FAILBACK));
    let (type_, event, note) = plan.event(&decision).unwrap();
    assert_eq!((type_, event), (EventType::Normal, FAILED_BACK));
    assert_eq!(
        note,
        "failback: eu-1 Ready again for the settle period; placed anew (eu-1 +3)"
    );
    assert_eq!(
        annotated(&plan).failed_over_from,
        BTreeSet::new(),
        "failed back: nothing left to remember"
    );
}

#[test]
fn failback_waits_while_the_cluster_is_not_ready_or_gone() {
    let stored = StoredDecision {
        failed_over_from: ["eu-1".to_owned()].into(),
        ..StoredDecision::default()
    };
    let request = request(6, &[("us-1", 6)]);
    let not_ready = fleet(vec![lost(cluster("eu-1", 8)), cluster("us-1", 8)]);
    let plan = Plan::new(
        &returned(at(0)),
        Failback::Immediate,
        Some(&stored),
        &request.current,
        &not_ready,
        at(10_000),
    );
    assert_eq!(plan.trigger(), None);
    let gone = fleet(vec![cluster("us-1", 8)]);
    let plan = Plan::new(
        &returned(at(0)),
        Failback::Immediate,
        Some(&stored),
        &request.current,
        &gone,
        at(10_000),
    );
    assert_eq!(plan.trigger(), None);
    assert_eq!(
        annotated(&plan).failed_over_from,
        BTreeSet::new(),
        "a cluster gone from the fleet is forgotten"
    );
}
