//! Sets of field paths, as server-side apply records them per manager, and their `FieldsV1`
//! encoding (`f:<field>`, `k:<keys>`, `v:<value>`, `i:<index>`, `.` for "the node itself").

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use serde_json::{Map, Value};

/// Deepest `fieldsV1` document accepted (objects are far shallower; this bounds recursion on
/// hostile input).
const MAX_FIELDS_V1_DEPTH: usize = 256;

/// One step of a field path.
#[derive(Debug, Clone)]
pub enum PathElement {
    /// A field of an object (`f:<name>`).
    Field(String),
    /// An associative-list element, by its key fields sorted by name (`k:{"name":"c"}`).
    Key(Vec<(String, Value)>),
    /// A set element, by its value (`v:"x"`).
    Value(Value),
    /// A list element by position (`i:0`); only for lists whose elements have no identity.
    Index(usize),
}

impl PathElement {
    /// An element key from `(name, value)` pairs in any order.
    pub fn key(mut fields: Vec<(String, Value)>) -> PathElement {
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        PathElement::Key(fields)
    }

    fn rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }

    /// The `FieldsV1` key of this element (`f:replicas`, `k:{"name":"a"}`, `v:"x"`, `i:0`).
    pub fn to_fields_v1_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let mut s = String::from("k:{");
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        s.push(',');
                    }
                    s.push_str(&Value::String(name.clone()).to_string());
                    s.push(':');
                    s.push_str(&value.to_string());
                }
                s.push('}');
                s
            }
            PathElement::Value(value) => format!("v:{value}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a `FieldsV1` key (not `.`).
    pub fn from_fields_v1_key(key: &str) -> Result<PathElement, FieldsV1Error> {
        let bad = || FieldsV1Error(format!("invalid path element {key:?}"));
        let (prefix, rest) = key.split_at_checked(2).ok_or_else(bad)?;
        match prefix {
            "f:" => Ok(PathElement::Field(rest.to_owned())),
            "k:" => match serde_json::from_str::<Value>(rest) {
                Ok(Value::Object(map)) if !map.is_empty() => Ok(PathElement::key(map.into_iter().collect())),
                _ => Err(bad()),
            },
            "v:" => serde_json::from_str::<Value>(rest)
                .map(PathElement::Value)
                .map_err(|_| bad()),
            "i:" => rest.parse::<usize>().map(PathElement::Index).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }
}

/// The upstream order: fields, then keys, then values, then indices; within each by content.
impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.cmp(b),
            (PathElement::Key(a), PathElement::Key(b)) => {
                for ((an, av), (bn, bv)) in a.iter().zip(b) {
                    let c = an.cmp(bn).then_with(|| value_cmp(av, bv));
                    if c != Ordering::Equal {
                        return c;
                    }
                }
                a.len().cmp(&b.len())
            }
            (PathElement::Value(a), PathElement::Value(b)) => value_cmp(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

/// The path notation of conflict messages: `.spec.containers[name="a"].image`.
impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                f.write_char('[')?;
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    write!(f, "{name}={}", value_to_string(value))?;
                }
                f.write_char(']')
            }
            PathElement::Value(value) => write!(f, "[={}]", value_to_string(value)),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A whole path in the notation of conflict messages (`.spec.replicas`).
pub fn display_path(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

/// structured-merge-diff's total order of values: numbers < strings < booleans < lists < maps < null.
pub(crate) fn value_cmp(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(_) => 0,
            Value::String(_) => 1,
            Value::Bool(_) => 2,
            Value::Array(_) => 3,
            Value::Object(_) => 4,
            Value::Null => 5,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let int =
                |n: &serde_json::Number| n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from));
            match (int(x), int(y)) {
                (Some(x), Some(y)) => x.cmp(&y),
                _ => {
                    let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                    x.total_cmp(&y)
                }
            }
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (a, b) in x.iter().zip(y) {
                let c = value_cmp(a, b);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            let mut xs: Vec<_> = x.iter().collect();
            let mut ys: Vec<_> = y.iter().collect();
            xs.sort_by(|a, b| a.0.cmp(b.0));
            ys.sort_by(|a, b| a.0.cmp(b.0));
            for ((ak, av), (bk, bv)) in xs.iter().zip(&ys) {
                let c = ak.cmp(bk).then_with(|| value_cmp(av, bv));
                if c != Ordering::Equal {
                    return c;
                }
            }
            xs.len().cmp(&ys.len())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

/// A value as upstream prints it inside a path (`"a"` quoted, numbers bare).
fn value_to_string(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::String(s) => go_quote(s),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Array(items) => {
            format!(
                "[{}]",
                items.iter().map(value_to_string).collect::<Vec<_>>().join(",")
            )
        }
        Value::Object(map) => {
            let mut items: Vec<_> = map.iter().collect();
            items.sort_by(|a, b| a.0.cmp(b.0));
            items
                .iter()
                .map(|(k, v)| format!("{k}={}", value_to_string(v)))
                .collect()
        }
    }
}

/// Go's `%q`: a double-quoted string with Go escapes.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                if (c as u32) <= 0xffff {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                } else {
                    let _ = write!(out, "\\U{:08x}", c as u32);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A `fieldsV1` document that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fieldsV1: {0}")]
pub struct FieldsV1Error(pub String);

/// One node of a [`FieldSet`]: whether the path to it is in the set, and the set below it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldNode {
    /// The path ending here is a member of the set.
    pub member: bool,
    /// Members below this path.
    pub children: FieldSet,
}

/// A set of field paths, stored as a trie (like structured-merge-diff's `fieldpath.Set`).
/// Nodes that are neither members nor have members below them are never kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    nodes: BTreeMap<PathElement, FieldNode>,
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    /// Whether the set has no members.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node for a direct child, if any member is at or below it.
    pub fn get(&self, pe: &PathElement) -> Option<&FieldNode> {
        self.nodes.get(pe)
    }

    /// The direct children, in upstream order.
    pub fn iter(&self) -> impl Iterator<Item = (&PathElement, &FieldNode)> {
        self.nodes.iter()
    }

    /// Adds `path` (the empty path, "the whole object", is never tracked).
    pub fn insert(&mut self, path: &[PathElement]) {
        let Some((last, parents)) = path.split_last() else {
            return;
        };
        let mut set = self;
        for pe in parents {
            set = &mut set.nodes.entry(pe.clone()).or_default().children;
        }
        set.nodes.entry(last.clone()).or_default().member = true;
    }

    /// Adds the direct child `pe` as a member.
    pub fn insert_member(&mut self, pe: PathElement) {
        self.nodes.entry(pe).or_default().member = true;
    }

    /// Adds `children` below the direct child `pe` (nothing when `children` is empty).
    pub fn insert_children(&mut self, pe: PathElement, children: FieldSet) {
        if children.is_empty() {
            return;
        }
        let node = self.nodes.entry(pe).or_default();
        node.children = std::mem::take(&mut node.children).union(&children);
    }

    /// Whether `path` is a member.
    pub fn contains(&self, path: &[PathElement]) -> bool {
        let Some((last, parents)) = path.split_last() else {
            return false;
        };
        let mut set = self;
        for pe in parents {
            match set.nodes.get(pe) {
                Some(node) => set = &node.children,
                None => return false,
            }
        }
        set.nodes.get(last).is_some_and(|n| n.member)
    }

    /// Whether anything at or below `path` is a member.
    pub fn has_prefix(&self, path: &[PathElement]) -> bool {
        let mut set = self;
        for pe in path {
            match set.nodes.get(pe) {
                Some(node) => set = &node.children,
                None => return false,
            }
        }
        true
    }

    /// Members of either set.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        for (pe, node) in &other.nodes {
            let mine = out.nodes.entry(pe.clone()).or_default();
            mine.member |= node.member;
            mine.children = std::mem::take(&mut mine.children).union(&node.children);
        }
        out
    }

    /// Members of `self` that are not members of `other` (exact paths, not subtrees).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        for (pe, node) in &self.nodes {
            let (member, children) = match other.nodes.get(pe) {
                Some(o) => (node.member && !o.member, node.children.difference(&o.children)),
                None => (node.member, node.children.clone()),
            };
            if member || !children.is_empty() {
                out.nodes.insert(pe.clone(), FieldNode { member, children });
            }
        }
        out
    }

    /// Members of both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        for (pe, node) in &self.nodes {
            let Some(o) = other.nodes.get(pe) else { continue };
            let member = node.member && o.member;
            let children = node.children.intersection(&o.children);
            if member || !children.is_empty() {
                out.nodes.insert(pe.clone(), FieldNode { member, children });
            }
        }
        out
    }

    /// Every member path, in upstream iteration order (at each level: the members, then the
    /// paths below each child).
    pub fn paths(&self) -> Vec<Vec<PathElement>> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Vec<PathElement>>) {
        for (pe, node) in &self.nodes {
            if node.member {
                let mut p = prefix.clone();
                p.push(pe.clone());
                out.push(p);
            }
        }
        for (pe, node) in &self.nodes {
            prefix.push(pe.clone());
            node.children.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    /// The `fieldsV1` JSON of this set.
    pub fn to_fields_v1(&self) -> Value {
        let mut map = Map::new();
        for (pe, node) in &self.nodes {
            let mut inner = Map::new();
            if node.member && !node.children.is_empty() {
                inner.insert(".".to_owned(), Value::Object(Map::new()));
            }
            if let Value::Object(children) = node.children.to_fields_v1() {
                inner.extend(children);
            }
            map.insert(pe.to_fields_v1_key(), Value::Object(inner));
        }
        Value::Object(map)
    }

    /// Reads a `fieldsV1` document.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, FieldsV1Error> {
        FieldSet::parse(v, 0).map(|(_, set)| set)
    }

    /// Returns (has a `.` marker, children).
    fn parse(v: &Value, depth: usize) -> Result<(bool, FieldSet), FieldsV1Error> {
        if depth > MAX_FIELDS_V1_DEPTH {
            return Err(FieldsV1Error("nested too deeply".to_owned()));
        }
        let Value::Object(map) = v else {
            return Err(FieldsV1Error(format!("expected an object, got {v}")));
        };
        let mut dot = false;
        let mut set = FieldSet::new();
        for (key, child) in map {
            if key == "." {
                dot = true;
                continue;
            }
            let pe = PathElement::from_fields_v1_key(key)?;
            let (child_dot, children) = FieldSet::parse(child, depth + 1)?;
            // `{}` is a member; `{".": {}, ...}` a member with members below; `{...}` only below.
            let member = child_dot || children.is_empty();
            set.nodes.insert(pe, FieldNode { member, children });
        }
        Ok((dot, set))
    }
}
