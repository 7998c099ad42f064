//! `nave-sim up`: the playground.  One process serves a simulated management cluster with Nave's
//! custom resources installed, the hub (SQLite under the directory), a fleet of simulated workload
//! clusters with one agent each, and writes everything a user needs to talk to them.
//!
//! ```text
//!   .nave/kubeconfig ──► management cluster (CRDs: mcd, mcsvc, wcl) ◄── nave-hub ──► .nave/hub.db
//!                                                                         ▲ /agent/v1
//!   .nave/admin-token (+ api-tokens) ──► REST API /api/v1 of the hub ──────────┘
//!   .nave/clusters/<name>.kubeconfig ──► workload cluster <name> ◄── nave-agent (one per cluster)
//!   .nave/prometheus/  when `prometheus` is on PATH: it scrapes every cluster (label `cluster`),
//!                      the hub and the agents, and the hub reads usage from it (--prometheus-url)
//!   .nave/ready.json   written last: every URL above is serving
//! ```
//!
//! Start-up is two steps, [`PlaygroundClusters::start`] (the clusters, the CRDs, the declared
//! fleet) then [`PlaygroundClusters::start_nave`] (the hub, the agents, the files), so that the
//! scenarios ([`crate::scenario`]) can put other tenants' pods in the clusters before Nave
//! arrives; [`Playground::start`] does both.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use nave_api::{WorkloadCluster, WorkloadClusterSpec};
use nave_sim::cluster::{ServeOptions, SimCluster, SimFleet};
use nave_sim::config::{ClusterConfig, Coordinates, FleetConfig, Link, NodePool};
use tokio_util::sync::CancellationToken;

use crate::prometheus::{self, CLUSTER_LABEL, Prometheus, ScrapeTarget};

/// Name of the simulated management cluster.
pub const MANAGEMENT_CLUSTER: &str = "management";

/// File under the directory holding the REST API's admin token.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// File under the directory holding the hub's REST API tokens (`<scope> <token>` lines).
pub const API_TOKENS_FILE: &str = "api-tokens";

/// What `up` serves and where it writes.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// The workload clusters.
    pub fleet: FleetConfig,
    /// Directory for kubeconfigs and `ready.json`.
    pub dir: PathBuf,
    /// Serve HTTPS with generated CAs.
    pub tls: bool,
    /// Start Prometheus too when its binary is on `PATH`.
    pub prometheus: bool,
    /// The agents' heartbeat interval; `None` takes the hub's (10 s). Scenarios that compress
    /// time shorten it so the hub sees capacity change at the pace of the scenario.
    pub agent_heartbeat: Option<Duration>,
    /// The longest time between two status reports of an agent; `None` keeps the agent's default.
    pub agent_status_interval: Option<Duration>,
    /// Time between two rounds of the agents' probes of each other; `None` keeps the agent's
    /// default (10 s).
    pub agent_probe_interval: Option<Duration>,
    /// The hub's `--prometheus-traffic-query` when Prometheus runs: by default the simulated
    /// ingress traffic ([`SIM_TRAFFIC_QUERY`]), so policy `traffic` works in the playground.
    pub traffic_query: Option<String>,
    /// How often Prometheus scrapes; `None` is [`SCRAPE_INTERVAL`].
    pub scrape_interval: Option<Duration>,
    /// The hub's `--prometheus-ttl`; `None` keeps its default (30 s).
    pub prometheus_ttl: Option<Duration>,
}

/// The hub's traffic query over nave-sim's simulated ingress: each Service's requests per
/// second by cluster, the Service's name as the workload's (a MultiClusterDeployment's Service
/// has its name).
pub const SIM_TRAFFIC_QUERY: &str = r#"sum by (cluster, namespace, workload) (label_replace(nave_sim_ingress_requests_per_second, "workload", "$1", "service", "(.*)"))"#;

impl UpOptions {
    /// Serve `fleet` over HTTP, write under `dir`, agents with their default timings, no
    /// Prometheus.
    pub fn new(fleet: FleetConfig, dir: impl Into<PathBuf>) -> UpOptions {
        UpOptions {
            fleet,
            dir: dir.into(),
            tls: false,
            prometheus: false,
            agent_heartbeat: None,
            agent_status_interval: None,
            agent_probe_interval: None,
            traffic_query: Some(SIM_TRAFFIC_QUERY.to_owned()),
            scrape_interval: None,
            prometheus_ttl: None,
        }
    }
}

/// The clusters of a playground, serving, before Nave starts on them: the management cluster
/// with Nave's CRDs and the fleet declared as WorkloadClusters, and the workload clusters.
/// `nave-sim up` goes straight on to [`PlaygroundClusters::start_nave`]; a scenario first sets
/// up what Nave should find when it arrives (the other tenants' pods).
#[derive(Debug)]
pub struct PlaygroundClusters {
    /// The management cluster (Nave's CRDs installed).
    pub management: SimCluster,
    /// The workload clusters.
    pub fleet: SimFleet,
    opts: UpOptions,
}

/// How often the playground's Prometheus scrapes: often enough that usage follows a change
/// within seconds.
pub const SCRAPE_INTERVAL: Duration = Duration::from_secs(2);

/// The running playground.
#[derive(Debug)]
pub struct Playground {
    /// The management cluster (Nave's CRDs installed).
    pub management: SimCluster,
    /// The workload clusters.
    pub fleet: SimFleet,
    /// The hub's URL (agent endpoints, REST API under `/api/v1`).
    pub hub_url: String,
    /// The hub's metrics listener (`/metrics`, `/healthz`, `/readyz`).
    pub hub_metrics_url: String,
    /// The Prometheus server, when its binary was found.
    pub prometheus: Option<Prometheus>,
    /// Why there is no Prometheus, when there is none.
    pub prometheus_absent: Option<String>,
    dir: PathBuf,
    /// A token of the REST API with the `admin` scope.
    admin_token: String,
    /// Stops the hub and the agents.
    stop: CancellationToken,
    /// The hub and the agents; each answers what stopped and why.
    tasks: tokio::task::JoinSet<String>,
}

/// The kinds the playground's MultiClusterResources may send (`examples/resources.yaml`): a
/// namespaced one and a cluster-scoped one; its agents allow them beside their defaults.
pub const PLAYGROUND_RESOURCE_KINDS: &[&str] = &[
    "Role.rbac.authorization.k8s.io",
    "ClusterRole.rbac.authorization.k8s.io",
];

/// The playground hub's own namespace, from which cluster-scoped kinds may be sent.
pub const PLAYGROUND_ADMIN_NAMESPACE: &str = "nave-system";

/// The default fleet: `n` clusters of different sizes in different regions.
pub fn default_fleet(n: usize) -> FleetConfig {
    const REGIONS: [(&str, f64, f64); 5] = [
        ("eu-west", 53.35, -6.26),
        ("us-east", 38.9, -77.04),
        ("ap-south", 19.08, 72.88),
        ("eu-central", 50.11, 8.68),
        ("us-west", 45.52, -122.68),
    ];
    // Sizes differ so that worst-fit and best-fit choose differently.
    const SIZES: [(u32, &str, &str); 3] = [(4, "8", "32Gi"), (3, "4", "16Gi"), (2, "4", "8Gi")];
    let clusters = (0..n)
        .map(|i| {
            let (region, latitude, longitude) = REGIONS[i % REGIONS.len()];
            let (count, cpu, memory) = SIZES[i % SIZES.len()];
            let ordinal = i / REGIONS.len() + 1;
            ClusterConfig {
                name: format!("{region}-{ordinal}"),
                region: Some(region.to_owned()),
                zone: Some(format!("{region}-{ordinal}a")),
                coordinates: Some(Coordinates { latitude, longitude }),
                node_pools: vec![NodePool {
                    name: "general".to_owned(),
                    count,
                    cpu: cpu.to_owned(),
                    memory: memory.to_owned(),
                    ..NodePool::default()
                }],
                ..ClusterConfig::default()
            }
        })
        .collect();
    FleetConfig {
        clusters,
        ..FleetConfig::default()
    }
}

/// `fleet` with a link between every two clusters that have coordinates, and between each of
/// them and the hub (placed with the first cluster), whose round trip grows with the distance
/// as over fibre: 1 ms per 100 km of great circle (light covers about 200 km per millisecond in
/// glass, there and back), plus 2 ms at the ends. Links the fleet already declares stay; a fleet
/// with a cluster named `hub` is left as it is.
pub fn with_distance_links(mut fleet: FleetConfig) -> FleetConfig {
    let placed: Vec<(String, Coordinates)> = fleet
        .clusters
        .iter()
        .filter_map(|c| Some((c.name.clone(), c.coordinates?)))
        .collect();
    // A cluster named like the hub's end would make every link to it ambiguous.
    let hub_named = fleet.clusters.iter().any(|c| c.name == Link::HUB);
    let Some((_, hub)) = placed.first().cloned().filter(|_| !hub_named) else {
        return fleet;
    };
    let rtt = |a: Coordinates, b: Coordinates| {
        let km = nave_policies::Coordinates::new(a.latitude, a.longitude)
            .distance_km(&nave_policies::Coordinates::new(b.latitude, b.longitude));
        (km / 100.0).round() as u64 + 2
    };
    let mut ends: Vec<(String, Coordinates)> = placed;
    ends.push((Link::HUB.to_owned(), hub));
    for (i, (a, at)) in ends.iter().enumerate() {
        for (b, bt) in &ends[i + 1..] {
            let declared = fleet.network.links.iter().any(|l| {
                let [x, y] = &l.between;
                (x == a && y == b) || (x == b && y == a)
            });
            if !declared {
                fleet.network.links.push(Link {
                    between: [a.clone(), b.clone()],
                    rtt_millis: rtt(*at, *bt),
                });
            }
        }
    }
    fleet
}

impl PlaygroundClusters {
    /// Starts the management cluster, installs the CRDs, starts the fleet and declares a
    /// WorkloadCluster per workload cluster.
    pub async fn start(opts: UpOptions) -> anyhow::Result<PlaygroundClusters> {
        opts.fleet
            .check()
            .map_err(|e| anyhow::anyhow!("fleet configuration: {e}"))?;
        let serve = ServeOptions {
            tls: opts.tls,
            ..ServeOptions::default()
        };
        let management_config = ClusterConfig {
            name: MANAGEMENT_CLUSTER.to_owned(),
            node_pools: vec![NodePool {
                count: 1,
                ..NodePool::default()
            }],
            ..ClusterConfig::default()
        };
        let management = SimCluster::start(management_config, serve.clone()).await?;
        let client = management.client().await?;
        install_crds(&client).await?;
        let fleet = SimFleet::start(opts.fleet.clone(), serve).await?;
        let clusters = PlaygroundClusters {
            management,
            fleet,
            opts,
        };
        if let Err(e) = declare_clusters(&client, &clusters.opts.fleet).await {
            clusters.shutdown().await;
            return Err(e);
        }
        Ok(clusters)
    }

    /// Starts the hub (its SQLite store, bootstrap and REST API tokens under the directory) and
    /// one agent per workload cluster, waits until every agent has reported its capacity, and
    /// writes the kubeconfigs and `ready.json`. On failure everything started is stopped.
    pub async fn start_nave(self) -> anyhow::Result<Playground> {
        let PlaygroundClusters {
            management,
            fleet,
            opts,
        } = self;
        // The hub, Prometheus and each agent's metrics: distinct ports, chosen together.
        let mut ports = prometheus::free_loopback_ports(3 + fleet.clusters.len())?;
        let agent_metrics = ports.split_off(3);
        let (hub_addr, hub_metrics, prometheus_addr) = (ports[0], ports[1], ports[2]);
        let mut playground = Playground {
            management,
            fleet,
            hub_url: format!("http://{hub_addr}"),
            hub_metrics_url: format!("http://{hub_metrics}"),
            prometheus: None,
            prometheus_absent: None,
            dir: opts.dir.clone(),
            // Random per playground.
            admin_token: uuid::Uuid::new_v4().simple().to_string(),
            stop: CancellationToken::new(),
            tasks: tokio::task::JoinSet::new(),
        };
        match playground
            .launch(&opts, (hub_addr, prometheus_addr, agent_metrics))
            .await
        {
            Ok(()) => Ok(playground),
            Err(e) => {
                playground.shutdown().await;
                Err(e)
            }
        }
    }

    /// Stops every cluster (when Nave is not to start after all).
    pub async fn shutdown(self) {
        self.fleet.shutdown().await;
        self.management.shutdown().await;
    }
}

impl Playground {
    /// Starts the management cluster, installs the CRDs, starts the fleet, declares a
    /// WorkloadCluster per workload cluster, starts the hub and the agents and writes the
    /// kubeconfigs and `ready.json`.
    pub async fn start(opts: UpOptions) -> anyhow::Result<Playground> {
        PlaygroundClusters::start(opts).await?.start_nave().await
    }

    /// Starts Prometheus (when asked and found), the hub and the agents on `ports`: the hub's,
    /// Prometheus', and one per agent for its `/metrics`.
    async fn launch(
        &mut self,
        opts: &UpOptions,
        ports: (
            std::net::SocketAddr,
            std::net::SocketAddr,
            Vec<std::net::SocketAddr>,
        ),
    ) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let management_kubeconfig = self.dir.join("kubeconfig");
        self.management.write_kubeconfig(&management_kubeconfig)?;
        let client = self.management.client().await?;

        // The bootstrap token agents present to register; random per playground.
        let token_file = self.dir.join("bootstrap-token");
        std::fs::write(&token_file, uuid::Uuid::new_v4().simple().to_string())?;
        // The REST API's admin token; the hub reads the tokens file.
        std::fs::write(self.dir.join(ADMIN_TOKEN_FILE), &self.admin_token)?;
        let api_tokens_file = self.dir.join(API_TOKENS_FILE);
        std::fs::write(
            &api_tokens_file,
            format!(
                "# scope token (written by nave-sim up)\nadmin {}\n",
                self.admin_token
            ),
        )?;
        let (hub_addr, prometheus_addr, agent_metrics) = ports;
        let (prometheus, prometheus_absent) = if !opts.prometheus {
            (
                None,
                Some("Prometheus not started (--no-prometheus); scores use requests".to_owned()),
            )
        } else if let Some(binary) = prometheus::find_binary() {
            let targets = scrape_targets(&self.fleet, &self.dir, &self.hub_metrics_url, &agent_metrics)?;
            let dir = self.dir.join("prometheus");
            let every = opts.scrape_interval.unwrap_or(SCRAPE_INTERVAL);
            match Prometheus::start_at(prometheus_addr, &binary, &dir, &targets, every).await {
                Ok(p) => (Some(p), None),
                Err(e) => {
                    tracing::warn!(error = %e, "Prometheus did not start; scores use requests");
                    (
                        None,
                        Some(format!("Prometheus did not start ({e}); scores use requests")),
                    )
                }
            }
        } else {
            (None, Some("Prometheus not found; scores use requests".to_owned()))
        };
        self.prometheus = prometheus;
        self.prometheus_absent = prometheus_absent;
        let hub_args = nave_hub::cli::RunArgs {
            drop_in: false,
            resources: nave_hub::cli::ResourceArgs {
                resource_kinds: vec![PLAYGROUND_RESOURCE_KINDS[0].to_owned()],
                cluster_resource_kinds: vec![PLAYGROUND_RESOURCE_KINDS[1].to_owned()],
                admin_namespace: Some(PLAYGROUND_ADMIN_NAMESPACE.to_owned()),
            },
            autoscale: Default::default(),
            provisioner: Default::default(),
            database_url: format!("sqlite://{}", self.dir.join("hub.db").display()),
            listen: hub_addr,
            metrics_listen: self.hub_metrics_url.trim_start_matches("http://").parse()?,
            bootstrap_token_file: token_file.clone(),
            tls_cert_file: None,
            tls_key_file: None,
            store_key_file: None,
            accept_new_clusters: true,
            max_unaccepted_clusters: 100,
            api_tokens_file: Some(api_tokens_file),
            api_tokens_secret: None,
            kubeconfig: Some(management_kubeconfig),
            log_json: false,
            failover: nave_hub::cli::FailoverArgs::default(),
            prometheus: {
                let defaults = nave_hub::cli::PrometheusArgs::default();
                nave_hub::cli::PrometheusArgs {
                    prometheus_url: self.prometheus.as_ref().map(|p| p.url().to_owned()),
                    prometheus_traffic_query: opts.traffic_query.clone(),
                    prometheus_ttl: opts.prometheus_ttl.unwrap_or(defaults.prometheus_ttl),
                    ..defaults
                }
            },
            leader_election: nave_hub::cli::LeaderElectionArgs::default(),
        };
        let hub_stop = self.stop.clone();
        self.tasks.spawn(async move {
            match nave_hub::run_until(hub_args, hub_stop).await {
                Ok(()) => "the hub stopped".to_owned(),
                Err(e) => {
                    tracing::error!(error = %e, "the hub stopped");
                    format!("the hub stopped: {e}")
                }
            }
        });
        // The agents register as soon as they start: let the hub listen first.
        let listening = tokio::time::Instant::now();
        while tokio::net::TcpStream::connect(hub_addr).await.is_err() {
            if let Some(stopped) = self.tasks.try_join_next() {
                let why = stopped.unwrap_or_else(|e| format!("the hub's task failed: {e}"));
                anyhow::bail!("{why}, before it listened on {hub_addr}");
            }
            if listening.elapsed() > Duration::from_secs(30) {
                anyhow::bail!("the hub did not listen on {hub_addr} within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for ((cluster, config), metrics) in self
            .fleet
            .clusters
            .iter()
            .zip(&opts.fleet.clusters)
            .zip(agent_metrics)
        {
            let mut agent = nave_agent::Config::new(self.hub_url.clone(), cluster.name(), token_file.clone());
            // The playground's hub is on loopback, over plain HTTP.
            agent.trust.insecure_http = true;
            agent.metrics_listen = Some(metrics);
            agent.region = config.region.clone();
            agent.zone = config.zone.clone();
            agent.labels = config.labels.clone();
            agent.heartbeat_interval = opts.agent_heartbeat;
            agent.allow_kinds = nave_agent::allowed::DEFAULT_KINDS
                .iter()
                .chain(PLAYGROUND_RESOURCE_KINDS)
                .map(|k| (*k).to_owned())
                .collect();
            if let Some(interval) = opts.agent_status_interval {
                agent.status_interval = interval;
            }
            // The agents measure each other through their metrics listeners, over the links'
            // emulated distance.
            agent.probe_url = Some(format!("http://{metrics}{}", nave_agent::probe::PROBE_PATH));
            agent.link_latency = opts.fleet.link_latency(cluster.name());
            if let Some(interval) = opts.agent_probe_interval {
                agent.probe_interval = interval;
            }
            let client = cluster.client().await?;
            let agent_stop = self.stop.clone();
            let name = cluster.name().to_owned();
            self.tasks.spawn(async move {
                match nave_agent::run_agent(agent, client, agent_stop).await {
                    Ok(()) => format!("the agent of {name} stopped"),
                    Err(e) => {
                        tracing::error!(cluster = %name, error = %e, "an agent stopped");
                        format!("the agent of {name} stopped: {e}")
                    }
                }
            });
        }
        // Ready means placeable: the hub decides on the capacity agents report, and a workload
        // applied before some cluster reported would stay where the others are.
        wait_fleet_reporting(&client, &opts.fleet, Duration::from_secs(60)).await?;
        self.check_running()?;
        self.write_files()
    }

    /// Fails when the hub or an agent has stopped, saying which and why: they run until
    /// [`Playground::shutdown`].
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        match self.tasks.try_join_next() {
            None => Ok(()),
            Some(Ok(stopped)) => Err(anyhow::anyhow!("{stopped}")),
            Some(Err(e)) => Err(anyhow::anyhow!("a task of the playground failed: {e}")),
        }
    }

    /// A token of the hub's REST API with the `admin` scope (also in `<dir>/admin-token`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    fn write_files(&self) -> anyhow::Result<()> {
        let clusters_dir = self.dir.join("clusters");
        std::fs::create_dir_all(&clusters_dir)?;
        let management_kubeconfig = self.dir.join("kubeconfig");
        self.management.write_kubeconfig(&management_kubeconfig)?;
        let mut clusters = Vec::new();
        for c in &self.fleet.clusters {
            let path = clusters_dir.join(format!("{}.kubeconfig", c.name()));
            c.write_kubeconfig(&path)?;
            clusters.push(serde_json::json!({
                "name": c.name(),
                "url": c.url(),
                "kubeconfig": path.display().to_string(),
                "metricsUrl": c.metrics_url(),
            }));
        }
        let ready = serde_json::json!({
            "management": {
                "url": self.management.url(),
                "kubeconfig": management_kubeconfig.display().to_string(),
            },
            "hub": {
                "url": self.hub_url,
                "metricsUrl": self.hub_metrics_url,
                "api": {
                    "url": format!("{}/api/v1", self.hub_url),
                    "adminTokenFile": self.dir.join(ADMIN_TOKEN_FILE).display().to_string(),
                },
            },
            "clusters": clusters,
            "prometheus": self.prometheus.as_ref().map(|p| serde_json::json!({
                "url": p.url(),
                "config": p.dir().join("prometheus.yml").display().to_string(),
            })),
        });
        // Written last and atomically: its presence means everything above is serving.
        let tmp = self.dir.join("ready.json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(&ready)?)?;
        std::fs::rename(&tmp, self.dir.join("ready.json"))?;
        Ok(())
    }

    /// What to type next, printed by `nave-sim up`.
    pub fn next_steps(&self) -> String {
        let dir = self.dir.display();
        let mut s = String::new();
        s.push_str(&format!("management cluster  {}\n", self.management.url()));
        s.push_str(&format!("hub                 {}\n", self.hub_url));
        match (&self.prometheus, &self.prometheus_absent) {
            (Some(p), _) => s.push_str(&format!(
                "prometheus          {}  (the hub reads cluster usage and traffic from it)\n",
                p.url()
            )),
            (None, Some(why)) => s.push_str(&format!("{why}\n")),
            (None, None) => {}
        }
        for c in &self.fleet.clusters {
            s.push_str(&format!(
                "workload cluster    {:<14} {}  (metrics {})\n",
                c.name(),
                c.url(),
                c.metrics_url()
            ));
        }
        s.push_str(&format!(
            "\nNext, in another terminal:\n  export KUBECONFIG={dir}/kubeconfig\n  kubectl get workloadclusters\n  \
             kubectl apply -f examples/web.yaml\n  kubectl get mcd\n  \
             kubectl --kubeconfig {dir}/clusters/<name>.kubeconfig get nodes\n\n\
             The hub's REST API:\n  \
             curl -H \"Authorization: Bearer $(cat {dir}/{ADMIN_TOKEN_FILE})\" {hub}/api/v1/clusters\n\n\
             Ctrl-C stops everything.\n",
            hub = self.hub_url,
        ));
        s
    }

    /// Stops the agents, the hub and every cluster, and removes `ready.json`.
    pub async fn shutdown(mut self) {
        let _ = std::fs::remove_file(self.dir.join("ready.json"));
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
        if let Some(prometheus) = self.prometheus.take() {
            prometheus.stop().await;
        }
        self.fleet.shutdown().await;
        self.management.shutdown().await;
    }

    /// The directory the playground writes to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// What the playground's Prometheus scrapes: each workload cluster (its series labelled with
/// its name; over HTTPS with its CA, written under `dir`), the hub's metrics listener at
/// `hub_metrics_url`, and each agent (labelled with its cluster).
pub fn scrape_targets(
    fleet: &SimFleet,
    dir: &Path,
    hub_metrics_url: &str,
    agent_metrics: &[std::net::SocketAddr],
) -> anyhow::Result<Vec<ScrapeTarget>> {
    let mut targets = Vec::new();
    for (cluster, agent) in fleet.clusters.iter().zip(agent_metrics) {
        let name = cluster.name();
        let mut target = ScrapeTarget::from_url(&format!("cluster-{name}"), &cluster.metrics_url())?
            .label(CLUSTER_LABEL, name);
        if let Some(ca) = cluster.ca_pem() {
            let path = dir.join("clusters").join(format!("{name}.ca.pem"));
            std::fs::create_dir_all(dir.join("clusters"))?;
            std::fs::write(&path, ca)?;
            target = target.ca_file(path);
        }
        targets.push(target);
        targets.push(
            ScrapeTarget::from_url(&format!("nave-agent-{name}"), &format!("http://{agent}/metrics"))?
                .label(CLUSTER_LABEL, name),
        );
    }
    targets.push(ScrapeTarget::from_url(
        "nave-hub",
        &format!("{hub_metrics_url}/metrics"),
    )?);
    Ok(targets)
}

/// Creates (or replaces) Nave's CRDs and waits until each is Established.
pub async fn install_crds(client: &kube::Client) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in nave_api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let live = api.get(&name).await?;
                let mut crd = crd.clone();
                crd.metadata.resource_version = live.metadata.resource_version;
                api.replace(&name, &PostParams::default(), &crd).await?;
            }
            Err(e) => return Err(anyhow::anyhow!("installing CRD {name}: {e}")),
        }
        let established = kube::runtime::wait::await_condition(
            api.clone(),
            &name,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        tokio::time::timeout(Duration::from_secs(10), established)
            .await
            .map_err(|_| anyhow::anyhow!("CRD {name} was not Established within 10 s"))??;
    }
    Ok(())
}

/// Waits until every cluster of `fleet` has reported its capacity to the hub (its WorkloadCluster
/// shows it).
pub async fn wait_fleet_reporting(
    client: &kube::Client,
    fleet: &FleetConfig,
    deadline: Duration,
) -> anyhow::Result<()> {
    let api: Api<WorkloadCluster> = Api::all(client.clone());
    let start = tokio::time::Instant::now();
    loop {
        let reporting: std::collections::BTreeSet<String> = api
            .list(&kube::api::ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|w| w.status.as_ref().is_some_and(|s| s.capacity.is_some()))
            .filter_map(|w| w.metadata.name)
            .collect();
        let missing: Vec<&str> = fleet
            .clusters
            .iter()
            .map(|c| c.name.as_str())
            .filter(|n| !reporting.contains(*n))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if start.elapsed() > deadline {
            anyhow::bail!(
                "the agents of {} did not report to the hub within {deadline:?}",
                missing.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Declares one WorkloadCluster per simulated workload cluster, as an admin would before its agent
/// registers: region, zone, coordinates and burst-only come from the fleet configuration.
pub async fn declare_clusters(client: &kube::Client, fleet: &FleetConfig) -> anyhow::Result<()> {
    let api: Api<WorkloadCluster> = Api::all(client.clone());
    for c in &fleet.clusters {
        let spec = WorkloadClusterSpec {
            region: c.region.clone(),
            zone: c.zone.clone(),
            coordinates: c.coordinates.map(|p| nave_api::Coordinates {
                latitude: p.latitude,
                longitude: p.longitude,
            }),
            burst_only: c.burst_only,
            ..WorkloadClusterSpec::default()
        };
        let mut wcl = WorkloadCluster::new(&c.name, spec);
        let mut labels = c.labels.clone();
        if let Some(region) = &c.region {
            labels.insert("topology.kubernetes.io/region".to_owned(), region.clone());
        }
        if let Some(zone) = &c.zone {
            labels.insert("topology.kubernetes.io/zone".to_owned(), zone.clone());
        }
        wcl.metadata.labels = Some(labels);
        match api.create(&PostParams::default(), &wcl).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(anyhow::anyhow!("declaring WorkloadCluster {}: {e}", c.name)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_fleet_has_distinct_valid_clusters_of_different_sizes() {
        let fleet = default_fleet(7);
        fleet.check().expect("the default fleet is valid");
        assert_eq!(fleet.clusters.len(), 7);
        let sizes: std::collections::BTreeSet<_> = fleet
            .clusters
            .iter()
            .map(|c| (c.node_pools[0].count, c.node_pools[0].cpu.clone()))
            .collect();
        assert!(
            sizes.len() >= 3,
            "expected at least 3 different cluster sizes, saw {sizes:?}"
        );
    }

    #[test]
    fn distance_links_join_every_pair_and_the_hub_and_keep_declared_ones() {
        let mut fleet = default_fleet(3);
        fleet.network.links.push(Link {
            between: ["us-east-1".to_owned(), "eu-west-1".to_owned()],
            rtt_millis: 7,
        });
        let fleet = with_distance_links(fleet);
        fleet.check().expect("the links are valid");
        // 3 clusters and the hub: 6 pairs, one of them declared.
        assert_eq!(fleet.network.links.len(), 6, "{:?}", fleet.network.links);
        let eu = fleet.link_latency("eu-west-1");
        assert_eq!(
            eu["us-east-1"],
            Duration::from_millis(7),
            "the declared link stays"
        );
        // The hub sits with the first cluster; Dublin to Mumbai is about 7,200 km.
        assert_eq!(eu["hub"], Duration::from_millis(2));
        let mumbai = eu["ap-south-1"].as_millis();
        assert!((70..=80).contains(&mumbai), "Dublin to Mumbai: {mumbai} ms");
    }
}
