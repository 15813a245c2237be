//! Turns OpenAI-compatible `chat.completion.chunk` events into normalised chunks
//! (FAILURE-DEEPSEEK-STREAM).
//!
//! Content blocks get indices in the order they first appear: reasoning, text and each tool
//! call (keyed by the provider's tool-call `index`) are separate blocks. The first fragment of
//! a tool call carries its `id` and `name`; later fragments append arguments.

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
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ApiToolCall>>,
}

#[derive(Debug, Deserialize)]
struct ApiToolCall {
    index: u32,
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

/// An error event inside a 200 stream. Providers that say what it is (`status_code` or
/// `status`, else OpenAI's error `type`) get the code that status or type means, so an invalid
/// request reported mid-stream is not retried as a server fault; anything else is `SERVER`.
fn mid_stream_failure(error: &serde_json::Value) -> Failure {
    let message = error.get("message").and_then(|m| m.as_str()).unwrap_or("error event in the stream");
    let status = ["status_code", "status"]
        .iter()
        .find_map(|key| error.get(*key).and_then(serde_json::Value::as_u64))
        .and_then(|s| u16::try_from(s).ok())
        .filter(|s| (100..=999).contains(s));
    let code = match (status, error.get("type").and_then(|t| t.as_str())) {
        (Some(status), _) => super::classify::code_for_status(status, message),
        (None, Some("invalid_request_error")) => ErrorCode::InvalidRequest,
        (None, Some("rate_limit_error" | "rate_limit_exceeded" | "tokens")) => ErrorCode::RateLimit,
        (None, Some("insufficient_quota")) => ErrorCode::Quota,
        (None, Some("authentication_error" | "permission_error")) => ErrorCode::Auth,
        _ => ErrorCode::Server,
    };
    let said = status.map_or_else(String::new, |s| format!(" (status {s})"));
    Failure::new(code, format!("provider reported an error mid-stream{said}: {message}"))
}

/// The normaliser of one attempt's stream.
#[derive(Debug, Default)]
pub struct Normaliser {
    next_index: u32,
    text: Option<u32>,
    reasoning: Option<u32>,
    /// provider tool-call index → block index.
    tools: BTreeMap<u32, u32>,
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
                },
            });
        }
        Ok(())
    }

    fn on_delta(&mut self, delta: ApiDelta, out: &mut Vec<Chunk>) {
        if let Some(text) = delta.reasoning_content.filter(|t| !t.is_empty()) {
            let index = match self.reasoning {
                Some(index) => index,
                None => {
                    let index = self.open_block(BlockKind::Reasoning, out);
                    self.reasoning = Some(index);
                    index
                }
            };
            out.push(Chunk::ReasoningDelta { index, text });
        }
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            let index = match self.text {
                Some(index) => index,
                None => {
                    let index = self.open_block(BlockKind::Text, out);
                    self.text = Some(index);
                    index
                }
            };
            out.push(Chunk::TextDelta { index, text });
        }
        for call in delta.tool_calls.unwrap_or_default() {
            let function = call.function.unwrap_or(ApiFunction { name: None, arguments: None });
            let (index, first) = match self.tools.get(&call.index) {
                Some(&index) => (index, false),
                None => {
                    let index = self.open_block(BlockKind::ToolCall, out);
                    self.tools.insert(call.index, index);
                    (index, true)
                }
            };
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
            Some("length") => FinishReason::MaxTokens,
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
            Some("stop") | None if !self.tools.is_empty() => FinishReason::ToolCalls,
            _ if !self.saw_content => FinishReason::Error {
                failure: Failure::new(ErrorCode::EmptyResponse, "the stream completed without any content"),
            },
            _ => FinishReason::Stop,
        };
        Chunk::Finish { reason }
    }
}
