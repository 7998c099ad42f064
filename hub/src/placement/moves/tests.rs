use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;

/// Reports where `web`'s Deployment has `ready` replicas in each cluster.
fn ready(clusters: &[(&str, i32)]) -> Reports {
    let clusters: Vec<(&str, i32, u32)> = clusters.iter().map(|(c, n)| (*c, *n, 0)).collect();
    crate::fixtures::reports(&web(), &clusters)
}
use crate::fixtures::{at, cluster, fleet, request};

fn web() -> WorkloadRef {
    WorkloadRef::new("shop", "web")
}

fn pending(workload: &WorkloadRef, since: i64, message: &str) -> PendingPod {
    PendingPod {
        namespace: workload.namespace.clone(),
        name: format!("{}-{since}", workload.name),
        workload: Some(workload.clone()),
        reason: "Unschedulable".to_owned(),
        message: message.to_owned(),
        since: Some(Time(at(since))),
    }
}

fn annotated(adapt: &Adapt) -> StoredDecision {
    let mut stored = StoredDecision::default();
    adapt.annotate(&mut stored);
    stored
}

const MINUTE: Duration = Duration::from_secs(60);

#[test]
fn a_clusters_pods_are_stuck_once_the_oldest_passed_the_timeout_and_the_next_expiry_is_known() {
    let other = WorkloadRef::new("shop", "api");
    let pods = vec![
        pending(&web(), 0, "0/5 nodes are available: 5 Insufficient cpu."),
        pending(&web(), 200, "later"),
        pending(&web(), 280, "fresh"),
        pending(&other, 0, "not web"),
    ];
    let by_cluster: crate::placement::Pending = [("eu-1".to_owned(), Arc::new(pods))].into_iter().collect();
    let (early, next) = stuck(&by_cluster, &web(), 5 * MINUTE, at(250));
    assert!(early.is_empty(), "the oldest has waited 250 s of 300: {early:?}");
    assert_eq!(
        next,
        Some(Duration::from_secs(50)),
        "eu-1's pods are stuck in 50 s"
    );

    let (stuck, next) = stuck(&by_cluster, &web(), 5 * MINUTE, at(300));
    assert_eq!(stuck.len(), 1, "only eu-1 has stuck pods: {stuck:?}");
    let eu = &stuck["eu-1"];
    assert_eq!(
        eu.pods, 3,
        "once the oldest has waited 5 minutes, web's younger Pending pods there move with it"
    );
    assert_eq!(eu.since, at(0), "the oldest pod's time");
    assert_eq!(eu.message, "0/5 nodes are available: 5 Insufficient cpu.");
    assert_eq!(next, None, "nothing else will become stuck");
}

fn stuck_in(cluster: &str, pods: u32) -> BTreeMap<String, Stuck> {
    [(
        cluster.to_owned(),
        Stuck {
            pods,
            since: at(0),
            message: "0/5 nodes are available: 5 Insufficient cpu.".to_owned(),
        },
    )]
    .into()
}

#[test]
fn stuck_replicas_move_where_there_is_room_and_only_as_many_as_fit() {
    let fleet = fleet(vec![cluster("eu-1", 0), cluster("us-1", 2)]);
    let req = request(6, &[("eu-1", 6)]);
    let baseline = decide(&fleet, &Ledger::new(), &req);
    let mut adapt = Adapt::new(None, true, 5 * MINUTE, 10 * MINUTE, stuck_in("eu-1", 3), at(600));
    let decision = adapt.decide(&fleet, &Ledger::new(), &req, baseline);
    assert_eq!(
        decision.assignment,
        [("eu-1".to_owned(), 4), ("us-1".to_owned(), 2)].into(),
        "3 are stuck but us-1 has room for 2"
    );
    assert_eq!(adapt.trigger(), Some(TRIGGER_RESCHEDULE));
    assert_eq!(adapt.moved(), 2);
    let reason = adapt.reason(&decision).unwrap();
    assert_eq!(
        reason,
        "rescheduled: moved 2 from eu-1 (Pending for 10m: 0/5 nodes are available: 5 Insufficient cpu.) \
         to us-1 +2"
    );
    assert_eq!(annotated(&adapt).moved_at, Some(at(600)), "the cooldown starts");
}

#[test]
fn nothing_moves_during_the_cooldown_or_when_rescheduling_is_off() {
    let fleet = fleet(vec![cluster("eu-1", 0), cluster("us-1", 8)]);
    let req = request(6, &[("eu-1", 6)]);
    let moved_recently = StoredDecision {
        moved_at: Some(at(300)),
        ..StoredDecision::default()
    };
    for (what, stored, enabled) in [
        ("in the cooldown", Some(&moved_recently), true),
        ("with rescheduling off", None, false),
    ] {
        let baseline = decide(&fleet, &Ledger::new(), &req);
        let mut adapt = Adapt::new(
            stored,
            enabled,
            5 * MINUTE,
            10 * MINUTE,
            stuck_in("eu-1", 3),
            at(600),
        );
        let decision = adapt.decide(&fleet, &Ledger::new(), &req, baseline);
        assert_eq!(
            decision.assignment,
            [("eu-1".to_owned(), 6)].into(),
            "{what}: nothing moves"
        );
        assert_eq!(adapt.trigger(), None, "{what}");
    }
    let adapt = Adapt::new(
        Some(&moved_recently),
        true,
        5 * MINUTE,
        10 * MINUTE,
        BTreeMap::new(),
        at(600),
    );
    assert_eq!(
        adapt.cooling(),
        5 * MINUTE,
        "moved at 300 s, cooldown 10 min, now 600 s"
    );
}

#[test]
fn burst_replicas_come_back_when_a_regular_cluster_has_room() {
    let mut burst = cluster("burst", 10);
    burst.burst_only = true;
    let fleet = fleet(vec![cluster("eu-1", 3), burst]);
    let req = request(5, &[("eu-1", 2), ("burst", 3)]);
    let baseline = decide(&fleet, &Ledger::new(), &req);
    assert_eq!(in_burst_clusters(&baseline), [("burst".to_owned(), 3)].into());
    let mut adapt = Adapt::new(None, true, 5 * MINUTE, 10 * MINUTE, BTreeMap::new(), at(600));
    let decision = adapt.decide(&fleet, &Ledger::new(), &req, baseline);
    assert_eq!(decision.assignment.get("eu-1"), Some(&5), "{decision}");
    assert!(
        in_burst_clusters(&decision).is_empty(),
        "burst emptied: {decision}"
    );
    assert_eq!(adapt.trigger(), Some(TRIGGER_RETRACT));
    assert_eq!(
        adapt.reason(&decision).unwrap(),
        "burst retracted: moved 3 from burst back to eu-1 +3, which have room again"
    );
}

#[test]
fn with_a_threshold_only_as_many_come_back_as_leave_the_cluster_a_margin_under_it() {
    use nave_policies::{Bursting, Capacity, CapacityModel, Cluster, Node, NodeGroup, Resources};
    // eu-1: 10 CPU, 6 requested (2 of them web's). Threshold 80%: 3 more would put it at 90%,
    // and even 2 at exactly 80% would burst again at the next arrival. With the 10-point
    // margin, one comes back (70%).
    let node = Node::new(Resources::new(10_000, 64 << 30, 110), Resources::new(6_000, 0, 6));
    let eu = Cluster::new(
        "eu-1",
        Capacity::Known(CapacityModel {
            groups: vec![NodeGroup::new(Default::default(), vec![node])],
            usage: None,
        }),
    );
    let mut burst = cluster("burst", 10);
    burst.burst_only = true;
    let fleet = fleet(vec![eu, burst]);
    let mut req = request(5, &[("eu-1", 2), ("burst", 3)]);
    req.policy.bursting = Bursting {
        threshold_percent: Some(80),
        targets: None,
    };
    let baseline = decide(&fleet, &Ledger::new(), &req);
    let mut adapt = Adapt::new(None, true, 5 * MINUTE, 10 * MINUTE, BTreeMap::new(), at(600));
    let decision = adapt.decide(&fleet, &Ledger::new(), &req, baseline);
    assert_eq!(
        (decision.assignment.get("eu-1"), decision.assignment.get("burst")),
        (Some(&3), Some(&2)),
        "one replica back to eu-1, two stay in burst: {decision}"
    );
    assert_eq!(adapt.trigger(), Some(TRIGGER_RETRACT));

    // At 75% nothing comes back: even one would leave eu-1 above 70%.
    let busier = Node::new(Resources::new(10_000, 64 << 30, 110), Resources::new(7_500, 0, 6));
    let mut fleet = fleet;
    let mut eu = fleet.get("eu-1").cloned().unwrap();
    eu.capacity = Capacity::Known(CapacityModel {
        groups: vec![NodeGroup::new(Default::default(), vec![busier])],
        usage: None,
    });
    fleet.insert(eu);
    let baseline = decide(&fleet, &Ledger::new(), &req);
    let mut adapt = Adapt::new(None, true, 5 * MINUTE, 10 * MINUTE, BTreeMap::new(), at(600));
    let decision = adapt.decide(&fleet, &Ledger::new(), &req, baseline);
    assert_eq!(decision.assignment.get("burst"), Some(&3), "{decision}");
    assert_eq!(adapt.trigger(), None);
}

#[test]
fn burst_replicas_stay_while_regular_clusters_are_full() {
    let mut burst = cluster("burst", 10);
    burst.burst_only = true;
    let fleet = fleet(vec![cluster("eu-1", 0), burst]);
    let req = request(5, &[("eu-1", 2), ("burst", 3)]);
    let baseline = decide(&fleet, &Ledger::new(), &req);
    let mut adapt = Adapt::new(None, true, 5 * MINUTE, 10 * MINUTE, BTreeMap::new(), at(600));
    let decision = adapt.decide(&fleet, &Ledger::new(), &req, baseline);
    assert_eq!(decision.assignment.get("burst"), Some(&3), "{decision}");
    assert_eq!(adapt.trigger(), None);
}

#[test]
fn running_replicas_taken_from_a_ready_cluster_stay_until_the_new_ones_are_ready() {
    let fleet = fleet(vec![cluster("eu-1", 0), cluster("us-1", 8)]);
    let previous: BTreeMap<String, u32> = [("eu-1".to_owned(), 4)].into();
    let req = request(4, &[]);
    // A decision that moves all 4 to us-1 (as failback or a rebalance would).
    let decision = decide(&fleet, &Ledger::new(), &req);
    assert_eq!(decision.assignment, [("us-1".to_owned(), 4)].into());

    // 3 of the 4 run in eu-1 (one is Pending and is not worth keeping).
    let mut adapt = Adapt::new(None, true, 5 * MINUTE, 10 * MINUTE, BTreeMap::new(), at(0));
    let moving = adapt
        .hold(&previous, &decision, &fleet, &ready(&[("eu-1", 3)]), &web())
        .cloned()
        .expect("a move holds the running replicas");
    assert_eq!(moving.held, [("eu-1".to_owned(), 3)].into());
    assert_eq!(moving.to, [("us-1".to_owned(), 4)].into());
    let mut stored = StoredDecision {
        assignment: decision.assignment.clone(),
        ..StoredDecision::default()
    };
    adapt.annotate(&mut stored);
    assert_eq!(
        stored.dispatched(),
        [("eu-1".to_owned(), 3), ("us-1".to_owned(), 4)].into(),
        "both run while the move is under way"
    );

    // Next reconcile: us-1 has 2 of 4 ready: still held. Then 4 of 4: released.
    let current = decision.assignment.clone();
    let mut later = Adapt::new(
        Some(&stored),
        true,
        5 * MINUTE,
        10 * MINUTE,
        BTreeMap::new(),
        at(30),
    );
    assert!(
        later
            .hold(
                &current,
                &decision,
                &fleet,
                &ready(&[("eu-1", 3), ("us-1", 2)]),
                &web()
            )
            .is_some(),
        "held while us-1 is not ready"
    );
    let mut arrived = Adapt::new(
        Some(&stored),
        true,
        5 * MINUTE,
        10 * MINUTE,
        BTreeMap::new(),
        at(60),
    );
    assert!(
        arrived
            .hold(
                &current,
                &decision,
                &fleet,
                &ready(&[("eu-1", 3), ("us-1", 4)]),
                &web()
            )
            .is_none(),
        "released when us-1 runs its 4"
    );
    assert_eq!(annotated(&arrived).moving, None);

    // Past the deadline the old replicas go even if the new ones never became ready.
    let mut expired = Adapt::new(
        Some(&stored),
        true,
        5 * MINUTE,
        10 * MINUTE,
        BTreeMap::new(),
        at(301),
    );
    assert!(
        expired
            .hold(&current, &decision, &fleet, &ready(&[("eu-1", 3)]), &web())
            .is_none(),
        "released at the deadline"
    );
}

#[test]
fn scale_downs_and_lost_clusters_hold_nothing() {
    let mut lost = cluster("eu-1", 0);
    lost.ready = false;
    let fleet_lost = fleet(vec![lost, cluster("us-1", 8)]);
    let previous: BTreeMap<String, u32> = [("eu-1".to_owned(), 4)].into();
    let decision = decide(&fleet_lost, &Ledger::new(), &request(4, &[]));
    let mut adapt = Adapt::new(None, true, 5 * MINUTE, 10 * MINUTE, BTreeMap::new(), at(0));
    assert!(
        adapt
            .hold(&previous, &decision, &fleet_lost, &ready(&[("eu-1", 4)]), &web())
            .is_none(),
        "failover from a lost cluster does not wait for it"
    );

    let fleet_ok = fleet(vec![cluster("eu-1", 8)]);
    let shrink = decide(&fleet_ok, &Ledger::new(), &request(2, &[("eu-1", 4)]));
    let mut adapt = Adapt::new(None, true, 5 * MINUTE, 10 * MINUTE, BTreeMap::new(), at(0));
    assert!(
        adapt
            .hold(&previous, &shrink, &fleet_ok, &ready(&[("eu-1", 4)]), &web())
            .is_none(),
        "a scale-down adds nowhere, so nothing is held"
    );
}

#[test]
fn shrink_takes_from_the_last_clusters_first() {
    let mut wanted: BTreeMap<String, u32> = [("a".to_owned(), 2), ("b".to_owned(), 3)].into();
    shrink(&mut wanted, 4);
    assert_eq!(wanted, [("a".to_owned(), 1)].into());
    shrink(&mut wanted, 5);
    assert!(wanted.is_empty());
}

fn following(traffic: &[(&str, f64)], replicas: u32, current: &[(&str, u32)]) -> Request {
    let mut req = request(replicas, current);
    req.policy.strategy = nave_policies::Strategy::Traffic(Traffic::new(
        traffic.iter().map(|(c, v)| ((*c).to_owned(), *v)).collect(),
        nave_policies::TrafficScope::Workload,
    ));
    req
}

#[test]
fn replicas_follow_the_traffic_when_it_shifts_far_enough_and_not_for_a_small_swing() {
    let fleet = fleet(vec![cluster("eu-1", 10), cluster("us-1", 10)]);
    // Placed when eu-1 had all the traffic; now us-1 has 3/4 of it.
    let req = following(&[("eu-1", 25.0), ("us-1", 75.0)], 4, &[("eu-1", 4)]);
    let baseline = decide(&fleet, &Ledger::new(), &req);
    assert_eq!(
        baseline.assignment,
        [("eu-1".to_owned(), 4)].into(),
        "steady: {baseline}"
    );
    let mut adapt = Adapt::new(None, true, 5 * MINUTE, 10 * MINUTE, BTreeMap::new(), at(600));
    let decision = adapt.decide(&fleet, &Ledger::new(), &req, baseline);
    assert_eq!(
        decision.assignment,
        [("eu-1".to_owned(), 1), ("us-1".to_owned(), 3)].into(),
        "three of four follow the traffic: {decision}"
    );
    assert_eq!(adapt.trigger(), Some(TRIGGER_TRAFFIC));
    assert_eq!(
        adapt.reason(&decision).unwrap(),
        "followed the traffic: moved 3 from eu-1 to us-1 +3; requests served in the cluster they arrive at: 25% -> 100%"
    );
    assert_eq!(adapt.event(&decision).map(|e| e.1), Some(FOLLOWED_TRAFFIC));
    assert_eq!(annotated(&adapt).moved_at, Some(at(600)), "the cooldown starts");

    // 55:45 where 2:2 runs: placing again (3:1 or 2:2) gains under 5 points; nothing moves.
    let req = following(&[("eu-1", 55.0), ("us-1", 45.0)], 4, &[("eu-1", 2), ("us-1", 2)]);
    let baseline = decide(&fleet, &Ledger::new(), &req);
    let mut adapt = Adapt::new(None, true, 5 * MINUTE, 10 * MINUTE, BTreeMap::new(), at(600));
    let decision = adapt.decide(&fleet, &Ledger::new(), &req, baseline.clone());
    assert_eq!(decision, baseline, "a small swing moves nothing");
    assert_eq!(adapt.trigger(), None);
}

#[test]
fn following_traffic_waits_for_the_cooldown_moves_only_what_fits_and_can_be_turned_off() {
    let req = following(&[("eu-1", 0.0), ("us-1", 100.0)], 6, &[("eu-1", 6)]);
    // us-1 has room for 2 only: 2 move, 4 stay.
    let small = fleet(vec![cluster("eu-1", 10), cluster("us-1", 2)]);
    let baseline = decide(&small, &Ledger::new(), &req);
    let mut adapt = Adapt::new(None, true, 5 * MINUTE, 10 * MINUTE, BTreeMap::new(), at(600));
    let decision = adapt.decide(&small, &Ledger::new(), &req, baseline);
    assert_eq!(
        decision.assignment,
        [("eu-1".to_owned(), 4), ("us-1".to_owned(), 2)].into(),
        "only what fits moves: {decision}"
    );

    let roomy = fleet(vec![cluster("eu-1", 10), cluster("us-1", 10)]);
    let cooling = StoredDecision {
        moved_at: Some(at(300)),
        ..StoredDecision::default()
    };
    let baseline = decide(&roomy, &Ledger::new(), &req);
    let mut adapt = Adapt::new(
        Some(&cooling),
        true,
        5 * MINUTE,
        10 * MINUTE,
        BTreeMap::new(),
        at(600),
    );
    let decision = adapt.decide(&roomy, &Ledger::new(), &req, baseline.clone());
    assert_eq!(
        decision, baseline,
        "moved 5 minutes ago, cooldown 10: nothing moves"
    );

    let mut adapt = Adapt::new(None, false, 5 * MINUTE, 10 * MINUTE, BTreeMap::new(), at(600));
    let decision = adapt.decide(&roomy, &Ledger::new(), &req, baseline.clone());
    assert_eq!(decision, baseline, "rescheduling disabled: replicas stay");
}

#[test]
fn following_traffic_keeps_the_replica_min_clusters_put_where_no_traffic_arrives() {
    let fleet = fleet(vec![cluster("a", 10), cluster("b", 10), cluster("c", 10)]);
    let mut req = following(&[("a", 50.0), ("b", 50.0)], 6, &[("a", 5), ("b", 0), ("c", 1)]);
    req.policy.min_clusters = Some(2);
    let baseline = decide(&fleet, &Ledger::new(), &req);
    let mut adapt = Adapt::new(None, true, 5 * MINUTE, 10 * MINUTE, BTreeMap::new(), at(600));
    let decision = adapt.decide(&fleet, &Ledger::new(), &req, baseline);
    assert_eq!(
        decision.assignment,
        [("a".to_owned(), 3), ("b".to_owned(), 2), ("c".to_owned(), 1)].into(),
        "two of a's follow the traffic to b; c keeps the replica minClusters asks for: {decision}"
    );
    assert_eq!(adapt.trigger(), Some(TRIGGER_TRAFFIC));
}
