//! Gemini's `alt=sse` stream read into chunks: every event is a whole `GenerateContentResponse`
//! carrying only its new parts (text, thought text, whole `functionCall` parts with their
//! `thoughtSignature`), the candidate's `finishReason` on the last one, and cumulative
//! `usageMetadata`. There is no `[DONE]`: the answer ends at its `finishReason`, and a body
//! that ends before one is `STREAM_CLOSED`. Safety and recitation stops, and a blocked prompt,
//! end the step as failures no retry mends; an `{"error":…}` event after the 200 is the
//! failure it names.

use serde::Deserialize;

use crate::event::{BlockKind, Chunk, ErrorCode, Failure, FinishReason, Usage};
use crate::llm::conversation::SYNTHESISED_CALL_ID_PREFIX;
use crate::llm::step::Step;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    #[serde(default)]
    candidates: Vec<Candidate>,
    #[serde(default)]
    usage_metadata: Option<ApiUsage>,
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default)]
    response_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    finish_message: Option<String>,
}

#[derive(Deserialize)]
struct Content {
    #[serde(default)]
    parts: Vec<Part>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thought: bool,
    #[serde(default)]
    function_call: Option<FunctionCall>,
    #[serde(default)]
    thought_signature: Option<String>,
}

#[derive(Deserialize)]
struct FunctionCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: String,
    /// As the provider wrote it: its keys in their order, its numbers as written.
    #[serde(default)]
    args: Option<Box<serde_json::value::RawValue>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "camelCase")]
struct ApiUsage {
    #[serde(default)]
    prompt_token_count: u64,
    #[serde(default)]
    candidates_token_count: u64,
    #[serde(default)]
    total_token_count: u64,
    #[serde(default)]
    thoughts_token_count: Option<u64>,
    #[serde(default)]
    cached_content_token_count: Option<u64>,
}

impl ApiUsage {
    fn usage(self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_token_count,
            // Counts off the network: a hostile one saturates, never overflows.
            completion_tokens: self.candidates_token_count.saturating_add(self.thoughts_token_count.unwrap_or(0)),
            total_tokens: self.total_token_count,
            reasoning_tokens: self.thoughts_token_count,
            cache_hit_tokens: self.cached_content_token_count,
            cache_miss_tokens: None,
            cache_write_tokens: None,
        }
    }
}

/// The reader of one attempt's stream.
#[derive(Default)]
pub(crate) struct Reader {
    next_index: u32,
    text: Option<u32>,
    thought: Option<u32>,
    calls: u32,
    /// The response's id (its characters that an id may hold), which makes the ids given to
    /// its id-less calls unique across the session's responses.
    response_id: Option<String>,
    /// Cumulative: only the last counts.
    usage: Option<ApiUsage>,
    saw_content: bool,
}

impl Reader {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn open(&mut self, kind: BlockKind, out: &mut Vec<Chunk>) -> u32 {
        let index = self.next_index;
        self.next_index += 1;
        self.saw_content = true;
        out.push(Chunk::BlockStart { index, kind });
        index
    }

    /// Reads one `data:` payload.
    pub(crate) fn on_data(&mut self, data: &str, out: &mut Vec<Chunk>) -> Result<Step, Failure> {
        let response: Response = serde_json::from_str(data)
            .map_err(|e| Failure::new(ErrorCode::MalformedResponse, format!("undecodable stream event: {e}")))?;
        if let Some(error) = &response.error {
            return Err(mid_stream_failure(error));
        }
        if let Some(usage) = response.usage_metadata {
            self.usage = Some(usage);
        }
        if self.response_id.is_none() {
            self.response_id = response.response_id.as_deref().map(id_safe).filter(|id| !id.is_empty());
        }
        if let Some(reason) = response.prompt_feedback.and_then(|f| f.block_reason) {
            return Ok(Step::Done(self.finish(
                FinishReason::Error {
                    failure: Failure::new(
                        ErrorCode::InvalidRequest,
                        format!("the provider blocked the prompt ({})", crate::llm::classify::bounded(&reason)),
                    ),
                },
                out,
            )));
        }
        let Some(candidate) = response.candidates.into_iter().next() else { return Ok(Step::More) };
        for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
            self.on_part(part, out);
        }
        let Some(reason) = candidate.finish_reason else { return Ok(Step::More) };
        let reason = self.reason(&reason, candidate.finish_message.as_deref());
        Ok(Step::Done(self.finish(reason, out)))
    }

    fn on_part(&mut self, part: Part, out: &mut Vec<Chunk>) {
        if let Some(call) = part.function_call {
            // Whole, never split: one block per call, opened and closed at once.
            self.close_text(out);
            let index = self.open(BlockKind::ToolCall, out);
            let id = call.id.filter(|id| !id.is_empty()).unwrap_or_else(|| match &self.response_id {
                Some(response) => format!("{SYNTHESISED_CALL_ID_PREFIX}{response}_{}", self.calls),
                None => format!("{SYNTHESISED_CALL_ID_PREFIX}{}", self.calls),
            });
            self.calls += 1;
            let arguments =
                call.args.map(|raw| raw.get().to_owned()).filter(|a| a != "null").unwrap_or_else(|| "{}".to_owned());
            out.push(Chunk::ToolCallDelta { index, id: Some(id), name: Some(call.name), arguments_delta: arguments });
            if let Some(signature) = part.thought_signature.filter(|s| !s.is_empty()) {
                out.push(Chunk::SignatureDelta { index, signature });
            }
            out.push(Chunk::BlockEnd { index });
            return;
        }
        // A signature on a text part is not sent back (only a call's is required).
        let Some(text) = part.text.filter(|t| !t.is_empty()) else { return };
        let (slot, kind) =
            if part.thought { (self.thought, BlockKind::Reasoning) } else { (self.text, BlockKind::Text) };
        let index = match slot {
            Some(index) => index,
            None => {
                let index = self.open(kind, out);
                if part.thought {
                    self.thought = Some(index);
                } else {
                    self.text = Some(index);
                }
                index
            }
        };
        out.push(if part.thought { Chunk::ReasoningDelta { index, text } } else { Chunk::TextDelta { index, text } });
    }

    /// Text after a call is a block of its own, so blocks stay in the order they came.
    fn close_text(&mut self, out: &mut Vec<Chunk>) {
        for index in [self.thought.take(), self.text.take()].into_iter().flatten() {
            out.push(Chunk::BlockEnd { index });
        }
    }

    fn reason(&self, reason: &str, message: Option<&str>) -> FinishReason {
        let failure = |code, what: &str| {
            let said = message.map_or_else(String::new, |m| format!(": {}", crate::llm::classify::bounded(m)));
            let reason = crate::llm::classify::bounded(reason);
            FinishReason::Error { failure: Failure::new(code, format!("{what} (finishReason {reason}){said}")) }
        };
        match reason {
            "STOP" if self.calls > 0 => FinishReason::ToolCalls,
            "STOP" if !self.saw_content => FinishReason::Error {
                failure: Failure::new(ErrorCode::EmptyResponse, "the stream completed without any content"),
            },
            "STOP" => FinishReason::Stop,
            // CONTINUATION: the per-request token limit, an answer that can be continued.
            "MAX_TOKENS" | "CONTINUATION" => FinishReason::MaxTokens,
            "MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL" | "TOO_MANY_TOOL_CALLS" => {
                failure(ErrorCode::MalformedResponse, "the model's function call was unusable")
            }
            "MALFORMED_RESPONSE" => failure(ErrorCode::MalformedResponse, "the model's answer was malformed"),
            "PUP_LIMITED_DISABLED" => failure(ErrorCode::Auth, "the account may not use this model"),
            "OTHER" | "FINISH_REASON_UNSPECIFIED" => failure(ErrorCode::Unknown, "the provider stopped the answer"),
            // SAFETY, RECITATION, LANGUAGE, BLOCKLIST, PROHIBITED_CONTENT, SPII, IMAGE_*, and
            // whatever else a filter may add: the answer will not come by asking again.
            _ => failure(ErrorCode::InvalidRequest, "the provider's filter stopped the answer"),
        }
    }

    fn finish(&mut self, reason: FinishReason, out: &mut Vec<Chunk>) -> Chunk {
        self.close_text(out);
        if let Some(usage) = self.usage {
            out.push(Chunk::Usage { usage: usage.usage() });
        }
        Chunk::finish(reason)
    }
}

/// Longest part of a response id kept in a synthesised call id, in bytes.
const RESPONSE_ID_BYTES_MAX: usize = 64;

/// The characters of `id` a tool call id may hold everywhere (`[A-Za-z0-9_-]`), bounded.
fn id_safe(id: &str) -> String {
    id.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-')).take(RESPONSE_ID_BYTES_MAX).collect()
}

/// An `{"error":…}` event after the 200: the code it names.
fn mid_stream_failure(error: &serde_json::Value) -> Failure {
    let message = error.get("message").and_then(|m| m.as_str()).unwrap_or("error event in the stream");
    let (code, retry_after_ms) = super::code_of_error(error, message);
    let status = error.get("code").and_then(serde_json::Value::as_u64).and_then(|c| u16::try_from(c).ok());
    let said = status.map_or_else(String::new, |s| format!(" (status {s})"));
    let message = crate::llm::classify::bounded(message);
    Failure {
        status,
        provider_retry_after_ms: retry_after_ms,
        // An error event that names neither a status nor a code is still a failure of the server.
        ..Failure::new(
            code.unwrap_or(ErrorCode::Server),
            format!("provider reported an error mid-stream{said}: {message}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(events: &[&str]) -> (Vec<Chunk>, Result<Option<Chunk>, Failure>) {
        let mut reader = Reader::new();
        crate::llm::step::read_events(|data, out| reader.on_data(data, out), events)
    }

    fn message(chunks: &[Chunk]) -> (crate::event::Message, Option<Usage>) {
        let mut assembler = crate::llm::assembler::Assembler::new();
        chunks.iter().for_each(|c| drop(assembler.push(c)));
        assembler.finish()
    }

    #[test]
    fn thoughts_text_and_a_whole_call_without_an_id_read_into_blocks() {
        let (chunks, finish) = read(&[
            r#"{"candidates": [{"content": {"parts": [{"text": "**Refining**","thought": true}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 391,"totalTokenCount": 493,"thoughtsTokenCount": 102},"responseId": "r1"}"#,
            r#"{"candidates": [{"content": {"parts": [{"text": "Yesterday was 2025-11-10.\n","thoughtSignature": "CikB"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 391,"candidatesTokenCount": 12,"totalTokenCount": 505,"thoughtsTokenCount": 102}}"#,
            r#"{"candidates": [{"content": {"parts": [{"functionCall": {"name": "get_weather","args": {"city": "shanghai"}},"thoughtSignature": "EjQK"}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 391,"candidatesTokenCount": 43,"totalTokenCount": 536,"thoughtsTokenCount": 102}}"#,
        ]);
        assert_eq!(finish.unwrap().unwrap(), Chunk::finish(FinishReason::ToolCalls));
        let (message, usage) = message(&chunks);
        assert_eq!(
            message.content,
            vec![
                crate::event::ContentBlock::Reasoning { text: "**Refining**".into(), signature: None },
                crate::event::ContentBlock::text("Yesterday was 2025-11-10.\n"),
                crate::event::ContentBlock::ToolCall {
                    // Unique across the session's responses: the response's id is in it.
                    id: "gemini_call_r1_0".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city": "shanghai"}"#.into(),
                    signature: Some("EjQK".into()),
                },
            ]
        );
        let usage = usage.unwrap();
        assert_eq!((usage.prompt_tokens, usage.completion_tokens, usage.total_tokens), (391, 145, 536));
        assert_eq!(usage.reasoning_tokens, Some(102));
    }

    #[test]
    fn safety_stops_and_blocked_prompts_end_the_step_and_errors_name_their_code() {
        let (_, safety) = read(&[
            r#"{"candidates": [{"content": {"parts": [{"text": "Sure, here is"}]}}]}"#,
            r#"{"candidates": [{"finishReason": "SAFETY","index": 0}]}"#,
        ]);
        let Chunk::Finish { reason: FinishReason::Error { failure }, .. } = safety.unwrap().unwrap() else { panic!() };
        assert_eq!(failure.code, ErrorCode::InvalidRequest);
        assert!(failure.message.contains("SAFETY"), "{failure:?}");
        let (_, blocked) = read(&[
            r#"{"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},"usageMetadata": {"promptTokenCount": 7,"totalTokenCount": 7}}"#,
        ]);
        let Chunk::Finish { reason: FinishReason::Error { failure }, .. } = blocked.unwrap().unwrap() else { panic!() };
        assert!(failure.message.contains("PROHIBITED_CONTENT"));
        let (_, error) = read(&[
            r#"{"candidates": [{"content": {"parts": [{"text": "partial"}]}}]}"#,
            r#"{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}"#,
        ]);
        let failure = error.unwrap_err();
        assert_eq!((failure.code, failure.status), (ErrorCode::Server, Some(503)));
        assert!(
            matches!(crate::llm::reading::Reader::new(crate::llm::WireFormat::Gemini).on_end(5), FinishReason::Error { failure } if failure.code == ErrorCode::StreamClosed)
        );
        let (_, max) =
            read(&[r#"{"candidates": [{"content": {"parts": [{"text": "We"}]},"finishReason": "MAX_TOKENS"}]}"#]);
        assert_eq!(max.unwrap().unwrap(), Chunk::finish(FinishReason::MaxTokens));
    }

    #[test]
    fn a_calls_arguments_are_kept_as_written() {
        let (chunks, _) = read(&[
            r#"{"candidates": [{"content": {"parts": [{"functionCall": {"name": "pay", "args": {"to": "b", "amount_minor": 12345678901234567890123}}}],"role": "model"},"finishReason": "STOP","index": 0}]}"#,
        ]);
        let (message, _) = message(&chunks);
        let arguments = message.tool_calls().next().map(|(_, _, arguments)| arguments.to_owned());
        assert_eq!(arguments.as_deref(), Some(r#"{"to": "b", "amount_minor": 12345678901234567890123}"#));
    }
}
