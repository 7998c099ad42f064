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
//! - [`MultiClusterResource`] (`mcr`): any object sent to the clusters a selector picks.
//! - [`MultiClusterJob`] (`mcj`): a batch Job whose completions are divided among clusters.
//! - [`WorkloadCluster`] (`wcl`): one workload cluster, its labels, capacity and health.
//!
//! The CRD manifests in `crds/` are generated from these types by [`CRDGEN_COMMAND`]; a test fails
//! when they are stale. The pod template of a `MultiClusterDeployment` is kept as raw JSON with a
//! compact schema (see [`DeploymentTemplate`]): the full `DeploymentSpec` schema would make the CRD
//! too large for client-side `kubectl apply`, and a bad template must not break a watcher's list.
#![forbid(unsafe_code)]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub mod autoscaler;
pub mod cluster;
pub mod conditions;
pub mod deployment;
mod error;
pub mod job;
pub mod placement;
pub mod resource;
pub mod rollout;
pub mod service;
pub mod taints;
pub mod template;
#[cfg(test)]
mod tests;
pub mod wire;

pub use autoscaler::{
    MultiClusterHorizontalPodAutoscaler, MultiClusterHorizontalPodAutoscalerSpec,
    MultiClusterHorizontalPodAutoscalerStatus,
};
pub use cluster::{
    ClusterCapacity, ResourceAmounts, WorkloadCluster, WorkloadClusterSpec, WorkloadClusterStatus,
};
pub use deployment::{
    ClusterOverride, ClusterPlacementStatus, Dependencies, DependencyKind, DependencyRef, JsonPatchOperation,
    MultiClusterDeployment, MultiClusterDeploymentSpec, MultiClusterDeploymentStatus, PatchOp,
};
pub use error::Error;
pub use job::{
    JobPhase, JobPiece, JobPlacement, JobPolicy, JobTemplate, MultiClusterJob, MultiClusterJobSpec,
    MultiClusterJobStatus, PieceState,
};
pub use placement::{
    Bursting, Coordinates, Failback, Placement, PlacementPolicy, Proximity, ProximityOrigin, Rescheduling,
};
pub use resource::{
    ClusterResourceStatus, MultiClusterResource, MultiClusterResourceSpec, MultiClusterResourceStatus,
    ResourceState,
};
pub use rollout::{RolloutPhase, RolloutStatus, RolloutStrategy, RolloutWave, Waves};
pub use service::{
    ClusterServiceStatus, MultiClusterService, MultiClusterServiceSpec, MultiClusterServiceStatus,
    SERVICE_EXPORT_API_VERSION, SERVICE_EXPORT_KIND, ServicePlacement, ServicePort, ServiceProtocol,
    ServiceType, SessionAffinity, TrafficPolicy,
};
pub use taints::{
    ClusterTaint, ClusterTaintEffect, ClusterToleration, DRAIN_TAINT_KEY, REMOVING_TAINT_KEY,
    TolerationOperator,
};
pub use template::{DeploymentTemplate, TemplateMetadata, WorkloadKind};

/// An annotation of a MultiClusterDeployment: a new value asks the hub to place it again from
/// scratch now (make-before-break), as Karmada's WorkloadRebalancer does; `nave rebalance` sets
/// it to the time.
pub const REBALANCE_ANNOTATION: &str = "nave.dev/rebalance";

/// An annotation the hub puts on each cluster's Deployment: a digest of the
/// MultiClusterDeployment's `spec.template` it was rendered from, which the agent reports back,
/// so a rollout knows which clusters run which template.
pub const TEMPLATE_HASH_ANNOTATION: &str = "nave.dev/template-hash";

/// An annotation the hub keeps on a MultiClusterDeployment with rollout waves: its last
/// `spec.template` (JSON) that every cluster ran, which `nave rollout undo` puts back.
pub const STABLE_TEMPLATE_ANNOTATION: &str = "nave.dev/stable-template";

/// The hub's finalizer on WorkloadClusters: deleting one moves its workloads away
/// (make-before-break), waits until its agent has applied the empty work set, then forgets the
/// cluster (credentials revoked, name refused to the fleet's bootstrap token) and lets the
/// object go.
pub const CLUSTER_FINALIZER: &str = "nave.dev/withdraw-work";

/// An annotation of a WorkloadCluster being deleted: `"true"` lets the hub forget the cluster
/// without waiting for its agent (a cluster that is gone for good); `nave unjoin --force` sets
/// it. Whatever still runs there is left running, unmanaged.
pub const REMOVE_WITHOUT_AGENT_ANNOTATION: &str = "nave.dev/remove-without-agent";

/// The drop-in path: an annotation of an ordinary `apps/v1` Deployment in the management
/// cluster, whose value is a placement policy (`worst-fit`, `best-fit`, `spread`, ...). In a
/// namespace labelled [`DROP_IN_NAMESPACE_LABEL`]`=enabled`, the hub places the Deployment across
/// the fleet as a MultiClusterDeployment of the same name (owned by the Deployment), and its pods
/// in the management cluster are proxies that never run (see [`DROP_IN_GATE`]).
pub const DROP_IN_ANNOTATION: &str = "nave.dev/placement";

/// The label of a management-cluster namespace whose annotated Deployments are placed across the
/// fleet (value `enabled`): the fleet admin's choice, never a Deployment author's.
pub const DROP_IN_NAMESPACE_LABEL: &str = "nave.dev/drop-in";

/// The scheduling gate the hub's admission webhook puts on the pods of drop-in Deployments, so
/// the management cluster's scheduler never runs them; the hub marks them Ready as the fleet's
/// replicas become ready, so the Deployment's status (and `kubectl rollout status`) shows the
/// fleet.
pub const DROP_IN_GATE: &str = "nave.dev/fleet";

/// The label the admission webhook puts on a drop-in Deployment's proxy pods (value `true`), so
/// the hub watches them and no other pod.
pub const DROP_IN_PROXY_LABEL: &str = "nave.dev/drop-in-proxy";

/// An annotation the hub puts on a cluster's Deployment when its MultiClusterDeployment has
/// `spec.retainReplicas`: the agent sets `spec.replicas` only when it creates the Deployment and
/// leaves it to the cluster (its HorizontalPodAutoscaler) afterwards.
pub const RETAIN_REPLICAS_ANNOTATION: &str = "nave.dev/retain-replicas";

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
    [
        MultiClusterDeployment::crd(),
        MultiClusterHorizontalPodAutoscaler::crd(),
        MultiClusterJob::crd(),
        MultiClusterResource::crd(),
        MultiClusterService::crd(),
        WorkloadCluster::crd(),
    ]
    .into_iter()
    .map(tidy_schemas)
    .collect()
}

/// Makes the generated schemas read well in `kubectl explain`, which prints descriptions as they
/// are and only wraps long lines: doc comments are unwrapped into paragraphs (blank lines and
/// list items kept), and an optional enum is published as a plain enum, without the `null` that
/// `kubectl explain` would print as `<no value>` (an explicit `null` is pruned, as for any
/// non-nullable field).
fn tidy_schemas(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let mut value = serde_json::to_value(&crd).expect("a CustomResourceDefinition always serializes");
    if let Some(versions) = value.pointer_mut("/spec/versions").and_then(|v| v.as_array_mut()) {
        for version in versions {
            if let Some(schema) = version.pointer_mut("/schema/openAPIV3Schema") {
                tidy_schema(schema);
            }
        }
    }
    serde_json::from_value(value).expect("tidying keeps a valid CustomResourceDefinition")
}

fn tidy_schema(schema: &mut serde_json::Value) {
    use serde_json::Value;
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::String(d)) = obj.get_mut("description") {
        *d = unwrap_paragraphs(d);
    }
    if let Some(Value::Array(values)) = obj.get_mut("enum")
        && values.contains(&Value::Null)
    {
        values.retain(|v| !v.is_null());
        obj.remove("nullable");
    }
    for (key, sub) in obj.iter_mut() {
        match (key.as_str(), sub) {
            ("properties" | "patternProperties", Value::Object(props)) => {
                props.values_mut().for_each(tidy_schema);
            }
            ("items" | "additionalProperties" | "not", sub @ Value::Object(_)) => tidy_schema(sub),
            ("allOf" | "anyOf" | "oneOf" | "items", Value::Array(subs)) => {
                subs.iter_mut().for_each(tidy_schema);
            }
            _ => {}
        }
    }
}

/// Joins the lines of each paragraph with spaces; blank lines, list items (`- `, `* `) and
/// indented lines start new lines.
fn unwrap_paragraphs(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut previous_blank = true;
    for (i, line) in text.lines().enumerate() {
        let blank = line.trim().is_empty();
        let starts_block = line.starts_with("- ") || line.starts_with("* ") || line.starts_with(' ');
        if i > 0 {
            out.push(if blank || previous_blank || starts_block {
                '\n'
            } else {
                ' '
            });
        }
        out.push_str(if blank { "" } else { line.trim_end() });
        previous_blank = blank;
    }
    out
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
