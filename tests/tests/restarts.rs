//! Restarts lose nothing and duplicate nothing: an agent restarted resumes from what it applied;
//! the hub restarted (SQLite and Postgres) picks up from its store, including changes made while
//! it was down.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nave_api::MultiClusterDeployment;
use nave_api::wire::MANAGED_BY_LABEL;
use nave_e2e::{Database, Env, fleet, placed};
use nave_testkit::Mcd;
use serde_json::json;

const NS: &str = "default";

/// Every object the agents manage in every cluster, as `cluster/kind/namespace/name -> uid`.
async fn managed_objects(env: &Env) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for cluster in env.cluster_names() {
        let api: Api<Deployment> = Api::all(env.cluster_client(&cluster));
        let list = api
            .list(&ListParams::default().labels(MANAGED_BY_LABEL))
            .await
            .unwrap_or_else(|e| panic!("listing Deployments in {cluster}: {e}"));
        for d in list.items {
            let key = format!(
                "{cluster}/Deployment/{}/{}",
                d.metadata.namespace.unwrap_or_default(),
                d.metadata.name.unwrap_or_default()
            );
            assert!(
                out.insert(key.clone(), d.metadata.uid.unwrap_or_default())
                    .is_none(),
                "{key} listed twice"
            );
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_restart_loses_nothing_and_duplicates_nothing() {
    let mut env = Env::start(fleet(2), Database::Sqlite)
        .await
        .expect("the environment starts");
    let api: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    api.create(
        &PostParams::default(),
        &Mcd::new("web").namespace(NS).replicas(4).policy("spread").build(),
    )
    .await
    .expect("MCD created");
    env.wait_rolled_out(NS, "web", 4).await;
    let before = managed_objects(&env).await;

    // Stopped: what it applied keeps running. Meanwhile the workload is scaled.
    env.stop_agent("eu-west-1").await;
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 6}})),
    )
    .await
    .expect("scaled");
    env.start_agent("eu-west-1").expect("agent restarts");
    env.wait_rolled_out(NS, "web", 6).await;
    let after = managed_objects(&env).await;
    assert_eq!(
        after, before,
        "the same objects, with the same uids, before and after the restart"
    );
    env.shutdown().await;
}

async fn hub_restart(database: Database) {
    let mut env = Env::start(fleet(3), database)
        .await
        .expect("the environment starts");
    let api: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    for (name, replicas) in [("web", 6), ("api", 3), ("batch", 2)] {
        api.create(
            &PostParams::default(),
            &Mcd::new(name)
                .namespace(NS)
                .replicas(replicas)
                .policy("spread")
                .build(),
        )
        .await
        .expect("MCD created");
    }
    let web = placed(&env.wait_rolled_out(NS, "web", 6).await);
    let api_placed = placed(&env.wait_rolled_out(NS, "api", 3).await);
    env.wait_rolled_out(NS, "batch", 2).await;
    let before = managed_objects(&env).await;

    // While the hub is down: scale one, delete one (its finalizer holds it until the hub is
    // back), leave one alone.
    env.stop_hub().await;
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 9}})),
    )
    .await
    .expect("scaled while the hub is down");
    api.delete("batch", &DeleteParams::default())
        .await
        .expect("deleted while the hub is down");
    env.start_hub().await.expect("the hub restarts");

    let web_after = placed(&env.wait_rolled_out(NS, "web", 9).await);
    for (cluster, n) in &web {
        assert!(
            web_after.get(cluster).copied().unwrap_or(0) >= *n,
            "after the restart, web keeps its replicas in {cluster}: before {web:?}, after {web_after:?}"
        );
    }
    let api_after = placed(&env.wait_rolled_out(NS, "api", 3).await);
    assert_eq!(api_after, api_placed, "an untouched workload does not move");
    env.wait_mcd_gone(NS, "batch").await;
    let after = managed_objects(&env).await;
    let expected: BTreeMap<String, String> = before
        .iter()
        .filter(|(k, _)| !k.ends_with("/batch"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let kept: BTreeMap<String, String> = after
        .iter()
        .filter(|(k, _)| expected.contains_key(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(
        kept, expected,
        "web's and api's objects are the same objects after the restart"
    );
    let added: Vec<&String> = after.keys().filter(|k| !expected.contains_key(*k)).collect();
    assert!(
        added.iter().all(|k| k.ends_with("/web")),
        "nothing but web's scale-up is new: {added:?}"
    );
    assert!(
        !after.keys().any(|k| k.ends_with("/batch")),
        "batch is gone from every cluster: {after:?}"
    );
    env.shutdown().await;
}

/// The hub's store is lost (a lost volume, a fresh database) while the agents run: the restarted
/// hub knows no cluster, no credential and no work. The agents register again and hold what they
/// run until the hub has placed every workload again; nothing in the workload clusters is
/// deleted or re-created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_that_lost_its_store_deletes_nothing_in_the_workload_clusters() {
    let mut env = Env::start(fleet(2), Database::Sqlite)
        .await
        .expect("the environment starts");
    let api: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    for (name, replicas) in [("web", 4), ("api", 2)] {
        api.create(
            &PostParams::default(),
            &Mcd::new(name)
                .namespace(NS)
                .replicas(replicas)
                .policy("spread")
                .build(),
        )
        .await
        .expect("MCD created");
    }
    env.wait_rolled_out(NS, "web", 4).await;
    env.wait_rolled_out(NS, "api", 2).await;
    let before = managed_objects(&env).await;

    env.stop_hub().await;
    env.lose_sqlite_store();
    env.start_hub().await.expect("the hub starts on an empty store");
    let restarted = tokio::time::Instant::now();

    // Watched the whole time the hub needs to register the agents and place again: every
    // object the agents run stays the same object.
    nave_testkit::wait_for(
        "both workloads placed again on the new store with the same objects",
        nave_testkit::DEADLINE,
        || async {
            let now = managed_objects(&env).await;
            let lost: Vec<&String> = before
                .iter()
                .filter(|(k, uid)| now.get(*k) != Some(*uid))
                .map(|(k, _)| k)
                .collect();
            assert!(
                lost.is_empty(),
                "deleted or re-created after the store was lost: {lost:?}"
            );
            let placed_again = env
                .rest("/placements")
                .await
                .ok()
                .and_then(|v| v["items"].as_array().map(Vec::len))
                .unwrap_or(0);
            if placed_again == 2 && now == before {
                Ok(())
            } else {
                Err(format!(
                    "placements: {placed_again}, objects before {before:?}, now {now:?}"
                ))
            }
        },
    )
    .await;
    // Reported for BENCHMARKS.md: how long the hub took to place everything again.
    println!("placed again on the new store after {:?}", restarted.elapsed());
    env.wait_rolled_out(NS, "web", 4).await;
    env.wait_rolled_out(NS, "api", 2).await;
    assert_eq!(
        managed_objects(&env).await,
        before,
        "the same objects run once the hub has placed again"
    );
    println!(
        "rolled out again on the new store after {:?}",
        restarted.elapsed()
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_restart_on_sqlite_loses_nothing_and_duplicates_nothing() {
    hub_restart(Database::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_restart_on_postgres_loses_nothing_and_duplicates_nothing() {
    if let Some(database) = Database::postgres_or_skip("hub restart") {
        hub_restart(database).await;
    }
}
