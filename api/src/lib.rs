//! Nave's custom resources, group `nave.dev`, version `v1alpha1`.
//!
//! These types are the contract between the people who write manifests and the hub that acts on
//! them. Nothing here does IO: the hub and the agents read and write these objects through the
//! Kubernetes API, the placement maths lives in `nave-policies`.
//!
//! ```text
//!   kubectl apply ──► MultiClusterDeployment ──┐
//!                     MultiClusterService ─────┤  (management cluster)
//!   agent register ─► WorkloadCluster ─────────┤
//!                                              ▼
//!                                  nave-hub: placement, work per cluster
//!                                              │ pulled by
//!                                              ▼
//!                            nave-agent in each workload cluster:
//!                            Deployment + Service + ConfigMaps/Secrets
//! ```
//!
//! - [`MultiClusterDeployment`] (`mcd`): a Deployment whose replicas are divided among clusters.
//! - [`MultiClusterService`] (`mcsvc`): a Service created in every cluster that runs a workload.
//! - [`WorkloadCluster`] (`wcl`): one workload cluster, its labels, capacity and health.
//!
//! The CRD manifests in `crds/` are generated from these types by [`CRDGEN_COMMAND`]; a test fails
//! when they are stale. The pod template of a `MultiClusterDeployment` is kept as raw JSON with a
//! compact schema (see [`DeploymentTemplate`]): the full `DeploymentSpec` schema would make the CRD
//! too large for client-side `kubectl apply`, and a bad template must not break a watcher's list.
#![forbid(unsafe_code)]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub mod cluster;
pub mod conditions;
pub mod deployment;
mod error;
pub mod placement;
pub mod service;
pub mod template;
#[cfg(test)]
mod tests;
pub mod wire;

pub use cluster::{
    ClusterCapacity, ResourceAmounts, WorkloadCluster, WorkloadClusterSpec, WorkloadClusterStatus,
};
pub use deployment::{
    ClusterOverride, ClusterPlacementStatus, Dependencies, DependencyKind, DependencyRef, JsonPatchOperation,
    MultiClusterDeployment, MultiClusterDeploymentSpec, MultiClusterDeploymentStatus, PatchOp,
};
pub use error::Error;
pub use placement::{
    Bursting, Coordinates, Placement, PlacementPolicy, Proximity, ProximityOrigin, Rescheduling,
};
pub use service::{
    ClusterServiceStatus, MultiClusterService, MultiClusterServiceSpec, MultiClusterServiceStatus,
    ServicePlacement, ServicePort, ServiceProtocol, ServiceType, SessionAffinity, TrafficPolicy,
};
pub use template::{DeploymentTemplate, TemplateMetadata};

/// The API group of every Nave resource.
pub const GROUP: &str = "nave.dev";
/// The API version of the resources in this crate.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of the resources in this crate.
pub const API_VERSION: &str = "nave.dev/v1alpha1";
/// Category shared by all Nave resources: `kubectl get nave` lists them all.
pub const CATEGORY: &str = "nave";

/// Server-side apply field manager of the hub (management cluster writes).
pub const HUB_FIELD_MANAGER: &str = "nave-hub";
/// Server-side apply field manager of the agent (workload cluster writes).
pub const AGENT_FIELD_MANAGER: &str = "nave-agent";

/// The command that regenerates the files in `crds/` from these types.
pub const CRDGEN_COMMAND: &str = "cargo run -p nave-api --bin crdgen";

/// Every CustomResourceDefinition of this crate, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        MultiClusterDeployment::crd(),
        MultiClusterService::crd(),
        WorkloadCluster::crd(),
    ]
}

/// A CRD as YAML, ready for `kubectl apply -f -`.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> String {
    serde_saphyr::to_string(crd).expect("a CustomResourceDefinition always serializes to YAML")
}

/// File name of a CRD in `crds/`: `<plural>.<group>.yaml`, e.g. `multiclusterdeployments.nave.dev.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.{}.yaml", crd.spec.names.plural, crd.spec.group)
}

/// Contents of a CRD's file in `crds/`: a header saying how it was generated, then [`crd_yaml`].
pub fn crd_file_contents(crd: &CustomResourceDefinition) -> String {
    format!(
        "# Generated from the Rust types in the nave-api crate; do not edit.\n# Regenerate with: {CRDGEN_COMMAND}\n---\n{}",
        crd_yaml(crd)
    )
}

/// Serde default for flags that are on unless turned off.
pub(crate) fn default_true() -> bool {
    true
}
