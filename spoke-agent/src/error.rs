//! The agent's one error type.

use std::path::PathBuf;

/// Why an agent operation failed. Each variant names the operation and keeps its cause.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bootstrap token file could not be read.
    #[error("reading the bootstrap token file {path}: {source}")]
    ReadBootstrapToken {
        /// The file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The bootstrap token file is empty.
    #[error("the bootstrap token file {0} is empty")]
    EmptyBootstrapToken(PathBuf),
    /// No Kubernetes client could be configured (kubeconfig or in-cluster).
    #[error("configuring the Kubernetes client: {source}")]
    KubeConfig {
        /// What kube-rs said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The HTTP client for the hub could not be built.
    #[error("building the HTTP client for the hub: {source}")]
    HttpClient {
        /// What reqwest said.
        #[source]
        source: reqwest::Error,
    },
    /// A request to the hub failed before an answer (connection, timeout, body).
    #[error("hub request {operation}: {source}")]
    HubRequest {
        /// `register`, `heartbeat`, `work` or `status`.
        operation: &'static str,
        /// What reqwest said.
        #[source]
        source: reqwest::Error,
    },
    /// The hub rejected the token (`401`): the agent registers again.
    #[error("hub request {operation}: token rejected ({message})")]
    Unauthorized {
        /// `register`, `heartbeat`, `work` or `status`.
        operation: &'static str,
        /// The hub's message.
        message: String,
    },
    /// The hub answered with another error status.
    #[error("hub request {operation}: {status} {code}: {message}")]
    HubStatus {
        /// `register`, `heartbeat`, `work` or `status`.
        operation: &'static str,
        /// HTTP status code.
        status: u16,
        /// The error code of the body, or empty.
        code: String,
        /// The hub's message.
        message: String,
    },
    /// A Kubernetes API call failed.
    #[error("{operation}: {source}")]
    Kube {
        /// What was being done, naming the object.
        operation: String,
        /// What kube-rs said.
        #[source]
        source: kube::Error,
    },
    /// The hub URL is `http://` and `--insecure-http` was not given.
    #[error(
        "the hub URL {0} is plain HTTP: credentials and work sets would cross the network in clear; \
         use https:// or pass --insecure-http"
    )]
    InsecureHub(String),
    /// The hub URL is neither `https://` nor `http://`.
    #[error("the hub URL {0} must start with https:// (or http:// with --insecure-http)")]
    HubUrl(String),
    /// The CA file or pin of the hub cannot be used.
    #[error("the hub's CA ({path}): {message}")]
    HubCa {
        /// The file, or the pin as given.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An object of a work set cannot be applied as it is.
    #[error("invalid object in the work set: {0}")]
    InvalidObject(String),
    /// An object of a work set is outside what this agent applies (see [`crate::allowed`]).
    #[error("refused by the agent: {0}")]
    Refused(String),
    /// The cluster does not serve the object's kind (its CRD is not installed yet): retried, as
    /// it may pass, and the workload keeps what the object replaces meanwhile.
    #[error("{0} is not served by this cluster (is its CRD installed?)")]
    KindNotServed(String),
    /// An object of a work set exists and is not this installation's: it is left as it is.
    #[error(
        "{object} exists and is not managed by this Nave installation (managed-by: {managed_by}, \
         installation: {installation}); it is left as it is"
    )]
    NotOwned {
        /// The object.
        object: String,
        /// Its ownership label, or `none`.
        managed_by: String,
        /// Its installation label, or `none`.
        installation: String,
    },
    /// Stored agent state (credential Secret, state ConfigMap) could not be decoded.
    #[error("decoding {what}: {source}")]
    Decode {
        /// What was being decoded.
        what: String,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
    /// A reflector stopped before its first list arrived.
    #[error("waiting for the {0} reflector: it stopped")]
    ReflectorStopped(&'static str),
    /// The metrics listener could not bind its address.
    #[error("listening for /metrics on {addr}: {source}")]
    MetricsListen {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The agent is shutting down; the operation was abandoned.
    #[error("shutting down")]
    ShuttingDown,
}

impl Error {
    /// Whether applying the same object again would fail the same way: refused by the
    /// allow-list, someone else's object, or not a valid object. Such failures are reported
    /// but do not hold back the rest of the set.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::Refused(_) | Error::NotOwned { .. } | Error::InvalidObject(_)
        )
    }

    /// A [`Error::Kube`] for `operation`.
    pub(crate) fn kube(operation: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let operation = operation.into();
        move |source| Error::Kube { operation, source }
    }
}

/// The HTTP status of a Kubernetes API error, if it is one.
pub(crate) fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Result with the agent's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
