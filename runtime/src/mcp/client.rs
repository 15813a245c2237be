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
use crate::config::{McpServerConfig, McpTransportConfig};
use crate::seams::{Seams, SpawnRequest};
use crate::tool::{ToolHttp, TOOL_HTTP_TIMEOUT_MS_MAX};

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
    /// (the entry's `headers` and the values of its `headers_env`); `env_hidden` the variables
    /// a stdio server never gets.
    ///
    /// Every header value is registered as a secret here, before anything is sent
    /// (FAILURE-MCP-TOOLS): a literal `authorization = "Bearer …"` is as much a credential as
    /// one from the environment, and a server that echoes its request headers must not put
    /// it in the transcript. A value with an auth scheme (`Bearer T`, `Basic T`) registers its
    /// credential `T` too, since an echo may quote it bare.
    pub fn new(config: McpServerConfig, seams: Seams, headers: Vec<(String, String)>, env_hidden: Vec<String>) -> Self {
        if !crate::testing::bugs::planted("mcp-headers-unscrubbed") {
            for (_, value) in &headers {
                seams.secrets.register(value);
                if let Some((_scheme, credential)) = value.trim().split_once(' ') {
                    seams.secrets.register(credential.trim());
                }
            }
        }
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
            biased;
            () = cancel.cancelled() => return Called::Lost(Lost::NotSent("cancelled before it was sent".into())),
            connected = self.connected() => match connected {
                Ok(connection) => connection,
                Err(lost) => return Called::Lost(not_sent(lost)),
            },
        };
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let params = json!({"name": tool, "arguments": arguments, "_meta": {MCP_EXECUTION_ID_META: execution_id}});
        let request = jsonrpc::request(id, "tools/call", params);
        match call_on(connection.transport.as_ref(), &self.inner.seams.clock, (id, request), cancel, grace).await {
            Ok(answer) => Called::Answered(answer),
            Err(lost) => Called::Lost(lost),
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

/// Request `id` on `transport` until its answer, or until `cancel` (FAILURE-MCP-TOOLS). The
/// decision is taken the moment the cancel is seen: a request not yet started to leave is
/// dropped there and never sent (no `notifications/cancelled` for what the server never got);
/// one that may have left gets `notifications/cancelled`, and its answer is still awaited
/// within `grace` — a server that finishes anyway is heard.
async fn call_on(
    transport: &dyn Transport,
    clock: &Arc<dyn crate::seams::Clock>,
    (id, request): (u64, Value),
    cancel: &tokio_util::sync::CancellationToken,
    grace: Duration,
) -> Result<Answer, Lost> {
    let started = Arc::new(AtomicBool::new(false));
    let exchange = transport.exchange(id, request, started.clone());
    tokio::pin!(exchange);
    // The cancel is looked at first: once it fired, a request that has not started to leave
    // never does, however soon the way clears.
    tokio::select! {
        biased;
        () = cancel.cancelled() => {}
        outcome = &mut exchange => return outcome,
    }
    if !started.load(Ordering::SeqCst) {
        return Err(Lost::NotSent("cancelled before it was sent".into()));
    }
    let reason = "the caller stopped waiting (a deadline or an abort)";
    let notify = async {
        if started.load(Ordering::SeqCst) {
            let message = jsonrpc::notification("notifications/cancelled", json!({"requestId": id, "reason": reason}));
            let _ = transport.notify(message).await;
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        outcome = exchange => outcome,
        () = notify => unreachable!("pending never ends"),
        () = clock.sleep(grace) => Err(if started.load(Ordering::SeqCst) {
            Lost::MaybeArrived(format!(
                "the call's deadline or an abort stopped the wait, and the server did not answer within {} ms of \
                 the cancel: it may have acted",
                grace.as_millis()
            ))
        } else {
            Lost::NotSent("cancelled before it was sent".into())
        }),
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::seams::BoxFuture;

    /// A transport that records what it sent. With `left_at_once`, a request leaves the
    /// moment it is sent and its answer waits at `gate`; without, the request itself waits at
    /// `gate` before it may leave (a writer lock held by another message).
    #[derive(Default)]
    struct Gated {
        left_at_once: bool,
        gate: tokio::sync::Notify,
        sent: Mutex<Vec<Value>>,
    }

    impl Transport for Gated {
        fn exchange(&self, _id: u64, message: Value, started: Arc<AtomicBool>) -> BoxFuture<'_, Result<Answer, Lost>> {
            Box::pin(async move {
                if self.left_at_once {
                    started.store(true, Ordering::SeqCst);
                    self.sent.lock().unwrap().push(message);
                    self.gate.notified().await;
                } else {
                    self.gate.notified().await;
                    started.store(true, Ordering::SeqCst);
                    self.sent.lock().unwrap().push(message);
                }
                Ok(Ok(json!({"content": []})))
            })
        }

        fn notify(&self, message: Value) -> BoxFuture<'_, Result<(), Lost>> {
            self.sent.lock().unwrap().push(message);
            Box::pin(async { Ok(()) })
        }

        fn usable(&self) -> bool {
            true
        }
    }

    fn clock() -> Arc<dyn crate::seams::Clock> {
        Arc::new(crate::production::SystemClock::new())
    }

    /// A cancel that comes while the request still waits to be written decides there: the
    /// request is never sent, even though the way clears right after, and nothing is said of
    /// it to the server.
    #[tokio::test(start_paused = true)]
    async fn a_cancel_before_the_request_left_sends_nothing_even_when_the_way_clears() {
        let transport = Gated::default();
        let cancel = tokio_util::sync::CancellationToken::new();
        let (request, clock) = (jsonrpc::request(1, "tools/call", json!({})), clock());
        let call = call_on(&transport, &clock, (1, request), &cancel, Duration::from_millis(2_000));
        let later = async {
            clock.sleep(Duration::from_millis(10)).await;
            cancel.cancel();
            transport.gate.notify_one(); // the way clears right after the cancel
        };
        let (outcome, ()) = tokio::join!(call, later);
        assert!(matches!(outcome, Err(Lost::NotSent(_))), "{outcome:?}");
        assert!(
            transport.sent.lock().unwrap().is_empty(),
            "sent after the cancel: {:?}",
            transport.sent.lock().unwrap()
        );
    }

    /// A cancel after the request left sends `notifications/cancelled` for it, and an answer
    /// that comes within the grace is the call's result.
    #[tokio::test(start_paused = true)]
    async fn a_cancel_after_the_request_left_notifies_and_hears_a_late_answer() {
        let transport = Gated { left_at_once: true, ..Gated::default() };
        let cancel = tokio_util::sync::CancellationToken::new();
        let (request, clock) = (jsonrpc::request(7, "tools/call", json!({})), clock());
        let call = call_on(&transport, &clock, (7, request), &cancel, Duration::from_millis(2_000));
        let later = async {
            clock.sleep(Duration::from_millis(10)).await;
            cancel.cancel();
            clock.sleep(Duration::from_millis(500)).await;
            transport.gate.notify_one();
        };
        let (outcome, ()) = tokio::join!(call, later);
        assert_eq!(outcome, Ok(Ok(json!({"content": []}))));
        let sent = transport.sent.lock().unwrap();
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(
            (sent[1]["method"].as_str(), sent[1]["params"]["requestId"].as_u64()),
            (Some("notifications/cancelled"), Some(7))
        );
    }
}
