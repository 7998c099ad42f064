use serde_json::json;

use super::{FieldSet, ListType, PathElement, SmpListStrategy, Step, builtin, display_path};

/// `a.b[].c` as steps.
fn steps(path: &str) -> Vec<Step> {
    let mut out = Vec::new();
    for part in path.split('.') {
        match part.strip_suffix("[]") {
            Some(name) => {
                out.push(Step::Field(name.to_owned()));
                out.push(Step::Item);
            }
            None => out.push(Step::Field(part.to_owned())),
        }
    }
    out
}

fn map(keys: &[&str]) -> Option<ListType> {
    Some(ListType::Map(keys.iter().map(|k| (*k).to_owned()).collect()))
}

fn key(k: &str) -> SmpListStrategy {
    SmpListStrategy::MergeByKey(k.to_owned())
}

#[test]
fn builtin_list_types_follow_appendix_c() {
    // (group, kind, path, SSA list type, SMP strategy)
    let rows = [
        (
            "apps",
            "Deployment",
            "metadata.finalizers",
            Some(ListType::Set),
            SmpListStrategy::MergePrimitives,
        ),
        (
            "apps",
            "Deployment",
            "metadata.ownerReferences",
            map(&["uid"]),
            key("uid"),
        ),
        (
            "apps",
            "Deployment",
            "metadata.managedFields",
            Some(ListType::Atomic),
            SmpListStrategy::Replace,
        ),
        (
            "apps",
            "Deployment",
            "spec.template.spec.containers",
            map(&["name"]),
            key("name"),
        ),
        (
            "apps",
            "Deployment",
            "spec.template.spec.initContainers",
            map(&["name"]),
            key("name"),
        ),
        (
            "apps",
            "Deployment",
            "spec.template.spec.volumes",
            map(&["name"]),
            key("name"),
        ),
        (
            "apps",
            "Deployment",
            "spec.template.spec.tolerations",
            Some(ListType::Atomic),
            SmpListStrategy::Replace,
        ),
        (
            "apps",
            "Deployment",
            "spec.template.spec.containers[].env",
            map(&["name"]),
            key("name"),
        ),
        (
            "apps",
            "Deployment",
            "spec.template.spec.containers[].ports",
            map(&["containerPort", "protocol"]),
            key("containerPort"),
        ),
        (
            "apps",
            "Deployment",
            "spec.template.spec.containers[].volumeMounts",
            map(&["mountPath"]),
            key("mountPath"),
        ),
        (
            "apps",
            "Deployment",
            "spec.template.spec.containers[].args",
            Some(ListType::Atomic),
            SmpListStrategy::Replace,
        ),
        (
            "apps",
            "Deployment",
            "status.conditions",
            map(&["type"]),
            key("type"),
        ),
        (
            "apps",
            "ReplicaSet",
            "spec.template.spec.containers",
            map(&["name"]),
            key("name"),
        ),
        (
            "apps",
            "StatefulSet",
            "spec.template.spec.containers",
            map(&["name"]),
            key("name"),
        ),
        (
            "apps",
            "DaemonSet",
            "spec.template.spec.containers",
            map(&["name"]),
            key("name"),
        ),
        (
            "batch",
            "Job",
            "spec.template.spec.containers",
            map(&["name"]),
            key("name"),
        ),
        (
            "batch",
            "Job",
            "status.conditions",
            Some(ListType::Atomic),
            key("type"),
        ),
        ("", "Pod", "spec.containers", map(&["name"]), key("name")),
        (
            "",
            "Pod",
            "spec.ephemeralContainers[].env",
            map(&["name"]),
            key("name"),
        ),
        (
            "",
            "Pod",
            "spec.topologySpreadConstraints",
            map(&["topologyKey", "whenUnsatisfiable"]),
            key("topologyKey"),
        ),
        ("", "Pod", "status.conditions", map(&["type"]), key("type")),
        ("", "Pod", "status.podIPs", map(&["ip"]), key("ip")),
        (
            "",
            "Pod",
            "status.containerStatuses",
            Some(ListType::Atomic),
            SmpListStrategy::Replace,
        ),
        (
            "",
            "Node",
            "spec.taints",
            Some(ListType::Atomic),
            SmpListStrategy::Replace,
        ),
        (
            "",
            "Node",
            "spec.podCIDRs",
            Some(ListType::Set),
            SmpListStrategy::MergePrimitives,
        ),
        ("", "Node", "status.addresses", map(&["type"]), key("type")),
        (
            "",
            "Node",
            "status.images",
            Some(ListType::Atomic),
            SmpListStrategy::Replace,
        ),
        (
            "",
            "Service",
            "spec.ports",
            map(&["port", "protocol"]),
            key("port"),
        ),
        (
            "",
            "Namespace",
            "spec.finalizers",
            Some(ListType::Atomic),
            SmpListStrategy::Replace,
        ),
        ("", "Namespace", "status.conditions", map(&["type"]), key("type")),
        (
            "",
            "ConfigMap",
            "metadata.finalizers",
            Some(ListType::Set),
            SmpListStrategy::MergePrimitives,
        ),
        (
            "example.com",
            "Widget",
            "metadata.ownerReferences",
            map(&["uid"]),
            key("uid"),
        ),
        (
            "example.com",
            "Widget",
            "spec.containers",
            None,
            SmpListStrategy::Replace,
        ),
        // A Pod's containers are not a Deployment's.
        (
            "apps",
            "Deployment",
            "spec.containers",
            None,
            SmpListStrategy::Replace,
        ),
    ];
    for (group, kind, path, ssa, smp) in rows {
        let types = builtin(group, kind);
        let p = steps(path);
        assert_eq!(types.list_type(&p), ssa, "SSA list type of {group}/{kind} {path}");
        assert_eq!(
            types.smp_list_strategy(&p),
            smp,
            "SMP strategy of {group}/{kind} {path}"
        );
    }
}

#[test]
fn builtin_atomic_maps_and_key_defaults() {
    let d = builtin("apps", "Deployment");
    assert!(
        d.map_is_atomic(&steps("spec.selector")),
        "LabelSelector is atomic"
    );
    assert!(
        !d.map_is_atomic(&steps("spec.template.metadata.labels")),
        "labels are granular"
    );
    assert!(
        d.map_is_atomic(&steps("spec.template.spec.nodeSelector")),
        "nodeSelector is atomic"
    );
    assert!(d.map_is_atomic(&steps(
        "spec.template.spec.containers[].env[].valueFrom.secretKeyRef"
    )));
    assert!(
        builtin("", "Service").map_is_atomic(&steps("spec.selector")),
        "Service selector is atomic"
    );
    assert_eq!(
        d.map_key_default(&steps("spec.template.spec.containers[].ports"), "protocol"),
        Some(json!("TCP")),
        "container ports default to TCP"
    );
    assert_eq!(
        d.map_key_default(&steps("spec.template.spec.containers"), "name"),
        None
    );
    assert_eq!(
        builtin("", "Service").map_key_default(&steps("spec.ports"), "protocol"),
        Some(json!("TCP"))
    );
}

#[test]
fn path_elements_order_fields_before_keys_before_values_before_indices() {
    let mut elements = [
        PathElement::Index(0),
        PathElement::Value(json!("b")),
        PathElement::Value(json!(10)),
        PathElement::key(vec![("name".to_owned(), json!("a"))]),
        PathElement::Field("z".to_owned()),
        PathElement::Field("a".to_owned()),
        PathElement::Value(json!(9)),
    ];
    elements.sort();
    let keys: Vec<String> = elements.iter().map(PathElement::to_fields_v1_key).collect();
    assert_eq!(
        keys,
        vec![
            "f:a",
            "f:z",
            "k:{\"name\":\"a\"}",
            "v:9",
            "v:10",
            "v:\"b\"",
            "i:0"
        ]
    );
}

#[test]
fn path_elements_print_like_upstream_paths() {
    let path = vec![
        PathElement::Field("spec".to_owned()),
        PathElement::Field("ports".to_owned()),
        PathElement::key(vec![
            ("protocol".to_owned(), json!("TCP")),
            ("containerPort".to_owned(), json!(80)),
        ]),
        PathElement::Field("name".to_owned()),
    ];
    assert_eq!(
        display_path(&path),
        ".spec.ports[containerPort=80,protocol=\"TCP\"].name"
    );
    assert_eq!(
        display_path(&[
            PathElement::Field("f".to_owned()),
            PathElement::Value(json!("a\"b"))
        ]),
        ".f[=\"a\\\"b\"]"
    );
}

#[test]
fn field_set_operations_keep_only_member_paths() {
    let f = |s: &str| PathElement::Field(s.to_owned());
    let mut a = FieldSet::new();
    a.insert(&[f("spec"), f("replicas")]);
    a.insert(&[f("spec"), f("paused")]);
    let mut b = FieldSet::new();
    b.insert(&[f("spec"), f("replicas")]);
    b.insert(&[f("data")]);

    assert!(a.union(&b).contains(&[f("data")]));
    let diff = a.difference(&b);
    assert!(diff.contains(&[f("spec"), f("paused")]) && !diff.contains(&[f("spec"), f("replicas")]));
    assert_eq!(a.intersection(&b).paths(), vec![vec![f("spec"), f("replicas")]]);
    assert!(
        b.difference(&b).is_empty(),
        "nothing left, not even empty parents"
    );
    assert!(
        a.has_prefix(&[f("spec")]) && !a.contains(&[f("spec")]),
        "spec is a prefix, not a member"
    );
}

#[test]
fn field_set_paths_iterate_members_before_children_like_upstream() {
    let f = |s: &str| PathElement::Field(s.to_owned());
    let mut s = FieldSet::new();
    s.insert(&[f("spec"), f("template"), f("x")]);
    s.insert(&[f("spec"), f("replicas")]);
    s.insert(&[f("data")]);
    let printed: Vec<String> = s.paths().iter().map(|p| display_path(p)).collect();
    assert_eq!(printed, vec![".data", ".spec.replicas", ".spec.template.x"]);
}

#[test]
fn fields_v1_encodes_members_with_children_using_the_dot_marker() {
    let f = |s: &str| PathElement::Field(s.to_owned());
    let mut s = FieldSet::new();
    s.insert(&[f("metadata"), f("labels")]);
    s.insert(&[f("metadata"), f("labels"), f("app")]);
    s.insert(&[f("spec"), PathElement::Value(json!("x"))]);
    assert_eq!(
        s.to_fields_v1(),
        json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}}, "f:spec": {"v:\"x\"": {}}})
    );
    assert_eq!(FieldSet::from_fields_v1(&s.to_fields_v1()), Ok(s));
}

#[test]
fn fields_v1_parsing_refuses_malformed_documents_without_panicking() {
    for bad in [
        json!([]),
        json!({"f:a": 1}),
        json!({"k:[1]": {}}),
        json!({"i:x": {}}),
        json!({"": {}}),
    ] {
        assert!(
            FieldSet::from_fields_v1(&bad).is_err(),
            "expected {bad} to be refused"
        );
    }
    let mut deep = json!({});
    for _ in 0..300 {
        deep = json!({ "f:a": deep });
    }
    assert!(
        FieldSet::from_fields_v1(&deep).is_err(),
        "deep documents are refused"
    );
}
