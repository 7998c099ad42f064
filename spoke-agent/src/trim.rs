//! What the agent keeps of its cluster's Nodes and Pods: only what the capacity model, the
//! Pending pods and the status reports read ([`crate::capacity`], [`crate::status`]).
//!
//! The agent holds every Node and Pod of its cluster for as long as it runs. A pod as the API
//! server sends it carries its managed fields, annotations, environment, probes, volumes and
//! container statuses, and its Rust form takes kilobytes even when empty (a `Container` alone is
//! over 2 KiB); a node carries its images and system information. In a cluster of thousands of
//! nodes and tens of thousands of pods, keeping them whole was most of the agent's memory
//! (BENCHMARKS.md). So each pod is reduced to a [`PodSummary`] as its watch event arrives, kept in
//! a [`Pods`] index instead of a reflector, and each node is trimmed before its reflector stores
//! it: a whole object is held only while its event is handled.
//!
//! A field that the agent starts reading must be kept here too; the tests compare what is
//! computed from trimmed nodes with what is computed from whole ones.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Pod};
use kube::api::ObjectMeta;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::capacity::PodSummary;

#[cfg(test)]
mod tests;

/// Keeps of `node` its identity, its labels (node groups are made of them), its taints, whether
/// it is cordoned, its allocatable resources and whether it is Ready.
pub fn node(node: &mut Node) {
    let meta = std::mem::take(&mut node.metadata);
    node.metadata = ObjectMeta {
        name: meta.name,
        uid: meta.uid,
        resource_version: meta.resource_version,
        labels: meta.labels,
        ..ObjectMeta::default()
    };
    node.spec = node.spec.take().map(|spec| NodeSpec {
        taints: spec.taints,
        unschedulable: spec.unschedulable,
        ..NodeSpec::default()
    });
    node.status = node.status.take().map(|status| NodeStatus {
        allocatable: status.allocatable,
        conditions: status.conditions.map(|conditions| {
            conditions
                .into_iter()
                .filter(|c| c.type_ == "Ready")
                .map(|c| NodeCondition {
                    type_: c.type_,
                    status: c.status,
                    ..NodeCondition::default()
                })
                .collect()
        }),
        ..NodeStatus::default()
    });
}

/// The cluster's pods as [`PodSummary`]s, by namespace and name, kept from a pod watch's events
/// (what a reflector does, for a type smaller than the pod).
#[derive(Debug)]
pub struct Pods {
    state: RwLock<PodsState>,
    listed: watch::Sender<bool>,
}

#[derive(Debug, Default)]
struct PodsState {
    live: HashMap<PodKey, Arc<PodSummary>>,
    /// While the watch lists again: what it listed so far, which replaces `live` when done.
    relisting: Option<HashMap<PodKey, Arc<PodSummary>>>,
}

type PodKey = (String, String);

fn key(pod: &Pod) -> PodKey {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

impl Default for Pods {
    fn default() -> Self {
        Pods {
            state: RwLock::default(),
            listed: watch::channel(false).0,
        }
    }
}

impl Pods {
    /// An empty index, not yet listed.
    pub fn new() -> Pods {
        Pods::default()
    }

    /// Applies a watch event; says whether it can change a status report (the pod is Pending or
    /// Nave's, now or before).
    pub fn apply(&self, event: &watcher::Event<Pod>) -> bool {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Init => {
                state.relisting = Some(HashMap::new());
                false
            }
            watcher::Event::InitApply(pod) => {
                let summary = PodSummary::of(pod);
                let matters = summary.matters();
                state
                    .relisting
                    .get_or_insert_with(HashMap::new)
                    .insert(key(pod), Arc::new(summary));
                matters
            }
            watcher::Event::InitDone => {
                let listed = state.relisting.take().unwrap_or_default();
                state.live = listed;
                drop(state);
                self.listed.send_replace(true);
                true
            }
            watcher::Event::Apply(pod) => {
                let summary = PodSummary::of(pod);
                let now = summary.matters();
                let before = state.live.insert(key(pod), Arc::new(summary));
                now || before.is_some_and(|b| b.matters())
            }
            watcher::Event::Delete(pod) => {
                let before = state.live.remove(&key(pod));
                before.is_some_and(|b| b.matters())
            }
        }
    }

    /// Every pod, as last listed and watched.
    pub fn state(&self) -> Vec<Arc<PodSummary>> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.live.values().cloned().collect()
    }

    /// Waits until the pods have been listed once.
    pub async fn wait_until_ready(&self) {
        let mut listed = self.listed.subscribe();
        // The sender lives as long as `self`, so the wait ends only when listed.
        let _ = listed.wait_for(|listed| *listed).await;
    }
}
