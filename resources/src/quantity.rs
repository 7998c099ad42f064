//! Kubernetes resource quantities (`100m`, `64Mi`, `1.5`, `2e3`) as exact integers.
//!
//! Parsing follows `k8s.io/apimachinery/pkg/api/resource.ParseQuantity`: an optional sign, digits with
//! at most one decimal point, then one suffix: a decimal SI suffix (`n u m "" k M G T P E`), a binary
//! one (`Ki Mi Gi Ti Pi Ei`) or a decimal exponent (`e3`, `E-2`).  Values are kept exactly while parsing
//! (integer arithmetic on the digits, never floating point) and rounded once, away from zero, to
//! thousandths of the base unit, as upstream `MilliValue()` does.  Whole units ([`Quantity::value`])
//! round up from there, which gives upstream `Value()` exactly: rounding up to a thousandth and then
//! up to a unit is rounding up to a unit.

use std::fmt;
use std::str::FromStr;

#[cfg(test)]
mod tests;

/// A quantity that could not be parsed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
pub struct QuantityError;

/// How a quantity was written, which decides how it is printed back (upstream `resource.Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantityFormat {
    /// Powers of ten with SI suffixes: `100m`, `2`, `5k`, `3G`.
    DecimalSI,
    /// Powers of 1024 with IEC suffixes: `64Mi`, `1Gi`.
    BinarySI,
    /// Powers of ten written as exponents: `1e3`, `5e-3`.
    DecimalExponent,
}

/// A parsed quantity, kept in thousandths of the base unit (the precision every consumer of pod
/// requests works in: the scheduler counts CPU in millicores, memory and pods in whole units).
///
/// Values beyond the `i128` range of thousandths saturate instead of wrapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quantity {
    milli: i128,
    format: QuantityFormat,
}

impl Quantity {
    /// Parses a quantity string (`"500m"`, `"1.5Gi"`, `"2e3"`).
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        let parsed = parse_parts(s)?;
        Ok(Quantity {
            milli: parsed.milli(),
            format: parsed.format,
        })
    }

    /// A quantity of `milli` thousandths of the base unit, printed in `format`.
    pub fn from_milli(milli: i128, format: QuantityFormat) -> Quantity {
        Quantity { milli, format }
    }

    /// The value in thousandths of the base unit, rounded away from zero (upstream `MilliValue()`):
    /// `"100m"` -> 100, `"2"` -> 2000, `"1n"` -> 1.
    pub fn milli_value(&self) -> i128 {
        self.milli
    }

    /// The value in whole base units, rounded away from zero (upstream `Value()`): `"1500m"` -> 2,
    /// `"64Mi"` -> 67108864.
    pub fn value(&self) -> i128 {
        let whole = self.milli / 1000;
        if self.milli % 1000 == 0 {
            whole
        } else if self.milli > 0 {
            whole + 1
        } else {
            whole - 1
        }
    }

    /// The notation the quantity was written in.
    pub fn format(&self) -> QuantityFormat {
        self.format
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Quantity, QuantityError> {
        Quantity::parse(s)
    }
}

impl TryFrom<&k8s_openapi::apimachinery::pkg::api::resource::Quantity> for Quantity {
    type Error = QuantityError;

    fn try_from(
        q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    ) -> Result<Quantity, QuantityError> {
        Quantity::parse(&q.0)
    }
}

impl fmt::Display for Quantity {
    /// The canonical form upstream serialises (`1500m`, `2`, `1Ki`, `1536`, `2k`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_milli(self.milli, self.format))
    }
}

/// Parses a quantity into its value in thousandths of the base unit, rounded away from zero
/// ([`Quantity::milli_value`]): `"100m"` -> 100, `"2"` -> 2000, `"64Mi"` -> 67108864000.
pub fn parse_milli(s: &str) -> Result<i128, QuantityError> {
    Quantity::parse(s).map(|q| q.milli)
}

/// Formats a milli-unit value canonically in the given notation, as upstream `Quantity.String()`
/// would for a value of that precision: `1500` milli -> `"1500m"`, `2000` -> `"2"`,
/// `1048576000` (binary) -> `"1Mi"`, `2000000` (decimal) -> `"2k"`.
pub fn format_milli(milli: i128, format: QuantityFormat) -> String {
    if milli == 0 {
        return "0".to_owned();
    }
    if format == QuantityFormat::BinarySI && milli % 1000 == 0 {
        let whole = milli / 1000;
        // Upstream prints small binary values (|v| < 1024) in decimal notation.
        if whole <= -1024 || whole >= 1024 {
            let (mut amount, mut exp) = (whole, 0usize);
            while exp < 6 && amount % 1024 == 0 && amount.abs() >= 1024 {
                amount /= 1024;
                exp += 1;
            }
            const BIN: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
            return format!("{amount}{}", BIN[exp]);
        }
    }
    // Decimal mantissa/exponent with the exponent a multiple of 3, starting from 10^-3.
    let mut amount = milli;
    let mut exp: i32 = -3;
    while amount != 0 && amount % 10 == 0 {
        amount /= 10;
        exp += 1;
    }
    match exp.rem_euclid(3) {
        1 => {
            amount = amount.saturating_mul(10);
            exp -= 1;
        }
        2 => {
            amount = amount.saturating_mul(100);
            exp -= 2;
        }
        _ => {}
    }
    if format == QuantityFormat::DecimalExponent {
        return if exp == 0 {
            amount.to_string()
        } else {
            format!("{amount}e{exp}")
        };
    }
    let suffix = match exp {
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        _ => return format!("{amount}e{exp}"),
    };
    format!("{amount}{suffix}")
}

/// A quantity split into its exact parts: `digits × 10^exp10 × 1024^exp1024`.
struct Parts {
    negative: bool,
    /// Significant decimal digits, most significant first, without the decimal point.
    digits: Vec<u8>,
    exp10: i64,
    exp1024: u32,
    format: QuantityFormat,
}

fn parse_parts(s: &str) -> Result<Parts, QuantityError> {
    let bytes = s.as_bytes();
    let mut pos = 0;
    let mut negative = false;
    if let Some(&c) = bytes.first()
        && (c == b'+' || c == b'-')
    {
        negative = c == b'-';
        pos = 1;
    }
    let mut digits = Vec::new();
    let mut frac_len: i64 = 0;
    let mut seen_dot = false;
    let mut seen_digit = false;
    while pos < bytes.len() {
        let c = bytes[pos];
        if c.is_ascii_digit() {
            seen_digit = true;
            digits.push(c - b'0');
            if seen_dot {
                frac_len += 1;
            }
        } else if c == b'.' {
            if seen_dot {
                return Err(QuantityError);
            }
            seen_dot = true;
        } else {
            break;
        }
        pos += 1;
    }
    if !seen_digit {
        return Err(QuantityError);
    }
    let suffix = &s[pos..];
    let (exp10, exp1024, format) = match suffix {
        "" => (0, 0, QuantityFormat::DecimalSI),
        "n" => (-9, 0, QuantityFormat::DecimalSI),
        "u" => (-6, 0, QuantityFormat::DecimalSI),
        "m" => (-3, 0, QuantityFormat::DecimalSI),
        "k" => (3, 0, QuantityFormat::DecimalSI),
        "M" => (6, 0, QuantityFormat::DecimalSI),
        "G" => (9, 0, QuantityFormat::DecimalSI),
        "T" => (12, 0, QuantityFormat::DecimalSI),
        "P" => (15, 0, QuantityFormat::DecimalSI),
        "E" => (18, 0, QuantityFormat::DecimalSI),
        "Ki" => (0, 1, QuantityFormat::BinarySI),
        "Mi" => (0, 2, QuantityFormat::BinarySI),
        "Gi" => (0, 3, QuantityFormat::BinarySI),
        "Ti" => (0, 4, QuantityFormat::BinarySI),
        "Pi" => (0, 5, QuantityFormat::BinarySI),
        "Ei" => (0, 6, QuantityFormat::BinarySI),
        _ => {
            let rest = suffix.strip_prefix(['e', 'E']).ok_or(QuantityError)?;
            let (sign, num) = match rest.as_bytes().first() {
                Some(b'-') => (-1, &rest[1..]),
                Some(b'+') => (1, &rest[1..]),
                _ => (1, rest),
            };
            if num.is_empty() || !num.bytes().all(|c| c.is_ascii_digit()) {
                return Err(QuantityError);
            }
            // Exponents beyond this range only saturate or round to the smallest unit.
            let e: i64 = num.parse::<i64>().unwrap_or(i64::MAX / 4).min(10_000);
            (sign * e, 0, QuantityFormat::DecimalExponent)
        }
    };
    Ok(Parts {
        negative,
        digits,
        exp10: exp10 - frac_len,
        exp1024,
        format,
    })
}

impl Parts {
    /// The value in thousandths, rounded away from zero, saturating at the `i128` range.
    fn milli(&self) -> i128 {
        // Little-endian base-10^9 big integer, so arbitrarily long inputs stay exact.
        let mut big: Vec<u64> = vec![0];
        let mut leading = true;
        for &d in &self.digits {
            if leading && d == 0 {
                continue;
            }
            leading = false;
            big_mul_add(&mut big, 10, u64::from(d));
            if big.len() > 8 {
                return self.saturated();
            }
        }
        for _ in 0..self.exp1024 {
            big_mul_add(&mut big, 1024, 0);
        }
        let exp = self.exp10 + 3;
        let mut sticky = false;
        if exp >= 0 {
            for _ in 0..exp {
                big_mul_add(&mut big, 10, 0);
                if big.len() > 8 {
                    return self.saturated();
                }
            }
        } else {
            for _ in 0..(-exp) {
                if big_is_zero(&big) {
                    break;
                }
                if big_div_small(&mut big, 10) != 0 {
                    sticky = true;
                }
            }
        }
        let mut v: u128 = 0;
        for &limb in big.iter().rev() {
            v = match v
                .checked_mul(1_000_000_000)
                .and_then(|x| x.checked_add(u128::from(limb)))
            {
                Some(x) => x,
                None => return self.saturated(),
            };
        }
        if sticky {
            v = v.saturating_add(1);
        }
        let v = i128::try_from(v).unwrap_or(i128::MAX);
        if self.negative { -v } else { v }
    }

    fn saturated(&self) -> i128 {
        if self.negative { i128::MIN + 1 } else { i128::MAX }
    }
}

fn big_mul_add(big: &mut Vec<u64>, mul: u64, add: u64) {
    let mut carry = add;
    for limb in big.iter_mut() {
        let x = *limb * mul + carry;
        *limb = x % 1_000_000_000;
        carry = x / 1_000_000_000;
    }
    while carry > 0 {
        big.push(carry % 1_000_000_000);
        carry /= 1_000_000_000;
    }
}

fn big_div_small(big: &mut Vec<u64>, div: u64) -> u64 {
    let mut rem = 0u64;
    for limb in big.iter_mut().rev() {
        let x = rem * 1_000_000_000 + *limb;
        *limb = x / div;
        rem = x % div;
    }
    while big.len() > 1 && big.last() == Some(&0) {
        big.pop();
    }
    rem
}

fn big_is_zero(big: &[u64]) -> bool {
    big.iter().all(|&l| l == 0)
}
