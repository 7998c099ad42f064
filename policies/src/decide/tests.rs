//! Each placement rule on a small fleet, then the worked examples.

use std::time::Duration;

use super::*;
use crate::fixtures::*;
use crate::{
    Bursting, Demand, LabelSelector, LabelSelectorOperator, Limit, Origin, Resources, Taint, TaintEffect,
    Toleration, TolerationOperator,
};

/// Replicas per cluster, clusters with none left out.
fn placed(decision: &Decision) -> Vec<(&str, u32)> {
    decision
        .assignment
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect()
}

fn line(decision: &Decision, cluster: &str) -> String {
    decision
        .cluster(cluster)
        .map(ToString::to_string)
        .unwrap_or_else(|| panic!("no explanation for {cluster}"))
}

fn rank_of(decision: &Decision, cluster: &str) -> usize {
    decision
        .cluster(cluster)
        .and_then(|c| c.rank)
        .map_or(0, |r| r.position)
}

fn three_sizes() -> Fleet {
    // Room for 1-core replicas: big 16, mid 6, small 4.
    fleet([
        mk_cluster("big").cpu(16),
        mk_cluster("mid").cpu(6),
        mk_cluster("small").cpu(4),
    ])
}

// ---- Worked examples -------------------------------------------------------------------------

#[test]
fn worked_example_worst_fit_and_best_fit_differ_on_the_same_fleet() {
    let fleet = three_sizes();
    let worst = ask(5).on(&fleet);
    let best = ask(5).best_fit().on(&fleet);
    assert_eq!(
        placed(&worst),
        [("big", 5)],
        "worst-fit should pick the most room; seen\n{worst}"
    );
    assert_eq!(
        placed(&best),
        [("mid", 5)],
        "best-fit should pick the least room that takes 5; seen\n{best}"
    );
    assert_eq!(
        line(&best, "small"),
        "small: best-fit rank 3 of 3, room for 4 replicas (cpu-bound), given 0 \
         (not needed, earlier clusters took every replica)"
    );
}

#[test]
fn worked_example_node_selector_matches_nodes_in_one_cluster_only() {
    let fleet = fleet([
        mk_cluster("eu-1").group(node_group(&[("accelerator", "gpu")], 2, 8, 32)),
        mk_cluster("eu-2").cpu(32),
        mk_cluster("us-1").cpu(32),
    ]);
    let mut demand = Demand::new(2000, 4 * GIB);
    demand.node_selector = labels(&[("accelerator", "gpu")]);
    let decision = ask(6).demand(demand).on(&fleet);
    assert_eq!(
        placed(&decision),
        [("eu-1", 6)],
        "only eu-1 has gpu nodes; seen\n{decision}"
    );
    assert_eq!(
        line(&decision, "eu-1"),
        "eu-1: worst-fit rank 1 of 3, room for 8 replicas (cpu-bound, 2 of 3 nodes eligible), given 6 \
         (+6 in policy order)"
    );
    assert_eq!(
        decision
            .cluster("us-1")
            .and_then(|c| c.room.clone())
            .map(|r| r.limit),
        Some(Limit::NoMatchingNode),
        "us-1 should be explained by the selector; seen\n{decision}"
    );
}

#[test]
fn worked_example_nothing_fits_places_nothing_and_reports_every_replica_unplaced() {
    let fleet = fleet([mk_cluster("eu-1").cpu(2), mk_cluster("eu-2").cpu(3).mem_gib(64)]);
    let decision = ask(3).each(4000, 1024).on(&fleet);
    assert!(
        decision.assignment.is_empty(),
        "nothing should be placed; seen\n{decision}"
    );
    assert_eq!(decision.unplaced, 3, "all 3 unplaced; seen\n{decision}");
    assert_eq!(
        line(&decision, "eu-2"),
        "eu-2: worst-fit rank 2 of 2, no room (cpu-bound), given 0 (no room)"
    );
    assert!(
        decision
            .to_string()
            .starts_with("worst-fit: 3 replica(s) asked, 0 placed on 0 cluster(s), 3 unplaced"),
        "summary should say what was not placed; seen\n{decision}"
    );
}

#[test]
fn worked_example_webster_division_with_weights() {
    let fleet = fleet([
        mk_cluster("ap").cpu(64),
        mk_cluster("eu").cpu(64),
        mk_cluster("us").cpu(64),
    ]);
    let exact = ask(12).weights(&[("eu", 3), ("us", 2), ("ap", 1)]).on(&fleet);
    assert_eq!(
        placed(&exact),
        [("ap", 2), ("eu", 6), ("us", 4)],
        "12 in 3:2:1; seen\n{exact}"
    );
    // 53:24:23 for 7 replicas: largest-remainder and D'Hondt give 4:2:1, Sainte-Laguë 3:2:2.
    let uneven = ask(7).weights(&[("eu", 53), ("us", 24), ("ap", 23)]).on(&fleet);
    assert_eq!(
        placed(&uneven),
        [("ap", 2), ("eu", 3), ("us", 2)],
        "Sainte-Laguë 3:2:2; seen\n{uneven}"
    );
    let tie = ask(4).weights(&[("eu", 1), ("us", 1), ("ap", 1)]).on(&fleet);
    assert_eq!(
        placed(&tie),
        [("ap", 2), ("eu", 1), ("us", 1)],
        "a tie goes to the earlier name; seen\n{tie}"
    );
    assert_eq!(
        line(&exact, "us"),
        "us: weight 2, worst-fit rank 3 of 3, room for 64 replicas (cpu-bound), given 4 (+4 by weight (Webster))"
    );
}

#[test]
fn explanation_reads_as_a_sentence() {
    let fleet = fleet([
        mk_cluster("eu-1").cpu(12),
        mk_cluster("eu-2").cpu(8),
        mk_cluster("eu-3").cpu(4),
    ]);
    let decision = ask(4).current(&[("eu-1", 4)]).on(&fleet);
    assert_eq!(
        line(&decision, "eu-1"),
        "eu-1: worst-fit rank 1 of 3, room for 12 replicas (cpu-bound), given 4 (kept 4 existing, nothing new to place)"
    );
}

// ---- Filters ---------------------------------------------------------------------------------

#[test]
fn allow_list_keeps_other_clusters_out() {
    let decision = ask(5).allow(&["small"]).on(&three_sizes());
    assert_eq!(
        placed(&decision),
        [("small", 4)],
        "only small is allowed and it fits 4; seen\n{decision}"
    );
    assert_eq!(decision.unplaced, 1);
    assert_eq!(
        line(&decision, "big"),
        "big: filtered out: not in the clusters allow-list, given 0"
    );
}

#[test]
fn cluster_selector_filters_by_labels_and_expressions() {
    let fleet = fleet([
        mk_cluster("eu-1").region("eu").label("tier", "gold"),
        mk_cluster("eu-2").region("eu").label("tier", "bronze"),
        mk_cluster("eu-3").region("eu").label("pci", "yes"),
        mk_cluster("us-1").region("us").label("tier", "gold"),
    ]);
    let selector = LabelSelector {
        match_labels: labels(&[(crate::REGION_LABEL, "eu")]),
        match_expressions: vec![
            label_req("tier", LabelSelectorOperator::NotIn, &["bronze"]),
            label_req("pci", LabelSelectorOperator::DoesNotExist, &[]),
        ],
    };
    let decision = ask(3).selector(selector).on(&fleet);
    assert_eq!(
        placed(&decision),
        [("eu-1", 3)],
        "only eu-1 matches; seen\n{decision}"
    );
    assert_eq!(
        line(&decision, "us-1"),
        "us-1: filtered out: clusterSelector needs topology.kubernetes.io/region=eu (is us), given 0"
    );
    assert_eq!(
        line(&decision, "eu-2"),
        "eu-2: filtered out: clusterSelector needs tier notin (bronze) (is bronze), given 0"
    );
    assert_eq!(
        line(&decision, "eu-3"),
        "eu-3: filtered out: clusterSelector needs !pci (is yes), given 0"
    );
}

fn drain() -> Taint {
    Taint::new("nave.dev/drain", "", TaintEffect::NoExecute)
}

fn tolerate_drain() -> Toleration {
    Toleration {
        key: "nave.dev/drain".to_owned(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: Some(TaintEffect::NoExecute),
    }
}

#[test]
fn a_no_schedule_taint_keeps_new_replicas_out_and_lets_those_there_stay() {
    let dedicated = Taint::new("dedicated", "batch", TaintEffect::NoSchedule);
    let fleet = fleet([
        mk_cluster("eu-1").cpu(16).tainted(dedicated, 0),
        mk_cluster("eu-2").cpu(4),
    ]);
    let decision = ask(6).current(&[("eu-1", 2)]).on(&fleet);
    assert_eq!(placed(&decision), vec![("eu-1", 2), ("eu-2", 4)]);
    assert!(
        line(&decision, "eu-1").contains("taint dedicated=batch:NoSchedule not tolerated"),
        "{}",
        line(&decision, "eu-1")
    );
    let tolerated = ask(6)
        .current(&[("eu-1", 2)])
        .tolerate(
            Toleration {
                key: "dedicated".to_owned(),
                operator: TolerationOperator::Equal,
                value: "batch".to_owned(),
                effect: None,
            },
            None,
        )
        .on(&fleet);
    assert_eq!(
        placed(&tolerated),
        vec![("eu-1", 6)],
        "a toleration lets it take replicas"
    );
}

#[test]
fn a_no_execute_taint_moves_the_replicas_there_to_clusters_with_room() {
    let fleet = fleet([
        mk_cluster("eu-1").cpu(16).tainted(drain(), 0),
        mk_cluster("eu-2").cpu(16),
    ]);
    let decision = ask(4).current(&[("eu-1", 4)]).on(&fleet);
    assert_eq!(placed(&decision), vec![("eu-2", 4)]);
    assert!(
        line(&decision, "eu-1")
            .contains("taint nave.dev/drain:NoExecute not tolerated: its replicas move away"),
        "{}",
        line(&decision, "eu-1")
    );
    let everywhere = ask(1)
        .strategy(Strategy::Everywhere)
        .current(&[("eu-1", 1), ("eu-2", 1)])
        .on(&fleet);
    assert_eq!(
        placed(&everywhere),
        vec![("eu-2", 1)],
        "everywhere: the drained cluster runs none"
    );
}

#[test]
fn a_no_execute_taint_moves_only_what_fits_elsewhere_and_the_rest_stays() {
    // eu-2 has room for 3 replicas of 1 CPU.
    let fleet = fleet([
        mk_cluster("eu-1").cpu(16).tainted(drain(), 0),
        mk_cluster("eu-2").cpu(3),
    ]);
    let decision = ask(5).each(1000, 64).current(&[("eu-1", 5)]).on(&fleet);
    assert_eq!(placed(&decision), vec![("eu-1", 2), ("eu-2", 3)]);
    assert_eq!(decision.unplaced, 0, "nothing is dropped for the drain");
    assert!(
        decision
            .to_string()
            .contains("2 replica(s) stay in eu-1 despite its taint"),
        "{decision}"
    );
}

#[test]
fn a_no_execute_taint_tolerated_for_a_while_keeps_replicas_that_long_and_takes_no_new_ones() {
    let young = fleet([
        mk_cluster("eu-1").cpu(16).tainted(drain(), 30),
        mk_cluster("eu-2").cpu(16),
    ]);
    let asked = ask(6)
        .current(&[("eu-1", 2)])
        .tolerate(tolerate_drain(), Some(60));
    let decision = asked.on(&young);
    assert_eq!(
        placed(&decision),
        vec![("eu-1", 2), ("eu-2", 4)],
        "stays, takes nothing new"
    );
    assert!(
        line(&decision, "eu-1").contains("tolerated for 60 s"),
        "{}",
        line(&decision, "eu-1")
    );
    assert_eq!(
        crate::toleration_expires_in(&young.get("eu-1").unwrap().taints, &asked.0.policy.tolerations),
        Some(Duration::from_secs(30))
    );
    let old = fleet([
        mk_cluster("eu-1").cpu(16).tainted(drain(), 61),
        mk_cluster("eu-2").cpu(16),
    ]);
    let decision = asked.on(&old);
    assert_eq!(
        placed(&decision),
        vec![("eu-2", 6)],
        "moves once the time has passed"
    );
    let first_decides = ask(6)
        .current(&[("eu-1", 2)])
        .tolerate(tolerate_drain(), Some(60))
        .tolerate(
            Toleration {
                operator: TolerationOperator::Exists,
                ..Toleration::default()
            },
            None,
        )
        .on(&old);
    assert_eq!(
        placed(&first_decides),
        vec![("eu-2", 6)],
        "as for pods, the first matching toleration decides: 60 s, not the catch-all's forever"
    );
    let forever = ask(6)
        .current(&[("eu-1", 2)])
        .tolerate(tolerate_drain(), None)
        .on(&old);
    assert!(
        forever
            .cluster("eu-1")
            .is_some_and(|c| c.filter.is_none() && c.replicas >= 2),
        "tolerated for good: an ordinary cluster, {}",
        line(&forever, "eu-1")
    );
}

#[test]
fn cordoned_cluster_keeps_its_replicas_and_gets_no_new_ones() {
    let fleet = fleet([mk_cluster("eu-1").cpu(16).cordoned(), mk_cluster("eu-2").cpu(4)]);
    let decision = ask(6).current(&[("eu-1", 2)]).on(&fleet);
    assert_eq!(
        placed(&decision),
        [("eu-1", 2), ("eu-2", 4)],
        "eu-1 keeps 2, eu-2 takes the rest; seen\n{decision}"
    );
    assert_eq!(
        line(&decision, "eu-1"),
        "eu-1: filtered out: cordoned (unschedulable), room for 16 replicas (cpu-bound), given 2 (kept 2 existing)"
    );
}

#[test]
fn an_unaccepted_cluster_gets_nothing_and_its_replicas_move_away() {
    let fleet = fleet([mk_cluster("eu-1").cpu(16).unaccepted(), mk_cluster("eu-2").cpu(8)]);
    let decision = ask(5).current(&[("eu-1", 3)]).on(&fleet);
    assert_eq!(placed(&decision), [("eu-2", 5)], "seen\n{decision}");
    assert_eq!(
        decision.cluster("eu-1").and_then(|c| c.filter.clone()),
        Some(Filter::NotAccepted)
    );
    assert!(
        line(&decision, "eu-1").contains("not accepted into the fleet by its admin"),
        "{}",
        line(&decision, "eu-1")
    );
}

#[test]
fn not_ready_cluster_keeps_its_replicas_and_gets_no_new_ones() {
    let fleet = fleet([mk_cluster("eu-1").cpu(16).not_ready(), mk_cluster("eu-2").cpu(8)]);
    let decision = ask(5).current(&[("eu-1", 3)]).on(&fleet);
    assert_eq!(placed(&decision), [("eu-1", 3), ("eu-2", 2)], "seen\n{decision}");
    assert_eq!(
        decision.cluster("eu-1").and_then(|c| c.filter.clone()),
        Some(Filter::NotReady)
    );
}

#[test]
fn capacity_unknown_is_filtered_with_a_reason() {
    let fleet = fleet([mk_cluster("new").unknown_capacity(), mk_cluster("old").cpu(2)]);
    let decision = ask(3).on(&fleet);
    assert_eq!(placed(&decision), [("old", 2)], "seen\n{decision}");
    assert_eq!(decision.unplaced, 1);
    assert_eq!(
        line(&decision, "new"),
        "new: filtered out: capacity unknown (no agent report yet), given 0"
    );
}

#[test]
fn burst_only_cluster_is_used_only_for_overflow() {
    let fleet = fleet([
        mk_cluster("burst").cpu(64).burst_only(),
        mk_cluster("eu-1").cpu(4),
    ]);
    let fits = ask(4).on(&fleet);
    assert_eq!(
        placed(&fits),
        [("eu-1", 4)],
        "the regular cluster has room; seen\n{fits}"
    );
    assert_eq!(
        line(&fits, "burst"),
        "burst: burst-only, room for 64 replicas (cpu-bound), given 0 (not needed, regular clusters had room)"
    );
    let overflows = ask(6).on(&fleet);
    assert_eq!(
        placed(&overflows),
        [("burst", 2), ("eu-1", 4)],
        "2 overflow to burst; seen\n{overflows}"
    );
    assert_eq!(
        line(&overflows, "burst"),
        "burst: burst-only, burst rank 1 of 1 (no proximity data), room for 64 replicas (cpu-bound), given 2 \
         (+2 burst)"
    );
}

#[test]
fn bursting_targets_selector_makes_matching_clusters_burst_targets() {
    let fleet = fleet([
        mk_cluster("cloud").cpu(64).label("cost", "high"),
        mk_cluster("onprem").cpu(4),
    ]);
    let targets = LabelSelector {
        match_labels: labels(&[("cost", "high")]),
        ..LabelSelector::default()
    };
    let decision = ask(6)
        .bursting(Bursting {
            threshold_percent: None,
            targets: Some(targets),
        })
        .on(&fleet);
    assert_eq!(
        placed(&decision),
        [("cloud", 2), ("onprem", 4)],
        "cloud only takes overflow; seen\n{decision}"
    );
}

#[test]
fn cluster_above_the_bursting_threshold_overflows_to_burst_targets() {
    let fleet = fleet([
        mk_cluster("busy").cpu(10).requested(9000, 0, 9),
        mk_cluster("burst").cpu(64).burst_only(),
    ]);
    let decision = ask(1)
        .bursting(Bursting {
            threshold_percent: Some(80),
            targets: None,
        })
        .on(&fleet);
    assert_eq!(
        placed(&decision),
        [("burst", 1)],
        "busy is at 90% > 80%; seen\n{decision}"
    );
    assert_eq!(
        line(&decision, "busy"),
        "busy: filtered out: utilization 90% above the bursting threshold 80%, room for 1 replica (cpu-bound), \
         utilization cpu 90%, memory 0%, given 0"
    );
    let measured = fleet_with_usage();
    let by_usage = ask(1)
        .bursting(Bursting {
            threshold_percent: Some(80),
            targets: None,
        })
        .on(&measured);
    assert_eq!(
        placed(&by_usage),
        [("burst", 1)],
        "measured usage should count over requests; seen\n{by_usage}"
    );
}

fn fleet_with_usage() -> Fleet {
    fleet([
        mk_cluster("busy").cpu(10).usage(Resources::new(8500, 0, 0)),
        mk_cluster("burst").cpu(64).burst_only(),
    ])
}

/// Two clusters of 8 cores: `quiet-by-requests` has the most room by requests but measured
/// usage of 7 cores; `reserved` has 3 cores requested and nearly nothing used.
fn busy_by_usage_fleet() -> Fleet {
    fleet([
        mk_cluster("quiet-by-requests")
            .cpu(8)
            .requested(500, 0, 2)
            .usage(Resources::new(7000, 0, 2)),
        mk_cluster("reserved")
            .cpu(8)
            .requested(3000, 0, 3)
            .usage(Resources::new(100, 0, 3)),
    ])
}

#[test]
fn worst_fit_ranks_by_measured_headroom_when_usage_is_tighter_than_requests() {
    let by_requests = fleet([
        mk_cluster("quiet-by-requests").cpu(8).requested(500, 0, 2),
        mk_cluster("reserved").cpu(8).requested(3000, 0, 3),
    ]);
    let blind = ask(2).max(1).on(&by_requests);
    assert_eq!(
        placed(&blind),
        [("quiet-by-requests", 2)],
        "by requests alone the cluster with 7.5 free cores wins; seen\n{blind}"
    );
    let measured = ask(2).max(1).on(&busy_by_usage_fleet());
    assert_eq!(
        placed(&measured),
        [("reserved", 2)],
        "7 of 8 cores are in use in quiet-by-requests; seen\n{measured}"
    );
    assert_eq!(
        line(&measured, "quiet-by-requests"),
        "quiet-by-requests: worst-fit rank 2 of 2 (by measured usage: headroom for 1 replica), \
         room for 7 replicas (cpu-bound), given 0 (beyond maxClusters=1)"
    );
    assert_eq!(
        line(&measured, "reserved"),
        "reserved: worst-fit rank 1 of 2, room for 5 replicas (cpu-bound), given 2 (+2 in policy order)",
        "where requests are the tighter bound the room is the score, as without usage"
    );
}

#[test]
fn measured_headroom_ranks_but_never_adds_beyond_the_room_by_requests() {
    // Usage below requests: the scheduler still admits by requests, so room is what fills.
    let fleet = fleet([mk_cluster("idle")
        .cpu(4)
        .requested(3000, 0, 3)
        .usage(Resources::new(200, 0, 3))]);
    let decision = ask(3).on(&fleet);
    assert_eq!(
        (placed(&decision), decision.unplaced),
        (vec![("idle", 1)], 2),
        "one core free by requests takes one replica; seen\n{decision}"
    );
}

#[test]
fn best_fit_packs_by_measured_headroom() {
    // By requests both have 6 cores free; by usage `busy` has 3, just enough for 3 replicas.
    let fleet = fleet([
        mk_cluster("busy")
            .cpu(8)
            .requested(2000, 0, 2)
            .usage(Resources::new(5000, 0, 2)),
        mk_cluster("calm").cpu(8).requested(2000, 0, 2),
    ]);
    let decision = ask(3).best_fit().on(&fleet);
    assert_eq!(
        placed(&decision),
        [("busy", 3)],
        "best-fit takes the least headroom that still fits; seen\n{decision}"
    );
    assert_eq!(rank_of(&decision, "busy"), 1, "seen\n{decision}");
}

#[test]
fn measured_usage_trips_the_bursting_threshold_and_says_so() {
    let decision = ask(2)
        .bursting(Bursting {
            threshold_percent: Some(50),
            targets: None,
        })
        .on(&busy_by_usage_fleet());
    assert_eq!(
        placed(&decision),
        [("reserved", 2)],
        "quiet-by-requests is 87% used; seen\n{decision}"
    );
    assert_eq!(
        line(&decision, "quiet-by-requests"),
        "quiet-by-requests: filtered out: utilization 87% above the bursting threshold 50%, \
         room for 7 replicas (cpu-bound), utilization cpu 87%, memory 0% (measured usage), given 0"
    );
}

#[test]
fn clusters_dropped_from_the_placement_have_their_replicas_moved() {
    let fleet = fleet([mk_cluster("eu-1").cpu(8), mk_cluster("eu-2").cpu(8)]);
    let decision = ask(5)
        .allow(&["eu-2"])
        .current(&[("eu-1", 3), ("eu-2", 2), ("gone", 1)])
        .on(&fleet);
    assert_eq!(
        placed(&decision),
        [("eu-2", 5)],
        "eu-1 and gone's replicas move to eu-2; seen\n{decision}"
    );
    assert_eq!(
        line(&decision, "eu-1"),
        "eu-1: filtered out: not in the clusters allow-list, given 0 (-3 moved away)"
    );
    assert_eq!(
        line(&decision, "gone"),
        "gone: filtered out: not in the fleet, given 0 (-1 moved away)"
    );
}

// ---- Strategies --------------------------------------------------------------------------------

#[test]
fn best_fit_with_no_cluster_big_enough_fills_the_largest_first() {
    let decision = ask(20).best_fit().on(&three_sizes());
    assert_eq!(
        placed(&decision),
        [("big", 16), ("mid", 4)],
        "fewest clusters; seen\n{decision}"
    );
}

#[test]
fn proximity_ranks_by_latency_then_distance_then_region() {
    let fleet = fleet([
        mk_cluster("origin").region("eu").zone("eu-a").at(50.1, 8.7),
        mk_cluster("slow").latency("origin", 30).at(50.1, 8.7),
        mk_cluster("fast").latency("origin", 10).at(-33.9, 151.2),
        mk_cluster("close").at(48.9, 2.4),
        mk_cluster("far").at(40.7, -74.0).region("eu"),
        mk_cluster("zone").region("eu").zone("eu-a"),
        mk_cluster("region").region("eu"),
        mk_cluster("none"),
    ]);
    let decision = ask(1).near(Origin::Cluster("origin".into())).on(&fleet);
    let order: Vec<usize> = ["origin", "fast", "slow", "close", "far", "zone", "region", "none"]
        .iter()
        .map(|c| rank_of(&decision, c))
        .collect();
    assert_eq!(
        order,
        [1, 2, 3, 4, 5, 6, 7, 8],
        "expected latency, then distance, then labels; seen\n{decision}"
    );
    assert_eq!(placed(&decision), [("origin", 1)]);
    assert_eq!(
        line(&decision, "fast"),
        "fast: proximity rank 2 of 8 (10.0 ms, 16484 km), room for 8 replicas (cpu-bound), given 0 \
         (not needed, earlier clusters took every replica)"
    );
}

#[test]
fn proximity_ranks_by_latency_measured_or_estimated_before_distance_and_labels() {
    let fleet = fleet([
        mk_cluster("origin").region("eu").at(50.1, 8.7).network(0.0, 0.0),
        // Measured 40 ms; the estimate from coordinates (2 ms) is never used when measured.
        mk_cluster("measured").latency("origin", 40).network(0.0, 0.0),
        // Never measured against the origin: its coordinates put it 20 + 2 ms away.
        mk_cluster("estimated").network(20.0, 0.0).at(-33.9, 151.2),
        // Coordinates too, but untrusted ones (too few links): only the distance counts.
        mk_cluster("untrusted").at(48.9, 2.4).region("eu"),
        mk_cluster("labelled").region("eu"),
    ]);
    let mut untrusted = fleet.get("untrusted").cloned().expect("untrusted");
    untrusted.network = Some(crate::NetworkCoordinate {
        position: [1.0, 0.0],
        height: 1.0,
        error: 0.0,
        links: 2,
    });
    let mut fleet = fleet;
    fleet.insert(untrusted);
    let decision = ask(1).near(Origin::Cluster("origin".into())).on(&fleet);
    let order: Vec<usize> = ["origin", "estimated", "measured", "untrusted", "labelled"]
        .iter()
        .map(|c| rank_of(&decision, c))
        .collect();
    assert_eq!(
        order,
        [1, 2, 3, 4, 5],
        "expected latency by value (estimated 22 ms before measured 40 ms), then distance, then labels; \
         seen\n{decision}"
    );
    assert_eq!(
        line(&decision, "estimated"),
        "estimated: proximity rank 2 of 5 (~22.0 ms estimated, 16484 km), room for 8 replicas (cpu-bound), \
         given 0 (not needed, earlier clusters took every replica)"
    );
}

#[test]
fn overflow_goes_to_the_burst_cluster_nearest_by_measured_latency_not_by_map() {
    let fleet = fleet([
        mk_cluster("eu-1").cpu(4).at(50.1, 8.7),
        // Next door on the map, but a slow path.
        mk_cluster("burst-next-door")
            .cpu(64)
            .burst_only()
            .at(48.9, 2.4)
            .latency("eu-1", 80),
        // Across the ocean, but a fast path.
        mk_cluster("burst-fast")
            .cpu(64)
            .burst_only()
            .at(40.7, -74.0)
            .latency("eu-1", 12),
    ]);
    let decision = ask(6).on(&fleet);
    assert_eq!(
        placed(&decision),
        [("burst-fast", 2), ("eu-1", 4)],
        "expected the overflow on the burst cluster measured nearest to eu-1; seen\n{decision}"
    );
}

#[test]
fn proximity_to_a_region_prefers_its_zone_then_the_region() {
    let fleet = fleet([
        mk_cluster("a-other").region("us").cpu(64),
        mk_cluster("b-region").region("eu").zone("eu-b").cpu(2),
        mk_cluster("c-zone").region("eu").zone("eu-a").cpu(2),
    ]);
    let origin = Origin::Region {
        region: "eu".into(),
        zone: Some("eu-a".into()),
    };
    let decision = ask(5).near(origin).on(&fleet);
    assert_eq!(
        placed(&decision),
        [("a-other", 1), ("b-region", 2), ("c-zone", 2)],
        "seen\n{decision}"
    );
}

#[test]
fn proximity_to_coordinates_prefers_the_nearest() {
    let fleet = fleet([
        mk_cluster("frankfurt").at(50.1, 8.7),
        mk_cluster("sydney").at(-33.9, 151.2),
    ]);
    let decision = ask(2)
        .near(Origin::Coordinates(crate::Coordinates::new(48.9, 2.4)))
        .on(&fleet);
    assert_eq!(
        placed(&decision),
        [("frankfurt", 2)],
        "Paris is nearer Frankfurt; seen\n{decision}"
    );
}

#[test]
fn spread_divides_as_evenly_as_capacity_allows() {
    let fleet = fleet([
        mk_cluster("a").cpu(2),
        mk_cluster("b").cpu(16),
        mk_cluster("c").cpu(16),
    ]);
    let decision = ask(10).spread().on(&fleet);
    assert_eq!(
        placed(&decision),
        [("a", 2), ("b", 4), ("c", 4)],
        "a is capped at 2; seen\n{decision}"
    );
}

#[test]
fn spread_with_max_clusters_uses_the_roomiest() {
    let fleet = fleet([
        mk_cluster("a").cpu(2),
        mk_cluster("b").cpu(16),
        mk_cluster("c").cpu(16),
    ]);
    let decision = ask(5).spread().max(2).on(&fleet);
    assert_eq!(
        placed(&decision),
        [("b", 3), ("c", 2)],
        "remainder to the earlier name; seen\n{decision}"
    );
    assert_eq!(
        decision.cluster("a").and_then(|c| c.idle),
        Some(Idle::BeyondMaxClusters(2))
    );
}

#[test]
fn max_clusters_fills_the_chosen_then_overflows_to_the_nearest() {
    let fleet = fleet([
        mk_cluster("eu-1").cpu(8).region("eu"),
        mk_cluster("eu-2").cpu(4).region("eu"),
        mk_cluster("us-1").cpu(6).region("us"),
    ]);
    let decision = ask(10).max(1).on(&fleet);
    assert_eq!(
        placed(&decision),
        [("eu-1", 8), ("eu-2", 2)],
        "overflow near eu-1, not the roomier us-1; seen\n{decision}"
    );
    assert!(
        decision
            .notes
            .contains(&Note::OverflowBeyondMaxClusters { max: 1 }),
        "the overflow should be noted; seen\n{decision}"
    );
    let within = ask(8).max(1).on(&fleet);
    assert_eq!(placed(&within), [("eu-1", 8)], "seen\n{within}");
    assert_eq!(
        within.cluster("us-1").and_then(|c| c.idle),
        Some(Idle::BeyondMaxClusters(1))
    );
}

#[test]
fn min_clusters_shares_replicas_among_the_first_clusters() {
    let fleet = fleet([
        mk_cluster("a").cpu(32),
        mk_cluster("b").cpu(16),
        mk_cluster("c").cpu(8),
    ]);
    let decision = ask(10).min(3).on(&fleet);
    assert_eq!(
        placed(&decision),
        [("a", 4), ("b", 3), ("c", 3)],
        "seen\n{decision}"
    );
    let few = ask(2).min(3).on(&fleet);
    assert_eq!(placed(&few), [("a", 1), ("b", 1)], "seen\n{few}");
    assert!(
        few.notes.is_empty(),
        "2 replicas cannot be on 3 clusters; no note expected; seen\n{few}"
    );
    let small = fleet_of_one();
    let unmet = ask(4).min(2).on(&small);
    assert!(
        unmet
            .notes
            .contains(&Note::MinClustersNotMet { min: 2, reached: 1 }),
        "expected a note; seen\n{unmet}"
    );
}

fn fleet_of_one() -> Fleet {
    fleet([mk_cluster("only").cpu(8)])
}

#[test]
fn weights_cap_at_room_and_overflow_to_unweighted_clusters() {
    let fleet = fleet([
        mk_cluster("a").cpu(2),
        mk_cluster("b").cpu(8),
        mk_cluster("c").cpu(8),
    ]);
    let decision = ask(12).weights(&[("a", 1), ("b", 1)]).on(&fleet);
    assert_eq!(
        placed(&decision),
        [("a", 2), ("b", 8), ("c", 2)],
        "seen\n{decision}"
    );
    assert_eq!(
        decision.cluster("c").map(|c| c.changes.clone()),
        Some(vec![Change::Added {
            replicas: 2,
            why: Addition::Overflow { near: None }
        }])
    );
}

// ---- Steady changes ----------------------------------------------------------------------------

#[test]
fn scale_up_places_only_the_new_replicas() {
    let decision = ask(9).current(&[("small", 3), ("mid", 2)]).on(&three_sizes());
    assert_eq!(
        placed(&decision),
        [("big", 4), ("mid", 2), ("small", 3)],
        "seen\n{decision}"
    );
}

#[test]
fn unchanged_request_changes_nothing() {
    let decision = ask(5).current(&[("small", 3), ("mid", 2)]).on(&three_sizes());
    assert_eq!(placed(&decision), [("mid", 2), ("small", 3)], "seen\n{decision}");
    assert!(
        decision.clusters.iter().all(|c| c.changes.is_empty()),
        "no change expected; seen\n{decision}"
    );
}

#[test]
fn scale_down_empties_burst_clusters_first_then_removes_proportionally() {
    let fleet = fleet([
        mk_cluster("eu-1"),
        mk_cluster("eu-2"),
        mk_cluster("burst").burst_only(),
    ]);
    let decision = ask(8)
        .current(&[("eu-1", 6), ("eu-2", 3), ("burst", 2)])
        .on(&fleet);
    assert_eq!(placed(&decision), [("eu-1", 5), ("eu-2", 3)], "seen\n{decision}");
    assert_eq!(
        line(&decision, "burst"),
        "burst: burst-only, room for 8 replicas (cpu-bound), given 0 (-2 scale-down, burst clusters first)"
    );
    let half = ask(3).current(&[("eu-1", 6), ("eu-2", 3)]).on(&fleet);
    assert_eq!(
        placed(&half),
        [("eu-1", 2), ("eu-2", 1)],
        "6:3 becomes 2:1; seen\n{half}"
    );
}

#[test]
fn scale_down_with_weights_restores_the_weighted_ratio() {
    let fleet = fleet([mk_cluster("a"), mk_cluster("b"), mk_cluster("c")]);
    let decision = ask(4)
        .weights(&[("a", 1), ("b", 1)])
        .current(&[("a", 2), ("b", 4), ("c", 2)])
        .on(&fleet);
    assert_eq!(
        placed(&decision),
        [("a", 2), ("b", 2)],
        "unweighted c first, then b; seen\n{decision}"
    );
}

#[test]
fn evacuate_moves_stuck_replicas_to_other_clusters() {
    let fleet = fleet([mk_cluster("eu-1").cpu(16), mk_cluster("eu-2").cpu(8)]);
    let decision = ask(6)
        .current(&[("eu-1", 4), ("eu-2", 2)])
        .evacuate("eu-1", 3)
        .on(&fleet);
    assert_eq!(
        placed(&decision),
        [("eu-1", 1), ("eu-2", 5)],
        "3 leave eu-1 for eu-2; seen\n{decision}"
    );
    assert_eq!(
        line(&decision, "eu-1"),
        "eu-1: filtered out: evacuating, room for 16 replicas (cpu-bound), given 1 (kept 1 existing, -3 evacuated)"
    );
}

#[test]
fn what_does_not_fit_is_placed_partly_and_counted() {
    let decision = ask(30).on(&three_sizes());
    assert_eq!(
        placed(&decision),
        [("big", 16), ("mid", 6), ("small", 4)],
        "seen\n{decision}"
    );
    assert_eq!(decision.unplaced, 4, "26 fit, 4 do not; seen\n{decision}");
}

// ---- Capacity in a decision ----------------------------------------------------------------------

#[test]
fn ledger_keeps_two_decisions_in_a_row_from_sharing_room() {
    let fleet = fleet([mk_cluster("eu-1").cpu(8)]);
    let mut ledger = Ledger::new();
    let first = ask(5).0;
    let a = decide(&fleet, &ledger, &first);
    ledger.record("default/a", &first.demand, &a);
    let b = decide(&fleet, &ledger, &ask(5).0);
    assert_eq!(
        (a.placed(), b.placed(), b.unplaced),
        (5, 3, 2),
        "8 cores shared by two decisions; seen\n{a}\n{b}"
    );
}

#[test]
fn each_cluster_counts_its_own_reservations_and_no_others() {
    // Reserved: 2 cores in "b", 3 in "d", and room in clusters the fleet does not have, before,
    // between and after its names.
    let fleet = fleet(["b", "c", "d", "f"].map(|name| mk_cluster(name).cpu(8)));
    let demand = ask(1).0.demand;
    let mut ledger = Ledger::new();
    for (cluster, cores) in [("a", 1), ("b", 2), ("bb", 4), ("d", 3), ("e", 5), ("z", 6)] {
        ledger.reserve(cluster, "default/earlier", &demand, cores);
    }
    let decision = decide(&fleet, &ledger, &ask(1).0);
    let room: Vec<(&str, u64)> = decision
        .clusters
        .iter()
        .map(|c| (&*c.cluster, c.room.as_ref().map_or(0, |r| r.replicas)))
        .collect();
    assert_eq!(
        room,
        [("b", 6), ("c", 8), ("d", 5), ("f", 8)],
        "each cluster's room less its own reservations; seen\n{decision}"
    );
}

#[test]
fn tolerations_open_tainted_nodes() {
    let fleet = fleet([
        mk_cluster("spot").node_taint(Taint::new("spot", "true", TaintEffect::NoSchedule)),
        mk_cluster("soft")
            .cpu(2)
            .node_taint(Taint::new("busy", "", TaintEffect::PreferNoSchedule)),
    ]);
    let blocked = ask(4).on(&fleet);
    assert_eq!(
        placed(&blocked),
        [("soft", 2)],
        "only the PreferNoSchedule cluster; seen\n{blocked}"
    );
    assert_eq!(
        line(&blocked, "spot"),
        "spot: worst-fit rank 2 of 2, no room (taint spot=true:NoSchedule not tolerated), given 0 (no room)"
    );
    let mut demand = Demand::new(1000, GIB);
    demand.tolerations.push(Toleration {
        key: "spot".into(),
        operator: TolerationOperator::Exists,
        ..Toleration::default()
    });
    let tolerated = ask(4).demand(demand).on(&fleet);
    assert_eq!(placed(&tolerated), [("spot", 4)], "seen\n{tolerated}");
}

// ---- Everywhere ------------------------------------------------------------------------------

fn everywhere(per_cluster: u32) -> Ask {
    ask(per_cluster).strategy(Strategy::Everywhere)
}

#[test]
fn everywhere_puts_the_count_in_every_eligible_cluster_burst_ones_included() {
    let fleet = fleet([
        mk_cluster("eu-1").cpu(16),
        mk_cluster("eu-2").cpu(4),
        mk_cluster("spare").cpu(8).burst_only(),
        mk_cluster("us-1").cpu(16).label("env", "test"),
    ]);
    let decision = everywhere(2)
        .selector(LabelSelector {
            match_expressions: vec![label_req("env", LabelSelectorOperator::DoesNotExist, &[])],
            ..LabelSelector::default()
        })
        .on(&fleet);
    assert_eq!(
        placed(&decision),
        [("eu-1", 2), ("eu-2", 2), ("spare", 2)],
        "2 in each matching cluster, whatever its room or role; seen\n{decision}"
    );
    assert_eq!(decision.replicas, 6, "asked is the count times the clusters");
    assert_eq!(decision.unplaced, 0);
    assert_eq!(
        line(&decision, "eu-2"),
        "eu-2: room for 4 replicas (cpu-bound), given 2 (+2 every eligible cluster runs the same count)"
    );
    assert!(
        decision
            .to_string()
            .starts_with("everywhere: 6 replica(s) asked, 6 placed on 3 cluster(s)"),
        "{decision}"
    );
}

#[test]
fn everywhere_follows_the_fleet_and_the_count() {
    let fleet = fleet([
        mk_cluster("a").cpu(8),
        mk_cluster("b").cpu(8),
        mk_cluster("c").cpu(8),
    ]);
    // A cluster joined (c), the count went from 3 to 2, and nothing moves between clusters.
    let decision = everywhere(2).current(&[("a", 3), ("b", 3)]).on(&fleet);
    assert_eq!(
        placed(&decision),
        [("a", 2), ("b", 2), ("c", 2)],
        "seen\n{decision}"
    );
    assert!(
        line(&decision, "a").contains("-1 scale-down to the count every cluster runs"),
        "{}",
        line(&decision, "a")
    );
    // A cluster stopped matching the selector: its replicas go, no other cluster takes them.
    let decision = everywhere(2)
        .allow(&["a", "c"])
        .current(&[("a", 2), ("b", 2), ("c", 2)])
        .on(&fleet);
    assert_eq!(placed(&decision), [("a", 2), ("c", 2)], "seen\n{decision}");
    assert_eq!(decision.replicas, 4);
}

#[test]
fn everywhere_keeps_what_a_lost_or_cordoned_cluster_runs_and_counts_a_short_one_unplaced() {
    let fleet = fleet([
        mk_cluster("full").cpu(1),
        mk_cluster("lost").cpu(8).not_ready(),
        mk_cluster("maint").cpu(8).cordoned(),
        mk_cluster("ok").cpu(8),
    ]);
    let decision = everywhere(3).current(&[("lost", 3), ("maint", 1)]).on(&fleet);
    assert_eq!(
        placed(&decision),
        [("full", 1), ("lost", 3), ("maint", 1), ("ok", 3)],
        "seen\n{decision}"
    );
    assert_eq!(decision.unplaced, 2, "full has room for 1 of 3");
    assert_eq!(decision.replicas, 3 + 3 + 1 + 3);
    assert!(
        decision.to_string().contains(
            "note: full has room for 1 of the 3 replica(s) every cluster runs; the rest wait for room there"
        ),
        "{decision}"
    );
}

// ---- Traffic -----------------------------------------------------------------------------------

fn by_traffic(values: &[(&str, f64)]) -> Strategy {
    Strategy::Traffic(crate::Traffic::new(
        values.iter().map(|(c, v)| ((*c).to_owned(), *v)).collect(),
        crate::TrafficScope::Workload,
    ))
}

#[test]
fn traffic_divides_replicas_by_where_requests_arrive() {
    let fleet = fleet([mk_cluster("eu"), mk_cluster("us"), mk_cluster("ap").cpu(32)]);
    let decision = ask(10)
        .strategy(by_traffic(&[("eu", 60.0), ("us", 40.0)]))
        .on(&fleet);
    assert_eq!(
        placed(&decision),
        [("eu", 6), ("us", 4)],
        "6:4 as the traffic, none where no traffic arrives however roomy; seen\n{decision}"
    );
    assert_eq!(
        rank_of(&decision, "eu"),
        1,
        "the most traffic ranks first; seen\n{decision}"
    );
    assert!(
        line(&decision, "eu").contains("traffic 60.000, 60% of it")
            && line(&decision, "eu").contains("by its share of the traffic (Webster)"),
        "the explanation names the traffic; seen\n{decision}"
    );
    assert!(
        line(&decision, "ap").contains("no traffic arrives here, overflow only"),
        "seen\n{decision}"
    );
    assert!(
        decision
            .summary()
            .starts_with("traffic (by the workload's own traffic)"),
        "seen\n{decision}"
    );
}

#[test]
fn traffic_overflows_nearest_to_where_it_arrives_when_its_clusters_are_full() {
    let fleet = fleet([
        mk_cluster("eu").cpu(2).at(50.1, 8.7),
        mk_cluster("eu-near").at(48.9, 2.4),
        mk_cluster("us-far").at(40.7, -74.0),
    ]);
    let decision = ask(5).strategy(by_traffic(&[("eu", 10.0)])).on(&fleet);
    assert_eq!(
        placed(&decision),
        [("eu", 2), ("eu-near", 3)],
        "the full traffic cluster overflows to its nearest; seen\n{decision}"
    );
    assert!(
        line(&decision, "eu-near").contains("overflow, nearest to eu"),
        "seen\n{decision}"
    );
}

#[test]
fn traffic_without_any_measured_places_as_worst_fit_and_says_so() {
    let fleet = three_sizes();
    let decision = ask(5).strategy(by_traffic(&[("big", 0.0)])).on(&fleet);
    let worst = ask(5).on(&fleet);
    assert_eq!(placed(&decision), placed(&worst), "seen\n{decision}");
    assert!(decision.notes.contains(&Note::NoTraffic), "seen\n{decision}");
    assert!(
        decision
            .to_string()
            .contains("no traffic measured for this workload"),
        "seen\n{decision}"
    );
}

#[test]
fn traffic_keeps_min_clusters_and_scales_down_where_least_traffic_arrives() {
    let fleet = fleet([mk_cluster("a"), mk_cluster("b"), mk_cluster("c")]);
    let decision = ask(6).min(2).strategy(by_traffic(&[("a", 100.0)])).on(&fleet);
    assert_eq!(
        placed(&decision),
        [("a", 5), ("b", 1)],
        "one replica in a second cluster for minClusters=2, the rest where the traffic is; seen\n{decision}"
    );
    let down = ask(4)
        .strategy(by_traffic(&[("a", 50.0), ("b", 50.0)]))
        .current(&[("a", 2), ("b", 2), ("c", 2)])
        .on(&fleet);
    assert_eq!(
        placed(&down),
        [("a", 2), ("b", 2)],
        "the cluster without traffic gives up its replicas first; seen\n{down}"
    );
}

#[test]
fn traffic_is_steady_existing_replicas_stay_when_it_shifts() {
    let fleet = fleet([mk_cluster("a"), mk_cluster("b")]);
    let decision = ask(6)
        .strategy(by_traffic(&[("a", 10.0), ("b", 90.0)]))
        .current(&[("a", 4), ("b", 2)])
        .on(&fleet);
    assert_eq!(placed(&decision), [("a", 4), ("b", 2)], "seen\n{decision}");
    let up = ask(10)
        .strategy(by_traffic(&[("a", 10.0), ("b", 90.0)]))
        .current(&[("a", 4), ("b", 2)])
        .on(&fleet);
    assert_eq!(
        placed(&up),
        [("a", 4), ("b", 6)],
        "a scale-up gives the new replicas to the cluster short of its share; seen\n{up}"
    );
}

#[test]
fn traffic_scale_down_keeps_min_clusters() {
    let fleet = fleet([mk_cluster("a"), mk_cluster("b"), mk_cluster("c")]);
    let down = ask(5)
        .min(2)
        .strategy(by_traffic(&[("a", 100.0)]))
        .current(&[("a", 5), ("b", 1)])
        .on(&fleet);
    assert_eq!(
        placed(&down),
        [("a", 4), ("b", 1)],
        "the replica minClusters put in b stays; seen\n{down}"
    );
}

// ---- StatefulSets: ordinal order ---------------------------------------------------------------

#[test]
fn a_statefulset_scales_down_from_its_highest_ordinals() {
    let fleet = three_sizes();
    // Ordinals: small 0-1, big 2-4, mid 5-6. Proportional removal would take from big.
    let decision = ask(4)
        .current(&[("small", 2), ("big", 3), ("mid", 2)])
        .ordinals(&["small", "big", "mid"])
        .on(&fleet);
    assert_eq!(
        placed(&decision),
        [("big", 2), ("small", 2)],
        "mid's two, then big's top one, should go; seen\n{decision}"
    );
    assert!(
        line(&decision, "mid").contains("highest ordinals first"),
        "{}",
        line(&decision, "mid")
    );
}

#[test]
fn a_statefulset_grows_only_in_its_top_cluster_or_clusters_without_replicas() {
    // worst-fit would add to big, which holds the lowest ordinals.
    let fleet = three_sizes();
    let decision = ask(6)
        .current(&[("big", 2), ("small", 2)])
        .ordinals(&["big", "small"])
        .on(&fleet);
    assert_eq!(
        placed(&decision),
        [("big", 2), ("mid", 2), ("small", 2)],
        "small (top, room for 4 with 2 running: 2 free) and mid should grow, not big; seen\n{decision}"
    );
    assert_eq!(
        decision.cluster("big").and_then(|c| c.filter.clone()),
        Some(Filter::LowerOrdinals {
            top: "small".to_owned()
        }),
        "{}",
        line(&decision, "big")
    );
    // Without ordinals the same request grows big.
    let free = ask(6).current(&[("big", 2), ("small", 2)]).on(&fleet);
    assert_eq!(free.replicas_in("big"), 4, "{free}");
}

#[test]
fn a_statefulset_goes_only_to_clusters_whose_kubernetes_keeps_its_ordinals() {
    let mut fleet = three_sizes();
    for (name, minor) in [("big", Some(26)), ("mid", None), ("small", Some(31))] {
        let mut cluster = fleet.get(name).expect("in the fleet").clone();
        cluster.kubernetes_minor = minor;
        fleet.insert(cluster);
    }
    let mut ask = ask(3);
    ask.0.min_kubernetes_minor = Some(27);
    let decision = ask.on(&fleet);
    assert_eq!(placed(&decision), [("small", 3)], "{decision}");
    assert!(
        line(&decision, "big").contains("Kubernetes 1.26, older than the 1.27"),
        "{}",
        line(&decision, "big")
    );
    assert!(
        line(&decision, "mid").contains("Kubernetes version unknown"),
        "{}",
        line(&decision, "mid")
    );
}

#[test]
fn an_explanation_names_the_clusters_that_matter_and_counts_the_others_in_a_large_fleet() {
    // 60 clusters: c00..c49 with growing room, ten not Ready, ten without a capacity report.
    let fleet = fleet((0..60).map(|i| {
        let cluster = mk_cluster(&format!("c{i:02}")).cpu(4 + i as u64);
        match i {
            50..=54 => cluster.not_ready(),
            55..=59 => cluster.unknown_capacity(),
            _ => cluster,
        }
    }));
    let decision = ask(3).current(&[("c03", 1)]).on(&fleet);
    let named = decision.named();
    let names: Vec<&str> = named.clusters.iter().map(|c| &*c.cluster).collect();
    assert_eq!(names.len(), Decision::NAMED_CLUSTERS, "named: {names:?}");
    // Those holding replicas, and the one that held some, whatever their rank.
    for held in decision.assignment.keys().map(String::as_str).chain(["c03"]) {
        assert!(names.contains(&held), "{held} holds replicas: {names:?}");
    }
    // The best ranked, and one cluster for each reason others were filtered out.
    assert!(names.contains(&"c48"), "the second best ranked: {names:?}");
    assert!(names.contains(&"c50") && names.contains(&"c55"), "{names:?}");
    assert!(!names.contains(&"c20"), "ranked too low to name: {names:?}");
    assert_eq!(
        named.eligible_left_out + named.filtered_left_out.values().sum::<usize>(),
        60 - Decision::NAMED_CLUSTERS
    );
    assert_eq!(
        named.filtered_left_out,
        [("capacity unknown", 4), ("not Ready", 4)].into()
    );
    let text = decision.to_string();
    assert_eq!(text.lines().count(), 1 + Decision::NAMED_CLUSTERS + 1, "{text}");
    assert!(
        text.contains(&format!(
            "{} more cluster(s): {} eligible, given nothing; 8 filtered out (capacity unknown 4, not Ready 4)",
            60 - Decision::NAMED_CLUSTERS,
            named.eligible_left_out
        )),
        "{text}"
    );
    // A small fleet is named whole.
    let small = ask(3).on(&three_sizes());
    assert_eq!(small.named().clusters.len(), 3);
    assert!(!small.to_string().contains("more cluster"));
}
