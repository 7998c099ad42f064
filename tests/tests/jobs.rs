//! MultiClusterJobs end to end with the real hub and agents on nave-sim: an indexed job's
//! completions divided across three clusters run each index once; jobs too large for the room
//! left wait in the hub's queue (by priority, then age) and run when room frees; a cluster that
//! goes silent mid-job has the indexes it had not completed run elsewhere, and its Job is
//! removed when it comes back.
//!
//! What ran is read in the clusters themselves: each piece's Job carries its first fleet-wide
//! index (`nave.dev/job-index-offset`), each pod its own (`batch.kubernetes.io/job-completion-index`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nave_api::job::JOB_INDEX_OFFSET_ANNOTATION;
use nave_api::{JobPhase, MultiClusterJob, PieceState};
use nave_e2e::{DEADLINE, Database, Env, EnvOptions, fleet};
use nave_testkit::wait_for;
use serde_json::{Value, json};

const NS: &str = "batch";

fn job(name: &str, priority: i32, spec: Value, run_millis: u64) -> MultiClusterJob {
    let mut spec = spec;
    spec["template"] = json!({
        "metadata": {"annotations": {"sim.nave.dev/run-millis": run_millis.to_string()}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "work",
                "image": "busybox:1.36",
                "resources": {"requests": {"cpu": spec["cpu"].as_str().unwrap_or("100m"), "memory": "64Mi"}},
            }],
        },
    });
    if let Some(fields) = spec.as_object_mut() {
        fields.remove("cpu");
    }
    serde_json::from_value(json!({
        "apiVersion": "nave.dev/v1alpha1",
        "kind": "MultiClusterJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "priority": priority,
            "placement": {"policy": "spread"},
            "template": {"spec": spec},
        },
    }))
    .expect("a MultiClusterJob")
}

fn mcjs(env: &Env) -> Api<MultiClusterJob> {
    Api::namespaced(env.client.clone(), NS)
}

async fn start(options: EnvOptions) -> Env {
    let env = Env::start_with(fleet(3), Database::Sqlite, options)
        .await
        .expect("environment started");
    env.create_namespace(NS, true).await;
    env
}

/// Waits until the job's phase is `phase`; answers the job.
async fn wait_phase(env: &Env, name: &str, phase: JobPhase, deadline: Duration) -> MultiClusterJob {
    let api = mcjs(env);
    wait_for(&format!("MultiClusterJob {name} {phase:?}"), deadline, || {
        let api = api.clone();
        async move {
            let job = api.get(name).await.map_err(|e| e.to_string())?;
            let status = job.status.clone().unwrap_or_default();
            if status.phase == Some(phase) {
                Ok(job)
            } else {
                Err(format!(
                    "phase {:?}, {:?} succeeded, message {:?}, pieces {:?}",
                    status.phase, status.progress, status.message, status.pieces
                ))
            }
        }
    })
    .await
}

/// The job's Jobs in one cluster.
async fn jobs_in(client: kube::Client, name: &str) -> Result<Vec<Job>, String> {
    Api::<Job>::namespaced(client, NS)
        .list(&ListParams::default().labels(&format!("nave.dev/workload={NS}.mcj_{name}")))
        .await
        .map(|l| l.items)
        .map_err(|e| format!("listing Jobs: {e}"))
}

/// Fleet-wide indexes of the job's succeeded pods, with the clusters each ran in.
async fn succeeded_indexes(env: &Env, name: &str) -> Result<BTreeMap<u32, Vec<String>>, String> {
    let mut out: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for cluster in env.cluster_names() {
        let client = env.cluster_client(&cluster);
        for job in jobs_in(client.clone(), name).await? {
            let job_name = job.metadata.name.clone().unwrap_or_default();
            let offset: u32 = job
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(JOB_INDEX_OFFSET_ANNOTATION))
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{cluster}: Job {job_name} has no index offset"))?;
            let pods = Api::<Pod>::namespaced(client.clone(), NS)
                .list(&ListParams::default().labels(&format!("job-name={job_name}")))
                .await
                .map_err(|e| format!("listing pods: {e}"))?;
            for pod in pods.items {
                if pod.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Succeeded") {
                    continue;
                }
                let local: u32 = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("batch.kubernetes.io/job-completion-index"))
                    .and_then(|v| v.parse().ok())
                    .ok_or("a pod without its completion index")?;
                out.entry(offset + local).or_default().push(cluster.clone());
            }
        }
    }
    Ok(out)
}

/// Waits until no cluster holds a Job of `name`.
async fn wait_jobs_gone(env: &Env, name: &str) {
    let clusters = env.cluster_names();
    wait_for(&format!("no Job of {name} in any cluster"), DEADLINE, || {
        let clusters = clusters.clone();
        async move {
            let mut left = Vec::new();
            for cluster in &clusters {
                for job in jobs_in(env.cluster_client(cluster), name).await? {
                    left.push(format!("{cluster}/{}", job.metadata.name.unwrap_or_default()));
                }
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("left: {left:?}"))
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_indexed_job_over_three_clusters_runs_every_index_once() {
    let env = start(EnvOptions::default()).await;
    let render = job(
        "render",
        0,
        json!({"completions": 100, "parallelism": 12, "completionMode": "Indexed"}),
        100,
    );
    let created = std::time::Instant::now();
    mcjs(&env)
        .create(&PostParams::default(), &render)
        .await
        .expect("MultiClusterJob created");
    let done = wait_phase(&env, "render", JobPhase::Complete, DEADLINE * 2).await;
    let took = created.elapsed();
    let status = done.status.clone().unwrap_or_default();
    assert_eq!((status.succeeded, status.completions), (100, 100));
    assert_eq!(status.completed_indexes.as_deref(), Some("0-99"));
    let clusters: BTreeSet<&str> = status.pieces.iter().map(|p| p.cluster.as_str()).collect();
    assert_eq!(
        clusters.len(),
        3,
        "spread over the three clusters: {:?}",
        status.pieces
    );
    assert!(status.pieces.iter().all(|p| p.state == PieceState::Complete));

    // In the clusters: every index succeeded exactly once, in one cluster.
    let ran = succeeded_indexes(&env, "render").await.expect("pods listed");
    let indexes: BTreeSet<u32> = ran.keys().copied().collect();
    assert_eq!(indexes, (0..100).collect(), "every index ran");
    let twice: Vec<_> = ran.iter().filter(|(_, c)| c.len() > 1).collect();
    assert!(twice.is_empty(), "indexes that ran more than once: {twice:?}");
    println!("100 indexed completions over 3 clusters, 12 at once, 100 ms each: complete in {took:?}");

    // Deleted and created again at once under the same name: the new job's Jobs are named
    // apart, so the old ones, finished and still being removed, are never counted for it.
    let old_names: BTreeSet<String> = status.pieces.iter().map(|p| p.job.clone()).collect();
    mcjs(&env)
        .delete("render", &DeleteParams::default())
        .await
        .expect("deleted");
    wait_for("the MultiClusterJob gone", DEADLINE, || async {
        match mcjs(&env).get_opt("render").await {
            Ok(None) => Ok(()),
            Ok(Some(_)) => Err("still there".to_owned()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    mcjs(&env)
        .create(&PostParams::default(), &render)
        .await
        .expect("created again");
    let again = wait_phase(&env, "render", JobPhase::Complete, DEADLINE * 2).await;
    let again = again.status.unwrap_or_default();
    let new_names: BTreeSet<String> = again.pieces.iter().map(|p| p.job.clone()).collect();
    assert!(
        old_names.is_disjoint(&new_names),
        "expected new Job names, saw {old_names:?} then {new_names:?}"
    );
    wait_for("the first job's Jobs removed", DEADLINE, || async {
        let mut left = Vec::new();
        for cluster in env.cluster_names() {
            for job in jobs_in(env.cluster_client(&cluster), "render").await? {
                let name = job.metadata.name.unwrap_or_default();
                if old_names.contains(&name) {
                    left.push(format!("{cluster}/{name}"));
                }
            }
        }
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("still there: {left:?}"))
        }
    })
    .await;
    let ran = succeeded_indexes(&env, "render").await.expect("pods listed");
    let twice: Vec<_> = ran.iter().filter(|(_, c)| c.len() > 1).collect();
    assert!(
        ran.len() == 100 && twice.is_empty(),
        "the new job ran each index once in its own Jobs: {} indexes, twice {twice:?}",
        ran.len()
    );

    // Deleting it removes its Jobs everywhere.
    mcjs(&env)
        .delete("render", &DeleteParams::default())
        .await
        .expect("deleted");
    wait_jobs_gone(&env, "render").await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piece_its_cluster_refuses_is_named_in_degraded() {
    // ap-south-1's agent applies everything it does by default but Jobs.
    let without_jobs: Vec<String> = nave_agent::allowed::DEFAULT_KINDS
        .iter()
        .filter(|k| **k != "Job.batch")
        .map(|k| (*k).to_owned())
        .collect();
    let env = start(EnvOptions {
        agent_allow_kinds: [("ap-south-1".to_owned(), without_jobs)].into(),
        ..EnvOptions::default()
    })
    .await;
    let mut refused = job("refused", 0, json!({"completions": 2}), 100);
    refused.spec.placement.clusters = vec!["ap-south-1".to_owned()];
    mcjs(&env)
        .create(&PostParams::default(), &refused)
        .await
        .expect("created");
    let message = wait_for("Degraded=True naming the refused piece", DEADLINE, || async {
        let job = mcjs(&env).get("refused").await.map_err(|e| e.to_string())?;
        let status = job.status.unwrap_or_default();
        match status.condition("Degraded") {
            Some(c) if c.status == "True" && c.reason == "ApplyFailed" => Ok(c.message.clone()),
            other => Err(format!("phase {:?}, Degraded {other:?}", status.phase)),
        }
    })
    .await;
    assert!(
        message.contains("ap-south-1") && message.contains("not applied"),
        "expected the cluster and the refusal named, got {message:?}"
    );
    let event = env.event(NS, "refused", "ApplyFailed").await;
    assert!(event.contains("ap-south-1"), "{event}");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_whose_management_cluster_lacks_the_job_crd_says_which_and_does_not_start() {
    // As after `helm upgrade` from a release without MultiClusterJobs: Helm leaves new CRDs out.
    // Starting without the kind would leave its jobs unwatched and unqueued, unsaid.
    let management = nave_sim::SimCluster::start(
        nave_sim::ClusterConfig {
            name: "management".to_owned(),
            ..nave_sim::ClusterConfig::default()
        },
        nave_sim::ServeOptions::default(),
    )
    .await
    .expect("management cluster");
    let client = management.client().await.expect("client");
    nave_playground::up::install_crds(&client)
        .await
        .expect("CRDs installed");
    nave_hub::check_crds(&client).await.expect("every CRD is there");
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(client.clone());
    crds.delete("multiclusterjobs.nave.dev", &DeleteParams::default())
        .await
        .expect("CRD removed");
    let error = nave_hub::check_crds(&client)
        .await
        .expect_err("a missing CRD stops the hub")
        .to_string();
    assert!(
        error.contains("multiclusterjobs.nave.dev") && error.contains("kubectl apply"),
        "expected the missing CRD named with how to install it, got: {error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_too_large_for_the_room_left_wait_in_the_queue_by_priority_then_run() {
    let env = start(EnvOptions::default()).await;
    let api = mcjs(&env);
    // Pods of 1.9 CPUs: the fleet holds 26 (16 + 6 + 4) when empty.
    let wide = |name: &str, priority: i32, run_millis: u64| {
        job(
            name,
            priority,
            json!({"completions": 20, "parallelism": 20, "cpu": "1900m"}),
            run_millis,
        )
    };
    // It runs long enough that both jobs behind it are seen queued, however slow the machine.
    api.create(&PostParams::default(), &wide("first", 0, 15_000))
        .await
        .expect("created");
    wait_phase(&env, "first", JobPhase::Running, DEADLINE).await;
    // Two more of 20 pods each: neither fits beside the first; the later one has the higher
    // priority and goes first.
    api.create(&PostParams::default(), &wide("low", 0, 1_000))
        .await
        .expect("created");
    api.create(&PostParams::default(), &wide("high", 5, 1_000))
        .await
        .expect("created");
    let queued = |name: &'static str, position: i32| {
        let api = api.clone();
        async move {
            wait_for(&format!("{name} queued at {position}"), DEADLINE, || {
                let api = api.clone();
                async move {
                    let job = api.get(name).await.map_err(|e| e.to_string())?;
                    let status = job.status.unwrap_or_default();
                    let admitted = status.condition("Admitted").cloned();
                    match (status.phase, status.queue_position, admitted) {
                        (Some(JobPhase::Queued), Some(p), Some(c))
                            if p == position && c.reason == "Queued" && c.status == "False" =>
                        {
                            Ok(c.message)
                        }
                        other => Err(format!("{other:?}")),
                    }
                }
            })
            .await
        }
    };
    let message = queued("high", 1).await;
    assert!(message.contains("first in the queue"), "{message}");
    let message = queued("low", 2).await;
    assert!(message.contains("1 job(s) ahead"), "{message}");
    assert!(
        message.contains("pods at once fit"),
        "the reason names the room: {message}"
    );

    // The first ends; the high one runs, the low one still waits, then runs in its turn.
    let first = wait_phase(&env, "first", JobPhase::Complete, DEADLINE).await;
    wait_phase(&env, "high", JobPhase::Running, DEADLINE).await;
    let low = api.get("low").await.expect("low");
    assert_eq!(
        low.status.as_ref().and_then(|s| s.phase),
        Some(JobPhase::Queued),
        "the low-priority job waits while the high one runs: {:?}",
        low.status
    );
    let high = wait_phase(&env, "high", JobPhase::Complete, DEADLINE).await;
    let low = wait_phase(&env, "low", JobPhase::Complete, DEADLINE).await;
    let started = |j: &MultiClusterJob| j.status.as_ref().and_then(|s| s.start_time.clone()).map(|t| t.0);
    let ended = |j: &MultiClusterJob| {
        j.status
            .as_ref()
            .and_then(|s| s.completion_time.clone())
            .map(|t| t.0)
    };
    assert!(started(&high) < started(&low), "high started first");
    let admitted_after =
        |before: &MultiClusterJob, after: &MultiClusterJob| match (ended(before), started(after)) {
            (Some(end), Some(start)) => format!("{} ms", start.duration_since(end).as_millis()),
            other => format!("{other:?}"),
        };
    println!(
        "queued jobs admitted after the room freed: high {} after first ended, low {} after high ended",
        admitted_after(&first, &high),
        admitted_after(&high, &low)
    );
    // Every pod ran to success at its first try.
    for name in ["first", "high", "low"] {
        let job = api.get(name).await.expect("job");
        let status = job.status.unwrap_or_default();
        assert_eq!((status.succeeded, status.failed), (20, 0), "{name}: {status:?}");
    }
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_silent_mid_job_has_its_unfinished_indexes_run_elsewhere() {
    // Long enough that busy agents on a loaded machine are not failed over by mistake.
    let grace = Duration::from_secs(8);
    let mut env = start(EnvOptions {
        heartbeat_grace: Some(grace),
        ..EnvOptions::default()
    })
    .await;
    let api = mcjs(&env);
    api.create(
        &PostParams::default(),
        &job(
            "sweep",
            0,
            json!({"completions": 30, "parallelism": 3, "completionMode": "Indexed"}),
            700,
        ),
    )
    .await
    .expect("created");
    // Once a cluster has reported two of its indexes done, its agent stops.
    let (silent, piece) = wait_for("a piece with two indexes done", DEADLINE, || {
        let api = api.clone();
        async move {
            let job = api.get("sweep").await.map_err(|e| e.to_string())?;
            let pieces = job.status.unwrap_or_default().pieces;
            pieces
                .iter()
                .find(|p| p.state == PieceState::Running && p.succeeded >= 2)
                .map(|p| (p.cluster.clone(), p.clone()))
                .ok_or(format!("{pieces:?}"))
        }
    })
    .await;
    let stopped_at = std::time::Instant::now();
    env.stop_agent(&silent).await;

    let done = wait_phase(&env, "sweep", JobPhase::Complete, DEADLINE * 2).await;
    let took = stopped_at.elapsed();
    let status = done.status.unwrap_or_default();
    assert_eq!(status.completed_indexes.as_deref(), Some("0-29"));
    let lost: Vec<_> = status
        .pieces
        .iter()
        .filter(|p| p.state == PieceState::Lost)
        .collect();
    assert_eq!(lost.len(), 1, "{:?}", status.pieces);
    assert_eq!(lost[0].cluster, silent);
    assert_eq!(lost[0].start, piece.start);
    let reruns: Vec<_> = status
        .pieces
        .iter()
        .filter(|p| p.start >= piece.start && p.start < piece.start + piece.completions && p.job != piece.job)
        .collect();
    assert!(
        !reruns.is_empty(),
        "reruns of the lost range: {:?}",
        status.pieces
    );
    assert!(
        reruns
            .iter()
            .all(|p| p.cluster != silent && p.state == PieceState::Complete),
        "reruns ran in the other clusters: {reruns:?}"
    );
    // What the silent cluster reported done is not run again.
    let reported_done =
        nave_hub::placement::jobs::Indexes::parse(lost[0].completed_indexes.as_deref().unwrap_or_default())
            .expect("an index list");
    assert!(reported_done.count() >= 2, "{:?}", lost[0]);
    let ran = succeeded_indexes(&env, "sweep").await.expect("pods listed");
    for (index, clusters) in &ran {
        let mut alone = nave_hub::placement::jobs::Indexes::default();
        alone.insert(*index, *index);
        let mut both = reported_done.clone();
        both.extend(&alone);
        if both == reported_done {
            assert_eq!(
                clusters,
                &vec![silent.clone()],
                "index {index}, reported done, ran again"
            );
        }
    }
    let missing: Vec<u32> = (0..30).filter(|i| !ran.contains_key(i)).collect();
    assert!(missing.is_empty(), "indexes never succeeded: {missing:?}");
    for (index, clusters) in &ran {
        let elsewhere = clusters.iter().filter(|c| **c != silent).count();
        assert!(
            elsewhere <= 1,
            "index {index} ran in more than one of the clusters that kept reporting: {clusters:?}"
        );
    }
    println!("a cluster silent mid-job (grace {grace:?}): the job complete {took:?} after its agent stopped");

    // The silent cluster comes back: its Job, whose indexes ran elsewhere, is removed there.
    env.start_agent(&silent).expect("agent started again");
    let client = env.cluster_client(&silent);
    wait_for(
        &format!("the lost piece's Job removed from {silent}"),
        DEADLINE,
        || {
            let client = client.clone();
            let job_name = piece.job.clone();
            async move {
                let names: Vec<String> = jobs_in(client, "sweep")
                    .await?
                    .into_iter()
                    .filter_map(|j| j.metadata.name)
                    .collect();
                if names.contains(&job_name) {
                    Err(format!("still there: {names:?}"))
                } else {
                    Ok(())
                }
            }
        },
    )
    .await;
    env.shutdown().await;
}
