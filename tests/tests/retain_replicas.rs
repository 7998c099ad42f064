//! `spec.retainReplicas`, end to end with the real hub and agent on nave-sim: a cluster's own
//! HorizontalPodAutoscaler (its write to the Deployment's scale, under the HPA's field manager)
//! keeps the count it set while the template still follows the MultiClusterDeployment; without
//! it, the agent sets the hub's share back at its next apply.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nave_api::MultiClusterDeployment;
use nave_e2e::{DEADLINE, Database, Env, fleet};
use nave_testkit::{Mcd, wait_for};
use serde_json::json;

const NS: &str = "default";

/// `name`'s Deployment in `cluster`: (replicas, image).
async fn in_cluster(env: &Env, cluster: &str, name: &str) -> Option<(i32, String)> {
    let api: Api<Deployment> = Api::namespaced(env.cluster_client(cluster), NS);
    let d = api.get_opt(name).await.ok()??;
    Some((d.spec.replicas.unwrap_or(1), nave_e2e::image_of(&d)))
}

async fn wait_in_cluster(env: &Env, cluster: &str, name: &str, replicas: i32, image: &str) {
    wait_for(
        &format!("{name} in {cluster}: {replicas} replicas of {image}"),
        DEADLINE,
        || async {
            let seen = in_cluster(env, cluster, name).await;
            if seen == Some((replicas, image.to_owned())) {
                Ok(())
            } else {
                Err(format!("(replicas, image) {seen:?}"))
            }
        },
    )
    .await;
}

/// Sets the image of `name`'s container (a merge patch: the hub writes the status meanwhile).
async fn set_image(mcds: &Api<MultiClusterDeployment>, name: &str, image: &str) {
    let mcd = mcds.get(name).await.expect("the MCD");
    let mut containers = mcd.spec.template.spec["template"]["spec"]["containers"].clone();
    containers[0]["image"] = json!(image);
    let patch = json!({"spec": {"template": {"spec": {"template": {"spec": {"containers": containers}}}}}});
    mcds.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("new image");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_clusters_own_autoscaler_keeps_its_replicas_when_the_mcd_retains_them() {
    let env = Env::start(fleet(1), Database::Sqlite)
        .await
        .expect("the environment starts");
    let cluster = env.cluster_names()[0].clone();
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    for (name, retain) in [("kept", true), ("reset", false)] {
        let mut mcd = Mcd::new(name).replicas(2).requests(json!({"cpu": "10m"})).build();
        mcd.spec.retain_replicas = retain;
        mcds.create(&PostParams::default(), &mcd)
            .await
            .expect("MCD created");
        wait_in_cluster(&env, &cluster, name, 2, "nginx:1.27").await;
    }

    // A change before any autoscaler acted: the agent stops naming the count, which stays (a
    // field its last manager drops would be removed, and the Deployment fall back to 1).
    set_image(&mcds, "kept", "nginx:1.28").await;
    wait_in_cluster(&env, &cluster, "kept", 2, "nginx:1.28").await;

    // The cluster's HPA scales both to 4, through the scale subresource as the HPA does.
    let deployments: Api<Deployment> = Api::namespaced(env.cluster_client(&cluster), NS);
    let hpa = PatchParams {
        field_manager: Some("horizontal-pod-autoscaler".to_owned()),
        ..PatchParams::default()
    };
    for name in ["kept", "reset"] {
        deployments
            .patch_scale(name, &hpa, &Patch::Merge(json!({"spec": {"replicas": 4}})))
            .await
            .expect("scaled in the cluster");
    }

    // A new image reaches both clusters' Deployments; only the retained one keeps 4.
    for name in ["kept", "reset"] {
        set_image(&mcds, name, "nginx:2").await;
    }
    wait_in_cluster(&env, &cluster, "kept", 4, "nginx:2").await;
    wait_in_cluster(&env, &cluster, "reset", 2, "nginx:2").await;

    // Its status counts what the cluster runs, and it is Available with it.
    wait_for("kept's status: 4 replicas, Available", DEADLINE, || async {
        let mcd = mcds.get("kept").await.map_err(|e| e.to_string())?;
        let status = mcd.status.unwrap_or_default();
        let available = status.condition("Available").is_some_and(|c| c.status == "True");
        let per_cluster: BTreeMap<String, i32> = status
            .clusters
            .iter()
            .map(|c| (c.name.clone(), c.desired))
            .collect();
        if status.replicas == 4 && status.available_replicas == 4 && available {
            Ok(())
        } else {
            Err(format!(
                "replicas {}, available {}, Available {available}, per cluster {per_cluster:?}",
                status.replicas, status.available_replicas
            ))
        }
    })
    .await;
    // The cluster's later changes stay too (the HPA scales down).
    deployments
        .patch_scale("kept", &hpa, &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .expect("scaled down in the cluster");
    set_image(&mcds, "kept", "nginx:3").await;
    wait_in_cluster(&env, &cluster, "kept", 3, "nginx:3").await;
    env.shutdown().await;
}
