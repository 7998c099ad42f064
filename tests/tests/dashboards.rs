//! The Grafana dashboards of `helm/nave-hub/dashboards`: well-formed models over a
//! `${datasource}` Prometheus variable, and every panel's PromQL returns data from the real
//! Prometheus of the end-to-end setup once a workload has been placed and scaled.

use std::collections::BTreeSet;
use std::path::PathBuf;

use kube::api::{Api, Patch, PatchParams, PostParams};
use nave_api::MultiClusterDeployment;
use nave_e2e::{DEADLINE, Database, Env, EnvOptions, prometheus};
use nave_testkit::{Mcd, wait_for};
use serde_json::{Value, json};

/// What Grafana would put for its built-in variables on a dashboard of the last hour.
const BUILT_INS: [(&str, &str); 3] = [
    ("__rate_interval", "1m"),
    ("__interval", "15s"),
    ("__range", "1h"),
];

/// One panel query.
#[derive(Debug)]
struct Query {
    dashboard: String,
    panel: String,
    expr: String,
}

fn dashboards() -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../helm/nave-hub/dashboards");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let model =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
            (path.file_name().unwrap().to_string_lossy().into_owned(), model)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Panels, rows' panels included.
fn panels(model: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in model["panels"].as_array().into_iter().flatten() {
        out.push(panel);
        out.extend(panel["panels"].as_array().into_iter().flatten());
    }
    out
}

/// `expr` with Grafana's variables replaced as Grafana would: built-ins by concrete durations,
/// the dashboard's multi-value variables by their "All" value.
fn substitute(expr: &str, variables: &[String]) -> String {
    let mut out = expr.to_owned();
    // Longest names first, so that `$__rate_interval` is not taken for `$__range` + text.
    let mut names: Vec<(String, &str)> = BUILT_INS.iter().map(|(n, v)| ((*n).to_owned(), *v)).collect();
    names.extend(variables.iter().map(|n| (n.clone(), ".*")));
    names.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    for (name, value) in names {
        out = out
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    out
}

fn queries() -> Vec<Query> {
    let mut out = Vec::new();
    for (file, model) in dashboards() {
        let variables: Vec<String> = model["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v["type"] != "datasource")
            .filter_map(|v| v["name"].as_str().map(str::to_owned))
            .collect();
        for panel in panels(&model) {
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().unwrap_or_default();
                out.push(Query {
                    dashboard: file.clone(),
                    panel: panel["title"].as_str().unwrap_or_default().to_owned(),
                    expr: substitute(expr, &variables),
                });
            }
        }
    }
    out
}

#[test]
fn dashboards_are_grafana_models_over_a_prometheus_datasource_variable() {
    let all = dashboards();
    let files: Vec<&str> = all.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        files,
        [
            "nave-adaptive.json",
            "nave-agents.json",
            "nave-fleet-utilization.json",
            "nave-placements.json"
        ],
        "the dashboards"
    );
    let mut uids = BTreeSet::new();
    for (file, model) in &all {
        let uid = model["uid"].as_str().unwrap_or_default();
        assert!(
            !uid.is_empty() && uid.len() <= 40,
            "{file}: a uid Grafana accepts, got {uid:?}"
        );
        assert!(uids.insert(uid.to_owned()), "{file}: uid {uid} is used twice");
        assert!(
            model["title"].as_str().is_some_and(|t| t.starts_with("Nave / ")),
            "{file}: title"
        );
        let variables = model["templating"]["list"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            variables.iter().any(|v| v["name"] == "datasource"
                && v["type"] == "datasource"
                && v["query"] == "prometheus"),
            "{file}: a `datasource` variable of type prometheus"
        );
        let mut ids = BTreeSet::new();
        for panel in panels(model) {
            let title = panel["title"].as_str().unwrap_or_default();
            assert!(!title.is_empty(), "{file}: a panel without a title: {panel}");
            assert!(
                ids.insert(panel["id"].as_u64()),
                "{file}: panel id of {title:?} is not unique"
            );
            assert!(
                panel["gridPos"]["w"].as_u64().is_some(),
                "{file}: {title:?} has no gridPos"
            );
            if panel["type"] == "row" {
                continue;
            }
            let uses_variable = |v: &Value| v["uid"] == "${datasource}" && v["type"] == "prometheus";
            assert!(
                uses_variable(&panel["datasource"]),
                "{file}: {title:?} should query the ${{datasource}} variable, has {}",
                panel["datasource"]
            );
            let targets = panel["targets"].as_array().cloned().unwrap_or_default();
            assert!(!targets.is_empty(), "{file}: {title:?} has no query");
            for target in targets {
                assert!(
                    uses_variable(&target["datasource"]),
                    "{file}: {title:?}: {target}"
                );
                let expr = target["expr"].as_str().unwrap_or_default();
                assert!(
                    expr.contains("nave_") || expr.contains("container_"),
                    "{file}: {title:?}: {expr}"
                );
            }
        }
    }
    for query in queries() {
        assert!(
            !query.expr.contains('$'),
            "{} / {}: a variable is left after substitution: {}",
            query.dashboard,
            query.panel,
            query.expr
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_dashboard_query_returns_data_from_the_real_prometheus() {
    let Some(binary) = prometheus::binary_or_skip("dashboard queries") else {
        return;
    };
    let options = EnvOptions {
        prometheus: Some(binary),
        hub_prometheus: nave_hub::cli::PrometheusArgs {
            prometheus_traffic_query: Some(nave_playground::up::SIM_TRAFFIC_QUERY.to_owned()),
            ..nave_hub::cli::PrometheusArgs::default()
        },
        ..EnvOptions::default()
    };
    let env = Env::start_with(nave_e2e::fleet(3), Database::Sqlite, options)
        .await
        .expect("the environment starts");

    // Activity: a placement, then a scale-up.
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), "default");
    mcds.create(
        &PostParams::default(),
        &Mcd::new("web").replicas(4).policy("spread").build(),
    )
    .await
    .expect("web created");
    env.wait_rolled_out("default", "web", 4).await;
    mcds.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 6}})),
    )
    .await
    .expect("web scaled");
    env.wait_rolled_out("default", "web", 6).await;

    // A workload placed by its traffic, which arrives at two clusters' ingresses.
    let names: Vec<String> = env.fleet.clusters.iter().map(|c| c.name().to_owned()).collect();
    for (cluster, rate) in names.iter().zip([30.0, 10.0]) {
        env.set_traffic(cluster, "default", "api", rate).await;
    }
    mcds.create(
        &PostParams::default(),
        &Mcd::new("api").replicas(2).policy("traffic").build(),
    )
    .await
    .expect("api created");
    env.wait_rolled_out("default", "api", 2).await;

    let server = env.prometheus().expect("Prometheus runs");
    let queries = queries();
    assert!(
        queries.len() >= 30,
        "the dashboards' queries; found {}",
        queries.len()
    );
    for q in &queries {
        wait_for(
            &format!("{} / {:?} to return data: {}", q.dashboard, q.panel, q.expr),
            DEADLINE,
            || async {
                let series = prometheus::query(server, &q.expr).await?;
                if series.is_empty() {
                    Err("an empty result".to_owned())
                } else {
                    Ok(())
                }
            },
        )
        .await;
    }
    env.shutdown().await;
}
