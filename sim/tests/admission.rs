//! Pod scheduling gates and mutating admission webhooks, end to end through a `SimCluster` with
//! its control plane and kube-rs: gated pods wait with `PodScheduled=False/SchedulingGated` and
//! are placed once their gates are removed; a webhook served over TLS by the test (rcgen
//! certificates, axum) gates and labels the pods a Deployment's ReplicaSet creates, denies,
//! fails closed or open, and is skipped by its selectors; bad configurations are refused.
//!
//! Tests wait for conditions with deadlines and report what they last saw.

#[path = "support/helpers.rs"]
mod helpers;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::Path;
use axum::routing::post;
use base64::Engine;
use helpers::wait_for;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use nave_sim::SimCluster;
use nave_sim::server::tls::TlsMaterial;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(15);
const GATE: &str = "nave.dev/hold";

/// A cluster with one node and its control plane, synced.
async fn start(name: &str) -> (SimCluster, Client) {
    let sim = helpers::cluster(name, true).await;
    sim.control_plane()
        .expect("the control plane runs")
        .wait_synced()
        .await;
    let client = sim.in_process_client();
    (sim, client)
}

fn pod(name: &str, gates: &[&str]) -> Pod {
    let gates: Vec<Value> = gates.iter().map(|g| json!({"name": g})).collect();
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"schedulingGates": gates, "containers": [{"name": "c", "image": "busybox"}]}
    }))
    .expect("a pod")
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .expect("a deployment")
}

fn scheduled(p: &Pod) -> Option<Value> {
    let v = serde_json::to_value(p).ok()?;
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .cloned()
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref()?.node_name.clone().filter(|n| !n.is_empty())
}

fn describe(p: &Pod) -> String {
    format!(
        "node={:?} gates={:?} PodScheduled={}",
        node_of(p),
        p.spec.as_ref().and_then(|s| s.scheduling_gates.clone()),
        scheduled(p).map(|c| c.to_string()).unwrap_or_default()
    )
}

async fn wait_gated(pods: &Api<Pod>, name: &str) -> Pod {
    wait_for(
        DEADLINE,
        &format!("pod {name} to be PodScheduled=False/SchedulingGated"),
        || async {
            let p = pods.get(name).await.map_err(|e| e.to_string())?;
            let c = scheduled(&p).unwrap_or_default();
            let gated = c["status"] == "False"
                && c["reason"] == "SchedulingGated"
                && c["message"] == "Scheduling is blocked due to non-empty scheduling gates";
            if gated && node_of(&p).is_none() {
                Ok(p)
            } else {
                Err(describe(&p))
            }
        },
    )
    .await
}

async fn wait_bound(pods: &Api<Pod>, name: &str) -> Pod {
    wait_for(DEADLINE, &format!("pod {name} to be bound"), || async {
        let p = pods.get(name).await.map_err(|e| e.to_string())?;
        if node_of(&p).is_some() {
            Ok(p)
        } else {
            Err(describe(&p))
        }
    })
    .await
}

fn api_error(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message.clone()),
        other => (0, other.to_string()),
    }
}

#[tokio::test]
async fn gated_pod_waits_as_scheduling_gated_and_binds_once_the_gate_is_removed() {
    let (sim, client) = start("gates").await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("held", &[GATE]))
        .await
        .expect("gated pod created");
    let marked = wait_gated(&pods, "held").await;

    // Another pod gets placed, so the scheduler has run since; the gated pod is untouched.
    pods.create(&PostParams::default(), &pod("free", &[]))
        .await
        .expect("ungated pod created");
    wait_bound(&pods, "free").await;
    let still = pods.get("held").await.expect("gated pod");
    assert_eq!(
        (node_of(&still), still.resource_version()),
        (None, marked.resource_version()),
        "expected the gated pod unbound and unwritten since it was marked; seen {}",
        describe(&still)
    );

    let remove = json!([{"op": "remove", "path": "/spec/schedulingGates"}]);
    let patch = serde_json::from_value(remove).expect("a JSON patch");
    pods.patch("held", &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
        .expect("gate removed");
    let bound = wait_bound(&pods, "held").await;
    let c = scheduled(&bound).unwrap_or_default();
    assert_eq!(
        c["status"], "True",
        "expected PodScheduled=True after binding; seen {c}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn scheduling_gates_can_only_be_removed_and_never_come_with_a_node() {
    let (sim, client) = start("gate-rules").await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("one", &["a.nave.dev/x"]))
        .await
        .expect("gated pod created");
    let add = json!({"spec": {"schedulingGates": [{"name": "a.nave.dev/x"}, {"name": "b.nave.dev/y"}]}});
    let err = pods
        .patch("one", &PatchParams::default(), &Patch::Merge(&add))
        .await
        .expect_err("adding a gate is refused");
    let (code, message) = api_error(&err);
    assert!(
        code == 422
            && message.contains("spec.schedulingGates[1].name")
            && message.contains("only deletion is allowed, but found new scheduling gate 'b.nave.dev/y'"),
        "expected 422 naming spec.schedulingGates; seen {code} {message}"
    );

    let mut bound = pod("bound", &["a.nave.dev/x"]);
    if let Some(s) = bound.spec.as_mut() {
        s.node_name = Some("somewhere".into());
    }
    let err = pods
        .create(&PostParams::default(), &bound)
        .await
        .expect_err("a bound pod with gates is refused");
    let (code, message) = api_error(&err);
    assert!(
        code == 422
            && message.contains(
                "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"
            ),
        "expected 422 on spec.nodeName; seen {code} {message}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn status_written_by_another_client_to_a_gated_pod_is_kept() {
    let (sim, client) = start("gate-status").await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("held", &[GATE]))
        .await
        .expect("gated pod created");
    wait_gated(&pods, "held").await;
    let status = json!({"status": {"conditions": [
        {"type": "nave.dev/Placed", "status": "False", "reason": "Waiting", "message": "no cluster yet"}
    ]}});
    let pp = PatchParams {
        field_manager: Some("nave-agent".into()),
        ..Default::default()
    };
    // A merge patch replaces the whole list, dropping PodScheduled: the scheduler puts it back
    // (once), keeping the written condition.
    pods.patch_status("held", &pp, &Patch::Merge(&status))
        .await
        .expect("status patched");
    // The scheduler and the kubelets run a round for another pod; the gated pod keeps both
    // conditions and its phase.
    pods.create(&PostParams::default(), &pod("free", &[]))
        .await
        .expect("ungated pod created");
    wait_bound(&pods, "free").await;
    let p = wait_gated(&pods, "held").await;
    let v = serde_json::to_value(&p).expect("json");
    let placed = v["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "nave.dev/Placed");
    assert!(
        placed.is_some_and(|c| c["reason"] == "Waiting") && v["status"]["phase"] == "Pending",
        "expected the written condition kept and phase Pending; seen {}",
        v["status"]
    );
    sim.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Webhooks.

/// A webhook server over TLS (a CA and a leaf from the simulator's own generator); records the
/// requests it receives.
struct WebhookServer {
    base: String,
    ca_bundle: String,
    requests: Arc<Mutex<Vec<Value>>>,
    stop: CancellationToken,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn allow(uid: &Value, patch: Option<Value>) -> Value {
    let mut response = json!({"uid": uid, "allowed": true});
    if let Some(p) = patch {
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(p.to_string()));
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// The answer of the test webhook at `/<behaviour>`.
fn respond(behaviour: &str, req: &Value) -> Value {
    let uid = &req["uid"];
    match behaviour {
        "gate" => allow(uid, Some(gate_patch(&req["object"]))),
        "label" => allow(uid, Some(label_patch(&req["object"], "nave.dev/touched"))),
        "deny" => json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": false,
                         "status": {"code": 403, "message": "pods must come from nave"}}}),
        "bad-patch" => allow(uid, Some(json!([{"op": "remove", "path": "/spec/nothing/here"}]))),
        "wrong-uid" => allow(&json!("not-the-request"), None),
        other => panic!("the test webhook has no behaviour {other:?}"),
    }
}

/// Adds the label `key=true`.
fn label_patch(obj: &Value, key: &str) -> Value {
    let mut ops = Vec::new();
    if obj.pointer("/metadata/labels").is_none_or(Value::is_null) {
        ops.push(json!({"op": "add", "path": "/metadata/labels", "value": {}}));
    }
    ops.push(
        json!({"op": "add", "path": format!("/metadata/labels/{}", key.replace('/', "~1")), "value": "true"}),
    );
    json!(ops)
}

/// Adds the gate and a label `nave.dev/gated=true` to a pod.
fn gate_patch(pod: &Value) -> Value {
    let mut ops = Vec::new();
    if pod.pointer("/spec/schedulingGates").is_none_or(Value::is_null) {
        ops.push(json!({"op": "add", "path": "/spec/schedulingGates", "value": []}));
    }
    ops.push(json!({"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}}));
    ops.extend(
        label_patch(pod, "nave.dev/gated")
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    json!(ops)
}

async fn webhook_server() -> WebhookServer {
    let tls = TlsMaterial::generate("webhook").expect("certificates");
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config().expect("tls config"));
    let requests: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = requests.clone();
    let record = move |review: &Value| {
        seen.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(review["request"].clone());
    };
    let app = axum::Router::new().route(
        "/{behaviour}",
        post(
            move |Path(behaviour): Path<String>, Json(review): Json<Value>| async move {
                record(&review);
                Json(respond(&behaviour, &review["request"]))
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = token.cancelled() => return,
                a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    WebhookServer {
        base: format!("https://127.0.0.1:{}", addr.port()),
        ca_bundle: base64::engine::general_purpose::STANDARD.encode(&tls.ca_pem),
        requests,
        stop,
    }
}

/// A URL on which nothing listens.
async fn closed_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("address").port();
    drop(l);
    format!("https://127.0.0.1:{port}/gate")
}

/// A configuration with one webhook on pod CREATE at `url`.
fn configuration(name: &str, url: &str, ca_bundle: &str, extra: Value) -> MutatingWebhookConfiguration {
    let mut hook = json!({
        "name": format!("{name}.nave.dev"),
        "clientConfig": {"url": url, "caBundle": ca_bundle},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 5,
    });
    if let (Some(h), Some(e)) = (hook.as_object_mut(), extra.as_object()) {
        h.extend(e.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name}, "webhooks": [hook],
    }))
    .expect("a configuration")
}

async fn install(client: &Client, c: &MutatingWebhookConfiguration) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    api.create(&PostParams::default(), c)
        .await
        .expect("configuration created");
}

#[tokio::test]
async fn webhook_gates_and_labels_the_pods_a_deployment_creates() {
    let (sim, client) = start("webhook-gate").await;
    let hook = webhook_server().await;
    install(
        &client,
        &configuration("gate", &format!("{}/gate", hook.base), &hook.ca_bundle, json!({})),
    )
    .await;
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let stored = serde_json::to_value(configs.get("gate").await.expect("configuration")).expect("json");
    assert_eq!(
        (
            &stored["webhooks"][0]["failurePolicy"],
            &stored["webhooks"][0]["rules"][0]["scope"]
        ),
        (&json!("Fail"), &json!("*")),
        "expected upstream defaults; seen {stored}"
    );

    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment("web", 2))
        .await
        .expect("deployment created");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let list = wait_for(DEADLINE, "two gated, labelled pods of web", || async {
        let l = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .map_err(|e| e.to_string())?;
        let ready = l.items.len() == 2
            && l.items.iter().all(|p| {
                p.labels().get("nave.dev/gated").map(String::as_str) == Some("true")
                    && scheduled(p).is_some_and(|c| c["reason"] == "SchedulingGated")
                    && node_of(p).is_none()
            });
        let seen = l.items.iter().map(describe).collect::<Vec<_>>().join("; ");
        if ready { Ok(l.items) } else { Err(seen) }
    })
    .await;

    let requests = hook.requests.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let first = requests.first().cloned().unwrap_or_default();
    assert!(
        requests.len() >= 2
            && first["operation"] == "CREATE"
            && first["kind"] == json!({"group": "", "version": "v1", "kind": "Pod"})
            && first["resource"] == json!({"group": "", "version": "v1", "resource": "pods"})
            && first["namespace"] == "default"
            && first["object"]["spec"]["restartPolicy"] == "Always"
            && first["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "expected defaulted pod CREATE reviews; seen {} requests, first {first}",
        requests.len()
    );

    // The controller that placed them removes the gate; the pod is scheduled.
    let name = list[0].name_any();
    let remove =
        serde_json::from_value(json!([{"op": "remove", "path": "/spec/schedulingGates"}])).expect("patch");
    pods.patch(&name, &PatchParams::default(), &Patch::Json::<()>(remove))
        .await
        .expect("gate removed");
    wait_bound(&pods, &name).await;
    sim.shutdown().await;
}

#[tokio::test]
async fn webhook_denial_refuses_the_request_with_its_message_and_code() {
    let (sim, client) = start("webhook-deny").await;
    let hook = webhook_server().await;
    install(
        &client,
        &configuration("deny", &format!("{}/deny", hook.base), &hook.ca_bundle, json!({})),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let err = pods
        .create(&PostParams::default(), &pod("p", &[]))
        .await
        .expect_err("denied");
    let (code, message) = api_error(&err);
    assert_eq!(
        (code, message.as_str()),
        (
            403,
            "admission webhook \"deny.nave.dev\" denied the request: pods must come from nave"
        ),
        "expected the webhook's denial"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn unreachable_webhook_fails_closed_and_the_replica_set_reports_failed_create() {
    let (sim, client) = start("webhook-down").await;
    let url = closed_url().await;
    install(&client, &configuration("down", &url, "", json!({}))).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let err = pods
        .create(&PostParams::default(), &pod("p", &[]))
        .await
        .expect_err("refused");
    let (code, message) = api_error(&err);
    assert!(
        code == 500 && message.starts_with("Internal error occurred: failed calling webhook \"down.nave.dev\": failed to call webhook: Post"),
        "expected 500 failed calling webhook; seen {code} {message}"
    );

    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment("web", 1))
        .await
        .expect("deployment created");
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    wait_for(
        DEADLINE,
        "the ReplicaSet to report ReplicaFailure/FailedCreate",
        || async {
            let l = rss
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let v = serde_json::to_value(&l.items).map_err(|e| e.to_string())?;
            let failed = v[0]["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["type"] == "ReplicaFailure"
                        && c["reason"] == "FailedCreate"
                        && c["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("failed calling webhook"))
                });
            if failed { Ok(()) } else { Err(v.to_string()) }
        },
    )
    .await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    wait_for(DEADLINE, "a FailedCreate event", || async {
        let l = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let reasons: Vec<String> = l.items.iter().filter_map(|e| e.reason.clone()).collect();
        if reasons.iter().any(|r| r == "FailedCreate") {
            Ok(())
        } else {
            Err(format!("{reasons:?}"))
        }
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test]
async fn unreachable_webhook_with_ignore_lets_pods_through() {
    let (sim, client) = start("webhook-ignore").await;
    let url = closed_url().await;
    install(
        &client,
        &configuration("down", &url, "", json!({"failurePolicy": "Ignore"})),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("p", &[]))
        .await
        .expect("created despite the failing webhook");
    wait_bound(&pods, "p").await;
    sim.shutdown().await;
}

#[tokio::test]
async fn namespace_and_object_selectors_exclude() {
    let (sim, client) = start("webhook-selectors").await;
    let hook = webhook_server().await;
    let url = format!("{}/gate", hook.base);
    install(
        &client,
        &configuration(
            "selected",
            &url,
            &hook.ca_bundle,
            json!({
                "namespaceSelector": {"matchLabels": {"nave.dev/managed": "true"}},
                "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
            }),
        ),
    )
    .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(
        json!({"metadata": {"name": "managed", "labels": {"nave.dev/managed": "true"}}}),
    )
    .expect("namespace");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");

    let gated = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.clone())
            .is_some_and(|g| !g.is_empty())
    };
    let in_default = Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pod("outside", &[]))
        .await
        .expect("pod in default");
    let managed: Api<Pod> = Api::namespaced(client.clone(), "managed");
    let mut skipped = pod("skipped", &[]);
    skipped.labels_mut().insert("skip".into(), "yes".into());
    let skipped = managed
        .create(&PostParams::default(), &skipped)
        .await
        .expect("skipped pod");
    let taken = managed
        .create(&PostParams::default(), &pod("taken", &[]))
        .await
        .expect("selected pod");
    assert_eq!(
        (gated(&in_default), gated(&skipped), gated(&taken)),
        (false, false, true),
        "expected only the selected pod in the selected namespace gated"
    );
    let calls = hook.requests.lock().unwrap_or_else(|e| e.into_inner()).len();
    assert_eq!(calls, 1, "expected exactly one webhook call");
    sim.shutdown().await;
}

#[tokio::test]
async fn invalid_configurations_are_refused() {
    let (sim, client) = start("webhook-invalid").await;
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let http = configuration("plain", "http://127.0.0.1:1/gate", "", json!({}));
    let (code, message) = api_error(
        &api.create(&PostParams::default(), &http)
            .await
            .expect_err("http refused"),
    );
    assert!(
        code == 422 && message.contains("webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme"),
        "expected 422 on the url; seen {code} {message}"
    );
    let mut missing =
        serde_json::to_value(configuration("nose", "https://127.0.0.1:1/gate", "", json!({}))).expect("json");
    if let Some(h) = missing["webhooks"][0].as_object_mut() {
        h.remove("sideEffects");
    }
    let missing: MutatingWebhookConfiguration = serde_json::from_value(missing).expect("configuration");
    let (code, message) = api_error(
        &api.create(&PostParams::default(), &missing)
            .await
            .expect_err("refused"),
    );
    assert!(
        code == 422 && message.contains("webhooks[0].sideEffects: Required value"),
        "expected 422 on sideEffects; seen {code} {message}"
    );
    let cel = configuration(
        "cel",
        "https://127.0.0.1:1/gate",
        "",
        json!({"matchConditions": [{"name": "all", "expression": "true"}]}),
    );
    let (code, message) = api_error(
        &api.create(&PostParams::default(), &cel)
            .await
            .expect_err("refused"),
    );
    assert!(
        code == 422 && message.contains("webhooks[0].matchConditions"),
        "expected 422 on matchConditions; seen {code} {message}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn webhook_mutates_updates_patches_and_applies_and_sees_the_old_object() {
    let (sim, client) = start("webhook-update").await;
    let hook = webhook_server().await;
    let mut c = serde_json::to_value(configuration(
        "touch",
        &format!("{}/label", hook.base),
        &hook.ca_bundle,
        json!({}),
    ))
    .expect("json");
    c["webhooks"][0]["rules"] = json!([{"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                         "resources": ["configmaps"], "scope": "Namespaced"}]);
    install(&client, &serde_json::from_value(c).expect("configuration")).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "cfg"}, "data": {"k": "1"}})).expect("cm"),
        )
        .await
        .expect("configmap created");
    assert!(
        created.labels().is_empty(),
        "expected CREATE not admitted by an UPDATE rule; seen labels {:?}",
        created.labels()
    );
    let patched = cms
        .patch(
            "cfg",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"k": "2"}})),
        )
        .await
        .expect("patched");
    assert_eq!(
        patched.labels().get("nave.dev/touched").map(String::as_str),
        Some("true"),
        "expected the webhook's label on the patched object"
    );
    let review = hook
        .requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .last()
        .cloned()
        .unwrap_or_default();
    assert!(
        review["operation"] == "UPDATE"
            && review["oldObject"]["data"]["k"] == "1"
            && review["object"]["data"]["k"] == "2"
            && review["options"]["kind"] == "PatchOptions",
        "expected an UPDATE review with the old object; seen {review}"
    );

    let apply =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": "3"}});
    let applied = cms
        .patch(
            "cfg",
            &PatchParams::apply("tester").force(),
            &Patch::Apply(&apply),
        )
        .await
        .expect("applied");
    assert_eq!(
        (
            applied.data.as_ref().and_then(|d| d.get("k")).map(String::as_str),
            applied.labels().get("nave.dev/touched").map(String::as_str)
        ),
        (Some("3"), Some("true")),
        "expected the applied value and the webhook's label"
    );
    // A write the webhook leaves unchanged stays a no-op: same resourceVersion.
    let again = cms
        .patch(
            "cfg",
            &PatchParams::apply("tester").force(),
            &Patch::Apply(&apply),
        )
        .await
        .expect("applied again");
    assert_eq!(
        again.resource_version(),
        applied.resource_version(),
        "expected a repeated apply to write nothing"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn bad_patches_and_bad_responses_are_internal_errors() {
    let (sim, client) = start("webhook-bad").await;
    let hook = webhook_server().await;
    install(
        &client,
        &configuration(
            "badpatch",
            &format!("{}/bad-patch", hook.base),
            &hook.ca_bundle,
            json!({"failurePolicy": "Ignore"}),
        ),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let (code, message) = api_error(
        &pods
            .create(&PostParams::default(), &pod("p", &[]))
            .await
            .expect_err("refused"),
    );
    assert!(
        code == 500 && message.starts_with("Internal error occurred: "),
        "expected 500 for a patch that does not apply, whatever the failure policy; seen {code} {message}"
    );
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete("badpatch", &Default::default())
        .await
        .expect("configuration deleted");
    install(
        &client,
        &configuration(
            "wronguid",
            &format!("{}/wrong-uid", hook.base),
            &hook.ca_bundle,
            json!({}),
        ),
    )
    .await;
    let (code, message) = api_error(
        &pods
            .create(&PostParams::default(), &pod("p", &[]))
            .await
            .expect_err("refused"),
    );
    assert!(
        code == 500
            && message.contains("failed calling webhook \"wronguid.nave.dev\": received invalid webhook response: expected response.uid="),
        "expected 500 for a response with another uid; seen {code} {message}"
    );
    sim.shutdown().await;
}
