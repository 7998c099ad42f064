//! How near a cluster is to an origin: latency (measured, else estimated from network
//! coordinates), then distance on Earth, then region/zone labels.

use std::cmp::Ordering;
use std::fmt;
use std::time::Duration;

use crate::fleet::{Cluster, Coordinates, Fleet};

/// Where "near" is measured from (`spec.placement.proximity.origin`).
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// A cluster of the fleet, by name: its latency samples, coordinates and labels count.
    Cluster(String),
    /// A region, optionally a zone in it, matched against the clusters' region/zone labels.
    Region {
        /// Value of the region label.
        region: String,
        /// Value of the zone label, if a zone is preferred.
        zone: Option<String>,
    },
    /// A point on Earth.
    Coordinates(Coordinates),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Cluster(name) => write!(f, "cluster {name}"),
            Origin::Region { region, zone: None } => write!(f, "region {region}"),
            Origin::Region {
                region,
                zone: Some(zone),
            } => write!(f, "region {region}, zone {zone}"),
            Origin::Coordinates(c) => write!(f, "({:.4}, {:.4})", c.latitude, c.longitude),
        }
    }
}

/// How much of the origin's topology a cluster shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Topology {
    /// Neither region nor zone match.
    Elsewhere,
    /// Same region label.
    SameRegion,
    /// Same zone label.
    SameZone,
}

/// A cluster's nearness to an origin. Orders nearest first: a known latency beats none and a
/// lower one beats a higher one, whether measured or estimated (an estimate of 5 ms is nearer
/// than a measured 80 ms; in the same [`latency_step`] the measured one wins); then a known
/// distance, shorter first; then shared topology; then the exact latency. Latency comes first
/// because it is what users feel; labels only break what is left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Proximity {
    /// Measured latency between origin and cluster.
    pub latency: Option<Duration>,
    /// Latency estimated from network coordinates, when none was measured.
    pub estimated_latency: Option<Duration>,
    /// Great-circle distance in kilometres, when both have coordinates.
    pub distance_km: Option<f64>,
    /// Region/zone label match.
    pub topology: Topology,
}

impl Proximity {
    /// Nearest first, as documented on the type.
    pub fn nearness_cmp(&self, other: &Proximity) -> Ordering {
        fn known_first<T>(a: Option<T>, b: Option<T>, cmp: impl Fn(&T, &T) -> Ordering) -> Ordering {
            match (a, b) {
                (Some(a), Some(b)) => cmp(&a, &b),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            }
        }
        let latency = |p: &Proximity| {
            p.latency
                .map(|l| (latency_step(l), false))
                .or(p.estimated_latency.map(|l| (latency_step(l), true)))
        };
        known_first(latency(self), latency(other), |a, b| a.cmp(b))
            .then_with(|| known_first(self.distance_km, other.distance_km, f64::total_cmp))
            .then_with(|| other.topology.cmp(&self.topology))
            .then_with(|| {
                let exact = |p: &Proximity| p.latency.or(p.estimated_latency);
                known_first(exact(self), exact(other), Duration::cmp)
            })
    }
}

/// The step a latency falls in: whole milliseconds under 10 ms, steps of 10 % above. Latencies
/// in the same step are the same to users, and probes jitter by fractions of a millisecond:
/// within a step, distance and zones decide, and only then the exact value.
pub fn latency_step(latency: Duration) -> u32 {
    let ms = latency.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        ms as u32
    } else {
        10 + ((ms / 10.0).ln() / 1.1_f64.ln()) as u32
    }
}

impl fmt::Display for Proximity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.latency == Some(Duration::ZERO) && self.distance_km == Some(0.0) {
            return f.write_str("the origin itself");
        }
        let mut parts = Vec::new();
        if let Some(latency) = self.latency {
            parts.push(format!("{:.1} ms", latency.as_secs_f64() * 1000.0));
        } else if let Some(latency) = self.estimated_latency {
            parts.push(format!("~{:.1} ms estimated", latency.as_secs_f64() * 1000.0));
        }
        if let Some(km) = self.distance_km {
            parts.push(format!("{km:.0} km"));
        }
        match self.topology {
            Topology::SameZone => parts.push("same zone".to_owned()),
            Topology::SameRegion => parts.push("same region".to_owned()),
            Topology::Elsewhere if parts.is_empty() => parts.push("no proximity data".to_owned()),
            Topology::Elsewhere => {}
        }
        f.write_str(&parts.join(", "))
    }
}

/// The point proximity is measured from: an origin, or a cluster already holding replicas.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Point<'a> {
    name: Option<&'a str>,
    cluster: Option<&'a Cluster>,
    coordinates: Option<Coordinates>,
    region: Option<&'a str>,
    zone: Option<&'a str>,
}

impl<'a> Point<'a> {
    pub(crate) fn of_cluster(cluster: &'a Cluster) -> Self {
        Point {
            name: Some(&cluster.name),
            cluster: Some(cluster),
            coordinates: cluster.coordinates,
            region: cluster.region(),
            zone: cluster.zone(),
        }
    }

    pub(crate) fn of_origin(origin: &'a Origin, fleet: &'a Fleet) -> Self {
        match origin {
            Origin::Cluster(name) => match fleet.get(name) {
                Some(cluster) => Point::of_cluster(cluster),
                // Unknown to the fleet, it may still appear in other clusters' latency samples.
                None => Point {
                    name: Some(name),
                    cluster: None,
                    coordinates: None,
                    region: None,
                    zone: None,
                },
            },
            Origin::Region { region, zone } => Point {
                name: None,
                cluster: None,
                coordinates: None,
                region: Some(region),
                zone: zone.as_deref(),
            },
            Origin::Coordinates(c) => Point {
                name: None,
                cluster: None,
                coordinates: Some(*c),
                region: None,
                zone: None,
            },
        }
    }

    pub(crate) fn proximity(&self, to: &Cluster) -> Proximity {
        if self.name == Some(to.name.as_str()) {
            return Proximity {
                latency: Some(Duration::ZERO),
                estimated_latency: None,
                distance_km: Some(0.0),
                topology: Topology::SameZone,
            };
        }
        let latency = match (self.cluster, self.name) {
            (Some(from), _) => from.latency_to(to),
            (None, Some(name)) => to.latencies.get(name).copied(),
            (None, None) => None,
        };
        let estimated_latency = match (latency, self.cluster) {
            (None, Some(from)) => from.estimated_latency_to(to),
            _ => None,
        };
        let distance_km = self
            .coordinates
            .zip(to.coordinates)
            .map(|(a, b)| a.distance_km(&b));
        let same = |a: Option<&str>, b: Option<&str>| a.is_some() && a == b;
        let topology = if same(self.zone, to.zone()) {
            Topology::SameZone
        } else if same(self.region, to.region()) {
            Topology::SameRegion
        } else {
            Topology::Elsewhere
        };
        Proximity {
            latency,
            estimated_latency,
            distance_km,
            topology,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(ms: f64, topology: Topology) -> Proximity {
        Proximity {
            latency: Some(Duration::from_secs_f64(ms / 1000.0)),
            estimated_latency: None,
            distance_km: None,
            topology,
        }
    }

    #[test]
    fn latency_steps_are_whole_milliseconds_then_tenths() {
        let step = |ms: f64| latency_step(Duration::from_secs_f64(ms / 1000.0));
        assert_eq!(step(0.3), step(0.8), "sub-millisecond jitter is one step");
        assert!(step(0.8) < step(1.2));
        assert!(step(9.9) < step(10.0));
        assert_eq!(step(60.0), step(61.0), "1 ms in 60 is jitter");
        assert!(step(60.0) < step(67.0), "10 % more is a step further");
        let mut last = 0;
        for tenth in 0..20_000 {
            let s = step(f64::from(tenth) / 10.0);
            assert!(s >= last, "steps never go down: {s} after {last} at {tenth}");
            last = s;
        }
    }

    #[test]
    fn within_a_step_zones_decide_and_only_then_the_exact_latency() {
        let near_elsewhere = measured(0.3, Topology::Elsewhere);
        let same_zone = measured(0.8, Topology::SameZone);
        assert_eq!(same_zone.nearness_cmp(&near_elsewhere), Ordering::Less);
        let a = measured(0.3, Topology::SameZone);
        assert_eq!(a.nearness_cmp(&same_zone), Ordering::Less);
        let far = measured(5.0, Topology::SameZone);
        assert_eq!(
            near_elsewhere.nearness_cmp(&far),
            Ordering::Less,
            "5 ms is a step further"
        );
    }
}
