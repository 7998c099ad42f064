//! Many clusters in one process: isolation between clusters, unique cluster identity, fleet-level
//! stop/start over HTTP.

#[path = "support/helpers.rs"]
mod helpers;

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
