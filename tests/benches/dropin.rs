//! The drop-in path's figures for BENCHMARKS.md: `cargo bench -p nave-e2e --bench dropin`.
//!
//! `NAVE_BENCH_WORKLOADS` sizes (default `1,20`) of three-replica workloads over the tests' three
//! simulated clusters, the hub and agents in this process. For each size, the same workloads
//! twice: as MultiClusterDeployments (apply → every one `Available`), and as ordinary Deployments
//! annotated `nave.dev/placement: spread` in a namespace opened to the drop-in path (apply →
//! every Deployment shows its replicas ready, from the fleet). Then every drop-in Deployment's
//! image changes at once: the time until each is rolled out as `kubectl rollout status` sees it
//! (every replica updated and available, the fleet's included). The difference between the first
//! two columns is what the drop-in path adds: the webhook on each pod, the fleet copy, the proxy
//! pods' status.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use nave_api::{DROP_IN_ANNOTATION, MultiClusterDeployment};
use nave_e2e::{Database, Env, EnvOptions, fleet};
use nave_testkit::{Mcd, wait_for};
use serde_json::json;

const REPLICAS: i32 = 3;
const DEADLINE: Duration = Duration::from_secs(600);

#[global_allocator]
static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;

fn main() -> anyhow::Result<()> {
    nave_sim::install_crypto_provider();
    let sizes: Vec<usize> = std::env::var("NAVE_BENCH_WORKLOADS")
        .unwrap_or_else(|_| "1,20".to_owned())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    println!(
        "| workloads | replicas | MCDs: apply → Available | drop-in Deployments: apply → Ready at home | drop-in: new image → rolled out |"
    );
    println!("|---|---|---|---|---|");
    for size in sizes {
        let row = runtime.block_on(run(size))?;
        println!("{row}");
    }
    Ok(())
}

fn deployment(name: &str, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {DROP_IN_ANNOTATION: "spread"}},
        "spec": {"replicas": REPLICAS, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image,
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}},
    }))
    .expect("a Deployment")
}

/// Whether the Deployment is rolled out as `kubectl rollout status` judges it.
fn rolled_out(d: &Deployment) -> bool {
    let Some(status) = &d.status else { return false };
    let want = d.spec.replicas.unwrap_or(1);
    status.observed_generation >= d.metadata.generation
        && status.updated_replicas == Some(want)
        && status.replicas == Some(want)
        && status.available_replicas == Some(want)
}

async fn run(workloads: usize) -> anyhow::Result<String> {
    let env = Env::start_with(
        fleet(3),
        Database::Sqlite,
        EnvOptions {
            hub_drop_in: true,
            ..EnvOptions::default()
        },
    )
    .await?;
    env.create_namespace("direct", false).await;
    env.create_namespace("dropin", true).await;
    env.register_drop_in_webhook().await;

    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), "direct");
    let started = Instant::now();
    for i in 0..workloads {
        let mcd = Mcd::new(&format!("w{i}"))
            .namespace("direct")
            .replicas(i64::from(REPLICAS))
            .build();
        mcds.create(&PostParams::default(), &mcd).await?;
    }
    wait_for("every MCD Available", DEADLINE, || async {
        let list = mcds
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let available = list
            .items
            .iter()
            .filter(|m| {
                m.status
                    .as_ref()
                    .is_some_and(|s| s.available_replicas == REPLICAS)
            })
            .count();
        if available == workloads {
            Ok(())
        } else {
            Err(format!("{available} of {workloads}"))
        }
    })
    .await;
    let direct = started.elapsed();

    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "dropin");
    let all_rolled_out = || async {
        let list = deployments
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let done = list.items.iter().filter(|d| rolled_out(d)).count();
        if done == workloads {
            Ok(())
        } else {
            Err(format!("{done} of {workloads}"))
        }
    };
    let started = Instant::now();
    for i in 0..workloads {
        deployments
            .create(&PostParams::default(), &deployment(&format!("w{i}"), "nginx:1"))
            .await?;
    }
    wait_for("every drop-in Deployment Ready", DEADLINE, all_rolled_out).await;
    let drop_in = started.elapsed();

    let started = Instant::now();
    for i in 0..workloads {
        let patch =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}}});
        deployments
            .patch(
                &format!("w{i}"),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await?;
    }
    // Rolled out as seen at home, and only once the fleet runs the new image everywhere.
    wait_for("every drop-in Deployment rolled out", DEADLINE, all_rolled_out).await;
    let rollout = started.elapsed();
    for i in 0..workloads {
        let spokes = env.deployments("dropin", &format!("w{i}")).await;
        let stale: Vec<&String> = spokes
            .iter()
            .filter(|(_, ds)| ds.iter().any(|d| nave_e2e::image_of(d) != "nginx:2"))
            .map(|(c, _)| c)
            .collect();
        anyhow::ensure!(
            stale.is_empty(),
            "w{i} rolled out at home while {stale:?} still ran the old image"
        );
    }
    env.shutdown().await;
    let secs = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    Ok(format!(
        "| {workloads} | {} | {} | {} | {} |",
        workloads * usize::try_from(REPLICAS).unwrap_or(0),
        secs(direct),
        secs(drop_in),
        secs(rollout)
    ))
}
