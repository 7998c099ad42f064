//! End-to-end behaviour of the simulated control plane, through a real `SimCluster` and kube-rs:
//! Deployments become Available with upstream status, the scheduler's Unschedulable messages,
//! node selectors and taints, foreign pods, rollouts, garbage collection, node admin routes and
//! the metrics text.
//!
//! Tests wait for conditions with deadlines and report what they last saw.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use nave_sim::config::{ClusterConfig, NodePool, Taint, Timing};
use nave_sim::controllers::{ControlPlane, ForeignPodsRequest};
use nave_sim::{ServeOptions, SimCluster};
use serde_json::{Value, json};
use tower::ServiceExt;

const DEADLINE: Duration = Duration::from_secs(15);

/// A cluster fixture: `cluster("c1").pool("general", 1, "1", "4Gi")`.
struct Fixture {
    config: ClusterConfig,
}

fn cluster(name: &str) -> Fixture {
    Fixture {
        config: ClusterConfig {
            name: name.into(),
            zone: Some("zone-a".into()),
            node_pools: Vec::new(),
            timing: Timing {
                pod_start_millis: 100,
                pod_delete_millis: 50,
                ..Timing::default()
            },
            ..ClusterConfig::default()
        },
    }
}

impl Fixture {
    fn pool(mut self, name: &str, count: u32, cpu: &str, memory: &str) -> Self {
        self.config.node_pools.push(NodePool {
            name: name.into(),
            count,
            cpu: cpu.into(),
            memory: memory.into(),
            ..NodePool::default()
        });
        self
    }

    fn labelled(mut self, key: &str, value: &str) -> Self {
        if let Some(p) = self.config.node_pools.last_mut() {
            p.labels.insert(key.into(), value.into());
        }
        self
    }

    fn tainted(mut self, key: &str, value: &str, effect: &str) -> Self {
        if let Some(p) = self.config.node_pools.last_mut() {
            p.taints.push(Taint {
                key: key.into(),
                value: value.into(),
                effect: effect.into(),
            });
        }
        self
    }

    async fn start(self) -> Running {
        let sim = SimCluster::start(self.config, ServeOptions::default())
            .await
            .expect("cluster starts");
        let client = sim.in_process_client();
        let cp = sim.control_plane().expect("the control plane runs");
        cp.wait_synced().await;
        Running { sim, client, cp }
    }
}

struct Running {
    sim: SimCluster,
    client: Client,
    cp: ControlPlane,
}

impl Running {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), "default")
    }

    fn replicasets(&self) -> Api<ReplicaSet> {
        Api::namespaced(self.client.clone(), "default")
    }

    async fn create_deployment(&self, d: Value) {
        let d: Deployment = serde_json::from_value(d).expect("a Deployment");
        self.deployments()
            .create(&PostParams::default(), &d)
            .await
            .expect("deployment created");
    }

    async fn pods_json(&self, selector: &str) -> Vec<Value> {
        let list = self
            .pods()
            .list(&ListParams::default().labels(selector))
            .await
            .expect("list pods");
        list.items
            .iter()
            .map(|p| serde_json::to_value(p).expect("json"))
            .collect()
    }
}

/// A Deployment of `replicas` pods of `image` requesting `cpu`.
fn deployment(name: &str, replicas: i32, image: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": image,
                          "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}
            }
        }
    })
}

/// Polls `check` until it answers `Ok`, or fails after `DEADLINE` saying what was expected and
/// what was last seen.
async fn wait_for<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    wait_within(DEADLINE, what, check).await
}

/// As [`wait_for`], with its own deadline.
async fn wait_within<T, F, Fut>(deadline: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = tokio::time::Instant::now();
    loop {
        match check().await {
            Ok(v) => return v,
            Err(seen) if start.elapsed() > deadline => {
                panic!("timed out after {deadline:?} waiting for {what}; last seen: {seen}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or("")
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn summary(pods: &[Value]) -> String {
    pods.iter()
        .map(|p| {
            format!(
                "{} {} node={} scheduled={}",
                p["metadata"]["name"].as_str().unwrap_or(""),
                phase(p),
                p["spec"]["nodeName"].as_str().unwrap_or("-"),
                condition(p, "PodScheduled")
                    .map(|c| c["message"].to_string())
                    .unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

async fn wait_available(r: &Running, name: &str, replicas: i64) -> Value {
    wait_for(
        &format!("deployment {name} to complete with {replicas} available"),
        || async {
            let d = r.deployments().get(name).await.map_err(|e| e.to_string())?;
            let v = serde_json::to_value(&d).map_err(|e| e.to_string())?;
            let done = v["status"]["availableReplicas"] == replicas
                && v["status"]["updatedReplicas"] == replicas
                && v["status"]["replicas"] == replicas
                && condition(&v, "Progressing").is_some_and(|c| c["reason"] == "NewReplicaSetAvailable");
            if done { Ok(v) } else { Err(v["status"].to_string()) }
        },
    )
    .await
}

#[tokio::test]
async fn deployment_of_two_becomes_available_with_the_upstream_status() {
    let r = cluster("avail").pool("node", 1, "4", "16Gi").start().await;
    r.create_deployment(deployment("web", 2, "nginx:1.25", "100m"))
        .await;
    let d = wait_available(&r, "web", 2).await;
    let status = &d["status"];
    assert_eq!(status["observedGeneration"], 1, "status: {status}");
    assert_eq!(status["readyReplicas"], 2, "status: {status}");
    assert!(
        status.get("unavailableReplicas").is_none(),
        "no unavailableReplicas in {status}"
    );
    let available = condition(&d, "Available").expect("Available condition");
    assert_eq!(
        (&available["status"], &available["reason"], &available["message"]),
        (
            &json!("True"),
            &json!("MinimumReplicasAvailable"),
            &json!("Deployment has minimum availability.")
        )
    );
    let progressing = condition(&d, "Progressing").expect("Progressing condition");
    assert_eq!(progressing["status"], "True");
    assert!(progressing["lastTransitionTime"].is_string() && progressing["lastUpdateTime"].is_string());
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );

    let rss = r
        .replicasets()
        .list(&ListParams::default())
        .await
        .expect("list rs");
    assert_eq!(rss.items.len(), 1);
    let rs = serde_json::to_value(&rss.items[0]).expect("json");
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .expect("hash label")
        .to_owned();
    assert_eq!(rs["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(rs["metadata"]["ownerReferences"][0]["kind"], "Deployment");
    assert_eq!(
        progressing["message"],
        format!("ReplicaSet \"web-{hash}\" has successfully progressed.")
    );

    let pods = r.pods_json("app=web").await;
    assert_eq!(pods.len(), 2, "pods: {}", summary(&pods));
    for p in &pods {
        assert_eq!(phase(p), "Running", "pods: {}", summary(&pods));
        assert!(
            p["status"]["podIP"]
                .as_str()
                .is_some_and(|ip| ip.starts_with("10.")),
            "pod IP in {p}"
        );
        assert_eq!(p["status"]["containerStatuses"][0]["ready"], true);
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
        assert_eq!(p["metadata"]["labels"]["pod-template-hash"], hash.as_str());
    }
    r.sim.shutdown().await;
}

#[tokio::test]
async fn deployment_larger_than_the_cluster_leaves_pods_unschedulable_with_the_upstream_message() {
    let r = cluster("full").pool("node", 1, "1", "4Gi").start().await;
    r.create_deployment(deployment("big", 3, "nginx", "400m")).await;
    let expected = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 \
                    Preemption is not helpful for scheduling.";
    let pending = wait_for("2 Running pods and 1 Unschedulable pod", || async {
        let pods = r.pods_json("app=big").await;
        let running = pods.iter().filter(|p| phase(p) == "Running").count();
        let unschedulable: Vec<&Value> = pods
            .iter()
            .filter(|p| condition(p, "PodScheduled").is_some_and(|c| c["reason"] == "Unschedulable"))
            .collect();
        if pods.len() == 3 && running == 2 && unschedulable.len() == 1 {
            Ok(unschedulable[0].clone())
        } else {
            Err(summary(&pods))
        }
    })
    .await;
    let c = condition(&pending, "PodScheduled").expect("PodScheduled");
    assert_eq!(c["status"], "False");
    assert_eq!(c["message"], expected);
    assert_eq!(phase(&pending), "Pending");
    let name = pending["metadata"]["name"].as_str().expect("name").to_owned();

    let d = wait_for("deployment status with 1 unavailable", || async {
        let d = serde_json::to_value(r.deployments().get("big").await.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        if d["status"]["unavailableReplicas"] == 1 && d["status"]["availableReplicas"] == 2 {
            Ok(d)
        } else {
            Err(d["status"].to_string())
        }
    })
    .await;
    // 25% of 3 rounds down to 0 unavailable allowed: not available.
    assert_eq!(
        condition(&d, "Available").map(|c| c["reason"].clone()),
        Some(json!("MinimumReplicasUnavailable"))
    );

    let events: Api<Event> = Api::namespaced(r.client.clone(), "default");
    wait_for("a FailedScheduling event with the same message", || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let found = list.items.iter().any(|e| {
            e.reason.as_deref() == Some("FailedScheduling")
                && e.involved_object.name.as_deref() == Some(name.as_str())
                && e.message.as_deref() == Some(expected)
                && e.type_.as_deref() == Some("Warning")
        });
        if found {
            Ok(())
        } else {
            Err(format!("{} events", list.items.len()))
        }
    })
    .await;

    let text = r.cp.render_metrics();
    let line = text
        .lines()
        .find(|l| l.starts_with("kube_pod_status_unschedulable{") && l.contains(&format!("pod=\"{name}\"")))
        .unwrap_or_else(|| panic!("kube_pod_status_unschedulable for {name} in:\n{text}"));
    assert!(line.ends_with(" 1"), "saw {line}");
    r.sim.shutdown().await;
}

#[tokio::test]
async fn node_selector_and_taints_are_respected() {
    let r = cluster("taints")
        .pool("general", 1, "4", "16Gi")
        .pool("gpu", 1, "4", "16Gi")
        .labelled("accelerator", "gpu")
        .tainted("nvidia.com/gpu", "true", "NoSchedule")
        .start()
        .await;
    let mut d = deployment("train", 1, "trainer", "100m");
    d["spec"]["template"]["spec"]["nodeSelector"] = json!({"accelerator": "gpu"});
    r.create_deployment(d).await;
    let expected = "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had \
                    untolerated taint {nvidia.com/gpu: true}. preemption: 0/2 nodes are available: 2 Preemption is \
                    not helpful for scheduling.";
    wait_for(
        "the selector pod to be unschedulable with both reasons",
        || async {
            let pods = r.pods_json("app=train").await;
            let ok = pods.len() == 1
                && condition(&pods[0], "PodScheduled").is_some_and(|c| c["message"] == expected);
            if ok { Ok(()) } else { Err(summary(&pods)) }
        },
    )
    .await;

    // With a toleration the new template rolls out onto the gpu node.
    let patch = json!({"spec": {"template": {"spec": {"tolerations": [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}}});
    r.deployments()
        .patch("train", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    wait_available(&r, "train", 1).await;
    let pods = r.pods_json("app=train").await;
    let running: Vec<&Value> = pods.iter().filter(|p| phase(p) == "Running").collect();
    assert_eq!(running.len(), 1, "pods: {}", summary(&pods));
    assert_eq!(running[0]["spec"]["nodeName"], "taints-gpu-0");

    // An untainted, unlabelled pod goes to the general node.
    r.create_deployment(deployment("web", 1, "nginx", "100m")).await;
    wait_available(&r, "web", 1).await;
    let pods = r.pods_json("app=web").await;
    assert_eq!(
        pods[0]["spec"]["nodeName"],
        "taints-general-0",
        "pods: {}",
        summary(&pods)
    );
    r.sim.shutdown().await;
}

#[tokio::test]
async fn foreign_pods_reduce_room_and_removing_them_frees_it() {
    let r = cluster("foreign").pool("node", 1, "2", "8Gi").start().await;
    let names =
        r.cp.add_foreign_pods(ForeignPodsRequest {
            cpu: Some("1500m".into()),
            ..ForeignPodsRequest::default()
        })
        .await
        .expect("foreign pods");
    assert_eq!(names.len(), 1);
    wait_for("the foreign pod to run", || async {
        let pods = r.pods_json("sim.nave.dev/foreign=true").await;
        if pods.len() == 1 && phase(&pods[0]) == "Running" {
            Ok(())
        } else {
            Err(summary(&pods))
        }
    })
    .await;
    r.create_deployment(deployment("app", 2, "nginx", "400m")).await;
    wait_for("one app pod Running and one Unschedulable for cpu", || async {
        let pods = r.pods_json("app=app").await;
        let running = pods.iter().filter(|p| phase(p) == "Running").count();
        let insufficient = pods
            .iter()
            .filter(|p| {
                condition(p, "PodScheduled").is_some_and(|c| {
                    c["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("0/1 nodes are available: 1 Insufficient cpu."))
                })
            })
            .count();
        if running == 1 && insufficient == 1 {
            Ok(())
        } else {
            Err(summary(&pods))
        }
    })
    .await;
    assert_eq!(r.cp.remove_foreign_pods(None).await.expect("removed"), 1);
    wait_available(&r, "app", 2).await;
    r.sim.shutdown().await;
}

#[tokio::test]
async fn image_change_rolls_out_a_second_replica_set_with_revision_2() {
    let r = cluster("rollout").pool("node", 2, "4", "16Gi").start().await;
    r.create_deployment(deployment("web", 3, "nginx:1", "100m")).await;
    wait_available(&r, "web", 3).await;
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": "nginx:2", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}});
    r.deployments()
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch image");
    let d = wait_for("revision 2 complete with only new pods", || async {
        let d = serde_json::to_value(r.deployments().get("web").await.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let pods = r.pods_json("app=web").await;
        let all_new = pods.len() == 3
            && pods
                .iter()
                .all(|p| p["spec"]["containers"][0]["image"] == "nginx:2");
        let complete = d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
            && d["status"]["updatedReplicas"] == 3
            && d["status"]["availableReplicas"] == 3
            && d["status"]["observedGeneration"] == 2
            && condition(&d, "Progressing").is_some_and(|c| c["reason"] == "NewReplicaSetAvailable");
        if all_new && complete {
            Ok(d)
        } else {
            Err(format!("{} | {}", d["status"], summary(&pods)))
        }
    })
    .await;
    assert!(
        d["status"].get("unavailableReplicas").is_none(),
        "status: {}",
        d["status"]
    );
    let rss = r
        .replicasets()
        .list(&ListParams::default())
        .await
        .expect("list rs")
        .items;
    assert_eq!(rss.len(), 2, "two ReplicaSets");
    let by_revision: BTreeMap<String, i32> = rss
        .iter()
        .map(|rs| {
            let rev = rs
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("deployment.kubernetes.io/revision"))
                .cloned();
            (rev.unwrap_or_default(), rs.spec.replicas.unwrap_or(-1))
        })
        .collect();
    assert_eq!(
        by_revision,
        BTreeMap::from([("1".to_string(), 0), ("2".to_string(), 3)])
    );
    r.sim.shutdown().await;
}

#[tokio::test]
async fn deleting_a_deployment_deletes_its_replica_sets_and_pods() {
    let r = cluster("gc").pool("node", 1, "4", "16Gi").start().await;
    r.create_deployment(deployment("web", 2, "nginx", "100m")).await;
    wait_available(&r, "web", 2).await;
    r.deployments()
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for("no ReplicaSets and no pods left", || async {
        let rss = r
            .replicasets()
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let pods = r.pods_json("app=web").await;
        if rss.items.is_empty() && pods.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} ReplicaSets; pods: {}",
                rss.items.len(),
                summary(&pods)
            ))
        }
    })
    .await;
    r.sim.shutdown().await;
}

#[tokio::test]
async fn not_ready_node_gets_taints_and_new_pods_avoid_it() {
    let r = cluster("nr").pool("node", 1, "4", "16Gi").start().await;
    let admin = r.cp.admin_router();
    let req = axum::http::Request::put("/nodes/nr-node-0/ready")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(r#"{"status":"False"}"#))
        .expect("request");
    let resp = admin.clone().oneshot(req).await.expect("response");
    assert_eq!(resp.status(), 204);
    let nodes: Api<Node> = Api::all(r.client.clone());
    wait_for("the not-ready taints", || async {
        let n = serde_json::to_value(nodes.get("nr-node-0").await.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let keys: Vec<String> = n["spec"]["taints"]
            .as_array()
            .map(|t| {
                t.iter()
                    .map(|t| {
                        format!(
                            "{}:{}",
                            t["key"].as_str().unwrap_or(""),
                            t["effect"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let want = [
            "node.kubernetes.io/not-ready:NoSchedule",
            "node.kubernetes.io/not-ready:NoExecute",
        ];
        if want.iter().all(|w| keys.iter().any(|k| k == w)) {
            Ok(())
        } else {
            Err(format!("{keys:?}"))
        }
    })
    .await;
    r.create_deployment(deployment("web", 1, "nginx", "100m")).await;
    wait_for("the pod to avoid the not-ready node", || async {
        let pods = r.pods_json("app=web").await;
        let ok = pods.len() == 1
            && condition(&pods[0], "PodScheduled").is_some_and(|c| {
                c["message"].as_str().is_some_and(|m| {
                    m.starts_with("0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }.")
                })
            });
        if ok { Ok(()) } else { Err(summary(&pods)) }
    })
    .await;
    // A bad body gets the JSON error shape.
    let req = axum::http::Request::put("/nodes/nr-node-0/ready")
        .body(axum::body::Body::from(r#"{"status":"Maybe"}"#))
        .expect("request");
    let resp = admin.oneshot(req).await.expect("response");
    assert_eq!(resp.status(), 422);
    // Back to Ready: the taints go and the pod is scheduled.
    r.cp.set_node_ready("nr-node-0", "True")
        .await
        .expect("ready again");
    wait_available(&r, "web", 1).await;
    r.sim.shutdown().await;
}

#[tokio::test]
async fn right_after_apply_a_deployment_is_progressing_and_unavailable() {
    let mut f = cluster("slow").pool("node", 1, "4", "16Gi");
    f.config.timing.pod_start_millis = 3_000;
    let r = f.start().await;
    r.create_deployment(deployment("web", 2, "nginx", "100m")).await;
    let d = wait_for("Progressing ReplicaSetUpdated with 2 unavailable", || async {
        let d = serde_json::to_value(r.deployments().get("web").await.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let ok = d["status"]["unavailableReplicas"] == 2
            && condition(&d, "Progressing").is_some_and(|c| c["reason"] == "ReplicaSetUpdated");
        if ok { Ok(d) } else { Err(d["status"].to_string()) }
    })
    .await;
    let available = condition(&d, "Available").expect("Available");
    assert_eq!(
        (&available["status"], &available["reason"]),
        (&json!("False"), &json!("MinimumReplicasUnavailable"))
    );
    assert_eq!(d["status"]["updatedReplicas"], 2, "status: {}", d["status"]);
    assert!(
        d["status"].get("availableReplicas").is_none(),
        "status: {}",
        d["status"]
    );
    r.sim.shutdown().await;
}

#[tokio::test]
async fn pods_of_an_unreachable_node_are_evicted_after_the_scaled_toleration() {
    let mut f = cluster("evict").pool("node", 2, "4", "16Gi");
    // 300 s default toleration × 0.001 = 0.3 s.
    f.config.timing.toleration_scale = 0.001;
    let r = f.start().await;
    let mut d = deployment("web", 2, "nginx", "100m");
    // Keep both pods on node 0 so that the eviction is visible.
    d["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "evict-node-0"});
    r.create_deployment(d).await;
    wait_available(&r, "web", 2).await;
    let before: Vec<String> = r
        .pods_json("app=web")
        .await
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
        .collect();
    r.cp.set_node_ready("evict-node-0", "Unknown")
        .await
        .expect("unknown");
    wait_for(
        "the old pods to be terminating and replacements pending",
        || async {
            let pods = r.pods_json("app=web").await;
            let terminating = pods
                .iter()
                .filter(|p| before.iter().any(|b| p["metadata"]["name"] == b.as_str()))
                .filter(|p| p["metadata"]["deletionTimestamp"].is_string())
                .count();
            let replacements = pods
                .iter()
                .filter(|p| !before.iter().any(|b| p["metadata"]["name"] == b.as_str()))
                .count();
            if terminating == 2 && replacements == 2 {
                Ok(())
            } else {
                Err(summary(&pods))
            }
        },
    )
    .await;
    // The node comes back: its kubelet finishes the evicted pods and starts the replacements.
    r.cp.set_node_ready("evict-node-0", "True").await.expect("ready");
    wait_for("only the 2 replacements, Running", || async {
        let pods = r.pods_json("app=web").await;
        let ok = pods.len() == 2
            && pods.iter().all(|p| {
                phase(p) == "Running" && !before.iter().any(|b| p["metadata"]["name"] == b.as_str())
            });
        if ok { Ok(()) } else { Err(summary(&pods)) }
    })
    .await;
    r.sim.shutdown().await;
}

/// Scale check (run with `--ignored`): 10,000 pods on 100 nodes, then an idle period whose CPU
/// use is reported.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "slow: scale check"]
async fn ten_thousand_pods_schedule_and_start() {
    let r = cluster("scale").pool("node", 100, "64", "256Gi").start().await;
    let mut d = deployment("many", 10_000, "nginx", "10m");
    d["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "10m"}});
    let start = std::time::Instant::now();
    r.create_deployment(d).await;
    wait_within(Duration::from_secs(600), "10,000 pods available", || async {
        let dep = r.deployments().get("many").await.map_err(|e| e.to_string())?;
        let status = dep.status.clone().unwrap_or_default();
        let available = status.available_replicas.unwrap_or(0);
        // Rolled out and settled: every replica updated, ready and available, the status
        // current, so the idle measurement below starts from a quiet cluster.
        let settled = status.observed_generation == dep.metadata.generation
            && status.updated_replicas == Some(10_000)
            && status.ready_replicas == Some(10_000);
        if available == 10_000 && settled {
            Ok(())
        } else {
            Err(format!("{available} available"))
        }
    })
    .await;
    eprintln!("10,000 pods available after {:?}", start.elapsed());
    let cpu = || {
        std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| {
                let f: Vec<&str> = s.rsplit(')').next()?.split_whitespace().collect();
                Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
            })
            .unwrap_or(0)
    };
    // Idle CPU is measured over a span of time: the span is the measurement, not a wait.
    let (t0, c0) = (std::time::Instant::now(), cpu());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let ticks = cpu() - c0;
    eprintln!("idle: {ticks} clock ticks of CPU in {:?}", t0.elapsed());
    let t = std::time::Instant::now();
    let text = r.cp.render_metrics();
    eprintln!(
        "metrics: {} lines rendered in {:?}",
        text.lines().count(),
        t.elapsed()
    );
    r.sim.shutdown().await;
}

#[tokio::test]
async fn heartbeats_renew_node_leases() {
    let mut f = cluster("hb").pool("node", 1, "4", "16Gi");
    f.config.timing.node_heartbeat_millis = 100;
    let r = f.start().await;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(r.client.clone(), "kube-node-lease");
    let first = wait_for("the node's lease", || async {
        let l = leases.get("hb-node-0").await.map_err(|e| e.to_string())?;
        let spec = l.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() == Some("hb-node-0") && spec.lease_duration_seconds == Some(40) {
            Ok(spec.renew_time)
        } else {
            Err(format!("{spec:?}"))
        }
    })
    .await;
    wait_for("a renewal", || async {
        let l = leases.get("hb-node-0").await.map_err(|e| e.to_string())?;
        let renew = l.spec.and_then(|s| s.renew_time);
        if renew != first {
            Ok(())
        } else {
            Err(format!("{renew:?}"))
        }
    })
    .await;
    r.sim.shutdown().await;
}
