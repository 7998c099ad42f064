//! Rendering a MultiClusterResource: its manifest, checked against the kinds the fleet admin
//! lets the hub send, confined to its namespace, labelled as its own, with the overrides that
//! apply to each cluster. The same work sets, contributor labels and pruning carry it as carry
//! a MultiClusterDeployment's objects.

use std::collections::{BTreeMap, BTreeSet};

use nave_api::MultiClusterResource;
use nave_api::wire::{WORKLOAD_LABEL, WorkloadRef, kind_key};
use serde_json::{Map, Value, json};

/// The kinds the hub sends for MultiClusterResources, as its admin configured them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceKinds {
    /// Namespaced kinds (`Kind.group`, or `Kind` for the core group): sent into the
    /// MultiClusterResource's own namespace.
    pub namespaced: BTreeSet<String>,
    /// Cluster-scoped kinds: sent only for MultiClusterResources in [`admin_namespace`].
    ///
    /// [`admin_namespace`]: ResourceKinds::admin_namespace
    pub cluster: BTreeSet<String>,
    /// The hub's own namespace, where only the fleet's admins write.
    pub admin_namespace: String,
}

/// Why a MultiClusterResource cannot be sent, with the field named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// The kind is not among those the admin allows.
    #[error("{0}")]
    KindNotAllowed(String),
    /// Anything else invalid in the spec.
    #[error("{0}")]
    Invalid(String),
}

/// Whether the rendered object is namespaced: decided by the admin's lists, not by the author.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Into the MultiClusterResource's namespace.
    Namespaced,
    /// Cluster-scoped.
    Cluster,
}

/// Checks `mcr` against `kinds` and itself; answers the object's scope.
pub fn validate(mcr: &MultiClusterResource, kinds: &ResourceKinds) -> Result<Scope, ResourceError> {
    let invalid = ResourceError::Invalid;
    let namespace = mcr.metadata.namespace.as_deref().unwrap_or_default();
    let name = mcr.metadata.name.as_deref().unwrap_or_default();
    if let Err(why) = WorkloadRef::resource(namespace, name).label_fits() {
        return Err(invalid(format!("metadata.name: Invalid value: {name:?}: {why}")));
    }
    let manifest = &mcr.spec.manifest;
    if !manifest.is_object() {
        return Err(invalid(
            "spec.manifest: Invalid value: must be an object".to_owned(),
        ));
    }
    let text = |pointer: &str| {
        manifest
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    for (pointer, field) in [
        ("/apiVersion", "apiVersion"),
        ("/kind", "kind"),
        ("/metadata/name", "metadata.name"),
    ] {
        if text(pointer).is_empty() {
            return Err(invalid(format!("spec.manifest.{field}: Required value")));
        }
    }
    let api_version = text("/apiVersion");
    let version_ok = match api_version.split_once('/') {
        Some((group, version)) => nave_api::wire::is_dns_subdomain(group) && is_version(version),
        None => is_version(api_version),
    };
    if !version_ok {
        return Err(invalid(format!(
            "spec.manifest.apiVersion: Invalid value: {:?}: a version (v1, v2beta1) after an \
             optional group (networking.k8s.io/v1)",
            super::truncate(api_version, 100)
        )));
    }
    let kind = text("/kind");
    if kind.len() > 63
        || !kind.starts_with(|c: char| c.is_ascii_alphabetic())
        || !kind.chars().all(|c| c.is_ascii_alphanumeric())
    {
        return Err(invalid(format!(
            "spec.manifest.kind: Invalid value: {:?}: a kind is letters and digits, at most 63",
            super::truncate(kind, 100)
        )));
    }
    let size = serde_json::to_vec(manifest).map_or(usize::MAX, |bytes| bytes.len());
    if size > MAX_MANIFEST_BYTES {
        return Err(invalid(format!(
            "spec.manifest: Too long: {size} bytes, at most {MAX_MANIFEST_BYTES} (the object is \
             kept once per selected cluster)"
        )));
    }
    if !nave_api::wire::is_dns_subdomain(text("/metadata/name")) {
        return Err(invalid(format!(
            "spec.manifest.metadata.name: Invalid value: {:?}: a lowercase RFC 1123 subdomain",
            text("/metadata/name")
        )));
    }
    if manifest.get("status").is_some() {
        return Err(invalid(
            "spec.manifest.status: Forbidden: the status is the cluster's to write".to_owned(),
        ));
    }
    let key = kind_key(text("/apiVersion"), text("/kind"));
    let given_namespace = manifest.pointer("/metadata/namespace").and_then(Value::as_str);
    let scope = if kinds.namespaced.contains(&key) {
        if let Some(other) = given_namespace.filter(|n| *n != namespace) {
            return Err(invalid(format!(
                "spec.manifest.metadata.namespace: Forbidden: {other:?}: a MultiClusterResource sends \
                 namespaced objects into its own namespace ({namespace}) only"
            )));
        }
        Scope::Namespaced
    } else if kinds.cluster.contains(&key) {
        if namespace != kinds.admin_namespace {
            return Err(ResourceError::KindNotAllowed(format!(
                "spec.manifest.kind: Forbidden: {key} is cluster-scoped; only MultiClusterResources \
                 in the hub's namespace ({}) may send it",
                kinds.admin_namespace
            )));
        }
        if let Some(other) = given_namespace {
            return Err(invalid(format!(
                "spec.manifest.metadata.namespace: Forbidden: {other:?}: {key} is cluster-scoped"
            )));
        }
        Scope::Cluster
    } else {
        let allowed: Vec<&str> = kinds
            .namespaced
            .iter()
            .chain(&kinds.cluster)
            .map(String::as_str)
            .collect();
        let allowed = match allowed.is_empty() {
            true => "none".to_owned(),
            false => allowed.join(", "),
        };
        return Err(ResourceError::KindNotAllowed(format!(
            "spec.manifest.kind: Forbidden: {key} is not among the kinds this hub sends ({allowed}); \
             the fleet's admin allows kinds with the hub's --resource-kind"
        )));
    };
    check_override_paths(mcr)?;
    for (index, over) in mcr.spec.overrides.iter().enumerate() {
        over.applies_to(index, "", &BTreeMap::new())
            .map_err(|e| invalid(e.to_string()))?;
    }
    mcr.spec
        .selects("", &BTreeMap::new())
        .map_err(|e| invalid(e.to_string()))?;
    Ok(scope)
}

/// The largest manifest sent, serialized: the hub keeps a copy per selected cluster.
pub const MAX_MANIFEST_BYTES: usize = 256 * 1024;

/// A Kubernetes API version: `v` and digits, then `alpha` or `beta` and digits, optionally.
fn is_version(version: &str) -> bool {
    let Some(rest) = version.strip_prefix('v') else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return false;
    }
    let rest = &rest[digits..];
    match rest.strip_prefix("alpha").or_else(|| rest.strip_prefix("beta")) {
        None => rest.is_empty(),
        Some(level) => !level.is_empty() && level.chars().all(|c| c.is_ascii_digit()),
    }
}

/// What an override of a MultiClusterResource may change: anything but which object it is
/// (`apiVersion`, `kind`, `metadata.name`, `metadata.namespace`), its server-set metadata, its
/// status, and Nave's own labels and annotations. `test` operations only read.
fn check_override_paths(mcr: &MultiClusterResource) -> Result<(), ResourceError> {
    for (index, over) in mcr.spec.overrides.iter().enumerate() {
        for (i, op) in over.patches.iter().enumerate() {
            if op.op == nave_api::PatchOp::Test {
                continue;
            }
            for (field, path) in [("path", Some(&op.path)), ("from", op.from.as_ref())] {
                let Some(path) = path else { continue };
                if let Err(why) = override_path_allowed(path) {
                    return Err(ResourceError::Invalid(format!(
                        "spec.overrides[{index}].patches[{i}].{field}: Forbidden: {path:?}: {why}"
                    )));
                }
            }
        }
    }
    Ok(())
}

fn override_path_allowed(path: &str) -> Result<(), &'static str> {
    let segments = super::pointer_segments(path);
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    match segments.as_slice() {
        [] | [""] => Err("the whole object cannot be replaced"),
        ["apiVersion" | "kind", ..] => Err("an override cannot change which object it is"),
        ["status", ..] => Err("the status is the cluster's to write"),
        ["metadata", "labels" | "annotations", key] if key.starts_with("nave.dev/") => {
            Err("Nave's own labels and annotations cannot be overridden")
        }
        ["metadata", "labels" | "annotations", _key] => Ok(()),
        ["metadata", ..] => Err(
            "of the metadata, an override may change single labels and annotations only, not \
             which object it is (name, namespace)",
        ),
        _ => Ok(()),
    }
}

/// The object `mcr` sends to `cluster` (its labels `labels`): the manifest without status or
/// server-set metadata, in the resource's namespace when namespaced, labelled with the
/// resource's [`WorkloadRef`], its content digest in [`nave_api::TEMPLATE_HASH_ANNOTATION`]
/// (which the agent reports back, so status tells the current content from an older one), then
/// every override that applies to the cluster. Checked again after the overrides: the object is
/// the one intended whatever they did.
pub fn render(
    mcr: &MultiClusterResource,
    scope: Scope,
    cluster: &str,
    labels: &BTreeMap<String, String>,
) -> Result<Value, ResourceError> {
    let namespace = mcr.metadata.namespace.clone().unwrap_or_default();
    let workload = WorkloadRef::resource(&namespace, mcr.metadata.name.as_deref().unwrap_or_default());
    let manifest = &mcr.spec.manifest;
    let mut object = Map::new();
    for (key, value) in manifest.as_object().into_iter().flatten() {
        if !matches!(key.as_str(), "metadata" | "status") {
            object.insert(key.clone(), value.clone());
        }
    }
    let source = &manifest["metadata"];
    let mut metadata = Map::new();
    metadata.insert("name".into(), source["name"].clone());
    if scope == Scope::Namespaced {
        metadata.insert("namespace".into(), json!(namespace));
    }
    let mut object_labels: Map<String, Value> = source["labels"].as_object().cloned().unwrap_or_default();
    object_labels.retain(|k, _| !k.starts_with("nave.dev/"));
    object_labels.insert(WORKLOAD_LABEL.into(), json!(workload.label_value()));
    metadata.insert("labels".into(), Value::Object(object_labels));
    let mut annotations: Map<String, Value> = source["annotations"].as_object().cloned().unwrap_or_default();
    annotations.retain(|k, _| {
        !k.starts_with("nave.dev/") && k != "kubectl.kubernetes.io/last-applied-configuration"
    });
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    object.insert("metadata".into(), Value::Object(metadata));
    let mut object = Value::Object(object);
    for (index, over) in mcr.spec.overrides.iter().enumerate() {
        let applies = over
            .applies_to(index, cluster, labels)
            .map_err(|e| ResourceError::Invalid(e.to_string()))?;
        if !applies {
            continue;
        }
        let ops = serde_json::to_value(&over.patches)
            .and_then(serde_json::from_value::<json_patch::Patch>)
            .map_err(|e| ResourceError::Invalid(format!("spec.overrides[{index}].patches: {e}")))?;
        json_patch::patch(&mut object, &ops).map_err(|e| {
            ResourceError::Invalid(format!(
                "spec.overrides[{index}] does not apply to the object for cluster {cluster}: {e}"
            ))
        })?;
    }
    let intended = [
        ("apiVersion", object["apiVersion"] == manifest["apiVersion"]),
        ("kind", object["kind"] == manifest["kind"]),
        (
            "metadata.name",
            object["metadata"]["name"] == manifest["metadata"]["name"],
        ),
        (
            "metadata.namespace",
            match scope {
                Scope::Namespaced => object["metadata"]["namespace"] == namespace.as_str(),
                Scope::Cluster => object["metadata"].get("namespace").is_none(),
            },
        ),
        (
            "metadata.labels",
            object["metadata"]["labels"][WORKLOAD_LABEL] == workload.label_value().as_str(),
        ),
    ];
    if let Some((field, _)) = intended.iter().find(|(_, ok)| !ok) {
        return Err(ResourceError::Invalid(format!(
            "spec.overrides: the object for cluster {cluster} no longer has the {field} it must have"
        )));
    }
    let hash = super::short_digest(&object);
    object["metadata"]["annotations"][nave_api::TEMPLATE_HASH_ANNOTATION] = json!(hash);
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds() -> ResourceKinds {
        ResourceKinds {
            namespaced: ["Role.rbac.authorization.k8s.io".to_owned()].into(),
            cluster: ["ClusterRole.rbac.authorization.k8s.io".to_owned()].into(),
            admin_namespace: "nave-system".to_owned(),
        }
    }

    fn mcr(namespace: &str, spec: Value) -> MultiClusterResource {
        serde_json::from_value(json!({
            "apiVersion": "nave.dev/v1alpha1",
            "kind": "MultiClusterResource",
            "metadata": {"name": "reader", "namespace": namespace, "generation": 1},
            "spec": spec,
        }))
        .expect("a valid MultiClusterResource")
    }

    fn role(extra_metadata: Value) -> Value {
        let mut metadata = json!({"name": "reader"});
        for (k, v) in extra_metadata.as_object().into_iter().flatten() {
            metadata[k] = v.clone();
        }
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata,
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        })
    }

    #[test]
    fn a_namespaced_object_goes_to_the_resources_namespace_labelled_as_its_own() {
        let resource = mcr(
            "shop",
            json!({"manifest": role(json!({
                "labels": {"team": "a", "nave.dev/workload": "other.web"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "x"},
                "uid": "abc", "resourceVersion": "7", "ownerReferences": [{"name": "x"}],
            }))}),
        );
        let scope = validate(&resource, &kinds()).unwrap();
        assert_eq!(scope, Scope::Namespaced);
        let object = render(&resource, scope, "eu-1", &BTreeMap::new()).unwrap();
        let metadata = &object["metadata"];
        assert_eq!(metadata["namespace"], "shop");
        assert_eq!(metadata["labels"]["nave.dev/workload"], "shop.mcr_reader");
        assert_eq!(metadata["labels"]["team"], "a");
        assert_eq!(metadata["annotations"]["note"], "x");
        assert!(metadata["annotations"]["nave.dev/template-hash"].is_string());
        for gone in ["uid", "resourceVersion", "ownerReferences"] {
            assert!(metadata.get(gone).is_none(), "{gone} left in {metadata}");
        }
        assert!(
            metadata["annotations"]
                .get("kubectl.kubernetes.io/last-applied-configuration")
                .is_none()
        );
        assert_eq!(object["rules"][0]["verbs"][0], "get");
    }

    #[test]
    fn kinds_and_namespaces_are_the_admins_choice() {
        let cases = [
            (
                mcr(
                    "shop",
                    json!({"manifest": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}}),
                ),
                "spec.manifest.kind: Forbidden: Secret is not among the kinds this hub sends",
            ),
            (
                mcr(
                    "shop",
                    json!({"manifest": role(json!({"namespace": "kube-system"}))}),
                ),
                "spec.manifest.metadata.namespace: Forbidden: \"kube-system\"",
            ),
            (
                mcr(
                    "shop",
                    json!({"manifest": {
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": "x"}, "rules": []}}),
                ),
                "ClusterRole.rbac.authorization.k8s.io is cluster-scoped; only MultiClusterResources in the hub's namespace (nave-system)",
            ),
            (
                mcr(
                    "nave-system",
                    json!({"manifest": {
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": "x", "namespace": "nave-system"}, "rules": []}}),
                ),
                "spec.manifest.metadata.namespace: Forbidden",
            ),
            (
                mcr(
                    "shop",
                    json!({"manifest": role(json!({})), "overrides": [
                    {"clusters": ["eu-1"], "patches": [{"op": "replace", "path": "/metadata/namespace", "value": "kube-system"}]}]}),
                ),
                "spec.overrides[0].patches[0].path: Forbidden: \"/metadata/namespace\"",
            ),
            (
                mcr(
                    "shop",
                    json!({"manifest": role(json!({})), "overrides": [
                    {"clusters": ["eu-1"], "patches": [{"op": "add", "path": "/metadata/labels/nave.dev~1workload", "value": "kube-system.x"}]}]}),
                ),
                "Nave's own labels",
            ),
            (
                mcr(
                    "shop",
                    json!({"manifest": role(json!({})), "overrides": [
                    {"clusters": ["eu-1"], "patches": [{"op": "replace", "path": "/kind", "value": "ClusterRoleBinding"}]}]}),
                ),
                "spec.overrides[0].patches[0].path: Forbidden: \"/kind\"",
            ),
            (
                mcr("shop", json!({"manifest": role(json!({"name": "Not_A_Name"}))})),
                "spec.manifest.metadata.name: Invalid value",
            ),
            (
                mcr(
                    "shop",
                    json!({"manifest": {"apiVersion": format!("rbac.authorization.k8s.io/v1{}", "x".repeat(100_000)),
                    "kind": "Role", "metadata": {"name": "x"}, "rules": []}}),
                ),
                "spec.manifest.apiVersion: Invalid value",
            ),
            (
                mcr(
                    "shop",
                    json!({"manifest": {"apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role", "metadata": {"name": "x"}, "rules": [{"verbs": ["x".repeat(300_000)]}]}}),
                ),
                "spec.manifest: Too long",
            ),
        ];
        for (resource, want) in cases {
            let error = validate(&resource, &kinds()).expect_err(want).to_string();
            assert!(error.contains(want), "expected {want:?}, got {error:?}");
        }
        let cluster_role = mcr(
            "nave-system",
            json!({"manifest": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "x"}, "rules": []}}),
        );
        let scope = validate(&cluster_role, &kinds()).unwrap();
        assert_eq!(scope, Scope::Cluster);
        let object = render(&cluster_role, scope, "eu-1", &BTreeMap::new()).unwrap();
        assert!(object["metadata"].get("namespace").is_none(), "{object}");
        assert_eq!(
            object["metadata"]["labels"]["nave.dev/workload"],
            "nave-system.mcr_reader"
        );
    }

    #[test]
    fn the_example_is_sent_with_the_kinds_its_header_names() {
        let text = include_str!("../../../examples/resources.yaml");
        let mut scopes = Vec::new();
        for document in serde_saphyr::from_multiple::<Value>(text).expect("the example is YAML") {
            if document["kind"] != "MultiClusterResource" {
                continue;
            }
            let resource: MultiClusterResource =
                serde_json::from_value(document).expect("a MultiClusterResource");
            let scope = validate(&resource, &kinds()).expect("the example is valid");
            let object = render(&resource, scope, "eu-west-1", &BTreeMap::new()).expect("it renders");
            scopes.push((object["kind"].as_str().unwrap_or_default().to_owned(), scope));
        }
        assert_eq!(
            scopes,
            [
                ("Role".to_owned(), Scope::Namespaced),
                ("ClusterRole".to_owned(), Scope::Cluster)
            ]
        );
    }

    #[test]
    fn overrides_change_the_object_in_the_clusters_they_select_only() {
        let resource = mcr(
            "shop",
            json!({"manifest": role(json!({})), "overrides": [{
                "clusterSelector": {"matchLabels": {"region": "cn"}},
                "patches": [
                    {"op": "replace", "path": "/rules/0/verbs", "value": ["get", "list"]},
                    {"op": "add", "path": "/metadata/labels/mirror", "value": "cn"},
                ],
            }]}),
        );
        let scope = validate(&resource, &kinds()).unwrap();
        let cn = render(&resource, scope, "cn-1", &[("region".into(), "cn".into())].into()).unwrap();
        let eu = render(&resource, scope, "eu-1", &[("region".into(), "eu".into())].into()).unwrap();
        assert_eq!(cn["rules"][0]["verbs"], json!(["get", "list"]));
        assert_eq!(cn["metadata"]["labels"]["mirror"], "cn");
        assert_eq!(eu["rules"][0]["verbs"], json!(["get"]));
        assert_ne!(
            cn["metadata"]["annotations"]["nave.dev/template-hash"],
            eu["metadata"]["annotations"]["nave.dev/template-hash"],
            "each cluster's content has its own digest"
        );
    }
}
