//! The REST API end to end: a simulated management cluster (nave-sim) with Nave's CRDs, the hub
//! serving on a socket with a SQLite store and a tokens file, agents speaking the wire protocol
//! over HTTP. Every endpoint is exercised, and every JSON body the API returns is checked against
//! the OpenAPI document it serves.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nave_api::wire::{CapacityModel, Heartbeat, LatencySample, RegisterRequest, Resources, WorkSet};
use nave_api::{MultiClusterDeployment, WorkloadCluster};
use nave_testkit::{DEADLINE, FakeAgent, Mcd, capacity, wait_for};
use serde_json::{Value, json};

const READ_TOKEN: &str = "read-token-0123456789";
const ADMIN_TOKEN: &str = "admin-token-9876543210";
/// A read token from the tokens Secret rather than the file.
const SECRET_TOKEN: &str = "secret-read-token-5555";
const GI: u64 = 1 << 30;

/// Replicas of the Deployment `name` in a work set (0 when absent).
fn deployment_replicas(work: &WorkSet, name: &str) -> i64 {
    work.objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name)
        .and_then(|o| o["spec"]["replicas"].as_i64())
        .unwrap_or(0)
}

/// Registers `cluster` as an agent of Kubernetes v1.32.0 in `{cluster}-region`.
async fn register(base: &str, cluster: &str) -> FakeAgent {
    FakeAgent::register_with(
        base,
        RegisterRequest {
            cluster_name: cluster.to_owned(),
            agent_version: "0.1.0".to_owned(),
            kubernetes_version: Some("v1.32.0".to_owned()),
            region: Some(format!("{cluster}-region")),
            ..RegisterRequest::default()
        },
    )
    .await
}

/// Sends a heartbeat of Kubernetes v1.32.0 with `capacity` and `latency_samples`.
async fn heartbeat(agent: &FakeAgent, capacity: CapacityModel, latency_samples: Vec<LatencySample>) {
    let beat = Heartbeat {
        kubernetes_version: Some("v1.32.0".to_owned()),
        capacity,
        latency_samples,
        ..agent.beat()
    };
    agent.send_heartbeat(&beat).await;
}

/// `name`: `replicas` of 500m and 128Mi under `policy`.
fn mcd(name: &str, replicas: i64, policy: &str) -> Mcd {
    Mcd::new(name)
        .replicas(replicas)
        .policy(policy)
        .cpu("500m")
        .memory("128Mi")
}

/// One answer of the REST API, kept to check against the OpenAPI document at the end.
#[derive(Debug, Clone)]
struct Answer {
    /// `GET`, `POST`, ...
    method: String,
    /// The documented path template, `None` for paths outside the API.
    template: Option<String>,
    /// The concrete path and query.
    path: String,
    status: u16,
    body: Value,
}

/// A client of the REST API that records every answer.
struct Rest {
    http: reqwest::Client,
    base: String,
    answers: Mutex<Vec<Answer>>,
}

enum Body {
    None,
    Json(Value),
    Raw(&'static str, String),
}

impl Rest {
    /// Calls `method path` (path relative to the hub) with `token`, expecting `status` and a
    /// JSON body; `template` is the documented path the call exercises.
    async fn call(
        &self,
        method: &str,
        template: Option<&str>,
        path: &str,
        token: Option<&str>,
        body: Body,
        status: u16,
    ) -> Value {
        let method_value = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.http.request(method_value, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request = match body {
            Body::None => request,
            Body::Json(value) => request.json(&value),
            Body::Raw(content_type, text) => request.header("content-type", content_type).body(text),
        };
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let seen = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let text = response.text().await.unwrap();
        let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!("{method} {path} answered {seen} with a body that is not JSON ({e}): {text:?}")
        });
        assert_eq!(
            seen, status,
            "{method} {path}: expected {status}, got {seen} with {body}"
        );
        assert!(
            content_type.starts_with("application/json"),
            "{method} {path}: expected a JSON content type, got {content_type:?}"
        );
        if seen >= 400 {
            assert!(
                body["error"].is_string() && body["message"].is_string(),
                "{method} {path}: an error body has `error` and `message`, got {body}"
            );
        }
        self.answers.lock().unwrap().push(Answer {
            method: method.to_owned(),
            template: template.map(str::to_owned),
            path: path.to_owned(),
            status: seen,
            body: body.clone(),
        });
        body
    }

    async fn get(&self, template: &str, path: &str, status: u16) -> Value {
        self.call("GET", Some(template), path, Some(READ_TOKEN), Body::None, status)
            .await
    }

    async fn simulate(&self, body: Value, status: u16) -> Value {
        self.call(
            "POST",
            Some("/api/v1/placements/simulate"),
            "/api/v1/placements/simulate",
            Some(READ_TOKEN),
            Body::Json(body),
            status,
        )
        .await
    }
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("a list with items, got {list}"))
        .iter()
        .map(|i| match i["namespace"].as_str() {
            Some(ns) => format!("{ns}/{}", i["name"].as_str().unwrap_or_default()),
            None => i["name"].as_str().unwrap_or_default().to_owned(),
        })
        .collect()
}

fn sum(assignment: &Value) -> u64 {
    assignment
        .as_object()
        .unwrap_or_else(|| panic!("an assignment object, got {assignment}"))
        .values()
        .map(|v| v.as_u64().expect("replicas are counts"))
        .sum()
}

fn item<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["name"] == name))
        .unwrap_or_else(|| panic!("{name} in {list}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rest_api_serves_clusters_placements_history_and_simulations_as_documented() {
    let (management, client) = support::management_cluster().await;
    let default_mcds: Api<MultiClusterDeployment> = Api::namespaced(client.clone(), "default");
    let team: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &team)
        .await
        .expect("create namespace team-a");
    // A cluster an admin declared, cordoned, whose agent never joined.
    let declared: WorkloadCluster = serde_json::from_value(json!({
        "apiVersion": "nave.dev/v1alpha1", "kind": "WorkloadCluster",
        "metadata": {"name": "ap-1"},
        "spec": {"region": "ap-south", "unschedulable": true,
                 "taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule",
                             "timeAdded": "2026-01-01T00:00:00Z"}]}
    }))
    .unwrap();
    Api::<WorkloadCluster>::all(client.clone())
        .create(&PostParams::default(), &declared)
        .await
        .expect("declare ap-1");

    let tokens_secret = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("nave-api-tokens".to_owned()),
            namespace: Some("default".to_owned()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "dashboards".to_owned(),
            k8s_openapi::ByteString(format!("read:{SECRET_TOKEN}").into_bytes()),
        )])),
        ..Default::default()
    };
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &tokens_secret)
        .await
        .expect("create the tokens Secret");

    let dir = tempfile::tempdir().unwrap();
    let api_tokens = dir.path().join("api-tokens");
    std::fs::write(
        &api_tokens,
        format!("# scope token\nread {READ_TOKEN}  # dashboards\n\nadmin {ADMIN_TOKEN}\n"),
    )
    .unwrap();
    let support::Hub {
        base,
        shutdown,
        task: hub,
        ..
    } = support::start_hub(&management, dir.path(), |args| {
        args.api_tokens_file = Some(api_tokens);
        args.api_tokens_secret = Some("default/nave-api-tokens".to_owned());
    });
    let http = reqwest::Client::new();
    let rest = Rest {
        http: http.clone(),
        base: base.clone(),
        answers: Mutex::default(),
    };

    // eu-1: 2 nodes of 4 CPU / 8 GiB / 110 pods with a quarter of CPU and memory requested.
    // us-1: 4 nodes of 2 CPU / 4 GiB / 110 pods, idle.
    let eu = register(&base, "eu-1").await;
    let us = register(&base, "us-1").await;
    let eu_capacity = capacity(
        "eu",
        2,
        Resources::new(4000, 8 * GI, 110),
        Resources::new(1000, 2 * GI, 10),
    );
    heartbeat(
        &eu,
        eu_capacity,
        vec![
            LatencySample {
                peer: LatencySample::HUB.to_owned(),
                rtt_millis: 12.5,
            },
            LatencySample {
                peer: "us-1".to_owned(),
                rtt_millis: 80.0,
            },
        ],
    )
    .await;
    heartbeat(
        &us,
        capacity("us", 4, Resources::new(2000, 4 * GI, 110), Resources::default()),
        Vec::new(),
    )
    .await;

    // Three workloads in two namespaces.
    let team_mcds: Api<MultiClusterDeployment> = Api::namespaced(client.clone(), "team-a");
    for (api, object) in [
        (&default_mcds, mcd("web", 4, "spread").build()),
        (&default_mcds, mcd("api", 2, "worst-fit").build()),
        (
            &team_mcds,
            mcd("batch", 1, "best-fit").namespace("team-a").build(),
        ),
    ] {
        api.create(&PostParams::default(), &object).await.unwrap();
    }
    wait_for("three placements, every replica placed", DEADLINE, || async {
        let res = http
            .get(format!("{base}/api/v1/placements"))
            .bearer_auth(READ_TOKEN)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let list: Value = res.json().await.map_err(|e| e.to_string())?;
        let placed = list["items"].as_array().is_some_and(|items| {
            items.len() == 3
                && items
                    .iter()
                    .all(|i| i["unplaced"] == 0 && sum(&i["assignment"]) > 0)
        });
        if placed { Ok(()) } else { Err(list.to_string()) }
    })
    .await;
    let all = rest.get("/api/v1/placements", "/api/v1/placements", 200).await;
    assert_eq!(
        names(&all),
        ["default/api", "default/web", "team-a/batch"],
        "placements by namespace and name: {all}"
    );
    let web = item(&all, "web");
    assert_eq!(
        web["assignment"],
        json!({"eu-1": 2, "us-1": 2}),
        "spread divides 4 evenly over the two ready clusters: {web}"
    );
    assert_eq!(
        (web["policy"].as_str(), web["replicas"].as_u64()),
        (Some("spread"), Some(4))
    );
    for (name, replicas) in [("api", 2), ("batch", 1)] {
        assert_eq!(sum(&item(&all, name)["assignment"]), replicas, "{name}: {all}");
    }

    // Clusters: capacity and utilization as the heartbeats said, what is placed on each.
    let clusters = rest.get("/api/v1/clusters", "/api/v1/clusters", 200).await;
    assert_eq!(names(&clusters), ["ap-1", "eu-1", "us-1"], "{clusters}");
    let eu_view = item(&clusters, "eu-1");
    assert_eq!(
        eu_view["capacity"],
        json!({
            "allocatable": {"cpuMillis": 8000, "memoryBytes": 16 * GI, "pods": 220},
            "requested": {"cpuMillis": 2000, "memoryBytes": 4 * GI, "pods": 20},
            "free": {"cpuMillis": 6000, "memoryBytes": 12 * GI, "pods": 200},
            "nodes": 2,
            "schedulableNodes": 2,
        }),
        "eu-1 capacity"
    );
    assert_eq!(
        eu_view["utilization"],
        json!({"cpuPercent": 25.0, "memoryPercent": 25.0}),
        "eu-1 utilization"
    );
    assert_eq!(eu_view["latency"]["hubMillis"], json!(12.5), "{eu_view}");
    assert_eq!(eu_view["latency"]["peers"], json!({"us-1": 80.0}), "{eu_view}");
    assert_eq!(
        (&eu_view["ready"], &eu_view["joined"], &eu_view["cordoned"]),
        (&json!(true), &json!(true), &json!(false)),
        "{eu_view}"
    );
    assert_eq!(eu_view["agentVersion"], "0.1.0");
    assert_eq!(eu_view["kubernetesVersion"], "v1.32.0");
    assert_eq!(eu_view["region"], "eu-1-region");
    assert!(
        eu_view["lastHeartbeatAgeSeconds"].is_u64() && eu_view["lastHeartbeatTime"].is_string(),
        "{eu_view}"
    );
    let us_view = item(&clusters, "us-1");
    assert_eq!(
        us_view["utilization"],
        json!({"cpuPercent": 0.0, "memoryPercent": 0.0}),
        "{us_view}"
    );
    assert_eq!(
        us_view["latency"],
        Value::Null,
        "no samples, no latency: {us_view}"
    );
    let ap_view = item(&clusters, "ap-1");
    assert_eq!(
        ap_view["taints"][0]["taint"], "dedicated=batch:NoSchedule",
        "{ap_view}"
    );
    assert!(
        ap_view["taints"][0]["ageSeconds"]
            .as_u64()
            .is_some_and(|s| s > 86_400),
        "aged from its timeAdded: {ap_view}"
    );
    assert_eq!(eu_view["taints"], json!([]), "{eu_view}");
    assert_eq!(
        (
            &ap_view["joined"],
            &ap_view["ready"],
            &ap_view["cordoned"],
            &ap_view["capacity"],
            &ap_view["region"]
        ),
        (
            &json!(false),
            &json!(false),
            &json!(true),
            &Value::Null,
            &json!("ap-south")
        ),
        "a declared cluster without agent: {ap_view}"
    );
    for cluster in ["ap-1", "eu-1", "us-1"] {
        let on_it: Vec<u64> = all["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["assignment"][cluster].as_u64())
            .collect();
        assert_eq!(
            item(&clusters, cluster)["assigned"],
            json!({"placements": on_it.len(), "replicas": on_it.iter().sum::<u64>()}),
            "{cluster}'s assigned counts against the placements {all}"
        );
    }
    let one = rest
        .get("/api/v1/clusters/{name}", "/api/v1/clusters/eu-1", 200)
        .await;
    assert_eq!(
        (&one["capacity"], &one["assigned"]),
        (&eu_view["capacity"], &eu_view["assigned"]),
        "GET one cluster agrees with the list"
    );
    rest.get("/api/v1/clusters/{name}", "/api/v1/clusters/nowhere", 404)
        .await;

    // Filters and pages.
    let page = |q: &'static str| format!("/api/v1/placements?{q}");
    let list = rest
        .get("/api/v1/placements", &page("namespace=team-a"), 200)
        .await;
    assert_eq!(names(&list), ["team-a/batch"], "namespace filter");
    let list = rest.get("/api/v1/placements", &page("policy=spread"), 200).await;
    assert_eq!(names(&list), ["default/web"], "policy filter");
    let on_us: Vec<String> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["assignment"]["us-1"].as_u64().is_some_and(|n| n > 0))
        .map(|p| {
            format!(
                "{}/{}",
                p["namespace"].as_str().unwrap(),
                p["name"].as_str().unwrap()
            )
        })
        .collect();
    let list = rest.get("/api/v1/placements", &page("cluster=us-1"), 200).await;
    assert_eq!(names(&list), on_us, "cluster filter");
    let list = rest.get("/api/v1/placements", &page("cluster=ap-1"), 200).await;
    assert_eq!(
        names(&list),
        Vec::<String>::new(),
        "nothing on the cordoned cluster"
    );
    let mut seen = Vec::new();
    let mut next: Option<String> = None;
    for round in 0.. {
        assert!(round < 5, "paging by 1 should end after 3 pages, saw {seen:?}");
        let path = match &next {
            Some(token) => format!("/api/v1/placements?limit=1&continue={token}"),
            None => "/api/v1/placements?limit=1".to_owned(),
        };
        let list = rest.get("/api/v1/placements", &path, 200).await;
        assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "{list}");
        seen.extend(names(&list));
        match list["continue"].as_str() {
            Some(token) => next = Some(token.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, names(&all), "pages of one, in order, without repeats");
    let list = rest
        .get("/api/v1/placements", &page("namespace=default&limit=2"), 200)
        .await;
    assert_eq!(
        (names(&list), &list["continue"]),
        (
            vec!["default/api".to_owned(), "default/web".to_owned()],
            &Value::Null
        ),
        "a full last page has no continue token"
    );

    // One placement with its explanation.
    let detail = rest
        .get(
            "/api/v1/placements/{namespace}/{name}",
            "/api/v1/placements/default/web",
            200,
        )
        .await;
    assert_eq!(detail["assignment"], web["assignment"], "{detail}");
    let explanation = detail["explanation"].as_str().expect("an explanation");
    let explained: BTreeMap<&str, &Value> = detail["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c))
        .collect();
    assert_eq!(
        explained.keys().copied().collect::<Vec<_>>(),
        ["ap-1", "eu-1", "us-1"],
        "every cluster considered is explained: {detail}"
    );
    for (name, cluster) in &explained {
        let text = cluster["explanation"].as_str().unwrap();
        assert!(
            !text.is_empty() && explanation.contains(text),
            "{name}'s explanation {text:?} should be a line of the whole explanation {explanation:?}"
        );
    }
    assert_eq!(explained["ap-1"]["replicas"], 0);
    rest.get(
        "/api/v1/placements/{namespace}/{name}",
        "/api/v1/placements/default/nothing",
        404,
    )
    .await;

    // Scaling web to 6 adds a second history entry, newest first.
    default_mcds
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 6}})),
        )
        .await
        .unwrap();
    wait_for("web's work to hold 6 replicas", DEADLINE, || async {
        let (e, u) = (eu.work().await, us.work().await);
        let total = deployment_replicas(&e, "web") + deployment_replicas(&u, "web");
        if total == 6 {
            Ok(())
        } else {
            Err(format!("{total} replicas"))
        }
    })
    .await;
    // Capacity moving as the replicas start re-words the explanation but is not a new decision:
    // the history's newest entry is the scale-up, and it stays so.
    wait_for("web's history to show generation 2", DEADLINE, || async {
        let second = http
            .get(format!("{base}/api/v1/placements/default/web/history"))
            .bearer_auth(READ_TOKEN)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json::<Value>()
            .await
            .map_err(|e| e.to_string())?;
        if second["items"][0]["generation"] == 2 {
            Ok(())
        } else {
            Err(format!("{second}"))
        }
    })
    .await;
    let history_path = "/api/v1/placements/{namespace}/{name}/history";
    let history = rest
        .get(history_path, "/api/v1/placements/default/web/history", 200)
        .await;
    let entries = history["items"].as_array().expect("history items");
    assert!(
        entries.len() >= 2,
        "at least the first decision and the scale-up: {history}"
    );
    assert_eq!(sum(&entries[0]["assignment"]), 6, "newest first: {history}");
    assert_eq!(
        sum(&entries.last().unwrap()["assignment"]),
        4,
        "oldest last: {history}"
    );
    assert!(
        entries
            .iter()
            .any(|e| e["trigger"] == "spec" && e["generation"] == 2 && sum(&e["assignment"]) == 6),
        "the scale-up is an entry triggered by the spec, for generation 2: {history}"
    );
    let times: Vec<&str> = entries.iter().map(|e| e["at"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "newest first: {times:?}");
    assert!(
        entries
            .iter()
            .all(|e| e["reason"].as_str().is_some_and(|r| !r.is_empty())),
        "every entry says why: {history}"
    );
    let first = rest
        .get(
            history_path,
            "/api/v1/placements/default/web/history?limit=1",
            200,
        )
        .await;
    let token = first["continue"]
        .as_str()
        .expect("a continue token after 1 of 2+");
    let second = rest
        .get(
            history_path,
            &format!("/api/v1/placements/default/web/history?limit=1&continue={token}"),
            200,
        )
        .await;
    assert_eq!(
        (&first["items"][0], &second["items"][0]),
        (&entries[0], &entries[1]),
        "pages of history follow the full listing"
    );
    rest.get(history_path, "/api/v1/placements/default/never/history", 404)
        .await;

    // Simulations: a new workload, one that does not fit, and a change of web.
    let new = rest
        .simulate(json!({"spec": mcd("new", 4, "spread").spec()}), 200)
        .await;
    assert_eq!(
        (sum(&new["assignment"]), &new["unplaced"], &new["current"]),
        (4, &json!(0), &Value::Null),
        "{new}"
    );
    let ap = new["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "ap-1")
        .expect("ap-1 considered");
    assert!(ap["filteredOut"].is_string(), "ap-1 is filtered out: {ap}");
    let huge = rest
        .simulate(json!({"spec": mcd("huge", 1000, "worst-fit").spec()}), 200)
        .await;
    let unplaced = huge["unplaced"].as_u64().unwrap();
    assert!(
        unplaced > 0 && sum(&huge["assignment"]) + unplaced == 1000,
        "1000 replicas of 500m do not fit in 14 free CPUs: {huge}"
    );
    // Before: every cluster's work revision, each placement and its history.
    let revisions = (eu.work().await.revision, us.work().await.revision);
    let before = rest.get("/api/v1/placements", "/api/v1/placements", 200).await;
    let web_now = item(&before, "web")["assignment"].clone();
    let steady = rest
        .simulate(
            json!({"namespace": "default", "name": "web", "spec": mcd("web", 6, "spread").spec()}),
            200,
        )
        .await;
    assert_eq!(
        (&steady["assignment"], &steady["current"]),
        (&web_now, &web_now),
        "simulating web's own spec is steady from its current assignment"
    );
    let ghost = rest
        .simulate(
            json!({"namespace": "team-a", "name": "ghost", "spec": mcd("ghost", 3, "best-fit").spec()}),
            200,
        )
        .await;
    assert_eq!(sum(&ghost["assignment"]), 3, "{ghost}");
    // After: nothing was written.
    assert_eq!(
        (eu.work().await.revision, us.work().await.revision),
        revisions,
        "work revisions are unchanged by simulations"
    );
    let after = rest.get("/api/v1/placements", "/api/v1/placements", 200).await;
    for name in ["api", "web", "batch"] {
        assert_eq!(
            item(&after, name)["assignment"],
            item(&before, name)["assignment"],
            "{name}'s placement is unchanged by simulations"
        );
    }
    assert_eq!(names(&after), names(&before), "no placement was added");
    let history_after = rest
        .get(history_path, "/api/v1/placements/default/web/history", 200)
        .await;
    assert_eq!(history_after["items"], history["items"], "no history was added");
    rest.get(history_path, "/api/v1/placements/team-a/ghost/history", 404)
        .await;

    // Rejected simulations name the field.
    let path_of = |body: &Value| body["message"].as_str().unwrap_or_default().to_owned();
    let mut negative = mcd("bad", 2, "spread").spec();
    negative["replicas"] = json!(-1);
    let body = rest.simulate(json!({"spec": negative}), 422).await;
    assert!(path_of(&body).contains("spec.replicas"), "{body}");
    let mut wrong_type = mcd("bad", 2, "spread").spec();
    wrong_type["template"]["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!(7);
    let body = rest.simulate(json!({"spec": wrong_type}), 422).await;
    assert!(
        path_of(&body).contains("spec.template.spec.template.spec.containers[0].imagePullPolicy"),
        "{body}"
    );
    let mut bad_policy = mcd("bad", 2, "spread").spec();
    bad_policy["placement"]["policy"] = json!("fastest");
    let body = rest.simulate(json!({"spec": bad_policy}), 422).await;
    assert!(path_of(&body).contains("spec.placement.policy"), "{body}");
    let body = rest.simulate(json!({"namespace": "default"}), 422).await;
    assert!(path_of(&body).contains("spec"), "a missing spec is named: {body}");
    let body = rest
        .simulate(json!({"spec": mcd("x", 1, "spread").spec(), "replicas": 3}), 422)
        .await;
    assert!(
        path_of(&body).contains("replicas"),
        "an unknown field is named: {body}"
    );
    let body = rest
        .simulate(
            json!({"name": "Not_A_Name", "spec": mcd("x", 1, "spread").spec()}),
            422,
        )
        .await;
    assert!(path_of(&body).contains("name"), "{body}");
    let simulate_path = Some("/api/v1/placements/simulate");
    rest.call(
        "POST",
        simulate_path,
        "/api/v1/placements/simulate",
        Some(READ_TOKEN),
        Body::Raw("application/json", "{\"spec\": ".to_owned()),
        400,
    )
    .await;
    rest.call(
        "POST",
        simulate_path,
        "/api/v1/placements/simulate",
        Some(READ_TOKEN),
        Body::Raw("text/plain", mcd("x", 1, "spread").spec().to_string()),
        415,
    )
    .await;

    // Bad queries, unknown paths, wrong methods: JSON errors.
    for query in [
        "limit=abc",
        "limit=0",
        "limit=501",
        "limit=2147483648",
        "limit=-1",
        "continue=not-a-token",
        "policy=fastest",
        "namepsace=default",
    ] {
        rest.get("/api/v1/placements", &format!("/api/v1/placements?{query}"), 400)
            .await;
    }
    for query in ["limit=abc", "continue=%%%", "since=yesterday"] {
        rest.get(
            history_path,
            &format!("/api/v1/placements/default/web/history?{query}"),
            400,
        )
        .await;
    }
    for path in [
        "/api/v1",
        "/api/v1/",
        "/api/v1/nodes",
        "/api/v1/clusters/eu-1/nodes",
    ] {
        rest.call("GET", None, path, Some(READ_TOKEN), Body::None, 404)
            .await;
    }

    // Authentication: no token, a wrong one, the admin token (admin includes read).
    for token in [None, Some("wrong"), Some(&READ_TOKEN[..5])] {
        rest.call(
            "GET",
            Some("/api/v1/clusters"),
            "/api/v1/clusters",
            token,
            Body::None,
            401,
        )
        .await;
    }
    rest.call("GET", None, "/api/v1/nodes", None, Body::None, 401)
        .await;
    for token in [ADMIN_TOKEN, SECRET_TOKEN] {
        rest.call(
            "GET",
            Some("/api/v1/clusters"),
            "/api/v1/clusters",
            Some(token),
            Body::None,
            200,
        )
        .await;
    }

    // The admin endpoints, with an admin token only: a join token, the cluster it registers,
    // its credentials revoked, its acceptance withdrawn, then its removal.
    let join_tokens = "/api/v1/join-tokens";
    let spare = json!({"cluster": "spare"});
    rest.call(
        "POST",
        Some(join_tokens),
        join_tokens,
        Some(READ_TOKEN),
        Body::Json(spare.clone()),
        403,
    )
    .await;
    rest.call(
        "POST",
        Some(join_tokens),
        join_tokens,
        Some(ADMIN_TOKEN),
        Body::Json(json!({"cluster": "Not A Name"})),
        422,
    )
    .await;
    let issued = rest
        .call(
            "POST",
            Some(join_tokens),
            join_tokens,
            Some(ADMIN_TOKEN),
            Body::Json(spare),
            201,
        )
        .await;
    let listed = rest
        .call(
            "GET",
            Some(join_tokens),
            join_tokens,
            Some(ADMIN_TOKEN),
            Body::None,
            200,
        )
        .await;
    assert_eq!(listed["items"][0]["state"], "usable", "{listed}");
    let token = issued["token"].as_str().expect("the token is shown once");
    let request = RegisterRequest {
        cluster_name: "spare".to_owned(),
        agent_version: "0.1.0".to_owned(),
        ..RegisterRequest::default()
    };
    let spare = FakeAgent::try_register(&base, request, token)
        .await
        .expect("spare joins with its join token");
    let credentials = "/api/v1/clusters/{name}/credentials";
    let listed = rest
        .call(
            "GET",
            Some(credentials),
            "/api/v1/clusters/spare/credentials",
            Some(ADMIN_TOKEN),
            Body::None,
            200,
        )
        .await;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1), "{listed}");
    rest.call(
        "GET",
        Some(credentials),
        "/api/v1/clusters/spare/credentials",
        Some(READ_TOKEN),
        Body::None,
        403,
    )
    .await;
    let revoked = rest
        .call(
            "POST",
            Some("/api/v1/clusters/{name}/credentials/revoke"),
            "/api/v1/clusters/spare/credentials/revoke",
            Some(ADMIN_TOKEN),
            Body::None,
            200,
        )
        .await;
    assert_eq!(revoked, json!({"revoked": 1}));
    assert_eq!(spare.work_status().await, 401, "a revoked credential is refused");
    let cluster = "/api/v1/clusters/{name}";
    rest.call(
        "DELETE",
        Some(cluster),
        "/api/v1/clusters/spare",
        Some(ADMIN_TOKEN),
        Body::None,
        409,
    )
    .await;
    // A prune confirmation: only for a cluster with work, up to a revision it has reached.
    let confirmation = "/api/v1/clusters/{name}/prune-confirmation";
    rest.call(
        "POST",
        Some(confirmation),
        "/api/v1/clusters/spare/prune-confirmation",
        Some(ADMIN_TOKEN),
        Body::None,
        409,
    )
    .await;
    rest.call(
        "POST",
        Some(confirmation),
        "/api/v1/clusters/eu-1/prune-confirmation",
        Some(READ_TOKEN),
        Body::None,
        403,
    )
    .await;
    let eu_revision = eu.work().await.revision;
    let confirmed = rest
        .call(
            "POST",
            Some(confirmation),
            "/api/v1/clusters/eu-1/prune-confirmation",
            Some(ADMIN_TOKEN),
            Body::Json(json!({"revision": eu_revision})),
            200,
        )
        .await;
    assert_eq!(confirmed, json!({"revision": eu_revision}));
    let acceptance = "/api/v1/clusters/{name}/acceptance";
    let withdrawn = json!({"accepted": false});
    rest.call(
        "PUT",
        Some(acceptance),
        "/api/v1/clusters/nowhere/acceptance",
        Some(ADMIN_TOKEN),
        Body::Json(withdrawn.clone()),
        404,
    )
    .await;
    let now = rest
        .call(
            "PUT",
            Some(acceptance),
            "/api/v1/clusters/spare/acceptance",
            Some(ADMIN_TOKEN),
            Body::Json(withdrawn.clone()),
            200,
        )
        .await;
    assert_eq!(now, withdrawn);
    rest.call(
        "DELETE",
        Some(cluster),
        "/api/v1/clusters/spare",
        Some(ADMIN_TOKEN),
        Body::None,
        200,
    )
    .await;
    // Its WorkloadCluster stays (an admin's object): declared, neither joined nor accepted.
    let gone = rest
        .call(
            "GET",
            Some(cluster),
            "/api/v1/clusters/spare",
            Some(READ_TOKEN),
            Body::None,
            200,
        )
        .await;
    assert_eq!(
        (&gone["joined"], &gone["accepted"]),
        (&json!(false), &json!(false)),
        "{gone}"
    );

    // The document: exactly the expected operations, each exercised, other methods 405.
    let document = rest
        .get("/api/v1/openapi.json", "/api/v1/openapi.json", 200)
        .await;
    assert!(
        document["openapi"].as_str().is_some_and(|v| v.starts_with("3.")),
        "an OpenAPI 3.x document: {}",
        document["openapi"]
    );
    let documented: BTreeSet<(String, String)> = document["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|k| ["get", "post", "put", "patch", "delete"].contains(&k.as_str()))
                .map(|m| (m.to_uppercase(), path.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    let expected: BTreeSet<(String, String)> = [
        ("GET", "/api/v1/clusters"),
        ("GET", "/api/v1/clusters/{name}"),
        ("GET", "/api/v1/openapi.json"),
        ("GET", "/api/v1/placements"),
        ("GET", "/api/v1/placements/{namespace}/{name}"),
        ("GET", "/api/v1/placements/{namespace}/{name}/history"),
        ("POST", "/api/v1/placements/simulate"),
        ("POST", "/api/v1/join-tokens"),
        ("GET", "/api/v1/join-tokens"),
        ("PUT", "/api/v1/clusters/{name}/acceptance"),
        ("GET", "/api/v1/clusters/{name}/credentials"),
        ("POST", "/api/v1/clusters/{name}/credentials/revoke"),
        ("POST", "/api/v1/clusters/{name}/prune-confirmation"),
        ("DELETE", "/api/v1/clusters/{name}"),
    ]
    .into_iter()
    .map(|(m, p)| (m.to_owned(), p.to_owned()))
    .collect();
    assert_eq!(documented, expected, "documented operations");
    let answers = rest.answers.lock().unwrap().clone();
    for (method, path) in &documented {
        assert!(
            answers.iter().any(|a| a.method == *method
                && a.template.as_deref() == Some(path)
                && (200..300).contains(&a.status)),
            "{method} {path} is documented but was not exercised successfully"
        );
        let concrete = path.replace("{name}", "web").replace("{namespace}", "default");
        for other in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            if other != method && !documented.contains(&(other.to_owned(), path.clone())) {
                rest.call(other, Some(path), &concrete, Some(READ_TOKEN), Body::None, 405)
                    .await;
            }
        }
    }
    // Every body seen validates against the documented schema of its operation and status;
    // errors outside any operation against the error schema.
    let answers = rest.answers.lock().unwrap().clone();
    let error_schema = json!({"$ref": "#/components/schemas/ErrorBody"});
    let mut validated = 0;
    for answer in &answers {
        let documented_schema = answer.template.as_ref().and_then(|t| {
            document["paths"][t][answer.method.to_lowercase()]["responses"][answer.status.to_string()]
                ["content"]["application/json"]["schema"]
                .as_object()
                .map(|s| Value::Object(s.clone()))
        });
        let schema = match documented_schema {
            Some(schema) => schema,
            None if answer.status >= 400 => error_schema.clone(),
            None => panic!(
                "{} {} answered {}, a status its operation does not document",
                answer.method, answer.path, answer.status
            ),
        };
        if let Err(problem) = check(&document, &schema, &answer.body, "$", true) {
            panic!(
                "{} {} ({}): the body does not match the documented schema: {problem}\nbody: {}",
                answer.method, answer.path, answer.status, answer.body
            );
        }
        validated += 1;
    }
    assert!(
        validated > 50,
        "expected many answers to check, checked {validated}"
    );
    // The checker itself rejects what drifts: a wrong type, an undocumented or a missing field.
    let list_schema = json!({"$ref": "#/components/schemas/ClusterList"});
    let mut drifted = clusters.clone();
    drifted["items"][0]["name"] = json!(5);
    let mut extra = clusters.clone();
    extra["items"][0]["uptime"] = json!(1);
    let mut missing = clusters.clone();
    missing["items"][0].as_object_mut().unwrap().remove("ready");
    for (what, body) in [
        ("a wrong type", drifted),
        ("an extra field", extra),
        ("a missing field", missing),
    ] {
        assert!(
            check(&document, &list_schema, &body, "$", true).is_err(),
            "the schema check should reject {what}"
        );
    }

    // Without any token configured, the API refuses and says how to configure one.
    let store = nave_hub::store::connect(&format!("sqlite://{}", dir.path().join("other.db").display()))
        .await
        .unwrap();
    let (objects, _writer) = kube::runtime::reflector::store();
    let sources = nave_hub::fleet::Sources {
        objects,
        objects_ready: nave_hub::watch::Ready::now(),
        index: Arc::new(nave_hub::index::Index::empty(store.clone())),
        health: Arc::default(),
        usage: Arc::default(),
        grace: Duration::from_secs(40),
        objects_version: Arc::default(),
        cache: Default::default(),
        unplaced: Arc::default(),
        followers: Arc::default(),
    };
    let closed = nave_hub::rest::router(
        sources,
        store,
        nave_hub::rest::ApiTokens::default(),
        Default::default(),
    );
    let response = tower::ServiceExt::oneshot(
        closed,
        axum::http::Request::get("/api/v1/clusters")
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
            .body(axum::body::Body::empty())
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 401, "no tokens configured");
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("--api-tokens-file")),
        "the refusal says how to configure tokens: {body}"
    );

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(20), hub)
        .await
        .expect("the hub should stop on shutdown")
        .unwrap()
        .expect("the hub should stop cleanly");
    management.shutdown().await;
}

/// Checks `value` against an OpenAPI 3.1 `schema` (the subset utoipa produces: `$ref`,
/// `type` (one or a list), `properties`, `required`, `additionalProperties`, `items`, `allOf`,
/// `oneOf`, `anyOf`, `enum`, `minimum`). With `strict`, an object may not have properties its
/// schema does not list (so the document cannot miss a field the handlers send).
fn check(document: &Value, schema: &Value, value: &Value, at: &str, strict: bool) -> Result<(), String> {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference
            .strip_prefix("#/components/schemas/")
            .ok_or_else(|| format!("{at}: unsupported $ref {reference}"))?;
        let target = &document["components"]["schemas"][name];
        if target.is_null() {
            return Err(format!("{at}: $ref {reference} names no schema"));
        }
        return check(document, target, value, at, strict);
    }
    if let Some(all) = schema["allOf"].as_array() {
        for part in all {
            check(document, part, value, at, false)?;
        }
        if strict && let Some(object) = value.as_object() {
            let known: BTreeSet<String> = all.iter().flat_map(|p| properties(document, p)).collect();
            if let Some(extra) = object.keys().find(|k| !known.contains(*k)) {
                return Err(format!("{at}: property {extra:?} is not documented"));
            }
        }
        return Ok(());
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = schema[key].as_array() {
            let problems: Vec<String> = options
                .iter()
                .filter_map(|o| check(document, o, value, at, strict).err())
                .collect();
            let matched = options.len() - problems.len();
            return match (key, matched) {
                (_, 0) => Err(format!("{at}: matches none of {key}: {problems:?}")),
                ("oneOf", n) if n > 1 => Err(format!("{at}: matches {n} options of oneOf")),
                _ => Ok(()),
            };
        }
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        return Err(format!("{at}: {value} is not one of {allowed:?}"));
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() {
        let fits = |t: &str| match t {
            "null" => value.is_null(),
            "boolean" => value.is_boolean(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => false,
        };
        if !types.iter().any(|t| fits(t)) {
            return Err(format!("{at}: expected {types:?}, got {value}"));
        }
    }
    if let (Some(minimum), Some(n)) = (schema["minimum"].as_f64(), value.as_f64())
        && n < minimum
    {
        return Err(format!("{at}: {n} is below the minimum {minimum}"));
    }
    if let Some(object) = value.as_object() {
        for required in schema["required"].as_array().into_iter().flatten() {
            let name = required.as_str().unwrap_or_default();
            if !object.contains_key(name) {
                return Err(format!("{at}: required property {name:?} is missing"));
            }
        }
        let listed = schema["properties"].as_object();
        for (name, field) in object {
            let here = format!("{at}.{name}");
            match (listed.and_then(|l| l.get(name)), &schema["additionalProperties"]) {
                (Some(field_schema), _) => check(document, field_schema, field, &here, true)?,
                (None, Value::Object(_)) => {
                    check(document, &schema["additionalProperties"], field, &here, true)?
                }
                (None, Value::Bool(false)) => {
                    return Err(format!("{at}: property {name:?} is not allowed"));
                }
                (None, _) if strict && listed.is_some() => {
                    return Err(format!("{at}: property {name:?} is not documented"));
                }
                (None, _) => {}
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, element) in array.iter().enumerate() {
            check(document, items, element, &format!("{at}[{i}]"), true)?;
        }
    }
    Ok(())
}

/// The property names a schema lists, through `$ref` and `allOf`.
fn properties(document: &Value, schema: &Value) -> Vec<String> {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.trim_start_matches("#/components/schemas/");
        return properties(document, &document["components"]["schemas"][name]);
    }
    let mut names: Vec<String> = schema["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        names.extend(properties(document, part));
    }
    names
}
