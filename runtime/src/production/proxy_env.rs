//! The proxy variables of the process environment, read once (the runtime core never reads
//! the environment).

use crate::llm::ProxyEnv;

/// `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` (upper case first, then lower case), as the
/// process has them now.
pub fn proxy_env() -> ProxyEnv {
    let var = |upper: &str| {
        std::env::var(upper)
            .ok()
            .or_else(|| std::env::var(upper.to_ascii_lowercase()).ok())
            .filter(|v| !v.trim().is_empty())
    };
    ProxyEnv {
        https: var("HTTPS_PROXY"),
        http: var("HTTP_PROXY"),
        no_proxy: var("NO_PROXY").map(|v| v.split(',').map(|e| e.trim().to_owned()).collect()).unwrap_or_default(),
    }
}
