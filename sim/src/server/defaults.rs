//! Defaulting of the built-in kinds whose defaults controllers read back, after
//! kubernetes `pkg/apis/{core,apps,batch}/v1/defaults.go`.  Every function is idempotent, so
//! defaulting an already-defaulted object changes nothing (no-op writes stay no-ops).

use serde_json::{Map, Value, json};

use super::resources::ResourceType;

fn set_default(obj: &mut Value, key: &str, v: Value) {
    if let Some(m) = obj.as_object_mut() {
        let e = m.entry(key.to_owned()).or_insert(Value::Null);
        if e.is_null() {
            *e = v;
        }
    }
}

fn obj_entry<'a>(obj: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    let m = obj.as_object_mut()?;
    let e = m.entry(key.to_owned()).or_insert_with(|| json!({}));
    if e.is_null() {
        *e = json!({});
    }
    e.is_object().then_some(e)
}

fn default_container(c: &mut Value) {
    if !c.is_object() {
        return;
    }
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    let image = c["image"].as_str().unwrap_or_default().to_owned();
    let last = image.rsplit('/').next().unwrap_or_default();
    let tagged = last.contains(':') && !last.ends_with(":latest");
    let pinned = image.contains('@');
    set_default(
        c,
        "imagePullPolicy",
        json!(if tagged || pinned {
            "IfNotPresent"
        } else {
            "Always"
        }),
    );
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            set_default(p, "protocol", json!("TCP"));
        }
    }
    // Requests default to limits when only limits are set.
    if let Some(res) = c.get_mut("resources").filter(|r| r.is_object())
        && let Some(limits) = res.get("limits").and_then(Value::as_object).cloned()
        && let Some(requests) = obj_entry(res, "requests").and_then(Value::as_object_mut)
    {
        for (k, v) in limits {
            requests.entry(k).or_insert(v);
        }
    }
}

/// PodSpec defaults (pods and templates).
pub fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "securityContext", json!({}));
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                default_container(c);
            }
        }
    }
}

fn default_template(obj: &mut Value) {
    if let Some(spec) = obj.pointer_mut("/spec/template/spec") {
        default_pod_spec(spec);
    }
}

/// The QoS class of a pod spec (`Guaranteed`, `Burstable`, `BestEffort`).
pub fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        let req = c.pointer("/resources/requests").and_then(Value::as_object);
        let lim = c.pointer("/resources/limits").and_then(Value::as_object);
        if req.is_some_and(|m| !m.is_empty()) || lim.is_some_and(|m| !m.is_empty()) {
            any = true;
        }
        for r in ["cpu", "memory"] {
            let l = lim.and_then(|m| m.get(r));
            let q = req.and_then(|m| m.get(r)).or(l);
            if l.is_none() || q != l {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Applies the defaults of `rt` to `obj` (spec and metadata only; status is handled by the
/// create/update paths).
pub fn apply(rt: &ResourceType, obj: &mut Value) {
    if rt.is_custom() {
        return;
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => {
            if let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) {
                default_pod_spec(spec);
                set_default(spec, "enableServiceLinks", json!(true));
                set_default(spec, "priority", json!(0));
                set_default(spec, "serviceAccountName", json!("default"));
                if let Some(m) = spec.as_object_mut()
                    && !m.contains_key("serviceAccount")
                    && let Some(sa) = m.get("serviceAccountName").cloned()
                {
                    m.insert("serviceAccount".into(), sa);
                }
                set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
                // DefaultTolerationSeconds admission.
                let tolerations = spec
                    .as_object_mut()
                    .map(|m| m.entry("tolerations").or_insert_with(|| json!([])));
                if let Some(Value::Array(ts)) = tolerations {
                    for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
                        let has = ts.iter().any(|t| {
                            (t["key"].as_str() == Some(key)
                                || (t["key"].is_null() && t["operator"] == "Exists"))
                                && (t["effect"].is_null() || t["effect"] == "NoExecute")
                        });
                        if !has {
                            ts.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
                        }
                    }
                }
            }
        }
        ("", "services") => {
            if let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) {
                set_default(spec, "type", json!("ClusterIP"));
                set_default(spec, "sessionAffinity", json!("None"));
                if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports {
                        set_default(p, "protocol", json!("TCP"));
                        if p.get("targetPort").is_none_or(Value::is_null)
                            && let Some(port) = p.get("port").cloned()
                        {
                            p["targetPort"] = port;
                        }
                    }
                }
            }
        }
        ("", "persistentvolumeclaims") => {
            if let Some(spec) = obj_entry(obj, "spec") {
                set_default(spec, "volumeMode", json!("Filesystem"));
            }
        }
        ("", "namespaces") => {
            if let Some(spec) = obj_entry(obj, "spec") {
                set_default(spec, "finalizers", json!(["kubernetes"]));
            }
        }
        ("", "replicationcontrollers") => {
            if let Some(spec) = obj_entry(obj, "spec") {
                set_default(spec, "replicas", json!(1));
            }
            default_template(obj);
        }
        ("apps", "deployments") => {
            if let Some(spec) = obj_entry(obj, "spec") {
                set_default(spec, "replicas", json!(1));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(spec, "progressDeadlineSeconds", json!(600));
                if let Some(strategy) = obj_entry(spec, "strategy") {
                    set_default(strategy, "type", json!("RollingUpdate"));
                    if strategy["type"] == "RollingUpdate"
                        && let Some(ru) = obj_entry(strategy, "rollingUpdate")
                    {
                        set_default(ru, "maxUnavailable", json!("25%"));
                        set_default(ru, "maxSurge", json!("25%"));
                    }
                }
            }
            default_template(obj);
        }
        ("apps", "replicasets") => {
            if let Some(spec) = obj_entry(obj, "spec") {
                set_default(spec, "replicas", json!(1));
            }
            default_template(obj);
        }
        ("apps", "statefulsets") => {
            if let Some(spec) = obj_entry(obj, "spec") {
                set_default(spec, "replicas", json!(1));
                set_default(spec, "podManagementPolicy", json!("OrderedReady"));
                set_default(spec, "revisionHistoryLimit", json!(10));
                if let Some(s) = obj_entry(spec, "updateStrategy") {
                    set_default(s, "type", json!("RollingUpdate"));
                    if s["type"] == "RollingUpdate"
                        && let Some(ru) = obj_entry(s, "rollingUpdate")
                    {
                        set_default(ru, "partition", json!(0));
                    }
                }
                if let Some(p) = obj_entry(spec, "persistentVolumeClaimRetentionPolicy") {
                    set_default(p, "whenDeleted", json!("Retain"));
                    set_default(p, "whenScaled", json!("Retain"));
                }
                if let Some(ts) = spec.get_mut("volumeClaimTemplates").and_then(Value::as_array_mut) {
                    for t in ts {
                        if let Some(ts) = obj_entry(t, "spec") {
                            set_default(ts, "volumeMode", json!("Filesystem"));
                        }
                    }
                }
            }
            default_template(obj);
        }
        ("apps", "daemonsets") => {
            if let Some(spec) = obj_entry(obj, "spec") {
                set_default(spec, "revisionHistoryLimit", json!(10));
                if let Some(s) = obj_entry(spec, "updateStrategy") {
                    set_default(s, "type", json!("RollingUpdate"));
                }
            }
            default_template(obj);
        }
        ("batch", "jobs") => {
            if let Some(spec) = obj_entry(obj, "spec") {
                // A non-parallel Job may leave both unset: both default to 1.
                if spec.get("completions").is_none_or(Value::is_null)
                    && spec.get("parallelism").is_none_or(Value::is_null)
                {
                    set_default(spec, "completions", json!(1));
                }
                set_default(spec, "parallelism", json!(1));
                let per_index = spec.get("backoffLimitPerIndex").is_some_and(|v| !v.is_null());
                set_default(spec, "backoffLimit", json!(if per_index { i32::MAX } else { 6 }));
                set_default(spec, "completionMode", json!("NonIndexed"));
                set_default(spec, "suspend", json!(false));
                set_default(spec, "manualSelector", json!(false));
                let failure_policy = spec.get("podFailurePolicy").is_some_and(|v| !v.is_null());
                set_default(
                    spec,
                    "podReplacementPolicy",
                    json!(if failure_policy {
                        "Failed"
                    } else {
                        "TerminatingOrFailed"
                    }),
                );
            }
            default_template(obj);
        }
        ("batch", "cronjobs") => {
            if let Some(spec) = obj_entry(obj, "spec") {
                set_default(spec, "concurrencyPolicy", json!("Allow"));
                set_default(spec, "suspend", json!(false));
                set_default(spec, "successfulJobsHistoryLimit", json!(3));
                set_default(spec, "failedJobsHistoryLimit", json!(1));
            }
            if let Some(spec) = obj.pointer_mut("/spec/jobTemplate/spec/template/spec") {
                default_pod_spec(spec);
            }
        }
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations") => {
            super::admission::default_configuration(obj);
        }
        _ => {}
    }
}

/// The selector and template labels the API server gives a Job on creation unless
/// `spec.manualSelector` is true (upstream job strategy `generateSelector`): template labels
/// `batch.kubernetes.io/controller-uid`, `batch.kubernetes.io/job-name` and their legacy
/// `controller-uid`, `job-name`; selector `batch.kubernetes.io/controller-uid: <uid>`. A Job
/// without labels of its own takes the template's. `renamed` is the name of an earlier attempt
/// at a generated name, whose labels are replaced.
pub fn generate_job_selector(obj: &mut Value, renamed: Option<&str>) {
    if obj.pointer("/spec/manualSelector") == Some(&json!(true)) {
        return;
    }
    let uid = obj.pointer("/metadata/uid").cloned().unwrap_or(Value::Null);
    let name = obj.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
    let Some(spec) = obj_entry(obj, "spec") else {
        return;
    };
    if let Some(template) = obj_entry(spec, "template")
        && let Some(meta) = obj_entry(template, "metadata")
        && let Some(labels) = obj_entry(meta, "labels").and_then(Value::as_object_mut)
    {
        for (key, value) in [
            ("batch.kubernetes.io/controller-uid", &uid),
            ("batch.kubernetes.io/job-name", &name),
            ("controller-uid", &uid),
            ("job-name", &name),
        ] {
            let e = labels.entry(key).or_insert_with(|| value.clone());
            if renamed.is_some() && e.as_str() == renamed {
                *e = value.clone();
            }
        }
    }
    if let Some(selector) = obj_entry(spec, "selector")
        && let Some(match_labels) = obj_entry(selector, "matchLabels").and_then(Value::as_object_mut)
    {
        match_labels
            .entry("batch.kubernetes.io/controller-uid")
            .or_insert(uid);
    }
    let template_labels = obj.pointer("/spec/template/metadata/labels").cloned();
    if let Some(meta) = obj_entry(obj, "metadata")
        && let Some(labels) = template_labels
    {
        let own = meta.get("labels").and_then(Value::as_object);
        let copied = renamed.is_some()
            && own.is_some_and(|l| l.get("batch.kubernetes.io/job-name").and_then(Value::as_str) == renamed);
        if own.is_none_or(Map::is_empty) || copied {
            meta["labels"] = labels;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::resources::Registry;

    #[test]
    fn deployment_defaults_are_idempotent() {
        let r = Registry::new();
        let rt = r.get("apps", "v1", "deployments").expect("deployments");
        let mut d = json!({"spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "a", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}]}}}});
        apply(&rt, &mut d);
        assert_eq!(
            d.pointer("/spec/strategy/rollingUpdate/maxSurge"),
            Some(&json!("25%"))
        );
        assert_eq!(
            d.pointer("/spec/template/spec/containers/0/imagePullPolicy"),
            Some(&json!("IfNotPresent"))
        );
        assert_eq!(
            d.pointer("/spec/template/spec/containers/0/ports/0/protocol"),
            Some(&json!("TCP"))
        );
        let once = d.clone();
        apply(&rt, &mut d);
        assert_eq!(d, once);
    }

    #[test]
    fn qos_classes() {
        assert_eq!(qos_class(&json!({"containers": [{"name": "a"}]})), "BestEffort");
        assert_eq!(
            qos_class(&json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}]})),
            "Burstable"
        );
        assert_eq!(
            qos_class(&json!({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]})),
            "Guaranteed"
        );
    }
}
