//! What a real API server checks in the built-in objects before storing them, where an emulator
//! that accepted more would let a test pass that fails against a real cluster: resource
//! quantities (a decoding error upstream, so `400`, not `422`), container images (required; no
//! surrounding whitespace in pods), and Secret `stringData` (folded into `data`, never stored).
//!
//! The image *reference* is not checked here because the API server does not check it either:
//! `image: "Nginx!"` is stored, and the kubelet reports the container `InvalidImageName`.

use base64::Engine;
use serde_json::{Map, Value};

use nave_sim_core::quantity::Quantity;

use super::error::{ApiError, ApiResult, Cause};
use super::resources::ResourceType;

/// Where the pod spec of a built-in kind is: JSON pointer and field path.
fn pod_spec_of(rt: &ResourceType) -> Option<(&'static str, &'static str)> {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => Some(("/spec", "spec")),
        ("", "podtemplates") => Some(("/template/spec", "template.spec")),
        ("", "replicationcontrollers")
        | ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => Some(("/spec/template/spec", "spec.template.spec")),
        ("batch", "cronjobs") => Some((
            "/spec/jobTemplate/spec/template/spec",
            "spec.jobTemplate.spec.template.spec",
        )),
        _ => None,
    }
}

const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

/// The quantity maps of a built-in object, as JSON pointers.
fn quantity_maps(rt: &ResourceType, obj: &Value) -> Vec<String> {
    let mut maps = Vec::new();
    if let Some((spec, _)) = pod_spec_of(rt) {
        maps.push(format!("{spec}/overhead"));
        for list in CONTAINER_LISTS {
            let n = obj
                .pointer(&format!("{spec}/{list}"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            for i in 0..n {
                maps.push(format!("{spec}/{list}/{i}/resources/requests"));
                maps.push(format!("{spec}/{list}/{i}/resources/limits"));
            }
        }
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "resourcequotas") => maps.push("/spec/hard".into()),
        ("", "persistentvolumeclaims") => {
            maps.push("/spec/resources/requests".into());
            maps.push("/spec/resources/limits".into());
        }
        ("", "limitranges") => {
            let n = obj
                .pointer("/spec/limits")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            for i in 0..n {
                for k in ["max", "min", "default", "defaultRequest", "maxLimitRequestRatio"] {
                    maps.push(format!("/spec/limits/{i}/{k}"));
                }
            }
        }
        _ => {}
    }
    maps
}

/// Rejects a resource quantity that does not parse, as the API server's decoder does: `400`
/// `<Kind> in version "<v>" cannot be handled as a <Kind>: quantities must match ...`.
pub fn check_quantities(rt: &ResourceType, obj: &Value) -> ApiResult<()> {
    if rt.is_custom() {
        return Ok(());
    }
    for pointer in quantity_maps(rt, obj) {
        let Some(map) = obj.pointer(&pointer).and_then(Value::as_object) else {
            continue;
        };
        for v in map.values() {
            let parsed = match v {
                Value::String(s) => Quantity::parse(s).map(drop),
                Value::Number(n) => Quantity::parse(&n.to_string()).map(drop),
                Value::Null => Ok(()),
                other => Quantity::parse(&other.to_string()).map(drop),
            };
            if let Err(e) = parsed {
                return Err(ApiError::bad_request(format!(
                    "{kind} in version \"{version}\" cannot be handled as a {kind}: {e}",
                    kind = rt.kind,
                    version = rt.version,
                )));
            }
        }
    }
    Ok(())
}

/// Container checks of the pod spec in `obj` (upstream `validateContainerCommon` and, for pods
/// only, `validateContainerOnlyForPod`).
pub fn validate_containers(rt: &ResourceType, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if rt.is_custom() {
        return causes;
    }
    let Some((pointer, path)) = pod_spec_of(rt) else {
        return causes;
    };
    let is_pod = rt.group.is_empty() && rt.plural == "pods";
    for list in CONTAINER_LISTS {
        let Some(containers) = obj
            .pointer(&format!("{pointer}/{list}"))
            .and_then(Value::as_array)
        else {
            continue;
        };
        for (i, c) in containers.iter().enumerate() {
            let field = format!("{path}.{list}[{i}].image");
            let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
            if image.is_empty() {
                causes.push(Cause::new("FieldValueRequired", &field, "Required value"));
            } else if (is_pod || list == "ephemeralContainers") && image.trim() != image {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    &field,
                    format!("Invalid value: {image:?}: must not have leading or trailing whitespace"),
                ));
            }
        }
    }
    causes
}

/// Folds a Secret's `stringData` into `data` (base64; a `stringData` key wins over the same key
/// in `data`) and removes it, as the API server's conversion does: `stringData` is write-only.
pub fn fold_string_data(rt: &ResourceType, obj: &mut Value) {
    if !rt.group.is_empty() || rt.plural != "secrets" {
        return;
    }
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    let Some(Value::Object(string_data)) = m.remove("stringData") else {
        return;
    };
    if string_data.is_empty() {
        return;
    }
    let data = m.entry("data").or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    let Some(data) = data.as_object_mut() else {
        return;
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    for (k, v) in string_data {
        let text = match v {
            Value::String(s) => s,
            other => other.to_string(),
        };
        data.insert(k, Value::String(b64.encode(text)));
    }
}

/// The message of the `PodScheduled=False/SchedulingGated` condition (upstream's wording).
pub const SCHEDULING_GATED_MESSAGE: &str = "Scheduling is blocked due to non-empty scheduling gates";

/// The `PodScheduled=False/SchedulingGated` condition. Upstream leaves both times null; the
/// transition time is set here, as the simulator's other conditions have one.
pub fn scheduling_gated_condition(now: &str) -> Value {
    serde_json::json!({
        "type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
        "message": SCHEDULING_GATED_MESSAGE, "lastProbeTime": null, "lastTransitionTime": now,
    })
}

/// Whether a pod has a non-empty `spec.schedulingGates`.
pub fn is_gated(pod: &Value) -> bool {
    pod.pointer("/spec/schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty())
}

fn gate_names(spec: Option<&Value>) -> Vec<&str> {
    spec.and_then(|s| s.get("schedulingGates"))
        .and_then(Value::as_array)
        .map(|gates| {
            gates
                .iter()
                .map(|g| g["name"].as_str().unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

/// Scheduling gates, as upstream's `validateSchedulingGates` and `ValidatePodSpec`: qualified,
/// unique names; no gates on a pod that is already bound; and on a pod update
/// (`validateOnlyDeletedSchedulingGates`) gates may only be removed.
pub fn validate_scheduling_gates(rt: &ResourceType, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let Some((pointer, path)) = pod_spec_of(rt) else {
        return Vec::new();
    };
    let spec = obj.pointer(pointer);
    let names = gate_names(spec);
    let mut causes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        for e in nave_sim_core::selector::is_qualified_name(name) {
            causes.push(Cause::new(
                "FieldValueInvalid",
                &format!("{path}.schedulingGates[{i}]"),
                format!("Invalid value: {name:?}: {e}"),
            ));
        }
        if names[..i].contains(name) {
            causes.push(Cause::new(
                "FieldValueDuplicate",
                &format!("{path}.schedulingGates[{i}]"),
                format!("Duplicate value: {name:?}"),
            ));
        }
    }
    let bound = spec
        .and_then(|s| s.get("nodeName"))
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    if !names.is_empty() && bound {
        causes.push(Cause::new(
            "FieldValueForbidden",
            &format!("{path}.nodeName"),
            "Forbidden: cannot be set until all schedulingGates have been cleared",
        ));
    }
    if rt.plural == "pods"
        && let Some(old) = old
    {
        let before = gate_names(old.pointer(pointer));
        for (i, name) in names.iter().enumerate() {
            if !before.contains(name) {
                causes.push(Cause::new(
                    "FieldValueForbidden",
                    &format!("{path}.schedulingGates[{i}].name"),
                    format!("Forbidden: only deletion is allowed, but found new scheduling gate '{name}'"),
                ));
            }
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::server::resources::builtins;

    fn rt(group: &str, plural: &str) -> ResourceType {
        let all = builtins();
        let found = all.iter().find(|t| t.group == group && t.plural == plural);
        found.expect("built-in type").as_ref().clone()
    }

    #[test]
    fn string_data_is_folded_into_data_and_wins_over_it() {
        let mut s = json!({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "hello", "c": "x"}});
        fold_string_data(&rt("", "secrets"), &mut s);
        assert_eq!(s, json!({"data": {"a": "eA==", "b": "aGVsbG8=", "c": "eA=="}}));
    }

    #[test]
    fn a_bad_quantity_in_a_deployment_template_is_a_bad_request() {
        let d = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "nginx", "resources": {"requests": {"cpu": "lots"}}}
        ]}}}});
        let err = check_quantities(&rt("apps", "deployments"), &d).unwrap_err();
        assert_eq!(err.code, 400);
        assert!(
            err.message.starts_with(
                "Deployment in version \"v1\" cannot be handled as a Deployment: quantities must match"
            ),
            "{}",
            err.message
        );
    }

    #[test]
    fn numeric_and_suffixed_quantities_are_accepted() {
        let p = json!({"spec": {"containers": [
            {"name": "a", "image": "nginx", "resources": {"requests": {"cpu": 2, "memory": "64Mi"},
             "limits": {"cpu": "500m"}}}
        ]}});
        check_quantities(&rt("", "pods"), &p).unwrap();
    }

    #[test]
    fn an_empty_image_is_required_in_templates_and_whitespace_is_invalid_only_in_pods() {
        let containers = json!([{"name": "a", "image": ""}, {"name": "b", "image": " nginx"}]);
        let job = json!({"spec": {"template": {"spec": {"containers": containers}}}});
        let causes = validate_containers(&rt("batch", "jobs"), &job);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.template.spec.containers[0].image");
        assert_eq!(causes[0].message, "Required value");

        let pod = json!({"spec": {"containers": containers}});
        let causes = validate_containers(&rt("", "pods"), &pod);
        assert_eq!(causes.len(), 2);
        assert_eq!(causes[1].field, "spec.containers[1].image");
    }
}
