//! The hub's `/metrics` end to end: a simulated management cluster (nave-sim) with Nave's CRDs,
//! the hub with a SQLite store, and agents speaking the wire protocol over HTTP.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, DeleteParams, PostParams};
use nave_api::MultiClusterDeployment;
use nave_testkit::{DEADLINE, FakeAgent, Mcd, idle_capacity, wait_for};

/// One sample of the exposition: `name{labels} value`.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of an OpenMetrics text (label values without escapes, as Nave's are).
fn parse(text: &str) -> Vec<Sample> {
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

/// The value of the one sample named `name` whose labels include `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert!(
        matching.len() <= 1,
        "expected at most one {name}{labels:?} sample, saw {matching:?}"
    );
    matching.first().map(|s| s.value)
}

async fn scrape(http: &reqwest::Client, base: &str) -> Result<Vec<Sample>, String> {
    let res = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if res.status() != 200 {
        return Err(format!("GET /metrics answered {}", res.status()));
    }
    let content_type = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        content_type, "application/openmetrics-text; version=1.0.0; charset=utf-8",
        "the content type of /metrics"
    );
    let text = res.text().await.map_err(|e| e.to_string())?;
    assert!(
        text.ends_with("# EOF\n"),
        "the exposition ends with # EOF; got:\n{text}"
    );
    Ok(parse(&text))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_show_cluster_capacity_mcd_replicas_and_forget_deleted_mcds() {
    let (management, client) = support::management_cluster().await;
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(client.clone(), "default");
    let dir = tempfile::tempdir().unwrap();
    let support::Hub {
        base,
        metrics,
        shutdown,
        task: hub,
        ..
    } = support::start_hub(&management, dir.path(), |_| {});
    let http = reqwest::Client::new();

    // Before any agent: the endpoint answers, with no cluster series.
    let samples = wait_for("/metrics to answer", DEADLINE, || scrape(&http, &metrics)).await;
    assert_eq!(
        value(&samples, "nave_cluster_ready", &[("cluster", "eu-1")]),
        None,
        "no series for a cluster that has not registered"
    );

    // eu-1 (2 nodes of 4 CPU) and us-1 (1 node of 4 CPU) heartbeat: their capacity shows.
    FakeAgent::join(&base, "eu-1", idle_capacity("eu", 2, 4000)).await;
    FakeAgent::join(&base, "us-1", idle_capacity("us", 1, 4000)).await;
    let samples = scrape(&http, &metrics).await.unwrap();
    let eu = [("cluster", "eu-1")];
    let eu_cpu = [("cluster", "eu-1"), ("resource", "cpu")];
    assert_eq!(
        value(&samples, "nave_cluster_allocatable", &eu_cpu),
        Some(8.0),
        "eu-1's allocatable CPU in cores"
    );
    assert_eq!(
        value(
            &samples,
            "nave_cluster_allocatable",
            &[("cluster", "eu-1"), ("resource", "memory")]
        ),
        Some((32u64 << 30) as f64),
        "eu-1's allocatable memory in bytes"
    );
    assert_eq!(
        value(
            &samples,
            "nave_cluster_allocatable",
            &[("cluster", "us-1"), ("resource", "cpu")]
        ),
        Some(4.0),
        "us-1's allocatable CPU in cores"
    );
    assert_eq!(value(&samples, "nave_cluster_requested", &eu_cpu), Some(0.0));
    assert_eq!(
        value(&samples, "nave_cluster_utilization_ratio", &eu_cpu),
        Some(0.0)
    );
    assert_eq!(value(&samples, "nave_cluster_ready", &eu), Some(1.0));
    assert_eq!(value(&samples, "nave_cluster_nodes", &eu), Some(2.0));
    let age = value(&samples, "nave_cluster_heartbeat_age_seconds", &eu).expect("eu-1 has a heartbeat age");
    assert!(
        (0.0..DEADLINE.as_secs_f64()).contains(&age),
        "eu-1's heartbeat age is between 0 and the test's length, saw {age}"
    );

    // An MCD of 4 replicas spread over the two clusters: 2 + 2, and a timed decision.
    mcds.create(
        &PostParams::default(),
        &Mcd::new("web").replicas(4).cpu("500m").memory("128Mi").build(),
    )
    .await
    .unwrap();
    let web = |cluster: &'static str| [("namespace", "default"), ("name", "web"), ("cluster", cluster)];
    let samples = wait_for("web's desired replicas per cluster", DEADLINE, || async {
        let samples = scrape(&http, &metrics).await?;
        let seen = (
            value(&samples, "nave_mcd_desired_replicas", &web("eu-1")),
            value(&samples, "nave_mcd_desired_replicas", &web("us-1")),
        );
        if seen == (Some(2.0), Some(2.0)) {
            Ok(samples)
        } else {
            Err(format!(
                "expected desired (Some(2.0), Some(2.0)) in (eu-1, us-1), saw {seen:?}"
            ))
        }
    })
    .await;
    assert_eq!(
        value(&samples, "nave_mcd_ready_replicas", &web("eu-1")),
        Some(0.0),
        "no agent reported web's pods yet"
    );
    let decisions = value(&samples, "nave_scheduling_duration_seconds_count", &[])
        .expect("the scheduling histogram has a count");
    assert!(decisions >= 1.0, "at least one timed decision, saw {decisions}");
    let all = value(
        &samples,
        "nave_scheduling_duration_seconds_bucket",
        &[("le", "+Inf")],
    );
    assert_eq!(all, Some(decisions), "the +Inf bucket holds every decision");
    let placements = value(&samples, "nave_placements_total", &[]).expect("the placements counter");
    assert!(
        placements >= 1.0,
        "web's first placement is a change, saw {placements}"
    );

    // Deleting the MCD removes its series.
    mcds.delete("web", &DeleteParams::default()).await.unwrap();
    wait_for("web's series to go", DEADLINE, || async {
        let samples = scrape(&http, &metrics).await?;
        let left: Vec<String> = samples
            .iter()
            .filter(|s| s.name.starts_with("nave_mcd_"))
            .filter(|s| s.labels.get("name").map(String::as_str) == Some("web"))
            .map(|s| format!("{}{:?}", s.name, s.labels))
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("expected no web series, saw {left:?}"))
        }
    })
    .await;
    // The clusters' series stay.
    let samples = scrape(&http, &metrics).await.unwrap();
    assert_eq!(value(&samples, "nave_cluster_ready", &eu), Some(1.0));

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), hub)
        .await
        .expect("the hub stops within 10s")
        .expect("hub task")
        .expect("the hub ends cleanly");
}
