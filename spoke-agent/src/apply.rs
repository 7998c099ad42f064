//! Applying a work set: server-side apply of every object with ownership labels, then pruning
//! what the agent applied before and is no longer wanted. The applied revision and the objects
//! it covers are kept in a ConfigMap, so a restarted agent resumes and still prunes correctly.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, Patch, PatchParams,
    PostParams,
};
use kube::discovery::{ApiCapabilities, Scope};
use kube::{Api, Client};
use nave_api::wire::{
    ApplyError, INSTALLATION_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, REVISION_ANNOTATION, WORKLOAD_LABEL,
    WorkSet, WorkloadRef,
};
use nave_api::{AGENT_FIELD_MANAGER, RETAIN_REPLICAS_ANNOTATION};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Mutex;
use tracing::{debug, info, instrument, warn};

use crate::allowed::Allowed;
use crate::capacity::workload_of;
use crate::error::{Error, Result, api_code};

/// The field manager that keeps a retained Deployment's `spec.replicas` (see
/// [`nave_api::RETAIN_REPLICAS_ANNOTATION`]).
pub const RETAINED_REPLICAS_FIELD_MANAGER: &str = "nave-agent-retained-replicas";

/// Name of the ConfigMap, in the agent's namespace, with the applied revision and objects.
pub const STATE_CONFIG_MAP: &str = "nave-agent-state";

/// Kinds listed by ownership label when pruning, beside those the agent remembers applying:
/// what the hub sends, so objects applied before a lost state are still found.
const PRUNE_KINDS: &[(&str, &str)] = &[
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("batch/v1", "Job"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    // Where the multi-cluster services API is not installed, listing it fails and is skipped.
    ("multicluster.x-k8s.io/v1alpha1", "ServiceExport"),
];

/// One object, by kind and name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// Namespace; `None` when cluster-scoped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// What the agent has applied, as persisted in [`STATE_CONFIG_MAP`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AppliedState {
    /// The last fully applied revision.
    pub revision: Option<u64>,
    /// Identity of the hub's store that revision counts in (`None` from a hub without one).
    pub store: Option<String>,
    /// Objects the agent applied and has not pruned, with their workload.
    pub objects: BTreeMap<ObjectRef, Option<WorkloadRef>>,
    /// Not persisted: a digest of the content each object was last applied with by this
    /// process, so a new revision applies only the objects it changed.
    #[serde(skip)]
    pub applied_content: HashMap<ObjectRef, Digest>,
    /// Not persisted: whether this process has applied a whole set and pruned by listing the
    /// cluster since it started (or since an attempt failed). Until then every object is applied
    /// and the prune lists what carries the ownership label; afterwards a revision applies what
    /// changed and prunes what this process remembers.
    #[serde(skip)]
    pub verified: bool,
}

/// A digest of an object's content as the agent applies it (SHA-256, its first 16 bytes).
pub type Digest = [u8; 16];

fn digest(body: &Value) -> Digest {
    use sha2::Digest as _;
    let bytes = serde_json::to_vec(body).expect("JSON values always serialize");
    let full = sha2::Sha256::digest(&bytes);
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredObject {
    #[serde(flatten)]
    object: ObjectRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    workload: Option<WorkloadRef>,
}

/// The result of applying one work set.
#[derive(Debug, Clone, Default)]
pub struct ApplyOutcome {
    /// The revision attempted.
    pub revision: u64,
    /// Objects of the set, in apply order, with their workload.
    pub objects: Vec<(ObjectRef, Option<WorkloadRef>)>,
    /// Failures of apply and prune.
    pub errors: Vec<ApplyError>,
    /// Objects deleted by pruning.
    pub pruned: Vec<ObjectRef>,
    /// Objects sent to the cluster (the others were applied unchanged before).
    pub sent: usize,
    /// A failure other than a refusal: the revision does not count as applied, nothing was
    /// pruned, and the set is tried again. Refusals (outside the allow-list, someone else's
    /// object) are reported in `errors` but do not block: retrying would not change them.
    pub blocked: bool,
}

/// A work set object ready to apply.
struct Prepared {
    object_ref: ObjectRef,
    workload: Option<WorkloadRef>,
    resource: ApiResource,
    body: Value,
    /// [`digest`] of `body` without the revision annotation.
    content: Digest,
}

/// Applies work sets to one cluster.
pub struct Applier {
    client: Client,
    namespace: String,
    /// The installation its objects are labelled with ([`INSTALLATION_LABEL`]).
    installation: String,
    /// The kinds and namespaces it applies.
    allowed: Allowed,
    /// Discovery results by (apiVersion, kind): kinds do not move while the agent runs.
    discovered: Mutex<HashMap<(String, String), (ApiResource, ApiCapabilities)>>,
    /// The `metadata.generation` each object had after this process last applied it: a status
    /// read from a watch that has not seen that apply yet is not current.
    generations: std::sync::Mutex<HashMap<ObjectRef, i64>>,
}

impl std::fmt::Debug for Applier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Applier")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Applier {
    /// The generation each object had after this process last applied it (held while a report
    /// is built, not copied).
    pub fn applied_generations(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef, i64>> {
        self.generations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An applier keeping its state in `namespace`.
    pub fn new(client: Client, namespace: impl Into<String>) -> Self {
        let namespace = namespace.into();
        Applier {
            client,
            installation: namespace.clone(),
            allowed: Allowed::defaults(&namespace),
            namespace,
            discovered: Mutex::default(),
            generations: std::sync::Mutex::default(),
        }
    }

    /// The same applier, labelling its objects as `installation`'s and applying only what
    /// `allowed` allows.
    pub fn with_policy(mut self, installation: impl Into<String>, allowed: Allowed) -> Self {
        self.installation = installation.into();
        self.allowed = allowed;
        self
    }

    /// The label selector of the objects this installation applied.
    pub fn owned_selector(installation: &str) -> String {
        format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{INSTALLATION_LABEL}={installation}")
    }

    /// Whether an object with `labels` is this installation's to change or delete: it carries
    /// the ownership label and this installation's name, or no installation at all (applied
    /// before installations were named).
    fn owns(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
        label(MANAGED_BY_LABEL) == Some(MANAGED_BY_VALUE)
            && label(INSTALLATION_LABEL).is_none_or(|i| i == self.installation)
    }

    fn state_api(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates the agent's own namespace when missing (the Helm chart normally does).
    pub async fn ensure_own_namespace(&self) -> Result<()> {
        self.ensure_namespace(&self.namespace, false).await
    }

    /// The persisted state; empty when there is none.
    pub async fn load_state(&self) -> Result<AppliedState> {
        let cm = self
            .state_api()
            .get_opt(STATE_CONFIG_MAP)
            .await
            .map_err(Error::kube(format!("reading ConfigMap {STATE_CONFIG_MAP}")))?;
        let Some(data) = cm.and_then(|cm| cm.data) else {
            return Ok(AppliedState::default());
        };
        let revision = data.get("revision").and_then(|r| r.parse().ok());
        let store = data.get("store").cloned();
        let objects: Vec<StoredObject> = match data.get("objects") {
            Some(text) => serde_json::from_str(text).map_err(|source| Error::Decode {
                what: format!("ConfigMap {STATE_CONFIG_MAP} objects"),
                source,
            })?,
            None => Vec::new(),
        };
        Ok(AppliedState {
            revision,
            store,
            objects: objects.into_iter().map(|o| (o.object, o.workload)).collect(),
            ..AppliedState::default()
        })
    }

    /// Persists `state`.
    pub async fn save_state(&self, state: &AppliedState) -> Result<()> {
        let objects: Vec<StoredObject> = state
            .objects
            .iter()
            .map(|(object, workload)| StoredObject {
                object: object.clone(),
                workload: workload.clone(),
            })
            .collect();
        let mut data = BTreeMap::new();
        if let Some(revision) = state.revision {
            data.insert("revision".to_owned(), revision.to_string());
        }
        if let Some(store) = &state.store {
            data.insert("store".to_owned(), store.clone());
        }
        data.insert(
            "objects".to_owned(),
            serde_json::to_string(&objects).expect("object references always serialize"),
        );
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(STATE_CONFIG_MAP.to_owned()),
                namespace: Some(self.namespace.clone()),
                labels: Some(crate::own_state_labels()),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        };
        self.state_api()
            .patch(
                STATE_CONFIG_MAP,
                &PatchParams::apply(AGENT_FIELD_MANAGER).force(),
                &Patch::Apply(&cm),
            )
            .await
            .map_err(Error::kube(format!("writing ConfigMap {STATE_CONFIG_MAP}")))?;
        Ok(())
    }

    /// Applies `set` over `state` and updates `state`: on success the set's revision and objects;
    /// on any failure the previous revision, and the objects of both sets (so a later success
    /// still prunes what this attempt applied). Prunes everything the set dropped only when every
    /// object applied; otherwise only what it dropped of the workloads that applied whole
    /// ([`Applier::prune_around`]), so a half-applied workload never loses what it replaces and
    /// one failing workload does not hold back the others' removals.
    ///
    /// With `full`, or until this process has applied a whole set ([`AppliedState::verified`]),
    /// every object is applied and the prune also lists what carries the ownership label (what
    /// a lost state forgot); otherwise only the objects whose content changed since this process
    /// applied them are sent, and the prune removes what it remembers and the set no longer
    /// holds. A set of a few changes to a cluster of thousands of objects costs a few calls,
    /// not thousands; `full` (the periodic resync) still repairs what others changed.
    #[instrument(skip_all, fields(revision = set.revision, objects = set.objects.len(), full))]
    pub async fn apply(&self, set: &WorkSet, state: &mut AppliedState, full: bool) -> ApplyOutcome {
        let full = full || !state.verified;
        tracing::Span::current().record("full", full);
        let mut outcome = ApplyOutcome {
            revision: set.revision,
            ..Default::default()
        };
        let mut prepared = Vec::new();
        // Refused objects are neither applied nor pruned: what the agent applied of a kind the
        // allow-list no longer holds stays, as does someone else's object.
        let mut refused: BTreeMap<ObjectRef, Option<WorkloadRef>> = BTreeMap::new();
        // The workloads with an object that failed for a reason that may pass (`None`: a
        // failure no workload claims, such as a namespace that could not be made).
        let mut failing: BTreeSet<Option<WorkloadRef>> = BTreeSet::new();
        for object in &set.objects {
            match self.prepare(object, set.revision).await {
                Ok(p) => prepared.push(p),
                Err((object_ref, e)) => {
                    let workload = object
                        .pointer("/metadata/labels")
                        .and_then(|l| l.get(WORKLOAD_LABEL))
                        .and_then(Value::as_str)
                        .and_then(WorkloadRef::from_label_value);
                    warn!(object = %object_ref, error = %e, "not applied");
                    if !e.is_refusal() {
                        outcome.blocked = true;
                        failing.insert(workload.clone());
                    }
                    outcome
                        .errors
                        .push(apply_error("apply", &object_ref, workload.clone(), &e));
                    refused.insert(object_ref, workload);
                }
            }
        }
        prepared.sort_by_key(|p| (kind_order(&p.object_ref.kind), p.object_ref.clone()));
        outcome.objects = prepared
            .iter()
            .map(|p| (p.object_ref.clone(), p.workload.clone()))
            .collect();

        // Namespaces the set does not create itself; never prune them.
        let declared: BTreeSet<&str> = prepared
            .iter()
            .filter(|p| p.object_ref.kind == "Namespace")
            .map(|p| p.object_ref.name.as_str())
            .collect();
        let needed: BTreeSet<&str> = prepared
            .iter()
            .filter_map(|p| p.object_ref.namespace.as_deref())
            .collect();
        // Namespaces of objects applied before exist: ensured again only in a full apply.
        let known: BTreeSet<&str> = match full {
            true => BTreeSet::new(),
            false => state
                .objects
                .keys()
                .filter_map(|r| r.namespace.as_deref())
                .collect(),
        };
        for ns in needed.difference(&declared).filter(|ns| !known.contains(*ns)) {
            if let Err(e) = self.ensure_namespace(ns, true).await {
                let object_ref = ObjectRef {
                    api_version: "v1".into(),
                    kind: "Namespace".into(),
                    namespace: None,
                    name: (*ns).to_owned(),
                };
                outcome.blocked = true;
                failing.insert(None);
                outcome.errors.push(apply_error("apply", &object_ref, None, &e));
            }
        }

        let mut applied = BTreeMap::new();
        let mut content = HashMap::with_capacity(prepared.len());
        for p in &prepared {
            let remembered = state.objects.contains_key(&p.object_ref);
            // A ServiceExport exports the Service of its name to every cluster of the
            // ClusterSet: only beside this installation's own Service of that name, applied
            // before it (Services sort first), never someone else's.
            let exports_own = || {
                applied.keys().any(|r: &ObjectRef| {
                    r.kind == "Service"
                        && r.api_version == "v1"
                        && r.namespace == p.object_ref.namespace
                        && r.name == p.object_ref.name
                })
            };
            if p.object_ref.kind == "ServiceExport" && !exports_own() {
                let e = Error::Refused(format!(
                    "{} exports a Service this installation does not apply in this work set; a \
                     ServiceExport goes only beside its own Service",
                    p.object_ref
                ));
                warn!(object = %p.object_ref, error = %e, "not applied");
                outcome
                    .errors
                    .push(apply_error("apply", &p.object_ref, p.workload.clone(), &e));
                refused.insert(p.object_ref.clone(), p.workload.clone());
                continue;
            }
            if !full && remembered && state.applied_content.get(&p.object_ref) == Some(&p.content) {
                applied.insert(p.object_ref.clone(), p.workload.clone());
                content.insert(p.object_ref.clone(), p.content);
                continue;
            }
            outcome.sent += 1;
            // An object not applied before may exist already, someone else's: never taken over.
            let result = match remembered {
                true => self.apply_one(p).await.map(|()| true),
                false => match self.check_not_foreign(p).await {
                    Ok(()) => self.apply_one(p).await.map(|()| true),
                    // A namespace that exists, someone else's: what the workload needs is
                    // there; it is neither taken over nor reported.
                    Err(Error::NotOwned { .. }) if p.object_ref.kind == "Namespace" => Ok(false),
                    Err(e) => Err(e),
                },
            };
            match result {
                Ok(true) => {
                    applied.insert(p.object_ref.clone(), p.workload.clone());
                    content.insert(p.object_ref.clone(), p.content);
                }
                Ok(false) => {
                    debug!(object = %p.object_ref, "exists and is not this installation's; left as it is")
                }
                Err(e) => {
                    warn!(object = %p.object_ref, error = %e, "apply failed");
                    outcome
                        .errors
                        .push(apply_error("apply", &p.object_ref, p.workload.clone(), &e));
                    if e.is_refusal() {
                        refused.insert(p.object_ref.clone(), p.workload.clone());
                    } else {
                        outcome.blocked = true;
                        failing.insert(p.workload.clone());
                    }
                }
            }
        }

        if outcome.blocked {
            state.objects.extend(applied);
            // The next attempt applies everything and lists again: what failed may be anything.
            state.verified = false;
            state.applied_content = content;
            self.prune_around(set_refs(&prepared, &refused), &failing, state, &mut outcome)
                .await;
            return outcome;
        }
        let previous = std::mem::take(&mut state.objects);
        // Refused objects this installation applied before stay remembered (and running).
        for (object_ref, workload) in &refused {
            if let Some(remembered) = previous.get(object_ref) {
                applied.insert(object_ref.clone(), remembered.clone().or(workload.clone()));
            }
        }
        state.objects = applied;
        let mut keep = state.objects.clone();
        keep.extend(refused);
        let candidates: BTreeSet<ObjectRef> = match full {
            true => self.prune_candidates(&previous, &keep).await,
            false => previous
                .keys()
                .filter(|r| r.kind != "Namespace" && !keep.contains_key(*r))
                .cloned()
                .collect(),
        };
        // The same object under another version of its group (`autoscaling/v1` and `v2` name
        // one object): kept, not deleted for the version it was last applied at.
        let kept: BTreeSet<(String, &str, Option<&str>, &str)> = keep
            .keys()
            .map(|r| {
                (
                    crate::allowed::kind_key(&r.api_version, &r.kind),
                    r.kind.as_str(),
                    r.namespace.as_deref(),
                    r.name.as_str(),
                )
            })
            .collect();
        let candidates: Vec<ObjectRef> = candidates
            .into_iter()
            .filter(|r| {
                let key = (
                    crate::allowed::kind_key(&r.api_version, &r.kind),
                    r.kind.as_str(),
                    r.namespace.as_deref(),
                    r.name.as_str(),
                );
                !kept.contains(&key)
            })
            .collect();
        for object_ref in candidates {
            match self.prune_one(&object_ref).await {
                Ok(true) => outcome.pruned.push(object_ref),
                Ok(false) => {}
                Err(e) => {
                    warn!(object = %object_ref, error = %e, "prune failed");
                    let workload = previous.get(&object_ref).cloned().flatten();
                    outcome
                        .errors
                        .push(apply_error("prune", &object_ref, workload.clone(), &e));
                    // Remembered so the next apply tries again.
                    state.objects.insert(object_ref, workload);
                    outcome.blocked = true;
                }
            }
        }
        content.retain(|object_ref, _| state.objects.contains_key(object_ref));
        state.applied_content = content;
        state.verified = !outcome.blocked;
        if !outcome.blocked {
            state.revision = Some(set.revision);
            if set.store.is_some() {
                state.store = set.store.clone();
            }
        }
        info!(
            applied = state.objects.len(),
            sent = outcome.sent,
            pruned = outcome.pruned.len(),
            errors = outcome.errors.len(),
            "work set applied"
        );
        outcome
    }

    /// Validates an object and adds the ownership labels and revision annotation.
    async fn prepare(
        &self,
        object: &Value,
        revision: u64,
    ) -> std::result::Result<Prepared, (ObjectRef, Error)> {
        let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        let metadata = object.get("metadata").cloned().unwrap_or(Value::Null);
        let object_ref = ObjectRef {
            api_version: text(object, "apiVersion"),
            kind: text(object, "kind"),
            namespace: metadata
                .get("namespace")
                .and_then(Value::as_str)
                .map(str::to_owned),
            name: text(&metadata, "name"),
        };
        if object_ref.api_version.is_empty() || object_ref.kind.is_empty() || object_ref.name.is_empty() {
            let e = Error::InvalidObject("apiVersion, kind and metadata.name are required".to_owned());
            return Err((object_ref, e));
        }
        if let Err(why) = self.allowed.check_kind(&object_ref.api_version, &object_ref.kind) {
            return Err((object_ref, Error::Refused(why)));
        }
        let (resource, caps) = match self.resolve(&object_ref.api_version, &object_ref.kind).await {
            Ok(found) => found,
            Err(e) => return Err((object_ref, e)),
        };
        // The object's namespace must agree with its kind's scope in this cluster: a namespace
        // on a cluster-scoped kind would otherwise be dropped, and an object meant for one
        // namespace would be applied to the whole cluster.
        match (caps.scope, &object_ref.namespace) {
            (Scope::Namespaced, Some(_)) | (Scope::Cluster, None) => {}
            (Scope::Namespaced, None) => {
                let why = format!(
                    "{} is namespaced in this cluster, and the object names no namespace",
                    crate::allowed::kind_key(&object_ref.api_version, &object_ref.kind)
                );
                return Err((object_ref, Error::Refused(why)));
            }
            (Scope::Cluster, Some(namespace)) => {
                let why = format!(
                    "{} is cluster-scoped in this cluster, and the object names namespace {namespace}",
                    crate::allowed::kind_key(&object_ref.api_version, &object_ref.kind)
                );
                return Err((object_ref, Error::Refused(why)));
            }
        }
        if let Err(why) = self.allowed.check(&object_ref) {
            return Err((object_ref, Error::Refused(why)));
        }

        let mut body = object.clone();
        let Some(map) = body.as_object_mut() else {
            return Err((object_ref, Error::InvalidObject("not a JSON object".to_owned())));
        };
        map.remove("status");
        let meta = map
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        let Some(meta) = meta.as_object_mut() else {
            return Err((
                object_ref,
                Error::InvalidObject("metadata is not an object".to_owned()),
            ));
        };
        // Server-set fields would make the apply fail or fight the server.
        for key in [
            "resourceVersion",
            "uid",
            "managedFields",
            "creationTimestamp",
            "generation",
        ] {
            meta.remove(key);
        }
        if let Some(ns) = &object_ref.namespace {
            meta.insert("namespace".into(), Value::String(ns.clone()));
        }
        let labels = object_field(meta, "labels");
        labels.insert(MANAGED_BY_LABEL.into(), Value::String(MANAGED_BY_VALUE.into()));
        labels.insert(
            INSTALLATION_LABEL.into(),
            Value::String(self.installation.clone()),
        );
        let workload_label = labels.get(WORKLOAD_LABEL).cloned();
        let workload = workload_label
            .as_ref()
            .and_then(Value::as_str)
            .and_then(WorkloadRef::from_label_value);
        // The revision the object was last sent at: an object the set did not change keeps its
        // annotation, so the digest leaves it out.
        object_field(meta, "annotations").remove(REVISION_ANNOTATION);
        // Pods carry the workload label so pending pods can be reported per workload.
        if let (Some(label), "Deployment" | "StatefulSet" | "Job") =
            (workload_label, object_ref.kind.as_str())
            && let Some(template) = map.get_mut("spec").and_then(|s| s.get_mut("template"))
            && let Some(template) = template.as_object_mut()
        {
            let meta = template
                .entry("metadata")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Some(meta) = meta.as_object_mut() {
                object_field(meta, "labels")
                    .entry(WORKLOAD_LABEL)
                    .or_insert(label);
            }
        }
        let content = digest(&body);
        if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
            object_field(meta, "annotations")
                .insert(REVISION_ANNOTATION.into(), Value::String(revision.to_string()));
        }
        Ok(Prepared {
            object_ref,
            workload,
            resource,
            body,
            content,
        })
    }

    async fn resolve(&self, api_version: &str, kind: &str) -> Result<(ApiResource, ApiCapabilities)> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(found) = self.discovered.lock().await.get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let found = match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok(found) => found,
            // Not cached: the kind may be served once its CRD is installed.
            Err(kube::Error::Discovery(kube::error::DiscoveryError::MissingKind(_))) => {
                return Err(Error::KindNotServed(format!("{api_version} {kind}")));
            }
            Err(e) if api_code(&e) == Some(404) => {
                return Err(Error::KindNotServed(format!("{api_version} {kind}")));
            }
            Err(e) => return Err(Error::kube(format!("discovering {api_version} {kind}"))(e)),
        };
        self.discovered.lock().await.insert(key, found.clone());
        Ok(found)
    }

    fn api(&self, resource: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        }
    }

    /// `Ok` when `p` does not exist yet or is this installation's; an error naming who
    /// manages it otherwise.
    async fn check_not_foreign(&self, p: &Prepared) -> Result<()> {
        let api = self.api(&p.resource, p.object_ref.namespace.as_deref());
        let Some(existing) = api
            .get_metadata_opt(&p.object_ref.name)
            .await
            .map_err(Error::kube(format!("reading {}", p.object_ref)))?
        else {
            return Ok(());
        };
        let labels = existing.metadata.labels.as_ref();
        if self.owns(labels) {
            return Ok(());
        }
        let label = |key: &str| {
            labels
                .and_then(|l| l.get(key))
                .map_or("none", String::as_str)
                .to_owned()
        };
        Err(Error::NotOwned {
            object: p.object_ref.to_string(),
            managed_by: label(MANAGED_BY_LABEL),
            installation: label(INSTALLATION_LABEL),
        })
    }

    #[instrument(skip_all, fields(object = %p.object_ref))]
    async fn apply_one(&self, p: &Prepared) -> Result<()> {
        let api = self.api(&p.resource, p.object_ref.namespace.as_deref());
        let retained = p.object_ref.kind == "Deployment"
            && p.body["metadata"]["annotations"][RETAIN_REPLICAS_ANNOTATION] == "true";
        let handed_over = if retained {
            self.hand_over_replicas(&api, p).await?
        } else {
            None
        };
        let applied = api
            .patch(
                &p.object_ref.name,
                &PatchParams::apply(AGENT_FIELD_MANAGER).force(),
                &Patch::Apply(handed_over.as_ref().unwrap_or(&p.body)),
            )
            .await
            .map_err(Error::kube(format!("applying {}", p.object_ref)))?;
        if let Some(generation) = applied.metadata.generation {
            self.generations
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(p.object_ref.clone(), generation);
        }
        debug!("applied");
        Ok(())
    }

    /// A Deployment whose replicas its cluster owns (`nave.dev/retain-replicas`): created with
    /// the hub's share (`None`: apply the body as it is); once it exists, the body without
    /// `spec.replicas`. Server-side apply removes a field its last manager stops naming (the
    /// Deployment would fall back to one replica), so the live count is first applied under a
    /// field manager of its own, which keeps it; a HorizontalPodAutoscaler's next change takes
    /// it over, as any update does.
    async fn hand_over_replicas(&self, api: &Api<DynamicObject>, p: &Prepared) -> Result<Option<Value>> {
        let name = &p.object_ref.name;
        let Some(live) = api
            .get_opt(name)
            .await
            .map_err(Error::kube(format!("reading {}", p.object_ref)))?
        else {
            return Ok(None);
        };
        let replicas = &live.data["spec"]["replicas"];
        if !replicas.is_null() {
            let keep = serde_json::json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": p.object_ref.namespace},
                "spec": {"replicas": replicas},
            });
            // Not forced: the live value conflicts with no one (a count changed meanwhile is a
            // conflict, tried again at the next apply).
            api.patch(
                name,
                &PatchParams::apply(RETAINED_REPLICAS_FIELD_MANAGER),
                &Patch::Apply(&keep),
            )
            .await
            .map_err(Error::kube(format!("keeping the replicas of {}", p.object_ref)))?;
        }
        let mut body = p.body.clone();
        if let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("replicas");
        }
        Ok(Some(body))
    }

    /// Creates namespace `name` when missing. An existing namespace is left as it is, whoever
    /// made it: the agent does not take over namespaces it did not create.
    async fn ensure_namespace(&self, name: &str, owned: bool) -> Result<()> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        if api
            .get_opt(name)
            .await
            .map_err(Error::kube(format!("reading Namespace {name}")))?
            .is_some()
        {
            return Ok(());
        }
        let labels = if owned {
            BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned())])
        } else {
            crate::own_state_labels()
        };
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(labels),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {
                info!(namespace = name, "created namespace");
                Ok(())
            }
            Err(e) if api_code(&e) == Some(409) => Ok(()),
            Err(e) => Err(Error::kube(format!("creating Namespace {name}"))(e)),
        }
    }

    /// In a set that did not apply whole, prunes what it dropped of the workloads that applied:
    /// one workload's failure must not keep what another left behind. What the failing
    /// workloads dropped stays (what replaces it may be what failed), as does anything no
    /// workload claims; nothing at all is pruned when a failure belongs to no workload.
    async fn prune_around(
        &self,
        in_set: BTreeSet<ObjectRef>,
        failing: &BTreeSet<Option<WorkloadRef>>,
        state: &mut AppliedState,
        outcome: &mut ApplyOutcome,
    ) {
        if failing.contains(&None) {
            return;
        }
        let candidates: Vec<(ObjectRef, WorkloadRef)> = state
            .objects
            .iter()
            .filter(|(r, _)| r.kind != "Namespace" && !in_set.contains(*r))
            .filter_map(|(r, w)| Some((r.clone(), w.clone()?)))
            .filter(|(_, w)| !failing.contains(&Some(w.clone())))
            .collect();
        for (object_ref, workload) in candidates {
            match self.prune_one(&object_ref).await {
                Ok(pruned) => {
                    state.objects.remove(&object_ref);
                    state.applied_content.remove(&object_ref);
                    if pruned {
                        outcome.pruned.push(object_ref);
                    }
                }
                Err(e) => {
                    warn!(object = %object_ref, error = %e, "prune failed");
                    outcome
                        .errors
                        .push(apply_error("prune", &object_ref, Some(workload), &e));
                }
            }
        }
    }

    /// What may have to go: everything remembered from before, and every object of a known kind
    /// that carries the ownership label, minus the new set. Namespaces are never pruned: deleting
    /// one deletes everything in it, including what others keep there.
    async fn prune_candidates(
        &self,
        previous: &BTreeMap<ObjectRef, Option<WorkloadRef>>,
        wanted: &BTreeMap<ObjectRef, Option<WorkloadRef>>,
    ) -> BTreeSet<ObjectRef> {
        let mut candidates: BTreeSet<ObjectRef> = previous.keys().cloned().collect();
        let mut kinds: BTreeSet<(String, String)> = PRUNE_KINDS
            .iter()
            .map(|(v, k)| ((*v).to_owned(), (*k).to_owned()))
            .collect();
        kinds.extend(
            previous
                .keys()
                .chain(wanted.keys())
                .map(|r| (r.api_version.clone(), r.kind.clone())),
        );
        let selector = Self::owned_selector(&self.installation);
        for (api_version, kind) in kinds {
            if kind == "Namespace" {
                continue;
            }
            // Confined to named namespaces, the agent lists there only (it may lack the right
            // to list across the cluster: namespace-scoped RBAC); otherwise everywhere.
            let scopes: Vec<Option<&str>> = match self.allowed.exact_namespaces() {
                Some(names) => names.into_iter().map(Some).collect(),
                None => vec![None],
            };
            for scope in scopes {
                let listed = async {
                    let (resource, caps) = self.resolve(&api_version, &kind).await?;
                    let api = match (scope, caps.scope) {
                        (Some(ns), Scope::Namespaced) => {
                            Api::<DynamicObject>::namespaced_with(self.client.clone(), ns, &resource)
                        }
                        _ => Api::<DynamicObject>::all_with(self.client.clone(), &resource),
                    };
                    api.list_metadata(&ListParams::default().labels(&selector))
                        .await
                        .map_err(Error::kube(format!("listing {api_version} {kind}")))
                };
                match listed.await {
                    Ok(list) => candidates.extend(list.items.into_iter().map(|o| ObjectRef {
                        api_version: api_version.clone(),
                        kind: kind.clone(),
                        namespace: o.metadata.namespace,
                        name: o.metadata.name.unwrap_or_default(),
                    })),
                    // Remembered objects are still pruned; a kind the cluster lacks holds nothing.
                    Err(e) => debug!(api_version, kind, error = %e, "cannot list for pruning"),
                }
            }
        }
        candidates.retain(|r| r.kind != "Namespace" && !wanted.contains_key(r));
        candidates
    }

    /// Deletes the object if it still carries the ownership label; answers whether it deleted.
    #[instrument(skip_all, fields(object = %object_ref))]
    async fn prune_one(&self, object_ref: &ObjectRef) -> Result<bool> {
        let (resource, _) = self.resolve(&object_ref.api_version, &object_ref.kind).await?;
        let api = self.api(&resource, object_ref.namespace.as_deref());
        let Some(current) = api
            .get_metadata_opt(&object_ref.name)
            .await
            .map_err(Error::kube(format!("reading {object_ref}")))?
        else {
            return Ok(false);
        };
        if !self.owns(current.metadata.labels.as_ref()) {
            // Someone else took the name over (or removed the label): theirs now.
            info!("not pruning: the object is no longer this installation's");
            return Ok(false);
        }
        match api.delete(&object_ref.name, &DeleteParams::background()).await {
            Ok(_) => {
                info!(workload = ?workload_of(current.metadata.labels.as_ref()), "pruned");
                Ok(true)
            }
            Err(e) if api_code(&e) == Some(404) => Ok(false),
            Err(e) => Err(Error::kube(format!("deleting {object_ref}"))(e)),
        }
    }
}

/// Every object the set holds: those prepared to apply and those refused.
fn set_refs(
    prepared: &[Prepared],
    refused: &BTreeMap<ObjectRef, Option<WorkloadRef>>,
) -> BTreeSet<ObjectRef> {
    prepared
        .iter()
        .map(|p| p.object_ref.clone())
        .chain(refused.keys().cloned())
        .collect()
}

/// Apply order: what others refer to first (namespaces, then configuration, then services),
/// workloads last, so pods start with their ConfigMaps and Secrets in place.
fn kind_order(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        "ServiceAccount" | "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding" => 2,
        "ConfigMap" | "Secret" | "PersistentVolumeClaim" => 3,
        "Service" => 4,
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "CronJob" => 6,
        _ => 5,
    }
}

fn object_field<'a>(
    map: &'a mut serde_json::Map<String, Value>,
    key: &str,
) -> &'a mut serde_json::Map<String, Value> {
    let entry = map
        .entry(key)
        .or_insert_with(|| Value::Object(Default::default()));
    if !entry.is_object() {
        *entry = Value::Object(Default::default());
    }
    entry.as_object_mut().expect("just made an object")
}

fn apply_error(
    operation: &str,
    object_ref: &ObjectRef,
    workload: Option<WorkloadRef>,
    e: &Error,
) -> ApplyError {
    ApplyError {
        workload,
        operation: operation.to_owned(),
        api_version: object_ref.api_version.clone(),
        kind: object_ref.kind.clone(),
        namespace: object_ref.namespace.clone(),
        name: object_ref.name.clone(),
        message: e.to_string(),
    }
}
