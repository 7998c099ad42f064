//! The hub's TLS listener: a certificate chain and key from PEM files (`--tls-cert-file`,
//! `--tls-key-file`), read again when either file changes, so a certificate that cert-manager
//! (or anyone) renews in the mounted Secret is served without a restart.
//!
//! The certificate file holds the chain the hub serves: its certificate first, then the
//! intermediates and, for agents that pin the CA by hash (`--hub-ca-sha256`), the CA itself. The
//! SHA-256 of the chain's last certificate is logged at start and shown with every join token.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Why the TLS material cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read or holds no PEM of the expected kind.
    #[error("reading {what} from {path}: {message}")]
    Read {
        /// `the certificate chain` or `the private key`.
        what: &'static str,
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// rustls refused the key or the configuration.
    #[error("the TLS certificate and key cannot be used: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The hub's serving certificate, reloaded when its files change.
#[derive(Debug)]
pub struct ServingCert {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    ca_sha256: String,
    modified: (Option<SystemTime>, Option<SystemTime>),
}

impl ServingCert {
    /// Reads the chain and key; fails with the file and what is wrong.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Arc<ServingCert>, TlsError> {
        let provider = CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        let loaded = read(cert_file, key_file, &provider)?;
        Ok(Arc::new(ServingCert {
            cert_file: cert_file.to_owned(),
            key_file: key_file.to_owned(),
            provider,
            current: RwLock::new(loaded),
        }))
    }

    /// Hex SHA-256 of the chain's last certificate (the CA, when the chain holds it), as agents
    /// pin it with `--hub-ca-sha256`.
    pub fn ca_sha256(&self) -> String {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .ca_sha256
            .clone()
    }

    /// The rustls configuration serving this certificate (HTTP/2 and HTTP/1.1).
    pub fn server_config(self: &Arc<Self>) -> Result<rustls::ServerConfig, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }

    /// Reads the files again when either changed; keeps serving the old certificate (and says
    /// so) when the new one cannot be used. Answers whether it reloaded.
    pub fn reload_if_changed(&self) -> bool {
        let modified = (mtime(&self.cert_file), mtime(&self.key_file));
        if self.current.read().unwrap_or_else(|e| e.into_inner()).modified == modified {
            return false;
        }
        match read(&self.cert_file, &self.key_file, &self.provider) {
            Ok(loaded) => {
                info!(ca_sha256 = %loaded.ca_sha256, "serving the renewed TLS certificate");
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = loaded;
                true
            }
            Err(error) => {
                warn!(error = %error, "the changed TLS files cannot be used; serving the previous certificate");
                // Not retried until the files change again.
                self.current.write().unwrap_or_else(|e| e.into_inner()).modified = modified;
                false
            }
        }
    }

    /// Checks the files every `every` until `shutdown`.
    pub async fn watch(self: Arc<Self>, every: Duration, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {
                    self.reload_if_changed();
                }
            }
        }
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(|e| e.into_inner()).key.clone())
    }
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn read(cert_file: &Path, key_file: &Path, provider: &CryptoProvider) -> Result<Loaded, TlsError> {
    let modified = (mtime(cert_file), mtime(key_file));
    let failed = |what, path: &Path, message: String| TlsError::Read {
        what,
        path: path.display().to_string(),
        message,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .map_err(|e| failed("the certificate chain", cert_file, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| failed("the certificate chain", cert_file, e.to_string()))?;
    let Some(last) = chain.last() else {
        return Err(failed(
            "the certificate chain",
            cert_file,
            "no CERTIFICATE block".to_owned(),
        ));
    };
    let ca_sha256 = crate::store::hex(&Sha256::digest(last.as_ref()));
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| failed("the private key", key_file, e.to_string()))?;
    let key = CertifiedKey::from_der(chain, key, provider)?;
    Ok(Loaded {
        key: Arc::new(key),
        ca_sha256,
        modified,
    })
}
