//! The `nave-sim` command line: `serve` (one cluster), `fleet` (many clusters in one process),
//! `up` (the playground) and `scenario` (evaluation runs of Nave on a simulated fleet).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::cluster::{ServeOptions, SimCluster, SimFleet};
use crate::config::{ClusterConfig, FleetConfig};

/// nave-sim: a Kubernetes API emulator with simulated nodes and pods.
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
    /// Serve one simulated cluster until Ctrl-C / SIGTERM.
    Serve {
        /// Cluster configuration (YAML); default: 3 nodes of 4 CPU / 16Gi / 110 pods.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Listen address (port 0 = any free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// Serve HTTPS with a generated CA.
        #[arg(long)]
        tls: bool,
        /// Where to write the kubeconfig.
        #[arg(long)]
        kubeconfig_out: PathBuf,
    },
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
    /// Serve every cluster of a fleet file, one listener each.
    Fleet {
        /// Fleet configuration (YAML).
        #[arg(long)]
        config: PathBuf,
        /// Directory for `<name>.kubeconfig` files and `ready.json`.
        #[arg(long)]
        out: PathBuf,
        /// Serve HTTPS with a generated CA per cluster.
        #[arg(long)]
        tls: bool,
    },
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
        /// The runs, comma-separated: worst-fit, best-fit, spread, proximity, static.
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

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve {
            config,
            listen,
            tls,
            kubeconfig_out,
        } => {
            let config = match config {
                Some(p) => ClusterConfig::from_file(&p)?,
                None => ClusterConfig::default(),
            };
            let opts = ServeOptions {
                listen,
                tls,
                ..ServeOptions::default()
            };
            let sim = SimCluster::start(config, opts).await?;
            sim.write_kubeconfig(&kubeconfig_out)?;
            println!("{}", sim.url());
            tracing::info!(cluster = sim.name(), url = sim.url(), kubeconfig = %kubeconfig_out.display(), "serving");
            shutdown_signal().await;
            sim.shutdown().await;
        }
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
        Command::Fleet { config, out, tls } => {
            let config = FleetConfig::from_file(&config)?;
            std::fs::create_dir_all(&out)?;
            let opts = ServeOptions {
                tls,
                ..ServeOptions::default()
            };
            let fleet = SimFleet::start(config, opts).await?;
            let mut ready = Vec::new();
            for c in &fleet.clusters {
                let path = out.join(format!("{}.kubeconfig", c.name()));
                c.write_kubeconfig(&path)?;
                ready.push(serde_json::json!({
                    "name": c.name(),
                    "url": c.url(),
                    "kubeconfig": path.display().to_string(),
                    "metricsUrl": c.metrics_url(),
                }));
                println!("{} {}", c.name(), c.url());
            }
            // Written last, atomically: its presence means every cluster is serving.
            let tmp = out.join("ready.json.tmp");
            std::fs::write(
                &tmp,
                serde_json::to_string_pretty(&serde_json::json!({"clusters": ready}))?,
            )?;
            std::fs::rename(&tmp, out.join("ready.json"))?;
            shutdown_signal().await;
            let _ = std::fs::remove_file(out.join("ready.json"));
            fleet.shutdown().await;
        }
    }
    Ok(())
}
