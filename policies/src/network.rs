//! Network coordinates: latency between two clusters that never measured each other, estimated
//! from the latencies that were measured (Vivaldi, Dabek et al., SIGCOMM 2004).
//!
//! ```text
//!  round-trip samples (a, b, rtt) ──► fit: springs of rest length rtt, relaxed pass after pass
//!                                       │
//!  previous coordinates (warm start) ───┘
//!                                       ▼
//!  NetworkCoordinate per node { position (2-D plane), height (access link), error, links }
//!                                       ▼
//!  estimate(a, b) = |position a - position b| + height a + height b      (milliseconds)
//! ```
//!
//! Every node is a point in a plane plus a height: the plane models the core of the network,
//! where distance grows with geography, and the height a node's own access link, which every
//! path to it pays. Each sample is a spring between two nodes whose rest length is the measured
//! round trip; a pass moves both ends along the spring by a step weighted by how uncertain each
//! node still is, so well-placed nodes anchor newcomers. The hub has every sample, so it relaxes
//! them centrally, in a fixed order, from a fixed or the previous start: the same samples give the
//! same coordinates.
//!
//! An estimate is only offered between nodes placed well enough to trust: at least
//! [`MIN_LINKS`] measured links (fewer leave a node's place in the plane open) and a fit error of
//! at most [`MAX_ERROR`] on them.

use std::collections::BTreeMap;
use std::time::Duration;

/// Fewest measured links (peers, the hub included) a node needs before its coordinate is used.
pub const MIN_LINKS: u32 = 3;
/// Largest median relative error of a node's fitted distances to its measured ones before its
/// coordinate is distrusted.
pub const MAX_ERROR: f64 = 0.25;

/// Passes over every sample when no earlier coordinates exist.
const COLD_PASSES: usize = 400;
/// Passes when starting from earlier coordinates (a new sample moves things only a little).
const WARM_PASSES: usize = 60;
/// Vivaldi's constants: how fast the error estimate follows, and the largest step as a share of
/// the spring's displacement.
const CE: f64 = 0.25;
const CC: f64 = 0.25;
/// Heights stay at least this (ms): every path pays something at its ends.
const MIN_HEIGHT: f64 = 0.01;

/// One measured round trip between two nodes (clusters, or the hub).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// One end.
    pub a: String,
    /// The other end.
    pub b: String,
    /// The round-trip time.
    pub rtt: Duration,
}

/// A node's place in the fitted space.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetworkCoordinate {
    /// Point in the plane, in milliseconds.
    pub position: [f64; 2],
    /// Height above the plane, in milliseconds: the node's share of every path to it.
    pub height: f64,
    /// Median relative error of the fitted distances to the measured ones on this node's links.
    pub error: f64,
    /// How many measured links the node has.
    pub links: u32,
}

impl NetworkCoordinate {
    /// Placed well enough to estimate from (see the module documentation).
    pub fn is_trusted(&self) -> bool {
        self.links >= MIN_LINKS && self.error <= MAX_ERROR
    }

    /// The distance between two coordinates, in milliseconds.
    fn distance_ms(&self, other: &NetworkCoordinate) -> f64 {
        let dx = self.position[0] - other.position[0];
        let dy = self.position[1] - other.position[1];
        (dx * dx + dy * dy).sqrt() + self.height + other.height
    }

    /// The round trip the coordinates predict between two trusted nodes.
    pub fn estimate_to(&self, other: &NetworkCoordinate) -> Option<Duration> {
        (self.is_trusted() && other.is_trusted())
            .then(|| Duration::from_secs_f64(self.distance_ms(other).max(0.0) / 1000.0))
    }
}

/// Fits coordinates to `samples`, starting from `previous` where a node has one. A pair
/// sampled more than once counts its lowest round trip (queues only ever add delay).
pub fn fit(
    samples: &[Sample],
    previous: &BTreeMap<String, NetworkCoordinate>,
) -> BTreeMap<String, NetworkCoordinate> {
    let mut pairs: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    for s in samples {
        if s.a == s.b || s.rtt.is_zero() {
            continue;
        }
        let key = if s.a < s.b {
            (s.a.as_str(), s.b.as_str())
        } else {
            (s.b.as_str(), s.a.as_str())
        };
        let ms = s.rtt.as_secs_f64() * 1000.0;
        pairs.entry(key).and_modify(|v| *v = v.min(ms)).or_insert(ms);
    }
    let mut names: Vec<&str> = pairs.keys().flat_map(|(a, b)| [*a, *b]).collect();
    names.sort_unstable();
    names.dedup();
    let index = |name: &str| names.binary_search(&name).unwrap_or(0);
    let edges: Vec<(usize, usize, f64)> = pairs
        .iter()
        .map(|(&(a, b), &ms)| (index(a), index(b), ms))
        .collect();

    let warm = names.iter().all(|n| previous.contains_key(*n));
    let mut nodes: Vec<Node> = names
        .iter()
        .enumerate()
        .map(|(i, name)| match previous.get(*name) {
            Some(c) => Node {
                position: c.position,
                height: c.height,
                // A warm start trusts what was fitted, but not blindly.
                error: c.error.clamp(0.05, 1.0),
            },
            None => Node::start(i, names.len()),
        })
        .collect();
    let passes = if warm { WARM_PASSES } else { COLD_PASSES };
    for _ in 0..passes {
        for &(i, j, rtt) in &edges {
            relax(&mut nodes, i, j, rtt);
            relax(&mut nodes, j, i, rtt);
        }
    }

    let mut errors: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for &(i, j, rtt) in &edges {
        let e = (nodes[i].distance_ms(&nodes[j]) - rtt).abs() / rtt;
        errors[i].push(e);
        errors[j].push(e);
    }
    names
        .iter()
        .zip(nodes)
        .zip(errors)
        .map(|((name, node), mut errors)| {
            errors.sort_by(f64::total_cmp);
            let error = errors.get(errors.len() / 2).copied().unwrap_or(1.0);
            (
                (*name).to_owned(),
                NetworkCoordinate {
                    position: node.position,
                    height: node.height,
                    error,
                    links: u32::try_from(errors.len()).unwrap_or(u32::MAX),
                },
            )
        })
        .collect()
}

#[derive(Debug, Clone, Copy)]
struct Node {
    position: [f64; 2],
    height: f64,
    /// Vivaldi's running error estimate: 1 is "knows nothing".
    error: f64,
}

impl Node {
    /// A cold start: nodes on a small circle, so no two start on the same spot and the first
    /// springs have a direction to push along.
    fn start(i: usize, of: usize) -> Node {
        let angle = std::f64::consts::TAU * i as f64 / of.max(1) as f64;
        Node {
            position: [angle.cos(), angle.sin()],
            height: MIN_HEIGHT,
            error: 1.0,
        }
    }

    fn distance_ms(&self, other: &Node) -> f64 {
        let dx = self.position[0] - other.position[0];
        let dy = self.position[1] - other.position[1];
        (dx * dx + dy * dy).sqrt() + self.height + other.height
    }
}

/// One Vivaldi step of node `i` against node `j` at measured round trip `rtt` (ms).
fn relax(nodes: &mut [Node], i: usize, j: usize, rtt: f64) {
    let (me, other) = (nodes[i], nodes[j]);
    let weight = me.error / (me.error + other.error).max(f64::EPSILON);
    let distance = me.distance_ms(&other);
    let sample_error = (distance - rtt).abs() / rtt;
    let error = (sample_error * CE * weight + me.error * (1.0 - CE * weight)).clamp(0.0, 1.0);
    let step = CC * weight * (rtt - distance);
    let dx = me.position[0] - other.position[0];
    let dy = me.position[1] - other.position[1];
    let plane = (dx * dx + dy * dy).sqrt();
    // The unit vector from j to i, heights included (they add: both ends pay theirs).
    let (ux, uy) = if plane > 1e-9 {
        (dx / plane, dy / plane)
    } else {
        // Same spot: a direction fixed by the pair, so the fit stays deterministic.
        let angle = (i * 7 + j * 13) as f64;
        (angle.cos(), angle.sin())
    };
    let total = plane + me.height + other.height;
    let share = if total > 1e-9 { plane / total } else { 0.5 };
    let node = &mut nodes[i];
    node.position[0] += step * ux * share;
    node.position[1] += step * uy * share;
    node.height = (node.height + step * (1.0 - share)).max(MIN_HEIGHT);
    node.error = error;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1000.0)
    }

    /// A deterministic spread of points: a small linear congruential generator.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// `n` nodes in a 200 ms × 200 ms plane with 1–10 ms access links; the true round trips.
    fn world(n: usize, seed: u64) -> (Vec<String>, Vec<Vec<f64>>) {
        let mut rng = Lcg(seed);
        let points: Vec<([f64; 2], f64)> = (0..n)
            .map(|_| ([rng.next() * 200.0, rng.next() * 200.0], 1.0 + rng.next() * 9.0))
            .collect();
        let names = (0..n).map(|i| format!("c{i:02}")).collect();
        let rtt = points
            .iter()
            .map(|(p, h)| {
                points
                    .iter()
                    .map(|(q, g)| ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2)).sqrt() + h + g)
                    .collect()
            })
            .collect();
        (names, rtt)
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    #[test]
    fn estimates_unmeasured_pairs_within_a_fifth_of_the_truth() {
        let (names, rtt) = world(12, 7);
        // Every node measures its 3 successors on a ring: 36 of the 66 pairs, 6 links each.
        let mut samples = Vec::new();
        let mut measured = std::collections::BTreeSet::new();
        for i in 0..names.len() {
            for k in 1..=3 {
                let j = (i + k) % names.len();
                samples.push(Sample {
                    a: names[i].clone(),
                    b: names[j].clone(),
                    rtt: ms(rtt[i][j]),
                });
                measured.insert((i.min(j), i.max(j)));
            }
        }
        let coordinates = fit(&samples, &BTreeMap::new());
        let mut unmeasured = Vec::new();
        for i in 0..names.len() {
            for j in i + 1..names.len() {
                if measured.contains(&(i, j)) {
                    continue;
                }
                let estimate = coordinates[&names[i]]
                    .estimate_to(&coordinates[&names[j]])
                    .unwrap_or_else(|| panic!("no estimate {} - {}: {coordinates:?}", names[i], names[j]));
                let truth = rtt[i][j];
                unmeasured.push((estimate.as_secs_f64() * 1000.0 - truth).abs() / truth);
            }
        }
        assert!(
            unmeasured.len() >= 25,
            "expected most pairs unmeasured, saw {}",
            unmeasured.len()
        );
        let error = median(unmeasured);
        assert!(
            error < 0.2,
            "expected a median relative error under 20 % on unmeasured pairs, saw {error:.3}"
        );
    }

    #[test]
    fn the_same_samples_give_the_same_coordinates_and_a_warm_start_stays_close() {
        let (names, rtt) = world(6, 3);
        let samples: Vec<Sample> = (0..6)
            .flat_map(|i| (i + 1..6).map(move |j| (i, j)))
            .map(|(i, j)| Sample {
                a: names[i].clone(),
                b: names[j].clone(),
                rtt: ms(rtt[i][j]),
            })
            .collect();
        let first = fit(&samples, &BTreeMap::new());
        assert_eq!(
            first,
            fit(&samples, &BTreeMap::new()),
            "expected a deterministic fit"
        );
        let again = fit(&samples, &first);
        for name in &names {
            let (a, b) = (first[name], again[name]);
            assert!(
                a.is_trusted() && b.is_trusted(),
                "expected {name} trusted, saw {a:?} then {b:?}"
            );
            let moved = a.distance_ms(&b) - a.height - b.height;
            assert!(
                moved < 5.0,
                "expected {name} to stay put on a warm start, it moved {moved:.1} ms"
            );
        }
    }

    #[test]
    fn a_node_with_too_few_links_or_a_bad_fit_gets_no_estimate() {
        let samples = vec![
            Sample {
                a: "hub".into(),
                b: "a".into(),
                rtt: ms(10.0),
            },
            Sample {
                a: "hub".into(),
                b: "b".into(),
                rtt: ms(20.0),
            },
            Sample {
                a: "a".into(),
                b: "b".into(),
                rtt: ms(25.0),
            },
        ];
        let c = fit(&samples, &BTreeMap::new());
        assert_eq!(c["a"].links, 2);
        assert_eq!(
            c["a"].estimate_to(&c["b"]),
            None,
            "two links leave a node's place open"
        );
        // A triangle that breaks the triangle inequality badly cannot be fitted.
        let mut bad = samples.clone();
        bad.extend([
            Sample {
                a: "c".into(),
                b: "a".into(),
                rtt: ms(1.0),
            },
            Sample {
                a: "c".into(),
                b: "b".into(),
                rtt: ms(1.0),
            },
            Sample {
                a: "c".into(),
                b: "hub".into(),
                rtt: ms(1.0),
            },
        ]);
        let c = fit(&bad, &BTreeMap::new());
        assert!(
            !c["c"].is_trusted() || !c["a"].is_trusted(),
            "expected distrust of an unfittable triangle: {c:?}"
        );
    }

    #[test]
    fn repeated_samples_count_their_lowest_round_trip() {
        let mut samples = Vec::new();
        for (a, b, rtt) in [
            ("x", "y", 30.0),
            ("y", "x", 10.0),
            ("x", "z", 10.0),
            ("y", "z", 10.0),
        ] {
            samples.push(Sample {
                a: a.into(),
                b: b.into(),
                rtt: ms(rtt),
            });
        }
        let c = fit(&samples, &BTreeMap::new());
        let fitted = c["x"].distance_ms(&c["y"]);
        assert!(
            (fitted - 10.0).abs() < 1.0,
            "expected about 10 ms between x and y, saw {fitted:.2}"
        );
    }
}
