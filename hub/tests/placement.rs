//! The placement loop end to end: a simulated management cluster (nave-sim) with Nave's CRDs,
//! the hub with a SQLite store, and two agents speaking the wire protocol over HTTP.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nave_api::conditions::{self, reasons, types};
use nave_api::wire::{
    self, CapacityModel, Heartbeat, ObjectStatus, RegisterRequest, Resources, StatusReport, WorkSet,
    WorkloadRef,
};
use nave_api::{MultiClusterDeployment, MultiClusterService};
use serde_json::{Value, json};
use support::wait_for;

struct Agent {
    http: reqwest::Client,
    base: String,
    cluster: String,
    credential: String,
}

impl Agent {
    async fn register(http: &reqwest::Client, base: &str, cluster: &str) -> Agent {
        let request = RegisterRequest {
            cluster_name: cluster.to_owned(),
            agent_version: "0.1.0".to_owned(),
            ..RegisterRequest::default()
        };
        let credential = support::register(http, base, &request).await;
        Agent {
            http: http.clone(),
            base: base.to_owned(),
            cluster: cluster.to_owned(),
            credential,
        }
    }

    async fn heartbeat(&self, capacity: CapacityModel) {
        let beat = Heartbeat {
            cluster_name: Some(self.cluster.clone()),
            agent_version: "0.1.0".to_owned(),
            capacity,
            ..Heartbeat::default()
        };
        support::heartbeat(&self.http, &self.base, &self.credential, &beat).await;
    }

    async fn work(&self) -> WorkSet {
        support::work(&self.http, &self.base, &self.credential, &self.cluster).await
    }

    /// Reports every Deployment of the current work set as fully ready.
    async fn report_all_ready(&self) {
        let work = self.work().await;
        let objects = work
            .objects
            .iter()
            .map(|o| {
                let replicas = o["spec"]["replicas"].as_i64().map(|r| r as i32);
                ObjectStatus {
                    api_version: o["apiVersion"].as_str().unwrap_or_default().to_owned(),
                    kind: o["kind"].as_str().unwrap_or_default().to_owned(),
                    namespace: o["metadata"]["namespace"].as_str().map(str::to_owned),
                    name: o["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
                    workload: o["metadata"]["labels"][wire::WORKLOAD_LABEL]
                        .as_str()
                        .and_then(WorkloadRef::from_label_value),
                    replicas,
                    ready_replicas: replicas,
                    available_replicas: replicas,
                    updated_replicas: replicas,
                    ..ObjectStatus::default()
                }
            })
            .collect();
        let report = StatusReport {
            cluster_name: Some(self.cluster.clone()),
            applied_revision: Some(work.revision),
            objects,
            ..StatusReport::default()
        };
        let res = self
            .http
            .post(format!("{}{}", self.base, wire::STATUS_PATH))
            .bearer_auth(&self.credential)
            .json(&report)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 204, "status of {}", self.cluster);
    }
}

/// Replicas of the Deployment `name` in a work set, if present.
/// A cluster of `nodes` nodes with `cpu_millis` CPU and 16 GiB each, nothing requested.
fn capacity(prefix: &str, nodes: u64, cpu_millis: u64) -> CapacityModel {
    support::capacity(
        prefix,
        nodes,
        Resources::new(cpu_millis, 16 << 30, 110),
        Resources::default(),
    )
}

fn deployment_replicas(work: &WorkSet, name: &str) -> Option<i64> {
    work.objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name)
        .and_then(|o| o["spec"]["replicas"].as_i64())
}

fn mcd(name: &str, replicas: i32, policy: &str, image: Value) -> MultiClusterDeployment {
    serde_json::from_value(json!({
        "apiVersion": "nave.dev/v1alpha1",
        "kind": "MultiClusterDeployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "placement": {"policy": policy},
            "template": {"spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "containers": [{
                            "name": "app",
                            "image": image,
                            "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}},
                            "envFrom": [{"configMapRef": {"name": "web-config"}}]
                        }]
                    }
                }
            }}
        }
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn placement_loop_divides_replicas_reports_status_and_rejects_invalid_specs() {
    let (management, client) = support::management_cluster().await;
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(client.clone(), "default");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let config: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web-config", "namespace": "default"},
        "data": {"GREETING": "hello"}
    }))
    .unwrap();
    config_maps.create(&PostParams::default(), &config).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let support::Hub {
        base,
        shutdown,
        task: hub,
        ..
    } = support::start_hub(&management, dir.path(), |_| {});
    let http = reqwest::Client::new();

    // Two agents join: eu-1 and us-1, each with room for 16 replicas of 500m.
    let eu = Agent::register(&http, &base, "eu-1").await;
    let us = Agent::register(&http, &base, "us-1").await;
    eu.heartbeat(capacity("eu", 2, 4000)).await;
    us.heartbeat(capacity("us", 2, 4000)).await;

    // `spread` divides 6 replicas evenly over the two clusters.
    mcds.create(
        &PostParams::default(),
        &mcd("web", 6, "spread", json!("nginx:1.27")),
    )
    .await
    .unwrap();
    let (eu_share, us_share) = wait_for("web's work to be divided 3 + 3", || async {
        let (e, u) = (eu.work().await, us.work().await);
        let shares = (deployment_replicas(&e, "web"), deployment_replicas(&u, "web"));
        if shares == (Some(3), Some(3)) {
            Ok((e, u))
        } else {
            Err(format!(
                "expected (Some(3), Some(3)) replicas in (eu-1, us-1), saw {shares:?}"
            ))
        }
    })
    .await;
    for work in [&eu_share, &us_share] {
        let kinds: Vec<_> = work
            .objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or_default())
            .collect();
        assert!(
            work.objects
                .iter()
                .any(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "web-config"),
            "the referenced ConfigMap should follow the workload into {}; kinds seen: {kinds:?}",
            work.cluster
        );
        assert!(
            kinds.contains(&"Namespace"),
            "the namespace should be in the set; kinds seen: {kinds:?}"
        );
    }

    // The agents report their Deployments ready: the status sums the clusters.
    eu.report_all_ready().await;
    us.report_all_ready().await;
    let status = wait_for("web's status to show 6 ready replicas", || async {
        let web = mcds.get("web").await.map_err(|e| e.to_string())?;
        let status = web.status.clone().unwrap_or_default();
        let available = conditions::is_true(&status.conditions, types::AVAILABLE);
        if status.ready_replicas == 6 && available {
            Ok(status)
        } else {
            Err(format!(
                "readyReplicas {} (expected 6), Available {available}, status {:?}",
                status.ready_replicas, status
            ))
        }
    })
    .await;
    let sum = |f: fn(&nave_api::ClusterPlacementStatus) -> i32| status.clusters.iter().map(f).sum::<i32>();
    assert_eq!(status.replicas, sum(|c| c.desired), "replicas = sum of desired");
    assert_eq!(
        status.ready_replicas,
        sum(|c| c.ready),
        "readyReplicas = sum of ready"
    );
    assert_eq!(
        status.available_replicas,
        sum(|c| c.available),
        "availableReplicas = sum of available"
    );
    assert_eq!(status.cluster_count, 2);
    let scheduled = conditions::find(&status.conditions, types::SCHEDULED).expect("Scheduled condition");
    assert_eq!(scheduled.reason, reasons::ALL_REPLICAS_PLACED);

    // A template the CRD schema accepts (it keeps unknown fields) but that is no DeploymentSpec:
    // condition, Warning event, no work.
    let mut broken = mcd("broken", 2, "spread", json!("nginx:1.27"));
    broken.spec.template.spec["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!(7);
    mcds.create(&PostParams::default(), &broken).await.unwrap();
    let message = wait_for("broken to get Scheduled=False/InvalidSpec", || async {
        let broken = mcds.get("broken").await.map_err(|e| e.to_string())?;
        let conds = broken.status.map(|s| s.conditions).unwrap_or_default();
        match conditions::find(&conds, types::SCHEDULED) {
            Some(c) if c.status == conditions::FALSE && c.reason == reasons::INVALID_SPEC => {
                Ok(c.message.clone())
            }
            other => Err(format!("Scheduled condition {other:?}")),
        }
    })
    .await;
    assert!(
        message.contains("spec.template.spec.template.spec.containers[0].imagePullPolicy"),
        "the message should name the field, got {message:?}"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    wait_for("a Warning event InvalidSpec on broken", || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let found = list.items.iter().any(|e| {
            e.reason.as_deref() == Some(reasons::INVALID_SPEC)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("broken")
        });
        if found {
            Ok(())
        } else {
            let seen: Vec<_> = list.items.iter().map(|e| e.reason.clone()).collect();
            Err(format!("event reasons seen: {seen:?}"))
        }
    })
    .await;
    for agent in [&eu, &us] {
        let work = agent.work().await;
        assert_eq!(
            deployment_replicas(&work, "broken"),
            None,
            "no work for an invalid MCD in {}",
            agent.cluster
        );
    }

    // A MultiClusterService following web goes to both clusters, with the Cilium annotations.
    let services: Api<MultiClusterService> = Api::namespaced(client.clone(), "default");
    let mcs: MultiClusterService = serde_json::from_value(json!({
        "apiVersion": "nave.dev/v1alpha1", "kind": "MultiClusterService",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"deployment": "web", "global": true, "ports": [{"port": 80}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &mcs).await.unwrap();
    for agent in [&eu, &us] {
        wait_for(&format!("web's Service in {}", agent.cluster), || async {
            let work = agent.work().await;
            let service = work
                .objects
                .iter()
                .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == "web");
            match service {
                Some(s) if s["metadata"]["annotations"]["service.cilium.io/global"] == "true" => Ok(()),
                other => Err(format!("Service {other:?}")),
            }
        })
        .await;
    }

    // Deleting web removes its objects from both clusters (finalizer).
    mcds.delete("web", &DeleteParams::default()).await.unwrap();
    for agent in [&eu, &us] {
        wait_for(&format!("web's objects to leave {}", agent.cluster), || async {
            let work = agent.work().await;
            let left: Vec<_> = work
                .objects
                .iter()
                .filter(|o| o["metadata"]["labels"][wire::WORKLOAD_LABEL] == "default.web")
                .map(|o| format!("{} {}", o["kind"], o["metadata"]["name"]))
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("still there: {left:?}"))
            }
        })
        .await;
    }
    wait_for("web to be deleted", || async {
        match mcds.get_opt("web").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(o) => Err(format!("finalizers {:?}", o.metadata.finalizers)),
        }
    })
    .await;

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(20), hub)
        .await
        .expect("the hub should stop on shutdown")
        .unwrap()
        .expect("the hub should stop cleanly");
    management.shutdown().await;
}
