//! The fake OpenAI-compatible model server: a hyper server on the `Net` seam, so the same
//! server runs on 127.0.0.1 in tests and demos and on a turmoil host in the simulator.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use faultline_runtime::{seams::Clock, seams::Monotonic, seams::Net};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame as BodyFrame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response as HttpResponse, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde_json::json;
use tokio::sync::mpsc;

use faultline_runtime::llm::WireFormat;

use super::render::{completion_json, echo_credential, Meta, MODEL_ID};
use super::render_format::render;
use super::request::{header_text, text_of, RequestHead};
use super::script::{Frame, Response, Script};
use super::validate::{anthropic_problem, call_key, gemini_problem, Issued};

/// Largest request body recorded, in bytes.
pub const REQUEST_BODY_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Frames buffered between the generator and the connection.
const FRAME_QUEUE_LEN: usize = 16;

/// Called with every request as it arrives.
pub type RequestObserver = Box<dyn Fn(&RecordedRequest) + Send + Sync>;

/// One request the server received. The credential is never recorded, only whether one came.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordedRequest {
    /// 0-based request number.
    pub n: usize,
    /// Request path.
    pub path: String,
    /// Whether an `Authorization` header was present.
    pub had_authorization: bool,
    /// The request body, verbatim (shared, not copied: a resumed conversation's body runs to
    /// hundreds of KiB, and the server, the ledger and the oracle each hold it).
    pub body: Arc<str>,
    /// Server clock (ms since start) when the request arrived.
    pub at_ms: u64,
    /// The address the request came from (the fleet world tells its workers apart by it).
    pub from: std::net::IpAddr,
}

struct State {
    script: Script,
    clock: Arc<dyn Clock>,
    started: Monotonic,
    requests: Mutex<Vec<RecordedRequest>>,
    on_request: Option<RequestObserver>,
    connections_closed: AtomicUsize,
    /// Set by [`ModelServer::heal`]: connections are no longer refused and failing responses
    /// are skipped.
    healed: AtomicBool,
    /// Wakes a server waiting out its refusal window when the run heals.
    heal_now: tokio::sync::Notify,
    /// Index of the next scripted response. Equal to the request count until the heal, after
    /// which failing responses are stepped over.
    cursor: AtomicUsize,
    /// What each request was served, by request number: the script slot (none when the
    /// script was exhausted) and its description (for timelines and coverage).
    served: Mutex<BTreeMap<usize, (Option<usize>, String)>>,
    /// The requests refused for a conversation the real API would refuse, and why.
    refused: Mutex<BTreeMap<usize, String>>,
    /// What the server signed, to know a signature that should have come back.
    issued: Mutex<Issued>,
}

/// One request and what the server answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Exchange {
    /// 0-based request number.
    pub n: usize,
    /// Server clock (ms since start) when it arrived.
    pub at_ms: u64,
    /// What it was served (`Response::describe`).
    pub served: String,
    /// The script slot it was served from (none: the script was exhausted, or no reply).
    #[serde(skip)]
    pub slot: Option<usize>,
    /// The request was refused before any model ran, as the real API refuses it, and why:
    /// the oracle's evidence of a request the provider would not accept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The wire format the request came in.
    pub format: WireFormat,
}

impl State {
    /// Seconds since the epoch by the server's clock (the `created` field providers send).
    fn created_s(&self) -> u64 {
        self.clock.now_ms() / 1000
    }

    fn note_served(&self, n: usize, slot: Option<usize>, what: String) {
        self.served.lock().unwrap_or_else(|p| p.into_inner()).insert(n, (slot, what));
    }

    fn elapsed_ms(&self) -> u64 {
        self.clock.now().saturating_duration_since(self.started).as_millis() as u64
    }
}

/// A running fake model server.
#[derive(Clone)]
pub struct ModelServer {
    state: Arc<State>,
    addr: SocketAddr,
}

impl std::fmt::Debug for ModelServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl ModelServer {
    /// Binds `addr` and serves `script` on the current tokio runtime. `on_request` sees every
    /// request as it arrives (the CLI appends them to a log file).
    pub async fn start(
        net: Arc<dyn Net>,
        clock: Arc<dyn Clock>,
        addr: &str,
        script: Script,
        on_request: Option<RequestObserver>,
    ) -> io::Result<ModelServer> {
        let requested = addr;
        let listener = net.bind(addr).await?;
        let addr = listener.local_addr()?;
        let started = clock.now();
        let state = Arc::new(State {
            script,
            clock,
            started,
            requests: Mutex::default(),
            on_request,
            connections_closed: AtomicUsize::new(0),
            healed: AtomicBool::new(false),
            heal_now: tokio::sync::Notify::new(),
            cursor: AtomicUsize::new(0),
            served: Mutex::default(),
            refused: Mutex::default(),
            issued: Mutex::default(),
        });
        let serving = state.clone();
        // Where to listen again after a refusal window: the address asked for, on the port
        // the first bind got (port 0 picks one).
        let again = addr_with_port(requested, addr.port());
        tokio::spawn(async move {
            let mut listener = listener;
            if serving.script.refuse_until_ms > 0 {
                // Refused as a real server that is not up yet refuses: nobody listens on the
                // port, so a connect fails at once (ECONNREFUSED), until the window ends or
                // the run heals.
                drop(listener);
                let healed = serving.heal_now.notified();
                if !serving.healed.load(Ordering::SeqCst) {
                    let until = serving.started.saturating_add(Duration::from_millis(serving.script.refuse_until_ms));
                    tokio::select! {
                        () = serving.clock.sleep_until(until) => {}
                        () = healed => {}
                    }
                }
                listener = match net.bind(&again).await {
                    Ok(listener) => listener,
                    Err(_) => return,
                };
            }
            loop {
                let Ok((stream, peer)) = listener.accept().await else { return };
                let state = serving.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| respond(state.clone(), request, peer.ip()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(ModelServer { state, addr })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every request with what it was served, in arrival order.
    pub fn exchanges(&self) -> Vec<Exchange> {
        let served = self.state.served.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let refused = self.state.refused.lock().unwrap_or_else(|p| p.into_inner()).clone();
        self.requests()
            .into_iter()
            .map(|r| {
                let (slot, served) = served.get(&r.n).cloned().unwrap_or_else(|| (None, "no reply".into()));
                let format = format_of(&r.path).map_or(WireFormat::Openai, |(f, _)| f);
                Exchange { n: r.n, at_ms: r.at_ms, served, slot, refused: refused.get(&r.n).cloned(), format }
            })
            .collect()
    }

    /// Ends the server's faults (the simulator's liveness phase): from now on connections are
    /// accepted and every scripted response that fails (an HTTP error, a disconnect, a stall,
    /// a malformed or empty body) is skipped; past the script's end the last good response
    /// repeats.
    pub fn heal(&self) {
        self.state.healed.store(true, Ordering::SeqCst);
        self.state.heal_now.notify_waiters();
    }

    /// Streamed responses whose connection went away before the stream ended (the client
    /// stopped reading and closed the transport).
    pub fn abandoned_streams(&self) -> usize {
        self.state.connections_closed.load(Ordering::SeqCst)
    }
}

/// `requested` (`ip:port`) with `port` instead of its own; `requested` itself if it is not an
/// address (a host name: the simulator's `model:80` keeps its port anyway).
fn addr_with_port(requested: &str, port: u16) -> String {
    match requested.parse::<SocketAddr>() {
        Ok(mut addr) => {
            addr.set_port(port);
            addr.to_string()
        }
        Err(_) => requested.to_owned(),
    }
}

/// The SSE body: frames produced by a generator task.
/// A response body fed from a channel: the bytes a server task sends, as it sends them (an
/// error ends the connection without a clean end; the sender dropped ends the body).
pub(crate) struct ChannelBody {
    pub(crate) frames: mpsc::Receiver<Result<Bytes, io::Error>>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<BodyFrame<Bytes>, io::Error>>> {
        self.frames.poll_recv(cx).map(|item| item.map(|r| r.map(BodyFrame::data)))
    }
}

type Reply = HttpResponse<http_body_util::combinators::BoxBody<Bytes, io::Error>>;

fn full(bytes: impl Into<Bytes>) -> http_body_util::combinators::BoxBody<Bytes, io::Error> {
    http_body_util::Full::new(bytes.into()).map_err(|never: Infallible| match never {}).boxed()
}

/// The wire format a path speaks, and the model a Gemini path names: OpenAI's
/// `…/chat/completions`, Anthropic's `…/v1/messages`, Gemini's
/// `…/v1beta/models/MODEL:streamGenerateContent`.
pub(crate) fn format_of(path: &str) -> Option<(WireFormat, Option<String>)> {
    if path.ends_with("/chat/completions") {
        return Some((WireFormat::Openai, None));
    }
    if path.ends_with("/v1/messages") {
        return Some((WireFormat::Anthropic, None));
    }
    let model = path.rsplit_once("/models/")?.1.strip_suffix(":streamGenerateContent")?;
    Some((WireFormat::Gemini, Some(model.chars().take(super::render::MODEL_NAME_CHARS_MAX).collect())))
}

/// The credential a request carries in its format's header (`Authorization: Bearer`,
/// Anthropic's `x-api-key` — its newest SDK sends a bearer token too — or Gemini's
/// `x-goog-api-key`), as an `Authorization` value: what a hostile script echoes.
fn credential(format: WireFormat, headers: &hyper::HeaderMap) -> String {
    let bearer = header_text(headers, hyper::header::AUTHORIZATION.as_str());
    let key = match format {
        WireFormat::Openai => return bearer,
        WireFormat::Anthropic => header_text(headers, "x-api-key"),
        WireFormat::Gemini => header_text(headers, "x-goog-api-key"),
    };
    if key.is_empty() {
        bearer
    } else {
        format!("Bearer {key}")
    }
}

async fn respond(state: Arc<State>, request: Request<Incoming>, from: std::net::IpAddr) -> Result<Reply, Infallible> {
    let path = request.uri().path().to_owned();
    // What real providers answer besides chat: the model list, and 404 for anything else.
    // Neither is a chat request: no script slot is used and nothing is recorded.
    if request.method() == hyper::Method::GET && path.ends_with("/models") {
        return Ok(json_reply(
            StatusCode::OK,
            &json!({"object": "list", "data": [
                {"id": MODEL_ID, "object": "model", "created": state.created_s(), "owned_by": "faultline"}
            ]}),
        ));
    }
    let Some((format, path_model)) = format_of(&path).filter(|_| request.method() == hyper::Method::POST) else {
        return Ok(json_reply(
            StatusCode::NOT_FOUND,
            &json!({"error": {"message": format!("no route for {} {path}", request.method()), "type": "invalid_request_error"}}),
        ));
    };
    // Held only to echo it back where a hostile script asks for it; never recorded.
    let authorization = credential(format, request.headers());
    let had_authorization = !authorization.is_empty();
    let body = match http_body_util::Limited::new(request.into_body(), REQUEST_BODY_BYTES_MAX).collect().await {
        Ok(body) => text_of(body.to_bytes()),
        Err(_) => return Ok(plain(StatusCode::PAYLOAD_TOO_LARGE, "request body too large or broken")),
    };
    let recorded = {
        let mut requests = state.requests.lock().unwrap_or_else(|p| p.into_inner());
        let at_ms = state.elapsed_ms();
        let recorded = RecordedRequest { n: requests.len(), path, had_authorization, body, at_ms, from };
        requests.push(recorded.clone());
        recorded
    };
    if let Some(on_request) = &state.on_request {
        on_request(&recorded);
    }
    let head = RequestHead::parse(&recorded.body);
    // What the real APIs refuse before any model runs (and no scripted response is used).
    if let Err(problem) = conversation_problem(&state, format, &head, &recorded.body) {
        state.note_served(recorded.n, None, format!("HTTP 400 ({problem})"));
        state.refused.lock().unwrap_or_else(|p| p.into_inner()).insert(recorded.n, problem.clone());
        return Ok(refusal(format, &problem));
    }
    let mut meta = Meta::of(recorded.n, state.created_s(), &head);
    if let Some(model) = path_model {
        meta.model = model;
    }
    let after_tool = state.script.after_tool_result.clone().filter(|_| format == WireFormat::Openai);
    if let Some(response) = after_tool.filter(|_| head.ends_with_tool_result()) {
        state.note_served(recorded.n, None, response.describe());
        return Ok(reply(state, meta, format, echo_credential(response, &authorization)));
    }
    let Some((slot, response)) = next_response(&state) else {
        state.note_served(recorded.n, None, "HTTP 500 (script exhausted)".into());
        return Ok(plain(StatusCode::INTERNAL_SERVER_ERROR, "{\"error\":{\"message\":\"script exhausted\"}}"));
    };
    state.note_served(recorded.n, Some(slot), response.describe());
    remember_signed(&state, format, &response);
    Ok(reply(state, meta, format, echo_credential(response, &authorization)))
}

/// Why the real API of `format` would refuse this request's conversation.
fn conversation_problem(state: &State, format: WireFormat, head: &RequestHead, body: &str) -> Result<(), String> {
    match format {
        WireFormat::Openai => head.conversation_problem(),
        WireFormat::Anthropic | WireFormat::Gemini => {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(body) else {
                return Err("The request body is not valid JSON".into());
            };
            let issued = state.issued.lock().unwrap_or_else(|p| p.into_inner());
            if format == WireFormat::Anthropic {
                anthropic_problem(&value, &issued)
            } else {
                gemini_problem(&value, &issued)
            }
        }
    }
}

/// A refusal in the shape `format`'s API gives it.
fn refusal(format: WireFormat, problem: &str) -> Reply {
    let body = match format {
        WireFormat::Openai => {
            json!({"error": {"message": problem, "type": "invalid_request_error", "param": "messages", "code": null}})
        }
        WireFormat::Anthropic => {
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": problem}})
        }
        WireFormat::Gemini => json!({"error": {"code": 400, "message": problem, "status": "INVALID_ARGUMENT"}}),
    };
    json_reply(StatusCode::BAD_REQUEST, &body)
}

/// What the response signs, remembered so that a history which drops it is refused.
fn remember_signed(state: &State, format: WireFormat, response: &Response) {
    let mut issued = state.issued.lock().unwrap_or_else(|p| p.into_inner());
    match format {
        WireFormat::Openai => {}
        WireFormat::Anthropic => {
            if response.frames.iter().any(|f| matches!(f, Frame::Reasoning(_))) {
                // Each call's block is opened by its first frame, with the id the renderer
                // gives it (the script's, or one it makes).
                let mut opened = std::collections::BTreeSet::new();
                for frame in &response.frames {
                    if let Frame::ToolCall { index, id, .. } = frame {
                        if opened.insert(*index) {
                            issued.thinking_calls.insert(super::render_anthropic::tool_use_id(*index, id.as_deref()));
                        }
                    }
                }
            }
        }
        WireFormat::Gemini => {
            if let Some((name, args)) = super::render_gemini::first_signed_call(response) {
                issued.signed_calls.insert(call_key(&name, &args));
            }
        }
    }
}

/// The scripted response request `n` gets, and its slot: in order; after the heal, failing
/// responses are stepped over and past the script's end the last good one repeats.
fn next_response(state: &State) -> Option<(usize, Response)> {
    let responses = &state.script.responses;
    let mut index = state.cursor.fetch_add(1, Ordering::SeqCst);
    if state.healed.load(Ordering::SeqCst) {
        while responses.get(index).is_some_and(Response::fails) {
            index = state.cursor.fetch_add(1, Ordering::SeqCst);
        }
        if index >= responses.len() {
            if let Some(slot) = responses.iter().rposition(|r| !r.fails()) {
                return Some((slot, responses[slot].clone()));
            }
        }
    }
    match responses.get(index) {
        Some(response) => Some((index, response.clone())),
        None if state.script.repeat_last && !responses.is_empty() => {
            Some((responses.len() - 1, responses[responses.len() - 1].clone()))
        }
        None => None,
    }
}

fn json_reply(status: StatusCode, value: &serde_json::Value) -> Reply {
    let mut reply = HttpResponse::new(full(value.to_string()));
    *reply.status_mut() = status;
    reply
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    reply
}

fn plain(status: StatusCode, body: &'static str) -> Reply {
    let mut reply = HttpResponse::new(full(body));
    *reply.status_mut() = status;
    reply
}

fn reply(state: Arc<State>, meta: Meta, format: WireFormat, response: Response) -> Reply {
    let status = response.status.unwrap_or(200);
    let body = match (&response.body, response.status) {
        (Some(text), _) => full(text.clone()),
        (None, Some(_)) => full(""),
        (None, None) if meta.whole && response.recorded.is_none() && format == WireFormat::Openai => {
            return json_reply(StatusCode::OK, &completion_json(&meta, &response));
        }
        (None, None) => {
            let (sender, frames) = mpsc::channel(FRAME_QUEUE_LEN);
            tokio::spawn(generate(state, meta, format, response.clone(), sender));
            ChannelBody { frames }.boxed()
        }
    };
    let mut builder = HttpResponse::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(
            hyper::header::CONTENT_TYPE,
            if response.status.is_some() { "application/json" } else { "text/event-stream; charset=utf-8" },
        );
    for (name, value) in &response.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    builder.body(body).unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "bad scripted header"))
}

async fn generate(
    state: Arc<State>,
    meta: Meta,
    format: WireFormat,
    response: Response,
    sender: mpsc::Sender<Result<Bytes, io::Error>>,
) {
    if let Some(recorded) = response.recorded {
        // Byte for byte as the provider sent it.
        if !send(&response, recorded.body(), &sender).await {
            finish_abandoned(&state, &sender);
        }
        return;
    }
    // None = a frame that sends nothing here (a delay marker, a call fragment held back).
    let (groups, tail) = render(format, &meta, &response);
    let (events, delays): (Vec<Option<String>>, Vec<u64>) = groups.into_iter().unzip();

    let mut sent_frames = 0;
    for (i, text) in events.into_iter().enumerate() {
        if !fault_point(&state, &response, format, sent_frames, &sender).await {
            return finish_abandoned(&state, &sender);
        }
        if delays[i] > 0 {
            state.clock.sleep(Duration::from_millis(delays[i])).await;
        }
        let Some(text) = text else { continue };
        if response.frame_delay_ms > 0 {
            state.clock.sleep(Duration::from_millis(response.frame_delay_ms)).await;
        }
        if !send(&response, &text, &sender).await {
            return finish_abandoned(&state, &sender);
        }
        sent_frames += 1;
    }
    if !fault_point(&state, &response, format, sent_frames, &sender).await {
        return finish_abandoned(&state, &sender);
    }
    for text in tail {
        if !send(&response, &text, &sender).await {
            return finish_abandoned(&state, &sender);
        }
    }
}

/// How long a scripted disconnect waits so the frames before it reach the wire first.
const DISCONNECT_FLUSH_MS: u64 = 5;

/// Applies a disconnect or stall scheduled after `sent` frames; `false` ends the stream.
async fn fault_point(
    state: &State,
    response: &Response,
    format: WireFormat,
    sent: usize,
    sender: &mpsc::Sender<Result<Bytes, io::Error>>,
) -> bool {
    if response.disconnect_after_frames == Some(sent) {
        // Let hyper flush what was sent (the body goes Pending meanwhile), then an error
        // frame makes it abort the connection: no clean end of the body.
        state.clock.sleep(Duration::from_millis(DISCONNECT_FLUSH_MS)).await;
        let _ = sender.send(Err(io::Error::other("scripted disconnect"))).await;
        return false;
    }
    if response.stall_after_frames == Some(sent) {
        match (response.ping_every_ms, format) {
            // A ping storm: the stream stays open and pings, and never goes on (Anthropic's
            // `ping`, OpenAI's keep-alive comment; Gemini sends no keep-alives).
            (Some(every), WireFormat::Anthropic | WireFormat::Openai) if every > 0 => loop {
                tokio::select! {
                    () = sender.closed() => return false,
                    () = state.clock.sleep(Duration::from_millis(every)) => {}
                }
                let ping = match format {
                    WireFormat::Anthropic => "event: ping\ndata: {\"type\": \"ping\"}\n\n",
                    _ => ": keep-alive\n\n",
                };
                if sender.send(Ok(Bytes::from_static(ping.as_bytes()))).await.is_err() {
                    return false;
                }
            },
            // Keep the stream open and silent until the client goes away.
            _ => sender.closed().await,
        }
        return false;
    }
    true
}

fn finish_abandoned(state: &State, sender: &mpsc::Sender<Result<Bytes, io::Error>>) {
    if sender.is_closed() {
        state.connections_closed.fetch_add(1, Ordering::SeqCst);
    }
}

/// Sends one event, split and re-terminated as the script says; `false` if the client left.
async fn send(response: &Response, text: &str, sender: &mpsc::Sender<Result<Bytes, io::Error>>) -> bool {
    let text = if response.crlf { text.replace('\n', "\r\n") } else { text.to_owned() };
    let bytes = Bytes::from(text);
    let piece = response.write_bytes.unwrap_or(bytes.len()).max(1);
    let mut at = 0;
    while at < bytes.len() {
        let end = (at + piece).min(bytes.len());
        if sender.send(Ok(bytes.slice(at..end))).await.is_err() {
            return false;
        }
        at = end;
    }
    true
}
