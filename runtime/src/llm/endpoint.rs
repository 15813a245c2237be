//! Where a provider's requests go, parsed once from its `base_url` (shared by the route
//! and the proxy choice, so neither depends on the other).

/// Where requests go: `{scheme}://{host}:{port}{path_prefix}/chat/completions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `https` when true.
    pub tls: bool,
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Path before `/chat/completions`, without a trailing slash (`/v1`, or empty).
    pub path_prefix: String,
}

impl Endpoint {
    /// Parses a base URL (`http://127.0.0.1:8080/v1`).
    pub fn parse(base_url: &str) -> Result<Endpoint, String> {
        let uri: hyper::Uri = base_url.parse().map_err(|e| format!("not a URL: {e}"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(other) => return Err(format!("scheme must be http or https, not {other:?}")),
            None => return Err("missing scheme (http:// or https://)".into()),
        };
        let host = uri.host().filter(|h| !h.is_empty()).ok_or("missing host")?.to_owned();
        if uri.query().is_some() {
            return Err("a base URL takes no query string".into());
        }
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let path_prefix = uri.path().trim_end_matches('/').to_owned();
        Ok(Endpoint { tls, host, port, path_prefix })
    }

    /// `host:port` for the Net seam.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The request path of an OpenAI-compatible chat completion.
    pub fn chat_path(&self) -> String {
        format!("{}/chat/completions", self.path_prefix)
    }

    /// The streaming request path of `format` for `model`: `/chat/completions`,
    /// `/v1/messages`, or `/v1beta/models/MODEL:streamGenerateContent?alt=sse`, after the base
    /// URL's own path.
    pub fn stream_path(&self, format: super::format::WireFormat, model: &str) -> String {
        match format {
            super::format::WireFormat::Openai => self.chat_path(),
            super::format::WireFormat::Anthropic => format!("{}/v1/messages", self.path_prefix),
            super::format::WireFormat::Gemini => {
                format!("{}/v1beta/models/{model}:streamGenerateContent?alt=sse", self.path_prefix)
            }
        }
    }
}
