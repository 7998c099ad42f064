//! What the agent keeps of its cluster's Nodes and Pods: only what the capacity model, the
//! Pending pods and the status reports read ([`crate::capacity`], [`crate::status`]).
//!
//! The agent holds every Node and Pod of its cluster for as long as it runs. A pod as the API
//! server sends it carries its managed fields, annotations, environment, probes, volumes and
//! container statuses, and its Rust form takes kilobytes even when empty (a `Container` alone is
//! over 2 KiB); a node carries its images and system information. In a cluster of thousands of
//! nodes and tens of thousands of pods, keeping them whole was most of the agent's memory
//! (BENCHMARKS.md). So pods and nodes are parsed with only the fields the agent reads
//! ([`crate::slim`]), reduced to a [`PodSummary`] or a [`NodeSummary`] as each watch event
//! arrives, and kept in an [`Index`] instead of a reflector.
//!
//! A field that the agent starts reading must be kept in a summary too.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::capacity::{NodeSummary, PodSummary};
use crate::slim::{SlimNode, SlimPod};

#[cfg(test)]
mod tests;

/// What the agent keeps of an object of kind `K`.
pub trait Summary<K>: Sized {
    /// The summary of `object`.
    fn of(object: &K) -> Self;

    /// Whether a change of this object can change a status report.
    fn matters(&self) -> bool {
        false
    }
}

impl Summary<SlimPod> for PodSummary {
    fn of(pod: &SlimPod) -> Self {
        PodSummary::of(&pod.0)
    }

    /// It is Pending, or Nave's.
    fn matters(&self) -> bool {
        self.pending.is_some() || self.workload.is_some()
    }
}

impl Summary<SlimNode> for NodeSummary {
    fn of(node: &SlimNode) -> Self {
        NodeSummary::of(&node.0)
    }
}

/// The cluster's pods as summaries.
pub type Pods = Index<SlimPod, PodSummary>;
/// The cluster's nodes as summaries.
pub type Nodes = Index<SlimNode, NodeSummary>;

/// Summaries of the objects of kind `K`, by namespace and name, kept from a watch's events (what
/// a reflector does, for a type smaller than the object).
#[derive(Debug)]
pub struct Index<K, S> {
    state: RwLock<State<S>>,
    listed: watch::Sender<bool>,
    kind: PhantomData<fn(&K)>,
}

#[derive(Debug)]
struct State<S> {
    live: HashMap<Key, Arc<S>>,
    /// While the watch lists again: what it listed so far, which replaces `live` when done.
    relisting: Option<HashMap<Key, Arc<S>>>,
}

impl<S> Default for State<S> {
    fn default() -> Self {
        State {
            live: HashMap::new(),
            relisting: None,
        }
    }
}

type Key = (String, String);

fn key<K: Resource>(object: &K) -> Key {
    let meta = object.meta();
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl<K, S> Default for Index<K, S> {
    fn default() -> Self {
        Index {
            state: RwLock::default(),
            listed: watch::channel(false).0,
            kind: PhantomData,
        }
    }
}

impl<K: Resource, S: Summary<K>> Index<K, S> {
    /// An empty index, not yet listed.
    pub fn new() -> Self {
        Index::default()
    }

    /// Applies a watch event; says whether it can change a status report ([`Summary::matters`],
    /// now or before).
    pub fn apply(&self, event: &watcher::Event<K>) -> bool {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Init => {
                state.relisting = Some(HashMap::new());
                false
            }
            watcher::Event::InitApply(object) => {
                let summary = S::of(object);
                let matters = summary.matters();
                state
                    .relisting
                    .get_or_insert_with(HashMap::new)
                    .insert(key(object), Arc::new(summary));
                matters
            }
            watcher::Event::InitDone => {
                let listed = state.relisting.take().unwrap_or_default();
                state.live = listed;
                drop(state);
                self.listed.send_replace(true);
                true
            }
            watcher::Event::Apply(object) => {
                let summary = S::of(object);
                let now = summary.matters();
                let before = state.live.insert(key(object), Arc::new(summary));
                now || before.is_some_and(|b| b.matters())
            }
            watcher::Event::Delete(object) => {
                let before = state.live.remove(&key(object));
                before.is_some_and(|b| b.matters())
            }
        }
    }

    /// Every object's summary, as last listed and watched.
    pub fn state(&self) -> Vec<Arc<S>> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.live.values().cloned().collect()
    }

    /// The summary of the object `namespace`/`name`, if it exists.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<S>> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.live.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    /// Waits until the objects have been listed once.
    pub async fn wait_until_ready(&self) {
        let mut listed = self.listed.subscribe();
        // The sender lives as long as `self`, so the wait ends only when listed.
        let _ = listed.wait_for(|listed| *listed).await;
    }
}
