//! An MCP server over streamable HTTP: each message a POST to the server's one URL through
//! the runtime's `ToolHttp` (the `Net` seam, TLS for `https`, the call's execution id in the
//! `faultline-execution-id` header), the answer either one JSON body or an SSE stream whose
//! events are read until the response to our id. The session id the server gives at
//! `initialize` rides on every later request; a 404 on it means the server forgot the session.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use super::jsonrpc::{self, Incoming};
use super::transport::{Answer, Lost, Transport};
use crate::agent::{HttpFailure, ToolHttp};
use crate::llm::sse::{SseDecoder, SseItem};
use crate::seams::BoxFuture;

/// The session header of streamable HTTP.
pub const MCP_SESSION_HEADER: &str = "mcp-session-id";
/// The header naming the protocol version agreed at `initialize`.
pub const MCP_PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
/// Longest session id kept, in bytes: a longer one is refused as a broken server.
const SESSION_ID_BYTES_MAX: usize = 256;

/// A streamable-HTTP server, and the session it gave us.
pub(crate) struct Http {
    client: ToolHttp,
    url: String,
    headers: Vec<(String, String)>,
    timeout: Duration,
    session: Mutex<Option<String>>,
    version: Mutex<Option<String>>,
    expired: AtomicBool,
}

impl Http {
    /// A connection to `url` sending `headers` on every request, each exchange bounded by
    /// `timeout`.
    pub fn new(client: ToolHttp, url: &str, headers: Vec<(String, String)>, timeout: Duration) -> Self {
        Self {
            client,
            url: url.to_owned(),
            headers,
            timeout,
            session: Mutex::default(),
            version: Mutex::default(),
            expired: AtomicBool::new(false),
        }
    }

    async fn post(&self, message: &Value, started: &AtomicBool) -> Result<crate::agent::Exchange, Lost> {
        let session = self.session.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let version = self.version.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut headers: Vec<(&str, &str)> =
            vec![("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
        headers.extend(self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        if let Some(session) = &session {
            headers.push((MCP_SESSION_HEADER, session));
        }
        if let Some(version) = &version {
            headers.push((MCP_PROTOCOL_VERSION_HEADER, version));
        }
        let body = Bytes::from(jsonrpc::encode(message).map_err(Lost::NotSent)?);
        // From here the request may leave (a refused connection is still told apart below).
        started.store(true, Ordering::SeqCst);
        let reply =
            self.client.post_keeping_headers(&self.url, &headers, body, self.timeout).await.map_err(|f| match f {
                f if f.may_have_arrived() => Lost::MaybeArrived(f.to_string()),
                HttpFailure::Invalid(why) => Lost::NotSent(why),
                f => Lost::NotSent(f.to_string()),
            })?;
        if reply.status == 404 && session.is_some() {
            self.expired.store(true, Ordering::SeqCst);
            return Err(Lost::SessionExpired);
        }
        match reply.status {
            200..=299 => Ok(reply),
            // A refusal of the request as a whole: nothing was run for it.
            400..=499 if reply.status != 408 => Err(Lost::Refused(format!("HTTP {}", reply.status))),
            // A server (or a proxy) error may come after the work was done.
            status => Err(Lost::MaybeArrived(format!("HTTP {status}"))),
        }
    }

    /// Keeps the session id the server gave (the first one: a server cannot move us).
    fn keep_session(&self, reply: &crate::agent::Exchange) -> Result<(), Lost> {
        let Some(id) = reply.header(MCP_SESSION_HEADER) else { return Ok(()) };
        let visible = id.bytes().all(|b| (0x21..=0x7e).contains(&b));
        if id.is_empty() || id.len() > SESSION_ID_BYTES_MAX || !visible {
            return Err(Lost::MaybeArrived("the server gave a session id that is not 1-256 visible ASCII".into()));
        }
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        session.get_or_insert_with(|| id.to_owned());
        Ok(())
    }
}

/// The response to `id` in a reply body: the one JSON message, or the SSE event carrying it.
fn answer_in(reply: &crate::agent::Exchange, id: u64) -> Result<Answer, Lost> {
    let malformed = |why: String| Lost::MaybeArrived(format!("the server's reply is not readable: {why}"));
    let content_type = reply.header("content-type").unwrap_or_default().to_ascii_lowercase();
    let mut messages: Vec<Vec<u8>> = Vec::new();
    if content_type.starts_with("text/event-stream") {
        let mut decoder = SseDecoder::new();
        let mut items = Vec::new();
        decoder.feed(&reply.body, &mut items).map_err(|e| malformed(e.to_string()))?;
        decoder.feed(b"\n\n", &mut items).map_err(|e| malformed(e.to_string()))?;
        messages.extend(items.into_iter().filter_map(|item| match item {
            SseItem::Data(data) if !data.trim().is_empty() => Some(data.into_bytes()),
            _ => None,
        }));
    } else {
        messages.push(reply.body.to_vec());
    }
    for message in messages {
        match jsonrpc::parse(&message).map_err(malformed)? {
            Incoming::Response { id: answered, outcome } if answered == id => return Ok(outcome),
            // Another id, the server's own requests (we offered nothing) and notifications.
            _ => {}
        }
    }
    Err(Lost::MaybeArrived(format!("the reply ended without the response to request {id}")))
}

impl Transport for Http {
    fn exchange(&self, id: u64, message: Value, started: Arc<AtomicBool>) -> BoxFuture<'_, Result<Answer, Lost>> {
        Box::pin(async move {
            if !self.usable() {
                return Err(Lost::SessionExpired);
            }
            let reply = self.post(&message, &started).await?;
            self.keep_session(&reply)?;
            answer_in(&reply, id)
        })
    }

    fn notify(&self, message: Value) -> BoxFuture<'_, Result<(), Lost>> {
        Box::pin(async move { self.post(&message, &AtomicBool::new(false)).await.map(|_| ()) })
    }

    fn usable(&self) -> bool {
        !self.expired.load(Ordering::SeqCst)
    }

    fn agreed(&self, protocol_version: &str) {
        *self.version.lock().unwrap_or_else(|p| p.into_inner()) = Some(protocol_version.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(content_type: &str, body: &str) -> crate::agent::Exchange {
        crate::agent::Exchange {
            status: 200,
            headers: vec![("content-type".into(), content_type.into())],
            body: Bytes::from(body.to_owned()),
        }
    }

    #[test]
    fn the_response_is_found_in_json_or_among_sse_events() {
        let json = reply("application/json", r#"{"jsonrpc":"2.0","id":7,"result":{"ok":true}}"#);
        assert_eq!(answer_in(&json, 7), Ok(Ok(serde_json::json!({"ok": true}))));
        let sse = reply(
            "text/event-stream",
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n\
             data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n",
        );
        assert_eq!(answer_in(&sse, 7), Ok(Ok(serde_json::json!({}))));
    }

    #[test]
    fn a_reply_without_our_response_or_unreadable_leaves_the_outcome_unknown() {
        for (content_type, body) in [
            ("text/event-stream", ": keep-alive\n\n"),
            ("application/json", r#"{"jsonrpc":"2.0","id":8,"result":{}}"#),
            ("application/json", "<html>gateway</html>"),
        ] {
            assert!(matches!(answer_in(&reply(content_type, body), 7), Err(Lost::MaybeArrived(_))), "{body}");
        }
    }
}
