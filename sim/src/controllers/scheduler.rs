//! The scheduler: places pending pods of `default-scheduler` with [`super::fit`], binds
//! them through `pods/binding`, and marks the others `PodScheduled=False/Unschedulable`.
//!
//! A pod with `spec.schedulingGates` waits: it is never placed, and carries
//! `PodScheduled=False/SchedulingGated` (the API server sets it at creation; the scheduler adds it
//! when missing, writing only then). Removing the last gate is a pod change, which wakes the
//! scheduler, and the pod is placed like any other.
//!
//! It works in rounds: a round takes every pending pod, builds one snapshot of node usage, and
//! decides all of them in memory before writing. Bound pods stay "assumed" (counted on their node)
//! until the cache shows the binding, so a round never double-books a node. Rounds run when pods or
//! nodes change, and every 10 s while some pod is unschedulable.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use nave_resources::{Resources, pod_requests};
use serde_json::json;

use crate::server::podspec::{SCHEDULING_GATED_MESSAGE, scheduling_gated_condition};

use super::cache::key_of;
use super::fit::{NodeSnapshot, schedule};
use super::pods::{is_unschedulable, scheduled_message};
use super::resources::is_terminal;
use super::{Ctx, MANAGER_SCHEDULER, events};

/// Scheduler names this scheduler serves.
const SCHEDULER_NAME: &str = "default-scheduler";
const RETRY_PERIOD: Duration = Duration::from_secs(10);

fn wants_scheduling(p: &Pod) -> bool {
    let spec = p.spec.as_ref();
    spec.is_some_and(|s| s.node_name.as_deref().unwrap_or("").is_empty())
        && spec
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or(SCHEDULER_NAME)
            == SCHEDULER_NAME
        && p.metadata.deletion_timestamp.is_none()
        && !is_terminal(p)
}

fn is_gated(p: &Pod) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// Whether a pod already says it waits for its scheduling gates.
fn is_marked_gated(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("SchedulingGated")
                    && c.message.as_deref() == Some(SCHEDULING_GATED_MESSAGE)
            })
        })
}

/// Wakes the scheduler on pending pods, freed room and node changes.
pub(super) fn register(ctx: &Arc<Ctx>) {
    let wake = ctx.scheduler_wake.clone();
    let some_unschedulable = ctx.some_unschedulable.clone();
    ctx.pods.on_change(move |old, new| {
        // A gated pod that already says so needs nothing: waking for it would only spin.
        let pending = new.is_some_and(|p| wants_scheduling(p) && !(is_gated(p) && is_marked_gated(p)));
        // Room is freed when a bound pod goes away or finishes.
        let freed = old.is_some_and(|o| super::node_of(o).is_some() && !is_terminal(o))
            && new.is_none_or(|n| is_terminal(n) || n.metadata.deletion_timestamp.is_some());
        if pending || (freed && some_unschedulable.load(Ordering::Relaxed)) {
            wake.notify_one();
        }
    });
    let wake = ctx.scheduler_wake.clone();
    ctx.nodes.on_change(move |_, _| wake.notify_one());
}

enum Decision {
    Bind(Arc<Pod>, String),
    /// Gated and not yet marked so.
    Gated(Arc<Pod>),
    Unschedulable(Arc<Pod>, String),
}

/// The scheduler loop.
pub(super) async fn run(ctx: Arc<Ctx>) {
    ctx.nodes.wait_synced().await;
    ctx.pods.wait_synced().await;
    // Pods assumed bound: uid -> (node, requests).
    let mut assumed: HashMap<String, (String, Resources)> = HashMap::new();
    loop {
        let decisions = round(&ctx, &mut assumed);
        let retry_pending = decisions.iter().any(|d| matches!(d, Decision::Unschedulable(..)));
        let timer = async {
            if retry_pending {
                tokio::time::sleep(RETRY_PERIOD).await
            } else {
                std::future::pending().await
            }
        };
        ctx.some_unschedulable.store(retry_pending, Ordering::Relaxed);
        let failed = write(&ctx, decisions).await;
        for uid in failed {
            assumed.remove(&uid);
        }
        tokio::select! {
            _ = ctx.shutdown.cancelled() => return,
            _ = ctx.scheduler_wake.notified() => {}
            _ = timer => {}
        }
    }
}

fn round(ctx: &Ctx, assumed: &mut HashMap<String, (String, Resources)>) -> Vec<Decision> {
    let mut pending: Vec<Arc<Pod>> = ctx
        .pods
        .filter(|p| wants_scheduling(p) && !p.metadata.uid.as_ref().is_some_and(|u| assumed.contains_key(u)));
    // Forget assumptions the cache has caught up with.
    assumed.retain(|uid, _| {
        ctx.pods
            .get_uid(uid)
            .is_some_and(|p| super::node_of(&p).is_none())
    });
    let mut out = Vec::with_capacity(pending.len());
    pending.retain(|p| {
        if !is_gated(p) {
            return true;
        }
        if !is_marked_gated(p) {
            out.push(Decision::Gated(p.clone()));
        }
        false
    });
    if pending.is_empty() {
        return out;
    }
    // Priority first, then first come first served.
    pending.sort_by(|a, b| {
        let prio = |p: &Pod| p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
        prio(b)
            .cmp(&prio(a))
            .then_with(|| a.metadata.creation_timestamp.cmp(&b.metadata.creation_timestamp))
            .then_with(|| key_of(a.as_ref()).cmp(&key_of(b.as_ref())))
    });
    let mut nodes: Vec<NodeSnapshot> = ctx
        .nodes
        .list()
        .iter()
        .map(|n| NodeSnapshot::from_node(n))
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let index: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.clone(), i))
        .collect();
    for node in nodes.iter_mut() {
        for p in ctx.pods.indexed(&node.name) {
            if !is_terminal(&p) {
                node.add_pod(&p.spec.as_ref().map(pod_requests).unwrap_or_default());
            }
        }
    }
    for (node, req) in assumed.values() {
        if let Some(&i) = index.get(node) {
            nodes[i].add_pod(req);
        }
    }
    for pod in pending {
        let req = pod.spec.as_ref().map(pod_requests).unwrap_or_default();
        match schedule(&pod, &req, &nodes) {
            Ok(i) => {
                nodes[i].add_pod(&req);
                if let Some(uid) = pod.metadata.uid.clone() {
                    assumed.insert(uid, (nodes[i].name.clone(), req));
                }
                out.push(Decision::Bind(pod, nodes[i].name.clone()));
            }
            Err(msg) => out.push(Decision::Unschedulable(pod, msg)),
        }
    }
    out
}

/// Writes the decisions; answers the uids whose binding failed.
async fn write(ctx: &Arc<Ctx>, decisions: Vec<Decision>) -> Vec<String> {
    let results = futures::stream::iter(decisions)
        .map(|d| {
            let ctx = ctx.clone();
            async move {
                match d {
                    Decision::Bind(pod, node) => {
                        bind(&ctx, &pod, &node).await.err().and(pod.metadata.uid.clone())
                    }
                    Decision::Unschedulable(pod, msg) => {
                        mark_unschedulable(&ctx, &pod, msg).await;
                        None
                    }
                    Decision::Gated(pod) => {
                        mark_gated(&ctx, &pod).await;
                        None
                    }
                }
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    results.into_iter().flatten().collect()
}

async fn bind(ctx: &Ctx, pod: &Pod, node: &str) -> Result<(), kube::Error> {
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_owned()),
            ..Default::default()
        },
    };
    let pp = PostParams {
        field_manager: Some(MANAGER_SCHEDULER.into()),
        ..Default::default()
    };
    match api
        .create_subresource::<_, serde_json::Value>("binding", &name, &pp, &binding)
        .await
    {
        Ok(_) => {
            ctx.events.record(
                events::reference(pod),
                "Normal",
                "Scheduled",
                format!("Successfully assigned {ns}/{name} to {node}"),
                MANAGER_SCHEDULER,
            );
            Ok(())
        }
        Err(e) => {
            tracing::debug!(pod = %name, node, error = %e, "binding failed");
            Err(e)
        }
    }
}

async fn mark_unschedulable(ctx: &Ctx, pod: &Pod, msg: String) {
    // Write only when the message changes, so retries do not spam status updates and events.
    if is_unschedulable(pod) && scheduled_message(pod) == Some(msg.as_str()) {
        return;
    }
    let now = super::rollout::whole_seconds(super::Ctx::now()).to_string();
    let old = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let transition = old
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.to_string())
        .unwrap_or(now);
    let mut conditions: Vec<serde_json::Value> = old
        .iter()
        .filter(|c| c.type_ != "PodScheduled")
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    conditions.push(json!({
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg,
        "lastProbeTime": null, "lastTransitionTime": transition,
    }));
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let pp = PatchParams {
        field_manager: Some(MANAGER_SCHEDULER.into()),
        ..Default::default()
    };
    let patch = json!({"status": {"conditions": conditions}});
    match api
        .patch_status(&pod.name_any(), &pp, &Patch::Merge(&patch))
        .await
    {
        Ok(p) => {
            ctx.pods.apply(p);
            ctx.events.record(
                events::reference(pod),
                "Warning",
                "FailedScheduling",
                msg,
                MANAGER_SCHEDULER,
            );
        }
        Err(e) => tracing::debug!(pod = %pod.name_any(), error = %e, "marking unschedulable failed"),
    }
}

/// Sets `PodScheduled=False/SchedulingGated`. A strategic merge patch merges conditions by type,
/// so conditions other clients write meanwhile are kept.
async fn mark_gated(ctx: &Ctx, pod: &Pod) {
    let now = super::rollout::whole_seconds(super::Ctx::now()).to_string();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let pp = PatchParams {
        field_manager: Some(MANAGER_SCHEDULER.into()),
        ..Default::default()
    };
    let patch = json!({"status": {"conditions": [scheduling_gated_condition(&now)]}});
    match api
        .patch_status(&pod.name_any(), &pp, &Patch::Strategic(&patch))
        .await
    {
        Ok(p) => ctx.pods.apply(p),
        Err(e) => tracing::debug!(pod = %pod.name_any(), error = %e, "marking a gated pod failed"),
    }
}
