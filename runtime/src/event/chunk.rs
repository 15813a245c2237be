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
    /// A refusal: the model declined, in its own words (OpenAI's `delta.refusal`).
    Refusal,
    /// Reasoning the provider keeps encrypted (Anthropic's `redacted_thinking`): its data
    /// arrives as a `signature-delta`.
    RedactedReasoning,
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
    /// Reasoning tokens among the completion tokens (OpenAI's
    /// `completion_tokens_details.reasoning_tokens`; DeepSeek's reasoner reports them too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Prompt tokens served from the provider's cache (DeepSeek's `prompt_cache_hit_tokens`,
    /// OpenAI's `prompt_tokens_details.cached_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_hit_tokens: Option<u64>,
    /// Prompt tokens not served from the cache (DeepSeek's `prompt_cache_miss_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_miss_tokens: Option<u64>,
    /// Prompt tokens written to the provider's cache (Anthropic's
    /// `cache_creation_input_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
}

impl Usage {
    /// Adds `other` (a sum of attempts, turns or sessions). An optional count stays absent
    /// only while no part reported it.
    pub fn add(&mut self, other: &Usage) {
        let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        };
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self.completion_tokens.saturating_add(other.completion_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
        self.reasoning_tokens = sum(self.reasoning_tokens, other.reasoning_tokens);
        self.cache_hit_tokens = sum(self.cache_hit_tokens, other.cache_hit_tokens);
        self.cache_miss_tokens = sum(self.cache_miss_tokens, other.cache_miss_tokens);
        self.cache_write_tokens = sum(self.cache_write_tokens, other.cache_write_tokens);
    }
}

/// How a stream ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
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

/// One normalised stream chunk (FAILURE-ADAPTER-BOUNDARY, FAILURE-WIRE-FORMATS). Every attempt's
/// chunks are logged as `assistant/chunk`; exactly one `finish` ends each attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
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
    /// Refusal text appended to block `index`.
    RefusalDelta {
        /// Block index.
        index: u32,
        /// The refusal fragment.
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
    /// Opaque provider data appended to block `index`, to be sent back verbatim: a reasoning
    /// block's signature (Anthropic's `signature_delta`), a redacted-reasoning block's data, a
    /// tool call's `thoughtSignature` (Gemini).
    SignatureDelta {
        /// Block index.
        index: u32,
        /// The fragment.
        signature: String,
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
        /// The provider sent no `finish_reason`: this one was inferred from the content (tool
        /// calls, else a stop).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        inferred: bool,
    },
}

impl Chunk {
    /// The terminal chunk for `reason`, as the provider (or the runtime) stated it.
    pub fn finish(reason: FinishReason) -> Chunk {
        Chunk::Finish { reason, inferred: false }
    }

    /// Bytes of the text this chunk carries (what its encoding is sized from).
    pub(crate) fn text_bytes(&self) -> usize {
        match self {
            Chunk::TextDelta { text, .. } | Chunk::ReasoningDelta { text, .. } | Chunk::RefusalDelta { text, .. } => {
                text.len()
            }
            Chunk::ToolCallDelta { id, name, arguments_delta, .. } => {
                arguments_delta.len() + id.as_ref().map_or(0, String::len) + name.as_ref().map_or(0, String::len)
            }
            Chunk::SignatureDelta { signature, .. } => signature.len(),
            Chunk::BlockStart { .. } | Chunk::BlockEnd { .. } | Chunk::Usage { .. } | Chunk::Finish { .. } => 0,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FailureFields {
    failure: Failure,
}

impl super::tagged::Tagged for FinishReason {
    const TAG: &'static str = "kind";
    const VARIANTS: &'static [&'static str] = &["stop", "tool-calls", "max-tokens", "error", "aborted"];
    const NAME: &'static str = "FinishReason";

    fn variant<'de, D: serde::Deserializer<'de>>(tag: &str, rest: D) -> Result<Self, D::Error> {
        use super::tagged::NoFields;
        match tag {
            "stop" => NoFields::deserialize(rest).map(|_| FinishReason::Stop),
            "tool-calls" => NoFields::deserialize(rest).map(|_| FinishReason::ToolCalls),
            "max-tokens" => NoFields::deserialize(rest).map(|_| FinishReason::MaxTokens),
            "error" => FailureFields::deserialize(rest).map(|f| FinishReason::Error { failure: f.failure }),
            "aborted" => FailureFields::deserialize(rest).map(|f| FinishReason::Aborted { failure: f.failure }),
            other => Err(serde::de::Error::unknown_variant(other, Self::VARIANTS)),
        }
    }
}

impl<'de> Deserialize<'de> for FinishReason {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        super::tagged::deserialize(deserializer)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BlockStartFields {
    index: u32,
    kind: BlockKind,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeltaFields {
    index: u32,
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallDeltaFields {
    index: u32,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    arguments_delta: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignatureFields {
    index: u32,
    signature: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexFields {
    index: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageFields {
    usage: Usage,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FinishFields {
    reason: FinishReason,
    #[serde(default)]
    inferred: bool,
}

impl super::tagged::Tagged for Chunk {
    const TAG: &'static str = "type";
    const VARIANTS: &'static [&'static str] = &[
        "block-start",
        "text-delta",
        "reasoning-delta",
        "refusal-delta",
        "tool-call-delta",
        "signature-delta",
        "block-end",
        "usage",
        "finish",
    ];
    const NAME: &'static str = "Chunk";

    fn variant<'de, D: serde::Deserializer<'de>>(tag: &str, rest: D) -> Result<Self, D::Error> {
        match tag {
            "block-start" => {
                BlockStartFields::deserialize(rest).map(|f| Chunk::BlockStart { index: f.index, kind: f.kind })
            }
            "text-delta" => DeltaFields::deserialize(rest).map(|f| Chunk::TextDelta { index: f.index, text: f.text }),
            "reasoning-delta" => {
                DeltaFields::deserialize(rest).map(|f| Chunk::ReasoningDelta { index: f.index, text: f.text })
            }
            "refusal-delta" => {
                DeltaFields::deserialize(rest).map(|f| Chunk::RefusalDelta { index: f.index, text: f.text })
            }
            "tool-call-delta" => ToolCallDeltaFields::deserialize(rest).map(|f| Chunk::ToolCallDelta {
                index: f.index,
                id: f.id,
                name: f.name,
                arguments_delta: f.arguments_delta,
            }),
            "signature-delta" => SignatureFields::deserialize(rest)
                .map(|f| Chunk::SignatureDelta { index: f.index, signature: f.signature }),
            "block-end" => IndexFields::deserialize(rest).map(|f| Chunk::BlockEnd { index: f.index }),
            "usage" => UsageFields::deserialize(rest).map(|f| Chunk::Usage { usage: f.usage }),
            "finish" => {
                FinishFields::deserialize(rest).map(|f| Chunk::Finish { reason: f.reason, inferred: f.inferred })
            }
            other => Err(serde::de::Error::unknown_variant(other, Self::VARIANTS)),
        }
    }
}

impl<'de> Deserialize<'de> for Chunk {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        super::tagged::deserialize(deserializer)
    }
}
