//! Growing the fleet end to end: replicas that fit in no cluster reach a provisioner's webhook
//! and the hub's metrics; the "provisioner" (a receiver in this test) brings a cluster in by
//! starting its agent, as a Cluster API hook installing the agent chart would; the cluster joins
//! and takes the replicas, and the webhook hears that nothing is left.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use kube::api::{Api, PostParams};
use nave_api::MultiClusterDeployment;
use nave_e2e::{DEADLINE, Database, Env, EnvOptions, fleet};
use nave_hub::provisioner::FleetDemand;
use nave_testkit::{Mcd, wait_for};
use serde_json::json;

const NS: &str = "default";
const JOINED: &str = "us-east-1";
const PROVISIONED: &str = "ap-south-1";
const TOKEN: &str = "provisioner-secret";

/// What the receiver was sent, with whether each request carried the token.
type Received = Arc<Mutex<Vec<(bool, FleetDemand)>>>;

async fn receive(State(received): State<Received>, headers: HeaderMap, body: String) -> StatusCode {
    let authorized =
        headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {TOKEN}"));
    match serde_json::from_str::<FleetDemand>(&body) {
        Ok(demand) => {
            received.lock().unwrap().push((authorized, demand));
            StatusCode::NO_CONTENT
        }
        Err(_) => StatusCode::BAD_REQUEST,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_fit_nowhere_reach_the_webhook_and_a_provisioned_cluster_takes_them() {
    let received: Received = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port for the receiver");
    let url = format!("http://{}/demand", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .route("/demand", post(receive))
        .with_state(received.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().expect("a directory");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token written");

    let env = Env::start_with(
        fleet(3),
        Database::Sqlite,
        EnvOptions {
            dormant: vec![PROVISIONED.to_owned()],
            hub_provisioner: nave_hub::cli::ProvisionerArgs {
                provisioner_webhook: Some(url),
                provisioner_webhook_token_file: Some(token_file),
                ..Default::default()
            },
            ..EnvOptions::default()
        },
    )
    .await
    .expect("the environment starts");
    let mut env = env;

    // 8 replicas of 1.5 CPU, allowed in two clusters of which one has joined (3 nodes of 4 CPU:
    // 2 replicas a node): some fit nowhere.
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    mcds.create(
        &PostParams::default(),
        &Mcd::new("batch")
            .namespace(NS)
            .replicas(8)
            .cpu("1500m")
            .placement(json!({"policy": "worst-fit", "clusters": [JOINED, PROVISIONED]}))
            .build(),
    )
    .await
    .expect("MCD created");

    let asked = wait_for("a FleetDemand naming default/batch", DEADLINE, || {
        let received = received.clone();
        async move {
            let seen = received.lock().unwrap().clone();
            seen.iter()
                .rev()
                .find(|(_, d)| d.workloads.iter().any(|w| w.name == "batch"))
                .cloned()
                .ok_or_else(|| format!("received {} document(s)", seen.len()))
        }
    })
    .await;
    let (authorized, demand) = asked;
    assert!(
        authorized,
        "the webhook is called with the configured bearer token"
    );
    let batch = &demand.workloads[0];
    assert_eq!(
        (batch.namespace.as_str(), batch.per_replica.cpu_millis),
        (NS, 1500),
        "the demand says which workload, and the size of its replicas: {demand:?}"
    );
    // The status is written after the plan the demand came from: wait for it to agree.
    let unplaced = batch.replicas;
    wait_for(
        "the MCD's status to place what the demand leaves out",
        DEADLINE,
        || {
            let mcds = mcds.clone();
            async move {
                let mcd = mcds.get("batch").await.map_err(|e| e.to_string())?;
                let placed: i32 = mcd
                    .status
                    .unwrap_or_default()
                    .clusters
                    .iter()
                    .map(|c| c.desired)
                    .sum();
                let placed = u32::try_from(placed).map_err(|e| e.to_string())?;
                if placed + unplaced == 8 && (1..8).contains(&placed) {
                    Ok(())
                } else {
                    Err(format!("{placed} placed, {unplaced} in the demand"))
                }
            }
        },
    )
    .await;
    assert_eq!(
        batch.clusters,
        [JOINED, PROVISIONED],
        "and which clusters the workload may use, so a provisioner adds one it may"
    );
    assert_eq!(demand.replicas, u64::from(batch.replicas));
    assert_eq!(demand.total.cpu_millis, 1500 * u64::from(batch.replicas));
    let expected = f64::from(batch.replicas);
    wait_for("nave_unplaced_replicas to count them", DEADLINE, || async {
        let value = env.hub_metric("nave_unplaced_replicas").await?;
        if value == expected {
            Ok(())
        } else {
            Err(format!("{value}"))
        }
    })
    .await;

    // The provisioner brings the cluster in: its agent joins, and the replicas go there.
    env.start_agent(PROVISIONED).expect("the agent starts");
    let rolled = env.wait_rolled_out(NS, "batch", 8).await;
    assert!(
        nave_e2e::placed(&rolled).get(PROVISIONED).is_some_and(|n| *n > 0),
        "the provisioned cluster runs replicas: {:?}",
        nave_e2e::placed(&rolled)
    );
    wait_for("a FleetDemand with nothing left", DEADLINE, || {
        let received = received.clone();
        async move {
            let seen = received.lock().unwrap().clone();
            match seen.last() {
                Some((_, last)) if last.is_empty() && last.workloads.is_empty() => Ok(()),
                last => Err(format!("last received: {last:?}")),
            }
        }
    })
    .await;
    wait_for("nave_unplaced_replicas back to 0", DEADLINE, || async {
        let value = env.hub_metric("nave_unplaced_replicas").await?;
        if value == 0.0 {
            Ok(())
        } else {
            Err(format!("{value}"))
        }
    })
    .await;
    env.shutdown().await;
    server.abort();
}
