//! The HPA's rules, one at a time, on a clock in seconds.

use super::*;

fn at(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

/// Utilization `current` % against a target of 50 %.
fn cpu(current: f64) -> [Measurement; 1] {
    [Measurement {
        current,
        target: 50.0,
    }]
}

#[test]
fn replicas_follow_the_ratio_and_ignore_what_is_within_the_tolerance() {
    let behavior = Behavior::default();
    let mut a = Autoscaler::new();
    let step = a.step(at(0), 4, &cpu(54.0), 1, 100, &behavior);
    assert_eq!(
        (step.desired, step.limit),
        (4, None),
        "8% over target is within 10%: {step:?}"
    );
    let step = a.step(at(15), 4, &cpu(75.0), 1, 100, &behavior);
    assert_eq!(step.proposed, 6, "4 × 1.5");
    assert_eq!((step.desired, step.limit), (6, None), "{step:?}");
    let two = [
        Measurement {
            current: 60.0,
            target: 50.0,
        },
        Measurement {
            current: 300.0,
            target: 100.0,
        },
    ];
    let step = Autoscaler::new().step(at(0), 6, &two, 1, 100, &behavior);
    assert_eq!(step.proposed, 18, "the metric that asks for most wins: 6 × 3");
    assert_eq!(step.ratio, Some(3.0));
}

#[test]
fn scale_up_is_limited_to_double_or_four_more_per_fifteen_seconds_by_default() {
    let behavior = Behavior::default();
    let mut a = Autoscaler::new();
    let step = a.step(at(0), 2, &cpu(500.0), 1, 100, &behavior);
    assert_eq!(step.proposed, 20);
    assert_eq!(
        (step.desired, step.limit),
        (6, Some(Limit::ScaleUpRate(6))),
        "max(2 × 2, 2 + 4) = 6: {step:?}"
    );
    let step = a.step(at(5), 6, &cpu(500.0), 1, 100, &behavior);
    assert_eq!(
        step.desired, 6,
        "the 4 added 5 s ago count against this period: {step:?}"
    );
    let step = a.step(at(16), 6, &cpu(500.0), 1, 100, &behavior);
    assert_eq!(step.desired, 12, "a new period: 6 doubled: {step:?}");
}

#[test]
fn scale_down_waits_for_the_highest_proposal_of_five_minutes() {
    let behavior = Behavior::default();
    let mut a = Autoscaler::new();
    assert_eq!(a.step(at(0), 10, &cpu(50.0), 1, 100, &behavior).desired, 10);
    let step = a.step(at(60), 10, &cpu(10.0), 1, 100, &behavior);
    assert_eq!(step.proposed, 2);
    assert_eq!(
        (step.desired, step.limit),
        (10, Some(Limit::Stabilized(10))),
        "the proposal of 10 a minute ago holds: {step:?}"
    );
    let step = a.step(at(301), 10, &cpu(10.0), 1, 100, &behavior);
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
    let step = a.step(at(0), 30, &cpu(5.0), 1, 100, &behavior);
    assert_eq!(
        (step.desired, step.limit),
        (28, Some(Limit::ScaleDownRate(28))),
        "selectPolicy Min: the smaller change, 2 pods rather than 10% (3): {step:?}"
    );
    let step = a.step(at(30), 28, &cpu(5.0), 1, 100, &behavior);
    assert_eq!(step.desired, 28, "both removed within the minute count: {step:?}");
    let step = a.step(at(61), 28, &cpu(5.0), 1, 100, &behavior);
    assert_eq!(step.desired, 26);

    let frozen = Behavior {
        down: Rules {
            select: Select::Disabled,
            ..Rules::default_down()
        },
        ..Behavior::default()
    };
    let step = Autoscaler::new().step(at(0), 10, &cpu(5.0), 1, 100, &frozen);
    assert_eq!(step.desired, 10, "scale-down disabled: {step:?}");
}

#[test]
fn bounds_win_and_zero_replicas_stay_zero() {
    let behavior = Behavior::default();
    let step = Autoscaler::new().step(at(0), 4, &cpu(500.0), 1, 5, &behavior);
    assert_eq!(
        (step.desired, step.limit),
        (5, Some(Limit::TooMany(5))),
        "{step:?}"
    );
    let step = Autoscaler::new().step(at(0), 1, &cpu(50.0), 3, 10, &behavior);
    assert_eq!(
        (step.desired, step.limit),
        (3, Some(Limit::TooFew(3))),
        "below min: at once: {step:?}"
    );
    let step = Autoscaler::new().step(at(0), 12, &cpu(50.0), 1, 8, &behavior);
    assert_eq!(
        (step.desired, step.limit),
        (8, Some(Limit::TooMany(8))),
        "above max: at once: {step:?}"
    );
    let step = Autoscaler::new().step(at(0), 0, &cpu(500.0), 0, 8, &behavior);
    assert_eq!(step.desired, 0, "scaled to zero by someone: stays");
    let step = Autoscaler::new().step(at(0), 4, &[], 1, 8, &behavior);
    assert_eq!((step.desired, step.limit), (4, None), "no metrics, no change");
}

#[test]
fn metrics_from_outside_cannot_make_it_panic_or_overflow() {
    let behavior = Behavior::default();
    let odd = [
        Measurement {
            current: f64::NAN,
            target: 50.0,
        },
        Measurement {
            current: f64::INFINITY,
            target: 50.0,
        },
        Measurement {
            current: -5.0,
            target: 50.0,
        },
        Measurement {
            current: 5.0,
            target: 0.0,
        },
    ];
    let step = Autoscaler::new().step(at(0), 4, &odd, 1, 8, &behavior);
    assert_eq!((step.desired, step.ratio), (4, None), "nothing usable: {step:?}");
    let overflowing = [Measurement {
        current: 1e300,
        target: 1e-300,
    }];
    let step = Autoscaler::new().step(at(0), 4, &overflowing, 1, 8, &behavior);
    assert_eq!(
        (step.desired, step.ratio),
        (4, None),
        "an infinite ratio is no measurement: {step:?}"
    );
    let huge = [Measurement {
        current: 1e300,
        target: 1.0,
    }];
    let step = Autoscaler::new().step(at(0), 4, &huge, 1, u32::MAX, &behavior);
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
            let step = a.step(now, current, &cpu(utilization), min, max, &behavior);
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
