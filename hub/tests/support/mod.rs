//! What the hub's integration tests share: a simulated management cluster with Nave's CRDs and
//! the hub on a real socket over a SQLite store. Each test speaks the agent protocol itself
//! (`nave_testkit::FakeAgent`), so it controls exactly what the hub hears.

#![allow(dead_code)]

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use nave_api::MultiClusterDeployment;
use nave_hub::cli::{FailoverArgs, RunArgs};
use nave_sim::{ClusterConfig, ServeOptions, SimCluster};
use nave_testkit::{BOOTSTRAP, DEADLINE, wait_for};
use tokio_util::sync::CancellationToken;

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
    wait_for(
        "the MultiClusterDeployment API to be served",
        DEADLINE,
        || async {
            mcds.list(&ListParams::default())
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    (management, client)
}

/// The hub running against a management cluster.
pub struct Hub {
    /// Its base URL.
    pub base: String,
    /// Its metrics listener's base URL (`/metrics`, `/healthz`, `/readyz`).
    pub metrics: String,
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
    let ports = nave_testkit::free_loopback_ports(2).expect("two free loopback ports");
    let (port, metrics_port) = (ports[0].port(), ports[1].port());
    let database_url = format!("sqlite://{}", dir.join("hub.db").display());
    let mut args = RunArgs {
        drop_in: false,
        resources: Default::default(),
        autoscale: Default::default(),
        provisioner: Default::default(),
        database_url: database_url.clone(),
        listen: ([127, 0, 0, 1], port).into(),
        metrics_listen: ([127, 0, 0, 1], metrics_port).into(),
        bootstrap_token_file: token_file,
        tls_cert_file: None,
        tls_key_file: None,
        store_key_file: None,
        accept_new_clusters: true,
        max_unaccepted_clusters: 100,
        api_tokens_file: None,
        api_tokens_secret: None,
        kubeconfig: Some(kubeconfig),
        log_json: false,
        failover: FailoverArgs::default(),
        prometheus: nave_hub::cli::PrometheusArgs::default(),
        leader_election: nave_hub::cli::LeaderElectionArgs::default(),
    };
    configure(&mut args);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(nave_hub::run_until(args, shutdown.clone()));
    Hub {
        base: format!("http://127.0.0.1:{port}"),
        metrics: format!("http://127.0.0.1:{metrics_port}"),
        database_url,
        shutdown,
        task,
    }
}
