//! Node taints and pod tolerations, with the Kubernetes scheduler's semantics.

use std::fmt;
use std::time::Duration;

/// What a taint does to pods that do not tolerate it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaintEffect {
    /// New pods are not scheduled on the node.
    NoSchedule,
    /// The scheduler avoids the node if it can; never blocks placement.
    PreferNoSchedule,
    /// New pods are not scheduled and running ones are evicted.
    NoExecute,
}

impl TaintEffect {
    /// Whether an untolerated taint with this effect keeps new pods off the node.
    pub fn blocks_scheduling(self) -> bool {
        matches!(self, TaintEffect::NoSchedule | TaintEffect::NoExecute)
    }
}

impl fmt::Display for TaintEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        })
    }
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value; may be empty.
    pub value: String,
    /// Effect on pods that do not tolerate it.
    pub effect: TaintEffect,
}

impl Taint {
    /// A taint from its parts.
    pub fn new(key: impl Into<String>, value: impl Into<String>, effect: TaintEffect) -> Self {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect)
        }
    }
}

/// How a [`Toleration`] compares values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TolerationOperator {
    /// Any value of the key (and, with an empty key, any key).
    Exists,
    /// The taint's value must equal the toleration's; the Kubernetes default.
    #[default]
    Equal,
}

/// A pod toleration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Toleration {
    /// Taint key to tolerate; empty means every key.
    pub key: String,
    /// How values are compared.
    pub operator: TolerationOperator,
    /// Value for `Equal`.
    pub value: String,
    /// Effect to tolerate; `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Whether this toleration tolerates `taint` (`v1.Toleration.ToleratesTaint`).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }
}

/// The first taint among `taints` that keeps a pod with `tolerations` off the node, if any.
///
/// Only `NoSchedule` and `NoExecute` block; `PreferNoSchedule` is a preference the scheduler may
/// ignore when nothing else fits, so counting it would under-report room.
pub fn blocking_taint<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|t| t.effect.blocks_scheduling() && !tolerations.iter().any(|tol| tol.tolerates(t)))
}

/// A workload cluster's taint (`NoSchedule` or `NoExecute`), with how long it has been there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTaint {
    /// The taint.
    pub taint: Taint,
    /// Time since it was added.
    pub age: Duration,
}

/// A workload's toleration of cluster taints; with `NoExecute`, maybe only for a while.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterToleration {
    /// What it tolerates.
    pub toleration: Toleration,
    /// How long after the taint was added a `NoExecute` taint is tolerated; `None`: for good.
    pub seconds: Option<Duration>,
}

/// What a cluster's taints do to a workload.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaintVerdict {
    /// The taint, as `key=value:Effect`.
    pub taint: String,
    /// Its replicas there move away (`NoExecute`, not or no longer tolerated).
    pub evicts: bool,
    /// A `NoExecute` taint tolerated for this long (expired when `evicts`).
    pub tolerated_for: Option<Duration>,
}

/// What `taints` do to a workload with `tolerations`: nothing (`None`), no new replicas, or
/// also move the ones there away. A taint that moves replicas away wins over one that only
/// keeps new ones out; otherwise the first one found. The first toleration that matches a taint
/// decides how long it is tolerated, as for pods.
///
/// A `NoExecute` taint tolerated only for a while keeps new replicas out meanwhile: replicas
/// placed there would have to move again when the time runs out.
pub fn taint_verdict(taints: &[ClusterTaint], tolerations: &[ClusterToleration]) -> Option<TaintVerdict> {
    let mut first = None;
    for ClusterTaint { taint, age } in taints.iter().filter(|t| t.taint.effect.blocks_scheduling()) {
        // As Kubernetes reads a pod's tolerations: the first one that matches a taint decides.
        let verdict = match tolerations.iter().find(|t| t.toleration.tolerates(taint)) {
            None => Some(TaintVerdict {
                taint: taint.to_string(),
                evicts: taint.effect == TaintEffect::NoExecute,
                tolerated_for: None,
            }),
            Some(t) if taint.effect == TaintEffect::NoExecute => t.seconds.map(|limit| TaintVerdict {
                taint: taint.to_string(),
                evicts: *age >= limit,
                tolerated_for: Some(limit),
            }),
            Some(_) => None,
        };
        match verdict {
            Some(v) if v.evicts => return Some(v),
            Some(v) if first.is_none() => first = Some(v),
            _ => {}
        }
    }
    first
}

/// How long until a `NoExecute` taint's toleration runs out and the workload's replicas move
/// away, the soonest of `taints`; `None` when none is counting down.
pub fn toleration_expires_in(taints: &[ClusterTaint], tolerations: &[ClusterToleration]) -> Option<Duration> {
    taints
        .iter()
        .filter(|t| t.taint.effect == TaintEffect::NoExecute)
        .filter_map(|t| {
            let verdict = taint_verdict(std::slice::from_ref(t), tolerations)?;
            let limit = verdict.tolerated_for?;
            (!verdict.evicts).then(|| limit.saturating_sub(t.age))
        })
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tol(key: &str, operator: TolerationOperator, value: &str, effect: Option<TaintEffect>) -> Toleration {
        Toleration {
            key: key.into(),
            operator,
            value: value.into(),
            effect,
        }
    }

    const NO_SCHEDULE: Option<TaintEffect> = Some(TaintEffect::NoSchedule);

    #[test]
    fn equal_needs_the_same_key_value_and_effect() {
        let taint = Taint::new("gpu", "nvidia", TaintEffect::NoSchedule);
        assert!(tol("gpu", TolerationOperator::Equal, "nvidia", NO_SCHEDULE).tolerates(&taint));
        assert!(!tol("gpu", TolerationOperator::Equal, "amd", NO_SCHEDULE).tolerates(&taint));
        assert!(!tol("tpu", TolerationOperator::Equal, "nvidia", NO_SCHEDULE).tolerates(&taint));
        assert!(
            !tol(
                "gpu",
                TolerationOperator::Equal,
                "nvidia",
                Some(TaintEffect::NoExecute)
            )
            .tolerates(&taint)
        );
    }

    #[test]
    fn exists_ignores_the_value_and_an_empty_key_tolerates_everything() {
        let taint = Taint::new("gpu", "nvidia", TaintEffect::NoExecute);
        assert!(tol("gpu", TolerationOperator::Exists, "", None).tolerates(&taint));
        assert!(tol("", TolerationOperator::Exists, "", None).tolerates(&taint));
        assert!(
            !tol("", TolerationOperator::Exists, "", NO_SCHEDULE).tolerates(&taint),
            "effect still counts"
        );
    }

    #[test]
    fn an_empty_effect_matches_every_effect() {
        let toleration = tol("k", TolerationOperator::Equal, "v", None);
        for effect in [
            TaintEffect::NoSchedule,
            TaintEffect::PreferNoSchedule,
            TaintEffect::NoExecute,
        ] {
            assert!(
                toleration.tolerates(&Taint::new("k", "v", effect)),
                "expected {effect} tolerated"
            );
        }
    }

    #[test]
    fn only_no_schedule_and_no_execute_block() {
        let soft = [Taint::new("a", "", TaintEffect::PreferNoSchedule)];
        assert_eq!(blocking_taint(&soft, &[]), None);
        let hard = [soft[0].clone(), Taint::new("b", "", TaintEffect::NoExecute)];
        assert_eq!(blocking_taint(&hard, &[]), Some(&hard[1]));
        let tolerated = [tol("b", TolerationOperator::Exists, "", None)];
        assert_eq!(blocking_taint(&hard, &tolerated), None);
    }
}
