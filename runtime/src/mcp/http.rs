//! An MCP server over streamable HTTP: each message a POST to the server's one URL through
//! the runtime's `ToolHttp` (the `Net` seam, TLS for `https`, the call's execution id in the
//! `faultline-execution-id` header), the answer either one JSON body or an SSE stream.
//!
//! A stream is read event by event, as it comes, and the exchange ends at the response to
//! the request's id — a server may keep the stream open after it (the specification says
//! SHOULD close, not MUST). The server's own requests on the stream (`ping`, or what this
//! client does not offer) are answered as they come. A stream that closes before the
//! response, after the server gave an event id, is resumed (protocol 2025-11-25): after the
//! `retry` it asked for, a GET with `Last-Event-ID` carries on where it stopped, a bounded
//! number of times, within the same deadline; the request itself is never sent again.
//!
//! The session id the server gives at `initialize` rides on every later request; a 404 on it
//! means the server forgot the session, and so does a 400 to a request that carried it (what
//! the official SDKs' example servers and older Python servers answer): nothing was run, and
//! the next request initialises a new session.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use super::jsonrpc::{self, Incoming};
use super::transport::{Answer, Lost, Transport};
use crate::llm::sse::{SseDecoder, SseItem};
use crate::seams::BoxFuture;
use crate::tool::{HttpFailure, OpenedReply, ToolHttp};

/// The session header of streamable HTTP.
pub const MCP_SESSION_HEADER: &str = "mcp-session-id";
/// The header naming the protocol version agreed at `initialize`.
pub const MCP_PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
/// The header a resumed stream names its last event by.
pub const MCP_LAST_EVENT_ID_HEADER: &str = "last-event-id";
/// Longest session id kept, in bytes (a JWT fits): a longer one is refused as a broken server.
const SESSION_ID_BYTES_MAX: usize = 4096;
/// Most times one exchange's stream is resumed after it closed before the response.
pub const MCP_RESUMPTIONS_MAX: u32 = 3;
/// The wait before resuming when the server gave no `retry`, in ms.
pub const MCP_RESUME_DELAY_MS_DEFAULT: u64 = 1_000;
/// Longest `retry` honoured, in ms: a longer one waits this long (the exchange's deadline
/// bounds the whole wait anyway).
pub const MCP_RESUME_DELAY_MS_MAX: u64 = 30_000;

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

/// How one stream ended without the response.
enum StreamEnded {
    /// The stream closed (or broke) after the server named event `id`: resumable.
    Resumable { last_event_id: String, retry_ms: Option<u64>, why: String },
    /// Closed or broken with nothing to resume from.
    Lost(String),
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

    /// The headers of every request after `initialize`: ours, the session's and the
    /// protocol version's.
    fn request_headers<'a>(
        &'a self,
        session: &'a Option<String>,
        version: &'a Option<String>,
    ) -> Vec<(&'a str, &'a str)> {
        let mut headers: Vec<(&str, &str)> = self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        if let Some(session) = session {
            headers.push((MCP_SESSION_HEADER, session));
        }
        if let Some(version) = version {
            headers.push((MCP_PROTOCOL_VERSION_HEADER, version));
        }
        headers
    }

    fn session_and_version(&self) -> (Option<String>, Option<String>) {
        let session = self.session.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let version = self.version.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (session, version)
    }

    async fn post(&self, message: &Value, started: &AtomicBool) -> Result<OpenedReply, Lost> {
        let (session, version) = self.session_and_version();
        let mut headers = vec![("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
        headers.extend(self.request_headers(&session, &version));
        let body = Bytes::from(jsonrpc::encode(message).map_err(Lost::NotSent)?);
        // From here the request may leave (a refused connection is still told apart below).
        started.store(true, Ordering::SeqCst);
        let reply =
            self.client.open(hyper::Method::POST, &self.url, &headers, body, self.timeout).await.map_err(lost_of)?;
        // A server that no longer knows the session says so before any JSON-RPC: 404 as the
        // specification says, 400 as its SDKs' example servers do. Nothing was run.
        if session.is_some() && matches!(reply.status, 404 | 400) {
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
    fn keep_session(&self, reply: &OpenedReply) -> Result<(), Lost> {
        let Some(id) = reply.header(MCP_SESSION_HEADER) else { return Ok(()) };
        let visible = id.bytes().all(|b| (0x21..=0x7e).contains(&b));
        if id.is_empty() || id.len() > SESSION_ID_BYTES_MAX || !visible {
            return Err(Lost::MaybeArrived(format!(
                "the server gave a session id that is not 1-{SESSION_ID_BYTES_MAX} visible ASCII"
            )));
        }
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        session.get_or_insert_with(|| id.to_owned());
        Ok(())
    }

    /// The response to `id` in `reply`: its one JSON body, or the event carrying it on its
    /// stream, resumed with `Last-Event-ID` as often as allowed when it closes first.
    async fn answer(&self, mut reply: OpenedReply, id: u64) -> Result<Answer, Lost> {
        let mut resumptions = 0;
        loop {
            if !is_event_stream(&reply) {
                return whole_answer(reply, id).await;
            }
            let (last_event_id, retry_ms, why) = match self.read_stream(&mut reply, id).await {
                Ok(answer) => return Ok(answer),
                Err(StreamEnded::Lost(why)) => return Err(Lost::MaybeArrived(why)),
                Err(StreamEnded::Resumable { last_event_id, retry_ms, why }) => (last_event_id, retry_ms, why),
            };
            drop(reply);
            if resumptions == MCP_RESUMPTIONS_MAX || crate::testing::bugs::planted("mcp-no-resume") {
                return Err(Lost::MaybeArrived(format!("{why}; not resumed again after {resumptions} resumptions")));
            }
            resumptions += 1;
            let delay = retry_ms.unwrap_or(MCP_RESUME_DELAY_MS_DEFAULT).min(MCP_RESUME_DELAY_MS_MAX);
            self.client.clock().sleep(Duration::from_millis(delay)).await;
            reply = self.resume(&last_event_id).await.map_err(|lost| match lost {
                Lost::MaybeArrived(resume) => Lost::MaybeArrived(format!("{why}; resuming it: {resume}")),
                other => Lost::MaybeArrived(format!("{why}; resuming it: {other}")),
            })?;
        }
    }

    /// GET with `Last-Event-ID`: the rest of the stream that closed (the response may come
    /// on it; the request is not sent again).
    async fn resume(&self, last_event_id: &str) -> Result<OpenedReply, Lost> {
        let (session, version) = self.session_and_version();
        let mut headers = vec![("accept", "text/event-stream"), (MCP_LAST_EVENT_ID_HEADER, last_event_id)];
        headers.extend(self.request_headers(&session, &version));
        let reply = self
            .client
            .open(hyper::Method::GET, &self.url, &headers, Bytes::new(), self.timeout)
            .await
            .map_err(|f| Lost::MaybeArrived(f.to_string()))?;
        match reply.status {
            200..=299 if is_event_stream(&reply) => Ok(reply),
            status => Err(Lost::MaybeArrived(format!("the server answered the resumption with HTTP {status}"))),
        }
    }

    /// Reads `reply`'s events as they come until the response to `id`, answering the
    /// server's requests on the way; how the stream ended when it ended first.
    async fn read_stream(&self, reply: &mut OpenedReply, id: u64) -> Result<Answer, StreamEnded> {
        let mut decoder = SseDecoder::new();
        let mut items = Vec::new();
        let ended = |decoder: &SseDecoder, why: String| match decoder.last_event_id() {
            Some(last) if !last.is_empty() => {
                StreamEnded::Resumable { last_event_id: last.to_owned(), retry_ms: decoder.retry_ms(), why }
            }
            _ => StreamEnded::Lost(why),
        };
        loop {
            let bytes = match reply.next_bytes().await {
                None => {
                    let why = format!("the stream ended without the response to request {id}");
                    return Err(ended(&decoder, why));
                }
                Some(Err(failure)) => return Err(ended(&decoder, failure.to_string())),
                Some(Ok(bytes)) => bytes,
            };
            decoder.feed(&bytes, &mut items).map_err(|e| StreamEnded::Lost(format!("the server's stream: {e}")))?;
            for item in items.drain(..) {
                let SseItem::Data(data) = item else { continue };
                // A priming event has no data: it only names the stream's position.
                if data.trim().is_empty() {
                    continue;
                }
                match jsonrpc::parse(data.as_bytes()) {
                    // Planted: the old transport, which read the whole body before looking in it.
                    Ok(Incoming::Response { id: answered, outcome })
                        if answered == id && crate::testing::bugs::planted("mcp-reads-whole-stream") =>
                    {
                        while let Some(Ok(_)) = reply.next_bytes().await {}
                        return Ok(outcome);
                    }
                    Ok(Incoming::Response { id: answered, outcome }) if answered == id => return Ok(outcome),
                    Ok(Incoming::Request { id: asked, method }) => self.answer_request(&asked, &method).await,
                    // Another id, an error without one, notifications: nothing waits on them.
                    Ok(_) | Err(_) => {}
                }
            }
        }
    }

    /// Answers a request the server made on a stream: `ping` with `{}`, anything else
    /// (this client offers no sampling, elicitation or roots) with "method not found".
    async fn answer_request(&self, asked: &Value, method: &str) {
        let answer = if method == "ping" {
            Ok(serde_json::json!({}))
        } else {
            Err((jsonrpc::METHOD_NOT_FOUND, "this client offers no such method"))
        };
        // Best effort: a server that does not take the answer fails its own request.
        let _ = self.post(&jsonrpc::reply(asked, answer), &AtomicBool::new(false)).await;
    }
}

/// What a failed POST may have done.
fn lost_of(failure: HttpFailure) -> Lost {
    match failure {
        f if f.may_have_arrived() => Lost::MaybeArrived(f.to_string()),
        HttpFailure::Invalid(why) => Lost::NotSent(why),
        f => Lost::NotSent(f.to_string()),
    }
}

fn is_event_stream(reply: &OpenedReply) -> bool {
    reply.header("content-type").unwrap_or_default().trim_start().to_ascii_lowercase().starts_with("text/event-stream")
}

/// The response to `id` in a JSON body (one message), read whole within the reply limit.
async fn whole_answer(mut reply: OpenedReply, id: u64) -> Result<Answer, Lost> {
    let malformed = |why: String| Lost::MaybeArrived(format!("the server's reply is not readable: {why}"));
    let mut body = Vec::new();
    while let Some(bytes) = reply.next_bytes().await {
        let bytes = bytes.map_err(|f| Lost::MaybeArrived(f.to_string()))?;
        if body.len() + bytes.len() > jsonrpc::MCP_MESSAGE_BYTES_MAX {
            return Err(malformed(format!("above the {}-byte message limit", jsonrpc::MCP_MESSAGE_BYTES_MAX)));
        }
        body.extend_from_slice(&bytes);
    }
    match jsonrpc::parse(&body).map_err(malformed)? {
        Incoming::Response { id: answered, outcome } if answered == id => Ok(outcome),
        _ => Err(Lost::MaybeArrived(format!("the reply ended without the response to request {id}"))),
    }
}

impl Transport for Http {
    fn exchange(&self, id: u64, message: Value, started: Arc<AtomicBool>) -> BoxFuture<'_, Result<Answer, Lost>> {
        Box::pin(async move {
            if !self.usable() {
                return Err(Lost::SessionExpired);
            }
            let answered = async {
                let reply = self.post(&message, &started).await?;
                self.keep_session(&reply)?;
                self.answer(reply, id).await
            };
            // The whole exchange, resumptions included, within its deadline.
            tokio::select! {
                answer = answered => answer,
                () = self.client.clock().sleep(self.timeout) => Err(Lost::MaybeArrived(format!(
                    "no response to request {id} within {} ms", self.timeout.as_millis()
                ))),
            }
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
