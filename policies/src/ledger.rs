//! Replicas assigned but not yet counted in their cluster's reported requests.

use std::collections::BTreeMap;

use crate::decision::Decision;
use crate::demand::Demand;

/// Replicas of one workload assigned to a cluster whose pods are not yet in the nodes' requested
/// amounts (not yet created, or created but not yet bound to a node).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reservation {
    /// The workload, in whatever form the caller keys workloads (`namespace/name`).
    pub workload: String,
    /// Per-replica demand, so the room it takes lands on nodes it can run on.
    pub demand: Demand,
    /// Replicas reserved.
    pub replicas: u32,
}

/// Reservations per cluster: room that the latest reports still show as free but that earlier
/// decisions have already given away. Without it, two decisions in a row both count the same
/// free room.
///
/// The engine never changes a ledger; the caller records each decision
/// ([`Ledger::record`]) and releases reservations as agents report the pods
/// ([`Ledger::release`]), or rebuilds the ledger from "assigned minus reported" each time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    by_cluster: BTreeMap<String, Vec<Reservation>>,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Ledger::default()
    }

    /// Reserves room for `replicas` of `workload` in `cluster`.
    pub fn reserve(&mut self, cluster: &str, workload: &str, demand: &Demand, replicas: u32) {
        if replicas == 0 {
            return;
        }
        let entries = self.by_cluster.entry(cluster.to_owned()).or_default();
        match entries
            .iter_mut()
            .find(|r| r.workload == workload && r.demand == *demand)
        {
            Some(r) => r.replicas = r.replicas.saturating_add(replicas),
            // Kept in workload order, so a ledger kept as reservations come and go equals one
            // built from scratch, whatever the order they came in.
            None => {
                let at = entries.partition_point(|r| r.workload.as_str() <= workload);
                entries.insert(
                    at,
                    Reservation {
                        workload: workload.to_owned(),
                        demand: demand.clone(),
                        replicas,
                    },
                );
            }
        }
    }

    /// Releases up to `replicas` of `workload`'s reservations in `cluster` (their pods are now
    /// reported, or they were removed). Returns how many were released.
    pub fn release(&mut self, cluster: &str, workload: &str, replicas: u32) -> u32 {
        let Some(entries) = self.by_cluster.get_mut(cluster) else {
            return 0;
        };
        let mut left = replicas;
        for r in entries.iter_mut().filter(|r| r.workload == workload) {
            let take = r.replicas.min(left);
            r.replicas -= take;
            left -= take;
        }
        entries.retain(|r| r.replicas > 0);
        if entries.is_empty() {
            self.by_cluster.remove(cluster);
        }
        replicas - left
    }

    /// Drops every reservation of `workload` (it was deleted, or is being recomputed).
    pub fn release_workload(&mut self, workload: &str) {
        self.by_cluster.retain(|_, entries| {
            entries.retain(|r| r.workload != workload);
            !entries.is_empty()
        });
    }

    /// Reserves the replicas `decision` added and releases those it removed.
    pub fn record(&mut self, workload: &str, demand: &Demand, decision: &Decision) {
        for cluster in &decision.clusters {
            self.reserve(&cluster.cluster, workload, demand, cluster.added());
            self.release(&cluster.cluster, workload, cluster.removed());
        }
    }

    /// Reservations in `cluster`.
    pub fn reservations(&self, cluster: &str) -> &[Reservation] {
        self.by_cluster.get(cluster).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Reservations per cluster, in the clusters' name order (a decision walks them beside the
    /// fleet instead of searching them once per cluster).
    pub(crate) fn by_cluster(&self) -> impl Iterator<Item = (&str, &[Reservation])> {
        self.by_cluster.iter().map(|(c, r)| (c.as_str(), r.as_slice()))
    }

    /// Total replicas reserved in `cluster`, across workloads.
    pub fn reserved_replicas(&self, cluster: &str) -> u64 {
        self.reservations(cluster)
            .iter()
            .map(|r| u64::from(r.replicas))
            .sum()
    }

    /// Whether nothing is reserved anywhere.
    pub fn is_empty(&self) -> bool {
        self.by_cluster.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_merges_and_release_takes_back() {
        let demand = Demand::new(100, 100);
        let mut ledger = Ledger::new();
        ledger.reserve("eu-1", "ns/a", &demand, 3);
        ledger.reserve("eu-1", "ns/a", &demand, 2);
        ledger.reserve("eu-1", "ns/b", &demand, 1);
        assert_eq!(
            ledger.reservations("eu-1").len(),
            2,
            "same workload and demand should merge"
        );
        assert_eq!(ledger.reserved_replicas("eu-1"), 6);
        assert_eq!(
            ledger.release("eu-1", "ns/a", 10),
            5,
            "only 5 of ns/a were reserved"
        );
        ledger.release_workload("ns/b");
        assert!(ledger.is_empty(), "expected nothing left, seen {ledger:?}");
        assert_eq!(ledger.release("nowhere", "ns/a", 1), 0);
    }
}
