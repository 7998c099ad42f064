//! A MultiClusterJob's pieces: how its completions are cut and divided among clusters, how each
//! piece follows its cluster's reports, and what runs again when a cluster is lost. Pure: the
//! controller ([`crate::controller::mcj`]) gathers the reports and the engine's decisions.
//!
//! ```text
//!  created ─► one Queued piece [0, completions) with the whole parallelism
//!  admitted (the engine fits all its pods) ─► divide: one Running piece per cluster, contiguous
//!     ranges in proportion to each cluster's pods (cluster name order)
//!  reports ─► observe: active / succeeded / failed / completed indexes, Complete / Failed
//!  cluster lost ─► lose: the piece is Lost; what it had not reported complete becomes new
//!     Queued pieces, one per contiguous range of indexes (NonIndexed: the count left)
//! ```

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use nave_api::wire::{ObjectStatus, StatusReport, WorkloadRef};
use nave_api::{JobPhase, JobPiece, PieceState};
use nave_policies::{Decision, Demand, Fleet, Ledger, Policy, Request};

/// Most ranges a cluster's `completedIndexes` may hold: twice what the largest Indexed job
/// (100,000 completions) can leave as separate ranges. A longer list is an error, not work.
const MAX_RANGES: usize = 100_000;

/// A set of indexes, as sorted, disjoint, non-adjacent inclusive ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Indexes(Vec<(u32, u32)>);

impl Indexes {
    /// Parses a Job's `completedIndexes` (`1,3-5,7`). Anything else than numbers, commas and
    /// dashes is an error: the text comes from a cluster.
    pub fn parse(text: &str) -> Result<Indexes, String> {
        let mut ranges = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if ranges.len() == MAX_RANGES {
                return Err(format!("more than {MAX_RANGES} ranges"));
            }
            let number = |s: &str| {
                s.trim()
                    .parse::<u32>()
                    .map_err(|_| format!("{part:?} is not an index or a range of indexes"))
            };
            let (first, last) = match part.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => {
                    let n = number(part)?;
                    (n, n)
                }
            };
            if first > last {
                return Err(format!("{part:?} is a range that goes backwards"));
            }
            ranges.push((first, last));
        }
        Ok(Indexes::from_ranges(ranges))
    }

    /// The set of `ranges`, in any order, overlapping or not: sorted and merged once.
    fn from_ranges(mut ranges: Vec<(u32, u32)>) -> Indexes {
        ranges.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
        for (a, b) in ranges {
            match merged.last_mut() {
                Some((_, end)) if a <= end.saturating_add(1) => *end = (*end).max(b),
                _ => merged.push((a, b)),
            }
        }
        Indexes(merged)
    }

    /// Adds `first..=last`.
    pub fn insert(&mut self, first: u32, last: u32) {
        self.extend(&Indexes(vec![(first, last)]));
    }

    /// Adds every index of `other`: one merge of the two sorted lists.
    pub fn extend(&mut self, other: &Indexes) {
        if other.0.is_empty() {
            return;
        }
        let mut ranges = Vec::with_capacity(self.0.len() + other.0.len());
        let (mut mine, mut theirs) = (self.0.iter().peekable(), other.0.iter().peekable());
        loop {
            let next = match (mine.peek(), theirs.peek()) {
                (Some(a), Some(b)) if a <= b => mine.next(),
                (Some(_), Some(_)) | (None, Some(_)) => theirs.next(),
                (Some(_), None) => mine.next(),
                (None, None) => break,
            };
            ranges.extend(next.copied());
        }
        // Already sorted: the sort in from_ranges is linear on it.
        *self = Indexes::from_ranges(ranges);
    }

    /// How many indexes it holds.
    pub fn count(&self) -> u64 {
        self.0.iter().map(|(a, b)| u64::from(b - a) + 1).sum()
    }

    /// The indexes shifted up by `offset`, keeping only those in `start..start + len` after the
    /// shift (a cluster's report names nothing outside its piece).
    pub fn shifted_within(&self, offset: u32, start: u32, len: u32) -> Indexes {
        let end = u64::from(start) + u64::from(len);
        let mut out = Vec::new();
        for &(a, b) in &self.0 {
            let a = u64::from(a) + u64::from(offset);
            let b = u64::from(b) + u64::from(offset);
            let (a, b) = (a.max(u64::from(start)), b.min(end.saturating_sub(1)));
            if a <= b && end > 0 {
                out.push((
                    u32::try_from(a).unwrap_or(u32::MAX),
                    u32::try_from(b).unwrap_or(u32::MAX),
                ));
            }
        }
        Indexes(out)
    }

    /// The ranges of `start..start + len` it does not hold, as `(first, count)`.
    pub fn missing_in(&self, start: u32, len: u32) -> Vec<(u32, u32)> {
        let end = u64::from(start) + u64::from(len);
        let mut out = Vec::new();
        let mut next = u64::from(start);
        for &(a, b) in &self.0 {
            let (a, b) = (u64::from(a), u64::from(b));
            if b < next || a >= end {
                continue;
            }
            if a > next {
                out.push((next, a - next));
            }
            next = b + 1;
        }
        if next < end {
            out.push((next, end - next));
        }
        out.into_iter()
            .filter_map(|(a, n)| Some((u32::try_from(a).ok()?, u32::try_from(n).ok()?)))
            .collect()
    }
}

/// The whole list, never cut short: the text is read back after a restart, and a shortened
/// list would run its missing indexes again. Its length is bounded by the job's completions
/// (at most 100,000 indexes, as for a Kubernetes Job's own `completedIndexes`).
impl fmt::Display for Indexes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (a, b)) in self.0.iter().enumerate() {
            let separator = if i == 0 { "" } else { "," };
            if a == b {
                write!(f, "{separator}{a}")?;
            } else {
                write!(f, "{separator}{a}-{b}")?;
            }
        }
        Ok(())
    }
}

/// A job waiting in the hub's queue, as the jobs behind it see it.
#[derive(Clone, Debug)]
pub struct QueuedJob {
    /// `spec.priority`.
    pub priority: i32,
    /// When it was created.
    pub created: Option<jiff::Timestamp>,
    /// What one of its pods takes.
    pub demand: Demand,
    /// Where its pods may go.
    pub policy: Policy,
    /// The pods at once of each of its queued pieces.
    pub pods: Vec<u32>,
}

impl QueuedJob {
    /// Decides each of its queued pieces in turn on `ledger`, booking there (as `who`) those
    /// whose pods all fit; answers the decisions.
    pub fn fit(&self, who: &WorkloadRef, fleet: &Fleet, ledger: &mut Ledger) -> Vec<Decision> {
        self.pods
            .iter()
            .map(|pods| {
                let request = Request::new(*pods, self.demand.clone(), self.policy.clone());
                let decision = nave_policies::decide(fleet, ledger, &request);
                if decision.unplaced == 0 {
                    ledger.record(&who.to_string(), &self.demand, &decision);
                }
                decision
            })
            .collect()
    }

    /// Its place in the queue: higher priority first, then older, then by name.
    pub fn order(&self, workload: &WorkloadRef) -> (Reverse<i32>, Option<jiff::Timestamp>, WorkloadRef) {
        (Reverse(self.priority), self.created, workload.clone())
    }
}

/// The first piece of a job: every completion, waiting for room.
pub fn first_piece(completions: u32, parallelism: u32) -> JobPiece {
    queued(0, completions, parallelism)
}

fn queued(start: u32, completions: u32, parallelism: u32) -> JobPiece {
    JobPiece {
        job: String::new(),
        cluster: String::new(),
        start: to_i32(start),
        completions: to_i32(completions),
        parallelism: to_i32(parallelism.clamp(1, completions.max(1))),
        state: PieceState::Queued,
        active: 0,
        succeeded: 0,
        failed: 0,
        completed_indexes: None,
        message: None,
    }
}

fn to_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn to_u32(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

/// What a job's pieces' names start with: `<job>-<first five of its uid>`. A job deleted and
/// created again under the same name sends Jobs of other names, so a cluster's old Job, finished
/// or still being removed, is never taken for the new one's.
pub fn stem(job: &str, uid: Option<&str>) -> String {
    let fragment: String = uid
        .unwrap_or_default()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(5)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if fragment.is_empty() {
        job.to_owned()
    } else {
        format!("{job}-{fragment}")
    }
}

/// Name of a piece's Job: `<stem>-<start>`, and `<stem>-<start>r<n>` for the `n`th rerun of a
/// range starting there. The suffix after the last `-` holds no `-`, so two jobs' pieces never
/// share a name.
pub fn job_name(job: &str, start: u32, attempt: u32) -> String {
    if attempt == 0 {
        format!("{job}-{start}")
    } else {
        format!("{job}-{start}r{attempt}")
    }
}

/// Cuts the queued `piece` among the clusters of `assignment` (its pods per cluster, from the
/// engine): contiguous ranges in cluster name order, each in proportion to the cluster's pods
/// (largest remainder, ties to the earlier name). A cluster whose share rounds to no
/// completion gets no piece. `attempts` counts the pieces that started at each index before.
pub fn divide(
    job: &str,
    piece: &JobPiece,
    assignment: &BTreeMap<String, u32>,
    attempts: &BTreeMap<i32, u32>,
) -> Vec<JobPiece> {
    let completions = u64::from(to_u32(piece.completions));
    let pods: u64 = assignment.values().map(|n| u64::from(*n)).sum();
    if pods == 0 || completions == 0 {
        return Vec::new();
    }
    let mut shares: Vec<(String, u64, u64)> = assignment
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(cluster, n)| {
            let exact = completions * u64::from(*n);
            (cluster.clone(), exact / pods, exact % pods)
        })
        .collect();
    let given: u64 = shares.iter().map(|(_, whole, _)| whole).sum();
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| shares[b].2.cmp(&shares[a].2).then(a.cmp(&b)));
    for &i in order
        .iter()
        .take(usize::try_from(completions - given).unwrap_or(0))
    {
        shares[i].1 += 1;
    }
    let mut start = to_u32(piece.start);
    let mut out = Vec::new();
    for (cluster, count, _) in shares {
        if count == 0 {
            continue;
        }
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        let pods = assignment.get(&cluster).copied().unwrap_or(1).min(count);
        let attempt = attempts.get(&to_i32(start)).copied().unwrap_or(0);
        out.push(JobPiece {
            job: job_name(job, start, attempt),
            cluster,
            state: PieceState::Running,
            ..queued(start, count, pods)
        });
        start += count;
    }
    out
}

/// How many pieces were sent that started at each index: the next one there is a rerun.
pub fn attempts(pieces: &[JobPiece]) -> BTreeMap<i32, u32> {
    let mut out = BTreeMap::new();
    for piece in pieces.iter().filter(|p| !p.job.is_empty()) {
        *out.entry(piece.start).or_insert(0) += 1;
    }
    out
}

/// Updates a sent piece from its cluster's latest report (`None`: none yet): from its Job's
/// status, or, when the report holds none, from the apply error that names the Job (refused
/// before it reached the API server, by the agent's allow-lists).
pub fn follow(piece: &mut JobPiece, report: Option<&StatusReport>, workload: &WorkloadRef, indexed: bool) {
    let reported = report.and_then(|r| {
        r.objects
            .iter()
            .find(|o| o.kind == "Job" && o.name == piece.job && o.workload.as_ref() == Some(workload))
    });
    observe(piece, reported, indexed);
    if reported.is_none() && piece.state == PieceState::Running {
        piece.message = report
            .into_iter()
            .flat_map(|r| &r.apply_errors)
            .find(|e| {
                e.operation == "apply"
                    && e.kind == "Job"
                    && e.name == piece.job
                    && e.namespace.as_deref() == Some(workload.namespace.as_str())
            })
            .map(|e| format!("not applied: {}", e.message));
    }
}

/// Updates a sent piece from its Job as its cluster's agent reports it (`None`: not reported
/// yet). A piece that completed or failed stays so.
pub fn observe(piece: &mut JobPiece, reported: Option<&ObjectStatus>, indexed: bool) {
    if !matches!(piece.state, PieceState::Running) {
        return;
    }
    let Some(job) = reported else {
        return;
    };
    piece.message = job.error.clone();
    // Counts from a cluster: bounded by what the piece can hold, so no sum of them overflows.
    // (`completions` is read back from the object's status, which anyone allowed may write.)
    let most = piece.completions.max(0);
    piece.active = job.active.unwrap_or(0).clamp(0, most);
    piece.succeeded = job.succeeded.unwrap_or(0).clamp(0, most);
    piece.failed = job.failed.unwrap_or(0).clamp(0, i32::MAX / 1024);
    if indexed {
        let start = to_u32(piece.start);
        match job.completed_indexes.as_deref().map(Indexes::parse) {
            Some(Ok(local)) => {
                let done = local.shifted_within(start, start, to_u32(piece.completions));
                piece.completed_indexes = (done.count() > 0).then(|| done.to_string());
            }
            // What was read before stays: dropping it would run those indexes again if the
            // cluster were lost.
            Some(Err(error)) => {
                piece.message = Some(format!("its completedIndexes cannot be read: {error}"));
            }
            None => piece.completed_indexes = None,
        }
    }
    let holds = |type_: &str| {
        job.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == nave_api::conditions::TRUE)
    };
    if holds("Complete") {
        piece.state = PieceState::Complete;
        piece.active = 0;
        piece.message = None;
        // Every index of the piece: its state says so, and the list would only weigh on every
        // status write.
        piece.completed_indexes = None;
    } else if holds("Failed") {
        piece.state = PieceState::Failed;
        piece.active = 0;
        let why = job
            .conditions
            .iter()
            .find(|c| c.type_ == "Failed")
            .and_then(|c| c.reason.clone().or_else(|| c.message.clone()));
        piece.message = Some(match why {
            Some(why) => format!("its Job failed: {why}"),
            None => "its Job failed".to_owned(),
        });
    }
}

/// The pieces running in a lost cluster become `Lost`; what each had not reported complete is
/// added as new queued pieces, one per contiguous range (NonIndexed: one, for the count left),
/// each with at most the lost piece's pods at once. Answers how many pieces were lost.
pub fn lose(pieces: &mut Vec<JobPiece>, lost: &BTreeMap<String, String>, indexed: bool) -> usize {
    let mut rerun = Vec::new();
    let mut count = 0;
    for piece in pieces.iter_mut() {
        let Some(why) = lost.get(&piece.cluster) else {
            continue;
        };
        if piece.state != PieceState::Running {
            continue;
        }
        count += 1;
        piece.state = PieceState::Lost;
        piece.active = 0;
        piece.message = Some(format!(
            "{}: {why}; what it had not completed runs again",
            piece.cluster
        ));
        let start = to_u32(piece.start);
        let parallelism = to_u32(piece.parallelism);
        if indexed {
            let done = piece
                .completed_indexes
                .as_deref()
                .and_then(|t| Indexes::parse(t).ok())
                .unwrap_or_default();
            for (first, len) in done.missing_in(start, to_u32(piece.completions)) {
                rerun.push(queued(first, len, parallelism.min(len)));
            }
        } else {
            let left = to_u32(piece.completions.saturating_sub(piece.succeeded));
            if left > 0 {
                rerun.push(queued(start, left, parallelism.min(left)));
            }
        }
    }
    pieces.extend(rerun);
    count
}

/// What the pieces add up to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Completions succeeded, each counted once.
    pub succeeded: u32,
    /// Pods failed, in every piece.
    pub failed: i32,
    /// Pods active now.
    pub active: i32,
    /// Indexed: the fleet-wide indexes succeeded.
    pub completed: Option<Indexes>,
    /// Queued, Running, Complete or Failed.
    pub phase: JobPhase,
    /// Clusters that run or ran a piece.
    pub clusters: BTreeSet<String>,
}

/// Adds the pieces up: an index run twice (a lost piece's, then its rerun's) counts once.
pub fn summarize(pieces: &[JobPiece], completions: u32, indexed: bool) -> Summary {
    let failed = pieces
        .iter()
        .fold(0i32, |sum, p| sum.saturating_add(p.failed.max(0)));
    let active = pieces
        .iter()
        .filter(|p| p.state == PieceState::Running)
        .fold(0i32, |sum, p| sum.saturating_add(p.active.max(0)));
    let (succeeded, completed) = if indexed {
        let mut all = Indexes::default();
        for piece in pieces {
            if let Some(done) = piece
                .completed_indexes
                .as_deref()
                .and_then(|t| Indexes::parse(t).ok())
            {
                all.extend(&done);
            }
            // A Job that completed ran every index it was given, whatever its list says.
            if piece.state == PieceState::Complete && piece.completions > 0 {
                let start = to_u32(piece.start);
                all.insert(start, start + to_u32(piece.completions) - 1);
            }
        }
        let all = all.shifted_within(0, 0, completions);
        (u32::try_from(all.count()).unwrap_or(u32::MAX), Some(all))
    } else {
        let sum: i64 = pieces
            .iter()
            .map(|p| {
                if p.state == PieceState::Complete {
                    i64::from(p.completions)
                } else {
                    i64::from(p.succeeded)
                }
            })
            .sum();
        (
            u32::try_from(sum.clamp(0, i64::from(completions))).unwrap_or(0),
            None,
        )
    };
    let phase = if pieces.iter().any(|p| p.state == PieceState::Failed) {
        JobPhase::Failed
    } else if succeeded >= completions {
        JobPhase::Complete
    } else if pieces.iter().any(|p| p.state == PieceState::Queued) {
        JobPhase::Queued
    } else {
        JobPhase::Running
    };
    let clusters = pieces
        .iter()
        .filter(|p| !p.cluster.is_empty())
        .map(|p| p.cluster.clone())
        .collect();
    Summary {
        succeeded,
        failed,
        active,
        completed,
        phase,
        clusters,
    }
}

/// The pods each cluster runs for the job now: its Running pieces' parallelism (what the
/// ledger books for it).
pub fn running_pods(pieces: &[JobPiece]) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for piece in pieces.iter().filter(|p| p.state == PieceState::Running) {
        *out.entry(piece.cluster.clone()).or_insert(0) += to_u32(piece.parallelism);
    }
    out
}

#[cfg(test)]
mod tests {
    use nave_api::wire::ConditionSummary;

    use super::*;

    #[test]
    fn index_lists_parse_merge_and_print_as_a_job_writes_them() {
        let set = Indexes::parse("7,1,3-5,6").unwrap();
        assert_eq!(set.to_string(), "1,3-7");
        assert_eq!(set.count(), 6);
        assert_eq!(Indexes::parse("").unwrap().count(), 0);
        for bad in ["1-", "a", "5-3", "-1", "1,,x"] {
            assert!(Indexes::parse(bad).is_err(), "{bad:?} must be refused");
        }
        assert_eq!(
            Indexes::parse("0-9")
                .unwrap()
                .shifted_within(40, 40, 5)
                .to_string(),
            "40-44",
            "a cluster's report names nothing beyond its piece"
        );
        assert_eq!(
            Indexes::parse("12-13,15").unwrap().missing_in(10, 10),
            vec![(10, 2), (14, 1), (16, 4)]
        );
        assert_eq!(Indexes::parse("0-99").unwrap().missing_in(10, 10), vec![]);
        let mut merged = Indexes::parse("0-2,10,20-29").unwrap();
        merged.extend(&Indexes::parse("3-9,11,30").unwrap());
        assert_eq!(merged.to_string(), "0-11,20-30");
    }

    #[test]
    fn a_long_index_list_is_kept_whole_and_read_back_the_same() {
        // Every other index of the largest Indexed job: 50,000 ranges, far beyond any length a
        // truncated text would keep.
        let text: String = (0..100_000u32)
            .step_by(2)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let set = Indexes::parse(&text).unwrap();
        assert_eq!(set.count(), 50_000);
        let written = set.to_string();
        assert_eq!(written, text, "written back without loss");
        assert_eq!(Indexes::parse(&written).unwrap(), set);
        assert_eq!(set.missing_in(0, 100_000).len(), 50_000);
        // A cluster sending more ranges than any job can have is refused, not worked through.
        let flood = vec!["1"; MAX_RANGES + 1].join(",");
        assert!(Indexes::parse(&flood).is_err());
    }

    #[test]
    fn pieces_are_named_after_the_job_and_its_uid() {
        assert_eq!(
            stem("train", Some("3F2A1B7C-0000-4000-8000-000000000000")),
            "train-3f2a1"
        );
        assert_eq!(stem("train", None), "train");
        let again = stem("train", Some("9d04e6aa-0000-4000-8000-000000000000"));
        assert_ne!(
            job_name(&again, 0, 0),
            job_name(&stem("train", Some("3f2a1b7c")), 0, 0),
            "a job created again under the same name sends Jobs of other names"
        );
        let longest = job_name(
            &stem(&"x".repeat(nave_api::job::MAX_JOB_NAME), Some("3f2a1")),
            99_999,
            999_999,
        );
        assert!(longest.len() <= 63, "{longest}: {} characters", longest.len());
    }

    #[test]
    fn completions_are_cut_in_contiguous_ranges_by_each_clusters_pods() {
        let piece = first_piece(100, 10);
        let assignment = BTreeMap::from([("a".to_owned(), 5), ("b".to_owned(), 3), ("c".to_owned(), 2)]);
        let pieces = divide("render", &piece, &assignment, &BTreeMap::new());
        let cut: Vec<(&str, i32, i32, i32, &str)> = pieces
            .iter()
            .map(|p| {
                (
                    p.cluster.as_str(),
                    p.start,
                    p.completions,
                    p.parallelism,
                    p.job.as_str(),
                )
            })
            .collect();
        assert_eq!(
            cut,
            vec![
                ("a", 0, 50, 5, "render-0"),
                ("b", 50, 30, 3, "render-50"),
                ("c", 80, 20, 2, "render-80"),
            ]
        );
        // Fewer completions than pods: each index once, rounding by largest remainder.
        let small = divide(
            "x",
            &first_piece(2, 3),
            &BTreeMap::from([("a".to_owned(), 1), ("b".to_owned(), 1), ("c".to_owned(), 1)]),
            &BTreeMap::new(),
        );
        let total: i32 = small.iter().map(|p| p.completions).sum();
        assert_eq!(total, 2);
        assert!(small.iter().all(|p| p.parallelism <= p.completions));
        // A rerun starting where a piece started before is named apart.
        let again = divide(
            "x",
            &first_piece(4, 1),
            &BTreeMap::from([("b".to_owned(), 1)]),
            &BTreeMap::from([(0, 1)]),
        );
        assert_eq!(again[0].job, "x-0r1");
    }

    fn job(active: i32, succeeded: i32, indexes: Option<&str>, condition: Option<&str>) -> ObjectStatus {
        ObjectStatus {
            kind: "Job".into(),
            active: Some(active),
            succeeded: Some(succeeded),
            completed_indexes: indexes.map(str::to_owned),
            conditions: condition
                .map(|c| ConditionSummary {
                    type_: c.to_owned(),
                    status: "True".to_owned(),
                    reason: Some("BackoffLimitExceeded".to_owned()),
                    message: None,
                })
                .into_iter()
                .collect(),
            ..ObjectStatus::default()
        }
    }

    #[test]
    fn a_piece_refused_by_the_agent_is_followed_through_its_apply_error() {
        let workload = WorkloadRef::job("batch", "x");
        let mut piece = divide(
            "x",
            &first_piece(4, 2),
            &BTreeMap::from([("a".to_owned(), 2)]),
            &BTreeMap::new(),
        )
        .remove(0);
        let refusal = nave_api::wire::ApplyError {
            operation: "apply".to_owned(),
            kind: "Job".to_owned(),
            namespace: Some("batch".to_owned()),
            name: piece.job.clone(),
            message: "kind Job.batch is not allowed".to_owned(),
            ..Default::default()
        };
        let refused = StatusReport {
            apply_errors: vec![refusal],
            ..StatusReport::default()
        };
        follow(&mut piece, Some(&refused), &workload, false);
        assert_eq!(
            piece.message.as_deref(),
            Some("not applied: kind Job.batch is not allowed")
        );
        assert_eq!(piece.state, PieceState::Running, "it may yet run");
        // Applied later: its Job's status is read, and the refusal is gone.
        let mut applied = job(1, 0, None, None);
        applied.name = piece.job.clone();
        applied.workload = Some(workload.clone());
        let applied = StatusReport {
            objects: vec![applied],
            ..StatusReport::default()
        };
        follow(&mut piece, Some(&applied), &workload, false);
        assert_eq!((piece.message.as_deref(), piece.active), (None, 1));
    }

    #[test]
    fn a_lost_cluster_runs_again_only_what_it_had_not_completed() {
        let mut pieces = divide(
            "x",
            &first_piece(30, 3),
            &BTreeMap::from([("a".to_owned(), 1), ("b".to_owned(), 1), ("c".to_owned(), 1)]),
            &BTreeMap::new(),
        );
        observe(
            &mut pieces[0],
            Some(&job(0, 10, Some("0-9"), Some("Complete"))),
            true,
        );
        observe(&mut pieces[1], Some(&job(1, 4, Some("0-1,5,7"), None)), true);
        assert_eq!(pieces[1].completed_indexes.as_deref(), Some("10-11,15,17"));
        let lost = BTreeMap::from([("b".to_owned(), "no heartbeat".to_owned())]);
        assert_eq!(lose(&mut pieces, &lost, true), 1);
        assert_eq!(pieces[1].state, PieceState::Lost);
        let rerun: Vec<(i32, i32)> = pieces[3..].iter().map(|p| (p.start, p.completions)).collect();
        assert_eq!(rerun, vec![(12, 3), (16, 1), (18, 2)]);
        assert!(
            pieces[3..]
                .iter()
                .all(|p| p.state == PieceState::Queued && p.parallelism == 1)
        );
        let summary = summarize(&pieces, 30, true);
        assert_eq!(summary.succeeded, 14);
        assert_eq!(summary.phase, JobPhase::Queued);
        assert_eq!(summary.completed.unwrap().to_string(), "0-11,15,17");
        // The reruns complete: each index counted once.
        for p in pieces.iter_mut().skip(3) {
            p.state = PieceState::Complete;
        }
        observe(
            &mut pieces[2],
            Some(&job(0, 10, Some("0-9"), Some("Complete"))),
            true,
        );
        let summary = summarize(&pieces, 30, true);
        assert_eq!((summary.succeeded, summary.phase), (30, JobPhase::Complete));
    }

    #[test]
    fn non_indexed_reruns_the_count_left_and_a_failed_piece_fails_the_job() {
        let mut pieces = divide(
            "x",
            &first_piece(10, 2),
            &BTreeMap::from([("a".to_owned(), 2)]),
            &BTreeMap::new(),
        );
        observe(&mut pieces[0], Some(&job(2, 4, None, None)), false);
        lose(
            &mut pieces,
            &BTreeMap::from([("a".to_owned(), "removed".to_owned())]),
            false,
        );
        assert_eq!(
            (pieces[1].start, pieces[1].completions, pieces[1].parallelism),
            (0, 6, 2)
        );
        assert_eq!(summarize(&pieces, 10, false).succeeded, 4);
        let mut failing = divide(
            "y",
            &first_piece(4, 1),
            &BTreeMap::from([("a".to_owned(), 1)]),
            &BTreeMap::new(),
        );
        observe(&mut failing[0], Some(&job(0, 1, None, Some("Failed"))), false);
        assert_eq!(failing[0].state, PieceState::Failed);
        assert_eq!(summarize(&failing, 4, false).phase, JobPhase::Failed);
        // A finished piece is not changed by a later report, nor lost with its cluster.
        observe(&mut failing[0], Some(&job(1, 0, None, None)), false);
        assert_eq!(failing[0].state, PieceState::Failed);
        assert_eq!(
            lose(
                &mut failing,
                &BTreeMap::from([("a".to_owned(), "gone".to_owned())]),
                false
            ),
            0
        );
    }

    #[test]
    fn a_report_from_a_cluster_cannot_count_beyond_its_piece() {
        let mut pieces = divide(
            "x",
            &first_piece(10, 1),
            &BTreeMap::from([("a".to_owned(), 1)]),
            &BTreeMap::new(),
        );
        pieces[0].completions = 5;
        observe(&mut pieces[0], Some(&job(0, 500, Some("0-99999"), None)), true);
        assert_eq!(pieces[0].succeeded, 5);
        assert_eq!(pieces[0].completed_indexes.as_deref(), Some("0-4"));
        observe(&mut pieces[0], Some(&job(0, 1, Some("zero"), None)), true);
        assert!(
            pieces[0]
                .message
                .as_deref()
                .unwrap_or_default()
                .contains("cannot be read")
        );
        assert_eq!(
            pieces[0].completed_indexes.as_deref(),
            Some("0-4"),
            "an unreadable list keeps what was read before"
        );
        // A piece whose completions were written negative (its status is anyone's to write
        // who may) is read without a panic.
        let mut odd = pieces[0].clone();
        odd.completions = -3;
        observe(&mut odd, Some(&job(5, 5, None, None)), false);
        assert_eq!((odd.active, odd.succeeded), (0, 0));
        // Counts no piece can reach are bounded, and adding up many of them does not overflow.
        let mut huge = job(i32::MAX, 0, None, None);
        huge.failed = Some(i32::MAX);
        let mut many = vec![pieces[0].clone(); 3000];
        for piece in &mut many {
            observe(piece, Some(&huge), false);
            assert!(piece.active <= piece.completions);
        }
        let summary = summarize(&many, 10, false);
        assert_eq!(summary.failed, i32::MAX);
        assert!(summary.active >= 0);
    }
}
