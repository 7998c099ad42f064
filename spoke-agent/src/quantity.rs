//! Kubernetes quantities (`500m`, `1.5Gi`, `2e3`) to integers, rounded up as the API server
//! rounds them. Kept here rather than borrowed so the agent stays small.

/// A quantity in thousandths of its unit (`"1"` -> 1000, `"250m"` -> 250), rounded up; `None`
/// when it does not parse.
pub fn parse_milli(s: &str) -> Option<i128> {
    let s = s.trim();
    let split = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.' || *c == '+' || *c == '-'))
        .map_or(s.len(), |(i, _)| i);
    let (number, suffix) = s.split_at(split);
    let (negative, number) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty() || !(whole.bytes().chain(frac.bytes())).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let mantissa: i128 = format!("{whole}{frac}").parse().ok()?;
    let scale = u32::try_from(frac.len()).ok()?;
    // value = mantissa * base^exp / 10^scale, times 1000 for milli.
    let (base, exp): (i128, i32) = match suffix {
        "" => (10, 0),
        "n" => (10, -9),
        "u" => (10, -6),
        "m" => (10, -3),
        "k" => (10, 3),
        "M" => (10, 6),
        "G" => (10, 9),
        "T" => (10, 12),
        "P" => (10, 15),
        "E" => (10, 18),
        "Ki" => (2, 10),
        "Mi" => (2, 20),
        "Gi" => (2, 30),
        "Ti" => (2, 40),
        "Pi" => (2, 50),
        "Ei" => (2, 60),
        other => {
            let exp = other.strip_prefix(['e', 'E'])?.parse::<i32>().ok()?;
            (10, exp)
        }
    };
    let mut numerator = mantissa.checked_mul(1000)?;
    let mut denominator: i128 = 10i128.checked_pow(scale)?;
    if exp >= 0 {
        numerator = numerator.checked_mul(base.checked_pow(exp.unsigned_abs())?)?;
    } else {
        denominator = denominator.checked_mul(base.checked_pow(exp.unsigned_abs())?)?;
    }
    let value = (numerator + denominator - 1) / denominator;
    Some(if negative { -value } else { value })
}

/// A quantity as a whole count of its unit (bytes, pods), rounded up; `0` when it does not parse
/// or is negative.
pub fn parse_units(s: &str) -> u64 {
    parse_milli(s).map_or(0, |m| u64::try_from((m + 999).div_euclid(1000)).unwrap_or(0))
}

/// A quantity in thousandths (CPU millicores), rounded up; `0` when it does not parse or is
/// negative.
pub fn parse_millis(s: &str) -> u64 {
    parse_milli(s).map_or(0, |m| u64::try_from(m).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_nodes_and_pods_use() {
        for (q, milli) in [
            ("4", 4000),
            ("250m", 250),
            ("0.5", 500),
            ("1.5", 1500),
            ("100n", 1),
            ("1k", 1_000_000),
            ("16Gi", 16 * (1i128 << 30) * 1000),
            ("1Mi", (1 << 20) * 1000),
            ("128M", 128_000_000_000),
            ("2e3", 2_000_000),
            ("110", 110_000),
            ("-1", -1000),
        ] {
            assert_eq!(parse_milli(q), Some(milli), "parsing {q:?}");
        }
        for bad in ["", "abc", "1.2.3", "5Xi", "."] {
            assert_eq!(parse_milli(bad), None, "parsing {bad:?}");
        }
    }

    #[test]
    fn whole_units_round_up() {
        assert_eq!(parse_units("1500m"), 2);
        assert_eq!(parse_units("1Ki"), 1024);
        assert_eq!(parse_millis("0.1"), 100);
        assert_eq!(parse_millis("bogus"), 0);
    }
}
