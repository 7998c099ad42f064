//! The capacity model and the pending pods, computed from the reflectors' snapshots of Nodes and
//! Pods. Pure functions: the heartbeat loop takes a snapshot and calls them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use nave_api::wire::{
    CapacityModel, CapacityTotals, Heartbeat, NodeCapacity, NodeGroup, PendingPod, Resources, Taint,
    TaintEffect, WORKLOAD_LABEL, WorkloadRef,
};

#[cfg(test)]
mod tests;

/// Node labels that differ on every node; left out so identical nodes form one group.
pub const PER_NODE_LABELS: &[&str] = &["kubernetes.io/hostname"];

/// The cluster's capacity model: nodes grouped by labels (without [`PER_NODE_LABELS`]) and
/// taints, each with allocatable and the requests of the non-terminal pods bound to it.
pub fn capacity_model<'a>(
    nodes: impl IntoIterator<Item = &'a NodeSummary>,
    pods: impl IntoIterator<Item = &'a PodSummary>,
) -> CapacityModel {
    let mut requested: BTreeMap<&str, Resources> = BTreeMap::new();
    for pod in pods {
        let Some(node) = pod.node.as_deref() else {
            continue;
        };
        if pod.terminal {
            continue;
        }
        let entry = requested.entry(node).or_default();
        *entry = entry.saturating_add(pod.requests);
    }

    type GroupKey<'a> = (&'a BTreeMap<String, String>, &'a [Taint]);
    let mut groups: BTreeMap<GroupKey<'_>, Vec<NodeCapacity>> = BTreeMap::new();
    let mut totals = CapacityTotals::default();
    for node in nodes {
        let capacity = NodeCapacity {
            requested: requested.get(node.name.as_str()).copied().unwrap_or_default(),
            name: node.name.clone(),
            allocatable: node.allocatable,
            ready: node.ready,
            unschedulable: node.unschedulable,
        };
        totals.nodes += 1;
        if capacity.schedulable() {
            totals.schedulable_nodes += 1;
            totals.allocatable = totals.allocatable.saturating_add(capacity.allocatable);
            totals.requested = totals.requested.saturating_add(capacity.requested);
        }
        groups
            .entry((&node.labels, node.taints.as_slice()))
            .or_default()
            .push(capacity);
    }
    let node_groups = groups
        .into_iter()
        .map(|((labels, taints), mut nodes)| {
            nodes.sort_by(|a, b| a.name.cmp(&b.name));
            NodeGroup {
                labels: labels.clone(),
                taints: taints.to_vec(),
                nodes,
            }
        })
        .collect();
    CapacityModel { node_groups, totals }
}

/// What the agent keeps of a node: what the capacity model reads of it, in a few hundred bytes
/// where the node as the API server sends it (images, addresses, system information, managed
/// fields) takes kilobytes in memory (see [`crate::trim`]).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSummary {
    /// Node name.
    pub name: String,
    /// Its labels without [`PER_NODE_LABELS`]: nodes with the same labels and taints form a
    /// node group.
    pub labels: BTreeMap<String, String>,
    /// Its taints of known effects, sorted, without duplicates.
    pub taints: Vec<Taint>,
    /// `status.allocatable`: CPU, memory and pods.
    pub allocatable: Resources,
    /// Condition `Ready` is `True`.
    pub ready: bool,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
}

impl NodeSummary {
    /// The summary of `node`.
    pub fn of(node: &Node) -> NodeSummary {
        let labels: BTreeMap<String, String> = node
            .metadata
            .labels
            .iter()
            .flatten()
            .filter(|(k, _)| !PER_NODE_LABELS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut taints: Vec<Taint> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let effect = match t.effect.as_str() {
                    "NoSchedule" => TaintEffect::NoSchedule,
                    "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
                    "NoExecute" => TaintEffect::NoExecute,
                    _ => return None,
                };
                Some(Taint {
                    key: t.key.clone(),
                    value: t.value.clone().unwrap_or_default(),
                    effect,
                })
            })
            .collect();
        taints.sort();
        taints.dedup();
        let allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .map(|a| {
                let a = nave_resources::Resources::from_list(Some(a));
                Resources::new(
                    a.cpu_millis(),
                    a.memory_bytes(),
                    u64::try_from(a.value("pods").max(0)).unwrap_or(u64::MAX),
                )
            })
            .unwrap_or_default();
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        NodeSummary {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels,
            taints,
            allocatable,
            ready,
            unschedulable: node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
        }
    }
}

/// Whether a pod is done (`Succeeded` or `Failed`) and holds no resources any more.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// What a pod takes from its node, as the scheduler (and the hub's demand) counts it
/// ([`nave_resources::pod_requests`]), and one pod slot.
pub fn pod_requests(pod: &Pod) -> Resources {
    let requests = pod
        .spec
        .as_ref()
        .map(nave_resources::pod_requests)
        .unwrap_or_default();
    Resources::new(requests.cpu_millis(), requests.memory_bytes(), 1)
}

/// The workload of an object or pod, from its [`WORKLOAD_LABEL`].
pub fn workload_of(labels: Option<&BTreeMap<String, String>>) -> Option<WorkloadRef> {
    labels
        .and_then(|l| l.get(WORKLOAD_LABEL))
        .and_then(|v| WorkloadRef::from_label_value(v))
}

/// The pods the scheduler could not place (`PodScheduled=False`, not bound, not terminal), Nave's
/// first, then by namespace and name; at most [`Heartbeat::MAX_PENDING_PODS`], with the number
/// left out.
pub fn pending_pods<'a>(pods: impl IntoIterator<Item = &'a PodSummary>) -> (Vec<PendingPod>, u64) {
    let mut pending: Vec<PendingPod> = pods.into_iter().filter_map(|p| p.pending.clone()).collect();
    pending.sort_by(|a, b| {
        (a.workload.is_none(), &a.namespace, &a.name).cmp(&(b.workload.is_none(), &b.namespace, &b.name))
    });
    let omitted = pending.len().saturating_sub(Heartbeat::MAX_PENDING_PODS) as u64;
    pending.truncate(Heartbeat::MAX_PENDING_PODS);
    (pending, omitted)
}

/// The pod as a [`PendingPod`] if the scheduler could not place it.
pub fn pending_pod(pod: &Pod) -> Option<PendingPod> {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    if bound || is_terminal(pod) || pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let condition = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    Some(PendingPod {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        workload: workload_of(pod.metadata.labels.as_ref()),
        reason: condition
            .reason
            .clone()
            .unwrap_or_else(|| "Unschedulable".to_owned()),
        message: condition.message.clone().unwrap_or_default(),
        since: condition.last_transition_time.clone(),
    })
}

/// Pending pods per workload, for status reports.
pub fn pending_by_workload<'a>(pods: impl IntoIterator<Item = &'a PodSummary>) -> BTreeMap<WorkloadRef, u32> {
    let mut counts = BTreeMap::new();
    for p in pods.into_iter().filter_map(|p| p.pending.as_ref()) {
        if let Some(w) = &p.workload {
            *counts.entry(w.clone()).or_default() += 1;
        }
    }
    counts
}

/// What the agent keeps of a pod: what the capacity model, the Pending pods and the status
/// reports read of it, a few hundred bytes where the pod as the API server sends it takes tens of
/// kilobytes in memory (see [`crate::trim`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PodSummary {
    /// The node it is bound to, if any.
    pub node: Option<String>,
    /// What it takes from its node ([`pod_requests`]).
    pub requests: Resources,
    /// Done (`Succeeded` or `Failed`): it holds nothing any more.
    pub terminal: bool,
    /// The Nave workload it belongs to, from its [`WORKLOAD_LABEL`].
    pub workload: Option<WorkloadRef>,
    /// Why the scheduler could not place it, when it could not ([`pending_pod`]).
    pub pending: Option<PendingPod>,
    /// Why one of its containers cannot run, when it is one of [`WAITING_PROBLEMS`].
    pub waiting: Option<&'static str>,
    /// What its containers request, as a HorizontalPodAutoscaler divides usage by: no init
    /// containers, no overhead ([`container_requests`]).
    pub container_requests: Resources,
    /// Being deleted (`deletionTimestamp` set): an autoscaler no longer counts it.
    pub deleting: bool,
}

/// What `pod`'s containers request, without its init containers and overhead: the requests a
/// HorizontalPodAutoscaler computes utilization against.
pub fn container_requests(pod: &Pod) -> Resources {
    let mut sum = Resources::default();
    for container in pod.spec.iter().flat_map(|s| &s.containers) {
        let requests = nave_resources::container_requests(container);
        sum = sum.saturating_add(Resources::new(requests.cpu_millis(), requests.memory_bytes(), 0));
    }
    sum
}

/// The reasons a container waits that say it cannot start or keeps failing (as `kubectl get
/// pods` shows them), reported per workload; the others (`ContainerCreating`,
/// `PodInitializing`) are part of starting.
pub const WAITING_PROBLEMS: [&str; 7] = [
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// The first problem reason (of [`WAITING_PROBLEMS`]) a container of `pod` waits for; none for
/// a pod on its way out (a rollout replacing it), whose problem is over.
pub fn waiting_problem(pod: &Pod) -> Option<&'static str> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    status
        .init_container_statuses
        .iter()
        .chain(status.container_statuses.iter())
        .flatten()
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.as_deref())
        .find_map(|reason| WAITING_PROBLEMS.iter().find(|p| **p == reason).copied())
}

/// Pods per workload and problem reason (see [`PodSummary::waiting`]), for status reports.
pub fn waiting_by_workload<'a>(
    pods: impl IntoIterator<Item = &'a PodSummary>,
) -> BTreeMap<WorkloadRef, BTreeMap<String, i32>> {
    let mut counts: BTreeMap<WorkloadRef, BTreeMap<String, i32>> = BTreeMap::new();
    for p in pods {
        if let (Some(workload), Some(reason), false) = (&p.workload, p.waiting, p.terminal) {
            *counts
                .entry(workload.clone())
                .or_default()
                .entry(reason.to_owned())
                .or_default() += 1;
        }
    }
    counts
}

impl PodSummary {
    /// The summary of `pod`.
    pub fn of(pod: &Pod) -> PodSummary {
        PodSummary {
            node: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            requests: pod_requests(pod),
            terminal: is_terminal(pod),
            workload: workload_of(pod.metadata.labels.as_ref()),
            pending: pending_pod(pod),
            waiting: waiting_problem(pod),
            container_requests: container_requests(pod),
            deleting: pod.metadata.deletion_timestamp.is_some(),
        }
    }
}
