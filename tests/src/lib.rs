//! End-to-end harness: simulated clusters (nave-sim), the real hub and one real agent per
//! workload cluster, all on real sockets in one process, each part stoppable and restartable.
//!
//! ```text
//!   management cluster (nave-sim, CRDs) ◄── hub (run_until; SQLite file or Postgres schema)
//!                                                ▲ /agent/v1 over HTTP
//!   workload cluster <name> (nave-sim)  ◄── agent (run_agent), one per cluster
//! ```
//!
//! The management cluster gets Nave's CRDs and the declared fleet as the playground
//! (`nave-playground`) gives them, through its [`nave_playground::up`] functions.
//!
//! The hub and the agents are the library entry points the binaries call, so a test exercises
//! the same code as `nave-hub run` and `nave-agent`, only without process boundaries. The
//! benchmark (`benches/e2e.rs`) runs them as separate processes to measure their memory.
//!
//! [`rbac`] reads the simulated clusters' request logs as the API server's authorizer would, so
//! `tests/helm.rs` can hold the Helm charts' RBAC rules to what the hub and agents really do.

//! With [`EnvOptions::prometheus`], a real Prometheus server ([`prometheus`]) scrapes every
//! workload cluster (label `cluster`), every agent and the hub once a second, and the hub reads
//! usage from it (`--prometheus-url`):
//!
//! ```text
//!   prometheus (binary, own port/config/data) ──scrape──► clusters' /metrics, agents, hub
//!        ▲ PromQL (usage by cluster)
//!   hub ─┘
//! ```

#![forbid(unsafe_code)]

pub mod procs;
pub mod prometheus;
pub mod rbac;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use nave_api::MultiClusterDeployment;
use nave_api::wire::WORKLOAD_LABEL;
use nave_sim::config::FleetConfig;
use nave_sim::{ClusterConfig, ServeOptions, SimCluster, SimFleet};
use nave_testkit::wait_for;
use serde_json::Value;
use sqlx::Executor as _;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Longest a test waits for the fleet to converge before it fails.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Environment variable naming the Postgres database of the Postgres cases.
pub const PG_URL_VAR: &str = "NAVE_TEST_DATABASE_URL";

/// Where the hub keeps its state.
#[derive(Debug, Clone)]
pub enum Database {
    /// A SQLite file in the environment's directory.
    Sqlite,
    /// A fresh schema, created for this environment and dropped at shutdown, in the database
    /// at this URL.
    Postgres(String),
}

impl Database {
    /// Postgres from [`PG_URL_VAR`], or `None` (after printing a `skipped:` line naming `case`)
    /// when it is not set, as in the store's conformance suite.
    pub fn postgres_or_skip(case: &str) -> Option<Database> {
        match std::env::var(PG_URL_VAR) {
            Ok(url) if !url.is_empty() => Some(Database::Postgres(url)),
            _ => {
                println!("skipped: {PG_URL_VAR} is not set ({case} on Postgres)");
                None
            }
        }
    }
}

/// What an [`Env`] runs besides the clusters, the hub and the agents.
#[derive(Debug, Clone, Default)]
pub struct EnvOptions {
    /// Run Prometheus (the binary, which [`prometheus::binary_or_skip`] finds) scraping the
    /// clusters, the agents and the hub, and point the hub at it; the agents serve `/metrics`.
    pub prometheus: Option<PathBuf>,
    /// The hub's Prometheus settings (queries, TTL); the URL is filled in.
    pub hub_prometheus: nave_hub::cli::PrometheusArgs,
    /// Elect the hub as a leader through the Lease of this name in [`HUB_NAMESPACE`], as the
    /// chart's replicas on Postgres do.
    pub leader_election: Option<String>,
    /// The hub's provisioner webhook settings.
    pub hub_provisioner: nave_hub::cli::ProvisionerArgs,
    /// Clusters whose agents do not start with the environment (declared, not joined), until
    /// [`Env::start_agent`] starts them.
    pub dormant: Vec<String>,
    /// How the hub evaluates MultiClusterHorizontalPodAutoscalers.
    pub hub_autoscale: nave_hub::cli::AutoscaleArgs,
    /// Run the hub with `--drop-in` (annotated Deployments of the management cluster).
    pub hub_drop_in: bool,
    /// The kinds the hub's MultiClusterResources may send.
    pub hub_resources: nave_hub::cli::ResourceArgs,
    /// Kinds the agents apply (`--allow-kind`), by cluster; a cluster not named keeps the
    /// agent's defaults.
    pub agent_allow_kinds: BTreeMap<String, Vec<String>>,
    /// The hub's heartbeat grace (`--heartbeat-grace`): how long a silent cluster stays Ready
    /// before it fails over. Default: the hub's own (40 s).
    pub heartbeat_grace: Option<Duration>,
}

/// Namespace of the hub's Lease when the environment elects a leader.
pub const HUB_NAMESPACE: &str = "nave-system";

/// A running part (hub or agent) and how to stop it.
#[derive(Debug)]
struct Running {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// The management cluster, the fleet, the hub and the agents.
pub struct Env {
    /// The simulated management cluster (Nave's CRDs installed).
    pub management: SimCluster,
    /// The simulated workload clusters.
    pub fleet: SimFleet,
    /// Client of the management cluster.
    pub client: kube::Client,
    /// The hub's base URL (agent endpoints and the REST API).
    pub hub_url: String,
    /// A token of the REST API with the `admin` scope.
    pub admin_token: String,
    /// The hub's CA and serving certificate.
    pub pki: nave_testkit::TestPki,
    /// The hub's metrics listener (`/metrics`, `/healthz`, `/readyz`), plain HTTP.
    pub hub_metrics_url: String,
    fleet_config: FleetConfig,
    dir: tempfile::TempDir,
    hub_args: nave_hub::cli::RunArgs,
    hub: Option<Running>,
    agents: BTreeMap<String, Running>,
    clients: BTreeMap<String, kube::Client>,
    postgres: Option<(String, String)>,
    /// Where each agent serves `/metrics`, `/healthz` and `/probe`.
    agent_metrics: BTreeMap<String, SocketAddr>,
    prometheus: Option<nave_playground::prometheus::Prometheus>,
    /// `--allow-kind` of the agents, by cluster.
    agent_allow_kinds: BTreeMap<String, Vec<String>>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env")
            .field("hub_url", &self.hub_url)
            .field("clusters", &self.cluster_names())
            .field("hub_running", &self.hub.is_some())
            .field("agents_running", &self.agents.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The multi-cluster services API's ServiceExport CRD (`multicluster.x-k8s.io/v1alpha1`), as an
/// MCS implementation installs it in a workload cluster, its schema reduced to an open object.
pub fn service_export_crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "serviceexports.multicluster.x-k8s.io"},
        "spec": {
            "group": "multicluster.x-k8s.io",
            "scope": "Namespaced",
            "names": {"plural": "serviceexports", "singular": "serviceexport", "kind": "ServiceExport"},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true
                }}
            }]
        }
    }))
    .expect("the ServiceExport CRD parses")
}

/// The ServiceExports in `namespace` of workload cluster `cluster`.
pub fn service_exports(env: &Env, cluster: &str, namespace: &str) -> Api<kube::api::DynamicObject> {
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ServiceExport"),
        "serviceexports",
    );
    Api::namespaced_with(env.cluster_client(cluster), namespace, &resource)
}

/// The default fleet of the end-to-end tests: `n` clusters of different sizes and regions, as
/// the playground has.
pub fn fleet(n: usize) -> FleetConfig {
    nave_playground::up::default_fleet(n)
}

impl Env {
    /// Starts everything and waits until every workload cluster has reported its capacity.
    pub async fn start(fleet_config: FleetConfig, database: Database) -> anyhow::Result<Env> {
        Env::start_with(fleet_config, database, EnvOptions::default()).await
    }

    /// As [`Env::start`], with Prometheus when `options` ask for it; then also waits until
    /// Prometheus scrapes every target.
    pub async fn start_with(
        fleet_config: FleetConfig,
        database: Database,
        options: EnvOptions,
    ) -> anyhow::Result<Env> {
        if std::env::var_os("NAVE_TEST_LOG").is_some() {
            // The hub's and agents' logs, filtered by RUST_LOG, for a failing test.
            nave_runtime::init_tracing(false);
        }
        let dir = tempfile::tempdir().context("a temporary directory")?;
        let management = SimCluster::start(
            ClusterConfig {
                name: nave_playground::up::MANAGEMENT_CLUSTER.to_owned(),
                ..ClusterConfig::default()
            },
            ServeOptions::default(),
        )
        .await?;
        let client = management.client().await?;
        nave_playground::up::install_crds(&client).await?;
        let fleet = SimFleet::start(fleet_config.clone(), ServeOptions::default()).await?;
        nave_playground::up::declare_clusters(&client, &fleet_config).await?;
        let kubeconfig = dir.path().join("kubeconfig");
        management.write_kubeconfig(&kubeconfig)?;
        let token_file = dir.path().join("bootstrap-token");
        std::fs::write(&token_file, uuid::Uuid::new_v4().simple().to_string())?;

        let (database_url, postgres) = match database {
            Database::Sqlite => (format!("sqlite://{}", dir.path().join("hub.db").display()), None),
            Database::Postgres(url) => {
                let schema = format!("e2e_{}", uuid::Uuid::new_v4().simple());
                let pool = sqlx::PgPool::connect(&url)
                    .await
                    .with_context(|| format!("connecting to {PG_URL_VAR}"))?;
                pool.execute(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
                    .await
                    .with_context(|| format!("creating schema {schema}"))?;
                pool.close().await;
                let separator = if url.contains('?') { '&' } else { '?' };
                (
                    format!("{url}{separator}options=-c%20search_path%3D{schema}"),
                    Some((url, schema)),
                )
            }
        };
        let admin_token = uuid::Uuid::new_v4().simple().to_string();
        let api_tokens = dir.path().join("api-tokens");
        std::fs::write(&api_tokens, format!("admin {admin_token}\n"))?;
        // The hub, Prometheus and each agent's metrics: distinct ports, chosen together. The hub
        // binds an address rather than taking a listener, and keeps it across restarts, as a
        // Service would.
        let mut ports = nave_testkit::free_loopback_ports(3 + fleet.clusters.len())?;
        let agent_ports = ports.split_off(3);
        let (listen, metrics_listen, prometheus_addr) = (ports[0], ports[1], ports[2]);
        // HTTPS with a CA made for this environment, pinned by the agents as a join token's hash
        // would be.
        let pki = nave_testkit::TestPki::generate(dir.path(), "hub");
        let hub_url = format!("https://{listen}");
        let hub_metrics_url = format!("http://{metrics_listen}");
        // Secret payloads sealed at rest, as the chart sets the hub up.
        let store_key = dir.path().join("store-key");
        std::fs::write(&store_key, uuid::Uuid::new_v4().simple().to_string())?;
        // Every agent serves its listener: Prometheus scrapes `/metrics` when it runs, and the
        // other agents probe `/probe`.
        let agent_metrics: BTreeMap<String, SocketAddr> = fleet
            .clusters
            .iter()
            .zip(&agent_ports)
            .map(|(c, port)| (c.name().to_owned(), *port))
            .collect();
        let mut prometheus = None;
        let mut hub_prometheus = options.hub_prometheus.clone();
        if let Some(binary) = &options.prometheus {
            let targets =
                nave_playground::up::scrape_targets(&fleet, dir.path(), &hub_metrics_url, &agent_ports)?;
            let server = nave_playground::prometheus::Prometheus::start_at(
                prometheus_addr,
                binary,
                &dir.path().join("prometheus"),
                &targets,
                prometheus::SCRAPE_INTERVAL,
            )
            .await?;
            hub_prometheus.prometheus_url = Some(server.url().to_owned());
            prometheus = Some(server);
        }
        let hub_args = nave_hub::cli::RunArgs {
            drop_in: options.hub_drop_in,
            resources: options.hub_resources.clone(),
            autoscale: options.hub_autoscale.clone(),
            provisioner: options.hub_provisioner.clone(),
            database_url,
            listen,
            metrics_listen,
            bootstrap_token_file: token_file,
            tls_cert_file: Some(pki.chain_file.clone()),
            tls_key_file: Some(pki.key_file.clone()),
            store_key_file: Some(store_key),
            accept_new_clusters: true,
            max_unaccepted_clusters: 100,
            api_tokens_file: Some(api_tokens),
            api_tokens_secret: None,
            kubeconfig: Some(kubeconfig),
            log_json: false,
            failover: nave_hub::cli::FailoverArgs {
                heartbeat_grace: options
                    .heartbeat_grace
                    .unwrap_or(nave_hub::cli::FailoverArgs::default().heartbeat_grace),
                ..nave_hub::cli::FailoverArgs::default()
            },
            prometheus: hub_prometheus,
            leader_election: nave_hub::cli::LeaderElectionArgs {
                leader_elect: options.leader_election.is_some(),
                leader_election_lease: options
                    .leader_election
                    .clone()
                    .unwrap_or_else(|| "nave-hub".to_owned()),
                leader_election_namespace: Some(HUB_NAMESPACE.to_owned()),
                leader_election_identity: Some("nave-hub-0".to_owned()),
                ..nave_hub::cli::LeaderElectionArgs::default()
            },
        };
        if options.leader_election.is_some() {
            let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
            namespaces
                .create(
                    &kube::api::PostParams::default(),
                    &serde_json::from_value(serde_json::json!({"metadata": {"name": HUB_NAMESPACE}}))?,
                )
                .await
                .context("creating the hub's namespace")?;
        }
        let mut env = Env {
            management,
            fleet,
            client,
            hub_url,
            admin_token,
            pki,
            hub_metrics_url,
            fleet_config,
            dir,
            hub_args,
            hub: None,
            agents: BTreeMap::new(),
            clients: BTreeMap::new(),
            postgres,
            agent_metrics,
            prometheus,
            agent_allow_kinds: options.agent_allow_kinds.clone(),
        };
        std::fs::create_dir_all(env.dir.path().join("clusters"))?;
        for c in &env.fleet.clusters {
            env.clients.insert(c.name().to_owned(), c.client().await?);
            c.write_kubeconfig(&env.agent_kubeconfig(c.name()))?;
        }
        env.start_hub().await?;
        for name in env.cluster_names() {
            if !options.dormant.contains(&name) {
                env.start_agent(&name)?;
            }
        }
        let mut joined = env.fleet_config.clone();
        joined.clusters.retain(|c| !options.dormant.contains(&c.name));
        nave_playground::up::wait_fleet_reporting(&env.client, &joined, DEADLINE).await?;
        if let Some(prometheus) = &env.prometheus {
            prometheus.wait_targets_up(DEADLINE).await?;
        }
        Ok(env)
    }

    /// The Prometheus server, when the environment runs one.
    pub fn prometheus(&self) -> Option<&nave_playground::prometheus::Prometheus> {
        self.prometheus.as_ref()
    }

    /// Stops Prometheus (the hub's queries fail from then on).
    pub async fn stop_prometheus(&mut self) {
        if let Some(prometheus) = self.prometheus.take() {
            prometheus.stop().await;
        }
    }

    /// `GET` of the hub's REST API at `path` (under `/api/v1`) with the admin token; the JSON
    /// body, or what went wrong.
    pub async fn rest(&self, path: &str) -> Result<Value, String> {
        let url = format!("{}/api/v1{path}", self.hub_url);
        let res = self
            .http()
            .get(&url)
            .bearer_auth(&self.admin_token)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = res.status();
        let body: Value = res.json().await.map_err(|e| format!("GET {url}: {e}"))?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(format!("GET {url}: {status} {body}"))
        }
    }

    /// An HTTP client of the hub that trusts the hub's CA.
    pub fn http(&self) -> reqwest::Client {
        let pem = std::fs::read(&self.pki.ca_file).expect("the hub's CA file");
        reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("a PEM CA"))
            .build()
            .expect("an HTTP client")
    }

    /// The workload clusters' names, in order.
    pub fn cluster_names(&self) -> Vec<String> {
        self.fleet_config
            .clusters
            .iter()
            .map(|c| c.name.clone())
            .collect()
    }

    /// The environment's directory (kubeconfig, bootstrap token, SQLite file).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Deletes the hub's SQLite store (with its journal files), as a lost volume would: stop the
    /// hub first.
    pub fn lose_sqlite_store(&self) {
        for file in ["hub.db", "hub.db-wal", "hub.db-shm"] {
            let path = self.dir().join(file);
            if path.exists() {
                std::fs::remove_file(&path).unwrap_or_else(|e| panic!("removing {}: {e}", path.display()));
            }
        }
    }

    /// The kubeconfig of workload cluster `name` the agent reads.
    fn agent_kubeconfig(&self, name: &str) -> PathBuf {
        self.dir
            .path()
            .join("clusters")
            .join(format!("{name}.kubeconfig"))
    }

    /// Client of a workload cluster.
    pub fn cluster_client(&self, name: &str) -> kube::Client {
        self.clients
            .get(name)
            .unwrap_or_else(|| panic!("no workload cluster named {name}"))
            .clone()
    }

    /// Starts the hub and waits until it answers on its port.
    pub async fn start_hub(&mut self) -> anyhow::Result<()> {
        if self.hub.is_some() {
            return Err(anyhow!("the hub is already running"));
        }
        let stop = CancellationToken::new();
        let args = self.hub_args.clone();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = nave_hub::run_until(args, token).await {
                tracing::error!(error = %e, "the hub stopped");
            }
        });
        self.hub = Some(Running { stop, task });
        let addr = self.hub_args.listen;
        wait_for("the hub to listen", DEADLINE, || async move {
            tokio::net::TcpStream::connect(addr)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .await;
        Ok(())
    }

    /// Stops the hub (its port closes; the agents keep their workloads and retry).
    pub async fn stop_hub(&mut self) {
        if let Some(hub) = self.hub.take() {
            hub.stop().await;
        }
    }

    /// Starts the agent of cluster `name`, with the same configuration every time.
    pub fn start_agent(&mut self, name: &str) -> anyhow::Result<()> {
        let token = self.hub_args.bootstrap_token_file.clone();
        self.start_agent_with(name, token)
    }

    /// As [`Env::start_agent`], registering (when it has no valid credential) with the token in
    /// `token_file` (a join token) instead of the fleet's bootstrap token.
    pub fn start_agent_with(&mut self, name: &str, token_file: PathBuf) -> anyhow::Result<()> {
        if self.agents.contains_key(name) {
            return Err(anyhow!("the agent of {name} is already running"));
        }
        let cluster = self
            .fleet_config
            .clusters
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| anyhow!("no workload cluster named {name}"))?;
        let mut config = nave_agent::Config::new(self.hub_url.clone(), name, token_file);
        config.region = cluster.region.clone();
        config.zone = cluster.zone.clone();
        config.labels = cluster.labels.clone();
        // The agent trusts the hub's CA by its hash alone, as given with a join token.
        config.trust = nave_agent::hub::HubTrust {
            ca_sha256: Some(self.pki.ca_sha256.clone()),
            ..Default::default()
        };
        // Quick retries: the tests restart the hub and want the agents back soon. Frequent
        // heartbeats: the adaptive tests wait for capacity changes to reach the hub.
        config.retry_max = Duration::from_secs(2);
        config.heartbeat_interval = Some(Duration::from_secs(1));
        // The agent builds its client as the binary does (and so sends its User-Agent), apart
        // from the clients the tests use.
        let kubeconfig = self.agent_kubeconfig(name);
        config.metrics_listen = self.agent_metrics.get(name).copied();
        config.probe_url = config
            .metrics_listen
            .map(|addr| format!("http://{addr}{}", nave_agent::probe::PROBE_PATH));
        config.probe_interval = Duration::from_secs(1);
        config.link_latency = self.fleet_config.link_latency(name);
        if let Some(kinds) = self.agent_allow_kinds.get(name) {
            config.allow_kinds = kinds.clone();
        }
        let stop = CancellationToken::new();
        let token = stop.clone();
        let owned = name.to_owned();
        let task = tokio::spawn(async move {
            let run = async {
                let client = nave_agent::kube_client(Some(&kubeconfig)).await?;
                nave_agent::run_agent(config, client, token).await
            };
            if let Err(e) = run.await {
                tracing::error!(cluster = %owned, error = %e, "an agent stopped");
            }
        });
        self.agents.insert(name.to_owned(), Running { stop, task });
        Ok(())
    }

    /// Sets the emulated round trip between `a` and `b` (a cluster, or `hub`) from now on.
    /// Agents already running keep what they were started with: restart them to apply it.
    pub fn set_link(&mut self, a: &str, b: &str, rtt: Duration) {
        let links = &mut self.fleet_config.network.links;
        links.retain(|l| !(l.between.contains(&a.to_owned()) && l.between.contains(&b.to_owned())));
        links.push(nave_sim::Link {
            between: [a.to_owned(), b.to_owned()],
            rtt_millis: u64::try_from(rtt.as_millis()).unwrap_or(u64::MAX),
        });
    }

    /// The base URL of workload cluster `name`'s API server (its test hooks are under `/_sim/v1`).
    pub fn cluster_url(&self, name: &str) -> String {
        self.fleet
            .clusters
            .iter()
            .find(|c| c.name() == name)
            .map(|c| c.url().to_owned())
            .unwrap_or_else(|| panic!("no workload cluster named {name}"))
    }

    /// The value of the hub's series `series` (its name and labels as `/metrics` writes them,
    /// e.g. `nave_unplaced_replicas` or `nave_mcd_failing{namespace="a",name="b",cluster="c"}`),
    /// or why there is none.
    pub async fn hub_metric(&self, series: &str) -> Result<f64, String> {
        series_value(&self.hub_metrics_url, series).await
    }

    /// Sets the requests per second arriving at workload cluster `cluster`'s simulated ingress
    /// for Service `namespace/service` (0 removes them); see nave-sim's `PUT /traffic`.
    ///
    /// # Panics
    ///
    /// When the simulator does not take it.
    pub async fn set_traffic(&self, cluster: &str, namespace: &str, service: &str, requests_per_second: f64) {
        let answer = reqwest::Client::new()
            .put(format!(
                "{}/_sim/v1/traffic/{namespace}/{service}",
                self.cluster_url(cluster)
            ))
            .json(&serde_json::json!({"requestsPerSecond": requests_per_second}))
            .send()
            .await
            .unwrap_or_else(|e| panic!("setting {cluster}'s traffic: {e}"));
        assert!(
            answer.status().is_success(),
            "setting {cluster}'s traffic of {namespace}/{service}: {}",
            answer.status()
        );
    }

    /// Stops the agent of cluster `name` (what it applied keeps running).
    pub async fn stop_agent(&mut self, name: &str) {
        if let Some(agent) = self.agents.remove(name) {
            agent.stop().await;
        }
    }

    /// Waits until every WorkloadCluster reports capacity (every agent has heartbeated).
    pub async fn wait_fleet_reporting(&self) -> anyhow::Result<()> {
        nave_playground::up::wait_fleet_reporting(&self.client, &self.fleet_config, DEADLINE).await
    }

    /// The workload's Deployments in every workload cluster, found by the label the agent puts
    /// on what it applies.
    pub async fn deployments(&self, namespace: &str, name: &str) -> BTreeMap<String, Vec<Deployment>> {
        let selector = format!("{WORKLOAD_LABEL}={namespace}.{name}");
        let mut out = BTreeMap::new();
        for (cluster, client) in &self.clients {
            let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
            let list = api
                .list(&ListParams::default().labels(&selector))
                .await
                .unwrap_or_else(|e| panic!("listing Deployments in {cluster}: {e}"));
            if !list.items.is_empty() {
                out.insert(cluster.clone(), list.items);
            }
        }
        out
    }

    /// The workload's pods that are not ready, per cluster: name, node, phase and why not
    /// scheduled or ready (for failure messages).
    pub async fn pods_not_ready(&self, namespace: &str, name: &str) -> BTreeMap<String, Vec<String>> {
        let selector = format!("{WORKLOAD_LABEL}={namespace}.{name}");
        let mut out = BTreeMap::new();
        for (cluster, client) in &self.clients {
            let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let Ok(list) = api.list(&ListParams::default().labels(&selector)).await else {
                continue;
            };
            let not_ready: Vec<String> = list
                .items
                .iter()
                .filter_map(|pod| {
                    let status = pod.status.as_ref();
                    let conditions = status.and_then(|s| s.conditions.as_ref());
                    let ready = conditions
                        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                    let why: Vec<String> = conditions
                        .into_iter()
                        .flatten()
                        .filter(|c| c.status != "True")
                        .map(|c| format!("{}: {}", c.type_, c.message.clone().unwrap_or_default()))
                        .collect();
                    (!ready).then(|| {
                        format!(
                            "{} on {:?} {:?} deleting {} {why:?}",
                            pod.metadata.name.clone().unwrap_or_default(),
                            pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                            status.and_then(|s| s.phase.clone()),
                            pod.metadata.deletion_timestamp.is_some(),
                        )
                    })
                })
                .collect();
            if !not_ready.is_empty() {
                out.insert(cluster.clone(), not_ready);
            }
        }
        out
    }

    /// Replicas of the workload's Deployment per cluster (clusters without one are absent).
    pub async fn replicas_by_cluster(&self, namespace: &str, name: &str) -> BTreeMap<String, i32> {
        self.deployments(namespace, name)
            .await
            .into_iter()
            .map(|(cluster, ds)| {
                let replicas = ds.iter().map(|d| d.spec.replicas.unwrap_or(1)).sum();
                (cluster, replicas)
            })
            .collect()
    }

    /// Creates the namespace `name` in the management cluster, opened to the drop-in path
    /// (labelled `nave.dev/drop-in=enabled`) when `open`.
    pub async fn create_namespace(&self, name: &str, open: bool) {
        let labels = if open {
            serde_json::json!({nave_api::DROP_IN_NAMESPACE_LABEL: nave_hub::dropin::NAMESPACE_ENABLED})
        } else {
            serde_json::json!({})
        };
        let namespace: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name, "labels": labels}}))
                .expect("a Namespace");
        Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone())
            .create(&kube::api::PostParams::default(), &namespace)
            .await
            .expect("namespace created");
    }

    /// Registers the hub's drop-in admission webhook in the management cluster as the chart
    /// does, but by URL (the simulator reaches no Service), trusting the environment's CA.
    pub async fn register_drop_in_webhook(&self) {
        use base64::Engine;
        let ca = std::fs::read(&self.pki.ca_file).expect("the test CA");
        let body = serde_json::json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "nave-hub-drop-in"},
            "webhooks": [{
                "name": "pods.drop-in.nave.dev",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "clientConfig": {
                    "url": format!("{}{}", self.hub_url, nave_hub::dropin::WEBHOOK_PATH),
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
                },
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                           "operations": ["CREATE"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {
                    nave_api::DROP_IN_NAMESPACE_LABEL: nave_hub::dropin::NAMESPACE_ENABLED}},
                "objectSelector": {"matchExpressions": [{"key": "pod-template-hash", "operator": "Exists"}]},
            }],
        });
        let gvk = kube::core::GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
        );
        let api: Api<kube::api::DynamicObject> =
            Api::all_with(self.client.clone(), &kube::core::ApiResource::from_gvk(&gvk));
        let object: kube::api::DynamicObject = serde_json::from_value(body).expect("a configuration");
        api.create(&kube::api::PostParams::default(), &object)
            .await
            .expect("webhook registered");
    }

    /// Waits for an Event with `reason` on the object `name` in `namespace` and returns its note.
    pub async fn event(&self, namespace: &str, name: &str, reason: &str) -> String {
        let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(self.client.clone(), namespace);
        wait_for(&format!("a {reason} event on {name}"), DEADLINE, || {
            let events = events.clone();
            async move {
                let list = events
                    .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
                    .await
                    .map_err(|e| e.to_string())?;
                list.items
                    .iter()
                    .find(|e| e.reason.as_deref() == Some(reason))
                    .map(|e| e.message.clone().unwrap_or_default())
                    .ok_or_else(|| {
                        let seen: Vec<_> = list.items.iter().filter_map(|e| e.reason.clone()).collect();
                        format!("reasons {seen:?}")
                    })
            }
        })
        .await
    }

    /// Waits until the MCD `name` is fully rolled out: every wanted replica placed and ready,
    /// and each cluster's Deployment holding what status says it was given. Returns the MCD.
    pub async fn wait_rolled_out(
        &self,
        namespace: &str,
        name: &str,
        replicas: i32,
    ) -> MultiClusterDeployment {
        let api: Api<MultiClusterDeployment> = Api::namespaced(self.client.clone(), namespace);
        wait_for(
            &format!("{namespace}/{name} to run {replicas} ready replicas"),
            DEADLINE,
            || {
                let api = api.clone();
                async move {
                    let mcd = api.get(name).await.map_err(|e| e.to_string())?;
                    let status = mcd.status.clone().unwrap_or_default();
                    let current = mcd.metadata.generation == status.observed_generation;
                    let placed: BTreeMap<String, i32> =
                        status.clusters.iter().map(|c| (c.name.clone(), c.desired)).collect();
                    let running = self.replicas_by_cluster(namespace, name).await;
                    let not_ready = self.pods_not_ready(namespace, name).await;
                    if current
                        && status.replicas == replicas
                        && status.ready_replicas == replicas
                        && status.available_replicas == replicas
                        && placed == running
                    {
                        Ok(mcd)
                    } else {
                        Err(format!(
                            "generation {:?} observed {:?}, placed {placed:?}, running {running:?}, ready {} of {}, conditions {:?}, pods not ready {not_ready:?}",
                            mcd.metadata.generation,
                            status.observed_generation,
                            status.ready_replicas,
                            status.replicas,
                            status
                                .conditions
                                .iter()
                                .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                                .collect::<Vec<_>>()
                        ))
                    }
                }
            },
        )
        .await
    }

    /// Waits until the MCD `name` is gone: its finalizer ran, so its objects left every cluster's
    /// work set.
    pub async fn wait_mcd_gone(&self, namespace: &str, name: &str) {
        let api: Api<MultiClusterDeployment> = Api::namespaced(self.client.clone(), namespace);
        wait_for(&format!("{namespace}/{name} to be gone"), DEADLINE, || {
            let api = api.clone();
            async move {
                match api.get_opt(name).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(m) => Err(format!("still there, finalizers {:?}", m.metadata.finalizers)),
                }
            }
        })
        .await;
    }

    /// Stops the agents and the hub, then the clusters; drops the Postgres schema.
    pub async fn shutdown(mut self) {
        let names: Vec<String> = self.agents.keys().cloned().collect();
        for name in names {
            self.stop_agent(&name).await;
        }
        self.stop_hub().await;
        self.stop_prometheus().await;
        self.fleet.shutdown().await;
        self.management.shutdown().await;
        if let Some((url, schema)) = self.postgres.take()
            && let Ok(pool) = sqlx::PgPool::connect(&url).await
        {
            let _ = pool
                .execute(sqlx::AssertSqlSafe(format!("DROP SCHEMA \"{schema}\" CASCADE")))
                .await;
            pool.close().await;
        }
    }
}

/// Replicas per cluster as the MCD's status gives them (clusters given none left out).
pub fn placed(mcd: &MultiClusterDeployment) -> BTreeMap<String, i32> {
    mcd.status
        .iter()
        .flat_map(|s| &s.clusters)
        // Listed with none: old replicas a move keeps, or that their agent has yet to remove.
        .filter(|c| c.desired > 0)
        .map(|c| (c.name.clone(), c.desired))
        .collect()
}

/// The image of a Deployment's first container (empty when it has none).
pub fn image_of(deployment: &Deployment) -> String {
    deployment
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// Where `path` points in a kubeconfig-less world: the environment's files, for commands that
/// need them (kubectl in the benchmark).
pub fn kubeconfig_path(env: &Env) -> PathBuf {
    env.dir().join("kubeconfig")
}

/// The value of series `series` (its name and labels as `/metrics` writes them) in what
/// `{metrics_url}/metrics` answers, or why there is none.
pub async fn series_value(metrics_url: &str, series: &str) -> Result<f64, String> {
    let text = reqwest::get(format!("{metrics_url}/metrics"))
        .await
        .map_err(|e| e.to_string())?
        .text()
        .await
        .map_err(|e| e.to_string())?;
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .ok_or_else(|| format!("no {series} in {metrics_url}/metrics"))?;
    value
        .trim()
        .parse()
        .map_err(|e| format!("{series} {value:?}: {e}"))
}
