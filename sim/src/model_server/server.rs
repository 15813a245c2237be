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

use super::script::{Dialect, Frame, Response, Script};

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
                let Ok((stream, _)) = listener.accept().await else { return };
                let state = serving.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| respond(state.clone(), request));
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
        self.requests()
            .into_iter()
            .map(|r| {
                let (slot, served) = served.get(&r.n).cloned().unwrap_or_else(|| (None, "no reply".into()));
                Exchange { n: r.n, at_ms: r.at_ms, served, slot }
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
struct ChannelBody {
    frames: mpsc::Receiver<Result<Bytes, io::Error>>,
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

async fn respond(state: Arc<State>, request: Request<Incoming>) -> Result<Reply, Infallible> {
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
    if request.method() != hyper::Method::POST || !path.ends_with("/chat/completions") {
        return Ok(json_reply(
            StatusCode::NOT_FOUND,
            &json!({"error": {"message": format!("no route for {} {path}", request.method()), "type": "invalid_request_error"}}),
        ));
    }
    let had_authorization = request.headers().contains_key(hyper::header::AUTHORIZATION);
    // Held only to echo it back where a hostile script asks for it; never recorded.
    let authorization = header_text(request.headers(), hyper::header::AUTHORIZATION.as_str());
    let body = match http_body_util::Limited::new(request.into_body(), REQUEST_BODY_BYTES_MAX).collect().await {
        Ok(body) => text_of(body.to_bytes()),
        Err(_) => return Ok(plain(StatusCode::PAYLOAD_TOO_LARGE, "request body too large or broken")),
    };
    let recorded = {
        let mut requests = state.requests.lock().unwrap_or_else(|p| p.into_inner());
        let recorded = RecordedRequest { n: requests.len(), path, had_authorization, body, at_ms: state.elapsed_ms() };
        requests.push(recorded.clone());
        recorded
    };
    if let Some(on_request) = &state.on_request {
        on_request(&recorded);
    }
    let head = RequestHead::parse(&recorded.body);
    // What the real APIs refuse before any model runs (and no scripted response is used).
    if let Err(problem) = head.conversation_problem() {
        state.note_served(recorded.n, None, format!("HTTP 400 ({problem})"));
        return Ok(json_reply(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"message": problem, "type": "invalid_request_error", "param": "messages", "code": null}}),
        ));
    }
    let responses = &state.script.responses;
    let mut index = state.cursor.fetch_add(1, Ordering::SeqCst);
    if state.healed.load(Ordering::SeqCst) {
        while responses.get(index).is_some_and(Response::fails) {
            index = state.cursor.fetch_add(1, Ordering::SeqCst);
        }
        if index >= responses.len() {
            if let Some(slot) = responses.iter().rposition(|r| !r.fails()) {
                let good = &responses[slot];
                state.note_served(recorded.n, Some(slot), good.describe());
                let meta = Meta::of(recorded.n, state.created_s(), &head);
                return Ok(reply(state.clone(), meta, good.clone()));
            }
        }
    }
    let (slot, response) = match responses.get(index) {
        Some(response) => (index, response.clone()),
        None if state.script.repeat_last && !responses.is_empty() => {
            (responses.len() - 1, responses[responses.len() - 1].clone())
        }
        None => {
            state.note_served(recorded.n, None, "HTTP 500 (script exhausted)".into());
            return Ok(plain(StatusCode::INTERNAL_SERVER_ERROR, "{\"error\":{\"message\":\"script exhausted\"}}"));
        }
    };
    state.note_served(recorded.n, Some(slot), response.describe());
    let meta = Meta::of(recorded.n, state.created_s(), &head);
    Ok(reply(state, meta, echo_credential(response, &authorization)))
}

/// A request body as text, verbatim when it is UTF-8 (the usual case, checked at once) and
/// with U+FFFD for what is not (checked piece by piece, much slower).
fn text_of(bytes: Bytes) -> Arc<str> {
    match std::str::from_utf8(&bytes) {
        Ok(text) => Arc::from(text),
        Err(_) => Arc::from(String::from_utf8_lossy(&bytes)),
    }
}

/// A request header as text (empty when absent or not text).
pub fn header_text(headers: &hyper::HeaderMap, name: &str) -> String {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

/// What a hostile provider does: `{{authorization}}` in a scripted body, text, raw SSE event
/// or header value becomes the request's `Authorization` header (`Bearer <key>`), `{{key}}`
/// the bare key, `{{key-head}}` / `{{key-tail}}` its first and second half (a key split
/// across two deltas, as a model streams it token by token). The echoed-secret scenarios use it; the client must never store either.
pub fn echo_credential(mut response: Response, authorization: &str) -> Response {
    const WHOLE: &str = "{{authorization}}";
    const KEY: &str = "{{key}}";
    const HEAD: &str = "{{key-head}}";
    const TAIL: &str = "{{key-tail}}";
    const ESCAPED: &str = "{{key-json-escaped}}";
    let key = authorization.strip_prefix("Bearer ").unwrap_or(authorization);
    // The key with its first character as a JSON `\u` escape: the same key to whoever parses
    // the JSON it sits in, invisible to a search of the raw text.
    let escaped = key.chars().next().map_or_else(String::new, |c| {
        let mut units = [0u16; 2];
        let escape: String = c.encode_utf16(&mut units).iter().map(|u| format!("\\u{u:04x}")).collect();
        format!("{escape}{}", &key[c.len_utf8()..])
    });
    // The two halves of the key, for a secret split across two deltas.
    let mut middle = key.len() / 2;
    while !key.is_char_boundary(middle) {
        middle -= 1;
    }
    let (head, tail) = key.split_at(middle);
    let fill = |text: &mut String| {
        if [WHOLE, KEY, HEAD, TAIL, ESCAPED].iter().any(|p| text.contains(p)) {
            *text = text
                .replace(WHOLE, authorization)
                .replace(KEY, key)
                .replace(HEAD, head)
                .replace(TAIL, tail)
                .replace(ESCAPED, &escaped);
        }
    };
    if let Some(body) = response.body.as_mut() {
        fill(body);
    }
    for value in response.headers.values_mut() {
        fill(value);
    }
    for frame in &mut response.frames {
        match frame {
            Frame::Text(text) | Frame::Reasoning(text) | Frame::Refusal(text) | Frame::Raw(text) => fill(text),
            Frame::ToolCall { arguments, .. } => fill(arguments),
            Frame::Filler(_) | Frame::KeepAlive | Frame::DelayMs(_) => {}
        }
    }
    response
}

/// Whether `response` quotes the request's credential back anywhere (see [`echo_credential`]).
pub fn echoes_credential(response: &Response) -> bool {
    let echoes = |text: &str| {
        ["{{authorization}}", "{{key}}", "{{key-head}}", "{{key-tail}}", "{{key-json-escaped}}"]
            .iter()
            .any(|p| text.contains(p))
    };
    response.body.as_deref().is_some_and(echoes)
        || response.headers.values().any(|v| echoes(v))
        || response.frames.iter().any(|f| match f {
            Frame::Text(text) | Frame::Reasoning(text) | Frame::Refusal(text) | Frame::Raw(text) => echoes(text),
            Frame::ToolCall { arguments, .. } => echoes(arguments),
            Frame::Filler(_) | Frame::KeepAlive | Frame::DelayMs(_) => false,
        })
}

/// The model id the server reports.
const MODEL_ID: &str = "fake-model";

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

fn reply(state: Arc<State>, meta: Meta, response: Response) -> Reply {
    let status = response.status.unwrap_or(200);
    let body = match (&response.body, response.status) {
        (Some(text), _) => full(text.clone()),
        (None, Some(_)) => full(""),
        (None, None) if meta.whole && response.recorded.is_none() => {
            return json_reply(StatusCode::OK, &completion_json(&meta, &response));
        }
        (None, None) => {
            let (sender, frames) = mpsc::channel(FRAME_QUEUE_LEN);
            tokio::spawn(generate(state, meta, response.clone(), sender));
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

/// What every chunk of one response carries, as real providers send it.
#[derive(Debug, Clone)]
struct Meta {
    /// Request number (the chunk id).
    n: usize,
    /// Seconds since the epoch when the response started (the server's clock).
    created: u64,
    /// The model the request named.
    model: String,
    /// The request asked `stream: false`: answer one `chat.completion` object.
    whole: bool,
    /// The request asked `stream_options.include_usage`.
    include_usage: bool,
}

impl Meta {
    /// The model a request body names (clipped; the server's own id when it names none).
    #[cfg(test)]
    fn for_request(n: usize, created: u64, body: &str) -> Meta {
        Meta::of(n, created, &RequestHead::parse(body))
    }

    /// The meta of request `n`, from its head.
    fn of(n: usize, created: u64, request: &RequestHead) -> Meta {
        let named = request.model.as_ref().and_then(serde_json::Value::as_str);
        let named = named.map(|m| m.chars().take(MODEL_NAME_CHARS_MAX).collect::<String>());
        let whole = request.stream == Some(json!(false));
        let include_usage = request.stream_options.as_ref().is_some_and(|o| o["include_usage"] == json!(true));
        Meta { n, created, model: named.unwrap_or_else(|| MODEL_ID.to_owned()), whole, include_usage }
    }
}

/// The fields of a chat request the server answers by; message text and everything else is
/// skipped unread (a resumed conversation's body runs to hundreds of KiB).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct RequestHead {
    /// The conversation's shape (`None`: absent, or not a list of message objects).
    messages: Option<Vec<MessageHead>>,
    model: Option<serde_json::Value>,
    stream: Option<serde_json::Value>,
    stream_options: Option<serde_json::Value>,
}

/// What the server checks of one message: who says it and which tool calls it makes or
/// answers.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct MessageHead {
    role: Option<String>,
    tool_call_id: Option<String>,
    tool_calls: Option<Vec<CallHead>>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct CallHead {
    id: Option<String>,
}

impl RequestHead {
    /// `body`'s head; a body whose messages are not message objects is read again without
    /// them (its model and stream flags still count), and anything that is not JSON has none.
    fn parse(body: &str) -> RequestHead {
        #[derive(serde::Deserialize)]
        struct WithoutMessages {
            #[serde(default)]
            model: Option<serde_json::Value>,
            #[serde(default)]
            stream: Option<serde_json::Value>,
            #[serde(default)]
            stream_options: Option<serde_json::Value>,
        }
        serde_json::from_str::<RequestHead>(body).unwrap_or_else(|_| {
            serde_json::from_str::<WithoutMessages>(body).map_or_else(
                |_| RequestHead::default(),
                |w| RequestHead { messages: None, model: w.model, stream: w.stream, stream_options: w.stream_options },
            )
        })
    }

    /// Why the real APIs would refuse this conversation, in their words: every `tool` message
    /// answers a call of the assistant message before it (after that message's other
    /// answers), and every call is answered before the conversation goes on.
    fn conversation_problem(&self) -> Result<(), String> {
        let Some(messages) = &self.messages else { return Ok(()) };
        // The calls of the last assistant message that made some, not yet answered.
        let mut waiting: Vec<&str> = Vec::new();
        for message in messages {
            if message.role.as_deref() == Some("tool") {
                let answered = message.tool_call_id.as_deref().unwrap_or_default();
                let Some(at) = waiting.iter().position(|call| *call == answered) else {
                    return Err(format!(
                        "messages with role 'tool' must be a response to a preceding message with 'tool_calls' \
                         (no call {answered:?} is waiting for one)"
                    ));
                };
                waiting.remove(at);
                continue;
            }
            unanswered(&waiting)?;
            if message.role.as_deref() == Some("assistant") {
                waiting = message.tool_calls.iter().flatten().map(|c| c.id.as_deref().unwrap_or_default()).collect();
            }
        }
        unanswered(&waiting)
    }
}

/// The refusal of a conversation that goes on (or ends) with calls unanswered.
fn unanswered(waiting: &[&str]) -> Result<(), String> {
    if waiting.is_empty() {
        return Ok(());
    }
    Err(format!(
        "an assistant message with 'tool_calls' must be followed by tool messages responding to each \
         'tool_call_id' (not answered: {waiting:?})"
    ))
}

/// The `chat.completion` object a `stream: false` request gets: the frames' text, reasoning
/// and tool calls put together, the finish reason and the usage.
fn completion_json(meta: &Meta, response: &Response) -> serde_json::Value {
    let (mut content, mut reasoning, mut refusal) = (String::new(), String::new(), String::new());
    let mut calls: BTreeMap<u32, (Option<String>, Option<String>, String)> = BTreeMap::new();
    for frame in &response.frames {
        match frame {
            Frame::Text(text) => content.push_str(text),
            Frame::Filler(bytes) => content.push_str(&"x".repeat((*bytes).min(super::script::FILLER_BYTES_MAX))),
            Frame::Reasoning(text) => reasoning.push_str(text),
            Frame::Refusal(text) => refusal.push_str(text),
            Frame::ToolCall { index, id, name, arguments } => {
                let call = calls.entry(*index).or_default();
                call.0 = call.0.take().or_else(|| id.clone());
                call.1 = call.1.take().or_else(|| name.clone());
                call.2.push_str(arguments);
            }
            Frame::KeepAlive | Frame::Raw(_) | Frame::DelayMs(_) => {}
        }
    }
    let mut message = json!({"role": "assistant", "content": content});
    if !refusal.is_empty() {
        message["content"] = serde_json::Value::Null;
        message["refusal"] = json!(refusal);
    }
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning);
    }
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .into_values()
            .map(|(id, name, arguments)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}))
            .collect();
    }
    let usage = response.usage.map(usage_json);
    json!({
        "id": format!("chatcmpl-{}", meta.n),
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "system_fingerprint": "fp_faultline",
        "choices": [{"index": 0, "message": message, "finish_reason": response.finish}],
        "usage": usage,
    })
}

/// Longest model name echoed back, in characters.
const MODEL_NAME_CHARS_MAX: usize = 256;

/// The usage object of `[prompt, completion, total]`.
fn usage_json([prompt, completion, total]: [u64; 3]) -> serde_json::Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total})
}

/// One `chat.completion.chunk`. `usage` is set on the chunk that carries it; every other chunk
/// says `"usage": null` when the request asked for usage, as both providers do.
///
/// Written from a typed struct, not a `Value` tree built per frame; its keys are declared in
/// the order a `Value` object writes them (sorted), so the bytes are unchanged.
fn chunk_json(meta: &Meta, delta: serde_json::Value, finish: Option<&str>, usage: Option<serde_json::Value>) -> String {
    let chunk = ChunkJson {
        choices: [ChoiceJson { delta, finish_reason: finish, index: 0 }],
        created: meta.created,
        id: format!("chatcmpl-{}", meta.n),
        model: &meta.model,
        object: "chat.completion.chunk",
        system_fingerprint: "fp_faultline",
        usage: (usage.is_some() || meta.include_usage).then_some(usage),
    };
    serde_json::to_string(&chunk).expect("chunks serialise")
}

/// One `chat.completion.chunk`, keys in sorted order (as `serde_json::Value` writes them).
#[derive(Serialize)]
struct ChunkJson<'a> {
    choices: [ChoiceJson<'a>; 1],
    created: u64,
    id: String,
    model: &'a str,
    object: &'static str,
    system_fingerprint: &'static str,
    /// Absent unless the request asked for usage; then `null` on every chunk but the one
    /// that carries it.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<serde_json::Value>>,
}

#[derive(Serialize)]
struct ChoiceJson<'a> {
    delta: serde_json::Value,
    finish_reason: Option<&'a str>,
    index: u32,
}

fn event(data: &str) -> String {
    format!("data: {data}\n\n")
}

/// Produces the SSE bytes of `response`, honouring its faults.
/// The SSE event of one frame (`None` for a delay marker) and the delay it asks for.
/// The first content frame also carries `delta.role = "assistant"`, as the real APIs' first
/// chunk does.
fn frame_event(meta: &Meta, first: bool, frame: &Frame, dialect: Dialect) -> (Option<String>, u64) {
    let delta = |mut value: serde_json::Value| {
        if first {
            value["role"] = json!("assistant");
        }
        value
    };
    let comment = if first && dialect == Dialect::Openrouter { ": OPENROUTER PROCESSING\n\n" } else { "" };
    let data =
        |value: serde_json::Value| Some(format!("{comment}{}", event(&chunk_json(meta, delta(value), None, None))));
    match frame {
        Frame::Text(text) => (data(json!({"content": text})), 0),
        Frame::Filler(bytes) => {
            let text = "x".repeat((*bytes).min(super::script::FILLER_BYTES_MAX));
            (data(json!({"content": text})), 0)
        }
        Frame::Reasoning(text) => {
            let field = if dialect == Dialect::Openrouter { "reasoning" } else { "reasoning_content" };
            (data(json!({ field: text })), 0)
        }
        Frame::Refusal(text) => (data(json!({"content": null, "refusal": text})), 0),
        Frame::ToolCall { index, id, name, arguments } => {
            let mut call = json!({"function": {"arguments": arguments}});
            if dialect != Dialect::Mistral {
                call["index"] = json!(index);
            }
            if let Some(id) = id {
                call["id"] = json!(id);
                call["type"] = json!("function");
            }
            if let Some(name) = name {
                call["function"]["name"] = json!(name);
            }
            (data(json!({"tool_calls": [call]})), 0)
        }
        Frame::KeepAlive => (Some(format!("{comment}: keep-alive\n\n")), 0),
        Frame::Raw(raw) => (Some(format!("{comment}{}", event(raw))), 0),
        Frame::DelayMs(ms) => (None, *ms),
    }
}

/// The events after the frames: the finish chunk, usage, `[DONE]`.
fn tail_events(meta: &Meta, response: &Response) -> Vec<String> {
    let mut tail = Vec::new();
    let usage = response.usage.map(usage_json);
    if let Some(finish) = &response.finish {
        let in_finish = if response.usage_in_finish { usage.clone() } else { None };
        tail.push(event(&chunk_json(meta, json!({}), Some(finish), in_finish)));
    }
    // OpenRouter sends its usage after the finish chunk whether or not it was asked.
    let asked = meta.include_usage || response.dialect == Dialect::Openrouter;
    if let (Some(usage), false, true) = (usage, response.usage_in_finish, asked) {
        let chunk = json!({
            "id": format!("chatcmpl-{}", meta.n),
            "object": "chat.completion.chunk",
            "created": meta.created,
            "model": meta.model,
            "system_fingerprint": "fp_faultline",
            "choices": [],
            "usage": usage,
        });
        tail.push(event(&chunk.to_string()));
    }
    if response.done {
        tail.push(event("[DONE]"));
    }
    tail
}

/// The whole SSE body request `n` gets for `response`, ignoring delays and faults: what a
/// benchmark serves from memory so that the transport costs nothing measurable.
pub fn sse_body(n: usize, response: &Response) -> String {
    let meta = Meta { n, created: 0, model: MODEL_ID.to_owned(), whole: false, include_usage: true };
    let frames = response
        .frames
        .iter()
        .enumerate()
        .filter_map(|(i, frame)| frame_event(&meta, i == 0, frame, response.dialect).0);
    frames.chain(tail_events(&meta, response)).collect()
}

async fn generate(state: Arc<State>, meta: Meta, response: Response, sender: mpsc::Sender<Result<Bytes, io::Error>>) {
    if let Some(recorded) = response.recorded {
        // Byte for byte as the provider sent it.
        if !send(&response, recorded.body(), &sender).await {
            finish_abandoned(&state, &sender);
        }
        return;
    }
    // None = a DelayMs marker handled inline.
    let (events, delays): (Vec<Option<String>>, Vec<u64>) =
        response.frames.iter().enumerate().map(|(i, f)| frame_event(&meta, i == 0, f, response.dialect)).unzip();
    let tail = tail_events(&meta, &response);

    let mut sent_frames = 0;
    for (i, text) in events.into_iter().enumerate() {
        if !fault_point(&state, &response, sent_frames, &sender).await {
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
    if !fault_point(&state, &response, sent_frames, &sender).await {
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
        // Keep the stream open and silent until the client goes away.
        sender.closed().await;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What `chunk_json` wrote before it was typed: a `Value` tree, serialised.
    fn value_tree_chunk(
        meta: &Meta,
        delta: serde_json::Value,
        finish: Option<&str>,
        usage: Option<serde_json::Value>,
    ) -> String {
        let mut chunk = json!({
            "id": format!("chatcmpl-{}", meta.n),
            "object": "chat.completion.chunk",
            "created": meta.created,
            "model": meta.model,
            "system_fingerprint": "fp_faultline",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        if usage.is_some() || meta.include_usage {
            chunk["usage"] = usage.unwrap_or(serde_json::Value::Null);
        }
        chunk.to_string()
    }

    #[test]
    fn typed_chunk_is_the_value_trees_bytes() {
        for include_usage in [false, true] {
            let meta = Meta { n: 7, created: 1_700_000_000, model: "m \"x\"\n".into(), whole: false, include_usage };
            for finish in [None, Some("stop")] {
                for usage in [None, Some(usage_json([1, 2, 3]))] {
                    let delta = json!({"content": "hé\u{1}", "role": "assistant"});
                    assert_eq!(
                        chunk_json(&meta, delta.clone(), finish, usage.clone()),
                        value_tree_chunk(&meta, delta, finish, usage.clone()),
                        "usage asked {include_usage}, finish {finish:?}, usage {usage:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_conversation_is_refused_where_the_real_apis_refuse_it() {
        let problem = |messages: serde_json::Value| {
            RequestHead::parse(&json!({"model": "m", "messages": messages}).to_string()).conversation_problem()
        };
        let user = json!({"role": "user", "content": "hi"});
        let calls = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        ]});
        let answer = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "ok"});
        // Both calls answered, in any order, before the conversation goes on.
        assert_eq!(
            problem(json!([user, calls, answer("b"), answer("a"), {"role": "assistant", "content": "done"}, user])),
            Ok(())
        );
        assert_eq!(problem(json!([{"role": "system", "content": "s"}, user])), Ok(()));
        // A result with no call waiting for it: before any call, twice, or an unknown id.
        for messages in [
            json!([user, answer("a")]),
            json!([user, calls, answer("a"), answer("a"), answer("b")]),
            json!([user, calls, answer("c")]),
        ] {
            let refused = problem(messages.clone()).unwrap_err();
            assert!(
                refused.contains("must be a response to a preceding message with 'tool_calls'"),
                "{messages}: {refused}"
            );
        }
        // A call left unanswered when the conversation goes on, or ends.
        for messages in [json!([user, calls, answer("a"), user]), json!([user, calls, answer("b")])] {
            let refused = problem(messages.clone()).unwrap_err();
            assert!(
                refused.contains("must be followed by tool messages") && refused.contains('"'),
                "{messages}: {refused}"
            );
        }
        // Not a conversation the server can read: not refused for its shape (nor is anything
        // without messages).
        assert_eq!(RequestHead::parse(r#"{"messages": [1, 2]}"#).conversation_problem(), Ok(()));
        assert_eq!(RequestHead::parse("not json").conversation_problem(), Ok(()));
        assert_eq!(RequestHead::parse(r#"{"messages": [1], "model": "kept"}"#).model, Some(json!("kept")));
    }

    #[test]
    fn the_request_head_reads_model_stream_and_usage_and_nothing_else() {
        let meta = Meta::for_request(
            0,
            0,
            r#"{"messages":[{"role":"user","content":"x"}],"model":"deepseek-chat","stream":false,"stream_options":{"include_usage":true}}"#,
        );
        assert_eq!((meta.model.as_str(), meta.whole, meta.include_usage), ("deepseek-chat", true, true));
        // Not JSON, not an object, a model that is not a string, `stream` that is not `false`.
        for body in ["not json", "[1]", r#"{"model":7,"stream":"false","stream_options":{"include_usage":"yes"}}"#] {
            let meta = Meta::for_request(0, 0, body);
            assert_eq!((meta.model.as_str(), meta.whole, meta.include_usage), (MODEL_ID, false, false), "{body}");
        }
        let long = format!(r#"{{"model":"{}"}}"#, "é".repeat(MODEL_NAME_CHARS_MAX + 5));
        assert_eq!(Meta::for_request(0, 0, &long).model.chars().count(), MODEL_NAME_CHARS_MAX);
    }
}
