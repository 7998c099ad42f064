//! How the hub's parts wake each other: new work revisions wake the agents' long-polls
//! ([`WorkSignals`]), and agents' reports, heartbeats and watched objects ask the controller for
//! reconciles ([`ReconcileTrigger`]).

use std::collections::HashMap;
use std::sync::Mutex;

use nave_api::wire::WorkloadRef;
use tokio::sync::{mpsc, watch};

use crate::index::{Index, Wake};

/// Per-cluster notification of new work revisions, for the agents' long-polls.
///
/// A `watch` channel per cluster rather than one `Notify`: a poller that subscribes and then
/// reads the store cannot miss a revision put between the two, since `changed()` sees every
/// send after the subscription.
#[derive(Debug, Default)]
pub struct WorkSignals {
    senders: Mutex<HashMap<String, watch::Sender<u64>>>,
    closed: std::sync::atomic::AtomicBool,
    published: std::sync::atomic::AtomicBool,
}

impl WorkSignals {
    /// A receiver that wakes when `cluster`'s work revision changes.
    pub fn subscribe(&self, cluster: &str) -> watch::Receiver<u64> {
        let mut senders = self.senders.lock().unwrap_or_else(|e| e.into_inner());
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            // Shutting down: a receiver whose sender is gone ends its poll at once.
            return watch::channel(0).1;
        }
        senders
            .entry(cluster.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Ends every long-poll, now and later (they answer 204 and the agents poll again, elsewhere
    /// or after a restart): the hub is shutting down and must not wait out the polls.
    pub fn close(&self) {
        let mut senders = self.senders.lock().unwrap_or_else(|e| e.into_inner());
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        senders.clear();
    }

    /// Records that every workload's objects are published (the leader's first pass over every
    /// workload is done) and wakes every long-poll, so agents that hold a set waiting for a
    /// complete one (see [`nave_api::wire::WorkHeld`]) hear of it at once.
    pub fn publish(&self) {
        self.set_published(true);
    }

    /// Records whether every workload's objects are published in the store's current term (a
    /// new term is not, until its leader's first pass is done); becoming published wakes every
    /// long-poll.
    pub fn set_published(&self, published: bool) {
        let was = self
            .published
            .swap(published, std::sync::atomic::Ordering::SeqCst);
        if published && !was {
            self.wake_all();
        }
    }

    /// Wakes every long-poll, to look at its cluster's work again.
    pub fn wake_all(&self) {
        let senders = self.senders.lock().unwrap_or_else(|e| e.into_inner());
        for sender in senders.values() {
            sender.send_modify(|_| {});
        }
    }

    /// Wakes `cluster`'s long-polls, to look at its work again (what its agent may do changed).
    pub fn wake(&self, cluster: &str) {
        let senders = self.senders.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = senders.get(cluster) {
            sender.send_modify(|_| {});
        }
    }

    /// Whether [`publish`](Self::publish) was called: the work sets are complete.
    pub fn published(&self) -> bool {
        self.published.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Wakes `cluster`'s long-pollers: its work is now at `revision`.
    pub fn notify(&self, cluster: &str, revision: u64) {
        let senders = self.senders.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = senders.get(cluster) {
            sender.send_replace(revision);
        }
    }
}

/// Asks the controllers to reconcile MultiClusterDeployments: every one (a cluster joined, came
/// back or was edited), or named ones (an agent reported their objects' status, or capacity
/// changed and they are not settled; see [`crate::index::Index::settle`]).
///
/// Requests for every object go through a channel of capacity one, so a burst of them while a
/// pass is pending coalesces into that pass; the controller's queue merges repeated names.
///
/// Only a leading replica runs the controllers: they [`attach`](Self::attach) when it starts to
/// lead, and [`detach`](Self::detach) when it stops. Detached, the trigger drops what it is asked,
/// so nothing piles up (the leader hears of the same changes through the store's change feed,
/// and a new leader's first pass reconciles everything).
#[derive(Clone, Debug, Default)]
pub struct ReconcileTrigger {
    senders: std::sync::Arc<Mutex<Option<Senders>>>,
}

#[derive(Debug)]
struct Senders {
    all: mpsc::Sender<()>,
    some: mpsc::UnboundedSender<WorkloadRef>,
}

/// The receiving ends of a [`ReconcileTrigger`], read by the controller.
#[derive(Debug)]
pub struct Triggered {
    /// A pass over every object.
    pub all: mpsc::Receiver<()>,
    /// One object.
    pub some: mpsc::UnboundedReceiver<WorkloadRef>,
}

impl ReconcileTrigger {
    /// A trigger that reaches nothing until [`attach`](Self::attach)ed.
    pub fn new() -> ReconcileTrigger {
        ReconcileTrigger::default()
    }

    /// From now on the trigger reaches the controllers that read what this returns (this
    /// replica leads).
    pub fn attach(&self) -> Triggered {
        let (all, all_rx) = mpsc::channel(1);
        let (some, some_rx) = mpsc::unbounded_channel();
        *self.senders.lock().unwrap_or_else(|e| e.into_inner()) = Some(Senders { all, some });
        Triggered {
            all: all_rx,
            some: some_rx,
        }
    }

    /// From now on the trigger reaches nothing (this replica no longer leads).
    pub fn detach(&self) {
        *self.senders.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Whether it reaches the controllers: this replica leads.
    pub fn enabled(&self) -> bool {
        self.senders.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Requests a pass over every object; a no-op when one is already pending.
    pub fn trigger(&self) {
        if let Some(senders) = self.senders.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            let _ = senders.all.try_send(());
        }
    }

    /// Requests a reconcile of each of `workloads`.
    pub fn workloads(&self, workloads: impl IntoIterator<Item = WorkloadRef>) {
        if let Some(senders) = self.senders.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            for workload in workloads {
                let _ = senders.some.send(workload);
            }
        }
    }

    /// Requests what a heartbeat's [`Wake`] asks for: every workload, or the unsettled ones
    /// of `index`.
    pub fn wake(&self, wake: Wake, index: &Index) {
        match wake {
            Wake::All => self.trigger(),
            Wake::Unsettled => self.workloads(index.unsettled()),
            Wake::Nothing => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn closing_ends_every_long_poll_now_and_later() {
        let signals = WorkSignals::default();
        let mut waiting = signals.subscribe("eu-1");
        assert!(!signals.published());
        signals.publish();
        assert!(signals.published());
        assert!(waiting.has_changed().unwrap(), "publishing wakes every poll");
        waiting.borrow_and_update();
        signals.close();
        assert!(waiting.changed().await.is_err(), "a poll waiting at close ends");
        let mut late = signals.subscribe("eu-1");
        assert!(
            late.changed().await.is_err(),
            "a poll that starts after close ends at once"
        );
    }
}
