//! OpenAPI v3: one document per served group-version, listed in `/openapi/v3`
//! with a hash of its content, so that clients re-fetch a document exactly when it changed (a CRD
//! was added, updated or removed).  `/openapi/v2` answers 404, so that kubectl
//! uses v3 only.
//!
//! A document has, for every resource, its collection, item and status paths, each operation
//! carrying `x-kubernetes-group-version-kind` (`kubectl explain` finds the kind through them); the
//! PATCH operation lists the `fieldValidation` parameter (`kubectl apply` checks it before sending
//! `fieldValidation=Strict`).  `components.schemas` holds the kinds' schemas and everything they
//! refer to: built-ins from the upstream type descriptions, custom resources converted from the
//! CRD's structural schema (`schemas`).  No strategic-merge-patch content type is advertised, as
//! the schemas carry no patch strategies: kubectl then uses its compiled-in types.
//!
//! ```text
//!  GET /openapi/v3            {"paths": {"apis/nave.dev/v1alpha1": {"serverRelativeURL": "…?hash=H"}}}
//!  GET /openapi/v3/apis/g/v   {"openapi": "3.0.0", "paths": {…}, "components": {"schemas": {…}}}
//! ```

pub mod schemas;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Map, Value, json};

use super::ClusterState;
use super::error::{ApiError, ApiResult};
use super::resources::{Registry, ResourceType};

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn hash_of(s: &str) -> String {
    // FNV-1a: stable and good enough to change when the document changes.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

/// `nave.dev` → `NaveDev`, `rbac.authorization.k8s.io` → `RbacAuthorization`, core → `Core`.
fn camel(s: &str) -> String {
    let s = s.strip_suffix(".k8s.io").unwrap_or(s);
    if s.is_empty() {
        return "Core".to_owned();
    }
    s.split(['.', '-'])
        .map(|part| {
            let mut c = part.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

/// The schema names of a resource's kind and list kind, when the document has them.
struct Refs {
    kind: Option<String>,
    list: Option<String>,
}

fn response(schema: Option<&String>) -> Value {
    match schema {
        Some(name) => {
            json!({"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("{}{name}", schemas::REF_PREFIX)}}}})
        }
        None => json!({"description": "OK"}),
    }
}

fn patch_body() -> Value {
    json!({"required": true, "content": {
        "application/apply-patch+yaml": {"schema": {"type": "object"}},
        "application/json-patch+json": {"schema": {"type": "object"}},
        "application/merge-patch+json": {"schema": {"type": "object"}}
    }})
}

fn write_body(schema: Option<&String>) -> Value {
    let schema = match schema {
        Some(name) => json!({"$ref": format!("{}{name}", schemas::REF_PREFIX)}),
        None => json!({"type": "object"}),
    };
    json!({"required": true, "content": {"application/json": {"schema": schema}}})
}

fn query_params(names: &[(&str, &str)]) -> Vec<Value> {
    names
        .iter()
        .map(|(name, ty)| json!({"name": name, "in": "query", "schema": {"type": ty, "uniqueItems": true}}))
        .collect()
}

fn path_params(rt: &ResourceType, item: bool) -> Value {
    let mut params = Vec::new();
    if item {
        params.push(json!({"name": "name", "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}}));
    }
    if rt.namespaced {
        params.push(json!({"name": "namespace", "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}}));
    }
    Value::Array(params)
}

/// The collection, item and status paths of one resource.
fn resource_paths(rt: &ResourceType, refs: &Refs, paths: &mut Map<String, Value>) {
    let prefix = format!("/{}", gv_path(&rt.group, &rt.version));
    let scope = if rt.namespaced {
        "/namespaces/{namespace}"
    } else {
        ""
    };
    let collection = format!("{prefix}{scope}/{}", rt.plural);
    let item = format!("{collection}/{{name}}");
    let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let id = |verb: &str, suffix: &str| {
        let namespaced = if rt.namespaced { "Namespaced" } else { "" };
        format!(
            "{verb}{}{}{namespaced}{}{suffix}",
            camel(&rt.group),
            camel(&rt.version),
            rt.kind
        )
    };
    let op = |verb: &str, action: &str, suffix: &str, extra: Value| {
        let mut o = json!({
            "operationId": id(verb, suffix),
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
        });
        if let (Value::Object(o), Value::Object(extra)) = (&mut o, extra) {
            o.extend(extra);
        }
        o
    };
    let write_params = query_params(&[
        ("dryRun", "string"),
        ("fieldManager", "string"),
        ("fieldValidation", "string"),
    ]);
    let mut patch_params = write_params.clone();
    patch_params.extend(query_params(&[("force", "boolean")]));
    let verbs = rt.verbs();

    let mut coll = Map::new();
    coll.insert("parameters".into(), path_params(rt, false));
    if verbs.contains(&"list") {
        coll.insert(
            "get".into(),
            op(
                "list",
                "list",
                "",
                json!({"responses": {"200": response(refs.list.as_ref())}}),
            ),
        );
    }
    if verbs.contains(&"create") {
        coll.insert(
            "post".into(),
            op(
                "create",
                "post",
                "",
                json!({
                    "parameters": write_params,
                    "requestBody": write_body(refs.kind.as_ref()),
                    "responses": {"200": response(refs.kind.as_ref()), "201": response(refs.kind.as_ref())}
                }),
            ),
        );
    }
    paths.insert(collection, Value::Object(coll));

    let mut one = Map::new();
    one.insert("parameters".into(), path_params(rt, true));
    // Only the verbs the resource serves: the read-only ones (APIServices, the resource metrics)
    // advertise no writes.
    let item_ops = |one: &mut Map<String, Value>, suffix: &str, verbs: &[&str]| {
        one.insert(
            "get".into(),
            op(
                "read",
                "get",
                suffix,
                json!({"responses": {"200": response(refs.kind.as_ref())}}),
            ),
        );
        if verbs.contains(&"update") {
            one.insert(
                "put".into(),
                op(
                    "replace",
                    "put",
                    suffix,
                    json!({
                        "parameters": write_params,
                        "requestBody": write_body(refs.kind.as_ref()),
                        "responses": {"200": response(refs.kind.as_ref()), "201": response(refs.kind.as_ref())}
                    }),
                ),
            );
        }
        if verbs.contains(&"patch") {
            one.insert(
                "patch".into(),
                op(
                    "patch",
                    "patch",
                    suffix,
                    json!({
                        "parameters": patch_params,
                        "requestBody": patch_body(),
                        "responses": {"200": response(refs.kind.as_ref()), "201": response(refs.kind.as_ref())}
                    }),
                ),
            );
        }
    };
    if verbs.contains(&"get") {
        item_ops(&mut one, "", &verbs);
        if verbs.contains(&"delete") {
            one.insert(
                "delete".into(),
                op(
                    "delete",
                    "delete",
                    "",
                    json!({"responses": {"200": {"description": "OK"}}}),
                ),
            );
        }
        paths.insert(item.clone(), Value::Object(one));
    }
    if rt.status {
        let mut status = Map::new();
        status.insert("parameters".into(), path_params(rt, true));
        item_ops(&mut status, "Status", &["get", "patch", "update"]);
        paths.insert(format!("{item}/status"), Value::Object(status));
    }
}

/// A rendered document and its hash.
#[derive(Debug)]
struct Rendered {
    body: String,
    hash: String,
}

fn render(resources: &BTreeMap<String, Arc<ResourceType>>) -> Rendered {
    let builtins = schemas::builtins();
    let mut paths = Map::new();
    let mut components = Map::new();
    for rt in resources.values() {
        let refs = match &rt.custom {
            Some(custom) => {
                let [(kind, kind_schema), (list, list_schema)] = schemas::custom_components(
                    (&rt.group, &rt.version, &rt.kind),
                    &rt.list_kind,
                    &rt.plural,
                    custom.openapi_schema.as_deref(),
                );
                components.insert(kind.clone(), kind_schema);
                components.insert(list.clone(), list_schema);
                Refs {
                    kind: Some(kind),
                    list: Some(list),
                }
            }
            None => {
                let key = (rt.group.clone(), rt.version.clone(), rt.kind.clone());
                let kind = builtins.kinds.get(&key).cloned();
                if let Some(name) = &kind
                    && let Some(schema) = builtins.components.get(name)
                {
                    components.insert(name.clone(), schema.clone());
                }
                Refs { kind, list: None }
            }
        };
        resource_paths(rt, &refs, &mut paths);
    }
    schemas::close_over_refs(&mut components);
    let body = json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": components}
    })
    .to_string();
    Rendered {
        hash: hash_of(&body),
        body,
    }
}

/// Rendered documents by `(group, version)`.
type DocumentCache = Mutex<BTreeMap<(String, String), Arc<Rendered>>>;

/// Built-in group-versions never change: render them once.
fn builtin_cache() -> &'static DocumentCache {
    static CACHE: OnceLock<DocumentCache> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

fn document(reg: &Registry, group: &str, version: &str) -> Option<Arc<Rendered>> {
    let key = (group.to_owned(), version.to_owned());
    let resources = reg.by_gv.get(&key)?;
    if resources.values().any(|rt| rt.is_custom()) {
        return Some(Arc::new(render(resources)));
    }
    let mut cache = builtin_cache().lock().unwrap_or_else(|e| e.into_inner());
    Some(
        cache
            .entry(key)
            .or_insert_with(|| Arc::new(render(resources)))
            .clone(),
    )
}

fn respond(body: String) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// `GET /openapi/v3` and `/openapi/v3/<gv>`.
pub fn serve_v3(state: &ClusterState, rest: &str) -> ApiResult<Response> {
    let reg = state.registry.read().unwrap_or_else(|e| e.into_inner()).clone();
    let rest = rest.trim_matches('/');
    if rest.is_empty() {
        let mut paths = Map::new();
        for (g, v) in reg.by_gv.keys() {
            let p = gv_path(g, v);
            let hash = document(&reg, g, v).map(|d| d.hash.clone()).unwrap_or_default();
            paths.insert(
                p.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}),
            );
        }
        return Ok(respond(json!({"paths": paths}).to_string()));
    }
    let segs: Vec<&str> = rest.split('/').collect();
    let (g, v) = match segs.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => return Err(ApiError::no_route(rest)),
    };
    document(&reg, g, v)
        .map(|d| respond(d.body.clone()))
        .ok_or_else(|| ApiError::no_route(rest))
}
