//! What the agents report, as plans read it: their latest status reports and Pending pods.

use std::sync::Arc;

use nave_api::wire::{ApplyError, ObjectStatus, PendingPod, StatusReport, WorkloadRef};

/// The agents' latest status reports, by cluster.
///
/// A persistent map: every plan takes its own copy, so a copy shares the map's nodes instead of
/// allocating one entry per cluster (a plan over 5,000 clusters copied and dropped 5,000 names
/// for reports and as many for Pending pods), and the index's next write copies only the path
/// to the entry it changes.
pub type Reports = imbl::OrdMap<String, Arc<StatusReport>>;

/// The Pending pods of each cluster that has some, from its latest heartbeat; persistent, as
/// [`Reports`].
pub type Pending = imbl::OrdMap<String, Arc<Vec<PendingPod>>>;

/// What the agents refused or failed to apply of the workload's objects, as
/// `cluster: Kind namespace/name: message`, by cluster.
pub fn apply_errors(reports: &Reports, workload: &WorkloadRef) -> Vec<String> {
    let mut out = Vec::new();
    for (cluster, report) in reports {
        for error in &report.apply_errors {
            if concerns(error, workload) {
                let namespace = error
                    .namespace
                    .as_deref()
                    .map(|n| format!("{n}/"))
                    .unwrap_or_default();
                out.push(format!(
                    "{cluster}: {} {namespace}{}: {}",
                    error.kind, error.name, error.message
                ));
            }
        }
    }
    out
}

/// `text` cut to `max` characters.
fn truncate_chars(text: &str, max: usize) -> &str {
    text.char_indices().nth(max).map_or(text, |(i, _)| &text[..i])
}

/// Whether an apply error is about the workload's objects: it names the workload, or (from an
/// agent that names none) it is the workload's Deployment.
fn concerns(error: &ApplyError, workload: &WorkloadRef) -> bool {
    error.workload.as_ref() == Some(workload)
        || (error.workload.is_none()
            && error.kind == "Deployment"
            && error.name == workload.name
            && error.namespace.as_deref() == Some(&workload.namespace))
}

/// What one cluster's agent reports failing of the workload: its objects that could not be
/// applied, and its Deployment unable to progress, as one line; `None` when nothing fails.
pub fn cluster_failure(report: Option<&StatusReport>, workload: &WorkloadRef) -> Option<String> {
    let report = report?;
    let mut failing: Vec<String> = report
        .apply_errors
        .iter()
        .filter(|error| concerns(error, workload))
        .map(|error| format!("{} {} not applied: {}", error.kind, error.name, error.message))
        .collect();
    if let Some(object) = deployment_of(Some(report), workload)
        && let Some(why) = deployment_failure(object)
    {
        failing.push(format!("{} {}: {why}", object.kind, workload.name));
    }
    (!failing.is_empty()).then(|| failing.join("; "))
}

/// The workload's Deployment (or StatefulSet) in one report.
pub fn deployment_of<'a>(
    report: Option<&'a StatusReport>,
    workload: &WorkloadRef,
) -> Option<&'a ObjectStatus> {
    report?.objects.iter().find(|o| {
        matches!(o.kind.as_str(), "Deployment" | "StatefulSet")
            && o.name == workload.name
            && o.namespace.as_deref() == Some(&workload.namespace)
    })
}

/// What a Deployment's status says is failing: `Progressing=False` (a
/// rollout past its deadline) or `ReplicaFailure=True` (pods that cannot be created), as
/// `Type=Status Reason: message`, and pods whose containers cannot run (`2 pod(s)
/// ImagePullBackOff`); `None` when none of these.
pub fn deployment_failure(object: &ObjectStatus) -> Option<String> {
    let mut failing: Vec<String> = object
        .conditions
        .iter()
        .filter(|c| {
            (c.type_ == "Progressing" && c.status == "False")
                || (c.type_ == "ReplicaFailure" && c.status == "True")
        })
        .map(|c| {
            format!(
                "{}={} {}: {}",
                c.type_,
                c.status,
                c.reason.as_deref().unwrap_or("-"),
                c.message.as_deref().unwrap_or_default()
            )
        })
        .collect();
    // As the agent reports them, bounded: a few reasons, each a short word.
    failing.extend(
        object
            .waiting_pods
            .iter()
            .filter(|(_, pods)| **pods > 0)
            .take(8)
            .map(|(reason, pods)| format!("{pods} pod(s) {}", truncate_chars(reason, 64))),
    );
    (!failing.is_empty()).then(|| failing.join("; "))
}

/// `(ready, available, pending)` of the workload's Deployment in one report.
pub fn deployment_status(report: Option<&StatusReport>, workload: &WorkloadRef) -> Option<(i32, i32, i32)> {
    deployment_of(report, workload).map(deployment_counts)
}

/// `(ready, available, pending)` of a Deployment's status.
pub fn deployment_counts(object: &ObjectStatus) -> (i32, i32, i32) {
    (
        object.ready_replicas.unwrap_or(0),
        object.available_replicas.unwrap_or(0),
        object
            .pending_pods
            .map_or(0, |p| i32::try_from(p).unwrap_or(i32::MAX)),
    )
}

/// How many of the workload's replicas in one cluster its agent's capacity report already counts
/// as requested: the ready ones, whose pods are certainly bound to a node. A Pending pod takes no
/// room in the report, yet its replica is assigned there: it keeps its reservation, or the cluster
/// looks as if it had the room the Pending pod is waiting for and is given more replicas that
/// wait too. A pod bound but not ready yet is counted twice for a moment, which errs on the side
/// of room.
/// A MultiClusterJob's pods are counted likewise: the ready pods of its Jobs in the cluster.
pub fn counted_replicas(report: Option<&StatusReport>, workload: &WorkloadRef) -> u32 {
    if workload.job_name().is_some() {
        let ready: i64 = report
            .into_iter()
            .flat_map(|r| &r.objects)
            .filter(|o| o.kind == "Job" && o.workload.as_ref() == Some(workload))
            .map(|o| i64::from(o.ready_replicas.unwrap_or(0).max(0)))
            .sum();
        return u32::try_from(ready).unwrap_or(u32::MAX);
    }
    deployment_status(report, workload).map_or(0, |(ready, _, _)| u32::try_from(ready).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use nave_api::wire::{ApplyError, ConditionSummary};

    use super::*;

    #[test]
    fn a_cluster_fails_a_workload_by_objects_not_applied_a_stuck_deployment_or_pods_that_cannot_run() {
        let workload = WorkloadRef::new("shop", "web");
        let deployment = ObjectStatus {
            kind: "Deployment".to_owned(),
            namespace: Some("shop".to_owned()),
            name: "web".to_owned(),
            ..ObjectStatus::default()
        };
        let report = |objects: Vec<ObjectStatus>, apply_errors: Vec<ApplyError>| StatusReport {
            objects,
            apply_errors,
            ..StatusReport::default()
        };
        assert_eq!(
            cluster_failure(Some(&report(vec![deployment.clone()], Vec::new())), &workload),
            None
        );
        let waiting = ObjectStatus {
            waiting_pods: [("ImagePullBackOff".to_owned(), 2)].into(),
            conditions: vec![ConditionSummary {
                type_: "Progressing".to_owned(),
                status: "False".to_owned(),
                reason: Some("ProgressDeadlineExceeded".to_owned()),
                message: Some("timed out".to_owned()),
            }],
            ..deployment.clone()
        };
        assert_eq!(
            deployment_failure(&waiting).as_deref(),
            Some("Progressing=False ProgressDeadlineExceeded: timed out; 2 pod(s) ImagePullBackOff")
        );
        let refused = ApplyError {
            kind: "Deployment".to_owned(),
            namespace: Some("shop".to_owned()),
            name: "web".to_owned(),
            message: "exceeded quota".to_owned(),
            ..ApplyError::default()
        };
        let other = ApplyError {
            name: "api".to_owned(),
            ..refused.clone()
        };
        assert_eq!(
            cluster_failure(Some(&report(vec![deployment], vec![refused, other])), &workload).as_deref(),
            Some("Deployment web not applied: exceeded quota"),
            "another workload's error is not this one's"
        );
    }
}
