//! TLS for `https://` endpoints, over whatever byte stream the `Net` seam gives (a real socket
//! in production, a turmoil stream in the simulator).
//!
//! rustls with the ring provider; trust = the bundled Mozilla roots (`webpki-roots`), the
//! platform's certificate store as `production::platform_roots()` captured it (the runtime core
//! reads no OS store itself), plus the route's `ca_file` (PEM, read through the `Fs` seam) for
//! private CAs. SNI is the endpoint's
//! host; ALPN offers `http/1.1` only (the adapter speaks HTTP/1.1). A certificate the client
//! cannot trust is `TLS_CERTIFICATE`, never retried: retrying cannot make it trustworthy. A
//! handshake the network cut is `TRANSPORT`, retried like any broken connection.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[cfg(feature = "tls")]
use rustls::pki_types::pem::PemObject;
#[cfg(feature = "tls")]
use rustls::pki_types::{CertificateDer, ServerName};
#[cfg(feature = "tls")]
use tokio_rustls::TlsConnector;

use crate::event::ErrorCode;
#[cfg(feature = "tls")]
use crate::seams::OpenOptions;
use crate::seams::{ByteStream, Fs};

/// A client configuration: rustls's, or — without the `tls` feature — none can exist.
#[cfg(feature = "tls")]
pub(crate) type ClientConfig = rustls::ClientConfig;
/// Without the `tls` feature no client configuration exists: [`TlsConfigs::get`] refuses every
/// `https://` route, so [`connect`] is never reached.
#[cfg(not(feature = "tls"))]
#[derive(Debug)]
pub(crate) enum ClientConfig {}

/// Why this build refuses an `https://` route.
#[cfg(not(feature = "tls"))]
const TLS_NOT_BUILT: &str = "https:// endpoints need the `tls` cargo feature, which this build lacks";

/// Largest `ca_file` read, in bytes (a bundle of a few hundred certificates).
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
pub const CA_FILE_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// Why a TLS connection could not be set up: the code and a sentence for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsFailure {
    pub(crate) code: ErrorCode,
    pub(crate) message: String,
}

fn failure(code: ErrorCode, message: String) -> TlsFailure {
    TlsFailure { code, message }
}

/// The certificates the platform's store trusts (DER), captured once outside the runtime core
/// (`production::platform_roots()`); empty in the simulator and by default.
#[derive(Clone, Default)]
pub struct PlatformRoots {
    der: Arc<Vec<Vec<u8>>>,
}

impl PlatformRoots {
    /// Roots from DER-encoded certificates.
    pub fn from_der(certificates: Vec<Vec<u8>>) -> Self {
        Self { der: Arc::new(certificates) }
    }

    /// How many certificates the platform store gave.
    pub fn len(&self) -> usize {
        self.der.len()
    }

    /// Whether the platform store gave none.
    pub fn is_empty(&self) -> bool {
        self.der.is_empty()
    }
}

impl std::fmt::Debug for PlatformRoots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PlatformRoots({} certificates)", self.der.len())
    }
}

/// Client configurations, built once per `ca_file` (building one parses every root).
#[derive(Debug, Default)]
pub(crate) struct TlsConfigs {
    built: Mutex<BTreeMap<Option<String>, Arc<ClientConfig>>>,
}

impl TlsConfigs {
    /// The configuration trusting the bundled roots, the platform's and `ca_file`, read
    /// through `fs`. The platform roots are fixed for the life of one adapter.
    #[cfg(not(feature = "tls"))]
    pub(crate) fn get(
        &self,
        _ca_file: Option<&str>,
        _fs: Option<&dyn Fs>,
        _platform: &PlatformRoots,
    ) -> Result<Arc<ClientConfig>, TlsFailure> {
        let _ = &self.built;
        Err(failure(ErrorCode::InvalidRequest, TLS_NOT_BUILT.to_owned()))
    }

    /// The configuration trusting the bundled roots, the platform's and `ca_file`, read
    /// through `fs`. The platform roots are fixed for the life of one adapter.
    #[cfg(feature = "tls")]
    pub(crate) fn get(
        &self,
        ca_file: Option<&str>,
        fs: Option<&dyn Fs>,
        platform: &PlatformRoots,
    ) -> Result<Arc<ClientConfig>, TlsFailure> {
        let key = ca_file.map(str::to_owned);
        if let Some(config) = self.built.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok(config.clone());
        }
        let mut roots = default_roots(platform);
        if let Some(path) = ca_file {
            let fs = fs.ok_or_else(|| {
                failure(ErrorCode::InvalidRequest, format!("ca_file {path}: this adapter has no filesystem to read it"))
            })?;
            let pem = read_ca_file(fs, path)?;
            add_pem_roots(&mut roots, &pem)
                .map_err(|why| failure(ErrorCode::InvalidRequest, format!("ca_file {path}: {why}")))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| failure(ErrorCode::Unknown, format!("TLS configuration: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        self.built.lock().unwrap_or_else(|p| p.into_inner()).insert(key, config.clone());
        Ok(config)
    }
}

/// Mozilla's roots and the platform's: what a client trusts unless told otherwise.
#[cfg(feature = "tls")]
pub(crate) fn default_roots(platform: &PlatformRoots) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    // A platform store may hold certificates webpki cannot use (odd encodings, v1
    // certificates): those are skipped, as every other client of the store does.
    let (_, _unusable) =
        roots.add_parsable_certificates(platform.der.iter().map(|der| CertificateDer::from(der.as_slice())));
    roots
}

/// Adds every certificate of the PEM bundle `pem` to `roots`; a bundle that is not PEM, holds
/// an unusable certificate or none at all is refused with the reason.
#[cfg(feature = "tls")]
pub(crate) fn add_pem_roots(roots: &mut rustls::RootCertStore, pem: &[u8]) -> Result<(), String> {
    let mut added = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("not a PEM certificate bundle: {e}"))?;
        roots.add(cert).map_err(|e| format!("unusable certificate: {e}"))?;
        added += 1;
    }
    if added == 0 {
        return Err("no certificate in it".into());
    }
    Ok(())
}

#[cfg(feature = "tls")]
fn read_ca_file(fs: &dyn Fs, path: &str) -> Result<Vec<u8>, TlsFailure> {
    let unreadable = |e: std::io::Error| failure(ErrorCode::InvalidRequest, format!("ca_file {path}: {e}"));
    let path = std::path::Path::new(path);
    let mut file = fs.open(path, OpenOptions::read()).map_err(unreadable)?;
    let len = file.len().map_err(unreadable)?;
    if len > CA_FILE_BYTES_MAX {
        return Err(failure(
            ErrorCode::InvalidRequest,
            format!("ca_file {}: {len} bytes, above the {CA_FILE_BYTES_MAX}-byte limit", path.display()),
        ));
    }
    file.read_all().map_err(unreadable)
}

/// Runs the TLS handshake for `host` over `stream`.
#[cfg(feature = "tls")]
pub(crate) async fn connect(
    config: Arc<ClientConfig>,
    host: &str,
    stream: Box<dyn ByteStream>,
) -> Result<Box<dyn ByteStream>, TlsFailure> {
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| failure(ErrorCode::InvalidRequest, format!("{host} is not a TLS server name: {e}")))?;
    let secured = TlsConnector::from(config).connect(name, stream).await.map_err(|e| classify(host, &e))?;
    Ok(Box::new(secured))
}

/// Never reached: without the `tls` feature no configuration exists to connect with.
#[cfg(not(feature = "tls"))]
pub(crate) async fn connect(
    config: Arc<ClientConfig>,
    _host: &str,
    _stream: Box<dyn ByteStream>,
) -> Result<Box<dyn ByteStream>, TlsFailure> {
    match *config {}
}

/// A certificate the client refused is `TLS_CERTIFICATE`; anything else the handshake met (a
/// reset, an early EOF, a protocol error from a middlebox) is `TRANSPORT`.
#[cfg(feature = "tls")]
fn classify(host: &str, e: &std::io::Error) -> TlsFailure {
    let tls = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match tls {
        Some(
            error @ (rustls::Error::InvalidCertificate(_)
            | rustls::Error::NoCertificatesPresented
            | rustls::Error::UnsupportedNameType),
        ) => failure(
            ErrorCode::TlsCertificate,
            format!("TLS handshake with {host}: the server's certificate is not trusted: {error}"),
        ),
        Some(error) => failure(ErrorCode::Transport, format!("TLS handshake with {host}: {error}")),
        None => failure(ErrorCode::Transport, format!("TLS handshake with {host}: {e}")),
    }
}
