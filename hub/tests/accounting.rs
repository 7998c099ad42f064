//! Room is counted once and as the clusters have it.
//!
//! - A replica whose pod is Pending takes no room in its agent's capacity report (the pod is bound
//!   to no node), so the hub keeps the room reserved for it: otherwise the cluster looks as if it
//!   had the room the Pending pod waits for, receives more replicas that wait too, and the MCD
//!   says `AllReplicasPlaced` while they are Pending.
//! - Workloads reconciled at the same time (up to 8 at once) each see the others' bookings: the
//!   ledger is read and the decision booked under one lock, so no two are given the same room.

mod support;

use kube::api::{Api, PostParams};
use nave_api::MultiClusterDeployment;
use nave_api::wire::Resources;
use nave_testkit::{DEADLINE, FakeAgent, Mcd, capacity, idle_capacity, ready_deployment, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_replicas_keep_their_room_and_no_more_are_placed_on_it() {
    let (management, client) = support::management_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let hub = support::start_hub(&management, dir.path(), |_| {});
    // Room for 4 replicas of 500m.
    let mut agent = FakeAgent::join(&hub.base, "small", idle_capacity("small", 1, 2000)).await;
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(client.clone(), "default");
    let web = Mcd::new("web")
        .replicas(6)
        .policy("worst-fit")
        .cpu("500m")
        .build();
    mcds.create(&PostParams::default(), &web).await.unwrap();
    wait_for("web to be placed 4, with 2 unplaced", DEADLINE, || async {
        let status = mcds
            .get("web")
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        if (status.replicas, status.unplaced_replicas) == (4, 2) {
            Ok(())
        } else {
            Err(format!(
                "replicas {}, unplaced {}",
                status.replicas, status.unplaced_replicas
            ))
        }
    })
    .await;

    // Two of the four run (their 1000m now show as requested), two stay Pending.
    agent.set_capacity(capacity(
        "small",
        1,
        Resources::new(2000, 16 << 30, 110),
        Resources::new(1000, 128 << 20, 2),
    ));
    agent.heartbeat().await;
    let mut status = ready_deployment("default", "web", 2);
    status.replicas = Some(4);
    status.pending_pods = Some(2);
    agent.report(vec![status]).await;

    let status = wait_for(
        "web's status to count the 2 Pending replicas",
        DEADLINE,
        || async {
            let status = mcds
                .get("web")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            if status.pending_replicas == 2 {
                Ok(status)
            } else {
                Err(format!("pendingReplicas {}", status.pending_replicas))
            }
        },
    )
    .await;
    assert_eq!(
        (status.replicas, status.unplaced_replicas),
        (4, 2),
        "the Pending replicas keep their room: no more are placed on it ({:?})",
        status.placement_summary
    );
    assert_eq!(
        agent.replicas("web").await,
        Some(4),
        "the cluster is sent 4, not 6"
    );
    hub.shutdown.cancel();
    hub.task.await.unwrap().expect("the hub stops cleanly");
    management.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workloads_placed_at_once_are_not_given_the_same_room() {
    let (management, client) = support::management_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let hub = support::start_hub(&management, dir.path(), |_| {});
    // Room for 6 replicas of 500m in all; 12 workloads of one replica arrive at once.
    let _a = FakeAgent::join(&hub.base, "a", idle_capacity("a", 1, 1500)).await;
    let _b = FakeAgent::join(&hub.base, "b", idle_capacity("b", 1, 1500)).await;
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(client.clone(), "default");
    let names: Vec<String> = (0..12).map(|i| format!("w{i}")).collect();
    futures::future::join_all(names.iter().map(|name| {
        let mcds = mcds.clone();
        async move {
            let mcd = Mcd::new(name).replicas(1).policy("worst-fit").cpu("500m").build();
            mcds.create(&PostParams::default(), &mcd).await.unwrap();
        }
    }))
    .await;
    let (placed, unplaced) = wait_for("every workload to be decided", DEADLINE, || async {
        let mut placed = 0;
        let mut unplaced = 0;
        for name in &names {
            let status = mcds
                .get(name)
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            if status.observed_generation.is_none() {
                return Err(format!("{name} not decided yet"));
            }
            placed += status.replicas;
            unplaced += status.unplaced_replicas;
        }
        if placed + unplaced == 12 {
            Ok((placed, unplaced))
        } else {
            Err(format!("{placed} placed, {unplaced} unplaced"))
        }
    })
    .await;
    assert_eq!(
        (placed, unplaced),
        (6, 6),
        "the fleet has room for 6: no two workloads may be given the same room"
    );
    hub.shutdown.cancel();
    hub.task.await.unwrap().expect("the hub stops cleanly");
    management.shutdown().await;
}
