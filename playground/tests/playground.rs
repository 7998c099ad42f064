//! `nave-sim up`: the management cluster serves Nave's CRDs and declares the fleet, every
//! workload cluster serves, and the files users are told about exist and point at live clusters.

use std::time::Duration;

use kube::api::{Api, ListParams, PostParams};
use nave_api::{MultiClusterDeployment, WorkloadCluster};
use nave_playground::up::{Playground, UpOptions, default_fleet};
use nave_testkit::{Mcd, wait_for};

#[tokio::test]
async fn up_serves_a_management_cluster_with_the_crds_and_a_declared_fleet() {
    let dir = tempfile::tempdir().expect("temp dir");
    let playground = Playground::start(UpOptions {
        prometheus: true,
        ..UpOptions::new(default_fleet(2), dir.path())
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
    // Ready means placeable: both agents have already reported capacity when `start` returns.
    let reporting: Vec<String> = Api::<WorkloadCluster>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("WorkloadClusters readable")
        .items
        .into_iter()
        .filter(|w| w.status.as_ref().is_some_and(|s| s.capacity.is_some()))
        .filter_map(|w| w.metadata.name)
        .collect();
    assert_eq!(
        reporting,
        ["eu-west-1", "us-east-1"],
        "clusters reporting capacity once the playground is up"
    );

    // The hub and the agents place a workload end to end: all replicas Ready in the workload clusters.
    let mcds = Api::<MultiClusterDeployment>::namespaced(client, "default");
    let mcd = Mcd::new("web").replicas(4).policy("spread").build();
    mcds.create(&PostParams::default(), &mcd)
        .await
        .expect("MCD created");
    wait_for(
        "4 ready replicas spread over 2 clusters",
        Duration::from_secs(90),
        || async {
            let status = mcds
                .get("web")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            let (ready, clusters) = (status.ready_replicas, status.clusters.len());
            if ready == 4 && clusters == 2 {
                Ok(())
            } else {
                Err(format!(
                    "{ready} ready over {clusters} cluster(s): {:?}",
                    status.conditions
                ))
            }
        },
    )
    .await;

    // The hub's REST API answers with the admin token that ready.json points to.
    let api = ready["hub"]["api"]["url"]
        .as_str()
        .expect("hub.api.url in ready.json");
    let token_file = ready["hub"]["api"]["adminTokenFile"]
        .as_str()
        .expect("hub.api.adminTokenFile in ready.json");
    let token = std::fs::read_to_string(token_file).expect("the admin token file");
    let (status, placement) = get_json(&format!("{api}/placements/default/web"), Some(token.trim())).await;
    assert_eq!(status, 200, "GET placements/default/web: {placement}");
    let placed: u64 = placement["assignment"]
        .as_object()
        .expect("an assignment")
        .values()
        .filter_map(serde_json::Value::as_u64)
        .sum();
    assert_eq!(
        placed, 4,
        "replicas in web's placement through the REST API: {placement}"
    );
    let (status, refused) = get_json(&format!("{api}/clusters"), None).await;
    assert_eq!(status, 401, "the REST API without a token: {refused}");

    // Prometheus: started when its binary is on PATH, scraping every cluster, the hub and the
    // agents; the hub reads each cluster's usage from it.
    let required = std::env::var_os("NAVE_REQUIRE_PROMETHEUS").is_some_and(|v| v == "1");
    match (&playground.prometheus, nave_playground::prometheus::find_binary()) {
        (None, None) if !required => {
            println!("skipped: prometheus is not on PATH (the playground's Prometheus part)");
            assert!(
                ready["prometheus"].is_null(),
                "no prometheus in ready.json: {ready}"
            );
            assert!(
                playground
                    .next_steps()
                    .contains("Prometheus not found; scores use requests"),
                "the playground says Prometheus is missing:\n{}",
                playground.next_steps()
            );
        }
        (None, _) => panic!(
            "expected the playground to start Prometheus (NAVE_REQUIRE_PROMETHEUS=1 or the binary is on PATH): {:?}",
            playground.prometheus_absent
        ),
        (Some(prometheus), _) => {
            assert_eq!(
                ready["prometheus"]["url"].as_str(),
                Some(prometheus.url()),
                "prometheus.url in ready.json"
            );
            assert!(
                playground.next_steps().contains(prometheus.url()),
                "the playground prints Prometheus' URL:\n{}",
                playground.next_steps()
            );
            prometheus
                .wait_targets_up(Duration::from_secs(60))
                .await
                .expect("every cluster, agent and the hub are scraped");
            wait_for(
                "the hub to read the CPU usage of both clusters from Prometheus",
                Duration::from_secs(90),
                || async {
                    let (status, clusters) = get_json(&format!("{api}/clusters"), Some(token.trim())).await;
                    let measured: Vec<(&str, &serde_json::Value)> = clusters["items"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|c| (c["name"].as_str().unwrap_or_default(), &c["usage"]["cpuMillis"]))
                        .collect();
                    if status == 200
                        && measured.len() == 2
                        && measured.iter().all(|(_, cpu)| cpu.as_u64() > Some(0))
                    {
                        Ok(())
                    } else {
                        Err(format!("{status}: {measured:?}"))
                    }
                },
            )
            .await;
        }
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

/// GETs `url` (plain HTTP), with a bearer token when given; the status and the JSON body.
async fn get_json(url: &str, token: Option<&str>) -> (u16, serde_json::Value) {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let mut request = http::Request::get(url);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = client
        .request(request.body(http_body_util::Empty::new()).expect("a request"))
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.expect("a body").to_bytes();
    let json = serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!("GET {url} answered {status} with a body that is not JSON ({e}): {body:?}")
    });
    (status, json)
}
