use std::sync::Arc;
use std::time::Duration;

use nave_api::wire::{HeartbeatAnswer, LatencySample};
use serde_json::json;

use super::{HUB_NODE, Network};

fn sample(peer: &str, rtt_millis: f64) -> LatencySample {
    LatencySample {
        peer: peer.to_owned(),
        rtt_millis,
    }
}

const GRACE: Duration = Duration::from_secs(40);

/// The names of the peers `cluster`'s heartbeat is answered with, in the answer's order.
fn peers_of(network: &Network, cluster: &str) -> Vec<String> {
    network
        .answer(cluster, GRACE)
        .peers
        .into_iter()
        .map(|p| p.cluster)
        .collect()
}

#[test]
fn samples_that_cannot_be_round_trips_are_left_out_and_the_hub_is_not_a_peer() {
    let network = Network::default();
    network.put(
        "a",
        None,
        &[
            sample(LatencySample::HUB, 12.0),
            sample("b", 30.0),
            sample("c", f64::NAN),
            sample("d", -1.0),
            sample("e", 1e300),
            sample("", 5.0),
            sample("a", 1.0),
        ],
    );
    let measured = network.measured();
    let a: Vec<(&str, Duration)> = measured["a"].iter().map(|(p, d)| (p.as_str(), *d)).collect();
    assert_eq!(
        a,
        [("b", Duration::from_millis(30))],
        "measured of a: {measured:?}"
    );
    // The hub's link still takes part in the fit.
    let fitted = network.coordinates();
    assert!(
        fitted.contains_key(HUB_NODE) && fitted.contains_key("b"),
        "expected the hub and b in the fit, saw {:?}",
        fitted.keys().collect::<Vec<_>>()
    );
}

#[test]
fn peers_are_the_others_with_a_probe_url_that_beat_recently() {
    let network = Network::default();
    network.put("a", Some("http://a/probe"), &[]);
    network.put("b", Some("http://b/probe"), &[]);
    network.put("c", None, &[]);
    // Loaded from the store: known, but not offered until it beats again.
    network.load(
        "d",
        &json!({"probeUrl": "http://d/probe", "latencySamples": [{"peer": "a", "rttMillis": 4.0}]}),
    );
    assert_eq!(peers_of(&network, "a"), ["b"]);
    assert_eq!(peers_of(&network, "c"), ["a", "b"]);
    assert_eq!(
        network.measured()["d"]["a"],
        Duration::from_millis(4),
        "loaded samples count"
    );
    network.put("d", Some("http://d/probe"), &[]);
    assert_eq!(peers_of(&network, "a"), ["b", "d"]);
    // A cluster that stops giving a URL is no longer probed.
    network.put("b", None, &[]);
    assert_eq!(peers_of(&network, "a"), ["d"]);
}

#[test]
fn a_large_fleet_is_probed_in_turns_covering_every_peer() {
    let network = Network::default();
    let max = HeartbeatAnswer::MAX_PEERS;
    for i in 0..=2 * max {
        network.put(&format!("c{i:02}"), Some(&format!("http://c{i:02}/probe")), &[]);
    }
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..2 {
        let answer = network.answer("c00", GRACE);
        assert_eq!(
            answer.peers.len(),
            max,
            "each answer names at most {max}: {answer:?}"
        );
        seen.extend(answer.peers.into_iter().map(|p| p.cluster));
    }
    assert_eq!(
        seen.len(),
        2 * max,
        "two answers cover all {} others: {seen:?}",
        2 * max
    );
    assert!(!seen.contains("c00"), "never itself: {seen:?}");
    let names = peers_of(&network, "c00");
    assert_eq!(
        names.first().map(String::as_str),
        Some("c01"),
        "the window wraps around to the first name after the last: {names:?}"
    );
    assert!(names.is_sorted(), "an answer names its peers in order: {names:?}");
}

#[test]
fn a_removed_cluster_is_no_longer_a_peer_nor_in_the_fit() {
    let network = Network::default();
    network.put("a", Some("http://a/probe"), &[sample("b", 5.0)]);
    network.put("b", Some("http://b/probe"), &[sample("a", 5.0)]);
    network.put("c", Some("http://c/probe"), &[sample("a", 8.0)]);
    let fitted = network.coordinates();
    assert!(
        fitted.contains_key("b"),
        "b is fitted while it is in the fleet: {fitted:?}"
    );
    let generation = network.generation();
    network.forget("b");
    assert_eq!(
        peers_of(&network, "a"),
        ["c"],
        "a removed cluster is not offered as a peer"
    );
    let measured = network.measured();
    assert!(
        !measured.contains_key("b") && !measured["a"].contains_key("b"),
        "neither its round trips nor those to it are kept: {measured:?}"
    );
    assert_ne!(network.generation(), generation, "the fit is out of date");
    let fitted = network.coordinates();
    assert!(
        !fitted.contains_key("b"),
        "a removed cluster is not fitted: {fitted:?}"
    );
}

#[test]
fn coordinates_are_fitted_again_only_after_a_measurement_moved() {
    let network = Network::default();
    let triangle = |ab: f64| {
        network.put(
            "a",
            None,
            &[
                sample("b", ab),
                sample("c", 20.0),
                sample(LatencySample::HUB, 15.0),
            ],
        );
        network.put("b", None, &[sample("c", 25.0), sample(LatencySample::HUB, 18.0)]);
    };
    triangle(10.0);
    let first = network.coordinates();
    assert!(
        Arc::ptr_eq(&first, &network.coordinates()),
        "no new samples: the same fit"
    );
    triangle(10.4);
    assert!(
        Arc::ptr_eq(&first, &network.coordinates()),
        "jitter under 1 ms: the same fit"
    );
    let generation = network.generation();
    triangle(40.0);
    let second = network.coordinates();
    assert!(
        !Arc::ptr_eq(&first, &second),
        "a round trip that quadrupled: a new fit"
    );
    assert!(
        network.generation() > generation,
        "and a new generation, so fleet views built before are not reused"
    );
    let generation = network.generation();
    triangle(40.3);
    assert_eq!(network.generation(), generation, "jitter: the same generation");
    network.put("c", None, &[sample("a", 20.0)]);
    assert!(
        network.generation() > generation,
        "a cluster measured for the first time: a new generation"
    );
}

#[test]
fn probe_urls_must_be_http_urls_with_a_host() {
    let network = Network::default();
    for (cluster, url) in [
        ("a", "http://10.0.0.1:9090/probe"),
        ("b", "file:///etc/passwd"),
        ("c", "not a url"),
        ("d", "https://agent.eu.example.com/probe"),
    ] {
        network.put(cluster, Some(url), &[]);
    }
    assert_eq!(peers_of(&network, "x"), ["a", "d"]);
}

#[test]
fn a_slow_drift_adds_up_to_a_refit_and_zero_or_too_many_samples_are_refused() {
    let network = Network::default();
    network.put("a", None, &[sample("b", 10.0), sample("c", 20.0)]);
    let first = network.coordinates();
    // Steps of 0.4 to 0.5 ms: 10.5 and 10.9 are within 1 ms of the fitted 10; 11.3 moved only
    // 0.4 ms from the one before, but 1.3 ms (13 %) from what was fitted, and refits.
    for ab in [10.5, 10.9] {
        network.put("a", None, &[sample("b", ab), sample("c", 20.0)]);
        assert!(
            Arc::ptr_eq(&first, &network.coordinates()),
            "{ab} ms is close to the fitted 10"
        );
    }
    network.put("a", None, &[sample("b", 11.3), sample("c", 20.0)]);
    assert!(
        !Arc::ptr_eq(&first, &network.coordinates()),
        "11.3 ms is 13 % off the fitted 10"
    );

    let many: Vec<LatencySample> = (0..1000).map(|i| sample(&format!("p{i}"), 5.0)).collect();
    network.put("z", None, &[vec![sample("y", 0.0)], many].concat());
    let z = &network.measured()["z"];
    assert_eq!(
        z.len(),
        super::MAX_SAMPLES,
        "at most {} samples",
        super::MAX_SAMPLES
    );
    assert!(!z.contains_key("y"), "a 0 ms round trip is refused");
}
