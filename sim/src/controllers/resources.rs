//! Resource arithmetic shared by the scheduler, the kubelet and the metrics: quantities in
//! milli-units, effective pod requests, node allocatable.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Resource name -> amount in milli-units (`cpu: 100m` -> 100, `memory: 1Ki` -> 1_024_000).
pub type Resources = BTreeMap<String, i128>;

/// A quantity in milli-units; unparsable quantities count as zero (the server validates them, and
/// a controller must not fail on an odd object).
pub fn milli(q: &Quantity) -> i128 {
    nave_sim_core::quantity::parse_milli(&q.0).unwrap_or(0)
}

/// A map of quantities in milli-units.
pub fn milli_map(map: Option<&BTreeMap<String, Quantity>>) -> Resources {
    map.map(|m| m.iter().map(|(k, v)| (k.clone(), milli(v))).collect())
        .unwrap_or_default()
}

fn add(into: &mut Resources, from: &Resources) {
    for (k, v) in from {
        *into.entry(k.clone()).or_insert(0) += v;
    }
}

fn max_into(into: &mut Resources, from: &Resources) {
    for (k, v) in from {
        let e = into.entry(k.clone()).or_insert(0);
        *e = (*e).max(*v);
    }
}

/// A container's requests; as upstream, a limit without a request counts as the request.
pub fn container_requests(c: &Container) -> Resources {
    let res = c.resources.as_ref();
    let mut out = milli_map(res.and_then(|r| r.limits.as_ref()));
    for (k, v) in milli_map(res.and_then(|r| r.requests.as_ref())) {
        out.insert(k, v);
    }
    out
}

/// A container's limits.
pub fn container_limits(c: &Container) -> Resources {
    milli_map(c.resources.as_ref().and_then(|r| r.limits.as_ref()))
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The effective request of a pod, as the scheduler counts it: `max(Σ containers (+ sidecars),
/// max over init containers (+ sidecars started before them)) + overhead` (upstream
/// `resourcehelper.PodRequests`).
pub fn pod_requests(spec: &PodSpec) -> Resources {
    pod_effective(spec, container_requests)
}

/// The effective limits of a pod, computed like [`pod_requests`].
pub fn pod_limits(spec: &PodSpec) -> Resources {
    pod_effective(spec, container_limits)
}

fn pod_effective(spec: &PodSpec, of: fn(&Container) -> Resources) -> Resources {
    let mut reqs = Resources::new();
    for c in &spec.containers {
        add(&mut reqs, &of(c));
    }
    let mut sidecars = Resources::new();
    let mut init_max = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        let mut this = of(c);
        if is_sidecar(c) {
            add(&mut reqs, &this);
            add(&mut sidecars, &this);
            this = sidecars.clone();
        } else {
            add(&mut this, &sidecars);
        }
        max_into(&mut init_max, &this);
    }
    max_into(&mut reqs, &init_max);
    add(&mut reqs, &milli_map(spec.overhead.as_ref()));
    reqs.retain(|_, v| *v != 0);
    reqs
}

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
        Some(a) => milli_map(Some(a)),
        None => milli_map(status.and_then(|s| s.capacity.as_ref())),
    }
}

/// A node's capacity (allocatable when capacity is absent).
pub fn node_capacity(node: &Node) -> Resources {
    let status = node.status.as_ref();
    match status.and_then(|s| s.capacity.as_ref()) {
        Some(c) => milli_map(Some(c)),
        None => milli_map(status.and_then(|s| s.allocatable.as_ref())),
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
        let requests = milli_map(res.and_then(|r| r.requests.as_ref()));
        let limits = milli_map(res.and_then(|r| r.limits.as_ref()));
        for name in ["cpu", "memory"] {
            let (r, l) = (requests.get(name).copied(), limits.get(name).copied());
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
    use super::*;

    use k8s_openapi::api::core::v1::ResourceRequirements;

    pub(crate) fn container(name: &str, requests: &[(&str, &str)]) -> Container {
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
    fn pod_request_is_the_max_of_containers_and_init_containers_plus_overhead() {
        let mut init = container("init", &[("cpu", "2")]);
        init.restart_policy = None;
        let mut sidecar = container("side", &[("cpu", "100m")]);
        sidecar.restart_policy = Some("Always".into());
        let spec = PodSpec {
            containers: vec![
                container("a", &[("cpu", "500m"), ("memory", "1Gi")]),
                container("b", &[("cpu", "250m")]),
            ],
            init_containers: Some(vec![sidecar, init]),
            overhead: Some([("cpu".to_string(), Quantity("10m".into()))].into()),
            ..Default::default()
        };
        let r = pod_requests(&spec);
        // init (2000) + sidecar started before it (100) beats containers (750) + sidecar (100).
        assert_eq!(r.get("cpu"), Some(&2110));
        assert_eq!(r.get("memory"), Some(&(1024 * 1024 * 1024 * 1000)));
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
