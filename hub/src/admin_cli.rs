//! `nave-hub admin`: the admin endpoints of the REST API from the command line, for operators
//! who would rather not write `curl` lines. Each command is one request; the hub's JSON answer
//! is printed as it came, an error answer as its message (and a non-zero exit).
//!
//! ```text
//! nave-hub admin --hub-url https://hub:8443 --token-file admin.token --ca-file ca.crt \
//!     join-token create eu-west-1 --ttl 2h
//! ```

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

/// Where the hub is and how to reach it as an admin.
#[derive(Debug, Clone, Args)]
pub struct AdminArgs {
    /// The hub's base URL, e.g. `https://nave-hub.example.com`.
    #[arg(long, env = "NAVE_HUB_URL")]
    pub hub_url: String,
    /// File holding a REST API token of scope `admin`.
    #[arg(long, env = "NAVE_ADMIN_TOKEN_FILE")]
    pub token_file: PathBuf,
    /// PEM file of the CA that signs the hub's certificate (the hub chart's `ca.crt`); default:
    /// the public CAs.
    #[arg(long, env = "NAVE_HUB_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: AdminCommand,
}

/// Admin commands.
#[derive(Debug, Clone, Subcommand)]
pub enum AdminCommand {
    /// Join tokens: a single-use token for one cluster name.
    #[command(subcommand)]
    JoinToken(JoinTokenCommand),
    /// Accept a cluster that joined with the fleet's bootstrap token: it gets work.
    Accept {
        /// The cluster.
        cluster: String,
    },
    /// Withdraw a cluster's acceptance: its workloads move elsewhere and its work set empties.
    Withdraw {
        /// The cluster.
        cluster: String,
    },
    /// A cluster's agent credentials, without their tokens.
    Credentials {
        /// The cluster.
        cluster: String,
    },
    /// Revoke every credential of a cluster's agent; what it runs keeps running.
    Revoke {
        /// The cluster.
        cluster: String,
    },
    /// Forget a cluster that runs nothing any more (withdraw it first).
    Remove {
        /// The cluster.
        cluster: String,
    },
    /// Let a cluster's agent follow a work set that removes most of what it runs (it holds
    /// such a set until confirmed: `HubStoreChanged` with reason `MassPrune`).
    ConfirmPrune {
        /// The cluster.
        cluster: String,
        /// The newest revision confirmed; default: the cluster's current one.
        #[arg(long)]
        revision: Option<u64>,
    },
}

/// Join token commands.
#[derive(Debug, Clone, Subcommand)]
pub enum JoinTokenCommand {
    /// Issue a join token for `cluster`; printed once, with the hash of the hub's CA to pin.
    Create {
        /// The cluster name it registers.
        cluster: String,
        /// How long it stays usable, e.g. `30m`, `2h` (1 minute to 7 days).
        #[arg(long, default_value = "1h", value_parser = nave_runtime::positive_duration)]
        ttl: Duration,
    },
    /// Every join token, without secrets.
    List,
}

/// Why an admin command failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The token or CA file cannot be read.
    #[error("reading {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The hub could not be reached.
    #[error("calling the hub: {0}")]
    Request(#[from] reqwest::Error),
    /// The hub answered an error.
    #[error("the hub answered {status}: {message}")]
    Hub {
        /// The HTTP status.
        status: u16,
        /// The hub's message.
        message: String,
    },
}

/// Runs `args` and answers the hub's JSON answer, pretty-printed.
pub async fn run(args: &AdminArgs) -> Result<String, AdminError> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|e| AdminError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    };
    let token = String::from_utf8_lossy(&read(&args.token_file)?)
        .trim()
        .to_owned();
    let mut http = reqwest::Client::builder().user_agent(crate::USER_AGENT);
    if let Some(ca) = &args.ca_file {
        let pem = read(ca)?;
        let certificates = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| AdminError::Read {
            path: ca.display().to_string(),
            message: e.to_string(),
        })?;
        http = http.tls_built_in_root_certs(false);
        for certificate in certificates {
            http = http.add_root_certificate(certificate);
        }
    }
    let http = http.build()?;
    let base = format!("{}/api/v1", args.hub_url.trim_end_matches('/'));
    let (method, path, body) = match &args.command {
        AdminCommand::JoinToken(JoinTokenCommand::Create { cluster, ttl }) => (
            reqwest::Method::POST,
            "/join-tokens".to_owned(),
            Some(json!({"cluster": cluster, "ttlSeconds": ttl.as_secs()})),
        ),
        AdminCommand::JoinToken(JoinTokenCommand::List) => {
            (reqwest::Method::GET, "/join-tokens".to_owned(), None)
        }
        AdminCommand::Accept { cluster } => (
            reqwest::Method::PUT,
            format!("/clusters/{cluster}/acceptance"),
            Some(json!({"accepted": true})),
        ),
        AdminCommand::Withdraw { cluster } => (
            reqwest::Method::PUT,
            format!("/clusters/{cluster}/acceptance"),
            Some(json!({"accepted": false})),
        ),
        AdminCommand::Credentials { cluster } => (
            reqwest::Method::GET,
            format!("/clusters/{cluster}/credentials"),
            None,
        ),
        AdminCommand::Revoke { cluster } => (
            reqwest::Method::POST,
            format!("/clusters/{cluster}/credentials/revoke"),
            None,
        ),
        AdminCommand::Remove { cluster } => (reqwest::Method::DELETE, format!("/clusters/{cluster}"), None),
        AdminCommand::ConfirmPrune { cluster, revision } => (
            reqwest::Method::POST,
            format!("/clusters/{cluster}/prune-confirmation"),
            Some(json!({"revision": revision})),
        ),
    };
    let mut request = http.request(method, format!("{base}{path}")).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    if !(200..300).contains(&status) {
        let message = value["message"]
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned);
        return Err(AdminError::Hub { status, message });
    }
    Ok(serde_json::to_string_pretty(&value).unwrap_or_default())
}
