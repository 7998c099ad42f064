//! `nave`: the operator's command line for a Nave fleet, also run by kubectl as the plugin
//! `kubectl nave` (the binary `kubectl-nave` on `PATH`).
//!
//! ```text
//!   nave ──► management cluster (kubeconfig: --kubeconfig, $KUBECONFIG, ~/.kube/config; --context)
//!   │          WorkloadClusters: clusters, cordon, uncordon, drain, unjoin
//!   └──────► hub's REST API (--hub-url, --token-file, --ca-file or NAVE_HUB_URL, ...)
//!              join tokens, placements and their explanations, what-if simulation
//!   (rebalance: an annotation on the MultiClusterDeployment, which the hub acts on;
//!    rollout: its spec.rollout and status.rollout)
//! ```
//!
//! Every command prints a table or text for people and `-o json` / `-o yaml` for scripts, and
//! ends with an exit code scripts can branch on ([`ExitKind`]).

#![forbid(unsafe_code)]

mod clusters;
mod error;
mod hub;
mod join;
mod output;
mod placements;
mod rollout;
mod unjoin;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

pub use error::{CliError, ExitKind};
pub use output::Format;

/// nave: places workloads across a fleet of Kubernetes clusters. This is its operator's
/// command line; it talks to the management cluster and to the hub's REST API.
#[derive(Debug, Parser)]
#[command(name = "nave", version, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// Where the fleet is and how to print.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

const EXIT_CODES: &str = "Exit codes: 0 done; 1 failed (unreachable, or refused by the hub or \
    the cluster); 2 invalid input (flags, files, a spec the hub refuses); 3 not found; 4 not \
    allowed (the hub or the cluster refused the credentials: unknown, or too small a scope).";

/// Flags every command takes.
#[derive(Debug, Clone, Args)]
pub struct Global {
    /// The management cluster's kubeconfig; default: `$KUBECONFIG`, then `~/.kube/config`, then
    /// the in-cluster configuration.
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use; default: its current context.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The hub's URL, e.g. `https://nave-hub.example.com` (join, explain, simulate).
    #[arg(long, global = true, env = "NAVE_HUB_URL")]
    pub hub_url: Option<String>,
    /// File holding a REST API token (`read` scope; `admin` for join).
    #[arg(long, global = true, env = "NAVE_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// PEM file of the CA that signs the hub's certificate; default: the public CAs.
    #[arg(long, global = true, env = "NAVE_HUB_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// How long a request to the hub or the cluster may take, e.g. `30s`.
    #[arg(long, global = true, default_value = "30s", value_parser = nave_runtime::positive_duration)]
    pub request_timeout: Duration,
    /// Output: `table` (for people), `json` or `yaml`.
    #[arg(short, long, global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

/// Commands.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// The fleet: every WorkloadCluster with its health, capacity and requested share.
    Clusters,
    /// Place no new replicas in a cluster; what runs there stays.
    Cordon {
        /// The cluster.
        cluster: String,
    },
    /// Move every workload off a cluster (make-before-break, as far as the rest of the fleet has
    /// room) and keep them off: the taint nave.dev/drain:NoExecute. Workloads that tolerate it stay.
    Drain {
        /// The cluster.
        cluster: String,
        /// Wait until no workload runs replicas there, at most this long (e.g. `10m`).
        #[arg(long, value_parser = nave_runtime::positive_duration)]
        wait: Option<Duration>,
    },
    /// Take a cluster out of the fleet: delete its WorkloadCluster. The hub moves its workloads
    /// away (make-before-break), waits until its agent has applied the empty work set, revokes
    /// its credentials and forgets it; only a join token brings it back.
    Unjoin {
        /// The cluster.
        cluster: String,
        /// Do not wait for the agent to confirm (a cluster gone for good): the hub forgets the
        /// cluster at once, and whatever still runs there is left running, unmanaged.
        #[arg(long)]
        force: bool,
        /// Wait until the cluster is removed, at most this long (e.g. `10m`).
        #[arg(long, value_parser = nave_runtime::positive_duration)]
        wait: Option<Duration>,
    },
    /// Let a cordoned or drained cluster take new replicas again.
    Uncordon {
        /// The cluster.
        cluster: String,
    },
    /// Issue a single-use join token for a new cluster and print the commands that install its
    /// agent (needs an admin token).
    Join {
        /// The name the cluster joins under.
        cluster: String,
        /// How long the token stays usable, e.g. `30m`, `2h` (1 minute to 7 days).
        #[arg(long, default_value = "1h", value_parser = nave_runtime::positive_duration)]
        ttl: Duration,
        /// The cluster's region, for the agent's Helm values.
        #[arg(long)]
        region: Option<String>,
    },
    /// Why each cluster got what it got: a MultiClusterDeployment's placement, explained.
    Explain {
        /// The MultiClusterDeployment.
        name: String,
        /// Its namespace; default: the kubeconfig context's.
        #[arg(short, long)]
        namespace: Option<String>,
    },
    /// Place a MultiClusterDeployment again from scratch now, as if it were new (replicas that
    /// move keep running until their successors are ready): the annotation nave.dev/rebalance.
    Rebalance {
        /// The MultiClusterDeployment.
        name: String,
        /// Its namespace; default: the kubeconfig context's.
        #[arg(short, long)]
        namespace: Option<String>,
    },
    /// A MultiClusterDeployment's rollout in waves (spec.rollout): where it stands, pause,
    /// resume, undo.
    Rollout {
        /// What to do.
        #[arg(value_enum)]
        action: rollout::Action,
        /// The MultiClusterDeployment.
        name: String,
        /// Its namespace; default: the kubeconfig context's.
        #[arg(short, long)]
        namespace: Option<String>,
        /// With `status`: follow it until it completes (exit 0) or halts (exit 1), at most this
        /// long (e.g. `10m`).
        #[arg(long, value_parser = nave_runtime::positive_duration)]
        wait: Option<Duration>,
    },
    /// What the hub would decide for a MultiClusterDeployment manifest, without applying it (a
    /// change of an existing one starts from its current placement).
    Simulate {
        /// The manifest (YAML or JSON; `-` for standard input). Its MultiClusterDeployment is
        /// simulated; other documents are ignored.
        #[arg(short, long)]
        filename: PathBuf,
        /// The namespace when the manifest names none; default: the kubeconfig context's.
        #[arg(short, long)]
        namespace: Option<String>,
    },
}

/// Parses the command line, runs it and answers the exit code; errors go to standard error.
pub fn main() -> std::process::ExitCode {
    nave_runtime::install_crypto_provider();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("nave: starting: {e}");
            return ExitKind::Failed.into();
        }
    };
    match runtime.block_on(run(&cli)) {
        Ok(text) => {
            use std::io::Write as _;
            // A reader that stops early (`nave clusters | head -1`) is not a failure.
            match std::io::stdout().lock().write_all(text.as_bytes()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    eprintln!("nave: writing the output: {e}");
                    ExitKind::Failed.into()
                }
                _ => ExitKind::Done.into(),
            }
        }
        Err(error) => {
            eprintln!("nave: {error}");
            error.kind.into()
        }
    }
}

/// Runs `cli` and answers what to print on standard output.
pub async fn run(cli: &Cli) -> Result<String, CliError> {
    let global = &cli.global;
    match &cli.command {
        Command::Clusters => clusters::list(global).await,
        Command::Cordon { cluster } => clusters::cordon(global, cluster, true).await,
        Command::Uncordon { cluster } => clusters::cordon(global, cluster, false).await,
        Command::Drain { cluster, wait } => clusters::drain(global, cluster, *wait).await,
        Command::Unjoin { cluster, force, wait } => unjoin::unjoin(global, cluster, *force, *wait).await,
        Command::Join { cluster, ttl, region } => join::join(global, cluster, *ttl, region.as_deref()).await,
        Command::Explain { name, namespace } => placements::explain(global, name, namespace.as_deref()).await,
        Command::Rebalance { name, namespace } => {
            placements::rebalance(global, name, namespace.as_deref()).await
        }
        Command::Rollout {
            action,
            name,
            namespace,
            wait,
        } => rollout::rollout(global, *action, name, namespace.as_deref(), *wait).await,
        Command::Simulate { filename, namespace } => {
            placements::simulate(global, filename, namespace.as_deref()).await
        }
    }
}

/// The next item of a watch, or `None` once `deadline` passes (never, without one); the inner
/// `None` is the end of the stream.
async fn next_until<S: futures::Stream + Unpin>(
    events: &mut S,
    deadline: Option<tokio::time::Instant>,
) -> Option<Option<S::Item>> {
    use futures::StreamExt as _;
    match deadline {
        Some(at) => tokio::time::timeout_at(at, events.next()).await.ok(),
        None => Some(events.next().await),
    }
}

/// A client of the management cluster, from the kubeconfig conventions of kubectl.
async fn kube_client(global: &Global) -> Result<kube::Client, CliError> {
    let mut config = match kube_config(global).await? {
        Some(config) => config,
        None => kube::Config::infer()
            .await
            .map_err(|e| CliError::invalid(format!("no kubeconfig of the management cluster: {e}")))?,
    };
    config.read_timeout = Some(global.request_timeout);
    config.connect_timeout = Some(global.request_timeout);
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    kube::Client::try_from(config)
        .map_err(|e| CliError::failed(format!("a client of the management cluster: {e}")))
}

/// The management cluster's configuration by kubectl's conventions: `--kubeconfig` (with
/// `--context`), else `$KUBECONFIG` or `~/.kube/config`; `None` when none is named and none is
/// found. One named on the command line must be readable.
async fn kube_config(global: &Global) -> Result<Option<kube::Config>, CliError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions {
        context: global.context.clone(),
        ..KubeConfigOptions::default()
    };
    match &global.kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .map_err(|e| CliError::invalid(format!("reading the kubeconfig {}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map(Some)
                .map_err(|e| CliError::invalid(format!("the kubeconfig {}: {e}", path.display())))
        }
        None if global.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map(Some)
            .map_err(|e| CliError::invalid(format!("the kubeconfig: {e}"))),
        None => Ok(kube::Config::from_kubeconfig(&options).await.ok()),
    }
}

/// The User-Agent of every request, which names the CLI in audit logs.
const USER_AGENT: &str = concat!("nave-cli/", env!("CARGO_PKG_VERSION"));

#[cfg(test)]
mod tests;
