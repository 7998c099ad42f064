//! Strategic merge patch, after `k8s.io/apimachinery/pkg/util/strategicpatch` (`mergeMap`,
//! `mergeSlice`, `mergePatchIntoOriginal`, `normalizeElementOrder`), driven by [`ListTypes`].

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::{MAX_DEPTH, PatchError};
use crate::fieldpath::{ListTypes, SmpListStrategy, Step, value_cmp};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

const BAD_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const BAD_SET_ELEMENT_ORDER: &str = "invalid patch format of setElementOrder list";
const BAD_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";

type Result<T> = std::result::Result<T, PatchError>;

pub(super) fn apply(original: &Value, patch: &Value, types: &dyn ListTypes) -> Result<Value> {
    let Value::Object(patch) = patch else {
        return Err(PatchError::Malformed(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            json_type(patch)
        )));
    };
    let original = match original {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let mut walker = Walker {
        types,
        steps: Vec::new(),
    };
    walker.merge_map(original, patch.clone(), 0).map(Value::Object)
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn json_eq(a: &Value, b: &Value) -> bool {
    value_cmp(a, b) == Ordering::Equal
}

fn no_merge_key(m: &Map<String, Value>, key: &str) -> PatchError {
    PatchError::OperationFailed(format!(
        "map: {} does not contain declared merge key: {key}",
        Value::Object(m.clone())
    ))
}

fn bad_patch_type(directive: &Value, m: &Map<String, Value>) -> PatchError {
    let directive = directive
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| directive.to_string());
    PatchError::OperationFailed(format!(
        "unknown patch type: {directive} in map: {}",
        Value::Object(m.clone())
    ))
}

/// The kind of the list elements: all must be objects, or all scalars of one JSON type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ElementKind {
    Map,
    Scalar,
}

fn element_kind(lists: &[&[Value]]) -> Result<Option<ElementKind>> {
    let mut seen: Option<&'static str> = None;
    for v in lists.iter().flat_map(|l| l.iter()) {
        if v.is_null() {
            continue;
        }
        let t = json_type(v);
        if t == "array" {
            return Err(PatchError::OperationFailed(
                "lists of lists are not supported".to_owned(),
            ));
        }
        match seen {
            None => seen = Some(t),
            Some(prev) if prev != t => {
                return Err(PatchError::OperationFailed(
                    "list element types are not identical".to_owned(),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(seen.map(|t| {
        if t == "object" {
            ElementKind::Map
        } else {
            ElementKind::Scalar
        }
    }))
}

/// The merge-key value of a list element (which must be an object holding the key).
fn key_value<'v>(v: &'v Value, key: &str) -> Result<&'v Value> {
    match v {
        Value::Object(m) => m.get(key).ok_or_else(|| no_merge_key(m, key)),
        other => Err(PatchError::OperationFailed(format!(
            "expected map[string]interface {{}}, but got {}",
            json_type(other)
        ))),
    }
}

fn has_key_value(v: &Value, key: &str, wanted: &Value) -> bool {
    matches!(v, Value::Object(m) if m.get(key).is_some_and(|k| json_eq(k, wanted)))
}

fn is_delete_element(v: &Value) -> bool {
    matches!(v, Value::Object(m) if m.get(DIRECTIVE).and_then(Value::as_str) == Some("delete"))
}

/// Position of `item` in `list` (by merge key for maps, by value for scalars).
fn index_of(list: &[Value], item: &Value, key: Option<&str>) -> Option<usize> {
    match key {
        Some(key) => {
            let wanted = match item {
                Value::Object(m) => m.get(key)?,
                _ => return None,
            };
            list.iter().position(|e| has_key_value(e, key, wanted))
        }
        None => list.iter().position(|e| json_eq(e, item)),
    }
}

/// Splits `merged` into the elements present in `by` and the others, keeping their order.
fn partition(merged: Vec<Value>, by: &[Value], key: Option<&str>) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut present = Vec::new();
    let mut others = Vec::new();
    for v in merged {
        let found = match key {
            Some(key) => {
                let kv = key_value(&v, key)?;
                by.iter().any(|e| has_key_value(e, key, kv))
            }
            None => by.iter().any(|e| json_eq(e, &v)),
        };
        if found { present.push(v) } else { others.push(v) }
    }
    Ok((present, others))
}

/// Sorts `to_sort` by the positions of its elements in `order` (stable; unknown elements last,
/// `$patch: delete` elements at the very end).
fn normalize_slice_order(to_sort: Vec<Value>, order: &[Value], key: Option<&str>) -> Result<Vec<Value>> {
    let (mut to_sort, to_delete): (Vec<Value>, Vec<Value>) = match key {
        Some(key) => {
            for v in to_sort.iter().chain(order) {
                key_value(v, key)?;
            }
            to_sort.into_iter().partition(|v| !is_delete_element(v))
        }
        None => (to_sort, Vec::new()),
    };
    to_sort.sort_by_key(|v| index_of(order, v, key).unwrap_or(usize::MAX));
    to_sort.extend(to_delete);
    Ok(to_sort)
}

/// Interleaves the server-only elements (`left`) into the patch elements (`right`), keeping the
/// relative order of each and using `server_order` (the live list) to place them.
fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => match (index_of(server_order, l, key), index_of(server_order, r, key)) {
                (Some(li), Some(ri)) => li < ri,
                _ => false,
            },
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}

fn normalize_element_order(
    patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
) -> Result<Vec<Value>> {
    let patch = normalize_slice_order(patch, patch_order, key)?;
    let server_only = normalize_slice_order(server_only, server_order, key)?;
    Ok(merge_sorted(server_only, patch, server_order, key))
}

/// Checks that the patch list's elements appear in `$setElementOrder` and in the same order.
fn validate_with_order(patch: &[Value], order: &[Value], key: Option<&str>) -> Result<()> {
    if order.is_empty() || patch.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<&Value> = match key {
        Some(_) => patch.iter().filter(|v| !is_delete_element(v)).collect(),
        None => patch.iter().collect(),
    };
    let (mut pi, mut si) = (0, 0);
    while let (Some(p), Some(o)) = (non_delete.get(pi), order.get(si)) {
        if matches!(p, Value::Object(m) if m.contains_key(DIRECTIVE)) {
            pi += 1;
            continue;
        }
        let equal = match key {
            Some(key) => json_eq(key_value(p, key)?, key_value(o, key)?),
            None => json_eq(p, o),
        };
        if equal {
            pi += 1;
        }
        si += 1;
    }
    if pi < non_delete.len() {
        return Err(PatchError::OperationFailed(format!(
            "The order in patch list:\n{}\n doesn't match $setElementOrder list:\n{}\n",
            Value::Array(patch.to_vec()),
            Value::Array(order.to_vec())
        )));
    }
    Ok(())
}

struct Walker<'a> {
    types: &'a dyn ListTypes,
    /// Where we are, for list-type lookups.
    steps: Vec<Step>,
}

impl Walker<'_> {
    fn strategy(&self) -> SmpListStrategy {
        self.types.smp_list_strategy(&self.steps)
    }

    fn merge_map(
        &mut self,
        original: Map<String, Value>,
        mut patch: Map<String, Value>,
        depth: usize,
    ) -> Result<Map<String, Value>> {
        if depth > MAX_DEPTH {
            return Err(PatchError::Malformed("patch nested too deeply".to_owned()));
        }
        if let Some(directive) = patch.get(DIRECTIVE) {
            match directive.as_str() {
                Some("replace") => {
                    patch.remove(DIRECTIVE);
                    return self.merge_map(Map::new(), patch, depth + 1);
                }
                Some("delete") => return Ok(Map::new()),
                Some("merge") => {
                    patch.remove(DIRECTIVE);
                }
                _ => return Err(bad_patch_type(directive, &patch)),
            }
        }
        let mut original = original;

        if let Some(retain) = patch.remove(RETAIN_KEYS) {
            let Value::Array(retain) = retain else {
                return Err(PatchError::Malformed(BAD_RETAIN_KEYS.to_owned()));
            };
            let retained = |k: &str| retain.iter().any(|r| r.as_str() == Some(k));
            for (k, v) in &patch {
                let directive = k.starts_with(DELETE_FROM_PRIMITIVE_LIST) || k.starts_with(SET_ELEMENT_ORDER);
                if !v.is_null() && !directive && !retained(k) {
                    return Err(PatchError::Malformed(BAD_RETAIN_KEYS.to_owned()));
                }
            }
            original.retain(|k, _| retained(k));
        }

        self.apply_set_element_order(&mut original, &mut patch, depth)?;

        for (k, v) in patch {
            if let Some(field) = k.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
                match (original.get_mut(field), v) {
                    (Some(Value::Array(items)), Value::Array(delete)) => {
                        items.retain(|item| !delete.iter().any(|d| json_eq(d, item)));
                    }
                    (Some(Value::Array(_)), _) => {
                        return Err(PatchError::Malformed(BAD_PRIMITIVE_LIST.to_owned()));
                    }
                    _ => {}
                }
                continue;
            }
            if k.starts_with('$') {
                // Directives are not data; unknown ones are dropped like unknown fields.
                continue;
            }
            if v.is_null() {
                original.remove(&k);
                continue;
            }
            self.steps.push(Step::Field(k.clone()));
            let current = original.get_mut(&k).map(std::mem::take);
            let merged = match (current, v) {
                (Some(Value::Object(o)), Value::Object(p)) => {
                    self.merge_map(o, p, depth + 1).map(Value::Object)
                }
                (Some(Value::Array(o)), Value::Array(p)) => {
                    self.merge_list(o, p, depth + 1).map(Value::Array)
                }
                (_, v) => self.fresh(v, depth + 1),
            };
            self.steps.pop();
            original.insert(k, merged?);
        }
        Ok(original)
    }

    /// `$setElementOrder/<field>`: merges the field's list and orders it as the directive says.
    fn apply_set_element_order(
        &mut self,
        original: &mut Map<String, Value>,
        patch: &mut Map<String, Value>,
        depth: usize,
    ) -> Result<()> {
        let directives: Vec<String> = patch
            .keys()
            .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
            .cloned()
            .collect();
        for directive in directives {
            let Some(order) = patch.remove(&directive) else {
                continue;
            };
            let field = directive[SET_ELEMENT_ORDER.len()..].to_owned();
            let Value::Array(order) = order else {
                return Err(PatchError::Malformed(BAD_SET_ELEMENT_ORDER.to_owned()));
            };
            let as_list = |v: Option<&Value>| match v {
                None => Ok(None),
                Some(Value::Array(items)) => Ok(Some(items.clone())),
                Some(_) => Err(PatchError::Malformed(BAD_SET_ELEMENT_ORDER.to_owned())),
            };
            let original_list = as_list(original.get(&field))?;
            let patch_list = as_list(patch.get(&field))?;

            self.steps.push(Step::Field(field.clone()));
            let strategy = self.strategy();
            let key = match &strategy {
                SmpListStrategy::MergeByKey(key) => Some(key.clone()),
                _ => None,
            };
            let merged = match (&original_list, patch_list) {
                (None, None) => {
                    self.steps.pop();
                    continue;
                }
                (Some(o), None) => Ok(o.clone()),
                (original_list, Some(p)) => validate_with_order(&p, &order, key.as_deref())
                    .and_then(|()| self.merge_list(original_list.clone().unwrap_or_default(), p, depth + 1)),
            };
            self.steps.pop();
            let merged = merged?;
            let (in_order, server_only) = partition(merged, &order, key.as_deref())?;
            let server_order = original_list.unwrap_or_default();
            let ordered =
                normalize_element_order(in_order, server_only, &order, &server_order, key.as_deref())?;
            original.insert(field.clone(), Value::Array(ordered));
            patch.remove(&field);
        }
        Ok(())
    }

    /// A patch value for a field the original lacks (or has with another type): its directives
    /// are processed as if merged into nothing.
    fn fresh(&mut self, v: Value, depth: usize) -> Result<Value> {
        match v {
            Value::Object(p) => self.merge_map(Map::new(), p, depth).map(Value::Object),
            Value::Array(p) => self.merge_list(Vec::new(), p, depth).map(Value::Array),
            scalar => Ok(scalar),
        }
    }

    /// Merges the list at the current path according to its strategy.
    fn merge_list(&mut self, original: Vec<Value>, patch: Vec<Value>, depth: usize) -> Result<Vec<Value>> {
        if depth > MAX_DEPTH {
            return Err(PatchError::Malformed("patch nested too deeply".to_owned()));
        }
        let key = match self.strategy() {
            SmpListStrategy::Replace => return self.fresh_elements(patch, depth),
            SmpListStrategy::MergeByKey(key) => Some(key),
            SmpListStrategy::MergePrimitives => None,
        };
        if original.is_empty() && patch.is_empty() {
            return Ok(original);
        }
        match element_kind(&[&original, &patch])? {
            None => Ok(original),
            Some(ElementKind::Scalar) => {
                let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
                for v in original.iter().chain(&patch) {
                    if !merged.iter().any(|m| json_eq(m, v)) {
                        merged.push(v.clone());
                    }
                }
                let (in_patch, server_only) = partition(merged, &patch, None)?;
                normalize_element_order(in_patch, server_only, &patch, &original, None)
            }
            Some(ElementKind::Map) => {
                let Some(key) = key else {
                    let field = match self.steps.last() {
                        Some(Step::Field(f)) => f.clone(),
                        _ => String::new(),
                    };
                    return Err(PatchError::OperationFailed(format!(
                        "cannot merge lists without merge key for {field}"
                    )));
                };
                let (original, patch) = self.special_elements(original, patch, &key, depth)?;
                let merged = self.merge_by_key(original.clone(), patch.clone(), &key, depth)?;
                let (in_patch, server_only) = partition(merged, &patch, Some(&key))?;
                normalize_element_order(in_patch, server_only, &patch, &original, Some(&key))
            }
        }
    }

    /// Elements of a replaced list, with directives inside them processed.
    fn fresh_elements(&mut self, items: Vec<Value>, depth: usize) -> Result<Vec<Value>> {
        self.steps.push(Step::Item);
        let out = items
            .into_iter()
            .filter(|v| !matches!(v, Value::Object(m) if m.len() == 1 && m.contains_key(DIRECTIVE)))
            .map(|v| self.fresh(v, depth + 1))
            .collect();
        self.steps.pop();
        out
    }

    /// Applies the `$patch` elements of a merging list: `delete` removes the original elements
    /// with that key, `replace` makes the other patch elements the whole list.  Returns the new
    /// original and the patch without those elements.
    fn special_elements(
        &mut self,
        mut original: Vec<Value>,
        patch: Vec<Value>,
        key: &str,
        depth: usize,
    ) -> Result<(Vec<Value>, Vec<Value>)> {
        let mut plain = Vec::with_capacity(patch.len());
        let mut replace = false;
        for v in patch {
            let Value::Object(mut m) = v else {
                plain.push(v);
                continue;
            };
            let Some(directive) = m.get(DIRECTIVE) else {
                plain.push(Value::Object(m));
                continue;
            };
            match directive.as_str() {
                Some("delete") => {
                    let wanted = m.get(key).ok_or_else(|| no_merge_key(&m, key))?;
                    original.retain(|e| !has_key_value(e, key, wanted));
                }
                Some("replace") => replace = true,
                Some("merge") => {
                    m.remove(DIRECTIVE);
                    if !m.is_empty() {
                        plain.push(Value::Object(m));
                    }
                }
                _ => return Err(bad_patch_type(directive, &m)),
            }
        }
        if replace {
            return Ok((self.fresh_elements(plain, depth)?, Vec::new()));
        }
        Ok((original, plain))
    }

    /// Merges each patch element into the original element with the same key, or appends it.
    fn merge_by_key(
        &mut self,
        mut original: Vec<Value>,
        patch: Vec<Value>,
        key: &str,
        depth: usize,
    ) -> Result<Vec<Value>> {
        self.steps.push(Step::Item);
        let result = (|| {
            for v in patch {
                let Value::Object(p) = v else {
                    return Err(PatchError::OperationFailed(format!(
                        "expected map[string]interface {{}}, but got {}",
                        json_type(&v)
                    )));
                };
                let wanted = p.get(key).ok_or_else(|| no_merge_key(&p, key))?.clone();
                let found = original.iter().position(|e| has_key_value(e, key, &wanted));
                match found.and_then(|i| original.get_mut(i)) {
                    Some(slot) => {
                        let Value::Object(o) = std::mem::take(slot) else {
                            continue;
                        };
                        *slot = Value::Object(self.merge_map(o, p, depth + 1)?);
                    }
                    None => original.push(Value::Object(self.merge_map(Map::new(), p, depth + 1)?)),
                }
            }
            Ok(original)
        })();
        self.steps.pop();
        result
    }
}
