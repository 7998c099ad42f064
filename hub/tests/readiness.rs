//! The hub's Kubernetes probes: `/healthz` while it serves, `/readyz` only while its store
//! answers. The Helm chart points the Deployment's probes at them.

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use nave_hub::readiness::{self, HEALTHZ_PATH, READYZ_PATH};
use nave_testkit::{DEADLINE, wait_for};
use tower::ServiceExt;

async fn get(http: &reqwest::Client, url: &str) -> Result<(u16, String), String> {
    let res = http.get(url).send().await.map_err(|e| e.to_string())?;
    let status = res.status().as_u16();
    let body = res.text().await.map_err(|e| e.to_string())?;
    Ok((status, body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_hub_is_live_and_ready_on_its_listener() {
    let (management, _client) = support::management_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let hub = support::start_hub(&management, dir.path(), |_| {});
    let http = reqwest::Client::new();
    for path in [HEALTHZ_PATH, READYZ_PATH] {
        let url = format!("{}{path}", hub.base);
        let (status, body) = wait_for(&format!("{path} to answer"), DEADLINE, || get(&http, &url)).await;
        assert_eq!((status, body.as_str()), (200, "ok\n"), "{path} of a running hub");
    }
    hub.shutdown.cancel();
    hub.task.await.unwrap().expect("the hub stops cleanly");
    management.shutdown().await;
}

/// A hub asked to stop while it is still starting (its controller's first list not done) stops:
/// the controller used to wait for that list forever once its watch had stopped. Each round stops
/// a hub at another point of its start: at once, once it serves /healthz, once it is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_stopped_while_it_starts_stops() {
    let (management, _client) = support::management_cluster().await;
    let http = reqwest::Client::new();
    for round in 0..9 {
        let dir = tempfile::tempdir().unwrap();
        let hub = support::start_hub(&management, dir.path(), |_| {});
        let stop_after = [None, Some(HEALTHZ_PATH), Some(READYZ_PATH)][round % 3];
        if let Some(path) = stop_after {
            let url = format!("{}{path}", hub.base);
            wait_for(&format!("{path} to answer"), DEADLINE, || get(&http, &url)).await;
        }
        hub.shutdown.cancel();
        let stopped = tokio::time::timeout(DEADLINE, hub.task).await;
        assert!(
            stopped.is_ok(),
            "round {round}: the hub should stop within {DEADLINE:?} of being asked (asked after {stop_after:?} answered); it did not"
        );
    }
    management.shutdown().await;
}

#[tokio::test]
async fn readiness_fails_when_the_store_does_not_answer_and_liveness_does_not() {
    let (management, _client) = support::management_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("hub.db").display());
    let store = nave_hub::store::connect(&url).await.expect("the store opens");
    let probe = |path: &'static str| {
        let router = readiness::router(store.clone());
        async move {
            let res = router
                .oneshot(Request::get(path).body(Body::empty()).unwrap())
                .await
                .unwrap();
            let status = res.status();
            let body = res.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        }
    };
    assert_eq!(
        probe(READYZ_PATH).await.0,
        StatusCode::OK,
        "ready with an open store"
    );

    // The same file opened read-only (as a read-only volume or a standby would be): it reads,
    // but the hub is not ready.
    let read_only = nave_hub::store::connect(&format!("{url}?mode=ro"))
        .await
        .expect("the store opens read-only");
    read_only.list_clusters().await.expect("it reads");
    let res = readiness::router(read_only.clone())
        .oneshot(Request::get(READYZ_PATH).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        (status, String::from_utf8_lossy(&body).as_ref()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the store does not take writes\n"
        ),
        "a store that cannot write is not ready"
    );
    read_only.close().await.expect("closes");

    // A closed pool refuses every query, as an unreachable database does.
    store.close().await.expect("the store closes");
    let (status, body) = probe(READYZ_PATH).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "not ready without a store; body {body:?}"
    );
    assert!(
        !body.to_lowercase().contains("sqlite") && !body.contains("pool"),
        "the database's own error stays in the log, got {body:?}"
    );
    assert_eq!(
        probe(HEALTHZ_PATH).await.0,
        StatusCode::OK,
        "still live: a restart would not bring the database back"
    );
    management.shutdown().await;
}
