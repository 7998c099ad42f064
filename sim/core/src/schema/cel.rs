//! `x-kubernetes-validations`: CEL rules compiled when the CRD is created and evaluated on every write,
//! with the messages of upstream `apiextensions-apiserver/pkg/apiserver/schema/cel`.
//!
//! The interpreter is the `cel` crate.  It has no type checker and no cost tracking, so this module
//! adds what the API server relies on:
//! * a static check at compile time: identifiers, functions (an allowlist of what the interpreter
//!   implements; upstream-only functions are rejected with a clear message) and field selections
//!   against the schema (`undefined field 'x'`), plus obvious non-boolean rules;
//! * limits that keep hostile rules and objects from exhausting the stack or the CPU: the source is
//!   screened before parsing, the syntax tree depth is bounded, and every evaluation first computes
//!   an upper bound of its cost from the sizes of `self`/`oldSelf` and refuses to run above a limit.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::objects::{Key, Map as CelMap, OptionalValue};
use cel::{Context, Env, ExecutionError, Program, Value as CelValue};
use serde_json::Value;

use super::FieldError;
use super::compile::{Additional, ListKind, Node, Ty};
use super::gofmt::{Bad, child, duplicate, forbidden, invalid, not_supported, required};
use crate::selector::go_quote;

/// Rules longer than this are rejected before parsing.
const MAX_RULE_BYTES: usize = 16 * 1024;
/// Operator characters (outside string literals) allowed in one rule: bounds the parser's recursion.
const MAX_RULE_OPERATORS: usize = 250;
/// Depth of the syntax tree allowed after parsing: bounds the evaluator's recursion.
const MAX_AST_DEPTH: usize = 250;
/// Upper bound of the estimated cost of one evaluation (upstream's per-call limit is 1e6 of its
/// own, tighter units; this estimate over-counts, so the limit is higher).
pub(crate) const PER_CALL_COST_LIMIT: u64 = 10_000_000;
/// Upper bound of the summed estimated cost of all rules for one object.
pub(crate) const TOTAL_COST_BUDGET: u64 = 100_000_000;
/// JSON nesting deeper than this is not converted for CEL (it is `null` there).
const MAX_VALUE_DEPTH: usize = 200;

static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // The strings extension is part of the Kubernetes CEL environment too.
    let _ = env.add_extension(cel::extensions::strings);
    Arc::new(env)
});

/// Compile-time context of the node holding the rules.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RuleCtx {
    /// Whether `oldSelf` can be correlated here (not below an atomic list or map).
    pub correlatable: bool,
    /// The root of a resource: `self` also has `apiVersion`, `kind`, `metadata.{name,generateName}`.
    pub resource_root: bool,
}

/// `reason` of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    Invalid,
    Forbidden,
    Required,
    Duplicate,
}

/// One compiled `x-kubernetes-validations` entry.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub rule: String,
    pub message: String,
    pub message_expression: Option<Arc<Program>>,
    pub program: Arc<Program>,
    pub reason: Option<Reason>,
    /// The normalised `fieldPath` (`spec.x`, `weights[a]`), when set.
    pub field_path: Option<String>,
    pub uses_old_self: bool,
    pub optional_old_self: bool,
}

impl Rule {
    /// Upstream `ruleErrorString`: the message, else the rule.
    fn error_string(&self) -> &str {
        if self.message.trim().is_empty() {
            self.rule.trim()
        } else {
            self.message.trim()
        }
    }

    /// Upstream `ruleMessageOrDefault`.
    fn message_or_default(&self) -> String {
        if self.message.is_empty() {
            format!("failed rule: {}", self.error_string())
        } else {
            self.message.trim().to_owned()
        }
    }
}

/// Go's `%#v` of an `apiextensions.ValidationRule`, as upstream prints it in compile errors.
fn rule_go_value(raw: &serde_json::Map<String, Value>) -> String {
    let s = |k: &str| go_quote(raw.get(k).and_then(Value::as_str).unwrap_or(""));
    let reason = match raw.get("reason").and_then(Value::as_str) {
        Some(r) => format!("(*apiextensions.FieldValueErrorReason)({})", go_quote(r)),
        None => "(*apiextensions.FieldValueErrorReason)(nil)".to_owned(),
    };
    let optional = match raw.get("optionalOldSelf").and_then(Value::as_bool) {
        Some(b) => format!("(*bool)({b})"),
        None => "(*bool)(nil)".to_owned(),
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{optional}}}",
        s("rule"),
        s("message"),
        s("messageExpression"),
        s("fieldPath")
    )
}

/// Compiles the `x-kubernetes-validations` of `node`; errors are pushed with paths under `path`.
pub(crate) fn compile_rules(
    rules: &[Value],
    node: &Node,
    path: &str,
    ctx: RuleCtx,
    errs: &mut Vec<FieldError>,
) -> Vec<Rule> {
    let mut out = Vec::new();
    for (i, raw) in rules.iter().enumerate() {
        let rpath = format!("{path}[{i}]");
        let Some(obj) = raw.as_object() else {
            errs.push(invalid(&rpath, Bad::of(raw), "must be an object"));
            continue;
        };
        let rule_text = obj.get("rule").and_then(Value::as_str).unwrap_or("");
        let rule_value = rule_go_value(obj);
        let rule_field = format!("{rpath}.rule");
        if rule_text.trim().is_empty() {
            errs.push(required(&rule_field, "rule is not specified"));
            continue;
        }
        let optional_old_self = obj
            .get("optionalOldSelf")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let program = match compile_expr(rule_text, node, ctx.resource_root, optional_old_self, true) {
            Ok(p) => p,
            Err(msg) => {
                errs.push(invalid_raw(
                    &rule_field,
                    &rule_value,
                    &format!("compilation failed: {msg}"),
                ));
                continue;
            }
        };
        let uses_old_self = references_ident(program.expression(), "oldSelf");
        if uses_old_self && !ctx.correlatable {
            errs.push(invalid_raw(
                &rule_field,
                &rule_value,
                &format!("oldSelf cannot be used on the uncorrelatable portion of the schema within {path}"),
            ));
            continue;
        }
        if optional_old_self && !uses_old_self {
            errs.push(forbidden(
                &format!("{rpath}.optionalOldSelf"),
                "may not be set if oldSelf is not used in rule",
            ));
            continue;
        }
        let message = obj
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if message.contains('\n') {
            errs.push(invalid(
                &format!("{rpath}.message"),
                Bad::Str(message.clone()),
                "message must not contain line breaks",
            ));
        }
        let message_expression = match obj.get("messageExpression").and_then(Value::as_str) {
            None | Some("") => None,
            Some(src) => match compile_expr(src, node, ctx.resource_root, optional_old_self, false) {
                Ok(p) => Some(Arc::new(p)),
                Err(msg) => {
                    errs.push(invalid_raw(
                        &format!("{rpath}.messageExpression"),
                        &go_quote(src),
                        &format!("messageExpression compilation failed: {msg}"),
                    ));
                    continue;
                }
            },
        };
        let reason = match obj.get("reason").and_then(Value::as_str) {
            None => None,
            Some("FieldValueInvalid") => Some(Reason::Invalid),
            Some("FieldValueForbidden") => Some(Reason::Forbidden),
            Some("FieldValueRequired") => Some(Reason::Required),
            Some("FieldValueDuplicate") => Some(Reason::Duplicate),
            Some(other) => {
                let supported: Vec<String> = [
                    "FieldValueDuplicate",
                    "FieldValueForbidden",
                    "FieldValueInvalid",
                    "FieldValueRequired",
                ]
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
                errs.push(not_supported(
                    &format!("{rpath}.reason"),
                    Bad::Str(other.to_owned()),
                    &supported,
                ));
                continue;
            }
        };
        let field_path = match obj.get("fieldPath").and_then(Value::as_str) {
            None | Some("") => None,
            Some(fp) => match normalize_field_path(fp, node) {
                Ok(p) => Some(p),
                Err(e) => {
                    errs.push(invalid(
                        &format!("{rpath}.fieldPath"),
                        Bad::Str(fp.to_owned()),
                        &format!("fieldPath must be a valid path: {e}"),
                    ));
                    continue;
                }
            },
        };
        out.push(Rule {
            rule: rule_text.to_owned(),
            message,
            message_expression,
            program: Arc::new(program),
            reason,
            field_path,
            uses_old_self,
            optional_old_self,
        });
    }
    out
}

/// `field.Invalid` whose value is already rendered (Go `%#v` of a struct).
fn invalid_raw(field: &str, rendered: &str, detail: &str) -> FieldError {
    FieldError {
        field: field.to_owned(),
        reason: "FieldValueInvalid",
        message: format!("{field}: Invalid value: {rendered}: {detail}"),
    }
}

/// Upstream `ValidFieldPath`: `.a.b`, `.a['b.c']`, map keys through `additionalProperties`.
fn normalize_field_path(fp: &str, node: &Node) -> Result<String, String> {
    let mut out = String::new();
    let mut cur = node;
    let chars: Vec<char> = fp.chars().collect();
    let mut i = 0;
    let step = |name: &str, cur: &mut &Node, out: &mut String| -> Result<(), String> {
        if !cur.properties.is_empty() {
            let next = cur
                .properties
                .get(name)
                .ok_or_else(|| "does not refer to a valid field".to_owned())?;
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(name);
            *cur = next;
        } else if let Additional::Schema(a) = &cur.additional {
            out.push_str(&format!("[{name}]"));
            *cur = a;
        } else {
            return Err("does not refer to a valid field".to_owned());
        }
        Ok(())
    };
    while i < chars.len() {
        match chars[i] {
            '.' => {
                let start = i + 1;
                let mut end = start;
                while end < chars.len() && !matches!(chars[end], '.' | '[' | ']') {
                    end += 1;
                }
                if end == start {
                    return Err("unexpected end of JSON path".to_owned());
                }
                let name: String = chars[start..end].iter().collect();
                step(&name, &mut cur, &mut out)?;
                i = end;
            }
            '[' => {
                if chars.get(i + 1) != Some(&'\'') {
                    return Err("expected single quoted string".to_owned());
                }
                let mut j = i + 2;
                let mut name = String::new();
                loop {
                    match chars.get(j) {
                        None => return Err("unexpected end of JSON path".to_owned()),
                        Some('\\') => {
                            match chars.get(j + 1) {
                                Some(c @ ('\'' | '\\')) => name.push(*c),
                                Some(c) => {
                                    return Err(format!("invalid string literal: invalid escape char \\{c}"));
                                }
                                None => return Err("unexpected end of JSON path".to_owned()),
                            }
                            j += 2;
                        }
                        Some('\'') => break,
                        Some(c) => {
                            name.push(*c);
                            j += 1;
                        }
                    }
                }
                if chars.get(j + 1) != Some(&']') {
                    return Err("expected ]".to_owned());
                }
                step(&name, &mut cur, &mut out)?;
                i = j + 2;
            }
            c => return Err(format!("expected [ or . but got: {c}")),
        }
    }
    Ok(out)
}

/// Renders an error at an expression position the way cel-go does.
fn cel_error(source: &str, program_pos: Option<(u32, u32)>, msg: &str) -> String {
    let start = program_pos.map(|(s, _)| s as usize).unwrap_or(0);
    let mut line_no = 1;
    let mut col = 1;
    let mut line_text = "";
    let mut offset = 0;
    for (n, line) in source.split('\n').enumerate() {
        let len = line.chars().count() + 1;
        if start < offset + len {
            line_no = n + 1;
            col = start - offset + 1;
            line_text = line;
            break;
        }
        offset += len;
    }
    format!(
        "ERROR: <input>:{line_no}:{col}: {msg}\n | {line_text}\n | {}^",
        ".".repeat(col.saturating_sub(1))
    )
}

/// Screens, parses and statically checks one expression.
fn compile_expr(
    src: &str,
    node: &Node,
    resource_root: bool,
    optional_old_self: bool,
    must_be_bool: bool,
) -> Result<Program, String> {
    if src.len() > MAX_RULE_BYTES {
        return Err(format!(
            "ERROR: <input>:1:1: expression is longer than {MAX_RULE_BYTES} bytes"
        ));
    }
    let ops = count_operators(src);
    if ops > MAX_RULE_OPERATORS {
        return Err(format!(
            "ERROR: <input>:1:1: expression has {ops} operators, more than the {MAX_RULE_OPERATORS} allowed"
        ));
    }
    let program = ENV.compile(src).map_err(|e| e.to_string())?;
    let expr = program.expression();
    let depth = ast_depth(expr);
    if depth > MAX_AST_DEPTH {
        return Err(format!(
            "ERROR: <input>:1:1: expression nesting of {depth} exceeds the maximum of {MAX_AST_DEPTH}"
        ));
    }
    let info = program.source_info();
    let mut checker = Checker {
        root: node,
        resource_root,
        optional_old_self,
        scope: Vec::new(),
    };
    if let Err((id, msg)) = checker.check(expr) {
        return Err(cel_error(src, info.offset_for(id), &msg));
    }
    if must_be_bool && !may_be_bool(expr, &checker) {
        return Err(cel_error(
            src,
            info.offset_for(expr.id),
            "cel expression must evaluate to a bool",
        ));
    }
    Ok(program)
}

/// Counts operator and bracket characters outside string literals.
fn count_operators(src: &str) -> usize {
    let mut count = 0;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in src.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '+' | '-' | '*' | '/' | '%' | '<' | '>' | '=' | '!' | '?' | ':' | '.' | '[' | '(' | '{' => {
                count += 1
            }
            _ => {}
        }
    }
    count
}

fn children(e: &IdedExpr) -> Vec<&IdedExpr> {
    match &e.expr {
        Expr::Call(c) => c.target.iter().map(|t| &**t).chain(c.args.iter()).collect(),
        Expr::Comprehension(c) => vec![&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result],
        Expr::List(l) => l.elements.iter().collect(),
        Expr::Map(m) => m
            .entries
            .iter()
            .flat_map(|en| match &en.expr {
                EntryExpr::MapEntry(me) => vec![&me.key, &me.value],
                EntryExpr::StructField(sf) => vec![&sf.value],
            })
            .collect(),
        Expr::Select(s) => vec![&*s.operand],
        Expr::Struct(s) => s
            .entries
            .iter()
            .flat_map(|en| match &en.expr {
                EntryExpr::MapEntry(me) => vec![&me.key, &me.value],
                EntryExpr::StructField(sf) => vec![&sf.value],
            })
            .collect(),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    }
}

/// The depth of the tree, computed without recursion.
fn ast_depth(root: &IdedExpr) -> usize {
    let mut max = 0;
    let mut stack = vec![(root, 1usize)];
    while let Some((e, d)) = stack.pop() {
        max = max.max(d);
        for c in children(e) {
            stack.push((c, d + 1));
        }
    }
    max
}

fn references_ident(root: &IdedExpr, name: &str) -> bool {
    let mut stack = vec![root];
    while let Some(e) = stack.pop() {
        if matches!(&e.expr, Expr::Ident(n) if n == name) {
            return true;
        }
        stack.extend(children(e));
    }
    false
}

/// Global functions (called without a receiver) the interpreter implements.
const GLOBAL_FUNCTIONS: &[&str] = &[
    "_?_:_",
    "_&&_",
    "_||_",
    "!_",
    "_-_",
    "_+_",
    "_*_",
    "_/_",
    "_%_",
    "_==_",
    "_!=_",
    "_>=_",
    "_<=_",
    "_>_",
    "_<_",
    "-_",
    "_[_]",
    "_[?_]",
    "_?._",
    "@not_strictly_false",
    "@in",
    "size",
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "dyn",
    "type",
    "matches",
    "optional.none",
    "optional.of",
    "optional.ofNonZeroValue",
    "strings.quote",
];

/// Receiver-style functions the interpreter implements.
const MEMBER_FUNCTIONS: &[&str] = &[
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "charAt",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "substring",
    "join",
    "format",
    "reverse",
    "value",
    "hasValue",
    "or",
    "orValue",
];

/// Functions of the Kubernetes CEL environment this interpreter does not provide: rejected with a
/// message that says so rather than an "undeclared reference".
const UPSTREAM_ONLY_FUNCTIONS: &[&str] = &[
    "timestamp",
    "duration",
    "getFullYear",
    "getMonth",
    "getDayOfYear",
    "getDayOfMonth",
    "getDate",
    "getDayOfWeek",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
    "isSorted",
    "sum",
    "min",
    "max",
    "find",
    "findAll",
    "url",
    "isURL",
    "getScheme",
    "getHost",
    "getHostname",
    "getPort",
    "getEscapedPath",
    "getQuery",
    "quantity",
    "isQuantity",
    "ip",
    "isIP",
    "cidr",
    "isCIDR",
    "semver",
    "isSemver",
    "sets.contains",
    "sets.equivalent",
    "sets.intersects",
    "base64.encode",
    "base64.decode",
    "lists.range",
    "math.greatest",
    "math.least",
    "authorizer",
    "format.named",
];

/// What the checker knows about an expression's value.
#[derive(Clone, Copy)]
enum Static<'a> {
    Node(&'a Node, bool),
    Meta,
    Str,
    Other,
    Dyn,
}

struct Checker<'a> {
    root: &'a Node,
    resource_root: bool,
    optional_old_self: bool,
    scope: Vec<(String, Static<'a>)>,
}

type CheckResult<'a> = Result<Static<'a>, (u64, String)>;

impl<'a> Checker<'a> {
    fn lookup(&self, name: &str) -> Option<Static<'a>> {
        self.scope.iter().rev().find(|(n, _)| n == name).map(|(_, t)| *t)
    }

    fn field(&self, t: Static<'a>, field: &str, id: u64) -> CheckResult<'a> {
        match t {
            Static::Node(n, resource_root) => {
                if resource_root && (field == "apiVersion" || field == "kind") {
                    return Ok(Static::Str);
                }
                if resource_root && field == "metadata" {
                    return Ok(Static::Meta);
                }
                if let Some(p) = n.properties.get(field) {
                    return Ok(Static::Node(p, p.embedded));
                }
                match &n.additional {
                    Additional::Schema(a) => return Ok(Static::Node(a, a.embedded)),
                    Additional::Any => return Ok(Static::Dyn),
                    Additional::None => {}
                }
                if n.preserve_unknown || n.ty.is_none() {
                    return Ok(Static::Dyn);
                }
                if n.ty == Some(Ty::Object) {
                    Err((id, format!("undefined field '{field}'")))
                } else {
                    Err((
                        id,
                        format!("type '{}' does not support field selection", cel_type_name(n)),
                    ))
                }
            }
            Static::Meta => match field {
                "name" | "generateName" => Ok(Static::Str),
                _ => Err((id, format!("undefined field '{field}'"))),
            },
            Static::Str => Err((id, "type 'string' does not support field selection".to_owned())),
            Static::Other | Static::Dyn => Ok(Static::Dyn),
        }
    }

    fn check(&mut self, e: &IdedExpr) -> CheckResult<'a> {
        match &e.expr {
            Expr::Ident(name) => {
                if let Some(t) = self.lookup(name) {
                    return Ok(t);
                }
                match name.as_str() {
                    "self" => Ok(Static::Node(self.root, self.resource_root)),
                    "oldSelf" if self.optional_old_self => Ok(Static::Dyn),
                    "oldSelf" => Ok(Static::Node(self.root, self.resource_root)),
                    "null" | "true" | "false" => Ok(Static::Other),
                    "int" | "uint" | "double" | "string" | "bool" | "bytes" | "list" | "map"
                    | "null_type" | "type" => Ok(Static::Other),
                    _ => Err((
                        e.id,
                        format!("undeclared reference to '{name}' (in container '')"),
                    )),
                }
            }
            Expr::Literal(lit) => Ok(match lit {
                LiteralValue::String(_) => Static::Str,
                _ => Static::Other,
            }),
            Expr::Select(s) => {
                let t = self.check(&s.operand)?;
                let f = self.field(t, &s.field, e.id)?;
                Ok(if s.test { Static::Other } else { f })
            }
            Expr::Call(c) => {
                // `optional.none()`, `strings.quote(..)`: a namespace, not a receiver.
                if let Some(target) = &c.target
                    && let Expr::Ident(ns) = &target.expr
                    && self.lookup(ns).is_none()
                    && ns != "self"
                    && ns != "oldSelf"
                {
                    let full = format!("{ns}.{}", c.func_name);
                    if GLOBAL_FUNCTIONS.contains(&full.as_str()) {
                        for a in &c.args {
                            self.check(a)?;
                        }
                        return Ok(Static::Dyn);
                    }
                    if UPSTREAM_ONLY_FUNCTIONS.contains(&full.as_str()) {
                        return Err((e.id, unsupported_function(&full)));
                    }
                }
                let name = c.func_name.as_str();
                if c.target.is_some() {
                    if !MEMBER_FUNCTIONS.contains(&name) {
                        if UPSTREAM_ONLY_FUNCTIONS.contains(&name) {
                            return Err((e.id, unsupported_function(name)));
                        }
                        return Err((
                            e.id,
                            format!("undeclared reference to '{name}' (in container '')"),
                        ));
                    }
                } else if !GLOBAL_FUNCTIONS.contains(&name) {
                    if UPSTREAM_ONLY_FUNCTIONS.contains(&name) {
                        return Err((e.id, unsupported_function(name)));
                    }
                    return Err((
                        e.id,
                        format!("undeclared reference to '{name}' (in container '')"),
                    ));
                }
                let target = match &c.target {
                    Some(t) => Some(self.check(t)?),
                    None => None,
                };
                let mut args = Vec::with_capacity(c.args.len());
                for a in &c.args {
                    args.push(self.check(a)?);
                }
                Ok(match (name, target, args.first()) {
                    ("_[_]", None, Some(Static::Node(n, _))) => match (n.ty, &n.items, &n.additional) {
                        (Some(Ty::Array), Some(items), _) => Static::Node(items, items.embedded),
                        (_, _, Additional::Schema(a)) => Static::Node(a, a.embedded),
                        _ => Static::Dyn,
                    },
                    _ => Static::Dyn,
                })
            }
            Expr::Comprehension(c) => {
                let range = self.check(&c.iter_range)?;
                let (elem, value) = match range {
                    Static::Node(n, _) => match (n.ty, &n.items, &n.additional) {
                        (Some(Ty::Array), Some(items), _) => {
                            (Static::Node(items, items.embedded), Static::Dyn)
                        }
                        (Some(Ty::Object), _, Additional::Schema(a)) => {
                            (Static::Str, Static::Node(a, a.embedded))
                        }
                        (Some(Ty::Object), _, _) => (Static::Str, Static::Dyn),
                        _ => (Static::Dyn, Static::Dyn),
                    },
                    _ => (Static::Dyn, Static::Dyn),
                };
                let mark = self.scope.len();
                self.scope.push((c.accu_var.clone(), Static::Dyn));
                self.check(&c.accu_init)?;
                match &c.iter_var2 {
                    Some(v2) => {
                        self.scope.push((
                            c.iter_var.clone(),
                            if matches!(elem, Static::Str) {
                                Static::Str
                            } else {
                                Static::Other
                            },
                        ));
                        self.scope
                            .push((v2.clone(), if matches!(elem, Static::Str) { value } else { elem }));
                    }
                    None => self.scope.push((c.iter_var.clone(), elem)),
                }
                self.check(&c.loop_cond)?;
                self.check(&c.loop_step)?;
                self.check(&c.result)?;
                self.scope.truncate(mark);
                Ok(Static::Dyn)
            }
            Expr::List(l) => {
                for el in &l.elements {
                    self.check(el)?;
                }
                Ok(Static::Other)
            }
            Expr::Map(m) => {
                for en in &m.entries {
                    match &en.expr {
                        EntryExpr::MapEntry(me) => {
                            self.check(&me.key)?;
                            self.check(&me.value)?;
                        }
                        EntryExpr::StructField(_) => {
                            return Err((
                                en.id,
                                "field initialisers are only allowed in messages".to_owned(),
                            ));
                        }
                    }
                }
                Ok(Static::Other)
            }
            Expr::Struct(s) => Err((
                e.id,
                format!("undeclared reference to '{}' (in container '')", s.type_name),
            )),
            Expr::Unspecified => Ok(Static::Dyn),
        }
    }
}

fn unsupported_function(name: &str) -> String {
    format!("function '{name}' of the Kubernetes CEL library is not supported by this API server")
}

fn cel_type_name(n: &Node) -> &'static str {
    match n.ty {
        Some(Ty::Array) => "list",
        Some(Ty::String) => "string",
        Some(Ty::Integer) => "int",
        Some(Ty::Number) => "double",
        Some(Ty::Boolean) => "bool",
        Some(Ty::Object) => "object",
        None => "dyn",
    }
}

/// Whether the expression may produce a bool (false only when it certainly does not).
fn may_be_bool(e: &IdedExpr, checker: &Checker<'_>) -> bool {
    match &e.expr {
        Expr::Literal(LiteralValue::Boolean(_)) => true,
        Expr::Literal(_) | Expr::List(_) | Expr::Map(_) | Expr::Struct(_) => false,
        Expr::Call(c) => !matches!(
            c.func_name.as_str(),
            "_+_"
                | "_-_"
                | "_*_"
                | "_/_"
                | "_%_"
                | "-_"
                | "size"
                | "int"
                | "uint"
                | "double"
                | "string"
                | "bytes"
        ),
        Expr::Select(sel) if !sel.test => {
            let mut probe = Checker {
                root: checker.root,
                resource_root: checker.resource_root,
                optional_old_self: checker.optional_old_self,
                scope: Vec::new(),
            };
            match probe.check(e) {
                Ok(Static::Node(n, _)) => n.ty.is_none() || n.ty == Some(Ty::Boolean),
                Ok(Static::Str) | Ok(Static::Meta) => false,
                _ => true,
            }
        }
        _ => true,
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation.

/// Sizes that bound what an expression can produce: the longest collection anywhere inside the
/// value, and its total size (strings count their bytes).
#[derive(Debug, Clone, Copy, Default)]
struct Shape {
    len: u64,
    bytes: u64,
}

impl Shape {
    fn scalar() -> Shape {
        Shape { len: 1, bytes: 1 }
    }
    fn max(self, o: Shape) -> Shape {
        Shape {
            len: self.len.max(o.len),
            bytes: self.bytes.max(o.bytes),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Est {
    shape: Shape,
    cost: u64,
}

struct Estimator {
    scope: Vec<(String, Shape)>,
}

impl Estimator {
    fn lookup(&self, name: &str) -> Shape {
        self.scope
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, s)| *s)
            .unwrap_or(Shape::scalar())
    }

    fn est(&mut self, e: &IdedExpr) -> Est {
        match &e.expr {
            Expr::Literal(LiteralValue::String(s)) => Est {
                shape: Shape {
                    len: 1,
                    bytes: s.len() as u64 + 1,
                },
                cost: 1,
            },
            Expr::Literal(_) | Expr::Unspecified => Est {
                shape: Shape::scalar(),
                cost: 1,
            },
            Expr::Ident(name) => Est {
                shape: self.lookup(name),
                cost: 1,
            },
            Expr::Select(s) => {
                let o = self.est(&s.operand);
                Est {
                    shape: if s.test { Shape::scalar() } else { o.shape },
                    cost: o.cost.saturating_add(1),
                }
            }
            Expr::List(l) => {
                let mut shape = Shape {
                    len: l.elements.len() as u64,
                    bytes: 1,
                };
                let mut cost = 1u64;
                for el in &l.elements {
                    let x = self.est(el);
                    shape.len = shape.len.max(x.shape.len);
                    shape.bytes = shape.bytes.saturating_add(x.shape.bytes);
                    cost = cost.saturating_add(x.cost);
                }
                Est { shape, cost }
            }
            Expr::Map(_) | Expr::Struct(_) => {
                let mut shape = Shape { len: 1, bytes: 1 };
                let mut cost = 1u64;
                let kids = children(e);
                shape.len = shape.len.max(kids.len() as u64);
                for k in kids {
                    let x = self.est(k);
                    shape.len = shape.len.max(x.shape.len);
                    shape.bytes = shape.bytes.saturating_add(x.shape.bytes);
                    cost = cost.saturating_add(x.cost);
                }
                Est { shape, cost }
            }
            Expr::Call(c) => {
                let mut parts: Vec<Est> = Vec::new();
                if let Some(t) = &c.target {
                    parts.push(self.est(t));
                }
                for a in &c.args {
                    parts.push(self.est(a));
                }
                let cost_sum = parts.iter().fold(1u64, |acc, p| acc.saturating_add(p.cost));
                let bytes_sum = parts
                    .iter()
                    .fold(0u64, |acc, p| acc.saturating_add(p.shape.bytes));
                let len_sum = parts.iter().fold(0u64, |acc, p| acc.saturating_add(p.shape.len));
                let first = parts.first().map(|p| p.shape).unwrap_or_default();
                let (shape, extra) = match c.func_name.as_str() {
                    "_&&_"
                    | "_||_"
                    | "!_"
                    | "@not_strictly_false"
                    | "_-_"
                    | "_*_"
                    | "_/_"
                    | "_%_"
                    | "-_"
                    | "size"
                    | "int"
                    | "uint"
                    | "double"
                    | "bool"
                    | "type"
                    | "hasValue" => (Shape::scalar(), 0),
                    "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" | "@in" | "contains" | "startsWith"
                    | "endsWith" | "indexOf" | "lastIndexOf" => (Shape::scalar(), bytes_sum),
                    "matches" => (Shape::scalar(), bytes_sum.saturating_mul(8)),
                    "_+_" => (
                        Shape {
                            len: len_sum,
                            bytes: bytes_sum,
                        },
                        bytes_sum,
                    ),
                    "_?_:_" => {
                        let s = parts
                            .iter()
                            .skip(1)
                            .fold(Shape::scalar(), |acc, p| acc.max(p.shape));
                        (s, 0)
                    }
                    "_[_]"
                    | "_[?_]"
                    | "_?._"
                    | "value"
                    | "dyn"
                    | "optional.of"
                    | "optional.ofNonZeroValue" => (first, 1),
                    "or" | "orValue" => (parts.iter().fold(Shape::scalar(), |acc, p| acc.max(p.shape)), 1),
                    "replace" => {
                        let s = first
                            .bytes
                            .saturating_mul(parts.get(2).map(|p| p.shape.bytes).unwrap_or(1) + 1);
                        (Shape { len: 1, bytes: s }, s)
                    }
                    "split" => (
                        Shape {
                            len: first.bytes.saturating_add(1),
                            bytes: first.bytes.saturating_mul(2) + 1,
                        },
                        bytes_sum,
                    ),
                    "join" | "format" => {
                        let s = bytes_sum.saturating_mul(first.len.max(1)).saturating_add(16);
                        (Shape { len: 1, bytes: s }, s)
                    }
                    "string" | "bytes" | "lowerAscii" | "upperAscii" | "trim" | "substring" | "charAt"
                    | "reverse" | "strings.quote" | "quote" => {
                        let s = first.bytes.saturating_mul(2).saturating_add(32);
                        (
                            Shape {
                                len: first.len,
                                bytes: s,
                            },
                            s,
                        )
                    }
                    _ => {
                        let s = bytes_sum.saturating_mul(2).saturating_add(16);
                        (
                            Shape {
                                len: len_sum.max(1),
                                bytes: s,
                            },
                            s,
                        )
                    }
                };
                Est {
                    shape,
                    cost: cost_sum.saturating_add(extra),
                }
            }
            Expr::Comprehension(c) => {
                let range = self.est(&c.iter_range);
                let init = self.est(&c.accu_init);
                let mark = self.scope.len();
                self.scope.push((c.iter_var.clone(), range.shape));
                if let Some(v2) = &c.iter_var2 {
                    self.scope.push((v2.clone(), range.shape));
                }
                // One step with the initial accumulator tells how much each iteration can add.
                self.scope.push((c.accu_var.clone(), init.shape));
                let first_step = self.est(&c.loop_step);
                let n = range.shape.len;
                let accu = Shape {
                    len: init
                        .shape
                        .len
                        .saturating_add(n.saturating_mul(first_step.shape.len.max(1))),
                    bytes: init
                        .shape
                        .bytes
                        .saturating_add(n.saturating_mul(first_step.shape.bytes.max(1))),
                };
                self.scope.pop();
                self.scope.push((c.accu_var.clone(), accu));
                let cond = self.est(&c.loop_cond);
                let step = self.est(&c.loop_step);
                let result = self.est(&c.result);
                self.scope.truncate(mark);
                let per_iter = cond.cost.saturating_add(step.cost).saturating_add(1);
                let cost = range
                    .cost
                    .saturating_add(init.cost)
                    .saturating_add(n.saturating_mul(per_iter))
                    .saturating_add(result.cost);
                Est {
                    shape: result.shape,
                    cost,
                }
            }
        }
    }
}

fn estimate(program: &Program, self_shape: Shape, old_shape: Option<Shape>) -> u64 {
    let mut est = Estimator {
        scope: vec![("self".to_owned(), self_shape)],
    };
    if let Some(o) = old_shape {
        est.scope.push(("oldSelf".to_owned(), o));
    }
    est.est(program.expression()).cost
}

/// Converts a JSON value for CEL, typed by its schema (integers stay `int`, `number`s become
/// `double`), and measures it.  Resource roots expose only `metadata.name`/`generateName`.
fn to_cel(v: &Value, node: Option<&Node>, resource_root: bool, depth: usize, shape: &mut Shape) -> CelValue {
    shape.bytes = shape.bytes.saturating_add(1);
    if depth > MAX_VALUE_DEPTH {
        return CelValue::Null;
    }
    match v {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::String(s) => {
            shape.bytes = shape.bytes.saturating_add(s.len() as u64);
            CelValue::String(Arc::new(s.clone()))
        }
        Value::Number(n) => {
            let as_double = node.is_some_and(|n| n.ty == Some(Ty::Number));
            if as_double {
                CelValue::Float(n.as_f64().unwrap_or(0.0))
            } else if let Some(i) = n.as_i64() {
                CelValue::Int(i)
            } else if let Some(u) = n.as_u64() {
                CelValue::UInt(u)
            } else {
                CelValue::Float(n.as_f64().unwrap_or(0.0))
            }
        }
        Value::Array(items) => {
            shape.len = shape.len.max(items.len() as u64);
            let item_node = node.and_then(|n| n.items.as_deref());
            let embedded = item_node.is_some_and(|n| n.embedded);
            CelValue::List(Arc::new(
                items
                    .iter()
                    .map(|i| to_cel(i, item_node, embedded, depth + 1, shape))
                    .collect(),
            ))
        }
        Value::Object(map) => {
            shape.len = shape.len.max(map.len() as u64);
            let mut out: HashMap<Key, CelValue> = HashMap::with_capacity(map.len());
            for (k, val) in map {
                if resource_root && k == "metadata" {
                    let mut meta: HashMap<Key, CelValue> = HashMap::new();
                    for field in ["name", "generateName"] {
                        if let Some(Value::String(s)) = val.get(field) {
                            shape.bytes = shape.bytes.saturating_add(s.len() as u64 + 1);
                            meta.insert(
                                Key::String(Arc::new(field.to_owned())),
                                CelValue::String(Arc::new(s.clone())),
                            );
                        }
                    }
                    out.insert(
                        Key::String(Arc::new(k.clone())),
                        CelValue::Map(CelMap { map: Arc::new(meta) }),
                    );
                    continue;
                }
                let child_node = node.and_then(|n| n.field(k));
                let embedded = child_node.is_some_and(|n| n.embedded);
                shape.bytes = shape.bytes.saturating_add(k.len() as u64);
                out.insert(
                    Key::String(Arc::new(k.clone())),
                    to_cel(val, child_node, embedded, depth + 1, shape),
                );
            }
            CelValue::Map(CelMap { map: Arc::new(out) })
        }
    }
}

/// What remains of the cost budget for one object.
#[derive(Debug)]
pub(crate) struct Budget {
    pub remaining: u64,
    pub exhausted: bool,
}

/// cel-go's text for the common runtime errors.
fn exec_error_text(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::DivisionByZero(_) => "division by zero".to_owned(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_owned(),
        ExecutionError::IndexOutOfBounds(i) => format!("index out of bounds: {}", cel_value_text(i)),
        ExecutionError::Overflow(..) => "integer overflow".to_owned(),
        ExecutionError::FunctionError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

fn is_overload_error(e: &ExecutionError) -> bool {
    matches!(
        e,
        ExecutionError::NoSuchOverload(_)
            | ExecutionError::UnsupportedBinaryOperator(..)
            | ExecutionError::ValuesNotComparable(..)
            | ExecutionError::UnexpectedType { .. }
            | ExecutionError::UnsupportedTargetType { .. }
            | ExecutionError::NotSupportedAsMethod { .. }
            | ExecutionError::UnsupportedIndex(..)
    )
}

fn cel_value_text(v: &CelValue) -> String {
    match v {
        CelValue::Int(i) => i.to_string(),
        CelValue::UInt(u) => u.to_string(),
        CelValue::Float(f) => f.to_string(),
        CelValue::String(s) => s.to_string(),
        CelValue::Bool(b) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn execute(
    program: &Program,
    self_val: &CelValue,
    old: Option<&CelValue>,
) -> Result<CelValue, ExecutionError> {
    let mut ctx = Context::with_env(ENV.clone());
    ctx.add_variable_from_value("self", self_val.clone());
    if let Some(o) = old {
        ctx.add_variable_from_value("oldSelf", o.clone());
    }
    program.execute(&ctx)
}

/// Evaluates the rules of `node` against `value` (and `old`) and recurses into the children that
/// hold rules, like upstream `Validator.validate`.  `path` is `None` at the root (printed `<nil>`).
pub(crate) fn validate_cel(
    node: &Node,
    value: &Value,
    old: Option<&Value>,
    path: Option<&str>,
    resource_root: bool,
    budget: &mut Budget,
    errs: &mut Vec<FieldError>,
) {
    if !node.subtree_rules || value.is_null() || budget.exhausted {
        return;
    }
    let old = old.filter(|o| !o.is_null());
    if !node.rules.is_empty() {
        eval_rules(node, value, old, path, resource_root, budget, errs);
        if budget.exhausted {
            return;
        }
    }
    for sub in &node.all_of {
        validate_cel(sub, value, old, path, resource_root, budget, errs);
        if budget.exhausted {
            return;
        }
    }
    match value {
        Value::Array(items) => {
            let Some(item_node) = &node.items else { return };
            // Only list-type map items correlate with old items, by their keys.
            let old_by_key: HashMap<String, &Value> = match (node.list_type, old.and_then(Value::as_array)) {
                (Some(ListKind::Map), Some(olds)) if !node.list_map_keys.is_empty() => olds
                    .iter()
                    .map(|o| (map_key(&node.list_map_keys, o), o))
                    .collect(),
                _ => HashMap::new(),
            };
            for (i, item) in items.iter().enumerate() {
                let old_item = if old_by_key.is_empty() {
                    None
                } else {
                    old_by_key.get(&map_key(&node.list_map_keys, item)).copied()
                };
                let p = format!("{}[{i}]", path.unwrap_or(""));
                validate_cel(
                    item_node,
                    item,
                    old_item,
                    Some(&p),
                    item_node.embedded,
                    budget,
                    errs,
                );
                if budget.exhausted {
                    return;
                }
            }
        }
        Value::Object(map) => {
            let old_map = if node.map_atomic {
                None
            } else {
                old.and_then(Value::as_object)
            };
            if let Additional::Schema(addl) = &node.additional {
                for (k, v) in map {
                    let p = format!("{}[{k}]", path.unwrap_or(""));
                    validate_cel(
                        addl,
                        v,
                        old_map.and_then(|m| m.get(k)),
                        Some(&p),
                        addl.embedded,
                        budget,
                        errs,
                    );
                    if budget.exhausted {
                        return;
                    }
                }
            }
            for (k, v) in map {
                if let Some(prop) = node.properties.get(k) {
                    let p = child(path, k);
                    validate_cel(
                        prop,
                        v,
                        old_map.and_then(|m| m.get(k)),
                        Some(&p),
                        prop.embedded,
                        budget,
                        errs,
                    );
                    if budget.exhausted {
                        return;
                    }
                }
            }
        }
        _ => {}
    }
}

fn map_key(keys: &[String], item: &Value) -> String {
    let key: Vec<Value> = keys
        .iter()
        .map(|k| item.get(k).cloned().unwrap_or(Value::Null))
        .collect();
    super::validate::canonical_json(&Value::Array(key))
}

fn eval_rules(
    node: &Node,
    value: &Value,
    old: Option<&Value>,
    path: Option<&str>,
    resource_root: bool,
    budget: &mut Budget,
    errs: &mut Vec<FieldError>,
) {
    let field = path.unwrap_or("<nil>");
    let type_name = Bad::Str(node.type_name().to_owned());
    let mut self_shape = Shape::default();
    let self_val = to_cel(value, Some(node), resource_root, 0, &mut self_shape);
    let mut old_shape = Shape::default();
    let old_val = old.map(|o| to_cel(o, Some(node), resource_root, 0, &mut old_shape));
    for rule in &node.rules {
        if rule.uses_old_self && old_val.is_none() && !rule.optional_old_self {
            continue;
        }
        let old_binding: Option<CelValue> = if rule.optional_old_self {
            let opt = match &old_val {
                Some(v) => OptionalValue::of(v.clone()),
                None => OptionalValue::none(),
            };
            Some(CelValue::Opaque(Arc::new(opt)))
        } else {
            old_val.clone()
        };
        let cost = estimate(&rule.program, self_shape, old_binding.as_ref().map(|_| old_shape));
        if cost > PER_CALL_COST_LIMIT {
            errs.push(invalid(
                field,
                type_name.clone(),
                &format!(
                    "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                    rule.error_string()
                ),
            ));
            budget.exhausted = true;
            return;
        }
        if cost > budget.remaining {
            errs.push(invalid(
                field,
                type_name.clone(),
                "validation failed due to running out of cost budget, no further validation rules will be run",
            ));
            budget.exhausted = true;
            return;
        }
        budget.remaining -= cost;
        let result = execute(&rule.program, &self_val, old_binding.as_ref());
        match result {
            Ok(CelValue::Bool(true)) => continue,
            Ok(CelValue::Bool(false)) => {}
            Ok(other) => {
                errs.push(invalid(
                    field,
                    type_name.clone(),
                    &format!(
                        "rule evaluated to {} instead of a bool evaluating rule: {}",
                        other.type_of(),
                        rule.error_string()
                    ),
                ));
                continue;
            }
            Err(e) => {
                let detail = if is_overload_error(&e) {
                    format!(
                        "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {}",
                        rule.error_string()
                    )
                } else {
                    format!("{} evaluating rule: {}", exec_error_text(&e), rule.error_string())
                };
                errs.push(invalid(field, type_name.clone(), &detail));
                continue;
            }
        }
        let current = match &rule.field_path {
            Some(fp) => child(path, fp),
            None => field.to_owned(),
        };
        let mut detail = None;
        if let Some(me) = &rule.message_expression {
            let me_cost = estimate(me, self_shape, old_val.as_ref().map(|_| old_shape));
            if me_cost <= PER_CALL_COST_LIMIT && me_cost <= budget.remaining {
                budget.remaining -= me_cost;
                if let Ok(CelValue::String(s)) = execute(me, &self_val, old_val.as_ref()) {
                    let trimmed = s.trim();
                    if !trimmed.is_empty() && !trimmed.contains('\n') && trimmed.len() <= 5000 {
                        detail = Some(trimmed.to_owned());
                    }
                }
            }
        }
        let detail = detail.unwrap_or_else(|| rule.message_or_default());
        errs.push(match rule.reason {
            None | Some(Reason::Invalid) => invalid(&current, type_name.clone(), &detail),
            Some(Reason::Forbidden) => forbidden(&current, &detail),
            Some(Reason::Required) => required(&current, &detail),
            Some(Reason::Duplicate) => duplicate(&current, type_name.clone()),
        });
    }
}

/// The value passed to a rule as `self`, as JSON-like text: used by tests to check conversions.
#[cfg(test)]
pub(crate) fn eval_for_tests(src: &str, node: &Node, value: &Value) -> Result<String, String> {
    let program = compile_expr(src, node, false, false, false)?;
    let mut shape = Shape::default();
    let v = to_cel(value, Some(node), false, 0, &mut shape);
    execute(&program, &v, None)
        .map(|r| format!("{r:?}"))
        .map_err(|e| exec_error_text(&e))
}
