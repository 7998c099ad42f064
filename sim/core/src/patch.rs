//! The three patch formats of `PATCH` (other than apply): JSON merge patch (RFC 7386), JSON patch
//! (RFC 6902 with Kubernetes' `test` semantics) and strategic merge patch (built-in kinds only).

use serde_json::Value;

use crate::fieldpath::ListTypes;

/// Why a patch could not be applied.  The server maps these to HTTP statuses.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PatchError {
    /// The patch document is not of the expected shape (HTTP 400 / 422 by format).
    #[error("{0}")]
    Malformed(String),
    /// A JSON patch operation failed (`test` mismatch, missing path): HTTP 422.
    #[error("{0}")]
    OperationFailed(String),
}

/// Applies an RFC 7386 merge patch to `target` in place (null deletes a key).
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let _ = (target, patch);
}

/// Applies an RFC 6902 JSON patch (an array of operations) and returns the result.
/// `test` on a missing path compares against `null`, as the Kubernetes API server does.
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let _ = patch;
    Ok(target.clone())
}

/// Applies a strategic merge patch to `original` using the list merge keys of `types`
/// (`$patch: replace|delete|merge`, `$setElementOrder/<field>`, `$deleteFromPrimitiveList/<field>`,
/// `$retainKeys`).
pub fn strategic_merge_patch(original: &Value, patch: &Value, types: &dyn ListTypes) -> Result<Value, PatchError> {
    let _ = (patch, types);
    Ok(original.clone())
}

/// The list types of a built-in kind; see [`crate::fieldpath::builtin`].
pub(crate) fn builtin_list_types(group: &str, kind: &str) -> Box<dyn ListTypes> {
    let _ = (group, kind);
    Box::new(AllAtomic)
}

#[derive(Debug)]
struct AllAtomic;

impl ListTypes for AllAtomic {
    fn list_type(&self, _path: &[crate::fieldpath::Step]) -> Option<crate::fieldpath::ListType> {
        None
    }
    fn smp_merge_key(&self, _path: &[crate::fieldpath::Step]) -> Option<String> {
        None
    }
}
