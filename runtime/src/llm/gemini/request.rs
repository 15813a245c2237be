//! A conversation as Gemini's `streamGenerateContent` takes it: `contents` of `user` and
//! `model` turns (consecutive entries of one side in one turn), a function call's response
//! named after the call and counted one for one, the `thoughtSignature` of each call sent back
//! on its own part, the system prompt as `systemInstruction` and tools as
//! `functionDeclarations` with their JSON Schema.
//!
//! Keys are written in sorted order, as everywhere in the runtime's requests.

use bytes::Bytes;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use crate::event::{RequestPrefix, ToolSchema};
use crate::llm::config::ResolvedProvider;
use crate::llm::conversation::{name_of_call, Entry};

/// The exact bytes of one streaming request (the model is in its path, not its body).
pub(crate) fn request_body(route: &ResolvedProvider, prefix: &RequestPrefix, entries: &[Entry]) -> Bytes {
    let generation = (route.max_tokens.is_some() || route.thinking_budget_tokens.is_some()).then(|| Generation {
        max_output_tokens: route.max_tokens,
        thinking_config: route
            .thinking_budget_tokens
            .map(|thinking_budget| ThinkingConfig { include_thoughts: true, thinking_budget }),
    });
    let body = Body {
        contents: Contents(entries),
        generation_config: generation,
        system_instruction: prefix.system.as_deref().map(|text| System { parts: [TextPart { text }] }),
        tools: (!prefix.tools.is_empty()).then_some([Declarations { function_declarations: Tools(&prefix.tools) }]),
    };
    Bytes::from(serde_json::to_vec(&body).expect("request bodies always serialise"))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    contents: Contents<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation_config: Option<Generation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<System<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<[Declarations<'a>; 1]>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Generation {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_config: Option<ThinkingConfig>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ThinkingConfig {
    include_thoughts: bool,
    thinking_budget: u32,
}

#[derive(Serialize)]
struct System<'a> {
    parts: [TextPart<'a>; 1],
}

#[derive(Serialize)]
struct TextPart<'a> {
    text: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Declarations<'a> {
    function_declarations: Tools<'a>,
}

struct Tools<'a>(&'a [ToolSchema]);

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Declaration<'a> {
    description: &'a str,
    name: &'a str,
    parameters_json_schema: &'a serde_json::Value,
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|t| Declaration {
            description: &t.description,
            name: &t.name,
            parameters_json_schema: &t.parameters,
        }))
    }
}

/// The turns: consecutive entries of one side make one turn (Gemini wants the sides to
/// alternate), and an entry with nothing to send is left out.
struct Contents<'a>(&'a [Entry]);

impl Serialize for Contents<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let sending: Vec<(usize, &Entry)> = self.0.iter().enumerate().filter(|(_, e)| has_parts(e)).collect();
        let mut seq = serializer.serialize_seq(None)?;
        for group in sending.chunk_by(|(_, a), (_, b)| a.is_user_side() == b.is_user_side()) {
            let role = if group[0].1.is_user_side() { "user" } else { "model" };
            seq.serialize_element(&Content { all: self.0, group, role })?;
        }
        seq.end()
    }
}

fn has_parts(entry: &Entry) -> bool {
    match entry {
        Entry::User { text } => text.get() != "\"\"",
        Entry::Tool { .. } => true,
        Entry::Assistant(a) => a.text.is_some() || a.refusal.is_some() || !a.calls.is_empty(),
    }
}

struct Content<'a> {
    all: &'a [Entry],
    group: &'a [(usize, &'a Entry)],
    role: &'static str,
}

impl Serialize for Content<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("parts", &Parts { all: self.all, group: self.group })?;
        map.serialize_entry("role", self.role)?;
        map.end()
    }
}

struct Parts<'a> {
    all: &'a [Entry],
    group: &'a [(usize, &'a Entry)],
}

impl Serialize for Parts<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        for (at, entry) in self.group {
            match entry {
                Entry::User { text } => seq.serialize_element(&RawText { text })?,
                Entry::Tool { call_id, text, is_error } => {
                    let id = (!call_id.starts_with(crate::llm::conversation::SYNTHESISED_CALL_ID_PREFIX))
                        .then_some(&**call_id);
                    let name = name_of_call(self.all, *at, call_id).unwrap_or("unknown_tool");
                    let response = if *is_error {
                        Outcome { error: Some(text), result: None }
                    } else {
                        Outcome { error: None, result: Some(text) }
                    };
                    seq.serialize_element(&ResponsePart {
                        function_response: FunctionResponse { id, name, response },
                    })?;
                }
                Entry::Assistant(assistant) => {
                    for text in assistant.text.iter().chain(assistant.refusal.iter()) {
                        seq.serialize_element(&RawText { text })?;
                    }
                    for call in &assistant.calls {
                        seq.serialize_element(&CallPart {
                            function_call: FunctionCall {
                                args: &call.object,
                                id: call.provider_id(),
                                name: &call.name,
                            },
                            thought_signature: call.signature.as_deref(),
                        })?;
                    }
                }
            }
        }
        seq.end()
    }
}

#[derive(Serialize)]
struct RawText<'a> {
    text: &'a RawValue,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponsePart<'a> {
    function_response: FunctionResponse<'a>,
}

#[derive(Serialize)]
struct FunctionResponse<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    name: &'a str,
    response: Outcome<'a>,
}

/// A response is an object: the tool's text under `result`, or under `error` for a failure.
#[derive(Serialize)]
struct Outcome<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a RawValue>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CallPart<'a> {
    function_call: FunctionCall<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<&'a str>,
}

#[derive(Serialize)]
struct FunctionCall<'a> {
    args: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    name: &'a str,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::{ContentBlock, Message, Role};

    #[test]
    fn calls_and_their_responses_alternate_with_signatures_and_names() {
        let config: crate::llm::ProviderConfig =
            toml::from_str("preset = \"gemini\"\nmodel = \"gemini-2.5-flash\"").unwrap();
        let route = config.resolve("provider").unwrap();
        let schema =
            ToolSchema { name: "get_weather".into(), description: "d".into(), parameters: json!({"type": "object"}) };
        let prefix =
            RequestPrefix { model: "gemini-2.5-flash".into(), system: Some("be brief".into()), tools: vec![schema] };
        let assistant = |content| Entry::assistant(&Message { role: Role::Assistant, content });
        let entries = vec![
            Entry::user(&Message::user_text("weather?")),
            assistant(vec![
                ContentBlock::Reasoning { text: "thought, not sent back".into(), signature: None },
                ContentBlock::ToolCall {
                    id: "gemini_call_0".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"city":"Paris"}"#.into(),
                    signature: Some("CikB0e2K".into()),
                },
                ContentBlock::tool_call("call_7", "get_weather", r#"{"city":"Rome"}"#),
            ]),
            Entry::tool("gemini_call_0", &[ContentBlock::text("20C")], false),
            Entry::tool("call_7", &[ContentBlock::text("no such city")], true),
            Entry::user(&Message::user_text("thanks")),
        ];
        let body: serde_json::Value = serde_json::from_slice(&request_body(&route, &prefix, &entries)).unwrap();
        assert_eq!(
            body,
            json!({
                "contents": [
                    {"role": "user", "parts": [{"text": "weather?"}]},
                    {"role": "model", "parts": [
                        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "CikB0e2K"},
                        {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}, "id": "call_7"}},
                    ]},
                    {"role": "user", "parts": [
                        {"functionResponse": {"name": "get_weather", "response": {"result": "20C"}}},
                        {"functionResponse": {"name": "get_weather", "id": "call_7", "response": {"error": "no such city"}}},
                        {"text": "thanks"},
                    ]},
                ],
                "systemInstruction": {"parts": [{"text": "be brief"}]},
                "tools": [{"functionDeclarations": [{"name": "get_weather", "description": "d", "parametersJsonSchema": {"type": "object"}}]}],
            })
        );
    }
}
