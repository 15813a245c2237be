//! Reading one HTTP/1.1 request off a stream, up to its `Content-Length`: what a test's or a
//! benchmark's hand-written server does before it answers (one copy, not one per server).

use tokio::io::{AsyncRead, AsyncReadExt};

/// Reads one request (head and body) from `stream`; `None` if the stream ends or fails
/// first. A missing or unreadable `Content-Length` counts as no body.
pub async fn read_http_request<S: AsyncRead + Unpin>(stream: &mut S) -> Option<Vec<u8>> {
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        request.extend_from_slice(&buf[..n]);
        let Some(head_end) = memchr::memmem::find(&request, b"\r\n\r\n") else { continue };
        let length = String::from_utf8_lossy(&request[..head_end])
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        if request.len() >= head_end + 4 + length {
            return Some(request);
        }
    }
}
