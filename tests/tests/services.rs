//! Services across clusters, end to end with the real hub and agents on nave-sim: a
//! MultiClusterService's Service goes to the clusters that run its workload and to those of its
//! `spec.placement` that call it; `spec.serviceExport` exports it through the multi-cluster
//! services API where the workload runs, and a cluster without that API says so in the status.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nave_api::{MultiClusterDeployment, MultiClusterService};
use nave_e2e::{DEADLINE, Database, Env, fleet, service_export_crd, service_exports};
use nave_testkit::{Mcd, wait_for};
use serde_json::json;

const NS: &str = "default";
const BACKEND: &str = "eu-west-1";
const OTHER_BACKEND: &str = "us-east-1";
const FRONTEND: &str = "ap-south-1";

/// Waits until the Service `name` is present (or absent) in each of `clusters`.
async fn wait_service(env: &Env, name: &str, clusters: &[&str], present: bool) {
    for cluster in clusters {
        let api: Api<Service> = Api::namespaced(env.cluster_client(cluster), NS);
        let want = if present { "present" } else { "absent" };
        wait_for(&format!("Service {name} {want} in {cluster}"), DEADLINE, || {
            let api = api.clone();
            async move {
                let found = api.get_opt(name).await.map_err(|e| e.to_string())?;
                if found.is_some() == present {
                    Ok(())
                } else {
                    Err(format!("present: {}", found.is_some()))
                }
            }
        })
        .await;
    }
}

/// Waits until the MultiClusterService's status says `ready` with these clusters (name, runs the
/// workload), its Ready message holding each of `message_has`.
async fn wait_mcs_status(
    env: &Env,
    name: &str,
    clusters: &[(&str, bool)],
    ready: bool,
    message_has: &[&str],
) {
    let api: Api<MultiClusterService> = Api::namespaced(env.client.clone(), NS);
    let want: Vec<(String, bool)> = clusters.iter().map(|(c, r)| ((*c).to_owned(), *r)).collect();
    wait_for(
        &format!("{name}'s status to list {want:?} with Ready={ready}, saying {message_has:?}"),
        DEADLINE,
        || {
            let (api, want) = (api.clone(), want.clone());
            async move {
                let mcs = api.get(name).await.map_err(|e| e.to_string())?;
                let status = mcs.status.unwrap_or_default();
                let mut listed: Vec<(String, bool)> = status
                    .clusters
                    .iter()
                    .map(|c| (c.name.clone(), c.runs_workload))
                    .collect();
                listed.sort();
                let mut want = want;
                want.sort();
                let condition = status.condition("Ready").cloned();
                let is_ready = condition.as_ref().is_some_and(|c| c.status == "True");
                let message = condition.as_ref().map(|c| c.message.as_str()).unwrap_or_default();
                if listed == want
                    && is_ready == ready
                    && message_has.iter().all(|m| message.contains(m))
                    && status.observed_generation == mcs.metadata.generation
                {
                    Ok(())
                } else {
                    Err(format!(
                        "clusters {listed:?}, Ready {:?}",
                        condition.map(|c| (c.status, c.reason, c.message))
                    ))
                }
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_reaches_the_clusters_that_call_it_and_is_exported_where_its_workload_runs() {
    let env = Env::start(fleet(3), Database::Sqlite)
        .await
        .expect("the environment starts");
    // The backend's cluster has the multi-cluster services API; the others do not yet.
    let crds: Api<CustomResourceDefinition> = Api::all(env.cluster_client(BACKEND));
    crds.create(&PostParams::default(), &service_export_crd())
        .await
        .expect("ServiceExport CRD created");

    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    mcds.create(
        &PostParams::default(),
        &Mcd::new("backend")
            .namespace(NS)
            .replicas(2)
            .placement(json!({"policy": "worst-fit", "clusters": [BACKEND]}))
            .build(),
    )
    .await
    .expect("MCD created");
    env.wait_rolled_out(NS, "backend", 2).await;

    let services: Api<MultiClusterService> = Api::namespaced(env.client.clone(), NS);
    let mcs: MultiClusterService = serde_json::from_value(json!({
        "apiVersion": "nave.dev/v1alpha1", "kind": "MultiClusterService",
        "metadata": {"name": "backend", "namespace": NS},
        "spec": {
            "deployment": "backend",
            "ports": [{"port": 80}],
            "global": true,
            "serviceExport": true,
            "placement": {"clusters": [FRONTEND]}
        }
    }))
    .expect("an MCS");
    services
        .create(&PostParams::default(), &mcs)
        .await
        .expect("MCS created");

    // The Service where the backend runs and where the frontend calls it, nowhere else; the
    // export only where the backend runs.
    wait_service(&env, "backend", &[BACKEND, FRONTEND], true).await;
    wait_service(&env, "backend", &[OTHER_BACKEND], false).await;
    let frontend: Api<Service> = Api::namespaced(env.cluster_client(FRONTEND), NS);
    let called = frontend
        .get("backend")
        .await
        .expect("the Service in the frontend's cluster");
    assert_eq!(
        called
            .metadata
            .annotations
            .unwrap_or_default()
            .get(nave_api::service::CILIUM_GLOBAL_ANNOTATION)
            .map(String::as_str),
        Some("true"),
        "the calling cluster's Service is global, so Cilium sends its traffic to the backend's pods"
    );
    wait_for("the ServiceExport in the backend's cluster", DEADLINE, || {
        let api = service_exports(&env, BACKEND, NS);
        async move {
            api.get_opt("backend")
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "absent".to_owned())
        }
    })
    .await;
    wait_mcs_status(&env, "backend", &[(BACKEND, true), (FRONTEND, false)], true, &[]).await;

    // The backend also runs where the multi-cluster services API is missing: that cluster's
    // export is not applied, and the status says where and why.
    mcds.patch(
        "backend",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"placement": {"policy": "spread", "clusters": [BACKEND, OTHER_BACKEND]},
                                      "replicas": 4}}),
        ),
    )
    .await
    .expect("MCD patched");
    // Ready=False names the cluster and what its agent said of the export.
    wait_mcs_status(
        &env,
        "backend",
        &[(BACKEND, true), (OTHER_BACKEND, true), (FRONTEND, false)],
        false,
        &[&format!("{OTHER_BACKEND}: ServiceExport: ")],
    )
    .await;
    wait_service(&env, "backend", &[OTHER_BACKEND], true).await;
    // The rest of the workload is applied there meanwhile.
    env.wait_rolled_out(NS, "backend", 4).await;
    // Once the API is installed there, the agent's next retry applies the export.
    let crds: Api<CustomResourceDefinition> = Api::all(env.cluster_client(OTHER_BACKEND));
    crds.create(&PostParams::default(), &service_export_crd())
        .await
        .expect("ServiceExport CRD created");
    wait_mcs_status(
        &env,
        "backend",
        &[(BACKEND, true), (OTHER_BACKEND, true), (FRONTEND, false)],
        true,
        &[],
    )
    .await;

    // The frontend no longer calls it: its cluster loses the Service.
    services
        .patch(
            "backend",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"placement": null}})),
        )
        .await
        .expect("MCS patched");
    wait_service(&env, "backend", &[FRONTEND], false).await;
    wait_mcs_status(
        &env,
        "backend",
        &[(BACKEND, true), (OTHER_BACKEND, true)],
        true,
        &[],
    )
    .await;

    // No longer exported: the exports go, the Services stay.
    services
        .patch(
            "backend",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"serviceExport": false}})),
        )
        .await
        .expect("MCS patched");
    for cluster in [BACKEND, OTHER_BACKEND] {
        wait_for(&format!("no ServiceExport in {cluster}"), DEADLINE, || {
            let api = service_exports(&env, cluster, NS);
            async move {
                match api.get_opt("backend").await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(_) => Err("still there".to_owned()),
                }
            }
        })
        .await;
    }
    wait_service(&env, "backend", &[BACKEND, OTHER_BACKEND], true).await;

    // A Service of its own, following no workload, is refused by the schema with the field named.
    let orphan = json!({
        "apiVersion": "nave.dev/v1alpha1", "kind": "MultiClusterService",
        "metadata": {"name": "orphan", "namespace": NS},
        "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}], "placement": {"clusters": [FRONTEND]}}
    });
    let refused = services
        .create(
            &PostParams::default(),
            &serde_json::from_value(orphan).expect("an MCS"),
        )
        .await
        .expect_err("an MCS without spec.deployment is refused");
    let text = refused.to_string();
    assert!(
        text.contains("spec.deployment") && text.contains("not supported"),
        "the refusal names the field and says why: {text}"
    );

    // Deleted: its Service leaves every cluster, the workload stays.
    services
        .delete("backend", &Default::default())
        .await
        .expect("MCS deleted");
    wait_service(&env, "backend", &[BACKEND, OTHER_BACKEND], false).await;
    env.wait_rolled_out(NS, "backend", 4).await;
    env.shutdown().await;
}
