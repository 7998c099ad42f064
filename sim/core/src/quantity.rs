//! Kubernetes resource quantities (`100m`, `64Mi`, `1.5`, `2e3`) as numbers.

/// A quantity that could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
pub struct QuantityError;

/// Parses a quantity into its value in base units, in thousandths (milli-units), rounded up as
/// upstream rounds `MilliValue()`: `"100m"` -> 100, `"2"` -> 2000, `"64Mi"` -> 67108864000.
pub fn parse_milli(s: &str) -> Result<i128, QuantityError> {
    let _ = s;
    Err(QuantityError)
}
