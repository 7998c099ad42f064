//! Representations of a stored object on the wire: the served version of a custom resource, the
//! `events.k8s.io/v1` view of core Events, `PartialObjectMetadata`, and `autoscaling/v1`
//! `Scale`.

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use super::resources::{ResourceType, Special};

/// Core Event field ↔ events.k8s.io/v1 Event field.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("reportingInstance", "reportingInstance"),
    ("source", "deprecatedSource"),
    ("count", "deprecatedCount"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("series", "series"),
    ("eventTime", "eventTime"),
    ("action", "action"),
    ("reason", "reason"),
    ("type", "type"),
    ("related", "related"),
];

fn convert_event(obj: &Value, to_v1: bool) -> Value {
    let mut out = Map::new();
    out.insert(
        "apiVersion".into(),
        json!(if to_v1 { "events.k8s.io/v1" } else { "v1" }),
    );
    out.insert("kind".into(), json!("Event"));
    if let Some(m) = obj.get("metadata") {
        out.insert("metadata".into(), m.clone());
    }
    for (core, v1) in EVENT_FIELDS {
        let (from, to) = if to_v1 { (core, v1) } else { (v1, core) };
        if let Some(v) = obj.get(*from).filter(|v| !v.is_null()) {
            let mut v = v.clone();
            // Core series use `lastObservedTime` too; both sides share the shape.
            if *from == "series" && !v.is_object() {
                v = json!({});
            }
            out.insert((*to).to_owned(), v);
        }
    }
    if !to_v1 {
        // Core readers (kubectl describe) show the component from `source`.
        if !out.contains_key("source")
            && let Some(rc) = obj.get("reportingController").and_then(Value::as_str)
        {
            let mut src = json!({"component": rc});
            if let Some(h) = obj.get("reportingInstance").and_then(Value::as_str) {
                src["host"] = json!(h);
            }
            out.insert("source".into(), src);
        }
        if !out.contains_key("count")
            && let Some(c) = obj.pointer("/series/count")
        {
            out.insert("count".into(), c.clone());
        }
        if !out.contains_key("firstTimestamp")
            && let Some(t) = obj.get("eventTime").and_then(Value::as_str)
        {
            let secs = t.split('.').next().unwrap_or(t).trim_end_matches('Z');
            let t = format!("{secs}Z");
            out.insert("firstTimestamp".into(), json!(t));
            if !out.contains_key("lastTimestamp") {
                let last = obj
                    .pointer("/series/lastObservedTime")
                    .and_then(Value::as_str)
                    .map(|l| format!("{}Z", l.split('.').next().unwrap_or(l).trim_end_matches('Z')))
                    .unwrap_or(t);
                out.insert("lastTimestamp".into(), json!(last));
            }
        }
    }
    Value::Object(out)
}

/// The object as served by `rt`.
pub fn output<'a>(rt: &ResourceType, obj: &'a Value) -> Cow<'a, Value> {
    if rt.special == Special::EventsV1 {
        return Cow::Owned(convert_event(obj, true));
    }
    let av = obj.get("apiVersion").and_then(Value::as_str);
    if rt.is_custom() && av != Some(rt.api_version().as_str()) {
        let mut o = obj.clone();
        o["apiVersion"] = json!(rt.api_version());
        return Cow::Owned(o);
    }
    Cow::Borrowed(obj)
}

/// A request body for `rt` in its storage form.
pub fn input(rt: &ResourceType, obj: Value) -> Value {
    if rt.special == Special::EventsV1 {
        let mut core = convert_event(&obj, false);
        // The core store validates apiVersion/kind against the core resource.
        core["apiVersion"] = json!("v1");
        return core;
    }
    obj
}

/// The core Events type to store an `events.k8s.io/v1` write with.
pub fn storage_view_of_events() -> &'static str {
    "/events"
}

/// `PartialObjectMetadata` of an object.
pub fn partial(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// Reads a simple `.a.b` JSON path.
pub fn get_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for part in path.trim_start_matches('.').split('.').filter(|p| !p.is_empty()) {
        cur = cur.get(part)?;
    }
    Some(cur)
}

/// Writes a simple `.a.b` JSON path, creating objects on the way.
pub fn set_path(obj: &mut Value, path: &str, v: Value) {
    let parts: Vec<&str> = path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
        .collect();
    let mut cur = obj;
    for (i, part) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Value::Object(m) = cur else { return };
        if i == parts.len() - 1 {
            m.insert((*part).to_owned(), v);
            return;
        }
        cur = m.entry((*part).to_owned()).or_insert_with(|| json!({}));
    }
}

/// The `autoscaling/v1` Scale of an object.
pub fn scale_of(rt: &ResourceType, obj: &Value) -> Value {
    let Some(paths) = &rt.scale else {
        return Value::Null;
    };
    let meta = obj.get("metadata").cloned().unwrap_or_default();
    let mut m = Map::new();
    for k in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = meta.get(k) {
            m.insert(k.to_owned(), v.clone());
        }
    }
    let spec_replicas = get_path(obj, &paths.spec_replicas)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let status_replicas = get_path(obj, &paths.status_replicas)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let selector = match &paths.label_selector {
        Some(p) => get_path(obj, p).and_then(Value::as_str).map(str::to_owned),
        None => obj.pointer("/spec/selector").map(selector_string),
    };
    let mut status = json!({"replicas": status_replicas});
    if let Some(s) = selector.filter(|s| !s.is_empty()) {
        status["selector"] = json!(s);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": Value::Object(m),
        "spec": {"replicas": spec_replicas},
        "status": status,
    })
}

/// A `LabelSelector` object (or a plain map, for ReplicationControllers) as its query-string form.
pub fn selector_string(sel: &Value) -> String {
    let mut parts = Vec::new();
    let labels = sel
        .get("matchLabels")
        .or(if sel.get("matchExpressions").is_none() {
            Some(sel)
        } else {
            None
        });
    if let Some(m) = labels.and_then(Value::as_object) {
        for (k, v) in m {
            if let Some(v) = v.as_str() {
                parts.push(format!("{k}={v}"));
            }
        }
    }
    if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
        for e in exprs {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match e["operator"].as_str() {
                Some("In") => parts.push(format!("{key} in ({})", values.join(","))),
                Some("NotIn") => parts.push(format!("{key} notin ({})", values.join(","))),
                Some("Exists") => parts.push(key.to_owned()),
                Some("DoesNotExist") => parts.push(format!("!{key}")),
                _ => {}
            }
        }
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_between_views() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "hello", "reason": "Started", "type": "Normal",
            "reportingController": "ctl", "reportingInstance": "i", "eventTime": "2025-01-01T00:00:00.000000Z", "action": "Start"});
        let core = input(
            &crate::server::resources::Registry::new()
                .get("events.k8s.io", "v1", "events")
                .expect("ev"),
            v1,
        );
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "hello");
        assert_eq!(core["source"]["component"], "ctl");
        assert_eq!(core["firstTimestamp"], "2025-01-01T00:00:00Z");
        let back = convert_event(&core, true);
        assert_eq!(back["note"], "hello");
        assert_eq!(back["regarding"]["kind"], "Pod");
    }

    #[test]
    fn selector_strings() {
        assert_eq!(
            selector_string(&json!({"matchLabels": {"app": "web"}})),
            "app=web"
        );
        assert_eq!(
            selector_string(
                &json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", "y"]}]})
            ),
            "a in (x,y)"
        );
    }
}
