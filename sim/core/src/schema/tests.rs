use serde_json::{Value, json};

use super::*;
use crate::fieldpath::{ListType, ListTypes, Step};

fn compile(schema: Value) -> Schema {
    match Schema::compile(&schema) {
        Ok(s) => s,
        Err(e) => panic!("expected the schema to compile, got: {e}"),
    }
}

fn compile_errors(schema: Value) -> Vec<String> {
    match Schema::compile_at(&schema, "spec.versions[0].schema.openAPIV3Schema") {
        Ok(_) => panic!("expected the schema to be rejected: {schema}"),
        Err(errs) => errs.into_iter().map(|e| e.message).collect(),
    }
}

fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(|e| e.message.clone()).collect()
}

#[track_caller]
fn assert_messages(seen: &[FieldError], want: &[&str]) {
    let seen = messages(seen);
    let want: Vec<String> = want.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(
        seen,
        want,
        "\nexpected errors:\n  {}\nseen:\n  {}",
        want.join("\n  "),
        seen.join("\n  ")
    );
}

#[track_caller]
fn assert_contains(seen: &[String], needle: &str) {
    assert!(
        seen.iter().any(|m| m.contains(needle)),
        "expected a message containing {needle:?}, seen:\n  {}",
        seen.join("\n  ")
    );
}

/// A schema for one object with the given `spec` properties.
fn spec_schema(spec: Value) -> Value {
    json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec
        }
    })
}

fn obj(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
}

/// Shaped like the Nave MultiClusterDeployment CRD.
fn mcd_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["template"],
                "x-kubernetes-validations": [{
                    "rule": "!has(self.minClusters) || !has(self.maxClusters) || self.minClusters <= self.maxClusters",
                    "message": "minClusters must not exceed maxClusters"
                }],
                "properties": {
                    "replicas": {
                        "type": "integer", "format": "int32", "minimum": 0, "default": 1,
                        "x-kubernetes-validations": [{"rule": "self >= 0"}]
                    },
                    "minClusters": {"type": "integer", "minimum": 1},
                    "maxClusters": {"type": "integer"},
                    "placement": {
                        "type": "object",
                        "properties": {
                            "policy": {
                                "type": "string",
                                "enum": ["worst-fit", "best-fit", "proximity", "spread"],
                                "default": "spread"
                            }
                        }
                    },
                    "weights": {
                        "type": "object",
                        "additionalProperties": {"type": "integer"},
                        "x-kubernetes-validations": [{"rule": "self.all(k, self[k] > 0)", "message": "weights must be positive"}]
                    },
                    "template": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": true,
                        "x-kubernetes-validations": [{
                            "rule": "has(self.spec) && has(self.spec.containers) && size(self.spec.containers) > 0",
                            "message": "template must have at least one container"
                        }]
                    }
                }
            },
            "status": {
                "type": "object",
                "properties": {
                    "readyClusters": {"type": "integer"},
                    "conditions": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                        "items": {
                            "type": "object",
                            "required": ["type", "status"],
                            "properties": {
                                "type": {"type": "string"},
                                "status": {"type": "string"},
                                "lastTransitionTime": {"type": "string", "format": "date-time"}
                            }
                        }
                    }
                }
            }
        }
    })
}

fn mcd(spec: Value) -> Value {
    json!({
        "apiVersion": "nave.dev/v1alpha1",
        "kind": "MultiClusterDeployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": spec
    })
}

fn good_mcd_spec() -> Value {
    json!({
        "replicas": 3,
        "minClusters": 1,
        "maxClusters": 3,
        "placement": {"policy": "best-fit"},
        "weights": {"eu-1": 2, "us-1": 1},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]}
        }
    })
}

const BLOCKED: &str = "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

// ---------------------------------------------------------------------------------------------
// The MultiClusterDeployment-shaped CRD end to end.

#[test]
fn mcd_schema_compiles_and_accepts_a_good_object() {
    let s = compile(mcd_schema());
    assert!(s.has_rules());
    let o = mcd(good_mcd_spec());
    assert_messages(&s.validate(&o, None), &[]);
}

#[test]
fn mcd_rejects_negative_replicas_with_openapi_and_cel_errors() {
    let s = compile(mcd_schema());
    let mut spec = good_mcd_spec();
    spec["replicas"] = json!(-1);
    assert_messages(
        &s.validate(&mcd(spec), None),
        &[
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
            "spec.replicas: Invalid value: \"integer\": failed rule: self >= 0",
        ],
    );
}

#[test]
fn mcd_rejects_unknown_policy_and_skips_cel() {
    let s = compile(mcd_schema());
    let mut spec = good_mcd_spec();
    spec["placement"]["policy"] = json!("x");
    spec["minClusters"] = json!(5);
    assert_messages(
        &s.validate(&mcd(spec), None),
        &[
            "spec.placement.policy: Unsupported value: \"x\": supported values: \"worst-fit\", \"best-fit\", \"proximity\", \"spread\"",
            BLOCKED,
        ],
    );
}

#[test]
fn mcd_requires_template() {
    let s = compile(mcd_schema());
    let mut spec = good_mcd_spec();
    spec.as_object_mut().map(|m| m.remove("template"));
    assert_messages(
        &s.validate(&mcd(spec), None),
        &["spec.template: Required value", BLOCKED],
    );
}

#[test]
fn mcd_reports_type_errors_like_upstream() {
    let s = compile(mcd_schema());
    let mut spec = good_mcd_spec();
    spec["replicas"] = json!("string");
    assert_messages(
        &s.validate(&mcd(spec), None),
        &[
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
            BLOCKED,
        ],
    );
}

#[test]
fn mcd_checks_min_clusters_against_max_clusters_only_when_both_are_set() {
    let s = compile(mcd_schema());
    let mut spec = good_mcd_spec();
    spec["minClusters"] = json!(3);
    spec["maxClusters"] = json!(2);
    assert_messages(
        &s.validate(&mcd(spec), None),
        &["spec: Invalid value: \"object\": minClusters must not exceed maxClusters"],
    );

    let mut only_min = good_mcd_spec();
    only_min.as_object_mut().map(|m| m.remove("maxClusters"));
    only_min["minClusters"] = json!(7);
    assert_messages(&s.validate(&mcd(only_min), None), &[]);
}

#[test]
fn mcd_requires_positive_weights() {
    let s = compile(mcd_schema());
    let mut spec = good_mcd_spec();
    spec["weights"] = json!({"eu-1": 2, "us-1": 0});
    assert_messages(
        &s.validate(&mcd(spec), None),
        &["spec.weights: Invalid value: \"object\": weights must be positive"],
    );
}

#[test]
fn mcd_requires_a_container_in_the_template() {
    let s = compile(mcd_schema());
    let mut spec = good_mcd_spec();
    spec["template"] = json!({"spec": {"containers": []}});
    assert_messages(
        &s.validate(&mcd(spec), None),
        &["spec.template: Invalid value: \"object\": template must have at least one container"],
    );
    let mut spec = good_mcd_spec();
    spec["template"] = json!({"metadata": {}});
    assert_messages(
        &s.validate(&mcd(spec), None),
        &["spec.template: Invalid value: \"object\": template must have at least one container"],
    );
}

#[test]
fn mcd_reports_every_error_not_only_the_first() {
    let s = compile(mcd_schema());
    let mut spec = good_mcd_spec();
    spec["replicas"] = json!(-5);
    spec["minClusters"] = json!(0);
    let o = mcd(spec);
    let mut with_status = o.clone();
    with_status["status"] = json!({"conditions": [
        {"type": "Ready", "status": "True"},
        {"type": "Ready", "status": "False"},
        {"status": "True"}
    ]});
    assert_messages(
        &s.validate(&with_status, None),
        &[
            "spec.minClusters: Invalid value: 0: spec.minClusters in body should be greater than or equal to 1",
            "spec.replicas: Invalid value: -5: spec.replicas in body should be greater than or equal to 0",
            "status.conditions[2].type: Required value",
            "status.conditions[1]: Duplicate value: map[string]interface {}{\"type\":\"Ready\"}",
            BLOCKED,
        ],
    );
}

#[test]
fn mcd_prunes_defaults_and_validates_in_upstream_order() {
    let s = compile(mcd_schema());
    let mut o = mcd(json!({
        "placement": {},
        "bogus": true,
        "template": {"spec": {"containers": [{"name": "c"}]}, "anything": {"goes": 1}}
    }));
    o["status"] = json!({"undeclared": 1, "readyClusters": 2});
    o["metadata"]["bogusMeta"] = json!("x");
    let unknown = s.prune_unknown(&mut o);
    assert_eq!(
        unknown,
        vec!["metadata.bogusMeta", "spec.bogus", "status.undeclared"]
    );
    s.default(&mut o);
    assert_eq!(o["spec"]["replicas"], json!(1), "replicas defaulted");
    assert_eq!(
        o["spec"]["placement"]["policy"],
        json!("spread"),
        "policy defaulted inside an existing placement"
    );
    assert_eq!(
        o["spec"]["template"]["anything"],
        json!({"goes": 1}),
        "preserved unknown fields stay"
    );
    assert_eq!(o["apiVersion"], json!("nave.dev/v1alpha1"));
    assert_eq!(o["metadata"], json!({"name": "web", "namespace": "default"}));
    assert_eq!(o["status"], json!({"readyClusters": 2}));
    assert_messages(&s.validate(&o, None), &[]);
}

// ---------------------------------------------------------------------------------------------
// Compilation: structural schema rules and CEL compile errors.

#[test]
fn compile_rejects_missing_types_with_upstream_messages() {
    let errs =
        compile_errors(json!({"properties": {"spec": {"properties": {"a": {}}}, "list": {"type": "array"}}}));
    assert_eq!(
        errs,
        vec![
            "spec.versions[0].schema.openAPIV3Schema.properties[list].items: Required value: must be specified",
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[a].type: Required value: must not be empty for specified object fields",
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
            "spec.versions[0].schema.openAPIV3Schema.type: Required value: must not be empty at the root",
        ]
    );
}

#[test]
fn compile_rejects_invalid_keywords() {
    let errs = compile_errors(json!({
        "type": "object",
        "properties": {
            "a": {"type": "strin"},
            "b": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
            "c": {"type": "string", "pattern": "(["},
            "d": {"type": "object", "x-kubernetes-preserve-unknown-fields": false},
            "e": {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": {"type": "string"}},
            "f": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}, "x-kubernetes-list-type": "map"},
            "g": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "bag"},
            "h": {"$ref": "#/definitions/x"}
        }
    }));
    let p = "spec.versions[0].schema.openAPIV3Schema.properties";
    assert_contains(
        &errs,
        &format!(
            "{p}[a].type: Unsupported value: \"strin\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""
        ),
    );
    assert_contains(
        &errs,
        &format!(
            "{p}[b].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
        ),
    );
    assert_contains(
        &errs,
        &format!("{p}[c].pattern: Invalid value: \"([\": must be a valid regular expression, but isn't"),
    );
    assert_contains(
        &errs,
        &format!(
            "{p}[d].x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"
        ),
    );
    assert_contains(
        &errs,
        &format!(
            "{p}[e].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
        ),
    );
    assert_contains(
        &errs,
        &format!(
            "{p}[f].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
        ),
    );
    assert_contains(
        &errs,
        &format!(
            "{p}[g].x-kubernetes-list-type: Unsupported value: \"bag\": supported values: \"atomic\", \"set\", \"map\""
        ),
    );
    assert_contains(&errs, &format!("{p}[h].$ref: Forbidden: $ref is not supported"));
}

#[test]
fn compile_rejects_non_object_root_and_rich_root_metadata() {
    let errs = compile_errors(json!({"type": "string"}));
    assert_contains(
        &errs,
        "openAPIV3Schema.type: Invalid value: \"string\": must be object at the root",
    );
    let errs = compile_errors(
        json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}}),
    );
    assert_contains(
        &errs,
        "openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
    );
    compile(
        json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}}}}),
    );
}

#[test]
fn compile_rejects_value_validations_that_are_not_structural() {
    let errs = compile_errors(spec_schema(
        json!({"type": "object", "anyOf": [{"type": "string"}]}),
    ));
    assert_contains(
        &errs,
        "properties[spec].anyOf[0].type: Forbidden: must be empty to be structural",
    );
}

#[test]
fn compile_rejects_invalid_defaults() {
    let errs = compile_errors(spec_schema(
        json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "default": -1}}}),
    ));
    assert_eq!(
        errs,
        vec![
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[n].default: Invalid value: -1:  in body should be greater than or equal to 0"
        ]
    );
}

#[test]
fn compile_rejects_cel_syntax_errors_with_cel_go_text() {
    let errs = compile_errors(spec_schema(json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.a <"}],
        "properties": {"a": {"type": "integer"}}
    })));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with(
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{Rule:\"self.a <\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}: compilation failed: ERROR: <input>:1:9: Syntax error:"
        ),
        "seen: {}",
        errs[0]
    );
}

#[test]
fn compile_rejects_undefined_fields_and_functions() {
    let spec = |rule: &str| {
        spec_schema(json!({
            "type": "object",
            "x-kubernetes-validations": [{"rule": rule}],
            "properties": {
                "a": {"type": "integer"},
                "m": {"type": "object", "additionalProperties": {"type": "string"}},
                "l": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "string"}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }
        }))
    };
    assert_contains(
        &compile_errors(spec("self.b > 1")),
        "compilation failed: ERROR: <input>:1:5: undefined field 'b'",
    );
    assert_contains(&compile_errors(spec("has(self.zz)")), "undefined field 'zz'");
    assert_contains(
        &compile_errors(spec("self.l.all(x, x.q == 'a')")),
        "undefined field 'q'",
    );
    assert_contains(
        &compile_errors(spec("foo(self.a)")),
        "undeclared reference to 'foo' (in container '')",
    );
    assert_contains(
        &compile_errors(spec("other.a > 1")),
        "undeclared reference to 'other' (in container '')",
    );
    assert_contains(
        &compile_errors(spec("self.l.isSorted()")),
        "function 'isSorted' of the Kubernetes CEL library is not supported by this API server",
    );
    assert_contains(
        &compile_errors(spec("self.a + 1")),
        "cel expression must evaluate to a bool",
    );
    assert_contains(
        &compile_errors(spec("self.a")),
        "cel expression must evaluate to a bool",
    );
    // Map keys, free-form subtrees and list items with declared fields are fine.
    for ok in [
        "self.m.x == 'y'",
        "self.free.anything.goes",
        "self.l.all(x, x.n != '')",
        "self.m.all(k, k != '')",
    ] {
        compile(spec(ok));
    }
}

#[test]
fn compile_checks_reason_field_path_and_old_self_placement() {
    let errs = compile_errors(spec_schema(json!({
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "list": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "string"}},
                "x-kubernetes-validations": [{"rule": "self.x == oldSelf.x"}]}}
        },
        "x-kubernetes-validations": [
            {"rule": "self.a > 0", "reason": "Bogus"},
            {"rule": "self.a > 0", "fieldPath": ".nope"},
            {"rule": "self.a > 0", "optionalOldSelf": true}
        ]
    })));
    let p = "spec.versions[0].schema.openAPIV3Schema.properties[spec]";
    assert_contains(
        &errs,
        &format!(
            "{p}.x-kubernetes-validations[0].reason: Unsupported value: \"Bogus\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""
        ),
    );
    assert_contains(
        &errs,
        &format!(
            "{p}.x-kubernetes-validations[1].fieldPath: Invalid value: \".nope\": fieldPath must be a valid path: does not refer to a valid field"
        ),
    );
    assert_contains(
        &errs,
        &format!(
            "{p}.x-kubernetes-validations[2].optionalOldSelf: Forbidden: may not be set if oldSelf is not used in rule"
        ),
    );
    assert_contains(
        &errs,
        "oldSelf cannot be used on the uncorrelatable portion of the schema",
    );
}

#[test]
fn compile_rejects_hostile_rules_without_overflowing_the_stack() {
    // Run on a thread with the stack of a tokio worker, where the server compiles CRDs.
    let handle = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| {
            let base = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
            let with_rule = |rule: String| {
                let mut s = base.clone();
                s["x-kubernetes-validations"] = json!([{"rule": rule}]);
                Schema::compile(&spec_schema(s))
            };
            let deep_parens = format!("{}true{}", "(".repeat(500), ")".repeat(500));
            assert!(with_rule(deep_parens).is_err());
            let long_chain = format!("{} > 0", vec!["self.a"; 5000].join(" + "));
            assert!(with_rule(long_chain).is_err());
            let huge = format!("'{}' == ''", "x".repeat(100_000));
            assert!(with_rule(huge).is_err());
            // Just under the limits: compiles and evaluates.
            let chain = format!("{} > 0", vec!["1"; 120].join(" + "));
            let schema = with_rule(chain).unwrap_or_else(|e| panic!("{e}"));
            assert!(schema.validate(&obj(json!({"a": 1})), None).is_empty());
            let nested = format!("{}self.a{} >= 0", "(".repeat(80), ")".repeat(80));
            let schema = with_rule(nested).unwrap_or_else(|e| panic!("{e}"));
            assert!(schema.validate(&obj(json!({"a": 1})), None).is_empty());
        })
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    assert!(handle.join().is_ok(), "compiling hostile rules must not crash");
}

// ---------------------------------------------------------------------------------------------
// OpenAPI validation messages.

#[test]
fn validate_string_constraints() {
    let s = compile(spec_schema(json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 3},
        "code": {"type": "string", "minLength": 2, "pattern": "^[a-z]+$"},
        "id": {"type": "string", "format": "uuid"},
        "when": {"type": "string", "format": "date-time"},
        "size": {"type": "string", "format": "quantity"},
        "free": {"type": "string", "format": "something-unknown"}
    }})));
    assert_messages(
        &s.validate(&obj(json!({"name": "abcd", "code": "a", "id": "nope", "when": "yesterday", "size": "1Kib", "free": "x"})), None),
        &[
            "spec.code: Invalid value: \"a\": spec.code in body should be at least 2 chars long",
            "spec.id: Invalid value: \"nope\": spec.id in body must be of type uuid: \"nope\"",
            "spec.name: Too long: may not be more than 3 bytes",
            "spec.size: Invalid value: \"1Kib\": spec.size in body must be of type quantity: \"1Kib\"",
            "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type datetime: \"yesterday\"",
        ],
    );
    assert_messages(
        &s.validate(&obj(json!({"code": "AB"})), None),
        &["spec.code: Invalid value: \"AB\": spec.code in body should match '^[a-z]+$'"],
    );
    let good = obj(json!({
        "name": "abc", "code": "ab", "id": "123e4567-e89b-12d3-a456-426614174000",
        "when": "2025-01-01T00:00:00Z", "size": "64Mi"
    }));
    assert_messages(&s.validate(&good, None), &[]);
}

#[test]
fn validate_numeric_constraints() {
    let s = compile(spec_schema(json!({"type": "object", "properties": {
        "i": {"type": "integer", "minimum": 1, "maximum": 10, "multipleOf": 2},
        "x": {"type": "integer", "exclusiveMinimum": true, "minimum": 0},
        "f": {"type": "number", "maximum": 1000000},
        "r": {"type": "number", "minimum": 0.5}
    }})));
    assert_messages(
        &s.validate(&obj(json!({"i": 11, "x": 0, "f": 2000000.5, "r": 0.25})), None),
        &[
            "spec.f: Invalid value: 2.0000005e+06: spec.f in body should be less than or equal to 1e+06",
            "spec.i: Invalid value: 11: spec.i in body should be a multiple of 2",
            "spec.i: Invalid value: 11: spec.i in body should be less than or equal to 10",
            "spec.r: Invalid value: 0.25: spec.r in body should be greater than or equal to 0.5",
            "spec.x: Invalid value: 0: spec.x in body should be greater than 0",
        ],
    );
}

#[test]
fn validate_integer_accepts_integral_floats_only() {
    let s = compile(spec_schema(
        json!({"type": "object", "properties": {"n": {"type": "integer"}, "d": {"type": "number"}}}),
    ));
    assert_messages(&s.validate(&obj(json!({"n": 2.0, "d": 3})), None), &[]);
    assert_messages(
        &s.validate(&obj(json!({"n": 2.5})), None),
        &["spec.n: Invalid value: \"number\": spec.n in body must be of type integer: \"number\""],
    );
}

#[test]
fn validate_array_and_object_sizes() {
    let s = compile(spec_schema(json!({"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "m": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 1},
        "n": {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1}
    }})));
    assert_messages(
        &s.validate(
            &obj(json!({"tags": ["a", "b", "c", "d"], "m": {"a": "1", "b": "2"}, "n": {}})),
            None,
        ),
        &[
            "spec.m: Too many: 2: must have at most 1 items",
            "spec.n: Invalid value: 0: spec.n in body should have at least 1 properties",
            "spec.tags: Too many: 4: must have at most 3 items",
        ],
    );
    assert_messages(
        &s.validate(&obj(json!({"tags": []})), None),
        &["spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items"],
    );
}

#[test]
fn validate_items_and_map_values_with_upstream_paths() {
    let s = compile(spec_schema(json!({"type": "object", "properties": {
        "list": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
        "m": {"type": "object", "additionalProperties": {"type": "integer"}}
    }})));
    assert_messages(
        &s.validate(
            &obj(json!({"list": [{"name": "a"}, {"port": "x"}], "m": {"k": "v"}})),
            None,
        ),
        &[
            "spec.list[1].port: Invalid value: \"string\": spec.list[1].port in body must be of type integer: \"string\"",
            "spec.list[1].name: Required value",
            "spec.m.k: Invalid value: \"string\": spec.m.k in body must be of type integer: \"string\"",
        ],
    );
}

#[test]
fn validate_nullable_and_int_or_string() {
    let s = compile(spec_schema(json!({"type": "object", "properties": {
        "n": {"type": "string", "nullable": true},
        "s": {"type": "string"},
        "port": {"x-kubernetes-int-or-string": true}
    }})));
    assert_messages(&s.validate(&obj(json!({"n": null, "port": 80})), None), &[]);
    assert_messages(&s.validate(&obj(json!({"port": "http"})), None), &[]);
    assert_messages(
        &s.validate(&obj(json!({"s": null, "port": true})), None),
        &[
            "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
            "spec.s: Invalid value: \"null\": spec.s in body must be of type string: \"null\"",
        ],
    );
}

#[test]
fn validate_enums_of_other_types_quote_json() {
    let s = compile(spec_schema(
        json!({"type": "object", "properties": {"n": {"type": "integer", "enum": [1, 2]}}}),
    ));
    assert_messages(
        &s.validate(&obj(json!({"n": 3})), None),
        &["spec.n: Unsupported value: 3: supported values: \"1\", \"2\""],
    );
    assert_messages(&s.validate(&obj(json!({"n": 2.0})), None), &[]);
}

#[test]
fn validate_one_of_and_any_of_composite_messages() {
    let s = compile(spec_schema(json!({
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}]
    })));
    assert_messages(&s.validate(&obj(json!({"a": "x"})), None), &[]);
    assert_messages(
        &s.validate(&obj(json!({})), None),
        &[
            "<nil>: Invalid value: \"\": \"spec\" must validate one and only one schema (oneOf). Found none valid",
            "spec.a: Required value",
        ],
    );
    assert_messages(
        &s.validate(&obj(json!({"a": "x", "b": "y"})), None),
        &[
            "<nil>: Invalid value: \"\": \"spec\" must validate one and only one schema (oneOf). Found 2 valid alternatives",
        ],
    );
    let s = compile(spec_schema(json!({
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "anyOf": [{"required": ["a"]}],
        "not": {"required": ["zzz"]}
    })));
    assert_messages(
        &s.validate(&obj(json!({})), None),
        &[
            "<nil>: Invalid value: \"\": \"spec\" must validate at least one schema (anyOf)",
            "spec.a: Required value",
        ],
    );
}

#[test]
fn validate_list_type_set_and_map_duplicates() {
    let s = compile(spec_schema(json!({"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port", "protocol"],
            "items": {"type": "object", "required": ["port"], "properties": {"port": {"type": "integer"}, "protocol": {"type": "string", "default": "TCP"}}}}
    }})));
    assert_messages(
        &s.validate(&obj(json!({"tags": ["a", "b", "a", "a"], "ports": [{"port": 80}, {"port": 80, "protocol": "TCP"}, {"port": 80, "protocol": "UDP"}]})), None),
        &[
            "spec.ports[1]: Duplicate value: map[string]interface {}{\"port\":80, \"protocol\":\"TCP\"}",
            "spec.tags[2]: Duplicate value: \"a\"",
        ],
    );
}

#[test]
fn validate_embedded_resources_need_api_version_and_kind() {
    let s = compile(spec_schema(json!({"type": "object", "properties": {
        "res": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}
    }})));
    assert_messages(
        &s.validate(&obj(json!({"res": {"metadata": {"name": "x"}}})), None),
        &[
            "spec.res.apiVersion: Required value: must not be empty",
            "spec.res.kind: Required value: must not be empty",
        ],
    );
    assert_messages(
        &s.validate(
            &obj(json!({"res": {"apiVersion": "v1", "kind": "ConfigMap"}})),
            None,
        ),
        &[],
    );
    let mut o = obj(
        json!({"res": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "junk": 1}, "data": {"a": "b"}}}),
    );
    let unknown = s.prune_unknown(&mut o);
    assert_eq!(unknown, vec!["spec.res.metadata.junk"]);
    assert_eq!(
        o["spec"]["res"],
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}})
    );
}

// ---------------------------------------------------------------------------------------------
// Pruning and defaulting.

#[test]
fn prune_keeps_known_fields_inside_preserved_subtrees_strict() {
    let s = compile(spec_schema(json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}
    })));
    let mut o = obj(json!({"extra": {"deep": 1}, "known": {"a": "x", "b": "dropped"}}));
    let unknown = s.prune_unknown(&mut o);
    assert_eq!(unknown, vec!["spec.known.b"]);
    assert_eq!(o["spec"], json!({"extra": {"deep": 1}, "known": {"a": "x"}}));
}

#[test]
fn prune_walks_lists_and_maps() {
    let s = compile(spec_schema(json!({"type": "object", "properties": {
        "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
        "m": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {"type": "integer"}}}}
    }})));
    let mut o = obj(json!({"list": [{"a": "x", "b": 1}], "m": {"k": {"v": 1, "w": 2}}}));
    let unknown = s.prune_unknown(&mut o);
    assert_eq!(unknown, vec!["spec.list[0].b", "spec.m.k.w"]);
    assert_eq!(o["spec"], json!({"list": [{"a": "x"}], "m": {"k": {"v": 1}}}));
}

#[test]
fn prune_drops_non_nullable_nulls_without_default() {
    let s = compile(spec_schema(json!({"type": "object", "properties": {
        "a": {"type": "string"},
        "b": {"type": "string", "nullable": true},
        "c": {"type": "string", "default": "d"}
    }})));
    let mut o = obj(json!({"a": null, "b": null, "c": null}));
    s.prune(&mut o);
    assert_eq!(o["spec"], json!({"b": null, "c": null}));
    s.default(&mut o);
    assert_eq!(
        o["spec"],
        json!({"b": null, "c": "d"}),
        "non-nullable null with a default is defaulted"
    );
}

#[test]
fn default_applies_recursively_and_only_under_existing_parents() {
    let s = compile(spec_schema(
        json!({"type": "object", "default": {}, "properties": {
            "strategy": {"type": "object", "default": {"type": "RollingUpdate"}, "properties": {
                "type": {"type": "string"},
                "maxSurge": {"x-kubernetes-int-or-string": true, "default": "25%"}
            }},
            "opt": {"type": "object", "properties": {"x": {"type": "integer", "default": 5}}},
            "items": {"type": "array", "items": {"type": "object", "properties": {"p": {"type": "string", "default": "TCP"}}}}
        }}),
    ));
    let mut o = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
    s.default(&mut o);
    assert_eq!(
        o["spec"],
        json!({"strategy": {"type": "RollingUpdate", "maxSurge": "25%"}})
    );
    let mut o = obj(json!({"items": [{}, {"p": "UDP"}], "opt": {}}));
    s.default(&mut o);
    assert_eq!(o["spec"]["items"], json!([{"p": "TCP"}, {"p": "UDP"}]));
    assert_eq!(o["spec"]["opt"], json!({"x": 5}));
}

// ---------------------------------------------------------------------------------------------
// CEL semantics.

fn cel_node() -> Schema {
    compile(spec_schema(json!({"type": "object", "properties": {
        "i": {"type": "integer"},
        "d": {"type": "number"},
        "s": {"type": "string"},
        "list": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}}},
        "m": {"type": "object", "additionalProperties": {"type": "integer"}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
    }})))
}

#[test]
fn cel_evaluates_the_common_functions_on_json_values() {
    let s = cel_node();
    let spec = &s.root.properties["spec"];
    let v = json!({
        "i": 3, "d": 2, "s": "web-frontend",
        "list": [{"name": "a", "n": 1}, {"name": "b", "n": 2}],
        "m": {"x": 1, "y": 2},
        "free": {"nested": {"k": [1, 2.5, "z"]}}
    });
    for (rule, want) in [
        ("has(self.i) && !has(self.zz_free_missing_ok)", "Err"),
        ("has(self.i)", "Bool(true)"),
        ("has(self.free.nested)", "Bool(true)"),
        ("has(self.free.other)", "Bool(false)"),
        ("size(self.list) == 2", "Bool(true)"),
        ("size(self.s) == 12", "Bool(true)"),
        ("self.list.all(c, c.n > 0)", "Bool(true)"),
        ("self.list.exists(c, c.name == 'b')", "Bool(true)"),
        ("self.list.exists_one(c, c.n == 1)", "Bool(true)"),
        ("self.list.map(c, c.n).filter(n, n > 1) == [2]", "Bool(true)"),
        ("'x' in self.m", "Bool(true)"),
        ("self.m.all(k, self.m[k] > 0)", "Bool(true)"),
        ("self.i > 2.5", "Bool(true)"),
        ("self.d == 2", "Bool(true)"),
        ("self.d == 2.0", "Bool(true)"),
        ("self.d / 4.0 == 0.5", "Bool(true)"),
        ("self.i / 2 == 1", "Bool(true)"),
        ("self.i > 1 ? self.s.startsWith('web') : false", "Bool(true)"),
        ("self.s.matches('^web-[a-z]+$')", "Bool(true)"),
        ("self.s.endsWith('end') && self.s.contains('front')", "Bool(true)"),
        ("self.s.split('-')[1] == 'frontend'", "Bool(true)"),
        ("self.s.upperAscii() == 'WEB-FRONTEND'", "Bool(true)"),
        ("self.free.nested.k[1] == 2.5", "Bool(true)"),
        ("self.free.nested.k[0] == 1", "Bool(true)"),
        ("self.i in [1, 2, 3]", "Bool(true)"),
        ("self.?missing.orValue(7) == 7", "Bool(true)"),
    ] {
        let seen = cel::eval_for_tests(rule, spec, &v);
        let seen = match seen {
            Ok(s) => s,
            Err(_) => "Err".to_owned(),
        };
        assert_eq!(seen, want, "rule {rule:?}");
    }
}

#[test]
fn cel_runtime_errors_use_upstream_texts() {
    let s = compile(spec_schema(json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
        "x-kubernetes-validations": [
            {"rule": "self.a / self.b > 0"},
            {"rule": "self.free.missing == 1", "message": "needs missing"},
            {"rule": "self.free.s > 1"}
        ]
    })));
    assert_messages(
        &s.validate(&obj(json!({"a": 1, "b": 0, "free": {"s": "x"}})), None),
        &[
            "spec: Invalid value: \"object\": division by zero evaluating rule: self.a / self.b > 0",
            "spec: Invalid value: \"object\": no such key: missing evaluating rule: needs missing",
            "spec: Invalid value: \"object\": 'no such overload': call arguments did not match a supported operator, function or macro signature for rule: self.free.s > 1",
        ],
    );
}

#[test]
fn cel_transition_rules_run_only_on_update_with_an_old_value() {
    let s = compile(spec_schema(json!({"type": "object", "properties": {
        "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "name is immutable"}]},
        "size": {"type": "integer", "x-kubernetes-validations": [
            {"rule": "!oldSelf.hasValue() || self >= oldSelf.value()", "message": "size may not shrink", "optionalOldSelf": true},
            {"rule": "oldSelf.hasValue() || self <= 10", "message": "initial size at most 10", "optionalOldSelf": true}
        ]}
    }})));
    let new = obj(json!({"name": "a", "size": 5}));
    assert_messages(&s.validate(&new, None), &[]);
    let too_big = obj(json!({"name": "a", "size": 50}));
    assert_messages(
        &s.validate(&too_big, None),
        &["spec.size: Invalid value: \"integer\": initial size at most 10"],
    );
    let old = obj(json!({"name": "b", "size": 6}));
    assert_messages(
        &s.validate(&new, Some(&old)),
        &[
            "spec.name: Invalid value: \"string\": name is immutable",
            "spec.size: Invalid value: \"integer\": size may not shrink",
        ],
    );
    assert_messages(
        &s.validate(&too_big, Some(&old)),
        &["spec.name: Invalid value: \"string\": name is immutable"],
    );
}

#[test]
fn cel_transition_rules_correlate_list_map_items_by_key() {
    let s = compile(spec_schema(json!({"type": "object", "properties": {
        "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "v": {"type": "integer",
                "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "v may not decrease"}]}}}}
    }})));
    let old = obj(json!({"items": [{"name": "a", "v": 2}, {"name": "b", "v": 5}]}));
    let new = obj(json!({"items": [{"name": "b", "v": 4}, {"name": "a", "v": 3}, {"name": "c", "v": 0}]}));
    assert_messages(
        &s.validate(&new, Some(&old)),
        &["spec.items[0].v: Invalid value: \"integer\": v may not decrease"],
    );
}

#[test]
fn cel_message_expression_field_path_and_reason() {
    let s = compile(spec_schema(json!({
        "type": "object",
        "properties": {"replicas": {"type": "integer"}, "m": {"type": "object", "additionalProperties": {"type": "string"}}},
        "x-kubernetes-validations": [
            {"rule": "self.replicas <= 5", "messageExpression": "'replicas ' + string(self.replicas) + ' is more than 5'", "fieldPath": ".replicas"},
            {"rule": "!has(self.m) || !('bad' in self.m)", "message": "bad key", "reason": "FieldValueForbidden", "fieldPath": ".m['bad']"},
            {"rule": "self.replicas != 7", "messageExpression": "self.m.missing", "message": "not seven"}
        ]
    })));
    let errs = s.validate(&obj(json!({"replicas": 7, "m": {"bad": "x"}})), None);
    assert_messages(
        &errs,
        &[
            "spec.replicas: Invalid value: \"object\": replicas 7 is more than 5",
            "spec.m[bad]: Forbidden: bad key",
            "spec: Invalid value: \"object\": not seven",
        ],
    );
    assert_eq!(errs[1].reason, "FieldValueForbidden");
}

#[test]
fn cel_root_rules_see_metadata_name_and_report_nil_path() {
    let s = compile(json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('web')", "message": "name must start with web"}],
        "properties": {"spec": {"type": "object"}}
    }));
    assert_messages(
        &s.validate(
            &json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "web-1"}}),
            None,
        ),
        &[],
    );
    assert_messages(
        &s.validate(
            &json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "db"}}),
            None,
        ),
        &["<nil>: Invalid value: \"object\": name must start with web"],
    );
    let errs = compile_errors(json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "has(self.metadata.labels)"}]
    }));
    assert_contains(&errs, "undefined field 'labels'");
}

#[test]
fn cel_cost_limit_stops_runaway_evaluation_quickly() {
    let s = compile(spec_schema(json!({
        "type": "object",
        "properties": {"l": {"type": "array", "items": {"type": "integer"}}},
        "x-kubernetes-validations": [
            {"rule": "self.l.all(x, self.l.all(y, self.l.all(z, self.l.all(w, x + y + z + w >= 0))))"},
            {"rule": "size(self.l) >= 0"}
        ]
    })));
    let big: Vec<i64> = (0..3000).collect();
    let started = std::time::Instant::now();
    let errs = s.validate(&obj(json!({"l": big})), None);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert_messages(
        &errs,
        &[
            "spec: Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: self.l.all(x, self.l.all(y, self.l.all(z, self.l.all(w, x + y + z + w >= 0))))",
        ],
    );
    // Small inputs run the same rule normally.
    assert_messages(&s.validate(&obj(json!({"l": [1, 2, 3]})), None), &[]);
}

#[test]
fn cel_handles_deeply_nested_free_form_values() {
    let s = compile(spec_schema(json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "x-kubernetes-validations": [{"rule": "self == self"}]
    })));
    let mut deep = json!(1);
    for _ in 0..120 {
        deep = json!({"a": deep});
    }
    let handle = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || s.validate(&obj(deep), None).len())
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    assert_eq!(handle.join().ok(), Some(0));
}

#[test]
fn cel_rules_on_null_values_are_skipped() {
    let s = compile(spec_schema(json!({"type": "object", "properties": {
        "n": {"type": "string", "nullable": true, "x-kubernetes-validations": [{"rule": "self.size() > 100"}]}
    }})));
    assert_messages(&s.validate(&obj(json!({"n": null})), None), &[]);
}

// ---------------------------------------------------------------------------------------------
// List types for server-side apply, helpers.

#[test]
fn list_types_follow_x_kubernetes_list_type() {
    let s = compile(mcd_schema());
    let path = |p: &[&str]| -> Vec<Step> {
        p.iter()
            .map(|s| {
                if *s == "*" {
                    Step::Item
                } else {
                    Step::Field((*s).to_owned())
                }
            })
            .collect()
    };
    assert_eq!(
        s.list_type(&path(&["status", "conditions"])),
        Some(ListType::Map(vec!["type".to_owned()]))
    );
    assert_eq!(s.list_type(&path(&["spec", "replicas"])), None);
    assert_eq!(
        s.list_type(&path(&["spec", "template", "spec", "containers"])),
        None
    );
    assert_eq!(s.smp_merge_key(&path(&["status", "conditions"])), None);
    let s2 = compile(spec_schema(json!({"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "args": {"type": "array", "items": {"type": "string"}},
        "sel": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {"a": {"type": "string"}}},
        "nested": {"type": "array", "items": {"type": "object", "properties": {"inner": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "integer"}}}}}
    }})));
    assert_eq!(s2.list_type(&path(&["spec", "tags"])), Some(ListType::Set));
    assert_eq!(s2.list_type(&path(&["spec", "args"])), Some(ListType::Atomic));
    assert_eq!(
        s2.list_type(&path(&["spec", "nested", "*", "inner"])),
        Some(ListType::Set)
    );
    assert!(s2.map_is_atomic(&path(&["spec", "sel"])));
    assert!(!s2.map_is_atomic(&path(&["spec"])));
    assert!(s.preserves_unknown_fields(&path(&["spec", "template"])));
}

#[test]
fn aggregate_messages_matches_upstream_aggregate() {
    let e = |m: &str| FieldError {
        field: "f".to_owned(),
        reason: "FieldValueInvalid",
        message: m.to_owned(),
    };
    assert_eq!(aggregate_messages(&[e("a")]), "a");
    assert_eq!(aggregate_messages(&[e("a"), e("b"), e("a")]), "[a, b]");
}

#[test]
fn go_float_formatting_matches_go_percent_v() {
    for (f, want) in [
        (1e6, "1e+06"),
        (123456.0, "123456"),
        (0.5, "0.5"),
        (1.5e-5, "1.5e-05"),
        (100.0, "100"),
        (-2.5, "-2.5"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
    ] {
        assert_eq!(gofmt::go_float(f), want, "go_float({f})");
    }
    assert_eq!(
        gofmt::go_sharp_v(&json!({"b": [1, "x", null], "a": true})),
        "map[string]interface {}{\"a\":true, \"b\":[]interface {}{1, \"x\", interface {}(nil)}}"
    );
}

#[test]
fn formats_accept_and_reject_like_strfmt() {
    for (format, ok, bad) in [
        ("datetime", "2025-01-01T10:20:30.5+02:00", "2025-13-01T00:00:00Z"),
        ("date", "2025-02-28", "2025-2-28"),
        ("byte", "aGVsbG8=", "not base64!"),
        ("ipv4", "10.0.0.1", "10.0.0.256"),
        ("ipv6", "::1", "1::2::3"),
        ("cidr", "10.0.0.0/8", "10.0.0.0/33"),
        ("hostname", "a.example.com", "-bad-.com"),
        ("duration", "1h30m", "1 fortnight"),
        ("mac", "00:1a:2b:3c:4d:5e", "00:1a"),
    ] {
        assert!(
            validate::format_ok_for_tests(format, ok),
            "{format} should accept {ok:?}"
        );
        assert!(
            !validate::format_ok_for_tests(format, bad),
            "{format} should reject {bad:?}"
        );
    }
}

#[test]
fn validation_never_panics_on_odd_objects() {
    let s = compile(mcd_schema());
    for v in [
        json!(null),
        json!([]),
        json!("x"),
        json!({"spec": null}),
        json!({"spec": []}),
        json!({"spec": {"weights": [], "template": "x", "replicas": 1e300}}),
        json!({"metadata": "x", "spec": {"template": {}}}),
        json!({"status": {"conditions": [1, "x", null]}}),
    ] {
        let mut o = v.clone();
        s.prune(&mut o);
        s.default(&mut o);
        let _ = s.validate(&o, Some(&v));
        let _ = s.validate(&v, None);
    }
}

#[test]
fn formats_do_not_panic_on_multibyte_input() {
    for s in [
        "2025-01-01T00:00:0é+00:00",
        "2025-01-0éT00:00:00Z",
        "éééééééééééééééééééééééé",
        "2025-01-01Té0:00:00Z",
    ] {
        for f in [
            "datetime", "date", "uuid", "mac", "duration", "cidr", "hostname", "byte",
        ] {
            let _ = validate::format_ok_for_tests(f, s);
        }
    }
}

#[test]
fn large_set_lists_are_checked_in_linear_time() {
    let s = compile(spec_schema(json!({"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "objs": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "object", "x-kubernetes-map-type": "atomic", "x-kubernetes-preserve-unknown-fields": true}}
    }})));
    let tags: Vec<String> = (0..100_000).map(|i| format!("t{i}")).collect();
    let started = std::time::Instant::now();
    let errs = s.validate(
        &obj(json!({"tags": tags, "objs": [{"a": 1, "b": 2}, {"b": 2, "a": 1}]})),
        None,
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert_messages(
        &errs,
        &["spec.objs[1]: Duplicate value: map[string]interface {}{\"a\":1, \"b\":2}"],
    );
}

/// Every version of Nave's own CRDs (`crds/`) compiles, and every example manifest (`examples/`)
/// of those kinds survives pruning unchanged and validates.
#[test]
fn nave_crds_compile_and_their_examples_validate() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..");
    let read_docs = |path: &std::path::Path| -> Vec<Value> {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_saphyr::from_multiple::<Value>(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let yaml_files = |dir: &str| -> Vec<std::path::PathBuf> {
        let mut files: Vec<_> = std::fs::read_dir(repo.join(dir))
            .unwrap_or_else(|e| panic!("{dir}/: {e}"))
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        files
    };
    let mut schemas: Vec<(String, Schema)> = Vec::new();
    for file in yaml_files("crds") {
        for crd in read_docs(&file) {
            let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or("").to_owned();
            for (i, version) in crd["spec"]["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
                match Schema::compile_at(&version["schema"]["openAPIV3Schema"], &path) {
                    Ok(s) => schemas.push((kind.clone(), s)),
                    Err(errs) => panic!(
                        "{}: {kind} does not compile:\n  {}",
                        file.display(),
                        messages(&errs).join("\n  ")
                    ),
                }
            }
        }
    }
    assert!(
        schemas.len() >= 3,
        "expected Nave's CRDs in crds/, found {}",
        schemas.len()
    );
    let mut checked = 0;
    for file in yaml_files("examples") {
        for doc in read_docs(&file) {
            let kind = doc["kind"].as_str().unwrap_or("");
            for (_, schema) in schemas.iter().filter(|(k, _)| k == kind) {
                let mut o = doc.clone();
                let unknown = schema.prune_unknown(&mut o);
                assert!(
                    unknown.is_empty(),
                    "{}: {kind} has fields its CRD drops: {unknown:?}",
                    file.display()
                );
                schema.default(&mut o);
                assert_messages(&schema.validate(&o, None), &[]);
                assert_messages(&schema.validate(&o, Some(&o)), &[]);
                checked += 1;
            }
        }
    }
    assert!(
        checked > 0,
        "expected example manifests of Nave kinds in examples/"
    );
}
