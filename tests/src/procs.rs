//! Hubs and agents as processes of their own, for the tests and benchmarks that kill, pause and
//! cut them: the calling binary runs itself again with `role hub ...` or `role agent ...` (the
//! same arguments as `nave-hub` and `nave-agent`), so the children run exactly the code the real
//! binaries run, built with the test.
//!
//! ```text
//!   test process: simulated clusters, the TCP proxies, the checks
//!      ├─ child: role hub run --leader-elect ...   (SIGKILL, SIGSTOP/SIGCONT, restart)
//!      ├─ child: role hub run --leader-elect ...
//!      └─ child: role agent --hub-url https://<hub proxy> ...
//!   agents ──► hub proxy (one address, like a Service) ──► whichever hubs accept
//!   hubs ────► store proxy (cut on demand) ──► Postgres
//! ```
//!
//! A binary that uses this calls [`child_role`] first in its `main`.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, PostParams};
use nave_api::WorkloadCluster;
use nave_sim::config::{ClusterConfig, FleetConfig};
use nave_sim::{ServeOptions, SimCluster, SimFleet};
use sqlx::Executor as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Runs the hub or agent this process was started as, if it was (`role hub|agent ...` among its
/// arguments), and answers how that went; `None` for the binary's own run.
pub fn child_role() -> Option<anyhow::Result<()>> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == "role")?;
    Some(run_child(&args[i + 1..]))
}

fn run_child(args: &[String]) -> anyhow::Result<()> {
    nave_sim::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match args.first().map(String::as_str) {
        Some("hub") => {
            let cli = nave_hub::cli::Cli::parse_from(
                std::iter::once("nave-hub".to_owned()).chain(args[1..].iter().cloned()),
            );
            let nave_hub::cli::Command::Run(run) = cli.command else {
                anyhow::bail!("the hub role takes `run ...`");
            };
            nave_runtime::init_tracing(run.log_json);
            runtime.block_on(nave_hub::run(run))?;
        }
        Some("agent") => {
            let parsed = nave_agent::Args::parse_from(
                std::iter::once("nave-agent".to_owned()).chain(args[1..].iter().cloned()),
            );
            runtime.block_on(nave_agent::run(parsed))?;
        }
        other => anyhow::bail!("unknown role {other:?}"),
    }
    Ok(())
}

/// A hub or an agent in a process of its own, its log in a file.
#[derive(Debug)]
pub struct Proc {
    /// What it is, for messages (`hub-1`, `agent eu-west-1`).
    pub name: String,
    child: Child,
    /// Its log (standard error).
    pub log: PathBuf,
}

impl Proc {
    /// Starts this binary again as `role`, logging to `dir/<log>` (appended: a restarted part
    /// keeps one log).
    pub fn spawn(
        name: &str,
        role: &[String],
        dir: &Path,
        log: &str,
        rust_log: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Proc> {
        let exe = std::env::current_exe()?;
        let path = dir.join(log);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        let child = Command::new(exe)
            .arg("role")
            .args(role)
            .env("RUST_LOG", rust_log)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Proc {
            name: name.to_owned(),
            child,
            log: path,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and waits for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGSTOP: it stops where it is, its sockets open, as a process the kernel does not
    /// schedule (a long pause, a frozen VM).
    pub fn pause(&self) -> anyhow::Result<()> {
        self.signal(rustix::process::Signal::STOP)
    }

    /// SIGCONT: it goes on from where it stopped.
    pub fn resume(&self) -> anyhow::Result<()> {
        self.signal(rustix::process::Signal::CONT)
    }

    /// SIGTERM: it stops cleanly (a leader releases its Lease).
    pub fn terminate(&self) -> anyhow::Result<()> {
        self.signal(rustix::process::Signal::TERM)
    }

    fn signal(&self, signal: rustix::process::Signal) -> anyhow::Result<()> {
        let pid =
            rustix::process::Pid::from_raw(i32::try_from(self.pid())?).context("a process id is never 0")?;
        rustix::process::kill_process(pid, signal).with_context(|| format!("signalling {}", self.name))
    }

    /// How it ended, if it has.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `lines` lines of its log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // A paused process would ignore SIGKILL only until resumed; kill works on stopped ones.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP proxy: one address in front of several upstreams, each connection to the first that
/// accepts it (in turn), as a Service in front of replicas; or cut, closing every connection and
/// refusing new ones, as a network partition does.
#[derive(Debug, Clone)]
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    upstreams: Arc<Mutex<Vec<SocketAddr>>>,
    cut: Arc<AtomicBool>,
    next: Arc<AtomicUsize>,
    connections: Arc<Mutex<JoinSet<()>>>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port in front of `upstreams`.
    pub async fn start(upstreams: Vec<SocketAddr>) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let proxy = Proxy {
            addr: listener.local_addr()?,
            upstreams: Arc::new(Mutex::new(upstreams)),
            cut: Arc::default(),
            next: Arc::default(),
            connections: Arc::new(Mutex::new(JoinSet::new())),
        };
        let accepting = proxy.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if accepting.cut.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let proxy = accepting.clone();
                accepting
                    .connections
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .spawn(async move { proxy.relay(client).await });
            }
        });
        Ok(proxy)
    }

    async fn relay(&self, mut client: TcpStream) {
        let upstreams = self.upstreams.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if upstreams.is_empty() {
            return;
        }
        let first = self.next.fetch_add(1, Ordering::SeqCst);
        for i in 0..upstreams.len() {
            let target = upstreams[(first + i) % upstreams.len()];
            if let Ok(mut upstream) = TcpStream::connect(target).await {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                return;
            }
        }
    }

    /// Closes every connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .abort_all();
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// A free loopback address for a child to bind (see [`nave_testkit::free_loopback_ports`]).
pub fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(nave_testkit::free_loopback_port()?)
}

/// Where the hubs of a [`ProcessFleet`] keep their state.
#[derive(Debug, Clone)]
pub enum Store {
    /// One SQLite file (one hub, no election).
    Sqlite,
    /// A fresh schema in the Postgres database at this URL, reached through a [`Proxy`] that
    /// can cut the hubs off it.
    Postgres(String),
}

/// What a [`ProcessFleet`] runs.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// Hub replicas.
    pub hubs: usize,
    /// Their store.
    pub store: Store,
    /// Leader election timings (`--lease-duration`, `--renew-deadline`, `--retry-period`);
    /// `None`: no election (one hub).
    pub lease: Option<[Duration; 3]>,
    /// The workload clusters.
    pub fleet: FleetConfig,
}

/// Namespace of the hubs' Lease in a [`ProcessFleet`].
pub const LEASE_NAMESPACE: &str = "nave-system";

/// Hubs and agents as processes over simulated clusters (in this process): the hubs behind one
/// address (a [`Proxy`], as a Service), on a store the test can cut off; each part killed,
/// paused, resumed and started again at will.
pub struct ProcessFleet {
    dir: tempfile::TempDir,
    /// The simulated management cluster.
    pub management: SimCluster,
    /// The simulated workload clusters.
    pub fleet: SimFleet,
    /// Client of the management cluster.
    pub client: kube::Client,
    /// Each hub replica's process; `None` while stopped.
    pub hubs: Vec<Option<Proc>>,
    hub_args: Vec<Vec<String>>,
    /// Each cluster's agent's process; `None` while stopped.
    pub agents: BTreeMap<String, Option<Proc>>,
    agent_args: BTreeMap<String, Vec<String>>,
    /// Between the hubs and Postgres.
    pub store_proxy: Option<Proxy>,
    postgres: Option<(String, String)>,
    /// The CA certificate (PEM) the hubs' serving certificate is signed by.
    pub hub_ca: std::path::PathBuf,
    /// The fleet's bootstrap token, as the agents read it.
    pub bootstrap_token: String,
    listens: Vec<SocketAddr>,
}

impl std::fmt::Debug for ProcessFleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessFleet")
            .field("hubs", &self.hubs.len())
            .field("agents", &self.agents.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl ProcessFleet {
    /// Starts the clusters, the hubs and one agent per cluster, and waits until every agent
    /// reported its capacity.
    pub async fn start(options: FleetOptions) -> anyhow::Result<ProcessFleet> {
        let dir = tempfile::tempdir()?;
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
        .await?;
        let client = management.client().await?;
        nave_playground::up::install_crds(&client).await?;
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({"metadata": {"name": LEASE_NAMESPACE}}))?,
            )
            .await?;
        let fleet = SimFleet::start(options.fleet.clone(), ServeOptions::default()).await?;
        let kubeconfig = dir.path().join("kubeconfig");
        management.write_kubeconfig(&kubeconfig)?;
        let token = dir.path().join("bootstrap-token");
        let bootstrap_token = uuid::Uuid::new_v4().simple().to_string();
        std::fs::write(&token, &bootstrap_token)?;
        let store_key = dir.path().join("store-key");
        std::fs::write(&store_key, uuid::Uuid::new_v4().simple().to_string())?;
        let pki = nave_testkit::TestPki::generate(dir.path(), "hub");

        let (database_url, store_proxy, postgres) = match &options.store {
            Store::Sqlite => (
                format!("sqlite://{}", dir.path().join("hub.db").display()),
                None,
                None,
            ),
            Store::Postgres(url) => {
                let schema = format!("procs_{}", uuid::Uuid::new_v4().simple());
                let pool = sqlx::PgPool::connect(url)
                    .await
                    .context("connecting to Postgres")?;
                pool.execute(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
                    .await?;
                pool.close().await;
                let mut proxied = reqwest::Url::parse(url).context("the Postgres URL")?;
                let upstream = format!(
                    "{}:{}",
                    proxied.host_str().unwrap_or("127.0.0.1"),
                    proxied.port().unwrap_or(5432)
                );
                let upstream = tokio::net::lookup_host(&upstream)
                    .await?
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("no address for {upstream}"))?;
                let proxy = Proxy::start(vec![upstream]).await?;
                proxied
                    .set_host(Some("127.0.0.1"))
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                proxied
                    .set_port(Some(proxy.addr.port()))
                    .map_err(|()| anyhow::anyhow!("no port in the Postgres URL"))?;
                proxied
                    .query_pairs_mut()
                    .append_pair("options", &format!("-c search_path={schema}"));
                (proxied.to_string(), Some(proxy), Some((url.clone(), schema)))
            }
        };

        let path = |p: &Path| p.display().to_string();
        let mut hub_args = Vec::new();
        let mut listens = Vec::new();
        for i in 0..options.hubs {
            let listen = free_addr()?;
            listens.push(listen);
            let mut args: Vec<String> = vec![
                "hub".into(),
                "run".into(),
                "--database-url".into(),
                database_url.clone(),
                "--listen".into(),
                listen.to_string(),
                "--metrics-listen".into(),
                free_addr()?.to_string(),
                "--bootstrap-token-file".into(),
                path(&token),
                "--kubeconfig".into(),
                path(&kubeconfig),
                "--accept-new-clusters".into(),
                "--tls-cert-file".into(),
                path(&pki.chain_file),
                "--tls-key-file".into(),
                path(&pki.key_file),
                "--store-key-file".into(),
                path(&store_key),
            ];
            if let Some([lease, renew, retry]) = options.lease {
                args.extend([
                    "--leader-elect".into(),
                    "--leader-election-namespace".into(),
                    LEASE_NAMESPACE.into(),
                    "--leader-election-identity".into(),
                    format!("hub-{i}"),
                    format!("--lease-duration={}ms", lease.as_millis()),
                    format!("--renew-deadline={}ms", renew.as_millis()),
                    format!("--retry-period={}ms", retry.as_millis()),
                ]);
            }
            hub_args.push(args);
        }
        // The proxy's task goes on serving without its handle, as long as the runtime runs.
        let hub_proxy = Proxy::start(listens.clone()).await?;
        let mut agent_args = BTreeMap::new();
        for cluster in &fleet.clusters {
            let kubeconfig = dir.path().join(format!("{}.kubeconfig", cluster.name()));
            cluster.write_kubeconfig(&kubeconfig)?;
            let args: Vec<String> = vec![
                "agent".into(),
                "--hub-url".into(),
                format!("https://{}", hub_proxy.addr),
                "--hub-ca-sha256".into(),
                pki.ca_sha256.clone(),
                "--cluster-name".into(),
                cluster.name().to_owned(),
                "--bootstrap-token-file".into(),
                path(&token),
                "--kubeconfig".into(),
                path(&kubeconfig),
                "--metrics-listen".into(),
                "127.0.0.1:0".into(),
            ];
            agent_args.insert(cluster.name().to_owned(), args);
        }
        let mut run = ProcessFleet {
            dir,
            management,
            fleet,
            client,
            hubs: (0..options.hubs).map(|_| None).collect(),
            hub_args,
            agents: BTreeMap::new(),
            agent_args,
            store_proxy,
            postgres,
            hub_ca: pki.ca_file.clone(),
            bootstrap_token,
            listens,
        };
        for i in 0..options.hubs {
            run.start_hub(i)?;
        }
        for name in run.cluster_names() {
            run.start_agent(&name)?;
        }
        let expected = run.agent_args.len();
        run.wait_reporting(expected, Duration::from_secs(120)).await;
        Ok(run)
    }

    /// Waits until `expected` WorkloadClusters show the capacity their agents reported.
    pub async fn wait_reporting(&self, expected: usize, within: Duration) {
        let clusters: Api<WorkloadCluster> = Api::all(self.client.clone());
        nave_testkit::wait_for("every agent to report its capacity", within, || async {
            let list = clusters
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let reporting = list
                .items
                .iter()
                .filter(|w| w.status.as_ref().is_some_and(|s| s.capacity.is_some()))
                .count();
            if reporting == expected {
                Ok(())
            } else {
                Err(format!("{reporting} of {expected} reporting"))
            }
        })
        .await;
    }

    /// How many times hub replica `i`'s log (since it last started) says it published every
    /// workload's objects.
    fn published_lines(&self, i: usize) -> usize {
        self.hubs[i]
            .as_ref()
            .and_then(|hub| std::fs::read_to_string(&hub.log).ok())
            .map_or(0, |log| {
                log.matches("every workload's objects are published").count()
            })
    }

    /// Kills hub replica `i` (SIGKILL), starts it again and waits until it has published every
    /// workload's objects once more: the time that took, and the new hub's CPU seconds by then.
    pub async fn restart_hub_until_published(
        &mut self,
        i: usize,
        within: Duration,
    ) -> anyhow::Result<(Duration, f64)> {
        let before = self.published_lines(i);
        if let Some(hub) = self.hub(i) {
            hub.kill();
        }
        let restarting = std::time::Instant::now();
        self.start_hub(i)?;
        let took = nave_testkit::wait_for("the restarted hub to publish", within, || async {
            match self.published_lines(i) {
                n if n > before => Ok(restarting.elapsed()),
                n => Err(format!("published {n} time(s) in all, as before the restart")),
            }
        })
        .await;
        let hub = self.hub(i).context("the restarted hub")?.pid();
        Ok((took, cpu_seconds(&hub.to_string())?))
    }

    /// The address hub replica `i` listens on (the agents reach it through a proxy).
    pub fn hub_listen(&self, i: usize) -> SocketAddr {
        self.listens[i]
    }

    /// The value of hub replica `i`'s series `series` (see [`crate::series_value`]).
    pub async fn hub_metric(&self, i: usize, series: &str) -> Result<f64, String> {
        let listen = self.hub_args[i]
            .iter()
            .skip_while(|a| *a != "--metrics-listen")
            .nth(1)
            .ok_or("the hub replica was started without --metrics-listen")?;
        crate::series_value(&format!("http://{listen}"), series).await
    }

    /// The workload clusters' names.
    pub fn cluster_names(&self) -> Vec<String> {
        self.agent_args.keys().cloned().collect()
    }

    /// Starts hub replica `i` (again).
    pub fn start_hub(&mut self, i: usize) -> anyhow::Result<()> {
        let proc = Proc::spawn(
            &format!("hub-{i}"),
            &self.hub_args[i],
            self.dir.path(),
            &format!("hub-{i}.log"),
            "info,kube=warn,sqlx=warn",
            &nave_hub::settings::ALLOCATOR_ENV,
        )?;
        self.hubs[i] = Some(proc);
        Ok(())
    }

    /// Starts the agent of cluster `name` (again).
    pub fn start_agent(&mut self, name: &str) -> anyhow::Result<()> {
        let proc = Proc::spawn(
            &format!("agent {name}"),
            &self.agent_args[name],
            self.dir.path(),
            &format!("agent-{name}.log"),
            &std::env::var("NAVE_AGENT_LOG").unwrap_or_else(|_| "info,kube=warn".to_owned()),
            // As the Helm chart sets them.
            &nave_agent::ALLOCATOR_ENV,
        )?;
        self.agents.insert(name.to_owned(), Some(proc));
        Ok(())
    }

    /// The hubs' store, as `--database-url` gives it to them.
    pub fn database_url(&self) -> String {
        self.hub_args
            .first()
            .and_then(|args| args.iter().skip_while(|a| *a != "--database-url").nth(1))
            .cloned()
            .unwrap_or_default()
    }

    /// Hub replica `i`, while it runs.
    pub fn hub(&mut self, i: usize) -> Option<&mut Proc> {
        self.hubs.get_mut(i).and_then(Option::as_mut)
    }

    /// The replica holding the Lease, by its index.
    pub async fn leader(&self) -> Option<usize> {
        lease_holder(self.client.clone()).await
    }

    /// Waits (at most `within`) until a replica that runs holds the Lease, and says which.
    pub async fn running_leader(&mut self, within: Duration) -> anyhow::Result<usize> {
        let client = self.client.clone();
        let hubs = &mut self.hubs;
        let found = nave_testkit::try_wait_for("a running replica to hold the Lease", within, || {
            let running: Vec<bool> = hubs
                .iter_mut()
                .map(|h| h.as_mut().is_some_and(|p| p.exited().is_none()))
                .collect();
            let client = client.clone();
            async move {
                match lease_holder(client).await {
                    Some(i) if running.get(i).copied().unwrap_or(false) => Ok(i),
                    Some(i) => Err(format!("hub-{i} holds it but is not running")),
                    None => Err("no holder".to_owned()),
                }
            }
        })
        .await;
        found.map_err(|e| anyhow::anyhow!("{e}{}", self.logs()))
    }

    /// Starts again every hub that ended on its own (a resumed leader that lost the lead);
    /// answers which.
    pub fn restart_ended(&mut self) -> anyhow::Result<Vec<usize>> {
        let mut restarted = Vec::new();
        for i in 0..self.hubs.len() {
            if self.hub(i).is_some_and(|p| p.exited().is_some()) {
                self.start_hub(i)?;
                restarted.push(i);
            }
        }
        Ok(restarted)
    }

    /// The last lines of every part's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for proc in self.hubs.iter().flatten().chain(self.agents.values().flatten()) {
            out.push_str(&format!(
                "\n--- {} (last lines)\n{}\n",
                proc.name,
                proc.log_tail(15)
            ));
        }
        out
    }

    /// Stops everything and drops the Postgres schema.
    pub async fn stop(mut self) {
        for hub in self.hubs.iter_mut().flatten() {
            hub.kill();
        }
        for agent in self.agents.values_mut().flatten() {
            agent.kill();
        }
        if let Some((url, schema)) = &self.postgres
            && let Ok(pool) = sqlx::PgPool::connect(url).await
        {
            let _ = pool
                .execute(sqlx::AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                )))
                .await;
            pool.close().await;
        }
        self.fleet.shutdown().await;
        self.management.shutdown().await;
    }
}

/// CPU seconds (user + system) a process has used, from `/proc/<pid>/stat` (`"self"` for this
/// one).
pub fn cpu_seconds(pid: &str) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, f)| f)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are the 14th and 15th fields: 12th and 13th after the name and state.
    let hz = rustix::param::clock_ticks_per_second() as f64;
    Ok((ticks(11) + ticks(12)) / hz)
}

/// A process's resident memory and its peak (`VmRSS`, `VmHWM` of `/proc/<pid>/status`), in
/// MiB; NaN for a process that is gone.
pub fn memory_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The replica holding the hubs' Lease, if any.
pub async fn lease_holder(client: kube::Client) -> Option<usize> {
    let leases: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
    let lease = leases.get_opt("nave-hub").await.ok().flatten()?;
    let holder = lease.spec?.holder_identity?;
    holder.strip_prefix("hub-")?.parse().ok()
}

/// When each MultiClusterDeployment of a namespace first showed `Available` with a ready
/// replica, as a watch sees it: what the scale benchmarks wait on.
#[derive(Debug)]
pub struct AvailableWatch {
    /// When each became Available, by name.
    pub at: Arc<Mutex<HashMap<String, std::time::Instant>>>,
    /// How many have.
    count: tokio::sync::watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl AvailableWatch {
    /// Starts watching `api`.
    pub fn start(api: Api<nave_api::MultiClusterDeployment>) -> AvailableWatch {
        use futures::StreamExt as _;
        use kube::runtime::watcher;
        use nave_api::conditions::{self, types};
        let at: Arc<Mutex<HashMap<String, std::time::Instant>>> = Arc::default();
        let (count_tx, count) = tokio::sync::watch::channel(0_usize);
        let task = {
            let at = at.clone();
            tokio::spawn(async move {
                let mut events = watcher(api, watcher::Config::default()).boxed();
                while let Some(event) = events.next().await {
                    let (Ok(watcher::Event::Apply(mcd)) | Ok(watcher::Event::InitApply(mcd))) = event else {
                        continue;
                    };
                    let available = mcd.status.as_ref().is_some_and(|s| {
                        s.ready_replicas >= 1 && conditions::is_true(&s.conditions, types::AVAILABLE)
                    });
                    if available {
                        let now = std::time::Instant::now();
                        let mut at = at.lock().unwrap_or_else(|e| e.into_inner());
                        at.entry(mcd.metadata.name.clone().unwrap_or_default())
                            .or_insert(now);
                        count_tx.send_replace(at.len());
                    }
                }
            })
        };
        AvailableWatch { at, count, task }
    }

    /// Waits until `n` are Available, for at most `within`.
    pub async fn wait(&mut self, n: usize, within: Duration) -> anyhow::Result<()> {
        if tokio::time::timeout(within, self.count.wait_for(|done| *done >= n))
            .await
            .is_err()
        {
            anyhow::bail!("{} of {n} Available after {within:?}", *self.count.borrow());
        }
        Ok(())
    }
}

impl Drop for AvailableWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
