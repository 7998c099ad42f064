//! Failover end to end: a simulated management cluster (nave-sim) with Nave's CRDs, the hub with
//! a SQLite store and a 2 s heartbeat grace, and agents speaking the wire protocol over HTTP.
//! Agents that "lose" the hub simply stop sending heartbeats.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use nave_api::conditions::{self, reasons, types};
use nave_api::{MultiClusterDeployment, WorkloadCluster};
use nave_hub::store::{HistoryQuery, PlacementRecord, Store};
use nave_sim::SimCluster;
use nave_testkit::{DEADLINE, FakeAgent, Mcd, idle_capacity, wait_for};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const GRACE: Duration = Duration::from_secs(2);
/// How often a live simulated agent sends a heartbeat: well within the grace period.
const BEAT_EVERY: Duration = Duration::from_millis(250);

/// A fake agent heartbeating from a task until [`Agent::go_silent`].
struct Agent {
    fake: FakeAgent,
    beating: Option<(CancellationToken, JoinHandle<()>)>,
}

impl Agent {
    /// Registers `cluster` with two nodes of 4 CPUs (room for 16 replicas of 500m) and starts
    /// heartbeating.
    async fn join(base: &str, cluster: &str) -> Agent {
        let mut fake = FakeAgent::register(base, cluster).await;
        fake.set_capacity(idle_capacity(cluster, 2, 4000));
        let mut agent = Agent { fake, beating: None };
        agent.resume();
        agent
    }

    /// Sends heartbeats every [`BEAT_EVERY`] until silenced.
    fn resume(&mut self) {
        let stop = CancellationToken::new();
        let (fake, token) = (self.fake.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(BEAT_EVERY);
            loop {
                tokio::select! {
                    () = token.cancelled() => return,
                    _ = ticks.tick() => {}
                }
                fake.heartbeat().await;
            }
        });
        self.beating = Some((stop, task));
    }

    /// Stops the heartbeats, as an agent that lost the hub (or its cluster) would.
    async fn go_silent(&mut self) {
        if let Some((stop, task)) = self.beating.take() {
            stop.cancel();
            task.await.expect("the heartbeat task should not fail");
        }
    }

    /// Replicas of the Deployment `name` in this cluster's work set, if present.
    async fn replicas(&self, name: &str) -> Option<i64> {
        self.fake.replicas(name).await
    }
}

/// The management cluster, the hub, a store handle and two heartbeating agents.
struct Harness {
    management: SimCluster,
    client: kube::Client,
    store: Arc<dyn Store>,
    shutdown: CancellationToken,
    hub: JoinHandle<Result<(), nave_hub::Error>>,
    _dir: tempfile::TempDir,
    eu: Agent,
    us: Agent,
}

impl Harness {
    async fn start() -> Harness {
        let (management, client) = support::management_cluster().await;
        let dir = tempfile::tempdir().unwrap();
        let support::Hub {
            base,
            database_url,
            shutdown,
            task: hub,
            ..
        } = support::start_hub(&management, dir.path(), |args| {
            args.failover.heartbeat_grace = GRACE;
        });
        let eu = Agent::join(&base, "eu-1").await;
        let us = Agent::join(&base, "us-1").await;
        let store = nave_hub::store::connect(&database_url)
            .await
            .expect("open the hub's store");
        Harness {
            management,
            client,
            store,
            shutdown,
            hub,
            _dir: dir,
            eu,
            us,
        }
    }

    fn mcds(&self) -> Api<MultiClusterDeployment> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Once both clusters are Ready, creates `web` with 6 spread replicas and waits until each
    /// cluster's work holds 3.
    async fn web_on_both(&self) {
        // Both capacities known first, or the first cluster heard from would get all six.
        for cluster in ["eu-1", "us-1"] {
            self.ready(cluster, conditions::TRUE, "").await;
        }
        self.mcds()
            .create(
                &PostParams::default(),
                &Mcd::new("web").replicas(6).cpu("500m").memory("128Mi").build(),
            )
            .await
            .unwrap();
        wait_for("web's work to be divided 3 + 3", DEADLINE, || async {
            let shares = (self.eu.replicas("web").await, self.us.replicas("web").await);
            if shares == (Some(3), Some(3)) {
                Ok(())
            } else {
                Err(format!(
                    "(eu-1, us-1) replicas {shares:?}, expected (Some(3), Some(3))"
                ))
            }
        })
        .await;
    }

    /// Waits for the `Ready` condition of a WorkloadCluster to have `status` and a message
    /// containing `message`; returns the condition.
    async fn ready(
        &self,
        cluster: &str,
        status: &str,
        message: &str,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        let api: Api<WorkloadCluster> = Api::all(self.client.clone());
        wait_for(
            &format!("{cluster} to be Ready={status} with {message:?}"),
            DEADLINE,
            || async {
                let object = api.get(cluster).await.map_err(|e| e.to_string())?;
                let conds = object.status.map(|s| s.conditions).unwrap_or_default();
                match conditions::find(&conds, types::READY) {
                    Some(c) if c.status == status && c.message.contains(message) => Ok(c.clone()),
                    other => Err(format!("Ready condition {other:?}")),
                }
            },
        )
        .await
    }

    async fn placement(&self) -> PlacementRecord {
        self.store
            .get_placement("default", "web")
            .await
            .expect("read the placement")
            .expect("web has a placement")
    }

    /// Waits for an Event with `reason` about the object named `name`; returns its note.
    async fn event(&self, reason: &str, name: &str) -> String {
        let events: Api<Event> = Api::namespaced(self.client.clone(), "default");
        wait_for(&format!("an event {reason} on {name}"), DEADLINE, || async {
            let list = events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let found = list.items.iter().find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            });
            match found {
                Some(e) => Ok(e.note.clone().unwrap_or_default()),
                None => {
                    let seen: Vec<_> = list
                        .items
                        .iter()
                        .map(|e| {
                            format!(
                                "{:?} on {:?}",
                                e.reason,
                                e.regarding.as_ref().and_then(|r| r.name.clone())
                            )
                        })
                        .collect();
                    Err(format!("events seen: {seen:?}"))
                }
            }
        })
        .await
    }

    /// Makes the MCD controller reconcile `web` (an annotation change) and waits until that
    /// reconcile stored the placement again.
    async fn reconcile_web(&self, round: &str) -> PlacementRecord {
        let before = self.placement().await.updated_at;
        // A change of the spec (a pod annotation): the placement is written again even when it
        // decides the same, for the new generation.
        let patch =
            json!({"spec": {"template": {"metadata": {"annotations": {"test.nave.dev/poke": round}}}}});
        self.mcds()
            .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        wait_for("web to be reconciled again", DEADLINE, || async {
            let placement = self.placement().await;
            if placement.updated_at > before {
                Ok(placement)
            } else {
                Err(format!("placement updated at {} still", placement.updated_at))
            }
        })
        .await
    }

    async fn stop(mut self) {
        self.eu.go_silent().await;
        self.us.go_silent().await;
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(20), self.hub)
            .await
            .expect("the hub should stop on shutdown")
            .unwrap()
            .expect("the hub should stop cleanly");
        self.store.close().await.unwrap();
        self.management.shutdown().await;
    }
}

fn assignment(placement: &PlacementRecord) -> BTreeMap<String, u64> {
    serde_json::from_value(placement.decision["assignment"].clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_cluster_is_not_ready_its_replicas_move_and_stay_moved_when_it_returns() {
    let mut h = Harness::start().await;
    h.web_on_both().await;

    // eu-1 stops sending heartbeats: after the grace period it is Ready=False, failed over.
    h.eu.go_silent().await;
    let ready = h.ready("eu-1", conditions::FALSE, "no heartbeat for").await;
    assert_eq!(ready.reason, reasons::HEARTBEAT_MISSED);
    assert!(
        ready.message.contains("grace 2s") && ready.message.contains("placed in other clusters"),
        "the message should give the grace and say what happens, got {:?}",
        ready.message
    );
    h.event("FailingOver", "eu-1").await;

    // Its replicas go to us-1; eu-1's work set loses them (its agent prunes on return).
    wait_for("web's 6 replicas in us-1 and none in eu-1", DEADLINE, || async {
        let shares = (h.eu.replicas("web").await, h.us.replicas("web").await);
        if shares == (None, Some(6)) {
            Ok(())
        } else {
            Err(format!(
                "(eu-1, us-1) replicas {shares:?}, expected (None, Some(6))"
            ))
        }
    })
    .await;
    let placed = assignment(&h.placement().await);
    assert_eq!(placed.get("us-1"), Some(&6), "stored assignment {placed:?}");
    assert_eq!(
        placed.get("eu-1").copied().unwrap_or(0),
        0,
        "stored assignment {placed:?}"
    );
    let status = wait_for("web's status to list only us-1", DEADLINE, || async {
        let web = h.mcds().get("web").await.map_err(|e| e.to_string())?;
        let status = web.status.unwrap_or_default();
        let clusters: Vec<_> = status
            .clusters
            .iter()
            .map(|c| (c.name.clone(), c.desired))
            .collect();
        if clusters == [("us-1".to_owned(), 6)] {
            Ok(status)
        } else {
            Err(format!("status clusters {clusters:?}, expected [us-1=6]"))
        }
    })
    .await;
    assert_eq!(status.replicas, 6);
    assert_eq!(status.unplaced_replicas, 0);
    let history = h
        .store
        .placement_history(&HistoryQuery {
            namespace: Some("default".to_owned()),
            name: Some("web".to_owned()),
            ..HistoryQuery::default()
        })
        .await
        .unwrap();
    let failover = history
        .entries
        .iter()
        .find(|e| e.trigger == "failover")
        .unwrap_or_else(|| {
            let seen: Vec<_> = history.entries.iter().map(|e| (&e.trigger, &e.reason)).collect();
            panic!("expected a history entry with trigger failover, saw {seen:?}")
        });
    assert!(
        failover.reason.contains("moved 3 from eu-1") && failover.reason.contains("us-1 +3"),
        "the reason should say what moved where, got {:?}",
        failover.reason
    );
    let note = h.event("FailedOver", "web").await;
    assert!(note.contains("eu-1"), "FailedOver note {note:?}");

    // eu-1 is back: Ready=True on its next heartbeat; with failback Never the replicas stay.
    h.eu.resume();
    let ready = h.ready("eu-1", conditions::TRUE, "").await;
    assert_eq!(ready.reason, reasons::HEARTBEAT_RECEIVED);
    let placement = h.reconcile_web("after-return").await;
    let placed = assignment(&placement);
    assert_eq!(
        (
            placed.get("eu-1").copied().unwrap_or(0),
            placed.get("us-1").copied()
        ),
        (0, Some(6)),
        "failback Never: replicas stay where they moved, got {placed:?}"
    );
    assert_eq!(h.eu.replicas("web").await, None, "nothing went back to eu-1");

    // The returned cluster takes new replicas: spread over at least two clusters puts the 2
    // added ones there.
    let scale = json!({"spec": {"replicas": 8, "placement": {"minClusters": 2}}});
    h.mcds()
        .patch("web", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .unwrap();
    wait_for("the 2 new replicas to go to eu-1", DEADLINE, || async {
        let shares = (h.eu.replicas("web").await, h.us.replicas("web").await);
        if shares == (Some(2), Some(6)) {
            Ok(())
        } else {
            let explanation = h.placement().await.decision["explanation"].clone();
            Err(format!(
                "(eu-1, us-1) replicas {shares:?}, expected (Some(2), Some(6)); decision: {explanation}"
            ))
        }
    })
    .await;

    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_every_cluster_goes_silent_at_once_the_hub_assumes_it_is_partitioned_and_moves_nothing() {
    let mut h = Harness::start().await;
    h.web_on_both().await;

    h.eu.go_silent().await;
    h.us.go_silent().await;
    for cluster in ["eu-1", "us-1"] {
        let ready = h.ready(cluster, conditions::FALSE, "failover held back").await;
        assert_eq!(ready.reason, reasons::HEARTBEAT_MISSED);
        h.event("FailoverSuppressed", cluster).await;
    }
    let placement = h.reconcile_web("while-partitioned").await;
    let placed = assignment(&placement);
    assert_eq!(
        (placed.get("eu-1").copied(), placed.get("us-1").copied()),
        (Some(3), Some(3)),
        "nothing should move while the hub hears from no cluster, got {placed:?}"
    );
    assert_eq!(
        (h.eu.replicas("web").await, h.us.replicas("web").await),
        (Some(3), Some(3)),
        "the work sets should be untouched"
    );

    // Heartbeats resume: both Ready again, still 3 + 3.
    h.eu.resume();
    h.us.resume();
    for cluster in ["eu-1", "us-1"] {
        h.ready(cluster, conditions::TRUE, "").await;
    }
    let placement = h.reconcile_web("after-partition").await;
    let placed = assignment(&placement);
    assert_eq!(
        (placed.get("eu-1").copied(), placed.get("us-1").copied()),
        (Some(3), Some(3)),
        "got {placed:?}"
    );
    let history = h
        .store
        .placement_history(&HistoryQuery {
            namespace: Some("default".to_owned()),
            name: Some("web".to_owned()),
            ..HistoryQuery::default()
        })
        .await
        .unwrap();
    let triggers: Vec<_> = history.entries.iter().map(|e| e.trigger.as_str()).collect();
    assert!(
        !triggers.contains(&"failover"),
        "no failover should be recorded, history triggers {triggers:?}"
    );

    h.stop().await;
}
