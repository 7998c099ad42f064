//! From the hub's objects (WorkloadClusters, the store's cluster records, agents' capacity
//! models, a MultiClusterDeployment's spec) to the placement engine's inputs. Pure functions.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DeploymentSpec;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as K8sLabelSelector;
use nave_api::wire;
use nave_api::{ClusterTaintEffect, Placement, PlacementPolicy, WorkloadCluster};
use nave_policies::{
    Bursting, Capacity, CapacityModel, Cluster, ClusterTaint, ClusterToleration, Coordinates, Demand,
    LabelSelector, LabelSelectorOperator, LabelSelectorRequirement, Node, NodeGroup, NodeSelector,
    NodeSelectorOperator, NodeSelectorRequirement, NodeSelectorTerm, Origin, Policy, REGION_LABEL, Resources,
    Strategy, Taint, TaintEffect, Toleration, TolerationOperator, ZONE_LABEL,
};
use serde::Deserialize;

use crate::store::ClusterRecord;

/// The capacity a record's model (as stored) gives; `Unknown` without one or for one that cannot
/// be read. Read in place, without copying the JSON first.
pub fn record_capacity(model: Option<&serde_json::Value>) -> Capacity {
    model
        .and_then(|c| wire::CapacityModel::deserialize(c).ok())
        .map_or(Capacity::Unknown, |m| Capacity::Known(capacity_model(&m)))
}

/// A placement cluster from the store's record (agent-reported capacity, last heartbeat) and the
/// WorkloadCluster object (labels, cordon, burst-only), either of which may be missing, with the
/// record's capacity model as [`record_capacity`] reads it.
pub fn fleet_cluster(
    name: &str,
    record: Option<&ClusterRecord>,
    object: Option<&WorkloadCluster>,
    now: jiff::Timestamp,
    grace: Duration,
    capacity: Capacity,
) -> Cluster {
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
    cluster.unaccepted = record.is_some_and(|r| !r.accepted);
    cluster.kubernetes_minor = record
        .and_then(|r| r.kubernetes_version.as_deref())
        .and_then(kubernetes_minor);
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

/// The minor version in a Kubernetes version as the agents report it (`v1.32.3`, `1.27`,
/// `v1.31.2-eks-1234`): `32`.
pub fn kubernetes_minor(version: &str) -> Option<u32> {
    let mut parts = version.trim_start_matches('v').split('.');
    if parts.next()? != "1" {
        return None;
    }
    let minor = parts.next()?;
    let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// When each cluster taint without a `timeAdded` was first seen, by cluster, key and effect:
/// its tolerations count from then. Kept in memory, so after a hub restart they count again
/// from the start (replicas stay longer, never shorter).
#[derive(Debug, Default)]
pub struct TaintsSeen(BTreeMap<(String, String, ClusterTaintEffect), jiff::Timestamp>);

impl TaintsSeen {
    /// Forgets the taints no WorkloadCluster of `objects` carries any more.
    pub fn keep_only<O: std::borrow::Borrow<WorkloadCluster>>(&mut self, objects: &BTreeMap<String, O>) {
        self.0.retain(|(cluster, key, effect), _| {
            objects.get(cluster).is_some_and(|o| {
                o.borrow()
                    .spec
                    .taints
                    .iter()
                    .any(|t| &t.key == key && t.effect == *effect)
            })
        });
    }
}

/// The engine's taints of a cluster, each with its age: from its `timeAdded`, else from when
/// `seen` first saw it.
pub fn cluster_taints(
    name: &str,
    object: Option<&WorkloadCluster>,
    now: jiff::Timestamp,
    seen: &mut TaintsSeen,
) -> Vec<ClusterTaint> {
    let Some(object) = object else {
        return Vec::new();
    };
    let age = |added: jiff::Timestamp| {
        // A time in the future (a clock ahead) counts as just added.
        if added > now {
            Duration::ZERO
        } else {
            now.duration_since(added).unsigned_abs()
        }
    };
    // Being deleted: everything moves away, as from a drain, since the deletion.
    let removing = object
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|at| ClusterTaint {
            taint: Taint::new(
                nave_api::REMOVING_TAINT_KEY.to_owned(),
                String::new(),
                TaintEffect::NoExecute,
            ),
            age: age(at.0),
        });
    object
        .spec
        .taints
        .iter()
        .map(|t| {
            let added = match &t.time_added {
                Some(time) => time.0,
                None => *seen
                    .0
                    .entry((name.to_owned(), t.key.clone(), t.effect))
                    .or_insert(now),
            };
            ClusterTaint {
                taint: Taint::new(
                    t.key.clone(),
                    t.value.clone().unwrap_or_default(),
                    taint_effect(t.effect),
                ),
                age: age(added),
            }
        })
        .chain(removing)
        .collect()
}

fn taint_effect(effect: ClusterTaintEffect) -> TaintEffect {
    match effect {
        ClusterTaintEffect::NoSchedule => TaintEffect::NoSchedule,
        ClusterTaintEffect::NoExecute => TaintEffect::NoExecute,
    }
}

/// The engine's tolerations of a placement's `tolerations`.
pub(crate) fn cluster_tolerations(placement: &Placement) -> Vec<ClusterToleration> {
    placement
        .tolerations
        .iter()
        .map(|t| ClusterToleration {
            toleration: Toleration {
                key: t.key.clone().unwrap_or_default(),
                operator: match t.operator.unwrap_or_default() {
                    nave_api::TolerationOperator::Equal => TolerationOperator::Equal,
                    nave_api::TolerationOperator::Exists => TolerationOperator::Exists,
                },
                value: t.value.clone().unwrap_or_default(),
                effect: t.effect.map(taint_effect),
            },
            // Negative seconds are refused by the schema; one that got through evicts at once.
            seconds: t
                .toleration_seconds
                .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0))),
        })
        .collect()
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

/// The per-replica demand of a pod, counted as the scheduler and the agents count it
/// ([`nave_resources::pod_requests`]): the containers plus sidecars, or the init peak when larger,
/// a limit standing in for a missing request, plus the pod overhead.
pub fn demand(spec: &DeploymentSpec) -> Demand {
    pod_demand(&spec.template.spec.clone().unwrap_or_default())
}

/// What one pod of this spec takes and needs of a node.
pub fn pod_demand(pod: &PodSpec) -> Demand {
    let requests = nave_resources::pod_requests(pod);
    Demand {
        cpu_millis: requests.cpu_millis(),
        memory_bytes: requests.memory_bytes(),
        node_selector: pod.node_selector.clone().unwrap_or_default(),
        node_affinity: node_affinity(pod),
        tolerations: tolerations(pod),
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
        PlacementPolicy::Everywhere => Strategy::Everywhere,
        // The caller puts in the workload's traffic (see `super::traffic::TrafficView::of`).
        PlacementPolicy::Traffic => Strategy::Traffic(nave_policies::Traffic::default()),
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
        tolerations: cluster_tolerations(placement),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minor_version_is_read_as_agents_report_it() {
        for (version, minor) in [
            ("v1.32.3", Some(32)),
            ("1.27", Some(27)),
            ("v1.31.2-eks-1234", Some(31)),
            ("v1.30+k3s1", Some(30)),
            ("v2.0.0", None),
            ("garbage", None),
            ("", None),
        ] {
            assert_eq!(kubernetes_minor(version), minor, "{version}");
        }
    }

    #[test]
    fn taints_age_from_time_added_else_from_first_seen_which_is_forgotten_with_the_taint() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use nave_api::ClusterTaint as Spec;

        let taint = |key: &str, added: Option<jiff::Timestamp>| Spec {
            key: key.to_owned(),
            value: None,
            effect: ClusterTaintEffect::NoExecute,
            time_added: added.map(Time),
        };
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let later = |secs: i64| t0.checked_add(jiff::SignedDuration::from_secs(secs)).unwrap();
        let mut object = WorkloadCluster::new("eu-1", Default::default());
        object.spec.taints = vec![taint("stamped", Some(t0)), taint("bare", None)];
        let mut seen = TaintsSeen::default();
        let ages = |object: &WorkloadCluster, now, seen: &mut TaintsSeen| -> Vec<u64> {
            cluster_taints("eu-1", Some(object), now, seen)
                .iter()
                .map(|t| t.age.as_secs())
                .collect()
        };
        assert_eq!(
            ages(&object, later(30), &mut seen),
            [30, 0],
            "bare: first seen now"
        );
        assert_eq!(
            ages(&object, later(90), &mut seen),
            [90, 60],
            "bare: counted from first seen"
        );
        let objects = BTreeMap::from([("eu-1".to_owned(), object.clone())]);
        seen.keep_only(&objects);
        assert_eq!(
            ages(&object, later(100), &mut seen),
            [100, 70],
            "kept while the taint stays"
        );
        object.spec.taints.pop();
        seen.keep_only(&BTreeMap::from([("eu-1".to_owned(), object.clone())]));
        object.spec.taints.push(taint("bare", None));
        assert_eq!(
            ages(&object, later(120), &mut seen),
            [120, 0],
            "a taint added again starts again"
        );
        object.spec.taints[0].time_added = Some(Time(later(500)));
        assert_eq!(
            ages(&object, later(120), &mut seen)[0],
            0,
            "a time ahead counts as just added"
        );
    }

    #[test]
    fn demand_counts_sidecars_init_peaks_limits_and_overhead() {
        use k8s_openapi::api::core::v1::{Container, PodTemplateSpec, ResourceRequirements};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

        let container = |name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]| {
            let list = |items: &[(&str, &str)]| {
                let map: BTreeMap<String, Quantity> = items
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                    .collect();
                (!map.is_empty()).then_some(map)
            };
            Container {
                name: name.into(),
                resources: Some(ResourceRequirements {
                    requests: list(requests),
                    limits: list(limits),
                    ..Default::default()
                }),
                ..Default::default()
            }
        };
        let mut sidecar = container("proxy", &[("cpu", "100m"), ("memory", "64Mi")], &[]);
        sidecar.restart_policy = Some("Always".into());
        let spec = DeploymentSpec {
            template: PodTemplateSpec {
                spec: Some(PodSpec {
                    init_containers: Some(vec![
                        sidecar,
                        container("migrate", &[], &[("cpu", "1.5"), ("memory", "128Mi")]),
                    ]),
                    containers: vec![container("app", &[], &[("cpu", "250m"), ("memory", "0.5Gi")])],
                    overhead: Some(BTreeMap::from([("memory".to_owned(), Quantity("1Mi".into()))])),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let d = demand(&spec);
        // cpu: the init container next to the sidecar started before it (1500m + 100m) beats the
        // app with the sidecar (250m + 100m); memory: 512Mi + 64Mi beats 128Mi + 64Mi; + 1Mi.
        assert_eq!(d.cpu_millis, 1600);
        assert_eq!(d.memory_bytes, 577 << 20);
    }
}
