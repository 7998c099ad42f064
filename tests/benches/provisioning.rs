//! Growing the fleet, for BENCHMARKS.md: `cargo bench -p nave-e2e --bench provisioning`.
//!
//! The tests' three simulated clusters, one of them declared but without its agent; a receiver
//! of the provisioner webhook in this process. Each run creates an MCD of 8 replicas of 1.5 CPU
//! allowed in the joined cluster of 3 nodes of 4 CPU (room for 6) and the dormant one, then
//! measures: apply → the webhook receives the demand; the dormant cluster's agent started (the
//! "provisioning") → every replica ready; every replica ready → the webhook hears the demand
//! cleared. `NAVE_BENCH_RUNS` runs (default 5), each in a fresh environment.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
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

#[global_allocator]
static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;

type Received = Arc<Mutex<Vec<(Instant, FleetDemand)>>>;

fn main() -> anyhow::Result<()> {
    nave_sim::install_crypto_provider();
    let runs: usize = std::env::var("NAVE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut rows = Vec::new();
    for _ in 0..runs {
        rows.push(runtime.block_on(run())?);
    }
    println!("| step | median | max |");
    println!("|---|---|---|");
    let names = [
        "apply → demand at the webhook",
        "agent started → every replica ready",
        "every replica ready → demand cleared at the webhook",
    ];
    for (i, name) in names.iter().enumerate() {
        let mut column: Vec<Duration> = rows.iter().map(|r: &[Duration; 3]| r[i]).collect();
        column.sort();
        println!(
            "| {name} | {:.2} s | {:.2} s |",
            column[column.len() / 2].as_secs_f64(),
            column[column.len() - 1].as_secs_f64()
        );
    }
    println!("({runs} runs)");
    Ok(())
}

async fn run() -> anyhow::Result<[Duration; 3]> {
    let received: Received = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/demand", listener.local_addr()?);
    let app = axum::Router::new()
        .route(
            "/demand",
            post(|State(received): State<Received>, body: String| async move {
                if let Ok(demand) = serde_json::from_str::<FleetDemand>(&body) {
                    received.lock().unwrap().push((Instant::now(), demand));
                }
                axum::http::StatusCode::NO_CONTENT
            }),
        )
        .with_state(received.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let mut env = Env::start_with(
        fleet(3),
        Database::Sqlite,
        EnvOptions {
            dormant: vec![PROVISIONED.to_owned()],
            hub_provisioner: nave_hub::cli::ProvisionerArgs {
                provisioner_webhook: Some(url),
                ..Default::default()
            },
            ..EnvOptions::default()
        },
    )
    .await?;
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    let applied = Instant::now();
    mcds.create(
        &PostParams::default(),
        &Mcd::new("batch")
            .namespace(NS)
            .replicas(8)
            .cpu("1500m")
            .placement(json!({"policy": "worst-fit", "clusters": [JOINED, PROVISIONED]}))
            .build(),
    )
    .await?;
    let asked = wait_for("the demand at the webhook", DEADLINE, || {
        let received = received.clone();
        async move {
            received
                .lock()
                .unwrap()
                .iter()
                .find(|(_, d)| !d.is_empty())
                .map(|(at, _)| *at)
                .ok_or_else(|| "nothing yet".to_owned())
        }
    })
    .await;
    let started = Instant::now();
    env.start_agent(PROVISIONED)?;
    env.wait_rolled_out(NS, "batch", 8).await;
    let ready = Instant::now();
    let cleared = wait_for("the demand cleared at the webhook", DEADLINE, || {
        let received = received.clone();
        async move {
            let seen = received.lock().unwrap();
            match seen.last() {
                Some((at, d)) if d.is_empty() && *at > asked => Ok(*at),
                _ => Err("not yet".to_owned()),
            }
        }
    })
    .await;
    env.shutdown().await;
    server.abort();
    Ok([
        asked - applied,
        ready - started,
        cleared.saturating_duration_since(ready),
    ])
}
