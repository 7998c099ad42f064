//! Leader election through a `coordination.k8s.io/v1` Lease in the management cluster, so that
//! several hub replicas can run and exactly one places workloads.
//!
//! The usual semantics (those of client-go's `leaderelection`, which Karmada and OCM use):
//!
//! - A candidate takes the Lease when it has no holder, or when its record has not changed for
//!   `lease_duration`. The time is the candidate's own, counted from when *it* saw the record
//!   change, so the replicas' clocks need not agree.
//! - The leader renews the Lease every `retry_period`. A leader that could not renew it for
//!   `renew_deadline` (shorter than the lease duration) stops leading before anyone else may
//!   take over.
//! - A leader shutting down releases the Lease, so another takes over at once rather than after
//!   a lease duration.
//! - Every write of the Lease is a compare-and-swap on its `resourceVersion`: two candidates never
//!   both take it.
//!
//! ```text
//!  candidate ──retry_period──► try take ──taken──► claim the term in the store ──► renew once
//!      ▲                         │ held by another                                    │
//!      │                         └──────────────────────────┐                         ▼
//!      └──── lost: the Lease taken, not renewed (or the ◄── keep: renew the Lease and read the
//!            store not reached) within renew_deadline,      store's term every retry_period
//!            or the store at a later term                   (shutdown: release the Lease)
//! ```
//!
//! A replica that loses the lead stops everything it ran as leader before it may lead again
//! (see the hub's `run_until`), and goes on serving agents and the REST API meanwhile.
//!
//! `leaseTransitions` counts the changes of holder; the count after this replica took the Lease
//! is its **term**, which the hub claims in the store ([`crate::store::Store::claim_term`]). The
//! store refuses placement and work writes from any older term, so a leader that lost the Lease
//! without knowing it yet (paused, partitioned) cannot overwrite its successor's writes: the
//! election decides who should write, the store's term decides who can.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::metrics::HubMetrics;
use crate::store::{Claim, Store, StoreError};

/// Why a replica holding the Lease could not claim its term in the store.
#[derive(Debug, thiserror::Error)]
enum ClaimError {
    /// The store failed.
    #[error("claiming the term in the store")]
    Store(#[from] StoreError),
    /// Reading or writing the Lease failed.
    #[error("raising the Lease's term")]
    Lease(#[from] kube::Error),
    /// Another replica took the Lease meanwhile.
    #[error("the Lease was taken by another replica meanwhile")]
    LostLease,
    /// The store's term kept moving past the Lease's.
    #[error("the store's term kept moving past the Lease's")]
    Raced,
}

/// How the election runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Namespace of the Lease (the hub's own).
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity, unique among the replicas (the pod's name).
    pub identity: String,
    /// How long a Lease whose record does not change stays its holder's.
    pub lease_duration: Duration,
    /// How long a leader keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// How often candidates try and the leader renews.
    pub retry_period: Duration,
}

impl Config {
    /// Defaults: the Lease `nave-hub`, 8 s lease, 5 s renew deadline, 1 s retry period. A
    /// leader killed without releasing is replaced within a lease duration and a retry period.
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Config {
        Config {
            namespace: namespace.into(),
            name: "nave-hub".to_owned(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(8),
            renew_deadline: Duration::from_secs(5),
            retry_period: Duration::from_secs(1),
        }
    }
}

/// How a term ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// The hub is shutting down; the Lease was released.
    Shutdown,
    /// The lead was lost; this replica is a candidate again.
    Lost,
}

/// The outcome of one attempt on the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Attempt {
    /// This replica holds it, in this term.
    Holding(u64),
    /// Another replica holds it.
    HeldBy(String),
}

/// Takes and keeps the Lease (see the module documentation).
pub struct Elector {
    api: Api<Lease>,
    config: Config,
    /// The Lease as last seen (its `resourceVersion` and holder) and when it was seen to change.
    observed: Option<(String, Option<String>, Instant)>,
    /// Counts the changes of holder it sees.
    metrics: Option<std::sync::Arc<HubMetrics>>,
    /// When the Lease was last renewed (and the store last answered) in the current term.
    renewed: Instant,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Elector {
    /// An elector for `config` on the management cluster `client`.
    pub fn new(client: kube::Client, config: Config) -> Elector {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
            metrics: None,
            renewed: Instant::now(),
        }
    }

    /// The same elector, counting every change of holder it sees in `metrics`.
    pub fn counting(mut self, metrics: std::sync::Arc<HubMetrics>) -> Elector {
        self.metrics = Some(metrics);
        self
    }

    /// Notes the Lease's holder as seen now; counts a change of holder.
    fn saw(&mut self, version: String, holder: Option<String>) {
        let changed_holder = self
            .observed
            .as_ref()
            .is_some_and(|(_, before, _)| *before != holder && holder.is_some());
        if changed_holder && let Some(metrics) = &self.metrics {
            metrics.record_leader_transition();
        }
        self.observed = Some((version, holder, Instant::now()));
    }

    /// Waits until this replica holds the Lease and has claimed its term in `store`, and
    /// answers the term; `None` once `shutdown` is cancelled. The claim comes with a renewal
    /// right after it, so the term starts with a full renew deadline ahead, however long the
    /// claim waited for the store.
    pub async fn acquire(&mut self, store: &dyn Store, shutdown: &CancellationToken) -> Option<u64> {
        let retry = self.config.retry_period;
        loop {
            match self.attempt().await {
                Ok(Attempt::Holding(term)) => match self.claim(store, term).await {
                    Ok(term) => match self.attempt().await {
                        Ok(Attempt::Holding(now)) if now == term => {
                            self.renewed = Instant::now();
                            info!(term, identity = %self.config.identity, lease = %self.config.name, "leading");
                            return Some(term);
                        }
                        other => warn!(?other, term, "lost the Lease right after claiming its term"),
                    },
                    Err(error) => {
                        warn!(error = %error, "holding the Lease but cannot claim its term in the store; letting it go");
                        if let Err(error) = self.release().await {
                            warn!(error = %error, "releasing the Lease failed");
                        }
                    }
                },
                Ok(Attempt::HeldBy(_)) => {}
                Err(error) => {
                    warn!(error = %error, lease = %self.config.name, "trying to take the Lease failed")
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return None,
                () = tokio::time::sleep(retry) => {}
            }
        }
    }

    /// Keeps leading in `term`: renews the Lease and checks the store every retry period, until
    /// `shutdown` (the Lease is then released) or until the lead is lost: the Lease was taken,
    /// it or the store could not be reached for the renew deadline (the Lease is then let go,
    /// for a replica that reaches both), or the store holds a later term.
    pub async fn keep(&mut self, store: &dyn Store, term: u64, shutdown: &CancellationToken) -> Kept {
        let fenced = store.fenced();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => {
                    match self.release().await {
                        Ok(()) => info!(lease = %self.config.name, "released the Lease"),
                        Err(error) => warn!(error = %error, "releasing the Lease failed; another replica takes over when it expires"),
                    }
                    return Kept::Shutdown;
                }
                () = fenced.cancelled() => {
                    warn!(term, "the store refused a write of this term: another replica claimed a later one");
                    return Kept::Lost;
                }
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
            let started = Instant::now();
            let left = self.config.renew_deadline.saturating_sub(self.renewed.elapsed());
            let renewal = tokio::time::timeout(left, async {
                let lease = self.attempt().await;
                let stored = store.leadership().await;
                (lease, stored)
            })
            .await;
            match renewal {
                Ok((Ok(Attempt::Holding(now)), Ok(stored))) if now == term && stored.term == term => {
                    self.renewed = started;
                }
                Ok((Ok(Attempt::HeldBy(holder)), _)) => {
                    warn!(holder = %holder, term, "another replica took the Lease");
                    return Kept::Lost;
                }
                Ok((Ok(Attempt::Holding(now)), _)) if now != term => {
                    warn!(
                        term,
                        now, "the Lease was taken and given back meanwhile; this term is over"
                    );
                    return Kept::Lost;
                }
                Ok((_, Ok(stored))) if stored.term != term => {
                    warn!(term, store_term = stored.term, holder = %stored.holder, "the store is at a later term");
                    return Kept::Lost;
                }
                Ok((Err(error), _)) => warn!(error = %error, "renewing the Lease failed"),
                Ok((_, Err(error))) => warn!(error = %error, "the store does not answer"),
                _ => {}
            }
            if self.renewed.elapsed() >= self.config.renew_deadline {
                warn!(deadline = ?self.config.renew_deadline, term, "could not renew the Lease and reach the store in time; letting the Lease go");
                if let Err(error) = self.release().await {
                    warn!(error = %error, "releasing the Lease failed");
                }
                return Kept::Lost;
            }
        }
    }

    /// Claims `term` in the store; when the store is at that term or past it (the Lease was
    /// deleted and made again, so its count started over), raises the Lease's count above the
    /// store's first, which succeeds only while this replica still holds the Lease.
    async fn claim(&mut self, store: &dyn Store, mut term: u64) -> Result<u64, ClaimError> {
        for _ in 0..3 {
            match store.claim_term(Some(term), &self.config.identity).await? {
                Claim::Claimed(term) => return Ok(term),
                Claim::Stale { current } => {
                    info!(
                        lease_term = term,
                        store_term = current,
                        "the store is past the Lease's count; raising it"
                    );
                    term = self.raise_term(current + 1).await?;
                }
            }
        }
        Err(ClaimError::Raced)
    }

    /// One try to take or renew the Lease.
    async fn attempt(&mut self) -> Result<Attempt, kube::Error> {
        let now = MicroTime(jiff::Timestamp::now());
        // Whole seconds in the Lease, rounded up: the others wait at least the configured time.
        let seconds = self.config.lease_duration.as_millis().div_ceil(1000).max(1);
        let seconds = i32::try_from(seconds).unwrap_or(i32::MAX);
        let Some(current) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(1),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Holding(1)),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::HeldBy(String::new())),
                Err(error) => Err(error),
            };
        };
        let version = current.metadata.resource_version.clone().unwrap_or_default();
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let seen_change = match &self.observed {
            Some((seen, _, _)) => *seen != version,
            None => true,
        };
        if seen_change {
            self.saw(version, holder.clone());
        }
        let mine = holder.as_deref() == Some(self.config.identity.as_str());
        let expired = self.observed.as_ref().is_some_and(|(_, _, at)| {
            let duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(self.config.lease_duration, Duration::from_secs);
            at.elapsed() >= duration
        });
        if let Some(other) = holder.as_ref().filter(|_| !mine && !expired) {
            return Ok(Attempt::HeldBy(other.clone()));
        }
        let transitions = spec.lease_transitions.unwrap_or(0).max(0);
        let (transitions, acquire_time) = if mine {
            (transitions, spec.acquire_time.clone().or(Some(now.clone())))
        } else {
            (transitions.saturating_add(1), Some(now.clone()))
        };
        let mut lease = current;
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(seconds),
            acquire_time,
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..spec
        });
        // The resourceVersion read stays in the object: the write fails if anyone wrote since.
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                let identity = self.config.identity.clone();
                self.saw(
                    written.metadata.resource_version.unwrap_or_default(),
                    Some(identity),
                );
                Ok(Attempt::Holding(u64::try_from(transitions).unwrap_or(0)))
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Ok(Attempt::HeldBy(holder.unwrap_or_default()))
            }
            Err(error) => Err(error),
        }
    }

    /// Gives the Lease up, if this replica still holds it: no holder, renewed now, so the
    /// others take it on their next try.
    async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        spec.lease_duration_seconds = Some(1);
        self.api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }

    /// Raises the Lease's `leaseTransitions` to at least `term`, while this replica holds it.
    async fn raise_term(&mut self, term: u64) -> Result<u64, ClaimError> {
        let mut lease = self.api.get(&self.config.name).await?;
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Err(ClaimError::LostLease);
        }
        let wanted = i32::try_from(term).unwrap_or(i32::MAX);
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).max(wanted));
        let written = self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await?;
        let transitions = written.spec.and_then(|s| s.lease_transitions).unwrap_or(wanted);
        Ok(u64::try_from(transitions).unwrap_or(0))
    }
}

/// Claims the store's next term without an election (one hub on its store), so that a hub
/// started before on the same store by mistake is fenced off; `None` once `shutdown` is
/// cancelled.
pub async fn claim_alone(store: &dyn Store, identity: &str, shutdown: &CancellationToken) -> Option<u64> {
    let mut backoff = Duration::from_millis(200);
    loop {
        match store.claim_term(None, identity).await {
            Ok(Claim::Claimed(term)) => {
                info!(term, "leading alone (no leader election)");
                return Some(term);
            }
            // Another hub claimed between the read and the write: try the next one.
            Ok(Claim::Stale { .. }) => continue,
            Err(error) => warn!(error = %error, "claiming a term in the store failed; retrying"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Keeps leading alone until `shutdown`, or until another hub claims a later term of the store.
pub async fn keep_alone(store: &dyn Store, term: u64, shutdown: &CancellationToken) -> Kept {
    let fenced = store.fenced();
    tokio::select! {
        () = shutdown.cancelled() => Kept::Shutdown,
        () = fenced.cancelled() => {
            warn!(term, "another hub claimed a later term of this store");
            Kept::Lost
        }
    }
}
