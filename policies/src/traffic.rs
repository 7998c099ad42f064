//! Traffic as a placement input: policy `traffic` divides replicas in proportion to the requests
//! arriving at each cluster, so that requests are served where they arrive.

use std::collections::BTreeMap;
use std::fmt;

/// Requests arriving at each cluster, in whatever unit the caller measured them (requests per
/// second, typically), and whose requests they are.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Traffic {
    /// Traffic by cluster name, finite and positive values only.
    by_cluster: BTreeMap<String, f64>,
    /// Their sum, saturated at `f64::MAX`.
    total: f64,
    /// Whose traffic it is.
    pub scope: TrafficScope,
}

/// Whose requests a [`Traffic`] counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum TrafficScope {
    /// The workload's own requests.
    #[default]
    Workload,
    /// Every request each cluster receives: a stand-in for where users are, used when none
    /// were measured for the workload itself.
    Cluster,
}

/// The parts of the total a [`Traffic::weight`] counts in.
const PARTS: f64 = 1_000_000.0;

impl Traffic {
    /// Traffic of the given scope by cluster. Values that are not finite and positive count as
    /// none and are left out; the total saturates rather than overflow.
    pub fn new(by_cluster: BTreeMap<String, f64>, scope: TrafficScope) -> Self {
        let by_cluster: BTreeMap<String, f64> = by_cluster
            .into_iter()
            .filter(|(_, v)| v.is_finite() && *v > 0.0)
            .collect();
        let total = by_cluster
            .values()
            .fold(0.0, |sum: f64, v| (sum + v).min(f64::MAX));
        Traffic {
            by_cluster,
            total,
            scope,
        }
    }

    /// The clusters traffic arrives at, with their traffic.
    pub fn by_cluster(&self) -> &BTreeMap<String, f64> {
        &self.by_cluster
    }

    /// Traffic arriving at `cluster` (zero when none was measured).
    pub fn of(&self, cluster: &str) -> f64 {
        self.by_cluster.get(cluster).copied().unwrap_or(0.0)
    }

    /// Traffic over every cluster.
    pub fn total(&self) -> f64 {
        self.total
    }

    /// Whether any traffic was measured at all.
    pub fn measured(&self) -> bool {
        self.total > 0.0
    }

    /// `cluster`'s share of the total, from 0 to 1 (zero when nothing was measured).
    pub fn share(&self, cluster: &str) -> f64 {
        if self.total > 0.0 {
            (self.of(cluster) / self.total).min(1.0)
        } else {
            0.0
        }
    }

    /// `replicas` divided among `clusters` in proportion to their traffic by Webster's method
    /// (ties to the earlier), room aside: what each would hold if requests alone decided.
    /// Clusters without traffic get none; every replica goes somewhere when any of `clusters`
    /// has traffic, none otherwise.
    pub fn apportion<'a>(
        &self,
        replicas: u32,
        clusters: impl IntoIterator<Item = &'a str>,
    ) -> BTreeMap<String, u32> {
        let weighted: Vec<(&str, u64)> = clusters
            .into_iter()
            .map(|c| (c, self.weight(c)))
            .filter(|(_, w)| *w > 0)
            .collect();
        let slots = vec![
            crate::divide::Slot {
                base: 0,
                room: u64::MAX,
            };
            weighted.len()
        ];
        let weights: Vec<u64> = weighted.iter().map(|(_, w)| *w).collect();
        let seats = crate::divide::webster(&slots, &weights, u64::from(replicas));
        weighted
            .iter()
            .zip(seats)
            .filter(|(_, n)| *n > 0)
            .map(|((c, _), n)| ((*c).to_owned(), u32::try_from(n).unwrap_or(u32::MAX)))
            .collect()
    }

    /// `cluster`'s weight in the division: millionths of the total, at least 1 where any
    /// traffic arrives, so a cluster with a trickle still counts.
    pub fn weight(&self, cluster: &str) -> u64 {
        let share = self.share(cluster);
        if share <= 0.0 {
            0
        } else {
            // A share is at most 1, so this is at most PARTS.
            ((share * PARTS).round() as u64).max(1)
        }
    }

    /// The share of requests served in the cluster they arrive at when replicas are divided as
    /// `assignment` says and each replica serves an equal part: the sum over clusters of the
    /// lower of the cluster's share of traffic and its share of replicas. `None` when there is
    /// no traffic or no replica.
    pub fn locality(&self, assignment: &BTreeMap<String, u32>) -> Option<f64> {
        let replicas: u64 = assignment.values().map(|&n| u64::from(n)).sum();
        if replicas == 0 || !self.measured() {
            return None;
        }
        Some(
            assignment
                .iter()
                .map(|(cluster, &n)| self.share(cluster).min(n as f64 / replicas as f64))
                .sum(),
        )
    }
}

impl fmt::Display for TrafficScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrafficScope::Workload => "the workload's own traffic",
            TrafficScope::Cluster => "each cluster's traffic (none measured for the workload)",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traffic(values: &[(&str, f64)]) -> Traffic {
        Traffic::new(
            values.iter().map(|(c, v)| ((*c).to_owned(), *v)).collect(),
            TrafficScope::Workload,
        )
    }

    #[test]
    fn weights_are_shares_in_millionths_and_a_trickle_still_counts() {
        let t = traffic(&[
            ("a", 75.0),
            ("b", 25.0),
            ("c", 0.0),
            ("d", 1e-9),
            ("e", f64::NAN),
            ("f", -3.0),
        ]);
        assert_eq!(t.weight("a"), 750_000);
        assert_eq!(t.weight("b"), 250_000);
        assert_eq!(t.weight("c"), 0, "no traffic, no weight");
        assert_eq!(t.weight("d"), 1, "a trickle weighs at least 1");
        assert_eq!(t.weight("e"), 0, "NaN counts as none");
        assert_eq!(t.weight("f"), 0, "a negative value counts as none");
        assert_eq!(t.weight("absent"), 0);
        assert!(t.measured());
        assert!(!traffic(&[("a", 0.0), ("b", f64::INFINITY)]).measured());
    }

    #[test]
    fn locality_is_the_overlap_of_traffic_and_replica_shares() {
        let t = traffic(&[("a", 60.0), ("b", 40.0)]);
        let at = |pairs: &[(&str, u32)]| -> BTreeMap<String, u32> {
            pairs.iter().map(|(c, n)| ((*c).to_owned(), *n)).collect()
        };
        let close = |x: Option<f64>, want: f64| {
            let x = x.expect("a locality");
            assert!((x - want).abs() < 1e-9, "expected {want}, saw {x}");
        };
        close(t.locality(&at(&[("a", 3), ("b", 2)])), 1.0);
        close(t.locality(&at(&[("a", 5)])), 0.6);
        close(t.locality(&at(&[("c", 5)])), 0.0);
        close(t.locality(&at(&[("a", 1), ("b", 1), ("c", 2)])), 0.5);
        assert_eq!(t.locality(&at(&[])), None, "no replica");
        assert_eq!(traffic(&[]).locality(&at(&[("a", 1)])), None, "no traffic");
    }

    #[test]
    fn huge_values_saturate_rather_than_make_every_share_zero() {
        let t = traffic(&[("a", f64::MAX), ("b", f64::MAX), ("c", 1.0)]);
        assert!(t.total().is_finite());
        assert!(t.weight("a") > 0 && t.weight("b") > 0, "{t:?}");
        assert!(t.measured());
    }

    #[test]
    fn apportioning_follows_the_traffic_and_ignores_clusters_without_any() {
        let t = traffic(&[("a", 60.0), ("b", 40.0), ("c", 0.0)]);
        let seats = t.apportion(5, ["a", "b", "c", "d"]);
        assert_eq!(seats, BTreeMap::from([("a".to_owned(), 3), ("b".to_owned(), 2)]));
        assert_eq!(
            t.apportion(5, ["b"]),
            BTreeMap::from([("b".to_owned(), 5)]),
            "only b allowed"
        );
        assert!(t.apportion(5, ["c", "d"]).is_empty(), "no traffic there");
        let tie = traffic(&[("a", 1.0), ("b", 1.0)]);
        assert_eq!(
            tie.apportion(1, ["a", "b"]),
            BTreeMap::from([("a".to_owned(), 1)]),
            "ties to the earlier"
        );
    }
}
