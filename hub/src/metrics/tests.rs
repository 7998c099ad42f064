use std::collections::BTreeMap;

use nave_api::ClusterPlacementStatus;
use nave_api::wire::{CapacityModel, CapacityTotals, Resources};

use super::*;

const GRACE: Duration = Duration::from_secs(40);

fn now() -> jiff::Timestamp {
    "2025-06-01T12:00:00Z".parse().unwrap()
}

/// A registered cluster whose newest heartbeat was `age` ago and reported `capacity`.
fn record(name: &str, age: Option<Duration>, capacity: Option<CapacityTotals>) -> ClusterRecord {
    ClusterRecord {
        name: name.to_owned(),
        labels: BTreeMap::new(),
        region: None,
        zone: None,
        coordinates: None,
        registered_at: now() - jiff::SignedDuration::from_secs(3600),
        agent_version: Some("0.1.0".to_owned()),
        kubernetes_version: None,
        last_heartbeat_at: age.map(|a| now() - jiff::SignedDuration::try_from(a).unwrap()),
        capacity: capacity.map(|totals| {
            std::sync::Arc::new(
                serde_json::to_value(CapacityModel {
                    node_groups: Vec::new(),
                    totals,
                })
                .unwrap(),
            )
        }),
        cordoned: false,
        burst_only: false,
        accepted: true,
        prune_confirmed: None,
    }
}

fn totals() -> CapacityTotals {
    CapacityTotals {
        nodes: 3,
        schedulable_nodes: 2,
        allocatable: Resources::new(8000, 32 << 30, 220),
        requested: Resources::new(2000, 8 << 30, 11),
    }
}

fn placed(name: &str, desired: i32, ready: i32) -> ClusterPlacementStatus {
    ClusterPlacementStatus {
        name: name.to_owned(),
        desired,
        ready,
        ..ClusterPlacementStatus::default()
    }
}

fn status(clusters: Vec<ClusterPlacementStatus>) -> MultiClusterDeploymentStatus {
    MultiClusterDeploymentStatus {
        clusters,
        ..MultiClusterDeploymentStatus::default()
    }
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[track_caller]
fn assert_line(text: &str, expected: &str) {
    assert!(
        text.lines().any(|l| l == expected),
        "expected the line {expected:?} in:\n{text}"
    );
}

#[track_caller]
fn assert_no_series(text: &str, name_and_labels: &str) {
    let seen: Vec<_> = text.lines().filter(|l| l.starts_with(name_and_labels)).collect();
    assert!(
        seen.is_empty(),
        "expected no {name_and_labels} series, saw {seen:?}"
    );
}

#[test]
fn counters_and_the_histogram_encode_with_their_units_and_totals() {
    let metrics = HubMetrics::new();
    metrics.record_placement_change();
    metrics.record_placement_change();
    metrics.record_failover();
    metrics.record_reschedule(3);
    metrics.observe_scheduling(Duration::from_micros(300));
    let text = metrics.encode(Some(&[]), now(), GRACE).unwrap();

    assert_line(&text, "# TYPE nave_placements counter");
    assert_line(&text, "nave_placements_total 2");
    assert_line(&text, "nave_failovers_total 1");
    assert_line(&text, "nave_reschedules_total 3");
    assert_line(&text, "nave_bursts_total 0");
    assert_line(&text, "nave_reconcile_errors_total 0");
    assert_line(&text, "# TYPE nave_scheduling_duration_seconds histogram");
    assert_line(&text, "# UNIT nave_scheduling_duration_seconds seconds");
    assert_line(&text, "nave_scheduling_duration_seconds_count 1");
    // 300 µs falls in the 500 µs bucket, not the 250 µs one (buckets are cumulative).
    assert_line(&text, "nave_scheduling_duration_seconds_bucket{le=\"0.00025\"} 0");
    assert_line(&text, "nave_scheduling_duration_seconds_bucket{le=\"0.0005\"} 1");
    assert_line(&text, "nave_scheduling_duration_seconds_bucket{le=\"+Inf\"} 1");
    assert_eq!(
        lines(&text).last(),
        Some(&"# EOF"),
        "the exposition ends with # EOF"
    );
}

#[test]
fn cluster_families_come_from_the_records_in_base_units() {
    let metrics = HubMetrics::new();
    let clusters = [
        record("eu-1", Some(Duration::from_secs(5)), Some(totals())),
        record("us-1", Some(Duration::from_secs(90)), Some(totals())),
        record("new-1", None, None),
    ];
    let text = metrics.encode(Some(&clusters), now(), GRACE).unwrap();

    assert_line(
        &text,
        "nave_cluster_allocatable{cluster=\"eu-1\",resource=\"cpu\"} 8.0",
    );
    assert_line(
        &text,
        "nave_cluster_allocatable{cluster=\"eu-1\",resource=\"memory\"} 34359738368.0",
    );
    assert_line(
        &text,
        "nave_cluster_allocatable{cluster=\"eu-1\",resource=\"pods\"} 220.0",
    );
    assert_line(
        &text,
        "nave_cluster_requested{cluster=\"eu-1\",resource=\"cpu\"} 2.0",
    );
    assert_line(
        &text,
        "nave_cluster_utilization_ratio{cluster=\"eu-1\",resource=\"cpu\"} 0.25",
    );
    assert_line(
        &text,
        "nave_cluster_utilization_ratio{cluster=\"eu-1\",resource=\"pods\"} 0.05",
    );
    assert_line(&text, "nave_cluster_nodes{cluster=\"eu-1\"} 3");
    assert_line(&text, "nave_cluster_schedulable_nodes{cluster=\"eu-1\"} 2");
    assert_line(&text, "nave_cluster_heartbeat_age_seconds{cluster=\"eu-1\"} 5.0");
    assert_line(&text, "nave_cluster_ready{cluster=\"eu-1\"} 1");
    // A heartbeat older than the grace period: not ready, as placement sees it.
    assert_line(&text, "nave_cluster_ready{cluster=\"us-1\"} 0");
    assert_line(&text, "nave_cluster_heartbeat_age_seconds{cluster=\"us-1\"} 90.0");
    // Registered, never heartbeated: not ready, no age, no amounts.
    assert_line(&text, "nave_cluster_ready{cluster=\"new-1\"} 0");
    assert_no_series(&text, "nave_cluster_heartbeat_age_seconds{cluster=\"new-1\"");
    assert_no_series(&text, "nave_cluster_allocatable{cluster=\"new-1\"");
    assert_no_series(&text, "nave_cluster_used");
}

#[test]
fn a_cluster_gone_from_the_store_is_gone_from_the_output() {
    let metrics = HubMetrics::new();
    let both = [
        record("eu-1", Some(Duration::from_secs(1)), Some(totals())),
        record("us-1", Some(Duration::from_secs(1)), Some(totals())),
    ];
    let text = metrics.encode(Some(&both), now(), GRACE).unwrap();
    assert_line(&text, "nave_cluster_ready{cluster=\"us-1\"} 1");
    let text = metrics.encode(Some(&both[..1]), now(), GRACE).unwrap();
    assert_line(&text, "nave_cluster_ready{cluster=\"eu-1\"} 1");
    assert_no_series(&text, "nave_cluster_ready{cluster=\"us-1\"");
    assert_no_series(&text, "nave_cluster_allocatable{cluster=\"us-1\"");
}

#[test]
fn nothing_allocatable_has_no_utilization() {
    let metrics = HubMetrics::new();
    let empty = CapacityTotals::default();
    let text = metrics
        .encode(
            Some(&[record("eu-1", Some(Duration::ZERO), Some(empty))]),
            now(),
            GRACE,
        )
        .unwrap();
    assert_line(
        &text,
        "nave_cluster_allocatable{cluster=\"eu-1\",resource=\"cpu\"} 0.0",
    );
    assert_no_series(&text, "nave_cluster_utilization_ratio{");
}

#[test]
fn an_unreadable_store_leaves_the_cluster_families_out_and_is_counted() {
    let metrics = HubMetrics::new();
    metrics.record_placement_change();
    let text = metrics.encode(None, now(), GRACE).unwrap();
    assert_line(&text, "nave_placements_total 1");
    assert_line(&text, "nave_hub_scrape_errors_total 1");
    assert_no_series(&text, "nave_cluster_");
    assert_no_series(&text, "# TYPE nave_cluster_");
}

#[test]
fn mcd_series_follow_the_status_and_go_with_the_mcd() {
    let metrics = HubMetrics::new();
    let web = WorkloadRef::new("shop", "web");
    let api = WorkloadRef::new("shop", "api");
    let failing = BTreeSet::from(["eu-1".to_owned()]);
    metrics.observe_mcd(
        &web,
        &status(vec![placed("eu-1", 3, 1), placed("us-1", 2, 2)]),
        &failing,
    );
    metrics.observe_mcd(&api, &status(vec![placed("eu-1", 1, 0)]), &BTreeSet::new());
    let text = metrics.encode(Some(&[]), now(), GRACE).unwrap();
    assert_line(
        &text,
        "nave_mcd_failing{namespace=\"shop\",name=\"web\",cluster=\"eu-1\"} 1",
    );
    assert_line(
        &text,
        "nave_mcd_failing{namespace=\"shop\",name=\"web\",cluster=\"us-1\"} 0",
    );
    assert_line(
        &text,
        "nave_mcd_desired_replicas{namespace=\"shop\",name=\"web\",cluster=\"eu-1\"} 3",
    );
    assert_line(
        &text,
        "nave_mcd_ready_replicas{namespace=\"shop\",name=\"web\",cluster=\"eu-1\"} 1",
    );
    assert_line(
        &text,
        "nave_mcd_desired_replicas{namespace=\"shop\",name=\"web\",cluster=\"us-1\"} 2",
    );

    // web leaves us-1: its us-1 series go, the rest stay.
    metrics.observe_mcd(&web, &status(vec![placed("eu-1", 5, 5)]), &BTreeSet::new());
    let text = metrics.encode(Some(&[]), now(), GRACE).unwrap();
    assert_line(
        &text,
        "nave_mcd_desired_replicas{namespace=\"shop\",name=\"web\",cluster=\"eu-1\"} 5",
    );
    assert_no_series(
        &text,
        "nave_mcd_desired_replicas{namespace=\"shop\",name=\"web\",cluster=\"us-1\"",
    );
    assert_no_series(
        &text,
        "nave_mcd_ready_replicas{namespace=\"shop\",name=\"web\",cluster=\"us-1\"",
    );
    assert_no_series(
        &text,
        "nave_mcd_failing{namespace=\"shop\",name=\"web\",cluster=\"us-1\"",
    );

    // web is deleted: none of its series stay; api's do.
    metrics.forget_mcd(&web);
    metrics.forget_mcd(&web);
    let text = metrics.encode(Some(&[]), now(), GRACE).unwrap();
    assert_no_series(&text, "nave_mcd_desired_replicas{namespace=\"shop\",name=\"web\"");
    assert_no_series(&text, "nave_mcd_ready_replicas{namespace=\"shop\",name=\"web\"");
    assert_line(
        &text,
        "nave_mcd_desired_replicas{namespace=\"shop\",name=\"api\",cluster=\"eu-1\"} 1",
    );
}

#[test]
fn time_scheduling_returns_the_decision_and_counts_it() {
    let metrics = HubMetrics::new();
    assert_eq!(metrics.time_scheduling(|| 42), 42);
    let text = metrics.encode(Some(&[]), now(), GRACE).unwrap();
    assert_line(&text, "nave_scheduling_duration_seconds_count 1");
}

#[test]
fn measured_usage_and_prometheus_queries_are_exported_when_known() {
    let metrics = HubMetrics::new();
    metrics.prometheus_signal("cpu");
    metrics.record_prometheus_query("cpu", false);
    metrics.record_prometheus_query("cpu", true);
    let clusters = [
        record("eu-1", Some(Duration::from_secs(5)), Some(totals())),
        record("us-1", Some(Duration::from_secs(5)), Some(totals())),
    ];
    let usage = Usage::from([(
        "eu-1".to_owned(),
        crate::usage::Measured {
            cpu_millis: Some(6500),
            memory_bytes: None,
            traffic: Some(3.0),
            at: now(),
        },
    )]);
    let text = metrics
        .encode_with_usage(Some(&clusters), &usage, now(), GRACE)
        .unwrap();
    assert_line(&text, "nave_cluster_used{cluster=\"eu-1\",resource=\"cpu\"} 6.5");
    assert_no_series(&text, "nave_cluster_used{cluster=\"eu-1\",resource=\"memory\"}");
    assert_no_series(&text, "nave_cluster_used{cluster=\"us-1\"");
    assert_line(&text, "nave_prometheus_queries_total{signal=\"cpu\"} 2");
    assert_line(&text, "nave_prometheus_query_errors_total{signal=\"cpu\"} 1");
    let plain = metrics.encode(Some(&clusters), now(), GRACE).unwrap();
    assert_no_series(&plain, "nave_cluster_used{");
}
