//! Server-side apply: `metadata.managedFields` bookkeeping (FieldsV1), conflicts between managers,
//! `force`, and removal of fields a manager stops applying.
//!
//! The algorithm is structured-merge-diff's (`merge/update.go`) over the list types of
//! [`ListTypes`]:
//!
//! ```text
//!  live ──┐                                   other managers' sets ──┐
//!         ├─ merge ─► merged ─ prune(last − new − others) ─► result ─┴─ compare(live, result)
//!  config ┘   (maps by field, lists by key/value,                         │ modified ∪ added ∩ other's set
//!              atomic replaced)                                           ▼ = conflicts (409 unless force)
//! ```
//!
//! # Contract with the server
//!
//! The server owns identity, storage and HTTP; these functions only touch the object's fields and
//! `metadata.managedFields`.
//!
//! * **Apply** (`PATCH` with `application/apply-patch+yaml`): the server checks the request
//!   (`fieldManager` present, `force` only for apply, `apiVersion`/`kind`/`metadata.name` present,
//!   `metadata.resourceVersion` / `uid` preconditions) and passes the *stored* object as
//!   [`Apply::live`] (or `None` to create).  For kinds with a status subresource it strips
//!   `.status` from the configuration of a main-resource apply.  For `…/status` applies it may
//!   pass the configuration as is: with `subresource: Some("status")` only `.status` (plus
//!   `apiVersion`, `kind`, `metadata.name`/`namespace`) of the configuration is used.
//!   [`apply`] drops `metadata.{uid, resourceVersion, generation, creationTimestamp,
//!   deletionTimestamp, deletionGracePeriodSeconds, selfLink}` from the configuration and keeps
//!   the live values, and refuses `metadata.managedFields` in it (upstream: 400
//!   `metadata.managedFields must be nil`).  On the result the server sets
//!   `resourceVersion`/`generation`/`uid`/`creationTimestamp` as for any write, defaults,
//!   normalises (`omitempty`, nulls) and validates, then compares with the stored object: equal
//!   (managedFields included) means no write, same resourceVersion, no event.  Applying
//!   the same configuration again returns the live object unchanged, managedFields times
//!   included.
//! * **Other writes** (create, update, merge/JSON/strategic patch, `…/status`, `…/scale`): the
//!   server builds the new object (patched, status reset/kept per subresource, defaulted), then
//!   calls [`record_update`] with the stored object (`None` on create) before validation and the
//!   no-op check.  Like upstream, `managedFields` the client sent in `new` replace the stored ones
//!   when they are valid and non-empty (`[{}]` clears them), except on subresources; a server
//!   that wants managedFields read-only copies the stored ones into `new` first.
//! * Times are the caller's `now` (RFC 3339, seconds).  An entry's time changes only when its
//!   manager changed the object or its field set, so no-op writes stay byte-identical.
//! * Fields never owned by anyone: `apiVersion`, `kind`, `metadata.{name, namespace, uid,
//!   resourceVersion, generation, creationTimestamp, selfLink, managedFields}`.
//! * `null` in an applied configuration is kept (owned, value null) for the server's
//!   normalisation to drop, as upstream's conversion to Go types does.

use serde_json::{Map, Value};

use crate::fieldpath::{FieldSet, ListTypes, PathElement, display_path};

mod managers;
mod typed;

#[cfg(test)]
mod tests;

use managers::{Entry, Operation};

/// One field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The manager that owns the field.
    pub manager: String,
    /// The field, in the upstream notation (`.spec.replicas`, `.spec.containers[name="a"].image`).
    pub field: String,
    /// The owner's API version when it owns the field through an `Update` (upstream prints
    /// `using apps/v1` then); `None` for appliers.
    pub update_api_version: Option<String>,
    /// The subresource the owner wrote through (`status`), if any.
    pub subresource: Option<String>,
}

impl Conflict {
    /// The owner as upstream prints it: `"m"`, `"m" using apps/v1`,
    /// `"m" with subresource "status" using apps/v1`.
    pub fn owner(&self) -> String {
        managers::describe_owner(
            &self.manager,
            self.update_api_version.as_deref(),
            self.subresource.as_deref(),
        )
    }

    /// The message of this conflict's `FieldManagerConflict` status cause
    /// (`conflict with "m" using apps/v1`); the cause's `field` is [`Conflict::field`].
    pub fn cause_message(&self) -> String {
        format!("conflict with {}", self.owner())
    }
}

/// Why an apply was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ApplyError {
    /// Fields owned by other managers would change and `force` was not set (HTTP 409, reason
    /// `Conflict`, one `FieldManagerConflict` cause per conflict).  `Display` gives the upstream
    /// message: `Apply failed with 1 conflict: conflict with "m" using apps/v1: .spec.replicas`, or
    /// for several `Apply failed with 2 conflicts: conflicts with "m":\n- .a\n- .b`.
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<Conflict>),
    /// The applied configuration is malformed (HTTP 400/422).
    #[error("{0}")]
    Invalid(String),
}

/// Upstream `getConflictMessage`: conflicts are grouped by owner, in the order given (which
/// [`apply`] sorts like upstream: by manager identifier, then path).
fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [c] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            c.owner(),
            c.field
        );
    }
    let mut lines: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    for c in conflicts {
        let owner = c.owner();
        if current.as_ref() != Some(&owner) {
            lines.push(format!("conflicts with {owner}:"));
            current = Some(owner);
        }
        lines.push(format!("- {}", c.field));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
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

/// Metadata the server sets; an applied configuration cannot change them.
const SERVER_OWNED_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "managedFields",
];

/// The part of the configuration an apply uses.
fn effective_config(applied: &Map<String, Value>, subresource: Option<&str>) -> Map<String, Value> {
    let mut config = applied.clone();
    if subresource == Some("status") {
        config.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"));
        if let Some(Value::Object(meta)) = config.get_mut("metadata") {
            meta.retain(|k, _| k == "name" || k == "namespace");
        }
    }
    if let Some(Value::Object(meta)) = config.get_mut("metadata") {
        meta.retain(|k, _| !SERVER_OWNED_METADATA.contains(&k.as_str()));
    }
    config
}

fn without_managed_fields(obj: &Value) -> Value {
    let mut obj = obj.clone();
    if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
        meta.remove("managedFields");
    }
    obj
}

fn api_version_of(obj: Option<&Value>) -> Option<&str> {
    obj.and_then(|o| o.get("apiVersion")).and_then(Value::as_str)
}

/// Merges an applied configuration into the live object and returns the new object, with
/// `metadata.managedFields` updated.  The server then defaults, validates and stores it.
pub fn apply(req: &Apply<'_>, types: &dyn ListTypes) -> Result<Value, ApplyError> {
    let Value::Object(applied) = req.applied else {
        return Err(ApplyError::Invalid(format!(
            "the applied configuration must be an object, got {}",
            match req.applied {
                Value::Array(_) => "a list",
                Value::Null => "null",
                _ => "a scalar",
            }
        )));
    };
    if applied
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .is_some_and(|mf| !mf.is_null())
    {
        return Err(ApplyError::Invalid(
            "metadata.managedFields must be nil".to_owned(),
        ));
    }
    let subresource = req.subresource.filter(|s| !s.is_empty());
    let config = Value::Object(effective_config(applied, subresource));
    let api_version = api_version_of(Some(&config))
        .or(api_version_of(req.live))
        .unwrap_or("")
        .to_owned();

    let live = req
        .live
        .map(without_managed_fields)
        .unwrap_or_else(|| Value::Object(Map::new()));
    // Undecodable managedFields are reset, as upstream does.
    let mut entries = managers::decode_from(req.live).unwrap_or_default();

    let mut merged = typed::merge(Some(&live), &config, types).map_err(ApplyError::Invalid)?;
    let new_set = managers::strip(&typed::to_field_set(&config, types).map_err(ApplyError::Invalid)?);

    let mine = entries
        .iter()
        .position(|e| e.is(req.manager, Operation::Apply, &api_version, subresource));
    let last_set = mine
        .and_then(|i| entries.get(i))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others = entries
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != mine)
        .fold(FieldSet::new(), |acc, (_, e)| acc.union(&e.fields));
    typed::prune(&mut merged, &last_set, &new_set.union(&others), types);

    let cmp = typed::compare(&live, &merged, types);
    let changed = cmp.modified.union(&cmp.added);

    let mut conflicts: Vec<(String, Vec<PathElement>, &Entry)> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) == mine {
            continue;
        }
        for path in e.fields.intersection(&changed).paths() {
            conflicts.push((e.identifier(), path, e));
        }
    }
    if !conflicts.is_empty() && !req.force {
        // Stable: paths of one owner stay in upstream iteration order.
        conflicts.sort_by(|a, b| a.0.cmp(&b.0));
        return Err(ApplyError::Conflicts(
            conflicts
                .into_iter()
                .map(|(_, path, e)| Conflict {
                    manager: e.manager.clone(),
                    field: display_path(&path),
                    update_api_version: e.update_api_version().map(str::to_owned),
                    subresource: e.subresource.clone(),
                })
                .collect(),
        ));
    }

    // Force moves conflicting fields to the applier; removed fields leave every other owner.
    let taken = changed.union(&cmp.removed);
    for (i, e) in entries.iter_mut().enumerate() {
        if Some(i) != mine {
            e.fields = e.fields.difference(&taken);
        }
    }

    let object_changed = !typed::loosely_equal(&live, &merged);
    match mine.and_then(|i| entries.get_mut(i)) {
        Some(e) => {
            if object_changed || e.fields != new_set {
                e.time = Some(req.now.to_owned());
            }
            e.fields = new_set;
            e.api_version = api_version;
        }
        None => entries.push(Entry {
            manager: req.manager.to_owned(),
            operation: Operation::Apply,
            api_version,
            time: Some(req.now.to_owned()),
            subresource: subresource.map(str::to_owned),
            fields: new_set,
        }),
    }
    managers::encode_into(&mut merged, entries);
    Ok(merged)
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
    if !new.is_object() {
        return;
    }
    let subresource = subresource.filter(|s| !s.is_empty());
    let from_old = || managers::decode_from(old).unwrap_or_default();
    let mut entries = if subresource.is_some() {
        from_old()
    } else if managers::is_reset_request(new) {
        Vec::new()
    } else {
        match managers::decode_from(Some(new)) {
            Ok(entries) if !entries.is_empty() => entries,
            _ => from_old(),
        }
    };
    let api_version = api_version_of(Some(new))
        .or(api_version_of(old))
        .unwrap_or("")
        .to_owned();

    // The kind's empty object already has its struct fields (`spec`, `status` of built-ins), so
    // writing them first is not adding those maps themselves (no `".": {}` for them, as upstream).
    let mut old_view = old
        .map(without_managed_fields)
        .unwrap_or_else(|| Value::Object(Map::new()));
    if let (Value::Object(old_map), Value::Object(new_map)) = (&mut old_view, &*new) {
        for field in types.preexisting_top_level_fields() {
            if new_map.contains_key(*field) && !old_map.contains_key(*field) {
                old_map.insert((*field).to_owned(), Value::Object(Map::new()));
            }
        }
    }
    let cmp = typed::compare(&old_view, &without_managed_fields(new), types);
    let changed = managers::strip(&cmp.modified.union(&cmp.added));
    let taken = changed.union(&cmp.removed);
    for e in &mut entries {
        e.fields = e.fields.difference(&taken);
    }
    if !changed.is_empty() {
        match entries
            .iter_mut()
            .find(|e| e.is(manager, Operation::Update, &api_version, subresource))
        {
            Some(e) => {
                e.fields = e.fields.union(&changed);
                e.time = Some(now.to_owned());
            }
            None => entries.push(Entry {
                manager: manager.to_owned(),
                operation: Operation::Update,
                api_version,
                time: Some(now.to_owned()),
                subresource: subresource.map(str::to_owned),
                fields: changed,
            }),
        }
    }
    managers::encode_into(new, entries);
}
