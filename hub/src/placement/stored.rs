//! What the store keeps of a decision, as one type: written by [`super::plan`], read back by the
//! next plan of the same workload, by the index (the ledger's bookings) and by the REST API.
//!
//! The JSON shape is the one placements have always been stored in, so rows written by earlier
//! hubs read back unchanged. The store hashes it without the explanations and the move under way
//! ([`crate::store`]'s `NOT_DECIDED`), so a re-explained decision does not count as a new one.

use std::collections::{BTreeMap, BTreeSet};

use nave_policies::{Decision, Demand};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::warn;

/// A decision as stored. Unknown or missing members read as their defaults, so an older or newer
/// hub's row never fails to load.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct StoredDecision {
    /// The policy's name (`worst-fit`, `best-fit`, `proximity`, `spread`, `everywhere`, `traffic`).
    pub strategy: String,
    /// Replicas asked for.
    pub replicas: u32,
    /// Replicas per cluster.
    pub assignment: BTreeMap<String, u32>,
    /// Replicas that fit nowhere.
    pub unplaced: u32,
    /// What one replica asks for, so later decisions reserve room for replicas not running yet.
    pub demand: StoredDemand,
    /// The whole explanation: a summary line, one line per cluster named ([`Decision::named`]),
    /// a line counting the others, then notes.
    pub explanation: String,
    /// Each cluster's line of the explanation.
    pub clusters: BTreeMap<String, String>,
    /// Clusters failover moved replicas away from that failback has not returned to yet.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub failed_over_from: BTreeSet<String>,
    /// When this workload's replicas last moved (rescheduling or burst retraction), for the
    /// cooldown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_at: Option<jiff::Timestamp>,
    /// The move under way, see [`Moving`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moving: Option<Moving>,
    /// The value of the workload's `nave.dev/rebalance` annotation last acted on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebalanced: Option<String>,
    /// A StatefulSet's first ordinal (`spec.ordinals.start`) in each cluster that runs it or
    /// still stops some of it (see [`super::ordinals`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ordinals: BTreeMap<String, u32>,
    /// A StatefulSet's ordinals each cluster gave up and has not yet reported stopped: no other
    /// cluster runs them until it does.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub releasing: BTreeMap<String, Releasing>,
}

/// Ordinals `from..to` a cluster gave up (scale-down, or all of them) and may still run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Releasing {
    /// The first ordinal given up.
    pub from: u32,
    /// One past the last.
    pub to: u32,
    /// The work-set revision its cluster's agent had applied when they were given up: only a
    /// report of a newer one says they stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
}

/// The per-replica resources of a stored decision.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct StoredDemand {
    /// CPU in millicores.
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
}

/// A move under way: old replicas kept where they ran until the new ones are ready
/// (make-before-break, see [`super::moves`]).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Moving {
    /// Old replicas kept per cluster, on top of the assignment.
    pub held: BTreeMap<String, u32>,
    /// The clusters that gained replicas, with the replicas they are to run.
    pub to: BTreeMap<String, u32>,
    /// When the move started.
    pub since: jiff::Timestamp,
}

impl StoredDecision {
    /// What is stored of `decision` for replicas that each need `demand`, without its prose
    /// ([`StoredDecision::explain`] adds it when the decision is written); failover and moves add
    /// their own members afterwards.
    pub fn of(decision: &Decision, demand: &Demand) -> StoredDecision {
        StoredDecision {
            strategy: decision.strategy.name().to_owned(),
            replicas: decision.replicas,
            assignment: decision.assignment.clone(),
            unplaced: decision.unplaced,
            demand: StoredDemand {
                cpu_millis: demand.cpu_millis,
                memory_bytes: demand.memory_bytes,
            },
            explanation: String::new(),
            clusters: BTreeMap::new(),
            failed_over_from: BTreeSet::new(),
            moved_at: None,
            moving: None,
            rebalanced: None,
            ordinals: BTreeMap::new(),
            releasing: BTreeMap::new(),
        }
    }

    /// Adds `decision`'s explanation, in words: most plans decide what is stored already and are
    /// never written, so the words are built only for those that are. A line for each cluster
    /// the explanation names ([`Decision::named`]: those with replicas and the most relevant
    /// others), so that what a placement keeps does not grow with the fleet.
    pub fn explain(&mut self, decision: &Decision) {
        self.explanation = decision.to_string();
        self.clusters = decision
            .named()
            .clusters
            .iter()
            .map(|c| (c.cluster.to_string(), c.to_string()))
            .collect();
    }

    /// Whether `self` and `other` decide the same: equal but for their prose (`explanation` and
    /// `clusters`), as [`crate::store::same_but_prose`] compares their JSON.
    pub fn same_but_prose(&self, other: &StoredDecision) -> bool {
        // Destructured, so a new member is compared or left out on purpose.
        let StoredDecision {
            strategy,
            replicas,
            assignment,
            unplaced,
            demand,
            explanation: _,
            clusters: _,
            failed_over_from,
            moved_at,
            moving,
            rebalanced,
            ordinals,
            releasing,
        } = self;
        *strategy == other.strategy
            && *replicas == other.replicas
            && *assignment == other.assignment
            && *unplaced == other.unplaced
            && *demand == other.demand
            && *failed_over_from == other.failed_over_from
            && *moved_at == other.moved_at
            && *moving == other.moving
            && *rebalanced == other.rebalanced
            && *ordinals == other.ordinals
            && *releasing == other.releasing
    }

    /// Reads a stored row. A row that does not parse (written by hand, or damaged) reads as an
    /// empty decision, logged: the next plan then starts from scratch rather than failing forever.
    pub fn from_json(value: &Value) -> StoredDecision {
        match StoredDecision::deserialize(value) {
            Ok(decision) => decision,
            Err(error) => {
                warn!(error = %error, "a stored decision does not parse; reading it as empty");
                StoredDecision::default()
            }
        }
    }

    /// The JSON the store keeps.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// The per-replica demand (resources only).
    pub fn demand(&self) -> Demand {
        Demand::new(self.demand.cpu_millis, self.demand.memory_bytes)
    }

    /// The replicas dispatched per cluster: the assignment, plus the old replicas a move keeps
    /// until the new ones run.
    pub fn dispatched(&self) -> BTreeMap<String, u32> {
        let mut replicas = self.assignment.clone();
        for (cluster, held) in self.moving.iter().flat_map(|m| &m.held) {
            *replicas.entry(cluster.clone()).or_default() += held;
        }
        replicas
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    /// A row as earlier hubs wrote it, with every member set.
    pub(crate) fn full_row() -> Value {
        json!({
            "strategy": "worst-fit",
            "replicas": 4,
            "assignment": {"eu-1": 3, "us-1": 1},
            "unplaced": 0,
            "demand": {"cpuMillis": 250, "memoryBytes": 1024},
            "explanation": "4 of 4 placed",
            "clusters": {"eu-1": "eu-1: 3", "us-1": "us-1: 1"},
            "failedOverFrom": ["ap-1"],
            "movedAt": "2026-01-01T00:00:00Z",
            "moving": {"held": {"ap-1": 1}, "to": {"us-1": 1}, "since": "2026-01-01T00:00:00Z"},
        })
    }

    #[test]
    fn rows_of_earlier_hubs_read_back_and_write_the_same_json() {
        let row = full_row();
        let stored = StoredDecision::from_json(&row);
        assert_eq!(
            stored.assignment,
            BTreeMap::from([("eu-1".into(), 3), ("us-1".into(), 1)])
        );
        assert_eq!(stored.demand(), Demand::new(250, 1024));
        assert_eq!(
            stored.dispatched(),
            BTreeMap::from([("ap-1".into(), 1), ("eu-1".into(), 3), ("us-1".into(), 1)]),
            "a move's held replicas are dispatched on top of the assignment"
        );
        assert_eq!(stored.to_json(), row, "what is read is written back unchanged");
    }

    #[test]
    fn same_but_prose_agrees_with_the_stores_comparison_of_the_json() {
        let base = StoredDecision::from_json(&full_row());
        type Change = fn(&mut StoredDecision);
        let variants: Vec<(&str, Change)> = vec![
            ("prose only", |d| {
                d.explanation = "re-explained".into();
                d.clusters.clear();
            }),
            ("strategy", |d| d.strategy = "spread".into()),
            ("replicas", |d| d.replicas = 5),
            ("assignment", |d| {
                d.assignment.insert("eu-1".into(), 2);
            }),
            ("unplaced", |d| d.unplaced = 1),
            ("demand", |d| d.demand.cpu_millis = 500),
            ("failed over from", |d| d.failed_over_from.clear()),
            ("moved at", |d| d.moved_at = None),
            ("moving", |d| d.moving = None),
            ("rebalanced", |d| {
                d.rebalanced = Some("2026-01-01T00:00:00Z".into())
            }),
            ("ordinals", |d| {
                d.ordinals.insert("eu-1".into(), 3);
            }),
            ("releasing", |d| {
                d.releasing.insert(
                    "eu-1".into(),
                    Releasing {
                        from: 3,
                        to: 5,
                        after: None,
                    },
                );
            }),
        ];
        for (what, change) in variants {
            let mut other = base.clone();
            change(&mut other);
            assert_eq!(
                base.same_but_prose(&other),
                crate::store::same_but_prose(&base.to_json(), &other.to_json()),
                "a change of {what}: the typed and the JSON comparison disagree"
            );
            assert_eq!(
                base.same_but_prose(&other),
                what == "prose only",
                "a change of {what}"
            );
        }
    }

    #[test]
    fn optional_members_are_left_out_when_empty_and_a_damaged_row_reads_as_empty() {
        let plain = StoredDecision::default().to_json();
        for key in ["failedOverFrom", "movedAt", "moving", "ordinals", "releasing"] {
            assert!(plain.get(key).is_none(), "{key} is left out when empty: {plain}");
        }
        assert_eq!(
            StoredDecision::from_json(&json!({"assignment": "not a map"})),
            StoredDecision::default()
        );
        assert_eq!(
            StoredDecision::from_json(&json!({"assignment": {"eu-1": 2}, "future": true})).assignment,
            BTreeMap::from([("eu-1".into(), 2)]),
            "unknown members are ignored"
        );
    }
}
