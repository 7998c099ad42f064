//! From the hub's objects (WorkloadClusters, the store's cluster records, agents' capacity
//! models, a MultiClusterDeployment's spec) to the placement engine's inputs. Pure functions.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DeploymentSpec;
use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as K8sLabelSelector;
use nave_api::wire;
use nave_api::{Placement, PlacementPolicy, WorkloadCluster};
use nave_policies::{
    Bursting, Capacity, CapacityModel, Cluster, Coordinates, Demand, LabelSelector, LabelSelectorOperator,
    LabelSelectorRequirement, Node, NodeGroup, NodeSelector, NodeSelectorOperator, NodeSelectorRequirement,
    NodeSelectorTerm, Origin, Policy, REGION_LABEL, Resources, Strategy, Taint, TaintEffect, Toleration,
    TolerationOperator, ZONE_LABEL,
};

use crate::store::ClusterRecord;

/// A placement cluster from the store's record (agent-reported capacity, last heartbeat) and the
/// WorkloadCluster object (labels, cordon, burst-only), either of which may be missing.
pub fn fleet_cluster(
    name: &str,
    record: Option<&ClusterRecord>,
    object: Option<&WorkloadCluster>,
    now: jiff::Timestamp,
    grace: Duration,
) -> Cluster {
    let capacity = record
        .and_then(|r| r.capacity.clone())
        .and_then(|c| serde_json::from_value::<wire::CapacityModel>(c).ok())
        .map_or(Capacity::Unknown, |m| Capacity::Known(capacity_model(&m)));
    let mut cluster = Cluster::new(name, capacity);
    let mut labels = match (object, record) {
        (Some(o), _) => o.metadata.labels.clone().unwrap_or_default(),
        (None, Some(r)) => r.labels.clone(),
        (None, None) => BTreeMap::new(),
    };
    let region = object
        .and_then(|o| o.spec.region.clone())
        .or(record.and_then(|r| r.region.clone()));
    let zone = object
        .and_then(|o| o.spec.zone.clone())
        .or(record.and_then(|r| r.zone.clone()));
    if let Some(region) = region {
        labels.entry(REGION_LABEL.to_owned()).or_insert(region);
    }
    if let Some(zone) = zone {
        labels.entry(ZONE_LABEL.to_owned()).or_insert(zone);
    }
    cluster.labels = labels;
    // The WorkloadCluster is what admins edit; the record mirrors it when there is no object.
    cluster.unschedulable = object.map_or(record.is_some_and(|r| r.cordoned), |o| o.spec.unschedulable);
    cluster.burst_only = object.map_or(record.is_some_and(|r| r.burst_only), |o| o.spec.burst_only);
    cluster.ready = record
        .and_then(|r| r.last_heartbeat_at)
        .is_some_and(|at| now.duration_since(at).unsigned_abs() < grace);
    cluster.coordinates = object
        .and_then(|o| o.spec.coordinates)
        .map(|c| Coordinates::new(c.latitude, c.longitude))
        .or(record
            .and_then(|r| r.coordinates)
            .map(|c| Coordinates::new(c.latitude, c.longitude)));
    cluster
}

fn resources(r: wire::Resources) -> Resources {
    Resources::new(r.cpu_millis, r.memory_bytes, r.pods)
}

/// The engine's capacity model from an agent's: only nodes that take new pods count.
pub fn capacity_model(model: &wire::CapacityModel) -> CapacityModel {
    let groups = model
        .node_groups
        .iter()
        .map(|g| NodeGroup {
            labels: g.labels.clone(),
            taints: g
                .taints
                .iter()
                .map(|t| Taint {
                    key: t.key.clone(),
                    value: t.value.clone(),
                    effect: match t.effect {
                        wire::TaintEffect::NoSchedule => TaintEffect::NoSchedule,
                        wire::TaintEffect::PreferNoSchedule => TaintEffect::PreferNoSchedule,
                        wire::TaintEffect::NoExecute => TaintEffect::NoExecute,
                    },
                })
                .collect(),
            nodes: g
                .nodes
                .iter()
                .filter(|n| n.schedulable())
                .map(|n| Node::new(resources(n.allocatable), resources(n.requested)))
                .collect(),
        })
        .collect();
    CapacityModel { groups, usage: None }
}

/// CPU in millicores from a Kubernetes quantity (`500m`, `2`, `0.5`).
pub fn parse_cpu_millis(q: &str) -> Option<u64> {
    let q = q.trim();
    if let Some(m) = q.strip_suffix('m') {
        return m.parse::<f64>().ok().map(|v| v.ceil() as u64);
    }
    parse_scaled(q).map(|v| (v * 1000.0).ceil() as u64)
}

/// Bytes from a Kubernetes quantity (`128Mi`, `1G`, `1e9`, `1000`).
pub fn parse_bytes(q: &str) -> Option<u64> {
    parse_scaled(q.trim()).map(|v| v.ceil() as u64)
}

fn parse_scaled(q: &str) -> Option<f64> {
    const SUFFIXES: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1_048_576.0),
        ("Gi", 1_073_741_824.0),
        ("Ti", 1_099_511_627_776.0),
        ("Pi", 1_125_899_906_842_624.0),
        ("Ei", 1_152_921_504_606_846_976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
    ];
    for (suffix, factor) in SUFFIXES {
        if let Some(number) = q.strip_suffix(suffix) {
            return number.parse::<f64>().ok().map(|v| v * factor);
        }
    }
    if let Some(number) = q.strip_suffix('E') {
        return number.parse::<f64>().ok().map(|v| v * 1e18);
    }
    q.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0)
}

fn requests(r: Option<&ResourceRequirements>) -> (u64, u64) {
    let Some(requests) = r.and_then(|r| r.requests.as_ref()) else {
        return (0, 0);
    };
    let cpu = requests
        .get("cpu")
        .and_then(|q| parse_cpu_millis(&q.0))
        .unwrap_or(0);
    let mem = requests
        .get("memory")
        .and_then(|q| parse_bytes(&q.0))
        .unwrap_or(0);
    (cpu, mem)
}

/// The per-replica demand of a pod, counted as the scheduler does: the containers' requests
/// summed, or the largest init container's when larger, plus the pod overhead.
pub fn demand(spec: &DeploymentSpec) -> Demand {
    let pod = spec.template.spec.clone().unwrap_or_default();
    let (mut cpu, mut mem) = pod.containers.iter().fold((0, 0), |(c, m), container| {
        let (rc, rm) = requests(container.resources.as_ref());
        (c + rc, m + rm)
    });
    for init in pod.init_containers.iter().flatten() {
        let (rc, rm) = requests(init.resources.as_ref());
        cpu = cpu.max(rc);
        mem = mem.max(rm);
    }
    if let Some(overhead) = &pod.overhead {
        cpu += overhead
            .get("cpu")
            .and_then(|q| parse_cpu_millis(&q.0))
            .unwrap_or(0);
        mem += overhead
            .get("memory")
            .and_then(|q| parse_bytes(&q.0))
            .unwrap_or(0);
    }
    Demand {
        cpu_millis: cpu,
        memory_bytes: mem,
        node_selector: pod.node_selector.clone().unwrap_or_default(),
        node_affinity: node_affinity(&pod),
        tolerations: tolerations(&pod),
    }
}

fn node_affinity(pod: &PodSpec) -> Option<NodeSelector> {
    let required = pod
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?;
    let terms = required
        .node_selector_terms
        .iter()
        .map(|t| NodeSelectorTerm {
            match_expressions: t
                .match_expressions
                .iter()
                .flatten()
                .filter_map(|r| {
                    let operator = match r.operator.as_str() {
                        "In" => NodeSelectorOperator::In,
                        "NotIn" => NodeSelectorOperator::NotIn,
                        "Exists" => NodeSelectorOperator::Exists,
                        "DoesNotExist" => NodeSelectorOperator::DoesNotExist,
                        "Gt" => NodeSelectorOperator::Gt,
                        "Lt" => NodeSelectorOperator::Lt,
                        _ => return None,
                    };
                    Some(NodeSelectorRequirement {
                        key: r.key.clone(),
                        operator,
                        values: r.values.clone().unwrap_or_default(),
                    })
                })
                .collect(),
        })
        .collect();
    Some(NodeSelector { terms })
}

fn tolerations(pod: &PodSpec) -> Vec<Toleration> {
    pod.tolerations
        .iter()
        .flatten()
        .map(|t| Toleration {
            key: t.key.clone().unwrap_or_default(),
            operator: match t.operator.as_deref() {
                Some("Exists") => TolerationOperator::Exists,
                _ => TolerationOperator::Equal,
            },
            value: t.value.clone().unwrap_or_default(),
            effect: match t.effect.as_deref() {
                Some("NoSchedule") => Some(TaintEffect::NoSchedule),
                Some("PreferNoSchedule") => Some(TaintEffect::PreferNoSchedule),
                Some("NoExecute") => Some(TaintEffect::NoExecute),
                _ => None,
            },
        })
        .collect()
}

/// The engine's label selector from a Kubernetes one.
pub fn label_selector(s: &K8sLabelSelector) -> LabelSelector {
    LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: s
            .match_expressions
            .iter()
            .flatten()
            .map(|r| LabelSelectorRequirement {
                key: r.key.clone(),
                operator: match r.operator.as_str() {
                    "In" => LabelSelectorOperator::In,
                    "NotIn" => LabelSelectorOperator::NotIn,
                    "Exists" => LabelSelectorOperator::Exists,
                    _ => LabelSelectorOperator::DoesNotExist,
                },
                values: r.values.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

/// The engine's policy from `spec.placement`.
pub fn policy(placement: &Placement) -> Policy {
    let strategy = match placement.policy {
        PlacementPolicy::WorstFit => Strategy::WorstFit,
        PlacementPolicy::BestFit => Strategy::BestFit,
        PlacementPolicy::Spread => Strategy::Spread,
        PlacementPolicy::Proximity => {
            let origin = placement.proximity.as_ref().map(|p| &p.origin);
            let origin = match (
                origin.and_then(|o| o.cluster.clone()),
                origin.and_then(|o| o.coordinates),
            ) {
                (Some(cluster), _) => Origin::Cluster(cluster),
                (None, Some(c)) => Origin::Coordinates(Coordinates::new(c.latitude, c.longitude)),
                (None, None) => Origin::Region {
                    region: origin.and_then(|o| o.region.clone()).unwrap_or_default(),
                    zone: None,
                },
            };
            Strategy::Proximity(origin)
        }
    };
    let positive = |n: Option<i32>| n.and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0);
    Policy {
        strategy,
        clusters: placement.clusters.clone(),
        cluster_selector: placement.cluster_selector.as_ref().map(label_selector),
        max_clusters: positive(placement.max_clusters),
        min_clusters: positive(placement.min_clusters),
        weights: placement
            .weights
            .iter()
            .filter_map(|(k, v)| u32::try_from(*v).ok().map(|v| (k.clone(), v)))
            .collect(),
        bursting: placement
            .bursting
            .as_ref()
            .map_or_else(Bursting::default, |b| Bursting {
                threshold_percent: u32::try_from(b.threshold).ok(),
                targets: b.targets.as_ref().map(label_selector),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_as_the_scheduler_counts_them() {
        assert_eq!(parse_cpu_millis("500m"), Some(500));
        assert_eq!(parse_cpu_millis("2"), Some(2000));
        assert_eq!(parse_cpu_millis("0.25"), Some(250));
        assert_eq!(parse_bytes("128Mi"), Some(128 * 1024 * 1024));
        assert_eq!(parse_bytes("1G"), Some(1_000_000_000));
        assert_eq!(parse_bytes("1000"), Some(1000));
        assert_eq!(parse_bytes("lots"), None);
    }
}
