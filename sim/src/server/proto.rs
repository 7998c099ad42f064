//! A decoder for the Kubernetes protobuf envelope (`application/vnd.kubernetes.protobuf`), which
//! kubectl's typed `create <kind>` commands send.  It is generic: `proto/messages.txt` lists, for
//! every message reachable from the decodable kinds, its field numbers, JSON names and types (read
//! from the `generated.proto` descriptors of k8s.io/api by `proto/generate-messages.py`), and the
//! decoder walks the wire format with that table into the JSON the rest of the server handles.
//!
//! ```text
//!   k8s\0 ─► Unknown{typeMeta, raw} ─► message table ─► JSON object ─► the ordinary write path
//! ```
//!
//! Go's marshaller writes every non-pointer field, zero or not, where its JSON encoder would omit
//! them (`omitempty`); so zero scalars are dropped, except the fields in [`KEEP_ZERO`], whose zero
//! is a value (`replicas: 0`).  Embedded Go structs (`json:",inline"`) are fields named `*` in the
//! table and are merged into their parent.  A kind outside the table is answered with 415 naming
//! it.

use std::collections::HashMap;
use std::sync::LazyLock;

use base64::Engine;
use serde_json::{Map, Value, json};

/// The magic prefix of a protobuf-encoded object.
pub const MAGIC: &[u8] = b"k8s\0";

/// A protobuf body that could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProtoError(pub String);

/// Fields whose zero value is meaningful (Go pointers, or no `omitempty`), kept when zero.
const KEEP_ZERO: &[&str] = &[
    "replicas",
    "parallelism",
    "completions",
    "backoffLimit",
    "activeDeadlineSeconds",
    "ttlSecondsAfterFinished",
    "terminationGracePeriodSeconds",
    "revisionHistoryLimit",
    "progressDeadlineSeconds",
    "startingDeadlineSeconds",
    "successfulJobsHistoryLimit",
    "failedJobsHistoryLimit",
    "suspend",
    "automountServiceAccountToken",
    "enableServiceLinks",
    "priority",
    "value",
    "expirationSeconds",
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "privileged",
    "allowPrivilegeEscalation",
    "readOnlyRootFilesystem",
    "fsGroup",
    "immutable",
    "optional",
    "defaultMode",
    "mode",
];

/// The type of a field in the message table.
#[derive(Debug, Clone, PartialEq)]
enum Ty {
    Str,
    Bytes,
    Bool,
    Int,
    Float,
    Quantity,
    IntOrString,
    Time,
    Duration,
    Raw,
    Msg(&'static str),
}

#[derive(Debug, Clone, PartialEq)]
enum Shape {
    One,
    Repeated,
    Map,
}

#[derive(Debug, Clone)]
struct FieldDef {
    name: &'static str,
    ty: Ty,
    shape: Shape,
}

type Table = HashMap<&'static str, HashMap<u64, FieldDef>>;

static TABLE: LazyLock<Table> = LazyLock::new(|| parse_table(include_str!("proto/messages.txt")));

fn parse_table(text: &'static str) -> Table {
    let mut table = HashMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut cols = line.split_whitespace();
        let Some(message) = cols.next() else { continue };
        let mut fields = HashMap::new();
        for col in cols {
            let mut parts = col.splitn(3, ':');
            let (Some(n), Some(name), Some(ty)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            let (shape, ty) = match (ty.strip_prefix('['), ty.strip_prefix('{')) {
                (Some(t), _) => (Shape::Repeated, t),
                (_, Some(t)) => (Shape::Map, t),
                _ => (Shape::One, ty),
            };
            let ty = match ty {
                "s" => Ty::Str,
                "y" => Ty::Bytes,
                "b" => Ty::Bool,
                "i" => Ty::Int,
                "f" => Ty::Float,
                "q" => Ty::Quantity,
                "o" => Ty::IntOrString,
                "t" => Ty::Time,
                "d" => Ty::Duration,
                "r" => Ty::Raw,
                m => Ty::Msg(m),
            };
            fields.insert(n, FieldDef { name, ty, shape });
        }
        table.insert(message, fields);
    }
    table
}

enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let (&b, rest) = self
                .buf
                .split_first()
                .ok_or_else(|| ProtoError("truncated varint".into()))?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ProtoError("varint too long".into()))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if n > self.buf.len() {
            return Err(ProtoError("truncated field".into()));
        }
        let (data, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(data)
    }

    fn next(&mut self) -> Result<Option<(u64, Field<'a>)>, ProtoError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => Field::Fixed64(u64::from_le_bytes(
                self.take(8)?
                    .try_into()
                    .map_err(|_| ProtoError("truncated field".into()))?,
            )),
            2 => {
                let len =
                    usize::try_from(self.varint()?).map_err(|_| ProtoError("length overflow".into()))?;
                Field::Bytes(self.take(len)?)
            }
            5 => Field::Fixed32(u32::from_le_bytes(
                self.take(4)?
                    .try_into()
                    .map_err(|_| ProtoError("truncated field".into()))?,
            )),
            t => return Err(ProtoError(format!("unsupported wire type {t}"))),
        };
        Ok(Some((key >> 3, field)))
    }
}

fn fields(buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, ProtoError> {
    let mut r = Reader { buf };
    let mut out = Vec::new();
    while let Some(f) = r.next()? {
        out.push(f);
    }
    Ok(out)
}

fn string(b: &[u8]) -> Result<String, ProtoError> {
    String::from_utf8(b.to_vec()).map_err(|_| ProtoError("invalid UTF-8 in string field".into()))
}

fn wrong(message: &str, name: &str) -> ProtoError {
    ProtoError(format!("field {message}.{name} has an unexpected wire type"))
}

/// Go's `time.Duration` text (`1h0m0s`, `1.5s`), as `metav1.Duration` marshals to JSON.
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let (h, m) = (n / 3_600_000_000_000, n / 60_000_000_000 % 60);
    let (s, frac) = (n / 1_000_000_000 % 60, n % 1_000_000_000);
    let secs = if frac == 0 {
        format!("{s}s")
    } else {
        let f = format!("{frac:09}");
        format!("{s}.{}s", f.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => format!("{sign}{secs}"),
        (0, m) => format!("{sign}{m}m{secs}"),
        (h, m) => format!("{sign}{h}h{m}m{secs}"),
    }
}

/// One wire value of a field as JSON; `None` for the zero value Go's JSON encoder omits.
fn value(message: &str, def: &FieldDef, f: Field<'_>) -> Result<Option<Value>, ProtoError> {
    let keep_zero = def.shape != Shape::One || KEEP_ZERO.contains(&def.name);
    let v = match (&def.ty, f) {
        (Ty::Str, Field::Bytes(d)) => json!(string(d)?),
        (Ty::Bytes, Field::Bytes(d)) => json!(base64::engine::general_purpose::STANDARD.encode(d)),
        (Ty::Bool, Field::Varint(v)) => json!(v != 0),
        // Negative int32/int64 are sign-extended to 64 bits on the wire.
        #[allow(clippy::cast_possible_wrap)]
        (Ty::Int, Field::Varint(v)) => json!(v as i64),
        (Ty::Float, Field::Fixed64(v)) => json!(f64::from_bits(v)),
        (Ty::Float, Field::Fixed32(v)) => json!(f32::from_bits(v)),
        (Ty::Quantity, Field::Bytes(d)) => {
            let mut q = String::new();
            for (n, f) in fields(d)? {
                if let (1, Field::Bytes(s)) = (n, f) {
                    q = string(s)?;
                }
            }
            json!(q)
        }
        (Ty::IntOrString, Field::Bytes(d)) => {
            let (mut is_str, mut int, mut text) = (false, 0i64, String::new());
            for (n, f) in fields(d)? {
                match (n, f) {
                    (1, Field::Varint(t)) => is_str = t == 1,
                    #[allow(clippy::cast_possible_wrap)]
                    (2, Field::Varint(v)) => int = v as i64,
                    (3, Field::Bytes(s)) => text = string(s)?,
                    _ => {}
                }
            }
            if is_str { json!(text) } else { json!(int) }
        }
        (Ty::Time, Field::Bytes(d)) => {
            let (mut secs, mut nanos) = (0i64, 0i32);
            for (n, f) in fields(d)? {
                match (n, f) {
                    #[allow(clippy::cast_possible_wrap)]
                    (1, Field::Varint(v)) => secs = v as i64,
                    #[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
                    (2, Field::Varint(v)) => nanos = v as i32,
                    _ => {}
                }
            }
            // Go's zero time (year 1) means "not set".
            match jiff::Timestamp::new(secs, nanos) {
                Ok(t) if secs > 0 => json!(t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
                _ => return Ok(None),
            }
        }
        (Ty::Duration, Field::Bytes(d)) => {
            let mut nanos = 0i64;
            for (n, f) in fields(d)? {
                #[allow(clippy::cast_possible_wrap)]
                if let (1, Field::Varint(v)) = (n, f) {
                    nanos = v as i64;
                }
            }
            json!(go_duration(nanos))
        }
        (Ty::Raw, Field::Bytes(d)) => {
            let mut raw: &[u8] = &[];
            for (n, f) in fields(d)? {
                if let (1, Field::Bytes(s)) = (n, f) {
                    raw = s;
                }
            }
            serde_json::from_slice(raw).map_err(|e| ProtoError(format!("{message}.{}: {e}", def.name)))?
        }
        (Ty::Msg(m), Field::Bytes(d)) => Value::Object(decode_message(m, d)?),
        _ => return Err(wrong(message, def.name)),
    };
    let zero = match &v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    };
    Ok((!zero || keep_zero).then_some(v))
}

fn decode_message(message: &str, buf: &[u8]) -> Result<Map<String, Value>, ProtoError> {
    let table = TABLE
        .get(message)
        .ok_or_else(|| ProtoError(format!("no field table for message {message}")))?;
    let mut obj = Map::new();
    for (n, f) in fields(buf)? {
        // Unknown fields are skipped, as protobuf readers do.
        let Some(def) = table.get(&n) else { continue };
        match def.shape {
            Shape::One => match value(message, def, f)? {
                // An embedded Go struct: its fields are the enclosing object's.
                Some(Value::Object(inner)) if def.name == "*" => obj.extend(inner),
                Some(v) => {
                    obj.insert(def.name.into(), v);
                }
                None => {}
            },
            Shape::Repeated => {
                let items = obj.entry(def.name).or_insert_with(|| json!([]));
                let Some(items) = items.as_array_mut() else {
                    continue;
                };
                match (&def.ty, f) {
                    // A packed repeated scalar.
                    (Ty::Int | Ty::Bool, Field::Bytes(d)) => {
                        let mut r = Reader { buf: d };
                        while !r.buf.is_empty() {
                            let v = r.varint()?;
                            items.extend(value(message, def, Field::Varint(v))?);
                        }
                    }
                    (_, f) => items.extend(value(message, def, f)?),
                }
            }
            Shape::Map => {
                let Field::Bytes(entry) = f else {
                    return Err(wrong(message, def.name));
                };
                let (mut key, mut val) = (String::new(), None);
                for (en, ef) in fields(entry)? {
                    match (en, ef) {
                        (1, Field::Bytes(k)) => key = string(k)?,
                        (2, ef) => val = value(message, def, ef)?,
                        _ => {}
                    }
                }
                let entries = obj.entry(def.name).or_insert_with(|| json!({}));
                if let Some(m) = entries.as_object_mut() {
                    let empty = match def.ty {
                        Ty::Str | Ty::Bytes | Ty::Quantity => json!(""),
                        _ => json!({}),
                    };
                    m.insert(key, val.unwrap_or(empty));
                }
            }
        }
    }
    Ok(obj)
}

/// The message of a kind: `apps/v1` `Deployment` is `apps.v1.Deployment`, `v1` `Secret` is
/// `core.v1.Secret` (packages are named after the first label of their group).
fn message_of(api_version: &str, kind: &str) -> String {
    match api_version.split_once('/') {
        Some((group, version)) => {
            let package = group.split('.').next().unwrap_or(group);
            format!("{package}.{version}.{kind}")
        }
        None => format!("core.{api_version}.{kind}"),
    }
}

/// Decodes a `k8s\0`-prefixed body into JSON, for the kinds in the message table.
pub fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| ProtoError("missing protobuf magic".into()))?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (n, f) in fields(rest)? {
        let Field::Bytes(d) = f else { continue };
        match n {
            1 => {
                for (tn, tf) in fields(d)? {
                    if let Field::Bytes(s) = tf {
                        match tn {
                            1 => api_version = string(s)?,
                            2 => kind = string(s)?,
                            _ => {}
                        }
                    }
                }
            }
            2 => raw = d,
            _ => {}
        }
    }
    let message = message_of(&api_version, &kind);
    if !TABLE.contains_key(message.as_str()) {
        return Err(ProtoError(format!(
            "protobuf bodies of {api_version} {kind} are not supported by this emulator; send JSON"
        )));
    }
    let mut obj = decode_message(&message, raw)?;
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(field: u64, wire: u64) -> Vec<u8> {
        let (mut k, mut out) = ((field << 3) | wire, Vec::new());
        while k >= 0x80 {
            out.push((k as u8) | 0x80);
            k >>= 7;
        }
        out.push(k as u8);
        out
    }

    fn ld(field: u64, data: &[u8]) -> Vec<u8> {
        let mut v = key(field, 2);
        v.push(data.len() as u8);
        v.extend_from_slice(data);
        v
    }

    fn varint(field: u64, v: u8) -> Vec<u8> {
        vec![(field << 3) as u8, v]
    }

    fn envelope(api_version: &[u8], kind: &[u8], object: &[u8]) -> Vec<u8> {
        let tm = [ld(1, api_version), ld(2, kind)].concat();
        [MAGIC.to_vec(), ld(1, &tm), ld(2, object)].concat()
    }

    #[test]
    fn every_message_a_field_refers_to_is_in_the_table() {
        for (message, fields) in TABLE.iter() {
            for def in fields.values() {
                if let Ty::Msg(m) = def.ty {
                    assert!(
                        TABLE.contains_key(m),
                        "{message}.{} refers to missing {m}",
                        def.name
                    );
                }
            }
        }
        for kind in [
            "apps.v1.Deployment",
            "batch.v1.CronJob",
            "rbac.v1.ClusterRole",
            "core.v1.Service",
        ] {
            assert!(TABLE.contains_key(kind), "{kind}");
        }
    }

    #[test]
    fn decodes_a_configmap_envelope() {
        let meta = [ld(1, b"x"), ld(11, &[ld(1, b"app"), ld(2, b"web")].concat())].concat();
        let cm = [ld(1, &meta), ld(2, &[ld(1, b"a"), ld(2, b"1")].concat())].concat();
        let v = decode(&envelope(b"v1", b"ConfigMap", &cm)).expect("decodes");
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "x", "labels": {"app": "web"}}, "data": {"a": "1"}})
        );
    }

    #[test]
    fn decodes_a_deployment_with_zero_replicas_and_drops_other_zero_values() {
        let container = [ld(1, b"nginx"), ld(2, b"nginx"), ld(8, &[])].concat();
        let pod_spec = ld(2, &container);
        let template = [
            ld(1, &ld(11, &[ld(1, b"app"), ld(2, b"web")].concat())),
            ld(2, &pod_spec),
        ]
        .concat();
        let selector = ld(1, &[ld(1, b"app"), ld(2, b"web")].concat());
        // replicas 0 (a pointer), minReadySeconds 0 and paused false (plain values).
        let spec = [
            varint(1, 0),
            ld(2, &selector),
            ld(3, &template),
            varint(5, 0),
            varint(7, 0),
        ]
        .concat();
        let dep = [ld(1, &[ld(1, b"web"), ld(3, b"")].concat()), ld(2, &spec)].concat();
        let v = decode(&envelope(b"apps/v1", b"Deployment", &dep)).expect("decodes");
        assert_eq!(v["metadata"], json!({"name": "web"}));
        assert_eq!(v["spec"]["replicas"], 0);
        assert!(v["spec"].get("minReadySeconds").is_none() && v["spec"].get("paused").is_none());
        assert_eq!(v["spec"]["selector"]["matchLabels"]["app"], "web");
        assert_eq!(
            v["spec"]["template"]["spec"]["containers"][0],
            json!({"name": "nginx", "image": "nginx", "resources": {}})
        );
    }

    #[test]
    fn decodes_int_or_string_quantities_and_negative_integers() {
        // ServicePort: port 80, targetPort "http"; a pod's terminationGracePeriodSeconds -1.
        let target = [varint(1, 1), ld(3, b"http")].concat();
        let port = [varint(3, 80), ld(4, &target)].concat();
        let svc = [ld(1, &ld(1, b"s")), ld(2, &ld(1, &port))].concat();
        let v = decode(&envelope(b"v1", b"Service", &svc)).expect("decodes");
        assert_eq!(v["spec"]["ports"][0], json!({"port": 80, "targetPort": "http"}));

        let neg = [4 << 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        let quota = [ld(1, b"cpu"), ld(2, &ld(1, b"2"))].concat();
        let pod = [
            ld(1, &ld(1, b"p")),
            ld(2, &[neg.to_vec(), ld(32, &quota)].concat()),
        ]
        .concat();
        let v = decode(&envelope(b"v1", b"Pod", &pod)).expect("decodes");
        assert_eq!(v["spec"]["terminationGracePeriodSeconds"], -1);
        assert_eq!(v["spec"]["overhead"]["cpu"], "2");
    }

    #[test]
    fn an_embedded_struct_is_merged_into_its_parent() {
        // Volume{name: "data", VolumeSource{emptyDir: {}}}.
        let volume = [ld(1, b"data"), ld(2, &ld(2, &[]))].concat();
        let pod = [ld(1, &ld(1, b"p")), ld(2, &ld(1, &volume))].concat();
        let v = decode(&envelope(b"v1", b"Pod", &pod)).expect("decodes");
        assert_eq!(v["spec"]["volumes"][0], json!({"name": "data", "emptyDir": {}}));
    }

    #[test]
    fn a_kind_outside_the_table_is_named_in_the_error() {
        let err = decode(&envelope(b"example.com/v1", b"Widget", &[])).unwrap_err();
        assert!(err.0.contains("example.com/v1 Widget"), "{err}");
    }

    #[test]
    fn go_durations_read_as_go_prints_them() {
        assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
        assert_eq!(go_duration(90_500_000_000), "1m30.5s");
        assert_eq!(go_duration(-2_000_000_000), "-2s");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode(b"k8s\0\xff\xff\xff").is_err());
        assert!(decode(b"k8s\0\x0a\x7f").is_err());
    }
}
