//! The hub's one error type.

use crate::store::StoreError;

/// Why an operation of the hub failed. Each variant names the operation and keeps its cause.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store key file cannot be read or holds no usable key.
    #[error("the store key file {path}: {message}")]
    ReadStoreKey {
        /// The file named on the command line.
        path: String,
        /// What is wrong (never the key).
        message: String,
    },
    /// The TLS certificate or key cannot be used.
    #[error(transparent)]
    Tls(crate::tls::TlsError),
    /// Reading the bootstrap token file failed.
    #[error("reading the bootstrap token file {path}")]
    ReadBootstrapToken {
        /// The file named on the command line.
        path: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The bootstrap token file is empty.
    #[error("the bootstrap token file {path} is empty")]
    EmptyBootstrapToken {
        /// The file named on the command line.
        path: String,
    },
    /// The REST API's tokens file cannot be read or parsed.
    #[error("loading the REST API tokens")]
    ApiTokens(#[source] crate::tokens::TokensError),
    /// Building the Kubernetes client (kubeconfig or in-cluster config) failed.
    #[error("building the Kubernetes client")]
    KubeClient(#[source] nave_runtime::ClientError),
    /// The CRDs are not installed in the management cluster.
    #[error(
        "CustomResourceDefinition {name} is not installed in the management cluster; \
         install the CRDs with `nave-hub crds | kubectl apply -f -`"
    )]
    CrdMissing {
        /// The CRD's name.
        name: String,
    },
    /// Checking whether a CRD is installed failed.
    #[error("checking CustomResourceDefinition {name}")]
    CheckCrd {
        /// The CRD's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Opening or migrating the store failed.
    #[error("opening the store")]
    OpenStore(#[source] StoreError),
    /// A store operation of the controller failed.
    #[error("store operation while {action}")]
    Store {
        /// What the controller was doing.
        action: &'static str,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// `--prometheus-url` cannot be used (it does not parse, or no client can be built for it).
    #[error("--prometheus-url {url}: {message}")]
    Prometheus {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// Binding the HTTP listener failed.
    #[error("listening on {addr}")]
    Listen {
        /// The address.
        addr: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// A Kubernetes API call failed.
    #[error("Kubernetes API call failed while {action}")]
    Kube {
        /// What the hub was doing.
        action: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The finalizer machinery failed (adding or removing the finalizer, or the apply/cleanup).
    #[error("finalizer of {object}")]
    Finalizer {
        /// `namespace/name` of the object.
        object: String,
        /// The finalizer error.
        #[source]
        source: Box<kube::runtime::finalizer::Error<Error>>,
    },
    /// Serializing an object to JSON failed.
    #[error("serializing {what}")]
    Serialize {
        /// What was serialized.
        what: &'static str,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// The watch that keeps these objects in memory has stopped (the hub is shutting down).
    #[error("the hub no longer watches {0}")]
    NotWatching(&'static str),
    /// An object lacks a field the controller needs (namespace, name).
    #[error("object has no {0}")]
    MissingField(&'static str),
    /// The leader election's settings cannot work.
    #[error("leader election: {0}")]
    LeaderElection(String),
    /// The provisioner webhook's settings cannot work.
    #[error("provisioner webhook: {0}")]
    Provisioner(String),
    /// This hub led alone (no leader election) and another hub claimed a later term of its
    /// store. It stops rather than take the store back: two hubs would take turns forever.
    #[error(
        "another hub claimed this hub's store (it led in term {term}); stopping rather than take it back: run one hub per store, or elect a leader"
    )]
    LeadershipLost {
        /// The term it led in.
        term: u64,
    },
}

impl Error {
    /// Wraps a store error with the action that failed.
    pub(crate) fn store(action: &'static str) -> impl FnOnce(StoreError) -> Error {
        move |source| Error::Store { action, source }
    }

    /// Wraps a Kubernetes API error with the action that failed.
    pub(crate) fn kube(action: &'static str) -> impl FnOnce(kube::Error) -> Error {
        move |source| Error::Kube { action, source }
    }
}
