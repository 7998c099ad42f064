//! `metadata.managedFields`: decoding, the identity of entries, upstream's field stripping and
//! ordering, and encoding.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use crate::fieldpath::{FieldSet, PathElement, go_quote};

/// `Apply` or `Update`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl Entry {
    /// Whether this entry is the one `(manager, operation, apiVersion, subresource)` writes to.
    /// Appliers keep one entry across API versions, as upstream's `BuildManagerIdentifier`.
    pub fn is(
        &self,
        manager: &str,
        operation: Operation,
        api_version: &str,
        subresource: Option<&str>,
    ) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
            && (operation == Operation::Apply || self.api_version == api_version)
    }

    /// Upstream's manager identifier (the JSON of the entry without time and fields), which
    /// orders conflict groups.
    pub fn identifier(&self) -> String {
        let mut s = format!(
            "{{\"manager\":{},\"operation\":\"{}\"",
            json_str(&self.manager),
            self.operation.as_str()
        );
        if self.operation == Operation::Update && !self.api_version.is_empty() {
            s.push_str(&format!(",\"apiVersion\":{}", json_str(&self.api_version)));
        }
        if let Some(sub) = &self.subresource {
            s.push_str(&format!(",\"subresource\":{}", json_str(sub)));
        }
        s.push('}');
        s
    }

    /// The API version an `Update` entry is printed with (`None` for appliers).
    pub fn update_api_version(&self) -> Option<&str> {
        (self.operation == Operation::Update).then_some(self.api_version.as_str())
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".to_owned(), Value::String(self.manager.clone()));
        m.insert(
            "operation".to_owned(),
            Value::String(self.operation.as_str().to_owned()),
        );
        if !self.api_version.is_empty() {
            m.insert("apiVersion".to_owned(), Value::String(self.api_version.clone()));
        }
        if let Some(time) = &self.time {
            m.insert("time".to_owned(), Value::String(time.clone()));
        }
        m.insert("fieldsType".to_owned(), Value::String("FieldsV1".to_owned()));
        m.insert("fieldsV1".to_owned(), self.fields.to_fields_v1());
        if let Some(sub) = &self.subresource {
            m.insert("subresource".to_owned(), Value::String(sub.clone()));
        }
        Value::Object(m)
    }
}

/// See [`Entry::describe`].
pub(crate) fn describe_owner(
    manager: &str,
    update_api_version: Option<&str>,
    subresource: Option<&str>,
) -> String {
    let mut s = go_quote(manager);
    if let Some(sub) = subresource {
        s.push_str(&format!(" with subresource {}", go_quote(sub)));
    }
    if let Some(v) = update_api_version {
        s.push_str(&format!(" using {v}"));
    }
    s
}

fn json_str(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// The entries of `metadata.managedFields` of `obj` (none when absent).
pub(crate) fn decode_from(obj: Option<&Value>) -> Result<Vec<Entry>, String> {
    decode(
        obj.and_then(|o| o.get("metadata"))
            .and_then(|m| m.get("managedFields")),
    )
}

/// Whether `obj` carries `managedFields: [{}]`, upstream's way of asking for them to be reset.
pub(crate) fn is_reset_request(obj: &Value) -> bool {
    match obj.get("metadata").and_then(|m| m.get("managedFields")) {
        Some(Value::Array(entries)) => {
            entries.len() == 1
                && entries
                    .first()
                    .is_some_and(|e| e.as_object().is_some_and(Map::is_empty))
        }
        _ => false,
    }
}

fn decode(v: Option<&Value>) -> Result<Vec<Entry>, String> {
    let entries = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(entries)) => entries,
        Some(other) => return Err(format!("managedFields must be a list, got {other}")),
    };
    let mut out: Vec<Entry> = Vec::with_capacity(entries.len());
    for e in entries {
        let Value::Object(e) = e else {
            return Err(format!("invalid managedFields entry {e}"));
        };
        let string = |k: &str| -> Result<Option<String>, String> {
            match e.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(format!("managedFields {k} must be a string, got {other}")),
            }
        };
        let operation = match string("operation")?.as_deref() {
            Some("Apply") => Operation::Apply,
            Some("Update") => Operation::Update,
            other => return Err(format!("invalid managedFields operation {other:?}")),
        };
        if string("fieldsType")?.as_deref() != Some("FieldsV1") {
            return Err(format!("invalid fieldsType {:?}", string("fieldsType")?));
        }
        let fields = match e.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::new(),
            Some(v) => FieldSet::from_fields_v1(v).map_err(|err| err.to_string())?,
        };
        let entry = Entry {
            manager: string("manager")?.unwrap_or_default(),
            operation,
            api_version: string("apiVersion")?.unwrap_or_default(),
            time: string("time")?,
            subresource: string("subresource")?.filter(|s| !s.is_empty()),
            fields,
        };
        // A repeated identity replaces the earlier entry, as decoding into upstream's map does.
        out.retain(|o| {
            !o.is(
                &entry.manager,
                entry.operation,
                &entry.api_version,
                entry.subresource.as_deref(),
            )
        });
        out.push(entry);
    }
    Ok(out)
}

/// The fields no manager ever owns (upstream `stripMetaManager`): identity and server-set metadata.
fn strip_set() -> FieldSet {
    let mut set = FieldSet::new();
    for top in ["apiVersion", "kind", "metadata"] {
        set.insert(&[PathElement::Field(top.to_owned())]);
    }
    for meta in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        set.insert(&[
            PathElement::Field("metadata".to_owned()),
            PathElement::Field(meta.to_owned()),
        ]);
    }
    set
}

/// `set` without the fields no manager owns.
pub(crate) fn strip(set: &FieldSet) -> FieldSet {
    set.difference(&strip_set())
}

/// Upstream's order of entries: appliers first, then by time, manager, apiVersion, subresource.
fn entry_order(a: &Entry, b: &Entry) -> Ordering {
    a.operation
        .cmp(&b.operation)
        .then_with(|| {
            a.time
                .as_deref()
                .unwrap_or("")
                .cmp(b.time.as_deref().unwrap_or(""))
        })
        .then_with(|| a.manager.cmp(&b.manager))
        .then_with(|| a.api_version.cmp(&b.api_version))
        .then_with(|| {
            a.subresource
                .as_deref()
                .unwrap_or("")
                .cmp(b.subresource.as_deref().unwrap_or(""))
        })
}

/// Writes `entries` (without empty ones, stripped and sorted) to `obj.metadata.managedFields`,
/// removing the field when there are none (Go `omitempty`).
pub(crate) fn encode_into(obj: &mut Value, mut entries: Vec<Entry>) {
    for e in &mut entries {
        e.fields = strip(&e.fields);
    }
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(entry_order);
    let Value::Object(obj) = obj else { return };
    if entries.is_empty() {
        if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
            meta.remove("managedFields");
        }
        return;
    }
    let meta = obj.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(meta) = meta {
        meta.insert(
            "managedFields".to_owned(),
            Value::Array(entries.iter().map(Entry::to_json).collect()),
        );
    }
}
