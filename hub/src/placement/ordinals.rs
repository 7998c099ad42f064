//! A StatefulSet divided across clusters: each cluster's StatefulSet runs its own range of the
//! fleet's ordinals (`spec.ordinals.start` and its replicas), so `db-0` exists in one cluster only.
//!
//! ```text
//!   ordinals  0 1 | 2 3 4 | 5 6        a StatefulSet of 7 over three clusters
//!   cluster    eu  |  us   |  ap       (ranges laid out in the order they were first given)
//!   scale to 4: ap's 5-6, then us's 4 go (the highest ordinals first, as a StatefulSet does)
//!   scale to 8: us grows first (it holds the top now), then clusters without replicas
//! ```
//!
//! The engine keeps the ranges contiguous ([`nave_policies::Request::ordinal_order`]): it removes
//! replicas from the cluster holding the highest ordinals and adds them only there or to clusters
//! holding none. [`lay_out`] then gives each cluster its range and guards the one rule that
//! matters: **an ordinal never runs in two clusters at once**. Ordinals a cluster gives up are
//! `releasing` until its agent reports its StatefulSet scaled down with those pods gone (the
//! cluster keeps its StatefulSet, at zero replicas if need be, until then); no other cluster is
//! given them before. A cluster that stops reporting keeps its ordinals for as long as it is in
//! the fleet, so a StatefulSet never fails over on its own: its volumes are in that cluster, and
//! the cluster may only be cut off, its pods still running. Removing the cluster from the fleet
//! is the admin's word that they are gone.

use std::collections::BTreeMap;

use nave_api::wire::{StatusReport, WorkloadRef};
use nave_policies::Note;

use super::reports::deployment_of;
use super::stored::Releasing;

/// What the layout decided, beside the engine's counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Layout {
    /// Replicas per cluster, after holding back those whose ordinals are still releasing.
    pub assignment: BTreeMap<String, u32>,
    /// The first ordinal of every cluster that runs the StatefulSet or still stops some of it.
    pub starts: BTreeMap<String, u32>,
    /// Ordinals given up and not yet reported stopped, by cluster.
    pub releasing: BTreeMap<String, Releasing>,
    /// Replicas held back, and why (one note per cluster waited for).
    pub waiting: Vec<Note>,
}

impl Layout {
    /// Replicas held back until ordinals are released.
    pub fn held_back(&self) -> u32 {
        self.waiting.iter().map(Note::waiting_replicas).sum()
    }
}

/// The clusters in the order of their ranges, lowest first: what the engine keeps contiguous.
pub fn order(starts: &BTreeMap<String, u32>) -> Vec<String> {
    let mut clusters: Vec<(&String, &u32)> = starts.iter().collect();
    clusters.sort_by_key(|(name, start)| (**start, (*name).clone()));
    clusters.into_iter().map(|(name, _)| name.clone()).collect()
}

/// Whether `cluster`'s agent reports the workload's StatefulSet at `replicas` with no pod beyond
/// them: its controller saw that spec and counts no more pods than that.
pub fn stopped_beyond(report: Option<&StatusReport>, workload: &WorkloadRef, replicas: u32) -> bool {
    deployment_of(report, workload).is_some_and(|object| {
        object.kind == "StatefulSet"
            && object.observed_current == Some(true)
            && object.replicas == i32::try_from(replicas).ok()
            && object
                .all_replicas
                .is_some_and(|n| u32::try_from(n).is_ok_and(|n| n <= replicas))
    })
}

/// Lays out the ranges for the engine's `wanted` counts, from the previous `starts`, `counts`
/// and `releasing`. `stopped(cluster, replicas)` says whether a cluster reports running no more
/// than `replicas`; `in_fleet(cluster)` whether it is still a member (a removed cluster releases
/// everything).
pub fn lay_out(
    starts: &BTreeMap<String, u32>,
    counts: &BTreeMap<String, u32>,
    releasing: &BTreeMap<String, Releasing>,
    wanted: &BTreeMap<String, u32>,
    stopped: impl Fn(&str, u32) -> bool,
    in_fleet: impl Fn(&str) -> bool,
) -> Layout {
    let mut layout = Layout::default();
    let count_of = |map: &BTreeMap<String, u32>, c: &str| map.get(c).copied().unwrap_or(0);
    // What each cluster gives up now joins what it gave up before.
    let mut gone: BTreeMap<String, Releasing> = releasing.clone();
    for (cluster, &start) in starts {
        let (was, now) = (count_of(counts, cluster), count_of(wanted, cluster));
        if now < was {
            let range = Releasing {
                from: start + now,
                to: start + was,
            };
            gone.entry(cluster.clone())
                .and_modify(|r| {
                    r.from = r.from.min(range.from);
                    r.to = r.to.max(range.to);
                })
                .or_insert(range);
        }
    }
    // Kept clusters keep their start; the one at the top may grow; new ones follow it.
    let order = order(starts);
    let top = order.iter().rev().find(|c| count_of(counts, c) > 0).cloned();
    let mut next = 0;
    // What was given up before and is reported stopped now (at the count the cluster runs: a
    // cluster still releasing gains nothing meanwhile), or whose cluster left the fleet, is
    // released: it no longer holds anyone back.
    gone.retain(|cluster, _| {
        let runs = count_of(wanted, cluster).min(count_of(counts, cluster));
        in_fleet(cluster) && !stopped(cluster, runs)
    });
    let place =
        |cluster: &str, start: u32, want: u32, layout: &mut Layout, gone: &BTreeMap<String, Releasing>| {
            // Up to the first ordinal another cluster still releases in the way.
            let blocker = gone
                .iter()
                .filter(|(other, r)| other.as_str() != cluster && r.to > start && r.from < start + want)
                .min_by_key(|(_, r)| r.from);
            let allowed = blocker.map_or(want, |(_, r)| r.from.saturating_sub(start).min(want));
            if let Some((other, r)) = blocker {
                layout.waiting.push(Note::OrdinalsReleasing {
                    cluster: other.clone(),
                    ordinals: (r.from.max(start), r.to.min(start + want) - 1),
                    replicas: want - allowed,
                });
            }
            if allowed > 0 {
                layout.assignment.insert(cluster.to_owned(), allowed);
                layout.starts.insert(cluster.to_owned(), start);
            }
            start + allowed
        };
    for cluster in &order {
        let want = count_of(wanted, cluster);
        if want == 0 || count_of(counts, cluster) == 0 {
            // Nothing kept here: a newcomer, below, if it is given replicas again.
            continue;
        }
        let start = starts[cluster];
        let end = if Some(cluster) == top.as_ref() {
            place(cluster, start, want, &mut layout, &gone)
        } else {
            // Not the top: the engine never grows it, so its range stays within what it had.
            layout.assignment.insert(cluster.clone(), want);
            layout.starts.insert(cluster.clone(), start);
            start + want
        };
        next = next.max(end);
    }
    // New clusters get ranges past the kept ones, in name order.
    let newcomers: Vec<(&String, u32)> = wanted
        .iter()
        .filter(|(c, n)| **n > 0 && !layout.starts.contains_key(*c))
        .map(|(c, n)| (c, *n))
        .collect();
    for (cluster, want) in newcomers {
        if let Some(r) = gone.get(cluster) {
            // Still stopping all it ran: it starts a new range once it has.
            layout.waiting.push(Note::OrdinalsReleasing {
                cluster: cluster.clone(),
                ordinals: (r.from, r.to - 1),
                replicas: want,
            });
            continue;
        }
        // Placed at the top; held back, with a note, where ordinals are still releasing there.
        next = place(cluster, next, want, &mut layout, &gone);
    }
    // What is still given up and not reported stopped: its cluster keeps its StatefulSet, at
    // its new count (zero, if need be), until it is.
    for (cluster, range) in gone {
        let keeps = layout.assignment.get(&cluster).copied().unwrap_or(0);
        let start = layout
            .starts
            .get(&cluster)
            .copied()
            .or_else(|| starts.get(&cluster).copied());
        // A cluster that grew again took its own ordinals back: nothing of those to release.
        let range = Releasing {
            from: range.from.max(start.unwrap_or(0) + keeps),
            to: range.to,
        };
        if range.from >= range.to {
            continue;
        }
        if let Some(start) = start {
            layout.starts.insert(cluster.clone(), start);
        }
        layout.releasing.insert(cluster, range);
    }
    layout
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
        pairs.iter().map(|(c, n)| ((*c).to_owned(), *n)).collect()
    }

    fn never(_: &str, _: u32) -> bool {
        false
    }

    fn member(_: &str) -> bool {
        true
    }

    #[test]
    fn a_first_layout_gives_clusters_consecutive_ranges_in_name_order() {
        let layout = lay_out(
            &BTreeMap::new(),
            &BTreeMap::new(),
            &BTreeMap::new(),
            &map(&[("us", 2), ("eu", 2), ("ap", 1)]),
            never,
            member,
        );
        assert_eq!(layout.starts, map(&[("ap", 0), ("eu", 1), ("us", 3)]));
        assert_eq!(layout.assignment, map(&[("ap", 1), ("eu", 2), ("us", 2)]));
        assert!(
            layout.releasing.is_empty() && layout.waiting.is_empty(),
            "{layout:?}"
        );
    }

    #[test]
    fn a_scale_down_releases_the_top_ordinals_until_the_cluster_reports_them_stopped() {
        let starts = map(&[("ap", 0), ("eu", 1), ("us", 3)]);
        let counts = map(&[("ap", 1), ("eu", 2), ("us", 2)]);
        // 5 -> 2: us's 3-4 and eu's 2 go.
        let wanted = map(&[("ap", 1), ("eu", 1)]);
        let layout = lay_out(&starts, &counts, &BTreeMap::new(), &wanted, never, member);
        assert_eq!(layout.assignment, wanted);
        assert_eq!(
            layout.starts,
            map(&[("ap", 0), ("eu", 1), ("us", 3)]),
            "us keeps its StatefulSet (at zero) while it releases"
        );
        assert_eq!(
            layout.releasing,
            BTreeMap::from([
                ("eu".to_owned(), Releasing { from: 2, to: 3 }),
                ("us".to_owned(), Releasing { from: 3, to: 5 }),
            ])
        );
        // Reported stopped: released, and us's StatefulSet goes.
        let stopped = |c: &str, n: u32| (c == "us" && n == 0) || (c == "eu" && n == 1);
        let after = lay_out(
            &layout.starts,
            &layout.assignment,
            &layout.releasing,
            &wanted,
            stopped,
            member,
        );
        assert!(after.releasing.is_empty(), "{after:?}");
        assert_eq!(after.starts, map(&[("ap", 0), ("eu", 1)]));
    }

    #[test]
    fn ordinals_another_cluster_still_runs_are_not_given_until_it_stops_them() {
        // eu 0-1, us 2-4; 5 -> 2 -> 5 before us reports its pods gone.
        let starts = map(&[("eu", 0), ("us", 2)]);
        let releasing = BTreeMap::from([("us".to_owned(), Releasing { from: 2, to: 5 })]);
        let counts = map(&[("eu", 2)]);
        // The engine grows eu (the top now): it may not take 2-4 yet.
        let wanted = map(&[("eu", 5)]);
        let layout = lay_out(&starts, &counts, &releasing, &wanted, never, member);
        assert_eq!(layout.assignment, map(&[("eu", 2)]), "{layout:?}");
        assert_eq!(layout.held_back(), 3);
        assert_eq!(
            layout.waiting,
            vec![Note::OrdinalsReleasing {
                cluster: "us".to_owned(),
                ordinals: (2, 4),
                replicas: 3
            }]
        );
        // A newcomer waits as well rather than skip ordinals.
        let wanted = map(&[("eu", 2), ("ap", 3)]);
        let layout = lay_out(&starts, &counts, &releasing, &wanted, never, member);
        assert_eq!(layout.assignment, map(&[("eu", 2)]), "{layout:?}");
        assert_eq!(layout.held_back(), 3);
        // Once us reports them stopped, eu grows into them.
        let stopped = |c: &str, n: u32| c == "us" && n == 0;
        let layout = lay_out(&starts, &counts, &releasing, &map(&[("eu", 5)]), stopped, member);
        assert_eq!(layout.assignment, map(&[("eu", 5)]));
        assert!(
            layout.releasing.is_empty() && layout.waiting.is_empty(),
            "{layout:?}"
        );
    }

    #[test]
    fn a_silent_cluster_keeps_its_ordinals_and_a_removed_one_releases_them() {
        let starts = map(&[("eu", 0), ("us", 2)]);
        let counts = map(&[("eu", 2), ("us", 3)]);
        // The selector dropped us: the engine moved its 3 away, to new ordinals.
        let wanted = map(&[("eu", 2), ("ap", 3)]);
        let layout = lay_out(&starts, &counts, &BTreeMap::new(), &wanted, never, member);
        assert_eq!(layout.assignment, map(&[("eu", 2)]), "ap waits: {layout:?}");
        assert_eq!(layout.releasing["us"], Releasing { from: 2, to: 5 });
        let gone = |c: &str| c != "us";
        let layout = lay_out(&starts, &counts, &BTreeMap::new(), &wanted, never, gone);
        assert_eq!(layout.assignment, map(&[("ap", 3), ("eu", 2)]));
        assert_eq!(layout.starts, map(&[("ap", 2), ("eu", 0)]), "{layout:?}");
    }

    #[test]
    fn a_cluster_that_gave_everything_up_gets_a_new_range_once_it_reports_its_pods_gone() {
        // us gave up 2-4 and runs none; the engine now wants 2 there.
        let starts = map(&[("eu", 0), ("us", 2)]);
        let counts = map(&[("eu", 2)]);
        let releasing = BTreeMap::from([("us".to_owned(), Releasing { from: 2, to: 5 })]);
        let wanted = map(&[("eu", 2), ("us", 2)]);
        let layout = lay_out(&starts, &counts, &releasing, &wanted, never, member);
        assert_eq!(layout.assignment, map(&[("eu", 2)]), "{layout:?}");
        assert_eq!(layout.held_back(), 2);
        // Reported at zero replicas, no pod left: it starts again at the top.
        let stopped = |c: &str, n: u32| c == "us" && n == 0;
        let layout = lay_out(&starts, &counts, &releasing, &wanted, stopped, member);
        assert_eq!(layout.assignment, wanted);
        assert_eq!(layout.starts, map(&[("eu", 0), ("us", 2)]));
        assert!(layout.releasing.is_empty(), "{layout:?}");
    }

    #[test]
    fn a_cluster_that_grows_back_takes_its_own_ordinals_without_waiting() {
        let starts = map(&[("eu", 0), ("us", 2)]);
        let counts = map(&[("eu", 2), ("us", 1)]);
        let releasing = BTreeMap::from([("us".to_owned(), Releasing { from: 3, to: 5 })]);
        let layout = lay_out(
            &starts,
            &counts,
            &releasing,
            &map(&[("eu", 2), ("us", 3)]),
            never,
            member,
        );
        assert_eq!(layout.assignment, map(&[("eu", 2), ("us", 3)]));
        assert!(
            layout.releasing.is_empty() && layout.waiting.is_empty(),
            "{layout:?}"
        );
    }
}
