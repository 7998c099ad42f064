//! Proximity by measured latency end to end: the agents probe each other over links whose round
//! trip nave-sim emulates, the hub ranks clusters by what they measured, and a link that slows
//! down changes where new replicas go.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nave_api::MultiClusterDeployment;
use nave_api::wire::WORKLOAD_LABEL;
use nave_e2e::{DEADLINE, Database, Env, placed};
use nave_sim::config::{ClusterConfig, Coordinates, FleetConfig, Link, NetworkConfig, NodePool};
use nave_testkit::{Mcd, wait_for};
use serde_json::{Value, json};

const NS: &str = "default";

/// One node of `cpu` CPUs at `at`, in `region`.
fn cluster(name: &str, cpu: &str, region: &str, at: (f64, f64)) -> ClusterConfig {
    ClusterConfig {
        name: name.to_owned(),
        region: Some(region.to_owned()),
        zone: Some(format!("{region}-1a")),
        coordinates: Some(Coordinates {
            latitude: at.0,
            longitude: at.1,
        }),
        node_pools: vec![NodePool {
            count: 1,
            cpu: cpu.to_owned(),
            memory: "16Gi".to_owned(),
            ..NodePool::default()
        }],
        ..ClusterConfig::default()
    }
}

fn link(a: &str, b: &str, rtt_millis: u64) -> Link {
    Link {
        between: [a.to_owned(), b.to_owned()],
        rtt_millis,
    }
}

/// The round trips `from`'s agent reported, by peer, from the REST API.
async fn reported(env: &Env, from: &str) -> Result<BTreeMap<String, f64>, String> {
    let view = env.rest(&format!("/clusters/{from}")).await?;
    Ok(view["latency"]["peers"]
        .as_object()
        .map(|peers| {
            peers
                .iter()
                .filter_map(|(peer, ms)| Some((peer.clone(), ms.as_f64()?)))
                .collect()
        })
        .unwrap_or_default())
}

/// Waits until every pair's round trip, as both ends report it, is at least the link's and less
/// than the link's plus `slack` (the probe's own time on loopback).
async fn wait_measured(env: &Env, links: &[(&str, &str, u64)]) {
    let slack = 40.0;
    wait_for(
        "the agents to report each link's round trip",
        DEADLINE,
        || async move {
            let mut seen = Vec::new();
            let mut ok = true;
            for (a, b, rtt) in links {
                for (from, to) in [(a, b), (b, a)] {
                    let got = reported(env, from).await?.get(*to).copied();
                    let want = *rtt as f64;
                    ok &= got.is_some_and(|ms| ms >= want && ms < want + slack);
                    seen.push(format!("{from}->{to} {got:?} (link {rtt} ms)"));
                }
            }
            if ok { Ok(()) } else { Err(seen.join(", ")) }
        },
    )
    .await;
}

/// The proximity rank and latency (ms) an explanation gives, from
/// `proximity rank R of N (L ms, ...)`.
fn rank_and_latency(explanation: &str) -> Option<(u32, f64)> {
    let rest = explanation.split("proximity rank ").nth(1)?;
    let (rank, rest) = rest.split_once(" of ")?;
    let latency = rest.split_once('(')?.1.split_once(" ms")?.0;
    Some((rank.parse().ok()?, latency.parse().ok()?))
}

/// Whether `explanation` gives rank `rank` at a measured latency of at least `millis` (and less
/// than 40 ms more: the probe's own time on loopback).
fn ranked(explanation: &str, rank: u32, millis: f64) -> bool {
    rank_and_latency(explanation).is_some_and(|(r, ms)| r == rank && ms >= millis && ms < millis + 40.0)
}

/// Creates the MCD `name` of 8 replicas with `placement`, waits until it runs, and returns where.
async fn roll_out(env: &Env, name: &str, placement: &Value) -> BTreeMap<String, i32> {
    Api::<MultiClusterDeployment>::namespaced(env.client.clone(), NS)
        .create(
            &PostParams::default(),
            &Mcd::new(name)
                .namespace(NS)
                .replicas(8)
                .placement(placement.clone())
                .build(),
        )
        .await
        .expect("MCD created");
    placed(&env.wait_rolled_out(NS, name, 8).await)
}

/// The per-cluster explanations of `name`'s placement.
async fn explanations(env: &Env, name: &str) -> BTreeMap<String, String> {
    let placement = env
        .rest(&format!("/placements/{NS}/{name}"))
        .await
        .unwrap_or_else(|e| panic!("the placement of {name}: {e}"));
    placement["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c: &Value| {
            (
                c["name"].as_str().unwrap_or_default().to_owned(),
                c["explanation"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_goes_to_the_cluster_nearest_by_measured_latency_and_follows_a_slow_link() {
    // origin-1 and twin-1 share a region and a city; far-1 is in another region, 6,000 km away.
    // By labels and map twin-1 is nearest to origin-1; by the network far-1 is (5 ms against 60).
    let fleet = FleetConfig {
        clusters: vec![
            cluster("origin-1", "500m", "eu-central", (50.11, 8.68)),
            cluster("twin-1", "2", "eu-central", (50.11, 8.68)),
            cluster("far-1", "2", "ap-south", (19.08, 72.88)),
        ],
        network: NetworkConfig {
            links: vec![
                link("origin-1", "twin-1", 60),
                link("origin-1", "far-1", 5),
                link("twin-1", "far-1", 60),
            ],
        },
    };
    let mut env = Env::start(fleet, Database::Sqlite)
        .await
        .expect("the environment starts");
    wait_measured(
        &env,
        &[
            ("origin-1", "twin-1", 60),
            ("origin-1", "far-1", 5),
            ("twin-1", "far-1", 60),
        ],
    )
    .await;

    // 8 replicas of 100m near origin-1, which has room for 5: the other 3 overflow to the
    // nearest cluster by measured latency.
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    let placement = json!({"policy": "proximity", "proximity": {"origin": {"cluster": "origin-1"}}});
    assert_eq!(
        roll_out(&env, "web", &placement).await,
        BTreeMap::from([("origin-1".to_owned(), 5), ("far-1".to_owned(), 3)]),
        "origin-1 fills up, the rest goes to far-1 (5 ms), not twin-1 (60 ms, same zone)"
    );
    let why = explanations(&env, "web").await;
    let far = why.get("far-1").cloned().unwrap_or_default();
    assert!(
        ranked(&far, 2, 5.0),
        "expected far-1 at proximity rank 2 with about 5 ms measured; saw: {far}"
    );
    let twin = why.get("twin-1").cloned().unwrap_or_default();
    assert!(
        ranked(&twin, 3, 60.0) && twin.contains("same zone"),
        "expected twin-1 last at about 60 ms despite the same zone; saw: {twin}"
    );

    // The link to far-1 slows down to 120 ms (both ends' agents restart with it). A new
    // workload's overflow now goes to twin-1.
    env.set_link("origin-1", "far-1", Duration::from_millis(120));
    for name in ["origin-1", "far-1"] {
        env.stop_agent(name).await;
        env.start_agent(name).expect("the agent restarts");
    }
    wait_measured(&env, &[("origin-1", "far-1", 120), ("origin-1", "twin-1", 60)]).await;
    mcds.delete("web", &DeleteParams::default())
        .await
        .expect("MCD deleted");
    env.wait_mcd_gone(NS, "web").await;
    let pods: Api<Pod> = Api::namespaced(env.cluster_client("origin-1"), NS);
    wait_for(
        "web's pods to leave origin-1 and the hub to know",
        DEADLINE,
        || {
            let (env, pods) = (&env, pods.clone());
            async move {
                let left = pods
                    .list(&ListParams::default().labels(&format!("{WORKLOAD_LABEL}={NS}.web")))
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .len();
                let view = env.rest("/clusters/origin-1").await?;
                let requested = view["capacity"]["requested"]["cpuMillis"].clone();
                if left == 0 && requested == 0 {
                    Ok(())
                } else {
                    Err(format!("{left} pods left, requested cpu {requested}"))
                }
            }
        },
    )
    .await;
    assert_eq!(
        roll_out(&env, "web-2", &placement).await,
        BTreeMap::from([("origin-1".to_owned(), 5), ("twin-1".to_owned(), 3)]),
        "with far-1 120 ms away, the overflow goes to twin-1 (60 ms)"
    );
    let far = explanations(&env, "web-2")
        .await
        .get("far-1")
        .cloned()
        .unwrap_or_default();
    assert!(
        ranked(&far, 3, 120.0),
        "expected far-1 last at about 120 ms; saw: {far}"
    );

    // The agents also measured the hub, and the hub shows it.
    let origin = env.rest("/clusters/origin-1").await.expect("the cluster view");
    assert!(
        origin["latency"]["hubMillis"].as_f64().is_some(),
        "origin-1 reports its round trip to the hub: {}",
        origin["latency"]
    );
    env.shutdown().await;
}
