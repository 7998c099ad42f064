//! The generic REST surface under `/api` and `/apis`: URL parsing, content negotiation,
//! query parameters, and the verbs (get, list, watch, create, update, patch, apply, delete,
//! deletecollection) with their subresources (status, scale, binding, eviction, finalize; log,
//! exec, attach, portforward and token answer from [`super::subresources`]).  The
//! `metrics.k8s.io` resources are computed, not stored: [`super::resource_metrics`] gives their
//! objects and the generic list pages, filters and renders them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use nave_sim_core::selector::{self, FieldSelector, FieldSelectorKind, LabelSelector};
use serde_json::{Value, json};

use super::ClusterState;
use super::admission;
use super::convert;
use super::error::{ApiError, ApiResult, Cause};
use super::meta::{self, meta_str};
use super::resource_metrics;
use super::resources::{ResourceType, Special};
use super::subresources;
use super::table::{self, Include};
use super::watch::{self, WatchParams};
use super::write::{self, DeleteOpts, Deleted, FieldValidation, WriteOpts, Written};

/// Largest accepted request body: the API server's 3 MiB limit, answered with 413.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// The response representation negotiated from `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Plain JSON objects.
    Json,
    /// `meta.k8s.io/v1` Table.
    Table(Include),
    /// `PartialObjectMetadata` / `PartialObjectMetadataList`.
    Partial,
}

/// Picks the first acceptable representation from an `Accept` header.
pub fn negotiate(accept: Option<&str>, include: Include) -> ApiResult<Format> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Format::Json);
    };
    for part in accept.split(',') {
        let mut params = part.split(';').map(str::trim);
        let media = params.next().unwrap_or_default().to_ascii_lowercase();
        let mut as_ = None;
        let mut g = None;
        for p in params {
            if let Some((k, v)) = p.split_once('=') {
                match k.trim() {
                    "as" => as_ = Some(v.trim().to_owned()),
                    "g" => g = Some(v.trim().to_owned()),
                    _ => {}
                }
            }
        }
        if !matches!(
            media.as_str(),
            "application/json" | "*/*" | "application/*" | "application/yaml"
        ) {
            continue;
        }
        match (as_.as_deref(), g.as_deref()) {
            (None, _) => return Ok(Format::Json),
            (Some("Table"), Some("meta.k8s.io")) => return Ok(Format::Table(include)),
            (Some("PartialObjectMetadata" | "PartialObjectMetadataList"), Some("meta.k8s.io")) => {
                return Ok(Format::Partial);
            }
            _ => continue,
        }
    }
    Err(ApiError::not_acceptable())
}

/// Label and field selectors of a list, watch or deletecollection.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    label: Option<LabelSelector>,
    field: Option<FieldSelector>,
}

impl Filter {
    /// Parses `labelSelector` / `fieldSelector` and checks the fields `rt` supports.
    pub fn parse(rt: &ResourceType, q: &Query) -> ApiResult<Filter> {
        let label = match q.get("labelSelector").filter(|s| !s.trim().is_empty()) {
            Some(s) => Some(LabelSelector::parse(s).map_err(|e| ApiError::bad_request(e.0))?),
            None => None,
        };
        let field = match q.get("fieldSelector").filter(|s| !s.trim().is_empty()) {
            Some(s) => {
                let f = FieldSelector::parse(s).map_err(|e| ApiError::bad_request(e.0))?;
                let kind = match &rt.custom {
                    Some(c) => FieldSelectorKind::Custom {
                        group: &rt.group,
                        version: &rt.version,
                        kind: &rt.kind,
                        selectable_fields: &c.selectable_fields,
                    },
                    None if rt.special == Special::EventsV1 => FieldSelectorKind::Builtin {
                        group: "",
                        kind: "Event",
                    },
                    None => FieldSelectorKind::Builtin {
                        group: &rt.group,
                        kind: &rt.kind,
                    },
                };
                selector::check_field_labels(&f, kind).map_err(|e| ApiError::bad_request(e.0))?;
                Some(f)
            }
            None => None,
        };
        Ok(Filter { label, field })
    }

    /// Whether a stored object matches.
    pub fn matches(&self, rt: &ResourceType, obj: &Value) -> bool {
        if let Some(l) = &self.label
            && !l.matches_object(obj)
        {
            return false;
        }
        if let Some(f) = &self.field {
            let (group, kind) = if rt.special == Special::EventsV1 {
                ("", "Event")
            } else {
                (rt.group.as_str(), rt.kind.as_str())
            };
            let custom = rt.is_custom();
            return f.matches(&|label: &str| {
                if custom {
                    selector::field_value(obj, label)
                } else {
                    selector::builtin_field_value(group, kind, obj, label)
                }
            });
        }
        true
    }
}

/// Query parameters (last value wins; empty pairs skipped; unknown ignored).
#[derive(Debug, Clone, Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    /// Parses a raw query string.
    pub fn parse(raw: Option<&str>) -> Query {
        let mut m = HashMap::new();
        if let Some(raw) = raw {
            let uri: http::Uri = match format!("/?{raw}").parse() {
                Ok(u) => u,
                Err(_) => return Query(m),
            };
            if let Ok(axum::extract::Query(pairs)) =
                axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&uri)
            {
                for (k, v) in pairs {
                    if !k.is_empty() {
                        m.insert(k, v);
                    }
                }
            }
        }
        Query(m)
    }

    /// One parameter.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }
}

/// A parsed API path.
#[derive(Debug)]
struct Target {
    rt: Arc<ResourceType>,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

enum Parsed {
    Target(Target),
    Discovery,
}

fn parse_path(state: &ClusterState, path: &str) -> ApiResult<Parsed> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api"] | ["apis"] | ["apis", _] | ["api", "v1"] | ["apis", _, _] => return Ok(Parsed::Discovery),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::no_route(path)),
    };
    let reg = state.registry.read().unwrap_or_else(|e| e.into_inner());
    let lookup = |plural: &str| {
        reg.get(group, version, plural)
            .ok_or_else(|| ApiError::no_route(path))
    };
    let (rt, ns, name, sub) = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if !(group.is_empty() && matches!(*plural, "status" | "finalize")) =>
        {
            let rt = lookup(plural)?;
            if !rt.namespaced {
                return Err(ApiError::no_route(path));
            }
            match tail {
                [] => (rt, Some(*ns), None, None),
                [name] => (rt, Some(*ns), Some(*name), None),
                [name, sub] => (rt, Some(*ns), Some(*name), Some(*sub)),
                _ => return Err(ApiError::no_route(path)),
            }
        }
        [plural, tail @ ..] => {
            let rt = lookup(plural)?;
            match tail {
                [] => (rt, None, None, None),
                [name] if !rt.namespaced => (rt, None, Some(*name), None),
                [name, sub] if !rt.namespaced => (rt, None, Some(*name), Some(*sub)),
                _ => return Err(ApiError::no_route(path)),
            }
        }
        [] => return Ok(Parsed::Discovery),
    };
    if let Some(s) = sub {
        let known = rt.subresources().iter().any(|(n, _, _)| *n == s);
        if !known {
            return Err(ApiError::no_route(path));
        }
    }
    Ok(Parsed::Target(Target {
        rt,
        ns: ns.map(str::to_owned),
        name: name.map(str::to_owned),
        sub: sub.map(str::to_owned),
    }))
}

/// Handles one request under `/api` or `/apis`.
pub async fn handle(state: Arc<ClusterState>, req: Request) -> Response {
    match handle_inner(state, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn json_response(code: StatusCode, v: &Value, content_type: &'static str, warnings: &[String]) -> Response {
    let body = serde_json::to_vec(v).unwrap_or_default();
    let mut resp = (code, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    for w in warnings {
        let text = format!("299 - {:?}", w);
        if let Ok(v) = HeaderValue::from_str(&text) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

async fn read_body(body: Body) -> ApiResult<bytes::Bytes> {
    axum::body::to_bytes(body, MAX_BODY).await.map_err(|e| {
        let too_large = std::error::Error::source(&e)
            .is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
            || e.to_string().contains("length limit");
        if too_large {
            ApiError::too_large("Request entity too large: limit is 3145728")
        } else {
            ApiError::bad_request(format!("unable to read the request body: {e}"))
        }
    })
}

fn parse_json(bytes: &[u8]) -> ApiResult<Value> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    if bytes.starts_with(super::proto::MAGIC) {
        return super::proto::decode(bytes).map_err(|e| {
            ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("the body of the request was in an unknown format: {e}"),
            )
        });
    }
    serde_json::from_slice(bytes)
        .or_else(|_| {
            std::str::from_utf8(bytes)
                .map_err(|e| e.to_string())
                .and_then(|s| serde_saphyr::from_str::<Value>(s).map_err(|e| e.to_string()))
        })
        .map_err(|e| {
            ApiError::bad_request(format!(
                "the object provided is unrecognized (must be JSON or YAML): {e}"
            ))
        })
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|s| {
            s.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

fn manager_of(q: &Query, headers: &HeaderMap) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.to_owned();
    }
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_owned()
}

fn write_opts(q: &Query, headers: &HeaderMap, sub: Option<&str>) -> ApiResult<WriteOpts> {
    let validation = match q.get("fieldValidation") {
        None | Some("") => FieldValidation::Warn,
        Some("Ignore") => FieldValidation::Ignore,
        Some("Warn") => FieldValidation::Warn,
        Some("Strict") => FieldValidation::Strict,
        Some(other) => {
            return Err(ApiError::invalid_kind(
                "PatchOptions",
                "meta.k8s.io",
                "",
                &[Cause::new(
                    "FieldValueNotSupported",
                    "fieldValidation",
                    format!(
                        "Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
                    ),
                )],
            ));
        }
    };
    let dry_run = match q.get("dryRun") {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::invalid_kind(
                "PatchOptions",
                "meta.k8s.io",
                "",
                &[Cause::new(
                    "FieldValueNotSupported",
                    "dryRun",
                    format!("Unsupported value: {other:?}: supported values: \"All\""),
                )],
            ));
        }
    };
    Ok(WriteOpts {
        manager: manager_of(q, headers),
        dry_run,
        validation,
        subresource: sub.map(str::to_owned),
    })
}

async fn handle_inner(state: Arc<ClusterState>, req: Request) -> ApiResult<Response> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let q = Query::parse(parts.uri.query());
    let accept = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let include = match q.get("includeObject") {
        Some("None") => Include::None,
        Some("Object") => Include::Object,
        _ => Include::Metadata,
    };
    let target = match parse_path(&state, &path)? {
        Parsed::Discovery => {
            if parts.method != Method::GET {
                return Err(ApiError::method_not_allowed(parts.method.as_str(), None));
            }
            return super::discovery::serve(&state, &path, accept.as_deref());
        }
        Parsed::Target(t) => t,
    };
    let format = negotiate(accept.as_deref(), include)?;
    let Target { rt, ns, name, sub } = target;
    if rt.special == Special::ApiService && parts.method != Method::GET {
        return Err(ApiError::method_not_allowed(parts.method.as_str(), Some(&rt)));
    }
    let ns_str = ns.clone().unwrap_or_default();
    if rt.special == Special::ResourceMetrics {
        return match (parts.method, name) {
            (Method::GET, None) if q.flag("watch") => Err(ApiError::method_not_supported(&rt, "watch")),
            (Method::GET, None) => list(&state, &rt, ns.as_deref(), &q, format),
            (Method::GET, Some(name)) => {
                let obj = resource_metrics::get(&state, &rt, &ns_str, &name)?;
                Ok(render_object(&rt, &obj, format, StatusCode::OK, &[]))
            }
            (m, _) => Err(ApiError::method_not_allowed(m.as_str(), Some(&rt))),
        };
    }
    let method = parts.method.clone();
    let user = state.user_of(
        parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    );
    match (method.clone(), name, sub.as_deref()) {
        (Method::GET, None, None) => {
            if q.flag("watch") {
                return watch_collection(&state, &rt, ns, &q, format);
            }
            list(&state, &rt, ns.as_deref(), &q, format)
        }
        (Method::GET, Some(name), None | Some("status")) => {
            let obj = state
                .store
                .get(&rt.table, &ns_str, &name)
                .ok_or_else(|| ApiError::not_found(&rt, &name))?;
            Ok(render_object(&rt, &obj, format, StatusCode::OK, &[]))
        }
        (Method::GET, Some(name), Some("scale")) => {
            let obj = state
                .store
                .get(&rt.table, &ns_str, &name)
                .ok_or_else(|| ApiError::not_found(&rt, &name))?;
            Ok(json_response(
                StatusCode::OK,
                &convert::scale_of(&rt, &obj),
                "application/json",
                &[],
            ))
        }
        (Method::GET, Some(name), Some("log")) => {
            let pod = state
                .store
                .get(&rt.table, &ns_str, &name)
                .ok_or_else(|| ApiError::not_found(&rt, &name))?;
            let mut resp = (StatusCode::OK, subresources::log(&pod, &q)?).into_response();
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            Ok(resp)
        }
        (Method::GET | Method::POST, Some(name), Some(sub @ ("exec" | "attach" | "portforward"))) => {
            let pod = state
                .store
                .get(&rt.table, &ns_str, &name)
                .ok_or_else(|| ApiError::not_found(&rt, &name))?;
            Err(subresources::no_process(&pod, sub))
        }
        (Method::POST, Some(name), Some("token")) => {
            let sa = state
                .store
                .get(&rt.table, &ns_str, &name)
                .ok_or_else(|| ApiError::not_found(&rt, &name))?;
            let bytes = read_body(body).await?;
            let request = parse_json(&bytes)?;
            let answer = subresources::token(&sa, request);
            Ok(json_response(
                StatusCode::CREATED,
                &answer,
                "application/json",
                &[],
            ))
        }
        (Method::POST, None, None) => {
            let bytes = read_body(body).await?;
            let obj = parse_json(&bytes)?;
            if rt.special == Special::Review {
                let mut o = obj;
                o["status"] = json!({"allowed": true, "reason": "nave-sim allows everything"});
                return Ok(json_response(StatusCode::CREATED, &o, "application/json", &[]));
            }
            if rt.namespaced && ns.is_none() {
                return Err(ApiError::method_not_allowed("POST", Some(&rt)));
            }
            let opts = write_opts(&q, &parts.headers, None)?;
            let admitted = admission::create(&state, &rt, &ns_str, obj, &opts, &user).await?;
            let obj = convert::input(&rt, admitted.object);
            let mut w = state.create(&storage_rt(&state, &rt), &ns_str, obj, &opts, false)?;
            w.warnings.extend(admitted.warnings);
            Ok(render_object(
                &rt,
                &w.object,
                format,
                StatusCode::CREATED,
                &w.warnings,
            ))
        }
        (Method::POST, Some(name), Some("binding")) => {
            let bytes = read_body(body).await?;
            let b = parse_json(&bytes)?;
            bind(&state, &rt, &ns_str, &name, &b, &q, &parts.headers)
        }
        (Method::POST, Some(name), Some("eviction")) => {
            let bytes = read_body(body).await?;
            let _ = parse_json(&bytes)?;
            let opts = DeleteOpts {
                propagation: None,
                ..DeleteOpts::default()
            };
            state.delete(&rt, &ns_str, &name, &opts)?;
            let s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
            Ok(json_response(StatusCode::CREATED, &s, "application/json", &[]))
        }
        (Method::PUT, Some(name), sub @ (None | Some("status" | "finalize" | "approval"))) => {
            let bytes = read_body(body).await?;
            let body = convert::input(&rt, parse_json(&bytes)?);
            let sub = match sub {
                Some("status") => Some("status"),
                _ => None,
            };
            let mut opts = write_opts(&q, &parts.headers, sub)?;
            if sub.is_none() && rt.special == Special::Namespace && path.ends_with("/finalize") {
                opts.subresource = None;
                return finalize_namespace(&state, &rt, &name, body, &opts, format);
            }
            let srt = storage_rt(&state, &rt);
            let body_rv = meta_str(&body, "resourceVersion").map(str::to_owned);
            if rt.is_custom() && body_rv.as_deref().is_none_or(str::is_empty) {
                return Err(ApiError::invalid(
                    &rt,
                    &name,
                    &[Cause::new(
                        "FieldValueInvalid",
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    )],
                ));
            }
            let f = |cur: &Arc<Value>| -> ApiResult<Value> {
                if let Some(rv) = body_rv.as_deref().filter(|s| !s.is_empty())
                    && Some(rv) != meta_str(cur, "resourceVersion")
                {
                    return Err(ApiError::conflict(&rt, &name));
                }
                Ok(body.clone())
            };
            let w = admission::update(
                &state,
                &srt,
                &rt,
                &ns_str,
                &name,
                &opts,
                false,
                &user,
                "UpdateOptions",
                f,
            )
            .await?;
            Ok(render_object(&rt, &w.object, format, StatusCode::OK, &w.warnings))
        }
        (Method::PUT, Some(name), Some("scale")) => {
            let bytes = read_body(body).await?;
            let scale = parse_json(&bytes)?;
            write_scale(&state, &rt, &ns_str, &name, &q, &parts.headers, |_cur| {
                Ok(scale.clone())
            })
        }
        (Method::PATCH, Some(name), sub @ (None | Some("status"))) => {
            let ct = content_type(&parts.headers);
            let bytes = read_body(body).await?;
            let target = PatchTarget {
                rt: &rt,
                ns: &ns_str,
                name: &name,
                sub,
                user: &user,
            };
            patch(&state, &target, &ct, &bytes, &q, &parts.headers, format).await
        }
        (Method::PATCH, Some(name), Some("scale")) => {
            let ct = content_type(&parts.headers);
            let bytes = read_body(body).await?;
            let p = parse_json(&bytes)?;
            write_scale(&state, &rt, &ns_str, &name, &q, &parts.headers, |cur| {
                apply_patch_doc(&ct, cur, &p, None)
            })
        }
        (Method::DELETE, Some(name), None) => {
            let bytes = read_body(body).await?;
            let opts = delete_opts(&q, &bytes)?;
            let srt = storage_rt(&state, &rt);
            match state.delete(&srt, &ns_str, &name, &opts)? {
                Deleted::Pending(obj) => Ok(render_object(&rt, &obj, Format::Json, StatusCode::OK, &[])),
                Deleted::Gone(obj) => {
                    if matches!(rt.special, Special::Pod) || rt.plural == "serviceaccounts" {
                        return Ok(render_object(&rt, &obj, Format::Json, StatusCode::OK, &[]));
                    }
                    let mut details = json!({"name": name, "kind": rt.plural, "uid": meta_str(&obj, "uid")});
                    if !rt.group.is_empty() {
                        details["group"] = json!(rt.group);
                    }
                    let s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details});
                    Ok(json_response(StatusCode::OK, &s, "application/json", &[]))
                }
            }
        }
        (Method::DELETE, None, None) => {
            let bytes = read_body(body).await?;
            let opts = delete_opts(&q, &bytes)?;
            delete_collection(&state, &rt, ns.as_deref(), &q, &opts)
        }
        (m, _, _) => Err(ApiError::method_not_allowed(m.as_str(), Some(&rt))),
    }
}

/// Events written through the `events.k8s.io` view are stored as core Events.
fn storage_rt(state: &ClusterState, rt: &Arc<ResourceType>) -> Arc<ResourceType> {
    if rt.special == Special::EventsV1 {
        let reg = state.registry.read().unwrap_or_else(|e| e.into_inner());
        if let Some(core) = reg.get("", "v1", "events") {
            return core;
        }
    }
    rt.clone()
}

fn render_object(
    rt: &ResourceType,
    obj: &Value,
    format: Format,
    code: StatusCode,
    warnings: &[String],
) -> Response {
    let served = convert::output(rt, obj);
    match format {
        Format::Json => json_response(code, &served, "application/json", warnings),
        Format::Partial => json_response(
            code,
            &convert::partial(&served),
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
            warnings,
        ),
        Format::Table(include) => {
            let rv = served
                .pointer("/metadata/resourceVersion")
                .cloned()
                .unwrap_or(Value::Null);
            let t = table::table(
                rt,
                vec![table::row(rt, &served, include)],
                json!({"resourceVersion": rv}),
                true,
            );
            json_response(code, &t, "application/json;as=Table;g=meta.k8s.io;v=v1", warnings)
        }
    }
}

fn encode_continue(rv: u64, key: &(String, String)) -> String {
    use base64::Engine;
    let raw = json!({"rv": rv, "ns": key.0, "name": key.1}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_continue(token: &str) -> ApiResult<(u64, (String, String))> {
    use base64::Engine;
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v["rv"].as_u64().ok_or_else(bad)?;
    Ok((
        rv,
        (
            v["ns"].as_str().unwrap_or_default().to_owned(),
            v["name"].as_str().unwrap_or_default().to_owned(),
        ),
    ))
}

fn list(
    state: &ClusterState,
    rt: &Arc<ResourceType>,
    ns: Option<&str>,
    q: &Query,
    format: Format,
) -> ApiResult<Response> {
    let filter = Filter::parse(rt, q)?;
    let limit: usize = match q.get("limit") {
        Some(l) if !l.is_empty() => l
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("invalid limit: {l}")))?
            .max(0) as usize,
        _ => 0,
    };
    let (snapshot_rv, after) = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => {
            let (rv, key) = decode_continue(c)?;
            if rv < state.store.oldest_resumable() {
                return Err(ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                ));
            }
            (Some(rv), Some(key))
        }
        None => (None, None),
    };
    // `resourceVersion=N&resourceVersionMatch=NotOlderThan` with N in the future: wait briefly.
    if let Some(n) = q.get("resourceVersion").and_then(|s| s.parse::<u64>().ok())
        && n > state.store.rv()
        && q.get("resourceVersionMatch") == Some("NotOlderThan")
    {
        return Err(ApiError::timeout(format!(
            "Too large resource version: {n}, current: {}",
            state.store.rv()
        )));
    }
    let (items, rv) = if rt.special == Special::ResourceMetrics {
        let items = resource_metrics::list(state, rt, ns, after.as_ref());
        (items, state.store.rv())
    } else {
        state.store.list(&rt.table, ns, after.as_ref())
    };
    let list_rv = snapshot_rv.unwrap_or(rv);
    let mut out = Vec::new();
    let mut continue_token = None;
    let mut remaining = 0usize;
    for obj in items.iter() {
        if !filter.matches(rt, obj) {
            continue;
        }
        if limit > 0 && out.len() >= limit {
            remaining += 1;
            continue;
        }
        out.push(obj.clone());
    }
    if remaining > 0
        && let Some(last) = out.last()
    {
        let key = (
            meta_str(last, "namespace").unwrap_or_default().to_owned(),
            meta_str(last, "name").unwrap_or_default().to_owned(),
        );
        continue_token = Some(encode_continue(list_rv, &key));
    }
    let mut list_meta = json!({"resourceVersion": list_rv.to_string()});
    if let Some(c) = &continue_token {
        list_meta["continue"] = json!(c);
        list_meta["remainingItemCount"] = json!(remaining);
    }
    let resp = match format {
        Format::Json => {
            // Serialise items without cloning them into a new Value tree.
            let mut buf = Vec::with_capacity(out.len() * 512 + 128);
            buf.extend_from_slice(b"{\"kind\":");
            buf.extend_from_slice(json!(rt.list_kind).to_string().as_bytes());
            buf.extend_from_slice(b",\"apiVersion\":");
            buf.extend_from_slice(json!(rt.api_version()).to_string().as_bytes());
            buf.extend_from_slice(b",\"metadata\":");
            buf.extend_from_slice(list_meta.to_string().as_bytes());
            buf.extend_from_slice(b",\"items\":[");
            for (i, obj) in out.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                let served = convert::output(rt, obj);
                let _ = serde_json::to_writer(&mut buf, &*served);
            }
            buf.extend_from_slice(b"]}");
            let mut resp = (StatusCode::OK, buf).into_response();
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            resp
        }
        Format::Partial => {
            let items: Vec<Value> = out
                .iter()
                .map(|o| convert::partial(&convert::output(rt, o)))
                .collect();
            let l = json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "items": items});
            json_response(
                StatusCode::OK,
                &l,
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
                &[],
            )
        }
        Format::Table(include) => {
            let rows: Vec<Value> = out
                .iter()
                .map(|o| table::row(rt, &convert::output(rt, o), include))
                .collect();
            let t = table::table(rt, rows, list_meta, true);
            json_response(
                StatusCode::OK,
                &t,
                "application/json;as=Table;g=meta.k8s.io;v=v1",
                &[],
            )
        }
    };
    Ok(resp)
}

fn watch_collection(
    state: &Arc<ClusterState>,
    rt: &Arc<ResourceType>,
    ns: Option<String>,
    q: &Query,
    format: Format,
) -> ApiResult<Response> {
    let filter = Filter::parse(rt, q)?;
    let send_initial = q.flag("sendInitialEvents");
    let bookmarks = q.flag("allowWatchBookmarks");
    if send_initial {
        if q.get("resourceVersionMatch") != Some("NotOlderThan") {
            return Err(ApiError::invalid_kind(
                "ListOptions",
                "meta.k8s.io",
                "",
                &[Cause::new(
                    "FieldValueForbidden",
                    "sendInitialEvents",
                    "Forbidden: sendInitialEvents is forbidden for watch unless resourceVersionMatch is set to NotOlderThan",
                )],
            ));
        }
        if !bookmarks {
            return Err(ApiError::invalid_kind(
                "ListOptions",
                "meta.k8s.io",
                "",
                &[Cause::new(
                    "FieldValueForbidden",
                    "allowWatchBookmarks",
                    "Forbidden: allowWatchBookmarks must be set to true when sendInitialEvents is set",
                )],
            ));
        }
    }
    let timeout = match q.get("timeoutSeconds").and_then(|t| t.parse::<u64>().ok()) {
        Some(t) if t > 0 => Duration::from_secs(t),
        _ => {
            // Like the apiserver's minRequestTimeout × [1, 2).
            let jitter = u64::from(uuid::Uuid::new_v4().as_bytes()[0]) * 1800 / 256;
            Duration::from_secs(1800 + jitter)
        }
    };
    let p = WatchParams {
        resource_version: q.get("resourceVersion").map(str::to_owned),
        send_initial_events: send_initial,
        bookmarks,
        timeout,
        format,
        filter,
        namespace: ns,
    };
    Ok(watch::start(state.clone(), rt.clone(), p))
}

fn check_patch_options(q: &Query, apply: bool) -> ApiResult<()> {
    if !apply && q.get("force").is_some() {
        return Err(ApiError::invalid_kind(
            "PatchOptions",
            "meta.k8s.io",
            "",
            &[Cause::new(
                "FieldValueForbidden",
                "force",
                "Forbidden: may not be specified for non-apply patch",
            )],
        ));
    }
    if apply && q.get("fieldManager").is_none_or(str::is_empty) {
        return Err(ApiError::invalid_kind(
            "PatchOptions",
            "meta.k8s.io",
            "",
            &[Cause::new(
                "FieldValueRequired",
                "fieldManager",
                "Required value: is required for apply patch",
            )],
        ));
    }
    Ok(())
}

/// Applies a non-apply patch document to `cur` by content type.
fn apply_patch_doc(ct: &str, cur: &Value, patch: &Value, rt: Option<&ResourceType>) -> ApiResult<Value> {
    match ct {
        "application/merge-patch+json" => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("the patch must be a JSON object"));
            }
            let mut out = cur.clone();
            nave_sim_core::patch::merge_patch(&mut out, patch);
            Ok(out)
        }
        "application/json-patch+json" => {
            if patch.as_array().is_some_and(|a| a.len() > 10_000) {
                return Err(ApiError::too_large(
                    "The allowed maximum operations in a JSON patch is 10000, got more",
                ));
            }
            nave_sim_core::patch::json_patch(cur, patch).map_err(|e| match e {
                nave_sim_core::patch::PatchError::Malformed(m) => ApiError::bad_request(m),
                nave_sim_core::patch::PatchError::OperationFailed(m) => ApiError::new(422, "Invalid", m),
            })
        }
        "application/strategic-merge-patch+json" => {
            match rt {
                Some(rt) if rt.is_custom() => return Err(ApiError::unsupported_patch()),
                _ => {}
            }
            let types = match rt {
                Some(rt) => write::list_types(rt),
                None => nave_sim_core::fieldpath::builtin("autoscaling", "Scale"),
            };
            nave_sim_core::patch::strategic_merge_patch(cur, patch, &*types).map_err(|e| match e {
                nave_sim_core::patch::PatchError::Malformed(m) => ApiError::bad_request(m),
                nave_sim_core::patch::PatchError::OperationFailed(m) => ApiError::new(422, "Invalid", m),
            })
        }
        _ => Err(ApiError::unsupported_patch()),
    }
}

/// What a PATCH addresses.
struct PatchTarget<'a> {
    rt: &'a Arc<ResourceType>,
    ns: &'a str,
    name: &'a str,
    sub: Option<&'a str>,
    user: &'a str,
}

async fn patch(
    state: &ClusterState,
    target: &PatchTarget<'_>,
    ct: &str,
    bytes: &[u8],
    q: &Query,
    headers: &HeaderMap,
    format: Format,
) -> ApiResult<Response> {
    let PatchTarget {
        rt,
        ns,
        name,
        sub,
        user,
    } = *target;
    let apply = ct == "application/apply-patch+yaml" || ct == "application/apply-patch+cbor";
    check_patch_options(q, apply)?;
    let opts = write_opts(q, headers, sub)?;
    let srt = storage_rt(state, rt);
    if !apply {
        if !matches!(
            ct,
            "application/merge-patch+json"
                | "application/json-patch+json"
                | "application/strategic-merge-patch+json"
        ) {
            return Err(ApiError::unsupported_patch());
        }
        if ct == "application/strategic-merge-patch+json" && rt.is_custom() {
            return Err(ApiError::unsupported_patch());
        }
        let doc = parse_json(bytes)?;
        let view_rt = rt.clone();
        let f = |cur: &Arc<Value>| -> ApiResult<Value> {
            // Patches apply to the served representation.
            let served = convert::output(&view_rt, cur).into_owned();
            let patched = apply_patch_doc(ct, &served, &doc, Some(&view_rt))?;
            if let Some(rv) = meta_str(&patched, "resourceVersion").filter(|r| !r.is_empty())
                && Some(rv) != meta_str(cur, "resourceVersion")
            {
                return Err(ApiError::conflict(&view_rt, name));
            }
            Ok(convert::input(&view_rt, patched))
        };
        let w = admission::update(state, &srt, rt, ns, name, &opts, false, user, "PatchOptions", f).await?;
        return Ok(render_object(rt, &w.object, format, StatusCode::OK, &w.warnings));
    }
    // Server-side apply.
    let mut applied = parse_json(bytes)?;
    if !applied.is_object() {
        return Err(ApiError::bad_request(
            "the applied configuration must be an object",
        ));
    }
    if applied
        .pointer("/metadata/managedFields")
        .is_some_and(|v| !v.is_null())
    {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    write::check_type(rt, &mut applied)?;
    if let Some(n) = meta_str(&applied, "name")
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    let precondition = meta_str(&applied, "resourceVersion").map(str::to_owned);
    if rt.status
        && sub.is_none()
        && let Some(m) = applied.as_object_mut()
    {
        // The main resource never owns status.
        m.remove("status");
    }
    let applied = convert::input(rt, applied);
    let force = q.flag("force");
    let manager = opts.manager.clone();
    let types = write::list_types(&srt);
    let now = meta::now_rfc3339();
    let do_apply = |live: Option<&Value>| -> ApiResult<Value> {
        nave_sim_core::ssa::apply(
            &nave_sim_core::ssa::Apply {
                live,
                applied: &applied,
                manager: &manager,
                force,
                subresource: sub,
                now: &now,
            },
            &*types,
        )
        .map_err(|e| ssa_error(rt, name, e))
    };
    let key_ns = if rt.namespaced { ns } else { "" };
    if state.store.get(&srt.table, key_ns, name).is_none() {
        if sub.is_some() {
            return Err(ApiError::not_found(rt, name));
        }
        if precondition.as_deref().is_some_and(|p| !p.is_empty()) {
            return Err(ApiError::conflict(rt, name));
        }
        let mut created = do_apply(None)?;
        if let Some(m) = created.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        let served = convert::output(rt, &created).into_owned();
        let admitted = admission::create(state, rt, ns, served, &opts, user).await?;
        let created = convert::input(rt, admitted.object);
        match state.create(&srt, ns, created, &opts, true) {
            Ok(mut w) => {
                w.warnings.extend(admitted.warnings);
                return Ok(render_object(
                    rt,
                    &w.object,
                    format,
                    StatusCode::CREATED,
                    &w.warnings,
                ));
            }
            Err(e) if e.reason == "AlreadyExists" => {}
            Err(e) => return Err(e),
        }
    }
    let f = |cur: &Arc<Value>| -> ApiResult<Value> {
        if let Some(p) = precondition.as_deref().filter(|p| !p.is_empty())
            && Some(p) != meta_str(cur, "resourceVersion")
        {
            return Err(ApiError::conflict(rt, name));
        }
        do_apply(Some(cur))
    };
    let Written { object, warnings, .. } =
        admission::update(state, &srt, rt, ns, name, &opts, true, user, "PatchOptions", f).await?;
    Ok(render_object(rt, &object, format, StatusCode::OK, &warnings))
}

fn ssa_error(rt: &ResourceType, name: &str, e: nave_sim_core::ssa::ApplyError) -> ApiError {
    match &e {
        nave_sim_core::ssa::ApplyError::Conflicts(cs) => {
            let mut err = ApiError::new(409, "Conflict", e.to_string());
            let causes: Vec<Value> = cs
                .iter()
                .map(|c| json!({"reason": "FieldManagerConflict", "message": c.cause_message(), "field": c.field}))
                .collect();
            err.details = Some(json!({"causes": causes}));
            err
        }
        nave_sim_core::ssa::ApplyError::Invalid(m) => {
            ApiError::invalid(rt, name, &[Cause::new("FieldValueInvalid", "", m.clone())])
        }
    }
}

fn write_scale(
    state: &ClusterState,
    rt: &Arc<ResourceType>,
    ns: &str,
    name: &str,
    q: &Query,
    headers: &HeaderMap,
    change: impl Fn(&Value) -> ApiResult<Value>,
) -> ApiResult<Response> {
    let Some(paths) = rt.scale.clone() else {
        return Err(ApiError::no_route("scale"));
    };
    let opts = write_opts(q, headers, Some("scale"))?;
    let mut opts_main = opts.clone();
    opts_main.subresource = None;
    let mut f = |cur: &Arc<Value>| -> ApiResult<Value> {
        let scale = convert::scale_of(rt, cur);
        let new_scale = change(&scale)?;
        if let Some(rv) = meta_str(&new_scale, "resourceVersion").filter(|r| !r.is_empty())
            && Some(rv) != meta_str(cur, "resourceVersion")
        {
            return Err(ApiError::conflict(rt, name));
        }
        let replicas = new_scale
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if replicas < 0 {
            return Err(ApiError::invalid_kind(
                "Scale",
                "autoscaling",
                name,
                &[Cause::new(
                    "FieldValueInvalid",
                    "spec.replicas",
                    format!("Invalid value: {replicas}: must be greater than or equal to 0"),
                )],
            ));
        }
        let mut obj = convert::output(rt, cur).into_owned();
        convert::set_path(&mut obj, &paths.spec_replicas, json!(replicas));
        Ok(obj)
    };
    let w = state.update_with(rt, ns, name, &opts_main, false, &mut f)?;
    Ok(json_response(
        StatusCode::OK,
        &convert::scale_of(rt, &w.object),
        "application/json",
        &[],
    ))
}

fn bind(
    state: &ClusterState,
    rt: &Arc<ResourceType>,
    ns: &str,
    name: &str,
    binding: &Value,
    q: &Query,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if node.is_empty() {
        return Err(ApiError::invalid_kind(
            "Binding",
            "",
            name,
            &[Cause::new("FieldValueRequired", "target.name", "Required value")],
        ));
    }
    let mut opts = write_opts(q, headers, None)?;
    if q.get("fieldManager").is_none() && opts.manager == "unknown" {
        opts.manager = "default-scheduler".into();
    }
    let now = meta::now_rfc3339();
    let mut f = |cur: &Arc<Value>| -> ApiResult<Value> {
        let mut p = (**cur).clone();
        if let Some(existing) = p
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            return Err(ApiError::conflict_msg(
                rt,
                name,
                &format!("pod {name} is already assigned to node \"{existing}\""),
            ));
        }
        if p.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(ApiError::conflict_msg(
                rt,
                name,
                "pod is being deleted, cannot be assigned to a host",
            ));
        }
        p["spec"]["nodeName"] = json!(node);
        let cond = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
        let conds = p["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let mut conds: Vec<Value> = conds
            .into_iter()
            .filter(|c| c["type"] != "PodScheduled")
            .collect();
        conds.push(cond);
        p["status"]["conditions"] = json!(conds);
        Ok(p)
    };
    // Binding writes spec and status together, which neither the main nor the status path allows.
    state.bind_pod(rt, ns, name, &opts, &mut f)?;
    let s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
    Ok(json_response(StatusCode::CREATED, &s, "application/json", &[]))
}

fn delete_opts(q: &Query, body: &[u8]) -> ApiResult<DeleteOpts> {
    let mut o = DeleteOpts::default();
    if !body.iter().all(u8::is_ascii_whitespace) {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
        o.propagation = v["propagationPolicy"].as_str().map(str::to_owned);
        if v["orphanDependents"].as_bool() == Some(true) && o.propagation.is_none() {
            o.propagation = Some("Orphan".into());
        }
        o.grace_period = v["gracePeriodSeconds"].as_i64();
        o.dry_run = v["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "All"));
        o.uid = v
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_owned);
        o.resource_version = v
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
    if let Some(p) = q.get("propagationPolicy") {
        o.propagation = Some(p.to_owned());
    }
    if q.get("orphanDependents") == Some("true") && o.propagation.is_none() {
        o.propagation = Some("Orphan".into());
    }
    if let Some(g) = q.get("gracePeriodSeconds").and_then(|g| g.parse().ok()) {
        o.grace_period = Some(g);
    }
    if q.get("dryRun") == Some("All") {
        o.dry_run = true;
    }
    if let Some(p) = &o.propagation
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::invalid_kind(
            "DeleteOptions",
            "meta.k8s.io",
            "",
            &[Cause::new(
                "FieldValueNotSupported",
                "propagationPolicy",
                format!(
                    "Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            )],
        ));
    }
    Ok(o)
}

fn delete_collection(
    state: &ClusterState,
    rt: &Arc<ResourceType>,
    ns: Option<&str>,
    q: &Query,
    opts: &DeleteOpts,
) -> ApiResult<Response> {
    let filter = Filter::parse(rt, q)?;
    let srt = storage_rt(state, rt);
    let (items, _) = state.store.list(&srt.table, ns, None);
    let mut deleted = Vec::new();
    for obj in items {
        if !filter.matches(rt, &obj) {
            continue;
        }
        let name = meta_str(&obj, "name").unwrap_or_default().to_owned();
        let ons = meta_str(&obj, "namespace").unwrap_or_default().to_owned();
        match state.delete(&srt, &ons, &name, opts) {
            Ok(Deleted::Gone(o) | Deleted::Pending(o)) => deleted.push(convert::output(rt, &o).into_owned()),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let l = json!({"kind": rt.list_kind, "apiVersion": rt.api_version(), "metadata": {"resourceVersion": state.store.rv().to_string()}, "items": deleted});
    Ok(json_response(StatusCode::OK, &l, "application/json", &[]))
}

fn finalize_namespace(
    state: &ClusterState,
    rt: &Arc<ResourceType>,
    name: &str,
    body: Value,
    opts: &WriteOpts,
    format: Format,
) -> ApiResult<Response> {
    let fins = body.pointer("/spec/finalizers").cloned().unwrap_or(json!([]));
    let w = state.finalize_namespace(rt, name, fins, opts)?;
    Ok(render_object(rt, &w.object, format, StatusCode::OK, &[]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation_follows_order() {
        let t = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(
            negotiate(Some(t), Include::Metadata).ok(),
            Some(Format::Table(Include::Metadata))
        );
        assert_eq!(negotiate(None, Include::Metadata).ok(), Some(Format::Json));
        assert_eq!(negotiate(Some("*/*"), Include::Metadata).ok(), Some(Format::Json));
        assert_eq!(
            negotiate(
                Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
                Include::Metadata
            )
            .ok(),
            Some(Format::Partial)
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf"), Include::Metadata)
                .err()
                .map(|e| e.code),
            Some(406)
        );
    }

    #[test]
    fn queries_skip_empty_pairs() {
        let q = Query::parse(Some("&limit=1&&bogus=1&labelSelector=env%20in%20(a%2Cb)"));
        assert_eq!(q.get("limit"), Some("1"));
        assert_eq!(q.get("labelSelector"), Some("env in (a,b)"));
    }

    #[test]
    fn continue_tokens_round_trip() {
        let t = encode_continue(42, &("ns".into(), "a".into()));
        assert_eq!(decode_continue(&t).ok(), Some((42, ("ns".into(), "a".into()))));
        assert!(decode_continue("!!").is_err());
    }
}
