//! The library API: start simulated clusters (one listener each) or fleets of them in one process,
//! get kubeconfigs and kube-rs clients for them, and inject faults.
//!
//! ```no_run
//! # async fn demo() -> Result<(), nave_sim::SimError> {
//! use nave_sim::{ClusterConfig, ServeOptions, SimCluster};
//! let sim = SimCluster::start(ClusterConfig::default(), ServeOptions::default()).await?;
//! let client = sim.client().await?;            // over the socket, like any kube-rs program
//! let local = sim.in_process_client();          // no socket: the router is the transport
//! sim.faults().stop();                          // connection refused from now on
//! sim.faults().start().await?;                  // back, same port, same state
//! sim.shutdown().await;
//! # let _ = (client, local); Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ClusterConfig, FleetConfig};
use crate::controllers::ControlPlane;
use crate::server::hooks::FaultRule;
use crate::server::tls::{TlsError, TlsMaterial};
use crate::server::{self, Auth, ClusterState, ListenerCtl, kubeconfig};

/// Why a cluster could not be started or reached.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Binding or restarting the listener failed.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// Certificates could not be generated.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The system namespaces could not be created.
    #[error("bootstrapping the cluster: {0}")]
    Bootstrap(String),
    /// The control plane failed to start.
    #[error("starting the control plane: {0}")]
    ControlPlane(#[source] kube::Error),
    /// A kube-rs client could not be built from the kubeconfig.
    #[error("building a client: {0}")]
    Client(String),
    /// Writing a file failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
}

/// How a cluster is served.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Listen address; port 0 picks a free port.  Default `127.0.0.1:0`.
    pub listen: SocketAddr,
    /// Serve HTTPS with a generated CA and leaf (HTTP/2 offered via ALPN).
    pub tls: bool,
    /// The bearer token written into the kubeconfig.
    pub token: String,
    /// Accept only these tokens (token → user); `None` accepts any token.
    pub strict_tokens: Option<BTreeMap<String, String>>,
    /// Start the simulated control plane (nodes, scheduler, controllers, kubelet).
    pub control_plane: bool,
    /// Events retained for watch resumption (older resumes get `410 Expired`).
    pub event_log_capacity: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: false,
            token: "nave-sim-token".to_owned(),
            strict_tokens: None,
            control_plane: true,
            event_log_capacity: 10_000,
        }
    }
}

/// Installs the rustls ring provider if no process-level provider is installed yet (kube-rs
/// panics without one, even for `http://`).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// One running simulated cluster.
#[derive(Debug)]
pub struct SimCluster {
    state: Arc<ClusterState>,
    listener: Option<Arc<ListenerCtl>>,
    url: String,
    kubeconfig: String,
    tls: Option<TlsMaterial>,
    gc: tokio::task::JoinHandle<()>,
}

impl SimCluster {
    /// Starts a cluster: store, system namespaces, garbage collector, control plane (unless
    /// disabled), then the listener.
    pub async fn start(config: ClusterConfig, opts: ServeOptions) -> Result<SimCluster, SimError> {
        install_crypto_provider();
        let auth = match &opts.strict_tokens {
            Some(t) => Auth::Strict(t.clone()),
            None => Auth::AnyToken,
        };
        let state = ClusterState::new(&config.name, auth, opts.event_log_capacity);
        state.serve_metrics_api(config.usage.metrics_api);
        state.bootstrap().map_err(|e| SimError::Bootstrap(e.message))?;
        let gc = tokio::spawn(server::gc::run(state.clone()));
        let api = server::api_router(state.clone());
        let admin = if opts.control_plane {
            let client = kube::Client::new(api.clone(), "default");
            let cp = ControlPlane::start(client, Arc::new(config.clone()), state.shutdown.child_token())
                .await
                .map_err(SimError::ControlPlane)?;
            let admin = cp.admin_router();
            *state.control_plane.write().unwrap_or_else(|e| e.into_inner()) = Some(cp);
            admin
        } else {
            axum::Router::new()
        };
        let router = server::full_router(state.clone(), admin);
        let tls = if opts.tls {
            Some(TlsMaterial::generate(&config.name)?)
        } else {
            None
        };
        let server_config = match &tls {
            Some(m) => Some(m.server_config()?),
            None => None,
        };
        let listener = ListenerCtl::bind(opts.listen, router, server_config, state.shutdown.clone())
            .await
            .map_err(|source| SimError::Listen {
                addr: opts.listen.to_string(),
                source,
            })?;
        state.attach_listener(listener.clone());
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}", listener.addr());
        let kubeconfig = kubeconfig::render(
            &config.name,
            &url,
            &opts.token,
            tls.as_ref().map(|t| t.ca_pem.as_str()),
        );
        Ok(SimCluster {
            state,
            listener: Some(listener),
            url,
            kubeconfig,
            tls,
            gc,
        })
    }

    /// The cluster name.
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// `http://127.0.0.1:<port>` or `https://…`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `<url>/metrics`.
    pub fn metrics_url(&self) -> String {
        format!("{}/metrics", self.url)
    }

    /// The kubeconfig text (YAML).
    pub fn kubeconfig(&self) -> &str {
        &self.kubeconfig
    }

    /// The CA certificate (PEM) in TLS mode.
    pub fn ca_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(|t| t.ca_pem.as_str())
    }

    /// Writes the kubeconfig to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), SimError> {
        std::fs::write(path, &self.kubeconfig).map_err(|source| SimError::Write {
            path: path.display().to_string(),
            source,
        })
    }

    /// A kube-rs client over the socket, built from the kubeconfig (default namespace `default`).
    pub async fn client(&self) -> Result<kube::Client, SimError> {
        install_crypto_provider();
        let kc = kube::config::Kubeconfig::from_yaml(&self.kubeconfig)
            .map_err(|e| SimError::Client(e.to_string()))?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| SimError::Client(e.to_string()))?;
        kube::Client::try_from(cfg).map_err(|e| SimError::Client(e.to_string()))
    }

    /// A kube-rs client whose transport is the cluster's router (no socket, no faults).
    pub fn in_process_client(&self) -> kube::Client {
        install_crypto_provider();
        kube::Client::new(self.router(), "default")
    }

    /// The API router (usable as a tower service or with `kube::Client::new`).
    pub fn router(&self) -> axum::Router {
        server::api_router(self.state.clone())
    }

    /// Test hooks of this cluster.
    pub fn faults(&self) -> Faults {
        Faults {
            state: self.state.clone(),
            listener: self.listener.clone(),
        }
    }

    /// The shared server state (store, registry, request log).
    pub fn state(&self) -> &Arc<ClusterState> {
        &self.state
    }

    /// The simulated control plane, when the cluster runs one.
    pub fn control_plane(&self) -> Option<ControlPlane> {
        self.state
            .control_plane
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops the listener, the control plane and the background tasks.
    pub async fn shutdown(self) {
        if let Some(l) = &self.listener {
            l.stop();
        }
        self.state.shutdown.cancel();
        let cp = self
            .state
            .control_plane
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(cp) = cp {
            let _ = tokio::time::timeout(Duration::from_secs(5), cp.join()).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.gc).await;
    }
}

/// Fault injection and watch control of one cluster.
#[derive(Debug, Clone)]
pub struct Faults {
    state: Arc<ClusterState>,
    listener: Option<Arc<ListenerCtl>>,
}

impl Faults {
    /// Closes the listener and its connections: clients get "connection refused"; state is kept.
    pub fn stop(&self) {
        if let Some(l) = &self.listener {
            l.stop();
        }
    }

    /// Reopens the listener on the same port.
    pub async fn start(&self) -> Result<(), SimError> {
        match &self.listener {
            Some(l) => l.start().await.map_err(|source| SimError::Listen {
                addr: l.addr().to_string(),
                source,
            }),
            None => Ok(()),
        }
    }

    /// Whether the listener is accepting connections.
    pub fn is_running(&self) -> bool {
        self.listener.as_ref().is_some_and(|l| l.is_running())
    }

    /// Adds latency to every API request.
    pub fn set_latency(&self, d: Duration) {
        self.state.faults.set_latency(d);
    }

    /// Adds a fault rule.
    pub fn add_rule(&self, rule: FaultRule) -> Result<(), String> {
        self.state.faults.add_rule(rule)
    }

    /// The next `n` requests (any path) answer `code`.
    pub fn fail_next(&self, n: u64, code: u16) {
        let _ = self.add_rule(FaultRule {
            count: Some(n),
            code,
            ..FaultRule::default()
        });
    }

    /// A fraction of requests answers `code` until cleared.
    pub fn error_rate(&self, rate: f64, code: u16) {
        let _ = self.add_rule(FaultRule {
            rate: Some(rate),
            code,
            ..FaultRule::default()
        });
    }

    /// Removes every rule and the latency.
    pub fn clear(&self) {
        self.state.faults.clear();
    }

    /// Ends every open watch stream.
    pub fn drop_watches(&self) {
        self.state.drop_watches();
    }

    /// Drops the event history: resuming a watch from an older resourceVersion gets 410.
    pub fn compact(&self) {
        self.state.store.compact();
    }
}

/// Many clusters in one process.
#[derive(Debug)]
pub struct SimFleet {
    /// The clusters, in configuration order.
    pub clusters: Vec<SimCluster>,
}

impl SimFleet {
    /// Starts every cluster of `config` with `opts` (each on its own port).
    pub async fn start(config: FleetConfig, opts: ServeOptions) -> Result<SimFleet, SimError> {
        let mut clusters = Vec::with_capacity(config.clusters.len());
        for c in config.clusters {
            clusters.push(SimCluster::start(c, opts.clone()).await?);
        }
        // Every cluster can stop and start its siblings (`/_sim/v1/clusters/<name>/stop|start`),
        // so a test can make one cluster unreachable and bring it back over HTTP.
        let peers: std::collections::BTreeMap<String, Arc<ListenerCtl>> = clusters
            .iter()
            .filter_map(|c| c.listener.clone().map(|l| (c.name().to_owned(), l)))
            .collect();
        for c in &clusters {
            *c.state.peers.write().unwrap_or_else(|e| e.into_inner()) = peers.clone();
        }
        Ok(SimFleet { clusters })
    }

    /// A cluster by name.
    pub fn cluster(&self, name: &str) -> Option<&SimCluster> {
        self.clusters.iter().find(|c| c.name() == name)
    }

    /// Shuts every cluster down.
    pub async fn shutdown(self) {
        for c in self.clusters {
            c.shutdown().await;
        }
    }
}
