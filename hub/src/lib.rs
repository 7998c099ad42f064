//! Nave's hub: runs in the management cluster, decides where `MultiClusterDeployment` replicas go,
//! and hands each workload cluster's agent the objects it should run.
//!
//! ```text
//!  MultiClusterDeployment,          agents (pull, HTTP/JSON)
//!  WorkloadCluster (CRDs)           register, heartbeat, status
//!        │                                   │
//!        ▼                                   ▼
//!   controllers ──► placement (nave-policies) ◄── capacity models
//!        │                 │
//!        │                 ▼
//!        │        placements + history ──► REST API (/api/v1)
//!        │                 │
//!        ▼                 ▼
//!   CRD status     per-cluster work (object set @ revision) ──► agents pull and apply
//! ```
//!
//! Inside the hub, a pure core with IO at the edges:
//!
//! ```text
//!  agent ──HTTP──► agent_api ──► store (write-through) + index (records, reports, Pending pods)
//!                      │  └────► workload_clusters: WorkloadCluster objects (Joined, capacity)
//!                      └──► signals::ReconcileTrigger ─┐ (the workloads a report concerns)
//!  watch: reflectors of WorkloadClusters and MultiClusterServices ─┤
//!  MCD watch ──────────────────────────────────────────────────────┴─► controller::mcd::reconcile
//!     gather (fleet::Sources: memory only) ─► placement::plan (pure: failover, moves, decide)
//!     ─► store placement + history ─► render ─► each cluster's work set ─► signals::WorkSignals
//!     agents' reports ─► controller::mcd::status (per cluster, totals, conditions) + Events
//!  operator ──HTTP──► rest (/api/v1, tokens) ──► fleet::Sources + store (clusters, placements)
//!                        └─ simulate: gather ─► placement::plan (nothing written)
//!  controller::heartbeats: cluster records ─► cluster_health (pure rules) ─► Ready, failover view
//!  controller::removal: WorkloadCluster deleted ─► work moves away ─► store forgets ─► finalizer off
//!  usage (--prometheus-url): PromQL per signal ─► UsageCache (TTL) ─► fleet usage, /metrics
//! ```
//!
//! The modules form layers (a test checks that none uses one that uses it back):
//!
//! | layer | modules |
//! |---|---|
//! | pure core | [`placement`] (with `inputs`, `reports`, `stored`, `failover`, `moves`), [`cluster_health`], [`render`], [`network`] |
//! | state | [`store`] (SQLite, Postgres), [`index`] (in memory, written through), [`fleet`] (what plans read), [`watch`] (reflectors), [`signals`] |
//! | edges | [`controller`] (MultiClusterDeployments, heartbeats, cluster removal), [`agent_api`], [`rest`], [`api_error`], [`tokens`], [`metrics`], [`readiness`], [`usage`], [`workload_clusters`] |
//! | start-up | [`cli`], [`settings`], `run` |
//!
//! The controller and the REST API gather the plan's inputs with the same code ([`fleet`]) and
//! plan with the same function ([`placement::plan`]), so a simulation answers what an apply does.
//!
//! Everything the hub learns or decides that is not desired state lives in the [`store`]:
//! clusters, agent credentials (hashed), heartbeats, placements with their history, and each
//! cluster's work and status. The CRDs stay the source of desired state.

#![forbid(unsafe_code)]

pub mod admin_cli;
pub mod agent_api;
pub mod api_error;
pub mod autoscaler;
pub mod cli;
pub mod cluster_health;
pub mod controller;
pub mod dropin;
mod error;
pub mod feed;
#[cfg(test)]
mod fixtures;
pub mod fleet;
pub mod index;
pub mod leader;
pub mod metrics;
pub mod network;
pub mod placement;
pub mod provisioner;
pub mod readiness;
pub mod render;
pub mod rest;
pub mod rollout;
pub mod serve;
pub mod settings;
pub mod signals;
pub mod store;
pub mod tls;
pub mod tokens;
pub mod usage;
pub mod watch;
pub mod workload_clusters;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use error::Error;

use crate::agent_api::AgentState;
use crate::cli::RunArgs;
use crate::cluster_health::FleetHealth;
use crate::controller::Context;
use crate::fleet::Sources;
use crate::index::Index;
use crate::metrics::{HubMetrics, MetricsState};
use crate::settings::Timings;
use crate::signals::{ReconcileTrigger, WorkSignals};
use crate::usage::UsageCache;
use crate::workload_clusters::ClusterObjects;

/// The `User-Agent` of the hub's requests to the management cluster.
pub const USER_AGENT: &str = concat!("nave-hub/", env!("CARGO_PKG_VERSION"));

/// The CRDs of `nave-api` as one YAML stream, for `kubectl apply -f -`.
pub fn crds_yaml() -> String {
    nave_api::crds()
        .iter()
        .map(nave_api::crd_yaml)
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Runs the hub until SIGTERM or Ctrl-C.
pub async fn run(args: RunArgs) -> Result<(), Error> {
    let shutdown = CancellationToken::new();
    tokio::spawn(nave_runtime::cancel_on_signal(shutdown.clone()));
    run_until(args, shutdown).await
}

/// Runs the hub until `shutdown` is cancelled: checks the CRDs, opens the store, then serves
/// the agent endpoints and the REST API and runs the controllers, all stopping on the same token.
pub async fn run_until(args: RunArgs, shutdown: CancellationToken) -> Result<(), Error> {
    let failover = args.failover.clone();
    let token =
        std::fs::read_to_string(&args.bootstrap_token_file).map_err(|source| Error::ReadBootstrapToken {
            path: args.bootstrap_token_file.display().to_string(),
            source,
        })?;
    let token = token.trim();
    if token.is_empty() {
        return Err(Error::EmptyBootstrapToken {
            path: args.bootstrap_token_file.display().to_string(),
        });
    }
    let client = nave_runtime::kube_client(args.kubeconfig.as_deref(), USER_AGENT)
        .await
        .map_err(Error::KubeClient)?;
    let tokens = read_api_tokens(&args, &client).await?;
    if tokens.is_empty() {
        warn!("the REST API has no tokens and refuses every request; see --api-tokens-file");
    }
    check_crds(&client).await?;
    let sealer = match &args.store_key_file {
        Some(path) => {
            let material = std::fs::read(path).map_err(|source| Error::ReadStoreKey {
                path: path.display().to_string(),
                message: source.to_string(),
            })?;
            let sealer = store::sealed::Sealer::new(&material).map_err(|e| Error::ReadStoreKey {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
            info!(
                key_id = sealer.key_id(),
                "Secret payloads are sealed in the store"
            );
            Some(Arc::new(sealer))
        }
        None => {
            warn!("no --store-key-file: Secret payloads of work sets are stored in clear");
            None
        }
    };
    let store = store::connect_sealed(&args.database_url, sealer)
        .await
        .map_err(Error::OpenStore)?;
    let signals = Arc::new(WorkSignals::default());
    let timings = Timings {
        heartbeat_grace: failover.heartbeat_grace,
        failback_settle: failover.failback_settle,
        ..Timings::default()
    };
    let rules = cluster_health::Rules {
        grace: failover.heartbeat_grace,
        max_stale_percent: failover.failover_max_stale_percent,
        max_per_minute: failover.failover_max_per_minute,
    };
    let election = args.leader_election.config().map_err(Error::LeaderElection)?;
    let webhook = args.provisioner.webhook().map_err(Error::Provisioner)?;
    let trigger = ReconcileTrigger::new();
    let index = Arc::new(Index::load(store.clone()).await?);
    let metrics = Arc::new(HubMetrics::default());
    let health = Arc::new(FleetHealth::default());
    let followers = Arc::new(usage::Followers::default());
    let usage = Arc::new(match args.prometheus.prometheus_url {
        Some(_) => UsageCache::new(args.prometheus.prometheus_ttl),
        None => UsageCache::default(),
    });
    // MultiClusterHorizontalPodAutoscalers read the same Prometheus.
    let autoscale_prometheus = match &args.prometheus.prometheus_url {
        Some(url) => {
            let failed = |e: &dyn std::fmt::Display| Error::Prometheus {
                url: url.clone(),
                message: e.to_string(),
            };
            // A query that hangs must not stop every autoscaler for the rest of the term.
            let http = reqwest::Client::builder()
                .timeout(
                    args.autoscale
                        .autoscale_interval
                        .max(std::time::Duration::from_secs(5)),
                )
                .build()
                .map_err(|e| failed(&e))?;
            Some(prometheus_http_query::Client::from(http, url).map_err(|e| failed(&e))?)
        }
        None => None,
    };
    let autoscale = (autoscale_prometheus, args.autoscale.clone());
    let refresher = match args.prometheus.source() {
        Some(source) => Some(
            usage::Refresher::new(&source, usage.clone(), metrics.clone())?
                .with_status(
                    ClusterObjects::new(client.clone()),
                    timings.cluster_status_interval,
                )
                .with_trigger(trigger.clone(), followers.clone()),
        ),
        None => {
            info!("no --prometheus-url: scores use requests only");
            None
        }
    };
    let (watched, watching) = watch::start(client.clone(), trigger.clone(), shutdown.clone());
    let sources = Sources {
        objects: watched.clusters.clone(),
        objects_ready: watched.clusters_ready.clone(),
        index: index.clone(),
        health: health.clone(),
        usage: usage.clone(),
        grace: timings.heartbeat_grace,
        objects_version: watched.clusters_version.clone(),
        cache: Default::default(),
        unplaced: Default::default(),
        followers,
    };
    // On shutdown, end the agents' long-polls so the graceful shutdown does not wait them out.
    let closing = signals.clone();
    let closed = shutdown.clone();
    tokio::spawn(async move {
        closed.cancelled().await;
        closing.close();
    });
    let live_tokens = rest::Live::new(tokens);
    let state = AgentState::new(
        store.clone(),
        index.clone(),
        signals.clone(),
        token,
        Some(ClusterObjects::new(client.clone())),
        Some(trigger.clone()),
        timings.clone(),
    )
    .accepting_new_clusters(args.accept_new_clusters)
    .with_max_unaccepted_clusters(args.max_unaccepted_clusters);
    let reload_tokens = reload_tokens(
        args.clone(),
        client.clone(),
        state.bootstrap_token.clone(),
        live_tokens.clone(),
        shutdown.clone(),
    );
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| Error::Listen {
            addr: args.listen.to_string(),
            source,
        })?;
    let (serving, acceptor) = match (&args.tls_cert_file, &args.tls_key_file) {
        (Some(cert), Some(key)) => {
            let serving = tls::ServingCert::load(cert, key).map_err(Error::Tls)?;
            let config = serving.server_config().map_err(Error::Tls)?;
            info!(ca_sha256 = %serving.ca_sha256(), "serving HTTPS; agents may pin the CA with --hub-ca-sha256");
            (
                Some(serving),
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
            )
        }
        _ => {
            warn!(
                "serving plain HTTP: agents' credentials and work sets (with Secrets) cross the \
                 network in clear; give --tls-cert-file and --tls-key-file"
            );
            (None, None)
        }
    };
    info!(addr = %args.listen, metrics = %args.metrics_listen, backend = %store.backend(),
        https = acceptor.is_some(), leader_election = election.is_some(), "hub started");
    let routes = agent_api::router(state)
        .merge(rest::router(
            sources.clone(),
            store.clone(),
            live_tokens,
            rest::AdminHandles {
                objects: Some(ClusterObjects::new(client.clone())),
                trigger: Some(trigger.clone()),
                hub_ca_sha256: serving.as_ref().map(|s| s.ca_sha256()),
                signals: Some(signals.clone()),
            },
        ))
        .merge(readiness::router(store.clone()));
    // The drop-in path's admission webhook, on every replica: the API server calls any of them.
    let routes = if args.drop_in {
        if acceptor.is_none() {
            warn!("--drop-in without HTTPS: the API server calls admission webhooks over HTTPS only");
        }
        routes.merge(dropin::router(client.clone()))
    } else {
        routes
    };
    // /metrics on a listener of its own, plain HTTP inside the management cluster, with the
    // probes: scrapers and kubelets need neither the agents' port nor its certificate.
    let metrics_listener = tokio::net::TcpListener::bind(args.metrics_listen)
        .await
        .map_err(|source| Error::Listen {
            addr: args.metrics_listen.to_string(),
            source,
        })?;
    let metrics_routes = metrics::router(MetricsState {
        metrics: metrics.clone(),
        store: store.clone(),
        usage: usage.clone(),
        grace: timings.heartbeat_grace,
    })
    .merge(readiness::router(store.clone()));
    let metrics_server = serve::serve(
        metrics_listener,
        metrics_routes,
        serve::Limits::default(),
        None,
        shutdown.clone(),
    );
    let server = serve::serve(
        listener,
        routes,
        serve::Limits::default(),
        acceptor,
        shutdown.clone(),
    );
    let reload = async {
        if let Some(serving) = serving {
            serving
                .watch(std::time::Duration::from_secs(30), shutdown.clone())
                .await;
        }
    };
    // Every replica follows what the others write (a no-op on SQLite: one hub per file).
    let following = feed::run(
        feed::Follower {
            store: store.clone(),
            index: index.clone(),
            signals: signals.clone(),
            trigger: trigger.clone(),
            grace: timings.heartbeat_grace,
        },
        shutdown.clone(),
    );
    // Who leads: the Lease's holder, or this hub alone.
    let election = match election {
        Some(config) => Election::Lease(Box::new(
            leader::Elector::new(client.clone(), config).counting(metrics.clone()),
        )),
        None => Election::Alone(args.leader_election.identity()),
    };
    let leading = lead(
        Leading {
            client: client.clone(),
            store: store.clone(),
            signals: signals.clone(),
            sources: sources.clone(),
            watched,
            metrics: metrics.clone(),
            health,
            trigger: trigger.clone(),
            timings: timings.clone(),
            rules,
            refresher,
            webhook,
            autoscale,
            drop_in: args.drop_in,
            resource_kinds: Arc::new(args.resources.kinds()),
        },
        election,
        shutdown.clone(),
    );
    let (served, led, (), (), (), (), ()) = tokio::join!(
        async {
            server.await;
            // Everything else stops too when the server stops.
            shutdown.cancel();
            Ok::<(), Error>(())
        },
        async {
            let led = leading.await;
            // A hub fenced off its store (no election) stops serving too.
            shutdown.cancel();
            led
        },
        following,
        watching,
        reload,
        metrics_server,
        reload_tokens
    );
    store.close().await.map_err(Error::OpenStore)?;
    served.and(led)
}

/// How this replica comes to lead.
enum Election {
    /// Through the Lease, against the other replicas.
    Lease(Box<leader::Elector>),
    /// Alone (no election), claiming the store's next term under this identity.
    Alone(String),
}

/// What the leading replica runs with.
struct Leading {
    client: kube::Client,
    store: Arc<dyn store::Store>,
    signals: Arc<WorkSignals>,
    sources: Sources,
    watched: watch::Watched,
    metrics: Arc<HubMetrics>,
    health: Arc<FleetHealth>,
    trigger: ReconcileTrigger,
    timings: Timings,
    rules: cluster_health::Rules,
    refresher: Option<usage::Refresher>,
    webhook: Option<provisioner::Webhook>,
    /// MultiClusterHorizontalPodAutoscalers: the Prometheus they read, and how often.
    autoscale: (Option<prometheus_http_query::Client>, cli::AutoscaleArgs),
    /// Place annotated Deployments of the management cluster (`--drop-in`).
    drop_in: bool,
    /// The kinds MultiClusterResources may send (`--resource-kind`).
    resource_kinds: Arc<render::resource::ResourceKinds>,
}

/// Leads whenever this replica holds the lead, until `shutdown`: each term runs what only the
/// leader runs (the controllers, the heartbeat checks, Prometheus reads, retention), from a
/// fresh read of the store, and stops it all before this replica may lead again. A replica that
/// leads alone (no election) and finds another hub claimed its store stops with
/// [`Error::LeadershipLost`] rather than take it back (two hubs would take turns forever).
async fn lead(
    mut leading: Leading,
    mut election: Election,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    loop {
        let store = leading.store.clone();
        let term = match &mut election {
            Election::Lease(elector) => elector.acquire(store.as_ref(), &shutdown).await,
            Election::Alone(identity) => leader::claim_alone(store.as_ref(), identity, &shutdown).await,
        };
        let Some(term) = term else { return Ok(()) };
        let term_over = shutdown.child_token();
        let keeping = async {
            let kept = match &mut election {
                Election::Lease(elector) => elector.keep(store.as_ref(), term, &shutdown).await,
                Election::Alone(_) => leader::keep_alone(store.as_ref(), term, &shutdown).await,
            };
            // Stop what leads at once; the store refuses its writes from now on anyway.
            term_over.cancel();
            kept
        };
        let ((), kept) = tokio::join!(run_term(&mut leading, term, &term_over), keeping);
        leading.metrics.set_leading(0);
        leading.trigger.detach();
        match kept {
            leader::Kept::Shutdown => return Ok(()),
            leader::Kept::Lost if matches!(election, Election::Alone(_)) => {
                return Err(Error::LeadershipLost { term });
            }
            leader::Kept::Lost => {
                warn!(
                    term,
                    "no longer leading; following until this replica leads again"
                );
                // What the next leader writes reaches this replica through the change feed;
                // what this one booked and did not write must not linger.
                if let Err(error) = leading.sources.index.reload(index::Reload::Everything).await {
                    warn!(error = %error, "reading the store after leading failed; the change feed repairs it");
                }
            }
        }
    }
}

/// One term of leading, until `term_over`.
async fn run_term(leading: &mut Leading, term: u64, term_over: &CancellationToken) {
    let Leading {
        client,
        store,
        signals,
        sources,
        watched,
        metrics,
        health,
        trigger,
        timings,
        rules,
        refresher,
        webhook,
        autoscale,
        drop_in,
        resource_kinds,
    } = leading;
    // A new term: the work sets are complete again once this leader's first pass is done. Read
    // everything the previous leader and the other replicas wrote, after the claim of the term
    // (no earlier term writes any more).
    signals.set_published(false);
    let index = sources.index.clone();
    let mut backoff = std::time::Duration::from_millis(200);
    while let Err(error) = index.reload(index::Reload::Everything).await {
        warn!(error = %error, "reading the store to lead failed; retrying");
        tokio::select! {
            () = term_over.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
    }
    metrics.set_leading(term);
    // Who follows their traffic is learnt again by this term's first pass: an MCD deleted while
    // another replica led is not among them.
    sources.followers.clear();
    metrics.forget_traffic_locality();
    let triggered = trigger.attach();
    info!(term, "this replica leads: placing workloads");
    let mut ctx = Context::new(
        client.clone(),
        store.clone(),
        signals.clone(),
        sources.clone(),
        watched.clone(),
        metrics.clone(),
        timings.resync,
    );
    ctx.resource_kinds = resource_kinds.clone();
    let ctx = Arc::new(ctx);
    let monitor = controller::heartbeats::Monitor {
        index: index.clone(),
        health: health.clone(),
        objects: ClusterObjects::new(client.clone()),
        recorder: ctx.recorder.clone(),
        trigger: trigger.clone(),
        rules: rules.clone(),
        failback_settle: timings.failback_settle,
    };
    let remover = controller::removal::Remover {
        watched: watched.clone(),
        store: store.clone(),
        index: index.clone(),
        objects: ClusterObjects::new(client.clone()),
        recorder: ctx.recorder.clone(),
        trigger: trigger.clone(),
    };
    tokio::join!(
        controller::flush_work(ctx.clone(), term_over.clone()),
        controller::removal::run(remover, term_over.clone()),
        provisioner::run(
            sources.unplaced.clone(),
            webhook.clone(),
            metrics.clone(),
            {
                let signals = signals.clone();
                move || signals.published()
            },
            term_over.clone(),
        ),
        autoscaler::run(
            autoscaler::Autoscaling {
                client: client.clone(),
                prometheus: autoscale.0.clone(),
                reports: index.clone(),
                report_age: timings.heartbeat_grace,
                interval: autoscale.1.autoscale_interval,
                rate_window: autoscale.1.autoscale_rate_window.clone(),
                metrics: autoscale
                    .1
                    .autoscale_metric
                    .iter()
                    .map(|m| (m.name.clone(), m.query.clone()))
                    .collect(),
                recorder: ctx.recorder.clone(),
            },
            term_over.clone(),
        ),
        async {
            if *drop_in {
                dropin::run(client.clone(), term_over.clone()).await;
            }
        },
        controller::run(ctx, triggered, term_over.clone()),
        controller::heartbeats::run(monitor, term_over.clone()),
        async {
            if let Some(refresher) = refresher {
                refresher.run(term_over.clone()).await;
            }
        },
        store::retention::run(
            store.clone(),
            store::retention::Retention::default(),
            term_over.clone(),
        ),
    );
}

/// The REST API tokens of the file and the Secret the arguments name.
async fn read_api_tokens(args: &RunArgs, client: &kube::Client) -> Result<rest::ApiTokens, Error> {
    let mut tokens = match &args.api_tokens_file {
        Some(path) => rest::ApiTokens::from_file(path).map_err(Error::ApiTokens)?,
        None => rest::ApiTokens::default(),
    };
    if let Some(reference) = &args.api_tokens_secret {
        tokens = tokens.with(api_tokens_secret(client, reference).await?);
    }
    Ok(tokens)
}

/// How often the token files' modification times, and the tokens Secret, are looked at.
const TOKENS_RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads the bootstrap token and the REST API tokens again when their files (or the tokens
/// Secret) change, until `shutdown`. A change that cannot be read keeps the tokens in use.
async fn reload_tokens(
    args: RunArgs,
    client: kube::Client,
    bootstrap: rest::Live<Arc<str>>,
    api: rest::Live<rest::ApiTokens>,
    shutdown: CancellationToken,
) {
    let modified = |path: &std::path::Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    // Not the files' times now: a file rewritten between the start-up read and this task's start
    // would look unchanged for ever. The first tick reads both again; what is the same is kept
    // without a word.
    let mut bootstrap_seen = None;
    let mut api_seen = None;
    let mut api_fingerprint = api.get().fingerprint();
    let mut tick = tokio::time::interval(TOKENS_RELOAD_INTERVAL);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = modified(&args.bootstrap_token_file);
        if now != bootstrap_seen {
            bootstrap_seen = now;
            match std::fs::read_to_string(&args.bootstrap_token_file) {
                Ok(text) if text.trim() == &*bootstrap.get() => {}
                Ok(text) if !text.trim().is_empty() => {
                    bootstrap.set(Arc::from(text.trim()));
                    info!("the bootstrap token file changed; the new token is in use");
                }
                Ok(_) => warn!("the bootstrap token file is now empty; keeping the previous token"),
                Err(error) => {
                    warn!(error = %error, "cannot read the changed bootstrap token file; keeping the previous token")
                }
            }
        }
        let file_changed = {
            let now = args.api_tokens_file.as_deref().and_then(modified);
            let changed = now != api_seen;
            api_seen = now;
            changed
        };
        if !file_changed && args.api_tokens_secret.is_none() {
            continue;
        }
        match read_api_tokens(&args, &client).await {
            Ok(tokens) => {
                let fingerprint = tokens.fingerprint();
                if fingerprint != api_fingerprint {
                    api_fingerprint = fingerprint;
                    info!(
                        tokens = tokens.len(),
                        "the REST API tokens changed; the new set is in use"
                    );
                    api.set(tokens);
                }
            }
            Err(error) => {
                warn!(error = %error, "cannot read the changed REST API tokens; keeping the previous set")
            }
        }
    }
}

/// The REST API tokens of the Secret `namespace/name`.
async fn api_tokens_secret(client: &kube::Client, reference: &str) -> Result<rest::ApiTokens, Error> {
    let (namespace, name) = reference
        .split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
        .ok_or_else(|| Error::ApiTokens(rest::TokensError::SecretName(reference.to_owned())))?;
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map_err(Error::kube("reading the REST API tokens Secret"))?;
    rest::ApiTokens::from_secret(reference, &secret).map_err(Error::ApiTokens)
}

/// Fails with how to install them when the CRDs are missing from the management cluster.
pub async fn check_crds(client: &kube::Client) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in nave_api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api.get_opt(&name).await {
            Ok(Some(_)) => {}
            Ok(None) => return Err(Error::CrdMissing { name }),
            Err(source) => return Err(Error::CheckCrd { name, source }),
        }
    }
    Ok(())
}
