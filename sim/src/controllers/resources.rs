//! Node and pod resources for the scheduler, the kubelet and the metrics. Pod requests and limits
//! are counted by `nave_resources`, as kube-scheduler counts them; this adds what only the
//! emulator needs.

use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};
use nave_resources::Resources;

/// Whether a pod has finished (its resources are free again).
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// A node's allocatable resources (capacity when allocatable is absent).
pub fn node_allocatable(node: &Node) -> Resources {
    let status = node.status.as_ref();
    match status.and_then(|s| s.allocatable.as_ref()) {
        Some(a) => Resources::from_list(Some(a)),
        None => Resources::from_list(status.and_then(|s| s.capacity.as_ref())),
    }
}

/// A node's capacity (allocatable when capacity is absent).
pub fn node_capacity(node: &Node) -> Resources {
    let status = node.status.as_ref();
    match status.and_then(|s| s.capacity.as_ref()) {
        Some(c) => Resources::from_list(Some(c)),
        None => Resources::from_list(status.and_then(|s| s.allocatable.as_ref())),
    }
}

/// The pod's QoS class (upstream `qos.GetPodQOS`, simplified to cpu and memory).
pub fn qos_class(spec: &PodSpec) -> &'static str {
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        let res = c.resources.as_ref();
        let requests = Resources::from_list(res.and_then(|r| r.requests.as_ref()));
        let limits = Resources::from_list(res.and_then(|r| r.limits.as_ref()));
        for name in ["cpu", "memory"] {
            let (r, l) = (requests.get(name), limits.get(name));
            if r.is_some_and(|v| v != 0) || l.is_some_and(|v| v != 0) {
                any = true;
            }
            match (r, l) {
                (_, None) => guaranteed = false,
                (Some(r), Some(l)) if r != l => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    fn container(name: &str, requests: &[(&str, &str)]) -> Container {
        Container {
            name: name.into(),
            image: Some("nginx".into()),
            resources: Some(ResourceRequirements {
                requests: Some(
                    requests
                        .iter()
                        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn qos_classes() {
        let best = PodSpec {
            containers: vec![Container {
                name: "a".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(qos_class(&best), "BestEffort");
        let burst = PodSpec {
            containers: vec![container("a", &[("cpu", "1")])],
            ..Default::default()
        };
        assert_eq!(qos_class(&burst), "Burstable");
        let mut g = container("a", &[("cpu", "1"), ("memory", "1Gi")]);
        if let Some(r) = g.resources.as_mut() {
            r.limits = r.requests.clone();
        }
        let guaranteed = PodSpec {
            containers: vec![g],
            ..Default::default()
        };
        assert_eq!(qos_class(&guaranteed), "Guaranteed");
    }
}
