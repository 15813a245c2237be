//! The request body of a streaming chat completion (OpenAI's format), and the one door every
//! format's request goes through ([`request_body`]).

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::config::ResolvedProvider;
use super::conversation::{AssistantEntry, Entry};
use super::format::WireFormat;
use crate::event::{RequestPrefix, ToolSchema};

/// The body of a conversation of one user message, `prompt`, in `route`'s format (what
/// `faultline llm stream` and the conformance referees send).
pub fn prompt_body(route: &ResolvedProvider, prefix: &RequestPrefix, prompt: &str) -> Bytes {
    request_body(route, prefix, &[Entry::User { text: super::conversation::escape(prompt) }])
}

/// The exact bytes of one request of `route`'s format: the request prefix (model, system
/// prompt, tools) and the conversation. Built once per attempt from the same inputs, so a
/// retry re-sends identical bytes.
pub(crate) fn request_body(route: &ResolvedProvider, prefix: &RequestPrefix, entries: &[Entry]) -> Bytes {
    match route.preset.format() {
        WireFormat::Openai => openai_body(prefix, route.max_tokens, entries),
        WireFormat::Anthropic => super::anthropic::request_body(route, prefix, entries),
        WireFormat::Gemini => super::gemini::request_body(route, prefix, entries),
    }
}

/// The conversation in OpenAI's shape, one message per entry.
fn openai_view(entries: &[Entry]) -> Vec<OpenaiMessage<'_>> {
    entries.iter().map(OpenaiMessage).collect()
}

fn openai_body(prefix: &RequestPrefix, max_tokens: Option<u32>, entries: &[Entry]) -> Bytes {
    chat_body_with(prefix, max_tokens, &openai_view(entries))
}

/// The conversation in OpenAI's shape, decoded (for readers and tests).
pub(crate) fn openai_messages(entries: &[Entry]) -> Vec<Value> {
    openai_view(entries).iter().map(|m| serde_json::to_value(m).expect("a message serialises")).collect()
}

/// One entry as the chat API reads it. Fields are written in the order a JSON object's keys
/// sort in (how the `Value` trees this replaced wrote them), so the bytes a request sends did
/// not change: `{"content":…,"refusal":…,"role":…,"tool_call_id":…,"tool_calls":[…]}`.
struct OpenaiMessage<'a>(&'a Entry);

#[derive(Serialize)]
struct WireMessage<'a> {
    /// `null` for an assistant message that only calls tools (or only refuses).
    content: Option<&'a RawValue>,
    /// An assistant message's refusal, as OpenAI sent it (and takes back).
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'a RawValue>,
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireCall<'a>>,
}

#[derive(Serialize)]
struct WireCall<'a> {
    function: WireFunction<'a>,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    arguments: &'a RawValue,
    name: &'a str,
}

impl Serialize for OpenaiMessage<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let message = match self.0 {
            Entry::User { text } => WireMessage {
                content: Some(text),
                refusal: None,
                role: "user",
                tool_call_id: None,
                tool_calls: Vec::new(),
            },
            Entry::Tool { call_id, text, .. } => WireMessage {
                content: Some(text),
                refusal: None,
                role: "tool",
                tool_call_id: Some(call_id),
                tool_calls: Vec::new(),
            },
            Entry::Assistant(AssistantEntry { text, refusal, calls, .. }) => WireMessage {
                content: text.as_deref(),
                refusal: refusal.as_deref(),
                role: "assistant",
                tool_call_id: None,
                tool_calls: calls
                    .iter()
                    .map(|c| WireCall {
                        function: WireFunction { arguments: &c.arguments, name: &c.name },
                        id: &c.id,
                        kind: "function",
                    })
                    .collect(),
            },
        };
        message.serialize(serializer)
    }
}

/// The exact bytes of one request: `stream: true`, usage in the stream, function tools.
/// `messages` are already in the OpenAI shape (`role`, `content`, `tool_calls`,
/// `tool_call_id`). Built once per attempt from the same inputs, so a retry re-sends
/// identical bytes.
///
/// Serialised straight from borrowed parts: building a `serde_json::Value` tree cloned every
/// message of the conversation per attempt first (a resumed session's tool outputs run to
/// hundreds of KiB). Keys are declared in the order a `Value` object writes them (sorted), so
/// the bytes are what they always were (`typed_body_is_the_value_trees_bytes`).
pub fn chat_body(prefix: &RequestPrefix, messages: &[Value]) -> Bytes {
    chat_body_of(prefix, messages)
}

/// [`chat_body`] of anything that serialises to one message each: the agent's history keeps
/// its messages encoded once (`RawValue`), written verbatim.
pub(crate) fn chat_body_of<M: Serialize>(prefix: &RequestPrefix, messages: &[M]) -> Bytes {
    chat_body_with(prefix, None, messages)
}

/// The chat body, with `max_tokens` when the route sets one.
fn chat_body_with<M: Serialize>(prefix: &RequestPrefix, max_tokens: Option<u32>, messages: &[M]) -> Bytes {
    let body = ChatBody {
        max_tokens,
        messages: Messages { system: prefix.system.as_deref(), rest: messages },
        model: &prefix.model,
        stream: true,
        stream_options: StreamOptions { include_usage: true },
        tools: (!prefix.tools.is_empty()).then_some(Tools(&prefix.tools)),
    };
    Bytes::from(serde_json::to_vec(&body).expect("request bodies always serialise"))
}

#[derive(Serialize)]
struct ChatBody<'a, M> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    messages: Messages<'a, M>,
    model: &'a str,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Tools<'a>>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// The system prompt (when there is one) as the first message, then the conversation.
struct Messages<'a, M> {
    system: Option<&'a str>,
    rest: &'a [M],
}

impl<M: Serialize> Serialize for Messages<'_, M> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.rest.len() + usize::from(self.system.is_some())))?;
        if let Some(system) = self.system {
            seq.serialize_element(&SystemMessage { content: system, role: "system" })?;
        }
        for message in self.rest {
            seq.serialize_element(message)?;
        }
        seq.end()
    }
}

#[derive(Serialize)]
struct SystemMessage<'a> {
    content: &'a str,
    role: &'static str,
}

/// The tool schemas as OpenAI function tools.
pub(super) struct Tools<'a>(pub(super) &'a [ToolSchema]);

impl Serialize for Tools<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|tool| FunctionTool {
            function: Function { description: &tool.description, name: &tool.name, parameters: &tool.parameters },
            kind: "function",
        }))
    }
}

#[derive(Serialize)]
struct FunctionTool<'a> {
    function: Function<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct Function<'a> {
    description: &'a str,
    name: &'a str,
    parameters: &'a Value,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// What `chat_body` wrote before it was typed: a `Value` tree, serialised.
    fn value_tree_body(prefix: &RequestPrefix, messages: &[Value]) -> Vec<u8> {
        let mut all = Vec::new();
        if let Some(system) = &prefix.system {
            all.push(json!({"role": "system", "content": system}));
        }
        all.extend(messages.iter().cloned());
        let mut body = json!({
            "model": prefix.model,
            "messages": all,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !prefix.tools.is_empty() {
            let tools: Vec<Value> = prefix
                .tools
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
                .collect();
            body["tools"] = Value::Array(tools);
        }
        serde_json::to_vec(&body).expect("values serialise")
    }

    #[test]
    fn typed_body_is_the_value_trees_bytes() {
        let tool = ToolSchema {
            name: "search \"web\"".into(),
            description: "finds\nthings".into(),
            parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        };
        let messages = [
            json!({"role": "user", "content": "hi \u{1} é"}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "s", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "ok"}),
        ];
        for system in [None, Some("be brief".to_owned())] {
            for tools in [vec![], vec![tool.clone(), tool.clone()]] {
                let prefix = RequestPrefix { model: "m\"1".into(), system: system.clone(), tools };
                for messages in [&messages[..], &[]] {
                    let expected = value_tree_body(&prefix, messages);
                    assert_eq!(
                        chat_body(&prefix, messages).as_ref(),
                        expected.as_slice(),
                        "system {system:?}, {} tools, {} messages",
                        prefix.tools.len(),
                        messages.len()
                    );
                    // Messages encoded once, as the history keeps them: the same bytes.
                    let encoded: Vec<Box<serde_json::value::RawValue>> =
                        messages.iter().map(|m| serde_json::value::to_raw_value(m).unwrap()).collect();
                    assert_eq!(chat_body_of(&prefix, &encoded).as_ref(), expected.as_slice());
                }
            }
        }
    }
}
