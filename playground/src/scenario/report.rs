//! Results: one row per run, the table `nave-sim scenario` prints, and the JSON it writes.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::measure::Measurements;

/// The hub's counters at the end of a run (`/metrics`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HubCounters {
    /// `nave_reschedules_total`: replicas moved by rescheduling.
    pub reschedules: u64,
    /// `nave_bursts_total`: placements that started using burst clusters.
    pub bursts: u64,
    /// `nave_failovers_total`: workloads moved off clusters that stopped reporting.
    pub failovers: u64,
}

impl HubCounters {
    /// Reads the counters from the hub's OpenMetrics text; absent counters are 0.
    pub fn parse(text: &str) -> HubCounters {
        let value = |name: &str| -> u64 {
            text.lines()
                .filter_map(|line| line.strip_prefix(name))
                .filter_map(|rest| rest.strip_prefix(' '))
                .filter_map(|v| v.trim().parse::<f64>().ok())
                .map(|v| v.max(0.0) as u64)
                .next()
                .unwrap_or(0)
        };
        HubCounters {
            reschedules: value("nave_reschedules_total"),
            bursts: value("nave_bursts_total"),
            failovers: value("nave_failovers_total"),
        }
    }
}

/// The outcome of one run, in scenario time. The first six fields are the shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// `static` or a Nave placement policy.
    pub policy: String,
    /// Pod-seconds Pending / pod-seconds of the workloads' pods (0 to 1).
    pub pending_fraction: f64,
    /// Median time from an arrival or scale-up until the workload's ready replicas, summed over
    /// clusters, reach its total (scenario seconds; events never ready count until the workload
    /// changed again or the run ended). `null` when there were no such events.
    pub ready_p50_s: Option<f64>,
    /// The 99th percentile of the same (nearest rank).
    pub ready_p99_s: Option<f64>,
    /// Replicas moved between clusters: in each change of a placement, the replicas removed from
    /// some clusters and added to others (the lesser of the two sums). 0 for `static`.
    pub moved: u64,
    /// Mean number of workload clusters holding at least one pod of a workload, over the time
    /// each workload has pods.
    pub clusters_used: f64,
    /// Replica-seconds wanted but not served by a Ready pod (unplaced, Pending or starting) /
    /// replica-seconds wanted (0 to 1).
    pub unserved_fraction: f64,
    /// Share of the pod-seconds spent in the burst cluster (0 to 1).
    pub burst_fraction: f64,
    /// Share of the workloads' requests served in the cluster they arrive at (0 to 1; see
    /// [`Measurements::local_requests`]); `null` when no traffic was simulated.
    #[serde(default)]
    pub local_fraction: Option<f64>,
    /// Pod-seconds of the workloads' pods (scenario seconds).
    pub pod_seconds: f64,
    /// Of which Pending (scenario seconds).
    pub pending_pod_seconds: f64,
    /// Arrivals and scale-ups whose replicas all became ready.
    pub ready_events: usize,
    /// Arrivals and scale-ups whose replicas did not all become ready before the workload changed
    /// again, left, or the run ended.
    pub unready_events: usize,
    /// Batch jobs: median time from submission until all its completions succeeded (scenario
    /// seconds; jobs not done count until the run ended). `null` without batch jobs.
    #[serde(default)]
    pub job_p50_s: Option<f64>,
    /// The 99th percentile of the same (nearest rank).
    #[serde(default)]
    pub job_p99_s: Option<f64>,
    /// Batch jobs done before the run ended.
    #[serde(default)]
    pub jobs_done: usize,
    /// Batch jobs not done when the run ended.
    #[serde(default)]
    pub jobs_unfinished: usize,
    /// Pod-seconds of the batch jobs' pods in phase Pending (scenario seconds): waiting in a
    /// full cluster rather than in a queue.
    #[serde(default)]
    pub batch_pending_pod_seconds: f64,
    /// Those pending pod-seconds / all pod-seconds of the batch jobs' pods (0 to 1).
    #[serde(default)]
    pub batch_pending_fraction: f64,
    /// The hub's counters (`null` for `static`, which has no hub).
    pub hub: Option<HubCounters>,
    /// How long the run took, in real seconds (start-up and tear-down included).
    pub wall_seconds: f64,
}

impl RunResult {
    /// The row of `policy` from what the monitor measured at `time_scale`.
    pub fn new(
        policy: &str,
        m: &Measurements,
        time_scale: f64,
        moved: u64,
        hub: Option<HubCounters>,
    ) -> Self {
        let ratio = |a: f64, b: f64| if b > 0.0 { (a / b).clamp(0.0, 1.0) } else { 0.0 };
        let mut times: Vec<Duration> = m.ready.iter().chain(&m.unready).copied().collect();
        times.sort();
        let scenario = |d: Duration| round(d.as_secs_f64() * time_scale, 1);
        let mut jobs: Vec<Duration> = m.jobs_done.iter().chain(&m.jobs_unfinished).copied().collect();
        jobs.sort();
        RunResult {
            policy: policy.to_owned(),
            pending_fraction: round(ratio(m.pending_seconds, m.pod_seconds), 4),
            ready_p50_s: percentile(&times, 50).map(scenario),
            ready_p99_s: percentile(&times, 99).map(scenario),
            moved,
            clusters_used: round(ratio_any(m.cluster_seconds, m.workload_seconds), 2),
            unserved_fraction: round(ratio(m.unserved_seconds, m.wanted_seconds), 4),
            burst_fraction: round(ratio(m.burst_seconds, m.pod_seconds), 4),
            local_fraction: (m.requests > 0.0).then(|| round(ratio(m.local_requests, m.requests), 4)),
            pod_seconds: round(m.pod_seconds * time_scale, 0),
            pending_pod_seconds: round(m.pending_seconds * time_scale, 0),
            ready_events: m.ready.len(),
            unready_events: m.unready.len(),
            job_p50_s: percentile(&jobs, 50).map(scenario),
            job_p99_s: percentile(&jobs, 99).map(scenario),
            jobs_done: m.jobs_done.len(),
            jobs_unfinished: m.jobs_unfinished.len(),
            batch_pending_pod_seconds: round(m.batch_pending_seconds * time_scale, 0),
            batch_pending_fraction: round(ratio(m.batch_pending_seconds, m.batch_pod_seconds), 4),
            hub,
            wall_seconds: 0.0,
        }
    }
}

fn ratio_any(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

fn round(value: f64, decimals: i32) -> f64 {
    let f = 10f64.powi(decimals);
    (value * f).round() / f
}

/// The `p`th percentile of sorted `values` by nearest rank; `None` when empty.
pub fn percentile(sorted: &[Duration], p: u32) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (u64::from(p) * sorted.len() as u64).div_ceil(100).max(1);
    sorted.get(rank as usize - 1).copied()
}

/// Replicas moved in a placement's history (oldest first): at each change, the lesser of the
/// replicas taken from some clusters and the replicas given to others. A scale-up adds without
/// taking and a scale-down takes without adding, so neither counts; replicas that move while
/// the total changes do.
pub fn moved_replicas(history: &[BTreeMap<String, u32>]) -> u64 {
    history
        .windows(2)
        .map(|pair| {
            let (before, after) = (&pair[0], &pair[1]);
            let clusters: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
            let (mut taken, mut given) = (0u64, 0u64);
            for cluster in clusters {
                let b = u64::from(before.get(cluster).copied().unwrap_or(0));
                let a = u64::from(after.get(cluster).copied().unwrap_or(0));
                taken += b.saturating_sub(a);
                given += a.saturating_sub(b);
            }
            taken.min(given)
        })
        .sum()
}

/// Every run of a scenario, with what describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The scenario's name (`testbed`).
    pub scenario: String,
    /// The seed of the workload stream.
    pub seed: u64,
    /// Scenario seconds per real second.
    pub time_scale: f64,
    /// How long each run lasts, in scenario seconds.
    pub duration_s: f64,
    /// The runs, in the order they ran.
    pub runs: Vec<RunResult>,
}

impl Report {
    /// The table `nave-sim scenario` prints.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<10} {:>9} {:>10} {:>10} {:>10} {:>6} {:>14} {:>7} {:>7} {:>9} {:>9} {:>10}\n",
            "policy",
            "pending",
            "unserved",
            "ready p50",
            "ready p99",
            "moved",
            "clusters used",
            "burst",
            "local",
            "job p50",
            "job p99",
            "job pend"
        );
        let percent = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{:.1}%", v * 100.0));
        let seconds = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0} s"));
        for r in &self.runs {
            s.push_str(&format!(
                "{:<10} {:>8.1}% {:>9.1}% {:>10} {:>10} {:>6} {:>14.2} {:>6.1}% {:>7} {:>9} {:>9} {:>9.1}%\n",
                r.policy,
                r.pending_fraction * 100.0,
                r.unserved_fraction * 100.0,
                seconds(r.ready_p50_s),
                seconds(r.ready_p99_s),
                r.moved,
                r.clusters_used,
                r.burst_fraction * 100.0,
                percent(r.local_fraction),
                seconds(r.job_p50_s),
                seconds(r.job_p99_s),
                r.batch_pending_fraction * 100.0,
            ));
        }
        s
    }

    /// What the columns mean, printed under the table.
    pub fn legend(&self) -> String {
        let counts = |left: fn(&RunResult) -> (usize, usize)| -> String {
            self.runs
                .iter()
                .map(|r| {
                    let (not, done) = left(r);
                    format!("{} {not}/{}", r.policy, not + done)
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let events = counts(|r| (r.unready_events, r.ready_events));
        let jobs = counts(|r| (r.jobs_unfinished, r.jobs_done));
        format!(
            "pending: share of the workloads' pod-seconds in phase Pending (unschedulable or starting).\n\
             unserved: share of the wanted replica-seconds without a Ready pod (unplaced, Pending or starting).\n\
             ready p50/p99: scenario seconds from an arrival or scale-up until the ready replicas, summed over\n  \
             clusters, reach the new total; events never ready count until the workload next changed or the\n  \
             run ended (never ready: {}).\n\
             moved: replicas the hub moved between clusters (placement history). clusters used: mean number of\n  \
             clusters holding at least one pod of a workload, over the time it has pods. burst: share of\n  \
             pod-seconds in the burst cluster. local: share of the workloads' requests served in the cluster\n  \
             they arrive at (each ready replica serving an equal part; none while no replica is ready).\n\
             job p50/p99: scenario seconds from a batch job's submission until its pods had succeeded as many\n  \
             times as its completions; jobs not done count until the run ended (not done: {}).\n\
             job pend: share of the batch jobs' pod-seconds in phase Pending (a job Nave queues has no pods yet).\n",
            events, jobs
        )
    }

    /// The report as pretty JSON (`{"runs": [...], ...}`).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".to_owned())
    }

    /// Writes [`Report::to_json`] to `path`.
    pub fn write_json(&self, path: &std::path::Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_json() + "\n")
    }
}
