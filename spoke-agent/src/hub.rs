//! The HTTP client of the hub's agent endpoints (`/agent/v1`), one method per endpoint.
//!
//! Transport only: no retries here. The loops retry with [`crate::backoff::Backoff`] and the
//! [`crate::identity::Identity`] registers again when a credential is rejected.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nave_api::wire::{
    ErrorBody, HEARTBEAT_PATH, Heartbeat, HeartbeatAnswer, REGISTER_PATH, RegisterRequest, RegisterResponse,
    STATUS_DELTA_PATH, STATUS_PATH, StatusDelta, StatusReport, WORK_PATH, WorkQuery, WorkSet,
};
use reqwest::StatusCode;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::metrics::AgentMetrics;

/// Time to open a connection to the hub.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time for a whole request that does not wait on purpose.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// How the agent trusts the hub it talks to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HubTrust {
    /// PEM file of the CA certificates that may sign the hub's certificate; the public CAs are
    /// then not trusted. `None`: the public CAs.
    pub ca_file: Option<PathBuf>,
    /// Hex SHA-256 of the hub's CA certificate (DER), as a join token shows it: the CA is taken
    /// from the chain the hub serves and must hash to this; no other CA is trusted.
    pub ca_sha256: Option<String>,
    /// Allow an `http://` hub URL: credentials and work sets (with Secrets) then cross the
    /// network in clear. For playgrounds and tests.
    pub insecure_http: bool,
}

/// Client of one hub.
#[derive(Debug, Clone)]
pub struct HubClient {
    http: reqwest::Client,
    base: String,
    metrics: Arc<AgentMetrics>,
}

impl HubClient {
    /// A client of the hub at `base_url` (e.g. `https://hub.example:8443`) over rustls with the
    /// public CAs; `http://` only with [`HubTrust::insecure_http`].
    pub fn new(base_url: &str) -> Result<Self> {
        Self::with_trust(
            base_url,
            &HubTrust {
                insecure_http: true,
                ..HubTrust::default()
            },
        )
    }

    /// A client of the hub at `base_url`, trusting what `trust` says.
    pub fn with_trust(base_url: &str, trust: &HubTrust) -> Result<Self> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(crate::USER_AGENT);
        if base_url.starts_with("http://") {
            if !trust.insecure_http {
                return Err(Error::InsecureHub(base_url.to_owned()));
            }
            tracing::warn!(
                hub = base_url,
                "talking to the hub over plain HTTP (--insecure-http)"
            );
        } else if !base_url.starts_with("https://") {
            return Err(Error::HubUrl(base_url.to_owned()));
        }
        if let Some(pin) = &trust.ca_sha256 {
            builder =
                builder.use_preconfigured_tls(crate::pinned::client_config(pin, trust.ca_file.as_deref())?);
        } else if let Some(file) = &trust.ca_file {
            let pem = std::fs::read(file).map_err(|source| Error::HubCa {
                path: file.clone(),
                message: source.to_string(),
            })?;
            let certificates =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|source| Error::HubCa {
                    path: file.clone(),
                    message: source.to_string(),
                })?;
            if certificates.is_empty() {
                return Err(Error::HubCa {
                    path: file.clone(),
                    message: "no CERTIFICATE block".to_owned(),
                });
            }
            builder = builder.tls_built_in_root_certs(false);
            for certificate in certificates {
                builder = builder.add_root_certificate(certificate);
            }
        }
        let http = builder.build().map_err(|source| Error::HttpClient { source })?;
        Ok(HubClient {
            http,
            base: base_url.trim_end_matches('/').to_owned(),
            metrics: Arc::default(),
        })
    }

    /// The same client, counting its requests in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<AgentMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The hub's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `POST /agent/v1/register` with the bootstrap token.
    pub async fn register(
        &self,
        bootstrap_token: &str,
        request: &RegisterRequest,
    ) -> Result<RegisterResponse> {
        let response = self
            .post("register", REGISTER_PATH, bootstrap_token, request)
            .await?;
        decode("register", response).await
    }

    /// `POST /agent/v1/heartbeat`; answers the round-trip time (to the response's head) and the
    /// hub's answer (none from a hub that answers `204`).
    pub async fn heartbeat(
        &self,
        credential: &str,
        heartbeat: &Heartbeat,
    ) -> Result<(Duration, HeartbeatAnswer)> {
        let started = Instant::now();
        let response = self
            .post("heartbeat", HEARTBEAT_PATH, credential, heartbeat)
            .await?;
        let rtt = started.elapsed();
        if response.status() == StatusCode::NO_CONTENT {
            return Ok((rtt, HeartbeatAnswer::default()));
        }
        // The hub took the heartbeat; an answer it cannot read only costs this round's peers.
        let answer = decode("heartbeat", response).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read the hub's heartbeat answer; probing no peers until the next");
            HeartbeatAnswer::default()
        });
        Ok((rtt, answer))
    }

    /// `POST /agent/v1/status`.
    pub async fn status(&self, credential: &str, report: &StatusReport) -> Result<()> {
        self.post("status", STATUS_PATH, credential, report)
            .await
            .map(drop)
    }

    /// `POST /agent/v1/status/delta`.
    pub async fn status_delta(&self, credential: &str, delta: &StatusDelta) -> Result<()> {
        self.post("status delta", STATUS_DELTA_PATH, credential, delta)
            .await
            .map(drop)
    }

    /// `GET /agent/v1/work`: `Some` work set once the hub's revision differs from `query.after`,
    /// `None` when the hub answered `204` after waiting.
    pub async fn work(&self, credential: &str, query: &WorkQuery) -> Result<Option<WorkSet>> {
        let wait = Duration::from_secs(query.wait.unwrap_or(0));
        let response = self
            .http
            .get(format!("{}{WORK_PATH}", self.base))
            .bearer_auth(credential)
            .query(query)
            // The hub holds the request for up to `wait`: allow that plus the usual time.
            .timeout(wait + REQUEST_TIMEOUT)
            .send()
            .await;
        self.record("work", &response);
        let response = response.map_err(|source| Error::HubRequest {
            operation: "work",
            source,
        })?;
        let response = check("work", response).await?;
        if response.status() == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        decode("work", response).await.map(Some)
    }

    async fn post(
        &self,
        operation: &'static str,
        path: &str,
        token: &str,
        body: &impl Serialize,
    ) -> Result<reqwest::Response> {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(body)
            .send()
            .await;
        self.record(operation, &response);
        let response = response.map_err(|source| Error::HubRequest { operation, source })?;
        check(operation, response).await
    }

    fn record(&self, endpoint: &'static str, response: &reqwest::Result<reqwest::Response>) {
        let status = response.as_ref().ok().map(|r| r.status().as_u16());
        self.metrics.record_hub_request(endpoint, status);
    }
}

/// The response when it is a success; the hub's `{error, message}` as an [`Error`] otherwise.
async fn check(operation: &'static str, response: reqwest::Response) -> Result<reqwest::Response> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let text = response.text().await.unwrap_or_default();
    let body: ErrorBody = serde_json::from_str(&text).unwrap_or_else(|_| ErrorBody {
        error: String::new(),
        message: text.chars().take(200).collect(),
    });
    if status == StatusCode::UNAUTHORIZED {
        return Err(Error::Unauthorized {
            operation,
            message: body.message,
        });
    }
    Err(Error::HubStatus {
        operation,
        status: status.as_u16(),
        code: body.error,
        message: body.message,
    })
}

async fn decode<T: DeserializeOwned>(operation: &'static str, response: reqwest::Response) -> Result<T> {
    response
        .json()
        .await
        .map_err(|source| Error::HubRequest { operation, source })
}
