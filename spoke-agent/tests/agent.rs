//! The agent against a simulated workload cluster (nave-sim, in process) and a hub test double
//! that speaks the `/agent/v1` protocol: registration, heartbeats with the real capacity, apply
//! and prune, restart, hub outage, pending pods.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret, Service};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use nave_agent::Config;
use nave_api::wire::{
    ErrorBody, HEARTBEAT_PATH, Heartbeat, HeartbeatAnswer, HeldReason, INSTALLATION_LABEL, MANAGED_BY_LABEL,
    REGISTER_PATH, REVISION_ANNOTATION, RegisterRequest, RegisterResponse, STATUS_DELTA_PATH, STATUS_PATH,
    StatusDelta, StatusReport, WORK_PATH, WORKLOAD_LABEL, WorkQuery, WorkSet,
};
use nave_sim::{ClusterConfig, ServeOptions, SimCluster};
use nave_testkit::{DEADLINE, wait_for};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const BOOTSTRAP_TOKEN: &str = "bootstrap-s3cret";

// ---------------------------------------------------------------------------------------------
// Hub test double: the protocol's semantics, none of the hub's logic.

/// What the hub test double saw, and the work set it serves.
#[derive(Default)]
struct HubDoubleState {
    registrations: Vec<RegisterRequest>,
    /// credential -> cluster.
    credentials: BTreeMap<String, String>,
    heartbeats: Vec<Heartbeat>,
    statuses: Vec<StatusReport>,
    work_queries: Vec<WorkQuery>,
    /// Whether heartbeats are answered saying the double takes status deltas.
    takes_deltas: bool,
    /// Deltas taken (their reports are in `statuses`, whole) and refused with `409`.
    deltas_taken: usize,
    deltas_refused: usize,
}

/// A minimal protocol-conformant stand-in for the hub's agent endpoints. Restartable on the same
/// port to simulate an outage; what it recorded and serves survives restarts.
#[derive(Clone)]
struct HubDouble {
    state: Arc<Mutex<HubDoubleState>>,
    work: Arc<tokio::sync::watch::Sender<Option<WorkSet>>>,
    addr: SocketAddr,
    server: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl HubDouble {
    async fn start() -> HubDouble {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let double = HubDouble {
            state: Arc::default(),
            work: Arc::new(tokio::sync::watch::channel(None).0),
            addr: listener.local_addr().unwrap(),
            server: Arc::default(),
        };
        double.serve(listener);
        double
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let router = Router::new()
            .route(REGISTER_PATH, post(register))
            .route(HEARTBEAT_PATH, post(heartbeat))
            .route(STATUS_PATH, post(status))
            .route(STATUS_DELTA_PATH, post(status_delta))
            .route(WORK_PATH, get(work))
            .with_state(self.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        *self.server.lock().unwrap() = Some(task);
    }

    /// Stops answering: the listener and every open connection are dropped.
    fn stop(&self) {
        if let Some(task) = self.server.lock().unwrap().take() {
            task.abort();
        }
    }

    /// Answers again on the same address.
    async fn restart(&self) {
        let listener = wait_for("the hub double's port to be free again", DEADLINE, || async {
            tokio::net::TcpListener::bind(self.addr)
                .await
                .map_err(|e| e.to_string())
        })
        .await;
        self.serve(listener);
    }

    fn set_work(&self, revision: u64, objects: Vec<Value>) {
        self.work.send_replace(Some(WorkSet {
            cluster: "sim-1".into(),
            revision,
            objects,
            ..WorkSet::default()
        }));
    }

    /// Serves a set from store `store`, said to be complete or not.
    fn set_store_work(&self, store: &str, revision: u64, complete: bool, objects: Vec<Value>) {
        self.work.send_replace(Some(WorkSet {
            cluster: "sim-1".into(),
            revision,
            objects,
            store: Some(store.to_owned()),
            complete,
            ..WorkSet::default()
        }));
    }

    /// Serves a complete set of store `a`, its removals confirmed up to `confirmed`.
    fn set_confirmed_work(&self, revision: u64, confirmed: Option<u64>, objects: Vec<Value>) {
        self.work.send_replace(Some(WorkSet {
            cluster: "sim-1".into(),
            revision,
            objects,
            store: Some("a".to_owned()),
            complete: true,
            prune_confirmed: confirmed,
            ..WorkSet::default()
        }));
    }

    fn snapshot<T>(&self, f: impl FnOnce(&HubDoubleState) -> T) -> T {
        f(&self.state.lock().unwrap())
    }
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = ErrorBody {
        error: code.into(),
        message: message.into(),
    };
    (status, Json(body)).into_response()
}

fn reject(status: StatusCode, code: &str, message: &str) -> Box<Response> {
    Box::new(error(status, code, message))
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::to_owned)
}

/// The credential's cluster, or the 401/403 answer.
fn authorize(hub: &HubDouble, headers: &HeaderMap, named: Option<&str>) -> Result<String, Box<Response>> {
    let state = hub.state.lock().unwrap();
    let Some(cluster) = bearer(headers).and_then(|t| state.credentials.get(&t).cloned()) else {
        return Err(reject(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "unknown credential",
        ));
    };
    if named.is_some_and(|n| n != cluster) {
        return Err(reject(
            StatusCode::FORBIDDEN,
            "forbidden",
            "credential of another cluster",
        ));
    }
    Ok(cluster)
}

async fn register(
    State(hub): State<HubDouble>,
    headers: HeaderMap,
    Json(req): Json<RegisterRequest>,
) -> Response {
    if bearer(&headers).as_deref() != Some(BOOTSTRAP_TOKEN) {
        return error(StatusCode::UNAUTHORIZED, "unauthorized", "bad bootstrap token");
    }
    let mut state = hub.state.lock().unwrap();
    let credential = format!("cred-{}-{}", req.cluster_name, state.registrations.len());
    state.credentials.retain(|_, c| *c != req.cluster_name);
    state
        .credentials
        .insert(credential.clone(), req.cluster_name.clone());
    state.registrations.push(req.clone());
    Json(RegisterResponse {
        cluster_name: req.cluster_name,
        credential,
        heartbeat_interval_seconds: 10,
        max_work_wait_seconds: 60,
    })
    .into_response()
}

async fn heartbeat(State(hub): State<HubDouble>, headers: HeaderMap, Json(hb): Json<Heartbeat>) -> Response {
    if let Err(r) = authorize(&hub, &headers, hb.cluster_name.as_deref()) {
        return *r;
    }
    let mut state = hub.state.lock().unwrap();
    state.heartbeats.push(hb);
    if state.takes_deltas {
        return Json(HeartbeatAnswer {
            status_deltas: true,
            ..HeartbeatAnswer::default()
        })
        .into_response();
    }
    StatusCode::NO_CONTENT.into_response()
}

/// Takes a delta over the latest report when it is the delta's base, as the hub does.
async fn status_delta(
    State(hub): State<HubDouble>,
    headers: HeaderMap,
    Json(delta): Json<StatusDelta>,
) -> Response {
    if let Err(r) = authorize(&hub, &headers, delta.cluster_name.as_deref()) {
        return *r;
    }
    let mut state = hub.state.lock().unwrap();
    let base = state
        .statuses
        .last()
        .filter(|r| r.id.as_deref() == Some(delta.base.as_str()))
        .cloned();
    let Some(base) = base else {
        state.deltas_refused += 1;
        return error(StatusCode::CONFLICT, "conflict", "base: not the report held");
    };
    let report = base.with_delta(delta).expect("a delta within bounds");
    state.statuses.push(report);
    state.deltas_taken += 1;
    StatusCode::NO_CONTENT.into_response()
}

async fn status(
    State(hub): State<HubDouble>,
    headers: HeaderMap,
    Json(report): Json<StatusReport>,
) -> Response {
    if let Err(r) = authorize(&hub, &headers, report.cluster_name.as_deref()) {
        return *r;
    }
    hub.state.lock().unwrap().statuses.push(report);
    StatusCode::NO_CONTENT.into_response()
}

async fn work(State(hub): State<HubDouble>, headers: HeaderMap, Query(q): Query<WorkQuery>) -> Response {
    if let Err(r) = authorize(&hub, &headers, q.cluster.as_deref()) {
        return *r;
    }
    hub.state.lock().unwrap().work_queries.push(q.clone());
    let mut rx = hub.work.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(q.wait.unwrap_or(0).min(60));
    loop {
        let current = rx.borrow_and_update().clone();
        if let Some(set) = current
            && (Some(set.revision) != q.after
                || (q.held && set.complete)
                || q.prune_confirmed
                    .is_some_and(|seen| q.after.is_some() && seen != set.prune_confirmed.unwrap_or(0)))
        {
            return Json(set).into_response();
        }
        if tokio::time::timeout_at(deadline, rx.changed()).await.is_err() {
            return StatusCode::NO_CONTENT.into_response();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fixtures

async fn start_cluster() -> (SimCluster, Client) {
    let config = ClusterConfig {
        name: "sim-1".into(),
        ..ClusterConfig::default()
    };
    let sim = SimCluster::start(config, ServeOptions::default())
        .await
        .expect("sim starts");
    let client = sim.client().await.expect("sim client");
    (sim, client)
}

struct RunningAgent {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<nave_agent::Result<()>>,
}

impl RunningAgent {
    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the agent stops within 10s of shutdown")
            .expect("agent task")
            .expect("agent ends cleanly");
    }
}

fn token_file() -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), format!("{BOOTSTRAP_TOKEN}\n")).unwrap();
    file
}

fn start_agent(client: &Client, hub: &HubDouble, token: &tempfile::NamedTempFile) -> RunningAgent {
    start_configured(client, test_config(hub, token))
}

/// The agent's configuration for tests: quick heartbeats, short waits and retries.
fn test_config(hub: &HubDouble, token: &tempfile::NamedTempFile) -> Config {
    let mut config = Config::new(hub.url(), "sim-1", token.path());
    config.trust.insecure_http = true;
    config.heartbeat_interval = Some(Duration::from_millis(200));
    config.status_interval = Duration::from_secs(1);
    config.work_wait = Duration::from_secs(2);
    config.retry_initial = Duration::from_millis(50);
    config.retry_max = Duration::from_millis(500);
    config
}

/// [`test_config`] with Widgets allowed, so that one the cluster does not serve is a failure to
/// apply (tried again), not a refusal.
fn test_config_with_widgets(hub: &HubDouble, token: &tempfile::NamedTempFile) -> Config {
    let mut config = test_config(hub, token);
    config.allow_kinds = nave_agent::allowed::DEFAULT_KINDS
        .iter()
        .map(|k| (*k).to_owned())
        .chain(["Widget.example.com".to_owned()])
        .collect();
    config
}

fn start_configured(client: &Client, config: Config) -> RunningAgent {
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(nave_agent::run_agent(config, client.clone(), shutdown.clone()));
    RunningAgent { shutdown, task }
}

fn deployment(name: &str, replicas: i32, cpu: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop", "labels": {WORKLOAD_LABEL: format!("shop.{name}")}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "app", "image": "nginx:1.27",
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}
                }]}
            }
        }
    })
}

fn service(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "shop", "labels": {WORKLOAD_LABEL: format!("shop.{name}")}},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]}
    })
}

fn config_map(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "shop", "labels": {WORKLOAD_LABEL: "shop.web"}},
        "data": {"greeting": "hello"}
    })
}

/// The applied revisions of the status reports the double received, in order.
fn applied_revisions(state: &HubDoubleState) -> Vec<Option<u64>> {
    state.statuses.iter().map(|r| r.applied_revision).collect()
}

/// `Ok` once the double has received more than `before` heartbeats.
fn heartbeats_after(state: &HubDoubleState, before: usize) -> Result<(), String> {
    let count = state.heartbeats.len();
    if count > before {
        Ok(())
    } else {
        Err(format!("{count} heartbeat(s), waiting for more than {before}"))
    }
}

/// The latest status report the double received that says `revision` is applied.
async fn wait_applied(hub: &HubDouble, revision: u64) -> StatusReport {
    wait_for(
        &format!("a status report with appliedRevision {revision}"),
        DEADLINE,
        || async {
            hub.snapshot(|s| {
                s.statuses
                    .iter()
                    .rev()
                    .find(|r| r.applied_revision == Some(revision))
                    .cloned()
                    .ok_or_else(|| format!("applied revisions reported: {:?}", applied_revisions(s)))
            })
        },
    )
    .await
}

/// The newest heartbeat's held set, once it is held for `reason` at `revision`.
async fn wait_held(hub: &HubDouble, reason: HeldReason, revision: u64) {
    wait_for(
        &format!("a heartbeat saying the set of revision {revision} is held ({reason:?})"),
        DEADLINE,
        || async {
            hub.snapshot(|s| {
                let held = s.heartbeats.last().and_then(|h| h.work_held.clone());
                match &held {
                    Some(h) if h.reason == reason && h.revision == revision => Ok(()),
                    _ => Err(format!("newest heartbeat's workHeld: {held:?}")),
                }
            })
        },
    )
    .await;
}

async fn assert_running(client: &Client, names: &[&str], when: &str) {
    for name in names {
        let found = if name.ends_with("-config") {
            get_opt::<ConfigMap>(client, name).await.is_some()
        } else {
            get_opt::<Deployment>(client, name).await.is_some()
        };
        assert!(found, "{name} was deleted {when}");
    }
}

/// A kind of object the tests read in namespace `shop`.
trait InShop:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType: Default>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> InShop for K where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType: Default>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// The revision an object was last sent at, from its annotation.
async fn sent_at<K: InShop>(client: &Client, name: &str) -> Option<String> {
    let object: K = get_opt(client, name).await?;
    object
        .meta()
        .annotations
        .as_ref()?
        .get(REVISION_ANNOTATION)
        .cloned()
}

async fn get_opt<K: InShop>(client: &Client, name: &str) -> Option<K> {
    Api::<K>::namespaced(client.clone(), "shop")
        .get_opt(name)
        .await
        .expect("GET works")
}

// ---------------------------------------------------------------------------------------------
// Tests

#[tokio::test]
async fn registers_then_heartbeats_the_real_capacity_of_the_cluster() {
    let (sim, client) = start_cluster().await;
    let hub = HubDouble::start().await;
    let token = token_file();
    let nodes = Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    let first = nodes.items[0].metadata.name.clone().unwrap();
    // Room taken by pods the agent does not own must show as requested.
    let answer = reqwest::Client::new()
        .post(format!("{}/_sim/v1/foreign-pods", sim.url()))
        .json(&json!({"count": 2, "cpu": "500m", "memory": "1Gi", "nodes": [first]}))
        .send()
        .await
        .unwrap();
    assert!(
        answer.status().is_success(),
        "creating foreign pods: {}",
        answer.status()
    );

    let agent = start_agent(&client, &hub, &token);
    let hb = wait_for(
        "a heartbeat with 1000m requested on the first node",
        DEADLINE,
        || async {
            hub.snapshot(|s| {
                s.heartbeats
                    .iter()
                    .rev()
                    .find(|h| h.capacity.totals.requested.cpu_millis == 1000)
                    .cloned()
                    .ok_or_else(|| {
                        let requested: Vec<_> = s
                            .heartbeats
                            .iter()
                            .map(|h| h.capacity.totals.requested.cpu_millis)
                            .collect();
                        format!("CPU millis requested per heartbeat: {requested:?}")
                    })
            })
        },
    )
    .await;

    let registrations = hub.snapshot(|s| s.registrations.clone());
    assert_eq!(
        registrations.len(),
        1,
        "expected one registration, saw {registrations:?}"
    );
    assert_eq!(registrations[0].cluster_name, "sim-1");
    assert!(
        registrations[0].kubernetes_version.is_some(),
        "the Kubernetes version is sent"
    );

    let cap = &hb.capacity;
    assert_eq!(
        cap.node_groups.len(),
        1,
        "3 identical nodes form one group, saw {:#?}",
        cap.node_groups
    );
    assert_eq!(cap.totals.nodes, 3);
    assert_eq!(cap.totals.schedulable_nodes, 3);
    assert_eq!(cap.totals.allocatable.cpu_millis, 12_000, "3 nodes x 4 CPU");
    assert_eq!(
        cap.totals.allocatable.memory_bytes,
        3 * (16 << 30),
        "3 nodes x 16Gi"
    );
    assert_eq!(cap.totals.allocatable.pods, 330, "3 nodes x 110 pods");
    assert_eq!(cap.totals.requested.memory_bytes, 2 << 30);
    let node = cap.node_groups[0].nodes.iter().find(|n| n.name == first).unwrap();
    assert_eq!(node.free().cpu_millis, 3000, "4 CPU minus 2 x 500m on {first}");
    assert_eq!(node.requested.pods, 2);
    assert!(node.ready);
    assert!(!cap.node_groups[0].labels.contains_key("kubernetes.io/hostname"));

    let secret: Option<Secret> = Api::namespaced(client.clone(), "nave-system")
        .get_opt("nave-agent-credential")
        .await
        .unwrap();
    assert!(
        secret.is_some(),
        "the credential is stored in nave-system/nave-agent-credential"
    );
    agent.stop().await;
    hub.stop();
    sim.shutdown().await;
}

#[tokio::test]
async fn applies_with_ownership_labels_then_prunes_only_what_it_owns() {
    let (sim, client) = start_cluster().await;
    let hub = HubDouble::start().await;
    let token = token_file();
    // A namespace and a ConfigMap someone else made: the agent must leave both alone.
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("shop".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let foreign = ConfigMap {
        metadata: ObjectMeta {
            name: Some("foreign".into()),
            namespace: Some("shop".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".into(), "v".into())])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), "shop")
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();

    hub.set_work(
        1,
        vec![
            deployment("web", 2, "100m"),
            service("web"),
            config_map("web-config"),
        ],
    );
    let agent = start_agent(&client, &hub, &token);
    let report = wait_applied(&hub, 1).await;
    assert!(
        report.apply_errors.is_empty(),
        "expected no apply errors, saw {:?}",
        report.apply_errors
    );

    let d: Deployment = get_opt(&client, "web").await.expect("Deployment web exists");
    let labels = d.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get(MANAGED_BY_LABEL).map(String::as_str),
        Some("nave-agent"),
        "labels: {labels:?}"
    );
    assert_eq!(
        d.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REVISION_ANNOTATION))
            .map(String::as_str),
        Some("1")
    );
    let managers: Vec<_> = d
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.iter().any(|m| m == "nave-agent"),
        "expected field manager nave-agent, saw {managers:?}"
    );
    let template_labels = d
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    assert_eq!(
        template_labels.get(WORKLOAD_LABEL).map(String::as_str),
        Some("shop.web")
    );
    assert!(
        get_opt::<Service>(&client, "web").await.is_some(),
        "Service web exists"
    );
    assert!(
        get_opt::<ConfigMap>(&client, "web-config").await.is_some(),
        "ConfigMap web-config exists"
    );

    // Status follows the Deployment to 2 ready replicas.
    wait_for(
        "a status report with Deployment web 2/2 ready",
        DEADLINE,
        || async {
            hub.snapshot(|s| {
                s.statuses
                    .iter()
                    .rev()
                    .find_map(|r| {
                        r.objects.iter().find(|o| {
                            o.kind == "Deployment" && o.name == "web" && o.ready_replicas == Some(2)
                        })
                    })
                    .cloned()
                    .ok_or_else(|| format!("latest status report: {:?}", s.statuses.last()))
            })
        },
    )
    .await;

    hub.set_work(2, vec![deployment("web", 2, "100m"), service("web")]);
    wait_applied(&hub, 2).await;
    assert!(
        get_opt::<ConfigMap>(&client, "web-config").await.is_none(),
        "ConfigMap web-config was dropped from the set and must be pruned"
    );
    assert!(
        get_opt::<ConfigMap>(&client, "foreign").await.is_some(),
        "the foreign ConfigMap survives pruning"
    );
    assert!(
        get_opt::<Deployment>(&client, "web").await.is_some(),
        "Deployment web stays"
    );
    let ns = Api::<Namespace>::all(client.clone())
        .get_opt("shop")
        .await
        .unwrap();
    assert!(ns.is_some(), "the namespace is never deleted");
    agent.stop().await;
    hub.stop();
    sim.shutdown().await;
}

#[tokio::test]
async fn one_workload_failing_to_apply_does_not_hold_back_what_the_others_dropped() {
    let (sim, client) = start_cluster().await;
    let hub = HubDouble::start().await;
    let token = token_file();
    let config = test_config_with_widgets(&hub, &token);
    hub.set_work(
        1,
        vec![
            deployment("web", 1, "100m"),
            workload_config("old"),
            workload_config("broken"),
        ],
    );
    let agent = start_configured(&client, config);
    wait_applied(&hub, 1).await;

    // Revision 2 drops workload `old` and replaces `broken`'s ConfigMap by a Widget the cluster
    // cannot take.
    let widget = json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "broken", "namespace": "shop", "labels": {WORKLOAD_LABEL: "shop.broken"}}
    });
    hub.set_work(2, vec![deployment("web", 1, "100m"), widget]);
    wait_for(
        "ConfigMap old pruned while Widget broken fails",
        DEADLINE,
        || async {
            match get_opt::<ConfigMap>(&client, "old").await {
                None => Ok(()),
                Some(_) => {
                    Err(hub.snapshot(|s| format!("old still exists; latest report: {:?}", s.statuses.last())))
                }
            }
        },
    )
    .await;
    let report = wait_for("a report of revision 2's failure", DEADLINE, || async {
        hub.snapshot(|s| {
            s.statuses
                .iter()
                .rev()
                .find(|r| r.attempted_revision == Some(2) && !r.apply_errors.is_empty())
                .cloned()
                .ok_or_else(|| format!("latest report: {:?}", s.statuses.last()))
        })
    })
    .await;
    assert!(
        report
            .apply_errors
            .iter()
            .all(|e| e.kind == "Widget" && e.name == "broken"),
        "only the Widget fails: {:?}",
        report.apply_errors
    );
    assert_eq!(
        report.applied_revision,
        Some(1),
        "revision 2 is not applied whole"
    );
    assert!(
        get_opt::<ConfigMap>(&client, "broken").await.is_some(),
        "the failing workload keeps what its failed object replaces"
    );
    assert_running(&client, &["web"], "while another workload fails").await;

    // Once the set applies whole, the failing workload's leftovers go too.
    hub.set_work(3, vec![deployment("web", 1, "100m")]);
    wait_applied(&hub, 3).await;
    assert!(
        get_opt::<ConfigMap>(&client, "broken").await.is_none(),
        "pruned once its workload applies"
    );
    agent.stop().await;
    hub.stop();
    sim.shutdown().await;
}

#[tokio::test]
async fn restart_resumes_from_the_stored_revision_and_still_prunes() {
    let (sim, client) = start_cluster().await;
    let hub = HubDouble::start().await;
    let token = token_file();
    hub.set_work(1, vec![deployment("web", 1, "100m"), config_map("web-config")]);
    let agent = start_agent(&client, &hub, &token);
    wait_applied(&hub, 1).await;
    agent.stop().await;

    let queries_before = hub.snapshot(|s| s.work_queries.len());
    let agent = start_agent(&client, &hub, &token);
    let first_query = wait_for("the restarted agent's first work poll", DEADLINE, || async {
        hub.snapshot(|s| {
            s.work_queries
                .get(queries_before)
                .cloned()
                .ok_or_else(|| format!("{} work polls in all", s.work_queries.len()))
        })
    })
    .await;
    assert_eq!(
        first_query.after,
        Some(1),
        "the restarted agent resumes after revision 1: {first_query:?}"
    );
    let registrations = hub.snapshot(|s| s.registrations.len());
    assert_eq!(
        registrations, 1,
        "the stored credential is reused; saw {registrations} registrations"
    );

    hub.set_work(2, vec![deployment("web", 1, "100m")]);
    wait_applied(&hub, 2).await;
    assert!(
        get_opt::<ConfigMap>(&client, "web-config").await.is_none(),
        "the ConfigMap applied before the restart is pruned after it"
    );
    agent.stop().await;
    hub.stop();
    sim.shutdown().await;
}

#[tokio::test]
async fn a_revision_sends_only_what_changed_and_a_resync_repairs_what_others_deleted() {
    let (sim, client) = start_cluster().await;
    let hub = HubDouble::start().await;
    let token = token_file();
    let mut config = test_config(&hub, &token);
    config.resync_interval = Duration::from_secs(3600);
    let set = |replicas| {
        vec![
            deployment("web", replicas, "100m"),
            service("web"),
            config_map("web-config"),
        ]
    };
    hub.set_work(1, set(1));
    let agent = start_configured(&client, config);
    wait_applied(&hub, 1).await;
    hub.set_work(2, set(2));
    wait_applied(&hub, 2).await;
    let sent = (
        sent_at::<Deployment>(&client, "web").await,
        sent_at::<Service>(&client, "web").await,
        sent_at::<ConfigMap>(&client, "web-config").await,
    );
    assert_eq!(
        sent,
        (Some("2".into()), Some("1".into()), Some("1".into())),
        "revision 2 changed only the Deployment, so only it is sent again (Deployment, Service, \
         ConfigMap annotated with the revision they were sent at)"
    );
    // Removing an object from the set still prunes it, without a full apply.
    hub.set_work(3, vec![deployment("web", 2, "100m"), service("web")]);
    wait_applied(&hub, 3).await;
    assert!(
        get_opt::<ConfigMap>(&client, "web-config").await.is_none(),
        "the ConfigMap dropped from the set is pruned by an incremental apply"
    );
    agent.stop().await;

    // Deleted behind the agent's back while it was away: its first apply after a start sends
    // everything.
    Api::<Service>::namespaced(client.clone(), "shop")
        .delete("web", &Default::default())
        .await
        .expect("the Service can be deleted");
    let mut config = test_config(&hub, &token);
    config.resync_interval = Duration::from_secs(1);
    let agent = start_configured(&client, config);
    wait_for(
        "the Service restored by the restarted agent",
        DEADLINE,
        || async {
            sent_at::<Service>(&client, "web")
                .await
                .ok_or_else(|| "Service web is still missing".to_owned())
        },
    )
    .await;
    // Deleted while it runs, with no new revision: the periodic resync restores it.
    Api::<Service>::namespaced(client.clone(), "shop")
        .delete("web", &Default::default())
        .await
        .expect("the Service can be deleted");
    wait_for("the Service restored by a resync", DEADLINE, || async {
        sent_at::<Service>(&client, "web")
            .await
            .ok_or_else(|| "Service web is still missing".to_owned())
    })
    .await;
    agent.stop().await;
    hub.stop();
    sim.shutdown().await;
}

#[tokio::test]
async fn a_lost_or_replaced_hub_store_deletes_nothing_until_the_hub_has_published_again() {
    let (sim, client) = start_cluster().await;
    let hub = HubDouble::start().await;
    let token = token_file();
    hub.set_store_work(
        "store-a",
        5,
        true,
        vec![deployment("web", 1, "100m"), config_map("web-config")],
    );
    let agent = start_agent(&client, &hub, &token);
    wait_applied(&hub, 5).await;

    // The hub lost its store: no work for this cluster yet.
    hub.set_store_work("store-b", 0, false, Vec::new());
    wait_held(&hub, HeldReason::NoWork, 0).await;
    assert_running(&client, &["web", "web-config"], "on an answer of no work").await;

    // The new store's first set, while the hub is still placing workloads.
    hub.set_store_work("store-b", 1, false, vec![config_map("other-config")]);
    wait_held(&hub, HeldReason::StoreChanged, 1).await;
    assert_running(
        &client,
        &["web", "web-config"],
        "on a set from a new, incomplete store",
    )
    .await;
    assert!(
        get_opt::<ConfigMap>(&client, "other-config").await.is_none(),
        "a held set is not applied either"
    );
    let held_polls = hub.snapshot(|s| {
        s.work_queries
            .iter()
            .filter(|q| q.held && q.after == Some(1))
            .count()
    });
    assert!(
        held_polls > 0,
        "while holding, the agent polls with held=true after the held revision"
    );

    // Complete: the same revision releases it, and the agent follows the new store from then on.
    hub.set_store_work("store-b", 1, true, vec![deployment("web", 1, "100m")]);
    wait_applied(&hub, 1).await;
    assert_running(&client, &["web"], "when following the complete set").await;
    assert!(
        get_opt::<ConfigMap>(&client, "web-config").await.is_none(),
        "what the complete set leaves out is pruned"
    );
    wait_for("a heartbeat without workHeld", DEADLINE, || async {
        hub.snapshot(|s| match s.heartbeats.last().and_then(|h| h.work_held.clone()) {
            None => Ok(()),
            held => Err(format!("{held:?}")),
        })
    })
    .await;

    // The store restored from an older backup: revisions go back within the same store.
    hub.set_store_work(
        "store-b",
        7,
        true,
        vec![deployment("web", 1, "100m"), config_map("web-config")],
    );
    wait_applied(&hub, 7).await;
    hub.set_store_work("store-b", 3, false, Vec::new());
    wait_held(&hub, HeldReason::RevisionWentBack, 3).await;
    assert_running(&client, &["web", "web-config"], "on a revision going back").await;

    agent.stop().await;
    hub.stop();
    sim.shutdown().await;
}

/// A ConfigMap that is the whole of workload `shop/<name>`.
fn workload_config(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "shop", "labels": {WORKLOAD_LABEL: format!("shop.{name}")}},
        "data": {"greeting": "hello"}
    })
}

#[tokio::test]
async fn a_set_removing_most_workloads_at_once_waits_for_an_admin_to_confirm_it() {
    let (sim, client) = start_cluster().await;
    let hub = HubDouble::start().await;
    let token = token_file();
    let mut config = test_config(&hub, &token);
    config.prune_limits = nave_agent::fence::PruneLimits {
        max_percent: 50,
        min_workloads: 3,
    };
    let names = ["a-config", "b-config", "c-config", "d-config", "e-config"];
    hub.set_confirmed_work(2, None, names.iter().map(|n| workload_config(n)).collect());
    let agent = start_configured(&client, config);
    wait_applied(&hub, 2).await;

    // Two of five removed: within the limits, followed.
    hub.set_confirmed_work(3, None, names[..3].iter().map(|n| workload_config(n)).collect());
    wait_applied(&hub, 3).await;
    assert!(
        get_opt::<ConfigMap>(&client, "e-config").await.is_none(),
        "a small prune is followed"
    );

    // Then all three that are left: held, everything kept, and said in every heartbeat.
    hub.set_confirmed_work(4, None, Vec::new());
    wait_held(&hub, HeldReason::MassPrune, 4).await;
    assert_running(
        &client,
        &["a-config", "b-config", "c-config"],
        "on a set that removes every workload",
    )
    .await;

    // A confirmation of an older revision does not cover it.
    hub.set_confirmed_work(4, Some(3), Vec::new());
    wait_for("the agent to see the older confirmation", DEADLINE, || async {
        hub.snapshot(|s| match s.work_queries.last().map(|q| q.prune_confirmed) {
            Some(Some(3)) => Ok(()),
            seen => Err(format!("newest poll's pruneConfirmed: {seen:?}")),
        })
    })
    .await;
    wait_held(&hub, HeldReason::MassPrune, 4).await;
    assert_running(
        &client,
        &["a-config", "b-config", "c-config"],
        "on a confirmation of an older revision",
    )
    .await;

    // The admin confirms this revision: the same set is followed at once.
    hub.set_confirmed_work(4, Some(4), Vec::new());
    wait_applied(&hub, 4).await;
    for name in ["a-config", "b-config", "c-config"] {
        assert!(
            get_opt::<ConfigMap>(&client, name).await.is_none(),
            "{name} is pruned once the removal is confirmed"
        );
    }

    agent.stop().await;
    hub.stop();
    sim.shutdown().await;
}

#[tokio::test]
async fn objects_it_does_not_own_and_kinds_or_namespaces_it_does_not_allow_are_left_alone_and_reported() {
    let (sim, client) = start_cluster().await;
    let hub = HubDouble::start().await;
    let token = token_file();
    // Made by hand, and by another Nave installation in the same cluster.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "shop"}})).unwrap(),
        )
        .await
        .expect("namespace shop");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    let hand_made: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "web-config", "namespace": "shop"},
        "data": {"owner": "a person"}
    }))
    .unwrap();
    config_maps
        .create(&PostParams::default(), &hand_made)
        .await
        .expect("hand-made ConfigMap");
    let other: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "other-config", "namespace": "shop", "labels": {
            MANAGED_BY_LABEL: "nave-agent", INSTALLATION_LABEL: "team-b"}},
        "data": {"owner": "installation team-b"}
    }))
    .unwrap();
    config_maps
        .create(&PostParams::default(), &other)
        .await
        .expect("team-b's ConfigMap");
    // A Service made by hand, and the multi-cluster services API, whose ServiceExport of it
    // would publish it to every cluster of the ClusterSet.
    let services: Api<Service> = Api::namespaced(client.clone(), "shop");
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "db", "namespace": "shop"},
                "spec": {"ports": [{"port": 5432}]}
            }))
            .unwrap(),
        )
        .await
        .expect("hand-made Service");
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(client.clone());
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "serviceexports.multicluster.x-k8s.io"},
            "spec": {
                "group": "multicluster.x-k8s.io", "scope": "Namespaced",
                "names": {"plural": "serviceexports", "singular": "serviceexport", "kind": "ServiceExport"},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": {"type": "object",
                                         "x-kubernetes-preserve-unknown-fields": true}}}]
            }
        }))
        .unwrap(),
    )
    .await
    .expect("ServiceExport CRD");
    let export = |name: &str| {
        json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
            "metadata": {"name": name, "namespace": "shop", "labels": {WORKLOAD_LABEL: "shop.web"}}
        })
    };
    let db_service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "db", "namespace": "shop", "labels": {WORKLOAD_LABEL: "shop.web"}},
        "spec": {"ports": [{"port": 5432}]}
    });

    let mut in_kube_system = deployment("sneaky", 1, "10m");
    in_kube_system["metadata"]["namespace"] = json!("kube-system");
    let daemon_set = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "miner", "namespace": "shop", "labels": {WORKLOAD_LABEL: "shop.web"}},
        "spec": {}
    });
    let mut agent_credential = config_map("nave-agent-credential");
    agent_credential["metadata"]["namespace"] = json!("nave-system");
    let mut other_config = config_map("other-config");
    other_config["data"] = json!({"owner": "the hub"});
    // The namespace must agree with the kind's scope: a namespaced object without one is not
    // put somewhere by default, and a cluster-scoped one naming a namespace is not applied to
    // the whole cluster.
    let mut nowhere = config_map("nowhere");
    nowhere["metadata"]
        .as_object_mut()
        .expect("an object")
        .remove("namespace");
    let scoped_namespace = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "escape", "namespace": "shop", "labels": {WORKLOAD_LABEL: "shop.web"}}});
    hub.set_work(
        1,
        vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
            deployment("web", 1, "100m"),
            config_map("web-config"),
            other_config,
            in_kube_system,
            daemon_set,
            agent_credential,
            nowhere,
            scoped_namespace,
            db_service,
            export("db"),
            export("lonely"),
        ],
    );
    let agent = start_agent(&client, &hub, &token);
    // Refusals do not hold the rest back: revision 1 counts as applied.
    let report = wait_applied(&hub, 1).await;
    let web: Deployment = get_opt(&client, "web").await.expect("web is applied");
    let labels = web.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get(INSTALLATION_LABEL).map(String::as_str),
        Some("nave-system")
    );
    let hand_made = get_opt::<ConfigMap>(&client, "web-config")
        .await
        .expect("still there");
    assert_eq!(
        hand_made
            .data
            .unwrap_or_default()
            .get("owner")
            .map(String::as_str),
        Some("a person")
    );
    assert!(
        hand_made.metadata.labels.is_none(),
        "not labelled, not taken over"
    );
    let other = get_opt::<ConfigMap>(&client, "other-config")
        .await
        .expect("still there");
    assert_eq!(
        other.data.unwrap_or_default().get("owner").map(String::as_str),
        Some("installation team-b"),
        "another installation's object is not overwritten"
    );
    let in_kube_system: Option<Deployment> = Api::namespaced(client.clone(), "kube-system")
        .get_opt("sneaky")
        .await
        .expect("GET works");
    assert!(in_kube_system.is_none(), "nothing is applied in kube-system");
    let own: Option<ConfigMap> = Api::namespaced(client.clone(), "nave-system")
        .get_opt("nave-agent-credential")
        .await
        .expect("GET works");
    assert!(own.is_none(), "nothing is applied in the agent's own namespace");
    let defaulted: Option<ConfigMap> = Api::namespaced(client.clone(), "default")
        .get_opt("nowhere")
        .await
        .expect("GET works");
    assert!(
        defaulted.is_none(),
        "an object without a namespace is not put in default"
    );
    let escaped: Option<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone())
        .get_opt("escape")
        .await
        .expect("GET works");
    assert!(
        escaped.is_none(),
        "a cluster-scoped object naming a namespace is not applied"
    );

    let errors: BTreeMap<String, String> = report
        .apply_errors
        .iter()
        .map(|e| (e.name.clone(), e.message.clone()))
        .collect();
    for (name, says) in [
        (
            "web-config",
            "is not managed by this Nave installation (managed-by: none",
        ),
        ("other-config", "installation: team-b"),
        ("sneaky", "namespace kube-system is denied"),
        ("miner", "kind DaemonSet.apps is not in this agent's allow-list"),
        ("nave-agent-credential", "the agent's own"),
        (
            "nowhere",
            "ConfigMap is namespaced in this cluster, and the object names no namespace",
        ),
        (
            "escape",
            "Namespace is cluster-scoped in this cluster, and the object names namespace shop",
        ),
        ("lonely", "a ServiceExport goes only beside its own Service"),
    ] {
        let message = errors
            .get(name)
            .unwrap_or_else(|| panic!("no error reported for {name}: {errors:?}"));
        assert!(message.contains(says), "{name}: {message}");
    }
    // The hand-made Service is not taken over, and not exported either.
    let db: Vec<&str> = report
        .apply_errors
        .iter()
        .filter(|e| e.name == "db")
        .map(|e| e.message.as_str())
        .collect();
    assert!(
        db.iter()
            .any(|m| m.contains("is not managed by this Nave installation"))
            && db
                .iter()
                .any(|m| m.contains("a ServiceExport goes only beside its own Service")),
        "db: {db:?}"
    );
    let exports: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "shop",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ServiceExport"),
            "serviceexports",
        ),
    );
    for name in ["db", "lonely"] {
        assert!(
            exports.get_opt(name).await.expect("GET works").is_none(),
            "no ServiceExport {name}: it would export a Service that is not this installation's"
        );
    }
    let web_config = report
        .apply_errors
        .iter()
        .find(|e| e.name == "web-config")
        .unwrap();
    assert_eq!(
        web_config.workload.as_ref().map(|w| w.label_value()),
        Some("shop.web".to_owned()),
        "the error names its workload, for the hub"
    );

    // The next set drops them all: nothing that is not this installation's is deleted.
    hub.set_work(2, vec![deployment("web", 1, "100m")]);
    wait_applied(&hub, 2).await;
    assert!(get_opt::<ConfigMap>(&client, "web-config").await.is_some());
    assert!(get_opt::<ConfigMap>(&client, "other-config").await.is_some());
    agent.stop().await;
    hub.stop();
    sim.shutdown().await;
}

#[tokio::test]
async fn hub_outage_keeps_workloads_and_the_agent_recovers() {
    let (sim, client) = start_cluster().await;
    let hub = HubDouble::start().await;
    let token = token_file();
    hub.set_work(1, vec![deployment("web", 2, "100m"), config_map("web-config")]);
    let agent = start_agent(&client, &hub, &token);
    wait_applied(&hub, 1).await;

    hub.stop();
    let heartbeats_before = hub.snapshot(|s| s.heartbeats.len());
    // Several heartbeat intervals and retries pass without the hub: nothing may disappear.
    let outage_end = tokio::time::Instant::now() + Duration::from_secs(2);
    while tokio::time::Instant::now() < outage_end {
        assert!(
            get_opt::<Deployment>(&client, "web").await.is_some(),
            "Deployment web gone during the outage"
        );
        assert!(
            get_opt::<ConfigMap>(&client, "web-config").await.is_some(),
            "ConfigMap gone during the outage"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let d: Deployment = get_opt(&client, "web").await.unwrap();
    assert_eq!(d.spec.replicas, Some(2), "replicas unchanged during the outage");

    hub.set_work(2, vec![deployment("web", 3, "100m"), config_map("web-config")]);
    hub.restart().await;
    wait_for("a heartbeat after the hub came back", DEADLINE, || async {
        hub.snapshot(|s| heartbeats_after(s, heartbeats_before))
    })
    .await;
    wait_applied(&hub, 2).await;
    let d: Deployment = get_opt(&client, "web").await.unwrap();
    assert_eq!(d.spec.replicas, Some(3), "revision 2 applied after the outage");
    agent.stop().await;
    hub.stop();
    sim.shutdown().await;
}

#[tokio::test]
async fn pending_pods_are_reported_unschedulable_when_the_deployment_is_too_big() {
    let (sim, client) = start_cluster().await;
    let hub = HubDouble::start().await;
    let token = token_file();
    // 3 nodes of 4 CPU hold one 3-CPU replica each: 2 of 5 stay pending.
    hub.set_work(1, vec![deployment("big", 5, "3")]);
    let agent = start_agent(&client, &hub, &token);
    let hb = wait_for(
        "a heartbeat with 2 pending pods of shop/big",
        DEADLINE,
        || async {
            hub.snapshot(|s| {
                s.heartbeats
                    .iter()
                    .rev()
                    .find(|h| {
                        h.pending_pods
                            .iter()
                            .filter(|p| p.workload.as_ref().is_some_and(|w| w.name == "big"))
                            .count()
                            == 2
                    })
                    .cloned()
                    .ok_or_else(|| {
                        let pending = s.heartbeats.last().map(|h| &h.pending_pods);
                        format!("pending pods in the latest heartbeat: {pending:?}")
                    })
            })
        },
    )
    .await;
    for pod in &hb.pending_pods {
        assert_eq!(pod.reason, "Unschedulable", "pending pod {pod:?}");
        assert!(
            pod.message.contains("Insufficient cpu"),
            "scheduler message: {:?}",
            pod.message
        );
        assert!(pod.since.is_some(), "since is set: {pod:?}");
    }
    wait_for(
        "a status report with 2 pending pods for Deployment big",
        DEADLINE,
        || async {
            hub.snapshot(|s| {
                s.statuses
                    .iter()
                    .rev()
                    .find_map(|r| {
                        r.objects.iter().find(|o| {
                            o.name == "big" && o.pending_pods == Some(2) && o.ready_replicas == Some(3)
                        })
                    })
                    .cloned()
                    .ok_or_else(|| format!("latest status report: {:?}", s.statuses.last()))
            })
        },
    )
    .await;
    agent.stop().await;
    hub.stop();
    sim.shutdown().await;
}

#[tokio::test]
async fn a_revoked_credential_makes_the_agent_register_again() {
    let (sim, client) = start_cluster().await;
    let hub = HubDouble::start().await;
    let token = token_file();
    let agent = start_agent(&client, &hub, &token);
    wait_for("a first heartbeat", DEADLINE, || async {
        hub.snapshot(|s| heartbeats_after(s, 0))
    })
    .await;

    // The hub forgets every credential (e.g. an admin revoked it): the next call gets 401.
    hub.state.lock().unwrap().credentials.clear();
    let heartbeats_before = hub.snapshot(|s| s.heartbeats.len());
    wait_for(
        "a second registration and a heartbeat with the new credential",
        DEADLINE,
        || async {
            hub.snapshot(|s| {
                if s.registrations.len() == 2 {
                    heartbeats_after(s, heartbeats_before)
                } else {
                    Err(format!("{} registration(s)", s.registrations.len()))
                }
            })
        },
    )
    .await;
    agent.stop().await;
    hub.stop();
    sim.shutdown().await;
}

/// One sample of an OpenMetrics exposition: `name{labels} value`.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of an OpenMetrics text (label values without escapes, as the agent's are).
fn parse_metrics(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("a sample line has a value: {line:?}"));
            let value: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("a sample value is a number: {line:?}"));
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let inner = rest
                        .strip_suffix('}')
                        .unwrap_or_else(|| panic!("labels end with }}: {line:?}"));
                    let labels = inner
                        .split(',')
                        .filter(|p| !p.is_empty())
                        .map(|pair| {
                            let (k, v) = pair
                                .split_once('=')
                                .unwrap_or_else(|| panic!("a label is k=\"v\": {line:?}"));
                            (k.to_owned(), v.trim_matches('"').to_owned())
                        })
                        .collect();
                    (name, labels)
                }
                None => (series, BTreeMap::new()),
            };
            Sample {
                name: name.to_owned(),
                labels,
                value,
            }
        })
        .collect()
}

/// The value of the sample named `name` with exactly `labels`, if there is one.
fn sample(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    samples
        .iter()
        .find(|s| s.name == name && s.labels == labels)
        .map(|s| s.value)
}

async fn scrape_agent(addr: SocketAddr) -> Result<Vec<Sample>, String> {
    let res = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .map_err(|e| e.to_string())?;
    assert_eq!(res.status(), 200, "GET /metrics of the agent");
    assert_eq!(
        res.headers().get("content-type").and_then(|v| v.to_str().ok()),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "the content type of the agent's /metrics"
    );
    let text = res.text().await.map_err(|e| e.to_string())?;
    assert!(
        text.ends_with("# EOF\n"),
        "the exposition ends with # EOF:\n{text}"
    );
    Ok(parse_metrics(&text))
}

#[tokio::test]
async fn metrics_show_the_applied_revision_hub_requests_and_apply_errors() {
    let (sim, client) = start_cluster().await;
    let hub = HubDouble::start().await;
    let token = token_file();
    let addr: SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut config = test_config_with_widgets(&hub, &token);
    config.metrics_listen = Some(addr);
    hub.set_work(
        1,
        vec![
            deployment("web", 1, "100m"),
            service("web"),
            config_map("web-config"),
        ],
    );
    let agent = start_configured(&client, config);
    wait_applied(&hub, 1).await;

    let healthz = reqwest::get(format!("http://{addr}/healthz")).await.unwrap();
    assert_eq!(healthz.status(), 200, "GET /healthz of the agent");

    // The status report may go out before the heartbeat that follows it: wait for both.
    let samples = wait_for(
        "revision 1 and an accepted heartbeat in /metrics",
        DEADLINE,
        || async {
            let samples = scrape_agent(addr).await?;
            let revision = sample(&samples, "nave_agent_work_revision", &[]);
            let heartbeat = sample(&samples, "nave_agent_last_heartbeat_timestamp_seconds", &[]);
            if revision == Some(1.0) && heartbeat.is_some_and(|t| t > 0.0) {
                Ok(samples)
            } else {
                Err(format!("revision {revision:?}, last heartbeat {heartbeat:?}"))
            }
        },
    )
    .await;
    assert_eq!(
        sample(&samples, "nave_agent_applied_objects", &[]),
        Some(3.0),
        "a Deployment, a Service and a ConfigMap applied"
    );
    let applies = sample(&samples, "nave_agent_apply_duration_seconds_count", &[])
        .expect("the apply histogram has a count");
    assert!(applies >= 1.0, "at least one apply timed, saw {applies}");
    assert_eq!(
        sample(
            &samples,
            "nave_agent_apply_duration_seconds_bucket",
            &[("le", "+Inf")]
        ),
        Some(applies),
        "the +Inf bucket holds every apply"
    );
    for (endpoint, code) in [
        ("register", "200"),
        ("heartbeat", "204"),
        ("work", "200"),
        ("status", "204"),
    ] {
        let n = sample(
            &samples,
            "nave_agent_hub_requests_total",
            &[("endpoint", endpoint), ("code", code)],
        );
        assert!(
            n.is_some_and(|n| n >= 1.0),
            "expected nave_agent_hub_requests_total{{endpoint={endpoint},code={code}}} >= 1, saw {n:?}"
        );
    }
    assert_eq!(sample(&samples, "nave_agent_pending_pods", &[]), Some(0.0));
    let errors: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == "nave_agent_apply_errors_total")
        .collect();
    assert!(errors.is_empty(), "no apply errors yet, saw {errors:?}");

    // Revision 2 holds an object of a kind the cluster does not serve: counted by kind, and the
    // applied revision stays 1.
    let widget = json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "shop"}
    });
    hub.set_work(2, vec![deployment("web", 1, "100m"), widget]);
    let samples = wait_for("a Widget apply error in /metrics", DEADLINE, || async {
        let samples = scrape_agent(addr).await?;
        let errors = sample(
            &samples,
            "nave_agent_apply_errors_total",
            &[("operation", "apply"), ("kind", "Widget")],
        );
        if errors.is_some_and(|n| n >= 1.0) {
            Ok(samples)
        } else {
            Err(format!("Widget apply errors {errors:?}"))
        }
    })
    .await;
    assert_eq!(
        sample(&samples, "nave_agent_work_revision", &[]),
        Some(1.0),
        "a failed apply leaves the applied revision"
    );
    agent.stop().await;
    hub.stop();
    sim.shutdown().await;
}

#[tokio::test]
async fn confined_to_named_namespaces_it_finds_what_to_prune_there_without_its_state() {
    let (sim, client) = start_cluster().await;
    let hub = HubDouble::start().await;
    let token = token_file();
    let confined = || {
        let mut config = test_config(&hub, &token);
        // As with the chart's namespace-scoped RBAC: it lists in `shop` only.
        config.allow_namespaces = vec!["shop".to_owned()];
        config
    };
    hub.set_work(1, vec![deployment("web", 1, "100m"), config_map("web-config")]);
    let agent = start_configured(&client, confined());
    wait_applied(&hub, 1).await;
    agent.stop().await;
    // The agent's memory of what it applied is lost: pruning must find it by label, in `shop`.
    Api::<ConfigMap>::namespaced(client.clone(), "nave-system")
        .delete(nave_agent::apply::STATE_CONFIG_MAP, &Default::default())
        .await
        .expect("the state ConfigMap is deleted");
    hub.set_work(2, vec![deployment("web", 1, "100m")]);
    let agent = start_configured(&client, confined());
    wait_applied(&hub, 2).await;
    assert!(
        get_opt::<ConfigMap>(&client, "web-config").await.is_none(),
        "found by its labels in the allowed namespace and pruned"
    );
    agent.stop().await;
    hub.stop();
    sim.shutdown().await;
}

#[tokio::test]
async fn reports_go_as_changes_to_a_hub_that_takes_them_and_whole_when_it_lost_the_base() {
    let (_cluster, client) = start_cluster().await;
    let hub = HubDouble::start().await;
    hub.state.lock().unwrap().takes_deltas = true;
    let token = token_file();
    let agent = start_agent(&client, &hub, &token);
    hub.set_work(1, vec![deployment("web", 1, "100m"), config_map("settings")]);
    wait_applied(&hub, 1).await;
    hub.set_work(
        2,
        vec![
            deployment("web", 1, "100m"),
            deployment("api", 1, "100m"),
            config_map("settings"),
        ],
    );
    let report = wait_applied(&hub, 2).await;
    let names = |r: &StatusReport| {
        let mut names: Vec<String> = r.objects.iter().map(|o| o.name.clone()).collect();
        names.sort();
        names
    };
    assert_eq!(
        names(&report),
        ["api", "settings", "web"],
        "the report the deltas made"
    );
    let (taken, whole) = hub.snapshot(|s| (s.deltas_taken, s.statuses.len() - s.deltas_taken));
    assert!(
        taken > 0,
        "revision 2 was reported as changes: {taken} deltas, {whole} whole reports"
    );

    // The hub no longer holds the report the agent's changes follow (a store rolled back, an
    // answer lost): the next change is refused as a delta and sent whole.
    hub.state.lock().unwrap().statuses.clear();
    hub.set_work(3, vec![deployment("web", 1, "100m"), config_map("settings")]);
    let report = wait_applied(&hub, 3).await;
    assert_eq!(
        names(&report),
        ["settings", "web"],
        "the whole report after the refusal"
    );
    let refused = hub.snapshot(|s| s.deltas_refused);
    assert!(refused > 0, "the delta over a report the hub lost was refused");
    agent.stop().await;
}
