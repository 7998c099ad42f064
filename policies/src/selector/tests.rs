//! Node affinity and label selector semantics, as Kubernetes decides them.

use super::*;
use crate::fixtures::{label_req, labels, node_req};

use NodeSelectorOperator as Op;

fn node_matches(operator: Op, values: &[&str], node: &[(&str, &str)]) -> bool {
    node_req("k", operator, values).matches(&labels(node))
}

#[test]
fn in_needs_the_label_with_one_of_the_values() {
    assert!(node_matches(Op::In, &["a", "b"], &[("k", "b")]));
    assert!(!node_matches(Op::In, &["a"], &[("k", "c")]));
    assert!(
        !node_matches(Op::In, &["a"], &[]),
        "absent label does not match In"
    );
}

#[test]
fn not_in_and_does_not_exist_match_an_absent_label() {
    assert!(node_matches(Op::NotIn, &["a"], &[]));
    assert!(node_matches(Op::NotIn, &["a"], &[("k", "b")]));
    assert!(!node_matches(Op::NotIn, &["a"], &[("k", "a")]));
    assert!(node_matches(Op::DoesNotExist, &[], &[("other", "x")]));
    assert!(!node_matches(Op::DoesNotExist, &[], &[("k", "")]));
}

#[test]
fn exists_needs_the_label_whatever_its_value() {
    assert!(node_matches(Op::Exists, &[], &[("k", "")]));
    assert!(!node_matches(Op::Exists, &[], &[]));
}

#[test]
fn gt_and_lt_compare_integers_and_fail_on_anything_else() {
    assert!(node_matches(Op::Gt, &["4"], &[("k", "5")]));
    assert!(!node_matches(Op::Gt, &["5"], &[("k", "5")]));
    assert!(node_matches(Op::Lt, &["-1"], &[("k", "-2")]));
    assert!(
        !node_matches(Op::Gt, &["4"], &[("k", "five")]),
        "unparsable label"
    );
    assert!(
        !node_matches(Op::Gt, &["four"], &[("k", "5")]),
        "unparsable value"
    );
    assert!(!node_matches(Op::Gt, &["1", "2"], &[("k", "5")]), "two values");
    assert!(!node_matches(Op::Lt, &["4"], &[]), "absent label");
}

#[test]
fn terms_are_ored_and_expressions_anded() {
    let selector = NodeSelector {
        terms: vec![
            NodeSelectorTerm {
                match_expressions: vec![node_req("a", Op::Exists, &[]), node_req("b", Op::Exists, &[])],
            },
            NodeSelectorTerm {
                match_expressions: vec![node_req("c", Op::In, &["1"])],
            },
        ],
    };
    assert!(selector.matches(&labels(&[("a", ""), ("b", "")])));
    assert!(!selector.matches(&labels(&[("a", "")])), "first term needs both");
    assert!(selector.matches(&labels(&[("c", "1")])), "second term alone");
}

#[test]
fn an_empty_term_or_no_terms_match_no_node() {
    assert!(
        !NodeSelector {
            terms: vec![NodeSelectorTerm::default()]
        }
        .matches(&labels(&[("a", "")]))
    );
    assert!(!NodeSelector::default().matches(&labels(&[])));
}

#[test]
fn label_selector_ands_labels_and_expressions_and_empty_matches_all() {
    assert!(LabelSelector::default().matches(&labels(&[])));
    let selector = LabelSelector {
        match_labels: labels(&[("env", "prod")]),
        match_expressions: vec![
            label_req("tier", LabelSelectorOperator::In, &["gold", "silver"]),
            label_req("legacy", LabelSelectorOperator::DoesNotExist, &[]),
            label_req("owner", LabelSelectorOperator::Exists, &[]),
            label_req("region", LabelSelectorOperator::NotIn, &["cn"]),
        ],
    };
    let good = labels(&[("env", "prod"), ("tier", "gold"), ("owner", "x")]);
    assert!(
        selector.matches(&good),
        "seen mismatch {:?}",
        selector.first_mismatch(&good)
    );
    let mut staging = good.clone();
    staging.insert("env".into(), "staging".into());
    assert_eq!(
        selector.first_mismatch(&staging).as_deref(),
        Some("env=prod (is staging)")
    );
    let mut no_tier = good.clone();
    no_tier.remove("tier");
    assert_eq!(
        selector.first_mismatch(&no_tier).as_deref(),
        Some("tier in (gold, silver) (label absent)")
    );
    let mut cn = good;
    cn.insert("region".into(), "cn".into());
    assert_eq!(
        selector.first_mismatch(&cn).as_deref(),
        Some("region notin (cn) (is cn)")
    );
}
