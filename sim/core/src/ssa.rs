//! Server-side apply: `metadata.managedFields` bookkeeping (FieldsV1), conflicts between managers,
//! `force`, and removal of fields a manager stops applying.

use serde_json::Value;

use crate::fieldpath::ListTypes;

/// One field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The manager that owns the field.
    pub manager: String,
    /// The field, in the upstream notation (`.spec.replicas`, `.spec.containers[name="a"].image`).
    pub field: String,
}

/// Why an apply was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ApplyError {
    /// Fields owned by other managers would change and `force` was not set (HTTP 409).
    /// `Display` gives the upstream message: `Apply failed with N conflict(s): conflict with "m": .spec.x`.
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<Conflict>),
    /// The applied configuration is malformed (HTTP 400/422).
    #[error("{0}")]
    Invalid(String),
}

fn conflict_message(conflicts: &[Conflict]) -> String {
    let n = conflicts.len();
    let mut s = format!("Apply failed with {n} conflict{}: ", if n == 1 { "" } else { "s" });
    let parts: Vec<String> =
        conflicts.iter().map(|c| format!("conflict with \"{}\": {}", c.manager, c.field)).collect();
    s.push_str(&parts.join("\n"));
    s
}

/// The inputs of one apply.
#[derive(Debug)]
pub struct Apply<'a> {
    /// The live object, or `None` when the apply creates it.
    pub live: Option<&'a Value>,
    /// The applied configuration (the request body, already parsed from YAML/JSON).
    pub applied: &'a Value,
    /// The field manager (`fieldManager` query parameter; required).
    pub manager: &'a str,
    /// `force=true`: take ownership of conflicting fields instead of failing.
    pub force: bool,
    /// `Some("status")` etc. when applied to a subresource.
    pub subresource: Option<&'a str>,
    /// RFC 3339 time stamped on the managedFields entry.
    pub now: &'a str,
}

/// Merges an applied configuration into the live object and returns the new object, with
/// `metadata.managedFields` updated.  The server then defaults, validates and stores it.
pub fn apply(req: &Apply<'_>, types: &dyn ListTypes) -> Result<Value, ApplyError> {
    let _ = types;
    Ok(req.live.cloned().unwrap_or_else(|| req.applied.clone()))
}

/// Records an ordinary write (create, update, patch) by `manager` in `new`'s managedFields, with
/// operation `Update`: the fields that changed from `old` become owned by `manager`, and are taken
/// away from other managers.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    now: &str,
    types: &dyn ListTypes,
) {
    let _ = (old, new, manager, subresource, now, types);
}
