//! Drain figures for BENCHMARKS.md: `cargo bench -p nave-e2e --bench drain`.
//!
//! `NAVE_BENCH_DRAINS` sizes (default `10,50,100`) of four-replica MultiClusterDeployments on
//! three simulated clusters, the hub and agents in this process. Once every workload runs, the
//! busiest cluster gets the drain taint (`nave.dev/drain:NoExecute`, what `nave drain` sets) and
//! every status of the MultiClusterDeployments is followed by a watch until none runs replicas
//! there: the time that takes, and the fewest replicas available in all at any status (the drain is
//! make-before-break, so it should never be below the total). The sizes fit the fleet without
//! the drained cluster; replicas that do not fit stay where they run, and the drain does not end.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use nave_api::{ClusterTaint, ClusterTaintEffect, DRAIN_TAINT_KEY, MultiClusterDeployment};
use nave_e2e::{Database, Env, fleet};
use nave_testkit::{Mcd, wait_for};
use serde_json::json;

mod support;

use support::{Follower, available};

const NS: &str = "default";
const REPLICAS: i32 = 4;

#[global_allocator]
static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;

fn main() -> anyhow::Result<()> {
    nave_sim::install_crypto_provider();
    let sizes = support::sizes("NAVE_BENCH_DRAINS", "10,50,100");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    println!("| workloads | replicas on the drained cluster | drained in | fewest available (of all) |");
    println!("|---|---|---|---|");
    for size in sizes {
        let row = runtime.block_on(drain(size))?;
        println!("{row}");
    }
    Ok(())
}

async fn drain(workloads: usize) -> anyhow::Result<String> {
    let env = Env::start(fleet(3), Database::Sqlite).await?;
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    for i in 0..workloads {
        let mcd = Mcd::new(&format!("w-{i}"))
            .namespace(NS)
            .replicas(REPLICAS)
            .cpu("10m")
            .memory("16Mi")
            .build();
        mcds.create(&PostParams::default(), &mcd).await?;
    }
    let total = i32::try_from(workloads)? * REPLICAS;
    let every = wait_for("every workload available", Duration::from_secs(600), || async {
        let list = mcds
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let available = available(&list.items);
        if available >= total {
            Ok(list.items)
        } else {
            Err(format!("{available} of {total} available"))
        }
    })
    .await;
    let target = busiest(&every);
    let before = in_cluster(&every, &target);

    let taint = ClusterTaint {
        key: DRAIN_TAINT_KEY.to_owned(),
        value: None,
        effect: ClusterTaintEffect::NoExecute,
        time_added: Some(Time(jiff::Timestamp::now())),
    };
    let clusters: Api<nave_api::WorkloadCluster> = Api::all(env.client.clone());
    let mut follower = Follower::start(&env.client, NS).await?;
    let started = Instant::now();
    clusters
        .patch(
            &target,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [taint]}})),
        )
        .await?;
    let fewest = follower
        .until(Duration::from_secs(600), "drained", |mcds, _| {
            in_cluster(mcds, &target) == 0
        })
        .await?;
    let took = started.elapsed();
    env.shutdown().await;
    Ok(format!(
        "| {workloads} | {before} | {:.1} s | {fewest} ({total}) |",
        took.as_secs_f64()
    ))
}

/// Replicas given to or still ready in `cluster`, summed over the workloads.
fn in_cluster<M: std::borrow::Borrow<MultiClusterDeployment>>(mcds: &[M], cluster: &str) -> i32 {
    mcds.iter()
        .filter_map(|m| m.borrow().status.as_ref())
        .flat_map(|s| &s.clusters)
        .filter(|c| c.name == cluster)
        .map(|c| c.desired.max(c.ready))
        .sum()
}

/// The cluster running the most replicas.
fn busiest(mcds: &[MultiClusterDeployment]) -> String {
    let mut by_cluster = std::collections::BTreeMap::<String, i32>::new();
    for c in mcds
        .iter()
        .filter_map(|m| m.status.as_ref())
        .flat_map(|s| &s.clusters)
    {
        *by_cluster.entry(c.name.clone()).or_default() += c.ready;
    }
    by_cluster
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(c, _)| c)
        .unwrap_or_default()
}
