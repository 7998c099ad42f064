//! The `nave-sim` command line: the emulator's `serve` (one cluster) and `fleet` (many clusters
//! in one process), from [`nave_sim::cli`], and the playground's `up` and `scenario` (evaluation
//! runs of Nave on a simulated fleet).

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use nave_sim::FleetConfig;
use nave_sim::cli::shutdown_signal;

/// nave-sim: Nave's playground on a Kubernetes API emulator with simulated nodes and pods.
#[derive(Debug, Parser)]
#[command(name = "nave-sim", version, about)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The playground: a simulated management cluster with Nave's CRDs and a fleet of workload
    /// clusters, until Ctrl-C / SIGTERM.
    Up {
        /// How many workload clusters of the default fleet (different sizes and regions).
        #[arg(long, default_value_t = 3, conflicts_with = "config", value_parser = clap::value_parser!(u16).range(1..=100))]
        clusters: u16,
        /// A fleet file instead of the default fleet.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Where to write kubeconfigs and `ready.json`.
        #[arg(long, default_value = ".nave")]
        dir: PathBuf,
        /// Serve HTTPS with generated CAs.
        #[arg(long)]
        tls: bool,
        /// Do not start Prometheus even when `prometheus` is on PATH (scores then use requests).
        #[arg(long)]
        no_prometheus: bool,
    },
    /// Run an evaluation scenario of Nave's placement on a simulated fleet and print the figures.
    Scenario {
        /// Which scenario.
        #[command(subcommand)]
        scenario: Scenario,
    },
    /// The emulator's own: `serve` and `fleet`.
    #[command(flatten)]
    Emulator(nave_sim::cli::Command),
}

/// The scenarios of `nave-sim scenario`.
#[derive(Debug, Subcommand)]
pub enum Scenario {
    /// mck8s's testbed: 5 clusters of 5 workers (4 CPU / 4 GiB) and a burst cluster, other
    /// tenants filling them unevenly, 40 workloads arriving, scaling and leaving over 40 scenario
    /// minutes; one run per Nave policy and a static KubeFed-like baseline, each in a fresh
    /// environment. Prints pending share, time to ready, replicas moved and clusters used.
    Testbed {
        /// Also write the figures as JSON to this file (`{"runs": [{"policy": ..}, ..]}`).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Seed of the workload stream: the same seed gives the same events.
        #[arg(long, default_value_t = crate::scenario::DEFAULT_SEED)]
        seed: u64,
        /// Scenario seconds per real second (60: a scenario minute lasts a real second), 1 to 600.
        #[arg(long, default_value_t = crate::scenario::DEFAULT_TIME_SCALE, value_parser = time_scale)]
        time_scale: f64,
        /// The runs, comma-separated: worst-fit, best-fit, spread, proximity, static, and traffic
        /// (which needs the `prometheus` binary).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "worst-fit,best-fit,spread,proximity,static"
        )]
        policies: Vec<crate::scenario::RunKind>,
    },
}

impl Cli {
    /// The log filter when `RUST_LOG` is unset. Scenarios print a table, and the hub, the agents
    /// and the clusters they run log retries that are routine there, so only errors reach the
    /// terminal (`RUST_LOG=warn` shows more).
    pub fn default_log_filter(&self) -> &'static str {
        match self.command {
            Command::Scenario { .. } => "error",
            _ => "info",
        }
    }
}

fn time_scale(value: &str) -> Result<f64, String> {
    let scale: f64 = value.parse().map_err(|_| format!("{value:?} is not a number"))?;
    if crate::scenario::run::TIME_SCALES.contains(&scale) {
        Ok(scale)
    } else {
        Err(format!("{value} is not between 1 and 600"))
    }
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Emulator(command) => nave_sim::cli::run(command).await?,
        Command::Up {
            clusters,
            config,
            dir,
            tls,
            no_prometheus,
        } => {
            // A fleet file says which links it wants; the default fleet gets them by distance.
            let fleet = match config {
                Some(p) => FleetConfig::from_file(&p)?,
                None => crate::up::with_distance_links(crate::up::default_fleet(usize::from(clusters))),
            };
            let playground = crate::up::Playground::start(crate::up::UpOptions {
                tls,
                prometheus: !no_prometheus,
                ..crate::up::UpOptions::new(fleet, dir)
            })
            .await?;
            print!("{}", playground.next_steps());
            shutdown_signal().await;
            playground.shutdown().await;
        }
        Command::Scenario {
            scenario:
                Scenario::Testbed {
                    json,
                    seed,
                    time_scale,
                    mut policies,
                },
        } => {
            let mut seen = std::collections::BTreeSet::new();
            policies.retain(|p| seen.insert(p.name()));
            crate::scenario::testbed(seed, time_scale, policies, json.as_deref()).await?;
        }
    }
    Ok(())
}
