//! `nave-sim scenario testbed`: Nave's placement policies against a KubeFed-like static
//! baseline, on the same simulated fleet, with the same other tenants and the same stream of
//! workloads, measured in the workload clusters.
//!
//! ```text
//!   Plan (seeded): fleet, tenants' pods, timeline of events in scenario time
//!     │
//!     ├─► run worst-fit ─┐  fresh environment each: PlaygroundClusters (up.rs) + tenants,
//!     ├─► run best-fit   │  then the hub and the agents (Nave runs) or nothing (static);
//!     ├─► run spread     │  events at t0 + at / time_scale: MCDs (Nave) or Deployments
//!     ├─► run proximity  │  divided evenly (static); tenants' pods arrive and leave
//!     └─► run static ────┘  Monitor: pod watches in every workload cluster ─► RunResult
//!                                       hub: REST placement history, /metrics ─┘
//!   Report ─► table (stdout), JSON (--json)
//! ```
//!
//! Time is compressed: the simulator has no clock to control, so everything that has a
//! duration (pod start-up, agents' heartbeats, `pendingTimeout`, the events) is divided by the
//! time scale, and measurements are multiplied back. At the default scale of 60 a scenario
//! minute lasts a real second and the 40-minute testbed runs in 40 s plus start-up.
//!
//! The runner uses only what a user has: the MultiClusterDeployment spec, the REST API and
//! `/metrics`; so the figures follow whatever the hub does, with no knowledge of how.

pub mod measure;
pub mod plan;
pub mod report;
pub mod run;

use std::path::Path;

pub use self::plan::{DEFAULT_SEED, Plan, Shape};
pub use self::report::{Report, RunResult};
pub use self::run::{Options, RunKind, run};

/// The default time scale: a scenario minute per real second.
pub const DEFAULT_TIME_SCALE: f64 = 60.0;

/// Runs the testbed scenario: prints what it is, a line per finished run on stderr, then the
/// table and its legend on stdout, and writes the JSON report to `json` when given.
pub async fn testbed(
    seed: u64,
    time_scale: f64,
    runs: Vec<RunKind>,
    json: Option<&Path>,
) -> anyhow::Result<Report> {
    let plan = Plan::generate(&Shape::testbed(), seed).map_err(|e| anyhow::anyhow!("the testbed: {e}"))?;
    eprintln!("{}", describe(&plan, time_scale));
    let options = Options {
        plan,
        time_scale,
        runs,
    };
    let report = run(&options, |r| {
        eprintln!(
            "run {:<10} done in {:.0} s: pending {:.1}%, ready p50 {}",
            r.policy,
            r.wall_seconds,
            r.pending_fraction * 100.0,
            r.ready_p50_s
                .map_or_else(|| "-".to_owned(), |s| format!("{s:.0} s"))
        );
    })
    .await?;
    print!("{}\n{}", report.table(), report.legend());
    if let Some(path) = json {
        report
            .write_json(path)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    Ok(report)
}

/// One paragraph saying what the scenario is.
pub fn describe(plan: &Plan, time_scale: f64) -> String {
    let s = &plan.shape;
    let cpu = |millis: u64| format!("{:.0}", millis as f64 / 1000.0);
    format!(
        "testbed: {} clusters x {} nodes ({} CPU / {}) + burst cluster ({} x {} CPU / {}); other tenants fill \
         {:?}% at the start, then come and go;\n{} workloads over {} scenario minutes (seed {}), peak demand {} CPU \
         against {} CPU free in the regular clusters and {} in the burst cluster;\n{} batch jobs (2-8 pods at once, \
         1-3 rounds of 1-3 scenario minutes) arriving over the run;\n\
         time scale {time_scale}: a scenario minute lasts {:.2} real seconds.",
        plan.regular.len(),
        s.nodes,
        s.node_cpu,
        s.node_memory,
        s.burst_nodes,
        s.burst_cpu,
        s.burst_memory,
        s.background_percent,
        s.workloads,
        s.duration.as_secs() / 60,
        plan.seed,
        cpu(plan.peak_cpu_millis()),
        cpu(plan.regular_free_cpu_millis()),
        cpu(plan.burst_cpu_millis()),
        s.jobs,
        60.0 / time_scale,
    )
}

#[cfg(test)]
mod tests;
