//! Label selectors (equality- and set-based) and field selectors, as in `?labelSelector=` and
//! `?fieldSelector=`.
//!
//! Label selectors follow `k8s.io/apimachinery/pkg/labels.Parse` (lexer, grammar, key and value
//! validation, error texts); `LabelSelector::from_label_selector_json` follows
//! `metav1.LabelSelectorAsSelector` for the `{matchLabels, matchExpressions}` objects of workloads.
//! Field selectors follow `k8s.io/apimachinery/pkg/fields.ParseSelector`, and [`check_field_labels`]
//! tells which fields each kind can be selected on, with the upstream error texts.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

#[cfg(test)]
mod tests;

/// A selector that could not be parsed (HTTP 400).
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct SelectorError(pub String);

/// The operator of one label requirement (upstream `selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `k=v`
    Equals,
    /// `k==v`
    DoubleEquals,
    /// `k!=v` (also matches objects without `k`)
    NotEquals,
    /// `k in (a,b)`
    In,
    /// `k notin (a,b)` (also matches objects without `k`)
    NotIn,
    /// `k`
    Exists,
    /// `!k`
    DoesNotExist,
    /// `k>1` (integer comparison)
    GreaterThan,
    /// `k<1` (integer comparison)
    LessThan,
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// The operator.
    pub operator: Operator,
    /// The values, sorted and deduplicated as upstream keeps them.
    pub values: Vec<String>,
}

impl Requirement {
    /// Builds and validates a requirement like upstream `labels.NewRequirement`.
    pub fn new(key: &str, operator: Operator, values: Vec<String>) -> Result<Requirement, SelectorError> {
        let mut errs: Vec<String> = Vec::new();
        let key_errs = is_qualified_name(key);
        if !key_errs.is_empty() {
            errs.push(format!(
                "key: Invalid value: {}: {}",
                go_quote(key),
                key_errs.join("; ")
            ));
        }
        let values_dbg = || go_string_slice(&values);
        match operator {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    errs.push(format!(
                        "values: Invalid value: {}: for 'in', 'notin' operators, values set can't be empty",
                        values_dbg()
                    ));
                }
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                if values.len() != 1 {
                    errs.push(format!(
                        "values: Invalid value: {}: exact-match compatibility requires one single value",
                        values_dbg()
                    ));
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    errs.push(format!(
                        "values: Invalid value: {}: values set must be empty for exists and does not exist",
                        values_dbg()
                    ));
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(format!(
                        "values: Invalid value: {}: for 'Gt', 'Lt' operators, exactly one value is required",
                        values_dbg()
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(format!(
                            "values[{i}]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
                            go_quote(v)
                        ));
                    }
                }
            }
        }
        for (i, v) in values.iter().enumerate() {
            let value_errs = is_valid_label_value(v);
            if !value_errs.is_empty() {
                errs.push(format!(
                    "values[{i}][{key}]: Invalid value: {}: {}",
                    go_quote(v),
                    value_errs.join("; ")
                ));
            }
        }
        if !errs.is_empty() {
            return Err(SelectorError(aggregate(errs)));
        }
        let values: BTreeSet<String> = values.into_iter().collect();
        Ok(Requirement {
            key: key.to_owned(),
            operator,
            values: values.into_iter().collect(),
        })
    }

    /// Whether the labels satisfy this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::Equals | Operator::DoubleEquals | Operator::In => {
                value.is_some_and(|v| self.values.iter().any(|x| x == v))
            }
            Operator::NotEquals | Operator::NotIn => {
                value.is_none_or(|v| !self.values.iter().any(|x| x == v))
            }
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(have), Some(want)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|v| v.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let one = || self.values.first().map(String::as_str).unwrap_or("");
        match self.operator {
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::Equals => write!(f, "{}={}", self.key, one()),
            Operator::DoubleEquals => write!(f, "{}=={}", self.key, one()),
            Operator::NotEquals => write!(f, "{}!={}", self.key, one()),
            Operator::GreaterThan => write!(f, "{}>{}", self.key, one()),
            Operator::LessThan => write!(f, "{}<{}", self.key, one()),
            Operator::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
        }
    }
}

/// A parsed label selector: `a=b,c!=d,e in (f,g),h notin (i),j,!k`.
///
/// The default value selects everything; [`LabelSelector::nothing`] selects nothing (what a
/// missing `selector` of a workload means upstream).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl LabelSelector {
    /// Parses the query-string form, exactly as upstream `labels.Parse`.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let tokens = lex(s);
        let mut p = Parser { tokens, pos: 0 };
        let mut requirements = p.parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector {
            requirements,
            nothing: false,
        })
    }

    /// A selector that matches every object.
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    /// A selector that matches no object.
    pub fn nothing() -> Self {
        LabelSelector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Converts a `metav1.LabelSelector` object (`{matchLabels, matchExpressions}`) like upstream
    /// `LabelSelectorAsSelector`: `null` selects nothing, `{}` selects everything.
    pub fn from_label_selector_json(v: &Value) -> Result<Self, SelectorError> {
        let obj = match v {
            Value::Null => return Ok(LabelSelector::nothing()),
            Value::Object(o) => o,
            other => {
                return Err(SelectorError(format!(
                    "invalid label selector: expected an object, got {other}"
                )));
            }
        };
        let mut requirements = Vec::new();
        match obj.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (k, v) in labels {
                    let value = match v {
                        Value::String(s) => s.clone(),
                        other => {
                            return Err(SelectorError(format!(
                                "invalid label selector: matchLabels[{k}] must be a string, got {other}"
                            )));
                        }
                    };
                    requirements.push(Requirement::new(k, Operator::Equals, vec![value])?);
                }
            }
            Some(other) => {
                return Err(SelectorError(format!(
                    "invalid label selector: matchLabels must be an object, got {other}"
                )));
            }
        }
        match obj.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for expr in exprs {
                    let key = expr.get("key").and_then(Value::as_str).unwrap_or("");
                    let op = expr.get("operator").and_then(Value::as_str).unwrap_or("");
                    let operator = match op {
                        "In" => Operator::In,
                        "NotIn" => Operator::NotIn,
                        "Exists" => Operator::Exists,
                        "DoesNotExist" => Operator::DoesNotExist,
                        other => {
                            return Err(SelectorError(format!(
                                "{} is not a valid label selector operator",
                                go_quote(other)
                            )));
                        }
                    };
                    let values = match expr.get("values") {
                        None | Some(Value::Null) => Vec::new(),
                        Some(Value::Array(vs)) => {
                            vs.iter().map(|v| v.as_str().unwrap_or("").to_owned()).collect()
                        }
                        Some(other) => {
                            return Err(SelectorError(format!(
                                "invalid label selector: values must be a list of strings, got {other}"
                            )));
                        }
                    };
                    requirements.push(Requirement::new(key, operator, values)?);
                }
            }
            Some(other) => {
                return Err(SelectorError(format!(
                    "invalid label selector: matchExpressions must be a list, got {other}"
                )));
            }
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector {
            requirements,
            nothing: false,
        })
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether this selector matches everything (no requirements).
    pub fn is_everything(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// Whether the labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Like [`LabelSelector::matches`], reading labels from an object's `metadata.labels`.
    pub fn matches_object(&self, obj: &Value) -> bool {
        let labels: BTreeMap<String, String> = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        self.matches(&labels)
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical string form (`app=web,tier in (a,b)`), as in `Scale.status.selector`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.requirements.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn is_whitespace(c: char) -> bool {
    c == ' ' || c == '\t' || c == '\r' || c == '\n'
}

fn is_special_symbol(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn lex(s: &str) -> Vec<(Tok, String)> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        while pos < chars.len() && is_whitespace(chars[pos]) {
            pos += 1;
        }
        if pos >= chars.len() {
            out.push((Tok::EndOfString, String::new()));
            return out;
        }
        let c = chars[pos];
        if is_special_symbol(c) {
            // Longest match among the symbolic tokens, as the upstream lexer does.
            let mut lit = String::new();
            let mut tok = Tok::Error;
            let mut end = pos;
            while end < chars.len() && is_special_symbol(chars[end]) {
                let mut candidate = lit.clone();
                candidate.push(chars[end]);
                match symbol_token(&candidate) {
                    Some(t) => {
                        lit = candidate;
                        tok = t;
                        end += 1;
                    }
                    None => break,
                }
            }
            if lit.is_empty() {
                out.push((Tok::Error, c.to_string()));
                pos += 1;
                continue;
            }
            pos = end;
            out.push((tok, lit));
        } else {
            let start = pos;
            while pos < chars.len() && !is_whitespace(chars[pos]) && !is_special_symbol(chars[pos]) {
                pos += 1;
            }
            let lit: String = chars[start..pos].iter().collect();
            let tok = match lit.as_str() {
                "in" => Tok::In,
                "notin" => Tok::NotIn,
                _ => Tok::Identifier,
            };
            out.push((tok, lit));
        }
    }
}

fn symbol_token(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::ClosedPar,
        "," => Tok::Comma,
        "!" => Tok::DoesNotExist,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::GreaterThan,
        "<" => Tok::LessThan,
        "!=" => Tok::NotEquals,
        "(" => Tok::OpenPar,
        _ => return None,
    })
}

struct Parser {
    tokens: Vec<(Tok, String)>,
    pos: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

impl Parser {
    fn token(&self, idx: usize, ctx: Ctx) -> (Tok, String) {
        let (tok, lit) = self
            .tokens
            .get(idx)
            .cloned()
            .unwrap_or((Tok::EndOfString, String::new()));
        let tok = match (ctx, tok) {
            (Ctx::Values, Tok::In | Tok::NotIn) => Tok::Identifier,
            (_, t) => t,
        };
        (tok, lit)
    }

    fn lookahead(&self, ctx: Ctx) -> (Tok, String) {
        self.token(self.pos, ctx)
    }

    fn consume(&mut self, ctx: Ctx) -> (Tok, String) {
        let t = self.token(self.pos, ctx);
        if self.pos < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, SelectorError> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Ctx::Values);
            match tok {
                Tok::Identifier | Tok::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| SelectorError(format!("unable to parse requirement: {}", e.0)))?;
                    reqs.push(r);
                    let (t, l) = self.consume(Ctx::Values);
                    match t {
                        Tok::EndOfString => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Ctx::Values);
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(SelectorError(format!(
                                    "found '{l2}', expected: identifier after ','"
                                )));
                            }
                        }
                        _ => {
                            return Err(SelectorError(format!(
                                "found '{l}', expected: ',' or 'end of string'"
                            )));
                        }
                    }
                }
                Tok::EndOfString => return Ok(reqs),
                _ => {
                    return Err(SelectorError(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    )));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, SelectorError> {
        let (key, inferred) = self.parse_key_and_infer_operator()?;
        if let Some(op) = inferred {
            return Requirement::new(&key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(&key, op, values)
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), SelectorError> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(Ctx::Values);
        if tok == Tok::DoesNotExist {
            op = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Ctx::Values);
        }
        if tok != Tok::Identifier {
            return Err(SelectorError(format!("found '{lit}', expected: identifier")));
        }
        let errs = is_qualified_name(&lit);
        if !errs.is_empty() {
            return Err(SelectorError(format!(
                "<nil>: Invalid value: {}: {}",
                go_quote(&lit),
                errs.join("; ")
            )));
        }
        let (t, _) = self.lookahead(Ctx::Values);
        if (t == Tok::EndOfString || t == Tok::Comma) && op.is_none() {
            op = Some(Operator::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<Operator, SelectorError> {
        let (tok, lit) = self.consume(Ctx::KeyAndOperator);
        Ok(match tok {
            Tok::In => Operator::In,
            Tok::Equals => Operator::Equals,
            Tok::DoubleEquals => Operator::DoubleEquals,
            Tok::GreaterThan => Operator::GreaterThan,
            Tok::LessThan => Operator::LessThan,
            Tok::NotIn => Operator::NotIn,
            Tok::NotEquals => Operator::NotEquals,
            _ => {
                return Err(SelectorError(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                )));
            }
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, SelectorError> {
        let (tok, lit) = self.consume(Ctx::Values);
        if tok != Tok::OpenPar {
            return Err(SelectorError(format!("found '{lit}' expected: '('")));
        }
        let (tok, lit) = self.lookahead(Ctx::Values);
        match tok {
            Tok::Identifier | Tok::Comma => {
                let s = self.parse_identifiers_list()?;
                let (t, _) = self.consume(Ctx::Values);
                if t != Tok::ClosedPar {
                    return Err(SelectorError(format!("found '{lit}', expected: ')'")));
                }
                Ok(s.into_iter().collect())
            }
            Tok::ClosedPar => {
                self.consume(Ctx::Values);
                Ok(vec![String::new()])
            }
            _ => Err(SelectorError(format!(
                "found '{lit}', expected: ',', ')' or identifier"
            ))),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        let mut s = BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Ctx::Values);
            match tok {
                Tok::Identifier => {
                    s.insert(lit);
                    let (t2, l2) = self.lookahead(Ctx::Values);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosedPar => return Ok(s),
                        _ => return Err(SelectorError(format!("found '{l2}', expected: ',' or ')'"))),
                    }
                }
                Tok::Comma => {
                    if s.is_empty() {
                        s.insert(String::new());
                    }
                    let (t2, _) = self.lookahead(Ctx::Values);
                    if t2 == Tok::ClosedPar {
                        s.insert(String::new());
                        return Ok(s);
                    }
                    if t2 == Tok::Comma {
                        self.consume(Ctx::Values);
                        s.insert(String::new());
                    }
                }
                _ => {
                    return Err(SelectorError(format!(
                        "found '{lit}', expected: ',', or identifier"
                    )));
                }
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, SelectorError> {
        let (tok, _) = self.lookahead(Ctx::Values);
        if tok == Tok::EndOfString || tok == Tok::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Ctx::Values);
        if tok == Tok::Identifier {
            return Ok(vec![lit]);
        }
        Err(SelectorError(format!("found '{lit}', expected: identifier")))
    }
}

/// A parsed field selector: `metadata.name=x,status.phase!=Running`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldSelector {
    /// `(field, must_equal, value)` terms.
    pub terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses the query-string form, as upstream `fields.ParseSelector`: terms joined by unescaped
    /// `,`; operators `=`, `==`, `!=`; values unescaped (`\,`, `\=`, `\\`).
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parts = split_terms(s);
        parts.sort();
        let mut terms = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((lhs, op, rhs)) = split_term(&part) else {
                return Err(SelectorError(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let value = unescape_value(rhs)?;
            terms.push((lhs.to_owned(), op != "!=", value));
        }
        Ok(FieldSelector { terms })
    }

    /// Whether the object matches, given a function that reads a field's value as a string.
    pub fn matches(&self, field: &dyn Fn(&str) -> Option<String>) -> bool {
        self.terms
            .iter()
            .all(|(f, eq, v)| (field(f).as_deref().unwrap_or("") == v) == *eq)
    }

    /// Whether the selector has no terms (selects everything).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

fn split_terms(s: &str) -> Vec<String> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut current = String::new();
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            in_slash = false;
            current.push(c);
        } else if c == '\\' {
            in_slash = true;
            current.push(c);
        } else if c == ',' {
            terms.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    terms.push(current);
    terms
}

fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in ["!=", "==", "="] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], op, value));
            }
        }
    }
    None
}

fn unescape_value(s: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => {
                    return Err(SelectorError(format!(
                        "invalid field selector: invalid escape sequence: \\{c}"
                    )));
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => {
                return Err(SelectorError(format!(
                    "invalid field selector: unescaped character in value: {c}"
                )));
            }
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err(SelectorError(
            "invalid field selector: invalid escape sequence: \\".to_owned(),
        ));
    }
    Ok(out)
}

/// Escapes a value for use in a field selector (upstream `fields.EscapeValue`).
pub fn escape_field_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The field labels a built-in kind supports beyond `metadata.name` and `metadata.namespace`,
/// keyed by API group (`""` for core) and kind.  `None` for kinds with only the generic fields.
pub fn supported_field_labels(group: &str, kind: &str) -> Option<&'static [&'static str]> {
    Some(match (group, kind) {
        ("", "Pod") => &[
            "spec.nodeName",
            "spec.host",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        ("", "Node") => &["spec.unschedulable"],
        ("", "Event") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "Namespace") => &["status.phase"],
        ("", "Secret") => &["type"],
        ("", "ReplicationController") => &["status.replicas"],
        ("apps", "ReplicaSet") => &["status.replicas"],
        ("batch", "Job") => &["status.successful"],
        _ => return None,
    })
}

/// How a kind's field selectors are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldSelectorKind<'a> {
    /// A built-in kind, by API group (`""` for core) and kind.
    Builtin {
        /// API group, `""` for core.
        group: &'a str,
        /// Kind, e.g. `Pod`.
        kind: &'a str,
    },
    /// A custom resource with the CRD version's `selectableFields` JSON paths (`.spec.color`).
    Custom {
        /// API group.
        group: &'a str,
        /// Version served.
        version: &'a str,
        /// Kind.
        kind: &'a str,
        /// `selectableFields[].jsonPath` of the served version.
        selectable_fields: &'a [String],
    },
}

/// Checks every term's field against what the kind supports, with upstream error texts
/// (`field label not supported: spec.foo` for core kinds with their own fields, the generic
/// `"x" is not a known field selector: only "metadata.name", "metadata.namespace"` otherwise).
pub fn check_field_labels(sel: &FieldSelector, kind: FieldSelectorKind<'_>) -> Result<(), SelectorError> {
    for (field, _, _) in &sel.terms {
        if field == "metadata.name" || field == "metadata.namespace" {
            continue;
        }
        match kind {
            FieldSelectorKind::Builtin { group, kind } => match supported_field_labels(group, kind) {
                Some(fields) if fields.contains(&field.as_str()) => {}
                Some(_) => {
                    return Err(SelectorError(match (group, kind) {
                        ("apps", "ReplicaSet") => {
                            format!("field label not supported for appsv1.ReplicaSet: {field}")
                        }
                        ("batch", "Job") => {
                            format!("field label {} not supported for batchv1.Job", go_quote(field))
                        }
                        _ => format!("field label not supported: {field}"),
                    }));
                }
                None => {
                    return Err(SelectorError(format!(
                        "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                        go_quote(field)
                    )));
                }
            },
            FieldSelectorKind::Custom {
                group,
                version,
                kind,
                selectable_fields,
            } => {
                if !selectable_fields
                    .iter()
                    .any(|p| p.strip_prefix('.').unwrap_or(p) == field)
                {
                    let gv = if group.is_empty() {
                        version.to_owned()
                    } else {
                        format!("{group}/{version}")
                    };
                    return Err(SelectorError(format!(
                        "field label not supported for {gv}, Kind={kind}: {field}"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The value a field selector compares for `label` on `obj` of a built-in kind: follows the
/// upstream field sets (aliases such as `spec.host`, `source`, and fields that are always present,
/// such as `spec.hostNetwork` = `"false"`).  Custom resources use [`field_value`] directly.
pub fn builtin_field_value(group: &str, kind: &str, obj: &Value, label: &str) -> Option<String> {
    match (group, kind, label) {
        ("", "Pod", "spec.host") => field_value(obj, "spec.nodeName").or(Some(String::new())),
        ("", "Pod", "spec.hostNetwork") => field_value(obj, label).or(Some("false".to_owned())),
        ("", "Pod", "status.podIPs") => field_value(obj, "status.podIP").or(Some(String::new())),
        ("", "Node", "spec.unschedulable") => field_value(obj, label).or(Some("false".to_owned())),
        ("", "Event", "source") => {
            field_value(obj, "source.component").or_else(|| field_value(obj, "reportingComponent"))
        }
        ("", "ReplicationController" | "ReplicaSet", "status.replicas")
        | ("apps", "ReplicaSet", "status.replicas") => field_value(obj, label).or(Some("0".to_owned())),
        ("batch", "Job", "status.successful") => field_value(obj, label).or(Some("0".to_owned())),
        _ => field_value(obj, label),
    }
}

/// Reads a scalar by dotted path (`spec.nodeName`, `metadata.name`) from a JSON object, as a
/// field selector compares it: strings as-is, numbers and booleans in their JSON spelling.
/// A leading `.` (CRD `selectableFields` JSON paths) is accepted.  `None` when absent, `null`, or not
/// a scalar.
pub fn field_value(obj: &Value, path: &str) -> Option<String> {
    let path = path.strip_prefix('.').unwrap_or(path);
    let mut cur = obj;
    for part in path.split('.') {
        cur = cur.as_object()?.get(part)?;
    }
    match cur {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Validates a qualified name (label key, annotation key): `[prefix/]name`, upstream
/// `validation.IsQualifiedName`.  Returns the error messages (empty when valid).
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_owned());
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Validates a label value (upstream `validation.IsValidLabelValue`).
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Validates a DNS-1123 subdomain (object names; upstream `validation.IsDNS1123Subdomain`).
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 253 {
        errs.push("must be no more than 253 characters".to_owned());
    }
    if !value.split('.').all(is_dns1123_label_part) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
            &["example.com"],
        ));
    }
    errs
}

/// Validates a DNS-1123 label (namespace names; upstream `validation.IsDNS1123Label`).
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !is_dns1123_label_part(value) {
        errs.push(regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            "[a-z0-9]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "123-abc"],
        ));
    }
    errs
}

const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

fn is_dns1123_label_part(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => ok(f) && ok(l) && b.iter().all(|c| ok(c) || *c == b'-'),
        _ => false,
    }
}

fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

/// Go's `%q` for a string: double-quoted, with Go escapes for control characters.
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
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => {
                if (c as u32) <= 0xffff {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%#v` for a `[]string`.
fn go_string_slice(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| go_quote(s)).collect();
    format!("[]string{{{}}}", items.join(", "))
}

/// Upstream `utilerrors.NewAggregate(..).Error()`: one message as-is, several in brackets.
fn aggregate(mut errs: Vec<String>) -> String {
    errs.dedup();
    if errs.len() == 1 {
        errs.remove(0)
    } else {
        format!("[{}]", errs.join(", "))
    }
}
