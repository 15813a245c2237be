//! The one check of an `http://` or `https://` URL an agent file names (a collector's, an MCP
//! server's): bounded, with a host, and without credentials in it.

/// `url` is `http(s)://HOST…`, at most `bytes_max` bytes, with no `user:password@`;
/// `token_hint` says where a token belongs instead.
pub(crate) fn check_http_url(url: &str, bytes_max: usize, token_hint: &str) -> Result<(), String> {
    let Some(rest) = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")) else {
        return Err("must be an http:// or https:// URL".into());
    };
    if url.len() > bytes_max {
        return Err(format!("longer than {bytes_max} bytes"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() {
        return Err("names no host".into());
    }
    if authority.contains('@') {
        return Err(format!("carries credentials: put {token_hint}, not in the file"));
    }
    Ok(())
}
