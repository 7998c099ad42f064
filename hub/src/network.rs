//! The fleet's measured round trips, and the network coordinates fitted to them.
//!
//! ```text
//!  heartbeat ─► put: probe URL, latency samples (to the hub and to peers)
//!                 │
//!                 ├─► peers: whom the cluster should probe next (the heartbeat's answer)
//!                 └─► measured ─► Cluster.latencies  ┐
//!                     coordinates (fitted lazily) ───┴─► FleetView::with_network ─► proximity
//! ```
//!
//! Every agent that gives a probe URL is probed by the others; the hub names the peers in its
//! heartbeat answer (at most [`HeartbeatAnswer::MAX_PEERS`], rotated in larger fleets), so the
//! agents never need to know the fleet. Pairs never measured are estimated from network
//! coordinates ([`nave_policies::network`]), refitted only after a measurement moved.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nave_api::wire::{HeartbeatAnswer, LatencySample, Peer};
use nave_policies::NetworkCoordinate;
use nave_policies::network::{self, Sample};
use tracing::warn;

/// The hub's node in the fitted space. Not a valid cluster name (DNS labels hold no
/// parentheses), so no cluster can take its place.
pub const HUB_NODE: &str = "(hub)";

/// Longest round trip taken as a measurement; anything longer is a broken probe, not a link.
const MAX_RTT: Duration = Duration::from_secs(60);
/// Most samples taken from one heartbeat (the hub and peers, current and recently rotated out).
pub const MAX_SAMPLES: usize = 256;
/// Longest probe URL taken.
const MAX_URL_LEN: usize = 2048;

/// A measurement that moved less than this (and less than [`REFIT_SHARE`] of itself) leaves the
/// fitted coordinates as they are: probes jitter, and a refit per heartbeat is wasted work.
const REFIT_MILLIS: f64 = 1.0;
/// See [`REFIT_MILLIS`].
const REFIT_SHARE: f64 = 0.1;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct Network {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Each cluster's probe URL, from its latest heartbeat.
    probe_urls: BTreeMap<String, String>,
    /// When each cluster's latest heartbeat arrived at this hub (not known for what was loaded
    /// from the store until the cluster beats again).
    seen: BTreeMap<String, Instant>,
    /// Each cluster's latest round trips by peer ([`HUB_NODE`] for the hub).
    measured: BTreeMap<String, BTreeMap<String, Duration>>,
    /// The last peer each cluster was named when its live peers were too many for one answer:
    /// the next answer starts after it.
    answers: BTreeMap<String, String>,
    /// Coordinates fitted to `measured`; `None` after a measurement moved.
    fitted: Option<Arc<BTreeMap<String, NetworkCoordinate>>>,
    /// The measurements the last fit was made of: a measurement moved when it differs from
    /// these, so a slow drift adds up to a refit.
    fitted_from: BTreeMap<String, BTreeMap<String, Duration>>,
    /// Grows whenever `fitted` is invalidated; a fit made meanwhile is not kept as current.
    generation: u64,
    /// The last fit, the warm start of the next.
    previous: BTreeMap<String, NetworkCoordinate>,
}

impl State {
    /// A measurement moved or went: the fit is out of date, and a fit made meanwhile is not kept.
    fn invalidate_fit(&mut self) {
        self.fitted = None;
        self.generation = self.generation.wrapping_add(1);
    }
}

impl Network {
    /// Grows whenever a cluster's round trips changed by more than noise (a peer measured for
    /// the first time or no longer, a link much slower or faster): a fleet view that shows the
    /// round trips is current while it does not.
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Records what `cluster`'s heartbeat says about the network: its probe URL (kept only when
    /// it is an `http` or `https` URL with a host) and its samples. Samples that cannot be round
    /// trips (zero or less, not a number, above a minute, naming no peer or the cluster itself)
    /// are left out, and at most [`MAX_SAMPLES`] are taken.
    pub fn put(&self, cluster: &str, probe_url: Option<&str>, samples: &[LatencySample]) {
        let measured: BTreeMap<String, Duration> = samples
            .iter()
            .filter(|s| !s.peer.is_empty() && s.peer != cluster)
            // Checked before converting: `Duration::from_secs_f64` panics on what fails here.
            .filter(|s| s.rtt_millis > 0.0 && s.rtt_millis <= MAX_RTT.as_secs_f64() * 1000.0)
            .take(MAX_SAMPLES)
            .map(|s| {
                let peer = if s.peer == LatencySample::HUB {
                    HUB_NODE.to_owned()
                } else {
                    s.peer.clone()
                };
                (peer, Duration::from_secs_f64(s.rtt_millis / 1000.0))
            })
            .collect();
        let probe_url = probe_url.filter(|u| !u.is_empty());
        let valid_url = probe_url.filter(|u| valid_probe_url(u));
        if let Some(url) = probe_url
            && valid_url.is_none()
        {
            warn!(
                cluster,
                probe_url = url,
                "ignoring a probe URL that is not an http(s) URL with a host"
            );
        }
        let mut state = self.lock();
        state.seen.insert(cluster.to_owned(), Instant::now());
        match valid_url {
            Some(url) => state.probe_urls.insert(cluster.to_owned(), url.to_owned()),
            None => state.probe_urls.remove(cluster),
        };
        let none = BTreeMap::new();
        let moved = moved(state.fitted_from.get(cluster).unwrap_or(&none), &measured);
        if moved {
            state.invalidate_fit();
        }
        state.measured.insert(cluster.to_owned(), measured);
    }

    /// What a cluster loaded from the store reported last, before it beats again.
    pub fn load(&self, cluster: &str, payload: &serde_json::Value) {
        let samples: Vec<LatencySample> =
            serde_json::from_value(payload["latencySamples"].clone()).unwrap_or_default();
        let probe_url = payload["probeUrl"].as_str();
        self.put(cluster, probe_url, &samples);
        self.lock().seen.remove(cluster);
    }

    /// The answer to `cluster`'s heartbeat: the other clusters with a probe URL whose last
    /// heartbeat is younger than `grace`, by name; past [`HeartbeatAnswer::MAX_PEERS`], a window
    /// that moves on at every answer, starting after the last peer the previous answer named,
    /// so each pair is measured in turn.
    ///
    /// Every cluster asks at every heartbeat, so the answer walks only as far as it needs from
    /// where the last one stopped, and copies only the peers it names: building the list of
    /// every live peer to name sixteen of them cost a millisecond per heartbeat at 5,000
    /// clusters, about half a core.
    pub fn answer(&self, cluster: &str, grace: Duration) -> HeartbeatAnswer {
        let max = HeartbeatAnswer::MAX_PEERS;
        let now = Instant::now();
        let mut state = self.lock();
        let state = &mut *state;
        let live = |name: &&String| {
            name.as_str() != cluster
                && state
                    .seen
                    .get(name.as_str())
                    .is_some_and(|at| now.saturating_duration_since(*at) < grace)
        };
        // After the last peer named, then around from the first name up to it.
        let (from, until) = match state.answers.get(cluster) {
            Some(last) => (Bound::Excluded(last.as_str()), Bound::Included(last.as_str())),
            None => (Bound::Unbounded, Bound::Excluded("")),
        };
        let names = state
            .probe_urls
            .range::<str, _>((from, Bound::Unbounded))
            .chain(state.probe_urls.range::<str, _>((Bound::Unbounded, until)));
        let mut peers: Vec<Peer> = names
            .filter(|(name, _)| live(name))
            .take(max)
            .map(|(name, url)| Peer {
                cluster: name.clone(),
                probe_url: url.clone(),
            })
            .collect();
        match peers.last() {
            Some(last) if peers.len() == max => {
                state.answers.insert(cluster.to_owned(), last.cluster.clone());
            }
            // Every live peer fits: no window to move.
            _ => {
                state.answers.remove(cluster);
            }
        }
        peers.sort_unstable_by(|a, b| a.cluster.cmp(&b.cluster));
        HeartbeatAnswer {
            peers,
            ..HeartbeatAnswer::default()
        }
    }

    /// Forgets a removed cluster: it is no longer offered as a peer, its round trips no longer
    /// count in the fit, and what it was answered is dropped.
    pub fn forget(&self, cluster: &str) {
        let mut state = self.lock();
        state.probe_urls.remove(cluster);
        state.seen.remove(cluster);
        state.answers.remove(cluster);
        state.fitted_from.remove(cluster);
        state.previous.remove(cluster);
        let measured = state.measured.remove(cluster).is_some_and(|m| !m.is_empty());
        // Every peer's map, not only up to the first that measured it.
        let mut measured_by_others = false;
        for peers in state.measured.values_mut() {
            measured_by_others |= peers.remove(cluster).is_some();
        }
        if measured || measured_by_others {
            state.invalidate_fit();
        }
    }

    /// Each cluster's measured round trips by peer, the hub left out.
    pub fn measured(&self) -> BTreeMap<String, BTreeMap<String, Duration>> {
        let state = self.lock();
        state
            .measured
            .iter()
            .map(|(cluster, peers)| {
                let peers = peers
                    .iter()
                    .filter(|(peer, _)| peer.as_str() != HUB_NODE)
                    .map(|(peer, rtt)| (peer.clone(), *rtt))
                    .collect();
                (cluster.clone(), peers)
            })
            .collect()
    }

    /// Network coordinates fitted to every measurement (the hub's node included), fitted again
    /// only when a measurement moved since the last fit. The fit runs without the lock, so
    /// heartbeats are not held up by it.
    pub fn coordinates(&self) -> Arc<BTreeMap<String, NetworkCoordinate>> {
        let (snapshot, previous, generation) = {
            let state = self.lock();
            if let Some(fitted) = &state.fitted {
                return fitted.clone();
            }
            (state.measured.clone(), state.previous.clone(), state.generation)
        };
        let samples: Vec<Sample> = snapshot
            .iter()
            .flat_map(|(cluster, peers)| {
                peers.iter().map(|(peer, rtt)| Sample {
                    a: cluster.clone(),
                    b: peer.clone(),
                    rtt: *rtt,
                })
            })
            .collect();
        let fitted = Arc::new(network::fit(&samples, &previous));
        let mut state = self.lock();
        state.previous = (*fitted).clone();
        if state.generation == generation {
            state.fitted = Some(fitted.clone());
            state.fitted_from = snapshot;
        }
        fitted
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether `after` differs from `before` enough to fit again: another set of peers, or a round
/// trip that moved by more than [`REFIT_MILLIS`] and [`REFIT_SHARE`].
fn moved(before: &BTreeMap<String, Duration>, after: &BTreeMap<String, Duration>) -> bool {
    before.len() != after.len()
        || before.iter().zip(after).any(|((p, a), (q, b))| {
            let (a, b) = (a.as_secs_f64() * 1000.0, b.as_secs_f64() * 1000.0);
            p != q || ((a - b).abs() > REFIT_MILLIS && (a - b).abs() > REFIT_SHARE * a.max(b))
        })
}

/// An `http` or `https` URL with a host, of reasonable length: what other agents may be sent to.
fn valid_probe_url(url: &str) -> bool {
    url.len() <= MAX_URL_LEN
        && reqwest::Url::parse(url)
            .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
}

#[cfg(test)]
mod tests;
