//! StatefulSets divided across clusters, end to end with the real hub and agents on nave-sim:
//! every ordinal runs in exactly one cluster (each cluster's StatefulSet has its own range,
//! `spec.ordinals.start`), a scale-down removes the highest ordinals, a scale-up right after
//! it waits for ordinals still stopping in another cluster instead of running them twice, claims
//! follow their pods, and deleting the workload leaves no StatefulSet anywhere.
//!
//! A watcher lists the pods of every cluster all along, twice per look (in one order, then the
//! other), and fails the test if one ordinal shows in two clusters in both passes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nave_api::MultiClusterDeployment;
use nave_e2e::{DEADLINE, Database, Env, fleet};
use nave_testkit::wait_for;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NS: &str = "data";
const NAME: &str = "db";
const POD_DELETE_MILLIS: u64 = 1_500;

fn stateful_mcd(replicas: i32) -> MultiClusterDeployment {
    serde_json::from_value(json!({
        "apiVersion": "nave.dev/v1alpha1",
        "kind": "MultiClusterDeployment",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "placement": {"policy": "spread"},
            "template": {
                "kind": "StatefulSet",
                "spec": {
                    "serviceName": NAME,
                    "selector": {"matchLabels": {"app": NAME}},
                    "template": {
                        "metadata": {"labels": {"app": NAME}},
                        "spec": {"containers": [{
                            "name": "db",
                            "image": "postgres:17",
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                        }]},
                    },
                    "volumeClaimTemplates": [{
                        "metadata": {"name": "data"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}},
                        },
                    }],
                },
            },
        },
    }))
    .expect("a MultiClusterDeployment")
}

/// The ordinal of a pod of the StatefulSet (`db-3` is 3).
fn ordinal(pod: &str) -> Option<u32> {
    pod.strip_prefix(&format!("{NAME}-"))?.parse().ok()
}

/// The StatefulSet's pods in one cluster (terminating ones included).
async fn pods_in(client: kube::Client) -> Result<Vec<Pod>, String> {
    Api::<Pod>::namespaced(client, NS)
        .list(&ListParams::default().labels(&format!("app={NAME}")))
        .await
        .map(|list| list.items)
        .map_err(|e| format!("listing pods: {e}"))
}

/// Every cluster's client, by name.
fn clients(env: &Env) -> Vec<(String, kube::Client)> {
    env.cluster_names()
        .into_iter()
        .map(|c| {
            let client = env.cluster_client(&c);
            (c, client)
        })
        .collect()
}

/// The StatefulSet's pods in the clusters of `clients`, read in that order, by ordinal.
async fn by_ordinal(clients: Vec<(String, kube::Client)>) -> Result<BTreeMap<u32, Vec<String>>, String> {
    let mut by_ordinal: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (cluster, client) in clients {
        for pod in pods_in(client).await.map_err(|e| format!("{cluster}: {e}"))? {
            if let Some(n) = pod.metadata.name.as_deref().and_then(ordinal) {
                by_ordinal.entry(n).or_default().push(cluster.clone());
            }
        }
    }
    Ok(by_ordinal)
}

/// Ordinals in more than one cluster.
fn doubled(by_ordinal: &BTreeMap<u32, Vec<String>>) -> BTreeMap<u32, Vec<String>> {
    by_ordinal
        .iter()
        .filter(|(_, clusters)| clusters.len() > 1)
        .map(|(n, c)| (*n, c.clone()))
        .collect()
}

/// Waits until exactly `ordinals` run, each Running and in one cluster; answers where each is.
async fn wait_ordinals(env: &Env, ordinals: std::ops::Range<u32>, what: &str) -> BTreeMap<u32, String> {
    let clusters = env.cluster_names();
    let want: BTreeSet<u32> = ordinals.collect();
    wait_for(
        &format!("ordinals {want:?} each Running in one cluster ({what})"),
        DEADLINE,
        || {
            let (clusters, want) = (clusters.clone(), want.clone());
            async move {
                let mut placed = BTreeMap::new();
                for cluster in &clusters {
                    for pod in pods_in(env.cluster_client(cluster)).await? {
                        let Some(n) = pod.metadata.name.as_deref().and_then(ordinal) else {
                            continue;
                        };
                        let running = pod.metadata.deletion_timestamp.is_none()
                            && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                        if placed.insert(n, (cluster.clone(), running)).is_some() {
                            return Err(format!("ordinal {n} in two clusters"));
                        }
                    }
                }
                let have: BTreeSet<u32> = placed.keys().copied().collect();
                if have == want && placed.values().all(|(_, running)| *running) {
                    Ok(placed.into_iter().map(|(n, (c, _))| (n, c)).collect())
                } else {
                    Err(format!("pods {placed:?}"))
                }
            }
        },
    )
    .await
}

/// Lists every cluster's pods of the StatefulSet all along, twice per look (in one order, then
/// the other): an ordinal seen in two clusters in both passes ran twice at once.
struct Watcher {
    seen_twice: Arc<Mutex<BTreeMap<u32, Vec<String>>>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    fn start(env: &Env) -> Watcher {
        let seen_twice: Arc<Mutex<BTreeMap<u32, Vec<String>>>> = Arc::default();
        let stop = CancellationToken::new();
        let clients = clients(env);
        let (seen, token) = (seen_twice.clone(), stop.clone());
        let task = tokio::spawn(async move {
            // Looked at at this pace (a sampling rate, not a wait for anything).
            let mut pace = tokio::time::interval(Duration::from_millis(20));
            pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let look = |order: Vec<(String, kube::Client)>| async move {
                by_ordinal(order)
                    .await
                    .map(|found| doubled(&found))
                    .unwrap_or_default()
            };
            while !token.is_cancelled() {
                pace.tick().await;
                let forward = look(clients.clone()).await;
                let backward = look(clients.iter().rev().cloned().collect()).await;
                for (n, where_) in forward {
                    if backward.contains_key(&n) {
                        seen.lock().expect("not poisoned").insert(n, where_);
                    }
                }
            }
        });
        Watcher {
            seen_twice,
            stop,
            task,
        }
    }

    /// Stops watching; fails the test if an ordinal ran in two clusters at once.
    async fn check(self) {
        self.stop.cancel();
        self.task.await.expect("the watcher ends");
        let twice = self.seen_twice.lock().expect("not poisoned").clone();
        assert!(
            twice.is_empty(),
            "no ordinal may run in two clusters at once; seen: {twice:?}"
        );
    }
}

/// Each cluster's StatefulSet as `(ordinals.start, replicas)`.
async fn layout(env: &Env) -> BTreeMap<String, (i32, i32)> {
    let mut out = BTreeMap::new();
    for cluster in env.cluster_names() {
        let sets: Api<StatefulSet> = Api::namespaced(env.cluster_client(&cluster), NS);
        if let Ok(Some(set)) = sets.get_opt(NAME).await {
            let start = set.spec.ordinals.and_then(|o| o.start).unwrap_or(0);
            out.insert(cluster, (start, set.spec.replicas.unwrap_or(1)));
        }
    }
    out
}

/// Every pod of the StatefulSet, by name, with its uid.
async fn pod_uids(env: &Env) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for cluster in env.cluster_names() {
        if let Ok(list) = pods_in(env.cluster_client(&cluster)).await {
            for pod in list {
                out.insert(
                    format!("{cluster}/{}", pod.metadata.name.unwrap_or_default()),
                    pod.metadata.uid.unwrap_or_default(),
                );
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hub_that_lost_its_store_reads_the_ordinals_back_from_the_clusters() {
    let mut env = Env::start(fleet(3), Database::Sqlite)
        .await
        .expect("the environment starts");
    env.create_namespace(NS, false).await;
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    // 3 spread (0 | 1 | 2), then 5: the top cluster grows (0 | 1 | 2-4), a layout that laying
    // 5 out afresh would not give (0-1 | 2-3 | 4).
    mcds.create(&PostParams::default(), &stateful_mcd(3))
        .await
        .expect("the MultiClusterDeployment is created");
    wait_ordinals(&env, 0..3, "3 replicas, one per cluster").await;
    mcds.patch(
        NAME,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .expect("scaled");
    wait_ordinals(&env, 0..5, "grown to 5 at the top").await;
    let before = layout(&env).await;
    let replicas: Vec<i32> = before.values().map(|(_, n)| *n).collect();
    assert!(replicas.contains(&3), "the top cluster grew: {before:?}");
    let pods = pod_uids(&env).await;

    let watcher = Watcher::start(&env);
    env.stop_hub().await;
    env.lose_sqlite_store();
    env.start_hub().await.expect("the hub starts on an empty store");
    let restarted = std::time::Instant::now();
    wait_for("the layout read back and placed again", DEADLINE, || {
        let (env, mcds, before) = (&env, mcds.clone(), before.clone());
        async move {
            let placed = env
                .rest("/placements")
                .await
                .ok()
                .and_then(|v| v["items"].as_array().map(Vec::len))
                .unwrap_or(0);
            let mcd = mcds.get(NAME).await.map_err(|e| e.to_string())?;
            let ready = mcd.status.as_ref().map_or(0, |s| s.ready_replicas);
            let now = layout(env).await;
            if placed == 1 && ready == 5 && now == before {
                Ok(())
            } else {
                Err(format!(
                    "placements {placed}, ready {ready}, layout {now:?} (before {before:?})"
                ))
            }
        }
    })
    .await;
    println!(
        "StatefulSet placed again on a new store after {:?}",
        restarted.elapsed()
    );
    assert_eq!(pod_uids(&env).await, pods, "no pod was deleted or made again");
    watcher.check().await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_statefulset_runs_each_ordinal_once_across_clusters_as_it_scales() {
    // Pods take 1.5 s to go once deleted, as with a grace period: long enough that ordinals
    // given up are still running when a scale-up wants them.
    let mut config = fleet(3);
    for cluster in &mut config.clusters {
        cluster.timing.pod_delete_millis = POD_DELETE_MILLIS;
    }
    let env = Env::start(config, Database::Sqlite)
        .await
        .expect("the environment starts");
    env.create_namespace(NS, false).await;
    let clusters = env.cluster_names();

    // The watcher: every ordinal in at most one cluster, all along.
    let watcher = Watcher::start(&env);

    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    let started = std::time::Instant::now();
    mcds.create(&PostParams::default(), &stateful_mcd(5))
        .await
        .expect("the MultiClusterDeployment is created");
    let first = wait_ordinals(&env, 0..5, "5 replicas spread over 3 clusters").await;
    let running_after = started.elapsed();
    let used: BTreeSet<&String> = first.values().collect();
    assert_eq!(used.len(), 3, "spread uses every cluster: {first:?}");
    // Each cluster's StatefulSet holds one contiguous range, from its spec.ordinals.start.
    for cluster in &clusters {
        let sets: Api<StatefulSet> = Api::namespaced(env.cluster_client(cluster), NS);
        let set = sets.get(NAME).await.expect("a StatefulSet in every cluster used");
        let spec = set.spec.clone();
        let start = spec.ordinals.and_then(|o| o.start).unwrap_or(0) as u32;
        let replicas = spec.replicas.unwrap_or(1) as u32;
        let here: Vec<u32> = first
            .iter()
            .filter(|(_, c)| *c == cluster)
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(
            here,
            (start..start + replicas).collect::<Vec<_>>(),
            "{cluster}: ordinals.start {start}, replicas {replicas}"
        );
        // The claims follow: one per pod, in the pod's cluster.
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(env.cluster_client(cluster), NS);
        let names: BTreeSet<String> = claims
            .list(&ListParams::default())
            .await
            .expect("claims")
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect();
        let want: BTreeSet<String> = here.iter().map(|n| format!("data-{NAME}-{n}")).collect();
        assert_eq!(names, want, "{cluster}'s claims");
    }
    let status = wait_for("the MCD reports 5 ready", DEADLINE, || {
        let mcds = mcds.clone();
        async move {
            let mcd = mcds.get(NAME).await.map_err(|e| e.to_string())?;
            let status = mcd.status.clone().unwrap_or_default();
            if status.ready_replicas == 5 {
                Ok(status)
            } else {
                Err(format!("{status:?}"))
            }
        }
    })
    .await;
    assert_eq!(
        status.clusters.iter().filter(|c| c.desired > 0).count(),
        3,
        "{status:?}"
    );
    // Status names each cluster's ordinals.
    for c in &status.clusters {
        let here: Vec<u32> = first
            .iter()
            .filter(|(_, on)| **on == c.name)
            .map(|(n, _)| *n)
            .collect();
        let want = match here.as_slice() {
            [one] => one.to_string(),
            [lo, .., hi] => format!("{lo}-{hi}"),
            [] => String::new(),
        };
        assert_eq!(
            c.ordinals.as_deref(),
            Some(want.as_str()),
            "{}: {status:?}",
            c.name
        );
    }

    // Down to 3: the two highest ordinals go, the others stay where they are.
    let scale = |replicas: i32| {
        let mcds = mcds.clone();
        async move {
            mcds.patch(
                NAME,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .expect("scaling the MultiClusterDeployment");
        }
    };
    let started = std::time::Instant::now();
    scale(3).await;
    let down = wait_ordinals(&env, 0..3, "scaled down to 3").await;
    let down_after = started.elapsed();
    for (n, cluster) in &down {
        assert_eq!(Some(cluster), first.get(n), "ordinal {n} stayed in its cluster");
    }

    // Down to 1 (the hub gives 1-2 up, their pods stopping for 1.5 s), then at once up to 6:
    // ordinals a cluster gave up come back elsewhere only once they stopped there, and the
    // status says what the replicas wait for.
    let owner_of_2 = first[&2].clone();
    scale(1).await;
    wait_for("the hub to give ordinals 1-2 up", DEADLINE, || {
        let sets: Api<StatefulSet> = Api::namespaced(env.cluster_client(&owner_of_2), NS);
        let owner_of_2 = owner_of_2.clone();
        async move {
            let set = sets.get(NAME).await.map_err(|e| e.to_string())?;
            let start = set.spec.ordinals.and_then(|o| o.start).unwrap_or(0);
            let replicas = set.spec.replicas.unwrap_or(1);
            match start + replicas <= 2 {
                true => Ok(()),
                false => Err(format!(
                    "{owner_of_2}: ordinals.start {start}, replicas {replicas}"
                )),
            }
        }
    })
    .await;
    let started = std::time::Instant::now();
    scale(6).await;
    let waiting = wait_for(
        "the Scheduled condition to name the ordinals waited for",
        DEADLINE,
        || {
            let mcds = mcds.clone();
            async move {
                let mcd = mcds.get(NAME).await.map_err(|e| e.to_string())?;
                let scheduled = mcd
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Scheduled"))
                    .map(|c| (c.reason.clone(), c.message.clone()));
                match &scheduled {
                    Some((reason, message)) if reason == "WaitingForOrdinals" => Ok(message.clone()),
                    _ => Err(format!("Scheduled {scheduled:?}")),
                }
            }
        },
    )
    .await;
    assert!(waiting.contains("stopped"), "{waiting}");
    let up = wait_ordinals(&env, 0..6, "scaled up to 6 right after a scale-down").await;
    let up_after = started.elapsed();
    println!(
        "created -> 5 ordinals Running: {running_after:?}; 5 -> 3: {down_after:?}; \
         1 -> 6 while 1-2 stop: {up_after:?}"
    );
    assert_eq!(up.get(&0), first.get(&0), "ordinal 0 never moved");
    let now = by_ordinal(clients(&env)).await.expect("pods");
    assert!(doubled(&now).is_empty(), "{now:?}");

    // Deleted: no StatefulSet remains anywhere.
    mcds.delete(NAME, &DeleteParams::default())
        .await
        .expect("the MCD is deleted");
    env.wait_mcd_gone(NS, NAME).await;
    wait_for("no StatefulSet in any cluster", DEADLINE, || {
        let clusters = clusters.clone();
        let env = &env;
        async move {
            let mut left = Vec::new();
            for cluster in &clusters {
                let sets: Api<StatefulSet> = Api::namespaced(env.cluster_client(cluster), NS);
                if sets.get_opt(NAME).await.map_err(|e| e.to_string())?.is_some() {
                    left.push(cluster.clone());
                }
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("still in {left:?}"))
            }
        }
    })
    .await;

    watcher.check().await;
    env.shutdown().await;
}
