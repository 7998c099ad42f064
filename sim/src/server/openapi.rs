//! Minimal OpenAPI v3 (R-O-1): per group-version documents with one PATCH operation per resource
//! carrying `x-kubernetes-group-version-kind` and the `fieldValidation` parameter, which is what
//! `kubectl apply` checks before sending `fieldValidation=Strict`.  No component schemas, and so
//! no strategic-merge-patch content type (kubectl then falls back to its compiled-in types).
//! `/openapi/v2` answers 404 (R-O-2).

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Map, Value, json};

use super::ClusterState;
use super::error::{ApiError, ApiResult};

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

fn document(state: &ClusterState, group: &str, version: &str) -> Option<Value> {
    let reg = state.registry.read().unwrap_or_else(|e| e.into_inner());
    let resources = reg.by_gv.get(&(group.to_owned(), version.to_owned()))?;
    let mut paths = Map::new();
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    for rt in resources.values() {
        let item = if rt.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", rt.plural)
        } else {
            format!("{prefix}/{}/{{name}}", rt.plural)
        };
        let op = json!({
            "operationId": format!("patch{}", rt.kind),
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                {"name": "force", "in": "query", "schema": {"type": "boolean"}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string"}}
            ],
            "requestBody": {"required": true, "content": {
                "application/apply-patch+yaml": {"schema": {"type": "object"}},
                "application/json-patch+json": {"schema": {"type": "object"}},
                "application/merge-patch+json": {"schema": {"type": "object"}}
            }},
            "responses": {"200": {"description": "OK"}, "201": {"description": "Created"}}
        });
        paths.insert(item, json!({"patch": op}));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {}}
    }))
}

fn respond(v: &Value) -> Response {
    let mut r = (StatusCode::OK, v.to_string()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// `GET /openapi/v3` and `/openapi/v3/<gv>`.
pub fn serve_v3(state: &ClusterState, rest: &str) -> ApiResult<Response> {
    let rest = rest.trim_matches('/');
    if rest.is_empty() {
        let gvs: Vec<(String, String)> = {
            let reg = state.registry.read().unwrap_or_else(|e| e.into_inner());
            reg.by_gv.keys().cloned().collect()
        };
        let mut paths = Map::new();
        for (g, v) in gvs {
            let p = gv_path(&g, &v);
            let h = document(state, &g, &v)
                .map(|d| hash_of(&d.to_string()))
                .unwrap_or_default();
            paths.insert(
                p.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={h}")}),
            );
        }
        return Ok(respond(&json!({"paths": paths})));
    }
    let segs: Vec<&str> = rest.split('/').collect();
    let (g, v) = match segs.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => return Err(ApiError::no_route(rest)),
    };
    document(state, g, v)
        .map(|d| respond(&d))
        .ok_or_else(|| ApiError::no_route(rest))
}
