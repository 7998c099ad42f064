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

/// Each cluster's ordinals as status shows them: `2-4`, with those it still stops
/// (`2-3, 4-5 stopping`; `5-6 stopping` when it runs none now).
pub fn describe(stored: &super::stored::StoredDecision) -> BTreeMap<String, String> {
    let span = |from: u32, to: u32| match to - from {
        1 => from.to_string(),
        _ => format!("{from}-{}", to - 1),
    };
    let mut out = BTreeMap::new();
    for (cluster, &start) in &stored.ordinals {
        let runs = stored.assignment.get(cluster).copied().unwrap_or(0);
        let mut parts = Vec::new();
        if runs > 0 {
            parts.push(span(start, start + runs));
        }
        if let Some(r) = stored.releasing.get(cluster).filter(|r| r.from < r.to) {
            parts.push(format!("{} stopping", span(r.from, r.to)));
        }
        if !parts.is_empty() {
            out.insert(cluster.clone(), parts.join(", "));
        }
    }
    out
}

/// A cluster's ordinals as status describes them: first ordinal, replicas, and the ordinals
/// `from..to` it still stops.
pub type Described = (u32, u32, Option<(u32, u32)>);

/// `(start, count, stopping)` from what [`describe`] wrote: `2-4`, `2`, `2-3, 4-5 stopping`,
/// `5 stopping`; `None` for anything else.
pub fn parse_described(text: &str) -> Option<Described> {
    let span = |part: &str| -> Option<(u32, u32)> {
        let (from, last) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let n: u32 = part.trim().parse().ok()?;
                (n, n)
            }
        };
        if last < from {
            return None;
        }
        Some((from, last.checked_add(1)?))
    };
    let (mut runs, mut stopping) = (None, None);
    for part in text.split(',') {
        match part.trim().strip_suffix(" stopping") {
            Some(range) => stopping = Some(span(range)?),
            None => runs = Some(span(part)?),
        }
    }
    match (runs, stopping) {
        (Some((from, to)), stopping) => Some((from, to - from, stopping)),
        (None, Some((from, to))) => Some((from, 0, Some((from, to)))),
        (None, None) => None,
    }
}

/// A StatefulSet as a cluster reports it: first ordinal, replicas asked, pods it has.
struct Running {
    start: u32,
    replicas: u32,
    pods: u32,
}

/// The workload's StatefulSet in each cluster that reports one.
fn running<'a>(
    reports: &'a super::reports::Reports,
    workload: &'a WorkloadRef,
) -> impl Iterator<Item = (&'a String, Running)> + 'a {
    let number = |n: Option<i32>| n.and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
    reports.iter().filter_map(move |(cluster, report)| {
        let object = deployment_of(Some(report), workload).filter(|o| o.kind == "StatefulSet")?;
        Some((
            cluster,
            Running {
                start: number(object.first_ordinal),
                replicas: number(object.replicas),
                pods: number(object.all_replicas),
            },
        ))
    })
}

/// The Ready clusters of `fleet` that have sent no status report: a layout read back from the
/// reports waits for them.
pub fn unheard(fleet: &nave_policies::Fleet, reports: &super::reports::Reports) -> Vec<String> {
    fleet
        .iter()
        .filter(|c| c.ready && !reports.contains_key(&c.name))
        .map(|c| c.name.clone())
        .collect()
}

/// Pods a cluster reports beyond the range the layout gives it (a layout restored from an old
/// backup, or one damaged): they stop there before their ordinals go anywhere else.
pub fn reported_beyond(previous: &mut Previously, reports: &super::reports::Reports, workload: &WorkloadRef) {
    for (
        cluster,
        Running {
            start: first, pods, ..
        },
    ) in running(reports, workload)
    {
        let start = *previous.starts.entry(cluster.clone()).or_insert(first);
        let end = start + previous.counts.get(cluster).copied().unwrap_or(0);
        if first < start || first + pods <= end {
            continue;
        }
        let beyond = Releasing {
            from: end.max(first),
            to: first + pods,
            after: None,
        };
        previous
            .releasing
            .entry(cluster.clone())
            .and_modify(|r| {
                r.from = r.from.min(beyond.from);
                r.to = r.to.max(beyond.to);
            })
            .or_insert(beyond);
    }
}

/// The clusters in the order of their ranges, lowest first: what the engine keeps contiguous.
pub fn order(starts: &BTreeMap<String, u32>) -> Vec<String> {
    let mut clusters: Vec<(&String, &u32)> = starts.iter().collect();
    clusters.sort_by_key(|(name, start)| (**start, (*name).clone()));
    clusters.into_iter().map(|(name, _)| name.clone()).collect()
}

/// Whether `report` says the workload's StatefulSet runs `replicas` from `start` and no pod
/// beyond them: the agent applied a work set newer than `after` (the one it had applied when
/// the ordinals were given up, so the report is of the lower count, not of the set before), its
/// watch saw that apply and the controller saw that spec, with this first ordinal, and counts no
/// more pods than that.
pub fn stopped_beyond(
    report: Option<&StatusReport>,
    workload: &WorkloadRef,
    replicas: u32,
    start: u32,
    after: Option<u64>,
) -> bool {
    let Some(report) = report else {
        return false;
    };
    let first_ordinal = |object: &nave_api::wire::ObjectStatus| match object.first_ordinal {
        Some(first) => u32::try_from(first).ok() == Some(start),
        None => start == 0,
    };
    deployment_of(Some(report), workload).is_some_and(|object| {
        // The set attempted last counts when this object of it applied: another object failing
        // in the same set (a quota, a missing CRD) keeps the applied revision back.
        let attempted = report.attempted_revision.filter(|_| object.error.is_none());
        let seen = report.applied_revision.max(attempted);
        let newer = seen.is_some_and(|r| after.is_none_or(|a| r > a));
        newer
            && object.kind == "StatefulSet"
            && object.observed_current == Some(true)
            && object.replicas == i32::try_from(replicas).ok()
            && first_ordinal(object)
            && object
                .all_replicas
                .is_some_and(|n| u32::try_from(n).is_ok_and(|n| n <= replicas))
    })
}

/// The layout the clusters' reports show, for a StatefulSet whose stored layout is gone (a lost
/// or damaged store row): each reported StatefulSet's first ordinal and replicas, and the pods
/// it still has beyond them as releasing. Laying ranges out afresh over StatefulSets that run
/// would give their ordinals to other clusters.
pub fn adopt(
    reports: &super::reports::Reports,
    workload: &WorkloadRef,
    status: &[nave_api::ClusterPlacementStatus],
) -> Previously {
    let mut found = Previously::default();
    // What the workload's status last said of each cluster (it lives in Kubernetes, not in the
    // store): a cluster that does not report now keeps those ordinals, as a silent one does.
    for cluster in status {
        let Some((start, count, stopping)) = cluster.ordinals.as_deref().and_then(parse_described) else {
            continue;
        };
        found.starts.insert(cluster.name.clone(), start);
        if count > 0 {
            found.counts.insert(cluster.name.clone(), count);
        }
        if let Some((from, to)) = stopping {
            found.releasing.insert(
                cluster.name.clone(),
                Releasing {
                    from,
                    to,
                    after: None,
                },
            );
        }
    }
    for (
        cluster,
        Running {
            start,
            replicas,
            pods,
        },
    ) in running(reports, workload)
    {
        found.starts.insert(cluster.clone(), start);
        found.counts.remove(cluster);
        found.releasing.remove(cluster);
        if replicas > 0 {
            found.counts.insert(cluster.clone(), replicas);
        }
        if pods > replicas {
            found.releasing.insert(
                cluster.clone(),
                // The report already shows the lower count applied: any later report of it
                // with the pods gone says they stopped.
                Releasing {
                    from: start + replicas,
                    to: start + pods,
                    after: None,
                },
            );
        }
    }
    found
}

/// A layout as a plan starts from: first ordinals, replicas and releasing ranges by cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Previously {
    /// First ordinal by cluster.
    pub starts: BTreeMap<String, u32>,
    /// Replicas by cluster.
    pub counts: BTreeMap<String, u32>,
    /// Ordinals given up and not reported stopped.
    pub releasing: BTreeMap<String, Releasing>,
}

/// The oldest Kubernetes a StatefulSet is placed on: `spec.ordinals` is beta (on by default)
/// from 1.27 and GA from 1.31; an older API server drops it and numbers every cluster from 0.
pub const MIN_KUBERNETES_MINOR: u32 = 27;

/// The clusters as the agents' reports and the fleet show them.
#[derive(Debug)]
pub struct Reported<'a> {
    /// The agents' latest reports.
    pub reports: &'a super::reports::Reports,
    /// The workload.
    pub workload: &'a WorkloadRef,
    /// The fleet.
    pub fleet: &'a nave_policies::Fleet,
}

impl Clusters for Reported<'_> {
    fn stopped(&self, cluster: &str, replicas: u32, start: u32, after: Option<u64>) -> bool {
        let report = self.reports.get(cluster).map(std::sync::Arc::as_ref);
        stopped_beyond(report, self.workload, replicas, start, after)
    }

    fn applied(&self, cluster: &str) -> Option<u64> {
        // The newest set the agent has applied or tried: a report newer than that is of a later
        // set.
        let report = self.reports.get(cluster)?;
        report.applied_revision.max(report.attempted_revision)
    }

    fn in_fleet(&self, cluster: &str) -> bool {
        self.fleet.get(cluster).is_some()
    }
}

/// What [`lay_out`] asks of each cluster.
pub trait Clusters {
    /// Whether the cluster reports running `replicas` from `start` and nothing beyond, in a
    /// report newer than `after` ([`stopped_beyond`]).
    fn stopped(&self, cluster: &str, replicas: u32, start: u32, after: Option<u64>) -> bool;
    /// The work-set revision the cluster's agent last reported applied.
    fn applied(&self, cluster: &str) -> Option<u64>;
    /// Whether the cluster is still a member of the fleet (a removed cluster releases all).
    fn in_fleet(&self, cluster: &str) -> bool;
}

/// Lays out the ranges for the engine's `wanted` counts, from the `previous` layout, asking
/// `clusters` what they report.
pub fn lay_out(previous: &Previously, wanted: &BTreeMap<String, u32>, clusters: &impl Clusters) -> Layout {
    let Previously {
        starts,
        counts,
        releasing,
    } = previous;
    let mut layout = Layout::default();
    let count_of = |map: &BTreeMap<String, u32>, c: &str| map.get(c).copied().unwrap_or(0);
    // What each cluster gives up now joins what it gave up before.
    let mut gone: BTreeMap<String, Releasing> = releasing.clone();
    for (cluster, &start) in starts {
        let (was, now) = (count_of(counts, cluster), count_of(wanted, cluster));
        if now < was {
            // Stopped once a report newer than what the agent has applied now says so.
            let range = Releasing {
                from: start + now,
                to: start + was,
                after: clusters.applied(cluster),
            };
            gone.entry(cluster.clone())
                .and_modify(|r| {
                    r.from = r.from.min(range.from);
                    r.to = r.to.max(range.to);
                    r.after = range.after;
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
    gone.retain(|cluster, range| {
        let runs = count_of(wanted, cluster).min(count_of(counts, cluster));
        let start = starts.get(cluster).copied().unwrap_or(0);
        clusters.in_fleet(cluster) && !clusters.stopped(cluster, runs, start, range.after)
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
            // The top may grow up to what another cluster still releases; it never runs fewer
            // than it does now for that (its range is its own).
            let kept = want.min(count_of(counts, cluster));
            let notes = layout.waiting.len();
            let end = place(cluster, start, want, &mut layout, &gone);
            if end < start + kept {
                // Held back less than the note says: only beyond what it runs.
                layout.assignment.insert(cluster.clone(), kept);
                layout.starts.insert(cluster.clone(), start);
                if let Some(Note::OrdinalsReleasing { replicas, .. }) = layout.waiting.get_mut(notes) {
                    *replicas = want - kept;
                }
                layout.waiting.retain(|n| n.waiting_replicas() > 0);
            }
            end.max(start + kept)
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
            ..range
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

    fn previously(
        starts: &[(&str, u32)],
        counts: &[(&str, u32)],
        releasing: &[(&str, u32, u32)],
    ) -> Previously {
        Previously {
            starts: map(starts),
            counts: map(counts),
            releasing: releasing
                .iter()
                .map(|(c, from, to)| {
                    (
                        (*c).to_owned(),
                        Releasing {
                            from: *from,
                            to: *to,
                            after: Some(1),
                        },
                    )
                })
                .collect(),
        }
    }

    /// A stored decision with this layout.
    fn stored(
        starts: &[(&str, u32)],
        counts: &[(&str, u32)],
        releasing: &[(&str, u32, u32)],
    ) -> super::super::stored::StoredDecision {
        let previous = previously(starts, counts, releasing);
        super::super::stored::StoredDecision {
            ordinals: previous.starts,
            assignment: previous.counts,
            releasing: previous.releasing,
            ..Default::default()
        }
    }

    /// Clusters as a test sees them: which report (at which count) their ordinals stopped, at
    /// which revision their agents are, and which left the fleet.
    #[derive(Default)]
    struct Fleet {
        stopped: Vec<(&'static str, u32)>,
        applied: u64,
        removed: Vec<&'static str>,
    }

    impl Clusters for Fleet {
        fn stopped(&self, cluster: &str, replicas: u32, _start: u32, after: Option<u64>) -> bool {
            self.applied > after.unwrap_or(0) && self.stopped.contains(&(cluster, replicas))
        }
        fn applied(&self, _: &str) -> Option<u64> {
            Some(self.applied)
        }
        fn in_fleet(&self, cluster: &str) -> bool {
            !self.removed.contains(&cluster)
        }
    }

    fn silent() -> Fleet {
        Fleet {
            applied: 1,
            ..Fleet::default()
        }
    }

    #[test]
    fn a_first_layout_gives_clusters_consecutive_ranges_in_name_order() {
        let layout = lay_out(
            &Previously::default(),
            &map(&[("us", 2), ("eu", 2), ("ap", 1)]),
            &silent(),
        );
        assert_eq!(layout.starts, map(&[("ap", 0), ("eu", 1), ("us", 3)]));
        assert_eq!(layout.assignment, map(&[("ap", 1), ("eu", 2), ("us", 2)]));
        assert!(
            layout.releasing.is_empty() && layout.waiting.is_empty(),
            "{layout:?}"
        );
    }

    #[test]
    fn a_scale_down_releases_the_top_ordinals_until_a_newer_report_says_they_stopped() {
        let before = previously(
            &[("ap", 0), ("eu", 1), ("us", 3)],
            &[("ap", 1), ("eu", 2), ("us", 2)],
            &[],
        );
        // 5 -> 2: us's 3-4 and eu's 2 go.
        let wanted = map(&[("ap", 1), ("eu", 1)]);
        // The reports say stopped already, but they are of the set before: not believed.
        let stale = Fleet {
            stopped: vec![("us", 0), ("eu", 1)],
            applied: 1,
            ..Fleet::default()
        };
        let layout = lay_out(&before, &wanted, &stale);
        assert_eq!(layout.assignment, wanted);
        assert_eq!(
            layout.starts,
            map(&[("ap", 0), ("eu", 1), ("us", 3)]),
            "us keeps its StatefulSet (at zero) while it releases"
        );
        let ranges: Vec<(String, u32, u32, Option<u64>)> = layout
            .releasing
            .iter()
            .map(|(c, r)| (c.clone(), r.from, r.to, r.after))
            .collect();
        assert_eq!(
            ranges,
            [("eu".to_owned(), 2, 3, Some(1)), ("us".to_owned(), 3, 5, Some(1))]
        );
        // Reported stopped after applying a newer set: released, and us's StatefulSet goes.
        let now = Previously {
            starts: layout.starts.clone(),
            counts: layout.assignment.clone(),
            releasing: layout.releasing.clone(),
        };
        let fresh = Fleet { applied: 2, ..stale };
        let after = lay_out(&now, &wanted, &fresh);
        assert!(after.releasing.is_empty(), "{after:?}");
        assert_eq!(after.starts, map(&[("ap", 0), ("eu", 1)]));
    }

    #[test]
    fn ordinals_another_cluster_still_runs_are_not_given_until_it_stops_them() {
        // eu 0-1, us 2-4; 5 -> 2 -> 5 before us reports its pods gone.
        let before = previously(&[("eu", 0), ("us", 2)], &[("eu", 2)], &[("us", 2, 5)]);
        // The engine grows eu (the top now): it may not take 2-4 yet.
        let layout = lay_out(&before, &map(&[("eu", 5)]), &silent());
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
        let layout = lay_out(&before, &map(&[("eu", 2), ("ap", 3)]), &silent());
        assert_eq!(layout.assignment, map(&[("eu", 2)]), "{layout:?}");
        assert_eq!(layout.held_back(), 3);
        // Once us reports them stopped, eu grows into them.
        let stopped = Fleet {
            stopped: vec![("us", 0)],
            applied: 2,
            ..Fleet::default()
        };
        let layout = lay_out(&before, &map(&[("eu", 5)]), &stopped);
        assert_eq!(layout.assignment, map(&[("eu", 5)]));
        assert!(
            layout.releasing.is_empty() && layout.waiting.is_empty(),
            "{layout:?}"
        );
    }

    #[test]
    fn a_silent_cluster_keeps_its_ordinals_and_a_removed_one_releases_them() {
        let before = previously(&[("eu", 0), ("us", 2)], &[("eu", 2), ("us", 3)], &[]);
        // The selector dropped us: the engine moved its 3 away, to new ordinals.
        let wanted = map(&[("eu", 2), ("ap", 3)]);
        let layout = lay_out(&before, &wanted, &silent());
        assert_eq!(layout.assignment, map(&[("eu", 2)]), "ap waits: {layout:?}");
        assert_eq!((layout.releasing["us"].from, layout.releasing["us"].to), (2, 5));
        let gone = Fleet {
            removed: vec!["us"],
            ..silent()
        };
        let layout = lay_out(&before, &wanted, &gone);
        assert_eq!(layout.assignment, map(&[("ap", 3), ("eu", 2)]));
        assert_eq!(layout.starts, map(&[("ap", 2), ("eu", 0)]), "{layout:?}");
    }

    #[test]
    fn a_cluster_that_gave_everything_up_gets_a_new_range_once_it_reports_its_pods_gone() {
        // us gave up 2-4 and runs none; the engine now wants 2 there.
        let before = previously(&[("eu", 0), ("us", 2)], &[("eu", 2)], &[("us", 2, 5)]);
        let wanted = map(&[("eu", 2), ("us", 2)]);
        let layout = lay_out(&before, &wanted, &silent());
        assert_eq!(layout.assignment, map(&[("eu", 2)]), "{layout:?}");
        assert_eq!(layout.held_back(), 2);
        // Reported at zero replicas, no pod left: it starts again at the top.
        let stopped = Fleet {
            stopped: vec![("us", 0)],
            applied: 2,
            ..Fleet::default()
        };
        let layout = lay_out(&before, &wanted, &stopped);
        assert_eq!(layout.assignment, wanted);
        assert_eq!(layout.starts, map(&[("eu", 0), ("us", 2)]));
        assert!(layout.releasing.is_empty(), "{layout:?}");
    }

    #[test]
    fn a_cluster_that_grows_back_takes_its_own_ordinals_without_waiting() {
        let before = previously(&[("eu", 0), ("us", 2)], &[("eu", 2), ("us", 1)], &[("us", 3, 5)]);
        let layout = lay_out(&before, &map(&[("eu", 2), ("us", 3)]), &silent());
        assert_eq!(layout.assignment, map(&[("eu", 2), ("us", 3)]));
        assert!(
            layout.releasing.is_empty() && layout.waiting.is_empty(),
            "{layout:?}"
        );
    }

    #[test]
    fn the_top_cluster_never_runs_fewer_than_it_does_for_a_range_in_its_way() {
        // Damaged: ap's releasing range overlaps us's own (as a lost layout could leave it).
        let before = previously(&[("eu", 0), ("us", 2)], &[("eu", 2), ("us", 3)], &[("ap", 3, 4)]);
        let layout = lay_out(&before, &map(&[("eu", 2), ("us", 4)]), &silent());
        assert_eq!(layout.assignment["us"], 3, "us keeps what it runs: {layout:?}");
        assert_eq!(layout.starts["us"], 2);
    }

    #[test]
    fn a_lost_layout_is_read_back_from_the_reports() {
        use nave_api::wire::ObjectStatus;
        let workload = WorkloadRef::new("data", "db");
        let report = |first: Option<i32>, replicas: i32, pods: i32| {
            std::sync::Arc::new(StatusReport {
                applied_revision: Some(7),
                objects: vec![ObjectStatus {
                    api_version: "apps/v1".to_owned(),
                    kind: "StatefulSet".to_owned(),
                    namespace: Some("data".to_owned()),
                    name: "db".to_owned(),
                    replicas: Some(replicas),
                    all_replicas: Some(pods),
                    first_ordinal: first,
                    ..ObjectStatus::default()
                }],
                ..StatusReport::default()
            })
        };
        let reports: super::super::reports::Reports = [
            ("eu".to_owned(), report(None, 2, 2)),
            ("us".to_owned(), report(Some(2), 1, 3)),
        ]
        .into_iter()
        .collect();
        let found = adopt(&reports, &workload, &[]);
        assert_eq!(found.starts, map(&[("eu", 0), ("us", 2)]));
        assert_eq!(found.counts, map(&[("eu", 2), ("us", 1)]));
        assert_eq!(
            found.releasing["us"],
            Releasing {
                from: 3,
                to: 5,
                after: None
            }
        );
    }

    #[test]
    fn status_names_each_clusters_ordinals_and_those_stopping() {
        let stored = stored(
            &[("ap", 5), ("eu", 0), ("us", 2)],
            &[("eu", 2), ("us", 1)],
            &[("us", 3, 5), ("ap", 5, 6)],
        );
        assert_eq!(
            describe(&stored),
            BTreeMap::from([
                ("ap".to_owned(), "5 stopping".to_owned()),
                ("eu".to_owned(), "0-1".to_owned()),
                ("us".to_owned(), "2, 3-4 stopping".to_owned()),
            ])
        );
    }

    #[test]
    fn what_status_wrote_reads_back() {
        for (text, read) in [
            ("2-4", Some((2, 3, None))),
            ("7", Some((7, 1, None))),
            ("2-3, 4-5 stopping", Some((2, 2, Some((4, 6))))),
            ("5 stopping", Some((5, 0, Some((5, 6))))),
            ("4-2", None),
            ("x", None),
            ("", None),
        ] {
            assert_eq!(parse_described(text), read, "{text:?}");
        }
        let stored = stored(&[("eu", 0), ("us", 2)], &[("eu", 2), ("us", 1)], &[("us", 3, 5)]);
        for (cluster, text) in describe(&stored) {
            let (start, count, stopping) = parse_described(&text).expect("describe's words read back");
            assert_eq!(start, stored.ordinals[&cluster], "{cluster}: {text}");
            assert_eq!(count, stored.assignment[&cluster], "{cluster}: {text}");
            assert_eq!(stopping, (cluster == "us").then_some((3, 5)), "{cluster}: {text}");
        }
    }

    #[test]
    fn pods_beyond_a_stale_layout_stop_before_their_ordinals_go_elsewhere() {
        use nave_api::wire::ObjectStatus;
        let workload = WorkloadRef::new("data", "db");
        // Restored from an old backup: eu 0-1. eu really runs 0-3.
        let mut previous = previously(&[("eu", 0)], &[("eu", 2)], &[]);
        let reports: super::super::reports::Reports = [(
            "eu".to_owned(),
            std::sync::Arc::new(StatusReport {
                objects: vec![ObjectStatus {
                    kind: "StatefulSet".to_owned(),
                    namespace: Some("data".to_owned()),
                    name: "db".to_owned(),
                    replicas: Some(4),
                    all_replicas: Some(4),
                    ..ObjectStatus::default()
                }],
                ..StatusReport::default()
            }),
        )]
        .into_iter()
        .collect();
        reported_beyond(&mut previous, &reports, &workload);
        assert_eq!(
            (previous.releasing["eu"].from, previous.releasing["eu"].to),
            (2, 4)
        );
        // A newcomer may not take 2-3 meanwhile.
        let layout = lay_out(&previous, &map(&[("eu", 2), ("us", 2)]), &silent());
        assert_eq!(layout.assignment, map(&[("eu", 2)]), "{layout:?}");
    }
}
