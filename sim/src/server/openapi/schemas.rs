//! The `components.schemas` of the OpenAPI v3 documents: built-in kinds from the Kubernetes types
//! that `k8s-openapi` describes (with their upstream descriptions), and custom resources converted
//! from their CRD's structural schema the way `apiextensions-apiserver` publishes them.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use k8s_openapi::api::{
    apps, authorization, batch, certificates, coordination, core, discovery, events, networking, policy,
    rbac, scheduling,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

/// Where `$ref`s point: `#/components/schemas/<name>`.
pub const REF_PREFIX: &str = "#/components/schemas/";
/// Component name of `metadata` in every object.
pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
/// Component name of `metadata` in every list.
pub const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_METADATA_DESCRIPTION: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// `(group, version, kind)`.
pub type Gvk = (String, String, String);

/// Schemas of the built-in kinds and the meta types every document refers to.
#[derive(Debug)]
pub struct Builtins {
    /// Every generated component, by name (kinds carry `x-kubernetes-group-version-kind`).
    pub components: Map<String, Value>,
    /// The component name of each built-in kind.
    pub kinds: BTreeMap<Gvk, String>,
}

fn add<T: JsonSchema + k8s_openapi::Resource>(
    generator: &mut SchemaGenerator,
    kinds: &mut BTreeMap<Gvk, String>,
) {
    generator.subschema_for::<T>();
    kinds.insert(
        (T::GROUP.to_owned(), T::VERSION.to_owned(), T::KIND.to_owned()),
        T::schema_name().into_owned(),
    );
}

/// The built-in schemas, generated once.
pub fn builtins() -> &'static Builtins {
    static BUILTINS: OnceLock<Builtins> = OnceLock::new();
    BUILTINS.get_or_init(|| {
        let mut generator = SchemaSettings::openapi3().into_generator();
        let mut kinds = BTreeMap::new();
        let g = &mut generator;
        let k = &mut kinds;
        g.subschema_for::<ObjectMeta>();
        g.subschema_for::<ListMeta>();
        add::<core::v1::Namespace>(g, k);
        add::<core::v1::Pod>(g, k);
        add::<core::v1::Node>(g, k);
        add::<core::v1::ConfigMap>(g, k);
        add::<core::v1::Secret>(g, k);
        add::<core::v1::Service>(g, k);
        add::<core::v1::ServiceAccount>(g, k);
        add::<core::v1::Event>(g, k);
        add::<core::v1::Endpoints>(g, k);
        add::<core::v1::ReplicationController>(g, k);
        add::<core::v1::PersistentVolumeClaim>(g, k);
        add::<core::v1::PersistentVolume>(g, k);
        add::<core::v1::ResourceQuota>(g, k);
        add::<core::v1::LimitRange>(g, k);
        add::<apps::v1::Deployment>(g, k);
        add::<apps::v1::ReplicaSet>(g, k);
        add::<apps::v1::StatefulSet>(g, k);
        add::<apps::v1::DaemonSet>(g, k);
        add::<apps::v1::ControllerRevision>(g, k);
        add::<batch::v1::Job>(g, k);
        add::<batch::v1::CronJob>(g, k);
        add::<coordination::v1::Lease>(g, k);
        add::<events::v1::Event>(g, k);
        add::<apiextensions::v1::CustomResourceDefinition>(g, k);
        add::<certificates::v1::CertificateSigningRequest>(g, k);
        add::<policy::v1::PodDisruptionBudget>(g, k);
        add::<discovery::v1::EndpointSlice>(g, k);
        add::<networking::v1::Ingress>(g, k);
        add::<scheduling::v1::PriorityClass>(g, k);
        add::<rbac::v1::Role>(g, k);
        add::<rbac::v1::RoleBinding>(g, k);
        add::<rbac::v1::ClusterRole>(g, k);
        add::<rbac::v1::ClusterRoleBinding>(g, k);
        add::<authorization::v1::SelfSubjectAccessReview>(g, k);
        let mut components = generator.take_definitions(true);
        for ((group, version, kind), name) in &kinds {
            if let Some(Value::Object(schema)) = components.get_mut(name) {
                schema.insert(
                    "x-kubernetes-group-version-kind".into(),
                    gvk_extension(group, version, kind),
                );
            }
        }
        Builtins { components, kinds }
    })
}

fn gvk_extension(group: &str, version: &str, kind: &str) -> Value {
    json!([{"group": group, "kind": kind, "version": version}])
}

fn ref_to(name: &str) -> Value {
    json!({"$ref": format!("{REF_PREFIX}{name}")})
}

/// A `$ref` with a description of its own, the way OpenAPI 3.0 allows it (`allOf` + siblings).
fn described_ref(name: &str, description: &str) -> Value {
    json!({"allOf": [ref_to(name)], "description": description})
}

/// The component name the API server gives a custom kind: the group reversed, then version and
/// kind (`nave.dev`, `v1alpha1`, `WorkloadCluster` → `dev.nave.v1alpha1.WorkloadCluster`).
pub fn component_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

fn add_type_meta(schema: &mut Map<String, Value>) {
    let properties = schema
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    if let Some(properties) = properties {
        properties.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": API_VERSION_DESCRIPTION}),
        );
        properties.insert(
            "kind".into(),
            json!({"type": "string", "description": KIND_DESCRIPTION}),
        );
    }
}

/// Gives nested `x-kubernetes-embedded-resource` objects their `apiVersion`, `kind` and
/// `metadata`, as the API server does.
fn add_embedded_type_meta(schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    if obj.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true)) {
        add_type_meta(obj);
        if let Some(Value::Object(properties)) = obj.get_mut("properties") {
            properties.insert("metadata".into(), ref_to(OBJECT_META));
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = obj.get_mut(key) {
            add_embedded_type_meta(sub);
        }
    }
    if let Some(Value::Object(properties)) = obj.get_mut("properties") {
        for sub in properties.values_mut() {
            add_embedded_type_meta(sub);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(subs)) = obj.get_mut(key) {
            for sub in subs {
                add_embedded_type_meta(sub);
            }
        }
    }
}

/// The kind and list components of one served version of a CRD: its structural schema with
/// descriptions kept, `apiVersion`/`kind` and an `ObjectMeta` `metadata`, and
/// `x-kubernetes-group-version-kind`.
pub fn custom_components(
    (group, version, kind): (&str, &str, &str),
    list_kind: &str,
    plural: &str,
    structural: Option<&Value>,
) -> [(String, Value); 2] {
    let name = component_name(group, version, kind);
    let mut schema = match structural {
        Some(Value::Object(s)) => {
            let mut s = s.clone();
            // The root's embedded metadata properties are the API server's, not the CRD's.
            s.remove("x-kubernetes-embedded-resource");
            let mut v = Value::Object(s);
            add_embedded_type_meta(&mut v);
            match v {
                Value::Object(s) => s,
                _ => Map::new(),
            }
        }
        _ => Map::new(),
    };
    schema.insert("type".into(), json!("object"));
    if structural.is_some() {
        add_type_meta(&mut schema);
        if let Some(Value::Object(properties)) = schema.get_mut("properties") {
            properties.insert(
                "metadata".into(),
                described_ref(OBJECT_META, METADATA_DESCRIPTION),
            );
        }
    }
    schema.insert(
        "x-kubernetes-group-version-kind".into(),
        gvk_extension(group, version, kind),
    );

    let mut list = json!({
        "type": "object",
        "description": format!("{list_kind} is a list of {kind}"),
        "required": ["items"],
        "properties": {
            "items": {
                "type": "array",
                "description": format!("List of {plural}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"),
                "items": ref_to(&name),
            },
            "metadata": described_ref(LIST_META, LIST_METADATA_DESCRIPTION),
        },
        "x-kubernetes-group-version-kind": gvk_extension(group, version, list_kind),
    });
    if let Value::Object(l) = &mut list {
        add_type_meta(l);
    }
    [
        (name, Value::Object(schema)),
        (component_name(group, version, list_kind), list),
    ]
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref")
                && let Some(name) = r.strip_prefix(REF_PREFIX)
            {
                out.push(name.to_owned());
            }
            for sub in m.values() {
                collect_refs(sub, out);
            }
        }
        Value::Array(a) => {
            for sub in a {
                collect_refs(sub, out);
            }
        }
        _ => {}
    }
}

/// Adds to `components` every built-in component that the schemas already in it refer to,
/// transitively, so that each document resolves its own `$ref`s.
pub fn close_over_refs(components: &mut Map<String, Value>) {
    let library = &builtins().components;
    let mut pending = Vec::new();
    for v in components.values() {
        collect_refs(v, &mut pending);
    }
    while let Some(name) = pending.pop() {
        if components.contains_key(&name) {
            continue;
        }
        if let Some(schema) = library.get(&name) {
            collect_refs(schema, &mut pending);
            components.insert(name, schema.clone());
        }
    }
}
