//! Many clusters in one process, and the `nave-sim` binary: isolation between clusters, unique
//! cluster identity, fleet-level stop/start over HTTP, `serve` and `fleet` subcommands.

#[path = "support/helpers.rs"]
mod helpers;

use std::path::Path;
use std::time::Duration;

use helpers::wait_for;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use nave_sim::{ClusterConfig, FleetConfig, ServeOptions, SimFleet};
use serde_json::json;

fn cluster_config(name: &str) -> ClusterConfig {
    ClusterConfig {
        name: name.to_owned(),
        node_pools: vec![],
        ..ClusterConfig::default()
    }
}

async fn post(client: &kube::Client, path: &str) -> Result<String, kube::Error> {
    let req = http::Request::post(path)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    client.request_text(req).await
}

#[tokio::test]
async fn clusters_of_a_fleet_are_isolated_and_can_stop_each_other() {
    let fleet = FleetConfig {
        clusters: vec![
            cluster_config("hub"),
            cluster_config("spoke1"),
            cluster_config("spoke2"),
        ],
        ..FleetConfig::default()
    };
    let fleet = SimFleet::start(
        fleet,
        ServeOptions {
            control_plane: false,
            ..ServeOptions::default()
        },
    )
    .await
    .expect("fleet");
    let hub = fleet.cluster("hub").expect("hub").client().await.expect("client");
    let s1 = fleet
        .cluster("spoke1")
        .expect("spoke1")
        .client()
        .await
        .expect("client");
    let s2 = fleet
        .cluster("spoke2")
        .expect("spoke2")
        .client()
        .await
        .expect("client");

    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}})).expect("cm");
    Api::<ConfigMap>::default_namespaced(s1.clone())
        .create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let other = Api::<ConfigMap>::default_namespaced(s2.clone())
        .get_opt("x")
        .await
        .expect("get");
    assert!(other.is_none(), "spoke2 must not see spoke1's ConfigMap");

    let uid = |c: kube::Client| async move {
        Api::<Namespace>::all(c)
            .get("kube-system")
            .await
            .expect("ns")
            .uid()
    };
    let (u1, u2, uh) = (
        uid(s1.clone()).await,
        uid(s2.clone()).await,
        uid(hub.clone()).await,
    );
    assert!(
        u1 != u2 && u1 != uh && u2 != uh,
        "kube-system uids must differ: {u1:?} {u2:?} {uh:?}"
    );

    post(&hub, "/_sim/v1/clusters/spoke1/stop")
        .await
        .expect("stop spoke1 via the hub");
    let err = Api::<Namespace>::all(s1.clone())
        .get("default")
        .await
        .expect_err("spoke1 unreachable");
    assert!(
        !matches!(err, kube::Error::Api(_)),
        "a transport error, not a Status: {err}"
    );
    post(&hub, "/_sim/v1/clusters/spoke1/start")
        .await
        .expect("start spoke1 via the hub");
    wait_for(Duration::from_secs(5), "spoke1 back with its state", || async {
        Api::<ConfigMap>::default_namespaced(s1.clone())
            .get("x")
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await;
    assert_eq!(uid(s1.clone()).await, u1, "identity survives a restart");
    fleet.shutdown().await;
}

#[tokio::test]
async fn the_fleet_command_writes_kubeconfigs_and_ready_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("fleet.yaml");
    std::fs::write(&config, "clusters:\n  - name: a\n    nodePools: [{name: n, count: 1}]\n  - name: b\n    nodePools: [{name: n, count: 1}]\n")
        .expect("write");
    let out = dir.path().join("out");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_nave-sim"))
        .args(["fleet", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn nave-sim");
    let ready_path = out.join("ready.json");
    let ready: serde_json::Value = wait_for(Duration::from_secs(20), "ready.json", || async {
        let text = std::fs::read_to_string(&ready_path).map_err(|e| e.to_string())?;
        serde_json::from_str(&text).map_err(|e| e.to_string())
    })
    .await;
    let clusters = ready["clusters"].as_array().cloned().unwrap_or_default();
    assert_eq!(clusters.len(), 2, "ready.json: {ready}");
    for c in &clusters {
        assert!(
            c["metricsUrl"].as_str().is_some_and(|u| u.ends_with("/metrics")),
            "{c}"
        );
        let kubeconfig = c["kubeconfig"].as_str().expect("kubeconfig path");
        assert!(Path::new(kubeconfig).is_file());
        nave_sim::install_crypto_provider();
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("config");
        let client = kube::Client::try_from(cfg).expect("client");
        let nodes = wait_for(Duration::from_secs(10), "the configured node", || {
            let client = client.clone();
            async move {
                let n = Api::<k8s_openapi::api::core::v1::Node>::all(client)
                    .list(&Default::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .len();
                if n == 1 { Ok(n) } else { Err(format!("{n} nodes")) }
            }
        })
        .await;
        assert_eq!(nodes, 1);
    }
    let _ = child.kill().await;
}
