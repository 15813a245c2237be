//! TLS to PostgreSQL (FAILURE-DB-TLS), with rustls as for providers: `sslmode` `disable`,
//! `prefer` (the default, as libpq's), `require`, `verify-ca` and `verify-full`, and
//! `sslrootcert` (a private CA's PEM file), in the URL or in `PGSSLMODE` / `PGSSLROOTCERT`.
//! Without `sslrootcert` the roots are Mozilla's and the platform's. As libpq does, `require`
//! (and `prefer`) with a `sslrootcert` verify the chain like `verify-ca`; without one they
//! encrypt and verify nothing. A certificate refused is a classified error at connect time,
//! never a hang (the connect timeout bounds the handshake too).

use std::sync::Arc;

use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::{Error, Result};

/// Largest `sslrootcert` file read, in bytes.
pub(crate) const SSLROOTCERT_BYTES_MAX: u64 = crate::llm::tls::CA_FILE_BYTES_MAX;

/// What TLS a connection asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(bad_url(&format!(
                    "sslmode {other:?} is not one of disable, prefer, require, verify-ca, verify-full"
                )))
            }
        })
    }
}

/// The TLS settings of a database URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PgTls {
    pub mode: SslMode,
    pub root: Option<std::path::PathBuf>,
}

fn bad_url(reason: &str) -> Error {
    Error::NotFaultlineDatabase { path: "the database URL".into(), reason: reason.into() }
}

/// `url` without `sslmode` and `sslrootcert` (the driver knows neither `verify-*` nor the
/// root file), and the TLS they ask for; `PGSSLMODE` and `PGSSLROOTCERT` fill in what the URL
/// does not say.
pub(crate) fn split(url: &str) -> Result<(String, PgTls)> {
    let (rest, mode, root) = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        split_uri(url)
    } else {
        split_pairs(url)
    };
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mode = SslMode::parse(&mode.or_else(|| env("PGSSLMODE")).unwrap_or_else(|| "prefer".into()))?;
    let root = root.or_else(|| env("PGSSLROOTCERT")).map(std::path::PathBuf::from);
    Ok((rest, PgTls { mode, root }))
}

type Split = (String, Option<String>, Option<String>);

fn split_uri(url: &str) -> Split {
    let Some((base, query)) = url.split_once('?') else { return (url.to_owned(), None, None) };
    let (mut mode, mut root, mut kept) = (None, None, Vec::new());
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("sslmode", value)) => mode = Some(value.to_owned()),
            Some(("sslrootcert", value)) => root = Some(percent_decoded(value)),
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    (rest, mode, root)
}

fn split_pairs(url: &str) -> Split {
    let (mut mode, mut root, mut kept) = (None, None, Vec::new());
    for token in url.split_whitespace() {
        match token.split_once('=') {
            Some(("sslmode", value)) => mode = Some(value.trim_matches('\'').to_owned()),
            Some(("sslrootcert", value)) => root = Some(value.trim_matches('\'').to_owned()),
            _ => kept.push(token),
        }
    }
    (kept.join(" "), mode, root)
}

fn percent_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The driver's side of the settings: its `sslmode` (the `verify-*` modes are `require` to it:
/// the verifying is ours).
pub(crate) fn driver_mode(tls: &PgTls) -> postgres::config::SslMode {
    match tls.mode {
        SslMode::Disable => postgres::config::SslMode::Disable,
        SslMode::Prefer => postgres::config::SslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => postgres::config::SslMode::Require,
    }
}

/// The rustls connector for `tls`: its roots read now, so a bad `sslrootcert` is reported
/// before any connection.
pub(crate) fn connector(tls: &PgTls) -> Result<RustlsConnect> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = roots(tls)?;
    let check = match (tls.mode, &tls.root) {
        (SslMode::VerifyFull, _) => Check::Full,
        (SslMode::VerifyCa, _) | (SslMode::Require | SslMode::Prefer, Some(_)) => Check::ChainOnly,
        (SslMode::Require | SslMode::Prefer, None) | (SslMode::Disable, _) => Check::Nothing,
    };
    let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| bad_url(&format!("TLS roots: {e}")))?;
    let verifier = Arc::new(Verifier { webpki, check, provider: provider.clone() });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad_url(&format!("TLS configuration: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(RustlsConnect { config: Arc::new(config) })
}

fn roots(tls: &PgTls) -> Result<rustls::RootCertStore> {
    let Some(path) = &tls.root else {
        return Ok(crate::llm::tls::default_roots(&super::super::platform_roots()));
    };
    let shown = path.display();
    let unreadable = |e: std::io::Error| bad_url(&format!("sslrootcert {shown}: {e}"));
    let len = std::fs::metadata(path).map_err(unreadable)?.len();
    if len > SSLROOTCERT_BYTES_MAX {
        return Err(bad_url(&format!(
            "sslrootcert {shown}: {len} bytes, above the {SSLROOTCERT_BYTES_MAX}-byte limit"
        )));
    }
    let pem = std::fs::read(path).map_err(unreadable)?;
    // The file is the whole trust, as libpq's sslrootcert is.
    let mut roots = rustls::RootCertStore::empty();
    crate::llm::tls::add_pem_roots(&mut roots, &pem).map_err(|why| bad_url(&format!("sslrootcert {shown}: {why}")))?;
    Ok(roots)
}

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Chain and host name (`verify-full`).
    Full,
    /// The chain, not the name (`verify-ca`).
    ChainOnly,
    /// Nothing: encryption only (`require` without a root file, as libpq).
    Nothing,
}

#[derive(Debug)]
struct Verifier {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    check: Check,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        if self.check == Check::Nothing {
            return Ok(ServerCertVerified::assertion());
        }
        match self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if self.check == Check::ChainOnly => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The driver's TLS connector, made of a rustls configuration.
#[derive(Clone)]
pub(crate) struct RustlsConnect {
    config: Arc<rustls::ClientConfig>,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> MakeTlsConnect<S> for RustlsConnect {
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnectOne;
    type Error = std::io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> std::io::Result<RustlsConnectOne> {
        let name = ServerName::try_from(domain.to_owned())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{domain}: {e}")))?;
        Ok(RustlsConnectOne { config: self.config.clone(), name })
    }
}

/// One handshake.
pub(crate) struct RustlsConnectOne {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> TlsConnect<S> for RustlsConnectOne {
    type Stream = RustlsStream<S>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let connector = tokio_rustls::TlsConnector::from(self.config);
            connector.connect(self.name, stream).await.map(|s| RustlsStream(Box::new(s)))
        })
    }
}

/// A TLS connection to the server.
pub(crate) struct RustlsStream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        // SCRAM channel binding is optional; the verified chain is what protects the login.
        ChannelBinding::none()
    }
}

/// A refused certificate in a driver error's chain, said plainly: `TLS_CERTIFICATE: …`.
pub(crate) fn certificate_refusal(e: &(dyn std::error::Error + 'static), host: &str) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = source {
        let tls = error
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .or_else(|| error.downcast_ref::<rustls::Error>());
        if let Some(rustls::Error::InvalidCertificate(why)) = tls {
            let said = match why {
                CertificateError::UnknownIssuer => {
                    "it is not signed by a trusted CA (set sslrootcert to the server's CA file)".to_owned()
                }
                // A CA of the same name whose key did not sign it: another CA.
                CertificateError::BadSignature => {
                    "it is not signed by a trusted CA (a CA of that name is trusted, but its key did not sign this \
                     certificate: set sslrootcert to the server's CA file)"
                        .to_owned()
                }
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                    format!("it does not name the host {host} (connect by the name on it, or use sslmode=verify-ca)")
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => "it has expired".to_owned(),
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    "it is not valid yet (is this machine's clock right?)".to_owned()
                }
                other => format!("{other:?}"),
            };
            return Some(format!("TLS_CERTIFICATE: the database server's certificate was refused: {said}"));
        }
        source = error.source();
    }
    None
}
