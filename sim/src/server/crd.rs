//! CustomResourceDefinitions: validation and defaulting of the CRD object, its status conditions
//! (`NamesAccepted`, `Established`, `Terminating`), and keeping the resource registry in step with
//! the stored CRDs so that discovery and routing change in the same write.

use serde_json::{Value, json};

use super::ClusterState;
use super::error::Cause;
use super::meta::{self, meta_str};
use super::resources::{Registry, types_from_crd};

/// Finalizer that holds a deleted CRD until its custom resources are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

fn default_names(obj: &mut Value) {
    let names = &mut obj["spec"]["names"];
    if !names.is_object() {
        return;
    }
    let kind = names["kind"].as_str().unwrap_or_default().to_owned();
    if names["singular"].as_str().is_none_or(str::is_empty) {
        names["singular"] = json!(kind.to_lowercase());
    }
    if names["listKind"].as_str().is_none_or(str::is_empty) {
        names["listKind"] = json!(format!("{kind}List"));
    }
}

fn validate(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = &obj["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let plural = spec["names"]["plural"].as_str().unwrap_or_default();
    let kind = spec["names"]["kind"].as_str().unwrap_or_default();
    let name = meta_str(obj, "name").unwrap_or_default();
    if group.is_empty() {
        causes.push(Cause::new("FieldValueRequired", "spec.group", "Required value"));
    } else if !group.contains('.') {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.group",
            format!("Invalid value: {group:?}: should be a domain with at least one dot"),
        ));
    }
    if plural.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.names.plural",
            "Required value",
        ));
    }
    if kind.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.names.kind",
            "Required value",
        ));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    if !matches!(spec["scope"].as_str(), Some("Namespaced" | "Cluster")) {
        causes.push(Cause::new(
            "FieldValueNotSupported",
            "spec.scope",
            format!(
                "Unsupported value: {}: supported values: \"Cluster\", \"Namespaced\"",
                spec["scope"]
            ),
        ));
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.versions",
            "Required value: must have exactly one version marked as storage version",
        ));
    } else if versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count()
        != 1
    {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.versions",
            format!(
                "Invalid value: {}: must have exactly one version marked as storage version",
                json!(versions.iter().map(|v| v["name"].clone()).collect::<Vec<_>>())
            ),
        ));
    }
    if causes.is_empty()
        && let Err(e) = types_from_crd(obj)
    {
        causes.push(Cause::new("FieldValueInvalid", "spec.versions", e));
    }
    causes
}

fn condition(type_: &str, status: &str, reason: &str, message: &str, old: &Value) -> Value {
    let prev = old["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .filter(|c| c["status"] == status)
        .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_owned));
    json!({
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": prev.unwrap_or_else(meta::now_rfc3339),
    })
}

fn compute_status(registry: &Registry, obj: &mut Value, old: &Value) {
    let spec = obj["spec"].clone();
    let name = meta_str(obj, "name").unwrap_or_default().to_owned();
    let group = spec["group"].as_str().unwrap_or_default();
    let plural = spec["names"]["plural"].as_str().unwrap_or_default();
    let kind = spec["names"]["kind"].as_str().unwrap_or_default();
    let conflict = registry.name_conflict(&name, group, plural, kind);
    let mut conditions = Vec::new();
    let storage: Vec<Value> = spec["versions"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    let mut stored: Vec<Value> = old["status"]["storedVersions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for s in storage {
        if !stored.contains(&s) {
            stored.push(s);
        }
    }
    match conflict {
        None => {
            conditions.push(condition(
                "NamesAccepted",
                "True",
                "NoConflicts",
                "no conflicts found",
                old,
            ));
            conditions.push(condition(
                "Established",
                "True",
                "InitialNamesAccepted",
                "the initial names have been accepted",
                old,
            ));
        }
        Some(reason) => {
            conditions.push(condition(
                "NamesAccepted",
                "False",
                reason,
                &format!("\"{plural}\" is already in use"),
                old,
            ));
            conditions.push(condition(
                "Established",
                "False",
                "NotAccepted",
                "not all names are accepted",
                old,
            ));
        }
    }
    if obj.pointer("/metadata/deletionTimestamp").is_some() {
        conditions.push(condition(
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
            old,
        ));
    }
    obj["status"] = json!({
        "conditions": conditions,
        "acceptedNames": if conflict.is_none() { spec["names"].clone() } else { old["status"]["acceptedNames"].clone() },
        "storedVersions": stored,
    });
    if obj["status"]["acceptedNames"].is_null() {
        obj["status"]["acceptedNames"] = json!({"plural": "", "kind": ""});
    }
}

/// Validates and defaults a new CRD and sets its status.
pub fn prepare_create(registry: &Registry, obj: &mut Value) -> Result<(), Vec<Cause>> {
    default_names(obj);
    if obj["spec"]["conversion"].is_null() {
        obj["spec"]["conversion"] = json!({"strategy": "None"});
    }
    let causes = validate(obj);
    if !causes.is_empty() {
        return Err(causes);
    }
    compute_status(registry, obj, &Value::Null);
    Ok(())
}

/// Validates and defaults an updated CRD and recomputes its status.
pub fn prepare_update(registry: &Registry, old: &Value, obj: &mut Value) -> Result<(), Vec<Cause>> {
    default_names(obj);
    if obj["spec"]["conversion"].is_null() {
        obj["spec"]["conversion"] = json!({"strategy": "None"});
    }
    let causes = validate(obj);
    if !causes.is_empty() {
        return Err(causes);
    }
    if old["spec"]["group"] != obj["spec"]["group"] {
        return Err(vec![Cause::new(
            "FieldValueInvalid",
            "spec.group",
            "Invalid value: field is immutable",
        )]);
    }
    compute_status(registry, obj, old);
    Ok(())
}

/// Adds the `Terminating` condition to a CRD being deleted.
pub fn mark_terminating(obj: &mut Value) {
    let c = json!({
        "type": "Terminating",
        "status": "True",
        "reason": "InstanceDeletionInProgress",
        "message": "CustomResource deletion is in progress",
        "lastTransitionTime": meta::now_rfc3339(),
    });
    match obj["status"]["conditions"].as_array_mut() {
        Some(cs) => {
            cs.retain(|x| x["type"] != "Terminating");
            cs.push(c);
        }
        None => obj["status"]["conditions"] = json!([c]),
    }
}

/// Whether a stored CRD is established.
pub fn is_established(obj: &Value) -> bool {
    obj["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    })
}

/// Brings the registry in line with a committed CRD.
pub fn sync_registry(state: &ClusterState, obj: &Value, deleted: bool) {
    let name = meta_str(obj, "name").unwrap_or_default().to_owned();
    let types = if deleted || !is_established(obj) {
        Vec::new()
    } else {
        types_from_crd(obj).unwrap_or_default()
    };
    let mut reg = state.registry.write().unwrap_or_else(|e| e.into_inner());
    reg.set_crd(&name, types);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widget_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object"}}}]}
        })
    }

    #[test]
    fn new_crd_is_established_with_defaulted_names() {
        let mut c = widget_crd();
        prepare_create(&Registry::new(), &mut c).expect("valid");
        assert!(is_established(&c));
        assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(c["status"]["acceptedNames"]["singular"], "widget");
        assert_eq!(c["status"]["storedVersions"], json!(["v1alpha1"]));
    }

    #[test]
    fn wrong_name_is_rejected() {
        let mut c = widget_crd();
        c["metadata"]["name"] = json!("gadgets.example.com");
        let causes = prepare_create(&Registry::new(), &mut c).expect_err("invalid");
        assert_eq!(causes[0].field, "metadata.name");
    }
}
