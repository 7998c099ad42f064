//! Simulated Node objects and the node-lifecycle rules as plain functions: the
//! node a pool config describes, the node-initialize status, and the taints a node's conditions
//! call for.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde_json::{Value, json};

use super::fit::{TAINT_NOT_READY, TAINT_UNREACHABLE, TAINT_UNSCHEDULABLE};
use super::kubelet_status::{node_ip, pod_cidr};
use crate::config::{ClusterConfig, NodePool};

/// The kubelet version simulated nodes report.
pub const KUBELET_VERSION: &str = "v1.32.0-kubesim";
/// Label naming the node pool a simulated node belongs to.
pub const POOL_LABEL: &str = "sim.nave.dev/node-pool";
/// Ephemeral storage of every simulated node.
const EPHEMERAL_STORAGE: &str = "100Gi";

/// Everything needed to create one simulated node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeShape {
    /// Node name.
    pub name: String,
    /// Pool name (a label).
    pub pool: String,
    /// CPU quantity.
    pub cpu: String,
    /// Memory quantity.
    pub memory: String,
    /// Max pods.
    pub pods: u32,
    /// Extra labels.
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<crate::config::Taint>,
}

impl NodeShape {
    /// Node `i` of `pool`.
    pub fn from_pool(config: &ClusterConfig, pool: &NodePool, i: u32) -> NodeShape {
        NodeShape {
            name: config.node_name(pool, i),
            pool: pool.name.clone(),
            cpu: pool.cpu.clone(),
            memory: pool.memory.clone(),
            pods: pool.pods,
            labels: pool.labels.clone(),
            taints: pool.taints.clone(),
        }
    }
}

/// The Node object for a shape; `index` picks its IP and pod CIDR.
pub fn node_object(config: &ClusterConfig, shape: &NodeShape, index: u32, now: Timestamp) -> Node {
    let mut labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", shape.name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
        (POOL_LABEL, shape.pool.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    if let Some(r) = &config.region {
        labels.insert("topology.kubernetes.io/region".into(), r.clone());
    }
    if let Some(z) = &config.zone {
        labels.insert("topology.kubernetes.io/zone".into(), z.clone());
    }
    labels.extend(shape.labels.clone());
    let taints: Vec<Taint> = shape
        .taints
        .iter()
        .map(|t| Taint {
            key: t.key.clone(),
            value: (!t.value.is_empty()).then(|| t.value.clone()),
            effect: t.effect.clone(),
            time_added: None,
        })
        .collect();
    let mut node = Node {
        metadata: ObjectMeta {
            name: Some(shape.name.clone()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: Some(pod_cidr(index)),
            pod_cidrs: Some(vec![pod_cidr(index)]),
            provider_id: Some(format!("kubesim://{}/{}", config.name, shape.name)),
            taints: (!taints.is_empty()).then_some(taints),
            ..Default::default()
        }),
        status: None,
    };
    let resources: BTreeMap<String, Quantity> = [
        ("cpu", shape.cpu.clone()),
        ("memory", shape.memory.clone()),
        ("pods", shape.pods.to_string()),
        ("ephemeral-storage", EPHEMERAL_STORAGE.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Quantity(v)))
    .collect();
    let status = initial_status(&shape.name, &node_ip(index), &resources, now);
    node.status = serde_json::from_value(status).ok();
    node
}

/// kwok's node-initialize status: conditions, addresses, capacity/allocatable, nodeInfo.
pub fn initial_status(name: &str, ip: &str, resources: &BTreeMap<String, Quantity>, now: Timestamp) -> Value {
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": node_conditions("True", now),
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "architecture": "amd64", "operatingSystem": "linux",
            "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": KUBELET_VERSION,
            "containerRuntimeVersion": "sim://1.0", "kernelVersion": "6.1.0-sim", "osImage": "kube-sim",
            "machineID": "", "systemUUID": "", "bootID": "",
        },
        "phase": "Running",
    })
}

fn ts(t: Timestamp) -> Value {
    Value::String(Timestamp::from_second(t.as_second()).unwrap_or(t).to_string())
}

/// The five node conditions with the Ready condition in state `ready` (`True`, `False` or
/// `Unknown`).
pub fn node_conditions(ready: &str, now: Timestamp) -> Value {
    let now = ts(now);
    let c = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let ready = match ready {
        "True" => c("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        other => c(
            "Ready",
            other,
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
        ),
    };
    json!([
        ready,
        c(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        c(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        c(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        c(
            "NetworkUnavailable",
            "False",
            "RouteCreated",
            "RouteController created a route"
        ),
    ])
}

/// The node's conditions with Ready set to `ready` (transition time kept when unchanged).
pub fn with_ready(node: &Node, ready: &str, now: Timestamp) -> Value {
    let mut conditions = serde_json::to_value(node.status.as_ref().and_then(|s| s.conditions.clone()))
        .ok()
        .filter(Value::is_array)
        .unwrap_or_else(|| node_conditions("True", now));
    let fresh = node_conditions(ready, now);
    let new_ready = fresh[0].clone();
    if let Some(list) = conditions.as_array_mut() {
        match list.iter_mut().find(|c| c["type"] == "Ready") {
            Some(c) => {
                let keep = c["status"] == new_ready["status"];
                let transition = c["lastTransitionTime"].clone();
                *c = new_ready;
                if keep {
                    c["lastTransitionTime"] = transition;
                }
            }
            None => list.insert(0, new_ready),
        }
    }
    conditions
}

/// The node's Ready status: `True`, `False` or `Unknown` (missing counts as Unknown).
pub fn ready_status(node: &Node) -> &str {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str())
        .unwrap_or("Unknown")
}

/// Whether the node has a Ready condition at all (else it needs the initialize stage).
pub fn is_initialized(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready"))
}

/// The taints the node-lifecycle controller maintains, given the node's conditions and
/// `spec.unschedulable`; other taints are kept as they are, and existing managed taints keep
/// their `timeAdded`. `None` when nothing changes.
pub fn desired_taints(node: &Node, now: Timestamp) -> Option<Vec<Taint>> {
    let current = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let managed = |k: &str| matches!(k, TAINT_NOT_READY | TAINT_UNREACHABLE | TAINT_UNSCHEDULABLE);
    let mut want: Vec<(&str, &str)> = Vec::new();
    match ready_status(node) {
        "False" => want.extend([(TAINT_NOT_READY, "NoSchedule"), (TAINT_NOT_READY, "NoExecute")]),
        "Unknown" if is_initialized(node) => want.extend([
            (TAINT_UNREACHABLE, "NoSchedule"),
            (TAINT_UNREACHABLE, "NoExecute"),
        ]),
        _ => {}
    }
    if node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false) {
        want.push((TAINT_UNSCHEDULABLE, "NoSchedule"));
    }
    let mut out: Vec<Taint> = current.iter().filter(|t| !managed(&t.key)).cloned().collect();
    for (key, effect) in &want {
        let existing = current.iter().find(|t| t.key == *key && t.effect == *effect);
        out.push(
            existing.cloned().unwrap_or_else(|| Taint {
                key: (*key).to_owned(),
                value: None,
                effect: (*effect).to_owned(),
                time_added: (*effect == "NoExecute")
                    .then(|| Time(Timestamp::from_second(now.as_second()).unwrap_or(now))),
            }),
        );
    }
    let same = out.len() == current.len() && out.iter().all(|t| current.contains(t));
    (!same).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ClusterConfig {
        ClusterConfig {
            name: "c1".into(),
            region: Some("eu".into()),
            zone: Some("eu-1a".into()),
            ..Default::default()
        }
    }

    #[test]
    fn configured_node_has_labels_resources_and_ready_status() {
        let cfg = config();
        let pool = NodePool {
            labels: [("tier".to_string(), "gold".to_string())].into(),
            taints: vec![crate::config::Taint {
                key: "dedicated".into(),
                value: "gpu".into(),
                effect: "NoSchedule".into(),
            }],
            ..NodePool::default()
        };
        let n = node_object(
            &cfg,
            &NodeShape::from_pool(&cfg, &pool, 1),
            1,
            Timestamp::UNIX_EPOCH,
        );
        let v = serde_json::to_value(&n).expect("json");
        assert_eq!(v["metadata"]["name"], "c1-node-1");
        let labels = &v["metadata"]["labels"];
        assert_eq!(labels["kubernetes.io/hostname"], "c1-node-1");
        assert_eq!(labels["topology.kubernetes.io/zone"], "eu-1a");
        assert_eq!(labels["topology.kubernetes.io/region"], "eu");
        assert_eq!(labels["tier"], "gold");
        assert_eq!(
            v["spec"]["taints"],
            json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
        );
        assert_eq!(v["status"]["capacity"]["cpu"], "4");
        assert_eq!(v["status"]["allocatable"]["memory"], "16Gi");
        assert_eq!(v["status"]["nodeInfo"]["kubeletVersion"], KUBELET_VERSION);
        assert_eq!(v["status"]["conditions"][0]["reason"], "KubeletReady");
        assert_eq!(
            v["status"]["addresses"][0],
            json!({"type": "InternalIP", "address": "10.0.0.3"})
        );
        assert_eq!(v["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
        assert_eq!(ready_status(&n), "True");
        assert_eq!(desired_taints(&n, Timestamp::UNIX_EPOCH), None);
    }

    #[test]
    fn not_ready_and_cordoned_nodes_get_their_taints() {
        let cfg = config();
        let mut n = node_object(
            &cfg,
            &NodeShape::from_pool(&cfg, &NodePool::default(), 0),
            0,
            Timestamp::UNIX_EPOCH,
        );
        let conds = with_ready(&n, "False", Timestamp::UNIX_EPOCH);
        n.status.as_mut().expect("status").conditions = serde_json::from_value(conds).ok();
        n.spec.as_mut().expect("spec").unschedulable = Some(true);
        let taints = desired_taints(&n, Timestamp::UNIX_EPOCH).expect("changes");
        let keys: Vec<_> = taints
            .iter()
            .map(|t| (t.key.as_str(), t.effect.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                (TAINT_NOT_READY, "NoSchedule"),
                (TAINT_NOT_READY, "NoExecute"),
                (TAINT_UNSCHEDULABLE, "NoSchedule")
            ]
        );
        n.spec.as_mut().expect("spec").taints = Some(taints);
        assert_eq!(desired_taints(&n, Timestamp::UNIX_EPOCH), None, "stable");
        let conds = with_ready(&n, "True", Timestamp::UNIX_EPOCH);
        n.status.as_mut().expect("status").conditions = serde_json::from_value(conds).ok();
        n.spec.as_mut().expect("spec").unschedulable = None;
        assert_eq!(desired_taints(&n, Timestamp::UNIX_EPOCH), Some(vec![]));
    }
}
