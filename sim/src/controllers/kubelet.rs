//! The simulated kubelet of every node: starts bound pods after their start delay,
//! plays injected failures, and finishes deleted pods. Pods on nodes that are not Ready are left
//! alone, as a stopped kubelet would.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::time::Instant;

use super::cache::{Key, key_of, run_queue};
use super::kubelet_status::{
    Behaviour, behaviour, exit_code, finished_status, readiness_gates, run_time, start_delay, started_status,
};
use super::node_objects::ready_status;
use super::pods::is_ready;
use super::resources::is_terminal;
use super::{Ctx, MANAGER_KUBELET, api_code};

/// Per-pod timers of the kubelet, by uid.
#[derive(Debug, Default)]
pub(super) struct Timers {
    /// When the kubelet first saw the pod bound to a Ready node.
    bound_seen: HashMap<String, Instant>,
    /// When the kubelet first saw the pod terminating.
    deleting_seen: HashMap<String, Instant>,
    /// When a crash-looping pod restarts next.
    next_crash: HashMap<String, Instant>,
    /// When the kubelet started the containers of a pod that runs to completion.
    running_since: HashMap<String, Instant>,
}

/// Enqueues bound pods, and the pods of a node that becomes Ready.
pub(super) fn register(ctx: &Arc<Ctx>) {
    let q = ctx.kubelet_queue.clone();
    let weak = Arc::downgrade(ctx);
    ctx.pods.on_change(move |old, new| match (old, new) {
        (_, Some(p)) if super::node_of(p).is_some() => q.add(key_of(p)),
        (Some(p), None) => {
            if let (Some(ctx), Some(uid)) = (weak.upgrade(), p.metadata.uid.as_deref()) {
                forget(&ctx, uid);
            }
        }
        _ => {}
    });
    let q = ctx.kubelet_queue.clone();
    let pods = ctx.pods.clone();
    ctx.nodes.on_change(move |old, new| {
        let Some(n) = new else { return };
        if ready_status(n) == "True" && old.is_none_or(|o| ready_status(o) != "True") {
            for p in pods.indexed(&n.name_any()) {
                q.add(key_of(p.as_ref()));
            }
        }
    });
}

/// The kubelet loop.
pub(super) async fn run(ctx: Arc<Ctx>) {
    ctx.pods.wait_synced().await;
    ctx.nodes.wait_synced().await;
    let q = ctx.kubelet_queue.clone();
    let shutdown = ctx.shutdown.clone();
    run_queue(q, 32, shutdown, |key| {
        let ctx = ctx.clone();
        async move { reconcile(&ctx, key).await }
    })
    .await;
}

fn forget(ctx: &Ctx, uid: &str) {
    let mut sim = ctx.sim();
    sim.kubelet.bound_seen.remove(uid);
    sim.kubelet.deleting_seen.remove(uid);
    sim.kubelet.next_crash.remove(uid);
    sim.kubelet.running_since.remove(uid);
    sim.ips.release(uid);
}

fn node_ip(node: &Node) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone())
        .unwrap_or_default()
}

fn started(pod: &Pod) -> bool {
    pod.status.as_ref().is_some_and(|s| s.start_time.is_some())
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().map(|c| c.restart_count).max())
        .unwrap_or(0)
}

async fn reconcile(ctx: &Arc<Ctx>, key: Key) -> Result<Option<Duration>, kube::Error> {
    let Some(pod) = ctx.pods.get(&key) else {
        return Ok(None);
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let Some(node_name) = super::node_of(&pod) else {
        return Ok(None);
    };
    let Some(node) = ctx.nodes.get_named(&node_name) else {
        return Ok(None);
    };
    if ready_status(&node) != "True" {
        return Ok(None);
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &key.0);
    let now = Instant::now();

    if let Some(deleted_at) = pod.metadata.deletion_timestamp.as_ref() {
        if pod.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
            return Ok(None);
        }
        let seen = *ctx.sim().kubelet.deleting_seen.entry(uid.clone()).or_insert(now);
        let remaining_grace = deleted_at
            .0
            .duration_since(jiff::Timestamp::now())
            .as_millis()
            .max(0) as u64;
        let delay = Duration::from_millis(ctx.config.timing.pod_delete_millis.min(remaining_grace));
        let due = seen + delay;
        if due > now {
            return Ok(Some(due - now));
        }
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&key.1, &dp).await {
            Ok(r) => {
                if let Some(still) = r.left()
                    && still.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty())
                {
                    ctx.pods.apply(still);
                    return Ok(None);
                }
                ctx.pods.forget(&key, &uid);
            }
            Err(e) if matches!(api_code(&e), Some(404 | 409)) => {}
            Err(e) => return Err(e),
        }
        forget(ctx, &uid);
        return Ok(None);
    }
    if is_terminal(&pod) {
        return Ok(None);
    }
    let mode = behaviour(&pod);
    let start = start_delay(&pod, Duration::from_millis(ctx.config.timing.pod_start_millis));
    let mut restarts_now = restarts(&pod);
    // A pod whose containers run to completion: when they are due to exit.
    let completes = exit_code(&pod).filter(|_| mode == Behaviour::Ready);
    let finish_in = match completes {
        Some(code) if started(&pod) => {
            let run = run_time(&pod, Duration::from_millis(ctx.config.timing.pod_run_millis));
            let since = *ctx.sim().kubelet.running_since.entry(uid.clone()).or_insert(now);
            let due = since + run;
            if due <= now {
                return finish(ctx, &api, &key, &pod, &node, code).await;
            }
            Some(due - now)
        }
        _ => None,
    };
    if !started(&pod) {
        let seen = *ctx.sim().kubelet.bound_seen.entry(uid.clone()).or_insert(now);
        let due = seen + start;
        if due > now {
            return Ok(Some(due - now));
        }
    } else {
        match mode {
            Behaviour::CrashLoop => {
                let next = *ctx
                    .sim()
                    .kubelet
                    .next_crash
                    .entry(uid.clone())
                    .or_insert_with(|| now + crash_delay(start, restarts_now));
                if next > now {
                    return Ok(Some(next - now));
                }
                restarts_now += 1;
            }
            // Ready again after the node recovered (the node controller marked it not ready).
            // A readiness gate changed.
            Behaviour::Ready if !is_ready(&pod) || readiness_gates(&pod).is_err() => {
                let should_be_ready = readiness_gates(&pod).is_ok();
                let containers_ready = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|cs| cs.iter().all(|c| c.ready));
                if is_ready(&pod) == should_be_ready && containers_ready {
                    return Ok(finish_in);
                }
            }
            _ => return Ok(finish_in),
        }
    }
    let cidr = node.spec.as_ref().and_then(|s| s.pod_cidr.clone());
    let pod_ip = ctx.sim().ips.ip_for(&uid, &node_name, cidr.as_deref());
    let status = started_status(
        &pod,
        mode,
        restarts_now,
        &node_ip(&node),
        &pod_ip,
        jiff::Timestamp::now(),
    );
    let pp = PatchParams {
        field_manager: Some(MANAGER_KUBELET.into()),
        ..Default::default()
    };
    let updated = api
        .patch_status(&key.1, &pp, &Patch::Merge(&json!({ "status": status })))
        .await?;
    ctx.pods.apply(updated);
    if mode == Behaviour::CrashLoop {
        let delay = crash_delay(start, restarts_now);
        ctx.sim().kubelet.next_crash.insert(uid, now + delay);
        return Ok(Some(delay));
    }
    if matches!(mode, Behaviour::Failed | Behaviour::Succeeded) {
        ctx.sim().ips.release(&uid);
    }
    if completes.is_some() {
        let run = run_time(&pod, Duration::from_millis(ctx.config.timing.pod_run_millis));
        let since = *ctx.sim().kubelet.running_since.entry(uid).or_insert(now);
        return Ok(Some((since + run).saturating_duration_since(Instant::now())));
    }
    Ok(None)
}

/// The containers of a running pod exit with `code`: the pod becomes Succeeded or Failed.
async fn finish(
    ctx: &Arc<Ctx>,
    api: &Api<Pod>,
    key: &Key,
    pod: &Pod,
    node: &Node,
    code: i32,
) -> Result<Option<Duration>, kube::Error> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let node_name = node.name_any();
    let cidr = node.spec.as_ref().and_then(|s| s.pod_cidr.clone());
    let pod_ip = ctx.sim().ips.ip_for(&uid, &node_name, cidr.as_deref());
    let status = finished_status(pod, code, &node_ip(node), &pod_ip, jiff::Timestamp::now());
    let pp = PatchParams {
        field_manager: Some(MANAGER_KUBELET.into()),
        ..Default::default()
    };
    let updated = api
        .patch_status(&key.1, &pp, &Patch::Merge(&json!({ "status": status })))
        .await?;
    ctx.pods.apply(updated);
    let mut sim = ctx.sim();
    sim.kubelet.running_since.remove(&uid);
    sim.ips.release(&uid);
    Ok(None)
}

/// Crash-loop back-off, scaled to the configured start delay so tests can watch restarts:
/// `start × 2^restarts`, at least 100 ms and at most upstream's 5 minutes.
fn crash_delay(start: Duration, restarts: i32) -> Duration {
    let base = start.max(Duration::from_millis(100));
    base.saturating_mul(1 << restarts.clamp(0, 12))
        .min(super::kubelet_status::crash_backoff(i32::MAX))
}
