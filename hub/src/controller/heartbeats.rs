//! The WorkloadClusters' side of the controllers: the loop that applies
//! [`crate::cluster_health`]'s rules to the clusters' heartbeats every check interval:
//! `Ready` conditions and Events on WorkloadClusters, the shared [`FleetHealth`] view, and a pass
//! of the controllers when anything changed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use nave_api::conditions::reasons;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cluster_health::{
    FleetHealth, Held, Observation, Rules, StaleState, Tracker, check_interval, event_reasons, stale_message,
};
use crate::index::Index;
use crate::signals::ReconcileTrigger;
use crate::workload_clusters::ClusterObjects;

/// The reference of the WorkloadCluster `name`, for its Events.
pub(crate) fn reference(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(nave_api::API_VERSION.to_owned()),
        kind: Some("WorkloadCluster".to_owned()),
        name: Some(name.to_owned()),
        ..ObjectReference::default()
    }
}

async fn publish(recorder: &Recorder, cluster: &str, type_: EventType, reason: &str, note: String) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: "CheckHeartbeats".to_owned(),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, &reference(cluster)).await {
        warn!(error = %error, cluster, reason, "publishing an event failed");
    }
}

/// What the loop reads and writes.
#[derive(Clone)]
pub struct Monitor {
    /// The clusters' records (last heartbeat).
    pub index: Arc<Index>,
    /// Where the loop shares its view with the plans.
    pub health: Arc<FleetHealth>,
    /// Writes the WorkloadClusters' `Ready` condition.
    pub objects: ClusterObjects,
    /// Publishes Events on WorkloadClusters.
    pub recorder: Recorder,
    /// Asks for a pass over every workload when anything changed.
    pub trigger: ReconcileTrigger,
    /// The failover rules.
    pub rules: Rules,
    /// How long a returned cluster must be Ready before `failback: Immediate` moves replicas back.
    pub failback_settle: Duration,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor")
            .field("rules", &self.rules)
            .field("failback_settle", &self.failback_settle)
            .finish_non_exhaustive()
    }
}

/// Checks the fleet's heartbeats until `shutdown`: writes `Ready` conditions and Events, shares
/// the failover view through [`Monitor::health`], and asks for a reconcile when anything changed.
pub async fn run(monitor: Monitor, shutdown: CancellationToken) {
    let Monitor {
        index,
        health,
        objects,
        recorder,
        trigger,
        rules,
        failback_settle,
    } = monitor;
    // When the hub (this one, or the one before it) last heard from the fleet: the time since is
    // the hub's own absence, not the clusters' silence.
    let away_since = index
        .clusters()
        .values()
        .filter_map(|r| r.last_heartbeat_at)
        .max();
    let mut tracker = Tracker::new(rules.clone(), failback_settle, jiff::Timestamp::now(), away_since);
    let mut ticks = tokio::time::interval(check_interval(rules.grace));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Clusters whose Ready=False write failed, retried on the next tick.
    let mut unwritten: BTreeMap<String, (Option<jiff::Timestamp>, StaleState)> = BTreeMap::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let observations: Vec<Observation> = index
            .clusters()
            .values()
            .map(|r| Observation {
                name: r.name.clone(),
                last_heartbeat: r.last_heartbeat_at,
            })
            .collect();
        let now = jiff::Timestamp::now();
        let changes = tracker.observe(&observations, now);
        let snapshot = tracker.snapshot();
        health.publish(snapshot.clone());
        if changes.any() {
            index.clusters_changed();
            trigger.trigger();
        }
        if let Some(engaged) = changes.partition {
            if engaged {
                warn!(
                    stale = snapshot.stale.len(),
                    clusters = observations.iter().filter(|o| o.last_heartbeat.is_some()).count(),
                    max_stale_percent = rules.max_stale_percent,
                    "too many clusters are silent at once; assuming the hub is partitioned, failing none over"
                );
            } else {
                info!("partition guard released; failover rules apply again");
            }
        }
        for (name, last, state) in changes.stale {
            let message = stale_message(last, &state, now, &rules);
            match &state {
                StaleState::FailedOver => {
                    warn!(cluster = %name, last_heartbeat = ?last, "cluster silent; failing over");
                    publish(
                        &recorder,
                        &name,
                        EventType::Warning,
                        event_reasons::FAILING_OVER,
                        message,
                    )
                    .await;
                }
                StaleState::Held(Held::Partition) => {
                    publish(
                        &recorder,
                        &name,
                        EventType::Warning,
                        event_reasons::FAILOVER_SUPPRESSED,
                        message,
                    )
                    .await;
                }
                StaleState::Held(Held::RateLimit) => {
                    info!(cluster = %name, "cluster silent; failover waits for the rate limit");
                    publish(
                        &recorder,
                        &name,
                        EventType::Warning,
                        event_reasons::HEARTBEAT_MISSED,
                        message,
                    )
                    .await;
                }
            }
            unwritten.insert(name, (last, state));
        }
        for name in &changes.returned {
            info!(cluster = %name, "heartbeats resumed");
            unwritten.remove(name);
            publish(
                &recorder,
                name,
                EventType::Normal,
                event_reasons::HEARTBEAT_RESUMED,
                "heartbeats arrive again; the cluster takes new replicas".to_owned(),
            )
            .await;
            if let Err(error) = objects
                .set_ready(name, true, reasons::HEARTBEAT_RECEIVED, "heartbeats arrive")
                .await
            {
                warn!(cluster = %name, error = %error, "writing Ready=True failed");
            }
        }
        let pending = std::mem::take(&mut unwritten);
        for (name, (last, state)) in pending {
            if !snapshot.stale.contains(&name) {
                continue;
            }
            let message = stale_message(last, &state, now, &rules);
            if let Err(error) = objects
                .set_ready(&name, false, reasons::HEARTBEAT_MISSED, &message)
                .await
            {
                warn!(cluster = %name, error = %error, "writing Ready=False failed; retrying");
                unwritten.insert(name, (last, state));
            }
        }
    }
}
