//! The three patch formats of `PATCH` (other than apply): JSON merge patch (RFC 7386), JSON patch
//! (RFC 6902 with Kubernetes' `test` semantics) and strategic merge patch (built-in kinds only).
//!
//! Contract with the server (which owns everything around the patch):
//!
//! * It decodes the body (JSON; serde_json's default recursion limit keeps documents shallow) and
//!   picks the function by `Content-Type`.  Strategic merge patch on a custom resource is the
//!   server's 415; more than [`MAX_JSON_PATCH_OPERATIONS`] JSON-patch operations its 413.
//! * It patches the stored object *as returned to clients* (with `metadata.managedFields`,
//!   `resourceVersion`, ...), then re-asserts what clients cannot change (`uid`,
//!   `creationTimestamp`, `resourceVersion` unless used as a precondition, status on the main
//!   resource of kinds with a status subresource, ...), defaults, validates, and calls
//!   [`crate::ssa::record_update`].
//! * [`PatchError::Malformed`] is a 400 (`BadRequest`), [`PatchError::OperationFailed`] a 422
//!   (`Invalid`), whose message is the text below.

use serde_json::Value;

use crate::fieldpath::ListTypes;

mod json;
mod merge;
mod strategic;

#[cfg(test)]
mod tests;

/// The API server's limit on the number of operations of one JSON patch (above it: 413).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Deepest nesting the patch functions recurse into; deeper documents are refused (or, for the
/// infallible [`merge_patch`], replaced rather than merged below this depth).
pub const MAX_DEPTH: usize = 256;

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
///
/// As the API server (evanphx/json-patch) does, `null`s inside values that are inserted or that
/// replace a non-object (e.g. inside the elements of a replaced list) are dropped too.  A patch
/// that is not an object replaces the target (RFC 7386); the server refuses such bodies first.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    merge::merge_patch(target, patch, 0);
}

/// Applies an RFC 6902 JSON patch (an array of operations) and returns the result.
/// `test` on a missing path compares against `null`, as the Kubernetes API server does.
///
/// Semantics and messages follow `gopkg.in/evanphx/json-patch.v4` as used by the API server:
/// negative array indices count from the end, `-` appends, `~1`/`~0` unescape to `/`/`~`, a
/// missing `value` is `null`, and `copy`s may add at most 64 MiB in total.
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    json::apply(target, patch)
}

/// Applies a strategic merge patch to `original` using the list merge keys of `types`
/// (`$patch: replace|delete|merge`, `$setElementOrder/<field>`, `$deleteFromPrimitiveList/<field>`,
/// `$retainKeys`).
///
/// Follows `k8s.io/apimachinery/pkg/util/strategicpatch` (`StrategicMergeMapPatch` with
/// parallel-list merging, as the API server calls it), with two leniencies: `$patch: merge` is
/// accepted (and means the default) on maps and as a list element, and directives inside values
/// that are added whole are processed instead of being stored.
pub fn strategic_merge_patch(
    original: &Value,
    patch: &Value,
    types: &dyn ListTypes,
) -> Result<Value, PatchError> {
    strategic::apply(original, patch, types)
}

/// The list types of a built-in kind; see [`crate::fieldpath::builtin`].
pub(crate) fn builtin_list_types(group: &str, kind: &str) -> Box<dyn ListTypes> {
    Box::new(crate::fieldpath::BuiltinListTypes::new(group, kind))
}
