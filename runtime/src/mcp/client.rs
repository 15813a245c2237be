//! One MCP server as the runtime holds it: a connection made on demand (spawned or dialled,
//! then `initialize`), its tools listed page by page, calls with the execution id in `_meta`,
//! cancels, pings. A connection that ended (a stdio server that exited, an HTTP session the
//! server forgot) is replaced before the next request — never by sending a call again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::http::Http;
use super::jsonrpc::{self, RpcError};
use super::listing::{self, ListedTool, RefusedTool};
use super::stdio::Stdio;
use super::transport::{Answer, Lost, Transport};
use crate::agent::{McpServerConfig, McpTransportConfig, ToolHttp, TOOL_HTTP_TIMEOUT_MS_MAX};
use crate::seams::{Seams, SpawnRequest};

/// Longest wait for a server to start, initialise and list its tools, in ms.
pub const MCP_CONNECT_TIMEOUT_MS: u64 = 30_000;
/// Most pages of `tools/list` read before the listing is refused as endless.
pub const MCP_LIST_PAGES_MAX: usize = 32;
/// The protocol version this client asks for; it also speaks the older ones listed in
/// [`MCP_PROTOCOL_VERSIONS`].
pub const MCP_PROTOCOL_VERSION: &str = "2025-06-18";
/// The versions this client speaks.
pub const MCP_PROTOCOL_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// How long a cancelled call's answer is still awaited after `notifications/cancelled`, in
/// ms: a server that finishes anyway is heard; one that never answers leaves the outcome
/// unknown.
pub const MCP_CANCEL_GRACE_MS: u64 = 2_000;
/// The `_meta` key carrying a call's execution id.
pub const MCP_EXECUTION_ID_META: &str = "faultline/execution_id";

/// A live connection.
struct Connection {
    transport: Box<dyn Transport>,
}

/// What a server call came to, before it becomes a tool result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Called {
    /// The server answered.
    Answered(Answer),
    /// No answer; the split says whether it may have acted.
    Lost(Lost),
}

/// An MCP server's handle: cheap to clone, one connection shared by every call.
#[derive(Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
}

struct Inner {
    config: McpServerConfig,
    seams: Seams,
    /// Resolved `headers` and `headers_env`.
    headers: Vec<(String, String)>,
    /// Variables a stdio server never gets.
    env_hidden: Vec<String>,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer").field("name", &self.inner.config.name).finish_non_exhaustive()
    }
}

impl McpServer {
    /// A server from its entry, not yet connected. `headers` are the HTTP headers to send
    /// (the entry's `headers` and the values of its `headers_env`, each registered as a
    /// secret by the caller); `env_hidden` the variables a stdio server never gets.
    pub fn new(config: McpServerConfig, seams: Seams, headers: Vec<(String, String)>, env_hidden: Vec<String>) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                seams,
                headers,
                env_hidden,
                connection: tokio::sync::Mutex::default(),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// The entry it was made from.
    pub fn config(&self) -> &McpServerConfig {
        &self.inner.config
    }

    /// Connects (if not connected) and lists the server's tools, page by page: those it may
    /// offer (by the entry's allow-list and the runtime's rules) and those it refused, with
    /// why.
    pub async fn list_tools(&self) -> crate::Result<(Vec<ListedTool>, Vec<RefusedTool>)> {
        let fail = |message: String| crate::Error::Mcp { server: self.name().to_owned(), message };
        let listing = async {
            let connection = self.connected().await.map_err(|lost| fail(lost.to_string()))?;
            let mut pages = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                if pages.len() == MCP_LIST_PAGES_MAX {
                    return Err(fail(format!("tools/list went on past {MCP_LIST_PAGES_MAX} pages")));
                }
                let params = cursor.as_ref().map_or_else(|| json!({}), |c| json!({"cursor": c}));
                let page = self.request(&connection, "tools/list", params).await;
                let page = answered(page).map_err(fail)?;
                cursor = page.get("nextCursor").and_then(Value::as_str).map(str::to_owned);
                pages.push(page);
                if cursor.is_none() {
                    break;
                }
            }
            Ok(listing::read(&self.inner.config, &pages))
        };
        self.bounded(listing).await?
    }

    /// Asks the server whether it is there (`ping`).
    pub async fn ping(&self) -> crate::Result<()> {
        let fail = |message: String| crate::Error::Mcp { server: self.name().to_owned(), message };
        let pinged = async {
            let connection = self.connected().await.map_err(|lost| fail(lost.to_string()))?;
            answered(self.request(&connection, "ping", json!({})).await).map(|_| ()).map_err(fail)
        };
        self.bounded(pinged).await?
    }

    /// `future` within [`MCP_CONNECT_TIMEOUT_MS`].
    async fn bounded<T>(&self, future: impl std::future::Future<Output = T>) -> crate::Result<T> {
        tokio::select! {
            done = future => Ok(done),
            () = self.inner.seams.clock.sleep(Duration::from_millis(MCP_CONNECT_TIMEOUT_MS)) => Err(crate::Error::Mcp {
                server: self.name().to_owned(),
                message: format!("no answer within {MCP_CONNECT_TIMEOUT_MS} ms"),
            }),
        }
    }

    /// Calls tool `tool` (its name on the server) once. `cancel`, once fired, sends
    /// `notifications/cancelled` and keeps waiting at most `grace` for the answer.
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: Value,
        execution_id: &str,
        cancel: &tokio_util::sync::CancellationToken,
        grace: Duration,
    ) -> Called {
        if cancel.is_cancelled() {
            return Called::Lost(Lost::NotSent("cancelled before it was sent".into()));
        }
        let connection = tokio::select! {
            connected = self.connected() => match connected {
                Ok(connection) => connection,
                Err(lost) => return Called::Lost(not_sent(lost)),
            },
            () = cancel.cancelled() => return Called::Lost(Lost::NotSent("cancelled before it was sent".into())),
        };
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let params = json!({"name": tool, "arguments": arguments, "_meta": {MCP_EXECUTION_ID_META: execution_id}});
        let started = Arc::new(AtomicBool::new(false));
        let exchange = connection.transport.exchange(id, jsonrpc::request(id, "tools/call", params), started.clone());
        tokio::pin!(exchange);
        let outcome = tokio::select! {
            outcome = &mut exchange => outcome,
            () = cancel.cancelled() => self.cancelled(&connection, id, exchange, &started, grace).await,
        };
        match outcome {
            Ok(answer) => Called::Answered(answer),
            Err(lost) => Called::Lost(lost),
        }
    }

    /// After a cancel: `notifications/cancelled` sent, and the answer awaited, both within
    /// one `grace` (a server that reads nothing cannot hold the cancel longer). A request
    /// that never started to leave was not sent.
    async fn cancelled(
        &self,
        connection: &Connection,
        id: u64,
        exchange: std::pin::Pin<&mut impl std::future::Future<Output = Result<Answer, Lost>>>,
        started: &AtomicBool,
        grace: Duration,
    ) -> Result<Answer, Lost> {
        let reason = "the caller stopped waiting (a deadline or an abort)";
        let notify = async {
            if started.load(Ordering::SeqCst) {
                let message =
                    jsonrpc::notification("notifications/cancelled", json!({"requestId": id, "reason": reason}));
                let _ = connection.transport.notify(message).await;
            }
            std::future::pending::<()>().await;
        };
        tokio::select! {
            outcome = exchange => outcome,
            () = notify => unreachable!("pending never ends"),
            () = self.inner.seams.clock.sleep(grace) => Err(if started.load(Ordering::SeqCst) {
                Lost::MaybeArrived(format!(
                    "cancelled; the server did not answer within {} ms of the cancel",
                    grace.as_millis()
                ))
            } else {
                Lost::NotSent("cancelled before it was sent".into())
            }),
        }
    }

    async fn request(&self, connection: &Connection, method: &str, params: Value) -> Result<Answer, Lost> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let started = Arc::new(AtomicBool::new(false));
        connection.transport.exchange(id, jsonrpc::request(id, method, params), started).await
    }

    /// The live connection, made (and initialised) if there is none or the last one ended.
    async fn connected(&self) -> Result<Arc<Connection>, Lost> {
        let mut slot = self.inner.connection.lock().await;
        if let Some(connection) = slot.as_ref().filter(|c| c.transport.usable()) {
            return Ok(connection.clone());
        }
        *slot = None;
        let limit = Duration::from_millis(MCP_CONNECT_TIMEOUT_MS);
        let connection = tokio::select! {
            made = self.initialised() => made?,
            () = self.inner.seams.clock.sleep(limit) => {
                return Err(Lost::NotSent(format!("no answer to initialize within {MCP_CONNECT_TIMEOUT_MS} ms")));
            }
        };
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// A new connection, initialised.
    async fn initialised(&self) -> Result<Arc<Connection>, Lost> {
        let connection = Arc::new(Connection { transport: self.open()? });
        let init = json!({
            "protocolVersion": MCP_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "faultline", "version": env!("CARGO_PKG_VERSION")},
        });
        let result = answered(self.request(&connection, "initialize", init).await).map_err(Lost::NotSent)?;
        let version = result.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
        if !MCP_PROTOCOL_VERSIONS.contains(&version) {
            let shown: String = version.chars().take(32).collect();
            return Err(Lost::NotSent(format!(
                "the server speaks protocol version {shown:?}; this client speaks {}",
                MCP_PROTOCOL_VERSIONS.join(", ")
            )));
        }
        connection.transport.agreed(version);
        connection.transport.notify(jsonrpc::notification("notifications/initialized", json!({}))).await?;
        Ok(connection)
    }

    fn open(&self) -> Result<Box<dyn Transport>, Lost> {
        let config = &self.inner.config;
        match config.transport() {
            McpTransportConfig::Stdio { program, args } => {
                let request = SpawnRequest {
                    program: program.clone(),
                    args,
                    env_hidden: self.inner.env_hidden.clone(),
                    env_added: config.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                };
                let child = self
                    .inner
                    .seams
                    .process
                    .spawn(&request)
                    .map_err(|e| Lost::NotSent(format!("could not start {program:?}: {e}")))?;
                Ok(Box::new(Stdio::new(child)))
            }
            McpTransportConfig::Http { url } => {
                // An exchange lasts at most the call's deadline and the cancel's grace; with
                // no deadline, the longest `ToolHttp` allows.
                let timeout_ms = config
                    .timeout_ms
                    .map_or(TOOL_HTTP_TIMEOUT_MS_MAX, |ms| ms.saturating_add(MCP_CANCEL_GRACE_MS))
                    .min(TOOL_HTTP_TIMEOUT_MS_MAX);
                let client = ToolHttp::new(&self.inner.seams);
                Ok(Box::new(Http::new(client, &url, self.inner.headers.clone(), Duration::from_millis(timeout_ms))))
            }
        }
    }
}

/// A connection that could not be made: nothing of the call was sent.
fn not_sent(lost: Lost) -> Lost {
    match lost {
        Lost::NotSent(why) | Lost::Refused(why) | Lost::MaybeArrived(why) => {
            Lost::NotSent(format!("could not connect: {why}"))
        }
        Lost::SessionExpired => Lost::NotSent("could not connect: the session expired while initialising".into()),
    }
}

/// The result of an exchange that must have one (`initialize`, `tools/list`, `ping`).
fn answered(outcome: Result<Answer, Lost>) -> Result<Value, String> {
    match outcome {
        Ok(Ok(result)) => Ok(result),
        Ok(Err(RpcError { code, message })) => Err(format!("the server answered error {code}: {message}")),
        Err(lost) => Err(lost.to_string()),
    }
}
