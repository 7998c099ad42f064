//! The one error type of the hub's HTTP APIs, the agent endpoints and the REST API alike, always
//! answered as a JSON [`ErrorBody`] (`{"error": <code>, "message": <text>}`); and the extractors
//! whose rejections are such errors, so a malformed body, query or path gets the same shape.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
pub use nave_api::wire::ErrorBody;
use nave_api::wire::error_codes as codes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::warn;

use crate::error::Error;
use crate::store::{StoreError, StoreErrorKind};

/// Every failure of a request to the hub.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A malformed request: query, path or JSON syntax.
    #[error("{0}")]
    BadRequest(String),
    /// No token, an unknown token, or no tokens configured.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// The token's scope does not allow the operation.
    #[error("{0}")]
    Forbidden(String),
    /// No such endpoint or object.
    #[error("{0}")]
    NotFound(String),
    /// The endpoint does not take this method.
    #[error("this endpoint does not take this HTTP method")]
    MethodNotAllowed,
    /// The request conflicts with the current state; the message says how to resolve it.
    #[error("{0}")]
    Conflict(String),
    /// The body is too large.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The body is not JSON.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Well-formed JSON that is not a valid request; the message names the field path.
    #[error("{0}")]
    Invalid(String),
    /// A limit is reached; the message says which.
    #[error("{0}")]
    TooManyRequests(String),
    /// A store operation failed; its text is logged, never sent.
    #[error("store operation failed")]
    Store(#[source] StoreError),
    /// An operation of the hub failed (store or management cluster); logged, never sent.
    #[error("the hub failed")]
    Hub(#[source] Error),
}

impl ApiError {
    /// The HTTP status of this error.
    pub fn status_code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Store(e) | ApiError::Hub(Error::Store { source: e, .. }) => store_status(e),
            ApiError::Hub(Error::Kube { .. } | Error::NotWatching(_)) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Hub(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn code_and_message(&self) -> (&'static str, String) {
        match self {
            ApiError::BadRequest(m) => (codes::BAD_REQUEST, m.clone()),
            ApiError::Unauthorized(m) => (codes::UNAUTHORIZED, (*m).to_owned()),
            ApiError::Forbidden(m) => (codes::FORBIDDEN, m.clone()),
            ApiError::NotFound(m) => (codes::NOT_FOUND, m.clone()),
            ApiError::Conflict(m) => (codes::CONFLICT, m.clone()),
            ApiError::MethodNotAllowed => (codes::METHOD_NOT_ALLOWED, self.to_string()),
            ApiError::PayloadTooLarge(m) => (codes::PAYLOAD_TOO_LARGE, m.clone()),
            ApiError::UnsupportedMediaType(m) => (codes::UNSUPPORTED_MEDIA_TYPE, m.clone()),
            ApiError::Invalid(m) => (codes::INVALID, m.clone()),
            ApiError::TooManyRequests(m) => (codes::TOO_MANY_REQUESTS, m.clone()),
            ApiError::Store(e) | ApiError::Hub(Error::Store { source: e, .. }) => {
                let code = match e.kind() {
                    StoreErrorKind::Unavailable => codes::UNAVAILABLE,
                    StoreErrorKind::InvalidInput => codes::BAD_REQUEST,
                    StoreErrorKind::UnknownCluster => codes::NOT_FOUND,
                    StoreErrorKind::Internal => codes::INTERNAL,
                };
                (code, e.client_message())
            }
            ApiError::Hub(Error::Kube { .. }) => (
                codes::UNAVAILABLE,
                "the management cluster's API server cannot be reached".to_owned(),
            ),
            ApiError::Hub(_) => (codes::INTERNAL, "internal error".to_owned()),
        }
    }
}

fn store_status(e: &StoreError) -> StatusCode {
    match e.kind() {
        StoreErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        StoreErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
        StoreErrorKind::UnknownCluster => StatusCode::NOT_FOUND,
        StoreErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        ApiError::Store(error)
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        ApiError::Hub(error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status_code();
        if status.is_server_error() {
            warn!(error = %self, source = ?std::error::Error::source(&self), "request failed");
        }
        let (code, message) = self.code_and_message();
        let body = ErrorBody {
            error: code.to_owned(),
            message,
        };
        (status, axum::Json(body)).into_response()
    }
}

/// A JSON body; a rejection is a JSON error: `415` without `Content-Type: application/json`,
/// `400` for malformed JSON, `422` (naming the field) for JSON of the wrong shape.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T, S> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<ObjectOnly<T>>::from_request(req, state).await {
            Ok(axum::Json(ObjectOnly(value))) => Ok(Json(value)),
            Err(rejection) => Err(json_rejection(&rejection)),
        }
    }
}

/// `T`, read from a JSON object only. Every body the hub takes is an object, but serde's derived
/// structs also read a JSON array as their fields in order (`[null, null]` would be a status
/// report), which the documents do not allow.
struct ObjectOnly<T>(T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<T>(std::marker::PhantomData<T>);

        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Visitor<T> {
            type Value = T;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }

        deserializer
            .deserialize_map(Visitor(std::marker::PhantomData))
            .map(ObjectOnly)
    }
}

/// An optional JSON body: a request without one (no `Content-Type`, no length, not chunked) is
/// `None`; anything else is read as [`Json`] is, with its rejections.
impl<T, S> axum::extract::OptionalFromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Option<Self>, Self::Rejection> {
        let headers = req.headers();
        let no_body = !headers.contains_key(axum::http::header::CONTENT_TYPE)
            && !headers.contains_key(axum::http::header::TRANSFER_ENCODING)
            && headers
                .get(axum::http::header::CONTENT_LENGTH)
                .is_none_or(|length| length.as_bytes() == b"0");
        if no_body {
            return Ok(None);
        }
        <Json<T> as FromRequest<S>>::from_request(req, state)
            .await
            .map(Some)
    }
}

fn json_rejection(rejection: &JsonRejection) -> ApiError {
    let message = rejection.body_text();
    match rejection {
        JsonRejection::MissingJsonContentType(_) => ApiError::UnsupportedMediaType(
            "expected a JSON body with the header `Content-Type: application/json`".to_owned(),
        ),
        JsonRejection::JsonDataError(_) => ApiError::Invalid(message),
        _ if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(message),
        _ => ApiError::BadRequest(message),
    }
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// Query parameters; a rejection (a value of the wrong type, an unknown parameter) is a `400`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(rejection) => Err(query_rejection(&rejection)),
        }
    }
}

fn query_rejection(rejection: &QueryRejection) -> ApiError {
    ApiError::BadRequest(rejection.body_text())
}

/// Path parameters; a rejection is a `400`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Path<T>(pub T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(rejection) => Err(path_rejection(&rejection)),
        }
    }
}

fn path_rejection(rejection: &PathRejection) -> ApiError {
    ApiError::BadRequest(rejection.body_text())
}
