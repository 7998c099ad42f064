//! The schema-driven walks of server-side apply, after structured-merge-diff's `typed` package:
//! the field set of an applied configuration, merging it into the live object, comparing two
//! objects, and removing the fields a manager gave up.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{Map, Value};

use crate::fieldpath::{FieldSet, ListType, ListTypes, PathElement, Step, display_path, value_cmp};

/// Deepest nesting walked; objects are far shallower (this bounds recursion on hostile input).
pub(crate) const MAX_DEPTH: usize = 256;

/// Where a walk is: the list-type lookup path and the field path.
struct Cursor<'a> {
    types: &'a dyn ListTypes,
    steps: Vec<Step>,
    path: Vec<PathElement>,
}

impl<'a> Cursor<'a> {
    fn new(types: &'a dyn ListTypes) -> Self {
        Cursor {
            types,
            steps: Vec::new(),
            path: Vec::new(),
        }
    }

    fn push_field(&mut self, name: &str) {
        self.steps.push(Step::Field(name.to_owned()));
        self.path.push(PathElement::Field(name.to_owned()));
    }

    fn push_item(&mut self, pe: PathElement) {
        self.steps.push(Step::Item);
        self.path.push(pe);
    }

    fn pop(&mut self) {
        self.steps.pop();
        self.path.pop();
    }

    fn list_kind(&self) -> ListType {
        self.types.list_type(&self.steps).unwrap_or(ListType::Atomic)
    }

    fn map_is_atomic(&self) -> bool {
        self.types.map_is_atomic(&self.steps)
    }

    fn too_deep(&self) -> bool {
        self.path.len() > MAX_DEPTH
    }

    fn error(&self, msg: impl std::fmt::Display) -> String {
        if self.path.is_empty() {
            msg.to_string()
        } else {
            format!("{}: {msg}", display_path(&self.path))
        }
    }

    /// The identity of a list element (the cursor is at the list).
    fn item_pe(&self, kind: &ListType, item: &Value) -> Result<PathElement, String> {
        match kind {
            ListType::Set => Ok(PathElement::Value(item.clone())),
            ListType::Map(keys) => {
                let Value::Object(m) = item else {
                    return Err(format!(
                        "expected a map as element of an associative list, got {item}"
                    ));
                };
                let mut fields = Vec::with_capacity(keys.len());
                for key in keys {
                    match m.get(key).filter(|v| !v.is_null()) {
                        Some(v) => fields.push((key.clone(), v.clone())),
                        None => match self.types.map_key_default(&self.steps, key) {
                            Some(default) => fields.push((key.clone(), default)),
                            None => {
                                return Err(format!(
                                    "associative list with keys has an element that omits key field {key:?} (and doesn't have default value)"
                                ));
                            }
                        },
                    }
                }
                Ok(PathElement::key(fields))
            }
            ListType::Atomic => Err("atomic lists have no element identity".to_owned()),
        }
    }

    /// The identity of a live list element, falling back to its position when it has none.
    fn live_item_pe(&self, kind: &ListType, index: usize, item: &Value) -> PathElement {
        self.item_pe(kind, item).unwrap_or(PathElement::Index(index))
    }
}

fn is_empty_container(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Field set of an applied configuration (`ToFieldSet`)

/// The fields an applied configuration sets: scalars, atomic lists and maps, associative-list
/// and set elements (with their fields).  Granular maps are not members themselves, so an
/// empty map sets nothing.
pub(crate) fn to_field_set(config: &Value, types: &dyn ListTypes) -> Result<FieldSet, String> {
    let mut cur = Cursor::new(types);
    let (_, set) = fs_node(config, &mut cur)?;
    Ok(set)
}

/// (whether this node is a member, the members below it).
fn fs_node(v: &Value, cur: &mut Cursor<'_>) -> Result<(bool, FieldSet), String> {
    if cur.too_deep() {
        return Err(cur.error("object nested too deeply"));
    }
    match v {
        Value::Object(m) if !cur.map_is_atomic() => {
            let mut set = FieldSet::new();
            for (k, child) in m {
                cur.push_field(k);
                let r = fs_node(child, cur);
                cur.pop();
                let (member, children) = r?;
                let pe = PathElement::Field(k.clone());
                if member {
                    set.insert_member(pe.clone());
                }
                set.insert_children(pe, children);
            }
            Ok((false, set))
        }
        Value::Array(items) => {
            let kind = cur.list_kind();
            if kind == ListType::Atomic {
                return Ok((true, FieldSet::new()));
            }
            let mut set = FieldSet::new();
            for item in items {
                let pe = cur.item_pe(&kind, item).map_err(|e| cur.error(e))?;
                cur.push_item(pe.clone());
                let r = fs_node(item, cur);
                cur.pop();
                let (_, children) = r?;
                set.insert_member(pe.clone());
                set.insert_children(pe, children);
            }
            Ok((false, set))
        }
        _ => Ok((true, FieldSet::new())),
    }
}

// ---------------------------------------------------------------------------------------------
// Merge (`live ⊕ config`)

/// The live object with the configuration merged in: maps merge recursively, associative lists
/// and sets merge by element identity (upstream's order-preserving interleave), everything else
/// is replaced.  Duplicate elements in the configuration are an error.
pub(crate) fn merge(live: Option<&Value>, config: &Value, types: &dyn ListTypes) -> Result<Value, String> {
    let mut cur = Cursor::new(types);
    merge_node(live, config, &mut cur)
}

fn merge_node(live: Option<&Value>, config: &Value, cur: &mut Cursor<'_>) -> Result<Value, String> {
    if cur.too_deep() {
        return Err(cur.error("object nested too deeply"));
    }
    match config {
        Value::Object(cm) if !cur.map_is_atomic() => {
            let mut out = match live {
                Some(Value::Object(lm)) => lm.clone(),
                _ => Map::new(),
            };
            for (k, cv) in cm {
                cur.push_field(k);
                let merged = merge_node(out.get(k), cv, cur);
                cur.pop();
                out.insert(k.clone(), merged?);
            }
            Ok(Value::Object(out))
        }
        Value::Array(citems) => {
            let kind = cur.list_kind();
            if kind == ListType::Atomic {
                return Ok(config.clone());
            }
            let litems: &[Value] = match live {
                Some(Value::Array(l)) => l,
                _ => &[],
            };
            merge_list(litems, citems, &kind, cur).map(Value::Array)
        }
        _ => Ok(config.clone()),
    }
}

/// structured-merge-diff's `visitListItems` of the merging walker: the result keeps the live
/// order, with configuration elements placed in configuration order among the shared ones.
fn merge_list(
    lhs: &[Value],
    rhs: &[Value],
    kind: &ListType,
    cur: &mut Cursor<'_>,
) -> Result<Vec<Value>, String> {
    let mut rhs_pes = Vec::with_capacity(rhs.len());
    let mut observed_rhs: BTreeMap<PathElement, &Value> = BTreeMap::new();
    for item in rhs {
        let pe = cur.item_pe(kind, item).map_err(|e| cur.error(e))?;
        if observed_rhs.insert(pe.clone(), item).is_some() {
            return Err(cur.error(format!("duplicate entries for key {pe}")));
        }
        rhs_pes.push(pe);
    }
    let mut lhs_pes = Vec::with_capacity(lhs.len());
    // `None` marks an identity that occurs more than once in the live list.
    let mut observed_lhs: BTreeMap<PathElement, Option<&Value>> = BTreeMap::new();
    for (i, item) in lhs.iter().enumerate() {
        let pe = cur.live_item_pe(kind, i, item);
        observed_lhs
            .entry(pe.clone())
            .and_modify(|v| *v = None)
            .or_insert(Some(item));
        lhs_pes.push(pe);
    }

    let mut shared: VecDeque<&PathElement> = rhs_pes
        .iter()
        .filter(|pe| observed_lhs.contains_key(*pe))
        .collect();
    let mut next_shared = shared.pop_front();
    let mut merged_rhs: BTreeSet<PathElement> = BTreeSet::new();
    let mut out = Vec::with_capacity(lhs.len().max(rhs.len()));
    let (mut li, mut ri) = (0, 0);

    fn merge_item(
        pe: &PathElement,
        l: Option<&Value>,
        r: Option<&Value>,
        cur: &mut Cursor<'_>,
    ) -> Result<Option<Value>, String> {
        cur.push_item(pe.clone());
        let res = match r {
            Some(r) => merge_node(l, r, cur).map(Some),
            None => Ok(l.cloned()),
        };
        cur.pop();
        res
    }

    // Every round consumes an element of one side; the bound only guards against a logic slip.
    let mut rounds = 2 * (lhs_pes.len() + rhs_pes.len()) + 2;
    while li < lhs_pes.len() || ri < rhs_pes.len() {
        rounds = match rounds.checked_sub(1) {
            Some(r) => r,
            None => break,
        };
        if let (Some(lpe), Some(rpe)) = (lhs_pes.get(li), rhs_pes.get(ri)) {
            if lpe == rpe {
                merged_rhs.insert(lpe.clone());
                let l = observed_lhs.get(lpe).copied().flatten();
                let r = observed_rhs.get(rpe).copied();
                out.extend(merge_item(lpe, l, r, cur)?);
                li += 1;
                ri += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if observed_rhs.contains_key(lpe) && next_shared.is_some_and(|s| s != lpe) {
                // A shared element, but not the one due now: it comes later, in config order.
                li += 1;
                continue;
            }
        }
        if let Some(lpe) = lhs_pes.get(li) {
            if !observed_rhs.contains_key(lpe) {
                out.extend(merge_item(lpe, lhs.get(li), None, cur)?);
                li += 1;
                continue;
            }
            if merged_rhs.contains(lpe) {
                li += 1;
                continue;
            }
        }
        if let Some(rpe) = rhs_pes.get(ri) {
            merged_rhs.insert(rpe.clone());
            let l = observed_lhs.get(rpe).copied().flatten();
            let r = observed_rhs.get(rpe).copied();
            out.extend(merge_item(rpe, l, r, cur)?);
            ri += 1;
            if next_shared.is_some_and(|s| s == rpe) {
                next_shared = shared.pop_front();
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Compare

/// What changed between two objects, as sets of field paths.
#[derive(Debug, Default)]
pub(crate) struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

/// Compares `old` with `new` like structured-merge-diff's `Compare`: leaves (scalars, atomic
/// values, empty maps and lists) are added, removed or modified; maps, lists and list elements
/// that appear or disappear as a whole are added or removed themselves too.
pub(crate) fn compare(old: &Value, new: &Value, types: &dyn ListTypes) -> Comparison {
    let mut cur = Cursor::new(types);
    let mut out = Comparison::default();
    compare_node(Some(old), Some(new), &mut cur, &mut out);
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Map,
    List,
    Scalar,
}

fn shape(v: Option<&Value>) -> Option<Shape> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::Object(_)) => Some(Shape::Map),
        Some(Value::Array(_)) => Some(Shape::List),
        Some(_) => Some(Shape::Scalar),
    }
}

fn leaf(old: Option<&Value>, new: Option<&Value>, cur: &Cursor<'_>, out: &mut Comparison) {
    match (old, new) {
        (None, Some(_)) => out.added.insert(&cur.path),
        (Some(_), None) => out.removed.insert(&cur.path),
        (Some(a), Some(b)) if value_cmp(a, b) != std::cmp::Ordering::Equal => out.modified.insert(&cur.path),
        _ => {}
    }
}

/// Marks a non-leaf node that appeared or disappeared.
fn container_hook(old: Option<&Value>, new: Option<&Value>, cur: &Cursor<'_>, out: &mut Comparison) {
    if old.is_none() {
        out.added.insert(&cur.path);
    } else if new.is_none() {
        out.removed.insert(&cur.path);
    }
}

fn compare_node(old: Option<&Value>, new: Option<&Value>, cur: &mut Cursor<'_>, out: &mut Comparison) {
    if old.is_none() && new.is_none() {
        return;
    }
    let shapes = (shape(old), shape(new));
    let shape = match shapes {
        (Some(a), Some(b)) if a != b => Shape::Scalar,
        (Some(s), _) | (None, Some(s)) => s,
        (None, None) => Shape::Scalar,
    };
    if cur.too_deep() {
        return leaf(old, new, cur, out);
    }
    match shape {
        Shape::Map => {
            let empty = Map::new();
            let lm = old.and_then(Value::as_object).unwrap_or(&empty);
            let rm = new.and_then(Value::as_object).unwrap_or(&empty);
            if cur.map_is_atomic() || (lm.is_empty() && rm.is_empty()) {
                return leaf(old, new, cur, out);
            }
            for (k, lv) in lm {
                cur.push_field(k);
                compare_node(Some(lv), rm.get(k), cur, out);
                cur.pop();
            }
            for (k, rv) in rm {
                if !lm.contains_key(k) {
                    cur.push_field(k);
                    compare_node(None, Some(rv), cur, out);
                    cur.pop();
                }
            }
            container_hook(old, new, cur, out);
        }
        Shape::List => {
            let kind = cur.list_kind();
            let ll = old.and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
            let rl = new.and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
            if kind == ListType::Atomic || (ll.is_empty() && rl.is_empty()) {
                return leaf(old, new, cur, out);
            }
            // Repeated identities: the first occurrence counts (upstream ignores the others).
            let index = |items: &[Value], cur: &Cursor<'_>| {
                let mut order = Vec::new();
                let mut by_pe: BTreeMap<PathElement, usize> = BTreeMap::new();
                for (i, item) in items.iter().enumerate() {
                    let pe = cur.live_item_pe(&kind, i, item);
                    if !by_pe.contains_key(&pe) {
                        by_pe.insert(pe.clone(), i);
                        order.push(pe);
                    }
                }
                (order, by_pe)
            };
            let (lorder, lby) = index(ll, cur);
            let (rorder, rby) = index(rl, cur);
            for pe in lorder
                .iter()
                .chain(rorder.iter().filter(|pe| !lby.contains_key(*pe)))
            {
                let l = lby.get(pe).and_then(|&i| ll.get(i));
                let r = rby.get(pe).and_then(|&i| rl.get(i));
                cur.push_item(pe.clone());
                compare_node(l, r, cur, out);
                cur.pop();
            }
            container_hook(old, new, cur, out);
        }
        Shape::Scalar => leaf(old, new, cur, out),
    }
}

// ---------------------------------------------------------------------------------------------
// Prune (fields a manager stopped applying)

/// Removes from `obj` what `last` (the applier's previous set) owned and nobody keeps (`keep`:
/// the applier's new set and every other manager's set).  A field is kept while any member is at
/// or below it; a list element only while it is a member itself.  Maps and lists the removal
/// empties are removed too.
pub(crate) fn prune(obj: &mut Value, last: &FieldSet, keep: &FieldSet, types: &dyn ListTypes) {
    let mut cur = Cursor::new(types);
    prune_node(obj, last, keep, &mut cur);
}

fn prune_node(obj: &mut Value, last: &FieldSet, keep: &FieldSet, cur: &mut Cursor<'_>) {
    if cur.too_deep() {
        return;
    }
    let empty = FieldSet::new();
    match obj {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let pe = PathElement::Field(k.clone());
                let Some(owned) = last.get(&pe) else { continue };
                let kept = keep.get(&pe);
                if owned.member && kept.is_none() {
                    map.remove(&k);
                    continue;
                }
                if owned.children.is_empty() {
                    continue;
                }
                let Some(child) = map.get_mut(&k) else { continue };
                let was_empty = is_empty_container(child);
                cur.push_field(&k);
                prune_node(child, &owned.children, kept.map_or(&empty, |n| &n.children), cur);
                cur.pop();
                if kept.is_none() && !was_empty && is_empty_container(child) {
                    map.remove(&k);
                }
            }
        }
        Value::Array(items) => {
            let kind = cur.list_kind();
            if kind == ListType::Atomic {
                return;
            }
            let mut index = 0;
            items.retain_mut(|item| {
                let pe = cur.live_item_pe(&kind, index, item);
                index += 1;
                let Some(owned) = last.get(&pe) else { return true };
                let kept = keep.get(&pe);
                if owned.member && !kept.is_some_and(|n| n.member) {
                    return false;
                }
                if !owned.children.is_empty() {
                    cur.push_item(pe);
                    prune_node(item, &owned.children, kept.map_or(&empty, |n| &n.children), cur);
                    cur.pop();
                }
                true
            });
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Loose equality

/// Equality that treats `null`, `{}` and `[]` members like absent ones (what the server's
/// `omitempty` normalisation does anyway), so that an apply whose only effect is such a member
/// is not a change.
pub(crate) fn loosely_equal(a: &Value, b: &Value) -> bool {
    fn vacuous(v: &Value) -> bool {
        match v {
            Value::Null => true,
            Value::Array(items) => items.is_empty(),
            Value::Object(m) => m.values().all(vacuous),
            _ => false,
        }
    }
    fn eq(a: &Value, b: &Value, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            return a == b;
        }
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                x.iter().all(|(k, xv)| match y.get(k) {
                    Some(yv) => eq(xv, yv, depth + 1),
                    None => vacuous(xv),
                }) && y.iter().all(|(k, yv)| x.contains_key(k) || vacuous(yv))
            }
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(a, b)| eq(a, b, depth + 1))
            }
            _ => value_cmp(a, b) == std::cmp::Ordering::Equal || (vacuous(a) && vacuous(b)),
        }
    }
    eq(a, b, 0)
}
