//! The placement loop end to end: a simulated management cluster (nave-sim) with Nave's CRDs,
//! the hub with a SQLite store, and two agents speaking the wire protocol over HTTP.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nave_api::conditions::{self, reasons, types};
use nave_api::wire::{self, WorkSet};
use nave_api::{MultiClusterDeployment, MultiClusterService};
use nave_testkit::{DEADLINE, FakeAgent, Mcd, idle_capacity, wait_for};
use serde_json::json;

/// Replicas of the Deployment `name` in a work set, if present.
fn deployment_replicas(work: &WorkSet, name: &str) -> Option<i64> {
    work.objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name)
        .and_then(|o| o["spec"]["replicas"].as_i64())
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

    // Two agents join: eu-1 and us-1, each with room for 16 replicas of 500m.
    let eu = FakeAgent::join(&base, "eu-1", idle_capacity("eu", 2, 4000)).await;
    let us = FakeAgent::join(&base, "us-1", idle_capacity("us", 2, 4000)).await;

    // `spread` divides 6 replicas evenly over the two clusters.
    mcds.create(
        &PostParams::default(),
        &Mcd::new("web")
            .replicas(6)
            .policy("spread")
            .cpu("500m")
            .memory("128Mi")
            .env_from_config_map("web-config")
            .build(),
    )
    .await
    .unwrap();
    let (eu_share, us_share) = wait_for("web's work to be divided 3 + 3", DEADLINE, || async {
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
    let status = wait_for("web's status to show 6 ready replicas", DEADLINE, || async {
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
    let mut broken = Mcd::new("broken")
        .replicas(2)
        .cpu("500m")
        .memory("128Mi")
        .env_from_config_map("web-config")
        .build();
    broken.spec.template.spec["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!(7);
    mcds.create(&PostParams::default(), &broken).await.unwrap();
    let message = wait_for("broken to get Scheduled=False/InvalidSpec", DEADLINE, || async {
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
    wait_for("a Warning event InvalidSpec on broken", DEADLINE, || async {
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
            agent.cluster()
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
        wait_for(
            &format!("web's Service in {}", agent.cluster()),
            DEADLINE,
            || async {
                let work = agent.work().await;
                let service = work
                    .objects
                    .iter()
                    .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == "web");
                match service {
                    Some(s) if s["metadata"]["annotations"]["service.cilium.io/global"] == "true" => Ok(()),
                    other => Err(format!("Service {other:?}")),
                }
            },
        )
        .await;
    }

    // Deleting web removes its objects from both clusters (finalizer).
    mcds.delete("web", &DeleteParams::default()).await.unwrap();
    for agent in [&eu, &us] {
        wait_for(
            &format!("web's objects to leave {}", agent.cluster()),
            DEADLINE,
            || async {
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
            },
        )
        .await;
    }
    wait_for("web to be deleted", DEADLINE, || async {
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
