//! Heartbeats written together: a group commit.
//!
//! Every agent heartbeats every 10 s, so a hub of 5,000 clusters records 500 heartbeats a second,
//! and one transaction each (with its commit's sync to disk) would be most of its idle work.
//! Each heartbeat still waits for its own write to be committed before it is answered, as
//! before; but while one write is in flight, the heartbeats that arrive queue up, and the next
//! write takes them all in one transaction. An idle hub adds no delay (a heartbeat that finds no
//! write in flight is written at once); a busy one writes fewer, larger transactions.
//!
//! ```text
//!  handler ─► queue ─► (writer lock) take the queue ─► one transaction ─► answer each handler
//! ```
//!
//! The write runs as a task of its own, so a handler whose request is dropped halfway (the agent
//! hung up) does not drop the others' heartbeats with it.

use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::store::{NewHeartbeat, Store, StoreError, StoreOp};

/// A heartbeat and where its answer goes.
type Waiting = (NewHeartbeat, oneshot::Sender<Result<(), StoreError>>);

/// Records heartbeats, those that arrive while a write is in flight together.
#[derive(Clone)]
pub(super) struct HeartbeatWriter {
    store: Arc<dyn Store>,
    queue: Arc<Mutex<Vec<Waiting>>>,
    writing: Arc<tokio::sync::Mutex<()>>,
}

impl HeartbeatWriter {
    pub(super) fn new(store: Arc<dyn Store>) -> Self {
        HeartbeatWriter {
            store,
            queue: Arc::default(),
            writing: Arc::default(),
        }
    }

    /// Records `heartbeat`, once it is committed (with others, or alone).
    pub(super) async fn record(&self, heartbeat: NewHeartbeat) -> Result<(), StoreError> {
        let (done, written) = oneshot::channel();
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((heartbeat, done));
        {
            // Whoever holds the lock writes everything queued: this heartbeat, unless the write
            // before took it.
            let _writing = self.writing.lock().await;
            let batch = std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()));
            if !batch.is_empty() {
                // A panic in the write drops the batch's senders: each handler then says so.
                let _ = tokio::spawn(write(self.store.clone(), batch)).await;
            }
        }
        written.await.unwrap_or(Err(StoreError::Query {
            op: StoreOp::RecordHeartbeat,
            source: sqlx::Error::WorkerCrashed,
        }))
    }
}

/// Writes `batch` in one transaction; if that fails, each heartbeat alone, so each handler gets
/// its own heartbeat's error (a cluster deleted meanwhile fails only its own).
async fn write(store: Arc<dyn Store>, batch: Vec<Waiting>) {
    let (heartbeats, answers): (Vec<NewHeartbeat>, Vec<_>) = batch.into_iter().unzip();
    let together = heartbeats.len() > 1 && store.record_heartbeats(&heartbeats).await.is_ok();
    for (heartbeat, answer) in heartbeats.iter().zip(answers) {
        let result = if together {
            Ok(())
        } else {
            store.record_heartbeat(heartbeat).await.map(drop)
        };
        let _ = answer.send(result);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::{ClusterUpsert, StoreErrorKind};

    fn beat(cluster: &str, cpu: u32) -> NewHeartbeat {
        NewHeartbeat {
            cluster: cluster.to_owned(),
            received_at: jiff::Timestamp::now(),
            payload: serde_json::json!({"capacity": {"cpu": cpu}}),
            capacity: Some(serde_json::json!({"cpu": cpu})),
            agent_version: None,
            kubernetes_version: None,
        }
    }

    #[tokio::test]
    async fn heartbeats_queued_behind_a_write_go_together_and_each_gets_its_own_answer() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("hub.db").display());
        let store = crate::store::connect(&url).await.unwrap();
        for name in ["a", "b"] {
            store
                .upsert_cluster(&ClusterUpsert {
                    name: name.to_owned(),
                    ..ClusterUpsert::default()
                })
                .await
                .unwrap();
        }
        let writer = HeartbeatWriter::new(store.clone());

        // A write in flight: the three heartbeats that arrive meanwhile queue up.
        let in_flight = writer.writing.clone().lock_owned().await;
        let sent: Vec<_> = [beat("a", 1), beat("gone", 2), beat("b", 3)]
            .into_iter()
            .map(|heartbeat| {
                let writer = writer.clone();
                tokio::spawn(async move { writer.record(heartbeat).await })
            })
            .collect();
        let queued = || writer.queue.lock().unwrap().len();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while queued() < 3 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "expected 3 heartbeats queued behind the write, saw {}",
                queued()
            );
            tokio::task::yield_now().await;
        }
        drop(in_flight);

        let mut answers = Vec::new();
        for task in sent {
            answers.push(task.await.unwrap().map_err(|e| e.kind()));
        }
        assert_eq!(
            answers,
            [Ok(()), Err(StoreErrorKind::UnknownCluster), Ok(())],
            "each heartbeat answered for itself: the unknown cluster's fails, the others are kept"
        );
        for name in ["a", "b"] {
            let kept = store.list_heartbeats(name, 10).await.unwrap();
            assert_eq!(kept.len(), 1, "{name}'s heartbeat recorded once: {kept:?}");
        }
        assert_eq!(queued(), 0, "nothing left queued");
    }
}
