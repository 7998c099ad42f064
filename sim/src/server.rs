//! The API server of one simulated cluster: shared state, the axum router, the middleware every
//! request passes (auth, injected faults, request log, `Cache-Control`), and the listener that can
//! be stopped and restarted on the same port.
//!
//! ```text
//!  TCP ─► [TLS: rustls, ALPN h2/http1.1] ─► hyper auto (h1 + h2) ─► Router
//!    Router: /version /healthz /livez /readyz /openapi/* /metrics /_sim/v1/* (hooks + admin)
//!            /api/** /apis/** ─► rest::handle ─► [admission webhooks] ─► store / watch / discovery
//!                                 └─► metrics.k8s.io: resource_metrics ◄─ the control plane's usage model
//!    middleware (outermost): Cache-Control, auth, faults, latency, request log
//! ```

pub mod admission;
pub mod convert;
pub mod crd;
pub mod defaults;
pub mod discovery;
pub mod error;
pub mod gc;
pub mod hooks;
pub mod kubeconfig;
pub mod meta;
pub mod openapi;
pub mod podspec;
pub mod proto;
pub mod resource_metrics;
pub mod resources;
pub mod rest;
pub mod store;
pub mod subresources;
pub mod system;
pub mod table;
pub mod tls;
pub mod watch;
pub mod write;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use http::{HeaderValue, StatusCode, header};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::controllers::ControlPlane;
use error::ApiError;
use hooks::{Faults, LoggedRequest, RequestLog};
use resources::Registry;
use store::Store;

/// How clients authenticate.
#[derive(Debug, Clone, Default)]
pub enum Auth {
    /// Any bearer token (or none) is accepted.
    #[default]
    AnyToken,
    /// Only these tokens (token → user name); others get 401.
    Strict(BTreeMap<String, String>),
}

/// Everything one cluster's handlers share.
#[derive(Debug)]
pub struct ClusterState {
    /// The cluster name.
    pub name: String,
    /// Objects, resourceVersions and the event log.
    pub store: Store,
    /// Servable resource types (built-ins + established CRDs).
    pub registry: RwLock<Registry>,
    /// Injected faults.
    pub faults: Faults,
    /// The request log.
    pub requests: RequestLog,
    /// Token checking.
    pub auth: Auth,
    /// Cancelled when the cluster shuts down.
    pub shutdown: CancellationToken,
    /// The running control plane, once started.
    pub control_plane: RwLock<Option<ControlPlane>>,
    /// The mutating admission webhooks, compiled from the MutatingWebhookConfigurations.
    pub webhooks: admission::Webhooks,
    watch_drop: Mutex<CancellationToken>,
    address: Mutex<String>,
    listener: Mutex<Option<Arc<ListenerCtl>>>,
    /// The listeners of every cluster of the same fleet, by name (fleet-level stop/start hooks).
    pub peers: RwLock<BTreeMap<String, Arc<ListenerCtl>>>,
    /// Whether `metrics.k8s.io` is served (see [`ClusterState::serve_metrics_api`]).
    metrics_api: std::sync::atomic::AtomicBool,
}

impl ClusterState {
    /// A cluster with an empty store.
    pub fn new(name: &str, auth: Auth, event_log_capacity: usize) -> Arc<ClusterState> {
        Arc::new(ClusterState {
            name: name.to_owned(),
            store: Store::new(event_log_capacity),
            registry: RwLock::new(Registry::new()),
            faults: Faults::default(),
            requests: RequestLog::default(),
            auth,
            shutdown: CancellationToken::new(),
            control_plane: RwLock::new(None),
            webhooks: admission::Webhooks::default(),
            watch_drop: Mutex::new(CancellationToken::new()),
            address: Mutex::new("127.0.0.1:0".to_owned()),
            listener: Mutex::new(None),
            peers: RwLock::new(BTreeMap::new()),
            metrics_api: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// Serves the resource metrics API (`metrics.k8s.io`) or, with `false`, not at all, as a
    /// cluster without metrics-server: its paths answer 404 and discovery leaves it out. Set it
    /// before [`ClusterState::bootstrap`], which lists the served groups' APIServices.
    pub fn serve_metrics_api(&self, serve: bool) {
        self.metrics_api.store(serve, std::sync::atomic::Ordering::SeqCst);
        *self.registry.write().unwrap_or_else(|e| e.into_inner()) = self.builtin_registry();
    }

    /// The built-in types this cluster serves.
    fn builtin_registry(&self) -> Registry {
        let mut registry = Registry::new();
        if !self.metrics_api.load(std::sync::atomic::Ordering::SeqCst) {
            registry.remove_group(resource_metrics::GROUP);
        }
        registry
    }

    /// The token whose cancellation ends every open watch (the drop-watches hook).
    pub fn watch_drop_token(&self) -> CancellationToken {
        self.watch_drop.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Ends every open watch stream; new watches are unaffected.
    pub fn drop_watches(&self) {
        let mut t = self.watch_drop.lock().unwrap_or_else(|e| e.into_inner());
        t.cancel();
        *t = CancellationToken::new();
    }

    /// `host:port` the cluster serves on.
    pub fn address(&self) -> String {
        self.address.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_address(&self, a: String) {
        *self.address.lock().unwrap_or_else(|e| e.into_inner()) = a;
    }

    /// The listener, when the cluster has one.
    pub fn listener(&self) -> Option<Arc<ListenerCtl>> {
        self.listener.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_listener(&self, l: Arc<ListenerCtl>) {
        *self.listener.lock().unwrap_or_else(|e| e.into_inner()) = Some(l);
    }

    /// Removes every object except the system namespaces, nodes and node leases (the reset hook),
    /// then recreates the other objects every cluster has.
    pub fn reset(&self) {
        for (table, obj) in self.store.all_objects() {
            let key = (
                meta::meta_str(&obj, "namespace").unwrap_or_default().to_owned(),
                meta::meta_str(&obj, "name").unwrap_or_default().to_owned(),
            );
            if hooks::kept_on_reset(&table, &key) {
                continue;
            }
            let _ = self.store.commit(&table, &key, Some(&obj), None);
        }
        *self.registry.write().unwrap_or_else(|e| e.into_inner()) = self.builtin_registry();
        // What every cluster has comes back at once, as a real API server recreates it.
        if let Err(e) = self.bootstrap() {
            tracing::warn!(error = %e.message, "recreating the system objects after a reset failed");
        }
        self.reload_webhooks();
    }
}

async fn version() -> Response {
    let v = json!({
        "major": "1", "minor": "32", "gitVersion": "v1.32.0-kubesim",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc", "platform": "linux/amd64"
    });
    let mut r = (StatusCode::OK, v.to_string()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

async fn ok() -> Response {
    let mut r = (StatusCode::OK, "ok").into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn openapi_v2() -> Response {
    ApiError::no_route("/openapi/v2").into_response()
}

async fn openapi_v3(State(s): State<Arc<ClusterState>>, req: Request) -> Response {
    let rest = req.uri().path().trim_start_matches("/openapi/v3").to_owned();
    match openapi::serve_v3(&s, &rest) {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn api(State(s): State<Arc<ClusterState>>, req: Request) -> Response {
    let path = req.uri().path();
    if path == "/api" || path.starts_with("/api/") || path == "/apis" || path.starts_with("/apis/") {
        return rest::handle(s, req).await;
    }
    ApiError::no_route(path).into_response()
}

async fn metrics(State(s): State<Arc<ClusterState>>) -> Response {
    let body = s
        .control_plane
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(ControlPlane::render_metrics);
    let mut r = (StatusCode::OK, body.unwrap_or_default()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

/// The API routes (no hooks, no fault middleware): what in-process clients and the control
/// plane talk to.
pub fn api_router(state: Arc<ClusterState>) -> axum::Router {
    axum::Router::new()
        .route("/version", get(version))
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(ok))
        .route("/openapi/v2", any(openapi_v2))
        .route("/openapi/v3", get(openapi_v3))
        .route("/openapi/v3/{*rest}", get(openapi_v3))
        .fallback(api)
        .with_state(state.clone())
        .layer(axum::middleware::from_fn(cache_control))
}

/// The full router of the listener: API + hooks + control-plane admin routes + `/metrics`, with
/// auth, faults and the request log.
pub fn full_router(state: Arc<ClusterState>, admin: axum::Router) -> axum::Router {
    let sim = hooks::router(state.clone()).merge(admin);
    api_router(state.clone())
        .nest("/_sim/v1", sim)
        .route("/metrics", get(metrics).with_state(state.clone()))
        .layer(axum::middleware::from_fn_with_state(state, outer))
        .layer(axum::middleware::from_fn(cache_control))
}

async fn cache_control(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    // The real API server's default. Without it the kubectl version dispatcher caches `/version`
    // and keeps running the kubectl of a server that has since changed its minor version.
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    resp
}

async fn outer(State(s): State<Arc<ClusterState>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let internal = path.starts_with("/_sim/") || path == "/metrics";
    if internal {
        return next.run(req).await;
    }
    let start = Instant::now();
    let h = req.headers();
    let hv = |n: header::HeaderName| {
        h.get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let method = req.method().as_str().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let manager = rest::Query::parse(Some(&query))
        .get("fieldManager")
        .unwrap_or_default()
        .to_owned();
    let (ct, accept, ua, authz) = (
        hv(header::CONTENT_TYPE),
        hv(header::ACCEPT),
        hv(header::USER_AGENT),
        hv(header::AUTHORIZATION),
    );
    let health = matches!(path.as_str(), "/healthz" | "/livez" | "/readyz");
    let resp = if let (Auth::Strict(tokens), false) = (&s.auth, health) {
        let token = authz.strip_prefix("Bearer ").unwrap_or_default();
        if tokens.contains_key(token) {
            None
        } else {
            Some(ApiError::unauthorized().into_response())
        }
    } else {
        None
    };
    let resp = match resp {
        Some(r) => r,
        None => {
            let latency = s.faults.latency();
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            match s.faults.check(&method, &path) {
                Some(e) => e.into_response(),
                None => next.run(req).await,
            }
        }
    };
    s.requests.push(LoggedRequest {
        method,
        path,
        query,
        content_type: ct,
        accept,
        user_agent: ua,
        manager,
        code: resp.status().as_u16(),
        millis: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
    });
    resp
}

/// A listener that can be closed (connection refused) and reopened on the same address.
pub struct ListenerCtl {
    addr: SocketAddr,
    router: axum::Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    running: Mutex<Option<CancellationToken>>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for ListenerCtl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerCtl")
            .field("addr", &self.addr)
            .field("tls", &self.tls.is_some())
            .field("running", &self.is_running())
            .finish()
    }
}

impl ListenerCtl {
    /// Binds `addr` (port 0 = ephemeral) and starts serving.
    pub async fn bind(
        addr: SocketAddr,
        router: axum::Router,
        tls: Option<Arc<rustls::ServerConfig>>,
        shutdown: CancellationToken,
    ) -> std::io::Result<Arc<ListenerCtl>> {
        let listener = bind_reuse(addr)?;
        let addr = listener.local_addr()?;
        let ctl = Arc::new(ListenerCtl {
            addr,
            router,
            tls: tls.map(tokio_rustls::TlsAcceptor::from),
            running: Mutex::new(None),
            shutdown,
        });
        ctl.spawn(listener);
        Ok(ctl)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the listener is accepting connections.
    pub fn is_running(&self) -> bool {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Closes the listener and every open connection: clients get "connection refused".
    pub fn stop(&self) {
        if let Some(t) = self.running.lock().unwrap_or_else(|e| e.into_inner()).take() {
            t.cancel();
        }
    }

    /// Reopens the listener on the same address.
    pub async fn start(&self) -> std::io::Result<()> {
        if self.is_running() {
            return Ok(());
        }
        // The old socket may linger briefly after close; retry for a moment.
        let mut last_err = None;
        for _ in 0..50 {
            match bind_reuse(self.addr) {
                Ok(l) => {
                    self.spawn(l);
                    return Ok(());
                }
                Err(e) => {
                    last_err = Some(e);
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            }
        }
        Err(last_err.unwrap_or_else(|| std::io::Error::other("bind failed")))
    }

    fn spawn(&self, listener: tokio::net::TcpListener) {
        let token = self.shutdown.child_token();
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = Some(token.clone());
        let router = self.router.clone();
        let tls = self.tls.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = token.cancelled() => break,
                    a = listener.accept() => a,
                };
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let router = router.clone();
                let tls = tls.clone();
                let token = token.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = token.cancelled() => {}
                        _ = serve_connection(stream, router, tls) => {}
                    }
                });
            }
        });
    }
}

fn bind_reuse(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    router: axum::Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;
    let service = TowerToHyperService::new(router);
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(1000);
    match tls {
        Some(acceptor) => {
            let Ok(tls_stream) = acceptor.accept(stream).await else {
                return;
            };
            let _ = builder
                .serve_connection_with_upgrades(TokioIo::new(tls_stream), service)
                .await;
        }
        None => {
            let _ = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .await;
        }
    }
}

impl ClusterState {
    /// Attaches a started listener and records its address.
    pub fn attach_listener(&self, l: Arc<ListenerCtl>) {
        self.set_address(l.addr().to_string());
        self.set_listener(l);
    }
}
