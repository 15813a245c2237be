//! A simulated MCP server (FAILURE-MCP-TOOLS): one turmoil host speaking JSON-RPC both ways
//! the runtime does — streamable HTTP on port 80 (`POST /mcp`, sessions by
//! `Mcp-Session-Id`), and stdio as lines on port [`crate::seams::SIM_STDIO_PORT`], which is where the
//! simulated `Process::spawn` connects a stdio server's pipes. Every `tools/call` it acts on
//! is a [`ServiceReceipt`] (the oracle's evidence, as for services), with the execution id
//! taken from the request's `_meta`, as a real server would read it.
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
use faultline_runtime::seams::{Clock, EntropyExt, Listener};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use super::service::{Fate, ServiceReceipt, ServiceReceipts};

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

/// What a running server shares between its connections.
pub(crate) struct Running {
    pub service: McpService,
    pub faults: McpFaults,
    pub seed: u64,
    pub clock: Arc<dyn Clock>,
    pub stamp: super::stamp::Stamp,
    pub receipts: ServiceReceipts,
    pub heal_at_ms: u64,
    draw: crate::seams::SimEntropy,
    sessions: Mutex<BTreeSet<String>>,
    connections: AtomicU64,
}

impl Running {
    pub fn new(
        service: McpService,
        seed: u64,
        stamp: super::stamp::Stamp,
        receipts: ServiceReceipts,
        heal_at_ms: u64,
    ) -> Self {
        let faults = McpFaults::of(&service, seed);
        let draw = crate::seed::Seed::new(seed).fault(&format!("mcp/{}/calls", service.host));
        Self {
            service,
            faults,
            seed,
            clock: Arc::new(crate::seams::SimClock),
            stamp,
            receipts,
            heal_at_ms,
            draw,
            sessions: Mutex::default(),
            connections: AtomicU64::new(0),
        }
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
    running: Arc<Running>,
) -> std::io::Result<()> {
    let lines = tokio::spawn(serve_stdio(stdio, running.clone()));
    let result = serve_http(http, running).await;
    lines.abort();
    result
}

async fn serve_http(listener: Box<dyn Listener>, running: Arc<Running>) -> std::io::Result<()> {
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

async fn http_reply(
    running: &Running,
    connection: u64,
    request: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let session = request.headers().get(MCP_SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let Ok(body) = http_body_util::Limited::new(request.into_body(), MCP_MESSAGE_BYTES_MAX).collect().await else {
        return Ok(status(StatusCode::PAYLOAD_TOO_LARGE, ""));
    };
    let Ok(message) = serde_json::from_slice::<Value>(&body.to_bytes()) else {
        return Ok(status(StatusCode::BAD_REQUEST, "not JSON"));
    };
    let known = |s: &String| running.sessions.lock().unwrap_or_else(|p| p.into_inner()).contains(s);
    let is_init = message.get("method").and_then(Value::as_str) == Some("initialize");
    let session = match (session, is_init) {
        (Some(s), _) if !known(&s) => return Ok(status(StatusCode::NOT_FOUND, "session not found")),
        (None, false) => return Ok(status(StatusCode::BAD_REQUEST, "no session")),
        (session, _) => session,
    };
    match handle(running, &format!("http/{connection}"), &message, session.is_some()).await {
        Handled::Reply(reply) => {
            let mut response = status(StatusCode::OK, &reply.to_string());
            response.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
            if is_init {
                let id = format!("s{}", running.draw.hex_id(8));
                running.sessions.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone());
                if let Ok(value) = hyper::header::HeaderValue::from_str(&id) {
                    response.headers_mut().insert(MCP_SESSION_HEADER, value);
                }
            }
            Ok(response)
        }
        Handled::Nothing => Ok(status(StatusCode::ACCEPTED, "")),
        Handled::Expired => {
            if let Some(session) = &session {
                running.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(session);
            }
            Ok(status(StatusCode::NOT_FOUND, "session not found"))
        }
        Handled::Drop => Err(std::io::Error::other("the connection dropped after the effect")),
        Handled::Garble => Ok(status(StatusCode::OK, "{\"jsonrpc\": \"2.0\", \"id\":")),
        Handled::Hang => std::future::pending().await,
    }
}

fn status(code: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_owned())));
    *response.status_mut() = code;
    response
}

async fn serve_stdio(listener: Box<dyn Listener>, running: Arc<Running>) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let running = running.clone();
        let connection = running.connections.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(serve_lines(stream, running, connection));
    }
}

/// One stdio server process: messages in as lines, each handled on a task of its own; a call
/// that kills the process closes both pipes at once.
async fn serve_lines(stream: Box<dyn faultline_runtime::seams::ByteStream>, running: Arc<Running>, connection: u64) {
    let (read, write) = tokio::io::split(stream);
    let write = Arc::new(tokio::sync::Mutex::new(write));
    let mut reader = tokio::io::BufReader::new(read);
    let mut calls = tokio::task::JoinSet::new();
    let mut line = Vec::new();
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
        let (running, write) = (running.clone(), write.clone());
        calls.spawn(async move {
            let bytes = match handle(&running, &format!("stdio/{connection}"), &message, false).await {
                Handled::Reply(reply) => format!("{reply}\n"),
                Handled::Garble => "{\"jsonrpc\": \"2.0\", \"id\":\n".to_owned(),
                Handled::Nothing | Handled::Expired => return true,
                Handled::Drop => return false,
                Handled::Hang => std::future::pending().await,
            };
            write.lock().await.write_all(bytes.as_bytes()).await.is_ok()
        });
    }
    // Input closed: the process finishes what it started, then exits.
    while let Some(done) = calls.join_next().await {
        if !done.unwrap_or(false) {
            return;
        }
    }
}

/// One message, whichever transport carried it; `connection` names the transport's
/// connection (a call's mark).
async fn handle(running: &Running, connection: &str, message: &Value, has_session: bool) -> Handled {
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
        ("tools/call", Some(id)) => call(running, &format!("{connection}/{id}"), message, has_session, id).await,
        // Notifications, cancels included: never answered.
        (_, None) => Handled::Nothing,
        (_, Some(_)) => {
            Handled::Reply(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no such method"}}))
        }
    }
}

async fn call(running: &Running, mark: &str, message: &Value, has_session: bool, id: &Value) -> Handled {
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
    running.clock.sleep(Duration::from_millis(tool.latency_ms)).await;
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
    if faulty && draws[2] < running.faults.lost_reply_rate {
        mark_reply_lost(running, mark);
        return Handled::Drop;
    }
    if faulty && draws[3] < running.faults.malformed_rate {
        mark_reply_lost(running, mark);
        return Handled::Garble;
    }
    if faulty && draws[4] < running.faults.hang_rate {
        mark_reply_lost(running, mark);
        return Handled::Hang;
    }
    text_result(&format!("{} did {name} for {execution_id}", running.service.server), false)
}

fn record(running: &Running, tool: &McpServiceTool, execution_id: &str, mark: &str, fate: Fate, message: &Value) {
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
fn mark_reply_lost(running: &Running, mark: &str) {
    let mut receipts = running.receipts.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(last) = receipts.iter_mut().rev().find(|r| r.header(MCP_CALL_MARK) == Some(mark)) {
        if last.fate == Fate::Effect {
            last.fate = Fate::EffectReplyLost;
        }
    }
}
