//! Foreign pods: pods owned by no controller and already bound to nodes, standing for workloads
//! outside the system under test that fill nodes. They carry the label
//! `sim.nave.dev/foreign: "true"`.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use serde::{Deserialize, Serialize};

use super::cache::key_of;
use super::{ControlPlaneError, Ctx, MANAGER_KUBELET};

/// Label marking foreign pods.
pub const FOREIGN_LABEL: &str = "sim.nave.dev/foreign";
/// At most this many foreign pods per request.
const MAX_COUNT: u32 = 10_000;

fn default_namespace() -> String {
    "default".into()
}
fn default_count() -> u32 {
    1
}

/// A request for foreign pods (`POST /foreign-pods`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForeignPodsRequest {
    /// Namespace (default `default`).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// How many pods (default 1).
    #[serde(default = "default_count")]
    pub count: u32,
    /// CPU request of each pod (quantity).
    #[serde(default)]
    pub cpu: Option<String>,
    /// Memory request of each pod (quantity).
    #[serde(default)]
    pub memory: Option<String>,
    /// Nodes to bind to, round-robin; all nodes (by name) when absent.
    #[serde(default)]
    pub nodes: Option<Vec<String>>,
    /// Extra labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl Default for ForeignPodsRequest {
    fn default() -> Self {
        ForeignPodsRequest {
            namespace: default_namespace(),
            count: 1,
            cpu: None,
            memory: None,
            nodes: None,
            labels: BTreeMap::new(),
        }
    }
}

/// A foreign pod as `GET /foreign-pods` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForeignPod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Node.
    pub node: String,
    /// CPU request in milli-cores.
    pub cpu_milli: i128,
    /// Memory request in bytes.
    pub memory_bytes: i128,
}

fn is_foreign(p: &Pod) -> bool {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(FOREIGN_LABEL))
        .is_some_and(|v| v == "true")
}

/// Creates foreign pods; answers their names.
pub(super) async fn create(
    ctx: &Arc<Ctx>,
    req: ForeignPodsRequest,
) -> Result<Vec<String>, ControlPlaneError> {
    if req.count == 0 || req.count > MAX_COUNT {
        return Err(ControlPlaneError::Invalid(format!(
            "count: invalid value {}: must be 1..={MAX_COUNT}",
            req.count
        )));
    }
    let mut requests: BTreeMap<String, Quantity> = BTreeMap::new();
    for (name, v) in [("cpu", &req.cpu), ("memory", &req.memory)] {
        if let Some(v) = v {
            if !nave_sim_core::quantity::parse_milli(v).is_ok_and(|m| m >= 0) {
                return Err(ControlPlaneError::Invalid(format!(
                    "{name}: invalid quantity {v:?}"
                )));
            }
            requests.insert(name.into(), Quantity(v.clone()));
        }
    }
    let nodes: Vec<String> = match &req.nodes {
        Some(list) if !list.is_empty() => {
            for n in list {
                if ctx.nodes.get_named(n).is_none() {
                    return Err(ControlPlaneError::NotFound(format!("node {n:?}")));
                }
            }
            list.clone()
        }
        _ => {
            let mut all: Vec<String> = ctx.nodes.list().iter().map(|n| n.name_any()).collect();
            all.sort();
            all
        }
    };
    if nodes.is_empty() {
        return Err(ControlPlaneError::Invalid(
            "nodes: the cluster has no nodes".into(),
        ));
    }
    let mut labels = req.labels.clone();
    labels.insert(FOREIGN_LABEL.into(), "true".into());
    let pods: Vec<Pod> = (0..req.count as usize)
        .map(|i| Pod {
            metadata: ObjectMeta {
                generate_name: Some("foreign-".into()),
                namespace: Some(req.namespace.clone()),
                labels: Some(labels.clone()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(nodes[i % nodes.len()].clone()),
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("registry.k8s.io/pause:3.10".into()),
                    resources: Some(ResourceRequirements {
                        requests: (!requests.is_empty()).then(|| requests.clone()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        })
        .collect();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &req.namespace);
    let post = PostParams {
        field_manager: Some(MANAGER_KUBELET.into()),
        ..Default::default()
    };
    let results: Vec<Result<Pod, kube::Error>> = futures::stream::iter(pods)
        .map(|p| {
            let (api, post) = (api.clone(), post.clone());
            async move { api.create(&post, &p).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut names = Vec::new();
    for r in results {
        let p = r.map_err(|source| ControlPlaneError::Api {
            operation: "creating a foreign pod".into(),
            source,
        })?;
        names.push(p.name_any());
        ctx.pods.apply(p);
    }
    ctx.scheduler_wake.notify_one();
    names.sort();
    Ok(names)
}

/// Deletes foreign pods (all, or those on `node`) at once; answers how many.
pub(super) async fn remove(ctx: &Arc<Ctx>, node: Option<&str>) -> Result<usize, ControlPlaneError> {
    let victims = ctx
        .pods
        .filter(|p| is_foreign(p) && node.is_none_or(|n| super::node_of(p).as_deref() == Some(n)));
    let mut n = 0;
    for p in victims {
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &p.namespace().unwrap_or_default());
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        match api.delete(&p.name_any(), &dp).await {
            Ok(_) => {
                n += 1;
                ctx.pods
                    .forget(&key_of(p.as_ref()), p.metadata.uid.as_deref().unwrap_or(""));
            }
            Err(e) if super::api_code(&e) == Some(404) => {}
            Err(source) => {
                return Err(ControlPlaneError::Api {
                    operation: format!("deleting {}", p.name_any()),
                    source,
                });
            }
        }
    }
    ctx.scheduler_wake.notify_one();
    Ok(n)
}

/// Every foreign pod.
pub(super) fn list(ctx: &Ctx) -> Vec<ForeignPod> {
    let mut out: Vec<ForeignPod> = ctx
        .pods
        .filter(is_foreign)
        .iter()
        .map(|p| {
            let req = p
                .spec
                .as_ref()
                .map(nave_resources::pod_requests)
                .unwrap_or_default();
            ForeignPod {
                namespace: p.namespace().unwrap_or_default(),
                name: p.name_any(),
                node: super::node_of(p).unwrap_or_default(),
                cpu_milli: req.milli("cpu"),
                memory_bytes: req.milli("memory") / 1000,
            }
        })
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}
