//! The drop-in path, end to end with the real hub and agents on nave-sim: an ordinary Deployment
//! in the management cluster, annotated `nave.dev/placement`, in a namespace the admin opened,
//! runs its replicas in the fleet and none in the management cluster; its own status (and
//! `kubectl rollout status`) follows the fleet's replicas through scaling and a rollout; deleting
//! it removes them. A namespace not opened keeps its Deployments at home.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use nave_api::{DROP_IN_ANNOTATION, DROP_IN_GATE, DROP_IN_NAMESPACE_LABEL, MultiClusterDeployment};
use nave_e2e::{DEADLINE, Database, Env, EnvOptions, fleet};
use nave_testkit::wait_for;
use serde_json::json;

const OPEN: &str = "shop";
const CLOSED: &str = "lab";

/// The hub (`--drop-in`) and agents over `clusters` simulated clusters, namespace [`OPEN`]
/// opened, the hub's webhook registered.
async fn start(clusters: usize) -> Env {
    let env = Env::start_with(
        fleet(clusters),
        Database::Sqlite,
        EnvOptions {
            hub_drop_in: true,
            ..EnvOptions::default()
        },
    )
    .await
    .expect("the environment starts");
    env.create_namespace(OPEN, true).await;
    env.register_drop_in_webhook().await;
    env
}

/// Waits until the pods of `app` in `namespace` of the management cluster are `expected`
/// ((bound, gated) each).
async fn wait_home_pods(env: &Env, namespace: &str, app: &str, expected: &[(bool, bool)]) {
    wait_for(
        &format!("{app}'s pods at home: (bound, gated) {expected:?}"),
        DEADLINE,
        || async {
            let pods = home_pods(env, namespace, app).await;
            if pods == expected {
                Ok(())
            } else {
                Err(format!("(bound, gated) {pods:?}"))
            }
        },
    )
    .await;
}

/// `kubectl scale`: the Deployment's scale subresource.
async fn scale(deployments: &Api<Deployment>, name: &str, replicas: i32) {
    deployments
        .patch_scale(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap_or_else(|e| panic!("scaling {name} to {replicas}: {e}"));
}

fn deployment(name: &str, namespace: &str, replicas: i32, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "annotations": {DROP_IN_ANNOTATION: "spread"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image,
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
            },
        },
    }))
    .expect("a Deployment")
}

/// The Deployment's pods in the management cluster: (bound to a node, gated) for each.
async fn home_pods(env: &Env, namespace: &str, app: &str) -> Vec<(bool, bool)> {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), namespace);
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("pods listed");
    list.items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let spec = p.spec.as_ref();
            let bound = spec
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| !n.is_empty());
            let gated = spec
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|g| g.iter().any(|g| g.name == DROP_IN_GATE));
            (bound, gated)
        })
        .collect()
}

/// Asserts no pod of `app` runs (or is bound) in the management cluster, and all are gated.
async fn assert_none_at_home(env: &Env, app: &str) {
    let pods = home_pods(env, OPEN, app).await;
    assert!(
        pods.iter().all(|(bound, gated)| !bound && *gated),
        "every pod of {app} in the management cluster gated and unbound; seen (bound, gated): {pods:?}"
    );
}

/// The fleet's running image of `name` per cluster, with its replicas.
async fn fleet_images(env: &Env, name: &str) -> BTreeMap<String, (i32, String)> {
    env.deployments(OPEN, name)
        .await
        .into_iter()
        .filter_map(|(cluster, ds)| {
            let d = ds.into_iter().next()?;
            Some((cluster, (d.spec.replicas.unwrap_or(1), nave_e2e::image_of(&d))))
        })
        .collect()
}

/// Waits until the management cluster's Deployment reports `replicas` updated, ready and
/// available replicas of its latest spec, and the fleet runs that many of `image`.
async fn wait_fleet_and_status(env: &Env, name: &str, replicas: i32, image: &str) {
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), OPEN);
    wait_for(
        &format!("{name}: {replicas} replicas of {image} in the fleet, shown by its Deployment"),
        DEADLINE,
        || async {
            let images = fleet_images(env, name).await;
            let total: i32 = images.values().map(|(n, _)| n).sum();
            let stale: Vec<&String> = images.iter().filter(|(_, (n, i))| *n > 0 && i != image).map(|(c, _)| c).collect();
            let d = deployments.get(name).await.map_err(|e| e.to_string())?;
            let status = d.status.clone().unwrap_or_default();
            let counts = (
                status.replicas.unwrap_or(0),
                status.updated_replicas.unwrap_or(0),
                status.ready_replicas.unwrap_or(0),
                status.available_replicas.unwrap_or(0),
            );
            let current = status.observed_generation == d.metadata.generation;
            if total == replicas && stale.is_empty() && counts == (replicas, replicas, replicas, replicas) && current {
                Ok(())
            } else {
                Err(format!(
                    "fleet {images:?}; Deployment (replicas, updated, ready, available) {counts:?}, observed current {current}"
                ))
            }
        },
    )
    .await;
}

fn kubectl() -> Option<PathBuf> {
    if std::env::var("NAVE_SKIP_KUBECTL").as_deref() == Ok("1") {
        eprintln!("kubectl steps skipped: NAVE_SKIP_KUBECTL=1");
        return None;
    }
    Some(nave_sim::kubectl::find_kubectl().expect(
        "kubectl 1.32 (`kubectl.1.32`) is not installed: install the kubectl package, or set NAVE_SKIP_KUBECTL=1",
    ))
}

/// `kubectl rollout status deployment/<name>`: succeeds, as for a Deployment that runs here.
fn rollout_status(env: &Env, bin: &PathBuf, name: &str) {
    let cache = env.dir().join("kubectl-cache");
    let out = std::process::Command::new(bin)
        .arg("--kubeconfig")
        .arg(nave_e2e::kubeconfig_path(env))
        .arg("--cache-dir")
        .arg(&cache)
        .args([
            "-n",
            OPEN,
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "--timeout=60s",
        ])
        .output()
        .expect("kubectl runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("successfully rolled out"),
        "kubectl rollout status deployment/{name}: expected success, saw {:?}: {text}",
        out.status.code()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_annotated_deployment_runs_in_the_fleet_and_shows_its_replicas_at_home() {
    let kubectl = kubectl();
    let env = start(3).await;
    env.create_namespace(CLOSED, false).await;
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), OPEN);
    deployments
        .create(&PostParams::default(), &deployment("web", OPEN, 3, "nginx:1"))
        .await
        .expect("web created");

    // Placed by its policy (spread: one in each of three clusters), none at home.
    wait_fleet_and_status(&env, "web", 3, "nginx:1").await;
    let spread: Vec<i32> = fleet_images(&env, "web")
        .await
        .values()
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(spread, vec![1, 1, 1], "spread over the three clusters");
    assert_none_at_home(&env, "web").await;
    let copy: MultiClusterDeployment = Api::namespaced(env.client.clone(), OPEN)
        .get("web")
        .await
        .expect("the fleet copy");
    let owner = copy.metadata.owner_references.unwrap_or_default();
    assert!(
        owner
            .iter()
            .any(|o| o.kind == "Deployment" && o.name == "web" && o.controller == Some(true)),
        "the fleet copy is owned by the Deployment; owners {owner:?}"
    );
    if let Some(bin) = &kubectl {
        rollout_status(&env, bin, "web");
    }

    // `kubectl scale`: the fleet follows.
    scale(&deployments, "web", 5).await;
    wait_fleet_and_status(&env, "web", 5, "nginx:1").await;
    assert_none_at_home(&env, "web").await;

    // A new image rolls out in the fleet; the Deployment's rollout finishes when the fleet's does.
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}}})),
        )
        .await
        .expect("new image");
    if let Some(bin) = &kubectl {
        rollout_status(&env, bin, "web");
        let images = fleet_images(&env, "web").await;
        assert!(
            images.values().all(|(_, image)| image == "nginx:2"),
            "rollout status returned once the fleet ran the new image; fleet {images:?}"
        );
    }
    wait_fleet_and_status(&env, "web", 5, "nginx:2").await;
    assert_none_at_home(&env, "web").await;

    // A namespace the admin did not open: the Deployment runs here, and says why.
    let closed: Api<Deployment> = Api::namespaced(env.client.clone(), CLOSED);
    closed
        .create(
            &PostParams::default(),
            &deployment("tool", CLOSED, 1, "busybox:1"),
        )
        .await
        .expect("tool created");
    let note = env.event(CLOSED, "tool", "DropInNotEnabled").await;
    assert!(
        note.contains(DROP_IN_NAMESPACE_LABEL),
        "the event names the label; saw {note:?}"
    );
    wait_home_pods(&env, CLOSED, "tool", &[(true, false)]).await;
    assert!(
        fleet_images(&env, "tool").await.is_empty(),
        "nothing of a closed namespace goes to the fleet"
    );

    // A Deployment deleted takes its fleet copy and its replicas with it.
    deployments
        .delete("web", &Default::default())
        .await
        .expect("web deleted");
    env.wait_mcd_gone(OPEN, "web").await;
    wait_for("web's replicas gone from the fleet", DEADLINE, || async {
        let left = fleet_images(&env, "web").await;
        if left.values().all(|(n, _)| *n == 0) {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_placement_annotation_is_reported_and_nothing_runs_anywhere() {
    let env = start(2).await;
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), OPEN);
    let mut bad = deployment("typo", OPEN, 2, "nginx:1");
    bad.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(DROP_IN_ANNOTATION.to_owned(), "worstfit".to_owned());
    deployments
        .create(&PostParams::default(), &bad)
        .await
        .expect("typo created");
    let note = env.event(OPEN, "typo", "InvalidPlacement").await;
    assert!(
        note.contains(DROP_IN_ANNOTATION) && note.contains("worstfit") && note.contains("worst-fit"),
        "the event names the annotation, the value and the valid ones; saw {note:?}"
    );
    // Its pods exist, gated, and nothing was placed.
    wait_home_pods(&env, OPEN, "typo", &[(false, true), (false, true)]).await;
    let copies: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), OPEN);
    assert!(
        copies.get_opt("typo").await.expect("read").is_none(),
        "no fleet copy of a bad annotation"
    );

    // Corrected, it is placed.
    deployments
        .patch(
            "typo",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {DROP_IN_ANNOTATION: "worst-fit"}}})),
        )
        .await
        .expect("corrected");
    wait_fleet_and_status(&env, "typo", 2, "nginx:1").await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_annotated_while_running_here_is_told_and_moves_to_the_fleet_on_restart() {
    let env = start(2).await;
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), OPEN);
    let mut api = deployment("api", OPEN, 2, "nginx:1");
    api.metadata.annotations = None;
    deployments
        .create(&PostParams::default(), &api)
        .await
        .expect("api created");
    wait_home_pods(&env, OPEN, "api", &[(true, false), (true, false)]).await;

    // Annotated while it runs here: placed in the fleet too, and the hub says both run.
    deployments
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {DROP_IN_ANNOTATION: "spread"}}})),
        )
        .await
        .expect("annotated");
    let note = env.event(OPEN, "api", "RunningHere").await;
    assert!(
        note.contains("2 pod(s)") && note.contains("rollout restart"),
        "the event counts the pods and says what to do; saw {note:?}"
    );

    // `kubectl rollout restart`: the new pods are proxies, the old ones go once the fleet runs
    // the restarted template.
    deployments
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"metadata": {"annotations": {
                "kubectl.kubernetes.io/restartedAt": "2026-11-27T00:00:00Z"}}}}})),
        )
        .await
        .expect("restarted");
    wait_fleet_and_status(&env, "api", 2, "nginx:1").await;
    wait_home_pods(&env, OPEN, "api", &[(false, true), (false, true)]).await;

    // The annotation removed (its ReplicaSet keeps it, as upstream's does): the hub says the
    // fleet copy stays, and a new pod runs here, not gated.
    deployments
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {DROP_IN_ANNOTATION: null}}})),
        )
        .await
        .expect("annotation removed");
    let note = env.event(OPEN, "api", "NoLongerPlaced").await;
    assert!(
        note.contains("keeps running"),
        "the event says the copy stays; saw {note:?}"
    );
    scale(&deployments, "api", 3).await;
    wait_for("a third pod of api, running here", DEADLINE, || async {
        let pods = home_pods(&env, OPEN, "api").await;
        let here = pods.iter().filter(|p| **p == (true, false)).count();
        if here == 1 && pods.len() == 3 {
            Ok(())
        } else {
            Err(format!("(bound, gated) {pods:?}"))
        }
    })
    .await;
    let copy: MultiClusterDeployment = Api::namespaced(env.client.clone(), OPEN)
        .get("api")
        .await
        .expect("the fleet copy stays");
    assert_eq!(copy.spec.replicas, 2, "the copy no longer follows the Deployment");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_hub_down_no_pod_of_a_drop_in_deployment_runs_at_home() {
    let mut env = start(2).await;
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), OPEN);
    deployments
        .create(&PostParams::default(), &deployment("web", OPEN, 1, "nginx:1"))
        .await
        .expect("web created");
    wait_fleet_and_status(&env, "web", 1, "nginx:1").await;

    // The hub stops: the webhook (failurePolicy Fail) cannot be called, so a scale-up creates
    // no pod here, and the ReplicaSet says why.
    env.stop_hub().await;
    scale(&deployments, "web", 2).await;
    wait_for("the ReplicaSet refused a pod", DEADLINE, || async {
        let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(env.client.clone(), OPEN);
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let refused = list.items.iter().any(|e| {
            e.reason.as_deref() == Some("FailedCreate")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.contains("pods.drop-in.nave.dev"))
        });
        if refused {
            Ok(())
        } else {
            let seen: Vec<_> = list.items.iter().filter_map(|e| e.reason.clone()).collect();
            Err(format!("reasons {seen:?}"))
        }
    })
    .await;
    assert_eq!(
        home_pods(&env, OPEN, "web").await,
        vec![(false, true)],
        "only the proxy made before the hub stopped, and nothing bound here"
    );

    // Back: the pod is created, gated, and the fleet runs both replicas.
    env.start_hub().await.expect("the hub starts again");
    wait_fleet_and_status(&env, "web", 2, "nginx:1").await;
    assert_none_at_home(&env, "web").await;
    env.shutdown().await;
}
