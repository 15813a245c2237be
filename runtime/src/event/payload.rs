//! One payload struct per event type (the record's `data` object).

use serde::{Deserialize, Serialize};

use super::{Chunk, ContentBlock, ErrorCode, Failure, Message, Usage};

/// `turn/start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnStart {
    /// Turn number, 1-based and contiguous within a session.
    pub turn: u32,
}

/// Who asked for an abort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortCause {
    /// The embedder's user cancelled.
    User,
    /// A parent activity cancelled.
    Parent,
    /// The agent is being disposed.
    Disposed,
}

/// Why a turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TurnEndReason {
    /// The model finished and every tool result was committed.
    Completed,
    /// Cancelled.
    Aborted {
        /// Who cancelled.
        cause: AbortCause,
    },
    /// A failure the request loop could not recover from.
    Error {
        /// The failure.
        error: Failure,
    },
    /// The model hit its output token limit.
    MaxTokens,
    /// Written only by crash repair: the process died with this turn open.
    Interrupted,
    /// A turn budget ran out (FAILURE-TURN-BUDGETS). Retries inside a step never count as steps.
    BudgetExhausted {
        /// Which budget: `max_steps`.
        budget: String,
        /// Its limit.
        limit: u32,
        /// What was achieved and what is left undone, in words the user reads.
        summary: String,
    },
    /// Not an end: the turn is paused until a person decides on these calls
    /// (FAILURE-APPROVAL). An outcome says it; a `turn/end` never does (the validator refuses
    /// one that does).
    AwaitingApproval {
        /// The calls waiting, in the model's order.
        calls: Vec<String>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AbortedFields {
    cause: AbortCause,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ErrorFields {
    error: Failure,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AwaitingFields {
    calls: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetFields {
    budget: String,
    limit: u32,
    summary: String,
}

impl super::tagged::Tagged for TurnEndReason {
    const TAG: &'static str = "kind";
    const VARIANTS: &'static [&'static str] =
        &["completed", "aborted", "error", "max-tokens", "interrupted", "budget-exhausted", "awaiting-approval"];
    const NAME: &'static str = "TurnEndReason";

    fn variant<'de, D: serde::Deserializer<'de>>(tag: &str, rest: D) -> Result<Self, D::Error> {
        use super::tagged::NoFields;
        match tag {
            "completed" => NoFields::deserialize(rest).map(|_| TurnEndReason::Completed),
            "aborted" => AbortedFields::deserialize(rest).map(|f| TurnEndReason::Aborted { cause: f.cause }),
            "error" => ErrorFields::deserialize(rest).map(|f| TurnEndReason::Error { error: f.error }),
            "max-tokens" => NoFields::deserialize(rest).map(|_| TurnEndReason::MaxTokens),
            "interrupted" => NoFields::deserialize(rest).map(|_| TurnEndReason::Interrupted),
            "budget-exhausted" => BudgetFields::deserialize(rest).map(|f| TurnEndReason::BudgetExhausted {
                budget: f.budget,
                limit: f.limit,
                summary: f.summary,
            }),
            "awaiting-approval" => {
                AwaitingFields::deserialize(rest).map(|f| TurnEndReason::AwaitingApproval { calls: f.calls })
            }
            other => Err(serde::de::Error::unknown_variant(other, Self::VARIANTS)),
        }
    }
}

impl<'de> Deserialize<'de> for TurnEndReason {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        super::tagged::deserialize(deserializer)
    }
}

impl TurnEndReason {
    /// The `kind` tag as written in the log (`completed`, `aborted`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            TurnEndReason::Completed => "completed",
            TurnEndReason::Aborted { .. } => "aborted",
            TurnEndReason::Error { .. } => "error",
            TurnEndReason::MaxTokens => "max-tokens",
            TurnEndReason::Interrupted => "interrupted",
            TurnEndReason::BudgetExhausted { .. } => "budget-exhausted",
            TurnEndReason::AwaitingApproval { .. } => "awaiting-approval",
        }
    }
}

/// `turn/end`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnEnd {
    /// The turn being closed.
    pub turn: u32,
    /// Why.
    pub reason: TurnEndReason,
}

/// `step/start` and `step/end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepRef {
    /// Enclosing turn.
    pub turn: u32,
    /// Step number, 1-based within the turn.
    pub step: u32,
}

/// `user/message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserMessage {
    /// The message.
    pub message: Message,
}

/// A tool as advertised to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSchema {
    /// Tool name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// The request prefix: everything that stays fixed across a session's requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestPrefix {
    /// Model name sent to the provider.
    pub model: String,
    /// System prompt, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Tool schemas, in the order they are sent.
    pub tools: Vec<ToolSchema>,
}

/// Why a `request/header` was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeaderReason {
    /// First dispatch of the session.
    Initial,
    /// First dispatch after the session was reopened.
    Resume,
    /// The prefix changed (model, system or tools).
    Change,
}

/// `request/header`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestHeader {
    /// The prefix.
    pub header: RequestPrefix,
    /// Why it was written now.
    pub reason: HeaderReason,
}

/// `assistant/chunk`: every streamed chunk, failed attempts included.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssistantChunk {
    /// Turn.
    pub turn: u32,
    /// Step.
    pub step: u32,
    /// Attempt number within the step, 1-based.
    pub attempt: u32,
    /// The normalised chunk.
    pub chunk: Chunk,
}

/// `assistant/message`: the step's single committed message; its `source_seqs` are exactly the
/// successful attempt's chunks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssistantMessage {
    /// Turn.
    pub turn: u32,
    /// Step.
    pub step: u32,
    /// The assembled message.
    pub message: Message,
    /// Token usage, if reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// `tool/call`: the durable intent, written and flushed before the tool body runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// Turn.
    pub turn: u32,
    /// Step.
    pub step: u32,
    /// The model's call id.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// Raw arguments JSON as the model produced it.
    pub arguments: String,
}

/// The machine-readable error of a failed tool result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolError {
    /// A short error name (e.g. `timeout`, `outcome_unknown`).
    pub name: String,
    /// The stable code.
    pub code: ErrorCode,
}

/// `tool/result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolResult {
    /// Turn.
    pub turn: u32,
    /// Step.
    pub step: u32,
    /// The call this answers.
    pub call_id: String,
    /// What the model sees.
    pub content: Vec<ContentBlock>,
    /// Whether this is an error result.
    pub is_error: bool,
    /// Code for error results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

/// `llm/retry`: written before the backoff wait.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmRetry {
    /// Stable id shared by the retries of one (turn, step, provider, policy).
    pub retry_id: String,
    /// Turn.
    pub turn: u32,
    /// Step.
    pub step: u32,
    /// Provider route name.
    pub provider: String,
    /// `normal` or `always`.
    pub mode: String,
    /// Canonical JSON array identifying the policy.
    pub policy_key: serde_json::Value,
    /// Retry number, 1-based.
    pub retry: u32,
    /// The policy's budget (`normal` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// The wait before the retry.
    pub delay_ms: u64,
    /// The failure being retried.
    pub failure: Failure,
}

/// `llm/retry-started`: written after the wait, right before the new attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmRetryStarted {
    /// Same as the `llm/retry` it follows.
    pub retry_id: String,
    /// Turn.
    pub turn: u32,
    /// Step.
    pub step: u32,
    /// Retry number.
    pub retry: u32,
}

/// A person's answer to an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The call may run, once.
    Approved,
    /// The call must not run; the model reads the reason as its result.
    Denied,
}

impl Decision {
    /// `approved` or `denied`, as written in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approved => "approved",
            Decision::Denied => "denied",
        }
    }
}

/// `approval/requested`: a call that needs a person's decision, durable after its `tool/call`
/// and before the turn pauses (FAILURE-APPROVAL).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRequested {
    /// Turn.
    pub turn: u32,
    /// Step.
    pub step: u32,
    /// The call waiting.
    pub call_id: String,
    /// Its tool.
    pub name: String,
    /// SHA-256 of the call's exact `arguments`, lowercase hex: what a decision is bound to.
    pub digest: String,
    /// Who may decide (empty: anyone who can write the session).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deciders: Vec<String>,
    /// When the request expires, epoch ms from the Clock (none: it waits for ever).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
}

/// `approval/decided`: one person's decision on one requested call, written by whoever owns
/// the session then (fenced by its epoch), bound to the request's digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalDecided {
    /// Turn.
    pub turn: u32,
    /// Step.
    pub step: u32,
    /// The call decided.
    pub call_id: String,
    /// The digest of the request decided (equal to it, or the validator refuses the record).
    pub digest: String,
    /// The decision.
    pub decision: Decision,
    /// Who decided.
    pub by: String,
    /// Why, in their words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `approval/dispatched`: an approved call consumed, durable before its body starts; a crash
/// after it makes the call `TOOL_OUTCOME_UNKNOWN`, never a second dispatch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalDispatched {
    /// Turn.
    pub turn: u32,
    /// Step.
    pub step: u32,
    /// The call dispatched.
    pub call_id: String,
    /// The digest the decision approved.
    pub digest: String,
}
