//! What the hub's integration tests share: a simulated management cluster with Nave's CRDs, the
//! hub on a real socket over a SQLite store, and polling with a deadline. Each test speaks the
//! agent protocol itself, so it controls exactly what the hub hears.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use nave_api::MultiClusterDeployment;
use nave_api::wire::{
    self, CapacityModel, CapacityTotals, Heartbeat, NodeCapacity, NodeGroup, RegisterRequest,
    RegisterResponse, Resources, WorkSet,
};
use nave_hub::cli::{FailoverArgs, RunArgs};
use nave_sim::{ClusterConfig, ServeOptions, SimCluster};
use tokio_util::sync::CancellationToken;

/// The bootstrap token every test fleet registers with.
pub const BOOTSTRAP: &str = "fleet-bootstrap-token";
/// Longest a test waits for the hub to act.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Polls `check` until it returns `Ok`, failing after [`DEADLINE`] with the last thing seen.
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        match check().await {
            Ok(value) => return value,
            Err(seen) if start.elapsed() > DEADLINE => {
                panic!("timed out waiting for {what}; last seen: {seen}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// A simulated management cluster without a control plane (nothing runs pods there), with
/// Nave's CRDs installed and served, and its client.
pub async fn management_cluster() -> (SimCluster, kube::Client) {
    nave_sim::install_crypto_provider();
    let management = SimCluster::start(
        ClusterConfig {
            name: "management".to_owned(),
            ..ClusterConfig::default()
        },
        ServeOptions {
            control_plane: false,
            ..ServeOptions::default()
        },
    )
    .await
    .expect("start the simulated management cluster");
    let client = management
        .client()
        .await
        .expect("client of the management cluster");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in nave_api::crds() {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("install a CRD");
    }
    let mcds: Api<MultiClusterDeployment> = Api::all(client.clone());
    wait_for("the MultiClusterDeployment API to be served", || async {
        mcds.list(&ListParams::default())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await;
    (management, client)
}

/// The hub running against a management cluster.
pub struct Hub {
    /// Its base URL.
    pub base: String,
    /// Its store's URL.
    pub database_url: String,
    /// Stops it.
    pub shutdown: CancellationToken,
    /// Its task: what `run_until` returned.
    pub task: tokio::task::JoinHandle<Result<(), nave_hub::Error>>,
}

/// Starts the hub with its files (kubeconfig, bootstrap token, SQLite store) in `dir`, on a free
/// loopback port; `configure` adjusts the arguments first (tokens, failover rules).
pub fn start_hub(management: &SimCluster, dir: &Path, configure: impl FnOnce(&mut RunArgs)) -> Hub {
    let kubeconfig = dir.join("kubeconfig");
    management.write_kubeconfig(&kubeconfig).unwrap();
    let token_file = dir.join("bootstrap-token");
    std::fs::write(&token_file, format!("{BOOTSTRAP}\n")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let database_url = format!("sqlite://{}", dir.join("hub.db").display());
    let mut args = RunArgs {
        database_url: database_url.clone(),
        listen: ([127, 0, 0, 1], port).into(),
        bootstrap_token_file: token_file,
        api_tokens_file: None,
        api_tokens_secret: None,
        kubeconfig: Some(kubeconfig),
        log_json: false,
        failover: FailoverArgs::default(),
        prometheus: nave_hub::cli::PrometheusArgs::default(),
    };
    configure(&mut args);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(nave_hub::run_until(args, shutdown.clone()));
    Hub {
        base: format!("http://127.0.0.1:{port}"),
        database_url,
        shutdown,
        task,
    }
}

/// A cluster of `nodes` identical nodes, each with `allocatable` and `requested` already taken,
/// as an agent reports it.
pub fn capacity(prefix: &str, nodes: u64, allocatable: Resources, requested: Resources) -> CapacityModel {
    let list: Vec<_> = (0..nodes)
        .map(|i| NodeCapacity {
            name: format!("{prefix}-{i}"),
            allocatable,
            requested,
            ready: true,
            unschedulable: false,
        })
        .collect();
    let times = |r: Resources| Resources::new(r.cpu_millis * nodes, r.memory_bytes * nodes, r.pods * nodes);
    CapacityModel {
        totals: CapacityTotals {
            nodes,
            schedulable_nodes: nodes,
            allocatable: times(allocatable),
            requested: times(requested),
        },
        node_groups: vec![NodeGroup {
            labels: BTreeMap::new(),
            taints: Vec::new(),
            nodes: list,
        }],
    }
}

/// Registers with the bootstrap token, retrying until the hub answers; the agent's credential.
pub async fn register(http: &reqwest::Client, base: &str, request: &RegisterRequest) -> String {
    let cluster = &request.cluster_name;
    let response: RegisterResponse = wait_for(&format!("{cluster} to register"), || async {
        let res = http
            .post(format!("{base}{}", wire::REGISTER_PATH))
            .bearer_auth(BOOTSTRAP)
            .json(request)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !res.status().is_success() {
            return Err(format!("status {}", res.status()));
        }
        res.json().await.map_err(|e| e.to_string())
    })
    .await;
    response.credential
}

/// Sends one heartbeat and returns the hub's answer; anything but `200` with a
/// [`wire::HeartbeatAnswer`] fails the test.
pub async fn heartbeat(
    http: &reqwest::Client,
    base: &str,
    credential: &str,
    beat: &Heartbeat,
) -> wire::HeartbeatAnswer {
    let cluster = beat.cluster_name.as_deref().unwrap_or_default();
    let res = http
        .post(format!("{base}{}", wire::HEARTBEAT_PATH))
        .bearer_auth(credential)
        .json(beat)
        .send()
        .await
        .unwrap_or_else(|e| panic!("heartbeat of {cluster}: {e}"));
    assert_eq!(res.status(), 200, "heartbeat of {cluster}");
    res.json()
        .await
        .unwrap_or_else(|e| panic!("heartbeat answer of {cluster}: {e}"))
}

/// Registers `cluster` and sends one heartbeat with `capacity`.
pub async fn join(http: &reqwest::Client, base: &str, cluster: &str, capacity: CapacityModel) {
    let request = RegisterRequest {
        cluster_name: cluster.to_owned(),
        agent_version: "0.1.0".to_owned(),
        ..RegisterRequest::default()
    };
    let credential = register(http, base, &request).await;
    let beat = Heartbeat {
        cluster_name: Some(cluster.to_owned()),
        agent_version: "0.1.0".to_owned(),
        capacity,
        ..Heartbeat::default()
    };
    heartbeat(http, base, &credential, &beat).await;
}

/// The cluster's current work set (no long-poll).
pub async fn work(http: &reqwest::Client, base: &str, credential: &str, cluster: &str) -> WorkSet {
    let res = http
        .get(format!("{base}{}", wire::WORK_PATH))
        .bearer_auth(credential)
        .send()
        .await
        .unwrap_or_else(|e| panic!("work of {cluster}: {e}"));
    assert_eq!(res.status(), 200, "work of {cluster}");
    res.json().await.expect("a work set")
}
