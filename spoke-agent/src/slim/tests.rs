//! What the agent computes from a slim pod or node is what it computes from the whole one.

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

use super::{SlimNode, SlimPod};
use crate::capacity::{NodeSummary, PodSummary};

/// The slim form of `pod`, parsed from its JSON as the watch does.
pub(crate) fn slim_pod(pod: &Pod) -> SlimPod {
    serde_json::from_value(serde_json::to_value(pod).unwrap()).unwrap()
}

/// The slim form of `node`, parsed from its JSON as the watch does.
pub(crate) fn slim_node(node: &Node) -> SlimNode {
    serde_json::from_value(serde_json::to_value(node).unwrap()).unwrap()
}

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

#[test]
fn a_slim_pod_summarizes_as_the_whole_one() {
    let pods = [
        pod(json!({
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                         "labels": {"nave.dev/workload": "shop.web", "app": "web"},
                         "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
            "spec": {
                "nodeName": "n1",
                "containers": [
                    {"name": "web", "image": "web:1", "env": [{"name": "A", "value": "b"}],
                     "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                                   "limits": {"memory": "512Mi"}}},
                    {"name": "proxy", "image": "proxy:2",
                     "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}
                ],
                "initContainers": [
                    {"name": "ship", "image": "ship:1", "restartPolicy": "Always",
                     "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}},
                    {"name": "migrate", "image": "m:1", "resources": {"requests": {"cpu": "2"}}}
                ],
                "overhead": {"cpu": "10m"}
            },
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                       "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0,
                                              "image": "web:1", "imageID": "x"}]}
        })),
        pod(json!({
            "metadata": {"name": "web-2", "namespace": "shop",
                         "labels": {"nave.dev/workload": "shop.web"}},
            "spec": {"containers": [{"name": "web", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 3 Insufficient cpu.",
                 "lastTransitionTime": "2026-11-26T10:00:00Z"}]}
        })),
        pod(json!({
            "metadata": {"name": "done", "namespace": "batch",
                         "deletionTimestamp": "2026-11-26T10:01:00Z"},
            "spec": {"nodeName": "n2", "containers": [{"name": "c"}]},
            "status": {"phase": "Succeeded"}
        })),
        pod(json!({
            "metadata": {"name": "web-3", "namespace": "shop",
                         "labels": {"nave.dev/workload": "shop.web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "web"}, {"name": "proxy"}]},
            "status": {"phase": "Pending", "containerStatuses": [
                {"name": "proxy", "ready": false, "restartCount": 0, "image": "p", "imageID": "",
                 "state": {"waiting": {"reason": "ContainerCreating"}}},
                {"name": "web", "ready": false, "restartCount": 0, "image": "w", "imageID": "",
                 "state": {"waiting": {"reason": "ImagePullBackOff",
                                       "message": "Back-off pulling image \"w\""}}}]}
        })),
        pod(json!({
            "metadata": {"name": "web-4", "namespace": "shop", "deletionTimestamp": "2026-11-26T10:01:00Z",
                         "labels": {"nave.dev/workload": "shop.web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "web"}]},
            "status": {"phase": "Pending", "containerStatuses": [
                {"name": "web", "ready": false, "restartCount": 0, "image": "w", "imageID": "",
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
        })),
        pod(json!({"metadata": {"name": "bare"}})),
    ];
    let waiting: Vec<Option<&str>> = pods
        .iter()
        .map(|p| PodSummary::of(&slim_pod(p).0).waiting)
        .collect();
    assert_eq!(
        waiting,
        [None, None, None, Some("ImagePullBackOff"), None, None],
        "a container that cannot start is kept; one that is starting, or a pod on its way out, is not"
    );
    for whole in &pods {
        let slim = slim_pod(whole);
        assert_eq!(
            PodSummary::of(&slim.0),
            PodSummary::of(whole),
            "{:?}",
            whole.metadata.name
        );
        assert_eq!(slim.0.metadata.name, whole.metadata.name);
        assert_eq!(slim.0.metadata.namespace, whole.metadata.namespace);
        assert!(slim.0.metadata.managed_fields.is_none());
    }
}

#[test]
fn a_slim_node_summarizes_as_the_whole_one() {
    let whole: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "uid": "u", "resourceVersion": "3",
                     "labels": {"kubernetes.io/hostname": "n1", "pool": "gpu"},
                     "annotations": {"a": "b"}},
        "spec": {"podCIDR": "10.0.1.0/24", "unschedulable": true,
                 "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"},
                            {"key": "x", "effect": "Unknown"}]},
        "status": {
            "allocatable": {"cpu": "7800m", "memory": "30Gi", "pods": "110"},
            "capacity": {"cpu": "8"},
            "conditions": [{"type": "MemoryPressure", "status": "False"},
                           {"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "images": [{"names": ["web:1"], "sizeBytes": 1}],
            "nodeInfo": {"kubeletVersion": "v1.32.0", "machineID": "m", "systemUUID": "s",
                         "bootID": "b", "kernelVersion": "6", "osImage": "d",
                         "containerRuntimeVersion": "c", "kubeProxyVersion": "k",
                         "operatingSystem": "linux", "architecture": "amd64"}
        }
    }))
    .unwrap();
    let slim = slim_node(&whole);
    assert_eq!(NodeSummary::of(&slim.0), NodeSummary::of(&whole));
    assert!(slim.0.status.as_ref().is_some_and(|s| s.images.is_none()));
}

#[test]
fn a_list_page_parses_into_slim_pods() {
    let page = json!({
        "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"},
        "items": [{"metadata": {"name": "a", "namespace": "x"}, "spec": {"containers": null}}]
    });
    let list: kube::core::ObjectList<SlimPod> = serde_json::from_value(page).unwrap();
    assert_eq!(list.items[0].0.metadata.name.as_deref(), Some("a"));
    assert!(
        list.items[0]
            .0
            .spec
            .as_ref()
            .is_some_and(|s| s.containers.is_empty())
    );
}
