//! `POST /api/v1/placements/simulate` answers what applying the spec would do now, moves
//! included: the same assignment, the same replicas sent to each cluster, the same history
//! trigger and reason. Checked for the two moves a plan makes on its own: rescheduling replicas
//! Pending past `pendingTimeout`, and retracting burst replicas once regular clusters have room.
//!
//! In each case the situation is set up so that the hub has not reconciled since it arose (a
//! heartbeat's Pending pods and another workload's deletion do not reconcile this one), the
//! simulation is asked, and only then is the apply triggered (an annotation), so the two see the
//! same inputs.

mod support;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nave_api::wire::{Heartbeat, PendingPod, WorkSet, WorkloadRef};
use nave_api::{MultiClusterDeployment, WorkloadCluster};
use nave_testkit::{DEADLINE, FakeAgent, Mcd, idle_capacity, ready_deployment, wait_for};
use serde_json::{Value, json};

const TOKEN: &str = "simulate-read-token-0123456789";

/// Replicas of `name`'s Deployment in each work set, where it has one.
fn sent(works: &[(&str, WorkSet)], name: &str) -> BTreeMap<String, u32> {
    works
        .iter()
        .filter_map(|(cluster, work)| {
            let replicas = work
                .objects
                .iter()
                .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name)?
                .pointer("/spec/replicas")?
                .as_u64()?;
            Some(((*cluster).to_owned(), u32::try_from(replicas).unwrap()))
        })
        .collect()
}

struct Env {
    management: nave_sim::SimCluster,
    client: kube::Client,
    hub: support::Hub,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Env {
    async fn start() -> Env {
        let (management, client) = support::management_cluster().await;
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("api-tokens");
        std::fs::write(&tokens, format!("read {TOKEN}\n")).unwrap();
        let hub = support::start_hub(&management, dir.path(), |args| {
            args.api_tokens_file = Some(tokens);
        });
        Env {
            management,
            client,
            hub,
            http: reqwest::Client::new(),
            _dir: dir,
        }
    }

    /// A fake agent for `cluster`, one node of `cpu_millis`, joined; it reports the same
    /// capacity in every heartbeat, so its heartbeats do not ask for reconciles.
    async fn join(&self, cluster: &str, cpu_millis: u64) -> FakeAgent {
        FakeAgent::join(&self.hub.base, cluster, idle_capacity(cluster, 1, cpu_millis)).await
    }

    fn mcds(&self) -> Api<MultiClusterDeployment> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// The answer of the REST API, or what it said instead of `200`.
    async fn try_rest(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.hub.base))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let res = request.send().await.map_err(|e| e.to_string())?;
        let status = res.status();
        let body: Value = res.json().await.map_err(|e| e.to_string())?;
        if status == 200 {
            Ok(body)
        } else {
            Err(format!("{path}: {status} {body}"))
        }
    }

    async fn rest(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        self.try_rest(method, path, body)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits until `name`'s placement assigns `assignment`.
    async fn placed(&self, name: &str, assignment: Value) {
        wait_for(&format!("{name} to be placed {assignment}"), DEADLINE, || async {
            let placement = self
                .try_rest(
                    reqwest::Method::GET,
                    &format!("/api/v1/placements/default/{name}"),
                    None,
                )
                .await?;
            if placement["assignment"] == assignment {
                Ok(())
            } else {
                Err(placement["assignment"].to_string())
            }
        })
        .await;
    }

    async fn simulate(&self, name: &str, spec: &Value) -> Value {
        self.rest(
            reqwest::Method::POST,
            "/api/v1/placements/simulate",
            Some(json!({"namespace": "default", "name": name, "spec": spec})),
        )
        .await
    }

    async fn placement(&self, name: &str) -> Value {
        self.rest(
            reqwest::Method::GET,
            &format!("/api/v1/placements/default/{name}"),
            None,
        )
        .await
    }

    /// The newest history entry of `name`.
    async fn newest(&self, name: &str) -> Value {
        let history = self
            .rest(
                reqwest::Method::GET,
                &format!("/api/v1/placements/default/{name}/history?limit=1"),
                None,
            )
            .await;
        history["items"][0].clone()
    }

    /// Asks the hub to reconcile `name` now: an annotation changes nothing placement reads.
    async fn nudge(&self, name: &str) {
        let patch =
            json!({"metadata": {"annotations": {"test.nave.dev/nudge": jiff::Timestamp::now().to_string()}}});
        self.mcds()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Waits for a history entry with `trigger`, then checks that the stored placement, the
    /// history entry and the work sent to the agents are what `simulated` said.
    async fn expect_applied_as_simulated(&self, name: &str, simulated: &Value, agents: &[&FakeAgent]) {
        let trigger = simulated["trigger"].as_str().unwrap().to_owned();
        let entry = wait_for(
            &format!("{name}'s history to show a {trigger} decision"),
            DEADLINE,
            || async {
                let entry = self.newest(name).await;
                if entry["trigger"] == trigger.as_str() {
                    Ok(entry)
                } else {
                    Err(entry.to_string())
                }
            },
        )
        .await;
        assert_eq!(
            entry["reason"], simulated["reason"],
            "the history says what the simulation said"
        );
        let placement = self.placement(name).await;
        assert_eq!(
            placement["assignment"], simulated["assignment"],
            "applied {placement}\nsimulated {simulated}"
        );
        // The work sets follow the placement: they are written by the flusher just after it.
        let dispatched: BTreeMap<String, u32> =
            serde_json::from_value(simulated["dispatched"].clone()).unwrap();
        wait_for(
            &format!("the replicas sent to each cluster to be the simulation's `dispatched` {dispatched:?}"),
            DEADLINE,
            || async {
                let mut works = Vec::new();
                for agent in agents {
                    works.push((agent.cluster(), agent.work().await));
                }
                let sent = sent(&works, name);
                if sent == dispatched {
                    Ok(())
                } else {
                    Err(format!("{sent:?}"))
                }
            },
        )
        .await;
    }

    async fn shutdown(self) {
        self.hub.shutdown.cancel();
        self.hub.task.await.unwrap().expect("the hub stops cleanly");
        self.management.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulation_with_pods_pending_past_the_timeout_answers_the_move_the_apply_makes() {
    let env = Env::start().await;
    // `small` has room for 2 replicas of 500m, `big` for 16.
    let small = env.join("small", 1000).await;
    let big = env.join("big", 8000).await;
    let web = Mcd::new("web")
        .replicas(4)
        .placement(json!({"policy": "spread", "rescheduling": {"pendingTimeout": "1m", "cooldown": "1m"}}))
        .cpu("500m");
    env.mcds()
        .create(&PostParams::default(), &web.build())
        .await
        .unwrap();
    env.placed("web", json!({"small": 2, "big": 2})).await;

    // small's scheduler gave up on both of web's pods ten and a half minutes ago.
    let since = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(630);
    let pending = (0..2)
        .map(|i| PendingPod {
            namespace: "default".to_owned(),
            name: format!("web-{i}"),
            workload: Some(WorkloadRef::new("default", "web")),
            reason: "Unschedulable".to_owned(),
            message: "0/1 nodes are available: 1 Insufficient cpu.".to_owned(),
            since: Some(Time(since)),
        })
        .collect();
    small
        .send_heartbeat(&Heartbeat {
            pending_pods: pending,
            ..small.beat()
        })
        .await;

    let simulated = env.simulate("web", &web.spec()).await;
    assert_eq!(simulated["trigger"], "reschedule", "{simulated}");
    assert_eq!(simulated["assignment"], json!({"big": 4}), "{simulated}");
    assert_eq!(simulated["current"], json!({"small": 2, "big": 2}), "{simulated}");
    assert!(
        simulated["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("rescheduled: moved 2 from small (Pending for 10m")),
        "{simulated}"
    );
    assert_eq!(
        env.placement("web").await["assignment"],
        json!({"small": 2, "big": 2}),
        "the simulation wrote nothing"
    );

    env.nudge("web").await;
    env.expect_applied_as_simulated("web", &simulated, &[&small, &big])
        .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulation_with_burst_replicas_to_retract_answers_the_move_the_apply_makes() {
    let env = Env::start().await;
    // `regular` has room for 4 replicas of 500m; `burst` takes only what fits nowhere else.
    let regular = env.join("regular", 2000).await;
    let burst = env.join("burst", 8000).await;
    let clusters: Api<WorkloadCluster> = Api::all(env.client.clone());
    clusters
        .patch(
            "burst",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"burstOnly": true}})),
        )
        .await
        .unwrap();

    // `filler` takes 2 of regular's 4 slots (not running yet: the ledger holds them), so 2 of
    // web's 4 replicas overflow to burst.
    let filler = Mcd::new("filler").replicas(2).policy("worst-fit").cpu("500m");
    env.mcds()
        .create(&PostParams::default(), &filler.build())
        .await
        .unwrap();
    env.placed("filler", json!({"regular": 2})).await;
    let web = Mcd::new("web").replicas(4).policy("worst-fit").cpu("500m");
    env.mcds()
        .create(&PostParams::default(), &web.build())
        .await
        .unwrap();
    env.placed("web", json!({"regular": 2, "burst": 2})).await;
    // web's burst replicas run: they are kept until their replacements do (make-before-break).
    burst.report(vec![ready_deployment("default", "web", 2)]).await;
    wait_for(
        "web's status to count the burst replicas ready",
        DEADLINE,
        || async {
            let web = env.mcds().get("web").await.map_err(|e| e.to_string())?;
            let ready = web.status.as_ref().map_or(0, |s| s.ready_replicas);
            if ready == 2 {
                Ok(())
            } else {
                Err(format!("readyReplicas {ready}"))
            }
        },
    )
    .await;

    // filler leaves: regular has room again. Its deletion reconciles filler, not web.
    env.mcds()
        .delete("filler", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("filler's placement to be gone", DEADLINE, || async {
        let res = env
            .http
            .get(format!("{}/api/v1/placements/default/filler", env.hub.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if res.status() == 404 {
            Ok(())
        } else {
            Err(format!("status {}", res.status()))
        }
    })
    .await;

    let simulated = env.simulate("web", &web.spec()).await;
    assert_eq!(simulated["trigger"], "burst-retract", "{simulated}");
    assert_eq!(simulated["assignment"], json!({"regular": 4}), "{simulated}");
    assert_eq!(
        simulated["dispatched"],
        json!({"regular": 4, "burst": 2}),
        "the running burst replicas stay until the new ones are ready: {simulated}"
    );
    assert_eq!(simulated["moving"]["held"], json!({"burst": 2}), "{simulated}");
    assert_eq!(
        env.placement("web").await["assignment"],
        json!({"regular": 2, "burst": 2}),
        "the simulation wrote nothing"
    );

    env.nudge("web").await;
    env.expect_applied_as_simulated("web", &simulated, &[&regular, &burst])
        .await;
    env.shutdown().await;
}
