use serde::{Deserialize, Serialize};

use super::Failure;

/// The kind of content block a `block-start` opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockKind {
    /// Visible text.
    Text,
    /// Reasoning text.
    Reasoning,
    /// A tool call.
    ToolCall,
}

/// Token accounting reported by the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Total tokens.
    pub total_tokens: u64,
}

/// How a stream ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum FinishReason {
    /// The model finished normally.
    Stop,
    /// The model finished by requesting tool calls.
    ToolCalls,
    /// The output hit the token limit.
    MaxTokens,
    /// The attempt failed.
    Error {
        /// What went wrong.
        failure: Failure,
    },
    /// The caller aborted the attempt.
    Aborted {
        /// The abort, as a failure (`ABORTED`).
        failure: Failure,
    },
}

impl FinishReason {
    /// The failure of an `error` or `aborted` finish.
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            FinishReason::Error { failure } | FinishReason::Aborted { failure } => Some(failure),
            _ => None,
        }
    }
}

/// One normalised stream chunk (SPEC §3). Every attempt's chunks are logged as
/// `assistant/chunk`; exactly one `finish` ends each attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Chunk {
    /// A content block begins at `index`.
    BlockStart {
        /// Block index within the message.
        index: u32,
        /// What kind of block.
        kind: BlockKind,
    },
    /// Text appended to block `index`.
    TextDelta {
        /// Block index.
        index: u32,
        /// The text fragment.
        text: String,
    },
    /// Reasoning appended to block `index`.
    ReasoningDelta {
        /// Block index.
        index: u32,
        /// The reasoning fragment.
        text: String,
    },
    /// A tool-call fragment: the first of a call carries `id` and `name`.
    ToolCallDelta {
        /// Block index.
        index: u32,
        /// Call id (first fragment only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Tool name (first fragment only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Arguments text appended by this fragment.
        arguments_delta: String,
    },
    /// Block `index` is complete.
    BlockEnd {
        /// Block index.
        index: u32,
    },
    /// Token usage.
    Usage {
        /// The counts.
        usage: Usage,
    },
    /// The terminal chunk of an attempt.
    Finish {
        /// Why the attempt ended.
        reason: FinishReason,
    },
}
