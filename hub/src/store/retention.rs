//! Heartbeats and placement history are records, not state, and without pruning they only grow.
//!
//! - **Heartbeats**: each cluster's newest ones feed placement and the REST API (through the
//!   index and `list_heartbeats(cluster, 1)`), older ones only fill the volume. One cluster of
//!   5,000 nodes sends about 1 MB every 10 s, so the default 1 GiB volume would fill in hours.
//!   Kept: each cluster's newest [`Retention::keep_last`] and everything younger than
//!   [`Retention::keep_for`].
//! - **Placement history**: what `GET .../history` pages through. Kept: each workload's newest
//!   [`Retention::history_keep_last`] entries and everything younger than
//!   [`Retention::history_keep_for`]; a workload that flaps cannot fill the store.
//!
//! The loop deletes the rest on a timer.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::contract::Store;
use super::types::{HeartbeatRetention, HistoryRetention};

/// What the loop keeps, and how often it looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Each cluster's newest heartbeats kept whatever their age (at least 1: the index loads the
    /// newest at start-up).
    pub keep_last: u32,
    /// Every heartbeat younger than this is kept.
    pub keep_for: Duration,
    /// Each workload's newest history entries kept whatever their age.
    pub history_keep_last: u32,
    /// Every history entry younger than this is kept.
    pub history_keep_for: Duration,
    /// Time between two prunes.
    pub every: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep_last: 5,
            keep_for: Duration::from_secs(15 * 60),
            history_keep_last: 100,
            history_keep_for: Duration::from_secs(30 * 24 * 3600),
            every: Duration::from_secs(60),
        }
    }
}

/// Prunes `store`'s heartbeats and placement history by `retention` until `shutdown`; a failed
/// prune is logged and tried again at the next tick (the store may be away for a while).
pub async fn run(store: Arc<dyn Store>, retention: Retention, shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(retention.every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let now = jiff::Timestamp::now();
        let before = |age: Duration| {
            now.checked_sub(jiff::SignedDuration::try_from(age).unwrap_or(jiff::SignedDuration::MAX))
                .ok()
        };
        let heartbeats = HeartbeatRetention {
            keep_last: retention.keep_last.max(1),
            keep_newer_than: before(retention.keep_for),
        };
        match store.prune_heartbeats(heartbeats).await {
            Ok(0) => {}
            Ok(deleted) => debug!(deleted, "pruned old heartbeats"),
            Err(error) => warn!(error = %error, "pruning heartbeats failed; trying again later"),
        }
        let history = HistoryRetention {
            keep_last: retention.history_keep_last.max(1),
            keep_newer_than: before(retention.history_keep_for),
        };
        match store.prune_history(history).await {
            Ok(0) => {}
            Ok(deleted) => debug!(deleted, "pruned old placement history"),
            Err(error) => warn!(error = %error, "pruning placement history failed; trying again later"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ClusterUpsert, NewHeartbeat, connect};

    #[tokio::test]
    async fn a_flood_of_heartbeats_is_pruned_to_each_clusters_newest() {
        let dir = tempfile::tempdir().unwrap();
        let store = connect(&format!("sqlite://{}", dir.path().join("hub.db").display()))
            .await
            .unwrap();
        store.claim_term(None, "test").await.unwrap();
        store
            .upsert_cluster(&ClusterUpsert {
                name: "eu-1".to_owned(),
                ..ClusterUpsert::default()
            })
            .await
            .unwrap();
        let old = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(3600);
        for i in 0..200 {
            store
                .record_heartbeat(&NewHeartbeat {
                    cluster: "eu-1".to_owned(),
                    received_at: old + jiff::SignedDuration::from_secs(i),
                    payload: serde_json::json!({"padding": "x".repeat(1000)}),
                    capacity: None,
                    agent_version: None,
                    kubernetes_version: None,
                })
                .await
                .unwrap();
        }
        // A workload that flapped 120 times, two months ago.
        let long_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(24 * 60);
        for i in 0..120 {
            store
                .put_placement(&crate::store::PlacementUpdate {
                    namespace: "shop".to_owned(),
                    name: "web".to_owned(),
                    uid: "u".to_owned(),
                    generation: 1,
                    decision: serde_json::json!({"assignment": {"eu-1": i + 1}}),
                    trigger: "fleet".to_owned(),
                    reason: "flapping".to_owned(),
                    at: long_ago + jiff::SignedDuration::from_secs(i),
                })
                .await
                .unwrap();
        }
        let shutdown = CancellationToken::new();
        let retention = Retention {
            keep_last: 3,
            keep_for: Duration::from_secs(60),
            every: Duration::from_millis(20),
            ..Retention::default()
        };
        let pruner = tokio::spawn(run(store.clone(), retention, shutdown.clone()));
        let history_len = || async {
            store
                .placement_history(&crate::store::HistoryQuery {
                    limit: 500,
                    ..crate::store::HistoryQuery::default()
                })
                .await
                .unwrap()
                .entries
                .len()
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let (mut left, mut history) = (usize::MAX, usize::MAX);
        while tokio::time::Instant::now() < deadline {
            left = store.list_heartbeats("eu-1", 1000).await.unwrap().len();
            history = history_len().await;
            if (left, history) == (3, 100) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        shutdown.cancel();
        pruner.await.unwrap();
        assert_eq!(left, 3, "200 hour-old heartbeats pruned to the newest 3");
        assert_eq!(history, 100, "120 old history entries pruned to the newest 100");
        let history = store
            .placement_history(&crate::store::HistoryQuery {
                limit: 500,
                ..crate::store::HistoryQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(
            history.entries.len(),
            100,
            "120 old history entries pruned to the newest 100"
        );
        let newest = store.list_heartbeats("eu-1", 1).await.unwrap();
        assert_eq!(
            newest[0].received_at.as_millisecond(),
            (old + jiff::SignedDuration::from_secs(199)).as_millisecond(),
            "the newest is kept"
        );
    }
}
