//! A throwaway PKI for tests of the hub's HTTPS: a CA and a serving certificate for `127.0.0.1`
//! and `localhost`, as PEM files in a directory, and the CA's hash as agents pin it.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType,
};
use sha2::{Digest, Sha256};

/// A CA and a serving certificate it signed, written to files.
#[derive(Debug, Clone)]
pub struct TestPki {
    /// The CA certificate, PEM: what `--hub-ca-file` reads.
    pub ca_file: PathBuf,
    /// The serving chain, PEM (the certificate, then the CA): what `--tls-cert-file` reads.
    pub chain_file: PathBuf,
    /// The serving key, PEM: what `--tls-key-file` reads.
    pub key_file: PathBuf,
    /// Hex SHA-256 of the CA certificate (DER): what `--hub-ca-sha256` takes.
    pub ca_sha256: String,
}

impl TestPki {
    /// Generates a CA named `name` and a serving certificate, written into `dir` with `name`
    /// as the file prefix.
    pub fn generate(dir: &Path, name: &str) -> TestPki {
        let ca_key = KeyPair::generate().expect("a CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} CA"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).expect("a CA certificate");
        let issuer = Issuer::new(ca_params, &ca_key);
        let key = KeyPair::generate().expect("a serving key");
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} hub"));
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params.is_ca = IsCa::ExplicitNoCa;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = params.signed_by(&key, &issuer).expect("a serving certificate");
        let pki = TestPki {
            ca_file: dir.join(format!("{name}-ca.pem")),
            chain_file: dir.join(format!("{name}-chain.pem")),
            key_file: dir.join(format!("{name}-key.pem")),
            ca_sha256: Sha256::digest(ca.der().as_ref())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        };
        std::fs::write(&pki.ca_file, ca.pem()).expect("writing the CA");
        std::fs::write(&pki.chain_file, format!("{}{}", leaf.pem(), ca.pem())).expect("writing the chain");
        std::fs::write(&pki.key_file, key.serialize_pem()).expect("writing the key");
        pki
    }
}
