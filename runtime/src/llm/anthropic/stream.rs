//! Anthropic's event stream read into chunks: `message_start`, content blocks (text,
//! `tool_use` with its `input_json_delta` fragments, `thinking` with its `signature_delta`,
//! `redacted_thinking`), `message_delta` with the stop reason and running usage, then
//! `message_stop`. A `ping` proves the connection, not progress; an `error` event after the
//! 200 is the failure it names, never a quiet end; a stream that stops before
//! `message_stop` is `STREAM_CLOSED`.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::event::{BlockKind, Chunk, ErrorCode, Failure, FinishReason, Usage};
use crate::llm::step::Step;

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    message: Option<MessageStart>,
    #[serde(default)]
    content_block: Option<BlockStart>,
    #[serde(default)]
    delta: Option<serde_json::Value>,
    #[serde(default)]
    usage: Option<ApiUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

/// A `content_block_start`'s block. A tool call's `input` is kept as the provider wrote it:
/// its keys in their order, its numbers as written (a large id is not rounded).
#[derive(Deserialize)]
struct BlockStart {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    text: String,
    #[serde(default)]
    thinking: String,
    #[serde(default)]
    signature: String,
    #[serde(default)]
    data: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    input: Option<Box<serde_json::value::RawValue>>,
}

#[derive(Deserialize)]
struct MessageStart {
    #[serde(default)]
    usage: Option<ApiUsage>,
}

/// Anthropic's usage: `message_start` carries the input side, `message_delta` running totals
/// that overwrite what they name.
#[derive(Deserialize, Default, Clone, Copy)]
struct ApiUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl ApiUsage {
    fn overwrite(&mut self, later: &ApiUsage) {
        let keep = |mine: &mut Option<u64>, theirs: Option<u64>| {
            if theirs.is_some() {
                *mine = theirs;
            }
        };
        keep(&mut self.input_tokens, later.input_tokens);
        keep(&mut self.output_tokens, later.output_tokens);
        keep(&mut self.cache_creation_input_tokens, later.cache_creation_input_tokens);
        keep(&mut self.cache_read_input_tokens, later.cache_read_input_tokens);
    }

    /// As the runtime counts: the prompt is everything read, cached or not.
    fn usage(self) -> Usage {
        let (written, read) = (self.cache_creation_input_tokens, self.cache_read_input_tokens);
        // Counts off the network: a hostile one saturates, never overflows.
        let prompt =
            self.input_tokens.unwrap_or(0).saturating_add(written.unwrap_or(0)).saturating_add(read.unwrap_or(0));
        let completion = self.output_tokens.unwrap_or(0);
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt.saturating_add(completion),
            reasoning_tokens: None,
            cache_hit_tokens: read,
            cache_miss_tokens: None,
            cache_write_tokens: written,
        }
    }
}

/// A block of the provider's, as this reader keeps it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Thinking,
    Redacted,
    ToolUse,
    /// A block type this reader does not know: its deltas are read past.
    Other,
}

/// One of the provider's blocks, as this reader keeps it.
#[derive(Clone, Copy)]
struct Block {
    /// Our block index.
    ours: u32,
    kind: Kind,
    /// A tool call's input arrived (whole at the start, or in fragments).
    had_arguments: bool,
    /// Started and not yet stopped: only an open block takes deltas.
    open: bool,
}

/// The reader of one attempt's stream.
#[derive(Default)]
pub(crate) struct Reader {
    started: bool,
    next_index: u32,
    /// The provider's block index → the block.
    blocks: BTreeMap<u32, Block>,
    usage: Option<ApiUsage>,
    stop_reason: Option<String>,
    /// What a refusal stop said of itself (`stop_details`).
    refusal: Option<String>,
    saw_content: bool,
    saw_tool: bool,
}

impl Reader {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Reads one `data:` payload.
    pub(crate) fn on_data(&mut self, data: &str, out: &mut Vec<Chunk>) -> Result<Step, Failure> {
        let event: Event = serde_json::from_str(data)
            .map_err(|e| Failure::new(ErrorCode::MalformedResponse, format!("undecodable stream event: {e}")))?;
        match event.kind.as_str() {
            "ping" => return Ok(Step::Ping),
            "error" if crate::testing::bugs::planted("error-event-as-end") => return Ok(Step::Done(self.finish(out))),
            "error" => return Err(mid_stream_failure(event.error.as_ref())),
            "message_start" => {
                self.started = true;
                self.usage = event.message.and_then(|m| m.usage);
                return Ok(Step::More);
            }
            _ if !self.started => {
                return Err(Failure::new(
                    ErrorCode::MalformedResponse,
                    format!("a {} event before message_start", crate::llm::classify::bounded(&event.kind)),
                ))
            }
            "content_block_start" => self.block_start(event.index, event.content_block, out)?,
            "content_block_delta" => self.block_delta(event.index, event.delta, out)?,
            "content_block_stop" => self.block_stop(event.index, out)?,
            "message_delta" => {
                let delta = event.delta.unwrap_or_default();
                if let Some(reason) = delta.get("stop_reason").and_then(|r| r.as_str()) {
                    self.stop_reason = Some(reason.to_owned());
                }
                let details = delta.get("stop_details");
                let said = |key: &str| details.and_then(|d| d.get(key)).and_then(|v| v.as_str()).map(str::to_owned);
                self.refusal = said("explanation").or_else(|| said("category"));
                if let Some(later) = event.usage {
                    self.usage.get_or_insert_with(ApiUsage::default).overwrite(&later);
                }
            }
            "message_stop" => return Ok(Step::Done(self.finish(out))),
            // New event types may be added; a reader ignores what it does not know.
            _ => {}
        }
        Ok(Step::More)
    }

    fn open_block(&mut self, theirs: u32, kind: Kind, out: &mut Vec<Chunk>) -> u32 {
        let index = self.next_index;
        let ours = match kind {
            Kind::Text => BlockKind::Text,
            Kind::Thinking => BlockKind::Reasoning,
            Kind::Redacted => BlockKind::RedactedReasoning,
            Kind::ToolUse => BlockKind::ToolCall,
            Kind::Other => {
                self.blocks.insert(theirs, Block { ours: u32::MAX, kind, had_arguments: false, open: true });
                return u32::MAX;
            }
        };
        self.next_index += 1;
        self.blocks.insert(theirs, Block { ours: index, kind, had_arguments: false, open: true });
        // A call or an encrypted thought is content by itself; text is when it says something.
        self.saw_content |= matches!(kind, Kind::ToolUse | Kind::Redacted);
        out.push(Chunk::BlockStart { index, kind: ours });
        index
    }

    fn block_start(
        &mut self,
        theirs: Option<u32>,
        block: Option<BlockStart>,
        out: &mut Vec<Chunk>,
    ) -> Result<(), Failure> {
        let (theirs, block) =
            theirs.zip(block).ok_or_else(|| malformed("content_block_start without index or block"))?;
        if self.blocks.contains_key(&theirs) {
            return Err(malformed(&format!("block {theirs} started twice")));
        }
        let kind = match block.kind.as_str() {
            "text" => Kind::Text,
            "thinking" => Kind::Thinking,
            "redacted_thinking" => Kind::Redacted,
            "tool_use" => Kind::ToolUse,
            _ => Kind::Other,
        };
        let index = self.open_block(theirs, kind, out);
        match kind {
            Kind::Text if !block.text.is_empty() => {
                self.saw_content = true;
                out.push(Chunk::TextDelta { index, text: block.text });
            }
            Kind::Thinking => {
                if !block.thinking.is_empty() {
                    self.saw_content = true;
                    out.push(Chunk::ReasoningDelta { index, text: block.thinking });
                }
                if !block.signature.is_empty() {
                    out.push(Chunk::SignatureDelta { index, signature: block.signature });
                }
            }
            Kind::Redacted => out.push(Chunk::SignatureDelta { index, signature: block.data }),
            Kind::ToolUse => {
                self.saw_tool = true;
                out.push(Chunk::ToolCallDelta {
                    index,
                    id: Some(block.id),
                    name: Some(block.name),
                    arguments_delta: String::new(),
                });
                // An input given whole at the start (not streamed) is the call's arguments,
                // byte for byte; the usual `{}` placeholder before the fragments is not.
                let given = block.input.map(|raw| raw.get().trim().to_owned()).filter(|raw| {
                    raw.starts_with('{') && raw[1..raw.len() - 1].bytes().any(|b| !b.is_ascii_whitespace())
                });
                if let Some(input) = given {
                    self.blocks.entry(theirs).and_modify(|b| b.had_arguments = true);
                    out.push(Chunk::ToolCallDelta { index, id: None, name: None, arguments_delta: input });
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn block_delta(
        &mut self,
        theirs: Option<u32>,
        delta: Option<serde_json::Value>,
        out: &mut Vec<Chunk>,
    ) -> Result<(), Failure> {
        let (theirs, delta) =
            theirs.zip(delta).ok_or_else(|| malformed("content_block_delta without index or delta"))?;
        let Some(&Block { ours: index, kind, open, .. }) = self.blocks.get(&theirs) else {
            return Err(malformed(&format!("a delta of block {theirs}, which never started")));
        };
        if !open {
            return Err(malformed(&format!("a delta of block {theirs} after it stopped")));
        }
        let field = |key: &str| delta.get(key).and_then(|v| v.as_str()).map(str::to_owned);
        match (kind, delta.get("type").and_then(|t| t.as_str())) {
            (Kind::Text, Some("text_delta")) => {
                if let Some(text) = field("text").filter(|t| !t.is_empty()) {
                    self.saw_content = true;
                    out.push(Chunk::TextDelta { index, text });
                }
            }
            (Kind::Thinking, Some("thinking_delta")) => {
                if let Some(text) = field("thinking").filter(|t| !t.is_empty()) {
                    self.saw_content = true;
                    out.push(Chunk::ReasoningDelta { index, text });
                }
            }
            (Kind::Thinking, Some("signature_delta")) => {
                if let Some(signature) = field("signature").filter(|s| !s.is_empty()) {
                    out.push(Chunk::SignatureDelta { index, signature });
                }
            }
            (Kind::ToolUse, Some("input_json_delta")) => {
                if let Some(json) = field("partial_json").filter(|j| !j.is_empty()) {
                    self.blocks.entry(theirs).and_modify(|b| b.had_arguments = true);
                    out.push(Chunk::ToolCallDelta { index, id: None, name: None, arguments_delta: json });
                }
            }
            (Kind::Other, _) | (_, Some("citations_delta")) => {}
            (_, other) => {
                return Err(malformed(&format!(
                    "a {} delta in a block that cannot take one",
                    crate::llm::classify::bounded(other.unwrap_or("typeless"))
                )))
            }
        }
        Ok(())
    }

    fn block_stop(&mut self, theirs: Option<u32>, out: &mut Vec<Chunk>) -> Result<(), Failure> {
        let theirs = theirs.ok_or_else(|| malformed("content_block_stop without index"))?;
        let Some(block) = self.blocks.get_mut(&theirs) else {
            return Err(malformed(&format!("block {theirs} stopped without starting")));
        };
        if !block.open {
            return Err(malformed(&format!("block {theirs} stopped twice")));
        }
        block.open = false;
        let Block { ours: index, kind, had_arguments, .. } = *block;
        if kind == Kind::Other {
            return Ok(());
        }
        // A call of a tool that takes no arguments streams none: its input is `{}`.
        if kind == Kind::ToolUse && !had_arguments {
            out.push(Chunk::ToolCallDelta { index, id: None, name: None, arguments_delta: "{}".into() });
        }
        out.push(Chunk::BlockEnd { index });
        Ok(())
    }

    /// `message_stop`: the open blocks closed, the usage, and the terminal chunk.
    fn finish(&mut self, out: &mut Vec<Chunk>) -> Chunk {
        if self.stop_reason.as_deref() == Some("refusal") {
            // The provider's own account of the refusal, as its words.
            let text = self.refusal.take().unwrap_or_else(|| "refusal".to_owned());
            let index = self.next_index;
            self.next_index += 1;
            out.extend([
                Chunk::BlockStart { index, kind: BlockKind::Refusal },
                Chunk::RefusalDelta { index, text },
                Chunk::BlockEnd { index },
            ]);
            self.saw_content = true;
        }
        let mut open: Vec<u32> =
            self.blocks.values_mut().filter(|b| b.open && b.kind != Kind::Other).map(|b| b.ours).collect();
        open.sort_unstable();
        for index in open {
            out.push(Chunk::BlockEnd { index });
        }
        self.blocks.values_mut().for_each(|b| b.open = false);
        if let Some(usage) = self.usage {
            out.push(Chunk::Usage { usage: usage.usage() });
        }
        let reason = match self.stop_reason.as_deref() {
            Some("tool_use") => FinishReason::ToolCalls,
            // A valid answer cut short, by the answer budget or by the context window (the
            // stop-reasons guide: "the response is valid but was capped").
            Some("max_tokens" | "model_context_window_exceeded") => FinishReason::MaxTokens,
            None if self.saw_tool => FinishReason::ToolCalls,
            _ if !self.saw_content => FinishReason::Error {
                failure: Failure::new(ErrorCode::EmptyResponse, "the stream completed without any content"),
            },
            // end_turn, stop_sequence, pause_turn, refusal (its words are the answer).
            _ => FinishReason::Stop,
        };
        let inferred = self.stop_reason.is_none() && reason.failure().is_none();
        Chunk::Finish { reason, inferred }
    }
}

fn malformed(what: &str) -> Failure {
    Failure::new(ErrorCode::MalformedResponse, what)
}

/// An `error` event after the 200: the code its type names (`overloaded_error` is a server
/// fault worth a retry), never a quiet end of the answer.
fn mid_stream_failure(error: Option<&serde_json::Value>) -> Failure {
    let message = error.and_then(|e| e.get("message")).and_then(|m| m.as_str()).unwrap_or("error event in the stream");
    let kind = error.and_then(|e| e.get("type")).and_then(|t| t.as_str()).unwrap_or_default();
    let code = super::code_of_type(kind, message).unwrap_or(ErrorCode::Server);
    let named = if kind.is_empty() { String::new() } else { format!(" ({})", crate::llm::classify::bounded(kind)) };
    let message = crate::llm::classify::bounded(message);
    Failure::new(code, format!("provider reported an error mid-stream{named}: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(events: &[&str]) -> (Vec<Chunk>, Result<Option<Chunk>, Failure>) {
        let mut reader = Reader::new();
        crate::llm::step::read_events(|data, out| reader.on_data(data, out), events)
    }

    const START: &str = r#"{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":377,"cache_creation_input_tokens":3,"cache_read_input_tokens":20,"output_tokens":1}}}"#;

    #[test]
    fn a_tool_use_stream_reads_into_a_call_with_its_arguments_joined() {
        let (chunks, finish) = read(&[
            START,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type": "ping"}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Checking."}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"P"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"aris\"}"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":65}}"#,
            r#"{"type":"message_stop"}"#,
        ]);
        let mut assembler = crate::llm::assembler::Assembler::new();
        for chunk in &chunks {
            assembler.push(chunk);
        }
        let (message, usage) = assembler.finish();
        assert_eq!(finish.unwrap().unwrap(), Chunk::finish(FinishReason::ToolCalls));
        assert_eq!(message.tool_calls().collect::<Vec<_>>(), [("toolu_1", "get_weather", r#"{"city": "Paris"}"#)]);
        let usage = usage.unwrap();
        assert_eq!((usage.prompt_tokens, usage.completion_tokens, usage.cache_hit_tokens), (400, 65, Some(20)));
        assert_eq!(usage.cache_write_tokens, Some(3));
    }

    #[test]
    fn thinking_keeps_its_signature_and_redacted_thinking_its_data() {
        let (chunks, finish) = read(&[
            START,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"To calculate"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"ErUBCkYI=="}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwKAhgB"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"42"}}"#,
            r#"{"type":"content_block_stop","index":2}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#,
            r#"{"type":"message_stop"}"#,
        ]);
        assert_eq!(finish.unwrap().unwrap(), Chunk::finish(FinishReason::Stop));
        let mut assembler = crate::llm::assembler::Assembler::new();
        chunks.iter().for_each(|c| drop(assembler.push(c)));
        let (message, _) = assembler.finish();
        assert_eq!(
            message.content,
            vec![
                crate::event::ContentBlock::Reasoning {
                    text: "To calculate".into(),
                    signature: Some("ErUBCkYI==".into())
                },
                crate::event::ContentBlock::RedactedReasoning { data: "EmwKAhgB".into() },
                crate::event::ContentBlock::text("42"),
            ]
        );
    }

    #[test]
    fn an_error_event_after_the_200_is_the_failure_it_names_and_a_cut_stream_is_closed() {
        let (_, failed) = read(&[
            START,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"partial"}}"#,
            r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
        ]);
        let failure = failed.unwrap_err();
        assert_eq!(failure.code, ErrorCode::Server);
        assert!(failure.message.contains("overloaded_error") && failure.message.contains("Overloaded"), "{failure:?}");
        let (_, rate) = read(&[START, r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}"#]);
        assert_eq!(rate.unwrap_err().code, ErrorCode::RateLimit);
        let reader = crate::llm::reading::Reader::new(crate::llm::WireFormat::Anthropic);
        assert!(
            matches!(reader.on_end(10), FinishReason::Error { failure } if failure.code == ErrorCode::StreamClosed && failure.message.contains("message_stop"))
        );
    }

    #[test]
    fn a_refusal_stop_keeps_the_providers_words() {
        let (chunks, finish) = read(&[
            START,
            r#"{"type":"message_delta","delta":{"stop_reason":"refusal","stop_details":{"type":"refusal","category":"cyber","explanation":"This request was refused due to policy."}},"usage":{"output_tokens":0}}"#,
            r#"{"type":"message_stop"}"#,
        ]);
        assert_eq!(finish.unwrap().unwrap(), Chunk::finish(FinishReason::Stop));
        assert!(
            chunks.contains(&Chunk::RefusalDelta { index: 0, text: "This request was refused due to policy.".into() })
        );
    }

    #[test]
    fn events_before_message_start_and_deltas_of_unknown_blocks_are_malformed() {
        let (_, early) = read(&[r#"{"type":"content_block_start","index":0,"content_block":{"type":"text"}}"#]);
        assert_eq!(early.unwrap_err().code, ErrorCode::MalformedResponse);
        let (_, unknown) =
            read(&[START, r#"{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"x"}}"#]);
        assert_eq!(unknown.unwrap_err().code, ErrorCode::MalformedResponse);
        let (_, ignored) = read(&[START, r#"{"type":"brand_new_event"}"#]);
        assert!(ignored.is_ok());
    }

    #[test]
    fn a_whole_input_is_kept_as_written_and_a_block_takes_nothing_after_its_stop() {
        let start = r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{"z":1,"a":12345678901234567890123}}}"#;
        let stop = r#"{"type":"content_block_stop","index":0}"#;
        let (chunks, _) = read(&[START, start, stop]);
        let arguments: String = chunks
            .iter()
            .filter_map(|c| {
                if let Chunk::ToolCallDelta { arguments_delta, .. } = c {
                    Some(arguments_delta.as_str())
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(arguments, r#"{"z":1,"a":12345678901234567890123}"#, "keys in order, the number as written");
        let (_, twice) = read(&[START, start, stop, stop]);
        assert!(twice.unwrap_err().message.contains("stopped twice"));
        let late =
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{}"}}"#;
        let (_, after) = read(&[START, start, stop, late]);
        assert!(after.unwrap_err().message.contains("after it stopped"));
    }

    #[test]
    fn an_empty_text_block_is_no_answer_and_hostile_counts_saturate() {
        let empty = [
            START,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":18446744073709551615}}"#,
            r#"{"type":"message_stop"}"#,
        ];
        let (chunks, finish) = read(&empty);
        let Some(Chunk::Finish { reason: FinishReason::Error { failure }, .. }) = finish.unwrap() else {
            panic!("an answer of nothing is EMPTY_RESPONSE")
        };
        assert_eq!(failure.code, ErrorCode::EmptyResponse);
        let usage = chunks.iter().find_map(|c| if let Chunk::Usage { usage } = c { Some(*usage) } else { None });
        assert_eq!(usage.map(|u| u.total_tokens), Some(u64::MAX));
    }
}
