//! Growing the fleet: when replicas fit in no cluster, say so where a provisioner can act.
//!
//! ```text
//!  controller::mcd ── Unplaced::set (after each plan) ─► unplaced replicas by workload
//!                                                              │
//!  run (leader, every second) ◄────────────────────────────────┘
//!    ├─► nave_unplaced_replicas, nave_unplaced_demand{resource}
//!    └─► POST --provisioner-webhook  FleetDemand (when it changes; again every
//!        --provisioner-resend while demand stays; once more at zero when it clears)
//! ```
//!
//! A receiver (a Cluster API controller, a cloud autoscaler, a script) adds a cluster with room
//! and installs the agent; the cluster joins and placement gives it the replicas. Workloads with
//! policy `everywhere` are left out: a new cluster brings them more replicas to run, not room.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use nave_api::wire::WorkloadRef;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::metrics::HubMetrics;

/// Most workloads a [`FleetDemand`] lists (the largest demands first); the totals count all.
pub const MAX_LISTED: usize = 500;

/// How long the receiver has to answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// What a workload's unplaced replicas ask of a new cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadDemand {
    /// Namespace of the MultiClusterDeployment.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Replicas that fit in no cluster.
    pub replicas: u32,
    /// What one replica requests.
    pub per_replica: Amounts,
    /// The clusters it may use (`spec.placement.clusters`); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// The labels a cluster must have (`spec.placement.clusterSelector`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// When its replicas first fit nowhere, this time.
    pub since: jiff::Timestamp,
}

/// CPU and memory.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Amounts {
    /// Millicores.
    pub cpu_millis: u64,
    /// Bytes.
    pub memory_bytes: u64,
}

/// The body of the webhook: every replica that fits nowhere, in total and by workload.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FleetDemand {
    /// `nave.dev/v1alpha1`.
    pub api_version: String,
    /// `FleetDemand`.
    pub kind: String,
    /// When the hub sent it.
    pub sent_at: jiff::Timestamp,
    /// Replicas that fit nowhere, over every workload.
    pub replicas: u64,
    /// What they request together.
    pub total: Amounts,
    /// The largest single replica: a new cluster needs a node that takes it.
    pub largest_replica: Amounts,
    /// The workloads, largest CPU demand first, at most [`MAX_LISTED`].
    pub workloads: Vec<WorkloadDemand>,
    /// Workloads left out of `workloads` (counted in the totals).
    pub more_workloads: usize,
}

impl FleetDemand {
    /// Whether anything fits nowhere.
    pub fn is_empty(&self) -> bool {
        self.replicas == 0
    }

    /// The demand without its send time, to tell whether it changed.
    fn key(&self) -> (u64, Amounts, &[WorkloadDemand]) {
        (self.replicas, self.total, &self.workloads)
    }
}

/// The unplaced replicas of every workload, as the latest plan of each left them.
#[derive(Debug, Default)]
pub struct Unplaced {
    by_workload: Mutex<BTreeMap<WorkloadRef, WorkloadDemand>>,
}

impl Unplaced {
    /// Records `workload`'s unplaced replicas after a plan (`None` or zero replicas: all placed).
    /// Keeps the time they were first unplaced while some stay so.
    pub fn set(&self, workload: &WorkloadRef, demand: Option<WorkloadDemand>) {
        let mut by_workload = self.by_workload.lock().unwrap_or_else(|e| e.into_inner());
        match demand.filter(|d| d.replicas > 0) {
            Some(mut demand) => {
                if let Some(before) = by_workload.get(workload) {
                    demand.since = before.since;
                }
                by_workload.insert(workload.clone(), demand);
            }
            None => {
                by_workload.remove(workload);
            }
        }
    }

    /// Forgets everything (a new term recomputes it as it plans).
    pub fn clear(&self) {
        self.by_workload.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The demand now.
    pub fn demand(&self, now: jiff::Timestamp) -> FleetDemand {
        let by_workload = self.by_workload.lock().unwrap_or_else(|e| e.into_inner());
        let mut total = Amounts::default();
        let mut largest = Amounts::default();
        let mut replicas = 0u64;
        for d in by_workload.values() {
            let n = u64::from(d.replicas);
            replicas += n;
            total.cpu_millis = total
                .cpu_millis
                .saturating_add(d.per_replica.cpu_millis.saturating_mul(n));
            total.memory_bytes = total
                .memory_bytes
                .saturating_add(d.per_replica.memory_bytes.saturating_mul(n));
            largest.cpu_millis = largest.cpu_millis.max(d.per_replica.cpu_millis);
            largest.memory_bytes = largest.memory_bytes.max(d.per_replica.memory_bytes);
        }
        let mut workloads: Vec<WorkloadDemand> = by_workload.values().cloned().collect();
        workloads.sort_by_key(|d| {
            (
                std::cmp::Reverse(d.per_replica.cpu_millis.saturating_mul(u64::from(d.replicas))),
                d.namespace.clone(),
                d.name.clone(),
            )
        });
        let more_workloads = workloads.len().saturating_sub(MAX_LISTED);
        workloads.truncate(MAX_LISTED);
        FleetDemand {
            api_version: nave_api::API_VERSION.to_owned(),
            kind: "FleetDemand".to_owned(),
            sent_at: now,
            replicas,
            total,
            largest_replica: largest,
            workloads,
            more_workloads,
        }
    }
}

/// Where and how to send the demand (`--provisioner-webhook` and its companions).
#[derive(Clone)]
pub struct Webhook {
    /// The receiver's URL.
    pub url: String,
    /// Sent as `Authorization: Bearer`, when set.
    pub token: Option<String>,
    /// How often an unchanged, non-zero demand is sent again.
    pub resend: Duration,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("resend", &self.resend)
            .finish()
    }
}

/// When to send next, from what was sent and when.
#[derive(Debug, Default)]
struct Sending {
    /// The demand the receiver last took in this term (`None` before the first: the first is
    /// sent whatever it holds).
    last: Option<FleetDemand>,
    /// When it was taken.
    at: Option<tokio::time::Instant>,
    /// Failed attempts in a row, and when to try again.
    failures: u32,
    retry_at: Option<tokio::time::Instant>,
}

impl Sending {
    /// Whether `demand` should be sent at `now`.
    fn due(&self, demand: &FleetDemand, now: tokio::time::Instant, resend: Duration) -> bool {
        if self.retry_at.is_some_and(|at| now < at) {
            return false;
        }
        let changed = match &self.last {
            Some(last) => last.key() != demand.key(),
            // A new term: what the previous leader said may no longer hold.
            None => true,
        };
        let stale = !demand.is_empty() && self.at.is_none_or(|at| now.duration_since(at) >= resend);
        changed || stale
    }

    fn sent(&mut self, demand: FleetDemand, now: tokio::time::Instant) {
        *self = Sending {
            last: Some(demand),
            at: Some(now),
            ..Sending::default()
        };
    }

    fn failed(&mut self, now: tokio::time::Instant, resend: Duration) {
        self.failures = self.failures.saturating_add(1);
        let backoff = Duration::from_secs(1 << self.failures.min(6)).min(resend);
        self.retry_at = Some(now + backoff);
    }
}

/// Keeps the unplaced-demand metrics and, with a webhook, tells it, until `shutdown` (the end of
/// this replica's term). Starts from nothing and waits for the term's first pass over every
/// workload (`first_pass_done`), so a half-counted demand is never sent; then sends what it
/// finds, even nothing, so a receiver that heard a demand from the previous leader hears that it
/// cleared meanwhile. Clears what it knew when it stops, so a replica that no longer leads
/// reports no demand.
pub async fn run(
    unplaced: Arc<Unplaced>,
    webhook: Option<Webhook>,
    metrics: Arc<HubMetrics>,
    first_pass_done: impl Fn() -> bool,
    shutdown: CancellationToken,
) {
    unplaced.clear();
    let client = reqwest::Client::builder().timeout(TIMEOUT).build();
    let client = match client {
        Ok(client) => Some(client),
        Err(error) => {
            warn!(error = %error, "cannot build the provisioner webhook's client; not sending");
            None
        }
    };
    let mut sending = Sending::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        if !first_pass_done() {
            continue;
        }
        let demand = unplaced.demand(jiff::Timestamp::now());
        metrics.set_unplaced(
            demand.replicas,
            demand.total.cpu_millis,
            demand.total.memory_bytes,
        );
        let (Some(webhook), Some(client)) = (&webhook, &client) else {
            continue;
        };
        let now = tokio::time::Instant::now();
        if !sending.due(&demand, now, webhook.resend) {
            continue;
        }
        let sent = tokio::select! {
            // A replica that no longer leads says nothing more.
            () = shutdown.cancelled() => break,
            sent = send(client, webhook, &demand) => sent,
        };
        match sent {
            Ok(code) => {
                metrics.record_provisioner_request(&code.as_u16().to_string());
                info!(
                    replicas = demand.replicas,
                    cpu_millis = demand.total.cpu_millis,
                    memory_bytes = demand.total.memory_bytes,
                    workloads = demand.workloads.len() + demand.more_workloads,
                    "told the provisioner webhook what fits nowhere"
                );
                sending.sent(demand, now);
            }
            Err((code, error)) => {
                metrics.record_provisioner_request(&code);
                warn!(url = %webhook.url, error = %error, "the provisioner webhook did not take the demand; retrying");
                sending.failed(now, webhook.resend);
            }
        }
    }
    unplaced.clear();
    metrics.set_unplaced(0, 0, 0);
}

/// POSTs `demand`; the status of a 2xx answer, or the status (`error` without an answer) and why.
async fn send(
    client: &reqwest::Client,
    webhook: &Webhook,
    demand: &FleetDemand,
) -> Result<reqwest::StatusCode, (String, String)> {
    let mut request = client.post(&webhook.url).json(demand);
    if let Some(token) = &webhook.token {
        request = request.bearer_auth(token);
    }
    let response = request
        .send()
        .await
        .map_err(|e| ("error".to_owned(), e.to_string()))?;
    let code = response.status();
    if code.is_success() {
        Ok(code)
    } else {
        Err((code.as_u16().to_string(), format!("answered {code}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand_of(name: &str, replicas: u32, cpu_millis: u64) -> WorkloadDemand {
        WorkloadDemand {
            namespace: "shop".to_owned(),
            name: name.to_owned(),
            replicas,
            per_replica: Amounts {
                cpu_millis,
                memory_bytes: 1 << 20,
            },
            clusters: Vec::new(),
            cluster_selector: None,
            since: jiff::Timestamp::UNIX_EPOCH,
        }
    }

    #[test]
    fn totals_add_every_workload_and_keep_when_each_started() {
        let unplaced = Unplaced::default();
        let web = WorkloadRef::new("shop", "web");
        let api = WorkloadRef::new("shop", "api");
        unplaced.set(&web, Some(demand_of("web", 3, 500)));
        unplaced.set(&api, Some(demand_of("api", 1, 2000)));
        let mut later = demand_of("web", 5, 500);
        later.since = jiff::Timestamp::now();
        unplaced.set(&web, Some(later));
        let demand = unplaced.demand(jiff::Timestamp::now());
        assert_eq!(demand.replicas, 6);
        assert_eq!(demand.total.cpu_millis, 5 * 500 + 2000);
        assert_eq!(demand.total.memory_bytes, 6 << 20);
        assert_eq!(demand.largest_replica.cpu_millis, 2000);
        assert_eq!(
            demand
                .workloads
                .iter()
                .map(|w| w.name.as_str())
                .collect::<Vec<_>>(),
            ["web", "api"],
            "largest CPU demand first"
        );
        assert_eq!(
            demand.workloads[0].since,
            jiff::Timestamp::UNIX_EPOCH,
            "a workload still short keeps when it started"
        );
        unplaced.set(&web, Some(demand_of("web", 0, 500)));
        unplaced.set(&api, None);
        assert!(unplaced.demand(jiff::Timestamp::now()).is_empty());
    }

    #[test]
    fn a_demand_is_sent_when_it_changes_again_while_it_lasts_and_once_when_it_clears() {
        let resend = Duration::from_secs(60);
        let start = tokio::time::Instant::now();
        let unplaced = Unplaced::default();
        let web = WorkloadRef::new("shop", "web");
        let mut sending = Sending::default();
        let none = unplaced.demand(jiff::Timestamp::now());
        assert!(
            sending.due(&none, start, resend),
            "a term starts by saying what it finds, even nothing: the previous leader's demand may have cleared"
        );
        sending.sent(none.clone(), start);
        assert!(
            !sending.due(&none, start + resend * 2, resend),
            "nothing is not repeated"
        );

        unplaced.set(&web, Some(demand_of("web", 3, 500)));
        let some = unplaced.demand(jiff::Timestamp::now());
        assert!(sending.due(&some, start, resend), "a new demand");
        sending.failed(start, resend);
        assert!(
            !sending.due(&some, start + Duration::from_millis(500), resend),
            "backing off"
        );
        assert!(
            sending.due(&some, start + Duration::from_secs(2), resend),
            "retried"
        );
        sending.sent(some.clone(), start);
        let again = unplaced.demand(jiff::Timestamp::now());
        assert!(
            !sending.due(&again, start + Duration::from_secs(5), resend),
            "unchanged"
        );
        assert!(
            sending.due(&again, start + resend, resend),
            "sent again while it lasts"
        );

        unplaced.set(&web, None);
        let cleared = unplaced.demand(jiff::Timestamp::now());
        assert!(
            sending.due(&cleared, start + Duration::from_secs(5), resend),
            "the clearing"
        );
        sending.sent(cleared.clone(), start + Duration::from_secs(5));
        assert!(
            !sending.due(&cleared, start + resend * 3, resend),
            "zero is said once"
        );
    }

    #[test]
    fn the_list_is_bounded_and_the_totals_count_everything() {
        let unplaced = Unplaced::default();
        for i in 0..(MAX_LISTED + 20) {
            let name = format!("w{i}");
            unplaced.set(&WorkloadRef::new("shop", &name), Some(demand_of(&name, 1, 100)));
        }
        let demand = unplaced.demand(jiff::Timestamp::now());
        assert_eq!(demand.workloads.len(), MAX_LISTED);
        assert_eq!(demand.more_workloads, 20);
        assert_eq!(demand.replicas, (MAX_LISTED + 20) as u64);
    }
}
