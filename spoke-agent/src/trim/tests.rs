//! Everything the agent computes from trimmed Nodes and Pods is what it computes from whole ones.

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

use kube::runtime::watcher::Event;

use super::{Nodes, Pods};
use crate::capacity::{NodeSummary, PodSummary, capacity_model, pending_pods};
use crate::slim::tests::{slim_node, slim_pod};

/// A pod as an API server sends it: managed fields, annotations, environment, probes, volumes,
/// container statuses.
fn whole_pod(name: &str, node: Option<&str>, phase: &str, scheduled: bool, deleting: bool) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "shop", "uid": format!("uid-{name}"),
            "resourceVersion": "42", "generateName": "web-7d9f-",
            "labels": {
                "app": "web", "pod-template-hash": "7d9f",
                "nave.dev/workload": "shop.web"
            },
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-01T00:00:00Z",
                            "prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f",
                                 "uid": "rs-uid", "controller": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                               "apiVersion": "v1", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]
        },
        "spec": {
            "containers": [{
                "name": "web", "image": "registry.example/web:1.2.3",
                "env": [{"name": "MODE", "value": "production"}],
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/web"}],
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                              "limits": {"memory": "512Mi", "nvidia.com/gpu": "1"}}
            }, {
                "name": "proxy", "image": "registry.example/proxy:2",
                "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}
            }],
            "initContainers": [{
                "name": "log-shipper", "image": "registry.example/ship:1", "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}
            }, {
                "name": "migrate", "image": "registry.example/migrate:1",
                "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}
            }],
            "overhead": {"cpu": "10m", "memory": "8Mi"},
            "volumes": [{"name": "config", "configMap": {"name": "web-config"}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}],
            "serviceAccountName": "default"
        },
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "PodScheduled", "status": if scheduled { "True" } else { "False" },
                 "reason": if scheduled { serde_json::Value::Null } else { json!("Unschedulable") },
                 "message": if scheduled { serde_json::Value::Null } else { json!("0/3 nodes are available: 3 Insufficient cpu.") },
                 "lastTransitionTime": "2026-11-26T10:00:00Z", "lastProbeTime": null},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-26T10:00:05Z"}
            ],
            "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0,
                                   "image": "registry.example/web:1.2.3", "imageID": "sha256:abc",
                                   "state": {"running": {"startedAt": "2026-11-26T10:00:04Z"}}}],
            "podIP": "10.0.0.7", "hostIP": "192.168.0.3", "qosClass": "Burstable"
        }
    });
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
    }
    if deleting {
        pod["metadata"]["deletionTimestamp"] = json!("2026-11-26T10:01:00Z");
    }
    serde_json::from_value(pod).unwrap()
}

/// A node as an API server sends it, with images, addresses and system information.
fn whole_node(name: &str, ready: bool, cordoned: bool, tainted: bool) -> Node {
    let mut node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name, "uid": format!("uid-{name}"), "resourceVersion": "7",
            "labels": {"kubernetes.io/hostname": name, "pool": "general",
                       "topology.kubernetes.io/zone": "eu-1a"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1"}]
        },
        "spec": {"podCIDR": "10.0.1.0/24", "providerID": format!("sim://{name}")},
        "status": {
            "allocatable": {"cpu": "7800m", "memory": "30Gi", "pods": "110", "ephemeral-storage": "90Gi"},
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": if ready { "True" } else { "False" },
                 "reason": "KubeletReady", "message": "kubelet is posting ready status",
                 "lastHeartbeatTime": "2026-11-26T10:00:00Z"}
            ],
            "addresses": [{"type": "InternalIP", "address": "192.168.0.3"}],
            "images": [{"names": ["registry.example/web:1.2.3"], "sizeBytes": 123456789}],
            "nodeInfo": {"kubeletVersion": "v1.32.0", "machineID": "m", "systemUUID": "s",
                         "bootID": "b", "kernelVersion": "6.1", "osImage": "Debian",
                         "containerRuntimeVersion": "containerd://1.7", "kubeProxyVersion": "v1.32.0",
                         "operatingSystem": "linux", "architecture": "amd64"}
        }
    });
    if cordoned {
        node["spec"]["unschedulable"] = json!(true);
    }
    if tainted {
        node["spec"]["taints"] = json!([{"key": "gpu", "value": "true", "effect": "NoSchedule"}]);
    }
    serde_json::from_value(node).unwrap()
}

fn pods() -> Vec<Pod> {
    vec![
        whole_pod("running", Some("n1"), "Running", true, false),
        whole_pod("starting", Some("n2"), "Pending", true, false),
        whole_pod("pending", None, "Pending", false, false),
        whole_pod("done", Some("n1"), "Succeeded", true, false),
        whole_pod("failed", Some("n2"), "Failed", true, false),
        whole_pod("leaving", None, "Pending", false, true),
    ]
}

#[test]
fn the_capacity_model_from_node_and_pod_summaries() {
    let summaries: Vec<PodSummary> = pods().iter().map(PodSummary::of).collect();
    let nodes: Vec<NodeSummary> = [
        whole_node("n1", true, false, false),
        whole_node("n2", true, false, true),
        whole_node("n3", false, false, false),
        whole_node("n4", true, true, false),
    ]
    .iter()
    .map(NodeSummary::of)
    .collect();
    let model = capacity_model(&nodes, &summaries);
    // n1, n3 and n4 share labels and taints (the hostname is left out); n2 is tainted.
    assert_eq!(model.node_groups.len(), 2, "{model:?}");
    assert_eq!(model.totals.schedulable_nodes, 2, "n3 is not Ready, n4 cordoned");
    assert_eq!(model.totals.allocatable.cpu_millis, 2 * 7800);
    assert_eq!(model.totals.nodes, 4);
    // n1 runs "running" (its requests counted) and "done" (not: it finished).
    let n1 = model
        .node_groups
        .iter()
        .flat_map(|g| &g.nodes)
        .find(|n| n.name == "n1")
        .expect("n1 in the model");
    assert_eq!(n1.requested, PodSummary::of(&pods()[0]).requests);
    // The running pod's requests: max(250m + 100m + 50m sidecar, 2 init + 50m sidecar) + 10m.
    assert_eq!(n1.requested.cpu_millis, 2060);
}

#[test]
fn the_pod_index_follows_the_watch_and_its_relists() {
    let pods_index = Pods::new();
    let all = pods();
    assert!(!pods_index.apply(&Event::Init));
    for pod in &all {
        pods_index.apply(&Event::InitApply(slim_pod(pod)));
    }
    assert!(pods_index.state().is_empty(), "a list counts once it is complete");
    assert!(pods_index.apply(&Event::InitDone));
    assert_eq!(pods_index.state().len(), all.len());
    let (pending, _) = pending_pods(pods_index.state().iter().map(|p| p.as_ref()));
    let names: Vec<&str> = pending.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["pending"],
        "only the unscheduled pod not being deleted is Pending"
    );
    assert_eq!(
        pending[0].message, "0/3 nodes are available: 3 Insufficient cpu.",
        "the scheduler's message survives"
    );

    // The Pending pod is scheduled: that changes a report (it no longer counts as Pending).
    let scheduled = whole_pod("pending", Some("n3"), "Running", true, false);
    assert!(pods_index.apply(&Event::Apply(slim_pod(&scheduled))));
    let (pending, _) = pending_pods(pods_index.state().iter().map(|p| p.as_ref()));
    assert!(pending.is_empty());
    // A pod that is not Nave's and not Pending changes nothing a report says.
    let mut foreign = whole_pod("other", Some("n1"), "Running", true, false);
    foreign.metadata.labels = None;
    assert!(!pods_index.apply(&Event::Apply(slim_pod(&foreign))));
    assert!(!pods_index.apply(&Event::Delete(slim_pod(&foreign))));
    assert!(pods_index.apply(&Event::Delete(slim_pod(&scheduled))));
    assert_eq!(pods_index.state().len(), all.len() - 1);

    // A relist replaces everything: pods deleted while the watch was down are gone.
    pods_index.apply(&Event::Init);
    pods_index.apply(&Event::InitApply(slim_pod(&all[0])));
    assert_eq!(
        pods_index.state().len(),
        all.len() - 1,
        "the old view stays until the list ends"
    );
    pods_index.apply(&Event::InitDone);
    assert_eq!(pods_index.state().len(), 1);
}

#[tokio::test]
async fn the_pod_index_is_ready_once_listed() {
    let pods_index = std::sync::Arc::new(Pods::new());
    let waiting = {
        let pods_index = pods_index.clone();
        tokio::spawn(async move { pods_index.wait_until_ready().await })
    };
    pods_index.apply(&Event::Init);
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "not ready before the list ends");
    pods_index.apply(&Event::InitDone);
    tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
        .await
        .expect("ready within 10 s of the list's end")
        .unwrap();
}

/// An object's size as JSON.
fn json_size<T: serde::Serialize>(object: &T) -> usize {
    serde_json::to_vec(object).map(|v| v.len()).unwrap_or_default()
}

#[test]
fn a_node_summary_keeps_what_the_model_reads_and_little_else() {
    let node = whole_node("n1", true, false, true);
    let summary = NodeSummary::of(&node);
    assert_eq!(summary.name, "n1");
    assert_eq!(
        summary.allocatable,
        nave_api::wire::Resources::new(7800, 30 << 30, 110)
    );
    assert!(summary.ready && !summary.unschedulable);
    assert_eq!(summary.taints.len(), 1);
    assert!(!summary.labels.contains_key("kubernetes.io/hostname"));
    let whole = json_size(&node);
    let kept = std::mem::size_of::<NodeSummary>()
        + summary.name.len()
        + summary
            .labels
            .iter()
            .map(|(k, v)| k.len() + v.len() + 48)
            .sum::<usize>()
        + summary
            .taints
            .iter()
            .map(|t| t.key.len() + t.value.len() + 56)
            .sum::<usize>();
    assert!(
        kept * 3 < whole,
        "a node summary is under a third of the node: about {kept} of {whole} bytes"
    );
}

#[test]
fn the_node_index_follows_the_watch() {
    let nodes = Nodes::new();
    nodes.apply(&Event::Init);
    nodes.apply(&Event::InitApply(slim_node(&whole_node(
        "n1", true, false, false,
    ))));
    nodes.apply(&Event::InitApply(slim_node(&whole_node(
        "n2", true, false, false,
    ))));
    nodes.apply(&Event::InitDone);
    assert_eq!(nodes.state().len(), 2);
    assert!(
        !nodes.apply(&Event::Apply(slim_node(&whole_node("n1", true, true, false)))),
        "a node's change shows in the next heartbeat, not in a status report"
    );
    let cordoned: Vec<_> = nodes.state().into_iter().filter(|n| n.unschedulable).collect();
    assert_eq!(cordoned.len(), 1);
    nodes.apply(&Event::Delete(slim_node(&whole_node("n2", true, false, false))));
    assert_eq!(nodes.state().len(), 1);
}
