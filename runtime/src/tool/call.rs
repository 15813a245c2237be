//! Tools and the cooperative timeout (FAILURE-TOOL-TIMEOUT).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::event::{ContentBlock, ErrorCode, ToolError, ToolSchema};
use crate::seams::{BoxFuture, Clock};

/// Longest accepted tool timeout (a command's, an MCP server's): one hour.
pub const TOOL_TIMEOUT_MS_MAX: u64 = 3_600_000;

/// Longest tool output kept, in bytes: a result goes to the model and into the log.
pub const TOOL_OUTPUT_BYTES_MAX: usize = 256 * 1024;

// A truncated tool output, escaped at the worst rate (`\u00XX` per byte), still fits a record.
const _: () =
    assert!(TOOL_OUTPUT_BYTES_MAX * 6 + crate::store::RECORD_ENVELOPE_BYTES_MAX <= crate::store::RECORD_LINE_BYTES_MAX);

/// One call of a tool, as the tool sees it.
#[derive(Debug, Clone)]
pub struct ToolInvocation {
    /// Session id.
    pub session: String,
    /// Turn.
    pub turn: u32,
    /// Step.
    pub step: u32,
    /// The model's call id.
    pub call_id: String,
    /// Parsed arguments (always a JSON object).
    pub arguments: serde_json::Value,
    /// Stable id of this effect: derived from (session, turn, step, call id), so a resumed or
    /// duplicated call can never be mistaken for a new one (delivery-queue key).
    pub execution_id: String,
    /// The epoch (fencing token) of the session's writer that dispatched the call: a queue
    /// that keeps epochs refuses its effect once the session was taken over (`outbox/fence.rs`).
    pub session_epoch: u64,
}

/// What a tool returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolOutput {
    /// Success: the text the model sees.
    Ok(String),
    /// The tool ran and failed; the model sees the message.
    Failed(String),
    /// The tool stopped because its signal fired, **before it acted**: nothing took effect.
    /// A tool stopped after its effect may have begun returns [`ToolOutput::Unknown`].
    Aborted(String),
    /// The effect may or may not have happened (a lost receipt): the model must verify before
    /// retrying anything with side effects.
    Unknown(String),
}

/// A tool the model can call.
///
/// Contract: `call` receives a cancellation token merged from the caller's abort and the
/// tool's own deadline. A cooperative tool watches it and returns promptly: its answer if it
/// has one, [`ToolOutput::Aborted`] only if nothing took effect, [`ToolOutput::Unknown`] if
/// something may have. The runtime always awaits the returned future to completion, because
/// an abandoned future may still be performing its side effect, and keeps what it returns.
pub trait Tool: Send + Sync {
    /// The schema advertised to the model.
    fn schema(&self) -> ToolSchema;

    /// The tool's own deadline, if it declares one.
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// Whether each call waits for a person's decision first (FAILURE-APPROVAL); wrap a tool
    /// in [`crate::approval::NeedsApproval`] to say so.
    fn approval(&self) -> Option<crate::approval::ApprovalPolicy> {
        None
    }

    /// Runs the tool.
    fn call(&self, invocation: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'static, ToolOutput>;
}

/// The tools of an agent, by name (ordered, so schemas are advertised deterministically).
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl std::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolSet {
    /// No tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool (replacing one of the same name).
    pub fn with(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.insert(tool.schema().name, tool);
        self
    }

    /// Looks a tool up.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Schemas in name order.
    pub fn schemas(&self) -> Vec<ToolSchema> {
        self.tools.values().map(|t| t.schema()).collect()
    }
}

/// The outcome of one call, ready to become a `tool/result`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOutcome {
    /// What the model sees.
    pub content: Vec<ContentBlock>,
    /// Error code and name for error results.
    pub error: Option<ToolError>,
}

impl CallOutcome {
    /// A successful result.
    pub fn ok(text: String) -> Self {
        Self { content: vec![ContentBlock::text(truncate(text))], error: None }
    }

    /// An error result.
    pub fn error(code: ErrorCode, name: &str, text: impl Into<String>) -> Self {
        Self {
            content: vec![ContentBlock::text(truncate(text.into()))],
            error: Some(ToolError { name: name.to_owned(), code }),
        }
    }

    /// The call never started because the turn was aborted first.
    pub fn aborted_before_dispatch() -> Self {
        Self::error(
            ErrorCode::AbortedBeforeDispatch,
            "aborted_before_dispatch",
            "The turn was cancelled before this tool call started; it did not run.",
        )
    }

    fn from_output(output: ToolOutput) -> Self {
        match output {
            ToolOutput::Ok(text) => Self::ok(text),
            ToolOutput::Failed(text) => Self::error(ErrorCode::ToolFailed, "failed", text),
            ToolOutput::Aborted(text) => Self::error(ErrorCode::Aborted, "aborted", text),
            ToolOutput::Unknown(text) => Self::error(ErrorCode::ToolOutcomeUnknown, "outcome_unknown", text),
        }
    }
}

fn truncate(text: String) -> String {
    cut_marked(text, TOOL_OUTPUT_BYTES_MAX, "\n[output truncated]")
}

/// `text` cut to at most `bytes_max` bytes at a character boundary, with `marker` after the
/// cut (so a reader sees that it was cut); unchanged when it fits.
pub(crate) fn cut_marked(mut text: String, bytes_max: usize, marker: &str) -> String {
    if text.len() > bytes_max {
        let mut end = bytes_max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(marker);
    }
    text
}

/// Runs `tool` under its cooperative deadline: the caller's `cancel` and the deadline are
/// merged into the signal the tool sees; the tool is **always awaited**, and what it returns
/// is the call's result (FAILURE-TOOL-TIMEOUT, FAILURE-MCP-TOOLS): an answer that arrives after
/// the deadline is kept, an outcome the tool cannot vouch for stays `TOOL_OUTCOME_UNKNOWN`, and
/// only a tool that stopped before acting ([`ToolOutput::Aborted`]) after the deadline fired
/// first reads `TOOL_TIMEOUT`. A result that may have acted never reads as not having acted.
/// A panic in the tool becomes a `TOOL_FAILED` result, never a crash of the turn.
pub async fn run_with_deadline(
    tool: Arc<dyn Tool>,
    invocation: ToolInvocation,
    cancel: &CancellationToken,
    clock: &Arc<dyn Clock>,
) -> CallOutcome {
    let merged = cancel.child_token();
    let deadline = tool.timeout();
    // The execution id rides on the task, so the runtime's `ToolHttp` stamps every request the
    // call makes with it, whatever the tool itself remembers to send.
    let execution_id = invocation.execution_id.clone();
    let trace = crate::telemetry::trace_fields(&tracing::Span::current());
    let call = super::http::with_execution(&execution_id, trace, tool.call(invocation, merged.clone()));
    let mut body = tokio::spawn(call);
    let mut deadline_won = false;
    let joined = match deadline {
        None => (&mut body).await,
        Some(limit) => {
            tokio::select! {
                joined = &mut body => joined,
                () = clock.sleep(limit) => {
                    // Whoever fired first decides how the result reads.
                    deadline_won = !cancel.is_cancelled();
                    merged.cancel();
                    // Never abandon a running future: wait for the tool's own cleanup.
                    body.await
                }
            }
        }
    };
    match joined {
        // The tool's own word on what its deadline stopped: only a tool that says it stopped
        // before acting reads as timed out; an answer that came anyway is the call's result.
        // Planted: the deadline's word over the tool's: whatever came back reads "did not finish".
        Ok(_) if deadline_won && crate::testing::bugs::planted("timeout-hides-answer") => {
            let limit = deadline.unwrap_or_default().as_millis();
            CallOutcome::error(ErrorCode::ToolTimeout, "timeout", format!("the tool did not finish within {limit} ms"))
        }
        Ok(ToolOutput::Aborted(text)) if deadline_won => {
            let limit = deadline.unwrap_or_default().as_millis();
            CallOutcome::error(
                ErrorCode::ToolTimeout,
                "timeout",
                format!("the tool was stopped at its {limit} ms deadline before it acted: {text}"),
            )
        }
        Ok(output) => CallOutcome::from_output(output),
        Err(e) if e.is_panic() => CallOutcome::error(ErrorCode::ToolFailed, "panicked", "the tool panicked"),
        Err(_) => CallOutcome::error(ErrorCode::ToolFailed, "failed", "the tool's task was cancelled"),
    }
}
