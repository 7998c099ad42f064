//! Room per cluster: per-node minimum over resources, selectors, taints, reservations.

use super::*;
use crate::demand::{Bound, WHOLE_IN_DOUBLES};
use crate::fixtures::*;
use crate::{Capacity, Demand, NodeSelector, NodeSelectorOperator, NodeSelectorTerm, TaintEffect};
use proptest::strategy::Strategy as _;

fn model(cluster: ClusterBuilder) -> CapacityModel {
    match cluster.build().capacity {
        Capacity::Known(model) => model,
        Capacity::Unknown => panic!("fixture should have known capacity"),
    }
}

fn room(cluster: ClusterBuilder, demand: &Demand) -> Room {
    model(cluster).room(demand, &[])
}

#[test]
fn room_is_the_per_node_minimum_summed_over_nodes() {
    // 3 nodes of 8 cores, 10 GiB, 110 pods: cpu allows 4, memory 3 per node.
    let got = room(
        mk_cluster("c").cpu(8).mem_gib(10).nodes(3),
        &Demand::new(2000, 3 * GIB),
    );
    assert_eq!(
        (got.replicas, got.limit.clone()),
        (9, Limit::Memory),
        "expected 3 nodes x 3, memory-bound; seen {got:?}"
    );
}

#[test]
fn room_counts_free_not_allocatable() {
    let got = room(
        mk_cluster("c").cpu(8).requested(6000, 0, 0).nodes(2),
        &Demand::new(1000, GIB),
    );
    assert_eq!(got.replicas, 4, "2 free cores on each of 2 nodes; seen {got:?}");
}

#[test]
fn overcommitted_node_has_no_room_rather_than_negative_room() {
    let got = room(
        mk_cluster("c").cpu(4).requested(6000, 0, 0),
        &Demand::new(1000, GIB),
    );
    assert_eq!(got.replicas, 0, "seen {got:?}");
}

#[test]
fn pod_slots_limit_too() {
    let got = room(mk_cluster("c").pods(10).requested(0, 0, 7), &Demand::new(10, MIB));
    assert_eq!(
        (got.replicas, got.limit.clone()),
        (3, Limit::Pods),
        "seen {got:?}"
    );
}

#[test]
fn a_zero_request_does_not_limit() {
    let got = room(mk_cluster("c").cpu(1).mem_gib(1).pods(50), &Demand::new(0, 0));
    assert_eq!(
        (got.replicas, got.limit.clone()),
        (50, Limit::Pods),
        "only pods should limit; seen {got:?}"
    );
    let cpu_only = room(mk_cluster("c").cpu(4).mem_gib(0), &Demand::new(1000, 0));
    assert_eq!(
        cpu_only.replicas, 4,
        "no memory request, no memory needed; seen {cpu_only:?}"
    );
}

#[test]
fn node_selector_and_affinity_pick_the_node_groups() {
    let cluster = mk_cluster("c")
        .cpu(4)
        .node_label("disk", "hdd")
        .group(node_group(&[("disk", "ssd"), ("gen", "5")], 2, 8, 64))
        .group(node_group(&[("disk", "ssd"), ("gen", "3")], 1, 8, 64));
    let mut demand = Demand::new(1000, GIB);
    demand.node_selector = labels(&[("disk", "ssd")]);
    let got = room(cluster.clone(), &demand);
    assert_eq!(
        (got.replicas, got.nodes_eligible, got.nodes_total),
        (24, 3, 4),
        "seen {got:?}"
    );
    demand.node_affinity = Some(NodeSelector {
        terms: vec![NodeSelectorTerm {
            match_expressions: vec![node_req("gen", NodeSelectorOperator::Gt, &["4"])],
        }],
    });
    let got = room(cluster, &demand);
    assert_eq!(
        (got.replicas, got.nodes_eligible),
        (16, 2),
        "only gen 5 nodes; seen {got:?}"
    );
}

#[test]
fn no_matching_node_and_no_nodes_are_told_apart() {
    let mut demand = Demand::new(1000, GIB);
    demand.node_selector = labels(&[("zone", "x")]);
    assert_eq!(room(mk_cluster("c"), &demand).limit, Limit::NoMatchingNode);
    assert_eq!(room(mk_cluster("c").nodes(0), &demand).limit, Limit::NoNodes);
}

#[test]
fn blocking_taints_exclude_nodes_and_prefer_no_schedule_does_not() {
    let tainted = mk_cluster("c").node_taint(Taint::new("gpu", "", TaintEffect::NoExecute));
    let got = room(tainted, &Demand::new(1000, GIB));
    assert_eq!(got.replicas, 0, "seen {got:?}");
    assert_eq!(
        got.limit,
        Limit::Taint(Box::new(Taint::new("gpu", "", TaintEffect::NoExecute)))
    );
    let soft = mk_cluster("c").node_taint(Taint::new("gpu", "", TaintEffect::PreferNoSchedule));
    assert_eq!(room(soft, &Demand::new(1000, GIB)).replicas, 8);
}

#[test]
fn reservations_take_room_on_nodes_they_can_run_on() {
    let cluster =
        mk_cluster("c")
            .cpu(4)
            .node_label("pool", "a")
            .group(node_group(&[("pool", "b")], 1, 4, 64));
    let mut pinned = Demand::new(1000, GIB);
    pinned.node_selector = labels(&[("pool", "b")]);
    let reserved = [crate::Reservation {
        workload: "ns/pinned".into(),
        demand: pinned.clone(),
        replicas: 3,
    }];
    let anywhere = model(cluster.clone()).room(&Demand::new(1000, GIB), &reserved);
    assert_eq!(
        anywhere.replicas, 5,
        "8 cores minus 3 reserved; seen {anywhere:?}"
    );
    let on_b = model(cluster).room(&pinned, &reserved);
    assert_eq!(on_b.replicas, 1, "the reservation sits on pool b; seen {on_b:?}");
}

#[test]
fn utilization_uses_usage_when_measured_and_counts_reservations() {
    let requested = model(mk_cluster("c").cpu(10).mem_gib(10).requested(5000, 2, 0));
    let u = requested.utilization(&[]);
    assert_eq!(
        (u.cpu_percent(), u.memory_percent(), u.percent()),
        (50, 20, 50),
        "seen {u:?}"
    );
    assert!(
        u.exceeds(49) && !u.exceeds(50),
        "50% is not above 50%; seen {u:?}"
    );
    let reserved = [crate::Reservation {
        workload: "w".into(),
        demand: Demand::new(1000, 0),
        replicas: 3,
    }];
    assert_eq!(requested.utilization(&reserved).cpu_percent(), 80);
    let measured = model(
        mk_cluster("c")
            .cpu(10)
            .requested(5000, 0, 0)
            .usage(Resources::new(1000, 0, 0)),
    );
    assert_eq!(
        measured.utilization(&[]).cpu_percent(),
        10,
        "usage replaces requests"
    );
}

#[test]
fn headroom_counts_what_measured_usage_and_reservations_leave() {
    let plain = model(mk_cluster("c").cpu(10).mem_gib(10));
    assert_eq!(
        plain.headroom(&Demand::new(1000, GIB), &[]),
        None,
        "no usage, no headroom"
    );
    let measured = model(
        mk_cluster("c")
            .cpu(10)
            .mem_gib(10)
            .usage(Resources::new(6000, 8 * GIB, 0)),
    );
    assert_eq!(
        measured.headroom(&Demand::new(1000, 0), &[]),
        Some(4),
        "4 of 10 cores left"
    );
    assert_eq!(
        measured.headroom(&Demand::new(1000, GIB), &[]),
        Some(2),
        "memory binds: 2 GiB left"
    );
    let reserved = [crate::Reservation {
        workload: "w".into(),
        demand: Demand::new(1000, 0),
        replicas: 3,
    }];
    assert_eq!(measured.headroom(&Demand::new(1000, 0), &reserved), Some(1));
    assert_eq!(
        measured.headroom(&Demand::new(0, 0), &[]),
        Some(u64::MAX),
        "a zero request does not limit"
    );
    let over = model(mk_cluster("c").cpu(1).usage(Resources::new(3000, 0, 0)));
    assert_eq!(
        over.headroom(&Demand::new(100, 0), &[]),
        Some(0),
        "usage above allocatable leaves nothing, not an underflow"
    );
    assert!(over.utilization(&[]).measured);
    assert_eq!(
        over.utilization(&[]).to_string(),
        "cpu 300%, memory 0% (measured usage)"
    );
}

#[test]
fn from_nodes_groups_by_labels_and_taints() {
    let node = Node::new(Resources::new(1000, GIB, 10), Resources::ZERO);
    let a = labels(&[("pool", "a")]);
    let model = CapacityModel::from_nodes([
        (a.clone(), vec![], node),
        (labels(&[("pool", "b")]), vec![], node),
        (a.clone(), vec![], node),
        (a, vec![Taint::new("t", "", TaintEffect::NoSchedule)], node),
    ]);
    let sizes: Vec<usize> = model.groups.iter().map(|g| g.nodes.len()).collect();
    assert_eq!(
        sizes,
        [2, 1, 1],
        "expected pool a untainted, pool a tainted, pool b; seen {sizes:?}"
    );
    assert_eq!(model.node_count(), 4);
}

#[test]
fn room_reads_well() {
    let got = room(
        mk_cluster("c")
            .cpu(2)
            .nodes(2)
            .group(node_group(&[("x", "y")], 1, 1, 1)),
        &{
            let mut d = Demand::new(1000, GIB);
            d.node_selector = labels(&[("x", "y")]);
            d
        },
    );
    assert_eq!(
        got.to_string(),
        "room for 1 replica (cpu-bound, 1 of 3 nodes eligible)"
    );
}

proptest::proptest! {
    #[test]
    fn fit_in_is_the_minimum_over_resources_with_cpu_winning_ties(
        cpu in 0u64..20_000, mem in 0u64..(64 * GIB), pods in 0u64..120,
        want_cpu in 0u64..4000, want_mem in 0u64..(4 * GIB),
    ) {
        let demand = Demand::new(want_cpu, want_mem);
        let by = |free: u64, want: u64| free.checked_div(want).unwrap_or(u64::MAX);
        let (c, m) = (by(cpu, want_cpu), by(mem, want_mem));
        let min = c.min(m).min(pods);
        let expected = if c == min { Bound::Cpu } else if m == min { Bound::Memory } else { Bound::Pods };
        let seen = demand.fit_in(Resources::new(cpu, mem, pods));
        proptest::prop_assert_eq!(seen, (min, expected));
    }
}

proptest::proptest! {
    #[test]
    fn a_quotient_by_reciprocal_is_exact_over_the_whole_range(
        n in proptest::prop_oneof![0u64..1_000_000, proptest::num::u64::ANY],
        d in proptest::prop_oneof![1u64..5_000, proptest::num::u64::ANY],
    ) {
        proptest::prop_assert_eq!(crate::demand::Divisor::new(d).quotient(n), n / d);
    }
}

#[test]
fn quotients_at_the_edges_are_exact() {
    use crate::demand::Divisor;
    for (n, d) in [
        (u64::MAX, 1),
        (u64::MAX, 3),
        (u64::MAX - 1, u64::MAX),
        (u64::MAX, u64::MAX),
        ((1 << 50) - 1, 1),
        (1 << 50, 1),
        ((1 << 53) + 1, 3),
        (64 << 30, 1 << 30),
        ((64 << 30) - 1, 1 << 30),
        (0, 7),
    ] {
        assert_eq!(Divisor::new(d).quotient(n), n / d, "{n} / {d}");
    }
    assert_eq!(
        Divisor::new(0).quotient(5),
        u64::MAX,
        "a zero request does not limit"
    );
}

proptest::proptest! {
    #[test]
    fn a_count_in_doubles_is_the_exact_count(
        requests in (
            proptest::prop_oneof![proptest::strategy::Just(0u64), 1u64..5_000, 1u64..WHOLE_IN_DOUBLES],
            proptest::prop_oneof![
                proptest::strategy::Just(0u64),
                (1u64..64).prop_map(|g| g << 30),
                1u64..WHOLE_IN_DOUBLES
            ],
        ),
        amounts in (
            proptest::prop_oneof![0u64..1_000_000, 0u64..WHOLE_IN_DOUBLES],
            proptest::prop_oneof![0u64..(1 << 40), 0u64..WHOLE_IN_DOUBLES],
            proptest::prop_oneof![0u64..250, 0u64..WHOLE_IN_DOUBLES],
        ),
        multiples in (0u64..100_000, 0u64..100_000),
        exact in 0u8..3,
    ) {
        let (cpu_request, memory_request) = requests;
        let (mut cpu, mut memory, pods) = amounts;
        // Exact multiples, and one below them, are the cases the estimate is least sure of; the
        // first is also the common one (64Gi free, 1Gi asked).
        if exact > 0 {
            let below = u64::from(exact == 2);
            let near = |request: u64, multiple: u64| {
                request.saturating_mul(multiple).saturating_sub(below).min(WHOLE_IN_DOUBLES - 1)
            };
            cpu = near(cpu_request, multiples.0);
            memory = near(memory_request, multiples.1);
        }
        let fitter = Demand::new(cpu_request, memory_request).fitter();
        let doubles = fitter.doubles().expect("requests below 2^50 are counted in doubles");
        let (fit, bound) = fitter.fit_in(Resources::new(cpu, memory, pods));
        let tally = doubles.tally(&[cpu as f64], &[memory as f64], &[pods as f64]);
        let exact = Tally {
            replicas: fit,
            cpu_bound: usize::from(bound == Bound::Cpu),
            memory_bound: usize::from(bound == Bound::Memory),
        };
        proptest::prop_assert_eq!(
            tally,
            exact,
            "cpu {} / {}, memory {} / {}, pods {}",
            cpu, cpu_request, memory, memory_request, pods
        );
    }
}

#[test]
fn requests_from_a_pebibyte_are_not_counted_in_doubles() {
    // Amounts at or above the bound are counted exactly too: the layout's property test sends
    // any u64 through both ways.
    assert!(Demand::new(1, WHOLE_IN_DOUBLES - 1).fitter().doubles().is_some());
    assert!(Demand::new(1, WHOLE_IN_DOUBLES).fitter().doubles().is_none());
    assert!(Demand::new(WHOLE_IN_DOUBLES, 1).fitter().doubles().is_none());
}
