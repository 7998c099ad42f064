//! Go-compatible rendering of values in error messages (`%v`, `%q`, `%#v`), and the
//! `field.Error` constructors of `k8s.io/apimachinery/pkg/util/validation/field`.

use serde_json::Value;

use super::FieldError;
use crate::selector::go_quote;

/// A value as a Go `field.Error` would hold it in `BadValue`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bad {
    /// Printed with `%q`.
    Str(String),
    /// `int64`, printed with `%v`.
    Int(i64),
    /// `float64`, printed with `%v`.
    Float(f64),
    /// `bool`.
    Bool(bool),
    /// A nil value: printed as `"null"`.
    Null,
    /// A JSON map or list held in `interface{}`, printed with `%#v`.
    Json(Value),
    /// `field.OmitValueType{}`: no value in the message.
    Omit,
}

impl Bad {
    /// The value of an unstructured JSON node, as Go decodes it (`int64` when it fits, else `float64`).
    pub(crate) fn of(v: &Value) -> Bad {
        match v {
            Value::Null => Bad::Null,
            Value::Bool(b) => Bad::Bool(*b),
            Value::String(s) => Bad::Str(s.clone()),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Bad::Int(i),
                None => Bad::Float(n.as_f64().unwrap_or(0.0)),
            },
            other => Bad::Json(other.clone()),
        }
    }

    fn render(&self) -> Option<String> {
        Some(match self {
            Bad::Str(s) => go_quote(s),
            Bad::Int(i) => i.to_string(),
            Bad::Float(f) => go_float(*f),
            Bad::Bool(b) => b.to_string(),
            Bad::Null => "\"null\"".to_owned(),
            Bad::Json(v) => go_sharp_v(v),
            Bad::Omit => return None,
        })
    }
}

/// Go's `%v` for a `float64`: `%g` with the shortest representation, so the exponent form is used
/// when the decimal exponent is < -4 or >= 6 (`1e+06`, `1.5e-05`, `123456`).
pub(crate) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".to_owned()
        } else {
            "-Inf".to_owned()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".to_owned()
        } else {
            "0".to_owned()
        };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{f}")
    }
}

/// Go's `%#v` for a JSON value held in `interface{}`.
pub(crate) fn go_sharp_v(v: &Value) -> String {
    fn inner(v: &Value, out: &mut String, depth: usize) {
        if depth > 64 {
            out.push_str("...");
            return;
        }
        match v {
            Value::Null => out.push_str("interface {}(nil)"),
            Value::Bool(b) => out.push_str(&b.to_string()),
            Value::Number(n) => match n.as_i64() {
                Some(i) => out.push_str(&i.to_string()),
                None => out.push_str(&go_float(n.as_f64().unwrap_or(0.0))),
            },
            Value::String(s) => out.push_str(&go_quote(s)),
            Value::Array(items) => {
                out.push_str("[]interface {}{");
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    inner(item, out, depth + 1);
                }
                out.push('}');
            }
            Value::Object(map) => {
                out.push_str("map[string]interface {}{");
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&go_quote(k));
                    out.push(':');
                    if let Some(item) = map.get(k) {
                        inner(item, out, depth + 1);
                    }
                }
                out.push('}');
            }
        }
    }
    let mut out = String::new();
    inner(v, &mut out, 0);
    out
}

/// `field.Path` rendering helpers: a path is `None` for the nil path (printed `<nil>`).
pub(crate) fn child(base: Option<&str>, name: &str) -> String {
    match base {
        None | Some("") => name.to_owned(),
        Some(b) => format!("{b}.{name}"),
    }
}

fn error(field: &str, reason: &'static str, head: &str, bad: Option<&Bad>, detail: &str) -> FieldError {
    let mut body = head.to_owned();
    if let Some(rendered) = bad.and_then(Bad::render) {
        body.push_str(": ");
        body.push_str(&rendered);
    }
    if !detail.is_empty() {
        body.push_str(": ");
        body.push_str(detail);
    }
    FieldError {
        field: field.to_owned(),
        reason,
        message: format!("{field}: {body}"),
    }
}

/// `field.Invalid`.
pub(crate) fn invalid(field: &str, bad: Bad, detail: &str) -> FieldError {
    error(field, "FieldValueInvalid", "Invalid value", Some(&bad), detail)
}

/// `field.TypeInvalid`.
pub(crate) fn type_invalid(field: &str, bad: Bad, detail: &str) -> FieldError {
    error(
        field,
        "FieldValueTypeInvalid",
        "Invalid value",
        Some(&bad),
        detail,
    )
}

/// `field.Required`.
pub(crate) fn required(field: &str, detail: &str) -> FieldError {
    error(field, "FieldValueRequired", "Required value", None, detail)
}

/// `field.Forbidden`.
pub(crate) fn forbidden(field: &str, detail: &str) -> FieldError {
    error(field, "FieldValueForbidden", "Forbidden", None, detail)
}

/// `field.Duplicate`.
pub(crate) fn duplicate(field: &str, bad: Bad) -> FieldError {
    error(field, "FieldValueDuplicate", "Duplicate value", Some(&bad), "")
}

/// `field.NotSupported`.
pub(crate) fn not_supported(field: &str, bad: Bad, supported: &[String]) -> FieldError {
    let detail = if supported.is_empty() {
        String::new()
    } else {
        let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        format!("supported values: {}", quoted.join(", "))
    };
    error(
        field,
        "FieldValueNotSupported",
        "Unsupported value",
        Some(&bad),
        &detail,
    )
}

/// `field.TooLong` (the value is never printed).
pub(crate) fn too_long(field: &str, max: i64) -> FieldError {
    let detail = if max >= 0 {
        format!(
            "may not be more than {max} {}",
            if max == 1 { "byte" } else { "bytes" }
        )
    } else {
        "value is too long".to_owned()
    };
    error(field, "FieldValueTooLong", "Too long", None, &detail)
}

/// `field.TooMany`.
pub(crate) fn too_many(field: &str, actual: i64, max: i64) -> FieldError {
    let detail = if max >= 0 {
        format!("must have at most {max} items")
    } else {
        "has too many items".to_owned()
    };
    let bad = if actual >= 0 { Bad::Int(actual) } else { Bad::Omit };
    error(field, "FieldValueTooMany", "Too many", Some(&bad), &detail)
}
