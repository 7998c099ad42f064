//! Label matching: cluster label selectors and required node affinity, with Kubernetes semantics.

use std::collections::BTreeMap;
use std::fmt;

#[cfg(test)]
mod tests;

/// Labels of a cluster or a node.
pub type Labels = BTreeMap<String, String>;

/// Operator of a [`LabelSelectorRequirement`] (`metav1.LabelSelectorOperator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LabelSelectorOperator {
    /// The label is present and its value is one of `values`.
    In,
    /// The label is absent, or its value is none of `values`.
    NotIn,
    /// The label is present, whatever its value.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// One `matchExpressions` entry of a [`LabelSelector`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// How the label is compared with `values`.
    pub operator: LabelSelectorOperator,
    /// Values for `In` and `NotIn`; ignored by `Exists` and `DoesNotExist`.
    pub values: Vec<String>,
}

impl LabelSelectorRequirement {
    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            LabelSelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            LabelSelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            LabelSelectorOperator::Exists => value.is_some(),
            LabelSelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

impl fmt::Display for LabelSelectorRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.operator {
            LabelSelectorOperator::In => write!(f, "{} in ({})", self.key, self.values.join(", ")),
            LabelSelectorOperator::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(", ")),
            LabelSelectorOperator::Exists => write!(f, "{}", self.key),
            LabelSelectorOperator::DoesNotExist => write!(f, "!{}", self.key),
        }
    }
}

/// A `metav1.LabelSelector` over cluster labels (`spec.placement.clusterSelector`).
///
/// All of `match_labels` and all of `match_expressions` must hold; an empty selector matches
/// every cluster, as in Kubernetes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LabelSelector {
    /// Labels that must be present with exactly these values.
    pub match_labels: Labels,
    /// Further requirements, ANDed.
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

impl LabelSelector {
    /// Whether `labels` satisfy the whole selector.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.first_mismatch(labels).is_none()
    }

    /// The first part of the selector that `labels` do not satisfy, written the way `kubectl`
    /// writes selectors (`region=eu`, `tier in (gold, silver)`), with the value seen.
    pub fn first_mismatch(&self, labels: &Labels) -> Option<String> {
        for (key, want) in &self.match_labels {
            match labels.get(key) {
                Some(seen) if seen == want => {}
                Some(seen) => return Some(format!("{key}={want} (is {seen})")),
                None => return Some(format!("{key}={want} (label absent)")),
            }
        }
        self.match_expressions
            .iter()
            .find(|r| !r.matches(labels))
            .map(|r| match labels.get(&r.key) {
                Some(seen) => format!("{r} (is {seen})"),
                None => format!("{r} (label absent)"),
            })
    }
}

/// Operator of a [`NodeSelectorRequirement`] (`core/v1.NodeSelectorOperator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeSelectorOperator {
    /// The label is present and its value is one of `values`.
    In,
    /// The label is absent, or its value is none of `values`.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label and the single value both parse as integers and the label is greater.
    Gt,
    /// The label and the single value both parse as integers and the label is less.
    Lt,
}

/// One `matchExpressions` entry of a [`NodeSelectorTerm`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeSelectorRequirement {
    /// The node label key.
    pub key: String,
    /// How the label is compared with `values`.
    pub operator: NodeSelectorOperator,
    /// Values; `Gt` and `Lt` need exactly one, an integer.
    pub values: Vec<String>,
}

impl NodeSelectorRequirement {
    /// Whether node `labels` satisfy this requirement, as the Kubernetes scheduler decides it.
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            NodeSelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            NodeSelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            NodeSelectorOperator::Exists => value.is_some(),
            NodeSelectorOperator::DoesNotExist => value.is_none(),
            NodeSelectorOperator::Gt | NodeSelectorOperator::Lt => {
                // Anything that does not parse fails to match rather than erroring: the scheduler
                // does the same, and a placement must not stop because one node has an odd label.
                let [bound] = self.values.as_slice() else {
                    return false;
                };
                let (Some(Ok(label)), Ok(bound)) = (value.map(|v| v.parse::<i64>()), bound.parse::<i64>())
                else {
                    return false;
                };
                if self.operator == NodeSelectorOperator::Gt {
                    label > bound
                } else {
                    label < bound
                }
            }
        }
    }
}

/// One `nodeSelectorTerms` entry: its expressions are ANDed.
///
/// `matchFields` (which can only name `metadata.name`) is not modelled: node groups are keyed by
/// labels and taints, not names. A term left with no expressions matches no node, as in
/// Kubernetes, so dropping a fields-only term errs on the side of placing less.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeSelectorTerm {
    /// Requirements, all of which must hold.
    pub match_expressions: Vec<NodeSelectorRequirement>,
}

impl NodeSelectorTerm {
    /// Whether node `labels` satisfy every expression; an empty term matches nothing.
    pub fn matches(&self, labels: &Labels) -> bool {
        !self.match_expressions.is_empty() && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

/// `requiredDuringSchedulingIgnoredDuringExecution` of a pod's node affinity: terms are ORed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeSelector {
    /// Alternatives; a node must satisfy at least one. No terms matches no node.
    pub terms: Vec<NodeSelectorTerm>,
}

impl NodeSelector {
    /// Whether node `labels` satisfy at least one term.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.terms.iter().any(|t| t.matches(labels))
    }
}
