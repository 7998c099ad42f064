//! MultiClusterHorizontalPodAutoscaler end to end: the simulated clusters' pods declare their CPU
//! use, and the hub scales the MultiClusterDeployment up while its pods are busy and down once
//! they are idle, within minReplicas and maxReplicas. Against the real Prometheus, which scrapes
//! the use with the pods' requests and labels; and without one, by what the agents read from
//! their clusters' resource metrics API (`metrics.k8s.io`) and report in their heartbeats.

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
    start_fleet(nave_e2e::fleet(clusters), options).await
}

/// As [`start`], over the clusters of `fleet`.
async fn start_fleet(
    fleet: nave_sim::config::FleetConfig,
    options: EnvOptions,
) -> (
    Env,
    Api<MultiClusterDeployment>,
    Api<MultiClusterHorizontalPodAutoscaler>,
) {
    let env = Env::start_with(fleet, Database::Sqlite, options)
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

/// The autoscaler's `ScalingActive` condition: status, reason and message.
fn scaling_active(hpa: &MultiClusterHorizontalPodAutoscaler) -> Option<(String, String, String)> {
    hpa.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "ScalingActive")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
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
    busy_web_autoscaled(&env, &mcds, &hpas).await;
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
    use_cpu(&mcds, "10m").await;
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

/// Evaluated every second, without Prometheus.
fn by_agents() -> EnvOptions {
    EnvOptions {
        hub_autoscale: nave_hub::cli::AutoscaleArgs {
            autoscale_interval: Duration::from_secs(1),
            ..nave_hub::cli::AutoscaleArgs::default()
        },
        ..EnvOptions::default()
    }
}

/// `web`'s CPU utilization in its autoscaler's status, once there is one.
async fn cpu_utilization(hpas: &Api<MultiClusterHorizontalPodAutoscaler>) -> Option<i32> {
    let hpa = hpas.get("web").await.ok()?;
    hpa.status?
        .current_metrics
        .iter()
        .find_map(|m| m.resource.as_ref())
        .map(|r| r.current.average_utilization)
}

/// `web`: two pods using 150% of their CPU request, rolled out, and its autoscaler (from 1 to 5
/// replicas, at 50%, with no scale-down stabilization).
async fn busy_web_autoscaled(
    env: &Env,
    mcds: &Api<MultiClusterDeployment>,
    hpas: &Api<MultiClusterHorizontalPodAutoscaler>,
) {
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
}

/// `web`'s pods use `usage` from now on.
async fn use_cpu(mcds: &Api<MultiClusterDeployment>, usage: &str) {
    mcds.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"spec": {"template": {"metadata": {
            "annotations": {CPU_USAGE_ANNOTATION: usage}}}}}}})),
    )
    .await
    .expect("web's pods use another amount");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_prometheus_a_workload_scales_by_what_the_agents_report() {
    let (env, mcds, hpas) = start(2, by_agents()).await;
    busy_web_autoscaled(&env, &mcds, &hpas).await;
    let created = std::time::Instant::now();
    scaled_to(&mcds, &hpas, 5, "up to maxReplicas").await;
    let up = created.elapsed();
    let note = env.event(NS, "web", "SuccessfulRescale").await;
    assert!(
        note.contains("cpu utilization 150% above target 50%"),
        "the event gives the utilization the agents measured; seen {note:?}"
    );
    env.wait_rolled_out(NS, "web", 5).await;

    use_cpu(&mcds, "10m").await;
    let idle = std::time::Instant::now();
    scaled_to(&mcds, &hpas, 1, "down to minReplicas").await;
    let down = idle.elapsed();
    wait_for("the status to show 10% measured", DEADLINE, || async {
        match cpu_utilization(&hpas).await {
            Some(10) => Ok(()),
            seen => Err(format!("cpu utilization {seen:?}")),
        }
    })
    .await;
    let hpa = hpas.get("web").await.expect("the autoscaler");
    assert_eq!(
        condition(&hpa, "ScalingActive"),
        Some(("True".to_owned(), "ValidMetricFound".to_owned())),
        "{:?}",
        hpa.status
    );
    // Reported, not asserted: BENCHMARKS.md "Multi-cluster autoscaling".
    println!(
        "autoscaling by the agents' reports: autoscaler created -> spec.replicas 5 in {:.1} s; pods idle -> spec.replicas 1 in {:.1} s",
        up.as_secs_f64(),
        down.as_secs_f64()
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_that_measures_nothing_lets_the_workload_scale_up_and_never_down() {
    // The second cluster has no metrics-server.
    let mut fleet = nave_e2e::fleet(2);
    fleet.clusters[1].usage.metrics_api = false;
    let unmeasured = fleet.clusters[1].name.clone();
    let (env, mcds, hpas) = start_fleet(fleet, by_agents()).await;
    busy_web_autoscaled(&env, &mcds, &hpas).await;
    // The measured half is busy: that is enough to add replicas.
    scaled_to(&mcds, &hpas, 5, "up on what one cluster measured").await;
    wait_for(
        "the status to name the cluster that measures nothing",
        DEADLINE,
        || async {
            let hpa = hpas.get("web").await.map_err(|e| e.to_string())?;
            let active = scaling_active(&hpa);
            match &active {
                Some((s, _, m)) if s == "True" && m.contains(&unmeasured) && m.contains("not down") => Ok(()),
                _ => Err(format!("ScalingActive {active:?}")),
            }
        },
    )
    .await;

    // Idle where measured; what the other cluster runs is unknown, so nothing is removed.
    use_cpu(&mcds, "10m").await;
    wait_for("the status to show 10% measured", DEADLINE, || async {
        match cpu_utilization(&hpas).await {
            Some(10) => Ok(()),
            seen => Err(format!("cpu utilization {seen:?}")),
        }
    })
    .await;
    assert_eq!(
        replicas(&mcds).await,
        Ok(5),
        "no scale-down while a cluster it runs in measures nothing"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_measurement_anywhere_the_autoscaler_says_so_and_changes_nothing() {
    let mut fleet = nave_e2e::fleet(1);
    fleet.clusters[0].usage.metrics_api = false;
    let options = EnvOptions {
        hub_autoscale: nave_hub::cli::AutoscaleArgs {
            autoscale_interval: Duration::from_millis(200),
            ..nave_hub::cli::AutoscaleArgs::default()
        },
        ..EnvOptions::default()
    };
    let (env, mcds, hpas) = start_fleet(fleet, options).await;
    mcds.create(&PostParams::default(), &web(2, "150m"))
        .await
        .expect("web created");
    let hpa = autoscaler(json!({"scaleTargetRef": {"name": "web"}}));
    hpas.create(&PostParams::default(), &hpa)
        .await
        .expect("autoscaler created");
    wait_for(
        "the autoscaler to say nothing measures the pods",
        DEADLINE,
        || async {
            let hpa = hpas.get("web").await.map_err(|e| e.to_string())?;
            match scaling_active(&hpa) {
                Some((s, r, m))
                    if s == "False" && r == "FailedGetResourceMetric" && m.contains("metrics.k8s.io") =>
                {
                    Ok(())
                }
                seen => Err(format!("ScalingActive {seen:?}")),
            }
        },
    )
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
            let active = scaling_active(&hpa);
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
