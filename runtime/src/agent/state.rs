//! The agent's state: its knobs, the outcome a turn reports, and what the handle, the driver
//! task and a running turn share.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{broadcast, watch, OnceCell};
use tokio_util::sync::CancellationToken;

use super::history::History;
use crate::event::{AbortCause, ErrorCode, Message, TurnEndReason};
use crate::llm::{Adapter, LiveProvider};
use crate::store::{WriteBehind, WriteBehindConfig};
use crate::tool::ToolSet;
use crate::{seams::Seams, Error};

/// Default per-turn step budget.
pub const MAX_STEPS_DEFAULT: u32 = 16;
/// Default number of tool calls run at once.
pub const TOOL_CONCURRENCY_DEFAULT: usize = 4;
/// Largest inbox, in messages: submitting more is refused, not buffered without bound.
pub const INBOX_MESSAGES_MAX: usize = 1024;

/// Agent knobs. Start from `AgentConfig::default()` and set fields (more may come).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AgentConfig {
    /// Steps per turn (retries inside a step do not count). Range 1..=1000.
    pub max_steps: u32,
    /// Tool calls run at once. Range 1..=64.
    pub tool_concurrency: usize,
    /// System prompt.
    pub system: Option<String>,
    /// Write-behind knobs of the session.
    pub write_behind: WriteBehindConfig,
    /// Largest answer one assistant message may carry, in bytes (JSON-escaped text); a larger
    /// one ends its attempt `RESPONSE_TOO_LARGE`. Range 1..=`store::ANSWER_BYTES_MAX` (the
    /// default): the record limit leaves no room above it.
    pub answer_bytes_max: usize,
    /// The environment's proxies (`production::proxy_env()`); default: none.
    pub proxy_env: crate::llm::ProxyEnv,
    /// The platform's trusted certificates (`production::platform_roots()`); default: none,
    /// so only the bundled roots and a route's `ca_file` are trusted.
    pub platform_roots: crate::llm::PlatformRoots,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            max_steps: MAX_STEPS_DEFAULT,
            tool_concurrency: TOOL_CONCURRENCY_DEFAULT,
            system: None,
            write_behind: WriteBehindConfig::default(),
            answer_bytes_max: crate::store::ANSWER_BYTES_MAX,
            proxy_env: crate::llm::ProxyEnv::default(),
            platform_roots: crate::llm::PlatformRoots::default(),
        }
    }
}

/// How a turn ended, for the embedder (the log has the full story).
///
/// An outcome is a promise about the disk (FAILURE-OUTCOME-DURABLE): it is reported only
/// after the turn's `turn/end` is durable. A turn whose records could not be made durable is
/// reported as an `Error` with code `PERSIST` carrying the storage error, `kept` is false, and
/// what the turn reached in memory (what a person may have been shown) is in `reached`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TurnOutcome {
    /// Turn number.
    pub turn: u32,
    /// Why it ended, as far as the disk knows: the turn's own reason when it is kept, else
    /// `Error { code: PERSIST }`.
    pub reason: TurnEndReason,
    /// Whether every record of the turn, its `turn/end` included, was durable when the
    /// outcome was reported.
    pub kept: bool,
    /// For a turn not kept: the end it reached in memory (its `turn/end` stays queued, and a
    /// later successful flush, such as disposal's, may still write it). `None` when the turn
    /// could not even be recorded to its end (the agent then refuses new input: dispose it and
    /// resume the session, which repairs the open turn).
    pub reached: Option<TurnEndReason>,
    /// The last assistant text.
    pub text: String,
    /// The last answer's refusal, when the model declined (OpenAI's `refusal`): shown to a
    /// person like text, never an empty response, never retried.
    pub refusal: Option<String>,
    /// Tool calls in commit order: name and error code (None = success).
    pub tool_calls: Vec<(String, Option<ErrorCode>)>,
    /// Tokens every attempt of the turn reported (failed attempts included: they were billed).
    pub usage: crate::event::Usage,
}

/// A turn paused for approval: its open step and the calls that wait.
#[derive(Debug, Clone)]
pub(crate) struct Paused {
    pub(crate) turn: u32,
    pub(crate) step: u32,
    pub(crate) calls: Vec<crate::approval::PendingApproval>,
}

#[derive(Debug, Default)]
pub(super) struct Driver {
    /// The turn paused for approval, if one is: no new turn starts until it ends.
    pub(super) paused: Option<Paused>,
    /// Continue the paused turn next (asked by `continue_turn`, or by a cancel).
    pub(super) continue_paused: bool,
    pub(super) inbox: VecDeque<Message>,
    pub(super) running: bool,
    pub(super) current: Option<CancellationToken>,
    /// A cancel came after a paused turn was asked to continue and before its drive took
    /// it: that turn starts cancelled.
    pub(super) cancel_next: bool,
    pub(super) cause: Option<AbortCause>,
    pub(super) disposed: bool,
    pub(super) last_outcome: Option<TurnOutcome>,
    /// Why the agent refuses new input: a turn could not be recorded to its end, so the log
    /// in memory is ahead of what any write can continue.
    pub(super) broken: Option<Arc<Error>>,
}

/// State shared by the agent handle and its driver task.
pub(crate) struct Shared {
    pub(super) seams: Seams,
    pub(super) session_id: String,
    /// The epoch (fencing token) this agent's writer holds the session at.
    pub(super) session_epoch: u64,
    pub(super) session: WriteBehind,
    pub(super) provider: Arc<LiveProvider>,
    pub(super) adapter: Adapter,
    /// Replaceable between requests (a reloaded config may change the tools).
    pub(super) tools: Mutex<ToolSet>,
    pub(super) config: AgentConfig,
    pub(super) driver: Mutex<Driver>,
    pub(super) history: tokio::sync::Mutex<History>,
    pub(super) idle: watch::Sender<bool>,
    pub(super) header_written: AtomicBool,
    pub(super) disposal: OnceCell<std::result::Result<(), Arc<Error>>>,
    pub(super) failures: broadcast::Sender<String>,
    /// Tokens the session's attempts reported, resumed records included.
    pub(super) usage: Mutex<crate::event::Usage>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, Driver> {
        self.driver.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn set_paused(&self, paused: Option<Paused>) {
        self.lock().paused = paused;
    }

    pub(super) fn abort_cause(&self) -> AbortCause {
        self.lock().cause.unwrap_or(AbortCause::User)
    }

    pub(super) fn header_written(&self) -> bool {
        self.header_written.load(Ordering::SeqCst)
    }

    pub(super) fn mark_header_written(&self) {
        self.header_written.store(true, Ordering::SeqCst);
    }

    /// The tools for the next request or call.
    pub(super) fn tools(&self) -> ToolSet {
        self.tools.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn report(&self, error: &Error) {
        let _ = self.failures.send(error.to_string());
    }
}
