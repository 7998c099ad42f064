//! What every Nave binary does on start, once: the TLS crypto provider, logs, the Kubernetes
//! client, and the shutdown signal fanned out to the servers, controllers and loops.
//!
//! ```text
//!  main ─► install_crypto_provider ─► init_tracing(json) ─► kube_client(kubeconfig, user agent)
//!       └► cancel_on_signal(token): SIGTERM or Ctrl-C ─► token.cancel() ─► every task stops
//! ```

#![forbid(unsafe_code)]

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// The allocator of every Nave binary and benchmark, declared in each `main.rs` as
/// `#[global_allocator] static ALLOCATOR: nave_runtime::Allocator = nave_runtime::Allocator;`.
///
/// mimalloc rather than the C library's malloc: under a burst of workloads the hub spent a third
/// of its CPU in glibc's allocator (many short-lived JSON values and strings, freed on other
/// threads), see BENCHMARKS.md.
pub use mimalloc::MiMalloc as Allocator;

/// A command-line duration in Go's form (`90s`, `5m`, `1h30m`), as kubectl takes them; not
/// negative. A clap value parser.
pub fn duration(value: &str) -> Result<std::time::Duration, String> {
    let parsed: kube::core::Duration = value
        .parse()
        .map_err(|e| format!("{value:?} is not a duration such as 40s or 2m: {e}"))?;
    if parsed.is_negative() {
        return Err(format!("{value:?} is negative"));
    }
    Ok(parsed.into())
}

/// As [`duration`], greater than zero.
pub fn positive_duration(value: &str) -> Result<std::time::Duration, String> {
    let parsed = duration(value)?;
    if parsed.is_zero() {
        return Err(format!("{value:?} must be greater than zero"));
    }
    Ok(parsed)
}

/// Why a Kubernetes client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file could not be read or parsed.
    #[error("reading the kubeconfig {path}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// What went wrong.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither a kubeconfig nor the in-cluster configuration gave a usable configuration.
    #[error("finding the Kubernetes configuration")]
    Infer(#[source] kube::config::InferConfigError),
    /// The configuration did not make a client (TLS, proxy, ...).
    #[error("building the Kubernetes client")]
    Build(#[source] kube::Error),
}

/// Installs rustls' ring provider for the process (kube, reqwest and sqlx use rustls; without a
/// provider the first client panics, even over plain HTTP). A second call changes nothing.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`), as text or as JSON lines. A second
/// call changes nothing (tests start several components in one process).
pub fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// A client from `kubeconfig`, else the in-cluster configuration or `$KUBECONFIG`; its requests
/// carry `user_agent`, which names the component in the API server's audit log.
pub async fn kube_client(
    kubeconfig: Option<&Path>,
    user_agent: &'static str,
) -> Result<kube::Client, ClientError> {
    let mut config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|source| ClientError::Kubeconfig {
                path: path.display().to_string(),
                source,
            })?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })?
        }
        None => kube::Config::infer().await.map_err(ClientError::Infer)?,
    };
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(user_agent),
    ));
    kube::Client::try_from(config).map_err(ClientError::Build)
}

/// Cancels `shutdown` on SIGTERM or Ctrl-C, whichever comes first.
pub async fn cancel_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = ctrl_c => info!("Ctrl-C received, shutting down"),
                _ = term.recv() => info!("SIGTERM received, shutting down"),
            },
            Err(error) => {
                warn!(error = %error, "cannot listen for SIGTERM; Ctrl-C only");
                let _ = ctrl_c.await;
                info!("Ctrl-C received, shutting down");
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
        info!("Ctrl-C received, shutting down");
    }
    shutdown.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_kubeconfig_that_does_not_exist_is_an_error_naming_the_file() {
        let Err(error) = kube_client(Some(Path::new("/nonexistent/kubeconfig")), "nave-test/0").await else {
            panic!("a client from a kubeconfig that does not exist");
        };
        assert!(error.to_string().contains("/nonexistent/kubeconfig"), "{error}");
    }

    #[test]
    fn installing_the_provider_twice_is_harmless() {
        install_crypto_provider();
        install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
