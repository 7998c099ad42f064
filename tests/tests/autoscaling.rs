//! MultiClusterHorizontalPodAutoscaler end to end against the real Prometheus: the simulated
//! clusters' pods declare their CPU use, Prometheus scrapes it with the pods' requests and labels,
//! and the hub scales the MultiClusterDeployment up while its pods are busy and down once they
//! are idle, within minReplicas and maxReplicas.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use nave_api::{MultiClusterDeployment, MultiClusterHorizontalPodAutoscaler};
use nave_e2e::{DEADLINE, Database, Env, EnvOptions, prometheus};
use nave_sim::config::CPU_USAGE_ANNOTATION;
use nave_testkit::wait_for;
use serde_json::json;

const NS: &str = "default";

/// `web`: `replicas` pods requesting 100m of CPU, each using `usage`.
fn web(replicas: i64, usage: &str) -> MultiClusterDeployment {
    serde_json::from_value(json!({
        "apiVersion": nave_api::API_VERSION, "kind": "MultiClusterDeployment",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "replicas": replicas,
            "placement": {"policy": "spread"},
            "template": {"spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}, "annotations": {CPU_USAGE_ANNOTATION: usage}},
                    "spec": {"containers": [{"name": "app", "image": "busybox:1.36",
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
                }
            }}
        }
    }))
    .expect("a well-formed MultiClusterDeployment")
}

/// `web`'s autoscaler: up to 5 replicas, aiming at 50% of the requested CPU, with `spec` merged
/// in.
fn autoscaler(spec: serde_json::Value) -> MultiClusterHorizontalPodAutoscaler {
    let mut full = json!({
        "maxReplicas": 5,
        "metrics": [{"type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]
    });
    for (k, v) in spec.as_object().into_iter().flatten() {
        full[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": nave_api::API_VERSION, "kind": "MultiClusterHorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": NS},
        "spec": full
    }))
    .expect("a well-formed autoscaler")
}

/// The hub (with `options`) and agents over `clusters` simulated clusters, and the APIs of
/// MultiClusterDeployments and their autoscalers in [`NS`].
async fn start(
    clusters: usize,
    options: EnvOptions,
) -> (
    Env,
    Api<MultiClusterDeployment>,
    Api<MultiClusterHorizontalPodAutoscaler>,
) {
    let env = Env::start_with(nave_e2e::fleet(clusters), Database::Sqlite, options)
        .await
        .expect("the environment starts");
    let mcds = Api::namespaced(env.client.clone(), NS);
    let hpas = Api::namespaced(env.client.clone(), NS);
    (env, mcds, hpas)
}

async fn replicas(mcds: &Api<MultiClusterDeployment>) -> Result<i32, String> {
    Ok(mcds.get("web").await.map_err(|e| e.to_string())?.spec.replicas)
}

/// Waits until `web` has `want` replicas in its spec, showing the autoscaler's status meanwhile.
async fn scaled_to(
    mcds: &Api<MultiClusterDeployment>,
    hpas: &Api<MultiClusterHorizontalPodAutoscaler>,
    want: i32,
    what: &str,
) {
    wait_for(&format!("web to be scaled {what} ({want})"), DEADLINE, || async {
        match replicas(mcds).await? {
            n if n == want => Ok(()),
            n => {
                let status = hpas.get("web").await.map_err(|e| e.to_string())?.status;
                Err(format!("{n} replicas; autoscaler status {status:?}"))
            }
        }
    })
    .await;
}

fn condition(hpa: &MultiClusterHorizontalPodAutoscaler, type_: &str) -> Option<(String, String)> {
    hpa.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workload_scales_up_while_its_pods_are_busy_and_down_once_they_are_idle() {
    let Some(binary) = prometheus::binary_or_skip("multi-cluster autoscaling") else {
        return;
    };
    let options = EnvOptions {
        prometheus: Some(binary),
        hub_prometheus: nave_hub::cli::PrometheusArgs {
            prometheus_ttl: Duration::from_secs(5),
            ..nave_hub::cli::PrometheusArgs::default()
        },
        // Evaluated every second, CPU rates over 10 s of 1 s scrapes.
        hub_autoscale: nave_hub::cli::AutoscaleArgs {
            autoscale_interval: Duration::from_secs(1),
            autoscale_rate_window: "10s".to_owned(),
            ..nave_hub::cli::AutoscaleArgs::default()
        },
        ..EnvOptions::default()
    };
    let (env, mcds, hpas) = start(2, options).await;

    // Two pods using 150m of their 100m: 150% against a target of 50%.
    mcds.create(&PostParams::default(), &web(2, "150m"))
        .await
        .expect("web created");
    env.wait_rolled_out(NS, "web", 2).await;
    let hpa = autoscaler(json!({
        "scaleTargetRef": {"kind": "MultiClusterDeployment", "name": "web"},
        "minReplicas": 1,
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}
    }));
    hpas.create(&PostParams::default(), &hpa)
        .await
        .expect("autoscaler created");
    let created = std::time::Instant::now();

    scaled_to(&mcds, &hpas, 5, "up to maxReplicas").await;
    let up = created.elapsed();
    let note = env.event(NS, "web", "SuccessfulRescale").await;
    assert!(
        note.starts_with("New size: ")
            && note.contains("cpu utilization")
            && note.contains("above target 50%"),
        "the event says why; seen {note:?}"
    );
    wait_for("the autoscaler to say maxReplicas holds it", DEADLINE, || async {
        let hpa = hpas.get("web").await.map_err(|e| e.to_string())?;
        let status = hpa.status.clone().unwrap_or_default();
        match condition(&hpa, "ScalingLimited") {
            Some((s, r)) if s == "True" && r == "TooManyReplicas" && status.desired_replicas == 5 => Ok(()),
            seen => Err(format!("ScalingLimited {seen:?}, status {status:?}")),
        }
    })
    .await;
    env.wait_rolled_out(NS, "web", 5).await;
    let up_ready = created.elapsed();

    // The pods go idle (10m of 100m): down to minReplicas.
    mcds.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"spec": {"template": {"metadata": {
            "annotations": {CPU_USAGE_ANNOTATION: "10m"}}}}}}})),
    )
    .await
    .expect("web's pods idle");
    let idle = std::time::Instant::now();
    scaled_to(&mcds, &hpas, 1, "down to minReplicas").await;
    let down = idle.elapsed();
    env.wait_rolled_out(NS, "web", 1).await;
    // Reported, not asserted: BENCHMARKS.md "Multi-cluster autoscaling".
    println!(
        "autoscaling: autoscaler created -> spec.replicas 5 in {:.1} s, 5 ready in {:.1} s; pods idle -> spec.replicas 1 in {:.1} s",
        up.as_secs_f64(),
        up_ready.as_secs_f64(),
        down.as_secs_f64()
    );
    let hpa = hpas.get("web").await.expect("the autoscaler");
    assert_eq!(
        condition(&hpa, "ScalingActive"),
        Some(("True".to_owned(), "ValidMetricFound".to_owned())),
        "{:?}",
        hpa.status
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_prometheus_the_autoscaler_says_so_and_changes_nothing() {
    let options = EnvOptions {
        hub_autoscale: nave_hub::cli::AutoscaleArgs {
            autoscale_interval: Duration::from_millis(200),
            ..nave_hub::cli::AutoscaleArgs::default()
        },
        ..EnvOptions::default()
    };
    let (env, mcds, hpas) = start(1, options).await;
    mcds.create(&PostParams::default(), &web(2, "150m"))
        .await
        .expect("web created");
    let hpa = autoscaler(json!({"scaleTargetRef": {"name": "web"}}));
    hpas.create(&PostParams::default(), &hpa)
        .await
        .expect("autoscaler created");
    wait_for("the autoscaler to say it reads no metrics", DEADLINE, || async {
        let hpa = hpas.get("web").await.map_err(|e| e.to_string())?;
        match (
            condition(&hpa, "ScalingActive"),
            hpa.status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "ScalingActive"))
                .map(|c| c.message.clone()),
        ) {
            (Some((s, r)), Some(m))
                if s == "False" && r == "FailedGetResourceMetric" && m.contains("--prometheus-url") =>
            {
                Ok(())
            }
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
    assert_eq!(replicas(&mcds).await, Ok(2), "nothing changes without metrics");

    // A second autoscaler of the same workload: neither acts, both say why.
    let mut second = hpa.clone();
    second.metadata.name = Some("web-too".to_owned());
    hpas.create(&PostParams::default(), &second)
        .await
        .expect("second autoscaler created");
    wait_for("both autoscalers to name the conflict", DEADLINE, || async {
        let mut seen = Vec::new();
        for name in ["web", "web-too"] {
            let hpa = hpas.get(name).await.map_err(|e| e.to_string())?;
            seen.push(condition(&hpa, "AbleToScale"));
        }
        let ambiguous = Some(("False".to_owned(), "AmbiguousTarget".to_owned()));
        if seen.iter().all(|c| *c == ambiguous) {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await;
    hpas.delete("web-too", &Default::default())
        .await
        .expect("second autoscaler deleted");

    // A target that does not exist is named.
    hpas.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"scaleTargetRef": {"name": "nothing"}}})),
    )
    .await
    .expect("retargeted");
    wait_for(
        "the autoscaler to say its target is missing",
        DEADLINE,
        || async {
            let hpa = hpas.get("web").await.map_err(|e| e.to_string())?;
            match condition(&hpa, "AbleToScale") {
                Some((s, r)) if s == "False" && r == "FailedGetScale" => Ok(()),
                seen => Err(format!("{seen:?}")),
            }
        },
    )
    .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workload_scales_by_the_admins_metric_of_its_requests_per_second() {
    let Some(binary) = prometheus::binary_or_skip("multi-cluster autoscaling by an external metric") else {
        return;
    };
    let options = EnvOptions {
        prometheus: Some(binary),
        hub_autoscale: nave_hub::cli::AutoscaleArgs {
            autoscale_interval: Duration::from_secs(1),
            // The admin's metric: the requests per second arriving for the workload's Service,
            // in every cluster.
            autoscale_metric: vec![nave_hub::cli::NamedMetric {
                name: "requests-per-second".to_owned(),
                query:
                    r#"sum(nave_sim_ingress_requests_per_second{namespace="$namespace",service="$workload"})"#
                        .to_owned(),
            }],
            ..nave_hub::cli::AutoscaleArgs::default()
        },
        ..EnvOptions::default()
    };
    let (env, mcds, hpas) = start(2, options).await;
    let clusters = env.cluster_names();
    mcds.create(&PostParams::default(), &web(1, "10m"))
        .await
        .expect("web created");
    env.wait_rolled_out(NS, "web", 1).await;
    // 30 + 15 requests per second, 10 per replica wanted: 5 replicas.
    env.set_traffic(&clusters[0], NS, "web", 30.0).await;
    env.set_traffic(&clusters[1], NS, "web", 15.0).await;
    let hpa = autoscaler(json!({
        "scaleTargetRef": {"name": "web"},
        "maxReplicas": 8,
        "metrics": [{"type": "External", "external": {
            "metric": {"name": "requests-per-second"},
            "target": {"type": "AverageValue", "averageValue": "10"}}}],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}
    }));
    hpas.create(&PostParams::default(), &hpa)
        .await
        .expect("autoscaler created");
    scaled_to(&mcds, &hpas, 5, "up to 45 requests per second at 10 each").await;
    let note = env.event(NS, "web", "SuccessfulRescale").await;
    assert!(
        note.contains("requests-per-second") && note.contains("above target 10"),
        "the event names the metric; seen {note:?}"
    );

    // The traffic falls to 12 requests per second: 2 replicas.
    env.set_traffic(&clusters[0], NS, "web", 8.0).await;
    env.set_traffic(&clusters[1], NS, "web", 4.0).await;
    scaled_to(&mcds, &hpas, 2, "down to 12 requests per second").await;
    wait_for("the autoscaler's status shows the metric", DEADLINE, || async {
        let hpa = hpas.get("web").await.map_err(|e| e.to_string())?;
        let status = hpa.status.clone().unwrap_or_default();
        let external = status
            .current_metrics
            .iter()
            .find_map(|m| m.external.as_ref())
            .map(|e| {
                (
                    e.metric.name.clone(),
                    e.current.value.clone(),
                    e.current.average_value.clone(),
                )
            });
        if external
            == Some((
                "requests-per-second".to_owned(),
                Some("12".to_owned()),
                Some("6".to_owned()),
            ))
            && condition(&hpa, "ScalingActive") == Some(("True".to_owned(), "ValidMetricFound".to_owned()))
        {
            Ok(())
        } else {
            Err(format!("external {external:?}, status {status:?}"))
        }
    })
    .await;

    // A metric the hub does not define: the autoscaler says so, and nothing scales down.
    hpas.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"metrics": [{"type": "External", "external": {
            "metric": {"name": "queue-length"},
            "target": {"type": "Value", "value": 5}}}]}})),
    )
    .await
    .expect("another metric");
    wait_for(
        "FailedGetExternalMetric naming the hub's metrics",
        DEADLINE,
        || async {
            let hpa = hpas.get("web").await.map_err(|e| e.to_string())?;
            let active = hpa
                .status
                .iter()
                .flat_map(|s| &s.conditions)
                .find(|c| c.type_ == "ScalingActive")
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
            match &active {
                Some((s, r, m))
                    if s == "False"
                        && r == "FailedGetExternalMetric"
                        && m.contains("queue-length")
                        && m.contains("requests-per-second") =>
                {
                    Ok(())
                }
                _ => Err(format!("ScalingActive {active:?}")),
            }
        },
    )
    .await;
    assert_eq!(
        replicas(&mcds).await,
        Ok(2),
        "nothing scaled on a metric not read"
    );
    env.shutdown().await;
}
