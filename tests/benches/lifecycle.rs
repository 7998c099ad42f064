//! Rollout and removal figures for BENCHMARKS.md: `cargo bench -p nave-e2e --bench lifecycle`.
//!
//! `NAVE_BENCH_WORKLOADS` sizes (default `10,50`) of three-replica MultiClusterDeployments spread
//! over the tests' three simulated clusters, each rolling out in three waves (one cluster each,
//! no pause), the hub and agents in this process. Once every workload runs, every template
//! changes at once: the time until every rollout is Complete, and the fewest replicas available
//! in all at any status written (followed by a watch). Then the WorkloadCluster of the last wave is deleted:
//! the time until the object is gone (its workloads moved away, its agent applied the empty set,
//! the hub forgot it), and again the fewest available.

use std::time::{Duration, Instant};

use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nave_api::{MultiClusterDeployment, RolloutPhase, WorkloadCluster};
use nave_e2e::{Database, Env, fleet};
use nave_testkit::wait_for;
use serde_json::{Value, json};

mod support;

use support::{Follower, available};

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

    let mut follower = Follower::start(&env.client, NS).await?;
    let started = Instant::now();
    // The generation each change made: a rollout is of it once the status has observed it.
    let mut changed = std::collections::BTreeMap::new();
    for i in 0..workloads {
        let name = format!("w-{i}");
        let patch = json!({"spec": {"template": template(&name, "registry.example/app:2")}});
        let mcd = mcds
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        changed.insert(name, mcd.metadata.generation);
    }
    let fewest_rollout = follower
        .until(Duration::from_secs(600), "every rollout complete", |mcds, _| {
            changed.iter().all(|(name, generation)| {
                mcds.iter().any(|m| {
                    m.metadata.name.as_deref() == Some(name.as_str())
                        && m.status.as_ref().is_some_and(|s| {
                            s.observed_generation >= *generation
                                && s.rollout
                                    .as_ref()
                                    .is_some_and(|r| r.phase == RolloutPhase::Complete)
                        })
                })
            })
        })
        .await?;
    let rolled_out = started.elapsed();

    let clusters: Api<WorkloadCluster> = Api::all(env.client.clone());
    let target = names[2].clone();
    follower
        .until(
            Duration::from_secs(60),
            "the hub's finalizer on it",
            |_, clusters| {
                clusters.iter().any(|c| {
                    c.metadata.name.as_deref() == Some(target.as_str())
                        && c.finalizers().iter().any(|f| f == nave_api::CLUSTER_FINALIZER)
                })
            },
        )
        .await?;
    let started = Instant::now();
    clusters.delete(&target, &DeleteParams::default()).await?;
    let fewest_removal = follower
        .until(Duration::from_secs(600), "removed", |_, clusters| {
            clusters
                .iter()
                .all(|c| c.metadata.name.as_deref() != Some(target.as_str()))
        })
        .await?;
    let removed = started.elapsed();
    env.shutdown().await;
    Ok(format!(
        "| {workloads} | {total} | {:.1} s | {fewest_rollout} ({total}) | {:.1} s | {fewest_removal} ({total}) |",
        rolled_out.as_secs_f64(),
        removed.as_secs_f64()
    ))
}
