//! Prometheus as a scoring input, end to end through the hub: a Prometheus HTTP API served here
//! (answers chosen by the test, failures on demand), the hub reading it with a short TTL, and
//! agents speaking the wire protocol. The real Prometheus server is exercised by `nave-e2e`.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kube::api::Api;
use nave_api::WorkloadCluster;
use nave_api::wire::Resources;
use nave_testkit::{DEADLINE, FakeAgent, capacity, wait_for};
use serde_json::{Value, json};

const TOKEN: &str = "read-token-prometheus";
const GIB: u64 = 1 << 30;

/// What the stand-in Prometheus answers: per query, values by cluster; or 503 when down.
#[derive(Debug, Default)]
struct Answers {
    by_query: BTreeMap<String, BTreeMap<String, f64>>,
    down: bool,
    queries: usize,
}

type Shared = Arc<Mutex<Answers>>;

async fn query(State(answers): State<Shared>, Query(params): Query<BTreeMap<String, String>>) -> Response {
    let mut answers = answers.lock().unwrap();
    answers.queries += 1;
    if answers.down {
        let body = json!({"status": "error", "errorType": "unavailable", "error": "shutting down"});
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    }
    let q = params.get("query").cloned().unwrap_or_default();
    let Some(values) = answers.by_query.get(&q) else {
        let body =
            json!({"status": "error", "errorType": "bad_data", "error": format!("unknown query {q:?}")});
        return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    };
    let result: Vec<Value> = values
        .iter()
        .map(
            |(cluster, v)| json!({"metric": {"cluster": cluster}, "value": [1_700_000_000.0, v.to_string()]}),
        )
        .collect();
    axum::Json(json!({"status": "success", "data": {"resultType": "vector", "result": result}}))
        .into_response()
}

/// Serves `/api/v1/query` from `answers` on a loopback port; its base URL.
async fn stand_in_prometheus(answers: Shared) -> String {
    let app = axum::Router::new()
        .route("/api/v1/query", axum::routing::get(query).post(query))
        .with_state(answers);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value, String> {
    let res = http
        .get(url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !res.status().is_success() {
        return Err(format!("GET {url}: {}", res.status()));
    }
    res.json().await.map_err(|e| e.to_string())
}

/// The cluster's `usage` in `GET /api/v1/clusters/{name}`.
async fn usage(http: &reqwest::Client, base: &str, cluster: &str) -> Result<Value, String> {
    Ok(get_json(http, &format!("{base}/api/v1/clusters/{cluster}")).await?["usage"].clone())
}

/// The value of `name{labels}` in the hub's exposition.
async fn metric(http: &reqwest::Client, base: &str, name: &str, labels: &str) -> Option<f64> {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
}

/// What `POST /api/v1/placements/simulate` decides for 2 replicas of 1 core under `placement`.
async fn simulate(http: &reqwest::Client, base: &str, placement: Value) -> Value {
    let body = json!({"namespace": "default", "spec": {
        "replicas": 2,
        "placement": placement,
        "template": {"spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                {"name": "app", "image": "nginx:1.27",
                 "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}}}}}});
    let res = http
        .post(format!("{base}/api/v1/placements/simulate"))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .expect("simulate answers");
    assert_eq!(res.status(), 200, "simulate");
    res.json().await.expect("a simulation")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn usage_from_prometheus_steers_scores_and_expires_when_prometheus_fails() {
    let answers: Shared = Arc::default();
    {
        let mut a = answers.lock().unwrap();
        // eu-1 requests little but uses 7 of its 8 cores; us-1 requests 3 cores and uses 0.1.
        a.by_query.insert(
            "cpu_q".to_owned(),
            BTreeMap::from([("eu-1".to_owned(), 7.0), ("us-1".to_owned(), 0.1)]),
        );
        a.by_query.insert(
            "mem_q".to_owned(),
            BTreeMap::from([("eu-1".to_owned(), GIB as f64)]),
        );
        a.by_query.insert(
            "traffic_q".to_owned(),
            BTreeMap::from([("eu-1".to_owned(), 42.5)]),
        );
    }
    let prometheus_url = stand_in_prometheus(answers.clone()).await;
    let (management, client) = support::management_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("api-tokens");
    std::fs::write(&tokens, format!("read {TOKEN}\n")).unwrap();
    let hub = support::start_hub(&management, dir.path(), |args| {
        args.api_tokens_file = Some(tokens);
        args.prometheus.prometheus_url = Some(prometheus_url);
        args.prometheus.prometheus_usage_cpu_query = "cpu_q".to_owned();
        args.prometheus.prometheus_usage_memory_query = "mem_q".to_owned();
        args.prometheus.prometheus_traffic_query = Some("traffic_q".to_owned());
        args.prometheus.prometheus_ttl = Duration::from_secs(2);
    });
    let base = hub.base.clone();
    let http = reqwest::Client::new();
    let node = |requested_millis| {
        capacity(
            "n",
            1,
            Resources::new(8000, 32 * GIB, 110),
            Resources::new(requested_millis, 0, 2),
        )
    };
    FakeAgent::join(&base, "eu-1", node(500)).await;
    FakeAgent::join(&base, "us-1", node(3000)).await;

    // The REST API shows what Prometheus measured, per cluster.
    let eu = wait_for("eu-1's measured usage in the REST API", DEADLINE, || async {
        let u = usage(&http, &base, "eu-1").await?;
        if u["cpuMillis"] == json!(7000) {
            Ok(u)
        } else {
            Err(format!("usage {u}"))
        }
    })
    .await;
    assert_eq!(eu["memoryBytes"], json!(GIB), "memory in bytes; seen {eu}");
    assert_eq!(eu["traffic"], json!(42.5), "the traffic query's value; seen {eu}");
    let us = usage(&http, &base, "us-1").await.unwrap();
    assert_eq!(
        (us["cpuMillis"].clone(), us["memoryBytes"].clone()),
        (json!(100), Value::Null),
        "us-1 has CPU measured, memory not; seen {us}"
    );

    // /metrics exports it, and counts the queries.
    assert_eq!(
        metric(
            &http,
            &hub.metrics,
            "nave_cluster_used",
            r#"cluster="eu-1",resource="cpu""#
        )
        .await,
        Some(7.0),
        "nave_cluster_used in cores"
    );
    assert!(
        metric(
            &http,
            &hub.metrics,
            "nave_prometheus_queries_total",
            r#"signal="cpu""#
        )
        .await
        .is_some_and(|n| n >= 1.0),
        "queries are counted"
    );
    assert_eq!(
        metric(
            &http,
            &hub.metrics,
            "nave_prometheus_query_errors_total",
            r#"signal="cpu""#
        )
        .await,
        Some(0.0),
        "no failure yet"
    );

    // The WorkloadCluster's status shows it too.
    let wcls: Api<WorkloadCluster> = Api::all(client.clone());
    wait_for(
        "eu-1's WorkloadCluster to show the measured usage",
        DEADLINE,
        || async {
            let wcl = wcls.get("eu-1").await.map_err(|e| e.to_string())?;
            let usage = wcl.status.and_then(|s| s.capacity).and_then(|c| c.usage);
            match usage.as_ref().and_then(|u| u.cpu.as_ref()) {
                Some(cpu) if cpu.0 == "7" => Ok(()),
                _ => Err(format!("usage {usage:?}")),
            }
        },
    )
    .await;

    // Worst-fit with room for one cluster: by requests eu-1 (7 free cores) would win; by usage
    // it has 1 core left, and us-1 is chosen. The explanation says why.
    let steered = simulate(&http, &base, json!({"policy": "worst-fit", "maxClusters": 1})).await;
    assert_eq!(
        steered["assignment"],
        json!({"us-1": 2}),
        "measured usage steers worst-fit away from eu-1:\n{}",
        steered["explanation"]
    );
    let explanation = steered["explanation"].as_str().unwrap_or_default();
    assert!(
        explanation.contains("eu-1: worst-fit rank 2 of 2 (by measured usage: headroom for 1 replica)"),
        "the explanation names measured usage:\n{explanation}"
    );
    // A bursting threshold of 50%: eu-1 is 87% used by measurement, 6% by requests.
    let capped = simulate(
        &http,
        &base,
        json!({"policy": "worst-fit", "bursting": {"threshold": 50}}),
    )
    .await;
    assert_eq!(
        capped["assignment"],
        json!({"us-1": 2}),
        "{}",
        capped["explanation"]
    );
    let explanation = capped["explanation"].as_str().unwrap_or_default();
    assert!(
        explanation.contains("above the bursting threshold 50%") && explanation.contains("(measured usage)"),
        "eu-1 is filtered by its measured utilization:\n{explanation}"
    );

    // Prometheus fails: the failures are counted, the values expire after the TTL, and scores
    // fall back to requests.
    answers.lock().unwrap().down = true;
    wait_for("query failures to be counted", DEADLINE, || async {
        match metric(
            &http,
            &hub.metrics,
            "nave_prometheus_query_errors_total",
            r#"signal="cpu""#,
        )
        .await
        {
            Some(n) if n >= 1.0 => Ok(()),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
    wait_for("eu-1's usage to expire", DEADLINE, || async {
        let u = usage(&http, &base, "eu-1").await?;
        if u.is_null() {
            Ok(())
        } else {
            Err(format!("usage {u}"))
        }
    })
    .await;
    assert_eq!(
        metric(
            &http,
            &hub.metrics,
            "nave_cluster_used",
            r#"cluster="eu-1",resource="cpu""#
        )
        .await,
        None,
        "no nave_cluster_used without fresh values"
    );
    let blind = simulate(&http, &base, json!({"policy": "worst-fit", "maxClusters": 1})).await;
    assert_eq!(
        blind["assignment"],
        json!({"eu-1": 2}),
        "without usage worst-fit counts requests again:\n{}",
        blind["explanation"]
    );
    assert!(
        !blind["explanation"]
            .as_str()
            .unwrap_or_default()
            .contains("measured"),
        "nothing is said to be measured:\n{}",
        blind["explanation"]
    );
    wait_for(
        "eu-1's WorkloadCluster to drop the stale usage",
        DEADLINE,
        || async {
            let wcl = wcls.get("eu-1").await.map_err(|e| e.to_string())?;
            let capacity = wcl.status.and_then(|s| s.capacity);
            match capacity.as_ref().map(|c| c.usage.is_none()) {
                Some(true) => Ok(()),
                _ => Err(format!("capacity {capacity:?}")),
            }
        },
    )
    .await;

    hub.shutdown.cancel();
    hub.task.await.unwrap().expect("the hub stops cleanly");
}
