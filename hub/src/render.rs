//! Rendering: from a MultiClusterDeployment (and its MultiClusterServices) to the Kubernetes
//! objects one workload cluster should run. Pure functions over JSON, so they test in
//! microseconds.
//!
//! ```text
//!  spec.template ──► Deployment (replicas = the cluster's share, workload label)
//!                        └─► spec.overrides matching the cluster (RFC 6902, this copy only)
//!  pod template ──► referenced ConfigMaps/Secrets (volumes, env, envFrom, imagePullSecrets)
//!                        └─► copied from the management cluster (when dependencies are on)
//!  MultiClusterService ──► Service (+ Cilium global annotations), also in the clusters calling it
//!                     └─► ServiceExport (multi-cluster services API), where the workload runs
//!  every namespace used ──► Namespace
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};

use nave_api::wire::{WORKLOAD_LABEL, WorkloadRef};
use nave_api::{Dependencies, DependencyKind, MultiClusterDeployment, MultiClusterService};
use serde_json::{Map, Value, json};

/// Label on every rendered object naming the MultiClusterDeployment's name (handy for `kubectl -l`).
pub const MCD_NAME_LABEL: &str = "nave.dev/mcd";

/// Why a cluster's Deployment could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The overrides changed which object the Deployment is.
    #[error("spec.overrides: the Deployment for cluster {cluster} no longer has the {field} Nave set")]
    Retargeted {
        /// The cluster whose copy was patched.
        cluster: String,
        /// The field that changed.
        field: &'static str,
    },
    /// An override's cluster selector is invalid.
    #[error(transparent)]
    Selector(#[from] nave_api::Error),
    /// An override's patches do not parse as RFC 6902 operations.
    #[error("spec.overrides[{index}].patches: {source}")]
    ParsePatch {
        /// Position of the override.
        index: usize,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// An override's patches do not apply to the Deployment.
    #[error("spec.overrides[{index}] does not apply to the Deployment for cluster {cluster}: {source}")]
    ApplyPatch {
        /// Position of the override.
        index: usize,
        /// The cluster whose copy was patched.
        cluster: String,
        /// What failed.
        #[source]
        source: json_patch::PatchError,
    },
}

/// What a per-cluster override may change: the Deployment's spec (but not `replicas`, which is the
/// cluster's share, nor `selector`, which ties the Deployment to its pods), and labels and
/// annotations other than Nave's own (`nave.dev/...`, on the Deployment or its pod template).
/// Everything else (`kind`, `apiVersion`, `metadata.name`, `metadata.namespace`, the label and
/// annotation maps as a whole) would make the override retarget another object: another kind, an
/// object in `kube-system`, the agent's own Deployment. `test` operations only read, so they may
/// name any path. The first path refused, with the field named; `Ok` when every path is allowed.
pub fn check_override_paths(overrides: &[nave_api::ClusterOverride]) -> Result<(), String> {
    for (index, over) in overrides.iter().enumerate() {
        for (i, op) in over.patches.iter().enumerate() {
            if op.op == nave_api::PatchOp::Test {
                continue;
            }
            let at = format!("spec.overrides[{index}].patches[{i}]");
            for (field, path) in [("path", Some(&op.path)), ("from", op.from.as_ref())] {
                let Some(path) = path else { continue };
                if let Err(why) = override_path_allowed(path) {
                    return Err(format!("{at}.{field}: Forbidden: {path:?}: {why}"));
                }
            }
        }
    }
    Ok(())
}

/// The segments of an RFC 6901 JSON pointer, decoded (`~1` is `/` and `~0` is `~`).
pub fn pointer_segments(path: &str) -> Vec<String> {
    path.split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

fn override_path_allowed(path: &str) -> Result<(), &'static str> {
    let segments = pointer_segments(path);
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    // A label or annotation key right after a `labels` or `annotations` map: Nave's own are not
    // for overrides (the agent and the hub find the workload's objects and pods by them).
    for pair in segments.windows(2) {
        if matches!(pair[0], "labels" | "annotations") && pair[1].starts_with("nave.dev/") {
            return Err("Nave's own labels and annotations cannot be overridden");
        }
    }
    match segments.as_slice() {
        ["spec", "replicas", ..] => Err("replicas is each cluster's share, set by the placement"),
        ["spec", "selector", ..] => Err("the selector ties the Deployment to its pods"),
        ["spec", "ordinals", ..] => {
            Err("a StatefulSet's ordinals are each cluster's range, set by the placement")
        }
        ["spec", "template", "metadata", "labels"] | ["spec", "template", "metadata"] => {
            Err("the pod labels as a whole include Nave's own; override single labels")
        }
        ["spec", _, ..] => Ok(()),
        ["metadata", "labels" | "annotations", _key] => Ok(()),
        _ => Err(
            "an override may change the Deployment's spec and single labels or annotations, \
             not which object it is (kind, apiVersion, name, namespace)",
        ),
    }
}

/// The workload reference of an MCD.
pub fn workload_ref(mcd: &MultiClusterDeployment) -> WorkloadRef {
    WorkloadRef::new(
        mcd.metadata.namespace.clone().unwrap_or_default(),
        mcd.metadata.name.clone().unwrap_or_default(),
    )
}

/// The labels Nave puts on every object it renders for a workload.
/// A MultiClusterResource's and a MultiClusterJob's objects carry the first only (they come
/// from no MCD).
pub fn workload_labels(workload: &WorkloadRef) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([(WORKLOAD_LABEL.to_owned(), workload.label_value())]);
    if workload.resource_name().is_none() && workload.job_name().is_none() {
        labels.insert(MCD_NAME_LABEL.to_owned(), workload.name.clone());
    }
    labels
}

/// The Deployment (or StatefulSet, by `spec.template.kind`) for one cluster: the template's
/// metadata and spec, `replicas` set to the cluster's share (and a StatefulSet's
/// `ordinals.start` to the first of its range, `first_ordinal`), the workload labels on the
/// object and its pod template, the template's digest (`template_hash`, [`template_hash`] of
/// `mcd`, computed once for every cluster), then every override that applies to `cluster` (by
/// name or by its `labels`), in order.
pub fn render_deployment(
    mcd: &MultiClusterDeployment,
    cluster: &str,
    cluster_labels: &BTreeMap<String, String>,
    replicas: u32,
    first_ordinal: Option<u32>,
    template_hash: &str,
) -> Result<Value, RenderError> {
    let kind = mcd.spec.template.kind.as_str();
    let workload = workload_ref(mcd);
    let template = &mcd.spec.template;
    let mut extra = BTreeMap::new();
    if mcd.spec.retain_replicas {
        extra.insert(nave_api::RETAIN_REPLICAS_ANNOTATION.to_owned(), "true".to_owned());
    }
    let mut deployment = workload_object(
        ("apps/v1", kind),
        &workload.name,
        &workload,
        &template.metadata,
        &template.spec,
        template_hash,
        extra,
    );
    let spec = &mut deployment["spec"];
    spec["replicas"] = json!(replicas);
    let ordinals = match mcd.spec.template.kind {
        nave_api::WorkloadKind::StatefulSet => json!({"start": first_ordinal.unwrap_or(0)}),
        nave_api::WorkloadKind::Deployment => Value::Null,
    };
    if !ordinals.is_null() {
        spec["ordinals"] = ordinals.clone();
    }
    for (index, over) in mcd.spec.overrides.iter().enumerate() {
        if !over.applies_to(index, cluster, cluster_labels)? {
            continue;
        }
        let ops = serde_json::to_value(&over.patches)
            .map_err(|source| RenderError::ParsePatch { index, source })?;
        let patch: json_patch::Patch =
            serde_json::from_value(ops).map_err(|source| RenderError::ParsePatch { index, source })?;
        json_patch::patch(&mut deployment, &patch).map_err(|source| RenderError::ApplyPatch {
            index,
            cluster: cluster.to_owned(),
            source,
        })?;
    }
    // Whatever the overrides did, the object is the one intended: checked again after rendering,
    // so a path rule missed above cannot send another object to the agent.
    let intended = [
        ("apiVersion", deployment["apiVersion"] == "apps/v1"),
        ("kind", deployment["kind"] == kind),
        (
            "metadata.name",
            deployment["metadata"]["name"] == workload.name.as_str(),
        ),
        (
            "metadata.namespace",
            deployment["metadata"]["namespace"] == workload.namespace.as_str(),
        ),
        ("spec.replicas", deployment["spec"]["replicas"] == json!(replicas)),
        (
            "spec.ordinals",
            deployment["spec"].get("ordinals").cloned().unwrap_or(Value::Null) == ordinals,
        ),
        (
            "metadata.labels",
            deployment["metadata"]["labels"][WORKLOAD_LABEL] == workload.label_value().as_str(),
        ),
    ];
    if let Some((field, _)) = intended.iter().find(|(_, ok)| !ok) {
        return Err(RenderError::Retargeted {
            cluster: cluster.to_owned(),
            field,
        });
    }
    Ok(deployment)
}

/// The object every workload kind is rendered from, one mechanism for all of them: `name` in the
/// workload's namespace, the template's labels and annotations with Nave's (the workload labels,
/// the template digest, `annotations`), and `spec` with the workload label on its pod template
/// (the agent reports pods by it from the first pod on).
fn workload_object(
    (api_version, kind): (&str, &str),
    name: &str,
    workload: &WorkloadRef,
    template: &nave_api::TemplateMetadata,
    spec: &Value,
    template_hash: &str,
    annotations: BTreeMap<String, String>,
) -> Value {
    let mut labels = template.labels.clone();
    labels.extend(workload_labels(workload));
    let mut all_annotations = template.annotations.clone();
    all_annotations.insert(
        nave_api::TEMPLATE_HASH_ANNOTATION.to_owned(),
        template_hash.to_owned(),
    );
    all_annotations.extend(annotations);
    let mut spec = spec.clone();
    if !spec.is_object() {
        spec = Value::Object(Map::new());
    }
    let pod_labels = pointer_object(&mut spec, &["template", "metadata", "labels"]);
    pod_labels.insert(WORKLOAD_LABEL.to_owned(), json!(workload.label_value()));
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": workload.namespace,
            "labels": labels,
            "annotations": all_annotations,
        },
        "spec": spec,
    })
}

/// One piece of a MultiClusterJob, as the `batch/v1` Job its cluster runs: the template's Job
/// with the piece's `completions` and `parallelism`, [`nave_api::job::JOB_INDEX_OFFSET_ENV`] set
/// to its first index in every container, suspended when `suspend` (the job failed elsewhere).
/// Its own `ttlSecondsAfterFinished` and selector are left out: the hub removes the Job, and
/// the cluster makes the selector.
pub fn render_job(
    mcj: &nave_api::MultiClusterJob,
    piece: &nave_api::JobPiece,
    suspend: bool,
    template_hash: &str,
) -> Value {
    use nave_api::job::{JOB_INDEX_OFFSET_ANNOTATION, JOB_INDEX_OFFSET_ENV};
    let workload = WorkloadRef::job(
        mcj.metadata.namespace.clone().unwrap_or_default(),
        mcj.metadata.name.as_deref().unwrap_or_default(),
    );
    let template = &mcj.spec.template;
    let offset = piece.start.to_string();
    let mut job = workload_object(
        ("batch/v1", "Job"),
        &piece.job,
        &workload,
        &template.metadata,
        &template.spec,
        template_hash,
        BTreeMap::from([(JOB_INDEX_OFFSET_ANNOTATION.to_owned(), offset.clone())]),
    );
    let spec = &mut job["spec"];
    spec["completions"] = json!(piece.completions);
    spec["parallelism"] = json!(piece.parallelism);
    if let Some(fields) = spec.as_object_mut() {
        for field in ["ttlSecondsAfterFinished", "selector", "manualSelector"] {
            fields.remove(field);
        }
        if suspend {
            fields.insert("suspend".to_owned(), json!(true));
        }
    }
    let pod = pointer_object(spec, &["template", "spec"]);
    for list in ["containers", "initContainers"] {
        for container in pod
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let env = pointer_object(container, &[])
                .entry("env")
                .or_insert_with(|| json!([]));
            if !env.is_array() {
                *env = json!([]);
            }
            let env = env.as_array_mut().expect("made an array above");
            env.retain(|e| e["name"] != JOB_INDEX_OFFSET_ENV);
            env.push(json!({"name": JOB_INDEX_OFFSET_ENV, "value": offset}));
        }
    }
    job
}

/// A digest of `spec.template` (16 hex digits): which template a cluster's Deployment was
/// rendered from, whatever its replicas and overrides.
pub fn template_hash(mcd: &MultiClusterDeployment) -> String {
    short_digest(&mcd.spec.template)
}

/// The first 16 hex digits of the SHA-256 of `value` as JSON: the digests Nave puts in
/// [`nave_api::TEMPLATE_HASH_ANNOTATION`].
pub fn short_digest(value: &impl serde::Serialize) -> String {
    use sha2::Digest as _;
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let mut hex = crate::store::hex(&sha2::Sha256::digest(&bytes));
    hex.truncate(16);
    hex
}

/// At most `max` characters of `text`, with `...` when cut (messages quoting outside input).
pub fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_owned(),
    }
}

/// The object at `path` under `root`, created as an empty object (and made one) where missing.
fn pointer_object<'a>(root: &'a mut Value, path: &[&str]) -> &'a mut Map<String, Value> {
    let mut current = root;
    for key in path {
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
        current = current
            .as_object_mut()
            .expect("made an object above")
            .entry(*key)
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !current.is_object() {
        *current = Value::Object(Map::new());
    }
    current.as_object_mut().expect("made an object above")
}

/// The ConfigMaps and Secrets a pod template (`spec.template` of a DeploymentSpec, as JSON)
/// refers to, plus `include`, minus `exclude`; empty when dependencies are off.
pub fn dependencies(deployment_spec: &Value, deps: &Dependencies) -> BTreeSet<(DependencyKind, String)> {
    let mut found = BTreeSet::new();
    if !deps.enabled {
        return found;
    }
    let pod = &deployment_spec["template"]["spec"];
    let mut add = |kind: DependencyKind, name: &Value| {
        if let Some(name) = name.as_str().filter(|n| !n.is_empty()) {
            found.insert((kind, name.to_owned()));
        }
    };
    for volume in pod["volumes"].as_array().into_iter().flatten() {
        add(DependencyKind::ConfigMap, &volume["configMap"]["name"]);
        add(DependencyKind::Secret, &volume["secret"]["secretName"]);
        for source in volume["projected"]["sources"].as_array().into_iter().flatten() {
            add(DependencyKind::ConfigMap, &source["configMap"]["name"]);
            add(DependencyKind::Secret, &source["secret"]["name"]);
        }
    }
    for secret in pod["imagePullSecrets"].as_array().into_iter().flatten() {
        add(DependencyKind::Secret, &secret["name"]);
    }
    let containers = ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(|key| pod[key].as_array().into_iter().flatten());
    for container in containers {
        for env in container["env"].as_array().into_iter().flatten() {
            add(
                DependencyKind::ConfigMap,
                &env["valueFrom"]["configMapKeyRef"]["name"],
            );
            add(DependencyKind::Secret, &env["valueFrom"]["secretKeyRef"]["name"]);
        }
        for from in container["envFrom"].as_array().into_iter().flatten() {
            add(DependencyKind::ConfigMap, &from["configMapRef"]["name"]);
            add(DependencyKind::Secret, &from["secretRef"]["name"]);
        }
    }
    for include in &deps.include {
        found.insert((include.kind, include.name.clone()));
    }
    for exclude in &deps.exclude {
        found.remove(&(exclude.kind, exclude.name.clone()));
    }
    found
}

/// A copy of a ConfigMap or Secret read from the management cluster, for a workload cluster:
/// its data and type, its own labels and annotations plus the workload labels; server-assigned
/// metadata (uid, resourceVersion, managedFields, owner references) left out.
pub fn copy_dependency(object: &Value, workload: &WorkloadRef) -> Value {
    let meta = &object["metadata"];
    let mut labels: BTreeMap<String, Value> = meta["labels"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    for (key, value) in workload_labels(workload) {
        labels.insert(key, json!(value));
    }
    let mut metadata = json!({
        "name": meta["name"],
        "namespace": meta["namespace"],
        "labels": labels,
    });
    if let Some(annotations) = meta["annotations"].as_object() {
        // The last-applied annotation describes the source object, not the copy.
        let kept: Map<String, Value> = annotations
            .iter()
            .filter(|(k, _)| k.as_str() != "kubectl.kubernetes.io/last-applied-configuration")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !kept.is_empty() {
            metadata["annotations"] = Value::Object(kept);
        }
    }
    let mut copy = json!({
        "apiVersion": "v1",
        "kind": object["kind"],
        "metadata": metadata,
    });
    for key in ["data", "binaryData", "stringData", "type", "immutable"] {
        if let Some(value) = object.get(key).filter(|v| !v.is_null()) {
            copy[key] = value.clone();
        }
    }
    copy
}

/// A Namespace object, for a cluster that runs workloads in it.
pub fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// The Service of a MultiClusterService, for every cluster that runs `workload` (the MCD it
/// follows, whose pod selector is the default). Labelled with that workload, so it goes and
/// comes with it.
pub fn render_service(
    mcs: &MultiClusterService,
    workload: &WorkloadRef,
    default_selector: &BTreeMap<String, String>,
) -> Result<Value, serde_json::Error> {
    let mut labels = mcs.spec.metadata.labels.clone();
    labels.extend(workload_labels(workload));
    let mut metadata = json!({
        "name": mcs.metadata.name,
        "namespace": mcs.metadata.namespace,
        "labels": labels,
    });
    let annotations = mcs.spec.service_annotations();
    if !annotations.is_empty() {
        metadata["annotations"] = json!(annotations);
    }
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": serde_json::to_value(mcs.spec.service_spec(default_selector))?,
    }))
}

/// The `ServiceExport` (multi-cluster services API) of a MultiClusterService that asks for one
/// (`spec.serviceExport`), for the clusters that run `workload`: named as the Service it exports,
/// labelled with the workload so it goes and comes with it.
pub fn render_service_export(mcs: &MultiClusterService, workload: &WorkloadRef) -> Value {
    let mut labels = mcs.spec.metadata.labels.clone();
    labels.extend(workload_labels(workload));
    json!({
        "apiVersion": nave_api::SERVICE_EXPORT_API_VERSION,
        "kind": nave_api::SERVICE_EXPORT_KIND,
        "metadata": {
            "name": mcs.metadata.name,
            "namespace": mcs.metadata.namespace,
            "labels": labels,
        },
    })
}

/// The identity of an object in a work set: kind, namespace, name.
pub fn object_key(object: &Value) -> (String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        text(&object["kind"]),
        text(&object["metadata"]["namespace"]),
        text(&object["metadata"]["name"]),
    )
}

/// Annotation on an object that several workloads contribute to one cluster (a ConfigMap two
/// MultiClusterDeployments mount): the [`WorkloadRef::label_value`] of each, sorted and
/// comma-separated. The workload labels name the first; the object stays while any is left.
pub const SHARED_BY_ANNOTATION: &str = "nave.dev/shared-by";

/// The workloads ([`WorkloadRef::label_value`]) that contribute `object` to a work set.
pub fn contributors(object: &Value) -> BTreeSet<String> {
    let metadata = &object["metadata"];
    match metadata["annotations"][SHARED_BY_ANNOTATION].as_str() {
        Some(list) => list
            .split(',')
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect(),
        None => metadata["labels"][WORKLOAD_LABEL]
            .as_str()
            .map(str::to_owned)
            .into_iter()
            .collect(),
    }
}

/// Labels `object` with the first of `users` and, when there are several, lists them all in
/// [`SHARED_BY_ANNOTATION`].
fn set_contributors(object: &mut Value, users: &BTreeSet<String>) {
    let Some(first) = users.first().and_then(|w| WorkloadRef::from_label_value(w)) else {
        return;
    };
    let labels = pointer_object(object, &["metadata", "labels"]);
    for (key, value) in workload_labels(&first) {
        labels.insert(key, Value::String(value));
    }
    let annotations = pointer_object(object, &["metadata", "annotations"]);
    if users.len() > 1 {
        let list = users.iter().map(String::as_str).collect::<Vec<_>>().join(",");
        annotations.insert(SHARED_BY_ANNOTATION.to_owned(), Value::String(list));
    } else {
        annotations.remove(SHARED_BY_ANNOTATION);
    }
    if annotations.is_empty()
        && let Some(metadata) = object["metadata"].as_object_mut()
    {
        metadata.remove("annotations");
    }
}

/// Replaces `workload`'s objects in a cluster's work set with `objects`, and the Namespaces with
/// exactly those the remaining namespaced objects use.
///
/// An object several workloads contribute (a ConfigMap two of them mount) is kept once, with the
/// content rendered last (every copy comes from the same source object) and every contributor
/// listed in [`SHARED_BY_ANNOTATION`]: it leaves the set only when the last of them stops
/// contributing it, so deleting one workload never takes away what another still uses.
pub fn merge_work(current: &[Value], workload: &WorkloadRef, objects: Vec<Value>) -> Vec<Value> {
    let me = workload.label_value();
    let mut merged: BTreeMap<(String, String, String), (Value, BTreeSet<String>)> = BTreeMap::new();
    for object in current.iter().filter(|o| o["kind"] != "Namespace") {
        let mut users = contributors(object);
        users.remove(&me);
        if !users.is_empty() {
            merged.insert(object_key(object), (object.clone(), users));
        }
    }
    for object in objects.into_iter().filter(|o| o["kind"] != "Namespace") {
        let entry = merged
            .entry(object_key(&object))
            .or_insert_with(|| (Value::Null, BTreeSet::new()));
        entry.0 = object;
        entry.1.insert(me.clone());
    }
    let mut out: Vec<Value> = merged
        .into_values()
        .map(|(mut object, users)| {
            set_contributors(&mut object, &users);
            object
        })
        .collect();
    let namespaces: BTreeSet<String> = out
        .iter()
        .filter_map(|o| o["metadata"]["namespace"].as_str().map(str::to_owned))
        .filter(|ns| !ns.is_empty())
        .collect();
    out.extend(namespaces.iter().map(|ns| namespace(ns)));
    out.sort_by_key(object_key);
    out
}

/// The key of an object in a set: kind, namespace, name.
pub type Key = (String, String, String);

/// An object of a work set as the hub keeps it between writes: its JSON text. Parsed, a small
/// Deployment weighs about twenty times its text (each JSON object a tree node of some 600
/// bytes, however few its members), and a set's objects are read as values only when they are
/// written, loaded or looked into.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Kept(Box<str>);

impl Kept {
    fn of(object: &Value) -> Kept {
        Kept(object.to_string().into_boxed_str())
    }

    /// The object again. The text was written from a value, so it reads back; `Null` stands for
    /// the impossible case instead of a panic.
    fn value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

/// `object` as a set sends it: labelled with its `users`, the workloads that contribute it.
fn labelled(object: &Kept, users: &BTreeSet<String>) -> Value {
    let mut object = object.value();
    set_contributors(&mut object, users);
    object
}

/// One cluster's work set as the hub keeps it between writes: by object, with which workloads
/// contribute each, so replacing one workload's objects costs those objects rather than the whole
/// set (as [`merge_work`] does, which it equals).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterWork {
    /// Every object but the Namespaces (derived), its content as last rendered, and the
    /// workloads ([`WorkloadRef::label_value`]) that contribute it.
    objects: BTreeMap<Key, (Kept, BTreeSet<String>)>,
    /// The keys each workload contributes.
    by_workload: HashMap<String, BTreeSet<Key>>,
    /// How many objects each namespace holds (the set's Namespaces are derived from it).
    namespaces: BTreeMap<String, usize>,
    /// The objects changed since the set was last written ([`ClusterWork::written`]).
    unwritten: BTreeSet<Key>,
    /// The namespaces that appeared or went since then.
    unwritten_namespaces: BTreeSet<String>,
    /// Keys of stored objects the set does not hold (see [`ClusterWork::from_stored`]).
    stale: BTreeSet<String>,
}

impl ClusterWork {
    /// The set that `objects` (as stored) make; objects no workload contributes are left out,
    /// as [`merge_work`] leaves them out.
    pub fn from_objects(objects: &[Value]) -> ClusterWork {
        let mut work = ClusterWork::default();
        for object in objects.iter().filter(|o| o["kind"] != "Namespace") {
            let users = contributors(object);
            if users.is_empty() {
                continue;
            }
            let key = object_key(object);
            for user in &users {
                work.by_workload
                    .entry(user.clone())
                    .or_default()
                    .insert(key.clone());
            }
            if !key.1.is_empty() {
                *work.namespaces.entry(key.1.clone()).or_default() += 1;
            }
            work.objects.insert(key, (Kept::of(object), users));
        }
        work
    }

    /// The set that `stored` (a set as the store holds it) makes, with whatever the store holds
    /// differently from how the set renders (an object no workload contributes, a Namespace no
    /// object uses, content rendered by an older hub) noted as unwritten, so the next write puts
    /// the store right.
    pub fn from_stored(stored: &[Value]) -> ClusterWork {
        let mut work = ClusterWork::from_objects(stored);
        let mut rendered: BTreeMap<String, Value> = work
            .to_objects()
            .into_iter()
            .map(|o| (nave_api::wire::work_key(&o), o))
            .collect();
        for object in stored {
            let key = nave_api::wire::work_key(object);
            match rendered.remove(&key) {
                Some(same) if same == *object => {}
                Some(_) => work.note_unwritten(object),
                None => {
                    work.stale.insert(key);
                }
            }
        }
        for object in rendered.values() {
            work.note_unwritten(object);
        }
        work
    }

    fn note_unwritten(&mut self, object: &Value) {
        let key = object_key(object);
        match object["kind"] == "Namespace" {
            true => self.unwritten_namespaces.insert(key.2),
            false => self.unwritten.insert(key),
        };
    }

    /// Counts an object in or out of its namespace, noting a namespace that appears or goes.
    fn count(&mut self, key: &Key, delta: isize) {
        let namespace = &key.1;
        if namespace.is_empty() {
            return;
        }
        let count = self.namespaces.entry(namespace.clone()).or_default();
        let before = *count;
        *count = count.saturating_add_signed(delta);
        if (before == 0) != (*count == 0) {
            self.unwritten_namespaces.insert(namespace.clone());
        }
        if *count == 0 {
            self.namespaces.remove(namespace);
        }
    }

    /// The workloads ([`WorkloadRef::label_value`]) that contribute objects to the set.
    pub fn workloads(&self) -> impl Iterator<Item = &String> {
        self.by_workload.keys()
    }

    /// Replaces `workload`'s objects with `objects`; answers whether the set changed. An
    /// object another workload contributes too stays (with the content rendered last) until the
    /// last of them stops contributing it.
    pub fn replace(&mut self, workload: &WorkloadRef, objects: Vec<Value>) -> bool {
        let me = workload.label_value();
        let new: BTreeMap<Key, Kept> = objects
            .iter()
            .filter(|o| o["kind"] != "Namespace")
            .map(|o| (object_key(o), Kept::of(o)))
            .collect();
        let before = self.by_workload.remove(&me).unwrap_or_default();
        let affected: BTreeSet<Key> = before.iter().chain(new.keys()).cloned().collect();
        // An object is sent as its content labelled with its contributors (see `rendered`).
        let was: Vec<Option<(Kept, BTreeSet<String>)>> =
            affected.iter().map(|k| self.objects.get(k).cloned()).collect();
        for key in before.iter().filter(|k| !new.contains_key(*k)) {
            if let Some((_, users)) = self.objects.get_mut(key) {
                users.remove(&me);
                if users.is_empty() {
                    self.objects.remove(key);
                    self.count(key, -1);
                }
            }
        }
        let mine: BTreeSet<Key> = new.keys().cloned().collect();
        for (key, object) in new {
            if !self.objects.contains_key(&key) {
                self.count(&key, 1);
            }
            let entry = self
                .objects
                .entry(key)
                .or_insert_with(|| (Kept(Box::from("null")), BTreeSet::new()));
            entry.0 = object;
            entry.1.insert(me.clone());
        }
        if !mine.is_empty() {
            self.by_workload.insert(me, mine);
        }
        let mut changed = false;
        for (key, was) in affected.into_iter().zip(was) {
            let now = self.objects.get(&key);
            // The same content and contributors send the same object; other content may too
            // (a shared object's content as another contributor rendered it).
            let differs = match (now, &was) {
                (Some(now), Some(was)) => now != was && labelled(&now.0, &now.1) != labelled(&was.0, &was.1),
                (now, was) => now.is_some() != was.is_some(),
            };
            if differs {
                self.unwritten.insert(key);
                changed = true;
            }
        }
        changed
    }

    /// What changed since the set was last written: the objects to write (added or changed,
    /// as [`to_objects`](ClusterWork::to_objects) renders them) and the
    /// [`work_key`](nave_api::wire::work_key)s of those that went.
    pub fn unwritten(&self) -> (Vec<Value>, Vec<String>) {
        let mut changed = Vec::new();
        let mut removed = Vec::new();
        for key in &self.unwritten {
            match self.rendered(key) {
                Some(object) => changed.push(object),
                None => removed.push(nave_api::wire::work_key_of(&key.0, &key.1, &key.2)),
            }
        }
        removed.extend(self.stale.iter().cloned());
        for name in &self.unwritten_namespaces {
            match self.namespaces.contains_key(name) {
                true => changed.push(namespace(name)),
                false => removed.push(nave_api::wire::work_key_of("Namespace", "", name)),
            }
        }
        (changed, removed)
    }

    /// Whether anything changed since the set was last written.
    pub fn is_unwritten(&self) -> bool {
        !self.unwritten.is_empty() || !self.unwritten_namespaces.is_empty() || !self.stale.is_empty()
    }

    /// Notes that the set as it is now was written.
    pub fn written(&mut self) {
        self.unwritten.clear();
        self.unwritten_namespaces.clear();
        self.stale.clear();
    }

    /// Of `objects`, those another contributor than `workload` holds in the set already, with
    /// that contributor ([`WorkloadRef::label_value`]): a MultiClusterResource sends nothing that
    /// another contributes, so it never takes over a workload's Deployment or ConfigMap.
    pub fn held_by_others(&self, workload: &WorkloadRef, objects: &[Value]) -> Vec<(Key, String)> {
        let me = workload.label_value();
        objects
            .iter()
            .filter_map(|object| {
                let key = object_key(object);
                let (_, users) = self.objects.get(&key)?;
                let other = users.iter().find(|u| **u != me)?;
                Some((key, other.clone()))
            })
            .collect()
    }

    /// Every object `workload` contributes to the set, as last rendered (before the labels of
    /// other contributors are added).
    pub fn objects_of(&self, workload: &WorkloadRef) -> Vec<Value> {
        self.by_workload
            .get(&workload.label_value())
            .into_iter()
            .flatten()
            .filter_map(|key| self.objects.get(key).map(|(object, _)| object.value()))
            .collect()
    }

    /// The Deployment (or StatefulSet) `workload` contributes to the set, as last rendered.
    pub fn deployment(&self, workload: &WorkloadRef) -> Option<Value> {
        ["Deployment", "StatefulSet"].into_iter().find_map(|kind| {
            let key = (kind.to_owned(), workload.namespace.clone(), workload.name.clone());
            self.objects.get(&key).map(|(object, _)| object.value())
        })
    }

    /// The object of `key` as it is sent: labelled with its contributors.
    fn rendered(&self, key: &Key) -> Option<Value> {
        let (object, users) = self.objects.get(key)?;
        Some(labelled(object, users))
    }

    /// The set as it is stored and sent: every object labelled with its contributors, and the
    /// Namespaces the namespaced ones use, by key.
    pub fn to_objects(&self) -> Vec<Value> {
        let mut out: Vec<Value> = self.objects.keys().filter_map(|key| self.rendered(key)).collect();
        out.extend(self.namespaces.keys().map(|ns| namespace(ns)));
        out.sort_by_key(object_key);
        out
    }
}

pub mod resource;

#[cfg(test)]
mod tests;
