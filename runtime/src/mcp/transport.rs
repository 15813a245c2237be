//! What both MCP transports offer the session, and the one classification every exchange
//! ends in: whether the server may have acted on what was sent.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use serde_json::Value;

use super::jsonrpc::RpcError;
use crate::seams::BoxFuture;

/// Why an exchange produced no response. The split is the one a tool call's result hangs
/// on: only [`Lost::MaybeArrived`] leaves the outcome unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lost {
    /// Nothing reached the server (no connection, no process, a write that failed before the
    /// whole message left): it did not act.
    NotSent(String),
    /// The server refused the message as a whole (an HTTP 4xx before any JSON-RPC): it did
    /// not act.
    Refused(String),
    /// The server does not know our session any more (HTTP 404): it did not act, and the
    /// session must be initialised again before the next request.
    SessionExpired,
    /// The message may have been read and acted on, and no answer came: the connection or
    /// the process ended, the reply was malformed or too large, or it never came in time.
    MaybeArrived(String),
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::NotSent(why) => write!(f, "not sent: {why}"),
            Lost::Refused(why) => write!(f, "refused: {why}"),
            Lost::SessionExpired => f.write_str("the server no longer knows this session (HTTP 404)"),
            Lost::MaybeArrived(why) => write!(f, "no answer: {why}"),
        }
    }
}

/// A response: the server's result or its JSON-RPC error.
pub(crate) type Answer = Result<Value, RpcError>;

/// One connection to an MCP server.
pub(crate) trait Transport: Send + Sync {
    /// Sends request `message` (whose id is `id`) and waits for its response. `started` is
    /// set the moment any byte of it may leave: a caller that stops waiting before then
    /// knows nothing was sent.
    fn exchange(&self, id: u64, message: Value, started: Arc<AtomicBool>) -> BoxFuture<'_, Result<Answer, Lost>>;

    /// Sends a notification; `Ok` once it left (nothing answers a notification).
    fn notify(&self, message: Value) -> BoxFuture<'_, Result<(), Lost>>;

    /// Whether this connection can still carry messages (a stdio server that exited, or an
    /// HTTP session the server forgot, cannot).
    fn usable(&self) -> bool;

    /// Records the protocol version the server agreed to (sent on later HTTP requests).
    fn agreed(&self, _protocol_version: &str) {}
}
