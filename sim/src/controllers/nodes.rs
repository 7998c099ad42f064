//! Simulated nodes: creation from the config, the node-initialize stage for client-created nodes,
//! the node-lifecycle controller (taints from conditions and cordons, NoExecute evictions, marking
//! pods not ready, deleting the pods of removed nodes), heartbeats and leases, and the node admin
//! operations.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::cache::{key_of, run_queue};
use super::fit::{TAINT_NOT_READY, TAINT_UNREACHABLE, tolerates};
use super::kubelet_status::node_ip;
use super::node_objects::{
    NodeShape, desired_taints, initial_status, is_initialized, node_object, ready_status, with_ready,
};
use super::pods::{is_active, is_ready};
use super::resources::is_terminal;
use super::{ControlPlaneError, Ctx, MANAGER_KUBELET, MANAGER_NODE_CONTROLLER, api_code, events};

/// Tolerations the apiserver's DefaultTolerationSeconds plugin would add.
const DEFAULT_TOLERATION_SECONDS: i64 = 300;
const LEASE_NAMESPACE: &str = "kube-node-lease";

/// A node to add (`POST /nodes`); unset fields come from the pool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewNode {
    /// Node name (default `<cluster>-<pool>-<n>`).
    #[serde(default)]
    pub name: Option<String>,
    /// Pool whose shape to copy (default: the first pool).
    #[serde(default)]
    pub pool: Option<String>,
    /// CPU quantity.
    #[serde(default)]
    pub cpu: Option<String>,
    /// Memory quantity.
    #[serde(default)]
    pub memory: Option<String>,
    /// Max pods.
    #[serde(default)]
    pub pods: Option<u32>,
    /// Extra labels (added to the pool's).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Taints (replace the pool's when given).
    #[serde(default)]
    pub taints: Option<Vec<crate::config::Taint>>,
}

/// One node as `GET /nodes` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSummary {
    /// Node name.
    pub name: String,
    /// Ready condition status.
    pub ready: String,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// `status.allocatable`.
    pub allocatable: BTreeMap<String, String>,
    /// Σ requests of the non-terminal pods on the node, in milli-units.
    pub requested_milli: BTreeMap<String, i128>,
    /// Number of non-terminal pods on the node.
    pub pods: usize,
}

fn pp(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.into()),
        ..Default::default()
    }
}

/// Registers the lifecycle controller's triggers.
pub(super) fn register(ctx: &Arc<Ctx>) {
    let q = ctx.node_queue.clone();
    ctx.nodes.on_change(move |old, new| {
        if let Some(n) = new.or(old) {
            q.add(n.name_any());
        }
    });
    // A pod landing on a node with NoExecute taints may have to be evicted.
    let q = ctx.node_queue.clone();
    let nodes = ctx.nodes.clone();
    ctx.pods.on_change(move |old, new| {
        if let Some(p) = new
            && let Some(name) = super::node_of(p)
            && old.is_none_or(|o| super::node_of(o).is_none())
            && nodes.get_named(&name).is_some_and(|n| has_no_execute(&n))
        {
            q.add(name);
        }
    });
}

fn has_no_execute(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.effect == "NoExecute"))
}

/// Creates the configured nodes (existing ones are left as they are).
pub(super) async fn create_configured(ctx: &Arc<Ctx>) -> Result<(), kube::Error> {
    let mut shapes = Vec::new();
    for pool in &ctx.config.node_pools {
        for i in 0..pool.count {
            shapes.push(NodeShape::from_pool(&ctx.config, pool, i));
        }
    }
    let now = Timestamp::now();
    let nodes: Vec<Node> = shapes
        .iter()
        .map(|shape| {
            let index = next_index(ctx);
            node_object(&ctx.config, shape, index, now)
        })
        .collect();
    let api: Api<Node> = Api::all(ctx.client.clone());
    let post = PostParams {
        field_manager: Some(MANAGER_KUBELET.into()),
        ..Default::default()
    };
    let results: Vec<Result<Node, kube::Error>> = futures::stream::iter(nodes)
        .map(|n| {
            let (api, post) = (api.clone(), post.clone());
            async move { api.create(&post, &n).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for r in results {
        match r {
            Ok(n) => ctx.nodes.apply(n),
            Err(e) if api_code(&e) == Some(409) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn next_index(ctx: &Ctx) -> u32 {
    let mut sim = ctx.sim();
    let i = sim.next_node_index;
    sim.next_node_index += 1;
    i
}

/// The node-lifecycle loop.
pub(super) async fn run(ctx: Arc<Ctx>) {
    ctx.nodes.wait_synced().await;
    ctx.pods.wait_synced().await;
    let q = ctx.node_queue.clone();
    let shutdown = ctx.shutdown.clone();
    run_queue(q, 8, shutdown, |name| {
        let ctx = ctx.clone();
        async move { reconcile(&ctx, name).await }
    })
    .await;
}

async fn reconcile(ctx: &Arc<Ctx>, name: String) -> Result<Option<Duration>, kube::Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let Some(mut node) = ctx.nodes.get_named(&name) else {
        // Pod GC: pods bound to a node that no longer exists are deleted at once.
        for p in ctx.pods.indexed(&name) {
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &p.namespace().unwrap_or_default());
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            };
            match api.delete(&p.name_any(), &dp).await {
                Ok(_) => ctx
                    .pods
                    .forget(&key_of(p.as_ref()), p.metadata.uid.as_deref().unwrap_or("")),
                Err(e) if api_code(&e) == Some(404) => {}
                Err(e) => return Err(e),
            }
        }
        return Ok(None);
    };
    let now = Timestamp::now();
    if !is_initialized(&node) {
        // kwok's node-initialize stage for nodes created by clients.
        let index = next_index(ctx);
        let status = node.status.clone().unwrap_or_default();
        let mut resources: BTreeMap<String, Quantity> = [
            ("cpu", "4"),
            ("memory", "16Gi"),
            ("pods", "110"),
            ("ephemeral-storage", "100Gi"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
        .collect();
        resources.extend(status.capacity.clone().unwrap_or_default());
        let mut init = initial_status(&name, &node_ip(index), &resources, now);
        if let Some(a) = status.allocatable.clone() {
            init["allocatable"] = json!(a);
        }
        let updated = nodes
            .patch_status(
                &name,
                &pp(MANAGER_KUBELET),
                &Patch::Merge(&json!({"status": init})),
            )
            .await?;
        ctx.nodes.apply(updated.clone());
        node = Arc::new(updated);
    }
    if let Some(taints) = desired_taints(&node, now) {
        let value = if taints.is_empty() {
            json!(null)
        } else {
            json!(taints)
        };
        let updated = nodes
            .patch(
                &name,
                &pp(MANAGER_NODE_CONTROLLER),
                &Patch::Merge(&json!({"spec": {"taints": value}})),
            )
            .await?;
        ctx.nodes.apply(updated.clone());
        node = Arc::new(updated);
    }
    let ready = ready_status(&node) == "True";
    let mut requeue: Option<Duration> = None;
    for p in ctx.pods.indexed(&name) {
        if !is_active(&p) {
            continue;
        }
        if !ready && is_ready(&p) {
            mark_not_ready(ctx, &p).await;
        }
        match eviction_due(ctx, &node, &p, now) {
            Some(d) if d.is_zero() => evict(ctx, &p).await,
            Some(d) => requeue = Some(requeue.map_or(d, |r| r.min(d))),
            None => {}
        }
    }
    Ok(requeue)
}

/// When the pod must be evicted for the node's NoExecute taints (`Some(0)`: now), if ever.
fn eviction_due(ctx: &Ctx, node: &Node, pod: &Pod, now: Timestamp) -> Option<Duration> {
    let taints: Vec<&Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| t.effect == "NoExecute")
        .collect();
    if taints.is_empty() {
        return None;
    }
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let scale = ctx.config.timing.toleration_scale;
    let mut due: Option<Duration> = None;
    for taint in taints {
        let matching: Vec<_> = tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        let seconds = if matching.is_empty() {
            if taint.key == TAINT_NOT_READY || taint.key == TAINT_UNREACHABLE {
                Some(DEFAULT_TOLERATION_SECONDS)
            } else {
                return Some(Duration::ZERO);
            }
        } else if matching.iter().any(|t| t.toleration_seconds.is_none()) {
            None
        } else {
            matching.iter().filter_map(|t| t.toleration_seconds).min()
        };
        let Some(seconds) = seconds else { continue };
        let added = taint.time_added.as_ref().map(|t| t.0).unwrap_or(now);
        let wait = Duration::from_secs_f64((seconds.max(0) as f64) * scale);
        let elapsed = Duration::from_millis(now.duration_since(added).as_millis().max(0) as u64);
        let left = wait.saturating_sub(elapsed);
        due = Some(due.map_or(left, |d| d.min(left)));
    }
    due
}

async fn evict(ctx: &Ctx, pod: &Pod) {
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    match api.delete(&pod.name_any(), &DeleteParams::default()).await {
        Ok(r) => {
            ctx.events.record(
                events::reference(pod),
                "Normal",
                "TaintManagerEviction",
                format!("Marking for deletion Pod {ns}/{}", pod.name_any()),
                "taint-eviction-controller",
            );
            match r.left() {
                Some(p) => ctx.pods.apply(p),
                None => ctx
                    .pods
                    .forget(&key_of(pod), pod.metadata.uid.as_deref().unwrap_or("")),
            }
        }
        Err(e) => tracing::debug!(pod = %pod.name_any(), error = %e, "eviction failed"),
    }
}

async fn mark_not_ready(ctx: &Ctx, pod: &Pod) {
    let now = super::rollout::whole_seconds(Timestamp::now()).to_string();
    let conditions: Vec<serde_json::Value> = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .iter()
        .filter_map(|c| serde_json::to_value(c).ok())
        .map(|mut c| {
            if c["type"] == "Ready" {
                c["status"] = json!("False");
                c["lastTransitionTime"] = json!(now);
            }
            c
        })
        .collect();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let patch = json!({"status": {"conditions": conditions}});
    match api
        .patch_status(
            &pod.name_any(),
            &pp(MANAGER_NODE_CONTROLLER),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(p) => ctx.pods.apply(p),
        Err(e) => tracing::debug!(pod = %pod.name_any(), error = %e, "marking not ready failed"),
    }
}

/// Renews Ready nodes' heartbeats and leases every `node_heartbeat_millis`.
pub(super) async fn heartbeat(ctx: Arc<Ctx>) {
    let period = Duration::from_millis(ctx.config.timing.node_heartbeat_millis);
    let ns_api: Api<Namespace> = Api::all(ctx.client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(LEASE_NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let _ = ns_api.create(&PostParams::default(), &ns).await;
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), LEASE_NAMESPACE);
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let mut have_lease: HashSet<String> = HashSet::new();
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ctx.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = Timestamp::now();
        for node in ctx.nodes.list() {
            if ready_status(&node) != "True" {
                continue;
            }
            let name = node.name_any();
            let stamp = super::rollout::whole_seconds(now).to_string();
            let conditions: Vec<serde_json::Value> = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default()
                .iter()
                .filter_map(|c| serde_json::to_value(c).ok())
                .map(|mut c| {
                    c["lastHeartbeatTime"] = json!(stamp);
                    c
                })
                .collect();
            if let Ok(n) = nodes
                .patch_status(
                    &name,
                    &pp(MANAGER_KUBELET),
                    &Patch::Merge(&json!({"status": {"conditions": conditions}})),
                )
                .await
            {
                ctx.nodes.apply(n);
            }
            let renew = MicroTime(now);
            if !have_lease.contains(&name) {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(LEASE_NAMESPACE.into()),
                        owner_references: Some(vec![OwnerReference {
                            api_version: "v1".into(),
                            kind: "Node".into(),
                            name: name.clone(),
                            uid: node.metadata.uid.clone().unwrap_or_default(),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(name.clone()),
                        lease_duration_seconds: Some(40),
                        renew_time: Some(renew.clone()),
                        ..Default::default()
                    }),
                };
                let post = PostParams {
                    field_manager: Some(MANAGER_KUBELET.into()),
                    ..Default::default()
                };
                match leases.create(&post, &lease).await {
                    Ok(_) => {
                        have_lease.insert(name);
                        continue;
                    }
                    Err(e) if api_code(&e) == Some(409) => {
                        have_lease.insert(name.clone());
                    }
                    Err(_) => continue,
                }
            }
            let patch = json!({"spec": {"renewTime": renew, "holderIdentity": name}});
            if let Err(e) = leases
                .patch(&name, &pp(MANAGER_KUBELET), &Patch::Merge(&patch))
                .await
                && api_code(&e) == Some(404)
            {
                have_lease.remove(&name);
            }
        }
    }
}

/// Adds a node; answers its name.
pub(super) async fn add_node(ctx: &Arc<Ctx>, new: NewNode) -> Result<String, ControlPlaneError> {
    let pools = &ctx.config.node_pools;
    let pool = match &new.pool {
        Some(p) => pools
            .iter()
            .find(|x| &x.name == p)
            .cloned()
            .ok_or_else(|| ControlPlaneError::Invalid(format!("pool: unknown node pool {p:?}")))?,
        None => pools.first().cloned().unwrap_or_default(),
    };
    for (field, v) in [("cpu", &new.cpu), ("memory", &new.memory)] {
        if let Some(v) = v
            && !nave_sim_core::quantity::parse_milli(v).is_ok_and(|m| m > 0)
        {
            return Err(ControlPlaneError::Invalid(format!(
                "{field}: invalid value {v:?}: must be a positive quantity"
            )));
        }
    }
    for t in new.taints.iter().flatten() {
        if !matches!(t.effect.as_str(), "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(ControlPlaneError::Invalid(format!(
                "taints: unsupported effect {:?}",
                t.effect
            )));
        }
    }
    let name = match new.name.clone() {
        Some(n) => n,
        None => (0..)
            .map(|i| ctx.config.node_name(&pool, i))
            .find(|n| ctx.nodes.get_named(n).is_none())
            .unwrap_or_default(),
    };
    let mut labels = pool.labels.clone();
    labels.extend(new.labels.clone());
    let shape = NodeShape {
        name: name.clone(),
        pool: pool.name.clone(),
        cpu: new.cpu.clone().unwrap_or(pool.cpu.clone()),
        memory: new.memory.clone().unwrap_or(pool.memory.clone()),
        pods: new.pods.unwrap_or(pool.pods),
        labels,
        taints: new.taints.clone().unwrap_or(pool.taints.clone()),
    };
    let node = node_object(&ctx.config, &shape, next_index(ctx), Timestamp::now());
    let api: Api<Node> = Api::all(ctx.client.clone());
    let post = PostParams {
        field_manager: Some(MANAGER_KUBELET.into()),
        ..Default::default()
    };
    let created = api
        .create(&post, &node)
        .await
        .map_err(|source| ControlPlaneError::Api {
            operation: format!("creating node {name}"),
            source,
        })?;
    ctx.nodes.apply(created);
    Ok(name)
}

/// Removes a node (its pods are then deleted by the lifecycle controller).
pub(super) async fn remove_node(ctx: &Arc<Ctx>, name: &str) -> Result<(), ControlPlaneError> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            ctx.node_queue.add(name.to_owned());
            Ok(())
        }
        Err(e) if api_code(&e) == Some(404) => Err(ControlPlaneError::NotFound(format!("node {name:?}"))),
        Err(source) => Err(ControlPlaneError::Api {
            operation: format!("deleting node {name}"),
            source,
        }),
    }
}

async fn current(ctx: &Ctx, name: &str) -> Result<Node, ControlPlaneError> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    match api.get(name).await {
        Ok(n) => Ok(n),
        Err(e) if api_code(&e) == Some(404) => Err(ControlPlaneError::NotFound(format!("node {name:?}"))),
        Err(source) => Err(ControlPlaneError::Api {
            operation: format!("reading node {name}"),
            source,
        }),
    }
}

/// Sets the Ready condition of a node.
pub(super) async fn set_ready(ctx: &Arc<Ctx>, name: &str, status: &str) -> Result<(), ControlPlaneError> {
    if !matches!(status, "True" | "False" | "Unknown") {
        return Err(ControlPlaneError::Invalid(format!(
            "status: unsupported value {status:?}: supported values: \"True\", \"False\", \"Unknown\""
        )));
    }
    let node = current(ctx, name).await?;
    let conditions = with_ready(&node, status, Timestamp::now());
    let manager = if status == "Unknown" {
        MANAGER_NODE_CONTROLLER
    } else {
        MANAGER_KUBELET
    };
    let api: Api<Node> = Api::all(ctx.client.clone());
    let updated = api
        .patch_status(
            name,
            &pp(manager),
            &Patch::Merge(&json!({"status": {"conditions": conditions}})),
        )
        .await
        .map_err(|source| ControlPlaneError::Api {
            operation: format!("updating node {name}"),
            source,
        })?;
    ctx.nodes.apply(updated);
    Ok(())
}

/// Merges quantities into a node's allocatable (raising capacity where it would be smaller).
pub(super) async fn set_allocatable(
    ctx: &Arc<Ctx>,
    name: &str,
    resources: BTreeMap<String, String>,
) -> Result<(), ControlPlaneError> {
    for (k, v) in &resources {
        if nave_sim_core::quantity::parse_milli(v).is_err() {
            return Err(ControlPlaneError::Invalid(format!("{k}: invalid quantity {v:?}")));
        }
    }
    let node = current(ctx, name).await?;
    let status = node.status.clone().unwrap_or_default();
    let mut allocatable = status.allocatable.clone().unwrap_or_default();
    let mut capacity = status.capacity.clone().unwrap_or_default();
    let milli = |q: &Quantity| nave_resources::Quantity::try_from(q).map_or(0, |q| q.milli_value());
    for (k, v) in resources {
        let q = Quantity(v);
        if capacity.get(&k).is_none_or(|c| milli(c) < milli(&q)) {
            capacity.insert(k.clone(), q.clone());
        }
        allocatable.insert(k, q);
    }
    let api: Api<Node> = Api::all(ctx.client.clone());
    let patch = json!({"status": {"allocatable": allocatable, "capacity": capacity}});
    let updated = api
        .patch_status(name, &pp(MANAGER_KUBELET), &Patch::Merge(&patch))
        .await
        .map_err(|source| ControlPlaneError::Api {
            operation: format!("updating node {name}"),
            source,
        })?;
    ctx.nodes.apply(updated);
    ctx.scheduler_wake.notify_one();
    Ok(())
}

/// A summary of every node.
pub(super) fn summaries(ctx: &Ctx) -> Vec<NodeSummary> {
    let mut out: Vec<NodeSummary> = ctx
        .nodes
        .list()
        .iter()
        .map(|n| {
            let name = n.name_any();
            let mut requested: BTreeMap<String, i128> = BTreeMap::new();
            let mut pods = 0;
            for p in ctx.pods.indexed(&name).iter().filter(|p| !is_terminal(p)) {
                pods += 1;
                for (k, v) in p
                    .spec
                    .as_ref()
                    .map(nave_resources::pod_requests)
                    .unwrap_or_default()
                {
                    let e = requested.entry(k).or_insert(0);
                    *e = e.saturating_add(v);
                }
            }
            NodeSummary {
                name,
                ready: ready_status(n).to_owned(),
                unschedulable: n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
                allocatable: n
                    .status
                    .as_ref()
                    .and_then(|s| s.allocatable.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect(),
                requested_milli: requested,
                pods,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
