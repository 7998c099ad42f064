//! Cluster health: which workload clusters stopped sending heartbeats, and which of them are
//! failed over (their replicas placed elsewhere).
//!
//! ```text
//!  every check interval:
//!   cluster records (last heartbeat) ─► Tracker::observe (pure, clock passed in)
//!        ├─► WorkloadCluster Ready=False/HeartbeatMissed (or back to True) + Events
//!        ├─► FleetHealth (shared view: failed-over clusters, partition flag, ready-since)
//!        └─► ReconcileTrigger when anything changed ─► plans evacuate (crate::placement::failover)
//! ```
//!
//! This module is the pure part (the rules, [`Tracker`], the shared [`FleetHealth`]);
//! [`crate::controller::heartbeats`] is the loop that applies it.
//!
//! # The rules
//! - **Stale**: a cluster whose last heartbeat is at least the grace period old
//!   (`--heartbeat-grace`, default 40 s). The time the hub itself was away does not count: from
//!   the newest heartbeat in the store (when the previous hub last heard from the fleet) to this
//!   hub's start, no agent could have reached it. So a hub down for ten minutes gives every agent
//!   a full grace period to reach it again, while a hub restarted within seconds (a crash loop, a
//!   rolling update) still fails over a cluster that went silent before it, on time: silence is
//!   counted from the heartbeat times in the store, not from the hub's start. Clusters that never
//!   sent a heartbeat are not judged (they hold no replicas).
//! - **Partition guard**: when more than `--failover-max-stale-percent` (default 50) of the
//!   clusters that have sent heartbeats are stale at the same time, the hub assumes that *it* is
//!   the one cut off, not the fleet, and fails over no cluster. It logs a warning, records an
//!   Event `FailoverSuppressed` on each stale WorkloadCluster, says so in their `Ready`
//!   condition, and sets [`HealthSnapshot::partitioned`]. Clusters failed over before stay so.
//!   With two clusters and the default, one silent cluster is failed over, both are not.
//!   `100` disables the guard, `0` disables failover.
//! - **Rate limit**: at most `--failover-max-per-minute` (default 2) clusters start failing over
//!   in any 60 s window; the longest-silent go first, the others wait their turn. `0` disables
//!   failover.
//! - **Return**: the next heartbeat makes a cluster Ready again (the agent endpoint writes it at
//!   once; this loop repairs a late `False` it may have raced with). It is no longer failed over:
//!   new placements may use it. Replicas moved away come back only under
//!   `spec.placement.failback: Immediate`, once it has been Ready for `--failback-settle`.
//!
//! A failed-over cluster is not touched: its work set simply loses the moved replicas, and its
//! agent prunes them when it reaches the hub again. An agent never deletes anything because it
//! lost the hub.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

/// The window of the failover rate limit.
pub const RATE_WINDOW: Duration = Duration::from_secs(60);

/// Event reasons on WorkloadClusters.
pub mod event_reasons {
    /// No heartbeat within the grace period; the cluster is `Ready=False`.
    pub const HEARTBEAT_MISSED: &str = nave_api::conditions::reasons::HEARTBEAT_MISSED;
    /// Heartbeats arrive again; the cluster is `Ready=True`.
    pub const HEARTBEAT_RESUMED: &str = "HeartbeatResumed";
    /// The cluster's replicas are being placed elsewhere.
    pub const FAILING_OVER: &str = "FailingOver";
    /// Too many clusters went silent at once; the hub fails none over.
    pub const FAILOVER_SUPPRESSED: &str = "FailoverSuppressed";
}

/// How the hub decides that clusters are lost and how fast it fails them over.
#[derive(Clone, Debug, PartialEq)]
pub struct Rules {
    /// A cluster without a heartbeat for this long is stale (`Ready=False`).
    pub grace: Duration,
    /// Above this share of stale clusters (percent of those that have sent heartbeats), the hub
    /// assumes it is partitioned itself and fails over nothing.
    pub max_stale_percent: u8,
    /// Most clusters that start failing over within [`RATE_WINDOW`].
    pub max_per_minute: u32,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            grace: Duration::from_secs(40),
            max_stale_percent: 50,
            max_per_minute: 2,
        }
    }
}

/// Whether `stale` of `total` clusters is more than the rules allow to be lost at once.
pub fn partitioned(stale: usize, total: usize, max_stale_percent: u8) -> bool {
    total > 0 && stale.saturating_mul(100) > total.saturating_mul(usize::from(max_stale_percent))
}

/// What the hub knows of one cluster's heartbeats.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// Cluster name.
    pub name: String,
    /// When its last heartbeat arrived; `None` before the first.
    pub last_heartbeat: Option<jiff::Timestamp>,
}

/// A cluster that is failed over.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FailedOver {
    /// When its failover started.
    pub since: jiff::Timestamp,
    /// Its last heartbeat, if any.
    pub last_heartbeat: Option<jiff::Timestamp>,
}

/// Why a stale cluster is not (yet) failed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// Too many clusters are stale at once: the hub assumes it is partitioned.
    Partition,
    /// The rate limit's budget for this minute is spent.
    RateLimit,
}

/// The state of one stale cluster, as its `Ready` condition says it.
#[derive(Clone, Debug, PartialEq)]
pub enum StaleState {
    /// Its replicas are being placed elsewhere.
    FailedOver,
    /// Failover is held back.
    Held(Held),
}

/// What changed in one [`Tracker::observe`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Changes {
    /// Stale clusters whose state is new or different (first stale, failed over, held back),
    /// with their last heartbeat.
    pub stale: Vec<(String, Option<jiff::Timestamp>, StaleState)>,
    /// Clusters that were stale and sent a heartbeat.
    pub returned: Vec<String>,
    /// Clusters that came back and have now been Ready for the settle period.
    pub settled: Vec<String>,
    /// `Some(true)` when the partition guard engaged, `Some(false)` when it released.
    pub partition: Option<bool>,
}

impl Changes {
    /// Whether the controllers should look at the fleet again.
    pub fn any(&self) -> bool {
        !self.stale.is_empty()
            || !self.returned.is_empty()
            || !self.settled.is_empty()
            || self.partition.is_some()
    }
}

/// The health rules over time: feed it observations, it says what changed. Pure: the clock is
/// passed in.
#[derive(Clone, Debug)]
pub struct Tracker {
    rules: Rules,
    settle: Duration,
    started: jiff::Timestamp,
    /// When the hub last heard from the fleet before this start (the newest stored heartbeat):
    /// the start of its own absence, which is not counted against the clusters.
    away_since: Option<jiff::Timestamp>,
    stale: BTreeMap<String, StaleState>,
    failed_over: BTreeMap<String, FailedOver>,
    /// Start times of recent failovers, oldest first, for the rate limit.
    recent: VecDeque<jiff::Timestamp>,
    ready_since: BTreeMap<String, jiff::Timestamp>,
    /// Clusters that came back and are not settled yet.
    settling: BTreeSet<String>,
    partitioned: bool,
}

/// Time from `since` to `now`; zero when `since` is later (clocks a little apart).
fn age(now: jiff::Timestamp, since: jiff::Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO)
}

impl Tracker {
    /// A tracker for a hub started at `started`, whose store's newest heartbeat (of any cluster)
    /// was received at `away_since`.
    pub fn new(
        rules: Rules,
        settle: Duration,
        started: jiff::Timestamp,
        away_since: Option<jiff::Timestamp>,
    ) -> Self {
        Tracker {
            rules,
            settle,
            started,
            away_since,
            stale: BTreeMap::new(),
            failed_over: BTreeMap::new(),
            recent: VecDeque::new(),
            ready_since: BTreeMap::new(),
            settling: BTreeSet::new(),
            partitioned: false,
        }
    }

    /// Applies the rules to the fleet as seen at `now`.
    pub fn observe(&mut self, clusters: &[Observation], now: jiff::Timestamp) -> Changes {
        let mut changes = Changes::default();
        let judged: Vec<&Observation> = clusters.iter().filter(|c| c.last_heartbeat.is_some()).collect();
        let known: BTreeSet<&str> = judged.iter().map(|c| c.name.as_str()).collect();
        // Clusters gone from the store are forgotten.
        self.stale.retain(|name, _| known.contains(name.as_str()));
        self.failed_over.retain(|name, _| known.contains(name.as_str()));
        self.ready_since.retain(|name, _| known.contains(name.as_str()));
        self.settling.retain(|name| known.contains(name.as_str()));

        let mut stale = Vec::new();
        for cluster in &judged {
            if self.silence(cluster.last_heartbeat, now) >= self.rules.grace {
                stale.push(*cluster);
                self.ready_since.remove(&cluster.name);
                self.settling.remove(&cluster.name);
            } else {
                if self.stale.remove(&cluster.name).is_some() {
                    self.failed_over.remove(&cluster.name);
                    self.settling.insert(cluster.name.clone());
                    changes.returned.push(cluster.name.clone());
                }
                let since = *self.ready_since.entry(cluster.name.clone()).or_insert(now);
                if self.settling.contains(&cluster.name) && age(now, since) >= self.settle {
                    self.settling.remove(&cluster.name);
                    changes.settled.push(cluster.name.clone());
                }
            }
        }

        let partitioned = partitioned(stale.len(), judged.len(), self.rules.max_stale_percent);
        if partitioned != self.partitioned {
            self.partitioned = partitioned;
            changes.partition = Some(partitioned);
        }
        while self.recent.front().is_some_and(|at| age(now, *at) >= RATE_WINDOW) {
            self.recent.pop_front();
        }
        let mut budget = usize::try_from(self.rules.max_per_minute)
            .unwrap_or(usize::MAX)
            .saturating_sub(self.recent.len());
        // The longest-silent first; names break ties.
        stale.sort_by(|a, b| a.last_heartbeat.cmp(&b.last_heartbeat).then(a.name.cmp(&b.name)));
        for cluster in stale {
            let state = if self.failed_over.contains_key(&cluster.name) {
                StaleState::FailedOver
            } else if partitioned {
                StaleState::Held(Held::Partition)
            } else if budget == 0 {
                StaleState::Held(Held::RateLimit)
            } else {
                budget -= 1;
                self.recent.push_back(now);
                self.failed_over.insert(
                    cluster.name.clone(),
                    FailedOver {
                        since: now,
                        last_heartbeat: cluster.last_heartbeat,
                    },
                );
                StaleState::FailedOver
            };
            if self.stale.get(&cluster.name) != Some(&state) {
                self.stale.insert(cluster.name.clone(), state.clone());
                changes
                    .stale
                    .push((cluster.name.clone(), cluster.last_heartbeat, state));
            }
        }
        changes
    }

    /// How long a cluster last heard at `last` has been silent at `now`, less the time the hub
    /// itself was away (between `away_since` and its start).
    fn silence(&self, last: Option<jiff::Timestamp>, now: jiff::Timestamp) -> Duration {
        let last = last.unwrap_or(self.started);
        let silent = age(now, last);
        let away = self.away_since.map_or(Duration::ZERO, |since| {
            let from = since.max(last);
            let to = self.started.min(now);
            age(to, from)
        });
        silent.saturating_sub(away)
    }

    /// What the controllers and the API see.
    pub fn snapshot(&self) -> HealthSnapshot {
        HealthSnapshot {
            failed_over: self.failed_over.clone(),
            stale: self.stale.keys().cloned().collect(),
            ready_since: self.ready_since.clone(),
            partitioned: self.partitioned,
            settle: self.settle,
        }
    }
}

/// The fleet's health as the last check saw it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthSnapshot {
    /// Failed-over clusters: their replicas are placed elsewhere.
    pub failed_over: BTreeMap<String, FailedOver>,
    /// Clusters without a heartbeat within the grace period.
    pub stale: BTreeSet<String>,
    /// Since when each Ready cluster has been Ready (as far as this hub has seen).
    pub ready_since: BTreeMap<String, jiff::Timestamp>,
    /// True while the partition guard holds failover back.
    pub partitioned: bool,
    /// How long a returned cluster must be Ready before `failback: Immediate` moves replicas back.
    #[serde(skip)]
    pub settle: Duration,
}

impl HealthSnapshot {
    /// Whether `cluster` has been Ready for the settle period at `now`.
    pub fn settled(&self, cluster: &str, now: jiff::Timestamp) -> bool {
        self.ready_since
            .get(cluster)
            .is_some_and(|since| age(now, *since) >= self.settle)
    }
}

/// The fleet's health, shared between the health loop (writer) and the controllers (readers).
#[derive(Debug, Default)]
pub struct FleetHealth {
    current: Mutex<Arc<HealthSnapshot>>,
}

impl FleetHealth {
    /// The last check's view, shared: every plan reads it, and it names each Ready cluster.
    pub fn snapshot(&self) -> Arc<HealthSnapshot> {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn publish(&self, snapshot: HealthSnapshot) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(snapshot);
    }
}

/// How often the health loop looks: a quarter of the grace period, between 100 ms and 5 s.
pub fn check_interval(grace: Duration) -> Duration {
    (grace / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
}

fn seconds(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

/// The `Ready=False` message of a stale cluster.
pub fn stale_message(
    last_heartbeat: Option<jiff::Timestamp>,
    state: &StaleState,
    now: jiff::Timestamp,
    rules: &Rules,
) -> String {
    let silence = match last_heartbeat {
        Some(at) => format!(
            "no heartbeat for {} (last at {at:.0}, grace {})",
            seconds(age(now, at)),
            seconds(rules.grace)
        ),
        None => format!("no heartbeat (grace {})", seconds(rules.grace)),
    };
    let failover = match state {
        StaleState::FailedOver => "its replicas are placed in other clusters".to_owned(),
        StaleState::Held(Held::Partition) => format!(
            "failover held back: more than {}% of the clusters are silent at once, so the hub \
             assumes it is cut off itself",
            rules.max_stale_percent
        ),
        StaleState::Held(Held::RateLimit) => format!(
            "failover waits for the rate limit (at most {} clusters per minute)",
            rules.max_per_minute
        ),
    };
    format!("{silence}; {failover}")
}

#[cfg(test)]
mod tests;
