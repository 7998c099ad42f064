//! Wire-level checks through the router (`tower::ServiceExt::oneshot`): headers, status bodies,
//! content negotiation, discovery content types, OpenAPI, watch framing, bookmarks and limits.

#[path = "support/helpers.rs"]
mod helpers;

use axum::body::Body;
use http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

async fn call(router: &axum::Router, req: Request<Body>) -> (StatusCode, http::HeaderMap, String) {
    let resp = router.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).expect("request")
}

#[tokio::test]
async fn version_health_and_cache_control() {
    let sim = helpers::cluster("http1", false).await;
    let r = sim.router();
    let (s, h, b) = call(&r, get("/version?timeout=5s")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        h.get(header::CACHE_CONTROL)
            .map(|v| v.to_str().unwrap_or_default()),
        Some("no-cache, private")
    );
    let v: Value = serde_json::from_str(&b).expect("json");
    assert_eq!(v["minor"], "32");
    for p in ["/healthz", "/livez", "/readyz"] {
        let (s, _, b) = call(&r, get(p)).await;
        assert_eq!((s, b.as_str()), (StatusCode::OK, "ok"), "{p}");
    }
    let (s, h, b) = call(&r, get("/openapi/v2")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(
        h.get(header::CONTENT_TYPE)
            .is_some_and(|v| v == "application/json")
    );
    assert_eq!(
        serde_json::from_str::<Value>(&b).expect("status")["kind"],
        "Status"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn discovery_openapi_and_negotiation() {
    let sim = helpers::cluster("http2", false).await;
    let r = sim.router();
    let agg = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let (s, h, b) = call(
        &r,
        Request::get("/apis")
            .header(header::ACCEPT, agg)
            .body(Body::empty())
            .expect("req"),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        h[header::CONTENT_TYPE],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let doc: Value = serde_json::from_str(&b).expect("json");
    assert!(
        doc["items"]
            .as_array()
            .is_some_and(|i| i.iter().any(|g| g["metadata"]["name"] == "apps"))
    );
    let (_, h, b) = call(&r, get("/api")).await;
    assert_eq!(h[header::CONTENT_TYPE], "application/json");
    assert_eq!(
        serde_json::from_str::<Value>(&b).expect("json")["kind"],
        "APIVersions"
    );
    let (_, _, b) = call(&r, get("/apis/apps/v1")).await;
    assert!(b.contains("\"deployments/scale\""), "{b}");

    let (_, _, b) = call(&r, get("/openapi/v3")).await;
    let idx: Value = serde_json::from_str(&b).expect("json");
    let url = idx["paths"]["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .expect("apps/v1 entry")
        .to_owned();
    let (s, _, b) = call(&r, get(&url)).await;
    assert_eq!(s, StatusCode::OK);
    let doc: Value = serde_json::from_str(&b).expect("json");
    let op = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
    assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "Deployment");
    assert!(
        op["parameters"]
            .as_array()
            .is_some_and(|p| p.iter().any(|x| x["name"] == "fieldValidation"))
    );
    let (_, _, b) = call(&r, get("/openapi/v3/api/v1")).await;
    assert!(
        b.contains("/api/v1/namespaces/{name}"),
        "Namespace PATCH op present"
    );

    let (s, _, _) = call(&r, get("/api/v1/namespaces/default/configmaps?&limit=1&bogus=1")).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _, b) = call(
        &r,
        Request::get("/api/v1/namespaces")
            .header(header::ACCEPT, "application/vnd.kubernetes.protobuf")
            .body(Body::empty())
            .expect("req"),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_ACCEPTABLE, "{b}");
    let (s, _, b) = call(&r, get("/apis/apps/v1/namespaces/default/deployments/nope")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let st: Value = serde_json::from_str(&b).expect("status");
    assert_eq!(st["message"], "deployments.apps \"nope\" not found");
    assert_eq!(
        st["details"],
        json!({"name": "nope", "group": "apps", "kind": "deployments"})
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn bodies_over_three_mebibytes_get_413_and_garbage_gets_400() {
    let sim = helpers::cluster("http3", false).await;
    let r = sim.router();
    let big = format!(
        "{{\"metadata\":{{\"name\":\"big\"}},\"data\":{{\"a\":\"{}\"}}}}",
        "x".repeat(3 * 1024 * 1024 + 10)
    );
    let req = Request::post("/api/v1/namespaces/default/configmaps")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(big))
        .expect("req");
    let (s, _, b) = call(&r, req).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{b}");
    for garbage in ["{", "[1,2]", "\u{0}\u{1}", "null"] {
        let req = Request::post("/api/v1/namespaces/default/configmaps")
            .body(Body::from(garbage))
            .expect("req");
        let (s, _, b) = call(&r, req).await;
        assert!(s.is_client_error(), "{garbage:?} → {s} {b}");
        assert_eq!(
            serde_json::from_str::<Value>(&b).expect("status")["kind"],
            "Status"
        );
    }
    let req = Request::patch("/api/v1/namespaces/default/configmaps/x")
        .header(header::CONTENT_TYPE, "application/json-patch+json")
        .body(Body::from(
            "[{\"op\":\"move\",\"from\":\"/a/b/c\",\"path\":\"/a/b/c/d\"}]",
        ))
        .expect("req");
    let (s, _, _) = call(&r, req).await;
    assert!(s.is_client_error());
    sim.shutdown().await;
}

#[tokio::test]
async fn watch_lines_bookmarks_timeout_and_too_old() {
    let sim = helpers::cluster("http4", false).await;
    let r = sim.router();
    let req = Request::post("/api/v1/namespaces/default/configmaps")
        .body(Body::from(r#"{"metadata":{"name":"a"},"data":{"k":"v"}}"#))
        .expect("req");
    let (s, _, _) = call(&r, req).await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, h, b) = call(
        &r,
        get("/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=1"),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h[header::CONTENT_TYPE], "application/json");
    let lines: Vec<Value> = b
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON event per line"))
        .collect();
    assert_eq!(lines.first().map(|e| e["type"].clone()), Some(json!("ADDED")));
    let last = lines.last().expect("events");
    assert_eq!(last["type"], "BOOKMARK");
    assert_eq!(last["object"]["kind"], "ConfigMap");
    assert_eq!(last["object"]["apiVersion"], "v1");

    let (_, _, b) = call(&r, get("/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1")).await;
    assert!(b.contains("k8s.io/initial-events-end"), "{b}");

    sim.faults().compact();
    let (s, _, b) = call(
        &r,
        get("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1&timeoutSeconds=1"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "too-old is in-stream");
    let ev: Value = serde_json::from_str(b.lines().next().unwrap_or_default()).expect("event");
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 410);
    assert_eq!(ev["object"]["reason"], "Expired");

    let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let (_, h, b) = call(
        &r,
        Request::get("/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1")
            .header(header::ACCEPT, table)
            .body(Body::empty())
            .expect("req"),
    )
    .await;
    assert!(
        h[header::CONTENT_TYPE]
            .to_str()
            .unwrap_or_default()
            .contains("as=Table")
    );
    let first: Value = serde_json::from_str(b.lines().next().unwrap_or_default()).expect("event");
    assert_eq!(first["object"]["kind"], "Table");
    assert!(first["object"]["columnDefinitions"].is_array());
    sim.shutdown().await;
}

#[tokio::test]
async fn hooks_dump_reset_request_log_and_many_watches() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams, WatchParams};
    let sim = helpers::cluster("hooks", false).await;
    let client = sim.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "keep-me-not"}})).expect("cm");
    cms.create(&PostParams::default(), &cm).await.expect("create");

    let text = |path: &str, post: bool| {
        let client = client.clone();
        let req = if post {
            http::Request::post(path)
        } else {
            http::Request::get(path)
        };
        let req = req.body(Vec::new()).expect("req");
        async move { client.request_text(req).await.expect("hook") }
    };
    let dump: Value = serde_json::from_str(&text("/_sim/v1/dump", false).await).expect("dump");
    assert!(
        dump["objects"]["/configmaps"]
            .as_array()
            .is_some_and(|a| a.len() == 1),
        "{dump}"
    );
    let log: Value = serde_json::from_str(&text("/_sim/v1/requests", false).await).expect("log");
    let posts = log["requests"].as_array().map(|r| {
        r.iter()
            .filter(|e| e["method"] == "POST" && e["code"] == 201)
            .count()
    });
    assert_eq!(posts, Some(1), "the create is in the request log: {log}");

    // 300 open watches do not starve other requests.
    let mut streams = Vec::new();
    for _ in 0..300 {
        streams.push(
            cms.watch(&WatchParams::default().timeout(60), "0")
                .await
                .expect("watch")
                .boxed(),
        );
    }
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), cms.get("keep-me-not")).await;
    assert!(
        matches!(got, Ok(Ok(_))),
        "GET while 300 watches are open: {got:?}"
    );
    drop(streams);

    text("/_sim/v1/reset", true).await;
    assert!(
        cms.get_opt("keep-me-not").await.expect("get").is_none(),
        "reset removes user objects"
    );
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    assert!(
        ns.get_opt("kube-system").await.expect("get").is_some(),
        "reset keeps system namespaces"
    );
    sim.shutdown().await;
}

fn send(method: &str, path: &str, content_type: &str, body: &Value) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(body.to_string()))
        .expect("request")
}

#[tokio::test]
async fn secret_string_data_is_folded_into_data_on_create_update_and_apply() {
    let sim = helpers::cluster("http-secret", false).await;
    let r = sim.router();
    let path = "/api/v1/namespaces/default/secrets";
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
        "data": {"a": "eA=="}, "stringData": {"b": "hello"}});
    let (s, _, b) = call(&r, send("POST", path, "application/json", &secret)).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let created: Value = serde_json::from_str(&b).expect("json");
    assert_eq!(created["data"], json!({"a": "eA==", "b": "aGVsbG8="}));
    assert!(
        created.get("stringData").is_none(),
        "create returned stringData: {b}"
    );

    let (_, _, b) = call(&r, get(&format!("{path}/s"))).await;
    let stored: Value = serde_json::from_str(&b).expect("json");
    assert!(stored.get("stringData").is_none(), "stringData was stored: {b}");

    let mut put = stored.clone();
    put["stringData"] = json!({"a": "new"});
    let (s, _, b) = call(&r, send("PUT", &format!("{path}/s"), "application/json", &put)).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let updated: Value = serde_json::from_str(&b).expect("json");
    assert_eq!(updated["data"]["a"], "bmV3");
    assert!(
        updated.get("stringData").is_none(),
        "update returned stringData: {b}"
    );

    let applied = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "t"},
        "stringData": {"token": "abc"}});
    let (s, _, b) = call(
        &r,
        send(
            "PATCH",
            &format!("{path}/t?fieldManager=test"),
            "application/apply-patch+yaml",
            &applied,
        ),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let applied: Value = serde_json::from_str(&b).expect("json");
    assert_eq!(applied["data"], json!({"token": "YWJj"}));
    assert!(
        applied.get("stringData").is_none(),
        "apply returned stringData: {b}"
    );
    sim.shutdown().await;
}

fn template(resources: Value, image: &str) -> Value {
    json!({"metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": image, "resources": resources}]}})
}

/// One object of each kind that carries a pod template, with `tpl` as its template.
fn workloads(tpl: &Value) -> Vec<(&'static str, Value)> {
    let sel = json!({"matchLabels": {"app": "x"}});
    vec![
        (
            "/apis/apps/v1/namespaces/default/deployments",
            json!({"apiVersion": "apps/v1",
            "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"selector": sel, "template": tpl}}),
        ),
        (
            "/apis/apps/v1/namespaces/default/replicasets",
            json!({"apiVersion": "apps/v1",
            "kind": "ReplicaSet", "metadata": {"name": "x"}, "spec": {"selector": sel, "template": tpl}}),
        ),
        (
            "/apis/apps/v1/namespaces/default/statefulsets",
            json!({"apiVersion": "apps/v1",
            "kind": "StatefulSet", "metadata": {"name": "x"},
            "spec": {"selector": sel, "serviceName": "x", "template": tpl}}),
        ),
        (
            "/apis/apps/v1/namespaces/default/daemonsets",
            json!({"apiVersion": "apps/v1",
            "kind": "DaemonSet", "metadata": {"name": "x"}, "spec": {"selector": sel, "template": tpl}}),
        ),
        (
            "/apis/batch/v1/namespaces/default/jobs",
            json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "x"}, "spec": {"template": {"metadata": tpl["metadata"],
            "spec": {"restartPolicy": "Never", "containers": tpl["spec"]["containers"]}}}}),
        ),
    ]
}

#[tokio::test]
async fn an_unparsable_quantity_is_a_bad_request_for_pods_and_every_pod_template() {
    let sim = helpers::cluster("http-quantity", false).await;
    let r = sim.router();
    let bad = json!({"requests": {"cpu": "lots"}});
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
        "spec": template(json!({"limits": {"memory": "1 GB"}}), "nginx")["spec"]});
    let mut cases = workloads(&template(bad, "nginx"));
    cases.push(("/api/v1/namespaces/default/pods", pod));
    for (path, obj) in cases {
        let kind = obj["kind"].as_str().unwrap_or_default().to_owned();
        let (s, _, b) = call(&r, send("POST", path, "application/json", &obj)).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{kind}: {b}");
        let status: Value = serde_json::from_str(&b).expect("status");
        let message = status["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!(
                "{kind} in version \"v1\" cannot be handled as a {kind}: quantities must match the regular expression"
            )),
            "{kind}: {message}"
        );
    }

    // An update that breaks a quantity is refused the same way.
    let good = template(json!({"requests": {"cpu": "100m"}}), "nginx");
    let (path, mut dep) = workloads(&good).remove(0);
    let (s, _, b) = call(&r, send("POST", path, "application/json", &dep)).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    dep["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("lots");
    let (s, _, b) = call(&r, send("PUT", &format!("{path}/x"), "application/json", &dep)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    sim.shutdown().await;
}

#[tokio::test]
async fn a_missing_image_is_invalid_with_its_field_path() {
    let sim = helpers::cluster("http-image", false).await;
    let r = sim.router();
    for (path, obj) in workloads(&template(json!({}), "")) {
        let (s, _, b) = call(&r, send("POST", path, "application/json", &obj)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
        let status: Value = serde_json::from_str(&b).expect("status");
        assert_eq!(
            status["details"]["causes"][0]["field"], "spec.template.spec.containers[0].image",
            "{b}"
        );
        assert!(
            status["message"]
                .as_str()
                .is_some_and(|m| m.ends_with("spec.template.spec.containers[0].image: Required value")),
            "{b}"
        );
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "nginx "}]}});
    let (s, _, b) = call(
        &r,
        send(
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            &pod,
        ),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert!(b.contains("spec.containers[0].image: Invalid value: \\\"nginx \\\": must not have leading or trailing whitespace"), "{b}");
    // The API server does not parse image references: the kubelet reports them.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"},
        "spec": {"containers": [{"name": "c", "image": "Nginx!"}]}});
    let (s, _, b) = call(
        &r,
        send(
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            &pod,
        ),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    sim.shutdown().await;
}
