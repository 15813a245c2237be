//! The conversation the model sees, rebuilt from committed records: user messages, assistant
//! messages (text and tool calls; reasoning is not sent back) and tool results — including
//! repair closers, which the model reads as ordinary results.

use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::event::{ContentBlock, Event, Message, Record, RequestPrefix};

/// The OpenAI-shaped messages of a session so far, each encoded once as it is absorbed: every
/// request of a session sends the whole conversation again, and escaping each message anew
/// per request made a long session's requests quadratic in its text.
#[derive(Debug, Clone, Default)]
pub struct History {
    messages: Vec<Box<RawValue>>,
    /// The last request prefix written to the log.
    pub last_header: Option<RequestPrefix>,
    /// The last turn number started.
    pub last_turn: u32,
}

fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|b| if let ContentBlock::Text { text } = b { Some(text.as_str()) } else { None })
        .collect::<Vec<_>>()
        .join("\n")
}

impl History {
    /// Replays committed records.
    pub fn from_records(records: &[Record]) -> Self {
        let mut history = Self::default();
        for record in records {
            history.absorb(&record.event);
        }
        history
    }

    /// Absorbs one event as it is committed.
    pub fn absorb(&mut self, event: &Event) {
        match event {
            Event::TurnStart(start) => self.last_turn = start.turn,
            Event::UserMessage(user) => self.push_user(&user.message),
            Event::RequestHeader(header) => self.last_header = Some(header.header.clone()),
            Event::AssistantMessage(message) => self.push_assistant(&message.message),
            Event::ToolResult(result) => {
                self.push(json!({"role": "tool", "tool_call_id": result.call_id, "content": text_of(&result.content)}));
            }
            _ => {}
        }
    }

    fn push(&mut self, message: Value) {
        self.messages.push(serde_json::value::to_raw_value(&message).expect("JSON values serialise"));
    }

    fn push_user(&mut self, message: &Message) {
        self.push(json!({"role": "user", "content": text_of(&message.content)}));
    }

    fn push_assistant(&mut self, message: &Message) {
        let text = text_of(&message.content);
        let mut value =
            json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
        let calls: Vec<Value> = message
            .tool_calls()
            .map(|(id, name, arguments)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}))
            .collect();
        if !calls.is_empty() {
            value["tool_calls"] = Value::Array(calls);
        }
        self.push(value);
    }

    /// The messages, encoded, in order: what a request sends.
    pub(crate) fn encoded(&self) -> &[Box<RawValue>] {
        &self.messages
    }

    /// The messages, decoded, in order (for a reader; a request sends them as encoded once).
    pub fn messages(&self) -> Vec<Value> {
        self.messages.iter().map(|m| serde_json::from_str(m.get()).expect("encoded from a Value")).collect()
    }
}
