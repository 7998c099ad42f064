//! nave-playground: Nave on simulated clusters. It builds the `nave-sim` binary: `nave-sim up`
//! serves a simulated management cluster with Nave's CRDs, runs the hub and one agent per
//! simulated workload cluster in the same process, and writes what a user needs to talk to them;
//! `nave-sim scenario` runs evaluation scenarios on such a fleet; `serve` and `fleet` are the
//! emulator's own subcommands ([`nave_sim::cli`]).
//!
//! ```text
//!   nave-sim (cli) ──► up ──► nave_sim::SimFleet + management SimCluster (emulator, no Nave)
//!        │              │        ▲ CRDs (nave-api), WorkloadClusters declared
//!        │              ├──► nave-hub (run_until) ◄── nave-agent × clusters (run_agent)
//!        │              └──► prometheus: a real Prometheus scraping clusters, hub, agents
//!        ├─► scenario ──► up's two steps per run, tenants' pods, measurements ─► Report
//!        └─► serve / fleet ──► nave_sim::cli
//! ```
//!
//! The emulator (`nave-sim`) knows nothing of Nave; everything that ties it to Nave lives here,
//! and the end-to-end tests reuse [`up`] and [`prometheus`] for their own environments.

#![forbid(unsafe_code)]

pub mod cli;
pub mod prometheus;
pub mod scenario;
pub mod up;
