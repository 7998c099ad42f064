use std::collections::BTreeMap;

use nave_api::wire::{WORKLOAD_LABEL, WorkloadRef};
use nave_api::{
    ClusterOverride, Dependencies, DependencyKind, DependencyRef, DeploymentTemplate, JsonPatchOperation,
    MultiClusterDeployment, MultiClusterDeploymentSpec, MultiClusterService, PatchOp,
};
use serde_json::{Value, json};

use super::*;

fn template(spec: Value) -> DeploymentTemplate {
    serde_json::from_value(json!({"metadata": {"labels": {"team": "web"}}, "spec": spec})).unwrap()
}

fn web_spec() -> Value {
    json!({
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
        }
    })
}

fn mk_mcd(overrides: Vec<ClusterOverride>) -> MultiClusterDeployment {
    let spec: MultiClusterDeploymentSpec = serde_json::from_value(json!({
        "replicas": 5,
        "template": template(web_spec()),
    }))
    .unwrap();
    let mut mcd = MultiClusterDeployment::new("web", MultiClusterDeploymentSpec { overrides, ..spec });
    mcd.metadata.namespace = Some("shop".to_owned());
    mcd
}

fn image_override(clusters: &[&str], image: &str) -> ClusterOverride {
    ClusterOverride {
        clusters: clusters.iter().map(|c| (*c).to_owned()).collect(),
        cluster_selector: None,
        patches: vec![JsonPatchOperation {
            op: PatchOp::Replace,
            path: "/spec/template/spec/containers/0/image".to_owned(),
            from: None,
            value: Some(json!(image)),
        }],
    }
}

#[test]
fn deployment_gets_the_clusters_share_name_and_workload_labels() {
    let mcd = mk_mcd(vec![]);
    let d = render_deployment(&mcd, "eu-1", &BTreeMap::new(), 3, None, &template_hash(&mcd)).unwrap();
    assert_eq!(d["kind"], "Deployment");
    assert_eq!(d["metadata"]["name"], "web");
    assert_eq!(d["metadata"]["namespace"], "shop");
    assert_eq!(d["metadata"]["labels"]["team"], "web");
    assert_eq!(d["metadata"]["labels"][WORKLOAD_LABEL], "shop.web");
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"][WORKLOAD_LABEL],
        "shop.web"
    );
    assert_eq!(d["spec"]["template"]["metadata"]["labels"]["app"], "web");
}

#[test]
fn override_applies_to_its_cluster_only() {
    let mcd = mk_mcd(vec![image_override(&["cn-1"], "mirror.cn/nginx:1.27")]);
    let image = |d: &Value| d["spec"]["template"]["spec"]["containers"][0]["image"].clone();
    let cn = render_deployment(&mcd, "cn-1", &BTreeMap::new(), 2, None, &template_hash(&mcd)).unwrap();
    let eu = render_deployment(&mcd, "eu-1", &BTreeMap::new(), 2, None, &template_hash(&mcd)).unwrap();
    assert_eq!(image(&cn), "mirror.cn/nginx:1.27");
    assert_eq!(image(&eu), "nginx:1.27", "eu-1 must keep the template's image");
}

#[test]
fn override_by_selector_matches_cluster_labels() {
    let mut over = image_override(&[], "mirror.cn/nginx:1.27");
    over.cluster_selector = Some(serde_json::from_value(json!({"matchLabels": {"region": "cn"}})).unwrap());
    let mcd = mk_mcd(vec![over]);
    let cn_labels = BTreeMap::from([("region".to_owned(), "cn".to_owned())]);
    let cn = render_deployment(&mcd, "x", &cn_labels, 1, None, &template_hash(&mcd)).unwrap();
    let other = render_deployment(&mcd, "y", &BTreeMap::new(), 1, None, &template_hash(&mcd)).unwrap();
    assert_eq!(
        cn["spec"]["template"]["spec"]["containers"][0]["image"],
        "mirror.cn/nginx:1.27"
    );
    assert_eq!(
        other["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.27"
    );
}

#[test]
fn failing_override_names_its_index_and_cluster() {
    let mut over = image_override(&["eu-1"], "x");
    over.patches[0].path = "/spec/nothing/here".to_owned();
    let mcd = mk_mcd(vec![over]);
    let err = render_deployment(&mcd, "eu-1", &BTreeMap::new(), 1, None, &template_hash(&mcd))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spec.overrides[0]") && err.contains("eu-1"),
        "got: {err}"
    );
}

#[test]
fn dependencies_are_found_in_volumes_env_and_env_from() {
    let spec = json!({"template": {"spec": {
        "volumes": [
            {"name": "a", "configMap": {"name": "cm-volume"}},
            {"name": "b", "secret": {"secretName": "secret-volume"}},
            {"name": "c", "projected": {"sources": [{"configMap": {"name": "cm-projected"}}]}}
        ],
        "imagePullSecrets": [{"name": "pull"}],
        "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "secret-init"}}]}],
        "containers": [{
            "name": "web",
            "env": [
                {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "a"}}},
                {"name": "B", "valueFrom": {"secretKeyRef": {"name": "secret-env", "key": "b"}}},
                {"name": "C", "value": "plain"}
            ],
            "envFrom": [{"configMapRef": {"name": "cm-envfrom"}}]
        }]
    }}});
    let deps = Dependencies::default();
    let found = dependencies(&spec, &deps);
    let expected: std::collections::BTreeSet<_> = [
        (DependencyKind::ConfigMap, "cm-volume"),
        (DependencyKind::ConfigMap, "cm-projected"),
        (DependencyKind::ConfigMap, "cm-env"),
        (DependencyKind::ConfigMap, "cm-envfrom"),
        (DependencyKind::Secret, "secret-volume"),
        (DependencyKind::Secret, "secret-env"),
        (DependencyKind::Secret, "secret-init"),
        (DependencyKind::Secret, "pull"),
    ]
    .into_iter()
    .map(|(k, n)| (k, n.to_owned()))
    .collect();
    assert_eq!(found, expected);

    let deps = Dependencies {
        enabled: true,
        include: vec![DependencyRef {
            kind: DependencyKind::ConfigMap,
            name: "extra".to_owned(),
        }],
        exclude: vec![DependencyRef {
            kind: DependencyKind::Secret,
            name: "pull".to_owned(),
        }],
    };
    let found = dependencies(&spec, &deps);
    assert!(found.contains(&(DependencyKind::ConfigMap, "extra".to_owned())));
    assert!(!found.contains(&(DependencyKind::Secret, "pull".to_owned())));

    let off = Dependencies {
        enabled: false,
        ..Dependencies::default()
    };
    assert!(dependencies(&spec, &off).is_empty());
}

#[test]
fn copied_dependency_drops_server_fields_and_gets_workload_labels() {
    let source = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": "shop", "uid": "u", "resourceVersion": "7",
                     "labels": {"a": "b"},
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "data": {"k": "v"}
    });
    let copy = copy_dependency(&source, &WorkloadRef::new("shop", "web"));
    assert_eq!(copy["metadata"]["uid"], Value::Null);
    assert_eq!(copy["metadata"]["resourceVersion"], Value::Null);
    assert_eq!(copy["metadata"]["annotations"], Value::Null);
    assert_eq!(copy["metadata"]["labels"]["a"], "b");
    assert_eq!(copy["metadata"]["labels"][WORKLOAD_LABEL], "shop.web");
    assert_eq!(copy["data"]["k"], "v");
}

#[test]
fn global_service_gets_both_cilium_annotations() {
    let mut mcs: MultiClusterService = serde_json::from_value(json!({
        "apiVersion": "nave.dev/v1alpha1", "kind": "MultiClusterService",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"deployment": "web", "global": true, "ports": [{"port": 80}]}
    }))
    .unwrap();
    let selector = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
    let svc = render_service(&mcs, &WorkloadRef::new("shop", "web"), &selector).unwrap();
    assert_eq!(svc["metadata"]["annotations"]["service.cilium.io/global"], "true");
    assert_eq!(svc["metadata"]["annotations"]["io.cilium/global-service"], "true");
    assert_eq!(svc["spec"]["selector"]["app"], "web");
    mcs.spec.global = false;
    let svc = render_service(&mcs, &WorkloadRef::new("shop", "web"), &selector).unwrap();
    assert_eq!(svc["metadata"]["annotations"], Value::Null);
}

#[test]
fn a_service_export_is_named_and_labelled_as_its_service() {
    let mcs: MultiClusterService = serde_json::from_value(json!({
        "apiVersion": "nave.dev/v1alpha1", "kind": "MultiClusterService",
        "metadata": {"name": "api", "namespace": "shop"},
        "spec": {"deployment": "web", "serviceExport": true, "ports": [{"port": 80}],
                 "metadata": {"labels": {"team": "a"}}}
    }))
    .unwrap();
    let workload = WorkloadRef::new("shop", "web");
    let export = render_service_export(&mcs, &workload);
    let svc = render_service(&mcs, &workload, &BTreeMap::new()).unwrap();
    assert_eq!(export["apiVersion"], "multicluster.x-k8s.io/v1alpha1");
    assert_eq!(export["kind"], "ServiceExport");
    assert_eq!(export["metadata"]["name"], svc["metadata"]["name"]);
    assert_eq!(export["metadata"]["namespace"], "shop");
    assert_eq!(export["metadata"]["labels"], svc["metadata"]["labels"]);
    assert_eq!(export["metadata"]["labels"][WORKLOAD_LABEL], "shop.web");
    assert_eq!(export["metadata"]["labels"]["team"], "a");
}

#[test]
fn merge_replaces_only_the_workloads_objects_and_tracks_namespaces() {
    let a = WorkloadRef::new("shop", "web");
    let b = WorkloadRef::new("blog", "api");
    let mcd = mk_mcd(vec![]);
    let web = render_deployment(&mcd, "eu-1", &BTreeMap::new(), 2, None, &template_hash(&mcd)).unwrap();
    let mut api = web.clone();
    api["metadata"]["name"] = json!("api");
    api["metadata"]["namespace"] = json!("blog");
    api["metadata"]["labels"][WORKLOAD_LABEL] = json!(b.label_value());
    let set = merge_work(&[], &a, vec![web.clone()]);
    let set = merge_work(&set, &b, vec![api.clone()]);
    let kinds: Vec<_> = set.iter().map(object_key).collect();
    assert_eq!(set.len(), 4, "two deployments and two namespaces, got {kinds:?}");
    let set = merge_work(&set, &a, vec![]);
    let keys: Vec<_> = set.iter().map(object_key).collect();
    assert_eq!(
        keys,
        vec![
            ("Deployment".to_owned(), "blog".to_owned(), "api".to_owned()),
            ("Namespace".to_owned(), String::new(), "blog".to_owned()),
        ]
    );
}

#[test]
fn a_shared_configmap_stays_while_any_workload_uses_it() {
    let a = WorkloadRef::new("shop", "web");
    let b = WorkloadRef::new("shop", "api");
    let source = json!({"kind": "ConfigMap", "metadata": {"name": "common", "namespace": "shop"},
                        "data": {"k": "v1"}});
    let from_a = copy_dependency(&source, &a);
    let from_b = copy_dependency(&source, &b);
    let set = merge_work(&[], &a, vec![from_a.clone()]);
    let set = merge_work(&set, &b, vec![from_b.clone()]);
    let shared = set
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("the ConfigMap");
    assert_eq!(
        shared["metadata"]["annotations"][SHARED_BY_ANNOTATION],
        json!("shop.api,shop.web"),
        "both contributors listed"
    );
    // Re-merging the same contributions changes nothing (no new revision for the agents).
    assert_eq!(merge_work(&set, &b, vec![from_b.clone()]), set, "idempotent");

    // web goes: the ConfigMap stays, now api's alone.
    let set = merge_work(&set, &a, vec![]);
    let left = set
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("still there");
    assert_eq!(left["metadata"]["labels"][WORKLOAD_LABEL], json!("shop.api"));
    assert_eq!(
        left["metadata"]["annotations"],
        Value::Null,
        "no shared-by list for one user"
    );
    assert_eq!(left["data"]["k"], json!("v1"));

    // The last user goes: so does the ConfigMap, and its Namespace.
    let set = merge_work(&set, &b, vec![]);
    assert!(set.is_empty(), "nothing left, got {set:?}");
}

fn op(op: PatchOp, path: &str, from: Option<&str>) -> ClusterOverride {
    ClusterOverride {
        clusters: vec!["eu-1".to_owned()],
        cluster_selector: None,
        patches: vec![JsonPatchOperation {
            op,
            path: path.to_owned(),
            from: from.map(str::to_owned),
            value: Some(json!("x")),
        }],
    }
}

#[test]
fn overrides_that_would_retarget_the_object_are_refused_with_the_field_named() {
    let refused = [
        (op(PatchOp::Replace, "/metadata/namespace", None), "path"),
        (op(PatchOp::Replace, "/metadata/name", None), "path"),
        (op(PatchOp::Replace, "/kind", None), "path"),
        (op(PatchOp::Replace, "/apiVersion", None), "path"),
        (op(PatchOp::Replace, "/metadata", None), "path"),
        (op(PatchOp::Remove, "/metadata/labels", None), "path"),
        (op(PatchOp::Replace, "/spec/replicas", None), "path"),
        (
            op(PatchOp::Replace, "/spec/selector/matchLabels/app", None),
            "path",
        ),
        (
            op(PatchOp::Replace, "/metadata/labels/nave.dev~1workload", None),
            "path",
        ),
        (
            op(
                PatchOp::Add,
                "/spec/template/metadata/labels/nave.dev~1workload",
                None,
            ),
            "path",
        ),
        (
            op(PatchOp::Replace, "/spec/template/metadata/labels", None),
            "path",
        ),
        (
            op(
                PatchOp::Move,
                "/spec/template/spec/serviceAccountName",
                Some("/metadata/name"),
            ),
            "from",
        ),
        (
            op(
                PatchOp::Copy,
                "/metadata/namespace",
                Some("/spec/template/spec/nodeName"),
            ),
            "path",
        ),
    ];
    for (over, field) in refused {
        let error = check_override_paths(std::slice::from_ref(&over))
            .expect_err(&format!("{:?} is refused", over.patches[0]));
        assert!(
            error.starts_with(&format!("spec.overrides[0].patches[0].{field}: Forbidden")),
            "{error}"
        );
    }
    let allowed = [
        op(PatchOp::Replace, "/spec/template/spec/containers/0/image", None),
        op(PatchOp::Add, "/metadata/labels/team", None),
        op(PatchOp::Add, "/metadata/annotations/example.com~1owner", None),
        op(PatchOp::Add, "/spec/template/metadata/labels/tier", None),
        op(PatchOp::Test, "/metadata/name", None),
    ];
    for over in allowed {
        assert_eq!(
            check_override_paths(std::slice::from_ref(&over)),
            Ok(()),
            "{:?}",
            over.patches[0]
        );
    }
}

#[test]
fn a_rendered_deployment_is_checked_to_be_the_object_intended() {
    // A path check can be bypassed only by a bug; the render refuses the result all the same.
    let mcd = mk_mcd(vec![op(PatchOp::Replace, "/metadata/namespace", None)]);
    let error = render_deployment(&mcd, "eu-1", &BTreeMap::new(), 2, None, &template_hash(&mcd)).unwrap_err();
    assert!(error.to_string().contains("metadata.namespace"), "{error}");
    let mcd = mk_mcd(vec![op(PatchOp::Replace, "/spec/replicas", None)]);
    let error = render_deployment(&mcd, "eu-1", &BTreeMap::new(), 2, None, &template_hash(&mcd)).unwrap_err();
    assert!(error.to_string().contains("spec.replicas"), "{error}");
}

fn object(kind: &str, namespace: &str, name: &str, workload: &WorkloadRef, version: u64) -> Value {
    json!({"apiVersion": "v1", "kind": kind,
        "metadata": {"namespace": namespace, "name": name,
            "labels": {nave_api::wire::WORKLOAD_LABEL: workload.label_value()}},
        "data": {"v": version}})
}

#[test]
fn replacing_one_workloads_objects_gives_what_merging_the_whole_set_gives() {
    let workloads = [
        WorkloadRef::new("shop", "web"),
        WorkloadRef::new("shop", "api"),
        WorkloadRef::new("blog", "db"),
    ];
    let mut merged: Vec<Value> = Vec::new();
    let mut kept = ClusterWork::default();
    let mut written: BTreeMap<String, Value> = BTreeMap::new();
    // A fixed pseudo-random walk over contributions, shared objects included.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut shared = 0;
    for step in 0..500 {
        let workload = &workloads[next(3) as usize];
        let mut objects = Vec::new();
        for (kind, namespace, name) in [
            ("Deployment", workload.namespace.as_str(), workload.name.as_str()),
            ("ConfigMap", "shop", "common"),
            ("ConfigMap", "blog", "settings"),
            ("Secret", workload.namespace.as_str(), "token"),
        ] {
            if next(3) > 0 {
                objects.push(object(kind, namespace, name, workload, next(3)));
            }
        }
        let before = merged.clone();
        merged = merge_work(&merged, workload, objects.clone());
        let changed = kept.replace(workload, objects);
        assert_eq!(kept.to_objects(), merged, "step {step}");
        // What is written is the changes, now and then: applied to what was written before,
        // they give the whole set.
        if next(2) == 0 {
            let (changes, removed) = kept.unwritten();
            // A key added and removed again between writes is removed without having been
            // written: removing what is not there changes nothing.
            for key in &removed {
                written.remove(key);
            }
            written.extend(changes.into_iter().map(|o| (nave_api::wire::work_key(&o), o)));
            kept.written();
            let whole: Vec<Value> = kept.to_objects();
            let by_key: BTreeMap<String, Value> = whole
                .into_iter()
                .map(|o| (nave_api::wire::work_key(&o), o))
                .collect();
            assert_eq!(
                written, by_key,
                "step {step}: the changes written add up to the set"
            );
        }
        assert_eq!(changed, merged != before, "step {step}: whether the set changed");
        assert_eq!(
            ClusterWork::from_objects(&merged).to_objects(),
            merged,
            "step {step}: read back from what is stored"
        );
        assert!(
            !ClusterWork::from_stored(&merged).is_unwritten(),
            "step {step}: a set read back as it was written has nothing to write"
        );
        if merged
            .iter()
            .any(|o| !o["metadata"]["annotations"][SHARED_BY_ANNOTATION].is_null())
        {
            shared += 1;
        }
    }
    assert!(
        shared > 50,
        "the walk shares objects often enough: {shared} steps of 500"
    );
}

#[test]
fn a_set_read_back_with_what_the_hub_would_not_write_is_put_right_by_the_next_write() {
    let web = WorkloadRef::new("shop", "web");
    let mut kept = ClusterWork::default();
    kept.replace(&web, vec![object("Deployment", "shop", "web", &web, 1)]);
    let mut stored = kept.to_objects();
    // Left by an older hub: an object no workload contributes, and a namespace nothing uses.
    stored.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "orphan", "namespace": "shop"}}));
    stored.push(namespace("old"));
    let read = ClusterWork::from_stored(&stored);
    assert!(read.is_unwritten());
    let (changed, mut removed) = read.unwritten();
    removed.sort();
    assert_eq!(
        (changed, removed),
        (
            Vec::new(),
            vec!["ConfigMap/shop/orphan".to_owned(), "Namespace//old".to_owned()]
        ),
        "what the store holds beyond the set is removed, nothing else is written"
    );
}

#[test]
fn a_workload_that_retains_replicas_tells_the_agent_so() {
    let mut mcd = mk_mcd(vec![]);
    let d = render_deployment(&mcd, "eu-1", &BTreeMap::new(), 3, None, &template_hash(&mcd)).unwrap();
    assert_eq!(
        d["metadata"]["annotations"].get(nave_api::RETAIN_REPLICAS_ANNOTATION),
        None
    );
    mcd.spec.retain_replicas = true;
    let d = render_deployment(&mcd, "eu-1", &BTreeMap::new(), 3, None, &template_hash(&mcd)).unwrap();
    assert_eq!(
        d["metadata"]["annotations"][nave_api::RETAIN_REPLICAS_ANNOTATION],
        "true"
    );
    // The share is still sent: it is the size a new Deployment is created with.
    assert_eq!(d["spec"]["replicas"], 3);
}

#[test]
fn a_statefulset_gets_the_clusters_share_and_first_ordinal_which_no_override_changes() {
    let mut mcd = mk_mcd(vec![]);
    mcd.spec.template.kind = nave_api::WorkloadKind::StatefulSet;
    mcd.spec.template.spec["serviceName"] = json!("web");
    mcd.spec.template.spec["volumeClaimTemplates"] =
        json!([{"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}]);
    let s = render_deployment(&mcd, "eu-1", &BTreeMap::new(), 2, Some(3), &template_hash(&mcd)).unwrap();
    assert_eq!(s["kind"], "StatefulSet");
    assert_eq!(s["apiVersion"], "apps/v1");
    assert_eq!(s["spec"]["replicas"], 2);
    assert_eq!(s["spec"]["ordinals"], json!({"start": 3}));
    assert_eq!(
        s["spec"]["volumeClaimTemplates"][0]["metadata"]["name"], "data",
        "claims follow: {s}"
    );
    assert_eq!(
        s["spec"]["template"]["metadata"]["labels"][WORKLOAD_LABEL],
        "shop.web"
    );

    let mut over = image_override(&["eu-1"], "mirror/web:1");
    over.patches[0].path = "/spec/ordinals/start".to_owned();
    over.patches[0].value = Some(json!(0));
    let error = check_override_paths(&[over]).unwrap_err();
    assert!(
        error.contains("spec.overrides[0].patches[0].path") && error.contains("ordinals"),
        "{error}"
    );
}
