//! The placement loop end to end: the real hub and agents on nave-sim clusters. What a user sees
//! after `kubectl apply` in the management cluster, checked in the workload clusters themselves.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nave_api::conditions::{reasons, types};
use nave_api::{MultiClusterDeployment, MultiClusterService};
use nave_e2e::{DEADLINE, Database, Env, fleet, placed};
use nave_testkit::{Mcd, wait_for};
use serde_json::json;

const NS: &str = "default";

async fn env(clusters: usize) -> Env {
    Env::start(fleet(clusters), Database::Sqlite)
        .await
        .expect("the environment starts")
}

fn mcds(env: &Env) -> Api<MultiClusterDeployment> {
    Api::namespaced(env.client.clone(), NS)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_runs_replicas_where_the_policy_picks_and_status_sums_the_clusters() {
    let env = env(3).await;
    // Best-fit packs: the smallest cluster that holds all 4 (eu-west 4x8 CPU, us-east 3x4,
    // ap-south 2x4: ap-south has the least room that still fits).
    mcds(&env)
        .create(
            &PostParams::default(),
            &Mcd::new("packed")
                .namespace(NS)
                .replicas(4)
                .policy("best-fit")
                .build(),
        )
        .await
        .expect("MCD created");
    let packed = env.wait_rolled_out(NS, "packed", 4).await;
    assert_eq!(
        placed(&packed),
        BTreeMap::from([("ap-south-1".to_owned(), 4)]),
        "best-fit packs onto the smallest cluster that fits"
    );

    // Spread: as even as capacity allows.
    mcds(&env)
        .create(
            &PostParams::default(),
            &Mcd::new("even")
                .namespace(NS)
                .replicas(6)
                .policy("spread")
                .build(),
        )
        .await
        .expect("MCD created");
    let even = env.wait_rolled_out(NS, "even", 6).await;
    let status = even.status.clone().expect("status");
    assert_eq!(
        placed(&even),
        BTreeMap::from([
            ("ap-south-1".to_owned(), 2),
            ("eu-west-1".to_owned(), 2),
            ("us-east-1".to_owned(), 2)
        ]),
        "spread divides evenly"
    );
    // Totals are the sums over clusters, and the clusters' own Deployments agree.
    let sum = |f: fn(&nave_api::ClusterPlacementStatus) -> i32| status.clusters.iter().map(f).sum::<i32>();
    assert_eq!(status.replicas, sum(|c| c.desired), "replicas total");
    assert_eq!(status.ready_replicas, sum(|c| c.ready), "ready total");
    assert_eq!(status.available_replicas, sum(|c| c.available), "available total");
    assert_eq!(status.cluster_count, 3, "cluster count");
    for (cluster, deployments) in env.deployments(NS, "even").await {
        assert_eq!(
            deployments.len(),
            1,
            "one Deployment of the workload in {cluster}"
        );
        let ready = deployments[0]
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        assert_eq!(ready, 2, "ready replicas in {cluster}'s own Deployment");
    }
    let scheduled = status
        .conditions
        .iter()
        .find(|c| c.type_ == types::SCHEDULED)
        .expect("a Scheduled condition");
    assert_eq!(
        (scheduled.status.as_str(), scheduled.reason.as_str()),
        ("True", reasons::ALL_REPLICAS_PLACED),
        "Scheduled: {}",
        scheduled.message
    );
    assert_eq!(
        scheduled.observed_generation, even.metadata.generation,
        "conditions carry the observed generation"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_up_and_down_is_steady() {
    let env = env(3).await;
    let api = mcds(&env);
    api.create(
        &PostParams::default(),
        &Mcd::new("web").namespace(NS).replicas(3).policy("spread").build(),
    )
    .await
    .expect("MCD created");
    let before = placed(&env.wait_rolled_out(NS, "web", 3).await);
    let uids = deployment_uids(&env, "web").await;

    // Up through the scale subresource, as `kubectl scale` does: only new replicas are placed.
    api.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 9}})),
    )
    .await
    .expect("scaled up");
    let up = placed(&env.wait_rolled_out(NS, "web", 9).await);
    for (cluster, n) in &before {
        assert!(
            up.get(cluster).copied().unwrap_or(0) >= *n,
            "scale-up keeps {cluster}'s {n} replicas: before {before:?}, after {up:?}"
        );
    }

    // Down: nobody gains, and the Deployments are the same objects (scaled, not recreated).
    api.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
    )
    .await
    .expect("scaled down");
    let down = placed(&env.wait_rolled_out(NS, "web", 4).await);
    for (cluster, n) in &down {
        assert!(
            *n <= up.get(cluster).copied().unwrap_or(0),
            "scale-down adds nowhere: {cluster} had {up:?}, now {down:?}"
        );
    }
    let after = deployment_uids(&env, "web").await;
    for (cluster, uid) in &after {
        if let Some(old) = uids.get(cluster) {
            assert_eq!(
                old, uid,
                "{cluster}'s Deployment was updated in place, not recreated"
            );
        }
    }
    env.shutdown().await;
}

async fn deployment_uids(env: &Env, name: &str) -> BTreeMap<String, String> {
    env.deployments(NS, name)
        .await
        .into_iter()
        .map(|(c, ds)| (c, ds[0].metadata.uid.clone().unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_and_configmap_follow_the_workload_and_delete_removes_everything() {
    let env = env(3).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "site-config", "namespace": NS},
                "data": {"greeting": "hello"}
            }))
            .expect("ConfigMap"),
        )
        .await
        .expect("ConfigMap created");
    // Two of three clusters: the third must get neither the Service nor the ConfigMap.
    mcds(&env)
        .create(
            &PostParams::default(),
            &Mcd::new("site")
                .namespace(NS)
                .replicas(4)
                .placement(json!({"policy": "spread", "maxClusters": 2}))
                .env_from_config_map("site-config")
                .build(),
        )
        .await
        .expect("MCD created");
    let services: Api<MultiClusterService> = Api::namespaced(env.client.clone(), NS);
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": nave_api::API_VERSION, "kind": "MultiClusterService",
                "metadata": {"name": "site", "namespace": NS},
                "spec": {"deployment": "site", "global": true, "ports": [{"name": "http", "port": 80}]}
            }))
            .expect("MultiClusterService"),
        )
        .await
        .expect("MCS created");
    let rolled = env.wait_rolled_out(NS, "site", 4).await;
    let running: Vec<String> = placed(&rolled).into_keys().collect();
    assert_eq!(
        running.len(),
        2,
        "maxClusters=2 uses two clusters, saw {running:?}"
    );

    for cluster in env.cluster_names() {
        let client = env.cluster_client(&cluster);
        let service_api: Api<Service> = Api::namespaced(client.clone(), NS);
        let configmap_api: Api<ConfigMap> = Api::namespaced(client, NS);
        let wanted = running.contains(&cluster);
        let (service, configmap) = wait_for(
            &format!(
                "the Service and ConfigMap {} in {cluster}",
                if wanted { "present" } else { "absent" }
            ),
            DEADLINE,
            || {
                let (service_api, configmap_api) = (service_api.clone(), configmap_api.clone());
                async move {
                    let service = service_api.get_opt("site").await.map_err(|e| e.to_string())?;
                    let configmap = configmap_api
                        .get_opt("site-config")
                        .await
                        .map_err(|e| e.to_string())?;
                    if service.is_some() == wanted && configmap.is_some() == wanted {
                        Ok((service, configmap))
                    } else {
                        Err(format!(
                            "Service present: {}, ConfigMap present: {}",
                            service.is_some(),
                            configmap.is_some()
                        ))
                    }
                }
            },
        )
        .await;
        if let Some(service) = service {
            let annotations = service.metadata.annotations.unwrap_or_default();
            assert_eq!(
                annotations
                    .get(nave_api::service::CILIUM_GLOBAL_ANNOTATION)
                    .map(String::as_str),
                Some("true"),
                "global: true adds the Cilium annotation in {cluster}: {annotations:?}"
            );
            let selector = service.spec.and_then(|s| s.selector).unwrap_or_default();
            assert_eq!(
                selector.get("app").map(String::as_str),
                Some("site"),
                "the Service selects the workload's pods in {cluster}"
            );
        }
        if let Some(configmap) = configmap {
            assert_eq!(
                configmap
                    .data
                    .unwrap_or_default()
                    .get("greeting")
                    .map(String::as_str),
                Some("hello"),
                "the ConfigMap's data is copied to {cluster}"
            );
        }
    }

    // A change to the ConfigMap reaches the copies.
    configmaps
        .patch(
            "site-config",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"greeting": "bonjour"}})),
        )
        .await
        .expect("ConfigMap updated");
    for cluster in &running {
        let api: Api<ConfigMap> = Api::namespaced(env.cluster_client(cluster), NS);
        wait_for(&format!("the updated ConfigMap in {cluster}"), DEADLINE, || {
            let api = api.clone();
            async move {
                let data = api
                    .get("site-config")
                    .await
                    .map_err(|e| e.to_string())?
                    .data
                    .unwrap_or_default();
                match data.get("greeting").map(String::as_str) {
                    Some("bonjour") => Ok(()),
                    other => Err(format!("greeting = {other:?}")),
                }
            }
        })
        .await;
    }

    // Delete: the MCD goes only once its objects are gone from every cluster.
    mcds(&env)
        .delete("site", &DeleteParams::default())
        .await
        .expect("MCD deleted");
    env.wait_mcd_gone(NS, "site").await;
    for cluster in env.cluster_names() {
        let client = env.cluster_client(&cluster);
        wait_for(&format!("every object of site gone from {cluster}"), DEADLINE, || {
            let client = client.clone();
            async move {
                let deployments = Api::<Deployment>::namespaced(client.clone(), NS)
                    .list(&ListParams::default().labels("nave.dev/workload=default.site"))
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .len();
                let service = Api::<Service>::namespaced(client.clone(), NS)
                    .get_opt("site")
                    .await
                    .map_err(|e| e.to_string())?
                    .is_some();
                let configmap = Api::<ConfigMap>::namespaced(client, NS)
                    .get_opt("site-config")
                    .await
                    .map_err(|e| e.to_string())?
                    .is_some();
                if deployments == 0 && !service && !configmap {
                    Ok(())
                } else {
                    Err(format!(
                        "{deployments} Deployment(s), Service present: {service}, ConfigMap present: {configmap}"
                    ))
                }
            }
        })
        .await;
    }
    // The ConfigMap in the management cluster is the user's: untouched.
    assert!(
        configmaps
            .get_opt("site-config")
            .await
            .expect("readable")
            .is_some(),
        "the source ConfigMap stays in the management cluster"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_changes_one_clusters_copy_only() {
    let env = env(3).await;
    let overrides = json!([{
        "clusters": ["us-east-1"],
        "patches": [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "nginx:1.27-alpine"}]
    }]);
    mcds(&env)
        .create(
            &PostParams::default(),
            &Mcd::new("web")
                .namespace(NS)
                .replicas(3)
                .policy("spread")
                .overrides(overrides)
                .build(),
        )
        .await
        .expect("MCD created");
    env.wait_rolled_out(NS, "web", 3).await;
    let images: BTreeMap<String, String> = env
        .deployments(NS, "web")
        .await
        .into_iter()
        .map(|(cluster, ds)| (cluster, nave_e2e::image_of(&ds[0])))
        .collect();
    assert_eq!(
        images,
        BTreeMap::from([
            ("ap-south-1".to_owned(), "nginx:1.27".to_owned()),
            ("eu-west-1".to_owned(), "nginx:1.27".to_owned()),
            ("us-east-1".to_owned(), "nginx:1.27-alpine".to_owned()),
        ]),
        "the override applies to us-east-1's copy only"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_mcd_gets_a_condition_and_an_event_and_nothing_is_dispatched() {
    let env = env(2).await;
    // Admitted by the CRD schema, refused by the hub: the override patches a path the rendered
    // Deployment does not have.
    let overrides = json!([{
        "clusters": ["eu-west-1"],
        "patches": [{"op": "replace", "path": "/spec/template/spec/containers/7/image", "value": "x"}]
    }]);
    let broken = Mcd::new("broken")
        .namespace(NS)
        .replicas(2)
        .policy("spread")
        .overrides(overrides)
        .build();
    mcds(&env)
        .create(&PostParams::default(), &broken)
        .await
        .expect("admitted by the API server");
    let api = mcds(&env);
    let condition = wait_for("Scheduled=False/InvalidSpec on the MCD", DEADLINE, || {
        let api = api.clone();
        async move {
            let mcd = api.get("broken").await.map_err(|e| e.to_string())?;
            let conditions = mcd.status.map(|s| s.conditions).unwrap_or_default();
            conditions
                .iter()
                .find(|c| c.type_ == types::SCHEDULED && c.reason == reasons::INVALID_SPEC)
                .cloned()
                .ok_or_else(|| format!("conditions: {conditions:?}"))
        }
    })
    .await;
    assert_eq!(condition.status, "False", "Scheduled is False");
    assert!(
        condition.message.contains("overrides[0]") || condition.message.contains("containers/7"),
        "the condition names the field, saw: {}",
        condition.message
    );
    let events: Api<Event> = Api::namespaced(env.client.clone(), NS);
    let event = wait_for("an InvalidSpec Warning event on the MCD", DEADLINE, || {
        let events = events.clone();
        async move {
            let list = events
                .list(&ListParams::default().fields("involvedObject.name=broken"))
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .iter()
                .find(|e| e.reason.as_deref() == Some(reasons::INVALID_SPEC))
                .cloned()
                .ok_or_else(|| {
                    format!(
                        "events: {:?}",
                        list.items.iter().map(|e| e.reason.clone()).collect::<Vec<_>>()
                    )
                })
        }
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"), "a Warning event");
    assert_eq!(
        event.message.as_deref(),
        Some(condition.message.as_str()),
        "the event says what the condition says"
    );
    // Nothing reached any cluster.
    assert!(
        env.deployments(NS, "broken").await.is_empty(),
        "no Deployment of an invalid MCD anywhere"
    );

    // Fixing the spec places it.
    mcds(&env)
        .patch(
            "broken",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"overrides": []}})),
        )
        .await
        .expect("fixed");
    env.wait_rolled_out(NS, "broken", 2).await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_two_workloads_share_stays_until_the_last_one_goes() {
    let env = env(1).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "common", "namespace": NS}, "data": {"k": "v"}
            }))
            .expect("ConfigMap"),
        )
        .await
        .expect("ConfigMap created");
    for name in ["one", "two"] {
        mcds(&env)
            .create(
                &PostParams::default(),
                &Mcd::new(name)
                    .namespace(NS)
                    .replicas(1)
                    .policy("spread")
                    .env_from_config_map("common")
                    .build(),
            )
            .await
            .expect("MCD created");
        env.wait_rolled_out(NS, name, 1).await;
    }
    let cluster = env.cluster_names().remove(0);
    let copies: Api<ConfigMap> = Api::namespaced(env.cluster_client(&cluster), NS);
    let copy = copies.get("common").await.expect("the copy exists");
    let uid = copy.metadata.uid.clone();

    mcds(&env)
        .delete("one", &DeleteParams::default())
        .await
        .expect("MCD deleted");
    env.wait_mcd_gone(NS, "one").await;
    assert!(
        env.deployments(NS, "one").await.is_empty(),
        "one's Deployment is gone"
    );
    // The copy two still uses never went away: the same object, relabelled to two.
    let copy = wait_for("the shared copy to name two as its workload", DEADLINE, || {
        let copies = copies.clone();
        async move {
            let copy = copies.get("common").await.map_err(|e| e.to_string())?;
            let labels = copy.metadata.labels.clone().unwrap_or_default();
            match labels.get(nave_api::wire::WORKLOAD_LABEL).map(String::as_str) {
                Some("default.two") => Ok(copy),
                other => Err(format!("workload label {other:?}")),
            }
        }
    })
    .await;
    assert_eq!(copy.metadata.uid, uid, "the same ConfigMap object, never deleted");

    mcds(&env)
        .delete("two", &DeleteParams::default())
        .await
        .expect("MCD deleted");
    wait_for("the copy to go with the last workload", DEADLINE, || {
        let copies = copies.clone();
        async move {
            match copies.get_opt("common").await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(_) => Err("still there".to_owned()),
            }
        }
    })
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labelling_a_workload_cluster_places_what_waited_for_it() {
    let env = env(2).await;
    // Only clusters labelled tier=gold may run it, and none is yet.
    mcds(&env)
        .create(
            &PostParams::default(),
            &Mcd::new("gold")
                .namespace(NS)
                .replicas(2)
                .placement(json!({"policy": "spread", "clusterSelector": {"matchLabels": {"tier": "gold"}}}))
                .build(),
        )
        .await
        .expect("MCD created");
    let api = mcds(&env);
    wait_for("the MCD to report 2 unplaced replicas", DEADLINE, || {
        let api = api.clone();
        async move {
            let status = api
                .get("gold")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            if status.unplaced_replicas == 2 {
                Ok(())
            } else {
                Err(format!("unplaced {}", status.unplaced_replicas))
            }
        }
    })
    .await;

    // An admin labels a cluster: the workload goes there without waiting for a resync.
    let wcls: Api<nave_api::WorkloadCluster> = Api::all(env.client.clone());
    wcls.patch(
        "us-east-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"tier": "gold"}}})),
    )
    .await
    .expect("WorkloadCluster labelled");
    let placed_now = placed(&env.wait_rolled_out(NS, "gold", 2).await);
    assert_eq!(
        placed_now,
        BTreeMap::from([("us-east-1".to_owned(), 2)]),
        "the newly labelled cluster runs it"
    );
    env.shutdown().await;
}

/// A Deployment made by hand in a workload cluster, with the name an MCD later takes: the agent
/// leaves it as it is (not overwritten, not pruned), and the MCD says why its replicas there do
/// not come up, in a condition and a Warning event naming the cluster and the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_made_object_of_the_same_name_is_left_alone_and_the_conflict_is_reported() {
    let mut env = env(2).await;
    let cluster = env.cluster_names()[0].clone();
    let theirs: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": NS, "labels": {"owner": "a-person"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "hand-made"}},
            "template": {
                "metadata": {"labels": {"app": "hand-made"}},
                "spec": {"containers": [{"name": "app", "image": "hand/made:1"}]}
            }
        }
    }))
    .unwrap();
    let in_cluster: Api<Deployment> = Api::namespaced(env.cluster_client(&cluster), NS);
    let created = in_cluster
        .create(&PostParams::default(), &theirs)
        .await
        .expect("the hand-made Deployment");
    let mcd = Mcd::new("web")
        .namespace(NS)
        .replicas(2)
        .placement(json!({"policy": "worst-fit", "clusters": [cluster.clone()]}))
        .build();
    mcds(&env)
        .create(&PostParams::default(), &mcd)
        .await
        .expect("MCD created");

    let api = mcds(&env);
    let condition = wait_for("Degraded=True/ApplyFailed on the MCD", DEADLINE, || {
        let api = api.clone();
        async move {
            let mcd = api.get("web").await.map_err(|e| e.to_string())?;
            let conditions = mcd.status.map(|s| s.conditions).unwrap_or_default();
            conditions
                .iter()
                .find(|c| c.type_ == types::DEGRADED && c.reason == reasons::APPLY_FAILED)
                .cloned()
                .ok_or_else(|| format!("conditions: {conditions:?}"))
        }
    })
    .await;
    assert!(
        condition
            .message
            .contains(&format!("{cluster}: Deployment {NS}/web"))
            && condition
                .message
                .contains("not managed by this Nave installation"),
        "the condition names the cluster, the object and why: {}",
        condition.message
    );
    let events: Api<Event> = Api::namespaced(env.client.clone(), NS);
    wait_for("an ApplyFailed Warning event on the MCD", DEADLINE, || {
        let events = events.clone();
        async move {
            let list = events
                .list(&ListParams::default().fields("involvedObject.name=web"))
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .iter()
                .find(|e| {
                    e.reason.as_deref() == Some(reasons::APPLY_FAILED)
                        && e.type_.as_deref() == Some("Warning")
                })
                .map(drop)
                .ok_or_else(|| {
                    format!(
                        "events: {:?}",
                        list.items.iter().map(|e| e.reason.clone()).collect::<Vec<_>>()
                    )
                })
        }
    })
    .await;
    let now = in_cluster.get("web").await.expect("still there");
    assert_eq!(now.metadata.uid, created.metadata.uid, "the same object");
    assert_eq!(
        now.spec.replicas,
        Some(1),
        "its replicas are the person's, not the placement's"
    );
    assert_eq!(
        now.metadata
            .labels
            .unwrap_or_default()
            .get("owner")
            .map(String::as_str),
        Some("a-person")
    );

    // Deleting the MCD deletes nothing of theirs.
    mcds(&env)
        .delete("web", &DeleteParams::default())
        .await
        .expect("deleted");
    env.wait_mcd_gone(NS, "web").await;
    let still = in_cluster
        .get("web")
        .await
        .expect("still there after the MCD is gone");
    assert_eq!(still.metadata.uid, created.metadata.uid);
    env.stop_agent(&cluster).await;
    env.shutdown().await;
}

/// Policy `everywhere`: the count in every selected cluster, following the selection as
/// clusters stop and start matching, and the count as it is scaled; nothing moves between
/// clusters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everywhere_runs_the_count_in_every_selected_cluster_and_follows_the_selection() {
    let env = env(3).await;
    let all = |n: i32| -> BTreeMap<String, i32> {
        ["ap-south-1", "eu-west-1", "us-east-1"]
            .map(|c| (c.to_owned(), n))
            .into()
    };
    mcds(&env)
        .create(
            &PostParams::default(),
            &Mcd::new("agent")
                .namespace(NS)
                .replicas(1)
                .placement(json!({
                    "policy": "everywhere",
                    "clusterSelector": {"matchExpressions": [
                        {"key": "nave.dev/logs", "operator": "NotIn", "values": ["off"]}
                    ]}
                }))
                .build(),
        )
        .await
        .expect("MCD created");
    let placed_now = placed(&env.wait_rolled_out(NS, "agent", 3).await);
    assert_eq!(placed_now, all(1), "one in each of the three clusters");
    let uids = deployment_uids(&env, "agent").await;

    // A cluster stops matching: its replica goes and no other cluster takes it.
    let wcls: Api<nave_api::WorkloadCluster> = Api::all(env.client.clone());
    let label = |value: Option<&str>| Patch::Merge(json!({"metadata": {"labels": {"nave.dev/logs": value}}}));
    wcls.patch("us-east-1", &PatchParams::default(), &label(Some("off")))
        .await
        .expect("WorkloadCluster labelled");
    let two = env.wait_rolled_out(NS, "agent", 2).await;
    let mut expected = all(1);
    expected.remove("us-east-1");
    assert_eq!(
        placed(&two),
        expected,
        "us-east-1 no longer runs it (and its Deployment is gone: placed and running agree)"
    );
    // It matches again, and the count is raised: every selected cluster runs two, and the
    // Deployments that stayed are the same objects (scaled, not replaced).
    wcls.patch("us-east-1", &PatchParams::default(), &label(None))
        .await
        .expect("label removed");
    mcds(&env)
        .patch(
            "agent",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("MCD scaled");
    let six = env.wait_rolled_out(NS, "agent", 6).await;
    assert_eq!(placed(&six), all(2), "two in each cluster");
    let status = six.status.clone().unwrap_or_default();
    assert_eq!(status.unplaced_replicas, 0);
    let after = deployment_uids(&env, "agent").await;
    for cluster in ["ap-south-1", "eu-west-1"] {
        assert_eq!(
            after.get(cluster),
            uids.get(cluster),
            "{cluster}'s Deployment was scaled in place"
        );
    }
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_that_cannot_progress_in_its_cluster_shows_in_the_workloads_status() {
    let env = env(2).await;
    // Pods whose image never pulls (the simulator's fault injection), with a short deadline.
    let broken: MultiClusterDeployment = serde_json::from_value(json!({
        "apiVersion": "nave.dev/v1alpha1", "kind": "MultiClusterDeployment",
        "metadata": {"name": "broken", "namespace": NS},
        "spec": {
            "replicas": 1,
            "placement": {"policy": "worst-fit"},
            "template": {"spec": {
                "progressDeadlineSeconds": 2,
                "selector": {"matchLabels": {"app": "broken"}},
                "template": {
                    "metadata": {"labels": {"app": "broken"},
                                 "annotations": {"sim.nave.dev/fault": "ImagePullBackOff"}},
                    "spec": {"containers": [{"name": "app", "image": "registry.example/missing:1",
                             "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
                }
            }}
        }
    }))
    .expect("an MCD");
    mcds(&env)
        .create(&PostParams::default(), &broken)
        .await
        .expect("MCD created");
    let (cluster, message) = wait_for(
        "Degraded=True DeploymentFailing naming the cluster",
        DEADLINE,
        || async {
            let mcd = mcds(&env).get("broken").await.map_err(|e| e.to_string())?;
            let status = mcd.status.clone().unwrap_or_default();
            let degraded = status.condition(types::DEGRADED).cloned();
            match (&degraded, placed(&mcd).into_keys().next()) {
                (Some(c), Some(cluster))
                    if c.reason == reasons::DEPLOYMENT_FAILING
                        && c.message.contains("ProgressDeadlineExceeded") =>
                {
                    Ok((cluster, c.message.clone()))
                }
                _ => Err(format!("Degraded: {degraded:?}")),
            }
        },
    )
    .await;
    assert!(
        message.starts_with(&format!("{cluster}: Progressing=False ProgressDeadlineExceeded"))
            && message.contains("1 pod(s) ImagePullBackOff"),
        "the cluster, the Deployment's reason and its pod's: {message}"
    );
    let note = env.event(NS, "broken", reasons::DEPLOYMENT_FAILING).await;
    assert!(note.contains(&cluster), "the Event names the cluster: {note}");

    // The REST API and the metrics say it too, per cluster.
    let placement = env
        .rest(&format!("/placements/{NS}/broken"))
        .await
        .expect("the placement");
    let failing = placement["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == cluster.as_str())
        .and_then(|c| c["failing"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        failing.contains("ProgressDeadlineExceeded"),
        "expected {cluster}'s failure in the placement, saw {placement}"
    );
    let series = format!("nave_mcd_failing{{namespace=\"{NS}\",name=\"broken\",cluster=\"{cluster}\"}} 1");
    let metrics = reqwest::get(format!("{}/metrics", env.hub_metrics_url))
        .await
        .expect("the hub's metrics")
        .text()
        .await
        .expect("their text");
    assert!(
        metrics.lines().any(|l| l == series),
        "expected {series} in the hub's metrics, saw {:?}",
        metrics
            .lines()
            .filter(|l| l.starts_with("nave_mcd_failing"))
            .collect::<Vec<_>>()
    );
    env.shutdown().await;
}
