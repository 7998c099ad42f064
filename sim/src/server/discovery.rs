//! Discovery: aggregated `apidiscovery.k8s.io/v2` documents on `/api` and `/apis` when the
//! client asks for them (client-go picks the decoder from the response Content-Type only), and the
//! legacy `APIVersions` / `APIGroupList` / `APIGroup` / `APIResourceList` otherwise (kube-rs
//! `Discovery::run` sends no Accept).  Both are computed from the live registry.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use super::ClusterState;
use super::error::{ApiError, ApiResult};
use super::resources::{Registry, ResourceType};

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

fn wants_aggregated(accept: Option<&str>) -> bool {
    let Some(a) = accept else { return false };
    for part in a.split(',') {
        let params: Vec<&str> = part.split(';').map(str::trim).collect();
        let has = |p: &str| params.iter().any(|x| x.replace(' ', "") == p);
        if has("as=APIGroupDiscoveryList") && has("g=apidiscovery.k8s.io") && has("v=v2") {
            return true;
        }
        // The first acceptable plain type wins over later aggregated ones.
        if params.first().is_some_and(|m| *m == "application/json") && params.len() == 1 {
            return false;
        }
    }
    false
}

fn respond(v: &Value, ct: &'static str) -> Response {
    let mut r = (StatusCode::OK, v.to_string()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    r
}

fn aggregated_resource(rt: &ResourceType) -> Value {
    let mut r = json!({
        "resource": rt.plural,
        "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": rt.singular,
        "verbs": rt.verbs(),
    });
    if !rt.short_names.is_empty() {
        r["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        r["categories"] = json!(rt.categories);
    }
    let subs: Vec<Value> = rt
        .subresources()
        .into_iter()
        .map(|(name, (g, v, k), verbs)| {
            json!({"subresource": name, "responseKind": {"group": g, "version": v, "kind": k}, "verbs": verbs})
        })
        .collect();
    if !subs.is_empty() {
        r["subresources"] = json!(subs);
    }
    r
}

fn aggregated_group(reg: &Registry, group: &str) -> Value {
    let versions: Vec<Value> = reg
        .group_versions
        .get(group)
        .map(|vs| {
            vs.iter()
                .map(|v| {
                    let resources: Vec<Value> = reg
                        .by_gv
                        .get(&(group.to_owned(), v.clone()))
                        .map(|m| m.values().map(|rt| aggregated_resource(rt)).collect())
                        .unwrap_or_default();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect()
        })
        .unwrap_or_default();
    let mut meta = json!({"creationTimestamp": null});
    if !group.is_empty() {
        meta["name"] = json!(group);
    }
    json!({"metadata": meta, "versions": versions})
}

fn legacy_resources(reg: &Registry, group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    if let Some(m) = reg.by_gv.get(&(group.to_owned(), version.to_owned())) {
        for rt in m.values() {
            let mut r = json!({
                "name": rt.plural,
                "singularName": rt.singular,
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": rt.verbs(),
            });
            if !rt.short_names.is_empty() {
                r["shortNames"] = json!(rt.short_names);
            }
            if !rt.categories.is_empty() {
                r["categories"] = json!(rt.categories);
            }
            resources.push(r);
            for (name, (g, v, k), verbs) in rt.subresources() {
                let mut s = json!({
                    "name": format!("{}/{name}", rt.plural),
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": k,
                    "verbs": verbs,
                });
                if g != rt.group || v != rt.version {
                    s["group"] = json!(g);
                    s["version"] = json!(v);
                }
                resources.push(s);
            }
        }
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

fn legacy_group(reg: &Registry, group: &str) -> Value {
    let versions: Vec<Value> = reg
        .group_versions
        .get(group)
        .map(|vs| {
            vs.iter()
                .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
                .collect()
        })
        .unwrap_or_default();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions, "preferredVersion": preferred})
}

/// Serves a discovery path (`/api`, `/api/v1`, `/apis`, `/apis/<g>`, `/apis/<g>/<v>`).
pub fn serve(state: &ClusterState, path: &str, accept: Option<&str>) -> ApiResult<Response> {
    let reg = state.registry.read().unwrap_or_else(|e| e.into_inner()).clone();
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let aggregated = wants_aggregated(accept);
    match segs.as_slice() {
        ["api"] => {
            if aggregated {
                let doc = json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": [aggregated_group(&reg, "")]});
                return Ok(respond(&doc, AGGREGATED));
            }
            let addr = state.address();
            Ok(respond(
                &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]}),
                "application/json",
            ))
        }
        ["api", "v1"] => Ok(respond(&legacy_resources(&reg, "", "v1"), "application/json")),
        ["apis"] => {
            let groups: Vec<&String> = reg.group_order.iter().filter(|g| !g.is_empty()).collect();
            if aggregated {
                let items: Vec<Value> = groups.iter().map(|g| aggregated_group(&reg, g)).collect();
                let doc = json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items});
                return Ok(respond(&doc, AGGREGATED));
            }
            let items: Vec<Value> = groups
                .iter()
                .map(|g| {
                    let mut v = legacy_group(&reg, g);
                    if let Some(m) = v.as_object_mut() {
                        m.remove("kind");
                        m.remove("apiVersion");
                    }
                    v
                })
                .collect();
            Ok(respond(
                &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": items}),
                "application/json",
            ))
        }
        ["apis", g] => {
            if !reg.group_versions.contains_key(*g) {
                return Err(ApiError::no_route(path));
            }
            Ok(respond(&legacy_group(&reg, g), "application/json"))
        }
        ["apis", g, v] => {
            if !reg.has_gv(g, v) {
                return Err(ApiError::no_route(path));
            }
            Ok(respond(&legacy_resources(&reg, g, v), "application/json"))
        }
        _ => Err(ApiError::no_route(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_accept_selects_aggregated() {
        let a = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert!(wants_aggregated(Some(a)));
        assert!(!wants_aggregated(None));
        assert!(!wants_aggregated(Some("application/json, */*")));
    }

    #[test]
    fn metrics_group_serves_pods_and_nodes_with_get_and_list_only() {
        let reg = Registry::new();
        let legacy = legacy_resources(&reg, "metrics.k8s.io", "v1beta1");
        let seen: Vec<(String, bool, String, Value)> = legacy["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap_or_default().to_owned(),
                    r["namespaced"].as_bool().unwrap_or_default(),
                    r["kind"].as_str().unwrap_or_default().to_owned(),
                    r["verbs"].clone(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                (
                    "nodes".to_owned(),
                    false,
                    "NodeMetrics".to_owned(),
                    json!(["get", "list"])
                ),
                (
                    "pods".to_owned(),
                    true,
                    "PodMetrics".to_owned(),
                    json!(["get", "list"])
                ),
            ]
        );
        let aggregated = aggregated_group(&reg, "metrics.k8s.io");
        assert_eq!(aggregated["versions"][0]["version"], "v1beta1");
        assert_eq!(aggregated["versions"][0]["resources"][1]["scope"], "Namespaced");
        assert_eq!(
            legacy_group(&reg, "metrics.k8s.io")["preferredVersion"]["groupVersion"],
            "metrics.k8s.io/v1beta1"
        );
    }

    #[test]
    fn legacy_apps_lists_scale_subresource() {
        let reg = Registry::new();
        let doc = legacy_resources(&reg, "apps", "v1");
        let scale = doc["resources"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["name"] == "deployments/scale"))
            .cloned()
            .expect("deployments/scale");
        assert_eq!(scale["group"], "autoscaling");
        assert_eq!(scale["kind"], "Scale");
    }
}
