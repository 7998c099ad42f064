//! JSON patch (RFC 6902) with the semantics and messages of `gopkg.in/evanphx/json-patch.v4`,
//! which the API server uses: `test` against a missing path compares with `null`.

use serde_json::Value;

use super::{MAX_JSON_PATCH_OPERATIONS, PatchError};

/// The most bytes `copy` operations of one patch may add (bounds amplification by repeated copies).
const ACCUMULATED_COPY_SIZE_LIMIT: usize = 64 << 20;

/// `github.com/pkg/errors`' `ErrMissing`, appended as the cause of most failures.
const MISSING: &str = "missing value";

pub(super) fn apply(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    apply_with_copy_limit(target, patch, ACCUMULATED_COPY_SIZE_LIMIT)
}

pub(super) fn apply_with_copy_limit(
    target: &Value,
    patch: &Value,
    copy_limit: usize,
) -> Result<Value, PatchError> {
    let ops = match patch {
        Value::Array(ops) => ops.as_slice(),
        Value::Null => &[],
        other => {
            return Err(PatchError::Malformed(format!(
                "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
                go_json_type(other)
            )));
        }
    };
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::Malformed(format!(
            "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            ops.len()
        )));
    }
    let mut operations = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            Value::Object(op) => operations.push(op),
            Value::Null => {}
            other => {
                return Err(PatchError::Malformed(format!(
                    "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
                    go_json_type(other)
                )));
            }
        }
    }
    let mut doc = target.clone();
    let mut copied = 0usize;
    for op in operations {
        let op = Operation(op);
        let result = match op.kind().as_str() {
            "add" => add(&mut doc, &op),
            "remove" => remove(&mut doc, &op),
            "replace" => replace(&mut doc, &op),
            "move" => move_(&mut doc, &op),
            "test" => test(&mut doc, &op),
            "copy" => copy(&mut doc, &op, &mut copied, copy_limit),
            other => Err(format!("Unexpected kind: {other}")),
        };
        result.map_err(PatchError::OperationFailed)?;
    }
    Ok(doc)
}

fn go_json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

struct Operation<'a>(&'a serde_json::Map<String, Value>);

impl Operation<'_> {
    fn kind(&self) -> String {
        match self.0.get("op") {
            Some(Value::String(s)) => s.clone(),
            _ => "unknown".to_owned(),
        }
    }

    fn string_field(&self, field: &str, missing: &str) -> Result<String, String> {
        match self.0.get(field) {
            None | Some(Value::Null) => Err(format!("{missing}: {MISSING}")),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(format!(
                "json: cannot unmarshal {} into Go value of type string",
                go_json_type(other)
            )),
        }
    }

    fn path(&self) -> Result<String, String> {
        self.string_field("path", "operation missing path field")
    }

    fn from(&self) -> Result<String, String> {
        self.string_field("from", "operation, missing from field")
    }

    /// The `value` member; absent reads as `null`.
    fn value(&self) -> Value {
        self.0.get("value").cloned().unwrap_or(Value::Null)
    }
}

/// RFC 6901 unescaping: `~1` then `~0`.
fn decode_key(k: &str) -> String {
    k.replace("~1", "/").replace("~0", "~")
}

/// The container (object or array) holding the last token of `path`, and that token, as
/// evanphx's `findObject`: every intermediate must exist and be an object or an array.
fn find<'a>(doc: &'a mut Value, path: &str) -> Option<(&'a mut Value, String)> {
    let split: Vec<&str> = path.split('/').collect();
    let (last, rest) = split.split_last()?;
    let (_, parents) = rest.split_first()?;
    let mut cur = doc;
    for part in parents {
        let key = decode_key(part);
        cur = match cur {
            Value::Object(map) => map.get_mut(&key)?,
            Value::Array(items) => {
                let len = items.len();
                items.get_mut(existing_index(&key, len).ok()?)?
            }
            _ => return None,
        };
    }
    if !(cur.is_object() || cur.is_array()) {
        return None;
    }
    Some((cur, decode_key(last)))
}

/// Go's `strconv.Atoi`, with its error text.
fn atoi(key: &str) -> Result<i64, String> {
    key.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => "value out of range",
            _ => "invalid syntax",
        };
        format!("strconv.Atoi: parsing {}: {why}", crate::fieldpath::go_quote(key))
    })
}

fn invalid_index(idx: i64) -> String {
    format!("Unable to access invalid index: {idx}: invalid index referenced")
}

/// The position of an existing element (negative indices count from the end).
fn existing_index(key: &str, len: usize) -> Result<usize, String> {
    let idx = atoi(key)?;
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    if idx >= len || idx < -len {
        return Err(invalid_index(idx));
    }
    let pos = if idx < 0 { idx + len } else { idx };
    usize::try_from(pos).map_err(|_| invalid_index(idx))
}

/// `Ok(None)` for a missing object member; errors for bad or out-of-range array indices.
fn get<'a>(con: &'a Value, key: &str) -> Result<Option<&'a Value>, String> {
    match con {
        Value::Object(map) => Ok(map.get(key)),
        Value::Array(items) => Ok(items.get(existing_index(key, items.len())?)),
        _ => Err(MISSING.to_owned()),
    }
}

fn add_at(con: &mut Value, key: &str, value: Value) -> Result<(), String> {
    match con {
        Value::Object(map) => {
            map.insert(key.to_owned(), value);
            Ok(())
        }
        Value::Array(items) => {
            if key == "-" {
                items.push(value);
                return Ok(());
            }
            let idx = atoi(key).map_err(|e| format!("value was not a proper array index: '{key}': {e}"))?;
            let size = i64::try_from(items.len()).unwrap_or(i64::MAX).saturating_add(1);
            if idx >= size || idx < -size {
                return Err(invalid_index(idx));
            }
            let pos = if idx < 0 { idx + size } else { idx };
            let pos = usize::try_from(pos).map_err(|_| invalid_index(idx))?;
            items.insert(pos, value);
            Ok(())
        }
        _ => Err(MISSING.to_owned()),
    }
}

fn remove_at(con: &mut Value, key: &str) -> Result<Value, String> {
    match con {
        Value::Object(map) => map
            .remove(key)
            .ok_or_else(|| format!("Unable to remove nonexistent key: {key}: {MISSING}")),
        Value::Array(items) => {
            let pos = existing_index(key, items.len())?;
            Ok(items.remove(pos))
        }
        _ => Err(MISSING.to_owned()),
    }
}

fn add(doc: &mut Value, op: &Operation<'_>) -> Result<(), String> {
    let path = op
        .path()
        .map_err(|_| format!("add operation failed to decode path: {MISSING}"))?;
    let Some((con, key)) = find(doc, &path) else {
        return Err(format!(
            "add operation does not apply: doc is missing path: \"{path}\": {MISSING}"
        ));
    };
    add_at(con, &key, op.value()).map_err(|e| format!("error in add for path: '{path}': {e}"))
}

fn remove(doc: &mut Value, op: &Operation<'_>) -> Result<(), String> {
    let path = op
        .path()
        .map_err(|_| format!("remove operation failed to decode path: {MISSING}"))?;
    let Some((con, key)) = find(doc, &path) else {
        return Err(format!(
            "remove operation does not apply: doc is missing path: \"{path}\": {MISSING}"
        ));
    };
    remove_at(con, &key)
        .map(drop)
        .map_err(|e| format!("error in remove for path: '{path}': {e}"))
}

fn replace(doc: &mut Value, op: &Operation<'_>) -> Result<(), String> {
    let path = op
        .path()
        .map_err(|e| format!("replace operation failed to decode path: {e}"))?;
    let Some((con, key)) = find(doc, &path) else {
        return Err(format!(
            "replace operation does not apply: doc is missing path: {path}: {MISSING}"
        ));
    };
    let missing_key = || format!("replace operation does not apply: doc is missing key: {path}: {MISSING}");
    match con {
        Value::Object(map) => match map.get_mut(&key) {
            Some(slot) => *slot = op.value(),
            None => return Err(missing_key()),
        },
        Value::Array(items) => {
            let pos = existing_index(&key, items.len()).map_err(|_| missing_key())?;
            if let Some(slot) = items.get_mut(pos) {
                *slot = op.value();
            }
        }
        _ => return Err(missing_key()),
    }
    Ok(())
}

fn move_(doc: &mut Value, op: &Operation<'_>) -> Result<(), String> {
    let from = op
        .from()
        .map_err(|e| format!("move operation failed to decode from: {e}"))?;
    let Some((con, key)) = find(doc, &from) else {
        return Err(format!(
            "move operation does not apply: doc is missing from path: {from}: {MISSING}"
        ));
    };
    if let Value::Object(map) = &*con
        && !map.contains_key(&key)
    {
        return Err(format!(
            "error in move for path: '{key}': unable to get nonexistent key: {key}: {MISSING}"
        ));
    }
    let value = remove_at(con, &key).map_err(|e| format!("error in move for path: '{key}': {e}"))?;
    let path = op
        .path()
        .map_err(|e| format!("move operation failed to decode path: {e}"))?;
    let Some((con, key)) = find(doc, &path) else {
        return Err(format!(
            "move operation does not apply: doc is missing destination path: {path}: {MISSING}"
        ));
    };
    add_at(con, &key, value).map_err(|e| format!("error in move for path: '{path}': {e}"))
}

fn test(doc: &mut Value, op: &Operation<'_>) -> Result<(), String> {
    let path = op
        .path()
        .map_err(|e| format!("test operation failed to decode path: {e}"))?;
    let Some((con, key)) = find(doc, &path) else {
        return Err(format!(
            "test operation does not apply: is missing path: {path}: {MISSING}"
        ));
    };
    let found = get(con, &key).map_err(|e| format!("error in test for path: '{path}': {e}"))?;
    let expected = op.0.get("value");
    let ok = match (found, expected) {
        // The Kubernetes semantics: a missing member equals `null`.
        (None, None | Some(Value::Null)) => true,
        (None, Some(_)) | (Some(_), None) => false,
        (Some(found), Some(expected)) => found == expected,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("testing value {path} failed: test failed"))
    }
}

fn copy(doc: &mut Value, op: &Operation<'_>, copied: &mut usize, limit: usize) -> Result<(), String> {
    let from = op
        .from()
        .map_err(|e| format!("copy operation failed to decode from: {e}"))?;
    let Some((con, key)) = find(doc, &from) else {
        return Err(format!(
            "copy operation does not apply: doc is missing from path: {from}: {MISSING}"
        ));
    };
    let value = match get(con, &key) {
        Ok(Some(v)) => v.clone(),
        Ok(None) => {
            return Err(format!(
                "error in copy for from: '{from}': unable to get nonexistent key: {key}: {MISSING}"
            ));
        }
        Err(e) => return Err(format!("error in copy for from: '{from}': {e}")),
    };
    let path = op
        .path()
        .map_err(|_| format!("copy operation failed to decode path: {MISSING}"))?;
    let Some((con, key)) = find(doc, &path) else {
        return Err(format!(
            "copy operation does not apply: doc is missing destination path: {path}: {MISSING}"
        ));
    };
    *copied = copied.saturating_add(serde_json::to_vec(&value).map(|v| v.len()).unwrap_or(usize::MAX));
    if *copied > limit {
        return Err(format!(
            "Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the limit {limit}"
        ));
    }
    add_at(con, &key, value).map_err(|e| format!("error while adding value during copy: {e}"))
}
