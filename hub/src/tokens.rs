//! Bearer tokens: how the agent endpoints and the REST API read them (the `Authorization`
//! header, compared by digest without timing leaks), and the REST API's tokens with their scopes.
//!
//! The tokens file (`--api-tokens-file`, `NAVE_API_TOKENS_FILE`) holds one token per line:
//!
//! ```text
//! # scope  token
//! read     3f1c0e...   # dashboards
//! admin    9b77d2...
//! ```
//!
//! A line is a scope (`read` or `admin`) and the token, separated by white space; `#` starts a
//! comment; blank lines are ignored. `admin` includes `read`.
//!
//! Tokens can also come from a Secret in the management cluster (`--api-tokens-secret
//! namespace/name`): each key names a token, each value is `<scope>:<token>`, e.g.
//! `kubectl create secret generic nave-api-tokens --from-literal=grafana=read:3f1c0e...`.
//! Both sources are read when the hub starts and again when they change (the file's
//! modification time, the Secret's content), as is the bootstrap token's file; see [`Live`].

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use axum::http::{HeaderMap, header};
use k8s_openapi::api::core::v1::Secret;
use sha2::{Digest, Sha256};

/// A value every request reads and a background task replaces when its source changes (a
/// rotated token file or Secret). Cheap to clone; readers never wait on the source.
#[derive(Debug)]
pub struct Live<T>(Arc<std::sync::RwLock<T>>);

impl<T> Clone for Live<T> {
    fn clone(&self) -> Self {
        Live(self.0.clone())
    }
}

impl<T: Clone> Live<T> {
    /// A live value starting at `value`.
    pub fn new(value: T) -> Self {
        Live(Arc::new(std::sync::RwLock::new(value)))
    }

    /// The current value.
    pub fn get(&self) -> T {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the value for every later reader.
    pub fn set(&self, value: T) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = value;
    }
}

impl From<ApiTokens> for Live<ApiTokens> {
    fn from(tokens: ApiTokens) -> Self {
        Live::new(tokens)
    }
}

/// What a token may do. Ordered: a higher scope includes the lower ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Every `GET` endpoint and the simulation (which writes nothing).
    Read,
    /// `read`, and the endpoints that change state.
    Admin,
}

impl Scope {
    /// The scope's name in the tokens file.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }

    /// Whether a token of this scope may call an endpoint that requires `required`.
    pub fn allows(self, required: Scope) -> bool {
        self >= required
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Scope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read" => Ok(Scope::Read),
            "admin" => Ok(Scope::Admin),
            _ => Err("unknown scope (expected read or admin)".to_owned()),
        }
    }
}

/// Why a tokens file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// The file cannot be read.
    #[error("reading the API tokens file {path}")]
    Read {
        /// The file.
        path: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// A line is not `<scope> <token>`.
    #[error("API tokens file {path}, line {line}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it (never the token itself).
        message: String,
    },
    /// `--api-tokens-secret` is not `namespace/name`.
    #[error("--api-tokens-secret {0:?} is not namespace/name")]
    SecretName(String),
    /// A value of the tokens Secret is not `<scope>:<token>`.
    #[error("API tokens Secret {secret}, key {key:?}: {message}")]
    SecretValue {
        /// `namespace/name` of the Secret.
        secret: String,
        /// The key (the token's name).
        key: String,
        /// What is wrong with the value (never the token itself).
        message: String,
    },
}

/// The tokens the REST API accepts. Only their SHA-256 digests are kept.
#[derive(Clone, Default)]
pub struct ApiTokens {
    tokens: Arc<[([u8; 32], Scope)]>,
}

impl fmt::Debug for ApiTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiTokens")
            .field("count", &self.tokens.len())
            .finish()
    }
}

impl ApiTokens {
    /// Tokens and their scopes.
    pub fn new<'a>(tokens: impl IntoIterator<Item = (Scope, &'a str)>) -> Self {
        let tokens: Vec<_> = tokens
            .into_iter()
            .map(|(scope, token)| (digest(token), scope))
            .collect();
        ApiTokens {
            tokens: tokens.into(),
        }
    }

    /// Reads a tokens file (format in the module documentation).
    pub fn from_file(path: &Path) -> Result<Self, TokensError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokensError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|(line, message)| TokensError::Parse {
            path: path.display().to_string(),
            line,
            message,
        })
    }

    /// Parses the text of a tokens file; an error names the line (from 1) and what is wrong.
    pub fn parse(text: &str) -> Result<Self, (usize, String)> {
        let mut tokens = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.split_once('#').map_or(line, |(before, _)| before);
            let mut fields = line.split_whitespace();
            let Some(scope) = fields.next() else {
                continue;
            };
            let scope: Scope = scope.parse().map_err(|e| (index + 1, e))?;
            let token = fields
                .next()
                .ok_or_else(|| (index + 1, format!("a {scope} scope without a token")))?;
            if fields.next().is_some() {
                return Err((
                    index + 1,
                    "expected `<scope> <token>`, found more fields".to_owned(),
                ));
            }
            tokens.push((scope, token));
        }
        Ok(Self::new(tokens))
    }

    /// The tokens of a Secret (`secret` is its `namespace/name`, for messages): each key names
    /// a token, each value is `<scope>:<token>`.
    pub fn from_secret(secret: &str, object: &Secret) -> Result<Self, TokensError> {
        let mut tokens = Vec::new();
        for (key, value) in object.data.iter().flatten() {
            let invalid = |message: &str| TokensError::SecretValue {
                secret: secret.to_owned(),
                key: key.clone(),
                message: message.to_owned(),
            };
            let text = std::str::from_utf8(&value.0).map_err(|_| invalid("the value is not UTF-8"))?;
            let (scope, token) = text
                .trim()
                .split_once(':')
                .ok_or_else(|| invalid("expected `<scope>:<token>`"))?;
            let scope: Scope = scope.parse().map_err(|e: String| invalid(&e))?;
            if token.is_empty() {
                return Err(invalid("the token is empty"));
            }
            tokens.push((scope, token.to_owned()));
        }
        Ok(Self::new(
            tokens.iter().map(|(scope, token)| (*scope, token.as_str())),
        ))
    }

    /// Both sets of tokens.
    pub fn with(self, other: ApiTokens) -> ApiTokens {
        ApiTokens {
            tokens: self.tokens.iter().chain(other.tokens.iter()).copied().collect(),
        }
    }

    /// A digest of the whole set (its tokens' digests and scopes, in order), to tell whether a
    /// set read again differs; reveals nothing of the tokens.
    pub fn fingerprint(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        for (digest, scope) in self.tokens.iter() {
            hasher.update(digest);
            hasher.update(scope.as_str().as_bytes());
        }
        hasher.finalize().into()
    }

    /// How many tokens are configured.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether no token is configured (the API then refuses every request).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The scope of a presented token, `None` when it is not configured. Every configured token
    /// is compared, each in constant time, so the answer's timing reveals neither which token
    /// matched nor how much of one did.
    pub fn scope_of(&self, presented: &str) -> Option<Scope> {
        let presented = digest(presented);
        let mut best: Option<Scope> = None;
        for (expected, scope) in self.tokens.iter() {
            if digests_equal(&presented, expected) {
                best = best.max(Some(*scope));
            }
        }
        best
    }
}

/// The token of an `Authorization: Bearer <token>` header; `None` when there is none or it is
/// empty.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// SHA-256 of a secret: what is kept and compared instead of the secret itself.
pub(crate) fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Whether two digests are equal, in time independent of where they differ.
pub(crate) fn digests_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_file_lines_give_scopes_and_admin_includes_read() {
        let tokens = ApiTokens::parse("# dashboards\nread  r-token  # grafana\n\n   \nadmin\ta-token\n")
            .expect("a valid file");
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens.scope_of("r-token"), Some(Scope::Read));
        assert_eq!(tokens.scope_of("a-token"), Some(Scope::Admin));
        assert_eq!(tokens.scope_of("r-toke"), None);
        assert_eq!(tokens.scope_of(""), None);
        assert!(Scope::Admin.allows(Scope::Read));
        assert!(!Scope::Read.allows(Scope::Admin));
    }

    #[test]
    fn secret_values_give_scopes_and_bad_ones_are_named_by_key() {
        let secret = |pairs: &[(&str, &str)]| Secret {
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), k8s_openapi::ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        };
        let tokens = ApiTokens::from_secret("ns/t", &secret(&[("grafana", "read:g"), ("ops", "admin:o\n")]))
            .expect("a valid Secret");
        assert_eq!(
            (tokens.scope_of("g"), tokens.scope_of("o")),
            (Some(Scope::Read), Some(Scope::Admin))
        );
        let both = tokens.with(ApiTokens::parse("read f").unwrap());
        assert_eq!((both.len(), both.scope_of("f")), (3, Some(Scope::Read)));
        for bad in ["no-colon", "write:x", "read:"] {
            let error = ApiTokens::from_secret("ns/t", &secret(&[("ci", bad)])).unwrap_err();
            let text = error.to_string();
            assert!(text.contains("\"ci\"") && !text.contains(":x"), "{text}");
        }
    }

    #[test]
    fn the_same_token_under_two_scopes_gets_the_higher() {
        let tokens = ApiTokens::parse("read t\nadmin t\n").unwrap();
        assert_eq!(tokens.scope_of("t"), Some(Scope::Admin));
    }

    #[test]
    fn bad_tokens_file_lines_are_named_without_the_token() {
        let (line, message) = ApiTokens::parse("read ok\nwrite secret-value\n").unwrap_err();
        assert_eq!(line, 2);
        assert!(message.contains("unknown scope"), "{message}");
        assert!(!message.contains("secret-value"), "{message}");
        let (line, _) = ApiTokens::parse("admin\n").unwrap_err();
        assert_eq!(line, 1);
        let (line, message) = ApiTokens::parse("\n\nread a b\n").unwrap_err();
        assert_eq!((line, message.contains("more fields")), (3, true), "{message}");
    }
}
