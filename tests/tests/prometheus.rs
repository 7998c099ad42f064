//! Prometheus as a scoring input against the real Prometheus server: it scrapes the simulated
//! clusters (whose pods declare their CPU use), the agents and the hub; the hub reads per-cluster
//! usage from it, places by it, and falls back to requests once Prometheus is gone.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use nave_api::{MultiClusterDeployment, WorkloadCluster};
use nave_e2e::{DEADLINE, Database, Env, EnvOptions, placed, prometheus};
use nave_sim::config::{CPU_USAGE_ANNOTATION, FleetConfig};
use nave_testkit::{Mcd, wait_for};
use serde_json::json;

/// Two clusters of 2 nodes × 4 cores, 16Gi: `eu-west-1` and `us-east-1`.
fn two_equal_clusters() -> FleetConfig {
    let mut fleet = nave_e2e::fleet(2);
    for cluster in &mut fleet.clusters {
        let pool = &mut cluster.node_pools[0];
        pool.count = 2;
        pool.cpu = "4".to_owned();
        pool.memory = "16Gi".to_owned();
    }
    fleet
}

/// A Deployment Nave does not own: `replicas` pods requesting `cpu` each and declaring
/// `cpu_usage` each to the simulator's usage model.
fn foreign(name: &str, replicas: i32, cpu: &str, cpu_usage: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {CPU_USAGE_ANNOTATION: cpu_usage}},
                "spec": {"containers": [{"name": "app", "image": "busybox:1.36",
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}
            }
        }
    }))
    .expect("a well-formed Deployment")
}

/// `cluster`'s `usage.cpuMillis` and `capacity.requested.cpuMillis` in the REST API.
async fn cpu(env: &Env, cluster: &str) -> Result<(Option<u64>, Option<u64>), String> {
    let view = env.rest(&format!("/clusters/{cluster}")).await?;
    Ok((
        view["usage"]["cpuMillis"].as_u64(),
        view["capacity"]["requested"]["cpuMillis"].as_u64(),
    ))
}

async fn explanation(env: &Env, name: &str) -> String {
    let placement = env
        .rest(&format!("/placements/default/{name}"))
        .await
        .unwrap_or_else(|e| panic!("the placement of {name}: {e}"));
    placement["explanation"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn usage_from_prometheus_steers_worst_fit_and_requests_return_when_prometheus_stops() {
    let Some(binary) = prometheus::binary_or_skip("usage as a scoring input") else {
        return;
    };
    let mut hub_prometheus = nave_hub::cli::PrometheusArgs {
        prometheus_ttl: Duration::from_secs(5),
        ..nave_hub::cli::PrometheusArgs::default()
    };
    // The default query's 2m window is for 15-60 s scrapes; with 1 s scrapes 20 s is plenty and
    // follows changes sooner.
    hub_prometheus.prometheus_usage_cpu_query =
        hub_prometheus.prometheus_usage_cpu_query.replace("[2m]", "[20s]");
    let options = EnvOptions {
        prometheus: Some(binary),
        hub_prometheus,
        ..EnvOptions::default()
    };
    let mut env = Env::start_with(two_equal_clusters(), Database::Sqlite, options)
        .await
        .expect("the environment starts");

    // eu-west-1 requests little (200m) but uses 6 of its 8 cores; us-east-1 requests 2 cores
    // and uses almost nothing. By requests eu-west-1 has the most room.
    for (cluster, deployment) in [
        ("eu-west-1", foreign("hot", 2, "100m", "3")),
        ("us-east-1", foreign("reserved", 2, "1", "25m")),
    ] {
        Api::<Deployment>::namespaced(env.cluster_client(cluster), "default")
            .create(&PostParams::default(), &deployment)
            .await
            .unwrap_or_else(|e| panic!("creating {cluster}'s foreign Deployment: {e}"));
    }
    wait_for(
        "the hub to read eu-west-1's usage from Prometheus and us-east-1's requests from its agent",
        DEADLINE,
        || async {
            let (eu, us) = (cpu(&env, "eu-west-1").await?, cpu(&env, "us-east-1").await?);
            match (eu, us) {
                ((Some(eu_used), _), (Some(us_used), Some(us_requested)))
                    if eu_used >= 5_500 && us_used <= 500 && us_requested >= 2_000 =>
                {
                    Ok(())
                }
                seen => Err(format!("(used, requested) of eu-west-1, us-east-1: {seen:?}")),
            }
        },
    )
    .await;

    // The hub exports what it read, and Prometheus scrapes that back.
    let server = env.prometheus().expect("Prometheus runs");
    let exported = wait_for("nave_cluster_used in Prometheus", DEADLINE, || async {
        let series =
            prometheus::query(server, r#"nave_cluster_used{cluster="eu-west-1",resource="cpu"}"#).await?;
        match series.as_slice() {
            [(_, v)] if *v >= 5.5 => Ok(*v),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
    assert!(exported <= 6.5, "about 6 cores; seen {exported}");
    let wcls: Api<WorkloadCluster> = Api::all(env.client.clone());
    wait_for(
        "eu-west-1's WorkloadCluster to show its usage",
        DEADLINE,
        || async {
            let wcl = wcls.get("eu-west-1").await.map_err(|e| e.to_string())?;
            let usage = wcl.status.and_then(|s| s.capacity).and_then(|c| c.usage);
            usage
                .as_ref()
                .and_then(|u| u.cpu.clone())
                .ok_or_else(|| format!("usage {usage:?}"))
        },
    )
    .await;

    // Worst-fit into one cluster: measured usage sends the replicas to us-east-1.
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), "default");
    let placement = json!({"policy": "worst-fit", "maxClusters": 1});
    mcds.create(
        &PostParams::default(),
        &Mcd::new("steered")
            .replicas(2)
            .placement(placement.clone())
            .build(),
    )
    .await
    .expect("steered created");
    let steered = env.wait_rolled_out("default", "steered", 2).await;
    let why = explanation(&env, "steered").await;
    assert_eq!(
        placed(&steered),
        BTreeMap::from([("us-east-1".to_owned(), 2)]),
        "eu-west-1 is 75% used though its requests are low:\n{why}"
    );
    assert!(
        why.contains("eu-west-1: worst-fit rank 2 of 2 (by measured usage: headroom for"),
        "the explanation says measured usage ranked eu-west-1:\n{why}"
    );

    // Prometheus stops: after the TTL the hub has no usage, and scores count requests again.
    env.stop_prometheus().await;
    wait_for("eu-west-1's usage to expire after the TTL", DEADLINE, || async {
        match cpu(&env, "eu-west-1").await? {
            (None, _) => Ok(()),
            seen => Err(format!("(used, requested) {seen:?}")),
        }
    })
    .await;
    mcds.create(
        &PostParams::default(),
        &Mcd::new("blind").replicas(2).placement(placement).build(),
    )
    .await
    .expect("blind created");
    let blind = env.wait_rolled_out("default", "blind", 2).await;
    let why = explanation(&env, "blind").await;
    assert_eq!(
        placed(&blind),
        BTreeMap::from([("eu-west-1".to_owned(), 2)]),
        "by requests eu-west-1 has the most room:\n{why}"
    );
    assert!(!why.contains("measured"), "nothing measured is mentioned:\n{why}");
    env.shutdown().await;
}
