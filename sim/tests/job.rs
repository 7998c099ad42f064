//! The simulated Job controller through a real `SimCluster` and kube-rs: Indexed Jobs,
//! work-queue Jobs, retries and the back-off limit, per-index back-off limits, TTL after
//! finishing, suspension, active deadlines, and pods that do not fit.
//!
//! Tests wait for conditions with deadlines and report what they last saw.

#[path = "support/helpers.rs"]
mod helpers;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use nave_sim::config::{ClusterConfig, NodePool, Timing};
use nave_sim::{ServeOptions, SimCluster};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(20);

struct Running {
    sim: SimCluster,
    client: Client,
}

/// One node of 8 CPUs: pods start 50 ms after binding and run 200 ms; failed pods are replaced
/// after 100 ms (doubling).
async fn cluster(name: &str) -> Running {
    let config = ClusterConfig {
        name: name.into(),
        node_pools: vec![NodePool {
            name: "node".into(),
            count: 1,
            cpu: "8".into(),
            memory: "32Gi".into(),
            ..NodePool::default()
        }],
        timing: Timing {
            pod_start_millis: 50,
            pod_delete_millis: 50,
            pod_run_millis: 200,
            job_backoff_millis: 100,
            ..Timing::default()
        },
        ..ClusterConfig::default()
    };
    let sim = SimCluster::start(config, ServeOptions::default())
        .await
        .expect("cluster starts");
    sim.control_plane().expect("control plane").wait_synced().await;
    let client = sim.in_process_client();
    Running { sim, client }
}

impl Running {
    fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), "default")
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    async fn create(&self, job: JobFixture) {
        let j: Job = serde_json::from_value(job.0).expect("a Job");
        self.jobs()
            .create(&PostParams::default(), &j)
            .await
            .expect("job created");
    }

    async fn job(&self, name: &str) -> Result<Value, String> {
        let j = self.jobs().get(name).await.map_err(|e| e.to_string())?;
        serde_json::to_value(&j).map_err(|e| e.to_string())
    }

    async fn pods_of(&self, job: &str) -> Result<Vec<Value>, String> {
        let list = self
            .pods()
            .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
            .await
            .map_err(|e| e.to_string())?;
        let mut pods: Vec<Value> = list
            .items
            .iter()
            .map(|p| serde_json::to_value(p).unwrap_or_default())
            .collect();
        pods.sort_by_key(|p| p["metadata"]["name"].as_str().unwrap_or_default().to_owned());
        Ok(pods)
    }

    /// Waits until condition `type_` of the Job is True; answers the Job.
    async fn wait_condition(&self, name: &str, type_: &str) -> Value {
        helpers::wait_for(DEADLINE, &format!("job {name} to have {type_}=True"), || async {
            let j = self.job(name).await?;
            if condition(&j, type_).is_some_and(|c| c["status"] == "True") {
                Ok(j)
            } else {
                Err(j["status"].to_string())
            }
        })
        .await
    }

    async fn events_of(&self, name: &str) -> Vec<(String, String, String)> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), "default");
        let list = events.list(&ListParams::default()).await.expect("events");
        list.items
            .iter()
            .filter(|e| {
                e.involved_object.kind.as_deref() == Some("Job")
                    && e.involved_object.name.as_deref() == Some(name)
            })
            .map(|e| {
                (
                    e.type_.clone().unwrap_or_default(),
                    e.reason.clone().unwrap_or_default(),
                    e.message.clone().unwrap_or_default(),
                )
            })
            .collect()
    }
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn condition_types(obj: &Value) -> Vec<String> {
    obj["status"]["conditions"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    format!(
                        "{}={}",
                        c["type"].as_str().unwrap_or(""),
                        c["status"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or("")
}

fn index(p: &Value) -> Option<u32> {
    p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        .as_str()
        .and_then(|v| v.parse().ok())
}

fn summary(pods: &[Value]) -> String {
    pods.iter()
        .map(|p| {
            format!(
                "{} {}{}",
                p["metadata"]["name"].as_str().unwrap_or(""),
                phase(p),
                if p["metadata"]["deletionTimestamp"].is_string() {
                    " deleting"
                } else {
                    ""
                }
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A Job fixture: `job("render").completions(10).parallelism(3).indexed()`.
struct JobFixture(Value);

fn job(name: &str) -> JobFixture {
    JobFixture(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "template": {
                "metadata": {"annotations": {}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "work", "image": "busybox:1.36",
                                    "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}}}]
                }
            }
        }
    }))
}

impl JobFixture {
    fn spec(mut self, key: &str, value: Value) -> Self {
        self.0["spec"][key] = value;
        self
    }

    fn completions(self, n: i32) -> Self {
        self.spec("completions", json!(n))
    }

    fn parallelism(self, n: i32) -> Self {
        self.spec("parallelism", json!(n))
    }

    fn indexed(self) -> Self {
        self.spec("completionMode", json!("Indexed"))
    }

    /// A pod annotation (run time, exit code, failing indexes).
    fn annotate(mut self, key: &str, value: &str) -> Self {
        self.0["spec"]["template"]["metadata"]["annotations"][key] = json!(value);
        self
    }

    fn cpu(mut self, cpu: &str) -> Self {
        self.0["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!(cpu);
        self
    }
}

#[tokio::test]
async fn an_indexed_job_of_ten_with_parallelism_three_completes_each_index_once() {
    let r = cluster("job-indexed").await;
    r.create(job("render").completions(10).parallelism(3).indexed())
        .await;
    let most_active = Cell::new(0usize);
    let done = helpers::wait_for(DEADLINE, "job render Complete", || async {
        let pods = r.pods_of("render").await?;
        let running = pods
            .iter()
            .filter(|p| !matches!(phase(p), "Succeeded" | "Failed"))
            .count();
        most_active.set(most_active.get().max(running));
        let j = r.job("render").await?;
        if condition(&j, "Complete").is_some_and(|c| c["status"] == "True") {
            Ok(j)
        } else {
            Err(format!("{} pods: {}", j["status"], summary(&pods)))
        }
    })
    .await;
    assert!(
        most_active.get() <= 3,
        "expected at most parallelism=3 unfinished pods at once, saw {}",
        most_active.get()
    );
    let st = &done["status"];
    assert_eq!(st["completedIndexes"], "0-9", "status: {st}");
    assert_eq!(st["succeeded"], 10, "status: {st}");
    assert_eq!(
        (&st["ready"], &st["terminating"]),
        (&json!(0), &json!(0)),
        "status: {st}"
    );
    assert_eq!(st["uncountedTerminatedPods"], json!({}), "status: {st}");
    assert!(
        st.get("active").is_none() && st.get("failed").is_none(),
        "status: {st}"
    );
    assert!(
        st["startTime"].is_string() && st["completionTime"].is_string(),
        "status: {st}"
    );
    assert_eq!(
        condition_types(&done),
        ["SuccessCriteriaMet=True", "Complete=True"]
    );
    let complete = condition(&done, "Complete").expect("Complete");
    assert_eq!(
        (&complete["reason"], &complete["message"]),
        (
            &json!("CompletionsReached"),
            &json!("Reached expected number of succeeded pods")
        )
    );

    let pods = r.pods_of("render").await.expect("pods");
    let mut per_index: BTreeMap<u32, usize> = BTreeMap::new();
    for p in &pods {
        assert_eq!(phase(p), "Succeeded", "pods: {}", summary(&pods));
        let i = index(p).unwrap_or_else(|| panic!("no completion index on {p}"));
        *per_index.entry(i).or_default() += 1;
        let name = p["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            name.starts_with(&format!("render-{i}-")) && name.len() == format!("render-{i}-").len() + 5,
            "pod name {name} is not render-{i}-<random5>"
        );
        assert_eq!(p["spec"]["hostname"], format!("render-{i}"));
        let labels = &p["metadata"]["labels"];
        assert_eq!(labels["batch.kubernetes.io/job-completion-index"], i.to_string());
        assert_eq!(
            labels["batch.kubernetes.io/job-name"], "render",
            "labels: {labels}"
        );
        assert_eq!(labels["job-name"], "render", "labels: {labels}");
        assert_eq!(
            labels["batch.kubernetes.io/controller-uid"], done["metadata"]["uid"],
            "labels: {labels}"
        );
        assert_eq!(
            labels["controller-uid"], done["metadata"]["uid"],
            "labels: {labels}"
        );
        assert_eq!(
            p["spec"]["containers"][0]["env"][0]["name"],
            "JOB_COMPLETION_INDEX"
        );
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "Job");
    }
    let want: BTreeMap<u32, usize> = (0..10).map(|i| (i, 1)).collect();
    assert_eq!(
        per_index,
        want,
        "each index exactly once; pods: {}",
        summary(&pods)
    );
    let events = r.events_of("render").await;
    assert!(
        events
            .iter()
            .any(|(t, reason, msg)| t == "Normal" && reason == "Completed" && msg == "Job completed"),
        "events: {events:?}"
    );
    r.sim.shutdown().await;
}

#[tokio::test]
async fn a_job_without_completions_completes_once_a_pod_succeeds_and_none_runs() {
    let r = cluster("job-queue").await;
    r.create(job("queue").parallelism(2)).await;
    let done = r.wait_condition("queue", "Complete").await;
    assert!(
        done["spec"].get("completions").is_none(),
        "spec: {}",
        done["spec"]
    );
    let st = &done["status"];
    assert!(st["succeeded"].as_i64().unwrap_or(0) >= 1, "status: {st}");
    assert!(st.get("active").is_none(), "status: {st}");
    let pods = r.pods_of("queue").await.expect("pods");
    assert_eq!(pods.len(), 2, "two pods at parallelism 2: {}", summary(&pods));
    r.sim.shutdown().await;
}

#[tokio::test]
async fn a_failing_pod_is_retried_until_the_backoff_limit_fails_the_job() {
    let r = cluster("job-backoff").await;
    r.create(
        job("flaky")
            .spec("backoffLimit", json!(2))
            .annotate("sim.nave.dev/exit-code", "3"),
    )
    .await;
    let failed = r.wait_condition("flaky", "Failed").await;
    let st = &failed["status"];
    assert_eq!(
        st["failed"], 3,
        "backoffLimit 2: the third failure fails the Job; status: {st}"
    );
    assert!(st.get("completionTime").is_none(), "status: {st}");
    assert_eq!(condition_types(&failed), ["FailureTarget=True", "Failed=True"]);
    let c = condition(&failed, "Failed").expect("Failed");
    assert_eq!(
        (&c["reason"], &c["message"]),
        (
            &json!("BackoffLimitExceeded"),
            &json!("Job has reached the specified backoff limit")
        )
    );
    let pods = r.pods_of("flaky").await.expect("pods");
    assert_eq!(pods.len(), 3, "one pod per attempt: {}", summary(&pods));
    for p in &pods {
        assert_eq!(phase(p), "Failed", "pods: {}", summary(&pods));
        assert_eq!(
            p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 3,
            "pod: {p}"
        );
    }
    let events = r.events_of("flaky").await;
    assert!(
        events
            .iter()
            .any(|(t, reason, _)| t == "Warning" && reason == "BackoffLimitExceeded"),
        "events: {events:?}"
    );
    r.sim.shutdown().await;
}

#[tokio::test]
async fn backoff_limit_per_index_fails_only_the_failing_index() {
    let r = cluster("job-per-index").await;
    r.create(
        job("shards")
            .completions(4)
            .parallelism(4)
            .indexed()
            .spec("backoffLimitPerIndex", json!(1))
            .annotate("sim.nave.dev/fail-indexes", "2"),
    )
    .await;
    let failed = r.wait_condition("shards", "Failed").await;
    let st = &failed["status"];
    assert_eq!(st["completedIndexes"], "0-1,3", "status: {st}");
    assert_eq!(st["failedIndexes"], "2", "status: {st}");
    assert_eq!(st["failed"], 2, "index 2 tried twice; status: {st}");
    assert_eq!(
        condition(&failed, "Failed").map(|c| c["reason"].clone()),
        Some(json!("FailedIndexes"))
    );
    assert_eq!(
        failed["spec"]["backoffLimit"],
        i32::MAX,
        "spec: {}",
        failed["spec"]
    );
    let pods = r.pods_of("shards").await.expect("pods");
    let retry = pods.iter().find(|p| {
        index(p) == Some(2)
            && p["metadata"]["annotations"]["batch.kubernetes.io/job-index-failure-count"] == "1"
    });
    assert!(
        retry.is_some(),
        "a retry of index 2 counting one failure: {}",
        summary(&pods)
    );
    r.sim.shutdown().await;
}

#[tokio::test]
async fn ttl_after_finished_deletes_the_job_and_its_pods() {
    let r = cluster("job-ttl").await;
    r.create(job("once").spec("ttlSecondsAfterFinished", json!(1)))
        .await;
    r.wait_condition("once", "Complete").await;
    helpers::wait_for(DEADLINE, "job once and its pods gone", || async {
        let pods = r.pods_of("once").await?;
        match r.jobs().get_opt("once").await.map_err(|e| e.to_string())? {
            None if pods.is_empty() => Ok(()),
            j => Err(format!("job present: {}, pods: {}", j.is_some(), summary(&pods))),
        }
    })
    .await;
    r.sim.shutdown().await;
}

#[tokio::test]
async fn suspend_deletes_active_pods_and_creates_none_until_resumed() {
    let r = cluster("job-suspend").await;
    r.create(
        job("long")
            .completions(2)
            .parallelism(2)
            .annotate("sim.nave.dev/run-millis", "600000"),
    )
    .await;
    helpers::wait_for(DEADLINE, "2 running pods", || async {
        let pods = r.pods_of("long").await?;
        if pods.iter().filter(|p| phase(p) == "Running").count() == 2 {
            Ok(())
        } else {
            Err(summary(&pods))
        }
    })
    .await;
    let suspend = |on: bool| json!({"spec": {"suspend": on}});
    r.jobs()
        .patch("long", &PatchParams::default(), &Patch::Merge(&suspend(true)))
        .await
        .expect("suspended");
    let suspended = helpers::wait_for(DEADLINE, "no pods and the Suspended condition", || async {
        let pods = r.pods_of("long").await?;
        let j = r.job("long").await?;
        let cond = condition(&j, "Suspended")
            .is_some_and(|c| c["status"] == "True" && c["reason"] == "JobSuspended");
        if pods.is_empty() && cond && j["status"].get("active").is_none() {
            Ok(j)
        } else {
            Err(format!("{} pods: {}", j["status"], summary(&pods)))
        }
    })
    .await;
    assert!(
        suspended["status"].get("failed").is_none(),
        "pods deleted on suspension are not failures: {}",
        suspended["status"]
    );

    r.jobs()
        .patch("long", &PatchParams::default(), &Patch::Merge(&suspend(false)))
        .await
        .expect("resumed");
    let resumed = helpers::wait_for(
        DEADLINE,
        "2 pods again and Suspended=False JobResumed",
        || async {
            let pods = r.pods_of("long").await?;
            let j = r.job("long").await?;
            let cond = condition(&j, "Suspended")
                .is_some_and(|c| c["status"] == "False" && c["reason"] == "JobResumed");
            if pods.len() == 2 && cond && j["status"]["active"] == 2 {
                Ok(j)
            } else {
                Err(format!("{} pods: {}", j["status"], summary(&pods)))
            }
        },
    )
    .await;
    // Events are written asynchronously: wait for the Resumed one, then count the creations.
    // Two before the suspension and two after the resumption: none while suspended.
    let events = helpers::wait_for(DEADLINE, "the Suspended and Resumed events", || async {
        let events = r.events_of("long").await;
        let has = |reason: &str| events.iter().any(|(_, r, _)| r == reason);
        let creates = events.iter().filter(|(_, r, _)| r == "SuccessfulCreate").count();
        if has("Suspended") && has("Resumed") && creates >= 4 {
            Ok(events)
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;
    let creates = events.iter().filter(|(_, r, _)| r == "SuccessfulCreate").count();
    assert_eq!(
        creates, 4,
        "pods created: 2, then 2 after resuming; events: {events:?}"
    );
    assert!(
        resumed["status"]["startTime"].is_string(),
        "status: {}",
        resumed["status"]
    );
    r.sim.shutdown().await;
}

#[tokio::test]
async fn a_job_created_suspended_starts_no_pod_and_no_clock() {
    let r = cluster("job-created-suspended").await;
    r.create(job("later").spec("suspend", json!(true))).await;
    let j = r.wait_condition("later", "Suspended").await;
    assert!(j["status"].get("startTime").is_none(), "status: {}", j["status"]);
    assert!(r.pods_of("later").await.expect("pods").is_empty());
    r.jobs()
        .patch(
            "later",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"suspend": false}})),
        )
        .await
        .expect("resumed");
    let done = r.wait_condition("later", "Complete").await;
    assert_eq!(done["status"]["succeeded"], 1, "status: {}", done["status"]);
    r.sim.shutdown().await;
}

#[tokio::test]
async fn active_deadline_fails_the_job_and_removes_its_pods() {
    let r = cluster("job-deadline").await;
    r.create(
        job("slow")
            .spec("activeDeadlineSeconds", json!(1))
            .annotate("sim.nave.dev/run-millis", "600000"),
    )
    .await;
    let failed = r.wait_condition("slow", "Failed").await;
    assert_eq!(
        condition(&failed, "Failed").map(|c| (c["reason"].clone(), c["message"].clone())),
        Some((
            json!("DeadlineExceeded"),
            json!("Job was active longer than specified deadline")
        ))
    );
    helpers::wait_for(DEADLINE, "the running pod deleted", || async {
        let pods = r.pods_of("slow").await?;
        if pods.is_empty() {
            Ok(())
        } else {
            Err(summary(&pods))
        }
    })
    .await;
    r.sim.shutdown().await;
}

#[tokio::test]
async fn a_pod_that_fits_nowhere_stays_pending_and_the_job_waits() {
    let r = cluster("job-pending").await;
    r.create(job("huge").cpu("64")).await;
    let pod = helpers::wait_for(DEADLINE, "the job's pod Unschedulable", || async {
        let pods = r.pods_of("huge").await?;
        let unschedulable = pods.iter().find(|p| {
            p["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["reason"] == "Unschedulable"))
        });
        match unschedulable {
            Some(p) => Ok(p.clone()),
            None => Err(summary(&pods)),
        }
    })
    .await;
    assert_eq!(phase(&pod), "Pending");
    let j = r.job("huge").await.expect("job");
    assert_eq!(j["status"]["active"], 1, "status: {}", j["status"]);
    assert!(
        j["status"]["conditions"].is_null(),
        "no condition while pending: {}",
        j["status"]
    );
    r.jobs()
        .delete("huge", &DeleteParams::default())
        .await
        .expect("deleted");
    r.sim.shutdown().await;
}

#[tokio::test]
async fn container_restarts_under_on_failure_count_against_the_backoff_limit() {
    let r = cluster("job-on-failure").await;
    let mut fixture = job("crashy")
        .spec("backoffLimit", json!(2))
        .annotate("sim.nave.dev/exit-code", "1");
    fixture.0["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
    r.create(fixture).await;
    let failed = r.wait_condition("crashy", "Failed").await;
    assert_eq!(
        condition(&failed, "Failed").map(|c| c["reason"].clone()),
        Some(json!("BackoffLimitExceeded")),
        "status: {}",
        failed["status"]
    );
    let pods = r.pods_of("crashy").await.expect("pods");
    assert!(
        pods.len() <= 1,
        "restarts happen in place, one pod at most: {}",
        summary(&pods)
    );
    r.sim.shutdown().await;
}
