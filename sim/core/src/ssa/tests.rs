use serde_json::{Value, json};

use super::{Apply, ApplyError, Conflict, apply, record_update};
use crate::fieldpath::{FieldSet, builtin};

const T0: &str = "2025-01-01T00:00:00Z";
const T1: &str = "2025-01-01T00:00:10Z";
const T2: &str = "2025-01-01T00:00:20Z";
const T3: &str = "2025-01-01T00:00:30Z";

#[track_caller]
fn assert_json(seen: &Value, expected: &Value, what: &str) {
    assert!(
        seen == expected,
        "{what}\nexpected:\n{}\nseen:\n{}",
        serde_json::to_string_pretty(expected).unwrap_or_default(),
        serde_json::to_string_pretty(seen).unwrap_or_default()
    );
}

/// One apply step against `live`.
struct Step<'a> {
    group: &'a str,
    kind: &'a str,
    manager: &'a str,
    force: bool,
    subresource: Option<&'a str>,
    now: &'a str,
}

fn step<'a>(group: &'a str, kind: &'a str, manager: &'a str, now: &'a str) -> Step<'a> {
    Step {
        group,
        kind,
        manager,
        force: false,
        subresource: None,
        now,
    }
}

impl Step<'_> {
    fn forced(mut self) -> Self {
        self.force = true;
        self
    }

    fn status(mut self) -> Self {
        self.subresource = Some("status");
        self
    }

    fn run(&self, live: Option<&Value>, config: &Value) -> Result<Value, ApplyError> {
        let types = builtin(self.group, self.kind);
        let req = Apply {
            live,
            applied: config,
            manager: self.manager,
            force: self.force,
            subresource: self.subresource,
            now: self.now,
        };
        apply(&req, types.as_ref())
    }

    #[track_caller]
    fn ok(&self, live: Option<&Value>, config: &Value) -> Value {
        match self.run(live, config) {
            Ok(v) => v,
            Err(e) => panic!("expected {} to apply {config}, seen error: {e}", self.manager),
        }
    }

    #[track_caller]
    fn err(&self, live: Option<&Value>, config: &Value) -> ApplyError {
        match self.run(live, config) {
            Ok(v) => panic!(
                "expected {} applying {config} to fail, seen result: {v}",
                self.manager
            ),
            Err(e) => e,
        }
    }
}

#[track_caller]
fn update(
    group: &str,
    kind: &str,
    old: Option<&Value>,
    new: Value,
    manager: &str,
    sub: Option<&str>,
    now: &str,
) -> Value {
    let types = builtin(group, kind);
    let mut new = new;
    record_update(old, &mut new, manager, sub, now, types.as_ref());
    new
}

fn managed_fields(obj: &Value) -> Vec<Value> {
    obj["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[track_caller]
fn entry<'a>(obj: &'a Value, manager: &str, operation: &str) -> &'a Value {
    let entries = obj["metadata"]["managedFields"].as_array();
    entries
        .and_then(|es| {
            es.iter()
                .find(|e| e["manager"] == manager && e["operation"] == operation)
        })
        .unwrap_or_else(|| {
            panic!(
                "expected a {operation} entry of {manager:?}, seen managedFields {}",
                obj["metadata"]["managedFields"]
            )
        })
}

fn managers(obj: &Value) -> Vec<String> {
    managed_fields(obj)
        .iter()
        .map(|e| {
            format!(
                "{}/{}",
                e["manager"].as_str().unwrap_or("?"),
                e["operation"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

fn without_managed_fields(obj: &Value) -> Value {
    super::without_managed_fields(obj)
}

/// `deploy.yaml` of the probe, as kubectl sends it.
fn deploy(replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{
                    "name": "nginx",
                    "image": "nginx:1.25",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}
                }]}
            }
        }
    })
}

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}, "data": data})
}

fn cm_with_labels(labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default", "labels": labels}})
}

/// The server's part of a create: identity fields the object then keeps.
fn as_stored(mut obj: Value) -> Value {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("uid".to_owned(), json!("0b7b0000-0000-4000-8000-000000000000"));
        meta.insert("resourceVersion".to_owned(), json!("100"));
        meta.insert("creationTimestamp".to_owned(), json!(T0));
    }
    obj
}

// ---------------------------------------------------------------------------------------------
// Create and no-op

#[test]
fn apply_on_create_records_one_apply_entry_with_upstream_fields_v1() {
    let obj = step("apps", "Deployment", "kubectl", T0).ok(None, &deploy(2));
    let expected = json!([{
        "manager": "kubectl",
        "operation": "Apply",
        "apiVersion": "apps/v1",
        "time": T0,
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {
                        ".": {},
                        "f:image": {},
                        "f:name": {},
                        "f:resources": {"f:requests": {"f:cpu": {}, "f:memory": {}}}
                    }}}
                }
            }
        }
    }]);
    assert_json(
        &obj["metadata"]["managedFields"],
        &expected,
        "managedFields after the first apply",
    );
    assert_json(
        &without_managed_fields(&obj),
        &deploy(2),
        "the object is the configuration",
    );
}

#[test]
fn apply_of_the_same_configuration_again_returns_the_live_object_unchanged() {
    let first = as_stored(step("apps", "Deployment", "kubectl", T0).ok(None, &deploy(2)));
    let second = step("apps", "Deployment", "kubectl", T1).ok(Some(&first), &deploy(2));
    assert_json(
        &second,
        &first,
        "re-applying is a no-op (managedFields time included)",
    );
}

#[test]
fn apply_with_a_force_again_is_still_a_no_op() {
    let first = as_stored(
        step("apps", "Deployment", "ctl", T0)
            .forced()
            .ok(None, &deploy(2)),
    );
    let second = step("apps", "Deployment", "ctl", T1)
        .forced()
        .ok(Some(&first), &deploy(2));
    assert_json(&second, &first, "forced re-apply is a no-op");
}

#[test]
fn apply_keeps_server_set_metadata_of_the_live_object() {
    let live = as_stored(step("", "ConfigMap", "m", T0).ok(None, &cm(json!({"a": "1"}))));
    let mut config = cm(json!({"a": "2"}));
    config["metadata"]["creationTimestamp"] = Value::Null;
    config["metadata"]["resourceVersion"] = json!("100");
    let out = step("", "ConfigMap", "m", T1).ok(Some(&live), &config);
    assert_eq!(
        out["metadata"]["creationTimestamp"],
        json!(T0),
        "creationTimestamp kept, seen {out}"
    );
    assert_eq!(
        out["metadata"]["uid"], live["metadata"]["uid"],
        "uid kept, seen {out}"
    );
    assert_eq!(out["data"], json!({"a": "2"}), "data applied, seen {out}");
}

#[test]
fn apply_time_changes_when_the_applied_values_change() {
    let first = as_stored(step("apps", "Deployment", "kubectl", T0).ok(None, &deploy(2)));
    let second = step("apps", "Deployment", "kubectl", T1).ok(Some(&first), &deploy(3));
    assert_eq!(
        second["spec"]["replicas"],
        json!(3),
        "replicas applied, seen {second}"
    );
    assert_eq!(
        entry(&second, "kubectl", "Apply")["time"],
        json!(T1),
        "time bumped"
    );
}

#[test]
fn apply_whose_only_change_is_an_empty_map_does_not_bump_the_time() {
    let first = as_stored(step("", "ConfigMap", "m", T0).ok(None, &cm(json!({"a": "1"}))));
    let mut config = cm(json!({"a": "1"}));
    config["metadata"]["annotations"] = json!({});
    let second = step("", "ConfigMap", "m", T1).ok(Some(&first), &config);
    assert_eq!(
        entry(&second, "m", "Apply")["time"],
        json!(T0),
        "time kept, seen {second}"
    );
}

// ---------------------------------------------------------------------------------------------
// Removal by omission

#[test]
fn apply_removes_a_label_the_manager_stopped_applying() {
    let s1 = as_stored(step("", "ConfigMap", "m", T0).ok(None, &cm_with_labels(json!({"a": "1", "b": "2"}))));
    let s2 = step("", "ConfigMap", "m", T1).ok(Some(&s1), &cm_with_labels(json!({"a": "1"})));
    assert_json(&s2["metadata"]["labels"], &json!({"a": "1"}), "b removed");
    assert_json(
        &entry(&s2, "m", "Apply")["fieldsV1"],
        &json!({"f:metadata": {"f:labels": {"f:a": {}}}}),
        "m owns only a",
    );
    let s3 = step("", "ConfigMap", "m", T2).ok(Some(&s2), &cm_with_labels(json!({"a": "1"})));
    assert_json(&s3, &s2, "the third identical apply is a no-op");
}

#[test]
fn apply_removes_the_whole_map_when_its_last_owned_key_goes() {
    let s1 = as_stored(step("", "ConfigMap", "m", T0).ok(None, &cm(json!({"a": "1"}))));
    let config =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}});
    let s2 = step("", "ConfigMap", "m", T1).ok(Some(&s1), &config);
    assert!(s2.get("data").is_none(), "expected data to be gone, seen {s2}");
    assert!(
        s2["metadata"].get("managedFields").is_none(),
        "m owns nothing any more, seen {s2}"
    );
}

#[test]
fn apply_keeps_an_omitted_field_another_applier_also_owns() {
    let s1 = as_stored(step("", "ConfigMap", "m", T0).ok(None, &cm_with_labels(json!({"a": "1", "b": "2"}))));
    let s2 = step("", "ConfigMap", "n", T1).ok(Some(&s1), &cm_with_labels(json!({"b": "2"})));
    let s3 = step("", "ConfigMap", "m", T2).ok(Some(&s2), &cm_with_labels(json!({"a": "1"})));
    assert_json(
        &s3["metadata"]["labels"],
        &json!({"a": "1", "b": "2"}),
        "b stays, n owns it",
    );
    assert_json(
        &entry(&s3, "n", "Apply")["fieldsV1"],
        &json!({"f:metadata": {"f:labels": {"f:b": {}}}}),
        "n still owns b",
    );
    let s4 = step("", "ConfigMap", "n", T3).ok(Some(&s3), &cm_with_labels(json!({})));
    assert_json(
        &s4["metadata"]["labels"],
        &json!({"a": "1"}),
        "b removed once its last owner omits it",
    );
}

#[test]
fn apply_keeps_an_omitted_field_an_updater_owns() {
    let s1 = as_stored(step("", "ConfigMap", "m", T0).ok(None, &cm(json!({"a": "1"}))));
    let mut edited = s1.clone();
    edited["data"]["a"] = json!("2");
    let s2 = update("", "ConfigMap", Some(&s1), edited, "kubectl-edit", None, T1);
    let s3 = step("", "ConfigMap", "m", T2).ok(Some(&s2), &cm(json!({"b": "1"})));
    assert_json(
        &s3["data"],
        &json!({"a": "2", "b": "1"}),
        "a stays: kubectl-edit took it from m",
    );
}

#[test]
fn apply_removes_a_container_the_manager_stopped_applying() {
    let mut two = deploy(2);
    two["spec"]["template"]["spec"]["containers"] =
        json!([{"name": "nginx", "image": "nginx:1.25"}, {"name": "side", "image": "busybox"}]);
    let s1 = as_stored(step("apps", "Deployment", "m", T0).ok(None, &two));
    let mut one = deploy(2);
    one["spec"]["template"]["spec"]["containers"] = json!([{"name": "nginx", "image": "nginx:1.25"}]);
    let s2 = step("apps", "Deployment", "m", T1).ok(Some(&s1), &one);
    assert_json(
        &s2["spec"]["template"]["spec"]["containers"],
        &json!([{"name": "nginx", "image": "nginx:1.25"}]),
        "side removed",
    );
}

#[test]
fn apply_removal_leaves_unowned_defaulted_fields_alone() {
    let s1 = as_stored(step("apps", "Deployment", "m", T0).ok(None, &deploy(2)));
    // The server defaulted a field nobody owns.
    let mut stored = s1.clone();
    stored["spec"]["revisionHistoryLimit"] = json!(10);
    let mut config = deploy(2);
    config["spec"].as_object_mut().map(|s| s.remove("replicas"));
    let s2 = step("apps", "Deployment", "m", T1).ok(Some(&stored), &config);
    assert!(
        s2["spec"].get("replicas").is_none(),
        "replicas removed, seen {s2}"
    );
    assert_eq!(
        s2["spec"]["revisionHistoryLimit"],
        json!(10),
        "defaulted field kept, seen {s2}"
    );
}

// ---------------------------------------------------------------------------------------------
// Conflicts and force

/// The Deployment as `kubectl apply` (client-side) creates it: an Update by
/// `kubectl-client-side-apply`.
fn client_side_created(replicas: i64) -> Value {
    as_stored(update(
        "apps",
        "Deployment",
        None,
        deploy(replicas),
        "kubectl-client-side-apply",
        None,
        T0,
    ))
}

#[test]
fn apply_conflict_with_an_updater_has_the_upstream_message() {
    let live = client_side_created(2);
    let mut config = deploy(3);
    config["spec"] = json!({"replicas": 3});
    let err = step("apps", "Deployment", "ctl", T1).err(Some(&live), &config);
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using apps/v1: .spec.replicas"
    );
    let ApplyError::Conflicts(conflicts) = err else {
        panic!("expected Conflicts")
    };
    assert_eq!(
        conflicts,
        vec![Conflict {
            manager: "kubectl-client-side-apply".to_owned(),
            field: ".spec.replicas".to_owned(),
            update_api_version: Some("apps/v1".to_owned()),
            subresource: None,
        }]
    );
    assert_eq!(
        conflicts[0].cause_message(),
        "conflict with \"kubectl-client-side-apply\" using apps/v1"
    );
}

#[test]
fn apply_conflict_with_another_applier_names_it_without_api_version() {
    let live = as_stored(step("apps", "Deployment", "kubectl", T0).ok(None, &deploy(2)));
    let err = step("apps", "Deployment", "ctl", T1).err(Some(&live), &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 5}}));
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"
    );
}

#[test]
fn apply_several_conflicts_are_listed_per_manager() {
    let live = as_stored(step("apps", "Deployment", "kubectl", T0).ok(None, &deploy(2)));
    let mut config = deploy(5);
    config["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    let err = step("apps", "Deployment", "ctl", T1).err(Some(&live), &config);
    assert_eq!(
        err.to_string(),
        "Apply failed with 2 conflicts: conflicts with \"kubectl\":\n- .spec.replicas\n- .spec.template.spec.containers[name=\"nginx\"].image"
    );
}

#[test]
fn apply_conflicts_with_two_managers_are_grouped_in_manager_order() {
    let live = as_stored(step("", "ConfigMap", "zeta", T0).ok(None, &cm(json!({"a": "1"}))));
    let live = step("", "ConfigMap", "alpha", T1).ok(Some(&live), &cm(json!({"b": "1"})));
    let err = step("", "ConfigMap", "m", T2).err(Some(&live), &cm(json!({"a": "2", "b": "2"})));
    assert_eq!(
        err.to_string(),
        "Apply failed with 2 conflicts: conflicts with \"alpha\":\n- .data.b\nconflicts with \"zeta\":\n- .data.a"
    );
}

#[test]
fn apply_conflict_with_a_status_writer_names_the_subresource() {
    let live = as_stored(step("apps", "Deployment", "kubectl", T0).ok(None, &deploy(2)));
    let mut with_status = live.clone();
    with_status["status"] = json!({"replicas": 2});
    let live = update(
        "apps",
        "Deployment",
        Some(&live),
        with_status,
        "kube-controller-manager",
        Some("status"),
        T1,
    );
    let config = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "status": {"replicas": 9}});
    let err = step("apps", "Deployment", "ctl", T2)
        .status()
        .err(Some(&live), &config);
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kube-controller-manager\" with subresource \"status\" using apps/v1: .status.replicas"
    );
}

#[test]
fn apply_of_the_same_value_another_manager_owns_is_shared_not_a_conflict() {
    let live = client_side_created(2);
    let config = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 2}});
    let out = step("apps", "Deployment", "ctl", T1).ok(Some(&live), &config);
    assert_json(
        &without_managed_fields(&out),
        &without_managed_fields(&live),
        "object unchanged",
    );
    for manager in [("kubectl-client-side-apply", "Update"), ("ctl", "Apply")] {
        let fields =
            FieldSet::from_fields_v1(&entry(&out, manager.0, manager.1)["fieldsV1"]).unwrap_or_default();
        assert!(
            fields.contains(&[
                crate::fieldpath::PathElement::Field("spec".to_owned()),
                crate::fieldpath::PathElement::Field("replicas".to_owned())
            ]),
            "expected {manager:?} to own .spec.replicas, seen {}",
            out["metadata"]["managedFields"]
        );
    }
}

#[test]
fn apply_with_force_takes_ownership_from_the_other_manager() {
    let live = client_side_created(2);
    let config = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 4}});
    let out = step("apps", "Deployment", "ctl", T1)
        .forced()
        .ok(Some(&live), &config);
    assert_eq!(out["spec"]["replicas"], json!(4), "replicas applied, seen {out}");
    assert_eq!(
        managers(&out),
        vec!["ctl/Apply", "kubectl-client-side-apply/Update"],
        "managers"
    );
    assert_json(
        &entry(&out, "ctl", "Apply")["fieldsV1"],
        &json!({"f:spec": {"f:replicas": {}}}),
        "ctl owns replicas",
    );
    assert!(
        entry(&out, "kubectl-client-side-apply", "Update")["fieldsV1"]["f:spec"]
            .get("f:replicas")
            .is_none(),
        "replicas moved away from kubectl-client-side-apply, seen {}",
        out["metadata"]["managedFields"]
    );
    // Now the former owner conflicts with ctl instead.
    let mut back = out.clone();
    back["spec"]["replicas"] = json!(2);
    let back = update(
        "apps",
        "Deployment",
        Some(&out),
        back,
        "kubectl-client-side-apply",
        None,
        T2,
    );
    assert_eq!(
        managers(&back),
        vec!["kubectl-client-side-apply/Update"],
        "an update takes the field back silently; ctl's emptied entry is dropped"
    );
}

#[test]
fn apply_atomic_list_conflicts_as_one_field_and_replaces_as_a_whole() {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "a", "image": "x"}],
        "tolerations": [{"key": "a", "operator": "Exists"}]
    }});
    let live = as_stored(step("", "Pod", "m", T0).ok(None, &pod));
    pod["spec"]["tolerations"] = json!([{"key": "b", "operator": "Exists"}]);
    let err = step("", "Pod", "n", T1).err(Some(&live), &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"tolerations": pod["spec"]["tolerations"]}}));
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"m\": .spec.tolerations"
    );
    let out = step("", "Pod", "m", T1).ok(Some(&live), &pod);
    assert_json(
        &out["spec"]["tolerations"],
        &json!([{"key": "b", "operator": "Exists"}]),
        "replaced",
    );
    assert_json(
        &entry(&out, "m", "Apply")["fieldsV1"]["f:spec"]["f:tolerations"],
        &json!({}),
        "a leaf",
    );
}

// ---------------------------------------------------------------------------------------------
// Lists

fn deployment_with_containers(containers: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
           "spec": {"template": {"spec": {"containers": containers}}}})
}

#[test]
fn apply_two_managers_each_own_their_container_of_one_list() {
    let live = as_stored(step("apps", "Deployment", "kubectl", T0).ok(None, &deploy(2)));
    let s2 = step("apps", "Deployment", "sidecar", T1).ok(
        Some(&live),
        &deployment_with_containers(json!([{"name": "proxy", "image": "envoy"}])),
    );
    let names: Vec<&Value> = s2["spec"]["template"]["spec"]["containers"]
        .as_array()
        .map(|c| c.iter().map(|c| &c["name"]).collect())
        .unwrap_or_default();
    assert_eq!(
        names,
        vec![&json!("nginx"), &json!("proxy")],
        "both containers present, seen {s2}"
    );
    assert_json(
        &entry(&s2, "sidecar", "Apply")["fieldsV1"],
        &json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"proxy\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}}),
        "sidecar owns its element",
    );
    // The sidecar manager withdraws: only its element goes.
    let s3 = step("apps", "Deployment", "sidecar", T2).ok(Some(&s2), &deployment_with_containers(json!([])));
    assert_json(
        &without_managed_fields(&s3),
        &without_managed_fields(&live),
        "back to kubectl's object",
    );
    assert_eq!(managers(&s3), vec!["kubectl/Apply"], "sidecar owns nothing");
}

#[test]
fn apply_container_ports_are_keyed_by_port_and_defaulted_protocol() {
    let config =
        deployment_with_containers(json!([{"name": "a", "image": "x", "ports": [{"containerPort": 80}]}]));
    let obj = step("apps", "Deployment", "m", T0).ok(None, &config);
    let container = &entry(&obj, "m", "Apply")["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
        ["k:{\"name\":\"a\"}"];
    assert_json(
        &container["f:ports"],
        &json!({"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}),
        "port element key",
    );
    // The server defaulted protocol; re-applying without it is still the same element.
    let mut stored = as_stored(obj);
    stored["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"] = json!("TCP");
    let again = step("apps", "Deployment", "m", T1).ok(Some(&stored), &config);
    assert_json(&again, &stored, "no-op");
}

#[test]
fn apply_merges_list_elements_in_upstream_order() {
    let live = as_stored(step("apps", "Deployment", "m", T0).ok(
        None,
        &deployment_with_containers(json!([{"name": "a"}, {"name": "b"}, {"name": "c"}])),
    ));
    let out = step("apps", "Deployment", "n", T1).ok(
        Some(&live),
        &deployment_with_containers(json!([{"name": "c"}, {"name": "a"}])),
    );
    assert_json(
        &out["spec"]["template"]["spec"]["containers"],
        &json!([{"name": "b"}, {"name": "c"}, {"name": "a"}]),
        "structured-merge-diff order",
    );
}

#[test]
fn apply_set_list_of_finalizers_merges_by_value() {
    let with_finalizers = |f: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "finalizers": f}});
    let s1 = as_stored(step("", "ConfigMap", "m", T0).ok(None, &with_finalizers(json!(["a/x"]))));
    let s2 = step("", "ConfigMap", "n", T1).ok(Some(&s1), &with_finalizers(json!(["b/y"])));
    assert_json(&s2["metadata"]["finalizers"], &json!(["a/x", "b/y"]), "union");
    assert_json(
        &entry(&s2, "n", "Apply")["fieldsV1"],
        &json!({"f:metadata": {"f:finalizers": {"v:\"b/y\"": {}}}}),
        "set element encoding",
    );
    let s3 = step("", "ConfigMap", "m", T2).ok(Some(&s2), &with_finalizers(json!([])));
    assert_json(
        &s3["metadata"]["finalizers"],
        &json!(["b/y"]),
        "m's element removed, n's kept",
    );
}

#[test]
fn apply_duplicate_keys_in_the_configuration_are_invalid() {
    let err = step("apps", "Deployment", "m", T0).err(
        None,
        &deployment_with_containers(json!([{"name": "a"}, {"name": "a", "image": "x"}])),
    );
    assert_eq!(
        err,
        ApplyError::Invalid(
            ".spec.template.spec.containers: duplicate entries for key [name=\"a\"]".to_owned()
        )
    );
}

#[test]
fn apply_element_without_its_key_is_invalid() {
    let err =
        step("apps", "Deployment", "m", T0).err(None, &deployment_with_containers(json!([{"image": "x"}])));
    assert_eq!(
        err,
        ApplyError::Invalid(
            ".spec.template.spec.containers: associative list with keys has an element that omits key field \"name\" (and doesn't have default value)".to_owned()
        )
    );
}

// ---------------------------------------------------------------------------------------------
// Status

#[test]
fn apply_to_the_status_subresource_owns_only_status_and_keeps_the_spec() {
    let live = as_stored(step("apps", "Deployment", "kubectl", T0).ok(None, &deploy(2)));
    let config = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"ignored": "x"}},
        "spec": {"replicas": 7},
        "status": {"replicas": 2, "conditions": [{"type": "Available", "status": "True"}]}
    });
    let out = step("apps", "Deployment", "ctl", T1)
        .status()
        .forced()
        .ok(Some(&live), &config);
    assert_json(&out["spec"], &live["spec"], "spec untouched");
    assert_json(
        &out["metadata"]["labels"],
        &live["metadata"]["labels"],
        "labels untouched",
    );
    let e = entry(&out, "ctl", "Apply");
    assert_eq!(
        e["subresource"],
        json!("status"),
        "entry has subresource, seen {e}"
    );
    assert_json(
        &e["fieldsV1"],
        &json!({"f:status": {
            "f:conditions": {"k:{\"type\":\"Available\"}": {".": {}, "f:status": {}, "f:type": {}}},
            "f:replicas": {}
        }}),
        "status fields only",
    );
}

#[test]
fn apply_to_the_main_resource_keeps_the_status_written_through_the_subresource() {
    let live = as_stored(step("apps", "Deployment", "kubectl", T0).ok(None, &deploy(2)));
    let mut with_status = live.clone();
    with_status["status"] = json!({"replicas": 2, "readyReplicas": 2});
    let live = update(
        "apps",
        "Deployment",
        Some(&live),
        with_status,
        "kube-controller-manager",
        Some("status"),
        T1,
    );
    let out = step("apps", "Deployment", "kubectl", T2).ok(Some(&live), &deploy(3));
    assert_json(
        &out["status"],
        &json!({"replicas": 2, "readyReplicas": 2}),
        "status kept",
    );
    let again = step("apps", "Deployment", "kubectl", T3).ok(Some(&out), &deploy(3));
    assert_json(&again, &out, "no-op");
}

// ---------------------------------------------------------------------------------------------
// Non-apply writes

#[test]
fn record_update_on_create_marks_added_maps_like_upstream() {
    let obj = update(
        "",
        "ConfigMap",
        None,
        cm_with_labels(json!({"app": "x"})),
        "kubectl-create",
        None,
        T0,
    );
    let mut expected_cm = cm_with_labels(json!({"app": "x"}));
    expected_cm["data"] = json!({"k": "v"});
    let created = update("", "ConfigMap", None, expected_cm, "kubectl-create", None, T0);
    assert_json(
        &created["metadata"]["managedFields"],
        &json!([{
            "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {".": {}, "f:k": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}}
        }]),
        "ConfigMap create",
    );
    assert!(
        obj["metadata"]["managedFields"].is_array(),
        "entry recorded, seen {obj}"
    );
    let deploy = client_side_created(2);
    let fields = &entry(&deploy, "kubectl-client-side-apply", "Update")["fieldsV1"];
    assert!(
        fields["f:spec"].get(".").is_none(),
        "spec is a struct of the empty object, seen {fields}"
    );
    assert!(
        fields["f:spec"]["f:replicas"].is_object(),
        "replicas owned, seen {fields}"
    );
    assert_json(
        &fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"nginx\"}"]["f:resources"],
        &json!({".": {}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}}),
        "added maps carry the dot marker",
    );
}

#[test]
fn record_update_without_changes_keeps_the_entry_time() {
    let s1 = as_stored(update(
        "",
        "ConfigMap",
        None,
        cm(json!({"a": "1"})),
        "m",
        None,
        T0,
    ));
    let s2 = update("", "ConfigMap", Some(&s1), s1.clone(), "m", None, T1);
    assert_json(&s2, &s1, "no change, no new time");
    let s3 = update("", "ConfigMap", Some(&s1), s1.clone(), "other", None, T1);
    assert_json(&s3, &s1, "a no-op write by another manager records nothing");
}

#[test]
fn record_update_ignores_server_set_metadata() {
    let s1 = update("", "ConfigMap", None, cm(json!({"a": "1"})), "m", None, T0);
    let mut s2 = s1.clone();
    s2["metadata"]["resourceVersion"] = json!("200");
    s2["metadata"]["generation"] = json!(2);
    let s2 = update("", "ConfigMap", Some(&s1), s2, "m", None, T1);
    assert_eq!(
        entry(&s2, "m", "Update")["time"],
        json!(T0),
        "time kept, seen {s2}"
    );
}

#[test]
fn record_update_moves_changed_fields_and_drops_emptied_entries() {
    let s1 = as_stored(step("", "ConfigMap", "m", T0).ok(None, &cm(json!({"a": "1"}))));
    let mut edited = s1.clone();
    edited["data"]["a"] = json!("2");
    let s2 = update("", "ConfigMap", Some(&s1), edited, "kubectl-edit", None, T1);
    assert_eq!(
        managers(&s2),
        vec!["kubectl-edit/Update"],
        "m's emptied entry dropped"
    );
    assert_json(
        &entry(&s2, "kubectl-edit", "Update")["fieldsV1"],
        &json!({"f:data": {"f:a": {}}}),
        "kubectl-edit owns a",
    );
}

#[test]
fn record_update_merges_into_the_managers_previous_entry() {
    let s1 = as_stored(update(
        "",
        "ConfigMap",
        None,
        cm(json!({"a": "1"})),
        "m",
        None,
        T0,
    ));
    let mut s2 = s1.clone();
    s2["data"]["b"] = json!("2");
    let s2 = update("", "ConfigMap", Some(&s1), s2, "m", None, T1);
    let e = entry(&s2, "m", "Update");
    assert_eq!(e["time"], json!(T1), "time bumped, seen {e}");
    assert_json(
        &e["fieldsV1"],
        &json!({"f:data": {".": {}, "f:a": {}, "f:b": {}}}),
        "union of both writes",
    );
    assert_eq!(
        managed_fields(&s2).len(),
        1,
        "one entry per manager, seen {}",
        s2["metadata"]["managedFields"]
    );
}

#[test]
fn record_update_on_the_status_subresource_gets_its_own_entry() {
    let s1 = client_side_created(2);
    let mut s2 = s1.clone();
    s2["status"] = json!({"observedGeneration": 1});
    let s2 = update(
        "apps",
        "Deployment",
        Some(&s1),
        s2,
        "kubectl-patch",
        Some("status"),
        T1,
    );
    let e = entry(&s2, "kubectl-patch", "Update");
    assert_eq!(e["subresource"], json!("status"), "seen {e}");
    assert_json(
        &e["fieldsV1"],
        &json!({"f:status": {"f:observedGeneration": {}}}),
        "status field",
    );
}

#[test]
fn record_update_takes_managed_fields_the_client_sent_and_resets_on_empty_entry() {
    let s1 = as_stored(update(
        "",
        "ConfigMap",
        None,
        cm(json!({"a": "1"})),
        "m",
        None,
        T0,
    ));
    let mut reset = s1.clone();
    reset["metadata"]["managedFields"] = json!([{}]);
    let out = update("", "ConfigMap", Some(&s1), reset, "n", None, T1);
    assert!(
        out["metadata"].get("managedFields").is_none(),
        "managedFields cleared, seen {out}"
    );

    let mut stale = s1.clone();
    stale["metadata"]["managedFields"] = json!([{
        "manager": "someone", "operation": "Update", "apiVersion": "v1", "time": T0,
        "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}
    }]);
    let out = update("", "ConfigMap", Some(&s1), stale, "n", None, T1);
    assert_eq!(
        managers(&out),
        vec!["someone/Update"],
        "the client's managedFields replace the stored ones"
    );
}

#[test]
fn record_update_keeps_the_stored_managed_fields_when_the_client_sends_none() {
    let s1 = as_stored(update(
        "",
        "ConfigMap",
        None,
        cm(json!({"a": "1"})),
        "m",
        None,
        T0,
    ));
    let mut put = without_managed_fields(&s1);
    put["data"]["b"] = json!("2");
    let out = update("", "ConfigMap", Some(&s1), put, "n", None, T1);
    assert_eq!(managers(&out), vec!["m/Update", "n/Update"], "m kept, n added");
}

// ---------------------------------------------------------------------------------------------
// Robustness and encoding

#[test]
fn apply_refuses_managed_fields_and_non_objects_in_the_configuration() {
    let mut config = cm(json!({}));
    config["metadata"]["managedFields"] = json!([]);
    let err = step("", "ConfigMap", "m", T0).err(None, &config);
    assert_eq!(
        err,
        ApplyError::Invalid("metadata.managedFields must be nil".to_owned())
    );
    let err = step("", "ConfigMap", "m", T0).err(None, &json!([1]));
    assert!(matches!(err, ApplyError::Invalid(_)), "seen {err:?}");
}

#[test]
fn apply_refuses_configurations_nested_too_deeply() {
    let mut deep = json!(1);
    for _ in 0..(super::typed::MAX_DEPTH + 5) {
        deep = json!({ "x": deep });
    }
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": deep});
    let err = step("", "ConfigMap", "m", T0).err(None, &config);
    assert!(
        matches!(&err, ApplyError::Invalid(m) if m.ends_with("object nested too deeply")),
        "seen {err:?}"
    );
}

#[test]
fn apply_resets_undecodable_managed_fields_of_the_live_object() {
    let mut live = as_stored(step("", "ConfigMap", "m", T0).ok(None, &cm(json!({"a": "1"}))));
    live["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Bogus"}]);
    let out = step("", "ConfigMap", "m", T1).ok(Some(&live), &cm(json!({"a": "1"})));
    assert_eq!(managers(&out), vec!["m/Apply"], "fresh entry, seen {out}");
}

#[test]
fn fields_v1_of_appendix_a9_round_trips() {
    let a9 = json!({"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}},"f:labels":{".":{},"f:app":{}}},
        "f:spec":{"f:progressDeadlineSeconds":{},"f:replicas":{},"f:revisionHistoryLimit":{},"f:selector":{},
                  "f:strategy":{"f:rollingUpdate":{".":{},"f:maxSurge":{},"f:maxUnavailable":{}},"f:type":{}},
                  "f:template":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},
                                "f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{".":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},
                                            "f:resources":{".":{},"f:requests":{".":{},"f:cpu":{},"f:memory":{}}}}}}}}});
    let set = FieldSet::from_fields_v1(&a9).unwrap_or_else(|e| panic!("expected A.9 to parse, seen {e}"));
    assert_json(&set.to_fields_v1(), &a9, "round trip");
    assert!(
        FieldSet::from_fields_v1(&json!({"x:bad": {}})).is_err(),
        "unknown prefixes are refused"
    );
}

#[test]
fn conflict_display_for_one_and_several_conflicts_matches_upstream() {
    let c = |m: &str, f: &str| Conflict {
        manager: m.to_owned(),
        field: f.to_owned(),
        update_api_version: Some("apps/v1".to_owned()),
        subresource: None,
    };
    assert_eq!(
        ApplyError::Conflicts(vec![c("kubectl-client-side-apply", ".spec.replicas")]).to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using apps/v1: .spec.replicas"
    );
    assert_eq!(
        ApplyError::Conflicts(vec![c("kubectl", ".spec.replicas"), c("kubectl", ".spec.paused")]).to_string(),
        "Apply failed with 2 conflicts: conflicts with \"kubectl\" using apps/v1:\n- .spec.replicas\n- .spec.paused"
    );
}

// ---------------------------------------------------------------------------------------------
// Custom-resource style list types

/// `spec.items` is a map list keyed by `name` and `ns`; `spec.tags` a set; `spec.blob` an atomic
/// map; other lists atomic (the CRD defaults).
#[derive(Debug)]
struct WidgetTypes;

impl crate::fieldpath::ListTypes for WidgetTypes {
    fn list_type(&self, path: &[crate::fieldpath::Step]) -> Option<crate::fieldpath::ListType> {
        use crate::fieldpath::{ListType, Step};
        match path {
            [Step::Field(a), Step::Field(b)] if a == "spec" && b == "items" => {
                Some(ListType::Map(vec!["name".to_owned(), "ns".to_owned()]))
            }
            [Step::Field(a), Step::Field(b)] if a == "spec" && b == "tags" => Some(ListType::Set),
            _ => None,
        }
    }

    fn map_is_atomic(&self, path: &[crate::fieldpath::Step]) -> bool {
        use crate::fieldpath::Step;
        matches!(path, [Step::Field(a), Step::Field(b)] if a == "spec" && b == "blob")
    }

    fn smp_merge_key(&self, _path: &[crate::fieldpath::Step]) -> Option<String> {
        None
    }
}

fn widget(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
}

fn apply_widget(live: Option<&Value>, config: &Value, manager: &str, now: &str) -> Result<Value, ApplyError> {
    let req = Apply {
        live,
        applied: config,
        manager,
        force: false,
        subresource: None,
        now,
    };
    apply(&req, &WidgetTypes)
}

#[test]
fn apply_custom_resource_multi_key_map_list_set_and_atomic_map() {
    let config = widget(json!({
        "items": [{"name": "a", "ns": "x", "v": 1}],
        "tags": ["t1"],
        "blob": {"k": {"deep": true}},
        "plain": [1, 2]
    }));
    let obj = apply_widget(None, &config, "m", T0).unwrap_or_else(|e| panic!("apply failed: {e}"));
    assert_json(
        &entry(&obj, "m", "Apply")["fieldsV1"],
        &json!({"f:spec": {
            "f:blob": {},
            "f:items": {"k:{\"name\":\"a\",\"ns\":\"x\"}": {".": {}, "f:name": {}, "f:ns": {}, "f:v": {}}},
            "f:plain": {},
            "f:tags": {"v:\"t1\"": {}}
        }}),
        "custom resource field set",
    );
    // Another manager adds an element with the same name in another ns, and a tag.
    let other = widget(json!({"items": [{"name": "a", "ns": "y"}], "tags": ["t2"]}));
    let obj2 = apply_widget(Some(&obj), &other, "n", T1).unwrap_or_else(|e| panic!("apply failed: {e}"));
    assert_json(
        &obj2["spec"]["items"],
        &json!([{"name": "a", "ns": "x", "v": 1}, {"name": "a", "ns": "y"}]),
        "elements are distinct by both keys",
    );
    assert_json(&obj2["spec"]["tags"], &json!(["t1", "t2"]), "set union");
    // An atomic map conflicts as a whole.
    let err = apply_widget(
        Some(&obj2),
        &widget(json!({"blob": {"k": {"deep": false}}})),
        "n",
        T2,
    )
    .err()
    .unwrap_or_else(|| panic!("expected a conflict on spec.blob"));
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"m\": .spec.blob"
    );
}

#[test]
fn record_update_on_create_of_a_custom_resource_marks_spec_as_added() {
    let mut obj = widget(json!({"size": 3}));
    record_update(
        None,
        &mut obj,
        "kubectl-client-side-apply",
        None,
        T0,
        &WidgetTypes,
    );
    assert_json(
        &entry(&obj, "kubectl-client-side-apply", "Update")["fieldsV1"],
        &json!({"f:spec": {".": {}, "f:size": {}}}),
        "unstructured objects start empty",
    );
}
