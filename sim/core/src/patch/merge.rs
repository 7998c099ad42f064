//! JSON merge patch (RFC 7386), with the API server's null pruning.

use serde_json::{Map, Value};

use super::MAX_DEPTH;

pub(super) fn merge_patch(target: &mut Value, patch: &Value, depth: usize) {
    let Value::Object(patch) = patch else {
        *target = without_nulls(patch, depth);
        return;
    };
    if depth >= MAX_DEPTH {
        *target = Value::Object(patch.clone());
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target) = target else { return };
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
            continue;
        }
        match target.get_mut(key) {
            Some(current) if !current.is_null() => merge_patch(current, value, depth + 1),
            _ => {
                target.insert(key.clone(), without_nulls(value, depth + 1));
            }
        }
    }
}

/// `v` without `null` object members, at any depth (list elements that are `null` stay).
fn without_nulls(v: &Value, depth: usize) -> Value {
    if depth >= MAX_DEPTH {
        return v.clone();
    }
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v, depth + 1)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| without_nulls(v, depth + 1)).collect()),
        other => other.clone(),
    }
}
