//! Pruning (upstream `structuralpruning.Prune` + `schemaobjectmeta.Coerce` for `metadata`), dropping
//! non-nullable nulls (`PruneNonNullableNullsWithoutDefaults`) and defaulting (`structuraldefaulting`).

use serde_json::{Map, Value};

use super::compile::{Additional, Node};

/// The `ObjectMeta` fields kept in `metadata` of a resource (root or embedded).
const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Prunes `v` against `node`; `resource_root` keeps `apiVersion`/`kind`/`metadata` as for a
/// resource.  Unknown field paths are appended to `unknown`.
pub(crate) fn prune_value(
    v: &mut Value,
    node: &Node,
    resource_root: bool,
    path: &str,
    unknown: &mut Vec<String>,
) {
    let resource = resource_root || node.embedded;
    if node.preserve_unknown {
        skip_prune(v, node, resource, path, unknown);
        return;
    }
    match v {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let child_path = join(path, &k);
                if resource && keep_resource_field(map, &k, &child_path, unknown) {
                    continue;
                }
                if let Some(prop) = node.properties.get(&k) {
                    if let Some(child) = map.get_mut(&k) {
                        prune_value(child, prop, false, &child_path, unknown);
                    }
                } else {
                    match &node.additional {
                        Additional::Schema(addl) => {
                            if let Some(child) = map.get_mut(&k) {
                                prune_value(child, addl, false, &child_path, unknown);
                            }
                        }
                        Additional::Any => {}
                        Additional::None => {
                            map.remove(&k);
                            unknown.push(child_path);
                        }
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_node) = &node.items {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_value(item, item_node, false, &format!("{path}[{i}]"), unknown);
                }
            }
        }
        _ => {}
    }
}

/// Under `x-kubernetes-preserve-unknown-fields`: unknown fields stay, known ones are still pruned.
fn skip_prune(v: &mut Value, node: &Node, resource: bool, path: &str, unknown: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let child_path = join(path, &k);
                if resource && keep_resource_field(map, &k, &child_path, unknown) {
                    continue;
                }
                let Some(child) = map.get_mut(&k) else { continue };
                if let Some(prop) = node.properties.get(&k) {
                    prune_value(child, prop, false, &child_path, unknown);
                } else if let Additional::Schema(addl) = &node.additional {
                    prune_value(child, addl, false, &child_path, unknown);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_node) = &node.items {
                for (i, item) in items.iter_mut().enumerate() {
                    skip_prune(
                        item,
                        item_node,
                        item_node.embedded,
                        &format!("{path}[{i}]"),
                        unknown,
                    );
                }
            }
        }
        _ => {}
    }
}

/// `apiVersion`/`kind` strings and the `metadata` object of a resource are not pruned by the schema;
/// `metadata` keeps only `ObjectMeta` fields.  Returns whether the field was handled here.
fn keep_resource_field(map: &mut Map<String, Value>, k: &str, path: &str, unknown: &mut Vec<String>) -> bool {
    match k {
        "apiVersion" | "kind" => map.get(k).is_some_and(Value::is_string),
        "metadata" => match map.get_mut(k) {
            Some(Value::Object(meta)) => {
                let keys: Vec<String> = meta.keys().cloned().collect();
                for mk in keys {
                    if !OBJECT_META_FIELDS.contains(&mk.as_str()) {
                        meta.remove(&mk);
                        unknown.push(join(path, &mk));
                    }
                }
                true
            }
            _ => false,
        },
        _ => false,
    }
}

/// Drops `null` values of non-nullable fields that have no default (upstream
/// `PruneNonNullableNullsWithoutDefaults`).
pub(crate) fn drop_non_nullable_nulls(v: &mut Value, node: &Node) {
    match v {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let Some(child_node) = node.field(&k) else {
                    continue;
                };
                let drop = map.get(&k).is_some_and(Value::is_null)
                    && !child_node.nullable
                    && child_node.default.is_none();
                if drop {
                    map.remove(&k);
                } else if let Some(child) = map.get_mut(&k) {
                    drop_non_nullable_nulls(child, child_node);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_node) = &node.items {
                for item in items.iter_mut() {
                    drop_non_nullable_nulls(item, item_node);
                }
            }
        }
        _ => {}
    }
}

/// Applies defaults for absent fields and for `null`s of non-nullable fields, recursively (upstream
/// `structuraldefaulting.Default`).
pub(crate) fn default_value(v: &mut Value, node: &Node) {
    match v {
        Value::Object(map) => {
            for (k, prop) in &node.properties {
                if let Some(d) = &prop.default {
                    let missing = match map.get(k) {
                        None => true,
                        Some(Value::Null) => !prop.nullable,
                        Some(_) => false,
                    };
                    if missing {
                        map.insert(k.clone(), d.clone());
                    }
                }
            }
            for (k, child) in map.iter_mut() {
                if let Some(prop) = node.properties.get(k) {
                    default_value(child, prop);
                } else if let Additional::Schema(addl) = &node.additional {
                    if child.is_null()
                        && !addl.nullable
                        && let Some(d) = &addl.default
                    {
                        *child = d.clone();
                    }
                    default_value(child, addl);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_node) = &node.items {
                for item in items.iter_mut() {
                    if item.is_null()
                        && !item_node.nullable
                        && let Some(d) = &item_node.default
                    {
                        *item = d.clone();
                    }
                    default_value(item, item_node);
                }
            }
        }
        _ => {}
    }
}
