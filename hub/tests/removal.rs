//! Deleting a WorkloadCluster removes the cluster from the fleet, against the hub on a real
//! socket: its workloads move away make-before-break, the object stays (Removing=True, saying
//! what is left) until the agent has applied the empty work set, then the cluster is forgotten
//! and stays so: its credential is revoked, heartbeats do not write the object again, and the
//! fleet's bootstrap token cannot register the name; a join token can. A workload with no room
//! elsewhere stays; a cluster gone for good is removed at once with
//! `nave.dev/remove-without-agent`.

mod support;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nave_api::conditions::{self, types};
use nave_api::wire::RegisterRequest;
use nave_api::{CLUSTER_FINALIZER, MultiClusterDeployment, REMOVE_WITHOUT_AGENT_ANNOTATION, WorkloadCluster};
use nave_testkit::{BOOTSTRAP, DEADLINE, FakeAgent, Mcd, idle_capacity, wait_for};
use serde_json::{Value, json};

const ADMIN: &str = "admin-token";

fn request(cluster: &str) -> RegisterRequest {
    RegisterRequest {
        cluster_name: cluster.to_owned(),
        agent_version: "0.1.0".to_owned(),
        ..RegisterRequest::default()
    }
}

/// Waits until `agent`'s work set gives the Deployment `name` `replicas` (`None`: holds none).
async fn wait_replicas(agent: &FakeAgent, name: &str, replicas: Option<i64>) {
    wait_for(
        &format!(
            "{}'s work set to give {name} {replicas:?} replicas",
            agent.cluster()
        ),
        DEADLINE,
        || async {
            let seen = agent.replicas(name).await;
            if seen == replicas {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        },
    )
    .await;
}

/// The message of `name`'s Removing condition, or why there is none.
async fn removing(objects: &Api<WorkloadCluster>, name: &str) -> Result<String, String> {
    let object = objects
        .get_opt(name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no object")?;
    let conds = object.status.map(|s| s.conditions).unwrap_or_default();
    conditions::find(&conds, types::REMOVING)
        .filter(|c| c.status == conditions::TRUE)
        .map(|c| c.message.clone())
        .ok_or_else(|| format!("no Removing=True in {conds:?}"))
}

/// Waits until `name`'s Removing condition says something containing `says`.
async fn wait_removing(objects: &Api<WorkloadCluster>, name: &str, says: &str) {
    wait_for(
        &format!("{name}'s Removing condition to say {says:?}"),
        DEADLINE,
        || async {
            let message = removing(objects, name).await?;
            if message.contains(says) {
                Ok(())
            } else {
                Err(message)
            }
        },
    )
    .await;
}

async fn wait_gone(objects: &Api<WorkloadCluster>, name: &str) {
    wait_for(
        &format!("the WorkloadCluster {name} to be gone"),
        DEADLINE,
        || async {
            match objects.get_opt(name).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(o) => Err(format!(
                    "still there: finalizers {:?}, conditions {:?}",
                    o.metadata.finalizers,
                    o.status.map(|s| s.conditions)
                )),
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_workload_cluster_moves_its_work_away_is_forgotten_and_stays_deleted() {
    let (management, client) = support::management_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("api-tokens");
    std::fs::write(&tokens, format!("admin {ADMIN}\n")).unwrap();
    let hub = support::start_hub(&management, dir.path(), |args| {
        args.api_tokens_file = Some(tokens);
    });
    let http = reqwest::Client::new();
    let rest = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut request = http
            .request(method, format!("{}/api/v1{path}", hub.base))
            .bearer_auth(ADMIN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let res = request.send().await.expect("the hub answers");
            let status = res.status().as_u16();
            (status, res.json::<Value>().await.unwrap_or(Value::Null))
        }
    };

    let eu1 = FakeAgent::join(&hub.base, "eu-1", idle_capacity("eu-1", 2, 4000)).await;
    let eu2 = FakeAgent::join(&hub.base, "eu-2", idle_capacity("eu-2", 2, 4000)).await;
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(client.clone(), "default");
    mcds.create(
        &PostParams::default(),
        &Mcd::new("web")
            .replicas(4)
            .placement(json!({"policy": "spread"}))
            .build(),
    )
    .await
    .expect("MCD created");
    wait_replicas(&eu1, "web", Some(2)).await;
    wait_replicas(&eu2, "web", Some(2)).await;
    eu1.report_all_ready().await;
    eu2.report_all_ready().await;
    let objects: Api<WorkloadCluster> = Api::all(client.clone());
    let finalized = objects.get("eu-2").await.expect("eu-2's WorkloadCluster");
    assert_eq!(
        finalized.metadata.finalizers,
        Some(vec![CLUSTER_FINALIZER.to_owned()]),
        "a registration writes the object with the hub's finalizer"
    );

    // Deleting eu-2's object moves web to eu-1; eu-2 keeps its replicas until eu-1's are ready.
    objects
        .delete("eu-2", &DeleteParams::default())
        .await
        .expect("eu-2 deleted");
    wait_replicas(&eu1, "web", Some(4)).await;
    wait_removing(&objects, "eu-2", "default/web").await;
    assert_eq!(
        eu2.replicas("web").await,
        Some(2),
        "make-before-break: eu-2 keeps web until eu-1's replicas are ready"
    );
    let refused = FakeAgent::try_register(&hub.base, request("eu-2"), eu2.credential())
        .await
        .err();
    assert!(
        refused
            .as_ref()
            .is_some_and(|(status, body)| *status == 409 && body.contains("being removed")),
        "expected registration refused while the object is deleted, saw {refused:?}"
    );
    eu1.report_all_ready().await;
    wait_replicas(&eu2, "web", None).await;
    wait_removing(&objects, "eu-2", "apply the empty work set").await;

    // Once the agent applied the empty set, the cluster is forgotten and its object goes.
    eu2.report_all_ready().await;
    wait_gone(&objects, "eu-2").await;
    assert_eq!(eu2.work_status().await, 401, "eu-2's credential is revoked");
    let (status, body) = rest(reqwest::Method::GET, "/clusters/eu-2", None).await;
    assert_eq!(status, 404, "the hub forgot eu-2: {body}");

    // It stays deleted: the fleet's token cannot register the name again (the hub accepts new
    // clusters with it), and no heartbeat wrote the object.
    let refused = FakeAgent::try_register(&hub.base, request("eu-2"), BOOTSTRAP)
        .await
        .err();
    assert!(
        refused
            .as_ref()
            .is_some_and(|(status, body)| *status == 409 && body.contains("removed by an admin")),
        "expected the bootstrap token refused for a removed name, saw {refused:?}"
    );
    eu1.heartbeat().await;
    assert!(
        objects.get_opt("eu-2").await.expect("reading").is_none(),
        "eu-2's object stays deleted"
    );

    // A join token an admin issues brings it back, with the finalizer.
    let (status, issued) = rest(
        reqwest::Method::POST,
        "/join-tokens",
        Some(json!({"cluster": "eu-2"})),
    )
    .await;
    assert_eq!(status, 201, "a join token for eu-2: {issued}");
    let token = issued["token"].as_str().expect("the token").to_owned();
    FakeAgent::try_register(&hub.base, request("eu-2"), &token)
        .await
        .expect("eu-2 joins again with a join token");
    let back = objects.get("eu-2").await.expect("eu-2's object is back");
    assert_eq!(back.metadata.finalizers, Some(vec![CLUSTER_FINALIZER.to_owned()]));

    // A cluster gone for good, whose agent never answers again: removed at once when asked.
    let eu3 = FakeAgent::join(&hub.base, "eu-3", idle_capacity("eu-3", 2, 4000)).await;
    mcds.create(
        &PostParams::default(),
        &Mcd::new("db").placement(json!({"clusters": ["eu-3"]})).build(),
    )
    .await
    .expect("MCD created");
    wait_replicas(&eu3, "db", Some(1)).await;
    // Deleted while db may run nowhere else: db stays, and the removal says it waits for it.
    objects
        .delete("eu-3", &DeleteParams::default())
        .await
        .expect("eu-3 deleted");
    wait_removing(&objects, "eu-3", "default/db").await;
    assert_eq!(
        eu3.replicas("db").await,
        Some(1),
        "db has no room elsewhere: it stays in eu-3"
    );
    objects
        .patch(
            "eu-3",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {REMOVE_WITHOUT_AGENT_ANNOTATION: "true"}}})),
        )
        .await
        .expect("annotated");
    wait_gone(&objects, "eu-3").await;
    assert_eq!(eu3.work_status().await, 401, "eu-3's credential is revoked");

    // Every cluster deleted at once (the CRD deleted, say): none is removed.
    for name in ["eu-1", "eu-2"] {
        objects
            .delete(name, &DeleteParams::default())
            .await
            .expect("deleted");
    }
    for name in ["eu-1", "eu-2"] {
        wait_removing(&objects, name, "held: 2 of 2").await;
    }
    assert_eq!(eu1.work_status().await, 200, "eu-1 keeps its credential");

    hub.shutdown.cancel();
    let _ = hub.task.await;
}
