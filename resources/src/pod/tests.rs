//! Pod requests and limits against the rules of the Kubernetes documentation, with the numbers
//! written out.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;

use super::*;

fn list(items: &[(&str, &str)]) -> Option<BTreeMap<String, KubeQuantity>> {
    (!items.is_empty()).then(|| {
        items
            .iter()
            .map(|(k, v)| ((*k).to_owned(), KubeQuantity((*v).to_owned())))
            .collect()
    })
}

/// A container with these requests and limits.
fn container(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
    Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            requests: list(requests),
            limits: list(limits),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An init container with `restartPolicy: Always`: a sidecar.
fn sidecar(name: &str, requests: &[(&str, &str)]) -> Container {
    Container {
        restart_policy: Some("Always".into()),
        ..container(name, requests, &[])
    }
}

#[test]
fn the_highest_init_container_wins_over_the_app_containers_sum() {
    // "Init Containers", section "Resource sharing within containers": the highest request of any
    // init container is the effective init request; the pod's effective request is the higher of
    // that and the sum of the app containers.
    let spec = PodSpec {
        init_containers: Some(vec![
            container("config-generator", &[("cpu", "250m"), ("memory", "256Mi")], &[]),
            container("mysql-checker", &[("cpu", "500m"), ("memory", "1Gi")], &[]),
        ]),
        containers: vec![
            container("app", &[("cpu", "200m"), ("memory", "1Gi")], &[]),
            container("log-aggregator", &[("cpu", "100m"), ("memory", "512Mi")], &[]),
        ],
        ..Default::default()
    };
    let r = pod_requests(&spec);
    // cpu: max(200m + 100m, max(250m, 500m)) = 500m; memory: max(1Gi + 512Mi, 1Gi) = 1.5Gi.
    assert_eq!(r.cpu_millis(), 500);
    assert_eq!(r.memory_bytes(), 1536 << 20);
}

#[test]
fn sidecars_count_with_the_app_containers_and_with_later_init_containers() {
    // "Sidecar Containers", section "Resource sharing within containers": the effective init
    // request of an init container adds the sidecars started before it; the pod's effective
    // request is the pod overhead plus the higher of the sum of all non-init containers (app and
    // sidecar) and the effective init request.
    let spec = PodSpec {
        init_containers: Some(vec![
            container("migrate", &[("cpu", "1"), ("memory", "64Mi")], &[]),
            sidecar("proxy", &[("cpu", "100m"), ("memory", "128Mi")]),
            container("warm-cache", &[("cpu", "2"), ("memory", "256Mi")], &[]),
            sidecar("logs", &[("cpu", "50m"), ("memory", "32Mi")]),
        ]),
        containers: vec![container("app", &[("cpu", "500m"), ("memory", "1Gi")], &[])],
        overhead: list(&[("cpu", "10m"), ("memory", "16Mi")]),
        ..Default::default()
    };
    let r = pod_requests(&spec);
    // cpu: init peak = max(1000, 100 + 2000) = 2100 (the "logs" sidecar starts after
    // warm-cache); running = 500 + 100 + 50 = 650; 2100 + 10m overhead.
    assert_eq!(r.cpu_millis(), 2110);
    // memory: running = 1Gi + 128Mi + 32Mi = 1184Mi beats the init peak 128Mi + 256Mi; + 16Mi.
    assert_eq!(r.memory_bytes(), 1200 << 20);
}

#[test]
fn a_limit_stands_in_for_a_missing_request_per_resource() {
    let spec = PodSpec {
        init_containers: Some(vec![container("init", &[], &[("cpu", "3"), ("memory", "1Gi")])]),
        containers: vec![
            container("limits-only", &[], &[("cpu", "300m"), ("memory", "256Mi")]),
            container("both", &[("cpu", "100m")], &[("cpu", "1"), ("memory", "128Mi")]),
        ],
        ..Default::default()
    };
    let r = pod_requests(&spec);
    // cpu: max(300m + 100m (its request, not its limit), 3) ; memory: max(256Mi + 128Mi, 1Gi).
    assert_eq!(r.cpu_millis(), 3000);
    assert_eq!(r.memory_bytes(), 1 << 30);
    let app_only = PodSpec {
        containers: spec.containers.clone(),
        ..Default::default()
    };
    assert_eq!(pod_requests(&app_only).cpu_millis(), 400);
    assert_eq!(pod_requests(&app_only).memory_bytes(), 384 << 20);
}

#[test]
fn other_resources_are_aggregated_alike_and_zeros_left_out() {
    let spec = PodSpec {
        init_containers: Some(vec![container("init", &[("ephemeral-storage", "2Gi")], &[])]),
        containers: vec![
            container("a", &[("ephemeral-storage", "1Gi"), ("nvidia.com/gpu", "1")], &[]),
            container("b", &[("ephemeral-storage", "512Mi"), ("cpu", "0")], &[]),
        ],
        ..Default::default()
    };
    let r = pod_requests(&spec);
    assert_eq!(r.value("ephemeral-storage"), 2 << 30);
    assert_eq!(r.value("nvidia.com/gpu"), 1);
    assert_eq!(
        r.names().collect::<Vec<_>>(),
        ["ephemeral-storage", "nvidia.com/gpu"]
    );
}

#[test]
fn limits_aggregate_like_requests_and_take_overhead_only_where_set() {
    let spec = PodSpec {
        init_containers: Some(vec![
            sidecar("proxy", &[]),
            container("init", &[], &[("cpu", "2")]),
        ]),
        containers: vec![container("app", &[("memory", "1Gi")], &[("cpu", "500m")])],
        overhead: list(&[("cpu", "10m"), ("memory", "16Mi")]),
        ..Default::default()
    };
    let l = pod_limits(&spec);
    assert_eq!(l.cpu_millis(), 2010);
    assert_eq!(
        l.memory_bytes(),
        0,
        "no container limits memory, so the overhead adds none"
    );
    assert_eq!(pod_requests(&spec).memory_bytes(), (1 << 30) + (16 << 20));
}

#[test]
fn a_pod_without_containers_requests_only_its_overhead_and_odd_quantities_count_as_zero() {
    assert!(pod_requests(&PodSpec::default()).is_empty());
    let spec = PodSpec {
        containers: vec![container("a", &[("cpu", "lots"), ("memory", "1Mi")], &[])],
        overhead: list(&[("cpu", "250m")]),
        ..Default::default()
    };
    let r = pod_requests(&spec);
    assert_eq!(r.cpu_millis(), 250);
    assert_eq!(r.memory_bytes(), 1 << 20);
}

#[test]
fn whole_units_round_up_and_negative_or_huge_amounts_clamp() {
    let mut r = Resources::new();
    r.set("memory", 1500);
    r.set("cpu", -5);
    assert_eq!(r.memory_bytes(), 2);
    assert_eq!(r.cpu_millis(), 0);
    r.set("cpu", i128::MAX);
    assert_eq!(r.cpu_millis(), u64::MAX);
    r.add(&r.clone());
    assert_eq!(r.milli("cpu"), i128::MAX, "sums saturate");
}
