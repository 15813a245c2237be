//! The session event model (FAILURE-EVENT-LOG, docs/internals/requirements.md): records,
//! payloads, failures, the header and the validator of log invariants.

mod canonical_delta;
mod chunk;
mod digest;
mod failure;
mod header;
mod message;
mod payload;
mod record;
mod tagged;
mod texts;
mod validate;

pub use chunk::{BlockKind, Chunk, FinishReason, Usage};
pub use digest::arguments_digest;
pub use failure::{ErrorCode, Failure, UnknownErrorCode, FIXED_ERROR_CODES};
pub use header::{HeaderError, SessionHeader, SESSION_VERSION};
pub use message::{ContentBlock, Message, Role};
pub use payload::{
    AbortCause, ApprovalDecided, ApprovalDispatched, ApprovalRequested, AssistantChunk, AssistantMessage, Decision,
    HeaderReason, LlmRetry, LlmRetryStarted, RequestHeader, RequestPrefix, StepRef, ToolCall, ToolError, ToolResult,
    ToolSchema, TurnEnd, TurnEndReason, TurnStart, UserMessage,
};
pub use record::{DecodeBytesError, Event, Record, RecordError, UnknownEvent, EVENT_TYPES};
pub(crate) use texts::any_text;
pub use validate::{LogViolation, Rule, Validator};
