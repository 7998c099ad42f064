//! Adaptive placement end to end: the real hub and agents on nave-sim clusters whose capacity
//! changes under Nave's feet (pods that are not Nave's fill a cluster, or leave it).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nave_api::conditions::{self, reasons, types};
use nave_api::wire::WORKLOAD_LABEL;
use nave_api::{MultiClusterDeployment, WorkloadCluster};
use nave_e2e::{DEADLINE, Database, Env, placed};
use nave_sim::config::{ClusterConfig, FleetConfig, NodePool, Timing};
use nave_testkit::{Mcd, wait_for};
use serde_json::{Value, json};

const NS: &str = "default";

/// A cluster of one node of `cpu` CPUs whose pods take `pod_start_millis` to become Ready.
fn cluster(name: &str, cpu: &str, pod_start_millis: u64) -> ClusterConfig {
    ClusterConfig {
        name: name.to_owned(),
        region: Some("eu-west".to_owned()),
        node_pools: vec![NodePool {
            count: 1,
            cpu: cpu.to_owned(),
            memory: "16Gi".to_owned(),
            ..NodePool::default()
        }],
        timing: Timing {
            pod_start_millis,
            ..Timing::default()
        },
        ..ClusterConfig::default()
    }
}

async fn env(clusters: Vec<ClusterConfig>) -> Env {
    Env::start(
        FleetConfig {
            clusters,
            ..FleetConfig::default()
        },
        Database::Sqlite,
    )
    .await
    .expect("the environment starts")
}

/// A pod that is not Nave's, requesting `cpu`.
fn foreign_pod(name: &str, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [{"name": "batch", "image": "busybox",
            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]},
    }))
    .expect("a well-formed Pod")
}

/// `(spec.replicas, readyReplicas)` of the workload's Deployment in `cluster`, `(0, 0)` when it
/// has none.
async fn deployment_in(env: &Env, cluster: &str, name: &str) -> (i32, i32) {
    let api: Api<Deployment> = Api::namespaced(env.cluster_client(cluster), NS);
    match api.get_opt(name).await {
        Ok(Some(d)) => (
            d.spec.replicas.unwrap_or(0),
            d.status.and_then(|s| s.ready_replicas).unwrap_or(0),
        ),
        _ => (0, 0),
    }
}

/// The placement history of `name` from the REST API, newest first.
async fn history(env: &Env, name: &str) -> Vec<Value> {
    let body: Value = env
        .http()
        .get(format!("{}/api/v1/placements/{NS}/{name}/history", env.hub_url))
        .bearer_auth(&env.admin_token)
        .send()
        .await
        .expect("the REST API answers")
        .json()
        .await
        .expect("a JSON history");
    body["items"].as_array().cloned().unwrap_or_default()
}

async fn mcd_now(env: &Env, name: &str) -> MultiClusterDeployment {
    Api::<MultiClusterDeployment>::namespaced(env.client.clone(), NS)
        .get(name)
        .await
        .expect("the MCD exists")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_pending_past_the_timeout_move_to_a_cluster_with_room() {
    // Best-fit packs onto small-1 (1 CPU) rather than big-1 (2 CPU).
    let env = env(vec![cluster("small-1", "1", 500), cluster("big-1", "2", 500)]).await;
    let placement = json!({"policy": "best-fit", "rescheduling": {"pendingTimeout": "2s", "cooldown": "1m"}});
    Api::<MultiClusterDeployment>::namespaced(env.client.clone(), NS)
        .create(
            &PostParams::default(),
            &Mcd::new("web")
                .namespace(NS)
                .replicas(4)
                .placement(placement)
                .build(),
        )
        .await
        .expect("MCD created");
    let web = env.wait_rolled_out(NS, "web", 4).await;
    assert_eq!(placed(&web), BTreeMap::from([("small-1".to_owned(), 4)]));

    // Pods that are not Nave's land on small-1's node (bound there directly, as a DaemonSet's
    // would) and take more than what was left; then two of web's pods are evicted: the
    // Deployment re-creates them and they stay Pending.
    let small = env.cluster_client("small-1");
    let answer = reqwest::Client::new()
        .post(format!("{}/_sim/v1/foreign-pods", env.cluster_url("small-1")))
        .json(&json!({"cpu": "800m", "memory": "64Mi"}))
        .send()
        .await
        .expect("the simulator answers");
    assert!(answer.status().is_success(), "foreign pods created: {answer:?}");
    let pods: Api<Pod> = Api::namespaced(small.clone(), NS);
    let web_pods = pods
        .list(&ListParams::default().labels(&format!("{WORKLOAD_LABEL}={NS}.web")))
        .await
        .expect("web's pods");
    assert_eq!(web_pods.items.len(), 4, "web runs 4 pods in small-1");
    for pod in web_pods.items.iter().take(2) {
        pods.delete(
            pod.metadata.name.as_deref().unwrap_or_default(),
            &DeleteParams::default(),
        )
        .await
        .expect("a pod is evicted");
    }

    // After the timeout the two Pending replicas move to big-1, and every replica runs.
    let moved = wait_for(
        "web's Pending replicas moved to big-1 and all 4 ready",
        DEADLINE,
        || {
            let env = &env;
            async move {
                let web = mcd_now(env, "web").await;
                let status = web.status.clone().unwrap_or_default();
                let placed = placed(&web);
                if placed.get("big-1") == Some(&2)
                    && status.ready_replicas == 4
                    && status.pending_replicas == 0
                {
                    Ok(placed)
                } else {
                    Err(format!(
                        "placed {placed:?}, ready {}, pending {}",
                        status.ready_replicas, status.pending_replicas
                    ))
                }
            }
        },
    )
    .await;
    assert_eq!(
        moved.get("small-1"),
        Some(&2),
        "the 2 running replicas stay in small-1"
    );
    assert_eq!(deployment_in(&env, "big-1", "web").await, (2, 2));

    let note = env.event(NS, "web", "Rescheduled").await;
    assert!(
        note.contains("moved 2 from small-1 (Pending for") && note.contains("big-1 +2"),
        "the event says what moved, from where, why and to where; saw: {note}"
    );
    let history = history(&env, "web").await;
    let newest = history.first().cloned().unwrap_or_default();
    assert_eq!(newest["trigger"], "reschedule", "newest history entry: {newest}");
    assert_eq!(newest["assignment"], json!({"small-1": 2, "big-1": 2}));
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_replicas_come_back_when_room_returns_and_leave_only_once_the_new_ones_run() {
    burst_and_retract(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_restart_in_the_middle_of_a_move_keeps_the_old_replicas_until_the_new_run() {
    burst_and_retract(true).await;
}

/// A workload overflows to a burst cluster, then comes back when room returns; with `restart`,
/// the hub is restarted while the move is under way.
async fn burst_and_retract(restart: bool) {
    // regular-1 starts pods slowly (4 s), so a move back to it is observable while it runs.
    let mut env = env(vec![
        cluster("regular-1", "1", 4000),
        cluster("burst-1", "4", 500),
    ])
    .await;
    let wcls: Api<WorkloadCluster> = Api::all(env.client.clone());
    wcls.patch(
        "burst-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"burstOnly": true}})),
    )
    .await
    .expect("burst-1 becomes burst-only");
    // A foreign pod holds 600m of regular-1: room for 4 replicas of 100m.
    let regular = env.cluster_client("regular-1");
    Api::<Pod>::namespaced(regular.clone(), NS)
        .create(&PostParams::default(), &foreign_pod("batch", "600m"))
        .await
        .expect("the foreign pod is created");
    wait_for("regular-1's foreign pod counted by the hub", DEADLINE, || {
        let wcls = wcls.clone();
        async move {
            let wcl = wcls.get("regular-1").await.map_err(|e| e.to_string())?;
            let requested = wcl
                .status
                .as_ref()
                .and_then(|s| s.capacity.as_ref())
                .and_then(|c| c.cpu_requested_percent);
            if requested == Some(60) {
                Ok(())
            } else {
                Err(format!("CPU requested {requested:?}%"))
            }
        }
    })
    .await;

    Api::<MultiClusterDeployment>::namespaced(env.client.clone(), NS)
        .create(
            &PostParams::default(),
            &Mcd::new("web")
                .namespace(NS)
                .replicas(6)
                .policy("worst-fit")
                .build(),
        )
        .await
        .expect("MCD created");
    let web = env.wait_rolled_out(NS, "web", 6).await;
    assert_eq!(
        placed(&web),
        BTreeMap::from([("regular-1".to_owned(), 4), ("burst-1".to_owned(), 2)]),
        "what does not fit in regular-1 overflows to burst-1"
    );
    let status = web.status.clone().unwrap_or_default();
    let bursting = conditions::find(&status.conditions, types::BURSTING).expect("a Bursting condition");
    assert_eq!(
        (bursting.status.as_str(), bursting.reason.as_str()),
        ("True", reasons::OVERFLOW),
        "{bursting:?}"
    );
    env.event(NS, "web", "Burst").await;

    // The batch job ends: regular-1 has room again and burst-1's replicas come back. While
    // regular-1 starts them, burst-1 keeps its 2.
    Api::<Pod>::namespaced(regular.clone(), NS)
        .delete("batch", &DeleteParams::default())
        .await
        .expect("the foreign pod is deleted");
    let during = wait_for("regular-1 asked to run all 6", DEADLINE, || {
        let env = &env;
        async move {
            let (wanted, ready) = deployment_in(env, "regular-1", "web").await;
            let burst = deployment_in(env, "burst-1", "web").await;
            if wanted == 6 {
                Ok((ready, burst))
            } else {
                Err(format!(
                    "regular-1 has {wanted} wanted, {ready} ready; burst-1 {burst:?}"
                ))
            }
        }
    })
    .await;
    assert!(
        during.0 < 6 && during.1 == (2, 2),
        "while regular-1 starts its new replicas ({} of 6 ready), burst-1 still runs its 2; saw {:?}",
        during.0,
        during.1
    );
    if restart {
        env.stop_hub().await;
        env.start_hub().await.expect("the hub starts again");
        let (_, ready) = deployment_in(&env, "regular-1", "web").await;
        let burst = deployment_in(&env, "burst-1", "web").await;
        assert!(
            ready < 6 && burst == (2, 2),
            "after the restart, with {ready} of 6 ready in regular-1, burst-1 still runs its 2; saw {burst:?}"
        );
    }
    wait_for("burst-1 emptied once regular-1 runs all 6", DEADLINE, || {
        let env = &env;
        async move {
            let regular = deployment_in(env, "regular-1", "web").await;
            let burst = deployment_in(env, "burst-1", "web").await;
            if burst.0 == 0 {
                if regular.1 < 6 {
                    return Ok(Err(format!(
                        "burst-1 emptied with only {} ready in regular-1",
                        regular.1
                    )));
                }
                Ok(Ok(()))
            } else {
                Err(format!("regular-1 {regular:?}, burst-1 {burst:?}"))
            }
        }
    })
    .await
    .expect("make-before-break");
    let web = mcd_now(&env, "web").await;
    assert_eq!(placed(&web), BTreeMap::from([("regular-1".to_owned(), 6)]));
    let status = web.status.clone().unwrap_or_default();
    let bursting = conditions::find(&status.conditions, types::BURSTING).expect("a Bursting condition");
    assert_eq!(bursting.status, "False", "{bursting:?}");
    let note = env.event(NS, "web", "BurstRetracted").await;
    assert!(
        note.contains("moved 2 from burst-1 back to regular-1 +2"),
        "the event says what came back; saw: {note}"
    );
    assert_eq!(history(&env, "web").await[0]["trigger"], "burst-retract");
    env.shutdown().await;
}
