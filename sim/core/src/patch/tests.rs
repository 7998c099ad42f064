use serde_json::{Value, json};

use super::{PatchError, json_patch, merge_patch, strategic_merge_patch};
use crate::fieldpath::builtin;

/// Fails with both documents pretty-printed.
#[track_caller]
fn assert_json(seen: &Value, expected: &Value, what: &str) {
    assert!(
        seen == expected,
        "{what}\nexpected:\n{}\nseen:\n{}",
        serde_json::to_string_pretty(expected).unwrap_or_default(),
        serde_json::to_string_pretty(seen).unwrap_or_default()
    );
}

#[track_caller]
fn json_patch_ok(doc: Value, patch: Value) -> Value {
    match json_patch(&doc, &patch) {
        Ok(v) => v,
        Err(e) => panic!("expected the JSON patch {patch} to apply to {doc}, seen error: {e}"),
    }
}

#[track_caller]
fn json_patch_err(doc: Value, patch: Value) -> PatchError {
    match json_patch(&doc, &patch) {
        Ok(v) => panic!("expected the JSON patch {patch} to fail on {doc}, seen result: {v}"),
        Err(e) => e,
    }
}

#[track_caller]
fn smp(original: Value, patch: Value, group: &str, kind: &str) -> Value {
    let types = builtin(group, kind);
    match strategic_merge_patch(&original, &patch, types.as_ref()) {
        Ok(v) => v,
        Err(e) => panic!("expected the strategic merge patch {patch} to apply, seen error: {e}"),
    }
}

#[track_caller]
fn smp_err(original: Value, patch: Value, group: &str, kind: &str) -> PatchError {
    let types = builtin(group, kind);
    match strategic_merge_patch(&original, &patch, types.as_ref()) {
        Ok(v) => panic!("expected the strategic merge patch {patch} to fail, seen result: {v}"),
        Err(e) => e,
    }
}

// ---------------------------------------------------------------------------------------------
// JSON merge patch (RFC 7386)

#[test]
fn merge_patch_reproduces_every_rfc7386_appendix_a_example() {
    let cases = [
        (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
        (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
        (json!({"a":"b"}), json!({"a":null}), json!({})),
        (json!({"a":"b","b":"c"}), json!({"a":null}), json!({"b":"c"})),
        (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
        (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
        (
            json!({"a":{"b":"c"}}),
            json!({"a":{"b":"d","c":null}}),
            json!({"a":{"b":"d"}}),
        ),
        (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
        (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
        (json!({"a":"b"}), json!(["c"]), json!(["c"])),
        (json!({"a":"foo"}), json!(null), json!(null)),
        (json!({"a":"foo"}), json!("bar"), json!("bar")),
        (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
        (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
        (
            json!({}),
            json!({"a":{"bb":{"ccc":null}}}),
            json!({"a":{"bb":{}}}),
        ),
    ];
    for (i, (original, patch, expected)) in cases.into_iter().enumerate() {
        let mut target = original.clone();
        merge_patch(&mut target, &patch);
        assert_json(
            &target,
            &expected,
            &format!("RFC 7386 example {}: {original} + {patch}", i + 1),
        );
    }
}

#[test]
fn merge_patch_null_removes_a_configmap_key_and_keeps_the_others() {
    let mut cm = json!({"metadata":{"name":"x"},"data":{"a":"1","b":"2"}});
    merge_patch(&mut cm, &json!({"data":{"a":null}}));
    assert_json(
        &cm,
        &json!({"metadata":{"name":"x"},"data":{"b":"2"}}),
        "data.a removed",
    );
}

#[test]
fn merge_patch_drops_nulls_inside_added_values_like_the_api_server() {
    let mut obj = json!({"spec":{"x":1}});
    merge_patch(
        &mut obj,
        &json!({"spec":{"new":{"a":null,"b":1},"list":[{"c":null,"d":2}]}}),
    );
    assert_json(
        &obj,
        &json!({"spec":{"x":1,"new":{"b":1},"list":[{"d":2}]}}),
        "nulls pruned",
    );
}

#[test]
fn merge_patch_removing_the_only_finalizer_leaves_an_empty_list_for_the_server_to_drop() {
    let mut obj = json!({"metadata":{"name":"x","finalizers":["a/b"]}});
    merge_patch(&mut obj, &json!({"metadata":{"finalizers":[]}}));
    assert_json(
        &obj,
        &json!({"metadata":{"name":"x","finalizers":[]}}),
        "lists replace",
    );
    merge_patch(&mut obj, &json!({"metadata":{"finalizers":null}}));
    assert_json(&obj, &json!({"metadata":{"name":"x"}}), "null removes");
}

#[test]
fn merge_patch_survives_documents_deeper_than_the_depth_limit() {
    let mut deep = json!(1);
    for _ in 0..(super::MAX_DEPTH + 10) {
        deep = json!({ "a": deep });
    }
    let mut target = json!({});
    merge_patch(&mut target, &deep);
    assert!(
        target.get("a").is_some(),
        "expected the deep patch to be applied, seen {target}"
    );
}

// ---------------------------------------------------------------------------------------------
// JSON patch (RFC 6902), Appendix A, with the API server's semantics

#[test]
fn json_patch_rfc6902_a1_adds_an_object_member() {
    let out = json_patch_ok(
        json!({"foo":"bar"}),
        json!([{"op":"add","path":"/baz","value":"qux"}]),
    );
    assert_json(&out, &json!({"baz":"qux","foo":"bar"}), "A.1");
}

#[test]
fn json_patch_rfc6902_a2_adds_an_array_element() {
    let out = json_patch_ok(
        json!({"foo":["bar","baz"]}),
        json!([{"op":"add","path":"/foo/1","value":"qux"}]),
    );
    assert_json(&out, &json!({"foo":["bar","qux","baz"]}), "A.2");
}

#[test]
fn json_patch_rfc6902_a3_removes_an_object_member() {
    let out = json_patch_ok(
        json!({"baz":"qux","foo":"bar"}),
        json!([{"op":"remove","path":"/baz"}]),
    );
    assert_json(&out, &json!({"foo":"bar"}), "A.3");
}

#[test]
fn json_patch_rfc6902_a4_removes_an_array_element() {
    let out = json_patch_ok(
        json!({"foo":["bar","qux","baz"]}),
        json!([{"op":"remove","path":"/foo/1"}]),
    );
    assert_json(&out, &json!({"foo":["bar","baz"]}), "A.4");
}

#[test]
fn json_patch_rfc6902_a5_replaces_a_value() {
    let out = json_patch_ok(
        json!({"baz":"qux","foo":"bar"}),
        json!([{"op":"replace","path":"/baz","value":"boo"}]),
    );
    assert_json(&out, &json!({"baz":"boo","foo":"bar"}), "A.5");
}

#[test]
fn json_patch_rfc6902_a6_moves_a_value() {
    let doc = json!({"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}});
    let out = json_patch_ok(doc, json!([{"op":"move","from":"/foo/waldo","path":"/qux/thud"}]));
    assert_json(
        &out,
        &json!({"foo":{"bar":"baz"},"qux":{"corge":"grault","thud":"fred"}}),
        "A.6",
    );
}

#[test]
fn json_patch_rfc6902_a7_moves_an_array_element() {
    let out = json_patch_ok(
        json!({"foo":["all","grass","cows","eat"]}),
        json!([{"op":"move","from":"/foo/1","path":"/foo/3"}]),
    );
    assert_json(&out, &json!({"foo":["all","cows","eat","grass"]}), "A.7");
}

#[test]
fn json_patch_rfc6902_a8_test_succeeds() {
    let doc = json!({"baz":"qux","foo":["a",2,"c"]});
    let out = json_patch_ok(
        doc.clone(),
        json!([{"op":"test","path":"/baz","value":"qux"},{"op":"test","path":"/foo/1","value":2}]),
    );
    assert_json(&out, &doc, "A.8 leaves the document unchanged");
}

#[test]
fn json_patch_rfc6902_a9_test_fails_with_the_upstream_message() {
    let err = json_patch_err(
        json!({"baz":"qux"}),
        json!([{"op":"test","path":"/baz","value":"bar"}]),
    );
    assert_eq!(
        err,
        PatchError::OperationFailed("testing value /baz failed: test failed".to_owned())
    );
}

#[test]
fn json_patch_rfc6902_a10_adds_a_nested_member_object() {
    let out = json_patch_ok(
        json!({"foo":"bar"}),
        json!([{"op":"add","path":"/child","value":{"grandchild":{}}}]),
    );
    assert_json(&out, &json!({"foo":"bar","child":{"grandchild":{}}}), "A.10");
}

#[test]
fn json_patch_rfc6902_a11_ignores_unrecognized_members() {
    let out = json_patch_ok(
        json!({"foo":"bar"}),
        json!([{"op":"add","path":"/baz","value":"qux","xyz":123}]),
    );
    assert_json(&out, &json!({"foo":"bar","baz":"qux"}), "A.11");
}

#[test]
fn json_patch_rfc6902_a12_adding_to_a_nonexistent_target_fails() {
    let err = json_patch_err(
        json!({"foo":"bar"}),
        json!([{"op":"add","path":"/baz/bat","value":"qux"}]),
    );
    assert_eq!(
        err,
        PatchError::OperationFailed(
            "add operation does not apply: doc is missing path: \"/baz/bat\": missing value".to_owned()
        )
    );
}

#[test]
fn json_patch_rfc6902_a14_unescapes_tilde_one_before_tilde_zero() {
    let doc = json!({"/":9,"~1":10});
    let out = json_patch_ok(doc.clone(), json!([{"op":"test","path":"/~01","value":10}]));
    assert_json(&out, &doc, "A.14 (~01 is the member \"~1\")");
    let out = json_patch_ok(doc, json!([{"op":"replace","path":"/~1","value":8}]));
    assert_json(&out, &json!({"/":8,"~1":10}), "~1 is the member \"/\"");
}

#[test]
fn json_patch_rfc6902_a15_compares_strings_and_numbers_strictly() {
    let err = json_patch_err(
        json!({"/":9,"~1":10}),
        json!([{"op":"test","path":"/~01","value":"10"}]),
    );
    assert_eq!(
        err,
        PatchError::OperationFailed("testing value /~01 failed: test failed".to_owned())
    );
}

#[test]
fn json_patch_rfc6902_a16_adds_an_array_value_with_dash() {
    let out = json_patch_ok(
        json!({"foo":["bar"]}),
        json!([{"op":"add","path":"/foo/-","value":["abc","def"]}]),
    );
    assert_json(&out, &json!({"foo":["bar",["abc","def"]]}), "A.16");
}

#[test]
fn json_patch_test_of_a_missing_member_against_null_passes_as_in_kubernetes() {
    let obj = json!({"metadata":{"name":"x"}});
    let out = json_patch_ok(
        obj,
        json!([
            {"op":"test","path":"/metadata/finalizers","value":null},
            {"op":"add","path":"/metadata/finalizers","value":["a/b"]}
        ]),
    );
    assert_json(
        &out,
        &json!({"metadata":{"name":"x","finalizers":["a/b"]}}),
        "finalizer added",
    );
}

#[test]
fn json_patch_test_of_a_missing_member_against_a_value_fails() {
    let err = json_patch_err(
        json!({"metadata":{"name":"x"}}),
        json!([{"op":"test","path":"/metadata/finalizers","value":["a/b"]}]),
    );
    assert_eq!(
        err,
        PatchError::OperationFailed("testing value /metadata/finalizers failed: test failed".to_owned())
    );
}

#[test]
fn json_patch_test_with_a_missing_parent_fails_even_against_null() {
    let err = json_patch_err(
        json!({"spec":{}}),
        json!([{"op":"test","path":"/status/x","value":null}]),
    );
    assert_eq!(
        err,
        PatchError::OperationFailed(
            "test operation does not apply: is missing path: /status/x: missing value".to_owned()
        )
    );
}

#[test]
fn json_patch_finalizer_removal_sequence_of_kube_runtime_applies() {
    let obj = json!({"metadata":{"name":"x","finalizers":["a/b","c/d"]}});
    let out = json_patch_ok(
        obj,
        json!([
            {"op":"test","path":"/metadata/finalizers/0","value":"a/b"},
            {"op":"remove","path":"/metadata/finalizers/0"}
        ]),
    );
    assert_json(
        &out,
        &json!({"metadata":{"name":"x","finalizers":["c/d"]}}),
        "first finalizer removed",
    );
}

#[test]
fn json_patch_replace_of_a_missing_key_fails_with_the_upstream_message() {
    let err = json_patch_err(
        json!({"spec":{}}),
        json!([{"op":"replace","path":"/spec/x","value":1}]),
    );
    assert_eq!(
        err,
        PatchError::OperationFailed(
            "replace operation does not apply: doc is missing key: /spec/x: missing value".to_owned()
        )
    );
}

#[test]
fn json_patch_remove_of_a_missing_key_fails_with_the_upstream_message() {
    let err = json_patch_err(json!({"spec":{}}), json!([{"op":"remove","path":"/spec/x"}]));
    assert_eq!(
        err,
        PatchError::OperationFailed(
            "error in remove for path: '/spec/x': Unable to remove nonexistent key: x: missing value"
                .to_owned()
        )
    );
}

#[test]
fn json_patch_out_of_range_and_malformed_indices_fail() {
    let doc = json!({"a":[1,2]});
    let err = json_patch_err(doc.clone(), json!([{"op":"add","path":"/a/3","value":0}]));
    assert_eq!(
        err,
        PatchError::OperationFailed(
            "error in add for path: '/a/3': Unable to access invalid index: 3: invalid index referenced"
                .to_owned()
        )
    );
    let err = json_patch_err(doc.clone(), json!([{"op":"remove","path":"/a/x"}]));
    assert_eq!(
        err,
        PatchError::OperationFailed(
            "error in remove for path: '/a/x': strconv.Atoi: parsing \"x\": invalid syntax".to_owned()
        )
    );
    let err = json_patch_err(doc, json!([{"op":"test","path":"/a/2","value":1}]));
    assert_eq!(
        err,
        PatchError::OperationFailed(
            "error in test for path: '/a/2': Unable to access invalid index: 2: invalid index referenced"
                .to_owned()
        )
    );
}

#[test]
fn json_patch_negative_indices_count_from_the_end() {
    let out = json_patch_ok(json!({"a":[1,2,3]}), json!([{"op":"remove","path":"/a/-1"}]));
    assert_json(&out, &json!({"a":[1,2]}), "last element removed");
}

#[test]
fn json_patch_copy_duplicates_and_move_relocates() {
    let out = json_patch_ok(
        json!({"a":{"x":1},"b":{}}),
        json!([{"op":"copy","from":"/a/x","path":"/b/y"},{"op":"move","from":"/a","path":"/c"}]),
    );
    assert_json(&out, &json!({"b":{"y":1},"c":{"x":1}}), "copy then move");
}

#[test]
fn json_patch_repeated_copies_are_bounded() {
    let ops: Vec<Value> = (0..100)
        .map(|_| json!({"op":"copy","from":"/a","path":"/a/-"}))
        .collect();
    let doc = json!({"a":["0123456789abcdef0123456789abcdef"]});
    let err = super::json::apply_with_copy_limit(&doc, &Value::Array(ops), 4096);
    match err {
        Err(PatchError::OperationFailed(m)) => assert!(
            m.starts_with("Unable to complete the copy") && m.ends_with("exceeding the limit 4096"),
            "expected the copy limit, seen {m}"
        ),
        other => panic!("expected OperationFailed, seen {other:?}"),
    }
}

#[test]
fn json_patch_unknown_operations_and_non_arrays_are_refused() {
    let err = json_patch_err(json!({}), json!([{"op":"frobnicate","path":"/a"}]));
    assert_eq!(
        err,
        PatchError::OperationFailed("Unexpected kind: frobnicate".to_owned())
    );
    let err = json_patch_err(json!({}), json!({"op":"add"}));
    assert_eq!(
        err,
        PatchError::Malformed(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch".to_owned()
        )
    );
    let err = json_patch_err(json!({}), json!([{"op":"add","value":1}]));
    assert_eq!(
        err,
        PatchError::OperationFailed("add operation failed to decode path: missing value".to_owned())
    );
}

#[test]
fn json_patch_a_failing_operation_leaves_the_input_untouched() {
    let doc = json!({"a":1});
    let _ = json_patch_err(
        doc.clone(),
        json!([{"op":"add","path":"/b","value":2},{"op":"remove","path":"/zz"}]),
    );
    assert_json(&doc, &json!({"a":1}), "input not modified");
}

#[test]
fn json_patch_too_many_operations_are_refused() {
    let ops: Vec<Value> = (0..=super::MAX_JSON_PATCH_OPERATIONS)
        .map(|_| json!({"op":"test","path":"/a"}))
        .collect();
    let err = json_patch_err(json!({}), Value::Array(ops));
    assert!(
        matches!(err, PatchError::Malformed(_)),
        "expected Malformed, seen {err:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch

/// The live Deployment after `kubectl apply -f d2.yaml` (probe manifest), with server defaults.
fn d2_live() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "two",
            "namespace": "default",
            "labels": {"app": "two", "tier": "x"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"d2\":true}\n"}
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "two"}},
            "template": {
                "metadata": {"labels": {"app": "two"}},
                "spec": {
                    "tolerations": [{"key": "a", "operator": "Exists"}],
                    "containers": [
                        {
                            "name": "a",
                            "image": "busybox:1",
                            "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
                            "ports": [{"containerPort": 80, "protocol": "TCP"}],
                            "terminationMessagePath": "/dev/termination-log"
                        },
                        {"name": "b", "image": "busybox:1", "terminationMessagePath": "/dev/termination-log"}
                    ],
                    "restartPolicy": "Always"
                }
            }
        }
    })
}

/// What `kubectl apply -f d2b.yaml` sent (a Deployment edited by hand).
fn d2b_patch() -> Value {
    json!({
        "metadata": {
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"d2b\":true}\n"},
            "labels": {"tier": null}
        },
        "spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "a"}],
            "containers": [
                {
                    "$setElementOrder/env": [{"name": "Y"}],
                    "env": [{"name": "Y", "value": "3"}, {"$patch": "delete", "name": "X"}],
                    "image": "busybox:2",
                    "name": "a",
                    "ports": [{"containerPort": 81}, {"$patch": "delete", "containerPort": 80}]
                },
                {"$patch": "delete", "name": "b"}
            ],
            "tolerations": null
        }}}
    })
}

#[test]
fn smp_probe_d2_then_d2b_leaves_one_container_with_new_image_env_and_port() {
    let out = smp(d2_live(), d2b_patch(), "apps", "Deployment");
    let expected = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "two",
            "namespace": "default",
            "labels": {"app": "two"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"d2b\":true}\n"}
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "two"}},
            "template": {
                "metadata": {"labels": {"app": "two"}},
                "spec": {
                    "containers": [{
                        "name": "a",
                        "image": "busybox:2",
                        "env": [{"name": "Y", "value": "3"}],
                        "ports": [{"containerPort": 81}],
                        "terminationMessagePath": "/dev/termination-log"
                    }],
                    "restartPolicy": "Always"
                }
            }
        }
    });
    assert_json(&out, &expected, "d2 + d2b");
}

fn pod(containers: Value) -> Value {
    json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":containers}})
}

#[test]
fn smp_merges_containers_by_name_and_appends_new_ones() {
    let out = smp(
        pod(json!([{"name":"a","image":"x:1"},{"name":"b","image":"y:1"}])),
        json!({"spec":{"containers":[{"name":"b","image":"y:2"},{"name":"c","image":"z:1"}]}}),
        "",
        "Pod",
    );
    // Upstream order: the patch's elements in patch order, server-only elements placed by their
    // live position relative to them.
    assert_json(
        &out["spec"]["containers"],
        &json!([{"name":"a","image":"x:1"},{"name":"b","image":"y:2"},{"name":"c","image":"z:1"}]),
        "containers merged by name",
    );
}

#[test]
fn smp_patch_delete_element_removes_by_merge_key() {
    let out = smp(
        pod(json!([{"name":"a","env":[{"name":"X","value":"1"},{"name":"Y","value":"2"}]}])),
        json!({"spec":{"containers":[{"name":"a","env":[{"$patch":"delete","name":"X"}]}]}}),
        "",
        "Pod",
    );
    assert_json(
        &out["spec"]["containers"][0]["env"],
        &json!([{"name":"Y","value":"2"}]),
        "env X deleted",
    );
}

#[test]
fn smp_patch_replace_element_replaces_the_whole_list() {
    let out = smp(
        pod(json!([{"name":"a","image":"x"},{"name":"b","image":"y"}])),
        json!({"spec":{"containers":[{"$patch":"replace"},{"name":"c","image":"z"}]}}),
        "",
        "Pod",
    );
    assert_json(
        &out["spec"]["containers"],
        &json!([{"name":"c","image":"z"}]),
        "list replaced",
    );
}

#[test]
fn smp_patch_merge_element_is_accepted_as_the_default() {
    let out = smp(
        pod(json!([{"name":"a","image":"x"}])),
        json!({"spec":{"containers":[{"$patch":"merge"},{"name":"a","image":"y"}]}}),
        "",
        "Pod",
    );
    assert_json(
        &out["spec"]["containers"],
        &json!([{"name":"a","image":"y"}]),
        "merged",
    );
}

#[test]
fn smp_patch_replace_on_a_map_replaces_it() {
    let out = smp(
        json!({"metadata":{"labels":{"a":"1","b":"2"}}}),
        json!({"metadata":{"labels":{"$patch":"replace","c":"3"}}}),
        "",
        "ConfigMap",
    );
    assert_json(&out, &json!({"metadata":{"labels":{"c":"3"}}}), "labels replaced");
}

#[test]
fn smp_patch_delete_on_a_map_empties_it() {
    let out = smp(
        json!({"metadata":{"name":"x"},"data":{"a":"1"}}),
        json!({"data":{"$patch":"delete"}}),
        "",
        "ConfigMap",
    );
    assert_json(&out, &json!({"metadata":{"name":"x"},"data":{}}), "data emptied");
}

#[test]
fn smp_patch_merge_on_a_map_merges() {
    let out = smp(
        json!({"data":{"a":"1"}}),
        json!({"data":{"$patch":"merge","b":"2"}}),
        "",
        "ConfigMap",
    );
    assert_json(&out, &json!({"data":{"a":"1","b":"2"}}), "merged");
}

#[test]
fn smp_unknown_patch_directive_is_refused() {
    let err = smp_err(
        json!({"data":{}}),
        json!({"data":{"$patch":"explode"}}),
        "",
        "ConfigMap",
    );
    assert!(
        matches!(&err, PatchError::OperationFailed(m) if m.starts_with("unknown patch type: explode")),
        "seen {err:?}"
    );
}

#[test]
fn smp_retain_keys_drops_the_other_strategy_fields() {
    let live = json!({"spec":{"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":"25%"}}}});
    let out = smp(
        live,
        json!({"spec":{"strategy":{"$retainKeys":["type"],"type":"Recreate","rollingUpdate":null}}}),
        "apps",
        "Deployment",
    );
    assert_json(
        &out,
        &json!({"spec":{"strategy":{"type":"Recreate"}}}),
        "rollingUpdate dropped",
    );
}

#[test]
fn smp_retain_keys_on_a_volume_switches_its_source() {
    let live = json!({"spec":{"volumes":[{"name":"v","emptyDir":{}}]}});
    let out = smp(
        live,
        json!({"spec":{"volumes":[{"$retainKeys":["configMap","name"],"name":"v","configMap":{"name":"cm"}}]}}),
        "",
        "Pod",
    );
    assert_json(
        &out["spec"]["volumes"],
        &json!([{"name":"v","configMap":{"name":"cm"}}]),
        "emptyDir gone",
    );
}

#[test]
fn smp_retain_keys_must_list_every_patched_field() {
    let err = smp_err(
        json!({"spec":{"strategy":{}}}),
        json!({"spec":{"strategy":{"$retainKeys":["type"],"rollingUpdate":{"maxSurge":1}}}}),
        "apps",
        "Deployment",
    );
    assert_eq!(
        err,
        PatchError::Malformed("invalid patch format of retainKeys".to_owned())
    );
}

#[test]
fn smp_set_element_order_reorders_the_merged_list() {
    let out = smp(
        pod(json!([{"name":"a"},{"name":"b"},{"name":"c"}])),
        json!({"spec":{"$setElementOrder/containers":[{"name":"c"},{"name":"a"},{"name":"b"}]}}),
        "",
        "Pod",
    );
    assert_json(
        &out["spec"]["containers"],
        &json!([{"name":"c"},{"name":"a"},{"name":"b"}]),
        "reordered",
    );
}

#[test]
fn smp_set_element_order_that_contradicts_the_patch_list_is_refused() {
    let err = smp_err(
        pod(json!([{"name":"a"},{"name":"b"}])),
        json!({"spec":{"$setElementOrder/containers":[{"name":"a"}],"containers":[{"name":"b","image":"x"}]}}),
        "",
        "Pod",
    );
    assert!(
        matches!(&err, PatchError::OperationFailed(m) if m.starts_with("The order in patch list")),
        "seen {err:?}"
    );
}

#[test]
fn smp_delete_from_primitive_list_removes_finalizers() {
    let out = smp(
        json!({"metadata":{"finalizers":["a","b","c"]}}),
        json!({"metadata":{"$deleteFromPrimitiveList/finalizers":["b"]}}),
        "",
        "ConfigMap",
    );
    assert_json(&out, &json!({"metadata":{"finalizers":["a","c"]}}), "b removed");
}

#[test]
fn smp_finalizers_merge_as_a_union() {
    let out = smp(
        json!({"metadata":{"finalizers":["a","b"]}}),
        json!({"metadata":{"finalizers":["b","c"]}}),
        "",
        "ConfigMap",
    );
    // The patch's elements keep the patch order, the server-only ones are placed before the
    // first patch element that follows them in the live list (upstream `mergeSortedSlice`).
    assert_json(&out, &json!({"metadata":{"finalizers":["a","b","c"]}}), "union");
}

#[test]
fn smp_lists_without_a_merge_key_are_replaced() {
    let live = pod(json!([{"name":"a","args":["x","y"]}]));
    let mut live = live;
    live["spec"]["tolerations"] = json!([{"key":"a","operator":"Exists"}]);
    let out = smp(
        live,
        json!({"spec":{"tolerations":[{"key":"b","operator":"Exists"}],"containers":[{"name":"a","args":["z"]}]}}),
        "",
        "Pod",
    );
    assert_json(
        &out["spec"]["tolerations"],
        &json!([{"key":"b","operator":"Exists"}]),
        "tolerations replaced",
    );
    assert_json(
        &out["spec"]["containers"][0]["args"],
        &json!(["z"]),
        "args replaced",
    );
}

#[test]
fn smp_null_deletes_a_key() {
    let out = smp(
        json!({"data":{"a":"1","b":"2"}}),
        json!({"data":{"a":null}}),
        "",
        "ConfigMap",
    );
    assert_json(&out, &json!({"data":{"b":"2"}}), "a removed");
}

#[test]
fn smp_merges_owner_references_by_uid() {
    let out = smp(
        json!({"metadata":{"ownerReferences":[{"uid":"1","name":"a"},{"uid":"2","name":"b"}]}}),
        json!({"metadata":{"ownerReferences":[{"uid":"2","name":"b2"},{"$patch":"delete","uid":"1"}]}}),
        "",
        "ConfigMap",
    );
    assert_json(
        &out,
        &json!({"metadata":{"ownerReferences":[{"uid":"2","name":"b2"}]}}),
        "merged by uid",
    );
}

#[test]
fn smp_merges_pod_status_conditions_by_type() {
    let live = json!({"status":{"conditions":[
        {"type":"PodScheduled","status":"True"},{"type":"Ready","status":"False"}
    ]}});
    let out = smp(
        live,
        json!({"status":{"conditions":[{"type":"Ready","status":"True"}]}}),
        "",
        "Pod",
    );
    assert_json(
        &out["status"]["conditions"],
        &json!([{"type":"PodScheduled","status":"True"},{"type":"Ready","status":"True"}]),
        "Ready updated in place",
    );
}

#[test]
fn smp_merges_container_ports_by_container_port_under_a_workload_template() {
    let live = json!({"spec":{"template":{"spec":{"containers":[
        {"name":"a","ports":[{"containerPort":80,"protocol":"TCP"}]}
    ]}}}});
    let out = smp(
        live,
        json!({"spec":{"template":{"spec":{"containers":[{"name":"a","ports":[{"containerPort":80,"name":"http"}]}]}}}}),
        "apps",
        "StatefulSet",
    );
    assert_json(
        &out["spec"]["template"]["spec"]["containers"][0]["ports"],
        &json!([{"containerPort":80,"protocol":"TCP","name":"http"}]),
        "port merged",
    );
}

#[test]
fn smp_directives_inside_new_values_are_processed_not_stored() {
    let out = smp(
        json!({"spec":{}}),
        json!({"spec":{"containers":[{"name":"a","env":[{"$patch":"delete","name":"X"},{"name":"Y"}]}]}}),
        "",
        "Pod",
    );
    assert_json(
        &out,
        &json!({"spec":{"containers":[{"name":"a","env":[{"name":"Y"}]}]}}),
        "directives applied",
    );
}

#[test]
fn smp_merge_list_element_without_its_merge_key_is_refused() {
    let err = smp_err(
        pod(json!([{"name":"a"}])),
        json!({"spec":{"containers":[{"image":"x"}]}}),
        "",
        "Pod",
    );
    assert!(
        matches!(&err, PatchError::OperationFailed(m) if m.ends_with("does not contain declared merge key: name")),
        "seen {err:?}"
    );
}

#[test]
fn smp_patch_that_is_not_an_object_is_malformed() {
    let err = smp_err(json!({}), json!([1]), "", "ConfigMap");
    assert_eq!(
        err,
        PatchError::Malformed(
            "json: cannot unmarshal array into Go value of type map[string]interface {}".to_owned()
        )
    );
}

#[test]
fn smp_service_ports_merge_by_port() {
    let live = json!({"spec":{"ports":[{"port":80,"protocol":"TCP","targetPort":8080},{"port":443,"protocol":"TCP"}]}});
    let out = smp(
        live,
        json!({"spec":{"ports":[{"port":80,"targetPort":9090}]}}),
        "",
        "Service",
    );
    assert_json(
        &out["spec"]["ports"],
        &json!([{"port":80,"protocol":"TCP","targetPort":9090},{"port":443,"protocol":"TCP"}]),
        "port 80 updated",
    );
}
