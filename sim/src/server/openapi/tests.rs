use serde_json::{Value, json};

use super::schemas::{self, OBJECT_META};
use super::*;
use crate::server::resources::types_from_crd;

fn crd(extra_field: Option<&str>) -> Value {
    let mut spec = json!({
        "type": "object",
        "description": "What the widget should be.",
        "properties": {"size": {"type": "integer", "description": "How big the widget is."}}
    });
    if let Some(f) = extra_field {
        spec["properties"][f] = json!({"type": "string", "description": "A new field."});
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A widget.",
                    "properties": {"spec": spec, "metadata": {"type": "object"}}
                }}}]}
    })
}

fn registry_with(crd: &Value) -> Registry {
    let mut reg = Registry::new();
    reg.set_crd("widgets.example.com", types_from_crd(crd).expect("valid CRD"));
    reg
}

fn doc(reg: &Registry, g: &str, v: &str) -> Value {
    let d = document(reg, g, v).expect("document");
    serde_json::from_str(&d.body).expect("json")
}

#[test]
fn custom_kinds_are_named_by_reversed_group() {
    assert_eq!(
        schemas::component_name("nave.dev", "v1alpha1", "MultiClusterDeployment"),
        "dev.nave.v1alpha1.MultiClusterDeployment"
    );
}

#[test]
fn crd_schema_is_published_with_type_meta_object_meta_and_gvk() {
    let d = doc(&registry_with(&crd(None)), "example.com", "v1");
    let w = &d["components"]["schemas"]["com.example.v1.Widget"];
    assert_eq!(w["description"], "A widget.");
    assert_eq!(
        w["properties"]["spec"]["properties"]["size"]["description"],
        "How big the widget is."
    );
    assert_eq!(
        w["properties"]["metadata"]["allOf"][0]["$ref"],
        format!("#/components/schemas/{OBJECT_META}")
    );
    assert_eq!(w["properties"]["apiVersion"]["type"], "string");
    assert_eq!(
        w["x-kubernetes-group-version-kind"],
        json!([{"group": "example.com", "kind": "Widget", "version": "v1"}])
    );
    let list = &d["components"]["schemas"]["com.example.v1.WidgetList"];
    assert_eq!(
        list["properties"]["items"]["items"]["$ref"],
        "#/components/schemas/com.example.v1.Widget"
    );
    // Every $ref resolves inside the document.
    let mut refs = Vec::new();
    schemas_refs(&d, &mut refs);
    for r in refs {
        let name = r.trim_start_matches("#/components/schemas/");
        assert!(
            d["components"]["schemas"].get(name).is_some(),
            "dangling $ref {r}"
        );
    }
    let ops = &d["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets"];
    assert_eq!(ops["get"]["x-kubernetes-group-version-kind"]["kind"], "Widget");
    let patch = &d["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
    assert!(
        patch["parameters"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["name"] == "fieldValidation")),
        "patch parameters: {}",
        patch["parameters"]
    );
    assert!(
        d["paths"]
            .get("/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/status")
            .is_some()
    );
}

fn schemas_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, sub) in m {
                if k == "$ref" {
                    out.push(sub.as_str().unwrap_or_default().to_owned());
                }
                schemas_refs(sub, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|s| schemas_refs(s, out)),
        _ => {}
    }
}

#[test]
fn builtin_documents_carry_upstream_schemas() {
    let reg = Registry::new();
    let d = doc(&reg, "", "v1");
    let pod = &d["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
    assert_eq!(
        pod["x-kubernetes-group-version-kind"],
        json!([{"group": "", "kind": "Pod", "version": "v1"}])
    );
    assert!(
        d["components"]["schemas"]
            .get("io.k8s.api.core.v1.PodSpec")
            .is_some()
    );
    assert!(
        d["paths"].get("/api/v1/namespaces/{name}").is_some(),
        "Namespace PATCH path"
    );
    let apps = doc(&reg, "apps", "v1");
    assert!(
        apps["components"]["schemas"]
            .get("io.k8s.api.apps.v1.Deployment")
            .is_some()
    );
    assert!(
        apps["components"]["schemas"]
            .get("io.k8s.api.core.v1.Node")
            .is_none()
    );
}

#[test]
fn hash_changes_when_the_crd_changes() {
    let before = document(&registry_with(&crd(None)), "example.com", "v1").expect("doc");
    let same = document(&registry_with(&crd(None)), "example.com", "v1").expect("doc");
    let after = document(&registry_with(&crd(Some("color"))), "example.com", "v1").expect("doc");
    assert_eq!(before.hash, same.hash);
    assert_ne!(before.hash, after.hash);
}

#[test]
fn operation_ids_name_group_and_version() {
    assert_eq!(camel("nave.dev"), "NaveDev");
    assert_eq!(camel("rbac.authorization.k8s.io"), "RbacAuthorization");
    assert_eq!(camel(""), "Core");
    assert_eq!(camel("v1alpha1"), "V1alpha1");
}

#[test]
fn read_only_resources_advertise_only_their_verbs() {
    let d = doc(&Registry::new(), "metrics.k8s.io", "v1beta1");
    let item = &d["paths"]["/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/{name}"];
    let ops: Vec<&String> = item.as_object().expect("item path").keys().collect();
    assert_eq!(ops, ["get", "parameters"], "PodMetrics item operations");
    let list = &d["paths"]["/apis/metrics.k8s.io/v1beta1/nodes"];
    assert_eq!(list["get"]["x-kubernetes-action"], "list");
    assert!(list.get("post").is_none(), "no create on NodeMetrics: {list}");
    let deployments = doc(&Registry::new(), "apps", "v1");
    let item = &deployments["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"];
    for op in ["get", "put", "patch", "delete"] {
        assert!(item.get(op).is_some(), "deployments lack {op}: {item}");
    }
}
