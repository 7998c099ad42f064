//! Unit tests of the resource types, their schemas and helpers.

use std::collections::BTreeMap;

use k8s_openapi::{
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time},
    jiff::Timestamp,
};
use kube::CustomResourceExt;
use serde_json::{Value, json};

use crate::{
    conditions::{self, reasons, types},
    *,
};

// ---------------------------------------------------------------------------------------------
// Fixtures

/// A Deployment spec as a user writes it, with the given container image (any JSON, so tests can
/// put a wrong type there).
fn deployment_spec_json(app: &str, image: Value) -> Value {
    json!({
        "selector": {"matchLabels": {"app": app}},
        "template": {
            "metadata": {"labels": {"app": app}},
            "spec": {
                "containers": [{
                    "name": app,
                    "image": image,
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }],
            },
        },
    })
}

/// Builder of MultiClusterDeployments: `mk_mcd("web").replicas(6).build()`.
struct McdBuilder {
    name: String,
    replicas: i32,
    image: Value,
    placement: Placement,
}

fn mk_mcd(name: &str) -> McdBuilder {
    McdBuilder {
        name: name.to_owned(),
        replicas: 1,
        image: json!("nginx:1.27"),
        placement: Placement::default(),
    }
}

impl McdBuilder {
    fn replicas(mut self, replicas: i32) -> Self {
        self.replicas = replicas;
        self
    }

    fn image(mut self, image: Value) -> Self {
        self.image = image;
        self
    }

    fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    fn build(self) -> MultiClusterDeployment {
        let mut mcd = MultiClusterDeployment::new(
            &self.name,
            MultiClusterDeploymentSpec {
                replicas: self.replicas,
                template: DeploymentTemplate {
                    kind: crate::WorkloadKind::Deployment,
                    metadata: TemplateMetadata::default(),
                    spec: deployment_spec_json(&self.name, self.image),
                },
                placement: self.placement,
                overrides: Vec::new(),
                dependencies: Dependencies::default(),
                rollout: None,
                retain_replicas: false,
            },
        );
        mcd.metadata.namespace = Some("default".to_owned());
        mcd
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn condition(type_: &str, status: &str, reason: &str, at: &str) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: String::new(),
        observed_generation: Some(1),
        last_transition_time: Time(at.parse::<Timestamp>().expect("valid timestamp")),
    }
}

/// The openAPIV3Schema of a CRD as JSON.
fn schema(crd: &CustomResourceDefinition) -> Value {
    let version = &crd.spec.versions[0];
    serde_json::to_value(&version.schema.as_ref().expect("schema").open_api_v3_schema)
        .expect("schema serializes")
}

/// The schema node at a dotted path of property names (`[]` steps into list items).
fn node<'a>(schema: &'a Value, path: &str) -> &'a Value {
    let mut at = schema;
    for step in path.split('.').filter(|s| !s.is_empty()) {
        at = if step == "[]" {
            &at["items"]
        } else {
            &at["properties"][step]
        };
        assert!(!at.is_null(), "no schema node at {path:?} (stopped at {step:?})");
    }
    at
}

/// Every CEL rule in a schema, with the path of the node that carries it.
fn cel_rules(schema: &Value) -> Vec<(String, String)> {
    fn walk(at: &Value, path: &str, out: &mut Vec<(String, String)>) {
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
                walk(sub, &format!("{path}.{name}"), out);
            }
        }
        if at["items"].is_object() {
            walk(&at["items"], &format!("{path}[]"), out);
        }
        if at["additionalProperties"].is_object() {
            walk(&at["additionalProperties"], &format!("{path}{{}}"), out);
        }
    }
    let mut out = Vec::new();
    walk(schema, "", &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// MultiClusterDeployment

#[test]
fn mcd_round_trips_through_json_and_yaml() {
    let mut mcd = mk_mcd("web").replicas(6).build();
    mcd.spec.placement.weights = BTreeMap::from([("eu-1".to_owned(), 3), ("us-1".to_owned(), 1)]);
    mcd.spec.overrides.push(ClusterOverride {
        clusters: vec!["eu-1".to_owned()],
        cluster_selector: None,
        patches: vec![JsonPatchOperation {
            op: PatchOp::Replace,
            path: "/spec/template/spec/containers/0/image".to_owned(),
            from: None,
            value: Some(json!("mirror.example/nginx:1.27")),
        }],
    });
    mcd.status = Some(MultiClusterDeploymentStatus {
        observed_generation: Some(2),
        replicas: 6,
        ready_replicas: 5,
        cluster_count: 2,
        placement_summary: Some("eu-1=4,us-1=2".to_owned()),
        clusters: vec![ClusterPlacementStatus {
            name: "eu-1".to_owned(),
            desired: 4,
            ready: 4,
            ..Default::default()
        }],
        conditions: vec![condition(
            types::SCHEDULED,
            conditions::TRUE,
            reasons::ALL_REPLICAS_PLACED,
            "2025-01-02T03:04:05Z",
        )],
        ..Default::default()
    });

    let json = serde_json::to_string(&mcd).unwrap();
    assert_eq!(
        serde_json::from_str::<MultiClusterDeployment>(&json).unwrap(),
        mcd
    );
    let yaml = serde_saphyr::to_string(&mcd).unwrap();
    assert_eq!(
        serde_saphyr::from_str::<MultiClusterDeployment>(&yaml).unwrap(),
        mcd
    );

    let value = serde_json::to_value(&mcd).unwrap();
    assert_eq!(value["apiVersion"], API_VERSION);
    assert_eq!(value["kind"], "MultiClusterDeployment");
    assert_eq!(value["spec"]["placement"]["policy"], "worst-fit");
    assert_eq!(value["spec"]["overrides"][0]["patches"][0]["op"], "replace");
}

#[test]
fn mcd_minimal_manifest_gets_serde_defaults() {
    let mcd: MultiClusterDeployment = serde_json::from_value(json!({
        "apiVersion": "nave.dev/v1alpha1",
        "kind": "MultiClusterDeployment",
        "metadata": {"name": "web"},
        "spec": {"template": {"spec": deployment_spec_json("web", json!("nginx"))}},
    }))
    .unwrap();
    assert_eq!(mcd.spec.replicas, 1);
    assert_eq!(mcd.spec.placement.policy, PlacementPolicy::WorstFit);
    assert!(mcd.spec.placement.rescheduling.enabled);
    assert_eq!(mcd.spec.placement.rescheduling.pending_timeout, "5m");
    assert_eq!(mcd.spec.placement.rescheduling.cooldown, "10m");
    assert!(mcd.spec.placement.bursting.is_none());
    assert_eq!(mcd.spec.placement.failback, Failback::Never);
    assert!(mcd.spec.dependencies.enabled);
    assert!(mcd.spec.overrides.is_empty());
}

#[test]
fn bursting_block_gets_serde_defaults() {
    let bursting: Bursting = serde_json::from_value(json!({})).unwrap();
    assert_eq!(bursting, Bursting::default());
    assert_eq!(bursting.threshold, 80);
    assert!(bursting.retract_first);
}

#[test]
fn crd_schema_declares_defaults_for_kubectl_get() {
    let s = schema(&MultiClusterDeployment::crd());
    assert_eq!(node(&s, "spec.replicas")["default"], 1);
    assert_eq!(node(&s, "spec.placement")["default"]["policy"], "worst-fit");
    assert_eq!(node(&s, "spec.placement.policy")["default"], "worst-fit");
    assert_eq!(node(&s, "spec.placement.rescheduling.enabled")["default"], true);
    assert_eq!(
        node(&s, "spec.placement.rescheduling.pendingTimeout")["default"],
        "5m"
    );
    assert_eq!(node(&s, "spec.placement.rescheduling.cooldown")["default"], "10m");
    assert_eq!(node(&s, "spec.placement.bursting.threshold")["default"], 80);
    assert_eq!(node(&s, "spec.placement.bursting.retractFirst")["default"], true);
    assert_eq!(node(&s, "spec.dependencies")["default"], json!({"enabled": true}));
    assert_eq!(node(&s, "spec.dependencies.enabled")["default"], true);

    let s = schema(&MultiClusterService::crd());
    assert_eq!(node(&s, "spec.type")["default"], "ClusterIP");
    assert_eq!(node(&s, "spec.global")["default"], false);
    assert_eq!(node(&s, "spec.ports.[].protocol")["default"], "TCP");

    let s = schema(&WorkloadCluster::crd());
    assert_eq!(node(&s, "spec.unschedulable")["default"], false);
    assert_eq!(node(&s, "spec.burstOnly")["default"], false);
}

#[test]
fn crd_schema_has_openapi_constraints() {
    let s = schema(&MultiClusterDeployment::crd());
    assert_eq!(node(&s, "spec.replicas")["minimum"], 0.0);
    assert_eq!(
        node(&s, "spec.placement.weights")["additionalProperties"]["minimum"],
        1.0
    );
    assert_eq!(node(&s, "spec.placement.minClusters")["minimum"], 1.0);
    assert_eq!(
        node(&s, "spec.placement.policy")["enum"],
        json!([
            "worst-fit",
            "best-fit",
            "proximity",
            "spread",
            "everywhere",
            "traffic"
        ])
    );
    assert_eq!(node(&s, "spec.placement.bursting.threshold")["maximum"], 100.0);
    assert_eq!(
        node(&s, "spec.placement.failback")["enum"],
        json!(["Never", "Immediate"])
    );
    assert_eq!(node(&s, "spec.placement.failback")["default"], "Never");
    assert!(node(&s, "spec.placement.rescheduling.pendingTimeout")["pattern"].is_string());
    assert_eq!(
        node(&s, "spec.template.spec")["required"],
        json!(["selector", "template"])
    );
    assert_eq!(node(&s, "spec")["required"], json!(["template"]));
}

#[test]
fn template_spec_schema_is_compact_and_keeps_unknown_fields() {
    let crd = MultiClusterDeployment::crd();
    let s = schema(&crd);
    let spec = node(&s, "spec.template.spec");
    assert_eq!(spec["type"], "object");
    assert_eq!(spec["x-kubernetes-preserve-unknown-fields"], true);
    for path in [
        "spec.template.spec.selector",
        "spec.template.spec.template",
        "spec.template.spec.template.metadata",
        "spec.template.spec.template.spec",
        "spec.template.spec.template.spec.containers.[]",
        "spec.template.spec.template.spec.containers.[].resources",
    ] {
        assert_eq!(
            node(&s, path)["x-kubernetes-preserve-unknown-fields"],
            true,
            "{path} prunes unknown fields"
        );
    }
    // Client-side apply stores the whole CRD in an annotation limited to 256 KiB; stay far below.
    let size = crd_yaml(&crd).len();
    assert!(
        size < 96 * 1024,
        "the MultiClusterDeployment CRD is {size} bytes of YAML"
    );
}

#[test]
fn every_schema_node_is_structural() {
    // Kubernetes accepts only structural schemas: every node has a type, unless it is
    // int-or-string or keeps unknown fields; arrays have typed items.
    fn check(at: &Value, path: &str, problems: &mut Vec<String>) {
        let typed = at["type"].is_string()
            || at["x-kubernetes-int-or-string"] == true
            || at["x-kubernetes-preserve-unknown-fields"] == true;
        if !typed {
            problems.push(format!("{path}: no type"));
        }
        if at["type"] == "array" && !at["items"].is_object() {
            problems.push(format!("{path}: array without items"));
        }
        for forbidden in ["oneOf", "anyOf", "allOf", "$ref"] {
            if !at[forbidden].is_null() {
                problems.push(format!("{path}: uses {forbidden}"));
            }
        }
        if at["description"].as_str().is_none_or(str::is_empty) {
            // List items and map values inherit their parent's description.
            if !path.ends_with("[]") && !path.ends_with("{}") {
                problems.push(format!("{path}: no description"));
            }
        }
        if let Some(props) = at["properties"].as_object() {
            for (name, sub) in props {
                check(sub, &format!("{path}.{name}"), problems);
            }
        }
        if at["items"].is_object() {
            check(&at["items"], &format!("{path}[]"), problems);
        }
        if at["additionalProperties"].is_object() {
            check(&at["additionalProperties"], &format!("{path}{{}}"), problems);
        }
    }
    for crd in crds() {
        let mut problems = Vec::new();
        let s = schema(&crd);
        // `apiVersion`, `kind` and `metadata` are described by Kubernetes itself.
        for part in ["spec", "status"] {
            check(&s["properties"][part], &format!(".{part}"), &mut problems);
        }
        assert!(problems.is_empty(), "{}: {problems:#?}", crd.spec.names.kind);
    }
}

#[test]
fn mcd_schema_carries_the_cel_rules() {
    let rules = cel_rules(&schema(&MultiClusterDeployment::crd()));
    let expect = [
        (
            ".spec.placement",
            "!has(self.minClusters) || !has(self.maxClusters) || self.minClusters <= self.maxClusters",
        ),
        (
            ".spec.placement",
            "!has(self.policy) || self.policy != 'proximity' || has(self.proximity)",
        ),
        (
            ".spec.placement",
            "!has(self.policy) || self.policy != 'everywhere' || (!has(self.maxClusters) && !has(self.minClusters) && !has(self.weights) && !has(self.bursting) && !has(self.proximity))",
        ),
        (
            ".spec.placement.proximity.origin",
            "has(self.cluster) || has(self.region) || has(self.coordinates)",
        ),
        (
            ".spec.overrides[]",
            "(has(self.clusters) && size(self.clusters) > 0) || has(self.clusterSelector)",
        ),
        (
            ".spec.overrides[].patches[]",
            "!(self.op in ['add', 'replace', 'test']) || has(self.value)",
        ),
        (
            ".spec.overrides[].patches[]",
            "!(self.op in ['move', 'copy']) || has(self.from)",
        ),
        (
            ".spec.template.spec.template.spec",
            "has(self.containers) && size(self.containers) > 0",
        ),
        (
            ".spec.template.spec.template.spec.containers[]",
            "has(self.name) && size(self.name) > 0",
        ),
        (
            ".spec.template.spec.template.spec.containers[]",
            "has(self.image) && size(self.image) > 0",
        ),
    ];
    for (path, rule) in expect {
        assert!(
            rules.iter().any(|(p, r)| p == path && r == rule),
            "missing rule at {path}: {rule}\nhave: {rules:#?}"
        );
    }
    assert!(
        rules
            .iter()
            .any(|(p, r)| p == ".spec.template.spec" && r.contains("self.selector.matchLabels.all(k"))
    );
    assert!(
        rules
            .iter()
            .any(|(p, r)| p == ".spec.template.spec.selector" && r.contains("size(self.matchLabels) > 0"))
    );

    // Every rule says what is wrong in words.
    let s = schema(&MultiClusterDeployment::crd());
    fn messages(at: &Value, out: &mut Vec<Value>) {
        if let Some(rules) = at["x-kubernetes-validations"].as_array() {
            out.extend(rules.iter().cloned());
        }
        for key in ["properties"] {
            if let Some(props) = at[key].as_object() {
                props.values().for_each(|v| messages(v, out));
            }
        }
        if at["items"].is_object() {
            messages(&at["items"], out);
        }
    }
    let mut all = Vec::new();
    messages(&s, &mut all);
    for rule in all {
        assert!(
            rule["message"].is_string() || rule["messageExpression"].is_string(),
            "no message: {rule}"
        );
    }
}

#[test]
fn mcs_schema_carries_the_cel_rules() {
    let rules = cel_rules(&schema(&MultiClusterService::crd()));
    for (path, rule) in [
        (".spec", "has(self.deployment)"),
        (
            ".spec",
            "(has(self.headless) && self.headless) || (has(self.ports) && size(self.ports) > 0)",
        ),
        (
            ".spec.ports",
            "size(self) <= 1 || self.all(p, has(p.name) && size(p.name) > 0)",
        ),
        (
            ".spec.placement",
            "(has(self.clusters) && size(self.clusters) > 0) || has(self.clusterSelector)",
        ),
    ] {
        assert!(
            rules.iter().any(|(p, r)| p == path && r == rule),
            "missing rule at {path}: {rule}\nhave: {rules:#?}"
        );
    }
}

#[test]
fn a_service_placement_selects_by_name_or_labels() {
    let placement: ServicePlacement = serde_json::from_value(json!({
        "clusters": ["eu-1"],
        "clusterSelector": {"matchLabels": {"tier": "frontend"}}
    }))
    .unwrap();
    let frontend = BTreeMap::from([("tier".to_owned(), "frontend".to_owned())]);
    assert!(placement.selects("eu-1", &BTreeMap::new()).unwrap(), "by name");
    assert!(placement.selects("us-1", &frontend).unwrap(), "by labels");
    assert!(!placement.selects("us-1", &BTreeMap::new()).unwrap(), "neither");
    let invalid: ServicePlacement = serde_json::from_value(json!({
        "clusterSelector": {"matchExpressions": [{"key": "tier", "operator": "In"}]}
    }))
    .unwrap();
    let error = invalid.selects("us-1", &frontend).unwrap_err().to_string();
    assert!(
        error.starts_with("spec.placement.clusterSelector"),
        "the error names the field: {error}"
    );
}

#[test]
fn crds_have_names_scopes_and_subresources() {
    let mcd = MultiClusterDeployment::crd();
    assert_eq!(
        mcd.metadata.name.as_deref(),
        Some("multiclusterdeployments.nave.dev")
    );
    assert_eq!(mcd.spec.scope, "Namespaced");
    assert_eq!(mcd.spec.names.short_names, Some(vec!["mcd".to_owned()]));
    assert_eq!(mcd.spec.names.categories, Some(vec![CATEGORY.to_owned()]));
    let sub = mcd.spec.versions[0].subresources.as_ref().expect("subresources");
    assert!(sub.status.is_some());
    let scale = sub.scale.as_ref().expect("scale subresource");
    assert_eq!(scale.spec_replicas_path, ".spec.replicas");
    assert_eq!(scale.status_replicas_path, ".status.replicas");
    assert_eq!(scale.label_selector_path.as_deref(), Some(".status.selector"));

    let mcs = MultiClusterService::crd();
    assert_eq!(mcs.spec.scope, "Namespaced");
    assert_eq!(mcs.spec.names.short_names, Some(vec!["mcsvc".to_owned()]));
    assert!(
        mcs.spec.versions[0]
            .subresources
            .as_ref()
            .expect("subresources")
            .status
            .is_some()
    );

    let wcl = WorkloadCluster::crd();
    assert_eq!(wcl.spec.scope, "Cluster");
    assert_eq!(wcl.spec.names.short_names, Some(vec!["wcl".to_owned()]));
    assert!(
        wcl.spec.versions[0]
            .subresources
            .as_ref()
            .expect("subresources")
            .status
            .is_some()
    );

    for crd in crds() {
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.versions[0].name, VERSION);
        assert_eq!(crd.spec.names.categories, Some(vec![CATEGORY.to_owned()]));
    }
}

#[test]
fn printer_columns_match_kubectl_get() {
    fn columns(crd: &CustomResourceDefinition) -> Vec<(String, String, i32)> {
        crd.spec.versions[0]
            .additional_printer_columns
            .as_ref()
            .expect("printer columns")
            .iter()
            .map(|c| {
                (
                    c.name.to_uppercase(),
                    c.json_path.clone(),
                    c.priority.unwrap_or(0),
                )
            })
            .collect()
    }
    let default_view = |cols: &[(String, String, i32)]| {
        cols.iter()
            .filter(|c| c.2 == 0)
            .map(|c| c.0.clone())
            .collect::<Vec<_>>()
    };

    let mcd = columns(&MultiClusterDeployment::crd());
    assert_eq!(
        default_view(&mcd),
        ["DESIRED", "READY", "CLUSTERS", "POLICY", "AGE"]
    );
    for wide in ["AVAILABLE", "UNPLACED", "PLACEMENT", "MESSAGE"] {
        assert!(
            mcd.iter().any(|c| c.0 == wide && c.2 == 1),
            "no -o wide column {wide}"
        );
    }
    assert!(mcd.contains(&("DESIRED".to_owned(), ".spec.replicas".to_owned(), 0)));
    assert!(mcd.contains(&("POLICY".to_owned(), ".spec.placement.policy".to_owned(), 0)));

    let mcs = columns(&MultiClusterService::crd());
    assert_eq!(
        default_view(&mcs),
        ["TYPE", "DEPLOYMENT", "GLOBAL", "CLUSTERS", "READY", "AGE"]
    );

    let wcl = columns(&WorkloadCluster::crd());
    assert_eq!(
        default_view(&wcl),
        ["READY", "REGION", "NODES", "CPU", "MEMORY", "AGE"]
    );
    assert!(wcl.contains(&(
        "READY".to_owned(),
        ".status.conditions[?(@.type==\"Ready\")].status".to_owned(),
        0
    )));

    // Every column points at a field the schema declares (a typo would show <none> forever).
    for crd in crds() {
        let s = schema(&crd);
        for (name, path, _) in columns(&crd) {
            if path.starts_with(".metadata") {
                continue;
            }
            let field_path = path.split("[?").next().unwrap().trim_start_matches('.');
            let field_path = field_path.replace("conditions", "conditions.[]");
            node(&s, &field_path);
            assert!(!name.is_empty());
        }
    }
}

#[test]
fn crd_yaml_parses_back_to_the_same_crd() {
    for crd in crds() {
        let yaml = crd_yaml(&crd);
        let back: CustomResourceDefinition = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(back, crd, "{} does not survive YAML", crd_file_name(&crd));
        let file = crd_file_contents(&crd);
        assert!(file.starts_with("# Generated"));
        assert!(file.contains(CRDGEN_COMMAND));
    }
    let names: Vec<String> = crds().iter().map(crd_file_name).collect();
    assert_eq!(
        names,
        [
            "multiclusterdeployments.nave.dev.yaml",
            "multiclusterhorizontalpodautoscalers.nave.dev.yaml",
            "multiclusterjobs.nave.dev.yaml",
            "multiclusterresources.nave.dev.yaml",
            "multiclusterservices.nave.dev.yaml",
            "workloadclusters.nave.dev.yaml"
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// The pod template

#[test]
fn template_parses_into_a_deployment_spec() {
    let mcd = mk_mcd("web").build();
    let spec = mcd.spec.template.deployment_spec().unwrap();
    let pod = spec.template.spec.expect("pod spec");
    assert_eq!(pod.containers[0].image.as_deref(), Some("nginx:1.27"));
    assert_eq!(
        spec.selector
            .match_labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str),
        Some("web")
    );

    let back = DeploymentTemplate::from_spec(
        TemplateMetadata::default(),
        &mcd.spec.template.deployment_spec().unwrap(),
    );
    assert_eq!(
        back.deployment_spec().unwrap(),
        mcd.spec.template.deployment_spec().unwrap()
    );
}

#[test]
fn template_parse_error_names_the_field_path() {
    let mcd = mk_mcd("web").image(json!(1)).build();
    let err = mcd.spec.template.deployment_spec().unwrap_err();
    assert!(matches!(err, Error::ParseTemplate { .. }));
    let message = err.to_string();
    assert!(
        message.starts_with("spec.template.spec.template.spec.containers[0].image: invalid type: integer"),
        "{message}"
    );
    assert!(message.contains("expected a string"), "{message}");
}

#[test]
fn template_parse_error_for_a_wrong_shape_names_the_template() {
    let mut mcd = mk_mcd("web").build();
    mcd.spec.template.spec = json!("not an object");
    let message = mcd.spec.template.deployment_spec().unwrap_err().to_string();
    assert!(
        message.starts_with("spec.template.spec: invalid type: string"),
        "{message}"
    );

    mcd.spec.template.spec = deployment_spec_json("web", json!("nginx"));
    mcd.spec.template.spec["template"]["spec"]["containers"] = json!({"name": "web"});
    let message = mcd.spec.template.deployment_spec().unwrap_err().to_string();
    assert!(
        message.starts_with("spec.template.spec.template.spec.containers: invalid type: map"),
        "{message}"
    );
}

#[test]
fn template_checks_mirror_the_cel_rules() {
    fn error_for(edit: impl FnOnce(&mut Value)) -> String {
        let mut mcd = mk_mcd("web").build();
        edit(&mut mcd.spec.template.spec);
        mcd.spec.template.deployment_spec().unwrap_err().to_string()
    }
    assert_eq!(
        error_for(|s| drop(s.as_object_mut().unwrap().remove("selector"))),
        "spec.template.spec.selector: selector must not be empty: set matchLabels or matchExpressions"
    );
    assert_eq!(
        error_for(|s| s["selector"]["matchLabels"]["app"] = json!("api")),
        "spec.template.spec.selector: selector.matchLabels must match template.metadata.labels"
    );
    assert_eq!(
        error_for(|s| s["template"]["spec"]["containers"] = json!([])),
        "spec.template.spec.template.spec.containers: at least one container is required"
    );
    assert_eq!(
        error_for(|s| drop(
            s["template"]["spec"]["containers"][0]
                .as_object_mut()
                .unwrap()
                .remove("image")
        )),
        "spec.template.spec.template.spec.containers[0].image: every container needs an image"
    );
    assert_eq!(
        error_for(|s| s["template"]["spec"]["containers"][0]["name"] = json!("")),
        "spec.template.spec.template.spec.containers[0].name: every container needs a name"
    );
    assert_eq!(
        error_for(|s| drop(s["template"].as_object_mut().unwrap().remove("spec"))),
        "spec.template.spec.template.spec: the pod template needs a spec"
    );
}

#[test]
fn a_bad_template_does_not_break_a_typed_list() {
    // What a watcher's initial list looks like when one object has a template the Rust types
    // reject: the list must still deserialize, and only that object reports an error.
    let good = serde_json::to_value(mk_mcd("good").build()).unwrap();
    let bad = serde_json::to_value(mk_mcd("bad").image(json!({"not": "a string"})).build()).unwrap();
    let list = json!({
        "apiVersion": "nave.dev/v1alpha1",
        "kind": "MultiClusterDeploymentList",
        "metadata": {"resourceVersion": "7"},
        "items": [good, bad],
    });
    let list: kube::core::ObjectList<MultiClusterDeployment> = serde_json::from_value(list).unwrap();
    let results: Vec<bool> = list
        .items
        .iter()
        .map(|m| m.spec.template.deployment_spec().is_ok())
        .collect();
    assert_eq!(results, [true, false]);
}

// ---------------------------------------------------------------------------------------------
// Placement helpers

#[test]
fn rescheduling_durations_parse_and_errors_name_the_field() {
    let rescheduling = Rescheduling::default();
    assert_eq!(
        rescheduling.pending_timeout().unwrap(),
        std::time::Duration::from_secs(300)
    );
    assert_eq!(
        rescheduling.cooldown().unwrap(),
        std::time::Duration::from_secs(600)
    );

    let bad = Rescheduling {
        pending_timeout: "5 minutes".to_owned(),
        ..Default::default()
    };
    let message = bad.pending_timeout().unwrap_err().to_string();
    assert!(
        message.starts_with("spec.placement.rescheduling.pendingTimeout: invalid duration \"5 minutes\""),
        "{message}"
    );
}

#[test]
fn duration_pattern_accepts_go_durations_only() {
    let pattern = regex::Regex::new(placement::DURATION_PATTERN).unwrap();
    for ok in ["5m", "90s", "1h30m", "1.5h", "250ms"] {
        assert!(pattern.is_match(ok), "{ok} should match");
        assert!(placement::parse_duration("x", ok).is_ok(), "{ok} should parse");
    }
    for bad in ["", "5", "5 m", "-5m", "5min"] {
        assert!(!pattern.is_match(bad), "{bad} should not match");
    }
}

#[test]
fn json_pointer_pattern_accepts_rfc_6901_pointers() {
    let pattern = regex::Regex::new(deployment::JSON_POINTER_PATTERN).unwrap();
    for ok in [
        "",
        "/spec",
        "/spec/template/spec/containers/0/image",
        "/metadata/labels/a~1b",
        "/x~0y",
    ] {
        assert!(pattern.is_match(ok), "{ok:?} should match");
    }
    for bad in ["spec", "/a~2", "/a~"] {
        assert!(!pattern.is_match(bad), "{bad:?} should not match");
    }
}

#[test]
fn failback_names_match_the_schema_and_unknown_values_are_rejected() {
    for failback in [Failback::Never, Failback::Immediate] {
        assert_eq!(serde_json::to_value(failback).unwrap(), json!(failback.as_str()));
        assert_eq!(failback.to_string(), failback.as_str());
    }
    let placement: Placement = serde_json::from_value(json!({"failback": "Immediate"})).unwrap();
    assert_eq!(placement.failback, Failback::Immediate);
    let error = serde_json::from_value::<Placement>(json!({"failback": "Sometimes"}))
        .expect_err("an unknown failback policy must not parse");
    assert!(
        error.to_string().contains("Sometimes"),
        "the error should name the bad value, got {error}"
    );
}

#[test]
fn placement_policy_names_match_the_schema() {
    for policy in [
        PlacementPolicy::WorstFit,
        PlacementPolicy::BestFit,
        PlacementPolicy::Proximity,
        PlacementPolicy::Spread,
    ] {
        assert_eq!(serde_json::to_value(policy).unwrap(), json!(policy.as_str()));
        assert_eq!(policy.to_string(), policy.as_str());
    }
    let placement: Placement = serde_json::from_value(json!({
        "policy": "proximity",
        "proximity": {"origin": {"coordinates": {"latitude": 50.1, "longitude": 8.7}}},
        "bursting": {"threshold": 70, "targets": {"matchLabels": {"nave.dev/tier": "burst"}}},
    }))
    .unwrap();
    let built = mk_mcd("web").placement(placement.clone()).build();
    assert_eq!(built.spec.placement.policy, PlacementPolicy::Proximity);
    assert_eq!(
        placement.proximity.unwrap().origin.coordinates,
        Some(Coordinates {
            latitude: 50.1,
            longitude: 8.7
        })
    );
    assert_eq!(placement.bursting.as_ref().unwrap().threshold, 70);
    assert!(placement.bursting.unwrap().retract_first);
}

#[test]
fn overrides_apply_by_name_or_by_selector() {
    let by_name = ClusterOverride {
        clusters: vec!["eu-1".to_owned()],
        cluster_selector: None,
        patches: Vec::new(),
    };
    assert!(by_name.applies_to(0, "eu-1", &BTreeMap::new()).unwrap());
    assert!(!by_name.applies_to(0, "us-1", &BTreeMap::new()).unwrap());

    let by_selector = ClusterOverride {
        clusters: Vec::new(),
        cluster_selector: Some(LabelSelector {
            match_labels: Some(labels(&[("topology.kubernetes.io/region", "cn-north")])),
            match_expressions: None,
        }),
        patches: Vec::new(),
    };
    assert!(
        by_selector
            .applies_to(
                1,
                "cn-1",
                &labels(&[("topology.kubernetes.io/region", "cn-north")])
            )
            .unwrap()
    );
    assert!(
        !by_selector
            .applies_to(
                1,
                "eu-1",
                &labels(&[("topology.kubernetes.io/region", "eu-west")])
            )
            .unwrap()
    );

    let invalid: ClusterOverride = serde_json::from_value(json!({
        "clusterSelector": {"matchExpressions": [{"key": "tier", "operator": "Sideways"}]},
        "patches": [{"op": "remove", "path": "/spec/paused"}],
    }))
    .unwrap();
    let message = invalid
        .applies_to(2, "eu-1", &BTreeMap::new())
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("spec.overrides[2].clusterSelector: invalid label selector"),
        "{message}"
    );
}

// ---------------------------------------------------------------------------------------------
// MultiClusterService

#[test]
fn mcs_builds_a_service_with_cilium_annotations_when_global() {
    let mcs: MultiClusterService = serde_json::from_value(json!({
        "apiVersion": "nave.dev/v1alpha1",
        "kind": "MultiClusterService",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "deployment": "web",
            "global": true,
            "metadata": {"annotations": {"team": "storefront"}},
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
        },
    }))
    .unwrap();
    assert_eq!(mcs.spec.type_, ServiceType::ClusterIP);
    assert_eq!(mcs.spec.ports[0].protocol, ServiceProtocol::Tcp);

    let annotations = mcs.spec.service_annotations();
    assert_eq!(
        annotations.get("service.cilium.io/global").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        annotations.get("io.cilium/global-service").map(String::as_str),
        Some("true")
    );
    assert_eq!(annotations.get("team").map(String::as_str), Some("storefront"));

    let spec = mcs.spec.service_spec(&labels(&[("app", "web")]));
    assert_eq!(spec.selector, Some(labels(&[("app", "web")])));
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(spec.cluster_ip, None);
    let port = &spec.ports.as_ref().unwrap()[0];
    assert_eq!((port.port, port.protocol.as_deref()), (80, Some("TCP")));

    let local = MultiClusterServiceSpec {
        global: false,
        headless: true,
        ..mcs.spec.clone()
    };
    assert!(
        !local
            .service_annotations()
            .contains_key(service::CILIUM_GLOBAL_ANNOTATION)
    );
    assert_eq!(
        local.service_spec(&BTreeMap::new()).cluster_ip.as_deref(),
        Some("None")
    );

    let json = serde_json::to_string(&mcs).unwrap();
    assert_eq!(serde_json::from_str::<MultiClusterService>(&json).unwrap(), mcs);
    assert!(json.contains(r#""type":"ClusterIP""#), "{json}");
}

// ---------------------------------------------------------------------------------------------
// WorkloadCluster and conditions

#[test]
fn workload_cluster_round_trips_and_reports_schedulable() {
    let mut wcl = WorkloadCluster::new(
        "eu-1",
        WorkloadClusterSpec {
            region: Some("eu-west".to_owned()),
            coordinates: Some(Coordinates {
                latitude: 50.11,
                longitude: 8.68,
            }),
            ..Default::default()
        },
    );
    assert!(!wcl.is_schedulable(), "no Ready condition yet");

    wcl.status = Some(WorkloadClusterStatus {
        conditions: vec![
            condition(
                types::JOINED,
                conditions::TRUE,
                reasons::AGENT_REGISTERED,
                "2025-01-01T00:00:00Z",
            ),
            condition(
                types::READY,
                conditions::TRUE,
                reasons::HEARTBEAT_RECEIVED,
                "2025-01-01T00:00:10Z",
            ),
        ],
        capacity: Some(ClusterCapacity {
            nodes: 3,
            allocatable: ResourceAmounts {
                cpu: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                    "12".to_owned(),
                )),
                memory: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                    "48Gi".to_owned(),
                )),
                pods: None,
            },
            cpu_requested_percent: Some(40),
            ..Default::default()
        }),
        agent_version: Some("0.1.0".to_owned()),
        kubernetes_version: Some("v1.33.1".to_owned()),
        ..Default::default()
    });
    assert!(wcl.is_schedulable());
    wcl.spec.unschedulable = true;
    assert!(!wcl.is_schedulable(), "cordoned");

    let value = serde_json::to_value(&wcl).unwrap();
    assert_eq!(value["status"]["capacity"]["allocatable"]["cpu"], "12");
    assert!(value["metadata"]["namespace"].is_null());
    assert_eq!(serde_json::from_value::<WorkloadCluster>(value).unwrap(), wcl);
}

#[test]
fn upsert_condition_keeps_transition_time_while_status_holds() {
    let mut list = vec![condition(
        types::READY,
        conditions::TRUE,
        reasons::HEARTBEAT_RECEIVED,
        "2025-01-01T00:00:00Z",
    )];

    conditions::upsert(
        &mut list,
        condition(
            types::READY,
            conditions::TRUE,
            reasons::HEARTBEAT_RECEIVED,
            "2025-01-01T00:05:00Z",
        ),
    );
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].last_transition_time.0.to_string(), "2025-01-01T00:00:00Z");

    conditions::upsert(
        &mut list,
        condition(
            types::READY,
            conditions::FALSE,
            reasons::HEARTBEAT_MISSED,
            "2025-01-01T00:10:00Z",
        ),
    );
    assert_eq!(list[0].last_transition_time.0.to_string(), "2025-01-01T00:10:00Z");
    assert_eq!(list[0].reason, reasons::HEARTBEAT_MISSED);
    assert!(!conditions::is_true(&list, types::READY));

    conditions::upsert(
        &mut list,
        condition(
            types::JOINED,
            conditions::TRUE,
            reasons::AGENT_REGISTERED,
            "2025-01-01T00:10:00Z",
        ),
    );
    assert_eq!(list.len(), 2);
    assert!(conditions::is_true(&list, types::JOINED));
}

#[test]
fn reasons_are_camel_case_identifiers() {
    let all = [
        reasons::ALL_REPLICAS_PLACED,
        reasons::PARTIALLY_PLACED,
        reasons::NO_ELIGIBLE_CLUSTERS,
        reasons::INSUFFICIENT_CAPACITY,
        reasons::INVALID_SPEC,
        reasons::MINIMUM_REPLICAS_AVAILABLE,
        reasons::MINIMUM_REPLICAS_UNAVAILABLE,
        reasons::ROLLOUT_IN_PROGRESS,
        reasons::ROLLOUT_COMPLETE,
        reasons::MOVING_REPLICAS,
        reasons::AS_EXPECTED,
        reasons::REPLICAS_UNPLACED,
        reasons::PODS_PENDING,
        reasons::CLUSTER_NOT_READY,
        reasons::OVERRIDE_FAILED,
        reasons::THRESHOLD_EXCEEDED,
        reasons::OVERFLOW,
        reasons::NOT_BURSTING,
        reasons::AGENT_REGISTERED,
        reasons::HEARTBEAT_RECEIVED,
        reasons::HEARTBEAT_MISSED,
        reasons::SERVICES_READY,
        reasons::SERVICES_PENDING,
    ];
    for reason in all {
        let mut chars = reason.chars();
        assert!(chars.next().is_some_and(|c| c.is_ascii_uppercase()), "{reason}");
        assert!(chars.all(|c| c.is_ascii_alphanumeric()), "{reason}");
    }
}

#[test]
fn capacity_quantities_read_like_kubectl_top() {
    use crate::cluster::{cpu_quantity, memory_quantity};
    let cpu = |m| cpu_quantity(m).0;
    let mem = |b| memory_quantity(b).0;
    assert_eq!(cpu(8000), "8");
    assert_eq!(cpu(0), "0");
    assert_eq!(cpu(15500), "15500m");
    assert_eq!(cpu(250), "250m");
    assert_eq!(mem(17_179_869_184), "16Gi");
    assert_eq!(mem(0), "0");
    assert_eq!(mem(1536 << 20), "1536Mi");
    assert_eq!(mem(3 << 40), "3Ti");
    assert_eq!(mem(64 << 20), "64Mi");
    // Node allocatable is often in Ki: rounded to the nearest Mi.
    assert_eq!(mem(65_134_256 * 1024), "63608Mi");
    assert_eq!(mem((100 << 20) + (1 << 19) - 1), "100Mi");
    assert_eq!(mem((100 << 20) + (1 << 19)), "101Mi");
    // Below half a Mi nothing rounds to zero.
    assert_eq!(mem(512 * 1024 - 1024), "511Ki");
    assert_eq!(mem(1000), "1000");
    let amounts = ResourceAmounts::from_resources(wire::Resources::new(8000, 16 << 30, 110));
    assert_eq!(
        serde_json::to_value(&amounts).expect("serializes"),
        json!({"cpu": "8", "memory": "16Gi", "pods": "110"})
    );
}
