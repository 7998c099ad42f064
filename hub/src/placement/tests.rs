//! The composed plan: the same inputs give the same plan, and each way a decision departs from
//! the steady one (failover, rescheduling, burst retraction, make-before-break) shows in it.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nave_api::wire::PendingPod;
use nave_testkit::Mcd;
use serde_json::json;

use super::*;
use crate::fixtures;
use crate::fixtures::{at, cluster, fleet};

fn web() -> WorkloadRef {
    WorkloadRef::new("shop", "web")
}

/// `replicas` of 1 CPU, worst-fit, with `placement` merged into `spec.placement`.
fn mcd(replicas: i64, placement: serde_json::Value) -> MultiClusterDeployment {
    let mut placement_spec = json!({"policy": "worst-fit"});
    for (k, v) in placement.as_object().into_iter().flatten() {
        placement_spec[k] = v.clone();
    }
    Mcd::new("web")
        .namespace("shop")
        .generation(1)
        .replicas(replicas)
        .placement(placement_spec)
        .requests(json!({"cpu": "1"}))
        .build()
}

fn previous(assignment: &[(&str, u32)]) -> Previous {
    Previous {
        decision: StoredDecision {
            assignment: assignment.iter().map(|(c, n)| ((*c).to_owned(), *n)).collect(),
            demand: stored::StoredDemand {
                cpu_millis: 1000,
                memory_bytes: 0,
            },
            ..StoredDecision::default()
        },
        generation: 1,
    }
}

fn stuck_pods(cluster: &str, count: u32, since: i64) -> Pending {
    let pods = (0..count)
        .map(|i| PendingPod {
            namespace: "shop".to_owned(),
            name: format!("web-{i}"),
            workload: Some(web()),
            reason: "Unschedulable".to_owned(),
            message: "0/1 nodes are available: 1 Insufficient cpu.".to_owned(),
            since: Some(Time(at(since))),
        })
        .collect();
    [(cluster.to_owned(), Arc::new(pods))].into_iter().collect()
}

struct World {
    mcd: MultiClusterDeployment,
    valid: Valid,
    previous: Option<Previous>,
    fleet: Fleet,
    traffic: crate::placement::traffic::TrafficView,
    reports: Reports,
    pending: Pending,
    health: HealthSnapshot,
    now: jiff::Timestamp,
}

impl World {
    fn new(mcd: MultiClusterDeployment, fleet: Fleet) -> World {
        let valid = validate(&mcd).expect("a valid spec");
        World {
            mcd,
            valid,
            previous: None,
            fleet,
            traffic: Default::default(),
            reports: Reports::new(),
            pending: Pending::new(),
            health: HealthSnapshot::default(),
            now: at(3600),
        }
    }

    fn plan(&self) -> Planned {
        let workload = web();
        plan(&Inputs {
            workload: &workload,
            mcd: &self.mcd,
            valid: &self.valid,
            previous: self.previous.as_ref(),
            fleet: &self.fleet,
            traffic: &self.traffic,
            ledger: &Ledger::new(),
            reports: &self.reports,
            pending: &self.pending,
            health: &self.health,
            now: self.now,
        })
    }
}

#[test]
fn a_new_workload_is_placed_by_its_spec_and_the_plan_is_the_same_for_the_same_inputs() {
    let world = World::new(
        mcd(4, json!({})),
        fleet(vec![cluster("eu-1", 8), cluster("us-1", 8)]),
    );
    let planned = world.plan();
    assert_eq!(planned.trigger, TRIGGER_SPEC);
    assert_eq!(
        planned.decision.assignment.values().sum::<u32>(),
        4,
        "{}",
        planned.decision
    );
    assert_eq!(planned.stored.assignment, planned.decision.assignment);
    assert_eq!(planned.stored.demand(), nave_policies::Demand::new(1000, 0));
    assert_eq!(planned.events()[0].reason, event_reasons::SCHEDULED);
    assert!(
        planned.settled,
        "everything placed, nothing Pending, nothing in burst clusters"
    );
    let again = world.plan();
    assert_eq!(again.stored, planned.stored, "a plan is a function of its inputs");
}

#[test]
fn stuck_replicas_past_the_pending_timeout_are_rescheduled_with_a_move_held_until_they_run() {
    let mut world = World::new(
        mcd(4, json!({"rescheduling": {"pendingTimeout": "5m"}})),
        fleet(vec![cluster("eu-1", 2), cluster("us-1", 8)]),
    );
    world.previous = Some(previous(&[("eu-1", 2), ("us-1", 2)]));
    world.reports = fixtures::reports(&web(), &[("eu-1", 1, 1), ("us-1", 2, 0)]);
    world.pending = stuck_pods("eu-1", 1, 0);
    let planned = world.plan();
    assert_eq!(planned.trigger, moves::TRIGGER_RESCHEDULE, "{}", planned.reason());
    assert_eq!(
        planned.decision.assignment.get("us-1"),
        Some(&3),
        "{}",
        planned.decision
    );
    assert_eq!(planned.moved, 1);
    assert_eq!(planned.stored.moved_at, Some(world.now), "the cooldown starts");
    assert!(
        planned
            .events()
            .iter()
            .any(|e| e.reason == event_reasons::RESCHEDULED),
        "{:?}",
        planned.events()
    );
    assert!(
        planned.reason().starts_with("rescheduled: moved 1 from eu-1"),
        "{}",
        planned.reason()
    );

    // Not yet past the timeout: nothing moves, and the plan says when to look again.
    world.pending = stuck_pods("eu-1", 1, 3600 - 60);
    let waiting = world.plan();
    assert_eq!(waiting.trigger, TRIGGER_FLEET);
    assert_eq!(
        waiting.decision.assignment,
        world.previous.as_ref().unwrap().decision.assignment
    );
    assert_eq!(waiting.next, Some(Duration::from_secs(240)));
}

#[test]
fn burst_replicas_come_back_when_regular_clusters_have_room() {
    let mut burst = cluster("burst", 8);
    burst.burst_only = true;
    let mut world = World::new(mcd(4, json!({})), fleet(vec![cluster("eu-1", 8), burst]));
    world.previous = Some(previous(&[("eu-1", 2), ("burst", 2)]));
    world.reports = fixtures::reports(&web(), &[("eu-1", 2, 0), ("burst", 2, 0)]);
    let planned = world.plan();
    assert_eq!(planned.trigger, moves::TRIGGER_RETRACT, "{}", planned.reason());
    assert_eq!(
        planned.decision.assignment.get("eu-1"),
        Some(&4),
        "{}",
        planned.decision
    );
    let moving = planned
        .moving
        .as_ref()
        .expect("the burst replicas stay until the new ones run");
    assert_eq!(moving.held.get("burst"), Some(&2));
    assert_eq!(
        planned.dispatched().get("burst"),
        Some(&2),
        "held replicas are still sent"
    );
    assert!(!planned.settled);
}

#[test]
fn failover_comes_before_moves_and_is_recorded_for_failback() {
    let mut lost = cluster("eu-1", 8);
    lost.ready = false;
    let mut world = World::new(mcd(4, json!({})), fleet(vec![lost, cluster("us-1", 8)]));
    world.previous = Some(previous(&[("eu-1", 2), ("us-1", 2)]));
    world.health = fixtures::failed_over("eu-1");
    let planned = world.plan();
    assert_eq!(planned.trigger, failover::TRIGGER_FAILOVER);
    assert!(planned.failed_over);
    assert_eq!(
        planned.decision.assignment.get("us-1"),
        Some(&4),
        "{}",
        planned.decision
    );
    assert!(planned.stored.failed_over_from.contains("eu-1"));
    assert!(
        planned
            .events()
            .iter()
            .any(|e| e.reason == event_reasons::FAILED_OVER)
    );
}

#[test]
fn invalid_specs_are_refused_with_the_field_named() {
    let mut negative = mcd(1, json!({}));
    negative.spec.replicas = -1;
    assert!(validate(&negative).unwrap_err().starts_with("spec.replicas"));
    let bad_timeout = mcd(1, json!({"rescheduling": {"pendingTimeout": "soon"}}));
    let message = validate(&bad_timeout).unwrap_err();
    assert!(message.contains("pendingTimeout"), "{message}");
}

#[test]
fn a_selector_operator_the_engine_does_not_know_is_refused_not_read_as_does_not_exist() {
    let typo = mcd(
        1,
        json!({"clusterSelector": {"matchExpressions": [{"key": "tier", "operator": "exists"}]}}),
    );
    let message = validate(&typo).unwrap_err();
    assert!(
        message.starts_with("spec.placement.clusterSelector") && message.contains("exists"),
        "{message}"
    );
    let burst_typo = mcd(
        1,
        json!({"bursting": {"threshold": 80, "targets": {"matchExpressions": [{"key": "tier", "operator": "in", "values": ["x"]}]}}}),
    );
    let message = validate(&burst_typo).unwrap_err();
    assert!(
        message.starts_with("spec.placement.bursting.targets"),
        "{message}"
    );
    let fine = mcd(
        1,
        json!({"clusterSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}}),
    );
    assert!(validate(&fine).is_ok());
}

#[test]
fn an_override_that_retargets_the_deployment_is_an_invalid_spec() {
    let mut retarget = mcd(1, json!({}));
    retarget.spec.overrides = serde_json::from_value(json!([{
        "clusters": ["eu-1"],
        "patches": [{"op": "replace", "path": "/metadata/namespace", "value": "kube-system"}]
    }]))
    .unwrap();
    let message = validate(&retarget).unwrap_err();
    assert!(
        message.starts_with("spec.overrides[0].patches[0].path: Forbidden"),
        "{message}"
    );
}

#[test]
fn everywhere_never_fails_over_reschedules_or_retracts_and_keeps_each_cluster_at_the_count() {
    let mut lost = cluster("eu-1", 8);
    lost.ready = false;
    let mut burst = cluster("burst", 8);
    burst.burst_only = true;
    let mut world = World::new(
        mcd(2, json!({"policy": "everywhere"})),
        fleet(vec![lost, cluster("full", 0), cluster("us-1", 8), burst]),
    );
    world.previous = Some(previous(&[("eu-1", 2), ("full", 1), ("us-1", 2), ("burst", 2)]));
    world.reports = fixtures::reports(&web(), &[("full", 0, 1), ("us-1", 2, 0), ("burst", 2, 0)]);
    // eu-1 is failed over and full's replica is stuck Pending past the timeout: with another
    // policy both would move; here every cluster already runs its own two.
    world.health = fixtures::failed_over("eu-1");
    world.pending = stuck_pods("full", 1, 0);
    let planned = world.plan();
    assert_eq!(
        planned.decision.assignment,
        [("burst", 2), ("eu-1", 2), ("full", 1), ("us-1", 2)]
            .map(|(c, n)| (c.to_owned(), n))
            .into(),
        "{}",
        planned.decision
    );
    assert_eq!(planned.trigger, TRIGGER_FLEET, "{}", planned.reason());
    assert!(!planned.failed_over);
    assert_eq!(planned.moved, 0);
    assert!(planned.moving.is_none());
    assert!(planned.stored.failed_over_from.is_empty());
    assert_eq!(planned.decision.unplaced, 1, "full has room for none more");
    assert!(
        planned
            .events()
            .iter()
            .all(|e| e.reason == event_reasons::FAILED_SCHEDULING),
        "only the unplaced replica is worth an event: {:?}",
        planned.events()
    );
}

#[test]
fn everywhere_refuses_the_fields_that_do_not_apply_to_it() {
    for (field, placement) in [
        ("maxClusters", json!({"policy": "everywhere", "maxClusters": 2})),
        ("minClusters", json!({"policy": "everywhere", "minClusters": 2})),
        ("weights", json!({"policy": "everywhere", "weights": {"eu-1": 1}})),
        (
            "bursting",
            json!({"policy": "everywhere", "bursting": {"threshold": 80}}),
        ),
        (
            "proximity",
            json!({"policy": "everywhere", "proximity": {"origin": {"region": "eu"}}}),
        ),
    ] {
        let message = validate(&mcd(1, placement)).unwrap_err();
        assert!(
            message.starts_with(&format!("spec.placement.{field}: Forbidden")),
            "{field}: {message}"
        );
    }
    assert!(validate(&mcd(1, json!({"policy": "everywhere", "clusters": ["eu-1"]}))).is_ok());
}

#[test]
fn a_new_rebalance_annotation_places_from_scratch_keeping_the_old_replicas_until_the_new_run() {
    // Steady placement keeps all four in eu-1; from scratch, worst-fit picks the roomier us-1.
    let mut mcd = mcd(4, json!({}));
    let mut world = World::new(mcd.clone(), fleet(vec![cluster("eu-1", 8), cluster("us-1", 16)]));
    world.previous = Some(previous(&[("eu-1", 4)]));
    world.reports = fixtures::reports(&web(), &[("eu-1", 4, 0)]);
    let steady = world.plan();
    assert_eq!(
        steady.decision.assignment.get("eu-1"),
        Some(&4),
        "no annotation: steady"
    );

    mcd.metadata.annotations = Some([(nave_api::REBALANCE_ANNOTATION.to_owned(), "t1".to_owned())].into());
    world.mcd = mcd;
    let planned = world.plan();
    assert_eq!(planned.trigger, TRIGGER_REBALANCE, "{}", planned.reason());
    assert!(
        planned.decision.assignment.get("us-1").copied().unwrap_or(0) > 0,
        "placed from scratch: {}",
        planned.decision
    );
    let moving = planned.moving.as_ref().expect("a move under way");
    assert_eq!(
        moving.held.get("eu-1").copied().unwrap_or(0)
            + planned.decision.assignment.get("eu-1").copied().unwrap_or(0),
        4,
        "eu-1 keeps running all four until the new ones run: {moving:?}"
    );
    assert_eq!(planned.stored.rebalanced.as_deref(), Some("t1"));
    assert!(
        planned
            .events()
            .iter()
            .any(|e| e.reason == event_reasons::REBALANCED),
        "{:?}",
        planned.events()
    );

    // Once acted on, the same value asks nothing more.
    world.previous = Some(Previous {
        decision: planned.explained(),
        generation: 1,
    });
    let after = world.plan();
    assert_ne!(after.trigger, TRIGGER_REBALANCE, "{}", after.reason());
    assert_eq!(
        after.decision.assignment, planned.decision.assignment,
        "steady again"
    );
}
