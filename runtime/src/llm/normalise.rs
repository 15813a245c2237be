//! Turns OpenAI-compatible `chat.completion.chunk` events into normalised chunks
//! (FAILURE-DEEPSEEK-STREAM, FAILURE-PROVIDER-SHAPES).
//!
//! Content blocks get indices in the order they first appear: reasoning, text, a refusal and
//! each tool call are separate blocks. A tool call is keyed by the provider's `index`; a
//! provider that sends none (Mistral, Ollama, Gemini's compatible endpoint) is read as the
//! official SDK's readers do: a fragment with an `id` starts (or continues) the call of that
//! id, one with neither continues the last call. The first fragment of a call carries its
//! `id` and `name`; later fragments append arguments. Reasoning arrives as DeepSeek's
//! `reasoning_content` or OpenRouter's `reasoning`; a refusal as OpenAI's `refusal`.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::event::{BlockKind, Chunk, ErrorCode, Failure, FinishReason, Usage};

#[derive(Debug, Deserialize)]
struct ApiChunk {
    #[serde(default)]
    choices: Vec<ApiChoice>,
    #[serde(default)]
    usage: Option<ApiUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct ApiChoice {
    #[serde(default)]
    delta: Option<ApiDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ApiDelta {
    #[serde(default)]
    content: Option<String>,
    /// DeepSeek's reasoning text.
    #[serde(default)]
    reasoning_content: Option<String>,
    /// OpenRouter's name for it (read when `reasoning_content` is absent, so a provider that
    /// sends both is not read twice).
    #[serde(default)]
    reasoning: Option<String>,
    /// OpenAI's refusal text (with `content: null`).
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ApiToolCall>>,
}

#[derive(Debug, Deserialize)]
struct ApiToolCall {
    /// Absent from Mistral's (and others') tool-call deltas.
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<ApiFunction>,
}

#[derive(Debug, Deserialize)]
struct ApiFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ApiUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    total_tokens: u64,
    /// DeepSeek.
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u64>,
    /// DeepSeek.
    #[serde(default)]
    prompt_cache_miss_tokens: Option<u64>,
    /// OpenAI.
    #[serde(default)]
    prompt_tokens_details: Option<ApiPromptDetails>,
    /// OpenAI (and DeepSeek's reasoner).
    #[serde(default)]
    completion_tokens_details: Option<ApiCompletionDetails>,
}

#[derive(Debug, Deserialize)]
struct ApiPromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct ApiCompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

/// An error event inside a 200 stream. Providers that say what it is (`status_code`, `status`
/// or a numeric `code`, as OpenRouter sends, else OpenAI's error `type` or a string `code`)
/// get the code that status or type means, like an HTTP status: an invalid request reported
/// mid-stream is not retried as a server fault; anything else is `SERVER`.
pub(crate) fn mid_stream_failure(error: &serde_json::Value) -> Failure {
    let message = error.get("message").and_then(|m| m.as_str()).unwrap_or("error event in the stream");
    let status = ["status_code", "status", "code"]
        .iter()
        .find_map(|key| error.get(*key).and_then(serde_json::Value::as_u64))
        .and_then(|s| u16::try_from(s).ok())
        .filter(|s| (100..=999).contains(s));
    let kind = error.get("type").or_else(|| error.get("code")).and_then(|t| t.as_str());
    let code = match (status, kind) {
        (Some(status), _) => super::classify::code_for_status(status, message),
        (None, Some("invalid_request_error")) => ErrorCode::InvalidRequest,
        (None, Some("rate_limit_error" | "rate_limit_exceeded" | "tokens")) => ErrorCode::RateLimit,
        (None, Some("insufficient_quota")) => ErrorCode::Quota,
        (None, Some("authentication_error" | "permission_error")) => ErrorCode::Auth,
        _ => ErrorCode::Server,
    };
    let said = status.map_or_else(String::new, |s| format!(" (status {s})"));
    let message = super::classify::bounded(message);
    Failure { status, ..Failure::new(code, format!("provider reported an error mid-stream{said}: {message}")) }
}

/// What names a tool call within one stream.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum CallKey {
    /// The provider's `index`.
    Index(u32),
    /// No index: the call's `id`.
    Id(String),
}

/// The normaliser of one attempt's stream.
#[derive(Debug, Default)]
pub struct Normaliser {
    next_index: u32,
    text: Option<u32>,
    reasoning: Option<u32>,
    refusal: Option<u32>,
    /// tool call → block index.
    tools: BTreeMap<CallKey, u32>,
    /// The block of the tool call opened last (a fragment with neither index nor id goes on
    /// with it).
    last_tool: Option<u32>,
    /// Blocks opened and not yet closed, in opening order.
    open: Vec<u32>,
    finish_reason: Option<String>,
    saw_content: bool,
}

impl Normaliser {
    /// A normaliser for a new attempt.
    pub fn new() -> Self {
        Self::default()
    }

    fn open_block(&mut self, kind: BlockKind, out: &mut Vec<Chunk>) -> u32 {
        let index = self.next_index;
        self.next_index += 1;
        self.open.push(index);
        self.saw_content = true;
        out.push(Chunk::BlockStart { index, kind });
        index
    }

    /// Handles one `data:` payload other than `[DONE]`.
    pub fn on_data(&mut self, data: &str, out: &mut Vec<Chunk>) -> Result<(), Failure> {
        let chunk: ApiChunk = serde_json::from_str(data)
            .map_err(|e| Failure::new(ErrorCode::MalformedResponse, format!("undecodable stream event: {e}")))?;
        if let Some(error) = chunk.error {
            return Err(mid_stream_failure(&error));
        }
        for choice in chunk.choices {
            if let Some(delta) = choice.delta {
                self.on_delta(delta, out);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
        if let Some(usage) = chunk.usage {
            out.push(Chunk::Usage {
                usage: Usage {
                    prompt_tokens: usage.prompt_tokens,
                    completion_tokens: usage.completion_tokens,
                    total_tokens: usage.total_tokens,
                    reasoning_tokens: usage.completion_tokens_details.and_then(|d| d.reasoning_tokens),
                    cache_hit_tokens: usage
                        .prompt_cache_hit_tokens
                        .or(usage.prompt_tokens_details.and_then(|d| d.cached_tokens)),
                    cache_miss_tokens: usage.prompt_cache_miss_tokens,
                    cache_write_tokens: None,
                },
            });
        }
        Ok(())
    }

    /// The block of one of the simple streams (text, reasoning, refusal), opened on first use.
    fn block_of(&mut self, kind: BlockKind, out: &mut Vec<Chunk>) -> u32 {
        let slot = match kind {
            BlockKind::Text => &self.text,
            BlockKind::Reasoning => &self.reasoning,
            BlockKind::Refusal => &self.refusal,
            BlockKind::ToolCall | BlockKind::RedactedReasoning => unreachable!("not one of the simple streams"),
        };
        if let Some(index) = *slot {
            return index;
        }
        let index = self.open_block(kind, out);
        match kind {
            BlockKind::Text => self.text = Some(index),
            BlockKind::Reasoning => self.reasoning = Some(index),
            _ => self.refusal = Some(index),
        }
        index
    }

    fn on_delta(&mut self, delta: ApiDelta, out: &mut Vec<Chunk>) {
        let reasoning = delta.reasoning_content.or(delta.reasoning);
        if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
            let index = self.block_of(BlockKind::Reasoning, out);
            out.push(Chunk::ReasoningDelta { index, text });
        }
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            let index = self.block_of(BlockKind::Text, out);
            out.push(Chunk::TextDelta { index, text });
        }
        let refusal = delta.refusal.filter(|_| !crate::testing::bugs::planted("refusal-as-empty"));
        if let Some(text) = refusal.filter(|t| !t.is_empty()) {
            let index = self.block_of(BlockKind::Refusal, out);
            out.push(Chunk::RefusalDelta { index, text });
        }
        for call in delta.tool_calls.unwrap_or_default() {
            let function = call.function.unwrap_or(ApiFunction { name: None, arguments: None });
            let key = match (call.index, &call.id) {
                (Some(index), _) => Some(CallKey::Index(index)),
                (None, Some(id)) => Some(CallKey::Id(id.clone())),
                // Neither: the fragment goes on with the last call (if there is none, it
                // starts one).
                (None, None) => None,
            };
            let known = match &key {
                Some(key) => self.tools.get(key).copied(),
                None => self.last_tool,
            };
            let (index, first) = match known {
                Some(index) => (index, false),
                None => {
                    let index = self.open_block(BlockKind::ToolCall, out);
                    if let Some(key) = key {
                        self.tools.insert(key, index);
                    }
                    (index, true)
                }
            };
            self.last_tool = Some(index);
            let arguments_delta = function.arguments.unwrap_or_default();
            // Later fragments only carry arguments; drop empty ones rather than log noise.
            if !first && arguments_delta.is_empty() {
                continue;
            }
            out.push(Chunk::ToolCallDelta {
                index,
                id: if first { call.id } else { None },
                name: if first { function.name } else { None },
                arguments_delta,
            });
        }
    }

    /// Handles `data: [DONE]`: closes the open blocks and returns the terminal chunk.
    pub fn on_done(&mut self, out: &mut Vec<Chunk>) -> Chunk {
        for index in std::mem::take(&mut self.open) {
            out.push(Chunk::BlockEnd { index });
        }
        let reason = match self.finish_reason.as_deref() {
            // Mistral's `model_length`: the context window, not the answer budget, ran out;
            // what came is an answer cut short all the same.
            Some("length" | "model_length") => FinishReason::MaxTokens,
            // OpenRouter ends a stream whose upstream failed with `error` (its error object, when
            // it sends one, was read as the failure already).
            Some("error") => FinishReason::Error {
                failure: Failure::new(ErrorCode::Server, "the provider ended the completion with finish_reason error"),
            },
            Some("tool_calls") => FinishReason::ToolCalls,
            Some("content_filter") => FinishReason::Error {
                failure: Failure::new(
                    ErrorCode::InvalidRequest,
                    "the provider's content filter stopped the completion",
                ),
            },
            Some("insufficient_system_resource") => FinishReason::Error {
                failure: Failure::new(ErrorCode::Server, "the provider ran out of resources mid-completion"),
            },
            // A tool call without an explicit finish reason still asked for tools.
            Some("stop") | None if self.last_tool.is_some() => FinishReason::ToolCalls,
            _ if !self.saw_content => FinishReason::Error {
                failure: Failure::new(ErrorCode::EmptyResponse, "the stream completed without any content"),
            },
            _ => FinishReason::Stop,
        };
        // No finish reason at all, and content to judge by: the reason is the runtime's
        // inference, and the record says so.
        let inferred = self.finish_reason.is_none() && reason.failure().is_none();
        Chunk::Finish { reason, inferred }
    }
}
