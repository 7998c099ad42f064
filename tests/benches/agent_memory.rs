//! The agent's memory in a large cluster, for BENCHMARKS.md:
//! `cargo bench -p nave-e2e --bench agent_memory`.
//!
//! One simulated workload cluster of `nodes` nodes (`NAVE_AGENT_SIZE=nodes x pods`, default
//! `5000x20000`), the hub and its agent as processes of their own (this binary run again as
//! `role hub|agent`). Once the agent has registered, `pods` pods are created in the cluster by
//! Deployments of 100 replicas whose template looks like an application's (labels, annotations,
//! environment, probes, a volume, two containers), and the run waits until the simulator says
//! every pod is Running. The agent's resident memory (`VmRSS`) and its peak (`VmHWM`) are read
//! from `/proc` with the nodes alone, then for 30 s after the pods are running (its reflectors hold
//! every node and pod; its heartbeats send the capacity model computed from them).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures::StreamExt as _;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use nave_e2e::procs::{FleetOptions, ProcessFleet, Store, memory_mib};
use nave_sim::config::{ClusterConfig, FleetConfig, NodePool};
use serde_json::json;

const CLUSTER: &str = "big";
const PER_DEPLOYMENT: usize = 100;

#[global_allocator]
static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;

fn main() -> anyhow::Result<()> {
    if let Some(result) = nave_e2e::procs::child_role() {
        return result;
    }
    nave_sim::install_crypto_provider();
    let size = std::env::var("NAVE_AGENT_SIZE").unwrap_or_else(|_| "5000x20000".to_owned());
    let (nodes, pods) = size
        .split_once('x')
        .and_then(|(n, p)| Some((n.trim().parse().ok()?, p.trim().parse().ok()?)))
        .ok_or_else(|| {
            anyhow::anyhow!("NAVE_AGENT_SIZE takes nodes x pods, such as 5000x20000, not {size:?}")
        })?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run(nodes, pods))
}

/// A Deployment of `replicas` pods whose template carries what an application's pods carry.
fn deployment(name: &str, replicas: usize) -> anyhow::Result<Deployment> {
    let env: Vec<serde_json::Value> = (0..12)
        .map(|i| json!({"name": format!("SETTING_{i}"), "value": format!("value-of-setting-{i}")}))
        .collect();
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name, "team": "payments", "tier": "backend",
                               "app.kubernetes.io/version": "1.24.3"},
                    "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090",
                                    "kubectl.kubernetes.io/restartedAt": "2026-11-01T00:00:00Z"}
                },
                "spec": {
                    "containers": [{
                        "name": "app", "image": "registry.example.com/payments/app:1.24.3",
                        "args": ["--listen=:8080", "--metrics=:9090", "--log-format=json"],
                        "env": env,
                        "ports": [{"name": "http", "containerPort": 8080},
                                  {"name": "metrics", "containerPort": 9090}],
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
                        "livenessProbe": {"httpGet": {"path": "/live", "port": 8080}, "periodSeconds": 10},
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                      "limits": {"memory": "64Mi"}}
                    }, {
                        "name": "proxy", "image": "registry.example.com/mesh/proxy:1.20",
                        "resources": {"requests": {"cpu": "5m", "memory": "8Mi"}}
                    }],
                    "volumes": [{"name": "config", "configMap": {"name": format!("{name}-config")}}]
                }
            }
        }
    }))?)
}

/// Follows the pods of `pods` and says, on the returned channel, how many are Running.
fn count_running(pods: Api<Pod>) -> tokio::sync::watch::Receiver<usize> {
    let (tx, rx) = tokio::sync::watch::channel(0);
    tokio::spawn(async move {
        let mut running = HashSet::new();
        let mut events = watcher(pods, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let (Ok(watcher::Event::Apply(pod)) | Ok(watcher::Event::InitApply(pod))) = event else {
                continue;
            };
            let name = pod.metadata.name.clone().unwrap_or_default();
            if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                running.insert(name);
            } else {
                running.remove(&name);
            }
            if tx.send(running.len()).is_err() {
                return;
            }
        }
    });
    rx
}

async fn run(nodes: usize, pods: usize) -> anyhow::Result<()> {
    let fleet = ProcessFleet::start(FleetOptions {
        hubs: 1,
        store: Store::Sqlite,
        lease: None,
        fleet: FleetConfig {
            clusters: vec![ClusterConfig {
                name: CLUSTER.to_owned(),
                node_pools: vec![NodePool {
                    name: "general".to_owned(),
                    count: u32::try_from(nodes)?,
                    cpu: "16".to_owned(),
                    memory: "64Gi".to_owned(),
                    pods: 110,
                    ..NodePool::default()
                }],
                ..ClusterConfig::default()
            }],
            ..FleetConfig::default()
        },
    })
    .await?;
    let agent_pid = fleet
        .agents
        .get(CLUSTER)
        .and_then(Option::as_ref)
        .map(|a| a.pid())
        .ok_or_else(|| anyhow::anyhow!("the agent of {CLUSTER} runs"))?;
    let (idle, _) = memory_mib(agent_pid);

    let cluster = fleet
        .fleet
        .cluster(CLUSTER)
        .ok_or_else(|| anyhow::anyhow!("the simulated cluster {CLUSTER}"))?;
    let client = cluster.client().await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let mut running = count_running(Api::namespaced(client, "default"));
    let started = Instant::now();
    let mut left = pods;
    let mut i = 0;
    while left > 0 {
        let replicas = left.min(PER_DEPLOYMENT);
        deployments
            .create(
                &PostParams::default(),
                &deployment(&format!("app-{i:04}"), replicas)?,
            )
            .await?;
        left -= replicas;
        i += 1;
    }
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        match tokio::time::timeout(Duration::from_secs(10), running.wait_for(|n| *n >= pods)).await {
            Ok(Ok(_)) => break,
            Ok(Err(_)) => anyhow::bail!("the pod watch ended"),
            Err(_) => {}
        }
        let seen = *running.borrow();
        anyhow::ensure!(
            Instant::now() < deadline,
            "{seen} of {pods} pods Running after 1800 s"
        );
        eprintln!(
            "{:>4.0} s: {seen} pods Running, agent RSS {:.0} MiB",
            started.elapsed().as_secs_f64(),
            memory_mib(agent_pid).0
        );
    }
    let all_running = started.elapsed();
    // The memory is sampled for 30 s, three heartbeats (10 s apart) computed from every pod.
    let mut peak_rss = 0.0_f64;
    let mut samples = tokio::time::interval(Duration::from_millis(500));
    for _ in 0..60 {
        samples.tick().await;
        peak_rss = peak_rss.max(memory_mib(agent_pid).0);
    }
    let (end, hwm) = memory_mib(agent_pid);
    println!(
        "| nodes | pods | agent RSS, nodes only | agent RSS with the pods (end / highest sampled) | agent VmHWM | pods Running after |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| {nodes} | {pods} | {idle:.0} MiB | {end:.0} / {peak_rss:.0} MiB | {hwm:.0} MiB | {:.0} s |",
        all_running.as_secs_f64()
    );
    fleet.stop().await;
    Ok(())
}
