//! A conversation as Anthropic's Messages API takes it: the system prompt beside the
//! messages, tools as `input_schema`, a user turn that begins with every `tool_result` of the
//! assistant turn before it, and signed reasoning sent back exactly as it came.
//!
//! Keys are written in sorted order, as everywhere in the runtime's requests.

use bytes::Bytes;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use crate::event::{RequestPrefix, ToolSchema};
use crate::llm::config::{ResolvedProvider, MAX_TOKENS_DEFAULT};
use crate::llm::conversation::{AssistantEntry, Entry, Reasoning};

/// The `anthropic-version` header every request carries.
pub(crate) const API_VERSION: &str = "2023-06-01";

/// The exact bytes of one streaming request.
pub(crate) fn request_body(route: &ResolvedProvider, prefix: &RequestPrefix, entries: &[Entry]) -> Bytes {
    let body = Body {
        max_tokens: route.max_tokens.unwrap_or(MAX_TOKENS_DEFAULT),
        messages: Messages(entries),
        model: &prefix.model,
        stream: true,
        system: prefix.system.as_deref(),
        thinking: route.thinking_budget_tokens.map(|budget_tokens| Thinking { budget_tokens, kind: "enabled" }),
        tools: (!prefix.tools.is_empty()).then_some(Tools(&prefix.tools)),
    };
    Bytes::from(serde_json::to_vec(&body).expect("request bodies always serialise"))
}

#[derive(Serialize)]
struct Body<'a> {
    max_tokens: u32,
    messages: Messages<'a>,
    model: &'a str,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Tools<'a>>,
}

#[derive(Serialize)]
struct Thinking {
    budget_tokens: u32,
    #[serde(rename = "type")]
    kind: &'static str,
}

struct Tools<'a>(&'a [ToolSchema]);

#[derive(Serialize)]
struct ToolDeclaration<'a> {
    description: &'a str,
    input_schema: &'a serde_json::Value,
    name: &'a str,
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|t| ToolDeclaration {
            description: &t.description,
            input_schema: &t.parameters,
            name: &t.name,
        }))
    }
}

/// The messages: consecutive entries of one side make one message (the API would merge
/// them; merging here keeps every `tool_result` at the start of its user turn), and a side's
/// message with nothing to send is left out (the API refuses empty content).
struct Messages<'a>(&'a [Entry]);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let sending: Vec<&Entry> = self.0.iter().filter(|e| has_content(e)).collect();
        let mut seq = serializer.serialize_seq(None)?;
        for group in sending.chunk_by(|a, b| a.is_user_side() == b.is_user_side()) {
            let role = if group[0].is_user_side() { "user" } else { "assistant" };
            seq.serialize_element(&Message { role, group })?;
        }
        seq.end()
    }
}

/// Whether an entry has a block to send.
fn has_content(entry: &Entry) -> bool {
    match entry {
        Entry::User { text } => !blank(text),
        Entry::Tool { .. } => true,
        Entry::Assistant(a) => a.text.as_deref().is_some_and(|t| !blank(t)) || !a.calls.is_empty(),
    }
}

/// Whether an escaped text is empty or only whitespace (the API refuses such text blocks),
/// however long it is.
fn blank(text: &RawValue) -> bool {
    let raw = text.get();
    let inner = raw.as_bytes().get(1..raw.len().saturating_sub(1)).unwrap_or_default();
    // A text that says something says it early: one printable byte outside an escape decides,
    // with no parse. Only texts of whitespace, escapes and non-ASCII are parsed whole.
    let mut at = 0;
    while at < inner.len() {
        match inner[at] {
            b'\\' => at += if inner.get(at + 1) == Some(&b'u') { 6 } else { 2 },
            b if b.is_ascii_graphic() => return false,
            _ => at += 1,
        }
    }
    serde_json::from_str::<String>(raw).is_ok_and(|t| t.trim().is_empty())
}

struct Message<'a> {
    role: &'static str,
    group: &'a [&'a Entry],
}

impl Serialize for Message<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("content", &Blocks(self.group))?;
        map.serialize_entry("role", self.role)?;
        map.end()
    }
}

struct Blocks<'a>(&'a [&'a Entry]);

impl Serialize for Blocks<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        for entry in self.0 {
            match entry {
                Entry::User { text } => seq.serialize_element(&TextBlock { text, kind: "text" })?,
                Entry::Tool { call_id, text, is_error } => seq.serialize_element(&ToolResultBlock {
                    content: text,
                    is_error: is_error.then_some(true),
                    tool_use_id: call_id,
                    kind: "tool_result",
                })?,
                Entry::Assistant(assistant) => assistant_blocks(assistant, &mut seq)?,
            }
        }
        seq.end()
    }
}

/// An assistant message's blocks in the order the API wants them: its signed reasoning first
/// (exactly as it came), then its text, then its tool calls.
fn assistant_blocks<S: SerializeSeq>(assistant: &AssistantEntry, seq: &mut S) -> Result<(), S::Error> {
    for reasoning in &assistant.reasoning {
        match reasoning {
            Reasoning::Signed { .. } if crate::testing::bugs::planted("signature-dropped") => {}
            Reasoning::Signed { text, signature } => {
                seq.serialize_element(&ThinkingBlock { signature, thinking: text, kind: "thinking" })?;
            }
            Reasoning::Redacted { data } => {
                seq.serialize_element(&RedactedBlock { data, kind: "redacted_thinking" })?
            }
        }
    }
    if let Some(text) = assistant.text.as_deref().filter(|t| !blank(t)) {
        seq.serialize_element(&TextBlock { text, kind: "text" })?;
    }
    // A refusal is not sent back: Anthropic's is its account of the stop (`stop_details`), not
    // words the model wrote, and the API has no block for one; the refused turn is left out,
    // as Anthropic advises after a refusal.
    for call in &assistant.calls {
        seq.serialize_element(&ToolUseBlock { id: &call.id, input: &call.object, name: &call.name, kind: "tool_use" })?;
    }
    Ok(())
}

#[derive(Serialize)]
struct TextBlock<'a> {
    text: &'a RawValue,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct ToolResultBlock<'a> {
    content: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    is_error: Option<bool>,
    tool_use_id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct ThinkingBlock<'a> {
    signature: &'a str,
    thinking: &'a RawValue,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct RedactedBlock<'a> {
    data: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct ToolUseBlock<'a> {
    id: &'a str,
    input: &'a RawValue,
    name: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::{ContentBlock, Message as EventMessage, Role};

    #[test]
    fn a_text_of_whitespace_is_blank_however_long_and_one_printable_byte_is_not() {
        let raw = |text: &str| RawValue::from_string(serde_json::to_string(text).unwrap()).unwrap();
        assert!(blank(&raw("")));
        assert!(blank(&raw(&"\n".repeat(10_000))), "the API refuses it at any length");
        assert!(blank(&raw(" \t\u{b}\u{a0}\r\n")));
        assert!(!blank(&raw(&format!("{}x", " ".repeat(300)))));
        assert!(!blank(&raw("\n\u{1}é")));
    }

    fn route() -> ResolvedProvider {
        let config: crate::llm::ProviderConfig =
            toml::from_str("preset = \"anthropic\"\nmodel = \"claude-x\"\nthinking_budget_tokens = 1024").unwrap();
        config.resolve("provider").unwrap()
    }

    fn assistant(content: Vec<ContentBlock>) -> Entry {
        Entry::assistant(&EventMessage { role: Role::Assistant, content })
    }

    #[test]
    fn tool_results_open_the_next_user_turn_and_signed_reasoning_goes_back_first() {
        let entries = vec![
            Entry::user(&EventMessage::user_text("weather?")),
            assistant(vec![
                ContentBlock::Reasoning { text: "need the tool".into(), signature: Some("SIG==".into()) },
                ContentBlock::Reasoning { text: "unsigned, not sent".into(), signature: None },
                ContentBlock::text("Checking."),
                ContentBlock::tool_call("toolu_1", "get_weather", r#"{"city":"Paris"}"#),
                ContentBlock::tool_call("toolu_2", "get_weather", "not json"),
            ]),
            Entry::tool("toolu_1", &[ContentBlock::text("15C")], false),
            Entry::tool("toolu_2", &[ContentBlock::text("bad arguments")], true),
            Entry::user(&EventMessage::user_text("thanks")),
        ];
        let prefix = RequestPrefix { model: "claude-x".into(), system: Some("be brief".into()), tools: Vec::new() };
        let body: serde_json::Value = serde_json::from_slice(&request_body(&route(), &prefix, &entries)).unwrap();
        assert_eq!(
            body,
            json!({
                "max_tokens": 8192,
                "model": "claude-x",
                "stream": true,
                "system": "be brief",
                "thinking": {"type": "enabled", "budget_tokens": 1024},
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "need the tool", "signature": "SIG=="},
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                        {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "15C"},
                        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "bad arguments", "is_error": true},
                        {"type": "text", "text": "thanks"},
                    ]},
                ]
            })
        );
    }

    #[test]
    fn an_assistant_turn_with_nothing_to_send_is_left_out() {
        let entries = vec![
            Entry::user(&EventMessage::user_text("go")),
            assistant(vec![ContentBlock::Reasoning { text: "only thought".into(), signature: Some("S".into()) }]),
            // A refusal's words are the API's account of the stop, never sent as the model's.
            assistant(vec![ContentBlock::Refusal { text: "This request was refused due to policy.".into() }]),
            Entry::user(&EventMessage::user_text("again")),
        ];
        let prefix = RequestPrefix { model: "claude-x".into(), system: None, tools: Vec::new() };
        let body: serde_json::Value = serde_json::from_slice(&request_body(&route(), &prefix, &entries)).unwrap();
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": [{"type": "text", "text": "go"}, {"type": "text", "text": "again"}]}])
        );
    }
}
