//! Object metadata rules: timestamps, generated names, name/label validation, Go `omitempty`
//! normalisation, and the comparisons that decide whether a write changes anything.

use serde_json::{Map, Value};

use super::error::Cause;
use super::resources::{ResourceType, Special};

/// Now as RFC 3339 with second precision (`2025-01-01T00:00:00Z`), the apiserver's `metav1.Time`.
pub fn now_rfc3339() -> String {
    let secs = jiff::Timestamp::now().as_second();
    jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// `now + secs` as RFC 3339 with second precision.
pub fn rfc3339_in(secs: i64) -> String {
    let t = jiff::Timestamp::now().as_second().saturating_add(secs);
    jiff::Timestamp::from_second(t)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// Parses an RFC 3339 time into unix seconds.
pub fn parse_time(s: &str) -> Option<i64> {
    s.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

/// A human duration like kubectl prints (`5s`, `3m2s`, `2d`), from seconds.
pub fn human_duration(secs: i64) -> String {
    let s = secs.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        let rem = s % 60;
        return if rem == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{rem}s")
        };
    }
    if m < 180 {
        return format!("{m}m");
    }
    let h = s / 3600;
    if h < 8 {
        let rm = (s % 3600) / 60;
        return if rm == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{rm}m")
        };
    }
    if h < 48 {
        return format!("{h}h");
    }
    let d = h / 24;
    if h < 24 * 8 {
        let rh = h % 24;
        return if rh == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{rh}h")
        };
    }
    if d < 365 * 2 {
        return format!("{d}d");
    }
    format!("{}y", d / 365)
}

/// The age cell of an object created at `ts`.
pub fn age(ts: Option<&str>) -> String {
    match ts.and_then(parse_time) {
        Some(t) => human_duration(jiff::Timestamp::now().as_second() - t),
        None => "<unknown>".to_owned(),
    }
}

/// The 5-character random suffix of `generateName` (upstream alphabet without vowels).
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let id = uuid::Uuid::new_v4();
    id.as_bytes()[..5]
        .iter()
        .map(|b| ALPHABET[(*b as usize) % ALPHABET.len()] as char)
        .collect()
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Validates `metadata.name` of a new object of `rt`: DNS-1123 label for namespaces and services,
/// DNS-1123 subdomain otherwise; a loose check for names that may contain `:` (RBAC).
pub fn validate_name(rt: &ResourceType, name: &str) -> Option<Cause> {
    let label = matches!(rt.plural.as_str(), "namespaces" | "services");
    // APIServices are named `<version>.<group>`, so the core group's is `v1.`.
    if rt.special == Special::ApiService {
        return None;
    }
    let rbac = rt.group == "rbac.authorization.k8s.io";
    if rbac {
        return (name.is_empty() || name.contains('/') || name == "." || name == "..").then(|| {
            Cause::new(
                "FieldValueInvalid",
                "metadata.name",
                format!("Invalid value: {name:?}: may not contain '/'"),
            )
        });
    }
    if label {
        if !is_dns_label(name) {
            return Some(Cause::new(
                "FieldValueInvalid",
                "metadata.name",
                format!(
                    "Invalid value: {name:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                ),
            ));
        }
    } else if !is_dns_subdomain(name) {
        return Some(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!(
                "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ),
        ));
    }
    None
}

/// Validates labels, annotation keys and the annotation size limit.
pub fn validate_metadata(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            for e in nave_sim_core::selector::is_qualified_name(k) {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    "metadata.labels",
                    format!("Invalid value: {k:?}: {e}"),
                ));
            }
            match v.as_str() {
                Some(v) => {
                    for e in nave_sim_core::selector::is_valid_label_value(v) {
                        causes.push(Cause::new(
                            "FieldValueInvalid",
                            "metadata.labels",
                            format!("Invalid value: {v:?}: {e}"),
                        ));
                    }
                }
                None => causes.push(Cause::new(
                    "FieldValueInvalid",
                    "metadata.labels",
                    "Invalid value: must be a string",
                )),
            }
        }
    }
    if let Some(ann) = obj.pointer("/metadata/annotations").and_then(Value::as_object) {
        let mut total = 0usize;
        for (k, v) in ann {
            for e in nave_sim_core::selector::is_qualified_name(&k.to_lowercase()) {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    "metadata.annotations",
                    format!("Invalid value: {k:?}: {e}"),
                ));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > 262_144 {
            causes.push(Cause::new(
                "FieldValueTooLong",
                "metadata.annotations",
                "Too long: must have at most 262144 bytes",
            ));
        }
    }
    causes
}

/// Drops what Go's `omitempty` would: empty metadata maps and lists, `null`s in metadata.
pub fn normalize_metadata(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, v| {
            !(v.is_null()
                || (matches!(k.as_str(), "labels" | "annotations")
                    && v.as_object().is_some_and(Map::is_empty))
                || (matches!(k.as_str(), "finalizers" | "ownerReferences" | "managedFields")
                    && v.as_array().is_some_and(Vec::is_empty))
                || (k == "generateName" && v.as_str() == Some(""))
                || k == "selfLink")
        });
    }
}

/// Removes `null` object members recursively (typed built-ins cannot store them).
pub fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            for v in m.values_mut() {
                strip_nulls(v);
            }
        }
        Value::Array(a) => {
            for v in a {
                strip_nulls(v);
            }
        }
        _ => {}
    }
}

/// `data`-like maps of ConfigMaps and Secrets are `omitempty` in Go.
pub fn normalize_data_maps(rt: &ResourceType, obj: &mut Value) {
    if !rt.group.is_empty() || !matches!(rt.plural.as_str(), "configmaps" | "secrets") {
        return;
    }
    if let Some(m) = obj.as_object_mut() {
        m.retain(|k, v| {
            !(matches!(k.as_str(), "data" | "binaryData" | "stringData")
                && v.as_object().is_some_and(Map::is_empty))
        });
    }
}

/// Zero-valued integer status fields of workloads are `omitempty` in Go, so a real server
/// never returns them.
pub fn normalize_workload_status(rt: &ResourceType, obj: &mut Value) {
    if rt.group != "apps" || !matches!(rt.plural.as_str(), "deployments" | "replicasets" | "statefulsets") {
        return;
    }
    // ReplicaSet and StatefulSet `status.replicas` has no omitempty upstream, nor has StatefulSet
    // `availableReplicas`; StatefulSet `collisionCount` is a pointer, kept when 0.
    let keep_replicas = rt.plural != "deployments";
    let sts = rt.plural == "statefulsets";
    if let Some(st) = obj.get_mut("status").and_then(Value::as_object_mut) {
        st.retain(|k, v| {
            let zero = v.as_i64() == Some(0);
            let kept = (keep_replicas && k == "replicas")
                || (sts && matches!(k.as_str(), "availableReplicas" | "collisionCount"));
            !zero || kept
        });
        if st
            .get("conditions")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
        {
            st.remove("conditions");
        }
    }
}

/// Everything but `metadata.resourceVersion` and `metadata.managedFields[].time`: two objects
/// that compare equal here make a write a no-op: no new resourceVersion, no watch event.
pub fn same_content(a: &Value, b: &Value) -> bool {
    fn strip(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        v
    }
    if a.get("metadata").and_then(|m| m.get("resourceVersion"))
        == b.get("metadata").and_then(|m| m.get("resourceVersion"))
    {
        return a == b;
    }
    strip(a) == strip(b)
}

/// Whether anything outside `metadata` (and `status`, when `ignore_status`) differs.
pub fn spec_changed(old: &Value, new: &Value, ignore_status: bool) -> bool {
    let keys = |v: &Value| -> Vec<String> {
        v.as_object()
            .map(|m| {
                m.keys()
                    .filter(|k| {
                        !matches!(k.as_str(), "metadata" | "apiVersion" | "kind")
                            && (!ignore_status || *k != "status")
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut all = keys(old);
    all.extend(keys(new));
    all.into_iter().any(|k| old.get(&k) != new.get(&k))
}

/// `metadata.<field>` as a str.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// `metadata.labels` as a map of strings.
pub fn labels(obj: &Value) -> std::collections::BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.finalizers`.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// The mutable `metadata` map (created if absent or not an object).
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let Value::Object(root) = obj else {
        unreachable_object()
    };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable_object(),
    }
}

#[allow(clippy::panic)]
fn unreachable_object() -> ! {
    // Both call sites have just made the value an object.
    panic!("value was just made an object")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn human_durations_match_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(182), "3m2s");
        assert_eq!(human_duration(3600 * 3), "3h");
        assert_eq!(human_duration(86400 * 2), "2d");
    }

    #[test]
    fn empty_finalizers_are_dropped() {
        let mut o =
            json!({"metadata": {"name": "a", "finalizers": [], "labels": {}, "annotations": {"a": "b"}}});
        normalize_metadata(&mut o);
        assert_eq!(o, json!({"metadata": {"name": "a", "annotations": {"a": "b"}}}));
    }

    #[test]
    fn suffix_uses_the_upstream_alphabet() {
        let s = random_suffix();
        assert_eq!(s.len(), 5);
        assert!(
            s.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
            "{s}"
        );
    }

    #[test]
    fn now_has_second_precision() {
        let n = now_rfc3339();
        assert_eq!(n.len(), 20, "{n}");
        assert!(n.ends_with('Z'));
    }
}
