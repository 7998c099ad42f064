//! Rollout and removal figures for BENCHMARKS.md: `cargo bench -p nave-e2e --bench lifecycle`.
//!
//! `NAVE_BENCH_WORKLOADS` sizes (default `10,50`) of three-replica MultiClusterDeployments spread
//! over the tests' three simulated clusters, each rolling out in three waves (one cluster each,
//! no pause), the hub and agents in this process. Once every workload runs, every template
//! changes at once: the time until every rollout is Complete, and the fewest replicas available
//! in all at any reading (every 50 ms). Then the WorkloadCluster of the last wave is deleted:
//! the time until the object is gone (its workloads moved away, its agent applied the empty set,
//! the hub forgot it), and again the fewest available.

use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nave_api::{MultiClusterDeployment, RolloutPhase, WorkloadCluster};
use nave_e2e::{Database, Env, fleet};
use nave_testkit::wait_for;
use serde_json::{Value, json};

mod support;

use support::available;

const NS: &str = "default";
const REPLICAS: i32 = 3;

#[global_allocator]
static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;

fn main() -> anyhow::Result<()> {
    nave_sim::install_crypto_provider();
    let sizes = support::sizes("NAVE_BENCH_WORKLOADS", "10,50");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    println!(
        "| workloads | replicas | rollout in 3 waves: complete in | fewest available | cluster removed in | fewest available |"
    );
    println!("|---|---|---|---|---|---|");
    for size in sizes {
        let row = runtime.block_on(run(size))?;
        println!("{row}");
    }
    Ok(())
}

fn template(name: &str, image: &str) -> Value {
    json!({"spec": {
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": image,
                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
        }
    }})
}

async fn run(workloads: usize) -> anyhow::Result<String> {
    let env = Env::start(fleet(3), Database::Sqlite).await?;
    let names = env.cluster_names();
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    for i in 0..workloads {
        let name = format!("w-{i}");
        let mcd: MultiClusterDeployment = serde_json::from_value(json!({
            "apiVersion": "nave.dev/v1alpha1", "kind": "MultiClusterDeployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "replicas": REPLICAS,
                "placement": {"policy": "spread"},
                "rollout": {"waves": [{"clusters": [names[0]]}, {"clusters": [names[1]]}]},
                "template": template(&name, "registry.example/app:1"),
            }
        }))?;
        mcds.create(&PostParams::default(), &mcd).await?;
    }
    let total = i32::try_from(workloads)? * REPLICAS;
    wait_for("every workload available", Duration::from_secs(600), || async {
        let list = mcds
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let available = available(&list.items);
        if available >= total {
            Ok(())
        } else {
            Err(format!("{available} of {total} available"))
        }
    })
    .await;

    let started = Instant::now();
    for i in 0..workloads {
        let name = format!("w-{i}");
        let patch = json!({"spec": {"template": template(&name, "registry.example/app:2")}});
        mcds.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    let mut fewest_rollout = i32::MAX;
    loop {
        let list = mcds.list(&ListParams::default()).await?;
        fewest_rollout = fewest_rollout.min(available(&list.items));
        let complete = list.items.iter().all(|m| {
            m.status.as_ref().is_some_and(|s| {
                s.observed_generation == m.metadata.generation
                    && s.rollout
                        .as_ref()
                        .is_some_and(|r| r.phase == RolloutPhase::Complete)
            })
        });
        if complete {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "rollouts not complete after 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rolled_out = started.elapsed();

    let clusters: Api<WorkloadCluster> = Api::all(env.client.clone());
    let target = names[2].clone();
    wait_for("the hub's finalizer", Duration::from_secs(60), || async {
        let object = clusters.get(&target).await.map_err(|e| e.to_string())?;
        if object
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == nave_api::CLUSTER_FINALIZER)
        {
            Ok(())
        } else {
            Err("no finalizer yet".to_owned())
        }
    })
    .await;
    let started = Instant::now();
    clusters.delete(&target, &DeleteParams::default()).await?;
    let mut fewest_removal = i32::MAX;
    loop {
        let list = mcds.list(&ListParams::default()).await?;
        fewest_removal = fewest_removal.min(available(&list.items));
        if clusters.get_opt(&target).await?.is_none() {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "{target} not removed after 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let removed = started.elapsed();
    env.shutdown().await;
    Ok(format!(
        "| {workloads} | {total} | {:.1} s | {fewest_rollout} ({total}) | {:.1} s | {fewest_removal} ({total}) |",
        rolled_out.as_secs_f64(),
        removed.as_secs_f64()
    ))
}
