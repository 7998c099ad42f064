//! `nave` and `kubectl nave` end to end: the built binaries against the real hub and agents on
//! simulated clusters, as an operator runs them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use nave_api::wire::{REGISTER_PATH, RegisterRequest};
use nave_api::{MultiClusterDeployment, WorkloadCluster};
use nave_e2e::{Database, Env, fleet, kubeconfig_path};
use nave_testkit::Mcd;
use serde_json::Value;

const NS: &str = "default";

/// `nave` with the environment's kubeconfig, hub URL, token and CA, and nothing of the caller's.
async fn nave(env: &Env, token_file: &Path, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_nave"));
    command
        .arg("--kubeconfig")
        .arg(kubeconfig_path(env))
        .args(["--hub-url", &env.hub_url])
        .arg("--token-file")
        .arg(token_file)
        .arg("--ca-file")
        .arg(&env.pki.ca_file)
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("NAVE_HUB_URL")
        .env_remove("NAVE_TOKEN_FILE")
        .env_remove("NAVE_HUB_CA_FILE");
    command.output().await.expect("nave runs")
}

fn show(args: &[&str], out: &Output) -> String {
    format!(
        "nave {}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        args.join(" "),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `out` exited with `code` and said something containing `says` on standard error.
fn assert_failed(args: &[&str], out: &Output, code: i32, says: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "expected exit {code}; {}",
        show(args, out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(says),
        "expected {says:?} on standard error; {}",
        show(args, out)
    );
}

/// Runs `args` and expects it to fail with `code`, saying `says`.
async fn expect_failure(env: &Env, token_file: &Path, args: &[&str], code: i32, says: &str) {
    assert_failed(args, &nave(env, token_file, args).await, code, says);
}

/// Runs `args`, expects exit code `code`, answers standard output.
async fn expect(env: &Env, token_file: &Path, args: &[&str], code: i32) -> String {
    let out = nave(env, token_file, args).await;
    assert_eq!(
        out.status.code(),
        Some(code),
        "expected exit {code}; {}",
        show(args, &out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn expect_json(env: &Env, token_file: &Path, args: &[&str]) -> Value {
    let mut with_json = args.to_vec();
    with_json.extend(["-o", "json"]);
    let text = expect(env, token_file, &with_json, 0).await;
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("nave {}: not JSON ({e}): {text}", with_json.join(" ")))
}

/// Creates `mcd`, waits until its `replicas` run, and answers the cluster running most of them.
async fn busiest(env: &Env, mcd: Mcd, replicas: i32) -> String {
    let object = mcd.build();
    let name = object.metadata.name.clone().expect("a name");
    Api::<MultiClusterDeployment>::namespaced(env.client.clone(), NS)
        .create(&PostParams::default(), &object)
        .await
        .expect("MCD created");
    let placed = nave_e2e::placed(&env.wait_rolled_out(NS, &name, replicas).await);
    placed
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(cluster, _)| cluster)
        .expect("placed somewhere")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("a file written");
    path
}

/// The simulated decision for `file`: each cluster's `(replicas, filteredOut)`.
async fn simulated(env: &Env, token: &Path, file: &Path) -> Vec<(String, u64, Option<String>)> {
    let answer = expect_json(env, token, &["simulate", "-f", file.to_str().unwrap()]).await;
    answer["clusters"]
        .as_array()
        .unwrap_or_else(|| panic!("simulate answers clusters: {answer}"))
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_owned(),
                c["replicas"].as_u64().unwrap_or_default(),
                c["filteredOut"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// The fewest available replicas of one MCD in every status written while it watches.
struct LowestAvailable {
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<i32>,
}

impl LowestAvailable {
    /// Starts watching `name`; answers once the watch has listed.
    async fn watch(mcds: &Api<MultiClusterDeployment>, name: &str) -> LowestAvailable {
        use futures::StreamExt as _;
        use kube::runtime::watcher::Event;
        let stop = tokio_util::sync::CancellationToken::new();
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let task = tokio::spawn({
            let (mcds, stop, name) = (mcds.clone(), stop.clone(), name.to_owned());
            async move {
                let mut events = kube::runtime::watcher(mcds, Default::default()).boxed();
                let (mut lowest, mut started_tx) = (i32::MAX, Some(started_tx));
                loop {
                    let event = tokio::select! {
                        () = stop.cancelled() => return lowest,
                        event = events.next() => event,
                    };
                    match event {
                        Some(Ok(Event::InitDone)) => {
                            if let Some(tx) = started_tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        Some(Ok(Event::Apply(mcd) | Event::InitApply(mcd)))
                            if mcd.metadata.name.as_deref() == Some(name.as_str()) =>
                        {
                            lowest = lowest.min(mcd.status.map_or(0, |s| s.available_replicas));
                        }
                        Some(_) => {}
                        None => return lowest,
                    }
                }
            }
        });
        started.await.expect("the watch lists the MCDs");
        LowestAvailable { stop, task }
    }

    /// Stops watching; the fewest available replicas seen.
    async fn stop(self) -> i32 {
        self.stop.cancel();
        self.task.await.expect("the watch ends")
    }
}

/// Runs `args` (a command that moves shop's 4 replicas off `target`) while watching shop's
/// status, and checks that 4 replicas stayed available throughout and none is left in `target`.
async fn moves_shop_off(env: &Env, token: &Path, target: &str, args: &[&str], says: &str) {
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    // Every status of the MCD written while the command runs, as a watch delivers them.
    let lowest_seen = LowestAvailable::watch(&mcds, "shop").await;
    let out = expect(env, token, args, 0).await;
    let lowest = lowest_seen.stop().await;
    assert!(out.contains(says), "expected {says:?} in: {out}");
    assert!(
        lowest >= 4,
        "make-before-break: 4 replicas available throughout, saw {lowest}"
    );
    let running = env.replicas_by_cluster(NS, "shop").await;
    assert_eq!(
        (
            running.get(target).copied().unwrap_or(0),
            running.values().sum::<i32>()
        ),
        (0, 4),
        "all 4 replicas elsewhere, none left in {target}: {running:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_lists_cordons_joins_explains_and_simulates_with_nave() {
    let env = Env::start(fleet(3), Database::Sqlite).await.expect("environment");
    let dir = tempfile::tempdir().expect("a directory");
    let token = write(dir.path(), "admin.token", &env.admin_token);
    let names = env.cluster_names();
    let first = names[0].as_str();

    // The fleet, for scripts and for people.
    let clusters = expect_json(&env, &token, &["clusters"]).await;
    let listed: Vec<&str> = clusters
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let mut sorted: Vec<&str> = names.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    assert_eq!(listed, sorted, "{clusters}");
    for cluster in clusters.as_array().unwrap() {
        assert_eq!(cluster["ready"], "True", "every cluster reports: {cluster}");
        assert_eq!(cluster["cordoned"], false, "{cluster}");
        assert!(
            cluster["nodes"].as_i64().unwrap_or(0) > 0,
            "capacity shown: {cluster}"
        );
    }
    let yaml = expect(&env, &token, &["clusters", "-o", "yaml"], 0).await;
    assert!(
        yaml.contains(&format!("name: {first}")),
        "YAML lists {first}: {yaml}"
    );
    let table = expect(&env, &token, &["clusters"], 0).await;
    assert!(
        table.starts_with("NAME") && names.iter().all(|n| table.contains(n.as_str())),
        "a table of every cluster: {table}"
    );

    // Cordon: the cluster's spec says so, and the hub places nothing new there.
    let manifest = write(
        dir.path(),
        "web.yaml",
        "apiVersion: nave.dev/v1alpha1\nkind: MultiClusterDeployment\nmetadata:\n  name: web\nspec:\n  replicas: 6\n  placement:\n    policy: spread\n  template:\n    spec:\n      selector:\n        matchLabels: {app: web}\n      template:\n        metadata:\n          labels: {app: web}\n        spec:\n          containers:\n            - name: web\n              image: nginx:1.27\n              resources:\n                requests: {cpu: 100m, memory: 64Mi}\n",
    );
    let before = simulated(&env, &token, &manifest).await;
    assert!(
        before.iter().any(|(c, n, f)| c == first && *n > 0 && f.is_none()),
        "spread gives {first} replicas while it is not cordoned: {before:?}"
    );
    let said = expect(&env, &token, &["cordon", first], 0).await;
    assert!(said.contains("cordoned"), "{said}");
    let clusters_api: Api<WorkloadCluster> = Api::all(env.client.clone());
    let object = clusters_api.get(first).await.expect("the WorkloadCluster");
    assert!(
        object.spec.unschedulable,
        "cordon sets spec.unschedulable: {:?}",
        object.spec
    );
    let again = expect(&env, &token, &["cordon", first], 0).await;
    assert!(again.contains("already"), "cordoning twice says so: {again}");
    nave_testkit::wait_for(
        &format!("the hub to see {first} cordoned"),
        nave_e2e::DEADLINE,
        || async {
            let after = simulated(&env, &token, &manifest).await;
            if after.iter().any(|(c, n, f)| c == first && *n == 0 && f.is_some()) {
                Ok(())
            } else {
                Err(format!("simulate: {after:?}"))
            }
        },
    )
    .await;
    let listed = expect_json(&env, &token, &["clusters"]).await;
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == first && c["cordoned"] == true),
        "clusters shows the cordon: {listed}"
    );
    expect(&env, &token, &["uncordon", first], 0).await;
    let object = clusters_api.get(first).await.expect("the WorkloadCluster");
    assert!(!object.spec.unschedulable, "uncordon clears spec.unschedulable");
    expect_failure(&env, &token, &["cordon", "no-such-cluster"], 3, "no-such-cluster").await;

    // Explain a placed workload, cluster by cluster.
    Api::<MultiClusterDeployment>::namespaced(env.client.clone(), NS)
        .create(
            &PostParams::default(),
            &Mcd::new("shop").namespace(NS).replicas(3).build(),
        )
        .await
        .expect("MCD created");
    let shop = env.wait_rolled_out(NS, "shop", 3).await;
    let placed = nave_e2e::placed(&shop);
    let text = expect(&env, &token, &["explain", "shop", "-n", NS], 0).await;
    for cluster in placed.keys() {
        assert!(
            text.contains(cluster.as_str()),
            "the explanation names {cluster}: {text}"
        );
    }
    let detail = expect_json(&env, &token, &["explain", "shop", "-n", NS]).await;
    let assignment: std::collections::BTreeMap<String, i32> =
        serde_json::from_value(detail["assignment"].clone()).expect("an assignment");
    assert_eq!(
        assignment, placed,
        "explain's assignment is the MCD's status: {detail}"
    );
    expect_failure(
        &env,
        &token,
        &["explain", "nothing-here", "-n", NS],
        3,
        "default/nothing-here",
    )
    .await;

    // Join: a single-use token the hub accepts from an agent of that name, and the commands.
    let joining = expect_json(
        &env,
        &token,
        &["join", "new-1", "--ttl", "10m", "--region", "eu-west"],
    )
    .await;
    let join_token = joining["token"].as_str().expect("a token").to_owned();
    let commands = joining["commands"].to_string();
    assert!(
        commands.contains("clusterName=new-1")
            && commands.contains(&env.hub_url)
            && commands.contains("region=eu-west"),
        "the agent's install names the cluster, the hub and the region: {commands}"
    );
    assert!(
        joining["hubCaSha256"]
            .as_str()
            .is_some_and(|h| commands.contains(h)),
        "the install pins the hub's CA: {joining}"
    );
    let register = |token: String| {
        let http = env.http();
        let url = format!("{}{REGISTER_PATH}", env.hub_url);
        async move {
            let request = RegisterRequest {
                cluster_name: "new-1".to_owned(),
                agent_version: "test".to_owned(),
                ..RegisterRequest::default()
            };
            http.post(url)
                .bearer_auth(token)
                .json(&request)
                .send()
                .await
                .expect("the hub answers")
                .status()
        }
    };
    assert_eq!(
        register(join_token.clone()).await.as_u16(),
        200,
        "the printed token registers new-1"
    );
    assert_eq!(register(join_token).await.as_u16(), 401, "once");

    // Failures a script can tell apart.
    let wrong = write(dir.path(), "wrong.token", "not-a-token");
    expect_failure(
        &env,
        &wrong,
        &["explain", "shop", "-n", NS],
        4,
        "unknown API token",
    )
    .await;
    expect_failure(
        &env,
        &token,
        &["simulate", "-f", "/nonexistent/mcd.yaml"],
        2,
        "/nonexistent/mcd.yaml",
    )
    .await;
    let invalid = write(
        dir.path(),
        "invalid.yaml",
        &std::fs::read_to_string(&manifest)
            .expect("the manifest")
            .replace("replicas: 6", "replicas: -1"),
    );
    // A spec the hub refuses exits 2 and names the field.
    expect_failure(
        &env,
        &token,
        &["simulate", "-f", invalid.to_str().unwrap()],
        2,
        "replicas",
    )
    .await;
    let unreachable = tokio::process::Command::new(env!("CARGO_BIN_EXE_nave"))
        .args(["--hub-url", "http://127.0.0.1:9", "--token-file"])
        .arg(&token)
        .args(["explain", "shop", "-n", NS, "--request-timeout", "5s"])
        .output()
        .await
        .expect("nave runs");
    assert_failed(
        &["explain"],
        &unreachable,
        1,
        "cannot reach the hub at http://127.0.0.1:9",
    );

    // The same binary as a kubectl plugin, found on PATH by its name.
    if let Some(kubectl) = kubectl_or_skip() {
        let plugin_dir = Path::new(env!("CARGO_BIN_EXE_kubectl-nave"))
            .parent()
            .expect("a directory");
        let path = std::env::join_paths(
            std::iter::once(plugin_dir.to_owned()).chain(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            )),
        )
        .expect("a PATH");
        let out = tokio::process::Command::new(kubectl)
            .args(["nave", "clusters", "-o", "json"])
            .env("PATH", path)
            .env("KUBECONFIG", kubeconfig_path(&env))
            .output()
            .await
            .expect("kubectl runs");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            show(&["(kubectl) clusters"], &out)
        );
        let listed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(
            listed.as_array().map(Vec::len),
            Some(names.len() + 1),
            "kubectl nave clusters: the fleet and new-1: {listed}"
        );
        assert!(
            listed
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["name"] == "new-1" && c["ready"] == "Unknown"),
            "new-1 joined and has not beaten yet: {listed}"
        );
    }
    env.shutdown().await;
}

/// The versioned kubectl, or `None` when `NAVE_SKIP_KUBECTL` says to skip (a missing binary
/// fails, as in the other kubectl tests).
fn kubectl_or_skip() -> Option<PathBuf> {
    if std::env::var_os("NAVE_SKIP_KUBECTL").is_some() {
        println!("skipped: kubectl nave (NAVE_SKIP_KUBECTL is set)");
        return None;
    }
    Some(
        nave_sim::kubectl::find_kubectl()
            .expect("kubectl.1.32 is installed (NAVE_SKIP_KUBECTL=1 skips this)"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nave_drain_moves_every_replica_off_a_cluster_without_lowering_what_is_available() {
    let env = Env::start(fleet(3), Database::Sqlite).await.expect("environment");
    let dir = tempfile::tempdir().expect("a directory");
    let token = write(dir.path(), "admin.token", &env.admin_token);
    let target = busiest(&env, Mcd::new("shop").namespace(NS).replicas(4), 4).await;

    moves_shop_off(
        &env,
        &token,
        &target,
        &["drain", &target, "--wait", "60s"],
        "drained",
    )
    .await;
    let text = expect(&env, &token, &["explain", "shop", "-n", NS], 0).await;
    assert!(
        text.contains(&format!(
            "{target}: filtered out: taint nave.dev/drain:NoExecute not tolerated"
        )),
        "the explanation names the drain: {text}"
    );
    let listed = expect_json(&env, &token, &["clusters"]).await;
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == target.as_str() && c["draining"] == true),
        "clusters shows the drain: {listed}"
    );

    // Uncordon ends the drain.
    expect(&env, &token, &["uncordon", &target], 0).await;
    let object = Api::<WorkloadCluster>::all(env.client.clone())
        .get(&target)
        .await
        .expect("the WorkloadCluster");
    assert!(
        object.spec.taints.is_empty(),
        "uncordon removes the drain taint: {:?}",
        object.spec.taints
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_tolerating_a_drain_for_a_while_moves_when_the_time_is_up() {
    let env = Env::start(fleet(2), Database::Sqlite).await.expect("environment");
    let dir = tempfile::tempdir().expect("a directory");
    let token = write(dir.path(), "admin.token", &env.admin_token);
    let placement = serde_json::json!({
        "policy": "worst-fit",
        "tolerations": [{"key": "nave.dev/drain", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3}]
    });
    let target = busiest(
        &env,
        Mcd::new("batch").namespace(NS).replicas(2).placement(placement),
        2,
    )
    .await;
    let drained_at = std::time::Instant::now();
    expect(&env, &token, &["drain", &target], 0).await;
    let moved = nave_testkit::wait_for(
        &format!("batch's replicas to leave {target} once its 3 s toleration is up"),
        nave_e2e::DEADLINE,
        || async {
            let running = env.replicas_by_cluster(NS, "batch").await;
            if running.get(&target).copied().unwrap_or(0) == 0 && running.values().sum::<i32>() == 2 {
                Ok(drained_at.elapsed())
            } else {
                Err(format!("replicas by cluster: {running:?}"))
            }
        },
    )
    .await;
    assert!(
        moved >= std::time::Duration::from_millis(2500),
        "the toleration keeps them about 3 s, they left after {moved:?}"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nave_rebalance_places_a_workload_again_from_scratch() {
    let env = Env::start(fleet(3), Database::Sqlite).await.expect("environment");
    let dir = tempfile::tempdir().expect("a directory");
    let token = write(dir.path(), "admin.token", &env.admin_token);
    let names = env.cluster_names();
    // Placed in one cluster by an allow-list; lifting it moves nothing (placement is steady).
    let only = names[0].clone();
    let pinned = busiest(
        &env,
        Mcd::new("shop")
            .namespace(NS)
            .replicas(3)
            .placement(serde_json::json!({"policy": "spread", "clusters": [only]})),
        3,
    )
    .await;
    assert_eq!(pinned, only);
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    mcds.patch(
        "shop",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"spec": {"placement": {"clusters": null}}})),
    )
    .await
    .expect("the allow-list lifted");
    let steady = nave_testkit::wait_for("the new generation placed", nave_e2e::DEADLINE, || async {
        let mcd = mcds.get("shop").await.map_err(|e| e.to_string())?;
        match &mcd.status {
            Some(s) if s.observed_generation == mcd.metadata.generation => Ok(nave_e2e::placed(&mcd)),
            other => Err(format!("status: {other:?}")),
        }
    })
    .await;
    assert_eq!(steady.len(), 1, "steady: still all in {only}: {steady:?}");

    let said = expect(&env, &token, &["rebalance", "shop", "-n", NS], 0).await;
    assert!(said.contains("again from scratch"), "{said}");
    let spread = nave_testkit::wait_for("shop spread over the fleet", nave_e2e::DEADLINE, || async {
        let running = env.replicas_by_cluster(NS, "shop").await;
        let used = running.values().filter(|n| **n > 0).count();
        if used == 3 && running.values().sum::<i32>() == 3 {
            Ok(running)
        } else {
            Err(format!("replicas by cluster: {running:?}"))
        }
    })
    .await;
    assert_eq!(spread.get(&only).copied(), Some(1), "{spread:?}");
    expect_failure(
        &env,
        &token,
        &["rebalance", "nothing-here", "-n", NS],
        3,
        "nothing-here",
    )
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nave_unjoin_moves_the_work_away_the_hub_forgets_the_cluster_and_nave_join_brings_it_back() {
    let mut env = Env::start(fleet(3), Database::Sqlite).await.expect("environment");
    let dir = tempfile::tempdir().expect("a directory");
    let token = write(dir.path(), "admin.token", &env.admin_token);
    let target = busiest(&env, Mcd::new("shop").namespace(NS).replicas(4), 4).await;
    // The playground wrote the WorkloadClusters before the agents joined; the hub puts its
    // finalizer on them.
    let clusters = Api::<WorkloadCluster>::all(env.client.clone());
    nave_testkit::wait_for(
        &format!("the hub's finalizer on {target}"),
        nave_e2e::DEADLINE,
        || async {
            let object = clusters.get(&target).await.map_err(|e| e.to_string())?;
            let finalizers = object.metadata.finalizers.unwrap_or_default();
            if finalizers.iter().any(|f| f == nave_api::CLUSTER_FINALIZER) {
                Ok(())
            } else {
                Err(format!("finalizers {finalizers:?}"))
            }
        },
    )
    .await;

    moves_shop_off(
        &env,
        &token,
        &target,
        &["unjoin", &target, "--wait", "90s"],
        "removed",
    )
    .await;
    let object = clusters
        .get_opt(&target)
        .await
        .expect("reading the WorkloadCluster");
    assert!(object.is_none(), "the object is gone: {object:?}");
    let listed = expect_json(&env, &token, &["clusters"]).await;
    assert!(
        !listed.to_string().contains(&format!("\"{target}\"")),
        "clusters no longer lists {target}: {listed}"
    );
    let gone = env.rest(&format!("/clusters/{target}")).await;
    assert!(gone.is_err(), "the hub forgot {target}: {gone:?}");
    expect_failure(&env, &token, &["unjoin", &target], 3, "not found").await;

    // `nave join` brings it back: its agent, restarted with the join token, registers again.
    let joining = expect_json(&env, &token, &["join", &target]).await;
    let join_token = write(
        dir.path(),
        "join.token",
        joining["token"].as_str().expect("a join token"),
    );
    env.stop_agent(&target).await;
    env.start_agent_with(&target, join_token)
        .expect("the agent starts with the join token");
    nave_testkit::wait_for(
        &format!("{target} to join again and report capacity"),
        nave_e2e::DEADLINE,
        || async {
            let object = clusters.get_opt(&target).await.map_err(|e| e.to_string())?;
            match object.and_then(|o| o.status).and_then(|s| s.capacity) {
                Some(capacity) if capacity.nodes > 0 => Ok(()),
                other => Err(format!("capacity {other:?}")),
            }
        },
    )
    .await;
    let pinned = busiest(
        &env,
        Mcd::new("again")
            .namespace(NS)
            .placement(serde_json::json!({"clusters": [target.clone()]})),
        1,
    )
    .await;
    assert_eq!(pinned, target, "work goes to the cluster that joined again");
    env.shutdown().await;
}

/// The `nave.dev/template-hash` of the Deployment `name` in each cluster (`None`: none there).
async fn template_hashes(env: &Env, name: &str) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    for cluster in env.cluster_names() {
        let deployments: Api<Deployment> = Api::namespaced(env.cluster_client(&cluster), NS);
        let hash = deployments
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|d| d.metadata.annotations)
            .and_then(|a| a.get(nave_api::TEMPLATE_HASH_ANNOTATION).cloned());
        out.insert(cluster, hash);
    }
    out
}

/// The clusters in the order their Deployment `name` took another template than `from`, as
/// watches of every cluster deliver it; stopped with the token.
fn order_of_change(
    env: &Env,
    name: &str,
    from: String,
    stop: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<Vec<String>> {
    use futures::StreamExt as _;
    use kube::runtime::watcher::Event;
    let streams = env.cluster_names().into_iter().map(|cluster| {
        let api: Api<Deployment> = Api::namespaced(env.cluster_client(&cluster), NS);
        kube::runtime::watcher(api, Default::default())
            .map(move |event| (cluster.clone(), event))
            .boxed()
    });
    let mut events = futures::stream::select_all(streams);
    let name = name.to_owned();
    tokio::spawn(async move {
        let mut order: Vec<String> = Vec::new();
        loop {
            let (cluster, event) = tokio::select! {
                () = stop.cancelled() => return order,
                next = events.next() => match next {
                    Some(next) => next,
                    None => return order,
                },
            };
            let Ok(Event::Apply(d) | Event::InitApply(d)) = event else {
                continue;
            };
            let hash = d
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(nave_api::TEMPLATE_HASH_ANNOTATION));
            if d.metadata.name.as_deref() == Some(name.as_str())
                && hash.is_some_and(|h| *h != from)
                && !order.contains(&cluster)
            {
                order.push(cluster);
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_in_three_waves_goes_cluster_by_cluster_and_halts_where_the_new_template_fails() {
    let env = Env::start(fleet(3), Database::Sqlite).await.expect("environment");
    let dir = tempfile::tempdir().expect("a directory");
    let token = write(dir.path(), "admin.token", &env.admin_token);
    let names = env.cluster_names();
    let (canary, second) = (names[0].clone(), names[1].clone());
    let template = |image: &str, fault: Option<&str>| {
        let mut pod_metadata = serde_json::json!({"labels": {"app": "shop"}});
        if let Some(fault) = fault {
            pod_metadata["annotations"] = serde_json::json!({"sim.nave.dev/fault": fault});
        }
        serde_json::json!({"spec": {
            "progressDeadlineSeconds": 5,
            "selector": {"matchLabels": {"app": "shop"}},
            "template": {
                "metadata": pod_metadata,
                "spec": {"containers": [{"name": "app", "image": image,
                         "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
            }
        }})
    };
    let mcd: MultiClusterDeployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "nave.dev/v1alpha1", "kind": "MultiClusterDeployment",
        "metadata": {"name": "shop", "namespace": NS},
        "spec": {
            "replicas": 3,
            "placement": {"policy": "spread"},
            "rollout": {
                "waves": [{"name": "canary", "clusters": [canary]}, {"clusters": [second]}],
                "pauseBetweenWaves": "1s",
                "progressDeadline": "2m"
            },
            "template": template("registry.example/shop:1", None)
        }
    }))
    .expect("an MCD");
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    mcds.create(&PostParams::default(), &mcd)
        .await
        .expect("MCD created");
    let placed = nave_e2e::placed(&env.wait_rolled_out(NS, "shop", 3).await);
    assert_eq!(placed.len(), 3, "one replica in each cluster: {placed:?}");
    let first = template_hashes(&env, "shop").await;
    let h1 = first[&canary].clone().expect("a template hash on the Deployment");
    assert!(first.values().all(|h| h.as_ref() == Some(&h1)), "{first:?}");

    // A new template goes to the canary, then the second wave, then the rest.
    let stop = tokio_util::sync::CancellationToken::new();
    let order = order_of_change(&env, "shop", h1.clone(), stop.clone());
    let replace = |template: serde_json::Value| {
        let mcds = mcds.clone();
        async move {
            mcds.patch(
                "shop",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"spec": {"template": template}})),
            )
            .await
            .expect("the template changed")
        }
    };
    replace(template("registry.example/shop:2", None)).await;
    let out = expect(&env, &token, &["rollout", "status", "shop", "--wait", "120s"], 0).await;
    assert!(out.contains("Complete"), "{out}");
    stop.cancel();
    let order = order.await.expect("the watches end");
    assert_eq!(order, names, "the clusters took the new template wave by wave");
    let second_hashes = template_hashes(&env, "shop").await;
    let h2 = second_hashes[&canary].clone().expect("a hash");
    assert!(
        h2 != h1 && second_hashes.values().all(|h| h.as_ref() == Some(&h2)),
        "every cluster on the second template: {second_hashes:?}"
    );

    // A template whose image never pulls: the canary fails and the rollout halts there; the
    // other clusters keep the second template and serve.
    replace(template("registry.example/shop:3", Some("ImagePullBackOff"))).await;
    let args = ["rollout", "status", "shop", "--wait", "120s"];
    let out = nave(&env, &token, &args).await;
    assert_failed(&args, &out, 1, "Halted");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("cluster {canary}")),
        "the halt names the canary; {}",
        show(&args, &out)
    );
    let halted = template_hashes(&env, "shop").await;
    for cluster in &names[1..] {
        assert_eq!(
            halted[cluster].as_ref(),
            Some(&h2),
            "{cluster} keeps the second template: {halted:?}"
        );
    }
    assert_ne!(halted[&canary].as_ref(), Some(&h2), "the canary got the third");
    let shop = mcds.get("shop").await.expect("the MCD");
    let status = shop.status.clone().unwrap_or_default();
    assert!(
        status.available_replicas >= 2,
        "the clusters on the second template serve: {status:?}"
    );

    // Undo puts the second template back; it reaches the canary, the others keep theirs.
    let said = expect(&env, &token, &["rollout", "undo", "shop"], 0).await;
    assert!(said.contains("stable template put back"), "{said}");
    let out = expect(&env, &token, &["rollout", "status", "shop", "--wait", "120s"], 0).await;
    assert!(out.contains("Complete"), "{out}");
    let undone = template_hashes(&env, "shop").await;
    assert!(
        undone.values().all(|h| h.as_ref() == Some(&h2)),
        "every cluster on the second template again: {undone:?}"
    );
    env.shutdown().await;
}
