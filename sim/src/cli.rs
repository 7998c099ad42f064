//! The emulator's subcommands, `serve` (one cluster) and `fleet` (many clusters in one process),
//! for a binary to embed in its command line: the `nave-sim` binary of the playground
//! (`nave-playground`) flattens [`Command`] into its own.

use std::path::PathBuf;

use clap::Subcommand;

use crate::cluster::{ServeOptions, SimCluster, SimFleet};
use crate::config::{ClusterConfig, FleetConfig};

/// The emulator's subcommands.
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

/// Resolves on Ctrl-C, or SIGTERM on Unix.
pub async fn shutdown_signal() {
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

/// Runs an emulator subcommand until Ctrl-C / SIGTERM.
pub async fn run(command: Command) -> anyhow::Result<()> {
    match command {
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
