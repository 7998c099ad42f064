//! The hub's per-replica demand and the agent's reported usage count a pod the same way: a pod
//! the hub places for `demand` must show up as exactly that much `requested` in the agent's
//! heartbeat, or the hub double-books or strands room. Pure: no clusters are started.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DeploymentSpec;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn list(items: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    (!items.is_empty()).then(|| {
        items
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    })
}

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

/// One spec per rule where a naive count differs: a sidecar, an init container that needs more
/// than the app, containers with only limits, fractional and exponent quantities, overhead.
fn specs() -> Vec<(&'static str, PodSpec, u64, u64)> {
    let mut proxy = container("proxy", &[("cpu", "100m"), ("memory", "64Mi")], &[]);
    proxy.restart_policy = Some("Always".into());
    vec![
        (
            "init peak next to an earlier sidecar",
            PodSpec {
                init_containers: Some(vec![
                    proxy.clone(),
                    container("migrate", &[], &[("cpu", "1.5"), ("memory", "128Mi")]),
                ]),
                containers: vec![
                    container("app", &[], &[("cpu", "250m"), ("memory", "0.5Gi")]),
                    container("metrics", &[("cpu", "50m")], &[("cpu", "1"), ("memory", "32Mi")]),
                ],
                overhead: list(&[("memory", "1Mi")]),
                ..Default::default()
            },
            // cpu: max(250 + 50 + 100, 1500 + 100) = 1600; memory: max(512 + 32 + 64, 128 + 64) + 1 Mi.
            1600,
            609 << 20,
        ),
        (
            "app containers and sidecar over a small init container",
            PodSpec {
                init_containers: Some(vec![container("wait", &[("cpu", "10m")], &[]), proxy]),
                containers: vec![container("app", &[], &[("cpu", "2"), ("memory", "1e9")])],
                overhead: list(&[("cpu", "0.01")]),
                ..Default::default()
            },
            // cpu: 2000 + 100 (the 10m init container ran before them) + 10m overhead;
            // memory: 1e9 + 64Mi.
            2110,
            1_000_000_000 + (64 << 20),
        ),
    ]
}

#[test]
fn the_hubs_demand_and_the_agents_requested_agree_on_init_containers_sidecars_and_limits() {
    for (what, spec, cpu_millis, memory_bytes) in specs() {
        let deployment = DeploymentSpec {
            template: PodTemplateSpec {
                spec: Some(spec.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let demand = nave_hub::placement::inputs::demand(&deployment);
        let reported = nave_agent::capacity::pod_requests(&Pod {
            spec: Some(spec),
            ..Default::default()
        });
        assert_eq!(
            (demand.cpu_millis, demand.memory_bytes),
            (cpu_millis, memory_bytes),
            "{what}: the hub's demand"
        );
        assert_eq!(
            (reported.cpu_millis, reported.memory_bytes),
            (cpu_millis, memory_bytes),
            "{what}: the agent's requested"
        );
        assert_eq!(reported.pods, 1, "{what}: one pod slot");
    }
}
