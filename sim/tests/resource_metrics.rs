//! The resource metrics API (`metrics.k8s.io/v1beta1`, what metrics-server serves) through a
//! kube-rs client over the socket: PodMetrics and NodeMetrics follow the usage model (requests ×
//! factor, the usage annotations, node sums and overrides), list with selectors and pages, and get
//! and watch answer as metrics-server does.
//!
//! Tests wait for conditions with deadlines and report what they last saw.

#[path = "support/helpers.rs"]
mod helpers;

use std::collections::BTreeMap;
use std::time::Duration;

use helpers::{cluster, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams, WatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use nave_resources::quantity::parse_milli;
use nave_sim::SimCluster;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(15);

/// What a kube-rs client needs to address PodMetrics (`pods`) or NodeMetrics (`nodes`).
fn metrics_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", kind), plural)
}

fn pod_metrics(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &metrics_resource("PodMetrics", "pods"))
}

fn node_metrics(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &metrics_resource("NodeMetrics", "nodes"))
}

/// Thousandths of a quantity's unit (millicores, millibytes), panicking on a malformed quantity.
fn milli(q: &Value) -> i128 {
    let s = q.as_str().unwrap_or_else(|| panic!("a quantity string, saw {q}"));
    parse_milli(s).unwrap_or_else(|_| panic!("{s:?} is not a Kubernetes quantity"))
}

/// `container -> (cpu milli, memory milli)` of a PodMetrics.
fn containers(m: &DynamicObject) -> BTreeMap<String, (i128, i128)> {
    m.data["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let name = c["name"].as_str().unwrap_or_default().to_owned();
            (name, (milli(&c["usage"]["cpu"]), milli(&c["usage"]["memory"])))
        })
        .collect()
}

/// `(cpu milli, memory milli)` of a NodeMetrics.
fn node_usage(m: &DynamicObject) -> (i128, i128) {
    (milli(&m.data["usage"]["cpu"]), milli(&m.data["usage"]["memory"]))
}

fn describe(items: &[DynamicObject]) -> String {
    items
        .iter()
        .map(|m| {
            format!(
                "{} {}",
                m.name_any(),
                serde_json::to_string(&m.data).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

const MI: i128 = 1024 * 1024 * 1000;

/// Sends a JSON body to an admin route (`/_sim/v1/...`) and requires 204.
async fn admin_put(sim: &SimCluster, path: &str, body: Value) {
    let url = format!("{}/_sim/v1{path}", sim.url());
    let resp = reqwest::Client::new()
        .put(&url)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("PUT {url}: {e}"));
    assert_eq!(resp.status().as_u16(), 204, "PUT {url} {body}");
}

/// A pod labelled `tier=metrics` with one container per `(name, cpu, memory)` request.
fn pod(name: &str, containers: &[(&str, &str, &str)], annotations: Value) -> Pod {
    let containers: Vec<Value> = containers
        .iter()
        .map(|(c, cpu, memory)| {
            json!({"name": c, "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": memory}}})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"tier": "metrics"}, "annotations": annotations},
        "spec": {"containers": containers}
    }))
    .expect("a Pod")
}

/// Two replicas of `web` (one container `c` requesting 200m / 128Mi), an annotated pod with two
/// containers, and a pod too large for any node, all labelled `tier=metrics`; waits until the
/// three that fit run and the large one is unschedulable.
async fn start_workload(client: &Client) {
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web", "tier": "metrics"}},
                "spec": {"containers": [{"name": "c", "image": "nginx",
                    "resources": {"requests": {"cpu": "200m", "memory": "128Mi"}}}]}}}
    }))
    .expect("a Deployment");
    Api::<Deployment>::default_namespaced(client.clone())
        .create(&PostParams::default(), &deployment)
        .await
        .expect("deployment created");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    // Declared usage is split over the containers in proportion to their requests.
    let annotated = pod(
        "annotated",
        &[("a", "100m", "64Mi"), ("b", "300m", "192Mi")],
        json!({"sim.nave.dev/cpu-usage": "400m", "sim.nave.dev/memory-usage": "512Mi"}),
    );
    pods.create(&PostParams::default(), &annotated)
        .await
        .expect("annotated pod created");
    let huge = pod("huge", &[("c", "64", "1Gi")], json!({}));
    pods.create(&PostParams::default(), &huge)
        .await
        .expect("huge pod created");
    wait_for(DEADLINE, "3 Running pods and the huge one Pending", || async {
        let list = pods
            .list(&ListParams::default().labels("tier=metrics"))
            .await
            .map_err(|e| e.to_string())?;
        let phases: BTreeMap<String, String> = list
            .items
            .iter()
            .map(|p| {
                let phase = p
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default();
                (p.name_any(), phase)
            })
            .collect();
        let running = phases.values().filter(|p| *p == "Running").count();
        if list.items.len() == 4 && running == 3 && phases.get("huge").map(String::as_str) == Some("Pending")
        {
            Ok(())
        } else {
            Err(format!("{phases:?}"))
        }
    })
    .await;
}

#[tokio::test]
async fn pod_metrics_follow_the_usage_model_and_page_like_any_list() {
    let sim = cluster("podmetrics", true).await;
    let client = sim.client().await.expect("client");
    start_workload(&client).await;
    let metrics = pod_metrics(&client);
    let selected = ListParams::default().labels("tier=metrics");
    let items = wait_for(DEADLINE, "PodMetrics of the 3 running pods", || async {
        let list = metrics.list(&selected).await.map_err(|e| e.to_string())?;
        if list.items.len() == 3 {
            Ok(list.items)
        } else {
            Err(describe(&list.items))
        }
    })
    .await;

    // Requests × the default factor 0.5 for the Deployment's pods; the annotations' totals split
    // 1:3 for the annotated pod; the Pending pod has no metrics.
    let by_name: BTreeMap<String, &DynamicObject> = items.iter().map(|m| (m.name_any(), m)).collect();
    assert!(
        !by_name.contains_key("huge"),
        "a Pending pod has no metrics: {}",
        describe(&items)
    );
    let annotated = by_name.get("annotated").expect("annotated pod's metrics");
    assert_eq!(
        containers(annotated),
        BTreeMap::from([
            ("a".to_owned(), (100, 128 * MI)),
            ("b".to_owned(), (300, 384 * MI))
        ]),
        "annotated pod: {}",
        describe(&items)
    );
    let web: Vec<&DynamicObject> = items
        .iter()
        .filter(|m| m.name_any().starts_with("web-"))
        .collect();
    assert_eq!(web.len(), 2, "{}", describe(&items));
    for m in &web {
        assert_eq!(
            containers(m),
            BTreeMap::from([("c".to_owned(), (100, 64 * MI))]),
            "{}",
            m.name_any()
        );
        assert_eq!(m.namespace().as_deref(), Some("default"));
        assert_eq!(
            m.labels().get("app").map(String::as_str),
            Some("web"),
            "the pod's labels"
        );
        assert_eq!(m.data["window"], "15s");
        assert!(m.data["timestamp"].is_string(), "a timestamp: {:?}", m.data);
        assert_eq!(
            m.types
                .as_ref()
                .map(|t| (t.api_version.as_str(), t.kind.as_str())),
            Some(("metrics.k8s.io/v1beta1", "PodMetrics"))
        );
    }

    // One namespace, and a namespace without the pods.
    let default_ns: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &metrics_resource("PodMetrics", "pods"));
    let in_default = default_ns.list(&selected).await.expect("namespaced list");
    assert_eq!(in_default.items.len(), 3, "{}", describe(&in_default.items));
    let elsewhere: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "kube-system",
        &metrics_resource("PodMetrics", "pods"),
    );
    let none = elsewhere.list(&selected).await.expect("namespaced list");
    assert!(none.items.is_empty(), "{}", describe(&none.items));
    let by_field = metrics
        .list(&ListParams::default().fields("metadata.name=annotated"))
        .await
        .expect("field selector");
    assert_eq!(by_field.items.len(), 1, "{}", describe(&by_field.items));

    // Pages of one: every item exactly once.
    let mut paged = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..10 {
        let mut lp = selected.clone().limit(1);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = metrics.list(&lp).await.expect("page");
        assert!(page.items.len() <= 1, "a page of {}", page.items.len());
        paged.extend(page.items.iter().map(ResourceExt::name_any));
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    let mut expected: Vec<String> = by_name.keys().cloned().collect();
    expected.sort();
    assert_eq!(paged, expected, "pages of one, in order");

    // Get by name, and metrics-server's 404s.
    let got = default_ns.get("annotated").await.expect("get annotated");
    assert_eq!(containers(&got), containers(annotated));
    let err = default_ns
        .get("huge")
        .await
        .expect_err("a Pending pod has no metrics");
    let kube::Error::Api(status) = &err else {
        panic!("an API error, saw {err}")
    };
    assert_eq!(
        (status.code, status.reason.as_str(), status.message.as_str()),
        (
            404,
            "NotFound",
            "podmetrics.metrics.k8s.io \"default/huge\" not found"
        )
    );
    let err = default_ns.get("missing").await.expect_err("no such pod");
    let kube::Error::Api(status) = &err else {
        panic!("an API error, saw {err}")
    };
    assert_eq!(
        (status.code, status.message.as_str()),
        (404, "pods \"missing\" not found")
    );

    // Get and list only: a watch is refused as metrics-server refuses it.
    let err = metrics
        .watch(&WatchParams::default(), "0")
        .await
        .err()
        .expect("a watch is refused");
    let kube::Error::Api(status) = &err else {
        panic!("an API error, saw {err}")
    };
    assert_eq!(
        (status.code, status.reason.as_str(), status.message.as_str()),
        (
            405,
            "MethodNotAllowed",
            "watch is not supported on resources of kind \"pods.metrics.k8s.io\""
        )
    );

    // A new factor shows at once in the requests-based pods, not in the annotated one.
    admin_put(&sim, "/usage", json!({"factor": 1.0})).await;
    let list = metrics.list(&selected).await.expect("list after the new factor");
    for m in &list.items {
        let want = if m.name_any() == "annotated" {
            containers(annotated)
        } else {
            BTreeMap::from([("c".to_owned(), (200, 128 * MI))])
        };
        assert_eq!(containers(m), want, "{} with factor 1", m.name_any());
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn node_metrics_sum_the_pods_and_show_the_admin_override() {
    let sim = cluster("nodemetrics", true).await;
    let client = sim.client().await.expect("client");
    start_workload(&client).await;
    let node = "nodemetrics-node-0";
    let nodes = node_metrics(&client);
    let pods = pod_metrics(&client);
    // The node's usage is the sum over every running container on it: 2 × (100m, 64Mi) + (400m, 512Mi).
    let want = (600, 640 * MI);
    let seen = wait_for(DEADLINE, "the node's usage to sum its pods'", || async {
        let list = nodes
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let m = list
            .items
            .iter()
            .find(|m| m.name_any() == node)
            .ok_or(describe(&list.items))?;
        if list.items.len() == 1 && node_usage(m) == want {
            Ok(m.clone())
        } else {
            Err(describe(&list.items))
        }
    })
    .await;
    assert!(seen.namespace().is_none(), "NodeMetrics are cluster-scoped");
    assert_eq!(
        seen.labels().get("kubernetes.io/hostname").map(String::as_str),
        Some(node),
        "the node's labels"
    );
    let all_pods = pods.list(&ListParams::default()).await.expect("every PodMetrics");
    let summed = all_pods
        .items
        .iter()
        .flat_map(|m| containers(m).into_values())
        .fold((0, 0), |acc, (cpu, memory)| (acc.0 + cpu, acc.1 + memory));
    assert_eq!(
        summed,
        want,
        "PodMetrics and NodeMetrics agree: {}",
        describe(&all_pods.items)
    );
    let by_label = nodes
        .list(&ListParams::default().labels("kubernetes.io/hostname=nowhere"))
        .await
        .expect("label selector");
    assert!(by_label.items.is_empty(), "{}", describe(&by_label.items));

    admin_put(
        &sim,
        &format!("/nodes/{node}/usage"),
        json!({"cpu": "1500m", "memory": "2Gi"}),
    )
    .await;
    let got = nodes.get(node).await.expect("get the node's metrics");
    assert_eq!(
        node_usage(&got),
        (1500, 2048 * MI),
        "the override: {:?}",
        got.data
    );
    admin_put(
        &sim,
        &format!("/nodes/{node}/usage"),
        json!({"cpu": null, "memory": null}),
    )
    .await;
    let got = nodes.get(node).await.expect("get the node's metrics");
    assert_eq!(node_usage(&got), want, "the override cleared: {:?}", got.data);

    let err = nodes.get("nowhere").await.expect_err("no such node");
    let kube::Error::Api(status) = &err else {
        panic!("an API error, saw {err}")
    };
    assert_eq!(
        (status.code, status.message.as_str()),
        (404, "nodes \"nowhere\" not found")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn without_a_control_plane_the_lists_are_empty_and_writes_are_refused() {
    let sim = cluster("nometrics", false).await;
    let client = sim.client().await.expect("client");
    let list = pod_metrics(&client)
        .list(&ListParams::default())
        .await
        .expect("list");
    assert!(list.items.is_empty(), "{}", describe(&list.items));
    let list = node_metrics(&client)
        .list(&ListParams::default())
        .await
        .expect("list");
    assert!(list.items.is_empty(), "{}", describe(&list.items));
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "metrics.k8s.io/v1beta1", "kind": "NodeMetrics", "metadata": {"name": "n"}
    }))
    .expect("object");
    let err = node_metrics(&client)
        .create(&PostParams::default(), &obj)
        .await
        .expect_err("metrics are read-only");
    let kube::Error::Api(status) = &err else {
        panic!("an API error, saw {err}")
    };
    assert_eq!((status.code, status.reason.as_str()), (405, "MethodNotAllowed"));
    sim.shutdown().await;
}

#[tokio::test]
async fn a_cluster_without_metrics_server_serves_no_metrics_api_even_after_a_reset() {
    let mut config = nave_sim::ClusterConfig {
        name: "bare".to_owned(),
        ..nave_sim::ClusterConfig::default()
    };
    config.usage.metrics_api = false;
    let sim = SimCluster::start(config, nave_sim::ServeOptions::default())
        .await
        .expect("cluster starts");
    let client = sim.client().await.expect("client");
    let absent = |what: &str, result: Result<kube::core::ObjectList<DynamicObject>, kube::Error>| match result
    {
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        other => panic!("{what}: expected 404 as from a cluster without metrics-server, saw {other:?}"),
    };
    absent(
        "PodMetrics",
        pod_metrics(&client).list(&ListParams::default()).await,
    );
    absent(
        "NodeMetrics",
        node_metrics(&client).list(&ListParams::default()).await,
    );
    let groups = client.list_api_groups().await.expect("discovery");
    assert!(
        !groups.groups.iter().any(|g| g.name == "metrics.k8s.io"),
        "discovery leaves the group out: {:?}",
        groups.groups.iter().map(|g| &g.name).collect::<Vec<_>>()
    );
    // The reset hook recreates the built-in types as this cluster has them.
    sim.state().reset();
    absent(
        "PodMetrics after a reset",
        pod_metrics(&client).list(&ListParams::default()).await,
    );
    sim.shutdown().await;
}
