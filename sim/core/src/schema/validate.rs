//! OpenAPI validation of a custom resource as upstream `kube-openapi` validates it (messages,
//! paths and the conversion to field errors of apiextensions), plus the list-type uniqueness and
//! embedded-resource checks of the apiextensions strategy.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde_json::{Map, Number, Value};

use super::FieldError;
use super::compile::{Additional, ListKind, Node};
use super::gofmt::{
    Bad, child, duplicate, go_float, invalid, not_supported, required, too_long, too_many, type_invalid,
};
use crate::selector::go_quote;

/// What kind of upstream validation error this is: it decides the field error it becomes.
#[derive(Debug)]
enum Code {
    Required,
    Enum(Vec<Value>),
    TooLong(i64),
    MaxItems {
        actual: i64,
        max: i64,
    },
    TooManyProperties {
        actual: i64,
        max: i64,
    },
    InvalidType,
    Other,
    /// Not an `openapierrors.Validation` (composite errors): reported at the base path with `""`.
    Plain,
}

#[derive(Debug)]
struct OErr {
    code: Code,
    /// The kube-openapi path (`spec.replicas`, `.spec` for required fields at the root).
    name: String,
    value: Bad,
    message: String,
}

const IN: &str = "body";

fn json_kind(v: &Value) -> (&'static str, &'static str) {
    match v {
        Value::Null => ("null", ""),
        Value::Bool(_) => ("boolean", ""),
        Value::String(_) => ("string", ""),
        Value::Number(n) if n.is_i64() => ("integer", "int64"),
        Value::Number(_) => ("number", "float64"),
        Value::Array(_) => ("array", ""),
        Value::Object(_) => ("object", ""),
    }
}

fn types_of(node: &Node) -> Vec<&'static str> {
    if node.int_or_string {
        vec!["integer", "string"]
    } else {
        node.ty.map(|t| vec![t.name()]).unwrap_or_default()
    }
}

fn invalid_type(name: &str, type_name: &str, value: &str) -> OErr {
    OErr {
        code: Code::InvalidType,
        name: name.to_owned(),
        value: Bad::Str(value.to_owned()),
        message: format!("{name} in {IN} must be of type {type_name}: {}", go_quote(value)),
    }
}

fn other(name: &str, value: Bad, message: String) -> OErr {
    OErr {
        code: Code::Other,
        name: name.to_owned(),
        value,
        message,
    }
}

fn plain(message: String) -> OErr {
    OErr {
        code: Code::Plain,
        name: String::new(),
        value: Bad::Str(String::new()),
        message,
    }
}

fn as_f64(n: &Number) -> f64 {
    n.as_f64().unwrap_or(0.0)
}

fn schema_validate(node: &Node, data: &Value, path: &str, out: &mut Vec<OErr>) {
    let types = types_of(node);
    if data.is_null() {
        if !types.is_empty() && !node.nullable {
            out.push(invalid_type(path, &types.join(","), "null"));
        }
        if let Some(values) = &node.enum_values {
            out.push(enum_fail(path, data, values));
        }
        return;
    }
    // Type.
    if !types.is_empty() || node.format.is_some() {
        type_check(node, &types, data, path, out);
    }
    // allOf / anyOf / oneOf / not.
    schema_props(node, data, path, out);
    match data {
        Value::String(s) => {
            string_checks(node, s, path, out);
            if let Some(f) = &node.format
                && !format_ok(f, s)
            {
                out.push(invalid_type(path, f, s));
            }
        }
        Value::Number(n) => number_checks(node, n, path, out),
        Value::Array(items) => {
            if let Some(item_node) = &node.items {
                for (i, item) in items.iter().enumerate() {
                    schema_validate(item_node, item, &format!("{path}[{i}]"), out);
                }
            }
            let size = i64::try_from(items.len()).unwrap_or(i64::MAX);
            if let Some(min) = node.min_items
                && size < min
            {
                out.push(other(
                    path,
                    Bad::Int(size),
                    format!("{path} in {IN} should have at least {min} items"),
                ));
            }
            if let Some(max) = node.max_items
                && size > max
            {
                out.push(OErr {
                    code: Code::MaxItems { actual: size, max },
                    name: path.to_owned(),
                    value: Bad::Int(size),
                    message: format!("{path} in {IN} should have at most {max} items"),
                });
            }
        }
        _ => {}
    }
    if let Some(values) = &node.enum_values
        && !values.iter().any(|e| json_equal(e, data))
    {
        out.push(enum_fail(path, data, values));
    }
    if let Value::Object(map) = data {
        object_checks(node, map, path, out);
    }
}

fn enum_fail(path: &str, data: &Value, values: &[Value]) -> OErr {
    OErr {
        code: Code::Enum(values.to_vec()),
        name: path.to_owned(),
        value: Bad::of(data),
        message: format!("{path} in {IN} should be one of {values:?}"),
    }
}

fn type_check(node: &Node, types: &[&str], data: &Value, path: &str, out: &mut Vec<OErr>) {
    let (sch_type, data_format) = json_kind(data);
    let contains = |t: &str| types.contains(&t);
    let is_float_int = sch_type == "number"
        && data
            .as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0)
        && contains("integer");
    let is_int_float = sch_type == "integer" && contains("number");
    let is_string_or_slice = matches!(data, Value::String(_) | Value::Array(_));
    if let Some(format) = &node.format
        && !is_string_or_slice
        && !(contains(sch_type) || data_format == format || is_float_int || is_int_float)
    {
        out.push(invalid_type(path, format, data_format));
        return;
    }
    if !(contains("number") || contains("integer")) && node.format.is_some() && is_string_or_slice {
        return;
    }
    if !(contains(sch_type) || is_float_int || is_int_float) {
        out.push(invalid_type(path, &types.join(","), sch_type));
    }
}

fn schema_props(node: &Node, data: &Value, path: &str, out: &mut Vec<OErr>) {
    let run = |sub: &Node| {
        let mut errs = Vec::new();
        schema_validate(sub, data, path, &mut errs);
        errs
    };
    if !node.any_of.is_empty() {
        let mut best: Option<Vec<OErr>> = None;
        let mut ok = false;
        for sub in &node.any_of {
            let errs = run(sub);
            if errs.is_empty() {
                ok = true;
                best = None;
                break;
            }
            if best.as_ref().is_none_or(|b| errs.len() < b.len()) {
                best = Some(errs);
            }
        }
        if !ok {
            out.push(plain(format!(
                "{} must validate at least one schema (anyOf)",
                go_quote(path)
            )));
        }
        out.extend(best.unwrap_or_default());
    }
    if !node.one_of.is_empty() {
        let mut best: Option<Vec<OErr>> = None;
        let mut valid = 0;
        for sub in &node.one_of {
            let errs = run(sub);
            if errs.is_empty() {
                valid += 1;
                best = None;
                continue;
            }
            if valid == 0 && best.as_ref().is_none_or(|b| errs.len() < b.len()) {
                best = Some(errs);
            }
        }
        if valid != 1 {
            let additional = if valid == 0 {
                "Found none valid".to_owned()
            } else {
                format!("Found {valid} valid alternatives")
            };
            out.push(plain(format!(
                "{} must validate one and only one schema (oneOf). {additional}",
                go_quote(path)
            )));
            out.extend(best.unwrap_or_default());
        }
    }
    if !node.all_of.is_empty() {
        let mut valid = 0;
        let mut all = Vec::new();
        for sub in &node.all_of {
            let errs = run(sub);
            if errs.is_empty() {
                valid += 1;
            }
            all.extend(errs);
        }
        out.extend(all);
        if valid != node.all_of.len() {
            let additional = if valid == 0 { ". None validated" } else { "" };
            out.push(plain(format!(
                "{} must validate all the schemas (allOf){additional}",
                go_quote(path)
            )));
        }
    }
    if let Some(not) = &node.not
        && run(not).is_empty()
    {
        out.push(plain(format!(
            "{} must not validate the schema (not)",
            go_quote(path)
        )));
    }
}

fn string_checks(node: &Node, s: &str, path: &str, out: &mut Vec<OErr>) {
    let len = i64::try_from(s.chars().count()).unwrap_or(i64::MAX);
    if let Some(max) = node.max_length
        && len > max
    {
        out.push(OErr {
            code: Code::TooLong(max),
            name: path.to_owned(),
            value: Bad::Str(s.to_owned()),
            message: format!("{path} in {IN} should be at most {max} chars long"),
        });
        return;
    }
    if let Some(min) = node.min_length
        && len < min
    {
        out.push(other(
            path,
            Bad::Str(s.to_owned()),
            format!("{path} in {IN} should be at least {min} chars long"),
        ));
        return;
    }
    if let Some((pattern, re)) = &node.pattern
        && !re.is_match(s)
    {
        out.push(other(
            path,
            Bad::Str(s.to_owned()),
            format!("{path} in {IN} should match '{pattern}'"),
        ));
    }
}

fn number_checks(node: &Node, n: &Number, path: &str, out: &mut Vec<OErr>) {
    if let Some(i) = n.as_i64() {
        // Integers compare against the bounds truncated to int64, as upstream's native-type checks do.
        if let Some(m) = node.multiple_of {
            let factor = m as i64;
            if factor > 0 && m.fract() == 0.0 {
                if i % factor != 0 {
                    out.push(other(
                        path,
                        Bad::Int(i),
                        format!("{path} in {IN} should be a multiple of {factor}"),
                    ));
                }
            } else if !is_multiple(i as f64, m) {
                out.push(other(
                    path,
                    Bad::Int(i),
                    format!("{path} in {IN} should be a multiple of {}", go_float(m)),
                ));
            }
        }
        if let Some(min) = node.minimum {
            let (fails, shown) = if min.fract() == 0.0 && min.abs() < 9.2e18 {
                let m = min as i64;
                (if node.exclusive_minimum { i <= m } else { i < m }, m.to_string())
            } else {
                let f = i as f64;
                (
                    if node.exclusive_minimum { f <= min } else { f < min },
                    go_float(min),
                )
            };
            if fails {
                let op = if node.exclusive_minimum {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                out.push(other(
                    path,
                    Bad::Int(i),
                    format!("{path} in {IN} should be {op} {shown}"),
                ));
            }
        }
        if let Some(max) = node.maximum {
            let (fails, shown) = if max.fract() == 0.0 && max.abs() < 9.2e18 {
                let m = max as i64;
                (if node.exclusive_maximum { i >= m } else { i > m }, m.to_string())
            } else {
                let f = i as f64;
                (
                    if node.exclusive_maximum { f >= max } else { f > max },
                    go_float(max),
                )
            };
            if fails {
                let op = if node.exclusive_maximum {
                    "less than"
                } else {
                    "less than or equal to"
                };
                out.push(other(
                    path,
                    Bad::Int(i),
                    format!("{path} in {IN} should be {op} {shown}"),
                ));
            }
        }
        return;
    }
    let f = as_f64(n);
    if let Some(m) = node.multiple_of
        && !is_multiple(f, m)
    {
        out.push(other(
            path,
            Bad::Float(f),
            format!("{path} in {IN} should be a multiple of {}", go_float(m)),
        ));
    }
    if let Some(min) = node.minimum {
        let fails = if node.exclusive_minimum { f <= min } else { f < min };
        if fails {
            let op = if node.exclusive_minimum {
                "greater than"
            } else {
                "greater than or equal to"
            };
            out.push(other(
                path,
                Bad::Float(f),
                format!("{path} in {IN} should be {op} {}", go_float(min)),
            ));
        }
    }
    if let Some(max) = node.maximum {
        let fails = if node.exclusive_maximum { f >= max } else { f > max };
        if fails {
            let op = if node.exclusive_maximum {
                "less than"
            } else {
                "less than or equal to"
            };
            out.push(other(
                path,
                Bad::Float(f),
                format!("{path} in {IN} should be {op} {}", go_float(max)),
            ));
        }
    }
}

fn is_multiple(data: f64, factor: f64) -> bool {
    if factor <= 0.0 {
        return true;
    }
    let mult = if factor < 1.0 {
        1.0 / factor * data
    } else {
        data / factor
    };
    mult.is_finite() && mult.fract() == 0.0
}

fn object_checks(node: &Node, map: &Map<String, Value>, path: &str, out: &mut Vec<OErr>) {
    let count = i64::try_from(map.len()).unwrap_or(i64::MAX);
    if let Some(min) = node.min_properties
        && count < min
    {
        out.push(other(
            path,
            Bad::Int(count),
            format!("{path} in {IN} should have at least {min} properties"),
        ));
        return;
    }
    if let Some(max) = node.max_properties
        && count > max
    {
        out.push(OErr {
            code: Code::TooManyProperties { actual: count, max },
            name: path.to_owned(),
            value: Bad::Int(count),
            message: format!("{path} in {IN} should have at most {max} properties"),
        });
        return;
    }
    if let Additional::Schema(addl) = &node.additional {
        for (k, v) in map {
            if !node.properties.contains_key(k) {
                schema_validate(addl, v, &format!("{path}.{k}"), out);
            }
        }
    }
    for (name, prop) in &node.properties {
        if let Some(v) = map.get(name) {
            let child_path = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            schema_validate(prop, v, &child_path, out);
        }
    }
    for k in &node.required {
        if !map.contains_key(k) {
            let name = format!("{path}.{k}");
            let message = format!("{name} in {IN} is required");
            out.push(OErr {
                code: Code::Required,
                name,
                value: Bad::Null,
                message,
            });
        }
    }
}

/// JSON equality with numbers compared by value (`1` equals `1.0`), as Go's converting comparison.
pub(crate) fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => as_f64(x) == as_f64(y),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Runs the OpenAPI validation and converts the results like apiextensions'
/// `kubeOpenAPIResultToFieldErrors`; `base` is the field path of `data` (`None` for a resource).
pub(crate) fn openapi_errors(node: &Node, data: &Value, base: Option<&str>) -> Vec<FieldError> {
    let mut raw = Vec::new();
    schema_validate(node, data, "", &mut raw);
    raw.into_iter()
        .map(|e| {
            let name = e.name.strip_prefix('.').unwrap_or(&e.name);
            let field = if e.name.is_empty() || e.name == "." {
                base.unwrap_or("<nil>").to_owned()
            } else {
                child(base, name)
            };
            match e.code {
                Code::Plain => invalid(base.unwrap_or("<nil>"), Bad::Str(String::new()), &e.message),
                Code::Required => required(&field, ""),
                Code::Enum(values) => {
                    let supported: Vec<String> = values
                        .iter()
                        .map(|v| match v {
                            Value::String(s) => s.clone(),
                            other => serde_json::to_string(other).unwrap_or_default(),
                        })
                        .collect();
                    not_supported(&field, e.value, &supported)
                }
                Code::TooLong(max) => too_long(&field, max),
                Code::MaxItems { actual, max } | Code::TooManyProperties { actual, max } => {
                    too_many(&field, actual, max)
                }
                Code::InvalidType => type_invalid(&field, e.value, &e.message),
                Code::Other => invalid(&field, e.value, &e.message),
            }
        })
        .collect()
}

fn path_child(base: &str, name: &str) -> String {
    if base.is_empty() {
        name.to_owned()
    } else {
        format!("{base}.{name}")
    }
}

/// `x-kubernetes-list-type: set|map` uniqueness (upstream `structurallisttype.ValidateListSetsAndMaps`).
pub(crate) fn list_errors(node: &Node, data: &Value, path: &str, out: &mut Vec<FieldError>) {
    match data {
        Value::Object(map) => {
            for (k, v) in map {
                if let Some(prop) = node.properties.get(k) {
                    list_errors(prop, v, &path_child(path, k), out);
                } else if let Additional::Schema(addl) = &node.additional {
                    list_errors(addl, v, &format!("{path}[{k}]"), out);
                }
            }
        }
        Value::Array(items) => {
            match node.list_type {
                Some(ListKind::Set) => {
                    for i in non_unique(items) {
                        out.push(duplicate(&format!("{path}[{i}]"), Bad::of(&items[i])));
                    }
                }
                Some(ListKind::Map) => list_map_errors(node, items, path, out),
                _ => {}
            }
            if let Some(item_node) = &node.items {
                for (i, item) in items.iter().enumerate() {
                    list_errors(item_node, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// Indices of second occurrences, as upstream reports duplicates once per value.
fn non_unique(items: &[Value]) -> Vec<usize> {
    let mut seen: HashMap<String, u32> = HashMap::with_capacity(items.len());
    let mut out = Vec::new();
    for (i, x) in items.iter().enumerate() {
        let times = seen.entry(canonical_json(x)).or_insert(0);
        if *times == 1 {
            out.push(i);
        }
        *times += 1;
    }
    out
}

/// JSON text with object keys sorted (what Go's `json.Marshal` of a map produces), so equal values
/// have equal text whatever the key order of the input.
pub(crate) fn canonical_json(v: &Value) -> String {
    fn inner(v: &Value, out: &mut String, depth: usize) {
        if depth > 256 {
            out.push_str("null");
            return;
        }
        match v {
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    inner(item, out, depth + 1);
                }
                out.push(']');
            }
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    if let Some(item) = map.get(k) {
                        inner(item, out, depth + 1);
                    }
                }
                out.push('}');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    inner(v, &mut out, 0);
    out
}

fn list_map_errors(node: &Node, items: &[Value], path: &str, out: &mut Vec<FieldError>) {
    for (i, x) in items.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            out.push(invalid(
                &format!("{path}[{i}]"),
                Bad::of(x),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    let item_node = node.items.as_deref();
    let keys: Vec<Value> = items
        .iter()
        .map(|x| {
            let mut key = Map::new();
            if let Some(obj) = x.as_object() {
                for k in &node.list_map_keys {
                    match obj.get(k) {
                        Some(v) => {
                            key.insert(k.clone(), v.clone());
                        }
                        None => {
                            if let Some(d) = item_node
                                .and_then(|n| n.properties.get(k))
                                .and_then(|p| p.default.clone())
                            {
                                key.insert(k.clone(), d);
                            }
                        }
                    }
                }
            }
            Value::Object(key)
        })
        .collect();
    for i in non_unique(&keys) {
        out.push(duplicate(&format!("{path}[{i}]"), Bad::Json(keys[i].clone())));
    }
}

/// `apiVersion`/`kind` of embedded resources (upstream `schemaobjectmeta.Validate`).
pub(crate) fn embedded_errors(node: &Node, data: &Value, path: &str, out: &mut Vec<FieldError>) {
    match data {
        Value::Object(map) => {
            if node.embedded {
                embedded_resource(map, path, out);
            }
            for (k, v) in map {
                if let Some(prop) = node.properties.get(k) {
                    embedded_errors(prop, v, &path_child(path, k), out);
                } else if let Additional::Schema(addl) = &node.additional {
                    embedded_errors(addl, v, &format!("{path}[{k}]"), out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_node) = &node.items {
                for (i, item) in items.iter().enumerate() {
                    embedded_errors(item_node, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn embedded_resource(map: &Map<String, Value>, path: &str, out: &mut Vec<FieldError>) {
    let api_version = path_child(path, "apiVersion");
    let kind_path = path_child(path, "kind");
    match map.get("apiVersion") {
        None => out.push(required(&api_version, "must not be empty")),
        Some(Value::String(s)) if s.is_empty() => {
            out.push(invalid(&api_version, Bad::Str(s.clone()), "must not be empty"))
        }
        Some(Value::String(s)) if s.matches('/').count() > 1 => out.push(invalid(
            &api_version,
            Bad::Str(s.clone()),
            &format!("unexpected GroupVersion string: {s}"),
        )),
        Some(Value::String(_)) => {}
        Some(other) => out.push(invalid(&api_version, Bad::of(other), "must be a string")),
    }
    match map.get("kind") {
        None => out.push(required(&kind_path, "must not be empty")),
        Some(Value::String(s)) if s.is_empty() => {
            out.push(invalid(&kind_path, Bad::Str(s.clone()), "must not be empty"))
        }
        Some(Value::String(s)) => {
            let lower = s.to_lowercase();
            let b = lower.as_bytes();
            let ok = lower.len() <= 63
                && b.first().is_some_and(u8::is_ascii_lowercase)
                && b.last()
                    .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
            if !ok {
                out.push(invalid(
                    &kind_path,
                    Bad::Str(s.clone()),
                    "may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
                ));
            }
        }
        Some(other) => out.push(invalid(&kind_path, Bad::of(other), "must be a string")),
    }
}

/// Whether a string satisfies one of the formats upstream validates (normalised, without `-`).
fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "datetime" => is_date_time(s),
        "date" => is_date(s),
        "byte" => is_base64(s),
        "uuid" => is_uuid(s, None),
        "uuid3" => is_uuid(s, Some(b'3')),
        "uuid4" => is_uuid(s, Some(b'4')),
        "uuid5" => is_uuid(s, Some(b'5')),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "hostname" => is_hostname(s),
        "email" => is_email(s),
        "uri" => is_uri(s),
        "hexcolor" => is_hexcolor(s),
        "bsonobjectid" => s.len() == 24 && s.bytes().all(|c| c.is_ascii_hexdigit()),
        "duration" => is_duration(s),
        "quantity" => crate::quantity::parse_milli(s).is_ok(),
        // password, isbn*, creditcard, ssn, rgbcolor: accepted as any string.
        _ => true,
    }
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit())
}

fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if !s.is_ascii() || b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let (Ok(m), Ok(d)) = (s[5..7].parse::<u32>(), s[8..10].parse::<u32>()) else {
        return false;
    };
    digits(&s[0..4])
        && digits(&s[5..7])
        && digits(&s[8..10])
        && (1..=12).contains(&m)
        && (1..=31).contains(&d)
}

fn is_date_time(s: &str) -> bool {
    if s.len() < 20 || !s.is_char_boundary(10) || !s.is_char_boundary(11) {
        return false;
    }
    if !is_date(&s[..10]) || !matches!(s.as_bytes()[10], b'T' | b't' | b' ') {
        return false;
    }
    let rest = &s[11..];
    let b = rest.as_bytes();
    if b.len() < 9
        || !b[..8].is_ascii()
        || b[2] != b':'
        || b[5] != b':'
        || !digits(&rest[0..2])
        || !digits(&rest[3..5])
        || !digits(&rest[6..8])
    {
        return false;
    }
    let (Ok(h), Ok(mi), Ok(se)) = (
        rest[0..2].parse::<u32>(),
        rest[3..5].parse::<u32>(),
        rest[6..8].parse::<u32>(),
    ) else {
        return false;
    };
    if h > 23 || mi > 59 || se > 60 {
        return false;
    }
    let mut tz = &rest[8..];
    if let Some(frac) = tz.strip_prefix('.') {
        let end = frac.find(|c: char| !c.is_ascii_digit()).unwrap_or(frac.len());
        if end == 0 {
            return false;
        }
        tz = &frac[end..];
    }
    match tz {
        "Z" | "z" => true,
        _ => {
            let t = tz.as_bytes();
            t.len() == 6
                && matches!(t[0], b'+' | b'-')
                && t[3] == b':'
                && digits(&tz[1..3])
                && digits(&tz[4..6])
        }
    }
}

fn is_base64(s: &str) -> bool {
    let trimmed = s.trim_end_matches('=');
    s.len().is_multiple_of(4)
        && s.len() - trimmed.len() <= 2
        && trimmed
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/')
}

fn is_uuid(s: &str, version: Option<u8>) -> bool {
    let hex: Vec<u8> = s.bytes().filter(|c| *c != b'-').collect();
    let dashes_ok =
        s.len() == 32 || (s.len() == 36 && [8, 13, 18, 23].iter().all(|&i| s.as_bytes()[i] == b'-'));
    if !dashes_ok || hex.len() != 32 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return false;
    }
    match version {
        None => true,
        Some(v) => {
            hex[12] == v && (v == b'3' || matches!(hex[16].to_ascii_lowercase(), b'8' | b'9' | b'a' | b'b'))
        }
    }
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    (ip.parse::<Ipv4Addr>().is_ok() && bits <= 32) || (ip.parse::<Ipv6Addr>().is_ok() && bits <= 128)
}

fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    matches!(parts.len(), 6 | 8 | 20)
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|c| c.is_ascii_hexdigit()))
}

fn is_hostname(s: &str) -> bool {
    s.len() <= 255
        && !s.is_empty()
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        })
}

fn is_email(s: &str) -> bool {
    match s.rsplit_once('@') {
        Some((local, domain)) => !local.is_empty() && !domain.is_empty() && !s.contains(char::is_whitespace),
        None => false,
    }
}

fn is_uri(s: &str) -> bool {
    if s.starts_with('/') {
        return true;
    }
    match s.split_once(':') {
        Some((scheme, _)) => {
            let b = scheme.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphabetic()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'))
        }
        None => false,
    }
}

fn is_hexcolor(s: &str) -> bool {
    let h = s.strip_prefix('#').unwrap_or(s);
    (h.len() == 3 || h.len() == 6) && h.bytes().all(|c| c.is_ascii_hexdigit())
}

/// Go `time.ParseDuration` syntax (`1h30m`, `300ms`, `-1.5h`), or a Scala-style `22 ns`.
fn is_duration(s: &str) -> bool {
    let s = s.trim();
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    if body == "0" {
        return true;
    }
    if let Some((num, unit)) = body.split_once(' ') {
        return num.parse::<f64>().is_ok()
            && matches!(
                unit.trim(),
                "ns" | "nano"
                    | "nanos"
                    | "nanosecond"
                    | "nanoseconds"
                    | "us"
                    | "micro"
                    | "micros"
                    | "microsecond"
                    | "microseconds"
                    | "ms"
                    | "milli"
                    | "millis"
                    | "millisecond"
                    | "milliseconds"
                    | "s"
                    | "sec"
                    | "secs"
                    | "second"
                    | "seconds"
                    | "m"
                    | "min"
                    | "mins"
                    | "minute"
                    | "minutes"
                    | "h"
                    | "hr"
                    | "hrs"
                    | "hour"
                    | "hours"
                    | "d"
                    | "day"
                    | "days"
                    | "w"
                    | "wk"
                    | "wks"
                    | "week"
                    | "weeks"
            );
    }
    let mut rest = body;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_end == 0 || rest[..num_end].parse::<f64>().is_err() {
            return false;
        }
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        if !matches!(
            &rest[..unit_end],
            "ns" | "us" | "µs" | "μs" | "ms" | "s" | "m" | "h"
        ) {
            return false;
        }
        rest = &rest[unit_end..];
    }
    true
}

#[cfg(test)]
pub(crate) fn format_ok_for_tests(format: &str, s: &str) -> bool {
    format_ok(format, s)
}
