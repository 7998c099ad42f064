//! The agent's identity at the hub: the per-cluster credential, kept in a Secret so a restart does
//! not register again, and registration with the bootstrap token when it is missing or rejected.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams};
use nave_api::AGENT_FIELD_MANAGER;
use nave_api::wire::{RegisterRequest, RegisterResponse};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::{info, instrument, warn};

use crate::Config;
use crate::backoff::Backoff;
use crate::error::{Error, Result, api_code};
use crate::hub::HubClient;

/// Name of the Secret, in the agent's namespace, that holds the credential.
pub const CREDENTIAL_SECRET: &str = "nave-agent-credential";

/// The credential and what the hub said with it.
#[derive(Clone, PartialEq)]
struct Credential {
    token: String,
    heartbeat_interval_seconds: u64,
    max_work_wait_seconds: u64,
}

#[derive(Default)]
struct State {
    current: Option<Credential>,
    /// The stored credential was rejected: do not load it again, register.
    stored_rejected: bool,
}

/// Hands out the credential, registering when there is none; shared by the loops.
pub struct Identity {
    hub: HubClient,
    secrets: Api<Secret>,
    config: std::sync::Arc<Config>,
    kubernetes_version: Option<String>,
    state: Mutex<State>,
    /// Counts the hub's answers to any loop: a loop waiting out a backoff wakes (and starts its
    /// backoff over) as soon as another loop reached the hub, so a hub that crash-looped finds
    /// its agents back within moments of its return, not after their longest backoff.
    answered: tokio::sync::watch::Sender<u64>,
    /// Counts registrations: a hub that registered this agent again may have lost what it
    /// was told before (its store replaced), so the status loop reports again.
    registrations: std::sync::atomic::AtomicU64,
    /// Woken at each registration, so the status loop reports again at once rather than at its
    /// next interval (a hub on a new store waits for every cluster's report of a StatefulSet).
    registered: tokio::sync::Notify,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("hub", &self.hub.base_url())
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// How many times this agent registered since it started.
    pub fn registrations(&self) -> u64 {
        self.registrations.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Resolves at the next registration (or at once, if one came since the last wait).
    pub async fn registered(&self) {
        self.registered.notified().await;
    }

    /// An identity with no credential yet.
    pub fn new(
        hub: HubClient,
        client: kube::Client,
        config: std::sync::Arc<Config>,
        kubernetes_version: Option<String>,
    ) -> Self {
        Identity {
            hub,
            secrets: Api::namespaced(client, &config.namespace),
            config,
            kubernetes_version,
            state: Mutex::new(State::default()),
            answered: tokio::sync::watch::channel(0).0,
            registrations: std::sync::atomic::AtomicU64::new(0),
            registered: tokio::sync::Notify::new(),
        }
    }

    /// The hub client.
    pub fn hub(&self) -> &HubClient {
        &self.hub
    }

    /// The heartbeat interval: the configured one, else the hub's.
    pub async fn heartbeat_interval(&self, shutdown: &CancellationToken) -> Result<Duration> {
        if let Some(interval) = self.config.heartbeat_interval {
            return Ok(interval);
        }
        let credential = self.credential(shutdown).await?;
        Ok(Duration::from_secs(credential.heartbeat_interval_seconds.max(1)))
    }

    /// The long-poll wait: the configured one, capped at what the hub honours.
    pub async fn work_wait(&self, shutdown: &CancellationToken) -> Result<u64> {
        let credential = self.credential(shutdown).await?;
        Ok(self
            .config
            .work_wait
            .as_secs()
            .min(credential.max_work_wait_seconds))
    }

    /// Runs `call` with the credential; when the hub rejects it, registers again and retries once.
    pub async fn call<T, F, Fut>(&self, shutdown: &CancellationToken, call: F) -> Result<T>
    where
        F: Fn(String) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let credential = self.credential(shutdown).await?;
        let answer = match call(credential.token.clone()).await {
            Err(Error::Unauthorized { operation, message }) => {
                warn!(
                    operation,
                    message, "hub rejected the credential; registering again"
                );
                self.rejected(&credential).await;
                let credential = self.credential(shutdown).await?;
                call(credential.token).await
            }
            other => other,
        };
        if answer.is_ok() {
            self.note_answer();
        }
        answer
    }

    /// Tells every loop waiting in [`Identity::back_off`] that the hub answered.
    fn note_answer(&self) {
        self.answered.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Waits out `backoff`'s next delay after a failure, or less: until another loop reaches the
    /// hub (then `backoff` starts over, with its jitter, so agents do not return in lockstep).
    /// `Err(ShuttingDown)` when the agent stops meanwhile.
    pub async fn back_off(&self, backoff: &mut Backoff, shutdown: &CancellationToken) -> Result<()> {
        let mut answered = self.answered.subscribe();
        let delay = backoff.next_delay();
        tokio::select! {
            () = shutdown.cancelled() => Err(Error::ShuttingDown),
            () = tokio::time::sleep(delay) => Ok(()),
            changed = answered.changed() => {
                if changed.is_ok() {
                    backoff.reset();
                }
                Ok(())
            }
        }
    }

    async fn rejected(&self, credential: &Credential) {
        let mut state = self.state.lock().await;
        if state.current.as_ref() == Some(credential) {
            state.current = None;
            state.stored_rejected = true;
        }
    }

    /// The current credential: in memory, else from the Secret, else from registering (retried
    /// with backoff until it works or the agent shuts down).
    async fn credential(&self, shutdown: &CancellationToken) -> Result<Credential> {
        // Held across registration on purpose: the other loops wait for it instead of
        // registering in parallel.
        let mut state = self.state.lock().await;
        if let Some(credential) = &state.current {
            return Ok(credential.clone());
        }
        if !state.stored_rejected {
            match self.load().await {
                Ok(Some(credential)) => {
                    info!(cluster = %self.config.cluster_name, "using the stored credential");
                    state.current = Some(credential.clone());
                    return Ok(credential);
                }
                Ok(None) => {}
                Err(e) => warn!(error = %e, "cannot read the stored credential; registering"),
            }
        }
        let credential = self.register_with_retries(shutdown).await?;
        state.current = Some(credential.clone());
        state.stored_rejected = false;
        Ok(credential)
    }

    async fn register_with_retries(&self, shutdown: &CancellationToken) -> Result<Credential> {
        let mut backoff = Backoff::new(self.config.retry_initial, self.config.retry_max);
        loop {
            match self.register().await {
                Ok(credential) => return Ok(credential),
                Err(e) => {
                    let delay = backoff.next_delay();
                    warn!(error = %e, hub = %self.hub.base_url(), retry_in_ms = delay.as_millis() as u64,
                        "registration failed");
                    tokio::select! {
                        () = shutdown.cancelled() => return Err(Error::ShuttingDown),
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }

    #[instrument(skip_all, fields(cluster = %self.config.cluster_name, hub = %self.hub.base_url()))]
    async fn register(&self) -> Result<Credential> {
        let path = &self.config.bootstrap_token_file;
        // Read on every attempt: the token may be rotated or mounted late.
        let token = tokio::fs::read_to_string(path)
            .await
            .map_err(|source| Error::ReadBootstrapToken {
                path: path.clone(),
                source,
            })?;
        let token = token.trim();
        if token.is_empty() {
            return Err(Error::EmptyBootstrapToken(path.clone()));
        }
        let request = RegisterRequest {
            cluster_name: self.config.cluster_name.clone(),
            agent_version: crate::AGENT_VERSION.to_owned(),
            kubernetes_version: self.kubernetes_version.clone(),
            labels: self.config.labels.clone(),
            region: self.config.region.clone(),
            zone: self.config.zone.clone(),
            coordinates: self.config.coordinates,
        };
        let response = self.hub.register(token, &request).await?;
        if response.cluster_name != self.config.cluster_name {
            return Err(Error::HubStatus {
                operation: "register",
                status: 200,
                code: String::new(),
                message: format!(
                    "the hub registered cluster {:?}, not {:?}",
                    response.cluster_name, self.config.cluster_name
                ),
            });
        }
        info!("registered with the hub");
        let credential = Credential {
            token: response.credential.clone(),
            heartbeat_interval_seconds: response.heartbeat_interval_seconds,
            max_work_wait_seconds: response.max_work_wait_seconds,
        };
        self.registrations
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.registered.notify_one();
        // A credential that cannot be stored still works until the next restart.
        if let Err(e) = self.store(&response).await {
            warn!(error = %e, secret = CREDENTIAL_SECRET, "cannot store the credential");
        }
        Ok(credential)
    }

    async fn load(&self) -> Result<Option<Credential>> {
        let secret = match self.secrets.get_opt(CREDENTIAL_SECRET).await {
            Ok(secret) => secret,
            Err(e) if api_code(&e) == Some(404) => None,
            Err(e) => return Err(Error::kube(format!("reading Secret {CREDENTIAL_SECRET}"))(e)),
        };
        let Some(data) = secret.and_then(|s| s.data) else {
            return Ok(None);
        };
        let text = |key: &str| data.get(key).and_then(|b| String::from_utf8(b.0.clone()).ok());
        // A credential of another cluster or hub (the agent was reconfigured) is not ours.
        if text("clusterName").as_deref() != Some(self.config.cluster_name.as_str())
            || text("hubUrl").as_deref() != Some(self.hub.base_url())
        {
            return Ok(None);
        }
        let Some(token) = text("credential").filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        let number = |key: &str, default: u64| text(key).and_then(|t| t.parse().ok()).unwrap_or(default);
        Ok(Some(Credential {
            token,
            heartbeat_interval_seconds: number(
                "heartbeatIntervalSeconds",
                nave_api::wire::DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
            ),
            max_work_wait_seconds: number("maxWorkWaitSeconds", nave_api::wire::MAX_WORK_WAIT_SECONDS),
        }))
    }

    async fn store(&self, response: &RegisterResponse) -> Result<()> {
        let bytes = |s: String| ByteString(s.into_bytes());
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(CREDENTIAL_SECRET.to_owned()),
                namespace: Some(self.config.namespace.clone()),
                labels: Some(crate::own_state_labels()),
                ..Default::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(BTreeMap::from([
                ("credential".to_owned(), bytes(response.credential.clone())),
                ("clusterName".to_owned(), bytes(response.cluster_name.clone())),
                ("hubUrl".to_owned(), bytes(self.hub.base_url().to_owned())),
                (
                    "heartbeatIntervalSeconds".to_owned(),
                    bytes(response.heartbeat_interval_seconds.to_string()),
                ),
                (
                    "maxWorkWaitSeconds".to_owned(),
                    bytes(response.max_work_wait_seconds.to_string()),
                ),
            ])),
            ..Default::default()
        };
        self.secrets
            .patch(
                CREDENTIAL_SECRET,
                &PatchParams::apply(AGENT_FIELD_MANAGER).force(),
                &Patch::Apply(&secret),
            )
            .await
            .map_err(Error::kube(format!("storing Secret {CREDENTIAL_SECRET}")))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Identity {
        nave_runtime::install_crypto_provider();
        // Nothing here reaches a server: the client only names where it would go.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let settings = std::sync::Arc::new(Config::new(
            "http://127.0.0.1:9".to_owned(),
            "eu-1",
            "/nonexistent",
        ));
        Identity::new(
            HubClient::new("http://127.0.0.1:9").unwrap(),
            client,
            settings,
            None,
        )
    }

    #[tokio::test]
    async fn a_loop_backing_off_retries_as_soon_as_another_loop_reaches_the_hub() {
        let identity = std::sync::Arc::new(identity());
        let shutdown = CancellationToken::new();
        // A backoff grown to half a minute, as after a hub that crash-looped for a while.
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
        for _ in 0..10 {
            backoff.next_delay();
        }
        let waiting = {
            let identity = identity.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let started = tokio::time::Instant::now();
                identity.back_off(&mut backoff, &shutdown).await.unwrap();
                (started.elapsed(), backoff.next_delay())
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        identity.note_answer();
        let (waited, next) = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the wait ends when another loop reaches the hub, not after its 15-30 s")
            .unwrap();
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
        assert!(
            next <= Duration::from_millis(100),
            "the backoff starts over: next {next:?}"
        );
    }

    #[tokio::test]
    async fn backing_off_ends_on_shutdown() {
        let identity = identity();
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let mut backoff = Backoff::new(Duration::from_secs(30), Duration::from_secs(30));
        assert!(matches!(
            identity.back_off(&mut backoff, &shutdown).await,
            Err(Error::ShuttingDown)
        ));
    }
}
