//! `metav1.Status` error bodies with the upstream reasons, codes and message formats
//! (apimachinery `pkg/api/errors/errors.go`): clients branch on `code`/`reason` and print `message`.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use super::resources::ResourceType;

/// One failed API request, rendered as a `Status` object.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code (also the Status `code`).
    pub code: u16,
    /// Status `reason` (`NotFound`, `Conflict`, ...).
    pub reason: String,
    /// Status `message`, in the upstream wording.
    pub message: String,
    /// Status `details`, when upstream sends some.
    pub details: Option<Value>,
    /// `Retry-After` seconds (429 and 5xx injected faults).
    pub retry_after: Option<u64>,
}

/// One invalid field of a 422 `Invalid` error.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueForbidden`, ...
    pub reason: String,
    /// The field path, e.g. `metadata.name`.
    pub field: String,
    /// The error without the field prefix, e.g. `Invalid value: "x": must be ...`.
    pub message: String,
}

impl Cause {
    /// A cause from its parts.
    pub fn new(reason: &str, field: &str, message: impl Into<String>) -> Cause {
        Cause {
            reason: reason.to_owned(),
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

/// `<resource>.<group>`, or `<resource>` in the core group (upstream `GroupResource.String()`).
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

fn gr(rt: &ResourceType) -> String {
    qualified(&rt.group, &rt.plural)
}

/// Status `details` naming a resource: `kind` is the resource and `group` is omitted when empty,
/// as upstream's `StatusDetails` serialises them.
fn resource_details(group: &str, resource: &str, name: Option<&str>) -> Value {
    let mut d = json!({"kind": resource});
    if let Some(name) = name {
        d["name"] = json!(name);
    }
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

fn details(rt: &ResourceType, name: &str) -> Value {
    resource_details(&rt.group, &rt.plural, Some(name))
}

impl ApiError {
    /// An error with no details.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason: reason.to_owned(),
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    /// 404 `<resource>.<group> "<name>" not found`.
    pub fn not_found(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::not_found_in(&rt.group, &rt.plural, name)
    }

    /// 404 `<resource>.<group> "<name>" not found` for a resource that has no [`ResourceType`],
    /// such as metrics-server's `podmetrics.metrics.k8s.io "<namespace>/<name>"` (the name of
    /// its internal resource, not the served plural).
    pub fn not_found_in(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .with_details(resource_details(group, resource, Some(name)))
    }

    /// 404 for a namespace that does not exist (namespace admission).
    pub fn namespace_not_found(ns: &str) -> ApiError {
        ApiError::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
            .with_details(json!({"name": ns, "kind": "namespaces"}))
    }

    /// 404 for a path that names no resource at all.
    pub fn no_route(path: &str) -> ApiError {
        let _ = path;
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 409 `... already exists`.
    pub fn already_exists(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", gr(rt)),
        )
        .with_details(details(rt, name))
    }

    /// 409 optimistic-concurrency conflict.
    pub fn conflict(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                gr(rt)
            ),
        )
        .with_details(details(rt, name))
    }

    /// 409 with a free-form reason text (`Operation cannot be fulfilled on ...: <why>`).
    pub fn conflict_msg(rt: &ResourceType, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{name}\": {why}", gr(rt)),
        )
        .with_details(details(rt, name))
    }

    /// 422 `<Kind>[.<group>] "<name>" is invalid: <causes>`.
    pub fn invalid(rt: &ResourceType, name: &str, causes: &[Cause]) -> ApiError {
        ApiError::invalid_kind(&rt.kind, &rt.group, name, causes)
    }

    /// 422 for an arbitrary kind (e.g. `PatchOptions.meta.k8s.io`).
    pub fn invalid_kind(kind: &str, group: &str, name: &str, causes: &[Cause]) -> ApiError {
        let qualified = if group.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind}.{group}")
        };
        let texts: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let agg = match texts.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut d = json!({
            "name": name,
            "kind": kind,
            "causes": causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect::<Vec<_>>(),
        });
        if !group.is_empty() {
            d["group"] = json!(group);
        }
        ApiError::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {agg}"),
        )
        .with_details(d)
    }

    /// 400 `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    /// 403 `Forbidden` with a message.
    pub fn forbidden(rt: &ResourceType, name: &str, why: &str, cause_reason: Option<&str>) -> ApiError {
        let message = format!("{} \"{name}\" is forbidden: {why}", gr(rt));
        let mut d = details(rt, name);
        if let Some(r) = cause_reason {
            d["causes"] = json!([{"reason": r, "message": why, "field": "metadata.namespace"}]);
        }
        ApiError::new(403, "Forbidden", message).with_details(d)
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_allowed(method: &str, rt: Option<&ResourceType>) -> ApiError {
        let what = rt.map(gr).unwrap_or_else(|| "this resource".to_owned());
        ApiError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method} {what})"),
        )
    }

    /// 405 `<action> is not supported on resources of kind "<resource>.<group>"` (upstream
    /// `NewMethodNotSupported`): the answer to a watch of a resource that lists but cannot watch.
    pub fn method_not_supported(rt: &ResourceType, action: &str) -> ApiError {
        ApiError::new(
            405,
            "MethodNotAllowed",
            format!("{action} is not supported on resources of kind \"{}\"", gr(rt)),
        )
        .with_details(resource_details(&rt.group, &rt.plural, None))
    }

    /// 415 for patch types the resource cannot take.
    pub fn unsupported_patch() -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        )
    }

    /// 415 for a body content type the verb does not take.
    pub fn unsupported_media(ct: &str) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {ct:?})"
            ),
        )
    }

    /// 406 for an Accept header that admits no JSON form.
    pub fn not_acceptable() -> ApiError {
        ApiError::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io",
        )
    }

    /// 413 for bodies over the limit.
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(413, "RequestEntityTooLarge", message)
    }

    /// 410 `Expired`.
    pub fn expired(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    /// 401 in strict token mode.
    pub fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    /// 500 `InternalError`.
    pub fn internal(message: impl Into<String>) -> ApiError {
        let message = message.into();
        ApiError::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(json!({"causes": [{"message": message}]}))
    }

    /// 504 `Timeout`.
    pub fn timeout(message: impl Into<String>) -> ApiError {
        ApiError::new(504, "Timeout", message)
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        if let Some(secs) = self.retry_after {
            let d = s["details"].as_object().cloned().unwrap_or_default();
            let mut d = Value::Object(d);
            d["retryAfterSeconds"] = json!(secs);
            s["details"] = d;
        }
        s
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_status().to_string();
        let mut resp = (code, body).into_response();
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(secs) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

/// Result of an API operation.
pub type ApiResult<T> = Result<T, ApiError>;
