//! `nave-sim scenario`: a tiny scenario (2 clusters and a burst cluster, 3 workloads, 10
//! scenario minutes in 5 real seconds) through the runner the testbed uses, with the static
//! baseline and one Nave policy: the JSON has the shape and the figures are consistent.

use std::time::Duration;

use nave_playground::scenario::{Options, Plan, RunKind, Shape, run};
use serde_json::Value;

fn number(run: &Value, key: &str) -> f64 {
    run[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is a number in {run}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_scenario_runs_static_and_worst_fit_and_reports_consistent_figures() {
    let shape = Shape {
        regular_clusters: 2,
        nodes: 2,
        burst_nodes: 1,
        workloads: 3,
        jobs: 4,
        duration: Duration::from_secs(600),
        ..Shape::testbed()
    };
    let plan = Plan::generate(&shape, 7).expect("a valid plan");
    let expected_events = plan.readiness_events();
    let options = Options {
        plan,
        time_scale: 120.0,
        runs: vec![
            RunKind::Static,
            RunKind::Nave(nave_api::PlacementPolicy::WorstFit),
        ],
    };
    let mut seen = Vec::new();
    let report = run(&options, |r| seen.push(r.policy.clone()))
        .await
        .expect("both runs succeed");
    assert_eq!(
        seen,
        ["static", "worst-fit"],
        "progress saw each run as it finished"
    );
    println!("{}", report.table());

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("testbed.json");
    report.write_json(&path).expect("JSON written");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("JSON readable")).expect("valid JSON");
    let runs = json["runs"].as_array().expect("runs is an array");
    let policies: Vec<&str> = runs.iter().filter_map(|r| r["policy"].as_str()).collect();
    assert_eq!(policies, ["static", "worst-fit"], "one run each, named: {json}");

    for run in runs {
        let policy = run["policy"].as_str().unwrap_or_default();
        let pending = number(run, "pending_fraction");
        assert!(
            (0.0..=1.0).contains(&pending),
            "{policy}: pending_fraction {pending}"
        );
        let unserved = number(run, "unserved_fraction");
        assert!(
            (0.0..=1.0).contains(&unserved),
            "{policy}: unserved_fraction {unserved}"
        );
        let (p50, p99) = (number(run, "ready_p50_s"), number(run, "ready_p99_s"));
        assert!(
            0.0 <= p50 && p50 <= p99 && p99 <= 600.0,
            "{policy}: expected 0 <= p50 <= p99 <= 600 s, got {p50} and {p99}"
        );
        let moved = run["moved"]
            .as_u64()
            .unwrap_or_else(|| panic!("{policy}: moved is a count in {run}"));
        let clusters = number(run, "clusters_used");
        let events = run["ready_events"].as_u64().unwrap_or(0) + run["unready_events"].as_u64().unwrap_or(0);
        assert_eq!(
            events, expected_events as u64,
            "{policy}: every arrival and scale-up is an event, ready or not"
        );
        assert!(number(run, "pod_seconds") > 0.0, "{policy}: pods ran: {run}");
        let local = number(run, "local_fraction");
        assert!(
            (0.0..=1.0).contains(&local) && local > 0.0,
            "{policy}: some requests are served where they arrive, at most all: {local}"
        );
        assert!(
            number(run, "pending_pod_seconds") <= number(run, "pod_seconds"),
            "{policy}: pending pod-seconds within pod-seconds: {run}"
        );
        // The batch stream: every job counted once, done or not (this tiny fleet is full: they may
        // all wait to the end).
        let (done, unfinished) = (number(run, "jobs_done"), number(run, "jobs_unfinished"));
        assert_eq!(done + unfinished, 4.0, "{policy}: four jobs submitted: {run}");
        let (p50, p99) = (number(run, "job_p50_s"), number(run, "job_p99_s"));
        assert!(
            0.0 < p50 && p50 <= p99 && p99 <= 600.0,
            "{policy}: expected 0 < job p50 <= p99 <= 600 s, got {p50} and {p99}"
        );
        let batch_pending = number(run, "batch_pending_fraction");
        assert!((0.0..=1.0).contains(&batch_pending), "{policy}: {run}");
        match policy {
            "static" => {
                assert_eq!(moved, 0, "static moves nothing");
                assert!(
                    (1.0..=2.0).contains(&clusters),
                    "static uses 1 or 2 regular clusters, got {clusters}"
                );
                assert_eq!(number(run, "burst_fraction"), 0.0, "static never bursts");
                assert!(run["hub"].is_null(), "static has no hub: {run}");
            }
            _ => {
                assert!(
                    (1.0..=3.0).contains(&clusters),
                    "{policy}: clusters_used {clusters}"
                );
                assert!(
                    run["hub"]["reschedules"].is_u64(),
                    "{policy}: the hub's counters: {run}"
                );
            }
        }
    }
    assert!(
        json["seed"].as_u64() == Some(7) && json["time_scale"].as_f64() == Some(120.0),
        "{json}"
    );
}

/// The same tiny scenario with the `traffic` run, which reads the simulated ingress traffic
/// through the real Prometheus: it serves a larger share of the requests where they arrive than
/// worst-fit, which ignores where they arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_scenario_serves_more_requests_where_they_arrive_with_policy_traffic() {
    if nave_playground::prometheus::find_binary().is_none() {
        assert!(
            std::env::var("NAVE_REQUIRE_PROMETHEUS").is_ok_and(|v| v != "1")
                || std::env::var("NAVE_REQUIRE_PROMETHEUS").is_err(),
            "NAVE_REQUIRE_PROMETHEUS=1 but `prometheus` is not on PATH; install the Debian package `prometheus`"
        );
        println!("skipped: `prometheus` is not on PATH (policy traffic in a scenario)");
        return;
    }
    // Room enough everywhere (no other tenants at the start): where replicas go is a matter of
    // policy, not of room.
    let shape = Shape {
        regular_clusters: 2,
        nodes: 4,
        burst_nodes: 1,
        workloads: 3,
        background_percent: vec![0],
        duration: Duration::from_secs(600),
        traffic_shift: None,
        ..Shape::testbed()
    };
    // A scenario minute per real second: Prometheus scrapes and the hub reads every half a
    // scenario minute or so, often enough for ten minutes.
    let options = Options {
        plan: Plan::generate(&shape, 7).expect("a valid plan"),
        time_scale: 60.0,
        runs: vec![
            RunKind::Nave(nave_api::PlacementPolicy::WorstFit),
            RunKind::Nave(nave_api::PlacementPolicy::Traffic),
        ],
    };
    let report = run(&options, |_| {}).await.expect("both runs succeed");
    println!("{}", report.table());
    let local = |i: usize| report.runs[i].local_fraction.expect("traffic was simulated");
    assert!(
        local(1) > local(0),
        "traffic serves more requests where they arrive than worst-fit: {} vs {}",
        local(1),
        local(0)
    );
}
