//! The resource metrics API, `metrics.k8s.io/v1beta1`, as metrics-server serves it: what
//! `kubectl top` and autoscalers read.  Every cluster serves it, computed on each request from the
//! control plane's usage model ([`crate::metrics::resource_usage`]), so it reports the same
//! numbers as the usage series of `/metrics`, under the usage factor and node overrides the admin
//! routes set at that moment.
//!
//! ```text
//!  GET /apis/metrics.k8s.io/v1beta1/[namespaces/<ns>/]pods[/<name>]   PodMetrics(List)
//!  GET /apis/metrics.k8s.io/v1beta1/nodes[/<name>]                     NodeMetrics(List)
//!      rest::handle ──► ControlPlane::resource_usage() ──► objects (this module)
//!                   ──► the generic list: selectors, limit/continue, Table, PartialObjectMetadata
//! ```
//!
//! As metrics-server does:
//! - only `get` and `list` are served; a watch answers 405 `MethodNotAllowed` (`watch is not
//!   supported on resources of kind "pods.metrics.k8s.io"`), other verbs 405 as well;
//! - a pod appears once one of its containers runs, with an entry per running container (a
//!   Pending pod has no metrics); every node appears, with the sum of its pods' usage or the
//!   override of `PUT /_sim/v1/nodes/{name}/usage`;
//! - objects carry the labels of their pod or node, which label selectors match; `metadata.name` and
//!   `metadata.namespace` field selectors work; `creationTimestamp` and `timestamp` are now and
//!   `window` is 15 s;
//! - CPU is reported in nanocores and memory in bytes, in canonical quantity form (`250m`,
//!   `1234567n`, `128Mi`);
//! - getting a pod or node that does not exist answers its own 404 (`pods "web" not found`), one
//!   that has no metrics `podmetrics.metrics.k8s.io "<namespace>/<name>" not found` (or
//!   `nodemetrics.metrics.k8s.io "<name>"`), which `kubectl top` turns into "metrics not available".
//!
//! Unlike metrics-server, which answers every item at once, lists honour `limit` and `continue`
//! like every other list of the simulator (a client must accept both), and carry the store's
//! resourceVersion where metrics-server's is empty.  A cluster started without a control plane has
//! no usage model: its lists are empty.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nave_sim_core::quantity::{QuantityFormat, format_milli};
use serde_json::{Value, json};

use super::ClusterState;
use super::error::{ApiError, ApiResult};
use super::meta;
use super::resources::ResourceType;
use super::store::ObjKey;
use crate::controllers::ControlPlane;
use crate::metrics::{NodeUsage, PodUsage};

/// The API group.
pub const GROUP: &str = "metrics.k8s.io";

/// The span metrics-server's samples cover at its default resolution.
const WINDOW: &str = "15s";

/// CPU as metrics-server writes it: nanocores, in the canonical form of upstream
/// `Quantity.String()`, which drops trailing zeros three at a time (`250000000n` is `250m`).
fn cpu_quantity(cores: f64) -> String {
    let nanos = (cores * 1e9).round() as i128;
    if nanos % 1_000_000 == 0 {
        format_milli(nanos / 1_000_000, QuantityFormat::DecimalSI)
    } else if nanos % 1000 == 0 {
        format!("{}u", nanos / 1000)
    } else {
        format!("{nanos}n")
    }
}

/// Memory as metrics-server writes it: whole bytes in canonical binary form (`128Mi`, `1025`).
fn memory_quantity(bytes: f64) -> String {
    format_milli(bytes.round() as i128 * 1000, QuantityFormat::BinarySI)
}

fn resource_list(cpu: f64, memory: f64) -> Value {
    json!({"cpu": cpu_quantity(cpu), "memory": memory_quantity(memory)})
}

/// The metadata metrics-server gives a metrics object: its pod's or node's name, namespace and
/// labels, created now.
fn object_meta(m: &ObjectMeta, now: &str) -> Value {
    let mut meta = json!({"name": m.name, "creationTimestamp": now});
    if let Some(ns) = &m.namespace {
        meta["namespace"] = json!(ns);
    }
    if let Some(labels) = m.labels.as_ref().filter(|l| !l.is_empty()) {
        meta["labels"] = json!(labels);
    }
    meta
}

fn pod_metrics(rt: &ResourceType, p: &PodUsage, now: &str) -> Value {
    let containers: Vec<Value> = p
        .containers
        .iter()
        .map(|(name, cpu, memory)| json!({"name": name, "usage": resource_list(*cpu, *memory)}))
        .collect();
    json!({
        "kind": rt.kind, "apiVersion": rt.api_version(),
        "metadata": object_meta(&p.pod.metadata, now),
        "timestamp": now, "window": WINDOW, "containers": containers,
    })
}

fn node_metrics(rt: &ResourceType, n: &NodeUsage, now: &str) -> Value {
    json!({
        "kind": rt.kind, "apiVersion": rt.api_version(),
        "metadata": object_meta(&n.node.metadata, now),
        "timestamp": now, "window": WINDOW, "usage": resource_list(n.cpu, n.memory),
    })
}

fn key(m: &ObjectMeta) -> ObjKey {
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

/// Whether `rt` is PodMetrics (else NodeMetrics).
fn is_pods(rt: &ResourceType) -> bool {
    rt.plural == "pods"
}

/// The metrics objects of `rt` whose `(namespace, name)` is `wanted`, sorted by it, at this
/// instant.
fn objects(state: &ClusterState, rt: &ResourceType, wanted: impl Fn(&ObjKey) -> bool) -> Vec<Value> {
    let usage = state
        .control_plane
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(ControlPlane::resource_usage)
        .unwrap_or_default();
    let now = meta::now_rfc3339();
    let mut out: Vec<(ObjKey, Value)> = if is_pods(rt) {
        usage
            .pods
            .iter()
            .map(|p| (key(&p.pod.metadata), p))
            .filter(|(k, _)| wanted(k))
            .map(|(k, p)| (k, pod_metrics(rt, p, &now)))
            .collect()
    } else {
        usage
            .nodes
            .iter()
            .map(|n| (key(&n.node.metadata), n))
            .filter(|(k, _)| wanted(k))
            .map(|(k, n)| (k, node_metrics(rt, n, &now)))
            .collect()
    };
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, v)| v).collect()
}

/// The list source of `rt`: its objects in `ns` (`None`: every namespace) that sort after `after`
/// (a continue token's last key), by namespace then name, as the store lists stored objects.
pub fn list(
    state: &ClusterState,
    rt: &ResourceType,
    ns: Option<&str>,
    after: Option<&ObjKey>,
) -> Vec<Arc<Value>> {
    let wanted = |k: &ObjKey| ns.is_none_or(|ns| k.0 == ns) && after.is_none_or(|a| k > a);
    objects(state, rt, wanted).into_iter().map(Arc::new).collect()
}

/// One metrics object, or metrics-server's 404: the pod's or node's own when it does not exist,
/// `podmetrics.metrics.k8s.io "<ns>/<name>"` / `nodemetrics.metrics.k8s.io "<name>"` when it has
/// no metrics.
pub fn get(state: &ClusterState, rt: &ResourceType, ns: &str, name: &str) -> ApiResult<Value> {
    let core = state
        .registry
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get("", "v1", &rt.plural)
        .ok_or_else(|| ApiError::internal(format!("{} are not registered", rt.plural)))?;
    if state.store.get(&core.table, ns, name).is_none() {
        return Err(ApiError::not_found(&core, name));
    }
    objects(state, rt, |k| k.0 == ns && k.1 == name)
        .pop()
        .ok_or_else(|| {
            if is_pods(rt) {
                ApiError::not_found_in(GROUP, "podmetrics", &format!("{ns}/{name}"))
            } else {
                ApiError::not_found_in(GROUP, "nodemetrics", name)
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_canonical_nanocores_and_bytes() {
        assert_eq!(cpu_quantity(0.25), "250m");
        assert_eq!(cpu_quantity(2.0), "2");
        assert_eq!(cpu_quantity(0.123456), "123456u");
        assert_eq!(cpu_quantity(0.001234567), "1234567n");
        assert_eq!(cpu_quantity(0.0), "0");
        assert_eq!(memory_quantity(134_217_728.0), "128Mi");
        assert_eq!(memory_quantity(1_572_864.0), "1536Ki");
        assert_eq!(memory_quantity(1025.4), "1025");
        // Upstream writes binary quantities under 1024 in decimal notation.
        assert_eq!(memory_quantity(1000.0), "1k");
        for q in ["250m", "123456u", "1234567n", "128Mi", "1536Ki"] {
            assert!(nave_sim_core::quantity::Quantity::parse(q).is_ok(), "{q} parses");
        }
    }
}
