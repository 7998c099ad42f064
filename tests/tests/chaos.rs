//! Chaos, end to end: three hub replicas on Postgres electing a leader and the agents of three
//! simulated clusters, each a process of its own (this binary run again as `role hub|agent`),
//! the agents reaching the hubs through one address as through a Service, the hubs reaching
//! Postgres through a proxy that can cut them off. While 200 MultiClusterDeployments are
//! created, scaled and partly deleted, the leader is SIGKILLed every few seconds, paused past
//! its Lease and resumed, agents are killed and restarted, and the store is cut off for a while.
//!
//! Then, counted in the workload clusters themselves (not from the hub's status): every
//! MultiClusterDeployment runs exactly its replicas, all ready, and nothing of a deleted one
//! remains. All along, no MultiClusterDeployment was ever reported Available with fewer ready
//! replicas than it asks for, and the paused leader, once resumed, stepped down by itself and
//! went on as a follower.
//!
//! Needs Postgres (`NAVE_TEST_DATABASE_URL`, as the store's conformance suite); without it the
//! test says `skipped:` and passes. `NAVE_CHAOS_SEED` replays a run (each run prints its seed).

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use nave_api::MultiClusterDeployment;
use nave_api::conditions::{self, types};
use nave_api::wire::WORKLOAD_LABEL;
use nave_e2e::procs::{FleetOptions, ProcessFleet, Store};
use nave_sim::SimFleet;
use nave_sim::config::{ClusterConfig, FleetConfig, NodePool};
use nave_testkit::Mcd;
use rand::{Rng as _, SeedableRng as _};

const NAME: &str = "a_rollout_survives_leader_kills_a_paused_leader_agent_restarts_and_a_cut_store";
const HUBS: usize = 3;
const MCDS: usize = 200;
/// The MCDs deleted during the chaos.
const DELETED: std::ops::Range<usize> = 0..25;
/// The MCDs scaled to three replicas during the chaos.
const SCALED: std::ops::Range<usize> = 100..120;
/// Lease timings of the hubs (lease duration, renew deadline, retry period): short, so that a
/// run sees many takeovers.
const LEASE: [Duration; 3] = [
    Duration::from_secs(3),
    Duration::from_secs(2),
    Duration::from_millis(500),
];

fn main() -> ExitCode {
    if let Some(result) = nave_e2e::procs::child_role() {
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("{error:?}");
                ExitCode::FAILURE
            }
        };
    }
    // As much of the test harness's command line as tools use: `--list`, and a name filter.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        println!("{NAME}: test");
        return ExitCode::SUCCESS;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| NAME.contains(f.as_str())) {
        println!("running 0 tests");
        return ExitCode::SUCCESS;
    }
    let url = match std::env::var(nave_e2e::PG_URL_VAR) {
        Ok(url) if !url.is_empty() => url,
        _ => {
            println!(
                "skipped: {} is not set ({NAME} on Postgres)",
                nave_e2e::PG_URL_VAR
            );
            return ExitCode::SUCCESS;
        }
    };
    nave_sim::install_crypto_provider();
    println!("running 1 test");
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    match runtime.block_on(chaos(&url)) {
        Ok(summary) => {
            println!(
                "test {NAME} ... ok ({:.0} s)\n{summary}",
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            println!("test {NAME} ... FAILED\n{error:?}");
            ExitCode::FAILURE
        }
    }
}

/// The workload clusters: room for every replica of the rollout.
fn fleet_config() -> FleetConfig {
    let clusters = [
        ("eu-west-1", "eu-west"),
        ("us-east-1", "us-east"),
        ("ap-south-1", "ap-south"),
    ]
    .iter()
    .map(|(name, region)| ClusterConfig {
        name: (*name).to_owned(),
        region: Some((*region).to_owned()),
        node_pools: vec![NodePool {
            name: "general".to_owned(),
            count: 4,
            cpu: "8".to_owned(),
            memory: "32Gi".to_owned(),
            ..NodePool::default()
        }],
        ..ClusterConfig::default()
    })
    .collect();
    FleetConfig {
        clusters,
        ..FleetConfig::default()
    }
}

fn mcd_name(i: usize) -> String {
    format!("c-{i:03}")
}

/// The replicas MCD `i` asks for at the end.
fn desired(i: usize) -> i32 {
    if SCALED.contains(&i) {
        3
    } else {
        1 + (i % 2) as i32
    }
}

/// Creates the MCDs at about ten a second, then scales and deletes some, while the chaos runs.
async fn rollout(client: kube::Client) -> anyhow::Result<()> {
    let api: Api<MultiClusterDeployment> = Api::namespaced(client, "default");
    // A rate, not a wait: one create per tick, ticks that a slow create missed are not made up.
    let mut pace = tokio::time::interval(Duration::from_millis(100));
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for i in 0..MCDS {
        let replicas = 1 + (i % 2) as i32;
        let policy = if i % 3 == 0 { "spread" } else { "worst-fit" };
        let object = Mcd::new(&mcd_name(i))
            .replicas(replicas)
            .policy(policy)
            .cpu("10m")
            .memory("16Mi")
            .build();
        api.create(&PostParams::default(), &object).await?;
        pace.tick().await;
        if i == 150 {
            for j in SCALED {
                api.patch(
                    &mcd_name(j),
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"spec": {"replicas": 3}})),
                )
                .await?;
            }
        }
        if i == 180 {
            for j in DELETED {
                api.delete(&mcd_name(j), &DeleteParams::default()).await?;
            }
        }
    }
    Ok(())
}

/// What the chaos did, for the summary.
#[derive(Default)]
struct Done {
    leader_kills: usize,
    agent_kills: usize,
    pauses: usize,
    cuts: usize,
}

/// The chaos: leader kills every few seconds, a leader paused past its Lease, agent kills and a
/// cut store, in a fixed order with jittered timing.
async fn chaos_steps(run: &mut ProcessFleet, seed: u64) -> anyhow::Result<Done> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut done = Done::default();
    let jitter = |rng: &mut rand::rngs::StdRng, from: f64, to: f64| {
        Duration::from_secs_f64(rng.random_range(from..to))
    };
    let agents: Vec<String> = run.cluster_names();
    let steps = [
        "kill", "agent", "kill", "pause", "cut", "kill", "agent", "kill", "kill", "kill",
    ];
    for step in steps {
        tokio::time::sleep(jitter(&mut rng, 2.0, 5.0)).await;
        run.restart_ended()?;
        match step {
            "kill" => {
                let leader = run.running_leader(Duration::from_secs(60)).await?;
                run.hubs[leader].as_mut().expect("running").kill();
                done.leader_kills += 1;
                tokio::time::sleep(jitter(&mut rng, 0.3, 2.0)).await;
                run.start_hub(leader)?;
            }
            "agent" => {
                let name = agents[rng.random_range(0..agents.len())].clone();
                if let Some(agent) = run.agents.get_mut(&name).and_then(Option::as_mut) {
                    agent.kill();
                }
                done.agent_kills += 1;
                tokio::time::sleep(jitter(&mut rng, 1.0, 3.0)).await;
                run.start_agent(&name)?;
            }
            "pause" => {
                let leader = run.running_leader(Duration::from_secs(60)).await?;
                // Where each hub's log ends now, to read only what it says after the pause.
                let log_ends: Vec<usize> = run
                    .hubs
                    .iter()
                    .map(|h| {
                        h.as_ref()
                            .map_or(0, |p| std::fs::read_to_string(&p.log).unwrap_or_default().len())
                    })
                    .collect();
                run.hubs[leader].as_ref().expect("running").pause()?;
                done.pauses += 1;
                // Past its Lease: another replica takes the Lease meanwhile and tries to lead
                // before the paused one wakes up.
                let client = run.client.clone();
                let took_over = nave_testkit::try_wait_for(
                    "another replica to take the Lease from the paused leader",
                    Duration::from_secs(30),
                    || {
                        let client = client.clone();
                        async move {
                            match nave_e2e::procs::lease_holder(client).await {
                                Some(i) if i != leader => Ok(i),
                                other => Err(format!("holder {other:?}")),
                            }
                        }
                    },
                )
                .await;
                let next = took_over.map_err(|e| anyhow!("{e}{}", run.logs()))?;
                let next_log = run.hubs[next].as_ref().expect("running").log.clone();
                // The new holder acts on its Lease: it leads, or (while the paused one still holds
                // the store's leadership row) tries, fails and lets the Lease go again.
                let tried =
                    |new: &str| new.contains("this replica leads") || new.contains("cannot claim its term");
                nave_testkit::try_wait_for(
                    "the new Lease holder to try to lead",
                    Duration::from_secs(30),
                    || {
                        let log = std::fs::read_to_string(&next_log).unwrap_or_default();
                        let done = log.get(log_ends[next]..).is_some_and(tried);
                        async move {
                            if done {
                                Ok(())
                            } else {
                                Err("it has not tried yet".to_owned())
                            }
                        }
                    },
                )
                .await
                .map_err(|e| anyhow!("{e}{}", run.logs()))?;
                let hub = run.hubs[leader].as_mut().expect("paused");
                let before = std::fs::read_to_string(&hub.log).unwrap_or_default().len();
                hub.resume()?;
                // Resumed, it finds its term over: it stops leading, and goes on as a follower.
                let followed = nave_testkit::try_wait_for(
                    "the resumed leader to say it stopped leading",
                    Duration::from_secs(20),
                    || {
                        let log = std::fs::read_to_string(&hub.log).unwrap_or_default();
                        let said = log
                            .get(before..)
                            .is_some_and(|new| new.contains("no longer leading"));
                        let ended = hub.exited();
                        async move {
                            match (said, ended) {
                                (true, _) => Ok(None),
                                (false, Some(status)) => Ok(Some(status)),
                                (false, None) => Err("still silent".to_owned()),
                            }
                        }
                    },
                )
                .await;
                match followed {
                    Ok(None) => {}
                    Ok(Some(status)) => bail!(
                        "the resumed leader hub-{leader} ended ({status}) instead of following:\n{}",
                        hub.log_tail(30)
                    ),
                    Err(e) => bail!("hub-{leader}: {e}:\n{}", hub.log_tail(30)),
                }
            }
            "cut" => {
                let proxy = run
                    .store_proxy
                    .clone()
                    .expect("a Postgres fleet has a store proxy");
                proxy.cut();
                done.cuts += 1;
                tokio::time::sleep(jitter(&mut rng, 3.0, 6.0)).await;
                proxy.restore();
            }
            _ => unreachable!("a step of the list"),
        }
    }
    run.restart_ended()?;
    Ok(done)
}

/// Watches every MCD's status: records each time one is said Available with fewer ready
/// replicas than it asks for (in the generation the status is of).
fn observe(
    client: kube::Client,
    violations: Arc<Mutex<Vec<String>>>,
    available: Arc<Mutex<BTreeSet<String>>>,
) -> tokio::task::JoinHandle<()> {
    let api: Api<MultiClusterDeployment> = Api::namespaced(client, "default");
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let objects = match event {
                Ok(watcher::Event::Apply(mcd) | watcher::Event::InitApply(mcd)) => vec![mcd],
                _ => continue,
            };
            for mcd in objects {
                let Some(status) = &mcd.status else { continue };
                if status.observed_generation != mcd.metadata.generation {
                    continue;
                }
                let is_available = conditions::is_true(&status.conditions, types::AVAILABLE);
                if is_available {
                    available
                        .lock()
                        .unwrap()
                        .insert(mcd.metadata.name.clone().unwrap_or_default());
                }
                if is_available && status.ready_replicas < mcd.spec.replicas {
                    violations.lock().unwrap().push(format!(
                        "{} Available with {} of {} replicas ready (generation {:?})",
                        mcd.metadata.name.clone().unwrap_or_default(),
                        status.ready_replicas,
                        mcd.spec.replicas,
                        mcd.metadata.generation
                    ));
                }
            }
        }
    })
}

/// Per workload label: the replicas asked for and ready, summed over the workload clusters.
async fn counted(fleet: &SimFleet) -> Result<BTreeMap<String, (i32, i32)>, String> {
    let mut sums: BTreeMap<String, (i32, i32)> = BTreeMap::new();
    for cluster in &fleet.clusters {
        let client = cluster.client().await.map_err(|e| e.to_string())?;
        let deployments: Api<Deployment> = Api::all(client);
        let list = deployments
            .list(&ListParams::default().labels(WORKLOAD_LABEL))
            .await
            .map_err(|e| format!("{}: {e}", cluster.name()))?;
        for d in list.items {
            let workload = d
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(WORKLOAD_LABEL))
                .cloned()
                .unwrap_or_default();
            let entry = sums.entry(workload).or_default();
            entry.0 += d.spec.replicas.unwrap_or(1);
            entry.1 += d.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
        }
    }
    Ok(sums)
}

async fn chaos(url: &str) -> anyhow::Result<String> {
    let seed = std::env::var("NAVE_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    println!("chaos seed {seed} (NAVE_CHAOS_SEED={seed} replays it)");
    let mut run = ProcessFleet::start(FleetOptions {
        hubs: HUBS,
        store: Store::Postgres(url.to_owned()),
        lease: Some(LEASE),
        fleet: fleet_config(),
    })
    .await?;

    let violations = Arc::new(Mutex::new(Vec::new()));
    let available = Arc::new(Mutex::new(BTreeSet::new()));
    let observer = observe(run.client.clone(), violations.clone(), available.clone());
    let started = Instant::now();
    let rollout = tokio::spawn(rollout(run.client.clone()));
    let done = match chaos_steps(&mut run, seed).await {
        Ok(done) => done,
        Err(error) => {
            let logs = run.logs();
            run.stop().await;
            return Err(error.context(format!("seed {seed}{logs}")));
        }
    };
    rollout.await.context("the rollout task")??;
    let chaos_took = started.elapsed();

    // Every MCD runs exactly its replicas, all ready, counted in the clusters; nothing of a
    // deleted one remains.
    let expected: BTreeMap<String, i32> = (0..MCDS)
        .filter(|i| !DELETED.contains(i))
        .map(|i| (format!("default.{}", mcd_name(i)), desired(i)))
        .collect();
    let deleted: BTreeSet<String> = DELETED.map(|i| format!("default.{}", mcd_name(i))).collect();
    let converged = Instant::now();
    let fleet = &run.fleet;
    let converging = nave_testkit::try_wait_for(
        "every workload to run as asked in the clusters",
        Duration::from_secs(290),
        || async {
            let sums = counted(fleet)
                .await
                .map_err(|e| format!("counting failed: {e}"))?;
            let mut wrong: Vec<String> = expected
                .iter()
                .filter(|(w, n)| sums.get(*w) != Some(&(**n, **n)))
                .map(|(w, n)| format!("{w}: want {n}, (asked, ready) {:?}", sums.get(w)))
                .collect();
            wrong.extend(
                sums.keys()
                    .filter(|w| deleted.contains(*w))
                    .map(|w| format!("{w} was deleted and still runs")),
            );
            wrong.extend(
                sums.keys()
                    .filter(|w| !expected.contains_key(*w) && !deleted.contains(*w))
                    .map(|w| format!("{w} is not one of the MCDs")),
            );
            if wrong.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} workloads are not as asked (first: {:?})",
                    wrong.len(),
                    &wrong[..wrong.len().min(10)]
                ))
            }
        },
    );
    let outcome = match tokio::time::timeout(Duration::from_secs(300), converging).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(why)) => Err(anyhow!("after the chaos, {why}")),
        Err(_) => Err(anyhow!("counting in the clusters did not finish")),
    };
    let took_to_converge = converged.elapsed();
    // The observer saw the MCDs become Available (so its silence about violations means
    // something): wait for it to catch up with the last statuses.
    let watched = nave_testkit::try_wait_for(
        "the observer to see every MCD Available",
        Duration::from_secs(60),
        || {
            let seen = available.lock().unwrap().len();
            let wanted = expected.len();
            async move {
                if seen >= wanted {
                    Ok(())
                } else {
                    Err(format!("{seen} of {wanted}"))
                }
            }
        },
    )
    .await;
    observer.abort();
    let violations = violations.lock().unwrap().clone();
    let seen_available = available.lock().unwrap().len();
    let logs = run.logs();
    run.stop().await;
    outcome.map_err(|e| e.context(format!("seed {seed}{logs}")))?;
    if watched.is_err() {
        bail!(
            "seed {seed}: the hub's status said Available for only {seen_available} of the {} MCDs",
            expected.len()
        );
    }
    if !violations.is_empty() {
        bail!(
            "seed {seed}: MCDs reported Available with fewer ready replicas than asked: {:?}",
            &violations[..violations.len().min(10)]
        );
    }
    Ok(format!(
        "{} MCDs created, {} scaled, {} deleted in {:.0} s of chaos ({} leader kills, {} pause past \
         the Lease, {} agent kills, {} store cut); every one as asked in the clusters {:.1} s later",
        MCDS,
        SCALED.len(),
        DELETED.len(),
        chaos_took.as_secs_f64(),
        done.leader_kills,
        done.pauses,
        done.agent_kills,
        done.cuts,
        took_to_converge.as_secs_f64()
    ))
}
