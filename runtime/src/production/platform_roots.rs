//! The platform's certificate store, read once (the runtime core reads no OS store).

use crate::llm::PlatformRoots;

/// The certificates the platform trusts: the system store as `rustls-native-certs` finds it
/// (`SSL_CERT_FILE` / `SSL_CERT_DIR` override where it looks, as for OpenSSL). Certificates it
/// cannot read are skipped and counted in the log; a machine without a store gets none, and
/// the bundled roots still apply. Without the `tls` feature (no `https://` at all): none.
#[cfg(feature = "tls")]
pub fn platform_roots() -> PlatformRoots {
    let found = rustls_native_certs::load_native_certs();
    if !found.errors.is_empty() {
        tracing::debug!(errors = found.errors.len(), "platform certificate store: some entries unreadable");
    }
    PlatformRoots::from_der(found.certs.into_iter().map(|cert| cert.as_ref().to_vec()).collect())
}

/// Without the `tls` feature no route can be `https://`: there is nothing to trust.
#[cfg(not(feature = "tls"))]
pub fn platform_roots() -> PlatformRoots {
    PlatformRoots::default()
}
