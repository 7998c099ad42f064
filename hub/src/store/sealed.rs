//! Secret payloads sealed at rest in the store: the `data` and `stringData` of every Secret in a
//! work set are encrypted with AES-256-GCM (ring) under a key the hub reads from a file (the
//! chart mounts it from a Secret of the management cluster), so a copy of the store (a backup, a
//! leaked volume, a database dump) holds no Secret in clear.
//!
//! ```text
//!   Secret {data, stringData}  ──seal──►  Secret {data: {"nave.dev/sealed": "v1.<key id>.<nonce+ciphertext, base64>"}}
//! ```
//!
//! The nonce is derived from the plaintext (HMAC-SHA-256 under a key of its own), so sealing the
//! same Secret twice gives the same text and an unchanged work set keeps its revision; distinct
//! plaintexts get distinct nonces. The object's name, namespace and labels stay readable: the
//! hub and operators need them, and they are no secret. The key id (the first 8 hex digits of a
//! hash of the key) makes a wrong key an explicit error rather than garbage.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hkdf::{HKDF_SHA256, KeyType, Salt};
use ring::hmac;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The key of sealed Secret data.
pub const SEALED_FIELD: &str = "nave.dev/sealed";

const VERSION: &str = "v1";
const CONTEXT_ENCRYPTION: &[u8] = b"nave store secrets: AES-256-GCM";
const CONTEXT_NONCE: &[u8] = b"nave store secrets: nonce";

/// Why sealed data cannot be opened, or a key cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    /// The key is not 32 bytes, base64 or raw.
    #[error("the store key must be 32 bytes (or their base64); got {0} bytes")]
    KeyLength(usize),
    /// Sealed under another key than the hub's.
    #[error("Secret data sealed under key {sealed}, the hub has key {have}")]
    WrongKey {
        /// The key id in the sealed text.
        sealed: String,
        /// The hub's key id.
        have: String,
    },
    /// Sealed data and no key to open it.
    #[error("the store holds sealed Secret data and the hub has no store key (--store-key-file)")]
    NoKey,
    /// The sealed text is damaged or was altered.
    #[error("sealed Secret data does not open: damaged or altered")]
    Damaged,
}

/// Seals and opens Secret payloads with one key.
pub struct Sealer {
    key: LessSafeKey,
    nonce_key: hmac::Key,
    id: String,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("key_id", &self.id)
            .finish_non_exhaustive()
    }
}

struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

impl Sealer {
    /// A sealer with `material`: 32 bytes, or their base64 (as a file or Secret holds them;
    /// surrounding white space is ignored).
    pub fn new(material: &[u8]) -> Result<Sealer, SealError> {
        let text = String::from_utf8_lossy(material);
        let trimmed = text.trim();
        let raw = match STANDARD.decode(trimmed) {
            Ok(decoded) if decoded.len() == 32 => decoded,
            _ if material.len() == 32 => material.to_vec(),
            Ok(decoded) => return Err(SealError::KeyLength(decoded.len())),
            Err(_) => return Err(SealError::KeyLength(material.len())),
        };
        let prk = Salt::new(HKDF_SHA256, b"nave").extract(&raw);
        let expand = |context: &[u8]| -> [u8; 32] {
            let mut out = [0u8; 32];
            prk.expand(&[context], Len(32))
                .and_then(|okm| okm.fill(&mut out))
                .expect("32 bytes is a valid HKDF-SHA-256 output length");
            out
        };
        let key = LessSafeKey::new(
            UnboundKey::new(&AES_256_GCM, &expand(CONTEXT_ENCRYPTION)).expect("a 32-byte AES-256 key"),
        );
        let nonce_key = hmac::Key::new(hmac::HMAC_SHA256, &expand(CONTEXT_NONCE));
        let id = Sha256::digest(raw.as_slice())
            .iter()
            .take(4)
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(Sealer { key, nonce_key, id })
    }

    /// The key's id, as sealed texts carry it.
    pub fn key_id(&self) -> &str {
        &self.id
    }

    fn seal_text(&self, plaintext: &[u8]) -> String {
        let tag = hmac::sign(&self.nonce_key, plaintext);
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&tag.as_ref()[..NONCE_LEN]);
        let mut sealed = plaintext.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(self.id.as_bytes()),
                &mut sealed,
            )
            .expect("AES-GCM seals any length a work set holds");
        let mut out = nonce.to_vec();
        out.extend(sealed);
        format!("{VERSION}.{}.{}", self.id, STANDARD.encode(out))
    }

    fn open_text(&self, text: &str) -> Result<Vec<u8>, SealError> {
        let mut parts = text.splitn(3, '.');
        let (Some(VERSION), Some(id), Some(body)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(SealError::Damaged);
        };
        if id != self.id {
            return Err(SealError::WrongKey {
                sealed: id.to_owned(),
                have: self.id.clone(),
            });
        }
        let bytes = STANDARD.decode(body).map_err(|_| SealError::Damaged)?;
        if bytes.len() < NONCE_LEN {
            return Err(SealError::Damaged);
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Damaged)?;
        let mut sealed = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(self.id.as_bytes()), &mut sealed)
            .map_err(|_| SealError::Damaged)?;
        Ok(plain.to_vec())
    }
}

fn is_secret(object: &Value) -> bool {
    object.get("kind").and_then(Value::as_str) == Some("Secret")
        && object.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// `objects` with every Secret's `data` and `stringData` sealed; with no sealer, as they are.
pub fn seal(sealer: Option<&Sealer>, objects: &[Value]) -> Vec<Value> {
    let Some(sealer) = sealer else {
        return objects.to_vec();
    };
    objects
        .iter()
        .map(|object| {
            let Some(fields) = object.as_object().filter(|_| is_secret(object)) else {
                return object.clone();
            };
            let mut payload = Map::new();
            for key in ["data", "stringData"] {
                if let Some(value) = fields.get(key) {
                    payload.insert(key.to_owned(), value.clone());
                }
            }
            if payload.is_empty() {
                return object.clone();
            }
            let plaintext = serde_json::to_vec(&payload).expect("JSON values always serialize");
            let mut sealed = fields.clone();
            sealed.remove("stringData");
            sealed.insert(
                "data".to_owned(),
                Value::Object(Map::from_iter([(
                    SEALED_FIELD.to_owned(),
                    Value::String(sealer.seal_text(&plaintext)),
                )])),
            );
            Value::Object(sealed)
        })
        .collect()
}

/// `objects` with every sealed Secret opened again. Objects that were stored in clear (before a
/// key was configured) come back as they are.
pub fn open(sealer: Option<&Sealer>, objects: Vec<Value>) -> Result<Vec<Value>, SealError> {
    objects
        .into_iter()
        .map(|mut object| {
            let sealed = object
                .pointer(&format!("/data/{}", SEALED_FIELD.replace('/', "~1")))
                .and_then(Value::as_str)
                .filter(|_| is_secret(&object))
                .map(str::to_owned);
            let Some(sealed) = sealed else {
                return Ok(object);
            };
            let sealer = sealer.ok_or(SealError::NoKey)?;
            let plaintext = sealer.open_text(&sealed)?;
            let payload: Map<String, Value> =
                serde_json::from_slice(&plaintext).map_err(|_| SealError::Damaged)?;
            let fields = object.as_object_mut().ok_or(SealError::Damaged)?;
            fields.remove("data");
            fields.extend(payload);
            Ok(object)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn secret() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "shop", "labels": {"app": "web"}},
            "type": "Opaque",
            "data": {"password": "aHVudGVyMg=="},
            "stringData": {"user": "admin"}
        })
    }

    fn key(byte: u8) -> Sealer {
        Sealer::new(STANDARD.encode([byte; 32]).as_bytes()).unwrap()
    }

    #[test]
    fn secrets_are_sealed_other_objects_and_metadata_are_not_and_they_open_again() {
        let sealer = key(7);
        let config_map =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}});
        let objects = vec![secret(), config_map.clone()];
        let sealed = seal(Some(&sealer), &objects);
        let text = sealed[0].to_string();
        for clear in ["aHVudGVyMg==", "hunter2", "admin", "stringData"] {
            assert!(!text.contains(clear), "{clear} in {text}");
        }
        assert_eq!(
            sealed[0]["metadata"],
            secret()["metadata"],
            "metadata stays readable"
        );
        assert_eq!(sealed[1], config_map, "only Secrets are sealed");
        assert_eq!(open(Some(&sealer), sealed.clone()).unwrap(), objects);
        assert_eq!(
            seal(Some(&sealer), &objects),
            sealed,
            "the same Secret seals to the same text"
        );
    }

    #[test]
    fn a_wrong_key_a_missing_key_and_an_altered_text_are_errors() {
        let sealed = seal(Some(&key(1)), &[secret()]);
        assert!(matches!(
            open(Some(&key(2)), sealed.clone()),
            Err(SealError::WrongKey { .. })
        ));
        assert_eq!(open(None, sealed.clone()), Err(SealError::NoKey));
        let mut altered = sealed.clone();
        let text = altered[0]["data"][SEALED_FIELD].as_str().unwrap().to_owned();
        let flipped = format!("{}A{}", &text[..text.len() - 6], &text[text.len() - 5..]);
        altered[0]["data"][SEALED_FIELD] = json!(flipped);
        assert_eq!(open(Some(&key(1)), altered), Err(SealError::Damaged));
        // Stored in clear before a key was set: read as it is.
        assert_eq!(open(Some(&key(1)), vec![secret()]).unwrap(), vec![secret()]);
    }

    #[test]
    fn keys_are_32_bytes_raw_or_base64() {
        assert!(Sealer::new(&[9u8; 32]).is_ok());
        assert!(Sealer::new(format!("  {}\n", STANDARD.encode([9u8; 32])).as_bytes()).is_ok());
        assert_eq!(Sealer::new(b"short").unwrap_err(), SealError::KeyLength(5));
        assert_eq!(key(3).key_id().len(), 8);
    }
}
