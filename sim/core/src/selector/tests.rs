use serde_json::json;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn sel(s: &str) -> LabelSelector {
    LabelSelector::parse(s).unwrap_or_else(|e| panic!("expected {s:?} to parse, got: {e}"))
}

fn parse_err(s: &str) -> String {
    match LabelSelector::parse(s) {
        Ok(v) => panic!("expected {s:?} to be rejected, got {v:?}"),
        Err(e) => e.0,
    }
}

#[test]
fn label_selector_accepts_upstream_valid_forms() {
    for s in [
        "",
        "x=a,y=b,z=c",
        "x=,z= ",
        "x= ,z= ",
        "!x",
        "x>1",
        "x>1,z<5",
        "x in (a)",
        "x in (a,b)",
        "x in (a, b)",
        "x notin (a)",
        "x in (,a)",
        "x in ()",
        "x in (a,,b)",
        "x==a",
        "x!=a",
        "a.b/c-d_e",
        "example.com/app in (web),tier!=db",
        "  app = web  ,  tier  ",
        "in=notin",
        "notin in (in)",
    ] {
        if let Err(e) = LabelSelector::parse(s) {
            panic!("{s:?} should parse, got: {e}");
        }
    }
}

#[test]
fn label_selector_rejects_upstream_invalid_forms() {
    for s in [
        "x=a||y=b",
        "x==a==b",
        "!x=a",
        "x<a",
        "x>1,z<a",
        "x in (a",
        "x in a",
        "x=a,",
        ",x=a",
        "x notin",
        "x in (a b)",
        "a b",
        "x=(a)",
    ] {
        assert!(LabelSelector::parse(s).is_err(), "{s:?} should be rejected");
    }
}

#[test]
fn label_selector_error_texts_match_upstream() {
    assert_eq!(parse_err("x=a,"), "found '', expected: identifier after ','");
    assert_eq!(
        parse_err(",x=a"),
        "found ',', expected: !, identifier, or 'end of string'"
    );
    assert_eq!(
        parse_err("x in a"),
        "unable to parse requirement: found 'a' expected: '('"
    );
    assert_eq!(
        parse_err("x in (a"),
        "unable to parse requirement: found '', expected: ',' or ')'"
    );
    assert_eq!(parse_err("x=a b"), "found 'b', expected: ',' or 'end of string'");
    assert_eq!(
        parse_err("x (a)"),
        "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt"
    );
    assert_eq!(
        parse_err("x<a"),
        "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer"
    );
    assert_eq!(
        parse_err("-x=a"),
        "unable to parse requirement: <nil>: Invalid value: \"-x\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    );
    assert_eq!(
        parse_err("app=-bad"),
        "unable to parse requirement: values[0][app]: Invalid value: \"-bad\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
    );
    let long = "a".repeat(64);
    assert_eq!(
        parse_err(&format!("{long}=b")),
        format!(
            "unable to parse requirement: <nil>: Invalid value: \"{long}\": name part must be no more than 63 characters"
        )
    );
    assert!(
        parse_err("Bad_Prefix/x=a").contains("prefix part a lowercase RFC 1123 subdomain must consist of")
    );
    assert!(parse_err("/x=a").contains("prefix part must be non-empty"));
}

#[test]
fn label_selector_matches_like_upstream() {
    let l = labels(&[("app", "web"), ("tier", "fe"), ("n", "5")]);
    let cases = [
        ("", true),
        ("app=web", true),
        ("app==web", true),
        ("app=db", false),
        ("app!=db", true),
        ("app!=web", false),
        ("missing!=x", true),
        ("app in (web,db)", true),
        ("app in (db)", false),
        ("app notin (db)", true),
        ("app notin (web)", false),
        ("missing notin (x)", true),
        ("app", true),
        ("missing", false),
        ("!missing", true),
        ("!app", false),
        ("n>4", true),
        ("n>5", false),
        ("n<6", true),
        ("app>1", false),
        ("app in (web),tier!=db", true),
        ("app in (web),tier=db", false),
        ("missing=", false),
        ("missing in (,a)", false),
    ];
    for (s, want) in cases {
        assert_eq!(sel(s).matches(&l), want, "selector {s:?} against {l:?}");
    }
    assert!(
        sel("x=").matches(&labels(&[("x", "")])),
        "empty value matches an empty label"
    );
}

#[test]
fn label_selector_displays_sorted_canonical_form() {
    assert_eq!(
        sel("tier in (b,a),app=web,!gone,has").to_string(),
        "app=web,!gone,has,tier in (a,b)"
    );
    assert_eq!(sel("x notin (c,a,c)").to_string(), "x notin (a,c)");
}

#[test]
fn label_selector_from_json_handles_match_labels_and_expressions() {
    let s = LabelSelector::from_label_selector_json(&json!({
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["fe", "be"]},
            {"key": "env", "operator": "NotIn", "values": ["prod"]},
            {"key": "team", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"}
        ]
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        s.to_string(),
        "app=web,env notin (prod),!legacy,team,tier in (be,fe)"
    );
    assert!(s.matches(&labels(&[("app", "web"), ("tier", "fe"), ("team", "x")])));
    assert!(
        !s.matches(&labels(&[("app", "web"), ("tier", "fe")])),
        "team must exist"
    );
    assert!(!s.matches(&labels(&[
        ("app", "web"),
        ("tier", "fe"),
        ("team", "x"),
        ("legacy", "1")
    ])));
    assert!(!s.matches(&labels(&[
        ("app", "web"),
        ("tier", "fe"),
        ("team", "x"),
        ("env", "prod")
    ])));
}

#[test]
fn label_selector_from_json_null_selects_nothing_and_empty_selects_everything() {
    let nothing = LabelSelector::from_label_selector_json(&Value::Null).unwrap_or_else(|e| panic!("{e}"));
    assert!(!nothing.matches(&labels(&[])));
    let all = LabelSelector::from_label_selector_json(&json!({})).unwrap_or_else(|e| panic!("{e}"));
    assert!(all.matches(&labels(&[("a", "b")])));
    assert!(all.is_everything());
}

#[test]
fn label_selector_from_json_rejects_bad_operators_and_values() {
    let err = LabelSelector::from_label_selector_json(
        &json!({"matchExpressions": [{"key": "a", "operator": "Gt"}]}),
    )
    .err()
    .map(|e| e.0);
    assert_eq!(
        err.as_deref(),
        Some("\"Gt\" is not a valid label selector operator")
    );
    let err = LabelSelector::from_label_selector_json(
        &json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
    )
    .err()
    .map(|e| e.0);
    assert_eq!(
        err.as_deref(),
        Some("values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty")
    );
    assert!(LabelSelector::from_label_selector_json(&json!({"matchLabels": {"a": 1}})).is_err());
}

#[test]
fn label_selector_matches_object_labels() {
    let s = sel("app=web");
    assert!(s.matches_object(&json!({"metadata": {"labels": {"app": "web"}}})));
    assert!(!s.matches_object(&json!({"metadata": {}})));
}

#[test]
fn field_selector_parses_operators_and_escapes() {
    let f = FieldSelector::parse(r"metadata.name=a\,b,status.phase!=Running,spec.x==y\=z\\w")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        f.terms,
        vec![
            ("metadata.name".to_owned(), true, "a,b".to_owned()),
            ("spec.x".to_owned(), true, r"y=z\w".to_owned()),
            ("status.phase".to_owned(), false, "Running".to_owned()),
        ]
    );
    assert_eq!(FieldSelector::parse("").map(|f| f.terms.len()), Ok(0));
    assert_eq!(
        FieldSelector::parse("involvedObject.namespace=").map(|f| f.terms[0].2.clone()),
        Ok(String::new())
    );
}

#[test]
fn field_selector_error_texts_match_upstream() {
    let err = |s: &str| {
        FieldSelector::parse(s)
            .err()
            .map(|e| e.0)
            .unwrap_or_else(|| panic!("{s:?} should fail"))
    };
    assert_eq!(
        err("metadata.name"),
        "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
    );
    assert_eq!(err("a=b,c"), "invalid selector: 'a=b,c'; can't understand 'c'");
    assert_eq!(
        err(r"a=b\x"),
        r"invalid field selector: invalid escape sequence: \x"
    );
    assert_eq!(
        err(r"a=b\"),
        r"invalid field selector: invalid escape sequence: \"
    );
    assert_eq!(
        err("a=b=c"),
        "invalid field selector: unescaped character in value: ="
    );
}

#[test]
fn field_selector_matches_empty_value_against_absent_field() {
    let f = FieldSelector::parse("spec.nodeName=,status.phase!=Failed").unwrap_or_else(|e| panic!("{e}"));
    let pod = json!({"status": {"phase": "Pending"}});
    assert!(f.matches(&|l| builtin_field_value("", "Pod", &pod, l)));
    let bound = json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
    assert!(!f.matches(&|l| builtin_field_value("", "Pod", &bound, l)));
}

#[test]
fn field_value_reads_scalars_by_dotted_path() {
    let obj = json!({"metadata": {"name": "a"}, "spec": {"replicas": 3, "paused": true, "x": {"y": null}}});
    assert_eq!(field_value(&obj, "metadata.name").as_deref(), Some("a"));
    assert_eq!(field_value(&obj, ".metadata.name").as_deref(), Some("a"));
    assert_eq!(field_value(&obj, "spec.replicas").as_deref(), Some("3"));
    assert_eq!(field_value(&obj, "spec.paused").as_deref(), Some("true"));
    assert_eq!(field_value(&obj, "spec.x"), None);
    assert_eq!(field_value(&obj, "spec.x.y"), None);
    assert_eq!(field_value(&obj, "spec.missing"), None);
}

#[test]
fn builtin_field_values_follow_upstream_field_sets() {
    let pod = json!({"spec": {"nodeName": "n1"}});
    assert_eq!(
        builtin_field_value("", "Pod", &pod, "spec.host").as_deref(),
        Some("n1")
    );
    assert_eq!(
        builtin_field_value("", "Pod", &pod, "spec.hostNetwork").as_deref(),
        Some("false")
    );
    let node = json!({"spec": {}});
    assert_eq!(
        builtin_field_value("", "Node", &node, "spec.unschedulable").as_deref(),
        Some("false")
    );
    let ev = json!({"source": {"component": "kubelet"}, "reportingComponent": "kubelet"});
    assert_eq!(
        builtin_field_value("", "Event", &ev, "source").as_deref(),
        Some("kubelet")
    );
    let rs = json!({"status": {}});
    assert_eq!(
        builtin_field_value("apps", "ReplicaSet", &rs, "status.replicas").as_deref(),
        Some("0")
    );
}

#[test]
fn field_labels_are_checked_per_kind_with_upstream_errors() {
    let check = |s: &str, kind: FieldSelectorKind<'_>| {
        check_field_labels(&FieldSelector::parse(s).unwrap_or_else(|e| panic!("{e}")), kind).map_err(|e| e.0)
    };
    let pod = FieldSelectorKind::Builtin {
        group: "",
        kind: "Pod",
    };
    assert_eq!(
        check("metadata.name=a,spec.nodeName=n1,status.phase!=Failed", pod),
        Ok(())
    );
    assert_eq!(
        check("spec.foo=a", pod),
        Err("field label not supported: spec.foo".to_owned())
    );
    let cm = FieldSelectorKind::Builtin {
        group: "",
        kind: "ConfigMap",
    };
    assert_eq!(check("metadata.namespace=x", cm), Ok(()));
    assert_eq!(
        check("data.x=a", cm),
        Err(
            "\"data.x\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                .to_owned()
        )
    );
    let ev = FieldSelectorKind::Builtin {
        group: "",
        kind: "Event",
    };
    assert_eq!(
        check(
            "involvedObject.name=a,involvedObject.uid=u,reason=x,type=Normal,source=k",
            ev
        ),
        Ok(())
    );
    let node = FieldSelectorKind::Builtin {
        group: "",
        kind: "Node",
    };
    assert_eq!(check("spec.unschedulable=false", node), Ok(()));
    let ns = FieldSelectorKind::Builtin {
        group: "",
        kind: "Namespace",
    };
    assert_eq!(check("status.phase=Active", ns), Ok(()));
    let secret = FieldSelectorKind::Builtin {
        group: "",
        kind: "Secret",
    };
    assert_eq!(check("type=Opaque", secret), Ok(()));
    let rs = FieldSelectorKind::Builtin {
        group: "apps",
        kind: "ReplicaSet",
    };
    assert_eq!(check("status.replicas=0", rs), Ok(()));
    let fields = vec![".spec.color".to_owned()];
    let cr = FieldSelectorKind::Custom {
        group: "example.com",
        version: "v1",
        kind: "Widget",
        selectable_fields: &fields,
    };
    assert_eq!(check("spec.color=red,metadata.name=w", cr), Ok(()));
    assert_eq!(
        check("spec.size=1", cr),
        Err("field label not supported for example.com/v1, Kind=Widget: spec.size".to_owned())
    );
}

#[test]
fn name_validators_match_upstream_rules() {
    assert!(is_dns1123_subdomain("a.b-c.d").is_empty());
    assert!(!is_dns1123_subdomain("A").is_empty());
    assert!(!is_dns1123_subdomain("a..b").is_empty());
    assert!(!is_dns1123_subdomain(&"a".repeat(254)).is_empty());
    assert!(is_dns1123_label("abc-1").is_empty());
    assert!(!is_dns1123_label("a.b").is_empty());
    assert!(is_qualified_name("example.com/MyName").is_empty());
    assert!(!is_qualified_name("a/b/c").is_empty());
    assert!(is_valid_label_value("").is_empty());
    assert!(!is_valid_label_value("a b").is_empty());
    assert_eq!(escape_field_value(r"a,b=c\d"), r"a\,b\=c\\d");
}

#[test]
fn selectors_do_not_panic_on_hostile_input() {
    for s in [
        "(((",
        ")))",
        "!!!",
        "x in ((((",
        "\u{0}",
        "é=ü",
        "x in (\u{1F600})",
        "==",
        "!=!=",
        ",,,,",
        "x notin ()",
        "x>",
        "x<99999999999999999999",
    ] {
        let _ = LabelSelector::parse(s);
        let _ = FieldSelector::parse(s);
    }
}
