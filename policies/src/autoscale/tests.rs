//! The HPA's rules, one at a time, on a clock in seconds.

use super::*;

fn at(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

/// Utilization `current` % against a target of 50 %, measured over every replica.
fn cpu(current: f64) -> [Measurement; 1] {
    [Measurement {
        current,
        target: 50.0,
        measured: u32::MAX,
    }]
}

/// One evaluation, and the change recorded as the caller records it once made.
fn run(
    a: &mut Autoscaler,
    now: Duration,
    current: u32,
    m: &[Measurement],
    min: u32,
    max: u32,
    b: &Behavior,
) -> Step {
    let step = a.step(now, current, m, min, max, b);
    a.record(now, current, step.desired);
    step
}

#[test]
fn replicas_follow_the_ratio_and_ignore_what_is_within_the_tolerance() {
    let behavior = Behavior::default();
    let mut a = Autoscaler::new();
    let step = run(&mut a, at(0), 4, &cpu(54.0), 1, 100, &behavior);
    assert_eq!(
        (step.desired, step.limit),
        (4, None),
        "8% over target is within 10%: {step:?}"
    );
    let step = run(&mut a, at(15), 4, &cpu(75.0), 1, 100, &behavior);
    assert_eq!(step.proposed, 6, "4 × 1.5");
    assert_eq!((step.desired, step.limit), (6, None), "{step:?}");
    let two = [
        Measurement {
            current: 60.0,
            target: 50.0,
            measured: u32::MAX,
        },
        Measurement {
            current: 300.0,
            target: 100.0,
            measured: u32::MAX,
        },
    ];
    let step = run(&mut Autoscaler::new(), at(0), 6, &two, 1, 100, &behavior);
    assert_eq!(step.proposed, 18, "the metric that asks for most wins: 6 × 3");
    assert_eq!(step.ratio, Some(3.0));
}

#[test]
fn scale_up_is_limited_to_double_or_four_more_per_fifteen_seconds_by_default() {
    let behavior = Behavior::default();
    let mut a = Autoscaler::new();
    let step = run(&mut a, at(0), 2, &cpu(500.0), 1, 100, &behavior);
    assert_eq!(step.proposed, 20);
    assert_eq!(
        (step.desired, step.limit),
        (6, Some(Limit::ScaleUpRate(6))),
        "max(2 × 2, 2 + 4) = 6: {step:?}"
    );
    let step = run(&mut a, at(5), 6, &cpu(500.0), 1, 100, &behavior);
    assert_eq!(
        step.desired, 6,
        "the 4 added 5 s ago count against this period: {step:?}"
    );
    let step = run(&mut a, at(16), 6, &cpu(500.0), 1, 100, &behavior);
    assert_eq!(step.desired, 12, "a new period: 6 doubled: {step:?}");
}

#[test]
fn scale_down_waits_for_the_highest_proposal_of_five_minutes() {
    let behavior = Behavior::default();
    let mut a = Autoscaler::new();
    assert_eq!(run(&mut a, at(0), 10, &cpu(50.0), 1, 100, &behavior).desired, 10);
    let step = run(&mut a, at(60), 10, &cpu(10.0), 1, 100, &behavior);
    assert_eq!(step.proposed, 2);
    assert_eq!(
        (step.desired, step.limit),
        (10, Some(Limit::Stabilized(10))),
        "the proposal of 10 a minute ago holds: {step:?}"
    );
    let step = run(&mut a, at(301), 10, &cpu(10.0), 1, 100, &behavior);
    assert_eq!(
        step.desired, 2,
        "five minutes on, only low proposals remain: {step:?}"
    );
}

#[test]
fn policies_limit_a_scale_down_per_period_and_disabled_forbids_it() {
    let behavior = Behavior {
        up: Rules::default_up(),
        down: Rules {
            stabilization: Duration::ZERO,
            policies: vec![
                ScalingPolicy {
                    change: Change::Pods(2),
                    period: Duration::from_secs(60),
                },
                ScalingPolicy {
                    change: Change::Percent(10),
                    period: Duration::from_secs(60),
                },
            ],
            select: Select::Min,
        },
    };
    let mut a = Autoscaler::new();
    let step = run(&mut a, at(0), 30, &cpu(5.0), 1, 100, &behavior);
    assert_eq!(
        (step.desired, step.limit),
        (28, Some(Limit::ScaleDownRate(28))),
        "selectPolicy Min: the smaller change, 2 pods rather than 10% (3): {step:?}"
    );
    let step = run(&mut a, at(30), 28, &cpu(5.0), 1, 100, &behavior);
    assert_eq!(step.desired, 28, "both removed within the minute count: {step:?}");
    let step = run(&mut a, at(61), 28, &cpu(5.0), 1, 100, &behavior);
    assert_eq!(step.desired, 26);

    let frozen = Behavior {
        down: Rules {
            select: Select::Disabled,
            ..Rules::default_down()
        },
        ..Behavior::default()
    };
    let step = run(&mut Autoscaler::new(), at(0), 10, &cpu(5.0), 1, 100, &frozen);
    assert_eq!(step.desired, 10, "scale-down disabled: {step:?}");
}

#[test]
fn bounds_win_and_zero_replicas_stay_zero() {
    let behavior = Behavior::default();
    let step = run(&mut Autoscaler::new(), at(0), 4, &cpu(500.0), 1, 5, &behavior);
    assert_eq!(
        (step.desired, step.limit),
        (5, Some(Limit::TooMany(5))),
        "{step:?}"
    );
    let step = run(&mut Autoscaler::new(), at(0), 1, &cpu(50.0), 3, 10, &behavior);
    assert_eq!(
        (step.desired, step.limit),
        (3, Some(Limit::TooFew(3))),
        "below min: at once: {step:?}"
    );
    let step = run(&mut Autoscaler::new(), at(0), 12, &cpu(50.0), 1, 8, &behavior);
    assert_eq!(
        (step.desired, step.limit),
        (8, Some(Limit::TooMany(8))),
        "above max: at once: {step:?}"
    );
    let step = run(&mut Autoscaler::new(), at(0), 0, &cpu(500.0), 0, 8, &behavior);
    assert_eq!(step.desired, 0, "scaled to zero by someone: stays");
    let step = run(&mut Autoscaler::new(), at(0), 4, &[], 1, 8, &behavior);
    assert_eq!((step.desired, step.limit), (4, None), "no metrics, no change");
}

#[test]
fn metrics_from_outside_cannot_make_it_panic_or_overflow() {
    let behavior = Behavior::default();
    let odd = [
        Measurement {
            current: f64::NAN,
            target: 50.0,
            measured: u32::MAX,
        },
        Measurement {
            current: f64::INFINITY,
            target: 50.0,
            measured: u32::MAX,
        },
        Measurement {
            current: -5.0,
            target: 50.0,
            measured: u32::MAX,
        },
        Measurement {
            current: 5.0,
            target: 0.0,
            measured: u32::MAX,
        },
    ];
    let step = run(&mut Autoscaler::new(), at(0), 4, &odd, 1, 8, &behavior);
    assert_eq!((step.desired, step.ratio), (4, None), "nothing usable: {step:?}");
    let overflowing = [Measurement {
        current: 1e300,
        target: 1e-300,
        measured: u32::MAX,
    }];
    let step = run(&mut Autoscaler::new(), at(0), 4, &overflowing, 1, 8, &behavior);
    assert_eq!(
        (step.desired, step.ratio),
        (4, None),
        "an infinite ratio is no measurement: {step:?}"
    );
    let huge = [Measurement {
        current: 1e300,
        target: 1.0,
        measured: u32::MAX,
    }];
    let step = run(&mut Autoscaler::new(), at(0), 4, &huge, 1, u32::MAX, &behavior);
    assert_eq!(step.proposed, u32::MAX);
    assert_eq!(
        step.desired, 8,
        "the rate still applies: max(4 × 2, 4 + 4): {step:?}"
    );
}

proptest::proptest! {
    /// Whatever the metrics and the history: a workload with replicas ends within the bounds,
    /// and a step never goes beyond what the proposal and the current count span (bounds aside).
    #[test]
    fn every_step_stays_within_the_bounds_and_between_current_and_proposal(
        steps in proptest::collection::vec((0u64..120, 0.0f64..400.0), 1..40),
        start in 1u32..50,
        min in 1u32..10,
        span in 0u32..40,
    ) {
        let max = min + span;
        let behavior = Behavior::default();
        let mut a = Autoscaler::new();
        let (mut now, mut current) = (Duration::ZERO, start);
        for (dt, utilization) in steps {
            now += Duration::from_secs(dt);
            let step = run(&mut a, now, current, &cpu(utilization), min, max, &behavior);
            proptest::prop_assert!((min..=max).contains(&step.desired), "{step:?} outside {min}..={max}");
            let (low, high) = (current.min(step.proposed).max(min).min(max), current.max(step.proposed).min(max).max(min));
            proptest::prop_assert!(
                (low..=high).contains(&step.desired),
                "{step:?} from {current} outside {low}..={high}"
            );
            current = step.desired;
        }
    }
}

#[test]
fn replicas_not_measured_yet_do_not_make_a_scale_up_repeat() {
    // 2 measured replicas at 150% of a 50% target asked for 6; the 4 new ones are not measured
    // yet: counted as using nothing, the 6 are at the target, so nothing more is asked.
    let busy = [Measurement {
        current: 150.0,
        target: 50.0,
        measured: 2,
    }];
    assert_eq!(propose(6, &busy), (Some(3.0), Some(6)));
    // Idle measured replicas with unmeasured ones: those count as at the target.
    let idle = [Measurement {
        current: 10.0,
        target: 50.0,
        measured: 2,
    }];
    assert_eq!(propose(6, &idle), (Some(0.2), Some(5)), "(0.2 × 2 + 4) / 6 of 6");
    assert_eq!(propose(2, &idle), (Some(0.2), Some(1)));
    let none = [Measurement {
        current: 10.0,
        target: 50.0,
        measured: 0,
    }];
    assert_eq!(
        propose(4, &none),
        (None, None),
        "nothing measured proposes nothing"
    );
}

#[test]
fn a_new_autoscaler_holds_a_scale_down_for_the_window_from_first_sight() {
    let behavior = Behavior::default();
    let mut a = Autoscaler::new();
    let step = run(&mut a, at(0), 10, &cpu(5.0), 1, 100, &behavior);
    assert_eq!(
        step.desired, 10,
        "the replicas at first sight count as a proposal: {step:?}"
    );
    let step = run(&mut a, at(301), 10, &cpu(5.0), 1, 100, &behavior);
    assert_eq!(step.desired, 1, "five minutes later: {step:?}");
}

#[test]
fn a_period_starts_from_the_replicas_before_every_change_made_in_it() {
    let behavior = Behavior {
        up: Rules {
            stabilization: Duration::ZERO,
            policies: vec![ScalingPolicy {
                change: Change::Pods(4),
                period: Duration::from_secs(60),
            }],
            select: Select::Max,
        },
        down: Rules {
            stabilization: Duration::ZERO,
            ..Rules::default_down()
        },
    };
    let mut a = Autoscaler::new();
    // Up 10 -> 14, then down 14 -> 12 (by someone else's edit, recorded), within the minute:
    // the period started at 10 + 2 removed - 4 added... = 10, so at most 14 now.
    a.record(at(0), 10, 14);
    a.record(at(10), 14, 12);
    let step = run(&mut a, at(20), 12, &cpu(500.0), 1, 100, &behavior);
    assert_eq!(step.desired, 14, "{step:?}");
}
