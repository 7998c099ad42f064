//! Autoscaling: how many replicas a workload should have, from metrics aggregated over every
//! cluster it runs in, with the semantics of Kubernetes' `autoscaling/v2` HorizontalPodAutoscaler
//! (the tolerance, stabilization windows, scaling policies and min/max), so that what users know
//! of the HPA holds. Pure: the caller measures, keeps the [`Autoscaler`] between evaluations, and
//! acts on the [`Step`].
//!
//! ```text
//!  metrics (current vs target) ─► proposal per metric: ceil(current replicas × ratio),
//!        │                         unchanged within the tolerance; the largest wins
//!        ▼
//!  stabilization: the lowest proposal of the scale-up window, the highest of the scale-down one
//!        ▼
//!  rate: the scaling policies against the changes made in their periods ─► [min, max] ─► Step
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

/// Ratios within this distance of 1 change nothing (the HPA's default `--horizontal-pod-
/// autoscaler-tolerance`).
pub const TOLERANCE: f64 = 0.1;

/// One metric of the workload: its value now and the value it should have, in the same unit
/// (utilization in percent of requests, or an average value per replica), and over how many
/// replicas it was measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    /// The value now, over the measured replicas in every cluster.
    pub current: f64,
    /// The target.
    pub target: f64,
    /// How many replicas the value is over: those not measured (starting, Pending, unplaced)
    /// count as the HPA counts missing pods.
    pub measured: u32,
}

/// What `measurements` propose for a workload of `current` replicas, with the largest ratio of
/// value to target: for each metric `ceil(measured × ratio)`, unchanged within [`TOLERANCE`];
/// replicas not measured count as using nothing when the metric asks for more (so a scale-up
/// is not repeated before its new replicas are measured) and as at the target when it asks for
/// fewer; a metric that changes direction or falls within the tolerance once they count
/// proposes no change. The largest proposal wins; `None` when no metric is usable.
pub fn propose(current: u32, measurements: &[Measurement]) -> (Option<f64>, Option<u32>) {
    let mut ratio: Option<f64> = None;
    let mut proposed: Option<u32> = None;
    for m in measurements {
        if !(m.current.is_finite() && m.target.is_finite() && m.target > 0.0 && m.current >= 0.0) {
            continue;
        }
        let r = m.current / m.target;
        let measured = m.measured.min(current);
        if !r.is_finite() || measured == 0 {
            continue;
        }
        ratio = Some(ratio.map_or(r, |x| x.max(r)));
        let missing = current - measured;
        let within = |r: f64| (r - 1.0).abs() <= TOLERANCE;
        let one = if missing == 0 {
            if within(r) {
                current
            } else {
                ceil_u32(f64::from(measured) * r)
            }
        } else {
            let total = f64::from(current);
            let counted = if r > 1.0 {
                r * f64::from(measured) / total
            } else {
                (r * f64::from(measured) + f64::from(missing)) / total
            };
            if within(counted) || (r > 1.0) != (counted > 1.0) {
                current
            } else {
                ceil_u32(total * counted)
            }
        };
        proposed = Some(proposed.map_or(one, |p| p.max(one)));
    }
    (ratio, proposed)
}

fn ceil_u32(value: f64) -> u32 {
    let up = value.ceil();
    if up >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        up.max(0.0) as u32
    }
}

/// How a scaling policy limits a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// By a number of replicas per period.
    Pods(u32),
    /// By a percentage of the replicas at the start of the period.
    Percent(u32),
}

/// One scaling policy (`behavior.scaleUp.policies[]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalingPolicy {
    /// How much may change.
    pub change: Change,
    /// Over how long.
    pub period: Duration,
}

/// Which policy applies when there are several (`selectPolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Select {
    /// The one that allows the largest change (the default).
    #[default]
    Max,
    /// The one that allows the smallest change.
    Min,
    /// No change in this direction.
    Disabled,
}

/// The rules of one direction (`behavior.scaleUp` or `behavior.scaleDown`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// How far back proposals are looked at (`stabilizationWindowSeconds`).
    pub stabilization: Duration,
    /// The policies; none means no limit.
    pub policies: Vec<ScalingPolicy>,
    /// Which policy applies.
    pub select: Select,
}

impl Rules {
    /// The HPA's default for scaling up: no stabilization, at most double or 4 more replicas
    /// (whichever is more) every 15 seconds.
    pub fn default_up() -> Rules {
        Rules {
            stabilization: Duration::ZERO,
            policies: vec![
                ScalingPolicy {
                    change: Change::Percent(100),
                    period: Duration::from_secs(15),
                },
                ScalingPolicy {
                    change: Change::Pods(4),
                    period: Duration::from_secs(15),
                },
            ],
            select: Select::Max,
        }
    }

    /// The HPA's default for scaling down: the highest proposal of the last 5 minutes, any
    /// number of replicas every 15 seconds.
    pub fn default_down() -> Rules {
        Rules {
            stabilization: Duration::from_secs(300),
            policies: vec![ScalingPolicy {
                change: Change::Percent(100),
                period: Duration::from_secs(15),
            }],
            select: Select::Max,
        }
    }
}

/// Both directions (`behavior`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behavior {
    /// Scaling up.
    pub up: Rules,
    /// Scaling down.
    pub down: Rules,
}

impl Default for Behavior {
    fn default() -> Self {
        Behavior {
            up: Rules::default_up(),
            down: Rules::default_down(),
        }
    }
}

/// Why the replicas asked for differ from what the metrics propose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `minReplicas`.
    TooFew(u32),
    /// `maxReplicas`.
    TooMany(u32),
    /// A scale-up policy: at most this many now.
    ScaleUpRate(u32),
    /// A scale-down policy: at least this many now.
    ScaleDownRate(u32),
    /// A higher proposal of the scale-down window (or a lower one of the scale-up window)
    /// holds the replicas.
    Stabilized(u32),
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::TooFew(n) => write!(f, "held at minReplicas={n}"),
            Limit::TooMany(n) => write!(f, "held at maxReplicas={n}"),
            Limit::ScaleUpRate(n) => write!(f, "a scale-up policy allows {n} now"),
            Limit::ScaleDownRate(n) => write!(f, "a scale-down policy allows no fewer than {n} now"),
            Limit::Stabilized(n) => write!(f, "stabilized at {n} by the proposals of the window"),
        }
    }
}

/// The outcome of one evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The replicas the workload should have now.
    pub desired: u32,
    /// What the metrics alone propose (before stabilization, rate and bounds).
    pub proposed: u32,
    /// The largest ratio of current to target over the metrics; `None` without metrics.
    pub ratio: Option<f64>,
    /// What held `desired` away from `proposed`, if anything did.
    pub limit: Option<Limit>,
}

/// What an autoscaler remembers between evaluations: its recent proposals and changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Autoscaler {
    /// Whether the replicas at first sight were recorded as a proposal (so that a new
    /// autoscaler, or one after a restart, holds a scale-down for the window as the HPA does).
    seeded: bool,
    /// Proposals, oldest first, with when they were made.
    proposals: VecDeque<(Duration, u32)>,
    /// Changes made, oldest first: when, and by how many replicas (negative: down).
    changes: VecDeque<(Duration, i64)>,
}

impl Autoscaler {
    /// A new autoscaler, with nothing proposed or changed yet.
    pub fn new() -> Self {
        Autoscaler::default()
    }

    /// Evaluates at `now` (any monotonic clock, as a duration since its origin) a workload that
    /// has `current` replicas, with `measurements` over its replicas, within `min..=max`, under
    /// `behavior`; records the proposal. The caller [`record`](Autoscaler::record)s the change
    /// once it is made.
    ///
    /// As the HPA: a workload at 0 replicas stays there (scaling from zero is not done from
    /// metrics that need running replicas); without measurements nothing changes but the
    /// bounds; a current count outside the bounds is brought within them at once.
    pub fn step(
        &mut self,
        now: Duration,
        current: u32,
        measurements: &[Measurement],
        min: u32,
        max: u32,
        behavior: &Behavior,
    ) -> Step {
        let max = max.max(min);
        let (ratio, proposal) = propose(current, measurements);
        let proposed = if current == 0 {
            0
        } else {
            proposal.unwrap_or(current)
        };
        if current == 0 {
            return Step {
                desired: 0,
                proposed,
                ratio,
                limit: None,
            };
        }
        if !self.seeded {
            self.seeded = true;
            self.proposals.push_back((now, current));
        }
        self.proposals.push_back((now, proposed));
        let keep = behavior.up.stabilization.max(behavior.down.stabilization);
        while self
            .proposals
            .front()
            .is_some_and(|(at, _)| now.saturating_sub(*at) > keep)
        {
            self.proposals.pop_front();
        }
        let longest_period = behavior
            .up
            .policies
            .iter()
            .chain(&behavior.down.policies)
            .map(|p| p.period)
            .max()
            .unwrap_or(Duration::ZERO);
        while self
            .changes
            .front()
            .is_some_and(|(at, _)| now.saturating_sub(*at) > longest_period)
        {
            self.changes.pop_front();
        }

        // Stabilization: the lowest proposal of the scale-up window may scale up, the highest of
        // the scale-down window may scale down.
        // A window holds the proposals younger than it, besides this one (the HPA's cut-off is
        // exclusive, so a window of 0 holds this proposal alone).
        let within = |window: Duration| {
            self.proposals
                .iter()
                .filter(move |(at, _)| now.saturating_sub(*at) < window)
                .map(|(_, n)| *n)
                .chain(std::iter::once(proposed))
        };
        let up_to = within(behavior.up.stabilization).min().unwrap_or(proposed);
        let down_to = within(behavior.down.stabilization).max().unwrap_or(proposed);
        let mut desired = current;
        if desired < up_to {
            desired = up_to;
        }
        if desired > down_to {
            desired = down_to;
        }
        let mut limit = (desired != proposed).then_some(Limit::Stabilized(desired));

        // Rate, then bounds; the bounds win over the rate (a workload below minReplicas reaches
        // it at once, as the HPA does).
        let (mut highest, mut high) = (max, Limit::TooMany(max));
        let (mut lowest, mut low) = (min, Limit::TooFew(min));
        if desired > current {
            let allowed = self.scale_up_limit(now, current, &behavior.up).max(min);
            if allowed < highest {
                (highest, high) = (allowed, Limit::ScaleUpRate(allowed));
            }
        } else if desired < current {
            let allowed = self.scale_down_limit(now, current, &behavior.down).min(max);
            if allowed > lowest {
                (lowest, low) = (allowed, Limit::ScaleDownRate(allowed));
            }
        }
        if desired > highest {
            desired = highest;
            limit = Some(high);
        } else if desired < lowest {
            desired = lowest;
            limit = Some(low);
        }
        Step {
            desired,
            proposed,
            ratio,
            limit,
        }
    }

    /// Records that the workload's replicas went from `from` to `to` at `now` (the scaling
    /// policies count it against their periods).
    pub fn record(&mut self, now: Duration, from: u32, to: u32) {
        if from != to {
            self.changes.push_back((now, i64::from(to) - i64::from(from)));
        }
    }

    /// The replicas at the start of `period` before `now`, as the HPA counts them: the current
    /// count, less what was added and plus what was removed within the period.
    fn period_start(&self, now: Duration, period: Duration, current: u32) -> u64 {
        let (mut added, mut removed) = (0u64, 0u64);
        for (_, n) in self
            .changes
            .iter()
            .filter(|(at, _)| now.saturating_sub(*at) <= period)
        {
            if *n > 0 {
                added += n.unsigned_abs();
            } else {
                removed += n.unsigned_abs();
            }
        }
        (u64::from(current) + removed).saturating_sub(added)
    }

    /// The most replicas the scale-up policies allow now.
    fn scale_up_limit(&self, now: Duration, current: u32, rules: &Rules) -> u32 {
        if rules.select == Select::Disabled {
            return current;
        }
        let allowed = rules.policies.iter().map(|p| {
            let start = self.period_start(now, p.period, current);
            let limit = match p.change {
                Change::Pods(n) => start + u64::from(n),
                Change::Percent(pct) => (start * (100 + u64::from(pct))).div_ceil(100),
            };
            u32::try_from(limit).unwrap_or(u32::MAX)
        });
        let chosen = match rules.select {
            Select::Min => allowed.min(),
            _ => allowed.max(),
        };
        chosen.map_or(u32::MAX, |n| n.max(current))
    }

    /// The fewest replicas the scale-down policies allow now.
    fn scale_down_limit(&self, now: Duration, current: u32, rules: &Rules) -> u32 {
        if rules.select == Select::Disabled {
            return current;
        }
        let allowed = rules.policies.iter().map(|p| {
            let start = self.period_start(now, p.period, current);
            let limit = match p.change {
                Change::Pods(n) => start.saturating_sub(u64::from(n)),
                Change::Percent(pct) => start * 100u64.saturating_sub(u64::from(pct)) / 100,
            };
            u32::try_from(limit).unwrap_or(u32::MAX)
        });
        // The policy that allows the largest change is the one that leaves the fewest.
        let chosen = match rules.select {
            Select::Min => allowed.max(),
            _ => allowed.min(),
        };
        chosen.map_or(0, |n| n.min(current))
    }
}

#[cfg(test)]
mod tests;
