//! A simulated MCP server (FAILURE-MCP-TOOLS): one turmoil host speaking JSON-RPC both ways
//! the runtime does — streamable HTTP on port 80 (`POST /mcp`, sessions by
//! `Mcp-Session-Id`), and stdio as lines on port [`crate::seams::SIM_STDIO_PORT`], which is where the
//! simulated `Process::spawn` connects a stdio server's pipes. Every `tools/call` it acts on
//! is a [`ServiceReceipt`] (the oracle's evidence, as for services), with the execution id
//! taken from the request's `_meta`, as a real server would read it.
//!
//! How it answers is drawn per call from the seed, as the MCP specification and its official
//! SDKs' servers answer (sim/catalog/mcp.toml): one JSON body, or an SSE stream — closed after
//! the response, with notifications or a `ping` request of its own first, left open after the
//! response, or closed after a priming event so that the client resumes it with a GET and
//! `Last-Event-ID` (protocol 2025-11-25); an answer late past the call's deadline but within
//! its cancel's grace; an answer that quotes the request's headers back; long session ids; a
//! forgotten session said with 404 or, as the SDKs' example servers do, 400. Every answer it
//! gives is written down (`McpAnswer`): the oracle holds the call's result to it.
//!
//! Its faults, drawn per call from the seed's stream while the fault window is open: the
//! session forgotten (HTTP 404, nothing done), the tool failing before acting (`isError`),
//! the reply lost after the effect (the connection dropped), a malformed reply after the
//! effect, the server process killed mid-call (stdio: the pipes close), no reply at all
//! after the effect, cancel or not. A tool declared with `retries` and no dedup repeats its own effect when its
//! downstream reply is lost — the server's business, and the finding says which side
//! repeated.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use faultline_runtime::mcp::{MCP_EXECUTION_ID_META, MCP_MESSAGE_BYTES_MAX, MCP_SESSION_HEADER};
use faultline_runtime::seams::{Clock, Entropy, EntropyExt, Listener};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use super::service::{Fate, ServiceReceipt, ServiceReceipts};
use crate::model_server::ChannelBody;

/// The pseudo-header a receipt keeps the server's name in.
pub const MCP_SERVER_MARK: &str = "mcp-server";
/// The pseudo-header a receipt keeps the tool's name in.
pub const MCP_TOOL_MARK: &str = "mcp-tool";
/// The pseudo-header naming the one `tools/call` a receipt came from (connection and id):
/// two effects under one mark are the server's own repeat; under two, the client's.
pub const MCP_CALL_MARK: &str = "mcp-call";

/// A simulated MCP server, declared from an agent file's `[[mcp_servers]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct McpService {
    /// Its host (`mcp-NAME`).
    pub host: String,
    /// The server's name in the agent file.
    pub server: String,
    /// Its tools.
    pub tools: Vec<McpServiceTool>,
    /// Transport faults; `None`: drawn from the seed.
    pub faults: Option<McpFaults>,
    /// The client's deadline for a call (the entry's `timeout_ms`): a late answer is drawn
    /// past it, within the cancel's grace.
    pub timeout_ms: Option<u64>,
}

/// The `retry` a priming event asks for, in ms.
const PRIMING_RETRY_MS: u64 = 300;
/// Between keep-alive comments on a stream left open, in ms.
const KEPT_OPEN_KEEPALIVE_MS: u64 = 300;
/// Length of a long session id (a JWT's, past the 256 bytes clients used to allow), in bytes.
const LONG_SESSION_ID_BYTES: usize = 600;
/// How long past the call's deadline a late answer comes, in ms (within the 2 s cancel grace).
const LATE_ANSWER_PAST_DEADLINE_MS: u64 = 600;

/// How a streamable-HTTP server shapes its answer to one `tools/call`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// One JSON body.
    Json,
    /// An SSE stream: the response event, then the stream closes.
    Sse,
    /// Progress and log notifications first, then the response.
    NotificationsFirst,
    /// A `ping` request of the server's own first (the client answers it with a POST).
    PingFirst,
    /// The response, then the stream stays open, with keep-alive comments.
    KeptOpen,
    /// A priming event (`id`, `retry`), then the stream closes before the response, which
    /// waits for a GET with `Last-Event-ID`.
    PrimedThenClosed,
}

impl Shape {
    const ALL: [Shape; 6] = [
        Shape::Json,
        Shape::Sse,
        Shape::NotificationsFirst,
        Shape::PingFirst,
        Shape::KeptOpen,
        Shape::PrimedThenClosed,
    ];

    /// Its entry in the MCP catalog.
    fn entry(self) -> &'static str {
        match self {
            Shape::Json => "mcp.http.json-response",
            Shape::Sse => "mcp.http.sse-response",
            Shape::NotificationsFirst => "mcp.http.sse-notifications-before-response",
            Shape::PingFirst => "mcp.http.sse-ping-before-response",
            Shape::KeptOpen => "mcp.http.sse-left-open-after-response",
            Shape::PrimedThenClosed => "mcp.http.sse-closed-after-priming-then-resumed",
        }
    }
}

/// One tool of a simulated MCP server.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServiceTool {
    /// Its name on the server.
    pub name: String,
    /// It changes the world (each act is an effect).
    pub effect: bool,
    /// It deduplicates by the execution id in `_meta`.
    pub dedup: bool,
    /// Its own retries of a downstream step whose reply was lost.
    pub retries: u32,
    /// Time it takes, in ms.
    pub latency_ms: u64,
    /// Share of calls failing (`isError`) before any effect; `None`: drawn.
    pub failure_rate: Option<f64>,
    /// Share of acts whose downstream reply is lost (then it retries); `None`: drawn.
    pub timeout_rate: Option<f64>,
}

/// How often a simulated MCP server's transport fails, per call, while faults last.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct McpFaults {
    /// The session is forgotten before the call (HTTP 404; nothing done).
    pub expire_rate: f64,
    /// The effect happens and the connection drops before the reply.
    pub lost_reply_rate: f64,
    /// The effect happens and the reply is not JSON-RPC.
    pub malformed_rate: f64,
    /// The effect happens and no reply ever comes, cancel or not (the caller's deadline and
    /// its cancel's grace end the wait).
    pub hang_rate: f64,
}

impl McpService {
    /// Checks the declaration: a host name as services take, rates within 0..=1, a bounded
    /// latency, at least one tool.
    pub fn validate(&self) -> Result<(), String> {
        super::Service::new(&self.host).validate().map_err(|e| format!("MCP server {}: {e}", self.server))?;
        if self.tools.is_empty() {
            return Err(format!("MCP server {}: no tools", self.server));
        }
        let mut rates: Vec<(String, Option<f64>)> = Vec::new();
        if let Some(f) = self.faults {
            rates.extend([
                ("expire_rate".into(), Some(f.expire_rate)),
                ("lost_reply_rate".into(), Some(f.lost_reply_rate)),
                ("malformed_rate".into(), Some(f.malformed_rate)),
                ("hang_rate".into(), Some(f.hang_rate)),
            ]);
        }
        for tool in &self.tools {
            if tool.latency_ms > super::service::SERVICE_LATENCY_MS_MAX {
                return Err(format!("MCP server {}: tool {}: latency_ms too large", self.server, tool.name));
            }
            rates.push((format!("{}.failure_rate", tool.name), tool.failure_rate));
            rates.push((format!("{}.timeout_rate", tool.name), tool.timeout_rate));
        }
        match rates.into_iter().find(|(_, r)| r.is_some_and(|r| !(0.0..=1.0).contains(&r))) {
            Some((name, _)) => Err(format!("MCP server {}: {name} is outside 0..=1", self.server)),
            None => Ok(()),
        }
    }
}

impl McpFaults {
    /// The faults of `service` in the run of `seed`: its own, or drawn (each family on for
    /// about half the seeds, at 5–30 %).
    pub fn of(service: &McpService, seed: u64) -> McpFaults {
        if let Some(faults) = service.faults {
            return faults;
        }
        let draw = crate::seed::Seed::new(seed).fault(&format!("mcp/{}", service.host));
        let rate = || if draw.unit_f64() < 0.5 { 0.0 } else { 0.05 + 0.25 * draw.unit_f64() };
        McpFaults { expire_rate: rate(), lost_reply_rate: rate(), malformed_rate: rate(), hang_rate: rate() }
    }
}

/// What the server draws per call besides its faults, from a stream of its own (the fault
/// draws stay what they were): how it shapes the answer, and whether it answers late or
/// quotes the request's headers back.
struct Manner {
    shape: Shape,
    late: bool,
    echo_headers: bool,
    expired_as_400: bool,
}

/// A response held for a resumption: its stream's id and the event carrying it.
type Held = (String, String);

/// How the server answered one call: the evidence the call's result is held to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct McpAnswer {
    /// The call's execution id (from its `_meta`).
    pub execution_id: String,
    /// When the answer was written to an open connection (or, held for a resumption, when it
    /// was ready), in simulated ms.
    pub at_ms: u64,
    /// Held for a GET with `Last-Event-ID` after this many ms (`None`: written at once).
    pub held_for_resume_ms: Option<u64>,
    /// It was an answer the call must read as its result (not an error the server made up
    /// for a fault).
    pub is_answer: bool,
    /// The host it came from.
    pub host: String,
    /// The call's deadline (the entry's `timeout_ms`).
    pub timeout_ms: Option<u64>,
}

/// What the server writes down for the world: the evidence its caller cannot touch. The
/// host that runs it decides where it goes (the world's record), so the server never names
/// the world.
pub(crate) enum McpNote {
    /// It produced this catalog entry.
    Reached(String),
    /// It answered a call so.
    Answered(McpAnswer),
}

/// Where a running server's notes go.
pub(crate) type McpNotes = Arc<dyn Fn(McpNote) + Send + Sync>;

/// What a running server shares between its connections.
pub(crate) struct RunningMcp {
    pub service: McpService,
    pub faults: McpFaults,
    pub seed: u64,
    pub clock: Arc<dyn Clock>,
    pub stamp: super::stamp::Stamp,
    pub receipts: ServiceReceipts,
    pub heal_at_ms: u64,
    draw: crate::seams::SimEntropy,
    /// The draws of how it answers (shapes, lateness, echoes).
    manners: crate::seams::SimEntropy,
    sessions: Mutex<BTreeSet<String>>,
    connections: AtomicU64,
    /// Responses held for a GET with `Last-Event-ID`, by the event id that primed them.
    held: Mutex<std::collections::BTreeMap<String, Held>>,
    /// Its session ids are long (a JWT's length).
    long_session_ids: bool,
    /// Where it writes down its answers and the catalog entries it produced.
    notes: McpNotes,
}

impl RunningMcp {
    pub fn new(
        service: McpService,
        seed: u64,
        stamp: super::stamp::Stamp,
        (receipts, notes): (ServiceReceipts, McpNotes),
        heal_at_ms: u64,
    ) -> Self {
        let faults = McpFaults::of(&service, seed);
        let draw = crate::seed::Seed::new(seed).fault(&format!("mcp/{}/calls", service.host));
        let manners = crate::seed::Seed::new(seed).fault(&format!("mcp/{}/manners", service.host));
        let long_session_ids = manners.unit_f64() < 0.5;
        Self {
            service,
            faults,
            seed,
            clock: Arc::new(crate::seams::SimClock),
            stamp,
            receipts,
            heal_at_ms,
            draw,
            manners,
            sessions: Mutex::default(),
            connections: AtomicU64::new(0),
            held: Mutex::default(),
            long_session_ids,
            notes,
        }
    }

    /// The manner of the next call: every draw made, so one choice never shifts another.
    fn manner(&self) -> Manner {
        let shape = Shape::ALL[(self.manners.next_u64() % Shape::ALL.len() as u64) as usize];
        let late = self.manners.unit_f64() < 0.2 && self.service.timeout_ms.is_some();
        let echo_headers = self.manners.unit_f64() < 0.2;
        let expired_as_400 = self.manners.unit_f64() < 0.5;
        Manner { shape, late, echo_headers, expired_as_400 }
    }

    fn reached(&self, entry: &str) {
        (self.notes)(McpNote::Reached(entry.to_owned()));
    }

    fn now_ms(&self) -> u64 {
        self.clock.now().as_millis() as u64
    }

    /// Writes down an answer the call must read as its result.
    fn answered(&self, execution_id: &str, held_for_resume_ms: Option<u64>, is_answer: bool) {
        let answer = McpAnswer {
            execution_id: execution_id.to_owned(),
            at_ms: self.now_ms(),
            held_for_resume_ms,
            is_answer,
            host: self.service.host.clone(),
            timeout_ms: self.service.timeout_ms,
        };
        (self.notes)(McpNote::Answered(answer));
    }

    fn faulty(&self) -> bool {
        self.clock.now().as_millis() < u128::from(self.heal_at_ms)
    }
}

/// What the server does with one message.
enum Handled {
    /// Answer with this message.
    Reply(Value),
    /// Answer nothing (a notification, a cancel).
    Nothing,
    /// Act as if the session were unknown (HTTP 404).
    Expired,
    /// Drop the connection without a reply.
    Drop,
    /// Reply with bytes that are not JSON-RPC.
    Garble,
    /// Never reply.
    Hang,
}

/// Serves `running` until the host dies: HTTP on `http`, stdio lines on `stdio`.
pub(crate) async fn serve(
    http: Box<dyn Listener>,
    stdio: Box<dyn Listener>,
    running: Arc<RunningMcp>,
) -> std::io::Result<()> {
    let lines = tokio::spawn(serve_stdio(stdio, running.clone()));
    let result = serve_http(http, running).await;
    lines.abort();
    result
}

async fn serve_http(listener: Box<dyn Listener>, running: Arc<RunningMcp>) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let running = running.clone();
        let connection = running.connections.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                let running = running.clone();
                async move { http_reply(&running, connection, request).await }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

type Reply = Response<http_body_util::combinators::BoxBody<Bytes, std::io::Error>>;

fn boxed(bytes: impl Into<Bytes>) -> http_body_util::combinators::BoxBody<Bytes, std::io::Error> {
    Full::new(bytes.into()).map_err(|never: std::convert::Infallible| match never {}).boxed()
}

async fn http_reply(
    running: &Arc<RunningMcp>,
    connection: u64,
    request: Request<hyper::body::Incoming>,
) -> Result<Reply, std::io::Error> {
    let session = request.headers().get(MCP_SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    if request.method() == hyper::Method::GET {
        return Ok(resume(running, &headers));
    }
    let Ok(body) = http_body_util::Limited::new(request.into_body(), MCP_MESSAGE_BYTES_MAX).collect().await else {
        return Ok(status(StatusCode::PAYLOAD_TOO_LARGE, ""));
    };
    let Ok(message) = serde_json::from_slice::<Value>(&body.to_bytes()) else {
        return Ok(status(StatusCode::BAD_REQUEST, "not JSON"));
    };
    let known = |s: &String| running.sessions.lock().unwrap_or_else(|p| p.into_inner()).contains(s);
    let is_init = message.get("method").and_then(Value::as_str) == Some("initialize");
    let is_call = message.get("method").and_then(Value::as_str) == Some("tools/call");
    let manner = is_call.then(|| running.manner());
    let session = match (session, is_init) {
        (Some(s), _) if !known(&s) => return Ok(forgotten(running, manner.as_ref())),
        (None, false) => return Ok(status(StatusCode::BAD_REQUEST, "no session")),
        (session, _) => session,
    };
    let context = Context { connection: format!("http/{connection}"), has_session: session.is_some(), headers };
    match handle(running, &context, &message, manner.as_ref()).await {
        Handled::Reply(reply) => Ok(match (&manner, is_init) {
            (Some(manner), _) => shaped(running, manner.shape, &message, reply),
            (None, true) => initialized(running, &reply),
            (None, false) => json(&reply),
        }),
        Handled::Nothing => Ok(status(StatusCode::ACCEPTED, "")),
        Handled::Expired => {
            if let Some(session) = &session {
                running.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(session);
            }
            Ok(forgotten(running, manner.as_ref()))
        }
        Handled::Drop => Err(std::io::Error::other("the connection dropped after the effect")),
        Handled::Garble => Ok(status(StatusCode::OK, "{\"jsonrpc\": \"2.0\", \"id\":")),
        Handled::Hang => std::future::pending().await,
    }
}

/// What the server says of a session it does not know: 404, as the specification says, or
/// 400, as the official SDKs' example servers (and Python servers before 1.26) do.
fn forgotten(running: &RunningMcp, manner: Option<&Manner>) -> Reply {
    if manner.is_some_and(|m| m.expired_as_400) {
        running.reached("mcp.http.session-unknown-400");
        return status(StatusCode::BAD_REQUEST, "Bad Request: No valid session ID provided");
    }
    running.reached("mcp.http.session-unknown-404");
    status(StatusCode::NOT_FOUND, "session not found")
}

fn json(reply: &Value) -> Reply {
    let mut response = status(StatusCode::OK, &reply.to_string());
    response.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
    response
}

/// The answer to `initialize`, with a new session's id (a long one, for some seeds).
fn initialized(running: &RunningMcp, reply: &Value) -> Reply {
    let mut response = json(reply);
    let id = if running.long_session_ids {
        running.reached("mcp.http.long-session-id");
        format!("s{}", running.draw.hex_id(LONG_SESSION_ID_BYTES / 2))
    } else {
        format!("s{}", running.draw.hex_id(8))
    };
    running.sessions.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone());
    if let Ok(value) = hyper::header::HeaderValue::from_str(&id) {
        response.headers_mut().insert(MCP_SESSION_HEADER, value);
    }
    response
}

fn event_stream(body: http_body_util::combinators::BoxBody<Bytes, std::io::Error>) -> Reply {
    let mut response = Response::new(body);
    response.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("text/event-stream"));
    response
}

fn data(message: &Value) -> String {
    format!("event: message\ndata: {message}\n\n")
}

/// The answer to a `tools/call`, shaped as `shape` says, written down as the call's answer.
fn shaped(running: &Arc<RunningMcp>, shape: Shape, message: &Value, reply: Value) -> Reply {
    running.reached(shape.entry());
    let execution_id = execution_id_of(message);
    let is_answer = reply.get("result").is_some();
    let request_id = message.get("id").cloned().unwrap_or(Value::Null);
    match shape {
        Shape::Json => {
            running.answered(&execution_id, None, is_answer);
            json(&reply)
        }
        Shape::Sse => {
            running.answered(&execution_id, None, is_answer);
            event_stream(boxed(data(&reply)))
        }
        Shape::NotificationsFirst => {
            running.answered(&execution_id, None, is_answer);
            let progress = json!({"jsonrpc": "2.0", "method": "notifications/message",
                                  "params": {"level": "info", "data": "working on it"}});
            let log = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                             "params": {"progressToken": request_id, "progress": 1, "total": 2}});
            event_stream(boxed(format!("{}{}{}", data(&progress), data(&log), data(&reply))))
        }
        Shape::PingFirst => {
            running.answered(&execution_id, None, is_answer);
            let ping =
                json!({"jsonrpc": "2.0", "id": format!("srv-ping-{}", running.draw.hex_id(4)), "method": "ping"});
            event_stream(boxed(format!("{}{}", data(&ping), data(&reply))))
        }
        Shape::KeptOpen => {
            let (sender, frames) = tokio::sync::mpsc::channel(4);
            let (running, reply) = (running.clone(), reply);
            tokio::spawn(async move {
                if sender.send(Ok(Bytes::from(data(&reply)))).await.is_err() {
                    return;
                }
                running.answered(&execution_id, None, is_answer);
                // The stream stays open (the specification says SHOULD close, not MUST).
                loop {
                    tokio::select! {
                        () = sender.closed() => return,
                        () = running.clock.sleep(Duration::from_millis(KEPT_OPEN_KEEPALIVE_MS)) => {}
                    }
                    if sender.send(Ok(Bytes::from_static(b": keep-alive\n\n"))).await.is_err() {
                        return;
                    }
                }
            });
            event_stream(ChannelBody { frames }.boxed())
        }
        Shape::PrimedThenClosed => {
            let stream = format!("st{}", running.draw.hex_id(6));
            let primed = format!("{stream}-0");
            running.held.lock().unwrap_or_else(|p| p.into_inner()).insert(primed.clone(), (stream, data(&reply)));
            running.answered(&execution_id, Some(PRIMING_RETRY_MS), is_answer);
            // The priming event names the stream's position; the stream then closes.
            event_stream(boxed(format!("id: {primed}\nretry: {PRIMING_RETRY_MS}\ndata: \n\n")))
        }
    }
}

/// A GET: the rest of a closed stream after `Last-Event-ID` (the held response), or 405
/// (this server opens no stream of its own).
fn resume(running: &RunningMcp, headers: &[(String, String)]) -> Reply {
    let last = headers.iter().find(|(k, _)| k == "last-event-id").map(|(_, v)| v.as_str());
    let held = last.and_then(|id| running.held.lock().unwrap_or_else(|p| p.into_inner()).remove(id));
    let Some((stream, event)) = held else {
        return status(StatusCode::METHOD_NOT_ALLOWED, "");
    };
    running.reached("mcp.http.resumed-with-last-event-id");
    event_stream(boxed(format!("id: {stream}-1\n{event}")))
}

fn execution_id_of(message: &Value) -> String {
    message
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(MCP_EXECUTION_ID_META))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn status(code: StatusCode, text: &str) -> Reply {
    let mut response = Response::new(boxed(text.to_owned()));
    *response.status_mut() = code;
    response
}

async fn serve_stdio(listener: Box<dyn Listener>, running: Arc<RunningMcp>) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let running = running.clone();
        let connection = running.connections.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(serve_lines(stream, running, connection));
    }
}

/// One stdio server process: messages in as lines, each handled on a task of its own; a call
/// that kills the process closes both pipes at once.
async fn serve_lines(stream: Box<dyn faultline_runtime::seams::ByteStream>, running: Arc<RunningMcp>, connection: u64) {
    let (read, write) = tokio::io::split(stream);
    let write = Arc::new(tokio::sync::Mutex::new(write));
    let mut reader = tokio::io::BufReader::new(read);
    let mut calls = tokio::task::JoinSet::new();
    let mut line = Vec::new();
    // The client closed our input (it ended the connection, or killed us), or we wrote a line
    // that is no message (which ends the connection for a client that cannot attribute it):
    // whatever we write after that, nobody reads.
    let input_closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    loop {
        // A read interrupted by a finished call keeps what it read (`read_until` appends), so
        // the line is cleared only once it was handled.
        let limit = (MCP_MESSAGE_BYTES_MAX + 1) as u64;
        let mut limited = (&mut reader).take(limit);
        tokio::select! {
            read = limited.read_until(b'\n', &mut line) => match read {
                Ok(0) | Err(_) => break,
                Ok(_) if line.last() != Some(&b'\n') => break,
                Ok(_) => {}
            },
            Some(done) = calls.join_next() => {
                // The process died mid-call: returning drops both pipes (and the other calls).
                if !done.unwrap_or(false) {
                    return;
                }
                continue;
            }
        }
        let parsed = serde_json::from_slice::<Value>(&line);
        line.clear();
        let Ok(message) = parsed else { break };
        let (running, write, input_closed) = (running.clone(), write.clone(), input_closed.clone());
        let manner = (message.get("method").and_then(Value::as_str) == Some("tools/call")).then(|| running.manner());
        calls.spawn(async move {
            let context =
                Context { connection: format!("stdio/{connection}"), has_session: false, headers: Vec::new() };
            let (bytes, answer) = match handle(&running, &context, &message, manner.as_ref()).await {
                Handled::Reply(reply) => match &manner {
                    Some(manner) => (lines_before(&running, manner.shape, &message) + &format!("{reply}\n"), true),
                    None => (format!("{reply}\n"), false),
                },
                Handled::Garble => ("{\"jsonrpc\": \"2.0\", \"id\":\n".to_owned(), false),
                Handled::Nothing | Handled::Expired => return true,
                Handled::Drop => return false,
                Handled::Hang => std::future::pending().await,
            };
            let written = write.lock().await.write_all(bytes.as_bytes()).await.is_ok();
            if !answer && manner.is_some() {
                input_closed.store(true, Ordering::SeqCst);
            }
            if written && answer && !input_closed.load(Ordering::SeqCst) {
                running.answered(&execution_id_of(&message), None, true);
            }
            written
        });
    }
    // Input closed: the process finishes what it started, then exits.
    input_closed.store(true, Ordering::SeqCst);
    while let Some(done) = calls.join_next().await {
        if !done.unwrap_or(false) {
            return;
        }
    }
}

/// What a stdio server writes before its answer to a call: notifications, or a `ping` of its
/// own, as the manner drawn for the call says (nothing for the HTTP-only shapes).
fn lines_before(running: &RunningMcp, shape: Shape, message: &Value) -> String {
    let request_id = message.get("id").cloned().unwrap_or(Value::Null);
    match shape {
        Shape::NotificationsFirst => {
            running.reached("mcp.stdio.notifications-before-response");
            let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
                             "params": {"level": "info", "data": "working on it"}});
            let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                                  "params": {"progressToken": request_id, "progress": 1, "total": 2}});
            format!("{log}\n{progress}\n")
        }
        Shape::PingFirst => {
            running.reached("mcp.stdio.ping-before-response");
            let ping =
                json!({"jsonrpc": "2.0", "id": format!("srv-ping-{}", running.draw.hex_id(4)), "method": "ping"});
            format!("{ping}\n")
        }
        _ => {
            running.reached("mcp.stdio.line-response");
            String::new()
        }
    }
}

/// Where a message came from: its connection (a call's mark), whether it carried a session,
/// and the request's headers (HTTP).
struct Context {
    connection: String,
    has_session: bool,
    headers: Vec<(String, String)>,
}

/// One message, whichever transport carried it.
async fn handle(running: &RunningMcp, context: &Context, message: &Value, manner: Option<&Manner>) -> Handled {
    let id = message.get("id").cloned();
    let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
    let reply = |result: Value| Handled::Reply(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    match (method, &id) {
        ("initialize", Some(_)) => reply(json!({
            "protocolVersion": faultline_runtime::mcp::MCP_PROTOCOL_VERSION,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": running.service.host, "version": "sim"},
        })),
        ("ping", Some(_)) => reply(json!({})),
        ("tools/list", Some(_)) => reply(json!({"tools": running.service.tools.iter().map(|t| json!({
            "name": t.name,
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": !t.effect},
        })).collect::<Vec<_>>()})),
        ("tools/call", Some(id)) => call(running, context, message, manner, id).await,
        ("notifications/cancelled", None) => {
            running.reached("mcp.proto.cancelled-notification-received");
            Handled::Nothing
        }
        // Other notifications, and answers to the server's own requests: never answered.
        (_, None) => Handled::Nothing,
        (_, Some(_)) => {
            Handled::Reply(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no such method"}}))
        }
    }
}

async fn call(
    running: &RunningMcp,
    context: &Context,
    message: &Value,
    manner: Option<&Manner>,
    id: &Value,
) -> Handled {
    let (mark, has_session) = (&format!("{}/{id}", context.connection), context.has_session);
    let params = message.get("params").cloned().unwrap_or_default();
    let name = params.get("name").and_then(Value::as_str).unwrap_or_default();
    let execution_id = params
        .get("_meta")
        .and_then(|m| m.get(MCP_EXECUTION_ID_META))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let text_result = |text: &str, is_error: bool| {
        Handled::Reply(json!({"jsonrpc": "2.0", "id": id, "result": {
            "content": [{"type": "text", "text": text}], "isError": is_error,
        }}))
    };
    let Some(tool) = running.service.tools.iter().find(|t| t.name == name) else {
        return Handled::Reply(
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": format!("unknown tool {name}")}}),
        );
    };
    let late = manner.is_some_and(|m| m.late);
    let latency = match running.service.timeout_ms {
        // Past the call's deadline, within the cancel's grace: the answer must still be heard.
        Some(deadline) if late => deadline + LATE_ANSWER_PAST_DEADLINE_MS,
        _ => tool.latency_ms,
    };
    running.clock.sleep(Duration::from_millis(latency)).await;
    let faulty = running.faulty();
    // The fault draws are made for every call, so one rate does not shift another's stream.
    let draws: Vec<f64> = (0..5).map(|_| running.draw.unit_f64()).collect();
    let tool_faults = super::service::ServiceFaults::of(
        &super::service::Service::new(format!("{}-{}", running.service.host, tool.name)),
        running.seed,
    );
    let failure_rate = tool.failure_rate.unwrap_or(tool_faults.error_rate);
    let timeout_rate = tool.timeout_rate.unwrap_or(tool_faults.lost_reply_rate);
    if faulty && has_session && draws[0] < running.faults.expire_rate {
        return Handled::Expired;
    }
    if faulty && draws[1] < failure_rate {
        record(running, tool, &execution_id, mark, Fate::Refused, message);
        running.reached("mcp.proto.tool-result-is-error");
        return text_result("the tool failed before doing anything", true);
    }
    record(running, tool, &execution_id, mark, Fate::Effect, message);
    // Its downstream reply lost, the tool tries again: a new effect unless it deduplicates.
    for _ in 0..tool.retries {
        if !(faulty && running.draw.unit_f64() < timeout_rate) {
            break;
        }
        let fate = if tool.dedup { Fate::Deduplicated } else { Fate::Effect };
        record(running, tool, &execution_id, mark, fate, message);
    }
    if let Some(lost) = reply_lost(running, context, mark, (faulty, &draws)) {
        return lost;
    }
    if late {
        running.reached("mcp.proto.answer-within-cancel-grace");
    }
    let mut said = format!("{} did {name} for {execution_id}", running.service.server);
    // A careless server quotes the request's headers back (a debugging echo, a proxy's page).
    if manner.is_some_and(|m| m.echo_headers) && !context.headers.is_empty() {
        running.reached("mcp.http.answer-quotes-request-headers");
        let quoted: Vec<String> = context.headers.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        said.push_str(&format!(" (request headers: {})", quoted.join("; ")));
    }
    text_result(&said, false)
}

/// What happens to the reply of a call that acted, while the fault window is open: the
/// connection dropped (a stdio server exits), a reply that is no message, or none at all.
fn reply_lost(running: &RunningMcp, context: &Context, mark: &str, (faulty, draws): (bool, &[f64])) -> Option<Handled> {
    let stdio = context.connection.starts_with("stdio/");
    let (handled, entry) = if faulty && draws[2] < running.faults.lost_reply_rate {
        let entry = if stdio { "mcp.stdio.server-exits-mid-call" } else { "mcp.http.connection-drops-after-effect" };
        (Handled::Drop, entry)
    } else if faulty && draws[3] < running.faults.malformed_rate {
        (Handled::Garble, "mcp.proto.unreadable-reply-after-effect")
    } else if faulty && draws[4] < running.faults.hang_rate {
        (Handled::Hang, "mcp.proto.no-reply-after-effect")
    } else {
        return None;
    };
    mark_reply_lost(running, mark);
    running.reached(entry);
    Some(handled)
}

fn record(running: &RunningMcp, tool: &McpServiceTool, execution_id: &str, mark: &str, fate: Fate, message: &Value) {
    running.receipts.lock().unwrap_or_else(|p| p.into_inner()).push(ServiceReceipt {
        service: running.service.host.clone(),
        execution_id: execution_id.to_owned(),
        key: None,
        headers: vec![
            (MCP_SERVER_MARK.to_owned(), running.service.server.clone()),
            (MCP_TOOL_MARK.to_owned(), tool.name.clone()),
            (MCP_CALL_MARK.to_owned(), mark.to_owned()),
        ],
        body: message.to_string(),
        at_ms: running.clock.now().as_millis() as u64,
        stamp: (running.stamp)(),
        fate,
        read: !tool.effect,
    });
}

/// The last effect of call `mark` never got its reply out.
fn mark_reply_lost(running: &RunningMcp, mark: &str) {
    let mut receipts = running.receipts.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(last) = receipts.iter_mut().rev().find(|r| r.header(MCP_CALL_MARK) == Some(mark)) {
        if last.fate == Fate::Effect {
            last.fate = Fate::EffectReplyLost;
        }
    }
}
