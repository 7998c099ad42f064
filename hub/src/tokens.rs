//! Bearer tokens as the agent endpoints and the REST API both read them: taken from the
//! `Authorization` header, and compared without timing leaks.

use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};

/// The token of an `Authorization: Bearer <token>` header; `None` when there is none or it is
/// empty.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// SHA-256 of a secret: what is kept and compared instead of the secret itself.
pub(crate) fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Whether two digests are equal, in time independent of where they differ.
pub(crate) fn digests_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
