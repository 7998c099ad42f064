//! The CEL rules (`x-kubernetes-validations`) in the generated CRDs compile and mean what their
//! messages say, evaluated with the same `cel` crate the simulator uses.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// Every rule in a schema, with the path of the node that carries it.
fn collect(at: &Value, path: &str, out: &mut Vec<(String, String)>) {
    if let Some(rules) = at["x-kubernetes-validations"].as_array() {
        for rule in rules {
            out.push((
                path.to_owned(),
                rule["rule"].as_str().expect("rule is a string").to_owned(),
            ));
        }
    }
    if let Some(props) = at["properties"].as_object() {
        for (name, sub) in props {
            collect(sub, &format!("{path}.{name}"), out);
        }
    }
    if at["items"].is_object() {
        collect(&at["items"], &format!("{path}[]"), out);
    }
}

fn all_rules() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for crd in nave_api::crds() {
        let schema = &crd.spec.versions[0]
            .schema
            .as_ref()
            .expect("schema")
            .open_api_v3_schema;
        collect(
            &serde_json::to_value(schema).unwrap(),
            &crd.spec.names.kind,
            &mut out,
        );
    }
    out
}

/// `rule` on `this`; a transition rule (one naming `oldSelf`) on `{"self": .., "oldSelf": ..}`.
fn eval(rule: &str, this: &Value) -> Result<bool, String> {
    let program = cel::Program::compile(rule).map_err(|e| format!("does not compile: {e:?}"))?;
    let mut context = cel::Context::default();
    let (this, old) = match rule.contains("oldSelf") {
        true => (this["self"].clone(), Some(this["oldSelf"].clone())),
        false => (this.clone(), None),
    };
    context
        .add_variable("self", this)
        .map_err(|e| format!("cannot bind self: {e:?}"))?;
    if let Some(old) = old {
        context
            .add_variable("oldSelf", old)
            .map_err(|e| format!("cannot bind oldSelf: {e:?}"))?;
    }
    match program.execute(&context) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("evaluates to {other:?}, not a bool")),
        Err(e) => Err(format!("fails: {e:?}")),
    }
}

/// A rule (found by a distinctive part of its text) and values of `self` with the expected result.
struct Case {
    rule_contains: &'static str,
    valid: Vec<Value>,
    invalid: Vec<Value>,
}

fn cases() -> Vec<Case> {
    let deployment = |selector: Value, pod_labels: Option<Value>| {
        let mut spec = json!({"selector": selector, "template": {"spec": {"containers": []}}});
        if let Some(labels) = pod_labels {
            spec["template"]["metadata"] = json!({"labels": labels});
        }
        spec
    };
    vec![
        Case {
            rule_contains: "self.key != '') || (has(self.operator) && self.operator == 'Exists')",
            valid: vec![
                json!({"key": "dedicated", "value": "batch"}),
                json!({"operator": "Exists"}),
                json!({"key": "nave.dev/drain", "operator": "Exists", "effect": "NoExecute"}),
            ],
            invalid: vec![
                json!({}),
                json!({"key": "", "value": "batch"}),
                json!({"operator": "Equal"}),
            ],
        },
        Case {
            rule_contains: "self.operator != 'Exists' || !has(self.value)",
            valid: vec![
                json!({"key": "k", "value": "v"}),
                json!({"key": "k", "operator": "Exists"}),
                json!({"key": "k", "operator": "Exists", "value": ""}),
            ],
            invalid: vec![json!({"key": "k", "operator": "Exists", "value": "v"})],
        },
        Case {
            rule_contains: "!has(self.tolerationSeconds)",
            valid: vec![
                json!({"key": "k"}),
                json!({"key": "k", "effect": "NoExecute", "tolerationSeconds": 60}),
            ],
            invalid: vec![
                json!({"key": "k", "tolerationSeconds": 60}),
                json!({"key": "k", "effect": "NoSchedule", "tolerationSeconds": 60}),
            ],
        },
        Case {
            rule_contains: "self.minClusters <= self.maxClusters",
            valid: vec![
                json!({}),
                json!({"minClusters": 2, "maxClusters": 3}),
                json!({"minClusters": 4}),
            ],
            invalid: vec![json!({"minClusters": 4, "maxClusters": 3})],
        },
        Case {
            rule_contains: "self.policy != 'proximity'",
            valid: vec![
                json!({}),
                json!({"policy": "spread"}),
                json!({"policy": "proximity", "proximity": {"origin": {"region": "eu-west"}}}),
            ],
            invalid: vec![json!({"policy": "proximity"})],
        },
        Case {
            rule_contains: "self.policy != 'everywhere'",
            valid: vec![
                json!({}),
                json!({"policy": "everywhere"}),
                json!({"policy": "everywhere", "clusters": ["eu-1"], "clusterSelector": {}}),
                json!({"policy": "spread", "minClusters": 2, "maxClusters": 3}),
            ],
            invalid: vec![
                json!({"policy": "everywhere", "maxClusters": 2}),
                json!({"policy": "everywhere", "minClusters": 2}),
                json!({"policy": "everywhere", "weights": {"eu-1": 1}}),
                json!({"policy": "everywhere", "bursting": {"threshold": 80}}),
                json!({"policy": "everywhere", "proximity": {"origin": {"region": "eu"}}}),
            ],
        },
        Case {
            rule_contains: "self.minReplicas <= self.maxReplicas",
            valid: vec![
                json!({"maxReplicas": 3}),
                json!({"minReplicas": 3, "maxReplicas": 3}),
            ],
            invalid: vec![json!({"minReplicas": 4, "maxReplicas": 3})],
        },
        Case {
            rule_contains: "self.type != 'External' || has(self.external)",
            valid: vec![
                json!({"type": "External", "external": {"metric": {"name": "rps"}}}),
                json!({"type": "Resource", "resource": {"name": "cpu"}}),
            ],
            invalid: vec![json!({"type": "External"})],
        },
        Case {
            rule_contains: "self.type != 'Value' || has(self.value)",
            valid: vec![
                json!({"type": "Value", "value": 500}),
                json!({"type": "AverageValue"}),
            ],
            invalid: vec![json!({"type": "Value", "averageValue": "10"})],
        },
        Case {
            rule_contains: "self.type != 'AverageValue' || has(self.averageValue)",
            valid: vec![
                json!({"type": "AverageValue", "averageValue": "100m"}),
                json!({"type": "Value"}),
            ],
            invalid: vec![json!({"type": "AverageValue", "value": 10})],
        },
        Case {
            rule_contains: "self.type != 'Resource' || has(self.resource)",
            valid: vec![json!({"type": "Resource", "resource": {"name": "cpu"}})],
            invalid: vec![json!({"type": "Resource"})],
        },
        Case {
            rule_contains: "self.kind == 'MultiClusterDeployment'",
            valid: vec![
                json!({"name": "web"}),
                json!({"name": "web", "kind": "MultiClusterDeployment"}),
            ],
            invalid: vec![json!({"name": "web", "kind": "Deployment"})],
        },
        Case {
            rule_contains: "self.policy != 'traffic'",
            valid: vec![
                json!({"policy": "traffic"}),
                json!({"policy": "traffic", "minClusters": 2, "maxClusters": 3}),
                json!({"policy": "worst-fit", "weights": {"eu-1": 1}}),
            ],
            invalid: vec![json!({"policy": "traffic", "weights": {"eu-1": 1}})],
        },
        Case {
            rule_contains: "has(self.cluster) || has(self.region) || has(self.coordinates)",
            valid: vec![
                json!({"region": "eu-west"}),
                json!({"coordinates": {"latitude": 1.5, "longitude": 2}}),
            ],
            invalid: vec![json!({})],
        },
        Case {
            rule_contains: "!(has(self.cluster) && has(self.region))",
            valid: vec![json!({}), json!({"cluster": "eu-1"})],
            invalid: vec![
                json!({"cluster": "eu-1", "region": "eu-west"}),
                json!({"region": "eu-west", "coordinates": {"latitude": 1, "longitude": 2}}),
            ],
        },
        Case {
            rule_contains: "(has(self.clusters) && size(self.clusters) > 0) || has(self.clusterSelector)",
            valid: vec![
                json!({"clusters": ["eu-1"]}),
                json!({"clusterSelector": {"matchLabels": {"a": "b"}}}),
            ],
            invalid: vec![json!({}), json!({"clusters": []})],
        },
        Case {
            rule_contains: "!(self.op in ['add', 'replace', 'test'])",
            valid: vec![
                json!({"op": "remove", "path": "/a"}),
                json!({"op": "add", "path": "/a", "value": 0}),
            ],
            invalid: vec![json!({"op": "replace", "path": "/a"})],
        },
        Case {
            rule_contains: "!(self.op in ['move', 'copy'])",
            valid: vec![
                json!({"op": "add", "path": "/a", "value": 1}),
                json!({"op": "copy", "path": "/a", "from": "/b"}),
            ],
            invalid: vec![json!({"op": "move", "path": "/a"})],
        },
        Case {
            rule_contains: "self.selector.matchLabels.all(k",
            valid: vec![
                deployment(
                    json!({"matchLabels": {"app": "web"}}),
                    Some(json!({"app": "web", "tier": "front"})),
                ),
                deployment(
                    json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]}),
                    None,
                ),
                json!({"template": {"spec": {}}}),
            ],
            invalid: vec![
                deployment(
                    json!({"matchLabels": {"app": "web"}}),
                    Some(json!({"app": "api"})),
                ),
                deployment(
                    json!({"matchLabels": {"app": "web"}}),
                    Some(json!({"tier": "front"})),
                ),
                deployment(json!({"matchLabels": {"app": "web"}}), None),
            ],
        },
        Case {
            rule_contains: "(has(self.matchLabels) && size(self.matchLabels) > 0)",
            valid: vec![
                json!({"matchLabels": {"app": "web"}}),
                json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]}),
            ],
            invalid: vec![json!({}), json!({"matchLabels": {}})],
        },
        Case {
            rule_contains: "has(self.containers) && size(self.containers) > 0",
            valid: vec![json!({"containers": [{"name": "web", "image": "nginx"}]})],
            invalid: vec![json!({}), json!({"containers": []})],
        },
        Case {
            rule_contains: "has(self.name) && size(self.name) > 0",
            valid: vec![json!({"name": "web", "image": "nginx"})],
            invalid: vec![json!({"image": "nginx"}), json!({"name": "", "image": "nginx"})],
        },
        Case {
            rule_contains: "has(self.image) && size(self.image) > 0",
            valid: vec![json!({"name": "web", "image": "nginx"})],
            invalid: vec![json!({"name": "web"}), json!({"name": "web", "image": ""})],
        },
        Case {
            rule_contains: "has(self.deployment)",
            valid: vec![
                json!({"deployment": "web"}),
                json!({"deployment": "web", "placement": {"clusters": ["eu-1"]}}),
            ],
            invalid: vec![
                json!({}),
                json!({"placement": {"clusters": ["eu-1"]}, "selector": {"app": "web"}}),
            ],
        },
        Case {
            rule_contains: "(has(self.headless) && self.headless)",
            valid: vec![json!({"headless": true}), json!({"ports": [{"port": 80}]})],
            invalid: vec![json!({}), json!({"headless": false, "ports": []})],
        },
        Case {
            rule_contains: "size(self) <= 1 || self.all(p",
            valid: vec![
                json!([]),
                json!([{"port": 80}]),
                json!([{"name": "http", "port": 80}, {"name": "https", "port": 443}]),
            ],
            invalid: vec![json!([{"name": "http", "port": 80}, {"port": 443}])],
        },
        Case {
            rule_contains: "self.kind : 'Deployment') == (has(oldSelf.kind)",
            valid: vec![
                json!({"self": {"spec": {}}, "oldSelf": {"spec": {}}}),
                json!({"self": {"kind": "Deployment"}, "oldSelf": {}}),
                json!({"self": {"kind": "StatefulSet"}, "oldSelf": {"kind": "StatefulSet"}}),
            ],
            invalid: vec![
                json!({"self": {"kind": "StatefulSet"}, "oldSelf": {}}),
                json!({"self": {}, "oldSelf": {"kind": "StatefulSet"}}),
            ],
        },
        Case {
            rule_contains: "self == oldSelf",
            valid: vec![
                json!({"self": {"spec": {"completions": 3}}, "oldSelf": {"spec": {"completions": 3}}}),
            ],
            invalid: vec![
                json!({"self": {"spec": {"completions": 4}}, "oldSelf": {"spec": {"completions": 3}}}),
            ],
        },
        Case {
            rule_contains: "self.parallelism <= self.completions",
            valid: vec![
                json!({"completions": 3}),
                json!({"completions": 3, "parallelism": 3}),
            ],
            invalid: vec![json!({"completions": 3, "parallelism": 4})],
        },
        Case {
            rule_contains: "self.completions <= 100000",
            valid: vec![
                json!({"completions": 100000, "completionMode": "Indexed"}),
                json!({"completions": 200000}),
                json!({"completions": 200000, "completionMode": "NonIndexed"}),
            ],
            invalid: vec![json!({"completions": 100001, "completionMode": "Indexed"})],
        },
        Case {
            rule_contains: "!has(self.ttlSecondsAfterFinished)",
            valid: vec![json!({"completions": 1})],
            invalid: vec![json!({"completions": 1, "ttlSecondsAfterFinished": 10})],
        },
        Case {
            rule_contains: "!has(self.successPolicy)",
            valid: vec![json!({"completions": 1})],
            invalid: vec![json!({"completions": 1, "successPolicy": {"rules": []}})],
        },
        Case {
            rule_contains: "!has(self.maxFailedIndexes)",
            valid: vec![json!({"completions": 1, "backoffLimitPerIndex": 1})],
            invalid: vec![json!({"completions": 1, "maxFailedIndexes": 2})],
        },
        Case {
            rule_contains: "!has(self.managedBy)",
            valid: vec![json!({"completions": 1})],
            invalid: vec![json!({"completions": 1, "managedBy": "kueue.x-k8s.io/multikueue"})],
        },
        Case {
            rule_contains: "!has(self.suspend) || !self.suspend",
            valid: vec![
                json!({"completions": 1}),
                json!({"completions": 1, "suspend": false}),
            ],
            invalid: vec![json!({"completions": 1, "suspend": true})],
        },
        Case {
            rule_contains: "self.restartPolicy == 'Never' || self.restartPolicy == 'OnFailure'",
            valid: vec![
                json!({"restartPolicy": "Never"}),
                json!({"restartPolicy": "OnFailure"}),
            ],
            invalid: vec![json!({}), json!({"restartPolicy": "Always"})],
        },
        Case {
            rule_contains: "self.kind != 'StatefulSet' || !has(self.spec.ordinals)",
            valid: vec![
                json!({"spec": {}}),
                json!({"kind": "StatefulSet", "spec": {"serviceName": "db"}}),
                json!({"kind": "Deployment", "spec": {"ordinals": {"start": 1}}}),
            ],
            invalid: vec![json!({"kind": "StatefulSet", "spec": {"ordinals": {"start": 1}}})],
        },
    ]
}

#[test]
fn every_cel_rule_compiles_and_behaves_as_its_message_says() {
    let rules = all_rules();
    let mut problems = Vec::new();
    let mut exercised = BTreeMap::new();
    for case in cases() {
        let matching: Vec<&(String, String)> = rules
            .iter()
            .filter(|(_, rule)| rule.contains(case.rule_contains))
            .collect();
        if matching.is_empty() {
            problems.push(format!("no rule contains {:?}", case.rule_contains));
        }
        for (path, rule) in matching {
            exercised.insert(rule.clone(), path.clone());
            for (values, want) in [(&case.valid, true), (&case.invalid, false)] {
                for value in values {
                    match eval(rule, value) {
                        Ok(got) if got == want => {}
                        Ok(got) => {
                            problems.push(format!("{path}: `{rule}` on {value} gave {got}, want {want}"))
                        }
                        Err(e) => problems.push(format!("{path}: `{rule}` on {value} {e}")),
                    }
                }
            }
        }
    }
    for (path, rule) in &rules {
        if !exercised.contains_key(rule) {
            problems.push(format!("{path}: `{rule}` has no test case"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn cel_rules_stay_in_the_simple_subset() {
    // has(), size(), all(), `in` and comparisons: what the simulator evaluates and what a real
    // API server's cost estimator accepts without trouble.
    let call = regex::Regex::new(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(").unwrap();
    for (path, rule) in all_rules() {
        for found in call.captures_iter(&rule) {
            let name = &found[1];
            assert!(
                ["has", "size", "all"].contains(&name),
                "{path}: `{rule}` calls {name}()"
            );
        }
    }
}
