use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use nave_api::wire::{self, ErrorBody, RegisterRequest, RegisterResponse, WorkSet, error_codes};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;
use crate::settings::Timings;
use crate::signals::WorkSignals;
use crate::store;

const BOOTSTRAP: &str = "bootstrap-secret";

struct Harness {
    state: AgentState,
    _dir: tempfile::TempDir,
}

async fn harness() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("hub.db").display());
    let store = store::connect(&url).await.unwrap();
    store.claim_term(None, "test").await.unwrap();
    let state = AgentState::new(
        store.clone(),
        Arc::new(crate::index::Index::empty(store)),
        Arc::new(WorkSignals::default()),
        BOOTSTRAP,
        None,
        None,
        Timings::default(),
    )
    .accepting_new_clusters(true);
    Harness { state, _dir: dir }
}

async fn call(
    state: &AgentState,
    method: Method,
    uri: &str,
    token: &str,
    body: Option<String>,
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {token}"));
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let req = req.body(body.map_or_else(Body::empty, Body::from)).unwrap();
    let res = router(state.clone()).oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, value)
}

/// A heartbeat of `cluster` with no nodes.
fn empty_beat(cluster: &str) -> Value {
    json!({"clusterName": cluster, "agentVersion": "0.1.0", "capacity": {"nodeGroups": [], "totals": {
        "nodes": 0, "schedulableNodes": 0,
        "allocatable": {"cpuMillis": 0, "memoryBytes": 0, "pods": 0},
        "requested": {"cpuMillis": 0, "memoryBytes": 0, "pods": 0}}}})
}

async fn register(state: &AgentState, cluster: &str) -> String {
    let (status, value) = register_with(state, cluster, BOOTSTRAP).await;
    assert_eq!(status, StatusCode::OK, "register {cluster}: {value}");
    let response: RegisterResponse = serde_json::from_value(value).unwrap();
    response.credential
}

/// Registers `cluster` presenting `token`; the status and body.
async fn register_with(state: &AgentState, cluster: &str, token: &str) -> (StatusCode, Value) {
    let body = serde_json::to_string(&RegisterRequest {
        cluster_name: cluster.to_owned(),
        agent_version: "0.1.0".to_owned(),
        labels: [("tier".to_owned(), "gold".to_owned())].into(),
        ..RegisterRequest::default()
    })
    .unwrap();
    call(state, Method::POST, wire::REGISTER_PATH, token, Some(body)).await
}

fn credential_of(value: &Value) -> String {
    let response: RegisterResponse = serde_json::from_value(value.clone()).unwrap();
    response.credential
}

fn error_code(value: &Value) -> String {
    let body: ErrorBody =
        serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("not an error body: {value} ({e})"));
    assert!(!body.message.is_empty());
    body.error
}

#[tokio::test]
async fn register_with_wrong_bootstrap_token_is_401_json() {
    let h = harness().await;
    let body = json!({"clusterName": "eu-1", "agentVersion": "0.1.0"}).to_string();
    let (status, value) = call(&h.state, Method::POST, wire::REGISTER_PATH, "wrong", Some(body)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(error_code(&value), error_codes::UNAUTHORIZED);
}

#[tokio::test]
async fn malformed_body_is_400_and_a_field_of_the_wrong_type_is_422_json_as_in_the_rest_api() {
    let h = harness().await;
    let (status, value) = call(
        &h.state,
        Method::POST,
        wire::REGISTER_PATH,
        BOOTSTRAP,
        Some("{not json".to_owned()),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&value), error_codes::BAD_REQUEST);
    let credential = register(&h.state, "eu-1").await;
    let (status, value) = call(
        &h.state,
        Method::POST,
        wire::HEARTBEAT_PATH,
        &credential,
        Some(json!({"capacity": 1}).to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{value}");
    assert_eq!(error_code(&value), error_codes::INVALID);
    assert!(
        value["message"].as_str().is_some_and(|m| m.contains("capacity")),
        "the message names the field: {value}"
    );
}

#[tokio::test]
async fn unknown_or_revoked_credential_is_401() {
    let h = harness().await;
    let (status, value) = call(&h.state, Method::GET, wire::WORK_PATH, "made-up", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(error_code(&value), error_codes::UNAUTHORIZED);
    let first = register(&h.state, "eu-1").await;
    // Registering again with the current credential rotates it.
    let (status, value) = register_with(&h.state, "eu-1", &first).await;
    assert_eq!(status, StatusCode::OK, "{value}");
    let (status, _) = call(&h.state, Method::GET, wire::WORK_PATH, &first, None).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "registering again must revoke the old credential"
    );
    let second = credential_of(&value);
    let (status, _) = call(&h.state, Method::GET, wire::WORK_PATH, &second, None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn the_fleet_token_cannot_take_over_a_cluster_that_joined() {
    let h = harness().await;
    let real = register(&h.state, "prod-eu").await;
    // The impostor holds the fleet's bootstrap token, read from any workload cluster.
    let (status, value) = register_with(&h.state, "prod-eu", BOOTSTRAP).await;
    assert_eq!(status, StatusCode::CONFLICT, "{value}");
    assert_eq!(error_code(&value), error_codes::CONFLICT);
    assert!(
        value["message"].as_str().unwrap().contains("join token"),
        "{value}"
    );
    // Nor with another cluster's credential.
    let other = register(&h.state, "prod-us").await;
    let (status, value) = register_with(&h.state, "prod-eu", &other).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{value}");
    // The real agent is untouched: its credential still works, no new one was issued.
    let (status, _) = call(&h.state, Method::GET, wire::WORK_PATH, &real, None).await;
    assert_eq!(status, StatusCode::OK, "the real agent keeps its credential");
    let credentials = h.state.store.list_credentials("prod-eu").await.unwrap();
    assert_eq!(credentials.len(), 1, "{credentials:?}");
}

#[tokio::test]
async fn a_new_cluster_from_the_fleet_token_waits_for_acceptance_and_selects_nothing() {
    let h = harness().await;
    let strict = h.state.clone().accepting_new_clusters(false);
    let accepted = register(&h.state, "good").await;
    let rogue = register(&strict, "rogue").await;
    let record = strict.store.get_cluster("rogue").await.unwrap().unwrap();
    assert!(!record.accepted, "{record:?}");
    let cluster = crate::placement::inputs::fleet_cluster(
        "rogue",
        Some(&record),
        None,
        jiff::Timestamp::now(),
        Duration::from_secs(30),
        crate::placement::inputs::record_capacity(record.capacity.as_deref()),
    );
    assert!(cluster.unaccepted, "placement sees it as not accepted");
    // It may report (so an admin sees what it claims) but gets no work, no peers to probe, and
    // neither its probe URL nor its round trips reach anyone.
    let mut beat = empty_beat("rogue");
    beat["probeUrl"] = json!("http://10.0.0.1:8080/internal");
    beat["latencySamples"] = json!([{"peer": "good", "rttMillis": 0.001}]);
    let (status, answer) = call(
        &strict,
        Method::POST,
        wire::HEARTBEAT_PATH,
        &rogue,
        Some(beat.to_string()),
    )
    .await;
    assert_eq!(
        (status, answer),
        (StatusCode::OK, json!({"peers": [], "statusDeltas": true}))
    );
    let (status, answer) = call(
        &strict,
        Method::POST,
        wire::HEARTBEAT_PATH,
        &accepted,
        Some(empty_beat("good").to_string()),
    )
    .await;
    assert_eq!(
        (status, answer),
        (StatusCode::OK, json!({"peers": [], "statusDeltas": true})),
        "the rogue's URL is not handed out"
    );
    let measured = strict.index.network().measured();
    assert!(
        measured.get("rogue").is_none_or(|m| m.is_empty()),
        "its samples are not kept: {measured:?}"
    );
    let (status, value) = call(&strict, Method::GET, wire::WORK_PATH, &rogue, None).await;
    assert_eq!((status, value["revision"].as_u64()), (StatusCode::OK, Some(0)));
    assert!(h.state.store.get_cluster("good").await.unwrap().unwrap().accepted);
}

#[tokio::test]
async fn a_leaked_fleet_token_adds_at_most_the_limit_of_clusters_awaiting_acceptance() {
    let h = harness().await;
    let strict = h
        .state
        .clone()
        .accepting_new_clusters(false)
        .with_max_unaccepted_clusters(3);
    for i in 0..3 {
        register(&strict, &format!("rogue-{i}")).await;
    }
    let (status, value) = register_with(&strict, "rogue-3", BOOTSTRAP).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{value}");
    assert_eq!(error_code(&value), error_codes::TOO_MANY_REQUESTS);
    assert!(
        strict.store.get_cluster("rogue-3").await.unwrap().is_none(),
        "nothing stored"
    );
    assert_eq!(strict.store.list_clusters().await.unwrap().len(), 3);
    // Accepting one makes room for one more.
    strict.store.set_accepted("rogue-0", true).await.unwrap();
    register(&strict, "rogue-3").await;
    let (status, _) = register_with(&strict, "rogue-4", BOOTSTRAP).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_join_token_registers_its_one_name_once_and_is_accepted() {
    let h = harness().await;
    let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(600);
    let token = h.state.store.create_join_token("eu-1", expires).await.unwrap();
    let token = token.token.expose().to_owned();
    let (status, value) = register_with(&h.state, "us-1", &token).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "another name: {value}");
    let (status, value) = register_with(&h.state, "eu-1", &token).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the token was not spent by the refused attempt: {value}"
    );
    assert!(h.state.store.get_cluster("eu-1").await.unwrap().unwrap().accepted);
    let (status, value) = register_with(&h.state, "eu-1", &token).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "used once: {value}");

    // An admin's join token is how a name that joined is claimed again (a lost credential).
    let again = h.state.store.create_join_token("eu-1", expires).await.unwrap();
    let reclaimed = credential_of(&value_of_ok(
        register_with(&h.state, "eu-1", again.token.expose()).await,
    ));
    let (status, _) = call(&h.state, Method::GET, wire::WORK_PATH, &reclaimed, None).await;
    assert_eq!(status, StatusCode::OK);
    let credentials = h.state.store.list_credentials("eu-1").await.unwrap();
    assert_eq!(
        credentials.iter().filter(|c| c.revoked_at.is_none()).count(),
        1,
        "{credentials:?}"
    );

    let expired = h
        .state
        .store
        .create_join_token(
            "eu-2",
            jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1),
        )
        .await
        .unwrap();
    let (status, _) = register_with(&h.state, "eu-2", expired.token.expose()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "expired");
}

fn value_of_ok((status, value): (StatusCode, Value)) -> Value {
    assert_eq!(status, StatusCode::OK, "{value}");
    value
}

#[tokio::test]
async fn credential_for_a_cannot_read_bs_work() {
    let h = harness().await;
    let a = register(&h.state, "a").await;
    let _b = register(&h.state, "b").await;
    let (status, value) = call(
        &h.state,
        Method::GET,
        &format!("{}?cluster=b", wire::WORK_PATH),
        &a,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(error_code(&value), error_codes::FORBIDDEN);
    let beat = empty_beat("b");
    let (status, _) = call(
        &h.state,
        Method::POST,
        wire::HEARTBEAT_PATH,
        &a,
        Some(beat.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(
        &h.state,
        Method::POST,
        wire::STATUS_PATH,
        &a,
        Some(json!({"clusterName": "b"}).to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, value) = call(
        &h.state,
        Method::GET,
        &format!("{}?cluster=a", wire::WORK_PATH),
        &a,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{value}");
}

#[tokio::test]
async fn long_poll_returns_when_a_new_revision_is_put() {
    let h = harness().await;
    let credential = register(&h.state, "eu-1").await;
    let objects = vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "one"}})];
    let first = h.state.store.put_work("eu-1", &objects).await.unwrap();
    assert_eq!(first.revision, 1);

    // Nothing newer than 1: the poll answers 204 at its timeout.
    let (status, _) = call(
        &h.state,
        Method::GET,
        &format!("{}?after=1&wait=1", wire::WORK_PATH),
        &credential,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let state = h.state.clone();
    let uri = format!("{}?after=1&wait=30", wire::WORK_PATH);
    let poll = tokio::spawn(async move { call(&state, Method::GET, &uri, &credential, None).await });
    let objects = vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "two"}})];
    let second = h.state.store.put_work("eu-1", &objects).await.unwrap();
    h.state.signals.notify("eu-1", second.revision);
    let (status, value) = tokio::time::timeout(Duration::from_secs(10), poll)
        .await
        .expect("the long-poll should answer as soon as revision 2 is put, not at its 30 s timeout")
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    let set: WorkSet = serde_json::from_value(value).unwrap();
    assert_eq!(set.revision, 2, "expected revision 2, saw {}", set.revision);
    assert_eq!(set.objects, objects);
}

#[tokio::test]
async fn an_agent_holding_a_set_is_sent_what_changed_and_a_whole_set_when_the_store_cannot_tell() {
    let h = harness().await;
    let credential = register(&h.state, "eu-1").await;
    let namespace = |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    h.state
        .store
        .put_work("eu-1", &[namespace("one"), namespace("two")])
        .await
        .unwrap();
    h.state
        .store
        .put_work("eu-1", &[namespace("two"), namespace("three")])
        .await
        .unwrap();
    let get = |query: &str| {
        let (state, credential) = (h.state.clone(), credential.clone());
        let uri = format!("{}?{query}", wire::WORK_PATH);
        async move {
            let (status, value) = call(&state, Method::GET, &uri, &credential, None).await;
            assert_eq!(status, StatusCode::OK, "GET {uri}: {value}");
            serde_json::from_value::<WorkSet>(value).unwrap()
        }
    };
    let delta = get("after=1&delta=true").await;
    assert_eq!(
        (delta.revision, delta.since, delta.objects, delta.removed),
        (
            2,
            Some(1),
            vec![namespace("three")],
            vec!["Namespace//one".to_owned()]
        ),
        "only what changed since revision 1"
    );
    // Without asking for a delta, or from a revision the store never had: the whole set.
    for query in ["after=1", "after=9&delta=true"] {
        let whole = get(query).await;
        assert_eq!(
            (
                whole.revision,
                whole.since,
                whole.objects.len(),
                whole.removed.len()
            ),
            (2, None, 2, 0),
            "{query}: the whole set"
        );
    }
}

#[tokio::test]
async fn heartbeats_are_answered_with_the_other_probeable_agents() {
    let h = harness().await;
    let beat = |cluster: &str, probe_url: Option<&str>, samples: Value| {
        let mut beat = empty_beat(cluster);
        beat["latencySamples"] = samples;
        if let Some(url) = probe_url {
            beat["probeUrl"] = json!(url);
        }
        beat.to_string()
    };
    let a = register(&h.state, "a").await;
    let b = register(&h.state, "b").await;
    let (status, answer) = call(
        &h.state,
        Method::POST,
        wire::HEARTBEAT_PATH,
        &a,
        Some(beat("a", Some("http://a:9090/probe"), json!([]))),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer,
        json!({"peers": [], "statusDeltas": true}),
        "no other agent has beaten yet"
    );
    let (status, answer) = call(
        &h.state,
        Method::POST,
        wire::HEARTBEAT_PATH,
        &b,
        Some(beat(
            "b",
            None,
            json!([{"peer": "hub", "rttMillis": 3.0}, {"peer": "a", "rttMillis": 41.5}]),
        )),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer,
        json!({"peers": [{"cluster": "a", "probeUrl": "http://a:9090/probe"}], "statusDeltas": true}),
        "b probes a, which gave its URL"
    );
    let measured = h.state.index.network().measured();
    assert_eq!(
        measured["b"].get("a"),
        Some(&Duration::from_micros(41_500)),
        "b's sample of a is kept: {measured:?}"
    );
}

#[tokio::test]
async fn a_registration_a_workload_cluster_could_not_hold_is_422_and_nothing_is_stored() {
    let h = harness().await;
    for (body, field) in [
        (
            json!({"clusterName": "a..b", "agentVersion": "0.1.0"}),
            "clusterName",
        ),
        (
            json!({"clusterName": "eu-1", "agentVersion": "0.1.0",
                   "coordinates": {"latitude": 1000.0, "longitude": 0.0}}),
            "coordinates.latitude",
        ),
    ] {
        let (status, value) = call(
            &h.state,
            Method::POST,
            wire::REGISTER_PATH,
            BOOTSTRAP,
            Some(body.to_string()),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{value}");
        assert_eq!(error_code(&value), error_codes::INVALID);
        assert!(
            value["message"].as_str().is_some_and(|m| m.starts_with(field)),
            "the message names {field}: {value}"
        );
    }
    assert!(
        h.state.store.list_clusters().await.unwrap().is_empty(),
        "nothing was registered"
    );
}

#[tokio::test]
async fn credentials_are_checked_before_the_body_is_read_and_bodies_have_small_limits() {
    let h = harness().await;
    // A body that does not even parse: without a valid credential the answer is 401, not 400,
    // because the body is never read.
    for (path, token) in [
        (wire::HEARTBEAT_PATH, "made-up"),
        (wire::STATUS_PATH, "made-up"),
        (wire::REGISTER_PATH, "not-the-bootstrap-token"),
    ] {
        let (status, value) = call(&h.state, Method::POST, path, token, Some("{not json".to_owned())).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {value}");
        assert_eq!(error_code(&value), error_codes::UNAUTHORIZED);
    }
    // Too large: 413 with the JSON error body, as the REST API answers.
    let huge = format!("{{\"clusterName\": \"{}\"}}", "a".repeat(MAX_REGISTER_BYTES));
    let (status, value) = call(&h.state, Method::POST, wire::REGISTER_PATH, BOOTSTRAP, Some(huge)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{value}");
    assert_eq!(error_code(&value), error_codes::PAYLOAD_TOO_LARGE);
    let credential = register(&h.state, "eu-1").await;
    let huge = format!("{{\"padding\": \"{}\"}}", "a".repeat(MAX_REPORT_BYTES));
    let (status, value) = call(
        &h.state,
        Method::POST,
        wire::HEARTBEAT_PATH,
        &credential,
        Some(huge),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{value}");
}

#[tokio::test]
async fn a_heartbeat_with_more_pending_pods_than_agents_send_keeps_only_the_first() {
    let h = harness().await;
    let credential = register(&h.state, "eu-1").await;
    let mut beat = empty_beat("eu-1");
    let pods: Vec<Value> = (0..Heartbeat::MAX_PENDING_PODS + 250)
        .map(|i| json!({"namespace": "shop", "name": format!("web-{i}"), "reason": "Unschedulable"}))
        .collect();
    beat["pendingPods"] = json!(pods);
    let (status, _) = call(
        &h.state,
        Method::POST,
        wire::HEARTBEAT_PATH,
        &credential,
        Some(beat.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let kept = h.state.index.pending().get("eu-1").map(|p| p.len());
    assert_eq!(kept, Some(Heartbeat::MAX_PENDING_PODS));
}

#[tokio::test]
async fn the_openapi_document_describes_every_agent_endpoint_and_is_served_without_a_credential() {
    let h = harness().await;
    let document = serde_json::to_value(openapi()).unwrap();
    for (path, method) in [
        (wire::REGISTER_PATH, "post"),
        (wire::HEARTBEAT_PATH, "post"),
        (wire::WORK_PATH, "get"),
        (wire::STATUS_PATH, "post"),
        (wire::STATUS_DELTA_PATH, "post"),
    ] {
        let operation = &document["paths"][path][method];
        assert!(operation.is_object(), "{method} {path} is not documented");
        assert!(
            operation["responses"]["401"].is_object(),
            "{method} {path} documents no 401"
        );
    }
    let (status, served) = call(&h.state, Method::GET, OPENAPI_PATH, "", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(served, document, "the served document is the one the code builds");
    let (status, value) = call(&h.state, Method::DELETE, wire::WORK_PATH, "", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{value}");
    assert_eq!(error_code(&value), error_codes::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn bodies_that_are_not_objects_and_integers_past_int64_are_refused_as_documented() {
    let h = harness().await;
    let credential = register(&h.state, "eu-1").await;
    let (status, value) = call(
        &h.state,
        Method::POST,
        wire::STATUS_PATH,
        &credential,
        Some("[null, null]".to_owned()),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "an array is no report: {value}"
    );
    let mut beat = empty_beat("eu-1");
    beat["capacity"]["totals"]["allocatable"]["pods"] = json!(9_223_372_036_854_775_808u64);
    let (status, value) = call(
        &h.state,
        Method::POST,
        wire::HEARTBEAT_PATH,
        &credential,
        Some(beat.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{value}");
    let message = value["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("capacity.totals.allocatable.pods"),
        "names the field: {message}"
    );
    let (status, value) = call(
        &h.state,
        Method::GET,
        &format!("{}?wait=9223372036854775808", wire::WORK_PATH),
        &credential,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{value}");
}

/// A Deployment's status entry, as an agent reports it.
fn deployment_status(name: &str, ready: i32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop", "name": name,
        "workload": {"namespace": "shop", "name": name}, "readyReplicas": ready})
}

#[tokio::test]
async fn a_status_delta_is_taken_only_over_the_report_it_follows_and_within_the_cluster() {
    let h = harness().await;
    let a = register(&h.state, "a").await;
    let _b = register(&h.state, "b").await;
    let post = |path: &'static str, body: Value| {
        let state = h.state.clone();
        let a = a.clone();
        async move { call(&state, Method::POST, path, &a, Some(body.to_string())).await }
    };
    let (status, value) = post(wire::HEARTBEAT_PATH, empty_beat("a")).await;
    assert_eq!(status, StatusCode::OK, "{value}");
    assert_eq!(
        value["statusDeltas"],
        json!(true),
        "the hub says it takes deltas: {value}"
    );

    // Before any report, a delta follows nothing the hub holds: 409, and nothing is kept.
    let delta = json!({"base": "r-1", "id": "r-2", "changed": [deployment_status("web", 1)]});
    let (status, value) = post(wire::STATUS_DELTA_PATH, delta.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{value}");
    assert_eq!(error_code(&value), error_codes::CONFLICT);
    assert!(
        value["message"].as_str().unwrap_or_default().starts_with("base:"),
        "{value}"
    );
    assert!(!h.state.index.reports().contains_key("a"));

    let whole = json!({"id": "r-1", "appliedRevision": 3,
        "objects": [deployment_status("web", 0), deployment_status("api", 2)]});
    let (status, value) = post(wire::STATUS_PATH, whole).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{value}");

    // Following r-1: web changes, api goes, cart comes.
    let delta = json!({"base": "r-1", "id": "r-2", "appliedRevision": 4,
        "changed": [deployment_status("web", 1), deployment_status("cart", 3)],
        "removed": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop", "name": "api"}]});
    let (status, value) = post(wire::STATUS_DELTA_PATH, delta.clone()).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{value}");
    let kept = h.state.index.reports().get("a").cloned().expect("a report of a");
    let seen: Vec<(&str, Option<i32>)> = kept
        .objects
        .iter()
        .map(|o| (o.name.as_str(), o.ready_replicas))
        .collect();
    assert_eq!(
        seen,
        [("web", Some(1)), ("cart", Some(3))],
        "the report the delta makes"
    );
    assert_eq!(
        (kept.id.as_deref(), kept.applied_revision),
        (Some("r-2"), Some(4))
    );
    // What the store holds is the report the delta made, so another hub can follow it.
    let stored = h.state.store.get_work_status("a").await.unwrap().expect("stored");
    assert_eq!(crate::index::parse_report(&stored).as_ref(), Some(kept.as_ref()));

    // The same delta again (an answer lost on the way): it no longer follows what the hub holds.
    let (status, value) = post(wire::STATUS_DELTA_PATH, delta).await;
    assert_eq!(status, StatusCode::CONFLICT, "{value}");

    // Another cluster's report cannot be changed with a's credential.
    let (status, value) = post(
        wire::STATUS_DELTA_PATH,
        json!({"clusterName": "b", "base": "r-2", "id": "r-3"}),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{value}");

    // Deltas cannot grow a report past what a whole one may hold.
    let many: Vec<Value> = (0..=StatusReport::MAX_OBJECTS)
        .map(|i| json!({"apiVersion": "v1", "kind": "C", "name": format!("c{i}")}))
        .collect();
    let (status, value) = post(
        wire::STATUS_DELTA_PATH,
        json!({"base": "r-2", "id": "r-3", "changed": many}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{value}");
    assert!(
        value["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("changed:"),
        "{value}"
    );
    let (status, value) = post(
        wire::STATUS_DELTA_PATH,
        json!({"base": "r-2", "id": "r".repeat(StatusReport::MAX_ID_CHARS + 1)}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{value}");
    assert!(
        value["message"].as_str().unwrap_or_default().starts_with("id:"),
        "{value}"
    );
    assert_eq!(
        h.state
            .index
            .reports()
            .get("a")
            .and_then(|r| r.id.clone())
            .as_deref(),
        Some("r-2"),
        "a refused delta changes nothing"
    );
}
