use super::*;

fn milli(s: &str) -> i128 {
    match parse_milli(s) {
        Ok(v) => v,
        Err(e) => panic!("expected {s:?} to parse, got error: {e}"),
    }
}

#[test]
fn parses_plain_and_decimal_si_suffixes() {
    for (input, want) in [
        ("0", 0),
        ("1", 1000),
        ("2", 2000),
        ("100m", 100),
        ("1.5", 1500),
        (".5", 500),
        ("5.", 5000),
        ("1k", 1_000_000),
        ("1M", 1_000_000_000),
        ("1G", 1_000_000_000_000),
        ("1T", 1_000_000_000_000_000),
        ("1P", 1_000_000_000_000_000_000),
        ("1E", 1_000_000_000_000_000_000_000),
        ("250u", 1),
        ("1n", 1),
        ("+3", 3000),
        ("-3", -3000),
    ] {
        assert_eq!(milli(input), want, "parse_milli({input:?})");
    }
}

#[test]
fn parses_binary_si_suffixes() {
    for (input, want) in [
        ("1Ki", 1_024_000),
        ("64Mi", 67_108_864_000),
        ("1Gi", 1_073_741_824_000),
        ("1.5Gi", 1_610_612_736_000),
        ("1Ti", 1_099_511_627_776_000),
        ("1Pi", 1_125_899_906_842_624_000),
        ("1Ei", 1_152_921_504_606_846_976_000),
        ("0.5Ki", 512_000),
    ] {
        assert_eq!(milli(input), want, "parse_milli({input:?})");
    }
}

#[test]
fn parses_decimal_exponents() {
    for (input, want) in [
        ("1e3", 1_000_000),
        ("1E3", 1_000_000),
        ("2e-3", 2),
        ("1.5e+2", 150_000),
        ("12e0", 12_000),
    ] {
        assert_eq!(milli(input), want, "parse_milli({input:?})");
    }
}

#[test]
fn rounds_fractions_of_a_milli_away_from_zero() {
    // Upstream MilliValue() rounds up (away from zero): 1n, 0.1m and 1.0001m all need a whole milli more.
    assert_eq!(milli("1n"), 1);
    assert_eq!(milli("0.1m"), 1);
    assert_eq!(milli("1.0001m"), 2);
    assert_eq!(milli("-1n"), -1);
    assert_eq!(milli("-0.1m"), -1);
    assert_eq!(milli("0.000000000000000000000000000001"), 1);
}

#[test]
fn rejects_malformed_quantities() {
    for input in [
        "", "+", "-", ".", "1..2", "1.2.3", "abc", "1 m", "1mm", "1Kib", "1e", "1e+", "1ki", "1x", "m",
        "1e3.5",
    ] {
        assert_eq!(
            parse_milli(input),
            Err(QuantityError),
            "parse_milli({input:?}) should fail"
        );
    }
}

#[test]
fn saturates_instead_of_overflowing_on_huge_values() {
    assert_eq!(milli("1e10000"), i128::MAX);
    assert_eq!(milli("-1e10000"), i128::MIN + 1);
    assert_eq!(
        milli("99999999999999999999999999999999999999999999999999999999999999999999999999999999999"),
        i128::MAX
    );
    assert_eq!(milli("1e-10000"), 1);
}

#[test]
fn value_rounds_whole_units_away_from_zero() {
    let q = Quantity::parse("1500m").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(q.value(), 2);
    let q = Quantity::parse("-1500m").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(q.value(), -2);
    let q = Quantity::parse("2").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(q.value(), 2);
}

#[test]
fn formats_canonically_like_upstream() {
    for (input, want) in [
        ("1500m", "1500m"),
        ("1.5", "1500m"),
        ("2000m", "2"),
        ("2", "2"),
        ("1000", "1k"),
        ("1500", "1500"),
        ("2k", "2k"),
        ("0.5Gi", "512Mi"),
        ("1024Ki", "1Mi"),
        ("1536Ki", "1536Ki"),
        ("512", "512"),
        ("0.5Ki", "512"),
        ("1Ki", "1Ki"),
        ("100m", "100m"),
        ("0", "0"),
        ("1e3", "1e3"),
        ("1500e-3", "1500e-3"),
        ("12e6", "12e6"),
        ("-2k", "-2k"),
    ] {
        let q = Quantity::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(q.to_string(), want, "canonical form of {input:?}");
    }
}

#[test]
fn the_documentations_equal_memory_quantities_agree() {
    // "Resource Management for Pods and Containers": "the following represent roughly the same
    // value: 128974848, 129e6, 129M, 128974848000m, 123Mi".
    let bytes = |s: &str| Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}")).value();
    assert_eq!(bytes("128974848"), 128_974_848);
    assert_eq!(bytes("128974848000m"), 128_974_848);
    assert_eq!(bytes("123Mi"), 128_974_848);
    assert_eq!(bytes("129e6"), 129_000_000);
    assert_eq!(bytes("129M"), 129_000_000);
    // Same page: "400m of memory [...] is 0.4 bytes"; whole bytes round up.
    assert_eq!(bytes("400m"), 1);
    assert_eq!(milli("400m"), 400);
    // Same page: "0.1" CPU is "100m".
    assert_eq!(milli("0.1"), milli("100m"));
}

#[test]
fn upstream_parse_examples() {
    // From apimachinery's quantity_test.go (`TestQuantityParse`), as milli values.
    for (input, want) in [
        ("0n", 0),
        ("0Ki", 0),
        ("0E", 0),
        ("-0", 0),
        ("1m", 1),
        ("1.1m", 2),
        ("5Ki", 5_120_000),
        ("5Mi", 5_242_880_000),
        ("5Gi", 5_368_709_120_000),
        ("5e3", 5_000_000),
        ("5E3", 5_000_000),
        ("0.5Mi", 524_288_000),
        ("-5m", -5),
        ("+5m", 5),
        ("1.001", 1001),
        ("1.0001", 1001),
        ("100.035k", 100_035_000),
        ("9.223372036854775807e18", 9_223_372_036_854_775_807_000),
        ("12E+2", 1_200_000),
        ("8E-1", 800),
    ] {
        assert_eq!(milli(input), want, "parse_milli({input:?})");
    }
    for input in [
        "1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-", " 1", "1 ", "lots",
    ] {
        assert_eq!(
            Quantity::parse(input),
            Err(QuantityError),
            "{input:?} should fail"
        );
    }
}

#[test]
fn value_rounds_up_from_the_exact_value_not_only_from_milli() {
    // Upstream `Value()` of 1.0001 is 2: the fraction below a milli still rounds the unit up.
    let value = |s: &str| Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}")).value();
    assert_eq!(value("1.0001"), 2);
    assert_eq!(value("1n"), 1);
    assert_eq!(value("-1n"), -1);
    assert_eq!(value("1Ki"), 1024);
    assert_eq!(value("0"), 0);
    assert_eq!(value("1e10000"), i128::MAX / 1000 + 1);
}

#[test]
fn from_str_and_kubernetes_quantities_parse_alike() {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
    let q: Quantity = "250m".parse().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(q.milli_value(), 250);
    assert_eq!(q.format(), QuantityFormat::DecimalSI);
    assert_eq!(
        Quantity::try_from(&KubeQuantity("1Gi".into())).map(|q| q.value()),
        Ok(1 << 30)
    );
    assert_eq!(
        Quantity::try_from(&KubeQuantity("lots".into())),
        Err(QuantityError)
    );
}
