//! `MultiClusterService`: a Service created in every cluster that runs a workload, in the
//! clusters that call it, and exported through the multi-cluster services API when asked.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{ServicePort as K8sServicePort, ServiceSpec},
    apimachinery::pkg::{
        apis::meta::v1::Condition, apis::meta::v1::LabelSelector, util::intstr::IntOrString,
    },
};
use kube::{
    CustomResource,
    core::{Selector, SelectorExt},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::TemplateMetadata;

/// Annotation that makes a Service global in a Cilium ClusterMesh.
pub const CILIUM_GLOBAL_ANNOTATION: &str = "service.cilium.io/global";
/// The older spelling of [`CILIUM_GLOBAL_ANNOTATION`], for older Cilium releases.
pub const CILIUM_LEGACY_GLOBAL_ANNOTATION: &str = "io.cilium/global-service";
/// `apiVersion` of the Kubernetes multi-cluster services API's ServiceExport (KEP-1645).
pub const SERVICE_EXPORT_API_VERSION: &str = "multicluster.x-k8s.io/v1alpha1";
/// `kind` of the multi-cluster services API's export of a Service.
pub const SERVICE_EXPORT_KIND: &str = "ServiceExport";

/// Desired state of a MultiClusterService.
// Printer columns repeat `type_ = ...` and `priority = ...` inside `printcolumn(...)`, which the
// lint mistakes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "nave.dev",
    version = "v1alpha1",
    kind = "MultiClusterService",
    namespaced,
    shortname = "mcsvc",
    category = "nave",
    status = "MultiClusterServiceStatus",
    derive = "PartialEq",
    doc = "A Service that Nave creates in every cluster running a MultiClusterDeployment \
           (`spec.deployment`), and in the clusters of `spec.placement` that call it without \
           running it. `spec.global: true` makes it a Cilium ClusterMesh global service; \
           `spec.serviceExport: true` exports it through the multi-cluster services API \
           (`ServiceExport`).",
    printcolumn(
        name = "Type",
        type_ = "string",
        description = "Service type",
        json_path = ".spec.type"
    ),
    printcolumn(
        name = "Deployment",
        type_ = "string",
        description = "The MultiClusterDeployment it follows",
        json_path = ".spec.deployment"
    ),
    printcolumn(
        name = "Global",
        type_ = "boolean",
        description = "Cilium global service",
        json_path = ".spec.global"
    ),
    printcolumn(
        name = "Clusters",
        type_ = "integer",
        description = "Clusters with the Service",
        json_path = ".status.clusterCount"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        description = "The Service exists in every cluster",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.deployment)",
        "message": "deployment is required: a MultiClusterService follows a MultiClusterDeployment (placement adds the clusters that call it); a Service of its own, not following one, is not supported",
        "fieldPath": ".deployment",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "(has(self.headless) && self.headless) || (has(self.ports) && size(self.ports) > 0)",
        "message": "at least one port is required unless the service is headless",
        "fieldPath": ".ports",
        "reason": "FieldValueRequired"
    }
]))]
pub struct MultiClusterServiceSpec {
    /// Name of a MultiClusterDeployment in this namespace (required): the Service is created in
    /// every cluster that runs its replicas, and follows them when they move. Example: `web`.
    // Optional here only to read objects written before it was required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub deployment: Option<String>,

    /// More clusters to create the Service in: those whose workloads call it without running
    /// it (a frontend in one cluster, its backend in others). There the Service has no local
    /// pods; with `global`, Cilium ClusterMesh sends its traffic to the pods of the clusters
    /// that run them, and a mesh that resolves names through the local Service (Istio
    /// multi-cluster) needs it there too. Registered clusters only; a cluster being removed
    /// loses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<ServicePlacement>,

    /// Also create a `ServiceExport` (`multicluster.x-k8s.io/v1alpha1`, the Kubernetes
    /// multi-cluster services API) beside the Service in every cluster that runs the workload,
    /// so the MCS implementation installed there (Submariner Lighthouse, GKE multi-cluster
    /// services, Cilium's MCS API support) imports it across the ClusterSet as
    /// `<name>.<namespace>.svc.clusterset.local`. The non-Cilium way to reach pods in other
    /// clusters. A cluster without the API reports the export as not applied. Default `false`.
    #[serde(default)]
    pub service_export: bool,

    /// Labels and annotations of the Service created in each cluster.
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,

    /// `ClusterIP` (default), `NodePort` or `LoadBalancer`, as for a Service.
    #[serde(default, rename = "type")]
    pub type_: ServiceType,

    /// Pod labels the Service routes to. Defaults to the `matchLabels` of the followed
    /// MultiClusterDeployment's selector. Example: `{app: web}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub selector: BTreeMap<String, String>,

    /// The ports the Service exposes; at least one unless `headless`, at most 100.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "rule": "size(self) <= 1 || self.all(p, has(p.name) && size(p.name) > 0)",
            "message": "when there is more than one port, every port needs a name"
        }
    ]))]
    pub ports: Vec<ServicePort>,

    /// A headless Service (`clusterIP: None`): DNS returns the pod addresses. Default `false`.
    #[serde(default)]
    pub headless: bool,

    /// `None` (default) or `ClientIP`: send a client's connections to the same pod.
    #[serde(default)]
    pub session_affinity: SessionAffinity,

    /// Publish addresses of pods that are not ready (for peer discovery). Default `false`.
    #[serde(default)]
    pub publish_not_ready_addresses: bool,

    /// `Cluster` (default) or `Local`: for NodePort and LoadBalancer Services, whether external
    /// traffic may be sent to pods on other nodes. Unset leaves the cluster's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<TrafficPolicy>,

    /// `Cluster` (default) or `Local`: whether traffic from inside the cluster may be sent to pods
    /// on other nodes. Unset leaves the cluster's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<TrafficPolicy>,

    /// Make it a Cilium ClusterMesh global service: the annotations `service.cilium.io/global`
    /// and `io.cilium/global-service` are set to `"true"`, so each cluster's Service load-balances
    /// over the pods of all clusters. Default `false`.
    #[serde(default)]
    pub global: bool,
}

/// Clusters that call a Service without running its workload.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.clusters) && size(self.clusters) > 0) || has(self.clusterSelector)",
        "message": "set clusters or clusterSelector",
        "reason": "FieldValueRequired"
    }
]))]
pub struct ServicePlacement {
    /// Names of WorkloadClusters. Example: `[eu-1, us-1]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,

    /// WorkloadClusters whose labels match this selector (in addition to `clusters`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
}

impl ServicePlacement {
    /// Whether the cluster with this name and these labels is one of these clusters.
    pub fn selects(&self, cluster: &str, labels: &BTreeMap<String, String>) -> Result<bool, crate::Error> {
        if self.clusters.iter().any(|name| name == cluster) {
            return Ok(true);
        }
        let Some(selector) = &self.cluster_selector else {
            return Ok(false);
        };
        let selector =
            Selector::try_from(selector.clone()).map_err(|source| crate::Error::ParseSelector {
                path: "spec.placement.clusterSelector".to_owned(),
                source,
            })?;
        Ok(selector.matches(labels))
    }
}

/// How a Service is exposed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ServiceType {
    /// A virtual IP inside each cluster.
    #[default]
    ClusterIP,
    /// A port on every node of each cluster, plus a cluster IP.
    NodePort,
    /// An external load balancer in each cluster, plus node port and cluster IP.
    LoadBalancer,
}

impl ServiceType {
    /// The name as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClusterIP => "ClusterIP",
            Self::NodePort => "NodePort",
            Self::LoadBalancer => "LoadBalancer",
        }
    }
}

/// Session affinity of a Service.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum SessionAffinity {
    /// Each connection may go to any pod.
    #[default]
    None,
    /// A client's connections go to the same pod.
    #[serde(rename = "ClientIP")]
    ClientIp,
}

/// Traffic policy of a Service: `Cluster` lets traffic go to pods on any node, `Local` only to
/// pods on the node that received it.
// The variants have no doc comments on purpose: for an `Option` of an enum with documented
// variants, the generated schema loses the field's own description.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum TrafficPolicy {
    Cluster,
    Local,
}

/// A port of a Service.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    /// Name of the port, required when there are several. Example: `http`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub name: Option<String>,

    /// `TCP` (default), `UDP` or `SCTP`.
    #[serde(default)]
    pub protocol: ServiceProtocol,

    /// The port the Service listens on. Example: `80`.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,

    /// The pod port, by number (`8080`) or by container port name (`http`). Defaults to `port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_port: Option<IntOrString>,

    /// For NodePort and LoadBalancer Services: the node port, the same in every cluster. Unset
    /// lets each cluster choose one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub node_port: Option<i32>,

    /// Application protocol, a hint for proxies. Example: `http`, `kubernetes.io/h2c`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
}

/// Transport protocol of a port.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum ServiceProtocol {
    /// TCP.
    #[default]
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl ServiceProtocol {
    /// The name as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Udp => "UDP",
            Self::Sctp => "SCTP",
        }
    }
}

impl MultiClusterServiceSpec {
    /// The annotations of the Service in each cluster: `metadata.annotations`, plus the Cilium
    /// global-service annotations when `global` is set.
    pub fn service_annotations(&self) -> BTreeMap<String, String> {
        let mut annotations = self.metadata.annotations.clone();
        if self.global {
            for key in [CILIUM_GLOBAL_ANNOTATION, CILIUM_LEGACY_GLOBAL_ANNOTATION] {
                annotations.insert(key.to_owned(), "true".to_owned());
            }
        }
        annotations
    }

    /// The ServiceSpec to create in each cluster. `default_selector` is used when `selector` is
    /// empty (the followed MultiClusterDeployment's pod selector).
    pub fn service_spec(&self, default_selector: &BTreeMap<String, String>) -> ServiceSpec {
        let selector = if self.selector.is_empty() {
            default_selector
        } else {
            &self.selector
        };
        let ports = self
            .ports
            .iter()
            .map(|p| K8sServicePort {
                name: p.name.clone(),
                protocol: Some(p.protocol.as_str().to_owned()),
                port: p.port,
                target_port: p.target_port.clone(),
                node_port: p.node_port,
                app_protocol: p.app_protocol.clone(),
            })
            .collect::<Vec<_>>();
        let policy = |p: TrafficPolicy| match p {
            TrafficPolicy::Cluster => "Cluster".to_owned(),
            TrafficPolicy::Local => "Local".to_owned(),
        };
        ServiceSpec {
            type_: Some(self.type_.as_str().to_owned()),
            selector: (!selector.is_empty()).then(|| selector.clone()),
            ports: (!ports.is_empty()).then_some(ports),
            cluster_ip: self.headless.then(|| "None".to_owned()),
            session_affinity: Some(
                match self.session_affinity {
                    SessionAffinity::None => "None",
                    SessionAffinity::ClientIp => "ClientIP",
                }
                .to_owned(),
            ),
            publish_not_ready_addresses: self.publish_not_ready_addresses.then_some(true),
            external_traffic_policy: self.external_traffic_policy.map(policy),
            internal_traffic_policy: self.internal_traffic_policy.map(policy),
            ..ServiceSpec::default()
        }
    }
}

/// Observed state of a MultiClusterService, written by the hub.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterServiceStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Number of clusters where the Service should exist.
    #[serde(default)]
    pub cluster_count: i32,

    /// The Service in each cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub clusters: Vec<ClusterServiceStatus>,

    /// `Ready`: the Service exists in every cluster listed (with its ServiceExport where asked);
    /// `False` names the clusters missing it and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The Service in one cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterServiceStatus {
    /// WorkloadCluster name.
    pub name: String,

    /// Whether the Service exists there as desired (and its ServiceExport, when asked for).
    #[serde(default)]
    pub ready: bool,

    /// Whether the workload runs there; `false` for a cluster of `spec.placement` that only
    /// calls it.
    #[serde(default)]
    pub runs_workload: bool,

    /// Why the Service (or its ServiceExport) is not applied there, as its agent reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl MultiClusterServiceStatus {
    /// The condition of this type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        crate::conditions::find(&self.conditions, type_)
    }
}
