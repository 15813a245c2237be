//! HTTP(S) proxies: an HTTP CONNECT tunnel to the endpoint through the proxy, TLS (for
//! `https://`) inside the tunnel, as enterprise networks require.
//!
//! Which proxy: the route's `proxy` key, else the `HTTPS_PROXY` / `HTTP_PROXY` variables the
//! process started with (captured by `production::proxy_env`, never read here), unless
//! `NO_PROXY` names the host. Proxy credentials (`http://user:pass@proxy:3128`) are secrets:
//! sent as `Proxy-Authorization: Basic …`, registered for scrubbing, and never in a message —
//! a proxy is named by its `host:port` only.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::endpoint::Endpoint;
use crate::event::ErrorCode;
use crate::seams::ByteStream;

/// Longest CONNECT response head read, in bytes.
pub const PROXY_RESPONSE_BYTES_MAX: usize = 16 * 1024;

/// Proxy settings from the process environment, captured once at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyEnv {
    /// `HTTPS_PROXY` (or `https_proxy`): for `https://` endpoints.
    pub https: Option<String>,
    /// `HTTP_PROXY` (or `http_proxy`): for `http://` endpoints.
    pub http: Option<String>,
    /// `NO_PROXY` (or `no_proxy`): hosts reached directly (`*`, `host`, `.domain`, `domain`).
    pub no_proxy: Vec<String>,
}

/// A proxy to tunnel through.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Proxy {
    /// `host:port` of the proxy (what messages name it by).
    pub(crate) authority: String,
    /// `Basic <base64(user:pass)>`, when the URL carries credentials.
    pub(crate) authorization: Option<String>,
    /// The raw credential parts, for the scrubber.
    pub(crate) secrets: Vec<String>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy").field("authority", &self.authority).finish_non_exhaustive()
    }
}

/// Parses `http://[user[:pass]@]host[:port]` (port 80 by default). The proxy itself is reached
/// over plain HTTP: an `https://` proxy URL is refused.
pub(crate) fn parse(url: &str) -> Result<Proxy, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| "a proxy URL must start with http:// (TLS to the proxy itself is not supported)".to_owned())?;
    let rest = rest.trim_end_matches('/');
    let (userinfo, hostport) = match rest.rsplit_once('@') {
        Some((userinfo, hostport)) => (Some(userinfo), hostport),
        None => (None, rest),
    };
    if hostport.is_empty() || hostport.contains('/') {
        return Err("a proxy URL is http://[user:pass@]host[:port]".into());
    }
    let authority = if hostport.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        hostport.to_owned()
    } else {
        format!("{hostport}:80")
    };
    let (authorization, secrets) = match userinfo {
        None => (None, Vec::new()),
        Some(userinfo) => {
            let decoded = percent_decode(userinfo);
            let mut secrets = vec![decoded.clone()];
            if let Some((_, password)) = decoded.split_once(':') {
                secrets.push(password.to_owned());
            }
            (Some(format!("Basic {}", base64(decoded.as_bytes()))), secrets)
        }
    };
    Ok(Proxy { authority, authorization, secrets })
}

/// The proxy for `endpoint`: the route's own, else the environment's unless `NO_PROXY` names
/// the host.
pub(crate) fn choose(route_proxy: Option<&str>, env: &ProxyEnv, endpoint: &Endpoint) -> Result<Option<Proxy>, String> {
    if let Some(url) = route_proxy {
        return parse(url).map(Some);
    }
    let from_env = if endpoint.tls { env.https.as_deref() } else { env.http.as_deref() };
    let Some(url) = from_env.filter(|u| !u.is_empty()) else { return Ok(None) };
    if bypassed(&env.no_proxy, &endpoint.host) {
        return Ok(None);
    }
    parse(url).map(Some)
}

fn bypassed(no_proxy: &[String], host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    no_proxy.iter().map(|e| e.trim().to_ascii_lowercase()).filter(|e| !e.is_empty()).any(|entry| {
        let entry = entry.rsplit_once(':').filter(|(_, p)| p.parse::<u16>().is_ok()).map_or(entry.as_str(), |(h, _)| h);
        entry == "*"
            || host == entry.trim_start_matches('.')
            || host.ends_with(&format!(".{}", entry.trim_start_matches('.')))
    })
}

/// Opens a CONNECT tunnel to `target` (`host:port`) over `stream`, a connection to `proxy`.
pub(crate) async fn tunnel(
    mut stream: Box<dyn ByteStream>,
    proxy: &Proxy,
    target: &str,
) -> Result<Box<dyn ByteStream>, (ErrorCode, String)> {
    let name = &proxy.authority;
    let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(authorization) = &proxy.authorization {
        head.push_str(&format!("Proxy-Authorization: {authorization}\r\n"));
    }
    head.push_str("\r\n");
    let cut = |e: std::io::Error| (ErrorCode::Transport, format!("proxy {name}: the tunnel to {target} broke: {e}"));
    stream.write_all(head.as_bytes()).await.map_err(cut)?;
    stream.flush().await.map_err(cut)?;
    // Read byte by byte up to the blank line: nothing of the tunnel's payload is consumed.
    let mut response = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !response.ends_with(b"\r\n\r\n") {
        if response.len() >= PROXY_RESPONSE_BYTES_MAX {
            return Err((
                ErrorCode::Transport,
                format!("proxy {name}: CONNECT response head above {PROXY_RESPONSE_BYTES_MAX} bytes"),
            ));
        }
        match stream.read(&mut byte).await.map_err(cut)? {
            0 => {
                return Err((
                    ErrorCode::Transport,
                    format!("proxy {name}: closed the connection before answering CONNECT {target}"),
                ))
            }
            _ => response.push(byte[0]),
        }
    }
    let status_line = String::from_utf8_lossy(&response).lines().next().unwrap_or_default().to_owned();
    let status: u16 = status_line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    // The proxy's own words are not echoed: only its status, which names no secret.
    match status {
        200..=299 => Ok(stream),
        407 => Err((
            ErrorCode::Auth,
            format!("proxy {name} refused the tunnel to {target}: 407 proxy authentication required"),
        )),
        403 => Err((ErrorCode::InvalidRequest, format!("proxy {name} refused the tunnel to {target}: 403 forbidden"))),
        0 => Err((ErrorCode::Transport, format!("proxy {name}: not an HTTP answer to CONNECT {target}"))),
        other => Err((ErrorCode::Transport, format!("proxy {name} refused the tunnel to {target}: status {other}"))),
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(value) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(value);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Standard base64 with padding (RFC 4648), for `Proxy-Authorization: Basic`.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_standard_base64() {
        assert_eq!(base64(b"Aladdin:open sesame"), "QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
    }

    #[test]
    fn proxy_urls_parse_and_no_proxy_matches_hosts_and_domains() {
        let p = parse("http://u%40x:p%3Ass@proxy.corp:3128/").unwrap();
        assert_eq!(p.authority, "proxy.corp:3128");
        assert_eq!(p.secrets, vec!["u@x:p:ss".to_owned(), "p:ss".to_owned()]);
        assert_eq!(parse("http://proxy.corp").unwrap().authority, "proxy.corp:80");
        assert!(parse("https://proxy.corp").is_err());
        let no = |list: &[&str], host: &str| bypassed(&list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(), host);
        assert!(no(&["*"], "api.deepseek.com"));
        assert!(no(&["deepseek.com"], "api.deepseek.com"));
        assert!(no(&[".deepseek.com"], "api.deepseek.com"));
        assert!(no(&["localhost", "127.0.0.1:8080"], "127.0.0.1"));
        assert!(!no(&["seek.com"], "api.deepseek.com"));
        assert!(!no(&[], "api.deepseek.com"));
    }
}
