//! `nave-sim up`: the management cluster serves Nave's CRDs and declares the fleet, every
//! workload cluster serves, and the files users are told about exist and point at live clusters.

use std::time::Duration;

use kube::api::{Api, ListParams, PostParams};
use nave_api::{MultiClusterDeployment, WorkloadCluster};
use nave_sim::up::{Playground, UpOptions, default_fleet};

#[tokio::test]
async fn up_serves_a_management_cluster_with_the_crds_and_a_declared_fleet() {
    let dir = tempfile::tempdir().expect("temp dir");
    let playground = Playground::start(UpOptions {
        fleet: default_fleet(2),
        dir: dir.path().to_path_buf(),
        tls: false,
    })
    .await
    .expect("the playground starts");

    let ready: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("ready.json")).expect("ready.json"))
            .expect("ready.json is JSON");
    let names: Vec<&str> = ready["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["eu-west-1", "us-east-1"], "clusters in ready.json");
    assert!(
        dir.path().join("kubeconfig").is_file(),
        "management kubeconfig written"
    );

    // Through the written kubeconfig, as a user would.
    let kubeconfig = kube::config::Kubeconfig::read_from(dir.path().join("kubeconfig")).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    let client = kube::Client::try_from(config).expect("client");
    let declared: Vec<String> = Api::<WorkloadCluster>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("WorkloadClusters are served")
        .items
        .into_iter()
        .map(|w| w.metadata.name.unwrap_or_default())
        .collect();
    assert_eq!(declared, ["eu-west-1", "us-east-1"], "declared WorkloadClusters");
    // Both agents have registered and reported capacity (the hub decides on what it knows).
    let wcls = Api::<WorkloadCluster>::all(client.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let reporting = wcls
            .list(&ListParams::default())
            .await
            .expect("WorkloadClusters readable")
            .items
            .iter()
            .filter(|w| w.status.as_ref().is_some_and(|s| s.capacity.is_some()))
            .count();
        if reporting == 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "expected both WorkloadClusters to report capacity within 60 s, saw {reporting}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // The hub and the agents place a workload end to end: all replicas Ready in the workload clusters.
    let mcds = Api::<MultiClusterDeployment>::namespaced(client, "default");
    let mcd: MultiClusterDeployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "nave.dev/v1alpha1", "kind": "MultiClusterDeployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 4, "placement": {"policy": "spread"}, "template": {"spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                {"name": "nginx", "image": "nginx:1.27",
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}}}
    }))
    .expect("a valid MultiClusterDeployment");
    mcds.create(&PostParams::default(), &mcd)
        .await
        .expect("MCD created");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let live = mcds.get("web").await.expect("MCD readable");
        let status = live.status.unwrap_or_default();
        let ready = status.ready_replicas;
        let clusters = status.clusters.len();
        if ready == 4 && clusters == 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "expected 4 ready replicas spread over 2 clusters within 90 s, saw {ready} ready over {clusters} \
             cluster(s): {:?}",
            status.conditions
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    for c in ready["clusters"].as_array().expect("clusters") {
        let path = c["kubeconfig"].as_str().expect("kubeconfig path");
        let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("cluster kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("config");
        let client = kube::Client::try_from(config).expect("client");
        let version = client.apiserver_version().await.expect("workload cluster serves");
        assert_eq!(version.minor, "32", "workload cluster {path} version");
    }

    let dir_path = playground.dir().to_path_buf();
    playground.shutdown().await;
    assert!(
        !dir_path.join("ready.json").exists(),
        "ready.json removed on shutdown"
    );
}
