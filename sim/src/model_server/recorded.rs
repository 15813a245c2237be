//! Provider streams the fake server replays byte for byte: real bodies recorded from live APIs
//! (`sim/fixtures/recorded/`, provenance in its `SOURCES.md`), so the adapter meets what
//! DeepSeek and OpenAI actually send, and bodies written here in the wire shapes other
//! providers send (`sim/fixtures/shapes/`, each described in its `README.md`): tool calls
//! without `index`, a refusal, OpenRouter's `reasoning` and its error event, a stream with no
//! `finish_reason`, prose that looks like credentials.

use serde::{Deserialize, Serialize};

/// One recorded stream (a closed set: a typo in a script fails to parse).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Recorded {
    /// DeepSeek `deepseek-chat`: text, then a tool call whose arguments arrive in pieces;
    /// usage inside the finish chunk.
    DeepseekChatToolCalls,
    /// DeepSeek `deepseek-reasoner`: `reasoning_content` deltas, a tool call, usage (reasoning
    /// and cache counts) in the finish chunk, `"usage": null` elsewhere.
    DeepseekReasoner,
    /// OpenAI with `stream_options.include_usage`: `"usage": null` on every chunk, then a
    /// `choices: []` usage chunk.
    OpenaiIncludeUsage,
    /// An error event inside a 200 stream (Groq's OpenAI-compatible endpoint), no `[DONE]`.
    GroqErrorMidStream,
    /// Mistral's shape: two tool calls in one delta, neither with an `index`.
    MistralToolCallsWithoutIndex,
    /// OpenAI's refusal: `refusal` deltas with `content: null`, finish `stop`.
    OpenaiRefusal,
    /// OpenRouter's shape: comment lines while queued, `reasoning` deltas, usage after the
    /// finish chunk.
    OpenrouterReasoning,
    /// OpenRouter's error event inside a 200 stream, whose own `code` is 400.
    OpenrouterErrorInStream,
    /// A tool-call stream that never sends a `finish_reason`.
    ToolCallWithoutFinishReason,
    /// Reasoning and text that look like credentials ("basic", `key=value`, "bearer token").
    CredentialWordsInProse,
}

impl Recorded {
    /// Every stream.
    pub const ALL: [Recorded; 10] = [
        Recorded::DeepseekChatToolCalls,
        Recorded::DeepseekReasoner,
        Recorded::OpenaiIncludeUsage,
        Recorded::GroqErrorMidStream,
        Recorded::MistralToolCallsWithoutIndex,
        Recorded::OpenaiRefusal,
        Recorded::OpenrouterReasoning,
        Recorded::OpenrouterErrorInStream,
        Recorded::ToolCallWithoutFinishReason,
        Recorded::CredentialWordsInProse,
    ];

    /// The file name, under `sim/fixtures/recorded/` or `sim/fixtures/shapes/`.
    pub fn file_name(self) -> &'static str {
        match self {
            Recorded::DeepseekChatToolCalls => "deepseek-chat-tool-calls.sse",
            Recorded::DeepseekReasoner => "deepseek-reasoner.sse",
            Recorded::OpenaiIncludeUsage => "openai-include-usage.sse",
            Recorded::GroqErrorMidStream => "groq-error-mid-stream.sse",
            Recorded::MistralToolCallsWithoutIndex => "mistral-tool-calls-without-index.sse",
            Recorded::OpenaiRefusal => "openai-refusal.sse",
            Recorded::OpenrouterReasoning => "openrouter-reasoning.sse",
            Recorded::OpenrouterErrorInStream => "openrouter-error-in-stream.sse",
            Recorded::ToolCallWithoutFinishReason => "tool-call-without-finish-reason.sse",
            Recorded::CredentialWordsInProse => "credential-words-in-prose.sse",
        }
    }

    /// Whether it was recorded from a live API (else written here in a provider's shape).
    pub fn is_recording(self) -> bool {
        matches!(
            self,
            Recorded::DeepseekChatToolCalls
                | Recorded::DeepseekReasoner
                | Recorded::OpenaiIncludeUsage
                | Recorded::GroqErrorMidStream
        )
    }

    /// The body, byte for byte.
    pub fn body(self) -> &'static str {
        match self {
            Recorded::DeepseekChatToolCalls => include_str!("../../fixtures/recorded/deepseek-chat-tool-calls.sse"),
            Recorded::DeepseekReasoner => include_str!("../../fixtures/recorded/deepseek-reasoner.sse"),
            Recorded::OpenaiIncludeUsage => include_str!("../../fixtures/recorded/openai-include-usage.sse"),
            Recorded::GroqErrorMidStream => include_str!("../../fixtures/recorded/groq-error-mid-stream.sse"),
            Recorded::MistralToolCallsWithoutIndex => {
                include_str!("../../fixtures/shapes/mistral-tool-calls-without-index.sse")
            }
            Recorded::OpenaiRefusal => include_str!("../../fixtures/shapes/openai-refusal.sse"),
            Recorded::OpenrouterReasoning => include_str!("../../fixtures/shapes/openrouter-reasoning.sse"),
            Recorded::OpenrouterErrorInStream => include_str!("../../fixtures/shapes/openrouter-error-in-stream.sse"),
            Recorded::ToolCallWithoutFinishReason => {
                include_str!("../../fixtures/shapes/tool-call-without-finish-reason.sse")
            }
            Recorded::CredentialWordsInProse => include_str!("../../fixtures/shapes/credential-words-in-prose.sse"),
        }
    }

    /// Whether a client must recover from it (an error event): a healed server skips it.
    pub fn fails(self) -> bool {
        matches!(self, Recorded::GroqErrorMidStream | Recorded::OpenrouterErrorInStream)
    }
}
