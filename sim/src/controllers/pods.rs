//! Small facts about pods and label selectors that several controllers need.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};

use super::resources::is_terminal;

/// Whether the labels satisfy a `{matchLabels, matchExpressions}` selector. An unknown operator
/// matches nothing, as the apiserver would have rejected it.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    by_labels
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// Whether a selector selects nothing in particular (upstream treats an empty RS selector as
/// matching nothing).
pub fn selector_is_empty(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

/// The controller owner reference of an object, if any.
pub fn controller_of(refs: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    refs.into_iter().flatten().find(|r| r.controller == Some(true))
}

/// Active pods count towards a ReplicaSet: not finished and not being deleted.
pub fn is_active(pod: &Pod) -> bool {
    !is_terminal(pod) && pod.metadata.deletion_timestamp.is_none()
}

fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Whether the pod's Ready condition is True.
pub fn is_ready(pod: &Pod) -> bool {
    condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

/// When the pod became Ready, if it is.
pub fn ready_since(pod: &Pod) -> Option<Timestamp> {
    condition(pod, "Ready")
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

/// Whether the pod has been Ready for at least `min_ready_seconds` at `now`; `Err` gives the time
/// at which it will be, when it is Ready but not yet for long enough.
pub fn availability(pod: &Pod, min_ready_seconds: i64, now: Timestamp) -> Result<bool, Timestamp> {
    if !is_ready(pod) {
        return Ok(false);
    }
    if min_ready_seconds <= 0 {
        return Ok(true);
    }
    let Some(since) = ready_since(pod) else {
        return Ok(false);
    };
    let at = since
        .checked_add(jiff::SignedDuration::from_secs(min_ready_seconds))
        .unwrap_or(since);
    if at <= now { Ok(true) } else { Err(at) }
}

/// Whether the pod's PodScheduled condition is False/Unschedulable.
pub fn is_unschedulable(pod: &Pod) -> bool {
    condition(pod, "PodScheduled")
        .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
}

/// The message of the pod's PodScheduled condition.
pub fn scheduled_message(pod: &Pod) -> Option<&str> {
    condition(pod, "PodScheduled").and_then(|c| c.message.as_deref())
}

fn phase_rank(pod: &Pod) -> u8 {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => 0,
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 3,
    }
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).max().unwrap_or(0))
        .unwrap_or(0)
}

/// Upstream `controller.ActivePods` order: the pod to delete first sorts first (unassigned <
/// assigned, Pending < Unknown < Running, not ready < ready, ready for less time < longer, more
/// restarts < fewer, newer < older).
pub fn deletion_order(a: &Pod, b: &Pod) -> Ordering {
    let assigned = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
    };
    assigned(a)
        .cmp(&assigned(b))
        .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
        .then_with(|| is_ready(a).cmp(&is_ready(b)))
        .then_with(|| match (ready_since(a), ready_since(b)) {
            (Some(x), Some(y)) => y.cmp(&x),
            _ => Ordering::Equal,
        })
        .then_with(|| restarts(b).cmp(&restarts(a)))
        .then_with(|| {
            let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            match (created(a), created(b)) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Less,
                (Some(_), None) => Ordering::Greater,
                (Some(x), Some(y)) => y.cmp(&x),
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, Time};

    fn pod(name: &str, node: Option<&str>, phase: &str, ready_at: Option<i64>, created: i64) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).expect("ts")));
        p.spec = Some(PodSpec {
            node_name: node.map(Into::into),
            ..Default::default()
        });
        p.status = Some(PodStatus {
            phase: Some(phase.into()),
            conditions: ready_at.map(|t| {
                vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(Timestamp::from_second(t).expect("ts"))),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        });
        p
    }

    #[test]
    fn surplus_pods_go_unscheduled_then_pending_then_not_ready_then_newest_ready() {
        let mut pods = [
            pod("ready-old", Some("n"), "Running", Some(100), 10),
            pod("ready-new", Some("n"), "Running", Some(200), 20),
            pod("running-not-ready", Some("n"), "Running", None, 5),
            pod("pending-bound", Some("n"), "Pending", None, 1),
            pod("unscheduled", None, "Pending", None, 0),
        ];
        pods.sort_by(deletion_order);
        let names: Vec<_> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(
            names,
            [
                "unscheduled",
                "pending-bound",
                "running-not-ready",
                "ready-new",
                "ready-old"
            ]
        );
    }

    #[test]
    fn newest_first_among_equals() {
        let mut pods = [
            pod("a", None, "Pending", None, 1),
            pod("b", None, "Pending", None, 2),
        ];
        pods.sort_by(deletion_order);
        assert_eq!(pods[0].metadata.name.as_deref(), Some("b"));
    }

    #[test]
    fn availability_waits_for_min_ready_seconds() {
        let p = pod("a", Some("n"), "Running", Some(100), 1);
        let now = Timestamp::from_second(105).expect("ts");
        assert_eq!(availability(&p, 0, now), Ok(true));
        assert_eq!(
            availability(&p, 10, now),
            Err(Timestamp::from_second(110).expect("ts"))
        );
        assert_eq!(availability(&p, 5, now), Ok(true));
    }

    #[test]
    fn selector_match_labels_and_expressions() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let mut sel = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "DoesNotExist".into(),
                values: None,
            }]),
        };
        assert!(selector_matches(&sel, &labels));
        sel.match_expressions = Some(vec![LabelSelectorRequirement {
            key: "app".into(),
            operator: "NotIn".into(),
            values: Some(vec!["web".into()]),
        }]);
        assert!(!selector_matches(&sel, &labels));
    }
}
