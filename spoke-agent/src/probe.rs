//! Round trips to the hub and to other agents, reported in every heartbeat.
//!
//! ```text
//!  heartbeat loop: POST heartbeat ─► rtt to the hub ─────────────┐
//!                  answer.peers ──► whom to probe ─┐             ▼
//!  probe loop: every probe interval, each peer:    │   RoundTrips: last few per peer
//!              GET <peer>/probe × 3, fastest one ──┴────────────► median ─► next heartbeat
//! ```
//!
//! A probe is a `GET` of the peer agent's [`PROBE_PATH`] (answered `204` by its metrics listener)
//! on a keep-alive connection; of a round of three the fastest counts, since queues only ever add
//! delay, and the report is the median of the last [`WINDOW`] rounds, so one slow round does not
//! move placement. The hub names the peers in its heartbeat answer (in a large fleet a rotating
//! part of them); a peer the hub stops naming is still reported, from its last rounds, for
//! [`KEEP`], so the hub hears of every pair between rotations. An agent that gives no probe URL
//! is not probed, but still probes the others.
//!
//! [`crate::Config::link_latency`] adds a fixed delay to a link, inside the timed part of each
//! probe (slept) or heartbeat (added), to emulate distance in tests and the playground.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nave_api::wire::{LatencySample, Peer};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, instrument};

use crate::Agent;
use crate::error::{Error, Result};
use crate::metrics::AgentMetrics;

/// Path the metrics listener answers `204` on, for other agents' probes.
pub const PROBE_PATH: &str = "/probe";
/// Rounds per peer whose median is reported.
pub const WINDOW: usize = 5;
/// Probes per round; the fastest counts.
const PROBES_PER_ROUND: usize = 3;
/// Longest wait for one probe; a slower peer is reported as it was last measured, or not at all.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a peer's rounds are reported after its last one.
pub const KEEP: Duration = Duration::from_secs(300);

/// The recent round trips by peer ([`LatencySample::HUB`] for the hub), and the peers to probe.
#[derive(Debug, Default)]
pub struct RoundTrips {
    state: Mutex<State>,
    metrics: Arc<AgentMetrics>,
}

#[derive(Debug, Default)]
struct State {
    /// Each peer's last rounds, and when the last one was.
    windows: BTreeMap<String, (VecDeque<Duration>, Instant)>,
    peers: Vec<Peer>,
}

impl RoundTrips {
    /// Round trips that also set `nave_agent_round_trip_seconds` in `metrics`.
    pub fn new(metrics: Arc<AgentMetrics>) -> Self {
        RoundTrips {
            state: Mutex::default(),
            metrics,
        }
    }

    /// Records one round (the fastest of its probes) to `peer`: the hub, or a peer the hub
    /// names now (a round that ends after the hub stopped naming its peer is dropped).
    pub fn record(&self, peer: &str, rtt: Duration) {
        self.record_at(peer, rtt, Instant::now());
    }

    fn record_at(&self, peer: &str, rtt: Duration, now: Instant) {
        let mut state = self.lock();
        if peer != LatencySample::HUB && !state.peers.iter().any(|p| p.cluster == peer) {
            return;
        }
        let (window, last) = state
            .windows
            .entry(peer.to_owned())
            .or_insert_with(|| (VecDeque::new(), now));
        window.push_back(rtt);
        while window.len() > WINDOW {
            window.pop_front();
        }
        *last = now;
        self.metrics.set_round_trip(peer, Some(median(window)));
    }

    /// The peers the hub named last.
    pub fn set_peers(&self, peers: Vec<Peer>) {
        self.lock().peers = peers;
    }

    /// The peers to probe.
    pub fn peers(&self) -> Vec<Peer> {
        self.lock().peers.clone()
    }

    /// The median of each peer's recent rounds, by peer; peers whose last round is older than
    /// [`KEEP`] are forgotten.
    pub fn samples(&self) -> Vec<LatencySample> {
        self.samples_at(Instant::now())
    }

    fn samples_at(&self, now: Instant) -> Vec<LatencySample> {
        let mut state = self.lock();
        let stale: Vec<String> = state
            .windows
            .iter()
            .filter(|(_, (_, last))| now.saturating_duration_since(*last) > KEEP)
            .map(|(peer, _)| peer.clone())
            .collect();
        for peer in stale {
            state.windows.remove(&peer);
            self.metrics.set_round_trip(&peer, None);
        }
        state
            .windows
            .iter()
            .filter(|(_, (window, _))| !window.is_empty())
            .map(|(peer, (window, _))| LatencySample {
                peer: peer.clone(),
                rtt_millis: median(window).as_secs_f64() * 1000.0,
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The median of a non-empty window (the lower middle of an even count).
fn median(window: &VecDeque<Duration>) -> Duration {
    let mut sorted: Vec<Duration> = window.iter().copied().collect();
    sorted.sort_unstable();
    sorted
        .get(sorted.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or_default()
}

/// Probes every peer the hub named, every [`crate::Config::probe_interval`], until shutdown.
#[instrument(skip_all, fields(cluster = %agent.config.cluster_name))]
pub(crate) async fn probe_loop(agent: Arc<Agent>, shutdown: CancellationToken) -> Result<()> {
    let http = reqwest::Client::builder()
        .connect_timeout(PROBE_TIMEOUT)
        .timeout(PROBE_TIMEOUT)
        // A probe measures the peer's own answer; a redirect would measure somewhere else.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(crate::USER_AGENT)
        .build()
        .map_err(|source| Error::HttpClient { source })?;
    loop {
        let peers = agent.round_trips.peers();
        let rounds = peers.iter().map(|peer| {
            let extra = agent.config.link_latency.get(&peer.cluster).copied();
            probe_round(&http, peer, extra.unwrap_or_default())
        });
        let measured = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            measured = futures::future::join_all(rounds) => measured,
        };
        for (peer, rtt) in peers.iter().zip(measured) {
            if let Some(rtt) = rtt {
                agent.round_trips.record(&peer.cluster, rtt);
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(agent.config.probe_interval) => {}
        }
    }
}

/// The fastest of [`PROBES_PER_ROUND`] probes of `peer`; `None` when every one failed.
async fn probe_round(http: &reqwest::Client, peer: &Peer, extra: Duration) -> Option<Duration> {
    let mut fastest: Option<Duration> = None;
    for _ in 0..PROBES_PER_ROUND {
        let started = Instant::now();
        match http.get(&peer.probe_url).send().await {
            Ok(response) if response.status().is_success() => {
                tokio::time::sleep(extra).await;
                let rtt = started.elapsed();
                fastest = Some(fastest.map_or(rtt, |f| f.min(rtt)));
            }
            Ok(response) => {
                debug!(peer = %peer.cluster, url = %peer.probe_url, status = response.status().as_u16(),
                    "probe answered with an error");
            }
            Err(error) => debug!(peer = %peer.cluster, url = %peer.probe_url, error = %error, "probe failed"),
        }
    }
    fastest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &str) -> Peer {
        Peer {
            cluster: name.to_owned(),
            probe_url: format!("http://{name}/probe"),
        }
    }

    fn millis(samples: &[LatencySample]) -> Vec<(&str, f64)> {
        samples.iter().map(|s| (s.peer.as_str(), s.rtt_millis)).collect()
    }

    #[test]
    fn the_report_is_the_median_of_the_last_rounds() {
        let trips = RoundTrips::default();
        trips.set_peers(vec![peer("b")]);
        for ms in [40, 10, 12, 11, 500, 13, 14] {
            trips.record("b", Duration::from_millis(ms));
        }
        // The last five rounds: 12, 11, 500, 13, 14; one slow round does not show.
        assert_eq!(millis(&trips.samples()), [("b", 13.0)]);
        trips.record(LatencySample::HUB, Duration::from_millis(8));
        trips.record(LatencySample::HUB, Duration::from_millis(6));
        assert_eq!(millis(&trips.samples()), [("b", 13.0), ("hub", 6.0)]);
    }

    #[test]
    fn peers_the_hub_no_longer_names_are_reported_for_a_while_then_forgotten() {
        let trips = RoundTrips::default();
        let start = Instant::now();
        trips.set_peers(vec![peer("b"), peer("c")]);
        trips.record_at("b", Duration::from_millis(5), start);
        trips.record_at("c", Duration::from_millis(7), start);
        trips.record_at(LatencySample::HUB, Duration::from_millis(9), start);
        // Rotated out: b is still reported, and a round to it that ends now is dropped.
        trips.set_peers(vec![peer("c")]);
        trips.record_at("b", Duration::from_millis(500), start);
        assert_eq!(
            millis(&trips.samples_at(start)),
            [("b", 5.0), ("c", 7.0), ("hub", 9.0)]
        );
        assert_eq!(trips.peers(), [peer("c")]);
        let later = start + KEEP / 2;
        trips.record_at("c", Duration::from_millis(7), later);
        trips.record_at(LatencySample::HUB, Duration::from_millis(9), later);
        assert_eq!(
            millis(&trips.samples_at(start + KEEP + Duration::from_secs(1))),
            [("c", 7.0), ("hub", 9.0)],
            "b's last round is older than {KEEP:?}"
        );
    }
}
