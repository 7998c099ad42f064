//! Properties that hold for every fleet and request: generated, not hand-picked.

use proptest::prelude::*;
use proptest::strategy::Strategy;

use super::*;
use crate::fixtures::*;
use crate::{Coordinates, Origin, Policy, REGION_LABEL};

const NAMES: [&str; 8] = ["a-1", "a-2", "b-1", "b-2", "c-1", "c-2", "d-1", "d-2"];

#[derive(Debug, Clone)]
struct Shape {
    cores: u64,
    nodes: usize,
    used_cores: u64,
    region: &'static str,
    at: Option<(f64, f64)>,
    /// 0 regular, 1 burst-only, 2 cordoned, 3 not ready, 4 capacity unknown, 5 tainted
    /// `dedicated=batch:NoSchedule`, 6 tainted `drain:NoExecute` (100 s ago).
    kind: u8,
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        0u64..16,
        0usize..4,
        0u64..8,
        prop::sample::select(vec!["eu", "us"]),
        prop::option::of((-60.0f64..60.0, -170.0f64..170.0)),
        prop::sample::select(vec![0u8, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 6]),
    )
        .prop_map(|(cores, nodes, used_cores, region, at, kind)| Shape {
            cores,
            nodes,
            used_cores,
            region,
            at,
            kind,
        })
}

fn build_fleet(shapes: &[Shape]) -> Fleet {
    fleet(shapes.iter().zip(NAMES).map(|(s, name)| {
        let mut c = mk_cluster(name)
            .cpu(s.cores)
            .nodes(s.nodes)
            .requested(s.used_cores.min(s.cores) * 1000, 0, 0)
            .region(s.region);
        if let Some((lat, lon)) = s.at {
            c = c.at(lat, lon);
        }
        match s.kind {
            1 => c.burst_only(),
            2 => c.cordoned(),
            3 => c.not_ready(),
            4 => c.unknown_capacity(),
            5 => c.tainted(
                crate::Taint::new("dedicated", "batch", crate::TaintEffect::NoSchedule),
                0,
            ),
            6 => c.tainted(crate::Taint::new("drain", "", crate::TaintEffect::NoExecute), 100),
            _ => c,
        }
    }))
}

fn strategy() -> impl Strategy<Value = crate::Strategy> {
    prop_oneof![
        Just(crate::Strategy::WorstFit),
        Just(crate::Strategy::BestFit),
        Just(crate::Strategy::Spread),
        Just(crate::Strategy::Everywhere),
        Just(crate::Strategy::Proximity(Origin::Cluster("b-1".into()))),
        Just(crate::Strategy::Proximity(Origin::Region {
            region: "us".into(),
            zone: None
        })),
        Just(crate::Strategy::Proximity(Origin::Coordinates(Coordinates::new(
            50.0, 8.0
        )))),
        prop::collection::btree_map(prop::sample::select(NAMES.to_vec()), 0.0f64..100.0, 0..4).prop_map(
            |by_cluster| crate::Strategy::Traffic(crate::Traffic::new(
                by_cluster.into_iter().map(|(c, v)| (c.to_owned(), v)).collect(),
                crate::TrafficScope::Workload,
            ))
        ),
    ]
}

prop_compose! {
    fn request()(
        replicas in 0u32..60,
        cpu in prop::sample::select(vec![0u64, 250, 1000, 1500, 3000]),
        strategy in strategy(),
        max in prop::option::of(1u32..5),
        min in prop::option::of(1u32..4),
        weights in prop::option::of(prop::collection::btree_map(prop::sample::select(NAMES.to_vec()), 0u32..5, 0..4)),
        allow in prop::option::of(prop::collection::vec(prop::sample::select(NAMES.to_vec()), 1..5)),
        only_region in prop::option::of(prop::sample::select(vec!["eu", "us"])),
        current in prop::collection::btree_map(
            prop::sample::select([NAMES.as_slice(), &["gone"]].concat()), 0u32..12, 0..5),
        evacuate in prop::option::of((prop::sample::select(NAMES.to_vec()), 1u32..5)),
        threshold in prop::option::of(10u32..100),
        tolerate_dedicated in any::<bool>(),
        tolerate_drain in prop::option::of(prop::option::of(0u64..200)),
    ) -> Request {
        let mut ask = ask(replicas).each(cpu, 512).strategy(strategy);
        if let Some(max) = max { ask = ask.max(max) }
        if let Some(min) = min { ask = ask.min(min) }
        if let Some(weights) = weights { ask = ask.weights(&weights.into_iter().collect::<Vec<_>>()) }
        if let Some(allow) = allow { ask = ask.allow(&allow) }
        if let Some(region) = only_region {
            ask = ask.selector(crate::LabelSelector {
                match_labels: labels(&[(REGION_LABEL, region)]),
                ..Default::default()
            });
        }
        if let Some((cluster, n)) = evacuate { ask = ask.evacuate(cluster, n) }
        ask.0.policy.bursting.threshold_percent = threshold;
        if tolerate_dedicated {
            ask = ask.tolerate(crate::Toleration { key: "dedicated".into(), value: "batch".into(), ..Default::default() }, None);
        }
        if let Some(seconds) = tolerate_drain {
            let drain = crate::Toleration { key: "drain".into(), operator: crate::TolerationOperator::Exists, ..Default::default() };
            ask = ask.tolerate(drain, seconds);
        }
        ask.0.current = current.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        ask.0
    }
}

/// The request as a pure size change on `fleet`: no filter or evacuation moves anything.
fn plain(request: &Request, fleet: &Fleet) -> Request {
    Request {
        policy: Policy {
            clusters: Vec::new(),
            cluster_selector: None,
            // Every taint tolerated for good.
            tolerations: vec![crate::ClusterToleration {
                toleration: crate::Toleration {
                    operator: crate::TolerationOperator::Exists,
                    ..Default::default()
                },
                seconds: None,
            }],
            ..request.policy.clone()
        },
        evacuate: Default::default(),
        current: request
            .current
            .iter()
            .filter(|(k, _)| fleet.get(k).is_some())
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        ..request.clone()
    }
}

fn moved(decision: &Decision) -> bool {
    decision.clusters.iter().flat_map(|c| &c.changes).any(|ch| {
        matches!(
            ch,
            Change::Removed {
                why: Removal::MovedAway | Removal::Evacuated,
                ..
            }
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn never_more_than_asked_and_every_replica_accounted_for(
        shapes in prop::collection::vec(shape(), 1..8), request in request(),
    ) {
        let d = decide(&build_fleet(&shapes), &Ledger::new(), &request);
        if request.policy.strategy != crate::Strategy::Everywhere {
            prop_assert_eq!(d.replicas, request.replicas, "asked is the request's total\n{}", d);
        }
        prop_assert!(d.placed() <= d.replicas, "placed {} of {} asked\n{d}", d.placed(), d.replicas);
        prop_assert_eq!(d.placed() + d.unplaced, d.replicas, "placed + unplaced should be asked\n{}", d);
    }

    #[test]
    fn everywhere_gives_each_eligible_cluster_the_count_or_all_its_room(
        shapes in prop::collection::vec(shape(), 1..8), request in request(),
    ) {
        let request = Request { policy: Policy { strategy: crate::Strategy::Everywhere, ..request.policy.clone() }, ..request };
        let d = decide(&build_fleet(&shapes), &Ledger::new(), &request);
        let per = request.replicas;
        for c in &d.clusters {
            let room = c.room.as_ref().map_or(0, |r| r.replicas);
            match &c.filter {
                None if c.replicas < per => prop_assert_eq!(u64::from(c.added()), room, "{} is short but did not get all its room\n{}", &c.cluster, &d),
                None => prop_assert_eq!(c.replicas, per, "{}\n{}", &c.cluster, &d),
                Some(f) if f.moves_replicas_away() => prop_assert_eq!(c.replicas, 0, "{}\n{}", &c.cluster, &d),
                // Evacuated replicas leave as asked; none come back in the same decision.
                Some(_) if request.evacuate.contains_key(&*c.cluster) => prop_assert!(c.replicas <= c.previous.min(per), "{}\n{}", &c.cluster, &d),
                Some(_) => prop_assert_eq!(c.replicas, c.previous.min(per), "{} keeps what it has, up to the count\n{}", &c.cluster, &d),
            }
        }
    }

    #[test]
    fn no_cluster_gets_more_than_fits(shapes in prop::collection::vec(shape(), 1..8), request in request()) {
        let d = decide(&build_fleet(&shapes), &Ledger::new(), &request);
        for c in &d.clusters {
            if let Some(room) = &c.room {
                prop_assert!(u64::from(c.added()) <= room.replicas, "{} got {} new, room {}\n{d}", c.cluster, c.added(), room.replicas);
            }
            if c.previous == 0 {
                let room = c.room.as_ref().map_or(0, |r| r.replicas);
                prop_assert!(u64::from(c.replicas) <= room, "{} holds {} with room {}\n{d}", c.cluster, c.replicas, room);
            }
        }
    }

    #[test]
    fn the_same_input_gives_the_same_output(shapes in prop::collection::vec(shape(), 1..8), request in request()) {
        let fleet = build_fleet(&shapes);
        let reversed: Fleet = fleet.iter().rev().cloned().collect();
        let first = decide(&fleet, &Ledger::new(), &request);
        let again = decide(&reversed, &Ledger::new(), &request.clone());
        prop_assert_eq!(&first, &again);
        prop_assert_eq!(first.to_string(), again.to_string());
    }

    #[test]
    fn scale_up_never_moves_existing_replicas(shapes in prop::collection::vec(shape(), 1..8), request in request()) {
        let fleet = build_fleet(&shapes);
        let mut request = plain(&request, &fleet);
        request.replicas = request.replicas.max(request.current.values().sum());
        let d = decide(&fleet, &Ledger::new(), &request);
        for c in &d.clusters {
            prop_assert!(c.replicas >= c.previous, "{} went from {} to {}\n{d}", c.cluster, c.previous, c.replicas);
        }
    }

    #[test]
    fn scale_down_never_adds(shapes in prop::collection::vec(shape(), 1..8), request in request()) {
        // The count of `everywhere` is per cluster: scaling in lowers every cluster alike.
        if request.policy.strategy == crate::Strategy::Everywhere {
            return Ok(());
        }
        let fleet = build_fleet(&shapes);
        let mut request = plain(&request, &fleet);
        request.replicas = request.replicas.min(request.current.values().sum());
        let d = decide(&fleet, &Ledger::new(), &request);
        prop_assert!(!moved(&d));
        for c in &d.clusters {
            prop_assert!(c.replicas <= c.previous, "{} went from {} to {}\n{d}", c.cluster, c.previous, c.replicas);
        }
        prop_assert_eq!(d.placed(), request.replicas, "scale-down should land on the asked count\n{}", d);
    }

    #[test]
    fn burst_clusters_empty_first_on_scale_in(shapes in prop::collection::vec(shape(), 1..8), request in request()) {
        // The count of `everywhere` is per cluster: scaling in lowers every cluster alike.
        if request.policy.strategy == crate::Strategy::Everywhere {
            return Ok(());
        }
        let fleet = build_fleet(&shapes);
        let mut request = plain(&request, &fleet);
        request.replicas = request.replicas.min(request.current.values().sum());
        let d = decide(&fleet, &Ledger::new(), &request);
        let regular_lost = d.clusters.iter().any(|c| c.role == Role::Regular && c.replicas < c.previous);
        if regular_lost {
            for c in d.clusters.iter().filter(|c| c.role == Role::Burst) {
                prop_assert_eq!(c.replicas, 0, "burst cluster {} kept replicas while regular ones shrank\n{}", &c.cluster, &d);
            }
        }
    }

    #[test]
    fn filtered_clusters_get_nothing_new(shapes in prop::collection::vec(shape(), 1..8), request in request()) {
        let d = decide(&build_fleet(&shapes), &Ledger::new(), &request);
        for c in d.clusters.iter().filter(|c| c.filter.is_some()) {
            prop_assert_eq!(c.added(), 0, "filtered {} got new replicas\n{}", &c.cluster, &d);
            prop_assert!(c.replicas <= c.previous);
            if c.filter.as_ref().is_some_and(Filter::moves_replicas_away) {
                // A taint moves away only what fits elsewhere, and says what stayed.
                let stayed = d.notes.iter().any(|n| matches!(n, Note::StayForRoom { cluster, replicas }
                    if *cluster == *c.cluster && *replicas == c.replicas));
                prop_assert!(c.replicas == 0 || (matches!(c.filter, Some(Filter::Tainted(_))) && stayed),
                    "{} should have been emptied\n{}", &c.cluster, &d);
            }
        }
    }

    #[test]
    fn a_taint_never_takes_away_a_running_replica_it_cannot_place_elsewhere(
        shapes in prop::collection::vec(shape(), 1..8), request in request(),
    ) {
        if request.policy.strategy == crate::Strategy::Everywhere {
            return Ok(());
        }
        let fleet = build_fleet(&shapes);
        let d = decide(&fleet, &Ledger::new(), &request);
        for c in d.clusters.iter().filter(|c| matches!(&c.filter, Some(Filter::Tainted(v)) if v.evicts)) {
            let removed = c.previous.saturating_sub(c.replicas);
            // Replicas leave a tainted cluster only while nothing is unplaced: those that would
            // be stay where they run.
            prop_assert!(removed == 0 || d.unplaced == 0,
                "{} lost {} replicas while {} are unplaced\n{}", &c.cluster, removed, d.unplaced, &d);
        }
    }

    #[test]
    fn two_decisions_in_a_row_never_share_room(
        shapes in prop::collection::vec(shape(), 1..8), first in request(), second in request(),
    ) {
        let fleet = build_fleet(&shapes);
        let first = Request { current: Default::default(), evacuate: Default::default(), ..first };
        let second = Request { demand: first.demand.clone(), current: Default::default(), ..second };
        let mut ledger = Ledger::new();
        let a = decide(&fleet, &ledger, &first);
        ledger.record("ns/a", &first.demand, &a);
        let b = decide(&fleet, &ledger, &second);
        let alone = decide(&fleet, &Ledger::new(), &Request { replicas: 0, ..second.clone() });
        for c in &alone.clusters {
            let room = c.room.as_ref().map_or(0, |r| r.replicas);
            let both = u64::from(a.replicas_in(&c.cluster)) + u64::from(b.replicas_in(&c.cluster));
            prop_assert!(both <= room.max(u64::from(a.replicas_in(&c.cluster))),
                "{}: {} + {} placed with room {}\n{a}\n{b}", c.cluster, a.replicas_in(&c.cluster), b.replicas_in(&c.cluster), room);
        }
    }
}
