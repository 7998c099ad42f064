//! Every condition reason `status_of` can set, each from the smallest situation that causes it.

use std::collections::BTreeMap;

use nave_api::wire::WorkloadRef;
use nave_policies::{Ledger, decide};
use nave_testkit::Mcd;
use serde_json::json;

use super::*;
use crate::fixtures;
use crate::fixtures::{at, cluster, fleet, request};
use crate::placement::stored::Moving;

fn web() -> WorkloadRef {
    WorkloadRef::new("shop", "web")
}

/// `replicas` under `placement`, no resource requests, at generation 3.
fn mcd(replicas: i64, placement: serde_json::Value) -> MultiClusterDeployment {
    Mcd::new("web")
        .namespace("shop")
        .generation(3)
        .replicas(replicas)
        .placement(placement)
        .requests(json!({}))
        .build()
}

struct Case {
    mcd: MultiClusterDeployment,
    fleet: Fleet,
    replicas: u32,
    reports: Reports,
    missing: Vec<String>,
    moving: Option<Moving>,
}

impl Case {
    fn new(replicas: u32, clusters: Vec<nave_policies::Cluster>) -> Case {
        Case {
            mcd: mcd(i64::from(replicas), json!({"policy": "spread"})),
            fleet: fleet(clusters),
            replicas,
            reports: Reports::new(),
            missing: Vec::new(),
            moving: None,
        }
    }

    fn status(&self) -> MultiClusterDeploymentStatus {
        let decision = decide(&self.fleet, &Ledger::new(), &request(self.replicas, &[]));
        status_of(
            &self.mcd,
            &decision,
            &self.fleet,
            Seen::whole(&self.reports),
            &crate::render::template_hash(&self.mcd),
            &self.missing,
            &StoredDecision {
                moving: self.moving.clone(),
                ..StoredDecision::default()
            },
        )
    }

    /// Runs every replica it places, ready.
    fn all_ready(mut self) -> Case {
        let decision = decide(&self.fleet, &Ledger::new(), &request(self.replicas, &[]));
        let running: Vec<(&str, i32, u32)> = decision
            .assignment
            .iter()
            .map(|(c, n)| (c.as_str(), i32::try_from(*n).unwrap(), 0))
            .collect();
        self.reports = fixtures::reports(&web(), &running);
        self
    }
}

fn reason(status: &MultiClusterDeploymentStatus, type_: &str) -> String {
    let condition = conditions::find(&status.conditions, type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {:?}", status.conditions));
    assert_eq!(
        condition.observed_generation,
        Some(3),
        "{type_} names the generation"
    );
    condition.reason.clone()
}

#[test]
fn a_workload_placed_and_running_everywhere_is_placed_available_complete_and_as_expected() {
    let status = Case::new(4, vec![cluster("eu-1", 8), cluster("us-1", 8)])
        .all_ready()
        .status();
    assert_eq!(reason(&status, types::SCHEDULED), reasons::ALL_REPLICAS_PLACED);
    assert_eq!(
        reason(&status, types::AVAILABLE),
        reasons::MINIMUM_REPLICAS_AVAILABLE
    );
    assert_eq!(reason(&status, types::PROGRESSING), reasons::ROLLOUT_COMPLETE);
    assert_eq!(reason(&status, types::DEGRADED), reasons::AS_EXPECTED);
    assert_eq!(reason(&status, types::BURSTING), reasons::NOT_BURSTING);
    assert_eq!(
        (status.replicas, status.ready_replicas, status.cluster_count),
        (4, 4, 2)
    );
    assert_eq!(status.placement_summary.as_deref(), Some("eu-1=2,us-1=2"));
}

#[test]
fn replicas_not_ready_yet_are_unavailable_and_in_progress() {
    let status = Case::new(4, vec![cluster("eu-1", 8)]).status();
    assert_eq!(
        reason(&status, types::AVAILABLE),
        reasons::MINIMUM_REPLICAS_UNAVAILABLE
    );
    assert_eq!(reason(&status, types::PROGRESSING), reasons::ROLLOUT_IN_PROGRESS);
}

#[test]
fn a_fleet_too_small_places_part_and_says_how_many_have_no_cluster() {
    let status = Case::new(5, vec![cluster("eu-1", 3)]).status();
    assert_eq!(reason(&status, types::SCHEDULED), reasons::PARTIALLY_PLACED);
    assert_eq!(reason(&status, types::DEGRADED), reasons::REPLICAS_UNPLACED);
    assert_eq!(status.unplaced_replicas, 2);
}

#[test]
fn full_clusters_are_insufficient_capacity_and_no_clusters_are_no_eligible_clusters() {
    let full = Case::new(2, vec![cluster("eu-1", 0)]).status();
    assert_eq!(reason(&full, types::SCHEDULED), reasons::INSUFFICIENT_CAPACITY);
    let mut cordoned = cluster("eu-1", 8);
    cordoned.unschedulable = true;
    let none = Case::new(2, vec![cordoned]).status();
    assert_eq!(reason(&none, types::SCHEDULED), reasons::NO_ELIGIBLE_CLUSTERS);
}

#[test]
fn pending_pods_missing_dependencies_and_silent_clusters_degrade_the_workload() {
    let mut pending = Case::new(2, vec![cluster("eu-1", 8)]);
    pending.reports = fixtures::reports(&web(), &[("eu-1", 1, 1)]);
    let status = pending.status();
    assert_eq!(reason(&status, types::DEGRADED), reasons::PODS_PENDING);
    assert_eq!(status.pending_replicas, 1);

    let mut missing = Case::new(2, vec![cluster("eu-1", 8)]).all_ready();
    missing.missing = vec!["ConfigMap settings".to_owned()];
    let status = missing.status();
    assert_eq!(reason(&status, types::DEGRADED), reasons::DEPENDENCY_MISSING);
    let message = &conditions::find(&status.conditions, types::DEGRADED)
        .unwrap()
        .message;
    assert!(
        message.contains("ConfigMap settings") && message.contains("shop"),
        "{message}"
    );

    // A cluster whose heartbeats stopped after the decision placed replicas there.
    let mut silent = Case::new(2, vec![cluster("eu-1", 8)]).all_ready();
    let decision = decide(&silent.fleet, &Ledger::new(), &request(2, &[]));
    let mut lost = silent.fleet.get("eu-1").unwrap().clone();
    lost.ready = false;
    silent.fleet.insert(lost);
    let status = status_of(
        &silent.mcd,
        &decision,
        &silent.fleet,
        Seen::whole(&silent.reports),
        &crate::render::template_hash(&silent.mcd),
        &[],
        &StoredDecision::default(),
    );
    assert_eq!(reason(&status, types::DEGRADED), reasons::CLUSTER_NOT_READY);
    let message = &conditions::find(&status.conditions, types::DEGRADED)
        .unwrap()
        .message;
    assert!(message.contains("eu-1=2"), "{message}");
}

#[test]
fn a_deployment_that_cannot_progress_in_a_cluster_degrades_the_workload_and_names_the_cluster() {
    let mut case = Case::new(2, vec![cluster("eu-1", 8)]);
    let mut reports = fixtures::reports(&web(), &[("eu-1", 0, 0)]);
    let mut report = (*reports["eu-1"]).clone();
    report.objects[0].conditions = vec![
        nave_api::wire::ConditionSummary {
            type_: "Progressing".to_owned(),
            status: "False".to_owned(),
            reason: Some("ProgressDeadlineExceeded".to_owned()),
            message: Some("ReplicaSet \"web-1\" has timed out progressing.".to_owned()),
        },
        nave_api::wire::ConditionSummary {
            type_: "Available".to_owned(),
            status: "False".to_owned(),
            reason: Some("MinimumReplicasUnavailable".to_owned()),
            message: None,
        },
    ];
    reports.insert("eu-1".to_owned(), Arc::new(report));
    case.reports = reports;
    let status = case.status();
    assert_eq!(reason(&status, types::DEGRADED), reasons::DEPLOYMENT_FAILING);
    let message = &conditions::find(&status.conditions, types::DEGRADED)
        .unwrap()
        .message;
    assert!(
        message.starts_with("eu-1: Progressing=False ProgressDeadlineExceeded: ReplicaSet"),
        "{message}"
    );
    let eu = status.clusters.iter().find(|c| c.name == "eu-1").unwrap();
    assert!(
        eu.message
            .as_deref()
            .is_some_and(|m| m.starts_with("Deployment failing: Progressing=False")),
        "{:?}",
        eu.message
    );
    // Available=False alone is a rollout in progress, not a failure.
    let mut fine = Case::new(2, vec![cluster("eu-1", 8)]);
    fine.reports = fixtures::reports(&web(), &[("eu-1", 0, 0)]);
    assert_ne!(
        reason(&fine.status(), types::DEGRADED),
        reasons::DEPLOYMENT_FAILING
    );
}

#[test]
fn a_move_under_way_is_progressing_with_moving_replicas() {
    let mut case = Case::new(2, vec![cluster("eu-1", 8)]).all_ready();
    case.moving = Some(Moving {
        held: BTreeMap::from([("burst".to_owned(), 2)]),
        to: BTreeMap::from([("eu-1".to_owned(), 2)]),
        since: at(0),
    });
    let status = case.status();
    assert_eq!(reason(&status, types::PROGRESSING), reasons::MOVING_REPLICAS);
    let message = &conditions::find(&status.conditions, types::PROGRESSING)
        .unwrap()
        .message;
    assert!(message.contains("2 in burst"), "{message}");
}

#[test]
fn replicas_in_burst_clusters_burst_by_overflow_or_by_threshold() {
    let mut burst = cluster("burst", 8);
    burst.burst_only = true;
    let overflow = Case::new(4, vec![cluster("eu-1", 2), burst.clone()]);
    let status = overflow.status();
    assert_eq!(
        reason(&status, types::BURSTING),
        reasons::OVERFLOW,
        "{:?}",
        status.clusters
    );
    assert!(status.clusters.iter().any(|c| c.burst && c.desired == 2));

    let mut threshold = Case::new(4, vec![cluster("eu-1", 2), burst]);
    threshold.mcd = mcd(4, json!({"policy": "spread", "bursting": {"threshold": 80}}));
    assert_eq!(
        reason(&threshold.status(), types::BURSTING),
        reasons::THRESHOLD_EXCEEDED
    );
}

#[test]
fn replicas_a_move_left_count_until_their_agent_reports_them_gone() {
    // Placed in eu-1; the last status listed old-1, whose agent still runs two.
    let mut case = Case::new(2, vec![cluster("eu-1", 8)]);
    case.reports = fixtures::reports(&web(), &[("eu-1", 2, 0), ("old-1", 2, 0)]);
    case.mcd.status = Some(MultiClusterDeploymentStatus {
        clusters: vec![ClusterPlacementStatus {
            name: "old-1".to_owned(),
            desired: 2,
            ..ClusterPlacementStatus::default()
        }],
        ..MultiClusterDeploymentStatus::default()
    });
    let status = case.status();
    let listed: Vec<(&str, i32, i32)> = status
        .clusters
        .iter()
        .map(|c| (c.name.as_str(), c.desired, c.ready))
        .collect();
    assert_eq!(listed, [("eu-1", 2, 2), ("old-1", 0, 2)]);
    assert_eq!(status.cluster_count, 1, "only eu-1 is given replicas");

    // Once its agent has removed them, it is no longer listed.
    case.reports = fixtures::reports(&web(), &[("eu-1", 2, 0)]);
    let status = case.status();
    assert_eq!(status.clusters.len(), 1, "{:?}", status.clusters);
}

#[test]
fn updated_ready_replicas_count_only_what_certainly_runs_the_current_template() {
    let deployment = |hash: &str, observed: bool, all: i32, updated: i32, ready: i32| ObjectStatus {
        kind: "Deployment".to_owned(),
        template_hash: Some(hash.to_owned()),
        observed_current: Some(observed),
        all_replicas: Some(all),
        updated_replicas: Some(updated),
        ready_replicas: Some(ready),
        ..ObjectStatus::default()
    };
    // Mid-rollout: 2 new pods of 5, every pod ready. The 3 old ones are ready, so 2 new ones are.
    assert_eq!(updated_ready_of(&deployment("new", true, 5, 2, 5), "new"), 2);
    // With surge: 6 pods, 3 new, 4 ready: at least one of the new ones is.
    assert_eq!(updated_ready_of(&deployment("new", true, 6, 3, 4), "new"), 1);
    // Done.
    assert_eq!(updated_ready_of(&deployment("new", true, 5, 5, 5), "new"), 5);
    // The Deployment holds another template, or its controller has not seen this one yet.
    assert_eq!(updated_ready_of(&deployment("old", true, 5, 5, 5), "new"), 0);
    assert_eq!(updated_ready_of(&deployment("new", false, 5, 5, 5), "new"), 0);
    // Counts that do not add up (a report mid-change) never give more than the new pods.
    assert_eq!(updated_ready_of(&deployment("new", true, 2, 3, 9), "new"), 3);
}
