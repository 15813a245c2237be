//! `ToolHttp`: the small HTTP client the runtime hands to an embedder's tools, over the `Net`
//! seam, so the same tool code calls real services in production and simulated ones in the
//! harness (FAILURE-USER-HARNESS).
//!
//! Every request made while a tool call runs carries that call's execution id in
//! [`EXECUTION_ID_HEADER`], set by the runtime, not by the tool: a receiver (or the harness's
//! simulated service) can attribute each effect to the call that caused it even when the tool
//! forgot its idempotency key. Deduplicating is the receiver's business and the tool's
//! choice of key; attributing is never left to the tool.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;

use crate::llm::Endpoint;
use crate::seams::{Clock, Net, Seams};

/// Header carrying the execution id of the tool call that made a request.
pub const EXECUTION_ID_HEADER: &str = "faultline-execution-id";
/// Largest request body a tool may send, in bytes.
pub const TOOL_HTTP_REQUEST_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Largest reply body kept, in bytes: a longer reply is a failure, never silently cut.
pub const TOOL_HTTP_REPLY_BYTES_MAX: usize = 1024 * 1024;
/// Longest timeout a request may ask for, in ms.
pub const TOOL_HTTP_TIMEOUT_MS_MAX: u64 = 10 * 60 * 1000;

/// What rides on a tool call's task: its execution id, and the trace context of its span.
struct CallContext {
    execution_id: Arc<str>,
    trace: Vec<(String, String)>,
}

tokio::task_local! {
    static CALL: Arc<CallContext>;
}

/// Runs `call` with `execution_id` as the current execution (what [`current_execution_id`]
/// returns inside it, and what `ToolHttp` stamps on its requests) and `trace` as its trace
/// context ([`current_trace_fields`]).
pub(crate) fn with_execution<F: std::future::Future>(
    execution_id: &str,
    trace: Vec<(String, String)>,
    call: F,
) -> impl std::future::Future<Output = F::Output> {
    CALL.scope(Arc::new(CallContext { execution_id: Arc::from(execution_id), trace }), call)
}

/// The execution id of the tool call running on this task, if one is.
pub fn current_execution_id() -> Option<Arc<str>> {
    CALL.try_with(|call| call.execution_id.clone()).ok()
}

/// The trace-context fields (`traceparent`, `tracestate`) of the tool call running on this
/// task: what `ToolHttp` sends as headers and a command tool receives as `TRACEPARENT` and
/// `TRACESTATE`, so a tool's own spans join the turn's trace (FAILURE-OTEL). Empty outside a
/// call, or when no OpenTelemetry layer records the runtime's spans.
pub fn current_trace_fields() -> Vec<(String, String)> {
    CALL.try_with(|call| call.trace.clone()).unwrap_or_default()
}

/// A reply: its status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpReply {
    /// The HTTP status code.
    pub status: u16,
    /// The body, as text (invalid UTF-8 replaced).
    pub body: String,
}

/// Most reply headers kept by [`ToolHttp::open`] (hyper already bounds their bytes).
const EXCHANGE_HEADERS_KEPT_MAX: usize = 64;

/// A whole reply: status and bytes.
#[derive(Debug, Clone)]
struct WholeReply {
    status: u16,
    body: Bytes,
}

impl WholeReply {
    fn into_reply(self) -> HttpReply {
        HttpReply { status: self.status, body: String::from_utf8_lossy(&self.body).into_owned() }
    }
}

/// Why a request did not produce a reply. [`HttpFailure::may_have_arrived`] is what a tool
/// with a side effect must look at before it retries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HttpFailure {
    /// Refused before anything was sent (a bad URL, an oversize body): nothing arrived.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// No connection: nothing was sent.
    #[error("could not connect to {authority}: {reason}")]
    Connect {
        /// `host:port`.
        authority: String,
        /// What the network said.
        reason: String,
    },
    /// No reply within the timeout: the request may have arrived and taken effect.
    #[error("no reply from {authority} within {timeout_ms} ms")]
    TimedOut {
        /// `host:port`.
        authority: String,
        /// The timeout.
        timeout_ms: u64,
    },
    /// The connection broke after the request was sent, or the reply was unreadable: the
    /// request may have arrived and taken effect.
    #[error("reply from {authority} lost: {reason}")]
    Lost {
        /// `host:port`.
        authority: String,
        /// What broke.
        reason: String,
    },
}

impl HttpFailure {
    /// Whether the receiver may have acted on the request (a retry without an idempotency
    /// key may then do the effect twice).
    pub fn may_have_arrived(&self) -> bool {
        matches!(self, HttpFailure::TimedOut { .. } | HttpFailure::Lost { .. })
    }
}

/// The HTTP client of tools: one connection per request, a timeout on the clock seam, TLS
/// (bundled and platform roots) for `https`.
#[derive(Clone)]
pub struct ToolHttp {
    net: Arc<dyn Net>,
    clock: Arc<dyn Clock>,
    tls: Arc<crate::llm::tls::TlsConfigs>,
}

impl std::fmt::Debug for ToolHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolHttp").finish_non_exhaustive()
    }
}

impl ToolHttp {
    /// A client on `seams`' network and clock.
    pub fn new(seams: &Seams) -> Self {
        Self { net: seams.net.clone(), clock: seams.clock.clone(), tls: Arc::default() }
    }

    /// The clock its timeouts run on.
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// POSTs `body` to `url` with `headers`, waiting at most `timeout` for the whole reply.
    pub async fn post(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
        timeout: Duration,
    ) -> Result<HttpReply, HttpFailure> {
        self.request(hyper::Method::POST, url, headers, body.into(), timeout).await.map(WholeReply::into_reply)
    }

    /// GETs `url` with `headers`, waiting at most `timeout` for the whole reply.
    pub async fn get(&self, url: &str, headers: &[(&str, &str)], timeout: Duration) -> Result<HttpReply, HttpFailure> {
        self.request(hyper::Method::GET, url, headers, Bytes::new(), timeout).await.map(WholeReply::into_reply)
    }

    async fn request(
        &self,
        method: hyper::Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Bytes,
        timeout: Duration,
    ) -> Result<WholeReply, HttpFailure> {
        let timeout_ms = checked_timeout_ms(timeout)?;
        let (endpoint, request) = prepare(method, url, headers, body)?;
        let authority = endpoint.authority();
        let whole = async {
            let opened = self.send(&endpoint, request).await?;
            opened.collect().await
        };
        tokio::select! {
            reply = whole => reply,
            () = self.clock.sleep(timeout) => Err(HttpFailure::TimedOut { authority, timeout_ms }),
        }
    }

    /// Sends a request and returns as soon as the reply's head arrived (within `timeout`):
    /// its body is read as it comes (an MCP reply stream may stay open after the answer).
    pub(crate) async fn open(
        &self,
        method: hyper::Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Bytes,
        timeout: Duration,
    ) -> Result<OpenedReply, HttpFailure> {
        let timeout_ms = checked_timeout_ms(timeout)?;
        let (endpoint, request) = prepare(method, url, headers, body)?;
        let authority = endpoint.authority();
        tokio::select! {
            opened = self.send(&endpoint, request) => opened,
            () = self.clock.sleep(timeout) => Err(HttpFailure::TimedOut { authority, timeout_ms }),
        }
    }

    async fn send(&self, endpoint: &Endpoint, request: Request<Full<Bytes>>) -> Result<OpenedReply, HttpFailure> {
        let authority = endpoint.authority();
        let refused = |reason: String| HttpFailure::Connect { authority: authority.clone(), reason };
        let mut stream = self.net.connect(&authority).await.map_err(|e| refused(e.to_string()))?;
        if endpoint.tls {
            let config =
                self.tls.get(None, None, &crate::llm::tls::PlatformRoots::default()).map_err(|f| refused(f.message))?;
            stream = crate::llm::tls::connect(config, &endpoint.host, stream).await.map_err(|f| refused(f.message))?;
        }
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| refused(e.to_string()))?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        let lost = |reason: String| HttpFailure::Lost { authority: authority.clone(), reason };
        let response = match sender.send_request(request).await {
            Ok(response) => response,
            Err(e) => {
                driver.abort();
                return Err(lost(e.to_string()));
            }
        };
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .take(EXCHANGE_HEADERS_KEPT_MAX)
            .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
            .collect();
        Ok(OpenedReply { status, headers, body: response.into_body(), authority, driver })
    }
}

/// `timeout` in ms, refused outside `1..=`[`TOOL_HTTP_TIMEOUT_MS_MAX`].
fn checked_timeout_ms(timeout: Duration) -> Result<u64, HttpFailure> {
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    if timeout_ms == 0 || timeout_ms > TOOL_HTTP_TIMEOUT_MS_MAX {
        return Err(HttpFailure::Invalid(format!(
            "timeout {timeout_ms} ms is outside 1..={TOOL_HTTP_TIMEOUT_MS_MAX} ms"
        )));
    }
    Ok(timeout_ms)
}

/// The endpoint and the request for `url`, its body within [`TOOL_HTTP_REQUEST_BYTES_MAX`].
fn prepare(
    method: hyper::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<(Endpoint, Request<Full<Bytes>>), HttpFailure> {
    if body.len() > TOOL_HTTP_REQUEST_BYTES_MAX {
        return Err(HttpFailure::Invalid(format!(
            "body of {} bytes is above the {TOOL_HTTP_REQUEST_BYTES_MAX}-byte limit",
            body.len()
        )));
    }
    let (endpoint, path) = split_url(url)?;
    let request = build_request(method, &endpoint, &path, headers, body)?;
    Ok((endpoint, request))
}

/// A reply whose head has arrived: its body is read as it comes; dropping it closes the
/// connection.
pub(crate) struct OpenedReply {
    pub status: u16,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    body: hyper::body::Incoming,
    authority: String,
    driver: tokio::task::JoinHandle<()>,
}

impl OpenedReply {
    /// The value of header `name` (lower case), if the reply carried it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The next bytes of the body; `None` at its end.
    pub async fn next_bytes(&mut self) -> Option<Result<Bytes, HttpFailure>> {
        loop {
            match self.body.frame().await? {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => return Some(Ok(data)),
                    Err(_) => continue, // trailers
                },
                Err(e) => {
                    let reason = format!("reading the reply: {e}");
                    return Some(Err(HttpFailure::Lost { authority: self.authority.clone(), reason }));
                }
            }
        }
    }

    /// The whole body, within [`TOOL_HTTP_REPLY_BYTES_MAX`].
    async fn collect(mut self) -> Result<WholeReply, HttpFailure> {
        let mut body = Vec::new();
        while let Some(bytes) = self.next_bytes().await {
            let bytes = bytes?;
            if body.len() + bytes.len() > TOOL_HTTP_REPLY_BYTES_MAX {
                let reason = format!("reading the reply: more than {TOOL_HTTP_REPLY_BYTES_MAX} bytes");
                return Err(HttpFailure::Lost { authority: self.authority.clone(), reason });
            }
            body.extend_from_slice(&bytes);
        }
        Ok(WholeReply { status: self.status, body: Bytes::from(body) })
    }
}

impl Drop for OpenedReply {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// `url` as an endpoint (scheme, host, port) and the request path with its query.
fn split_url(url: &str) -> Result<(Endpoint, String), HttpFailure> {
    let uri: hyper::Uri = url.parse().map_err(|e| HttpFailure::Invalid(format!("{url:?} is not a URL: {e}")))?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let base = format!(
        "{}://{}",
        uri.scheme_str().unwrap_or_default(),
        uri.authority().map(hyper::http::uri::Authority::as_str).unwrap_or_default()
    );
    let endpoint = Endpoint::parse(&base).map_err(|e| HttpFailure::Invalid(format!("{url:?}: {e}")))?;
    Ok((endpoint, path))
}

fn build_request(
    method: hyper::Method,
    endpoint: &Endpoint,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<Request<Full<Bytes>>, HttpFailure> {
    let mut builder = Request::builder().method(method).uri(path).header(hyper::header::HOST, endpoint.authority());
    for (name, value) in headers {
        if name.eq_ignore_ascii_case(EXECUTION_ID_HEADER) {
            return Err(HttpFailure::Invalid(format!("{EXECUTION_ID_HEADER} is set by the runtime, not by a tool")));
        }
        builder = builder.header(*name, *value);
    }
    if let Some(id) = current_execution_id() {
        builder = builder.header(EXECUTION_ID_HEADER, &*id);
    }
    // A tool that propagates its own span's context keeps it; otherwise the call's.
    for (name, value) in current_trace_fields() {
        if !headers.iter().any(|(set, _)| set.eq_ignore_ascii_case(&name)) {
            builder = builder.header(name, value);
        }
    }
    builder.body(Full::new(body)).map_err(|e| HttpFailure::Invalid(e.to_string()))
}
