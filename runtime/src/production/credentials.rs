use crate::llm::Credentials;

/// Credentials from the process environment, read at each request (so a rotated key is
/// picked up by the next request, and never cached in a config snapshot).
#[derive(Debug, Clone, Copy, Default)]
pub struct EnvCredentials;

impl Credentials for EnvCredentials {
    fn lookup(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}
