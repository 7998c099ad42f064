//! The hub's REST API: one request per call, its error answers turned into exit codes.

use serde_json::Value;

use crate::{CliError, ExitKind, Global, USER_AGENT};

/// A client of the hub's REST API with one token.
#[derive(Debug)]
pub struct Hub {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Hub {
    /// From `--hub-url`, `--token-file` and `--ca-file` (or their environment variables).
    pub fn new(global: &Global) -> Result<Hub, CliError> {
        let url = global.hub_url.as_deref().ok_or_else(|| {
            CliError::invalid(
                "this command asks the hub: pass --hub-url (or set NAVE_HUB_URL), e.g. \
                 https://nave-hub.example.com",
            )
        })?;
        let url = reqwest::Url::parse(url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| {
                CliError::invalid(format!("--hub-url {url:?} is not an http(s) URL with a host"))
            })?;
        let token_file = global.token_file.as_ref().ok_or_else(|| {
            CliError::invalid(
                "this command asks the hub: pass --token-file (or set NAVE_TOKEN_FILE) with a REST API token",
            )
        })?;
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|e| CliError::invalid(format!("reading {}: {e}", path.display())))
        };
        let token = String::from_utf8_lossy(&read(token_file)?).trim().to_owned();
        if token.is_empty() {
            return Err(CliError::invalid(format!(
                "{} holds no token",
                token_file.display()
            )));
        }
        let mut http = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .timeout(global.request_timeout);
        if let Some(ca) = &global.ca_file {
            let certificates = reqwest::Certificate::from_pem_bundle(&read(ca)?)
                .map_err(|e| CliError::invalid(format!("{}: not a PEM bundle: {e}", ca.display())))?;
            if certificates.is_empty() {
                return Err(CliError::invalid(format!(
                    "{} holds no certificate",
                    ca.display()
                )));
            }
            http = http.tls_built_in_root_certs(false);
            for certificate in certificates {
                http = http.add_root_certificate(certificate);
            }
        }
        let http = http
            .build()
            .map_err(|e| CliError::failed(format!("an HTTP client: {e}")))?;
        Ok(Hub {
            http,
            base: format!("{}/api/v1", url.as_str().trim_end_matches('/')),
            token,
        })
    }

    /// `GET path` (below `/api/v1`).
    pub async fn get(&self, path: &str) -> Result<Value, CliError> {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CliError> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| CliError::failed(format!("cannot reach the hub at {url}: {}", chain(&e))))?;
        let status = response.status().as_u16();
        let text = response
            .text()
            .await
            .map_err(|e| CliError::failed(format!("reading the hub's answer from {url}: {}", chain(&e))))?;
        let value: Option<Value> = serde_json::from_str(&text).ok();
        if (200..300).contains(&status) {
            return value.ok_or_else(|| CliError::failed(format!("{url} answered {status} with no JSON")));
        }
        let message = value
            .as_ref()
            .and_then(|v| v["message"].as_str())
            .map_or_else(|| text.chars().take(300).collect(), str::to_owned);
        let kind = match status {
            404 => ExitKind::NotFound,
            401 | 403 => ExitKind::NotAllowed,
            400 | 422 => ExitKind::Invalid,
            _ => ExitKind::Failed,
        };
        Err(CliError {
            kind,
            message: format!("the hub answered {status}: {message}"),
        })
    }
}

/// An error with its causes, `a: b: c`: reqwest's own message leaves out why a connection failed.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
