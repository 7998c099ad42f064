//! TLS material of one cluster: a generated CA (basicConstraints CA:TRUE) and a separate
//! serving leaf signed by it (CA:FALSE, EKU serverAuth, SANs `127.0.0.1`, `::1`, `localhost`).
//! The kubeconfig carries the CA, never the leaf: rustls/webpki rejects a leaf used as its own
//! trust anchor (kube-rs #1767), whereas Go accepts it, so a shortcut here would pass kubectl
//! and fail kube-rs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Certificate generation failed.
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    /// The rustls configuration was refused.
    #[error("configuring TLS: {0}")]
    Config(#[from] rustls::Error),
}

/// A CA and a serving certificate signed by it.
#[derive(Debug, Clone)]
pub struct TlsMaterial {
    /// The CA certificate, PEM (goes into the kubeconfig as `certificate-authority-data`).
    pub ca_pem: String,
    /// The CA certificate, DER.
    pub ca_der: CertificateDer<'static>,
    /// The serving certificate, DER.
    pub leaf_der: CertificateDer<'static>,
    /// The serving key, PKCS#8 DER.
    pub leaf_key_der: Vec<u8>,
}

impl TlsMaterial {
    /// Generates a fresh CA and leaf for a cluster named `name`.
    pub fn generate(name: &str) -> Result<TlsMaterial, TlsError> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("nave-sim {name} CA"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, &ca_key);

        let leaf_key = KeyPair::generate()?;
        let mut leaf_params = CertificateParams::new(vec!["localhost".to_owned()])?;
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, format!("nave-sim {name} apiserver"));
        leaf_params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        leaf_params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        leaf_params.is_ca = IsCa::ExplicitNoCa;
        leaf_params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = leaf_params.signed_by(&leaf_key, &issuer)?;
        Ok(TlsMaterial {
            ca_pem: ca_cert.pem(),
            ca_der: ca_cert.der().clone(),
            leaf_der: leaf.der().clone(),
            leaf_key_der: leaf_key.serialize_der(),
        })
    }

    /// A rustls server configuration (ring provider) offering `h2` and `http/1.1`.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key_der.clone()));
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![self.leaf_der.clone(), self.ca_der.clone()], key)?;
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_a_ca_and_a_distinct_leaf() {
        let m = TlsMaterial::generate("t").expect("generate");
        assert!(m.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(m.ca_der, m.leaf_der);
        m.server_config().expect("server config");
    }
}
