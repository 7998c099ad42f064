//! Command line of `nave-hub`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Nave's hub: places MultiClusterDeployments across workload clusters.
#[derive(Debug, Parser)]
#[command(name = "nave-hub", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the hub: controllers, agent endpoints, loops.
    Run(RunArgs),
    /// Print the CustomResourceDefinitions as YAML (`nave-hub crds | kubectl apply -f -`).
    Crds,
}

/// Arguments of `nave-hub run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The store: `sqlite://PATH` (created when missing) or `postgres://...`.
    #[arg(long, env = "NAVE_DATABASE_URL")]
    pub database_url: String,
    /// Address of the HTTP server (agent endpoints).
    #[arg(long, env = "NAVE_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// File holding the fleet's bootstrap token, which agents present to register.
    #[arg(long, env = "NAVE_BOOTSTRAP_TOKEN_FILE")]
    pub bootstrap_token_file: PathBuf,
    /// Kubeconfig of the management cluster; default: KUBECONFIG, ~/.kube/config or in-cluster.
    #[arg(long, env = "NAVE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Print logs as JSON lines.
    #[arg(long, env = "NAVE_LOG_JSON")]
    pub log_json: bool,
}
