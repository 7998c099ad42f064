//! Trusting the hub by the hash of its CA, as kubeadm's `--discovery-token-ca-cert-hash` does:
//! the agent is given the SHA-256 of the hub's CA certificate with its join token, takes the CA
//! from the chain the hub serves, checks it hashes to the pin, and then verifies the hub's
//! certificate against that CA alone (name, validity, signatures: the usual WebPKI checks). No
//! other CA, public or private, is trusted, and no CA file needs distributing.

use std::path::Path;
use std::sync::Arc;

use rustls::DigitallySignedStruct;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// A rustls client configuration that trusts only the CA whose certificate hashes to `pin`
/// (hex SHA-256 of its DER, `sha256:` prefix allowed). With `ca_file`, the CA may also come from
/// that file rather than the served chain.
pub fn client_config(pin: &str, ca_file: Option<&Path>) -> Result<rustls::ClientConfig> {
    let invalid = |message: String| Error::HubCa {
        path: pin.into(),
        message,
    };
    let pin = parse_pin(pin)
        .ok_or_else(|| invalid("expected 64 hex digits (SHA-256), optionally after sha256:".to_owned()))?;
    let mut known = Vec::new();
    if let Some(file) = ca_file {
        let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(file)
            .and_then(|certs| certs.collect())
            .map_err(|e| Error::HubCa {
                path: file.to_owned(),
                message: e.to_string(),
            })?;
        known.extend(certificates);
    }
    let provider = CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let verifier = PinnedCa {
        pin,
        known,
        provider: provider.clone(),
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(config)
}

fn parse_pin(pin: &str) -> Option<[u8; 32]> {
    let hex = pin.strip_prefix("sha256:").unwrap_or(pin);
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[derive(Debug)]
struct PinnedCa {
    pin: [u8; 32],
    /// CA certificates from `--hub-ca-file`, looked at besides the served chain.
    known: Vec<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let ca = intermediates
            .iter()
            .chain(self.known.iter())
            .find(|c| <[u8; 32]>::from(Sha256::digest(c.as_ref())) == self.pin)
            .ok_or_else(|| {
                rustls::Error::General(
                    "no CA certificate in the hub's chain has the pinned SHA-256 (--hub-ca-sha256)"
                        .to_owned(),
                )
            })?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone().into_owned())?;
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        verifier.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_64_hex_digits_with_an_optional_prefix() {
        let hex = "ab".repeat(32);
        assert_eq!(parse_pin(&hex), Some([0xab; 32]));
        assert_eq!(parse_pin(&format!("sha256:{hex}")), Some([0xab; 32]));
        assert_eq!(parse_pin("abcd"), None);
        assert_eq!(parse_pin(&"zz".repeat(32)), None);
        assert!(client_config("nope", None).is_err());
    }
}
