//! Pods and Nodes as the agent parses them from the API server: only the fields its summaries
//! read ([`crate::capacity::PodSummary`], [`crate::capacity::NodeSummary`]).
//!
//! Reduced after parsing, a pod was still built whole first: its managed fields, environment,
//! probes, volumes and statuses allocated and dropped again for every watch event, and a list
//! page of 500 whole pods took tens of megabytes, which the allocator kept after the agent's
//! first relist in a large cluster. Parsed into these types, everything else is skipped as it is
//! read. Each type holds the Kubernetes object with only those fields set, so the code that reads
//! pods and nodes is the same for both.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateWaiting, ContainerStatus, Node, NodeCondition, NodeSpec,
    NodeStatus, Pod, PodCondition, PodSpec, PodStatus, ResourceRequirements, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use serde::{Deserialize, Deserializer};

#[cfg(test)]
pub(crate) mod tests;

/// A Pod with only what the agent reads of it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimPod(pub Pod);

/// A Node with only what the agent reads of it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimNode(pub Node);

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    deletion_timestamp: Option<Time>,
}

impl From<Meta> for ObjectMeta {
    fn from(m: Meta) -> Self {
        ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            labels: m.labels,
            deletion_timestamp: m.deletion_timestamp,
            ..ObjectMeta::default()
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodParts {
    metadata: Option<Meta>,
    spec: Option<PodSpecParts>,
    status: Option<PodStatusParts>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpecParts {
    node_name: Option<String>,
    containers: Option<Vec<ContainerParts>>,
    init_containers: Option<Vec<ContainerParts>>,
    overhead: Option<BTreeMap<String, Quantity>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerParts {
    name: Option<String>,
    resources: Option<ResourceRequirements>,
    restart_policy: Option<String>,
}

impl From<ContainerParts> for Container {
    fn from(c: ContainerParts) -> Self {
        Container {
            name: c.name.unwrap_or_default(),
            resources: c.resources,
            restart_policy: c.restart_policy,
            ..Container::default()
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodStatusParts {
    phase: Option<String>,
    conditions: Option<Vec<ConditionParts>>,
    container_statuses: Option<Vec<ContainerStatusParts>>,
    init_container_statuses: Option<Vec<ContainerStatusParts>>,
}

/// Of a container's status, only why it waits.
#[derive(Deserialize)]
struct ContainerStatusParts {
    state: Option<StateParts>,
}

#[derive(Deserialize)]
struct StateParts {
    waiting: Option<WaitingParts>,
}

#[derive(Deserialize)]
struct WaitingParts {
    reason: Option<String>,
}

fn container_statuses(list: Option<Vec<ContainerStatusParts>>) -> Option<Vec<ContainerStatus>> {
    list.map(|list| {
        list.into_iter()
            .map(|c| ContainerStatus {
                state: c.state.map(|s| ContainerState {
                    waiting: s.waiting.map(|w| ContainerStateWaiting {
                        reason: w.reason,
                        message: None,
                    }),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            })
            .collect()
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConditionParts {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    reason: Option<String>,
    message: Option<String>,
    last_transition_time: Option<Time>,
}

impl<'de> Deserialize<'de> for SlimPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let parts = PodParts::deserialize(deserializer)?;
        let containers = |list: Option<Vec<ContainerParts>>| -> Vec<Container> {
            list.into_iter().flatten().map(Container::from).collect()
        };
        Ok(SlimPod(Pod {
            metadata: parts.metadata.unwrap_or_default().into(),
            spec: parts.spec.map(|s| PodSpec {
                node_name: s.node_name,
                containers: containers(s.containers),
                init_containers: s.init_containers.map(|list| containers(Some(list))),
                overhead: s.overhead,
                ..PodSpec::default()
            }),
            status: parts.status.map(|s| PodStatus {
                phase: s.phase,
                conditions: s.conditions.map(|list| {
                    list.into_iter()
                        .map(|c| PodCondition {
                            type_: c.type_,
                            status: c.status,
                            reason: c.reason,
                            message: c.message,
                            last_transition_time: c.last_transition_time,
                            ..PodCondition::default()
                        })
                        .collect()
                }),
                container_statuses: container_statuses(s.container_statuses),
                init_container_statuses: container_statuses(s.init_container_statuses),
                ..PodStatus::default()
            }),
        }))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeParts {
    metadata: Option<Meta>,
    spec: Option<NodeSpecParts>,
    status: Option<NodeStatusParts>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeSpecParts {
    taints: Option<Vec<Taint>>,
    unschedulable: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeStatusParts {
    allocatable: Option<BTreeMap<String, Quantity>>,
    conditions: Option<Vec<NodeConditionParts>>,
}

#[derive(Deserialize)]
struct NodeConditionParts {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

impl<'de> Deserialize<'de> for SlimNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let parts = NodeParts::deserialize(deserializer)?;
        Ok(SlimNode(Node {
            metadata: parts.metadata.unwrap_or_default().into(),
            spec: parts.spec.map(|s| NodeSpec {
                taints: s.taints,
                unschedulable: s.unschedulable,
                ..NodeSpec::default()
            }),
            status: parts.status.map(|s| NodeStatus {
                allocatable: s.allocatable,
                conditions: s.conditions.map(|list| {
                    list.into_iter()
                        .map(|c| NodeCondition {
                            type_: c.type_,
                            status: c.status,
                            ..NodeCondition::default()
                        })
                        .collect()
                }),
                ..NodeStatus::default()
            }),
        }))
    }
}

/// The API resource of `$slim` is that of `$whole`; its metadata is the inner object's.
macro_rules! same_resource {
    ($slim:ty, $whole:ty) => {
        impl Resource for $slim {
            type DynamicType = ();
            type Scope = <$whole as Resource>::Scope;

            fn kind(dt: &()) -> Cow<'_, str> {
                <$whole as Resource>::kind(dt)
            }
            fn group(dt: &()) -> Cow<'_, str> {
                <$whole as Resource>::group(dt)
            }
            fn version(dt: &()) -> Cow<'_, str> {
                <$whole as Resource>::version(dt)
            }
            fn api_version(dt: &()) -> Cow<'_, str> {
                <$whole as Resource>::api_version(dt)
            }
            fn plural(dt: &()) -> Cow<'_, str> {
                <$whole as Resource>::plural(dt)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.0.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.0.metadata
            }
        }
    };
}

same_resource!(SlimPod, Pod);
same_resource!(SlimNode, Node);
