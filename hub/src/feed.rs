//! What other hub replicas write, applied to this replica's memory: every replica serves the
//! agent endpoints and the REST API, so each keeps its own [`Index`] and long-polls, and hears of
//! the others' writes through the store's change feed (Postgres `LISTEN/NOTIFY`, see
//! [`crate::store::Store::changes`]).
//!
//! ```text
//!  replica A writes ──► store ──NOTIFY──► replica B: feed::run
//!                                            ├─ Heartbeat(c) ─► newest heartbeat ─► index ─► wake (if leading)
//!                                            ├─ Status(c) ───► report ───────────► index ─► reconcile its workloads
//!                                            ├─ Cluster(c) ──► record (or gone) ─► index ─► pass over all; wake c's polls
//!                                            ├─ Credentials(c) ─► (the store forgot c's credentials it kept)
//!                                            ├─ Work(c, r) ──────────────────────────────► wake c's long-polls
//!                                            ├─ Placement ───► placement ────────► index bookings (simulations)
//!                                            ├─ Leadership ──► term, published ──► complete work sets or not
//!                                            └─ Resync ──────► everything again (the feed lost its connection)
//! ```
//!
//! Why `LISTEN/NOTIFY` rather than polling the store: an agent's long-poll on a follower wakes
//! within milliseconds of the leader's write, and an idle fleet costs no queries; a poll would
//! trade one for the other (a 1 s poll of every cluster's revision is 5,000 rows a second for
//! 5,000 clusters, and still a second late). Notifications are delivered at most once, so a
//! lost connection is answered by reading everything again.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use nave_api::wire::{Heartbeat, WorkloadRef};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::error::Error;
use crate::index::{Index, Reload, parse_report};
use crate::signals::{ReconcileTrigger, WorkSignals};
use crate::store::{FeedEvent, Store, StoreChange};

/// What the feed updates.
#[derive(Clone, Debug)]
pub struct Follower {
    /// The store the changes are read back from.
    pub store: Arc<dyn Store>,
    /// This replica's index.
    pub index: Arc<Index>,
    /// This replica's long-polls, and whether work sets are complete.
    pub signals: Arc<WorkSignals>,
    /// This replica's controllers (a no-op unless it leads).
    pub trigger: ReconcileTrigger,
    /// Heartbeat grace, to tell a cluster coming back.
    pub grace: Duration,
}

/// How long the feed waits before listening again, or reading everything again, after a failure.
const RETRY: Duration = Duration::from_secs(1);

/// How often a replica pings itself through the store.
const PING_INTERVAL: Duration = Duration::from_secs(5);

/// A feed that hears nothing (not even its own pings) for this long has lost its connection
/// without noticing (a dropped NAT entry, a failed-over database): it listens anew.
const SILENCE: Duration = Duration::from_secs(15);

/// Applies the store's change feed until `shutdown`; returns at once where the store announces
/// nothing (SQLite: one hub per file).
pub async fn run(follower: Follower, shutdown: CancellationToken) {
    let mut pings = tokio::time::interval(PING_INTERVAL);
    pings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    'listen: loop {
        let mut feed = loop {
            match follower.store.changes().await {
                Ok(Some(feed)) => break feed,
                Ok(None) => return,
                Err(error) => {
                    warn!(error = %error, "cannot listen to the store's changes; retrying");
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(RETRY) => {}
                    }
                }
            }
        };
        info!("following the other replicas' writes");
        // What was written before listening.
        let mut behind = true;
        let mut heard = tokio::time::Instant::now();
        loop {
            if behind {
                match follower.resync().await {
                    Ok(()) => behind = false,
                    Err(error) => warn!(error = %error, "reading the store again failed; retrying"),
                }
            }
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                event = feed.next() => event,
                _ = pings.tick() => {
                    if heard.elapsed() >= SILENCE {
                        warn!(silent = ?heard.elapsed(), "the store's change feed is silent, even to this replica's pings; listening anew");
                        continue 'listen;
                    }
                    if let Err(error) = follower.store.ping().await {
                        debug!(error = %error, "pinging through the store failed");
                    }
                    continue;
                }
                () = tokio::time::sleep(RETRY), if behind => continue,
            };
            heard = tokio::time::Instant::now();
            match event {
                Some(FeedEvent::Change(StoreChange::Ping)) => {}
                Some(FeedEvent::Change(change)) => {
                    debug!(?change, "another replica wrote");
                    if let Err(error) = follower.apply(change).await {
                        warn!(error = %error, "applying another replica's write failed; reading everything again");
                        behind = true;
                    }
                }
                Some(FeedEvent::Resync) => behind = true,
                None => continue 'listen,
            }
        }
    }
}

impl Follower {
    /// Applies one change, read back from the store.
    async fn apply(&self, change: StoreChange) -> Result<(), Error> {
        match change {
            StoreChange::Heartbeat(cluster) => {
                let newest = self
                    .store
                    .list_heartbeats(&cluster, 1)
                    .await
                    .map_err(Error::store("reading a heartbeat"))?;
                let Some(record) = newest.into_iter().next() else {
                    return Ok(());
                };
                let capacity = record.payload.get("capacity").cloned();
                let Ok(beat) = serde_json::from_value::<Heartbeat>(record.payload) else {
                    return Ok(());
                };
                self.know(&cluster).await?;
                let observed =
                    self.index
                        .observe_heartbeat(&cluster, record.received_at, &beat, capacity, self.grace);
                self.trigger.wake(observed.wake, &self.index);
            }
            StoreChange::Status(cluster) => {
                let status = self
                    .store
                    .get_work_status(&cluster)
                    .await
                    .map_err(Error::store("reading a status report"))?;
                self.know(&cluster).await?;
                if let Some(report) = status.and_then(|s| parse_report(&s))
                    && let Some(changed) = self.index.keep_report(&cluster, report)
                {
                    self.trigger.workloads(changed);
                }
            }
            StoreChange::Cluster(cluster) => {
                let record = self
                    .store
                    .get_cluster(&cluster)
                    .await
                    .map_err(Error::store("reading a cluster"))?;
                self.index.refresh_cluster(&cluster, record);
                self.signals.wake(&cluster);
                self.trigger.trigger();
            }
            StoreChange::Work { cluster, revision } => self.signals.notify(&cluster, revision),
            // The leader's own bookings are the record (a placement booked and not yet stored
            // must not be replaced); late notices of its predecessor's writes are in the store
            // it read when it took the lead.
            StoreChange::Placement { .. } if self.trigger.enabled() => {}
            StoreChange::Placement { namespace, name } => {
                let placement = self
                    .store
                    .get_placement(&namespace, &name)
                    .await
                    .map_err(Error::store("reading a placement"))?;
                self.index
                    .refresh_placement(&WorkloadRef::new(&namespace, &name), placement.as_ref());
            }
            StoreChange::Leadership => self.leadership().await?,
            // The store forgot the credentials it kept of the cluster as the feed passed it on.
            StoreChange::Credentials(_) | StoreChange::Ping => {}
        }
        Ok(())
    }

    /// Reads `cluster`'s record when the index does not have it (its registration was missed,
    /// or raced with a reload), so what it reports is not dropped.
    async fn know(&self, cluster: &str) -> Result<(), Error> {
        if self.index.cluster(cluster).is_none() {
            let record = self
                .store
                .get_cluster(cluster)
                .await
                .map_err(Error::store("reading a cluster"))?;
            self.index.refresh_cluster(cluster, record);
        }
        Ok(())
    }

    /// Whether the store's current term has published: work sets are complete or not.
    async fn leadership(&self) -> Result<(), Error> {
        let leadership = self
            .store
            .leadership()
            .await
            .map_err(Error::store("reading the leadership"))?;
        self.signals.set_published(leadership.published());
        Ok(())
    }

    /// Reads everything again (a leader keeps its own placements): the index, the leadership,
    /// and every long-poll looks again.
    async fn resync(&self) -> Result<(), Error> {
        let what = if self.trigger.enabled() {
            Reload::Observations
        } else {
            Reload::Everything
        };
        self.index.reload(what).await?;
        self.leadership().await?;
        self.signals.wake_all();
        self.trigger.trigger();
        Ok(())
    }
}
