//! A certificate authority made at test time and a TLS acceptor for a certificate it signed:
//! what every loopback HTTPS test needs. The runtime's, the simulator's and the end-to-end
//! tests share this one set-up instead of three copies of it.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A fresh CA (its PEM, for a client's `ca_file`) and a server certificate it signed.
#[derive(Debug)]
pub struct TestPki {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The server certificate, PEM (a PostgreSQL server's `server.crt`).
    pub server_cert_pem: String,
    /// Its private key, PEM (`server.key`).
    pub server_key_pem: String,
    leaf: CertificateDer<'static>,
    leaf_key: PrivatePkcs8KeyDer<'static>,
}

impl TestPki {
    /// A CA and a certificate for `names` (host names or IP addresses), valid now.
    ///
    /// # Panics
    /// If key generation or signing fails (a test set-up error).
    pub fn new(names: &[&str]) -> Self {
        Self::make(names, false)
    }

    /// A CA and a certificate for `names` that expired in 2021.
    ///
    /// # Panics
    /// As [`TestPki::new`].
    pub fn expired(names: &[&str]) -> Self {
        Self::make(names, true)
    }

    fn make(names: &[&str], expired: bool) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        let ca_key = KeyPair::generate().expect("a CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "faultline test CA");
        let ca_cert = ca.self_signed(&ca_key).expect("a self-signed CA");
        let leaf_key = KeyPair::generate().expect("a server key");
        let mut leaf =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).expect("server names");
        if expired {
            leaf.not_before = rcgen::date_time_ymd(2020, 1, 1);
            leaf.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key).expect("a signed server certificate");
        Self {
            ca_pem: ca_cert.pem(),
            server_cert_pem: leaf_cert.pem(),
            server_key_pem: leaf_key.serialize_pem(),
            leaf: leaf_cert.der().clone(),
            leaf_key: PrivatePkcs8KeyDer::from(leaf_key.serialize_der()),
        }
    }

    /// A TLS acceptor presenting the signed certificate (rustls, ring provider).
    ///
    /// # Panics
    /// If rustls refuses the certificate (a test set-up error).
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("default protocol versions")
            .with_no_client_auth()
            .with_single_cert(vec![self.leaf.clone()], PrivateKeyDer::Pkcs8(self.leaf_key.clone_key()))
            .expect("the signed certificate");
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}
