//! The drop-in path: an ordinary Deployment in the management cluster, annotated
//! `nave.dev/placement: <policy>`, is placed across the fleet as a MultiClusterDeployment, so
//! tools that create Deployments (Argo CD, third-party Helm charts, `kubectl create deployment`)
//! work unchanged. Two parts:
//!
//! ```text
//!  management cluster                              hub
//!  Deployment web (nave.dev/placement: worst-fit) ─► controller ─► MultiClusterDeployment web
//!    └─ ReplicaSet ─► Pod (CREATE) ─► admission webhook:          (owned by the Deployment;
//!                      + schedulingGates [nave.dev/fleet]           spec from the Deployment)
//!                      + label nave.dev/drop-in-proxy=true                │ fleet status
//!       proxy pods: never scheduled here  ◄── Ready as the fleet's replicas become ready
//! ```
//!
//! - **The admission webhook** ([`router`], on the hub's HTTPS listener, every replica) gates the
//!   pods of a drop-in Deployment's ReplicaSets: the management cluster's scheduler leaves a
//!   gated pod alone, so none runs there. A pod is recognised by its ReplicaSet's Deployment
//!   (the ReplicaSet carries the Deployment's annotations, so other pods cost one read); only in
//!   namespaces labelled `nave.dev/drop-in=enabled` (the fleet admin's choice: a Deployment
//!   author cannot place into the fleet a namespace the admin has not opened). When it cannot
//!   tell, it answers an error and the API server applies the webhook's `failurePolicy`.
//! - **The controller** ([`run`], the leader only) keeps the MultiClusterDeployment's replicas,
//!   template and policy equal to the Deployment's (server-side apply, so other fields of it,
//!   `clusters` for example, remain the user's), and marks the proxy pods Ready as the fleet's
//!   replicas of the current template become ready. The Deployment's own controller then counts
//!   them: `kubectl get deployment`, `kubectl rollout status` and Argo's health see the fleet.
//!
//! Nothing here deletes: a Deployment deleted takes its MultiClusterDeployment with it (owner
//! reference); an annotation removed leaves the fleet copy running and says so in an Event.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use nave_api::wire::{is_dns_label, is_dns_subdomain};
use nave_api::{
    DROP_IN_ANNOTATION, DROP_IN_GATE, DROP_IN_NAMESPACE_LABEL, DROP_IN_PROXY_LABEL, DeploymentTemplate,
    MultiClusterDeployment, MultiClusterDeploymentStatus, PlacementPolicy, TemplateMetadata,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Where the API server sends the admission reviews of pods (the webhook's `clientConfig.url`
/// path).
pub const WEBHOOK_PATH: &str = "/admission/v1/drop-in/pods";

/// The field manager of the fleet copies: the fields it sets are the Deployment's, the others
/// of the MultiClusterDeployment its users'.
pub const FIELD_MANAGER: &str = "nave-hub-drop-in";

/// The value of [`DROP_IN_NAMESPACE_LABEL`] that opens a namespace.
pub const NAMESPACE_ENABLED: &str = "enabled";

/// How long the webhook waits for the ReplicaSet it looks up (the API server's own call to the
/// webhook gives up after its `timeoutSeconds`, 10 by default).
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------------
// The admission webhook.

/// The webhook's routes: `POST` [`WEBHOOK_PATH`] with an `admission.k8s.io/v1` AdmissionReview.
pub fn router(client: kube::Client) -> Router {
    Router::new().route(WEBHOOK_PATH, post(review)).with_state(client)
}

/// What the webhook decides of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Not a drop-in pod: admitted unchanged.
    Unchanged,
    /// A drop-in Deployment's pod: admitted with the gate and the proxy label (a JSON patch).
    Gate(Vec<Value>),
    /// Cannot tell (its owners could not be read): answered with an error, so the API server
    /// applies the webhook's `failurePolicy` (`Fail`: the ReplicaSet tries again rather than
    /// start here a pod that belongs to the fleet).
    Unknown,
}

async fn review(State(client): State<kube::Client>, body: axum::body::Bytes) -> Response {
    let Ok(review) = serde_json::from_slice::<Value>(&body) else {
        return bad_request("the body is not JSON: expected an admission.k8s.io/v1 AdmissionReview");
    };
    let request = &review["request"];
    let Some(uid) = request["uid"].as_str() else {
        return bad_request("request.uid is missing: expected an admission.k8s.io/v1 AdmissionReview");
    };
    let admission = admit(&client, request).await;
    debug!(uid, admission = ?admission, "admission review");
    let response = match &admission {
        Admission::Unchanged => json!({"uid": uid, "allowed": true}),
        Admission::Gate(patch) => {
            let patch = serde_json::to_vec(patch).unwrap_or_default();
            json!({
                "uid": uid,
                "allowed": true,
                "patchType": "JSONPatch",
                "patch": base64::engine::general_purpose::STANDARD.encode(patch),
            })
        }
        Admission::Unknown => {
            // What failed is in the hub's log, not in the answer: the caller may be anyone.
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(
                    json!({"error": "unavailable", "message": "the hub cannot read this pod's owners now"}),
                ),
            )
                .into_response();
        }
    };
    axum::Json(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    }))
    .into_response()
}

fn bad_request(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"error": "bad_request", "message": message})),
    )
        .into_response()
}

/// Decides one admission request: gates the pods a drop-in Deployment's ReplicaSet creates.
async fn admit(client: &kube::Client, request: &Value) -> Admission {
    if request["kind"]["kind"] != "Pod" || request["kind"]["group"] != "" || request["operation"] != "CREATE"
    {
        return Admission::Unchanged;
    }
    let pod = &request["object"];
    let Some(replica_set) = controller_of(pod, "ReplicaSet") else {
        return Admission::Unchanged;
    };
    let namespace = request["namespace"]
        .as_str()
        .or_else(|| pod["metadata"]["namespace"].as_str())
        .unwrap_or_default();
    // What the API server sends is valid; anything else is not looked up (the names go into
    // the URLs of the hub's own reads).
    if !is_dns_label(namespace) || !is_dns_subdomain(&replica_set) {
        return Admission::Unchanged;
    }
    let lookup = async {
        // The ReplicaSet carries its Deployment's annotations (the Deployment controller copies
        // them), so a pod of any other Deployment costs one read; the namespace's label and the
        // Deployment itself then decide (a ReplicaSet keeps an annotation its Deployment has
        // since dropped).
        let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
        let Some(rs) = replica_sets.get_opt(&replica_set).await? else {
            return Ok(None);
        };
        if !rs.annotations().contains_key(DROP_IN_ANNOTATION) {
            return Ok(None);
        }
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let open = namespaces
            .get_opt(namespace)
            .await?
            .is_some_and(|ns| is_open(&ns));
        if !open {
            return Ok(None);
        }
        let Some(owner) = rs
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true) && o.kind == "Deployment" && o.api_version == "apps/v1")
            .filter(|o| is_dns_subdomain(&o.name))
        else {
            return Ok(None);
        };
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
        deployments.get_opt(&owner.name).await
    };
    match tokio::time::timeout(LOOKUP_TIMEOUT, lookup).await {
        Ok(Ok(Some(deployment))) => {
            gate_patch(pod, &deployment).map_or(Admission::Unchanged, Admission::Gate)
        }
        Ok(Ok(None)) => Admission::Unchanged,
        Ok(Err(error)) => {
            warn!(namespace, replica_set, error = %error, "the drop-in webhook cannot read a pod's owners");
            Admission::Unknown
        }
        Err(_) => {
            warn!(
                namespace,
                replica_set, "the drop-in webhook's reads took over {LOOKUP_TIMEOUT:?}"
            );
            Admission::Unknown
        }
    }
}

/// Whether the namespace's admin opened it to the drop-in path.
fn is_open(namespace: &Namespace) -> bool {
    namespace
        .labels()
        .get(DROP_IN_NAMESPACE_LABEL)
        .map(String::as_str)
        == Some(NAMESPACE_ENABLED)
}

/// The name of the object's controller of `kind` (group `apps`), from its owner references.
fn controller_of(object: &Value, kind: &str) -> Option<String> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["controller"] == true && o["kind"] == kind && o["apiVersion"] == "apps/v1")
        .and_then(|o| o["name"].as_str())
        .map(str::to_owned)
}

/// The JSON patch that makes `pod` a proxy when its Deployment is placed across the fleet
/// (carries the annotation); `None` otherwise.
pub fn gate_patch(pod: &Value, deployment: &Deployment) -> Option<Vec<Value>> {
    deployment.annotations().get(DROP_IN_ANNOTATION)?;
    let mut patch = Vec::new();
    match pod["spec"]["schedulingGates"].as_array() {
        None => patch
            .push(json!({"op": "add", "path": "/spec/schedulingGates", "value": [{"name": DROP_IN_GATE}]})),
        Some(gates) if !gates.iter().any(|g| g["name"] == DROP_IN_GATE) => {
            patch.push(
                json!({"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": DROP_IN_GATE}}),
            );
        }
        Some(_) => {}
    }
    if pod["metadata"]["labels"].is_object() {
        let key = DROP_IN_PROXY_LABEL.replace('~', "~0").replace('/', "~1");
        patch.push(json!({"op": "add", "path": format!("/metadata/labels/{key}"), "value": "true"}));
    } else {
        patch.push(json!({"op": "add", "path": "/metadata/labels", "value": {DROP_IN_PROXY_LABEL: "true"}}));
    }
    Some(patch)
}

/// The Deployment whose ReplicaSet controls `pod`: the ReplicaSet's name less its
/// `-<pod-template-hash>`, as the Deployment controller names them.
fn deployment_of_proxy(pod: &Pod) -> Option<ObjectRef<Deployment>> {
    let rs = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "ReplicaSet")?;
    let (deployment, _) = rs.name.rsplit_once('-')?;
    Some(ObjectRef::new(deployment).within(&pod.namespace()?))
}

// ---------------------------------------------------------------------------------------------
// The controller.

/// What the controller needs.
struct Ctx {
    client: kube::Client,
    recorder: Recorder,
    /// The warnings published per Deployment (`namespace/name`) and reason, so a reconcile that
    /// finds the same problem again does not publish it again.
    warned: Mutex<HashMap<(String, String), String>>,
    /// The Deployments (by uid) placed this term, so one whose annotation is removed is told.
    placed: Mutex<std::collections::HashSet<String>>,
}

/// Why a reconcile failed (retried with a delay).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the management cluster failed.
    #[error("{what}: {source}")]
    Kube {
        /// What the hub was doing.
        what: &'static str,
        /// The failure.
        #[source]
        source: kube::Error,
    },
    /// The fleet copy could not be built from the Deployment.
    #[error("building the fleet copy: {0}")]
    Copy(String),
}

fn failed(what: &'static str) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Kube { what, source }
}

/// The warnings about whether a Deployment is placed, forgotten once it is.
const PLACEMENT_WARNINGS: &[&str] = &[
    "DropInNotEnabled",
    "InvalidPlacement",
    "NameTaken",
    "NoLongerPlaced",
];

/// Runs the controller until `shutdown` (the leader's term).
pub async fn run(client: kube::Client, shutdown: CancellationToken) {
    let reporter = Reporter {
        controller: "nave-hub".to_owned(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let ctx = Arc::new(Ctx {
        recorder: Recorder::new(client.clone(), reporter),
        client: client.clone(),
        warned: Mutex::default(),
        placed: Mutex::default(),
    });
    let deployments: Api<Deployment> = Api::all(client.clone());
    let copies: Api<MultiClusterDeployment> = Api::all(client.clone());
    let proxies: Api<Pod> = Api::all(client.clone());
    let controller = Controller::new(deployments, watcher::Config::default())
        .owns(copies, watcher::Config::default())
        .watches(
            proxies,
            watcher::Config::default().labels(DROP_IN_PROXY_LABEL),
            |pod| deployment_of_proxy(&pod),
        )
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok(_) => {}
                // Reconcile errors are logged by `error_policy`; these are the watches' (missing
                // RBAC shows here).
                Err(kube::runtime::controller::Error::ReconcilerFailed(..)) => {}
                Err(error) => warn!(error = %error, "the drop-in controller's watch failed"),
            }
        });
    // Reconciles are idempotent: one cut short by the end of the term is done again by the next
    // leader.
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = controller => {}
    }
}

fn error_policy(_: Arc<Deployment>, error: &Error, _: Arc<Ctx>) -> Action {
    warn!(error = %error, "placing a drop-in Deployment failed; trying again");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(deployment: Arc<Deployment>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let Some(policy) = deployment.annotations().get(DROP_IN_ANNOTATION) else {
        let uid = deployment.uid().unwrap_or_default();
        let was_placed = ctx
            .placed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&uid);
        if was_placed {
            warn_once(
                &ctx,
                &deployment,
                "NoLongerPlaced",
                format!(
                    "{DROP_IN_ANNOTATION} was removed: the fleet copy (MultiClusterDeployment {}) keeps running \
                     as it is and no longer follows this Deployment; delete it to stop it. The proxy pods stay \
                     as they are; new pods run in the management cluster, and `kubectl rollout restart` \
                     replaces the proxies with them",
                    deployment.name_any()
                ),
            )
            .await;
        }
        return Ok(Action::await_change());
    };
    if deployment.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = deployment.namespace().unwrap_or_default();
    let name = deployment.name_any();
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let open = namespaces
        .get_opt(&namespace)
        .await
        .map_err(failed("reading the namespace"))?
        .is_some_and(|ns| is_open(&ns));
    if !open {
        warn_once(
            &ctx,
            &deployment,
            "DropInNotEnabled",
            format!(
                "{DROP_IN_ANNOTATION} is ignored: namespace {namespace} is not labelled \
                 {DROP_IN_NAMESPACE_LABEL}={NAMESPACE_ENABLED} by the fleet's admin, so this Deployment runs here"
            ),
        )
        .await;
        return Ok(Action::await_change());
    }
    let policy: PlacementPolicy = match serde_json::from_value(Value::String(policy.clone())) {
        Ok(policy) => policy,
        Err(_) => {
            warn_once(
                &ctx,
                &deployment,
                "InvalidPlacement",
                format!(
                    "metadata.annotations[{DROP_IN_ANNOTATION}]: unknown placement policy {policy:?}; \
                     one of worst-fit, best-fit, proximity, spread, everywhere, traffic. Its pods wait, gated, \
                     until it is corrected"
                ),
            )
            .await;
            return Ok(Action::await_change());
        }
    };
    let copies: Api<MultiClusterDeployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let existing = copies
        .get_opt(&name)
        .await
        .map_err(failed("reading the fleet copy"))?;
    let uid = deployment.uid().unwrap_or_default();
    if let Some(other) = &existing
        && !other.owner_references().iter().any(|o| o.uid == uid)
    {
        warn_once(
            &ctx,
            &deployment,
            "NameTaken",
            format!(
                "MultiClusterDeployment {namespace}/{name} exists and is not this Deployment's fleet copy; \
                 it is left alone and this Deployment is not placed (its pods wait, gated)"
            ),
        )
        .await;
        return Ok(Action::await_change());
    }
    let copy = fleet_copy(&deployment, policy, existing.as_ref());
    let applied = match &existing {
        // Created, never applied over: a MultiClusterDeployment someone else created meanwhile
        // under this name stays theirs (409, then NameTaken on the next pass).
        None => {
            let object: MultiClusterDeployment =
                serde_json::from_value(copy).map_err(|e| Error::Copy(e.to_string()))?;
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PostParams::default()
            };
            match copies.create(&params, &object).await {
                Ok(created) => created,
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    return Ok(Action::requeue(Duration::from_secs(1)));
                }
                Err(error) => return Err(failed("creating the fleet copy")(error)),
            }
        }
        Some(_) => copies
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&copy),
            )
            .await
            .map_err(failed("writing the fleet copy"))?,
    };
    forget_warnings(&ctx, &deployment, PLACEMENT_WARNINGS);
    ctx.placed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(uid);
    mirror_readiness(&ctx, &deployment, &applied).await?;
    Ok(Action::await_change())
}

/// The MultiClusterDeployment (an apply patch) that places `deployment` by `policy`: its
/// replicas, its template (kept as `existing` has it while the Deployment is paused) and its
/// labels, owned by it.
pub fn fleet_copy(
    deployment: &Deployment,
    policy: PlacementPolicy,
    existing: Option<&MultiClusterDeployment>,
) -> Value {
    let spec = deployment.spec.clone();
    let replicas = spec.replicas.unwrap_or(1).max(0);
    let paused = spec.paused == Some(true);
    let template = match existing {
        Some(existing) if paused => existing.spec.template.clone(),
        _ => {
            let mut spec = serde_json::to_value(&spec).unwrap_or_default();
            if let Some(fields) = spec.as_object_mut() {
                // Each cluster's share is the hub's; pausing is the management cluster's.
                fields.remove("replicas");
                fields.remove("paused");
            }
            DeploymentTemplate {
                kind: nave_api::WorkloadKind::Deployment,
                metadata: TemplateMetadata {
                    labels: deployment.labels().clone(),
                    annotations: BTreeMap::new(),
                },
                spec,
            }
        }
    };
    let owner = OwnerReference {
        api_version: "apps/v1".to_owned(),
        kind: "Deployment".to_owned(),
        name: deployment.name_any(),
        uid: deployment.uid().unwrap_or_default(),
        controller: Some(true),
        // Deleting the Deployment deletes its copy; the copy never holds the Deployment back
        // (which would need `update` on deployments/finalizers where owner references are
        // enforced).
        block_owner_deletion: None,
    };
    json!({
        "apiVersion": nave_api::API_VERSION,
        "kind": "MultiClusterDeployment",
        "metadata": {
            "name": deployment.name_any(),
            "namespace": deployment.namespace(),
            "ownerReferences": [owner],
        },
        "spec": {
            "replicas": replicas,
            "template": template,
            "placement": {"policy": policy},
        },
    })
}

/// How many proxy pods of the newest ReplicaSet and of the older ones are Ready, given the fleet
/// copy's status. During a rollout at home (proxies of older ReplicaSets exist), the newest
/// ones as the fleet's ready replicas of the current template and the older ones as the rest of
/// its ready replicas; otherwise all of them as its ready replicas. `None` while the copy's status is of an older
/// spec (the counts would be of the previous template).
pub fn proxies_ready(newest: usize, older: usize, copy: &MultiClusterDeployment) -> Option<(usize, usize)> {
    let status: &MultiClusterDeploymentStatus = copy.status.as_ref()?;
    if status.observed_generation != copy.metadata.generation {
        return None;
    }
    let count = |n: i32| usize::try_from(n).unwrap_or(0);
    // No rollout at home: the fleet's ready replicas, whatever template they run. A change the
    // management cluster does not roll (a label, `minReadySeconds`) changes the copy's template
    // too, and must not mark every proxy unready while the clusters take it.
    if older == 0 {
        return Some((count(status.ready_replicas).min(newest), 0));
    }
    let new_ready = count(status.updated_ready_replicas).min(newest);
    let old_ready = count(status.ready_replicas).saturating_sub(new_ready).min(older);
    Some((new_ready, old_ready))
}

/// Marks the Deployment's proxy pods Ready (or not) as the fleet's replicas are.
async fn mirror_readiness(
    ctx: &Ctx,
    deployment: &Deployment,
    copy: &MultiClusterDeployment,
) -> Result<(), Error> {
    // Until the Deployment controller has acted on the latest spec, its newest ReplicaSet may be
    // of the previous template: wait for it rather than judge the proxies by it.
    let observed = deployment.status.as_ref().and_then(|s| s.observed_generation);
    if observed < deployment.metadata.generation {
        return Ok(());
    }
    let namespace = deployment.namespace().unwrap_or_default();
    let name = deployment.name_any();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), &namespace);
    let uid = deployment.uid().unwrap_or_default();
    let owned = replica_sets
        .list(&selector_of(deployment))
        .await
        .map_err(failed("listing the ReplicaSets"))?
        .items
        .into_iter()
        .filter(|rs| {
            rs.owner_references()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true))
        })
        .collect::<Vec<_>>();
    let revision = |rs: &ReplicaSet| {
        rs.annotations()
            .get("deployment.kubernetes.io/revision")
            .and_then(|r| r.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let Some(newest) = owned.iter().max_by_key(|rs| revision(rs)) else {
        return Ok(());
    };
    let newest = newest.uid().unwrap_or_default();
    let uids: Vec<String> = owned.iter().filter_map(|rs| rs.uid()).collect();
    // The Deployment's pods: those of its ReplicaSets (a pod merely labelled like a proxy is not
    // one, and the hub never writes its status).
    let all: Vec<Pod> = pods
        .list(&selector_of(deployment))
        .await
        .map_err(failed("listing the Deployment's pods"))?
        .items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && o.kind == "ReplicaSet" && uids.contains(&o.uid))
        })
        .collect();
    // A proxy is gated and bound to no node; any other pod of the Deployment runs here: made
    // before it was annotated, without the webhook (its failurePolicy Ignore), or ungated by hand.
    let (proxies, here): (Vec<&Pod>, Vec<&Pod>) = all.iter().partition(|p| is_proxy(p));
    if here.is_empty() {
        forget_warnings(ctx, deployment, &["RunningHere"]);
    } else {
        warn_once(
            ctx,
            deployment,
            "RunningHere",
            format!(
                "{} pod(s) of this Deployment run in the management cluster as well as in the fleet: they were \
                 created before it was placed across the fleet, without the hub's admission webhook, or their \
                 gate was removed; `kubectl rollout restart deployment/{name}` replaces them with proxies",
                here.len()
            ),
        )
        .await;
    }
    let of_newest = |p: &Pod| p.owner_references().iter().any(|o| o.uid == newest);
    let (mut fresh, mut old): (Vec<&Pod>, Vec<&Pod>) = proxies.into_iter().partition(|p| of_newest(p));
    let Some((fresh_ready, old_ready)) = proxies_ready(fresh.len(), old.len(), copy) else {
        return Ok(());
    };
    // The ones Ready already stay Ready first: no pod flips for nothing.
    let order = |a: &&Pod, b: &&Pod| {
        is_ready(b)
            .cmp(&is_ready(a))
            .then_with(|| a.name_any().cmp(&b.name_any()))
    };
    fresh.sort_by(order);
    old.sort_by(order);
    let wanted = fresh
        .iter()
        .enumerate()
        .map(|(i, p)| (*p, i < fresh_ready))
        .chain(old.iter().enumerate().map(|(i, p)| (*p, i < old_ready)));
    for (pod, ready) in wanted {
        if is_ready(pod) == ready {
            continue;
        }
        let (status, reason, message) = if ready {
            (
                "True",
                "FleetReplicaReady",
                "a replica of this Deployment is ready in the fleet",
            )
        } else {
            (
                "False",
                "FleetReplicaNotReady",
                "this Deployment's replicas run in the fleet; this one is not ready there yet",
            )
        };
        let now = Time(jiff::Timestamp::now());
        let condition = |type_: &str| json!({"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": now});
        let patch = json!({"status": {"conditions": [condition("Ready"), condition("ContainersReady")]}});
        match pods
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(_) => {}
            // Deleted meanwhile: its ReplicaSet no longer counts it.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(error) => return Err(failed("marking a proxy pod")(error)),
        }
    }
    Ok(())
}

/// Whether `pod` is a proxy: gated by the hub and bound to no node.
fn is_proxy(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    spec.node_name.as_deref().is_none_or(str::is_empty)
        && spec
            .scheduling_gates
            .iter()
            .flatten()
            .any(|g| g.name == DROP_IN_GATE)
}

/// The Deployment's `matchLabels` as a list selector (its `matchExpressions` are checked by
/// ownership instead).
fn selector_of(deployment: &Deployment) -> ListParams {
    let labels = deployment.spec.selector.match_labels.clone().unwrap_or_default();
    let selector: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    ListParams::default().labels(&selector.join(","))
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Publishes a Warning on the Deployment unless the same one was the last of its reason.
async fn warn_once(ctx: &Ctx, deployment: &Deployment, reason: &str, note: String) {
    let key = (key_of(deployment), reason.to_owned());
    {
        let mut warned = ctx
            .warned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if warned.get(&key) == Some(&note) {
            return;
        }
        warned.insert(key, note.clone());
    }
    warn!(deployment = %deployment.name_any(), reason, note, "drop-in Deployment");
    let event = Event {
        type_: EventType::Warning,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Place".to_owned(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &deployment.object_ref(&())).await {
        warn!(error = %error, "publishing an event failed");
    }
}

/// Forgets the warnings of these reasons: the next occurrence is published again.
fn forget_warnings(ctx: &Ctx, deployment: &Deployment, reasons: &[&str]) {
    let key = key_of(deployment);
    ctx.warned
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .retain(|(k, reason), _| *k != key || !reasons.contains(&reason.as_str()));
}

fn key_of(deployment: &Deployment) -> String {
    format!(
        "{}/{}",
        deployment.namespace().unwrap_or_default(),
        deployment.name_any()
    )
}

#[cfg(test)]
mod tests;
