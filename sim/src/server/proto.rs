//! A minimal decoder for the Kubernetes protobuf envelope, for the few built-in kinds that
//! `kubectl create <kind>` (typed clients) sends as `application/vnd.kubernetes.protobuf`:
//! ConfigMap, Secret, Namespace and ServiceAccount.  Only the fields those commands set are
//! decoded (metadata name/generateName/namespace/labels/annotations/finalizers and the kind's own
//! data); anything else is answered with 415 so the gap is loud, not silent.

use base64::Engine;
use serde_json::{Map, Value, json};

/// The magic prefix of a protobuf-encoded object.
pub const MAGIC: &[u8] = b"k8s\0";

/// A protobuf body that could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProtoError(pub String);

enum Field<'a> {
    Varint(u64),
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

    fn next(&mut self) -> Result<Option<(u64, Field<'a>)>, ProtoError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = key >> 3;
        match key & 7 {
            0 => Ok(Some((field, Field::Varint(self.varint()?)))),
            2 => {
                let len =
                    usize::try_from(self.varint()?).map_err(|_| ProtoError("length overflow".into()))?;
                if len > self.buf.len() {
                    return Err(ProtoError("truncated field".into()));
                }
                let (data, rest) = self.buf.split_at(len);
                self.buf = rest;
                Ok(Some((field, Field::Bytes(data))))
            }
            1 => {
                self.skip(8)?;
                Ok(Some((field, Field::Varint(0))))
            }
            5 => {
                self.skip(4)?;
                Ok(Some((field, Field::Varint(0))))
            }
            t => Err(ProtoError(format!("unsupported wire type {t}"))),
        }
    }

    fn skip(&mut self, n: usize) -> Result<(), ProtoError> {
        if n > self.buf.len() {
            return Err(ProtoError("truncated field".into()));
        }
        self.buf = &self.buf[n..];
        Ok(())
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

fn map_entry(b: &[u8], bytes_value: bool) -> Result<(String, Value), ProtoError> {
    let mut key = String::new();
    let mut value = Value::String(String::new());
    for (n, f) in fields(b)? {
        if let Field::Bytes(d) = f {
            match n {
                1 => key = string(d)?,
                2 if bytes_value => value = json!(base64::engine::general_purpose::STANDARD.encode(d)),
                2 => value = json!(string(d)?),
                _ => {}
            }
        }
    }
    Ok((key, value))
}

fn object_meta(b: &[u8]) -> Result<Value, ProtoError> {
    let mut m = Map::new();
    let mut labels = Map::new();
    let mut annotations = Map::new();
    let mut finalizers = Vec::new();
    for (n, f) in fields(b)? {
        let Field::Bytes(d) = f else { continue };
        match n {
            1 => {
                m.insert("name".into(), json!(string(d)?));
            }
            2 => {
                m.insert("generateName".into(), json!(string(d)?));
            }
            3 => {
                m.insert("namespace".into(), json!(string(d)?));
            }
            11 => {
                let (k, v) = map_entry(d, false)?;
                labels.insert(k, v);
            }
            12 => {
                let (k, v) = map_entry(d, false)?;
                annotations.insert(k, v);
            }
            14 => finalizers.push(json!(string(d)?)),
            _ => {}
        }
    }
    if !labels.is_empty() {
        m.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), Value::Object(annotations));
    }
    if !finalizers.is_empty() {
        m.insert("finalizers".into(), Value::Array(finalizers));
    }
    Ok(Value::Object(m))
}

/// Decodes a `k8s\0`-prefixed body into JSON for the supported kinds.
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
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    let supported = matches!(
        (api_version.as_str(), kind.as_str()),
        ("v1", "ConfigMap" | "Secret" | "Namespace" | "ServiceAccount")
    );
    if !supported {
        return Err(ProtoError(format!(
            "protobuf bodies are supported only for v1 ConfigMap, Secret, Namespace and ServiceAccount, not {api_version} {kind}; send JSON"
        )));
    }
    let mut data = Map::new();
    let mut binary = Map::new();
    let mut string_data = Map::new();
    for (n, f) in fields(raw)? {
        match (kind.as_str(), n, f) {
            (_, 1, Field::Bytes(d)) => {
                obj.insert("metadata".into(), object_meta(d)?);
            }
            ("ConfigMap", 2, Field::Bytes(d)) => {
                let (k, v) = map_entry(d, false)?;
                data.insert(k, v);
            }
            ("ConfigMap", 3, Field::Bytes(d)) => {
                let (k, v) = map_entry(d, true)?;
                binary.insert(k, v);
            }
            ("ConfigMap", 4, Field::Varint(v)) | ("Secret", 5, Field::Varint(v)) => {
                obj.insert("immutable".into(), json!(v != 0));
            }
            ("Secret", 2, Field::Bytes(d)) => {
                let (k, v) = map_entry(d, true)?;
                data.insert(k, v);
            }
            ("Secret", 3, Field::Bytes(d)) => {
                obj.insert("type".into(), json!(string(d)?));
            }
            ("Secret", 4, Field::Bytes(d)) => {
                let (k, v) = map_entry(d, false)?;
                string_data.insert(k, v);
            }
            ("Namespace", 2, Field::Bytes(d)) => {
                let fins: Vec<Value> = fields(d)?
                    .into_iter()
                    .filter_map(|(n, f)| match (n, f) {
                        (1, Field::Bytes(s)) => string(s).ok().map(Value::String),
                        _ => None,
                    })
                    .collect();
                if !fins.is_empty() {
                    obj.insert("spec".into(), json!({"finalizers": fins}));
                }
            }
            _ => {}
        }
    }
    if !data.is_empty() {
        obj.insert("data".into(), Value::Object(data));
    }
    if !binary.is_empty() {
        obj.insert("binaryData".into(), Value::Object(binary));
    }
    if !string_data.is_empty() {
        obj.insert("stringData".into(), Value::Object(string_data));
    }
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ld(field: u64, data: &[u8]) -> Vec<u8> {
        let mut v = vec![((field << 3) | 2) as u8, data.len() as u8];
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn decodes_a_configmap_envelope() {
        let meta = [ld(1, b"x"), ld(11, &[ld(1, b"app"), ld(2, b"web")].concat())].concat();
        let cm = [ld(1, &meta), ld(2, &[ld(1, b"a"), ld(2, b"1")].concat())].concat();
        let tm = [ld(1, b"v1"), ld(2, b"ConfigMap")].concat();
        let body = [MAGIC.to_vec(), ld(1, &tm), ld(2, &cm)].concat();
        let v = decode(&body).expect("decodes");
        assert_eq!(v["metadata"]["name"], "x");
        assert_eq!(v["metadata"]["labels"]["app"], "web");
        assert_eq!(v["data"]["a"], "1");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode(b"k8s\0\xff\xff\xff").is_err());
        assert!(decode(b"k8s\0\x0a\x7f").is_err());
    }
}
