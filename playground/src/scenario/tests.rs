use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::plan::{BUSY, Event, Rng, even_split, tenant_pod_size};
use super::report::{HubCounters, moved_replicas, percentile};
use super::*;

fn testbed() -> Plan {
    Plan::generate(&Shape::testbed(), DEFAULT_SEED).expect("the testbed is valid")
}

#[test]
fn the_same_seed_gives_the_same_plan_and_another_seed_another() {
    assert_eq!(testbed(), testbed());
    let other = Plan::generate(&Shape::testbed(), DEFAULT_SEED + 1).expect("valid");
    assert_ne!(testbed().events, other.events);
}

#[test]
fn the_rng_sequence_is_fixed() {
    // SplitMix64's published first output for seed 0.
    assert_eq!(Rng::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    let mut rng = Rng::new(7);
    for _ in 0..1000 {
        let v = rng.int(2, 12);
        assert!((2..=12).contains(&v), "{v} out of 2..=12");
        let f = rng.between(0.25, 0.5);
        assert!((0.25..0.5).contains(&f), "{f} out of [0.25, 0.5)");
    }
}

#[test]
fn the_testbed_has_mck8s_fleet_and_uneven_tenants() {
    let plan = testbed();
    let names: Vec<&str> = plan.regular.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["cluster-1", "cluster-2", "cluster-3", "cluster-4", "cluster-5"]
    );
    for c in &plan.regular {
        assert_eq!(c.node_pools[0].count, 5, "{}", c.name);
        assert_eq!(
            (c.node_pools[0].cpu.as_str(), c.node_pools[0].memory.as_str()),
            ("4", "4Gi")
        );
        assert!(!c.burst_only, "{} is regular", c.name);
        assert!(
            c.region.is_some() && c.coordinates.is_some(),
            "{} is somewhere",
            c.name
        );
    }
    assert!(plan.burst.burst_only, "the burst cluster is declared burst-only");
    assert_eq!(plan.burst.node_pools[0].count, 10);
    let regions: BTreeSet<_> = plan.regular.iter().map(|c| c.region.clone()).collect();
    assert_eq!(regions.len(), 5, "each cluster in a region of its own");

    // 60/40/20/10/0 % of every node: pods of a tenth of a node.
    let mut per_cluster: BTreeMap<&str, u32> = BTreeMap::new();
    for b in &plan.background {
        *per_cluster.entry(&b.cluster).or_default() += b.pods;
    }
    let expected = BTreeMap::from([
        ("cluster-1", 30),
        ("cluster-2", 20),
        ("cluster-3", 10),
        ("cluster-4", 5),
    ]);
    assert_eq!(per_cluster, expected);
    assert_eq!(tenant_pod_size(&plan.shape), (400, 429_496_729));
    assert_eq!(plan.regular_free_cpu_millis(), 100_000 - 65 * 400);
}

#[test]
fn demand_peaks_above_the_regular_clusters_but_within_the_fleet() {
    let plan = testbed();
    let peak = plan.peak_cpu_millis();
    let free = plan.regular_free_cpu_millis();
    assert!(
        peak > free,
        "peak {peak}m must exceed the regular clusters' free {free}m so bursting matters"
    );
    assert!(
        peak < free + plan.burst_cpu_millis(),
        "peak {peak}m should fit with the burst cluster ({}m more)",
        plan.burst_cpu_millis()
    );
}

#[test]
fn events_are_ordered_and_refer_to_live_workloads() {
    let plan = testbed();
    assert!(
        plan.events.windows(2).all(|w| w[0].at <= w[1].at),
        "events in time order"
    );
    assert!(
        plan.events.iter().all(|e| e.at < plan.shape.duration),
        "every event within the run"
    );
    let mut live: BTreeSet<String> = BTreeSet::new();
    let mut arrived = 0;
    let mut tenants = 0;
    let mut shifts = 0;
    let mut jobs = BTreeSet::new();
    for timed in &plan.events {
        match &timed.event {
            Event::Arrive(w) => {
                assert!(live.insert(w.name.clone()), "{} arrives once", w.name);
                assert!((2..=12).contains(&w.replicas), "{w:?}");
                assert!((250..=1000).contains(&w.cpu_millis), "{w:?}");
                assert!((256..=1024).contains(&w.memory_mib), "{w:?}");
                arrived += 1;
            }
            Event::Scale { name, replicas } => {
                assert!(live.contains(name), "{name} scaled while not live");
                assert!((2..=12).contains(replicas), "{name} to {replicas}");
            }
            Event::Leave { name } => assert!(live.remove(name), "{name} leaves while not live"),
            Event::TenantArrives { .. } | Event::TenantLeaves { .. } => tenants += 1,
            Event::TrafficShifts => shifts += 1,
            Event::JobArrives(j) => {
                assert!(jobs.insert(j.name.clone()), "{} arrives once", j.name);
                assert!((2..=8).contains(&j.parallelism), "{j:?}");
                assert!(
                    j.completions % j.parallelism == 0 && j.completions <= 3 * j.parallelism,
                    "{j:?}"
                );
                assert!(
                    j.run >= Duration::from_secs(60) && j.run <= Duration::from_secs(180),
                    "{j:?}"
                );
            }
        }
    }
    assert_eq!(jobs.len(), 16, "the batch stream");
    assert_eq!(shifts, 1, "the traffic shifts once, half-way");
    assert_eq!(arrived, 40);
    assert!(tenants >= 4, "tenants come and go: {tenants} events");
    assert!(!live.is_empty(), "some workloads stay to the end");
    assert!(plan.readiness_events() > arrived, "some scale-ups");
}

#[test]
fn traffic_is_skewed_to_two_regions_and_they_swap_when_it_shifts() {
    let plan = testbed();
    assert_eq!(plan.traffic.len(), 40, "every workload has traffic");
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    let mut homes = [0, 0];
    for (name, demand) in &plan.traffic {
        let before = plan.traffic(name, false);
        let after = plan.traffic(name, true);
        assert_eq!(before.len(), plan.regular.len());
        assert!(
            close(before.iter().sum::<f64>(), demand.requests_per_second),
            "{name}: {before:?}"
        );
        let (home, away) = (BUSY[demand.home], BUSY[1 - demand.home]);
        assert!(
            close(before[home], 0.7 * demand.requests_per_second),
            "{name}: {before:?}"
        );
        assert!(
            close(before[away], 0.15 * demand.requests_per_second),
            "{name}: {before:?}"
        );
        assert!(
            close(after[home], before[away]) && close(after[away], before[home]),
            "{name}: swapped"
        );
        homes[demand.home] += 1;
    }
    assert!(
        homes[0] > 0 && homes[1] > 0,
        "both busy regions are some workloads' home: {homes:?}"
    );
    assert_eq!(plan.traffic("nobody", false), Vec::<f64>::new());
    let again = Plan::generate(&Shape::testbed(), plan.seed).expect("valid");
    assert_eq!(again.traffic, plan.traffic, "the same seed, the same traffic");
}

#[test]
fn a_small_shape_still_makes_a_valid_plan() {
    let shape = Shape {
        regular_clusters: 2,
        nodes: 2,
        burst_nodes: 1,
        workloads: 3,
        duration: Duration::from_secs(600),
        ..Shape::testbed()
    };
    let plan = Plan::generate(&shape, 1).expect("valid");
    assert_eq!(plan.regular.len(), 2);
    let tenant_clusters: BTreeSet<&str> = plan
        .events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TenantArrives { cluster, .. } | Event::TenantLeaves { cluster, .. } => {
                Some(cluster.as_str())
            }
            _ => None,
        })
        .collect();
    assert!(tenant_clusters.is_subset(&BTreeSet::from(["cluster-1", "cluster-2"])));
    let fleet = plan.fleet(true, 120.0);
    assert_eq!(fleet.clusters.len(), 3);
    fleet.check().expect("the fleet is valid");
    assert_eq!(
        fleet.clusters[0].timing.pod_start_millis, 83,
        "10 s of scenario time at 120x"
    );
}

#[test]
fn bad_shapes_are_refused_with_the_reason() {
    let cases = [
        (
            Shape {
                regular_clusters: 0,
                ..Shape::testbed()
            },
            "regular clusters",
        ),
        (
            Shape {
                node_cpu: "lots".to_owned(),
                ..Shape::testbed()
            },
            "node cpu",
        ),
        (
            Shape {
                background_percent: vec![120],
                ..Shape::testbed()
            },
            "120%",
        ),
        (
            Shape {
                workloads: 0,
                ..Shape::testbed()
            },
            "at least one workload",
        ),
    ];
    for (shape, expected) in cases {
        let error = Plan::generate(&shape, 1).expect_err("refused");
        assert!(error.contains(expected), "expected {expected:?} in {error:?}");
    }
}

#[test]
fn static_division_is_even_with_remainders_spread_by_name() {
    assert_eq!(even_split(10, 5, "a"), [2, 2, 2, 2, 2]);
    for name in ["wl-01", "wl-02", "wl-03"] {
        let shares = even_split(7, 5, name);
        assert_eq!(shares.iter().sum::<u32>(), 7, "{name}: {shares:?}");
        assert!(shares.iter().all(|s| *s == 1 || *s == 2), "{name}: {shares:?}");
    }
    let starts: BTreeSet<usize> = (1..=20)
        .map(|i| {
            even_split(1, 5, &format!("wl-{i:02}"))
                .iter()
                .position(|s| *s == 1)
                .unwrap_or(99)
        })
        .collect();
    assert!(
        starts.len() > 1,
        "remainders do not all land on one cluster: {starts:?}"
    );
    assert_eq!(even_split(3, 0, "a"), Vec::<u32>::new());
}

#[test]
fn percentiles_are_nearest_rank() {
    let s = |v: &[u64]| v.iter().map(|s| Duration::from_secs(*s)).collect::<Vec<_>>();
    assert_eq!(percentile(&[], 50), None);
    assert_eq!(percentile(&s(&[7]), 99), Some(Duration::from_secs(7)));
    assert_eq!(percentile(&s(&[1, 2, 3, 4]), 50), Some(Duration::from_secs(2)));
    let hundred: Vec<u64> = (1..=100).collect();
    assert_eq!(percentile(&s(&hundred), 99), Some(Duration::from_secs(99)));
    assert_eq!(percentile(&s(&hundred), 50), Some(Duration::from_secs(50)));
}

#[test]
fn moves_are_replicas_taken_from_one_cluster_and_given_to_another() {
    let a = |pairs: &[(&str, u32)]| -> BTreeMap<String, u32> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    };
    let history = [
        a(&[("c1", 4)]),
        // Scale-up into a new cluster: nothing moved.
        a(&[("c1", 4), ("c2", 2)]),
        // Two replicas move from c1 to burst.
        a(&[("c1", 2), ("c2", 2), ("burst", 2)]),
        // Scale-down: nothing moved.
        a(&[("c2", 2), ("burst", 2)]),
        // Scale-up by 1 while 2 move from burst to c1: 2 moved.
        a(&[("c1", 3), ("c2", 2)]),
    ];
    assert_eq!(moved_replicas(&history), 4);
    assert_eq!(moved_replicas(&history[..1]), 0);
}

#[test]
fn hub_counters_are_read_from_openmetrics_text() {
    let text = "# HELP nave_reschedules Replicas moved\n# TYPE nave_reschedules counter\n\
                nave_reschedules_total 12\nnave_bursts_total 3\nnave_bursts_created 1.7e9\n# EOF\n";
    assert_eq!(
        HubCounters::parse(text),
        HubCounters {
            reschedules: 12,
            bursts: 3,
            failovers: 0
        }
    );
}

#[test]
fn run_names_parse_and_unknown_ones_are_named() {
    let all: Vec<RunKind> = ["worst-fit", "best-fit", "spread", "proximity", "static"]
        .iter()
        .map(|s| s.parse().expect("known"))
        .collect();
    assert_eq!(all, RunKind::ALL);
    assert_eq!(
        "traffic".parse::<RunKind>(),
        Ok(RunKind::Nave(nave_api::PlacementPolicy::Traffic)),
        "traffic is a run, not a default one"
    );
    assert!(!RunKind::ALL.contains(&RunKind::Nave(nave_api::PlacementPolicy::Traffic)));
    let error = "first-fit".parse::<RunKind>().expect_err("unknown");
    assert!(
        error.contains("first-fit") && error.contains("worst-fit"),
        "{error}"
    );
}

#[test]
fn the_json_has_the_issue_shape() {
    let report = Report {
        scenario: "testbed".to_owned(),
        seed: 1,
        time_scale: 60.0,
        duration_s: 2400.0,
        runs: vec![RunResult::new(
            "static",
            &measure::Measurements {
                pod_seconds: 10.0,
                pending_seconds: 2.5,
                ready: vec![Duration::from_secs(1)],
                ..Default::default()
            },
            60.0,
            0,
            None,
        )],
    };
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).expect("JSON");
    let run = &json["runs"][0];
    assert_eq!(run["policy"], "static");
    assert_eq!(run["pending_fraction"], 0.25);
    assert_eq!(run["ready_p50_s"], 60.0);
    assert_eq!(run["ready_p99_s"], 60.0);
    assert_eq!(run["moved"], 0);
    assert!(run["clusters_used"].is_number());
    assert!(report.table().contains("25.0%"), "{}", report.table());
}

#[test]
fn the_command_line_parses_runs_and_refuses_bad_time_scales() {
    use clap::Parser;

    use crate::cli::{Cli, Command, Scenario};

    let argv = [
        "nave-sim",
        "scenario",
        "testbed",
        "--policies",
        "static,worst-fit",
        "--time-scale",
        "120",
    ];
    let cli = Cli::try_parse_from(argv).expect("parses");
    assert_eq!(
        cli.default_log_filter(),
        "error",
        "scenarios log only errors by default"
    );
    let Command::Scenario {
        scenario:
            Scenario::Testbed {
                json,
                seed,
                time_scale,
                policies,
            },
    } = cli.command
    else {
        panic!("parsed as another command");
    };
    assert_eq!(
        policies,
        [
            RunKind::Static,
            RunKind::Nave(nave_api::PlacementPolicy::WorstFit)
        ]
    );
    assert_eq!((json, seed, time_scale), (None, DEFAULT_SEED, 120.0));
    for bad in ["0", "601", "fast"] {
        let error = Cli::try_parse_from(["nave-sim", "scenario", "testbed", "--time-scale", bad])
            .expect_err("refused")
            .to_string();
        assert!(error.contains(bad), "the error names {bad:?}: {error}");
    }
}
