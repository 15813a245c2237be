//! The streaming adapter for OpenAI-compatible chat completions (DeepSeek preset), on hyper
//! 1.x over the `Net` seam (FAILURE-DEEPSEEK-STREAM, FAILURE-ADAPTER-BOUNDARY).
//!
//! One call = one connection, one request, one [`ModelStream`]. Every way a call can fail —
//! credential, connect, send, status, idle, abort, stream breakage, bad data, early EOF —
//! becomes exactly one terminal `finish` chunk; the stream never panics or returns an error
//! past its boundary. Dropping the stream aborts the connection task, so nothing keeps running
//! below a caller that has moved on.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{header, Request};
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

use super::config::{resolve_credential, Credentials, ResolvedProvider};
use super::format::WireFormat;
use super::format_errors::classify_for;
use super::proxy::Proxy;
use super::reading::Reader;
use super::sse::{SseDecoder, SseItem};
use super::step::Step;
use super::tls::ClientConfig;
use crate::event::{Chunk, ErrorCode, Failure, FinishReason};
use crate::seams::{Clock, Fs, Net};
use crate::{secrets::Scrubber, secrets::StreamScrubber};

/// Largest error-response body read for classification, in bytes.
pub const ERROR_BODY_BYTES_MAX: usize = 64 * 1024;

/// The model adapter: the seams a call needs.
#[derive(Clone)]
pub struct Adapter {
    net: Arc<dyn Net>,
    clock: Arc<dyn Clock>,
    credentials: Arc<dyn Credentials>,
    secrets: Scrubber,
    /// Reads a route's `ca_file`; without it only the bundled roots are trusted.
    fs: Option<Arc<dyn Fs>>,
    tls: Arc<super::tls::TlsConfigs>,
    /// The platform's trusted certificates, as the process captured them at start.
    platform_roots: super::tls::PlatformRoots,
    /// `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` as the process started with them.
    proxy_env: super::proxy::ProxyEnv,
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapter").finish_non_exhaustive()
    }
}

impl Adapter {
    /// An adapter on these seams.
    pub fn new(net: Arc<dyn Net>, clock: Arc<dyn Clock>, credentials: Arc<dyn Credentials>) -> Self {
        Self {
            net,
            clock,
            credentials,
            secrets: Scrubber::new(),
            fs: None,
            tls: Arc::default(),
            platform_roots: super::tls::PlatformRoots::default(),
            proxy_env: super::proxy::ProxyEnv::default(),
        }
    }

    /// Trusts the platform's certificate store too (`production::platform_roots()`).
    pub fn with_platform_roots(mut self, roots: super::tls::PlatformRoots) -> Self {
        self.platform_roots = roots;
        self
    }

    /// Tunnels through the environment's proxies (a route's own `proxy` still wins).
    pub fn with_proxy_env(mut self, env: super::proxy::ProxyEnv) -> Self {
        self.proxy_env = env;
        self
    }

    /// Reads a route's `ca_file` (extra trusted CAs for `https://`) through `fs`.
    pub fn with_fs(mut self, fs: Arc<dyn Fs>) -> Self {
        self.fs = Some(fs);
        self
    }

    /// Registers every credential this adapter resolves in `secrets` (shared with the rest of
    /// the process) and scrubs every chunk it yields with it (FAILURE-SECRETS). Without it the
    /// adapter still scrubs each call's own credential from that call's chunks.
    pub fn with_scrubber(mut self, secrets: Scrubber) -> Self {
        self.secrets = secrets;
        self
    }

    /// Starts one streaming call of `route` with the exact request `body` (so a retry can send
    /// identical bytes). Nothing happens until the first `next()`.
    pub fn stream(&self, route: Arc<ResolvedProvider>, body: Bytes, cancel: CancellationToken) -> ModelStream {
        ModelStream {
            adapter: self.clone(),
            route,
            request: Some(body),
            cancel,
            phase: Phase::Start,
            queue: VecDeque::new(),
            ready: VecDeque::new(),
            stream_scrubber: StreamScrubber::default(),
            connection: None,
            finished: false,
        }
    }
}

enum Phase {
    Start,
    Streaming(Box<Streaming>),
    Done,
}

/// A stream being read: its body, the SSE decoder and the format's reader, and when it last
/// made progress (a ping is not progress).
struct Streaming {
    body: Incoming,
    decoder: SseDecoder,
    reader: Reader,
    progress: crate::seams::Monotonic,
}

/// The chunks of one call. Ends with exactly one `finish` chunk, then `None`.
pub struct ModelStream {
    adapter: Adapter,
    route: Arc<ResolvedProvider>,
    request: Option<Bytes>,
    cancel: CancellationToken,
    phase: Phase,
    queue: VecDeque<Chunk>,
    /// Chunks scrubbed and ready for the caller.
    ready: VecDeque<Chunk>,
    stream_scrubber: StreamScrubber,
    connection: Option<tokio::task::JoinHandle<()>>,
    finished: bool,
}

impl std::fmt::Debug for ModelStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelStream").field("finished", &self.finished).finish_non_exhaustive()
    }
}

impl Drop for ModelStream {
    fn drop(&mut self) {
        self.shutdown();
    }
}

const TEXT_STREAM: u8 = 0;
const REASONING_STREAM: u8 = 1;
const ARGUMENTS_STREAM: u8 = 2;
const REFUSAL_STREAM: u8 = 3;
const SIGNATURE_STREAM: u8 = 4;

/// The delta of stream `key` (kind, block index) carrying `text`.
fn delta_of((kind, index): (u8, u32), text: String) -> Chunk {
    match kind {
        TEXT_STREAM => Chunk::TextDelta { index, text },
        REASONING_STREAM => Chunk::ReasoningDelta { index, text },
        REFUSAL_STREAM => Chunk::RefusalDelta { index, text },
        SIGNATURE_STREAM => Chunk::SignatureDelta { index, signature: text },
        _ => Chunk::ToolCallDelta { index, id: None, name: None, arguments_delta: text },
    }
}

/// The chunks `chunk` becomes once scrubbed (FAILURE-SECRETS): deltas pass through the
/// [`StreamScrubber`] (a secret split across deltas is caught, a held-back tail is released
/// before its block ends), failures and ids are scrubbed whole.
fn scrub_chunk(secrets: &Scrubber, stream: &mut StreamScrubber, chunk: Chunk, out: &mut VecDeque<Chunk>) {
    let flush = |stream: &mut StreamScrubber, out: &mut VecDeque<Chunk>, key: (u8, u32)| {
        if let Some(text) = stream.flush(key) {
            out.push_back(delta_of(key, text));
        }
    };
    let mut push = |key: (u8, u32), text: &str| {
        let text = stream.push(secrets, key, text);
        if !text.is_empty() {
            out.push_back(delta_of(key, text));
        }
    };
    let whole = |text: String| if secrets.leaks(&text) { secrets.scrub_held(&text) } else { text };
    match chunk {
        Chunk::TextDelta { index, text } => push((TEXT_STREAM, index), &text),
        Chunk::ReasoningDelta { index, text } => push((REASONING_STREAM, index), &text),
        Chunk::RefusalDelta { index, text } => push((REFUSAL_STREAM, index), &text),
        Chunk::SignatureDelta { index, signature } => push((SIGNATURE_STREAM, index), &signature),
        Chunk::ToolCallDelta { index, id, name, arguments_delta } => {
            let arguments_delta = stream.push_json(secrets, (ARGUMENTS_STREAM, index), &arguments_delta);
            if id.is_some() || name.is_some() || !arguments_delta.is_empty() {
                out.push_back(Chunk::ToolCallDelta {
                    index,
                    id: id.map(whole),
                    name: name.map(whole),
                    arguments_delta,
                });
            }
        }
        Chunk::BlockEnd { index } => {
            for kind in [TEXT_STREAM, REASONING_STREAM, ARGUMENTS_STREAM, REFUSAL_STREAM, SIGNATURE_STREAM] {
                flush(stream, out, (kind, index));
            }
            out.push_back(Chunk::BlockEnd { index });
        }
        Chunk::Finish { reason, inferred } => {
            for key in stream.keys() {
                flush(stream, out, key);
            }
            let reason = match reason {
                FinishReason::Error { mut failure } => {
                    secrets.scrub_failure(&mut failure);
                    FinishReason::Error { failure }
                }
                FinishReason::Aborted { mut failure } => {
                    secrets.scrub_failure(&mut failure);
                    FinishReason::Aborted { failure }
                }
                other => other,
            };
            out.push_back(Chunk::Finish { reason, inferred });
        }
        other => out.push_back(other),
    }
}

fn aborted() -> FinishReason {
    FinishReason::Aborted { failure: Failure::new(ErrorCode::Aborted, "the caller aborted the request") }
}

fn timeout(idle: Duration, waiting_for: &str) -> FinishReason {
    FinishReason::Error {
        failure: Failure::new(
            ErrorCode::Timeout,
            format!("no {waiting_for} for {} ms (idle timeout)", idle.as_millis()),
        ),
    }
}

fn error(code: ErrorCode, message: impl Into<String>) -> FinishReason {
    FinishReason::Error { failure: Failure::new(code, message) }
}

impl ModelStream {
    /// The next chunk; `None` after the terminal `finish`.
    pub async fn next(&mut self) -> Option<Chunk> {
        loop {
            if let Some(chunk) = self.ready.pop_front() {
                if matches!(chunk, Chunk::Finish { .. }) {
                    self.finished = true;
                    self.shutdown();
                }
                return Some(chunk);
            }
            if let Some(chunk) = self.queue.pop_front() {
                // Whatever the server sent back — an echoed key in an error body, an SSE error
                // event or the text itself, whole or split across deltas — leaves scrubbed.
                scrub_chunk(&self.adapter.secrets, &mut self.stream_scrubber, chunk, &mut self.ready);
                continue;
            }
            if self.finished {
                return None;
            }
            match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Start => match self.open().await {
                    Ok(body) => {
                        let format = self.route.preset.format();
                        self.phase = Phase::Streaming(Box::new(Streaming {
                            body,
                            decoder: if format == WireFormat::Gemini {
                                SseDecoder::keeping_bare_json()
                            } else {
                                SseDecoder::new()
                            },
                            reader: Reader::new(self.route.preset.format()),
                            progress: self.adapter.clock.now(),
                        }))
                    }
                    Err(reason) => self.queue.push_back(Chunk::finish(reason)),
                },
                Phase::Streaming(mut streaming) => match self.read_more(&mut streaming).await {
                    Ok(()) => self.phase = Phase::Streaming(streaming),
                    Err(reason) => self.queue.push_back(Chunk::finish(reason)),
                },
                Phase::Done => {
                    // Only reachable if a finish was already queued and consumed.
                    self.finished = true;
                }
            }
        }
    }

    /// Cancels the transport: the connection task is aborted and the body dropped.
    fn shutdown(&mut self) {
        self.phase = Phase::Done;
        if let Some(connection) = self.connection.take() {
            connection.abort();
        }
    }

    /// Connects, sends the request and returns the body of a 2xx response.
    async fn open(&mut self) -> Result<Incoming, FinishReason> {
        let key = resolve_credential(&self.route, self.adapter.credentials.as_ref())
            .map_err(|failure| FinishReason::Error { failure })?;
        if let Some(key) = &key {
            // Before the request leaves: whatever comes back may quote it.
            self.adapter.secrets.register(key.expose());
        }
        let (tls, proxy) = self.transport()?;
        let request = self.request_with(key.as_ref().map(|k| k.expose()))?;
        let idle = self.route.idle_timeout;
        let exchange = exchange(self.adapter.net.clone(), self.route.endpoint.clone(), proxy, tls, request);
        let (send, task) = tokio::select! {
            biased;
            () = self.cancel.cancelled() => return Err(aborted()),
            () = self.adapter.clock.sleep(idle) => return Err(timeout(idle, "connection")),
            result = exchange => result?,
        };
        self.connection = Some(task);
        let response = tokio::select! {
            biased;
            () = self.cancel.cancelled() => return Err(aborted()),
            () = self.adapter.clock.sleep(idle) => return Err(timeout(idle, "response")),
            response = send => response.map_err(|e| error(ErrorCode::Transport, format!("sending the request: {e}")))?,
        };
        self.stream_body(response).await
    }

    /// The route's TLS configuration (for `https://`) and proxy, the proxy's credentials
    /// registered as secrets before anything leaves.
    fn transport(&self) -> Result<(Option<Arc<ClientConfig>>, Option<Proxy>), FinishReason> {
        let tls = if self.route.endpoint.tls {
            let config = self
                .adapter
                .tls
                .get(self.route.ca_file.as_deref(), self.adapter.fs.as_deref(), &self.adapter.platform_roots)
                .map_err(|f| error(f.code, f.message))?;
            Some(config)
        } else {
            None
        };
        let proxy = super::proxy::choose(self.route.proxy.as_deref(), &self.adapter.proxy_env, &self.route.endpoint)
            .map_err(|e| error(ErrorCode::InvalidRequest, format!("proxy: {e}")))?;
        if let Some(proxy) = &proxy {
            for secret in &proxy.secrets {
                self.adapter.secrets.register(secret);
            }
            if let Some(authorization) = &proxy.authorization {
                self.adapter.secrets.register(authorization);
            }
        }
        Ok((tls, proxy))
    }

    /// The request, with the body this call was given and the credential in the header its
    /// format carries it in.
    fn request_with(&mut self, key: Option<&str>) -> Result<Request<Full<Bytes>>, FinishReason> {
        let endpoint = &self.route.endpoint;
        let format = self.route.preset.format();
        let mut request = Request::post(endpoint.stream_path(format, &self.route.model))
            .header(header::HOST, endpoint.authority())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "text/event-stream");
        request = match (format, key) {
            (WireFormat::Openai, Some(key)) => request.header(header::AUTHORIZATION, format!("Bearer {key}")),
            (WireFormat::Anthropic, key) => {
                let request = request.header("anthropic-version", super::anthropic::API_VERSION);
                match key {
                    Some(key) => request.header("x-api-key", key),
                    None => request,
                }
            }
            (WireFormat::Gemini, Some(key)) => request.header("x-goog-api-key", key),
            (_, None) => request,
        };
        let body = self.request.take().unwrap_or_default();
        request
            .body(Full::new(body))
            .map_err(|e| error(ErrorCode::Unknown, format!("could not build the request: {e}")))
    }

    /// The body of a 2xx event stream; any other answer as its classified failure, its error
    /// body and request ids scrubbed of held secrets.
    async fn stream_body(&self, response: hyper::Response<Incoming>) -> Result<Incoming, FinishReason> {
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            // A `chat.completion` JSON object is what an endpoint sends for `stream: false`
            // (or a proxy that buffers); the adapter reads streams only and says so. An error
            // object sent with a 200 (a proxy's) is that error, classified as one in a stream.
            let content_type = response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
            if content_type.is_some_and(|t| t.trim_start().to_ascii_lowercase().starts_with("application/json")) {
                let text = self.adapter.secrets.scrub(&self.read_error_body(response.into_body()).await?);
                let said = serde_json::from_str::<serde_json::Value>(&text).ok();
                if let Some(error_object) = said.as_ref().and_then(|v| v.get("error")).filter(|e| e.is_object()) {
                    return Err(FinishReason::Error { failure: super::normalise::mid_stream_failure(error_object) });
                }
                return Err(error(
                    ErrorCode::MalformedResponse,
                    format!(
                        "{} answered with a non-streaming JSON reply (HTTP {status}, application/json); faultline reads server-sent event streams only (stream: true)",
                        self.route.endpoint.authority()
                    ),
                ));
            }
            return Ok(response.into_body());
        }
        let (mut parts, body) = response.into_parts();
        // Scrubbed whole, before classification cuts them short: a cut through the middle of
        // a key would leave its first bytes behind, unrecognisable.
        let text = self.adapter.secrets.scrub(&self.read_error_body(body).await?);
        for name in ["x-request-id", "x-deepseek-request-id", "request-id"] {
            if let Some(value) = parts.headers.get(name).and_then(|v| v.to_str().ok()) {
                let scrubbed = self.adapter.secrets.scrub(value);
                if let Ok(scrubbed) = hyper::header::HeaderValue::from_str(&scrubbed) {
                    parts.headers.insert(name, scrubbed);
                }
            }
        }
        let format = self.route.preset.format();
        Err(FinishReason::Error {
            failure: classify_for(format, status, &parts.headers, &text, self.adapter.clock.now_ms()),
        })
    }

    /// Reads at most [`ERROR_BODY_BYTES_MAX`] of an error body, under the same watchdog.
    async fn read_error_body(&self, mut body: Incoming) -> Result<String, FinishReason> {
        let idle = self.route.idle_timeout;
        let mut bytes = Vec::new();
        while bytes.len() < ERROR_BODY_BYTES_MAX {
            let frame = tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Err(aborted()),
                () = self.adapter.clock.sleep(idle) => break,
                frame = body.frame() => frame,
            };
            match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        bytes.extend_from_slice(&data);
                    }
                }
                // A broken or slow error body still has a status worth classifying.
                Some(Err(_)) | None => break,
            }
        }
        bytes.truncate(ERROR_BODY_BYTES_MAX);
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Waits for the next body frame and queues the chunks it completes, under two bounds
    /// that run only during this wait (FAILURE-WIRE-FORMATS): the idle watchdog, which every
    /// byte re-arms — a keep-alive (Anthropic's `ping`, an SSE comment such as DeepSeek's
    /// `: keep-alive`) included — and the progress bound, which only data re-arms, so a stream
    /// that only pings still ends.
    async fn read_more(&mut self, streaming: &mut Streaming) -> Result<(), FinishReason> {
        let (idle, progress) = (self.route.idle_timeout, self.route.progress_timeout);
        let now = self.adapter.clock.now();
        let progress_left = progress.saturating_sub(now.saturating_duration_since(streaming.progress));
        let frame = tokio::select! {
            biased;
            () = self.cancel.cancelled() => return Err(aborted()),
            () = self.adapter.clock.sleep(idle.min(progress_left)) => {
                return Err(if progress_left <= idle { no_progress(progress) } else { timeout(idle, "stream bytes") });
            }
            frame = streaming.body.frame() => frame,
        };
        let data = match frame {
            None => return Err(streaming.reader.on_end(streaming.decoder.total_bytes())),
            Some(Err(e)) => return Err(error(ErrorCode::Transport, format!("the stream broke: {e}"))),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => return Ok(()), // trailers carry nothing for us
            },
        };
        let mut items = Vec::new();
        streaming.decoder.feed(&data, &mut items).map_err(|e| error(ErrorCode::MalformedResponse, e.to_string()))?;
        let mut chunks = Vec::new();
        let mut pinged = false;
        for item in items {
            let SseItem::Data(data) = item else {
                pinged = true;
                continue;
            };
            match streaming.reader.on_data(&data, &mut chunks) {
                Ok(Step::More) => streaming.progress = self.adapter.clock.now(),
                Ok(Step::Ping) => pinged = true,
                Ok(Step::Done(finish)) => {
                    self.queue.extend(chunks);
                    self.queue.push_back(finish);
                    return Ok(());
                }
                Err(failure) => {
                    self.queue.extend(chunks);
                    return Err(FinishReason::Error { failure });
                }
            }
        }
        self.queue.extend(chunks);
        // Planted: the seed's rule turned around — a ping re-arms nothing, so a provider that
        // queues a request longer than the idle watchdog is given up while it pings.
        let pings_ignored = crate::testing::bugs::planted("pings-not-activity");
        if pinged && pings_ignored && self.adapter.clock.now().saturating_duration_since(streaming.progress) >= idle {
            return Err(timeout(idle, "progress (only pings)"));
        }
        Ok(())
    }
}

/// The progress bound fired: the stream stayed alive (it pinged) but sent no data.
fn no_progress(progress: Duration) -> FinishReason {
    FinishReason::Error {
        failure: Failure::new(
            ErrorCode::Timeout,
            format!("no data for {} ms, only pings (progress timeout)", progress.as_millis()),
        ),
    }
}

/// Connects (through the proxy's tunnel, then TLS, when the route has them), shakes hands and
/// sends `request`: the response to await and the connection's task.
async fn exchange(
    net: Arc<dyn Net>,
    endpoint: super::endpoint::Endpoint,
    proxy: Option<Proxy>,
    tls: Option<Arc<ClientConfig>>,
    request: Request<Full<Bytes>>,
) -> Result<(ResponseFuture, tokio::task::JoinHandle<()>), FinishReason> {
    let first_hop = proxy.as_ref().map_or_else(|| endpoint.authority(), |p| p.authority.clone());
    let what = if proxy.is_some() { "proxy " } else { "" };
    let mut stream = net
        .connect(&first_hop)
        .await
        .map_err(|e| error(ErrorCode::Transport, format!("connect to {what}{first_hop}: {e}")))?;
    if let Some(proxy) = &proxy {
        stream = super::proxy::tunnel(stream, proxy, &endpoint.authority())
            .await
            .map_err(|(code, message)| error(code, message))?;
    }
    if let Some(config) = tls {
        stream = super::tls::connect(config, &endpoint.host, stream).await.map_err(|f| error(f.code, f.message))?;
    }
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| error(ErrorCode::Transport, format!("HTTP handshake: {e}")))?;
    let task = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((Box::pin(sender.send_request(request)), task))
}

/// A request on its way: the response, or the transport's error.
type ResponseFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = hyper::Result<hyper::Response<Incoming>>> + Send>>;
