//! Compiling an `openAPIV3Schema` into a [`Node`] tree, rejecting what upstream rejects on CRD
//! create (non-structural schemas, unsupported keywords, bad patterns, CEL rules that do not compile).

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::{Map, Value};

use super::FieldError;
use super::cel::{self, Rule};
use super::gofmt::{Bad, forbidden, invalid, not_supported, required};

/// Deeper schemas are rejected: nothing real comes close, and every walk over a schema recurses.
const MAX_SCHEMA_DEPTH: usize = 64;

/// A JSON type of a schema node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Ty {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Ty::Object => "object",
            Ty::Array => "array",
            Ty::String => "string",
            Ty::Integer => "integer",
            Ty::Number => "number",
            Ty::Boolean => "boolean",
        }
    }
}

/// `additionalProperties` of an object node.
#[derive(Debug, Clone)]
pub(crate) enum Additional {
    /// Not set: only declared properties.
    None,
    /// `additionalProperties: true`: any value, kept as-is.
    Any,
    /// `additionalProperties: {schema}`: a map.
    Schema(Box<Node>),
}

/// `x-kubernetes-list-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListKind {
    Atomic,
    Set,
    Map,
}

/// One compiled schema node.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub ty: Option<Ty>,
    pub int_or_string: bool,
    pub nullable: bool,
    /// The format as validated (unsupported formats are dropped, as upstream strips them).
    pub format: Option<String>,
    pub properties: BTreeMap<String, Node>,
    pub additional: Additional,
    pub items: Option<Box<Node>>,
    pub required: Vec<String>,
    pub enum_values: Option<Vec<Value>>,
    pub maximum: Option<f64>,
    pub exclusive_maximum: bool,
    pub minimum: Option<f64>,
    pub exclusive_minimum: bool,
    pub multiple_of: Option<f64>,
    pub max_length: Option<i64>,
    pub min_length: Option<i64>,
    pub pattern: Option<(String, Regex)>,
    pub max_items: Option<i64>,
    pub min_items: Option<i64>,
    pub max_properties: Option<i64>,
    pub min_properties: Option<i64>,
    pub default: Option<Value>,
    pub preserve_unknown: bool,
    pub embedded: bool,
    pub list_type: Option<ListKind>,
    pub list_map_keys: Vec<String>,
    pub map_atomic: bool,
    pub all_of: Vec<Node>,
    pub any_of: Vec<Node>,
    pub one_of: Vec<Node>,
    pub not: Option<Box<Node>>,
    pub rules: Vec<Rule>,
    /// Whether this node or a node below it (on the structural spine or in `allOf`) has rules.
    pub subtree_rules: bool,
}

impl Node {
    fn empty() -> Node {
        Node {
            ty: None,
            int_or_string: false,
            nullable: false,
            format: None,
            properties: BTreeMap::new(),
            additional: Additional::None,
            items: None,
            required: Vec::new(),
            enum_values: None,
            maximum: None,
            exclusive_maximum: false,
            minimum: None,
            exclusive_minimum: false,
            multiple_of: None,
            max_length: None,
            min_length: None,
            pattern: None,
            max_items: None,
            min_items: None,
            max_properties: None,
            min_properties: None,
            default: None,
            preserve_unknown: false,
            embedded: false,
            list_type: None,
            list_map_keys: Vec::new(),
            map_atomic: false,
            all_of: Vec::new(),
            any_of: Vec::new(),
            one_of: Vec::new(),
            not: None,
            rules: Vec::new(),
            subtree_rules: false,
        }
    }

    /// The schema type as upstream prints it in CEL errors (`"object"`, `""` when untyped).
    pub(crate) fn type_name(&self) -> &'static str {
        self.ty.map(Ty::name).unwrap_or("")
    }

    /// The schema of an object's field: a declared property, else the `additionalProperties` schema.
    pub(crate) fn field(&self, name: &str) -> Option<&Node> {
        match self.properties.get(name) {
            Some(n) => Some(n),
            None => match &self.additional {
                Additional::Schema(n) => Some(n),
                _ => None,
            },
        }
    }

    fn compute_subtree_rules(&self) -> bool {
        !self.rules.is_empty()
            || self.properties.values().any(|n| n.subtree_rules)
            || matches!(&self.additional, Additional::Schema(n) if n.subtree_rules)
            || self.items.as_ref().is_some_and(|n| n.subtree_rules)
            || self.all_of.iter().any(|n| n.subtree_rules)
    }
}

/// Where a node sits, for the structural checks that depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Field,
    Item,
    /// Inside `allOf`/`anyOf`/`oneOf`/`not`: value validations only.
    Value,
}

#[derive(Debug, Clone, Copy)]
struct Ctx {
    level: Level,
    depth: usize,
    /// Whether `oldSelf` can be correlated at this node (transition rules are allowed).
    correlatable: bool,
    /// The root of a resource (the CR itself or an embedded resource).
    resource_root: bool,
}

/// Compiles the root schema; errors carry field paths under `path`.
pub(crate) fn compile_root(schema: &Value, path: &str) -> Result<Node, Vec<FieldError>> {
    let mut errs = Vec::new();
    let ctx = Ctx {
        level: Level::Root,
        depth: 0,
        correlatable: true,
        resource_root: true,
    };
    let node = compile_node(schema, path, ctx, &mut errs);
    if errs.is_empty() { Ok(node) } else { Err(errs) }
}

const SUPPORTED_TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

/// String formats upstream validates (others are ignored, as upstream strips them).
const STRING_FORMATS: [&str; 26] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "quantity",
    "date-time",
];

fn compile_node(raw: &Value, path: &str, ctx: Ctx, errs: &mut Vec<FieldError>) -> Node {
    let mut node = Node::empty();
    let Some(obj) = raw.as_object() else {
        errs.push(invalid(path, Bad::of(raw), "must be a schema object"));
        return node;
    };
    if ctx.depth > MAX_SCHEMA_DEPTH {
        errs.push(forbidden(
            path,
            &format!("schema nesting may not exceed {MAX_SCHEMA_DEPTH} levels"),
        ));
        return node;
    }
    let p = |k: &str| format!("{path}.{k}");

    for (key, msg) in [
        ("$ref", "$ref is not supported"),
        ("definitions", "definitions is not supported"),
        ("dependencies", "dependencies is not supported"),
        ("additionalItems", "additionalItems is not supported"),
        ("patternProperties", "patternProperties is not supported"),
        ("id", "id is not supported"),
    ] {
        if obj.contains_key(key) {
            errs.push(forbidden(&p(key), msg));
        }
    }

    // Scalars.
    match obj.get("type") {
        None | Some(Value::Null) => {}
        Some(Value::String(t)) if t.is_empty() => {}
        Some(Value::String(t)) => {
            node.ty = match t.as_str() {
                "object" => Some(Ty::Object),
                "array" => Some(Ty::Array),
                "string" => Some(Ty::String),
                "integer" => Some(Ty::Integer),
                "number" => Some(Ty::Number),
                "boolean" => Some(Ty::Boolean),
                _ => {
                    let supported: Vec<String> = SUPPORTED_TYPES.iter().map(|s| (*s).to_owned()).collect();
                    errs.push(not_supported(&p("type"), Bad::Str(t.clone()), &supported));
                    None
                }
            }
        }
        Some(other) => errs.push(invalid(&p("type"), Bad::of(other), "must be a string")),
    }
    node.nullable = get_bool(obj, "nullable", &p("nullable"), errs);
    node.int_or_string = get_bool(
        obj,
        "x-kubernetes-int-or-string",
        &p("x-kubernetes-int-or-string"),
        errs,
    );
    node.embedded = get_bool(
        obj,
        "x-kubernetes-embedded-resource",
        &p("x-kubernetes-embedded-resource"),
        errs,
    );
    match obj.get("x-kubernetes-preserve-unknown-fields") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(true)) => node.preserve_unknown = true,
        Some(other) => errs.push(invalid(
            &p("x-kubernetes-preserve-unknown-fields"),
            Bad::of(other),
            "must be true or undefined",
        )),
    }
    if let Some(f) = obj.get("format") {
        match f.as_str() {
            Some(f) => node.format = effective_format(node.ty, f),
            None => errs.push(invalid(&p("format"), Bad::of(f), "must be a string")),
        }
    }
    node.maximum = get_f64(obj, "maximum", &p("maximum"), errs);
    node.minimum = get_f64(obj, "minimum", &p("minimum"), errs);
    node.multiple_of = get_f64(obj, "multipleOf", &p("multipleOf"), errs);
    if let Some(m) = node.multiple_of
        && m <= 0.0
    {
        errs.push(invalid(
            &p("multipleOf"),
            Bad::Float(m),
            "must be greater than zero",
        ));
    }
    node.exclusive_maximum = get_bool(obj, "exclusiveMaximum", &p("exclusiveMaximum"), errs);
    node.exclusive_minimum = get_bool(obj, "exclusiveMinimum", &p("exclusiveMinimum"), errs);
    node.max_length = get_count(obj, "maxLength", &p("maxLength"), errs);
    node.min_length = get_count(obj, "minLength", &p("minLength"), errs);
    node.max_items = get_count(obj, "maxItems", &p("maxItems"), errs);
    node.min_items = get_count(obj, "minItems", &p("minItems"), errs);
    node.max_properties = get_count(obj, "maxProperties", &p("maxProperties"), errs);
    node.min_properties = get_count(obj, "minProperties", &p("minProperties"), errs);
    if get_bool(obj, "uniqueItems", &p("uniqueItems"), errs) {
        errs.push(forbidden(
            &p("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if let Some(pat) = obj.get("pattern") {
        match pat.as_str() {
            Some(s) => match Regex::new(s) {
                Ok(re) => node.pattern = Some((s.to_owned(), re)),
                Err(e) => errs.push(invalid(
                    &p("pattern"),
                    Bad::Str(s.to_owned()),
                    &format!("must be a valid regular expression, but isn't: {e}"),
                )),
            },
            None => errs.push(invalid(&p("pattern"), Bad::of(pat), "must be a string")),
        }
    }
    match obj.get("enum") {
        None | Some(Value::Null) => {}
        Some(Value::Array(values)) => node.enum_values = Some(values.clone()),
        Some(other) => errs.push(invalid(&p("enum"), Bad::of(other), "must be a list")),
    }
    match obj.get("required") {
        None | Some(Value::Null) => {}
        Some(Value::Array(names)) => {
            for (i, n) in names.iter().enumerate() {
                match n.as_str() {
                    Some(s) => node.required.push(s.to_owned()),
                    None => errs.push(invalid(
                        &format!("{path}.required[{i}]"),
                        Bad::of(n),
                        "must be a string",
                    )),
                }
            }
        }
        Some(other) => errs.push(invalid(
            &p("required"),
            Bad::of(other),
            "must be a list of strings",
        )),
    }

    // Kubernetes list and map semantics.
    match obj.get("x-kubernetes-list-type") {
        None | Some(Value::Null) => {}
        Some(Value::String(t)) => {
            node.list_type = match t.as_str() {
                "atomic" => Some(ListKind::Atomic),
                "set" => Some(ListKind::Set),
                "map" => Some(ListKind::Map),
                _ => {
                    let supported = ["atomic".to_owned(), "set".to_owned(), "map".to_owned()];
                    errs.push(not_supported(
                        &p("x-kubernetes-list-type"),
                        Bad::Str(t.clone()),
                        &supported,
                    ));
                    None
                }
            }
        }
        Some(other) => errs.push(invalid(
            &p("x-kubernetes-list-type"),
            Bad::of(other),
            "must be a string",
        )),
    }
    match obj.get("x-kubernetes-list-map-keys") {
        None | Some(Value::Null) => {}
        Some(Value::Array(keys)) => {
            node.list_map_keys = keys
                .iter()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect();
        }
        Some(other) => errs.push(invalid(
            &p("x-kubernetes-list-map-keys"),
            Bad::of(other),
            "must be a list",
        )),
    }
    match obj.get("x-kubernetes-map-type") {
        None | Some(Value::Null) => {}
        Some(Value::String(t)) if t == "atomic" => node.map_atomic = true,
        Some(Value::String(t)) if t == "granular" => {}
        Some(other) => {
            let supported = ["granular".to_owned(), "atomic".to_owned()];
            errs.push(not_supported(
                &p("x-kubernetes-map-type"),
                Bad::of(other),
                &supported,
            ));
        }
    }

    // Children.
    let child_correlatable = ctx.correlatable && !node.map_atomic;
    match obj.get("properties") {
        None | Some(Value::Null) => {}
        Some(Value::Object(props)) => {
            for (k, v) in props {
                let level = if ctx.level == Level::Value {
                    Level::Value
                } else {
                    Level::Field
                };
                let embedded = v
                    .get("x-kubernetes-embedded-resource")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let cctx = Ctx {
                    level,
                    depth: ctx.depth + 1,
                    correlatable: child_correlatable,
                    resource_root: embedded,
                };
                let child = compile_node(v, &format!("{path}.properties[{k}]"), cctx, errs);
                node.properties.insert(k.clone(), child);
            }
        }
        Some(other) => errs.push(invalid(&p("properties"), Bad::of(other), "must be an object")),
    }
    match obj.get("additionalProperties") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(true)) => node.additional = Additional::Any,
        Some(Value::Bool(false)) => errs.push(forbidden(
            &p("additionalProperties"),
            "additionalProperties cannot be set to false",
        )),
        Some(v @ Value::Object(_)) => {
            let level = if ctx.level == Level::Value {
                Level::Value
            } else {
                Level::Field
            };
            let embedded = v
                .get("x-kubernetes-embedded-resource")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let cctx = Ctx {
                level,
                depth: ctx.depth + 1,
                correlatable: child_correlatable,
                resource_root: embedded,
            };
            let child = compile_node(v, &p("additionalProperties"), cctx, errs);
            node.additional = Additional::Schema(Box::new(child));
        }
        Some(other) => errs.push(invalid(
            &p("additionalProperties"),
            Bad::of(other),
            "must be a schema or a boolean",
        )),
    }
    match obj.get("items") {
        None | Some(Value::Null) => {}
        Some(v @ Value::Object(_)) => {
            let level = if ctx.level == Level::Value {
                Level::Value
            } else {
                Level::Item
            };
            let embedded = v
                .get("x-kubernetes-embedded-resource")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let cctx = Ctx {
                level,
                depth: ctx.depth + 1,
                correlatable: ctx.correlatable && node.list_type == Some(ListKind::Map),
                resource_root: embedded,
            };
            node.items = Some(Box::new(compile_node(v, &p("items"), cctx, errs)));
        }
        Some(Value::Array(_)) => errs.push(forbidden(
            &p("items"),
            "items must be a schema object and not an array",
        )),
        Some(other) => errs.push(invalid(&p("items"), Bad::of(other), "must be a schema object")),
    }
    for (key, target) in [("allOf", 0), ("anyOf", 1), ("oneOf", 2)] {
        match obj.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Array(schemas)) => {
                for (i, s) in schemas.iter().enumerate() {
                    let cctx = Ctx {
                        level: Level::Value,
                        depth: ctx.depth + 1,
                        ..ctx
                    };
                    let sub = compile_node(s, &format!("{path}.{key}[{i}]"), cctx, errs);
                    match target {
                        0 => node.all_of.push(sub),
                        1 => node.any_of.push(sub),
                        _ => node.one_of.push(sub),
                    }
                }
            }
            Some(other) => errs.push(invalid(&p(key), Bad::of(other), "must be a list of schemas")),
        }
    }
    if let Some(n) = obj.get("not").filter(|v| !v.is_null()) {
        let cctx = Ctx {
            level: Level::Value,
            depth: ctx.depth + 1,
            ..ctx
        };
        node.not = Some(Box::new(compile_node(n, &p("not"), cctx, errs)));
    }
    if let Some(d) = obj.get("default").filter(|v| !v.is_null()) {
        node.default = Some(d.clone());
    }

    structural_checks(&node, obj, path, ctx, errs);

    // Defaults must validate against their own schema (upstream validates them after pruning).
    if let Some(d) = &node.default {
        let mut pruned = d.clone();
        super::prune::prune_value(&mut pruned, &node, false, "", &mut Vec::new());
        if &pruned != d {
            errs.push(invalid(&p("default"), Bad::of(d), "must not have unknown fields"));
        } else {
            errs.extend(super::validate::openapi_errors(&node, d, Some(&p("default"))));
        }
    }

    // CEL rules, compiled against this node's shape.
    match obj.get("x-kubernetes-validations") {
        None | Some(Value::Null) => {}
        Some(Value::Array(rules)) => {
            let cctx = cel::RuleCtx {
                correlatable: ctx.correlatable,
                resource_root: ctx.resource_root,
            };
            node.rules = cel::compile_rules(rules, &node, &p("x-kubernetes-validations"), cctx, errs);
        }
        Some(other) => errs.push(invalid(
            &p("x-kubernetes-validations"),
            Bad::of(other),
            "must be a list",
        )),
    }
    node.subtree_rules = node.compute_subtree_rules();
    node
}

/// The structural-schema invariants of upstream `validateStructuralInvariants` and friends.
fn structural_checks(
    node: &Node,
    obj: &Map<String, Value>,
    path: &str,
    ctx: Ctx,
    errs: &mut Vec<FieldError>,
) {
    let p = |k: &str| format!("{path}.{k}");
    if ctx.level == Level::Value {
        for key in [
            "type",
            "nullable",
            "default",
            "additionalProperties",
            "x-kubernetes-preserve-unknown-fields",
            "x-kubernetes-embedded-resource",
            "x-kubernetes-int-or-string",
        ] {
            if obj
                .get(key)
                .is_some_and(|v| !v.is_null() && v != &Value::Bool(false))
            {
                errs.push(forbidden(&p(key), "must be empty to be structural"));
            }
        }
        return;
    }
    if node.ty == Some(Ty::Array) && node.items.is_none() {
        errs.push(required(&p("items"), "must be specified"));
    }
    if node.embedded && node.ty != Some(Ty::Object) {
        match node.ty {
            None => errs.push(required(
                &p("type"),
                "must be object if x-kubernetes-embedded-resource is true",
            )),
            Some(t) => errs.push(invalid(
                &p("type"),
                Bad::Str(t.name().to_owned()),
                "must be object if x-kubernetes-embedded-resource is true",
            )),
        }
    }
    if node.int_or_string
        && let Some(t) = node.ty
    {
        errs.push(invalid(
            &p("type"),
            Bad::Str(t.name().to_owned()),
            "must be empty if x-kubernetes-int-or-string is true",
        ));
    }
    if node.ty.is_none() && !node.embedded && !node.int_or_string && !node.preserve_unknown {
        let detail = match ctx.level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            _ => "must not be empty for specified object fields",
        };
        errs.push(required(&p("type"), detail));
    }
    if node.embedded && !matches!(node.additional, Additional::None) {
        errs.push(forbidden(
            &p("additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if !node.properties.is_empty() && !matches!(node.additional, Additional::None) {
        errs.push(forbidden(
            &p("additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    if ctx.level == Level::Root
        && let Some(t) = node.ty
        && t != Ty::Object
    {
        errs.push(invalid(
            &p("type"),
            Bad::Str(t.name().to_owned()),
            "must be object at the root",
        ));
    }
    if node.embedded && !node.preserve_unknown && node.properties.is_empty() {
        errs.push(required(
            &p("properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
    if ctx.resource_root {
        for key in ["apiVersion", "kind"] {
            if let Some(prop) = node.properties.get(key)
                && prop.ty != Some(Ty::String)
            {
                errs.push(invalid(
                    &format!("{path}.properties[{key}].type"),
                    Bad::Str(prop.type_name().to_owned()),
                    "must be string",
                ));
            }
        }
        if let Some(meta) = node.properties.get("metadata") {
            let mpath = format!("{path}.properties[metadata]");
            if meta.ty != Some(Ty::Object) {
                errs.push(invalid(
                    &format!("{mpath}.type"),
                    Bad::Str(meta.type_name().to_owned()),
                    "must be object",
                ));
            }
            let only_names = meta
                .properties
                .iter()
                .all(|(k, v)| (k == "name" || k == "generateName") && v.ty == Some(Ty::String));
            if ctx.level == Level::Root && !only_names {
                errs.push(forbidden(
                    &mpath,
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                ));
            }
        }
    }
    // x-kubernetes-list-type and friends.
    if let Some(lt) = node.list_type {
        if node.ty != Some(Ty::Array) {
            errs.push(invalid(
                &p("x-kubernetes-list-type"),
                Bad::Str(list_kind_name(lt).to_owned()),
                "must only be used if type is array",
            ));
        } else if let Some(items) = &node.items {
            match lt {
                ListKind::Set => {
                    if matches!(items.ty, Some(Ty::Object) | Some(Ty::Array)) && !items.map_atomic {
                        let atomic_list = items.list_type.is_none_or(|k| k == ListKind::Atomic);
                        if items.ty == Some(Ty::Object) || !atomic_list {
                            errs.push(invalid(
                                &format!("{path}.items.type"),
                                Bad::Str(items.type_name().to_owned()),
                                "must be a scalar type if x-kubernetes-list-type is set",
                            ));
                        }
                    }
                }
                ListKind::Map => {
                    if node.list_map_keys.is_empty() {
                        errs.push(required(
                            &p("x-kubernetes-list-map-keys"),
                            "must not be empty if x-kubernetes-list-type is map",
                        ));
                    }
                    if items.ty != Some(Ty::Object) {
                        errs.push(invalid(
                            &format!("{path}.items.type"),
                            Bad::Str(items.type_name().to_owned()),
                            "must be object if parent array's x-kubernetes-list-type is map",
                        ));
                    }
                    for key in &node.list_map_keys {
                        match items.properties.get(key) {
                            None => errs.push(invalid(
                                &p("x-kubernetes-list-map-keys"),
                                Bad::Json(Value::Array(
                                    node.list_map_keys
                                        .iter()
                                        .map(|k| Value::String(k.clone()))
                                        .collect(),
                                )),
                                "entries must all be names of item properties",
                            )),
                            Some(k)
                                if !matches!(
                                    k.ty,
                                    Some(Ty::String)
                                        | Some(Ty::Integer)
                                        | Some(Ty::Number)
                                        | Some(Ty::Boolean)
                                ) =>
                            {
                                errs.push(invalid(
                                    &format!("{path}.items.properties[{key}].type"),
                                    Bad::Str(k.type_name().to_owned()),
                                    "must be a scalar type if parent array's x-kubernetes-list-type is map",
                                ))
                            }
                            Some(_) => {}
                        }
                    }
                }
                ListKind::Atomic => {}
            }
        }
    }
    if !node.list_map_keys.is_empty() && node.list_type != Some(ListKind::Map) {
        errs.push(forbidden(
            &p("x-kubernetes-list-map-keys"),
            "must only be used if x-kubernetes-list-type is \"map\"",
        ));
    }
    if node.map_atomic && node.ty != Some(Ty::Object) {
        errs.push(invalid(
            &p("x-kubernetes-map-type"),
            Bad::Str("atomic".to_owned()),
            "must only be used if type is object",
        ));
    }
}

fn list_kind_name(k: ListKind) -> &'static str {
    match k {
        ListKind::Atomic => "atomic",
        ListKind::Set => "set",
        ListKind::Map => "map",
    }
}

fn effective_format(ty: Option<Ty>, f: &str) -> Option<String> {
    match ty {
        None | Some(Ty::String) => {
            let normalized = f.replace('-', "");
            STRING_FORMATS
                .iter()
                .any(|s| s.replace('-', "") == normalized)
                .then_some(normalized)
        }
        Some(Ty::Integer) => matches!(f, "int32" | "int64").then(|| f.to_owned()),
        Some(Ty::Number) => matches!(f, "float" | "double").then(|| f.to_owned()),
        _ => None,
    }
}

fn get_bool(obj: &Map<String, Value>, key: &str, path: &str, errs: &mut Vec<FieldError>) -> bool {
    match obj.get(key) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            errs.push(invalid(path, Bad::of(other), "must be a boolean"));
            false
        }
    }
}

fn get_f64(obj: &Map<String, Value>, key: &str, path: &str, errs: &mut Vec<FieldError>) -> Option<f64> {
    match obj.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => n.as_f64(),
        Some(other) => {
            errs.push(invalid(path, Bad::of(other), "must be a number"));
            None
        }
    }
}

fn get_count(obj: &Map<String, Value>, key: &str, path: &str, errs: &mut Vec<FieldError>) -> Option<i64> {
    match obj.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) if i >= 0 => Some(i),
            _ => {
                errs.push(invalid(
                    path,
                    Bad::of(&Value::Number(n.clone())),
                    "must not be negative",
                ));
                None
            }
        },
        Some(other) => {
            errs.push(invalid(path, Bad::of(other), "must be an integer"));
            None
        }
    }
}
