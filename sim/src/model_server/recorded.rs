//! Recorded provider streams (`sim/fixtures/recorded/`, provenance in its `SOURCES.md`): real
//! bodies the fake server replays byte for byte, so the adapter meets what DeepSeek and OpenAI
//! actually send, not only our idea of it.

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
}

impl Recorded {
    /// Every recorded stream.
    pub const ALL: [Recorded; 4] = [
        Recorded::DeepseekChatToolCalls,
        Recorded::DeepseekReasoner,
        Recorded::OpenaiIncludeUsage,
        Recorded::GroqErrorMidStream,
    ];

    /// The file name under `sim/fixtures/recorded/`.
    pub fn file_name(self) -> &'static str {
        match self {
            Recorded::DeepseekChatToolCalls => "deepseek-chat-tool-calls.sse",
            Recorded::DeepseekReasoner => "deepseek-reasoner.sse",
            Recorded::OpenaiIncludeUsage => "openai-include-usage.sse",
            Recorded::GroqErrorMidStream => "groq-error-mid-stream.sse",
        }
    }

    /// The body exactly as the provider sent it.
    pub fn body(self) -> &'static str {
        match self {
            Recorded::DeepseekChatToolCalls => include_str!("../../fixtures/recorded/deepseek-chat-tool-calls.sse"),
            Recorded::DeepseekReasoner => include_str!("../../fixtures/recorded/deepseek-reasoner.sse"),
            Recorded::OpenaiIncludeUsage => include_str!("../../fixtures/recorded/openai-include-usage.sse"),
            Recorded::GroqErrorMidStream => include_str!("../../fixtures/recorded/groq-error-mid-stream.sse"),
        }
    }

    /// Whether a client must recover from it (the error stream): a healed server skips it.
    pub fn fails(self) -> bool {
        self == Recorded::GroqErrorMidStream
    }
}
