//! The conversation the model sees, rebuilt from committed records: user messages, assistant
//! messages (text, a refusal and tool calls; reasoning is not sent back) and tool results — including
//! repair closers, which the model reads as ordinary results.

use serde_json::value::RawValue;
use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use crate::event::{ContentBlock, Event, Message, Record, RequestPrefix};

/// The OpenAI-shaped messages of a session so far, each encoded once as it is absorbed: every
/// request of a session sends the whole conversation again, and escaping each message anew
/// per request made a long session's requests quadratic in its text.
#[derive(Debug, Clone, Default)]
pub struct History {
    messages: Vec<Box<RawValue>>,
    /// The last assistant message, not encoded yet: encoded when the next message is pushed or
    /// the next request is built, so an answer that ends its turn is never held twice while
    /// its turn is still being written (the log's queue holds the record meanwhile).
    deferred: Option<std::sync::Arc<Record>>,
    /// The last request prefix written to the log.
    pub last_header: Option<RequestPrefix>,
    /// The last turn number started.
    pub last_turn: u32,
}

/// One message as the chat API reads it, borrowed from the record it comes from. Fields are in
/// the order a JSON object's keys sort in (how the `Value` trees these replaced wrote them),
/// so the bytes a request sends did not change; serialised straight into the message's
/// encoding, with no tree (and no copy of a tool output of hundreds of KiB) in between.
#[derive(Serialize)]
struct WireMessage<'a> {
    /// `null` for an assistant message that only calls tools (or only refuses).
    content: Option<&'a str>,
    /// An assistant message's refusal, as OpenAI sent it (and takes back).
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'a str>,
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
    arguments: &'a str,
    name: &'a str,
}

/// The text blocks of `content`, joined by newlines: borrowed when there is one (a tool
/// output of hundreds of KiB is not copied to be encoded).
fn text_of(content: &[ContentBlock]) -> Cow<'_, str> {
    let mut texts =
        content.iter().filter_map(|b| if let ContentBlock::Text { text } = b { Some(text.as_str()) } else { None });
    match (texts.next(), texts.next()) {
        (None, _) => Cow::Borrowed(""),
        (Some(only), None) => Cow::Borrowed(only),
        (Some(first), Some(second)) => {
            Cow::Owned([first, second].into_iter().chain(texts).collect::<Vec<_>>().join("\n"))
        }
    }
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
            Event::ToolResult(result) => self.push_tool(&result.call_id, &result.content),
            _ => {}
        }
    }

    /// Absorbs a record the log accepted: an assistant message is kept shared and encoded
    /// later (see `deferred`); anything else as [`History::absorb`] does.
    pub(crate) fn absorb_shared(&mut self, record: &std::sync::Arc<Record>) {
        if matches!(record.event, Event::AssistantMessage(_)) {
            self.settle();
            self.deferred = Some(record.clone());
        } else {
            self.absorb(&record.event);
        }
    }

    /// Encodes the deferred assistant message, if there is one.
    fn settle(&mut self) {
        if let Some(record) = self.deferred.take() {
            if let Event::AssistantMessage(message) = &record.event {
                self.push_assistant(&message.message);
            }
        }
    }

    fn push(&mut self, message: &WireMessage<'_>) {
        self.settle();
        self.messages.push(serde_json::value::to_raw_value(message).expect("a message serialises"));
    }

    fn push_user(&mut self, message: &Message) {
        let content = text_of(&message.content);
        self.push(&WireMessage {
            content: Some(&content),
            refusal: None,
            role: "user",
            tool_call_id: None,
            tool_calls: Vec::new(),
        });
    }

    fn push_tool(&mut self, call_id: &str, content: &[ContentBlock]) {
        let content = text_of(content);
        self.push(&WireMessage {
            content: Some(&content),
            refusal: None,
            role: "tool",
            tool_call_id: Some(call_id),
            tool_calls: Vec::new(),
        });
    }

    fn push_assistant(&mut self, message: &Message) {
        let text = text_of(&message.content);
        let tool_calls = message
            .tool_calls()
            .map(|(id, name, arguments)| WireCall { function: WireFunction { arguments, name }, id, kind: "function" })
            .collect();
        let refusal = message.content.iter().find_map(|b| match b {
            ContentBlock::Refusal { text } => Some(text.as_str()),
            _ => None,
        });
        self.push(&WireMessage {
            content: (!text.is_empty()).then_some(&*text),
            refusal,
            role: "assistant",
            tool_call_id: None,
            tool_calls,
        });
    }

    /// The messages, encoded, in order: what a request sends.
    pub(crate) fn encoded(&mut self) -> &[Box<RawValue>] {
        self.settle();
        &self.messages
    }

    /// The messages, decoded, in order (for a reader; a request sends them as encoded once).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub fn messages(&self) -> Vec<Value> {
        let mut settled = self.clone();
        settled.settle();
        settled.messages.iter().map(|m| serde_json::from_str(m.get()).expect("encoded by `push`")).collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::History;
    use crate::event::{ContentBlock, Event, Message, ToolResult, UserMessage};

    fn text(text: &str) -> ContentBlock {
        ContentBlock::Text { text: text.into() }
    }

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolCall { id: id.into(), name: "shell".into(), arguments: r#"{"cmd":"ls \"a\""}"#.into() }
    }

    /// The messages are written from typed, borrowed parts; the bytes must be what the
    /// `Value` trees they replaced wrote (keys sorted, `null` content for a call-only
    /// assistant message, several text blocks joined by newlines).
    #[test]
    fn typed_messages_are_the_value_trees_bytes() {
        let assistant = |content: Vec<ContentBlock>| {
            Event::AssistantMessage(crate::event::AssistantMessage {
                turn: 1,
                step: 1,
                message: Message { role: crate::event::Role::Assistant, content },
                usage: None,
            })
        };
        let events = [
            Event::UserMessage(UserMessage { message: Message::user_text("quote \" and\nnewline") }),
            assistant(vec![text("thinking"), text("aloud"), call("c1"), call("c2")]),
            assistant(vec![call("c3")]),
            assistant(vec![text("only text")]),
            Event::ToolResult(ToolResult {
                turn: 1,
                step: 1,
                call_id: "c1".into(),
                content: vec![text("out \u{1} put")],
                is_error: false,
                error: None,
            }),
            Event::ToolResult(ToolResult {
                turn: 1,
                step: 1,
                call_id: "c2".into(),
                content: vec![],
                is_error: false,
                error: None,
            }),
        ];
        let tool_call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "shell", "arguments": r#"{"cmd":"ls \"a\""}"#}});
        let expected: Vec<Value> = vec![
            json!({"role": "user", "content": "quote \" and\nnewline"}),
            json!({"role": "assistant", "content": "thinking\naloud", "tool_calls": [tool_call("c1"), tool_call("c2")]}),
            json!({"role": "assistant", "content": null, "tool_calls": [tool_call("c3")]}),
            json!({"role": "assistant", "content": "only text"}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "out \u{1} put"}),
            json!({"role": "tool", "tool_call_id": "c2", "content": ""}),
        ];
        let mut history = History::default();
        for event in &events {
            history.absorb(event);
        }
        let written: Vec<&str> = history.encoded().iter().map(|m| m.get()).collect();
        let trees: Vec<String> = expected.iter().map(|v| serde_json::to_string(v).expect("encode")).collect();
        assert_eq!(written, trees);
    }

    /// A refusal the model gave is sent back as it came, in the message's `refusal` field
    /// (OpenAI's shape), not dropped and not turned into content: the next request must show
    /// the model what it declined.
    #[test]
    fn a_refusal_goes_back_in_the_refusal_field() {
        let mut history = History::default();
        history.absorb(&Event::AssistantMessage(crate::event::AssistantMessage {
            turn: 1,
            step: 1,
            message: Message {
                role: crate::event::Role::Assistant,
                content: vec![ContentBlock::Refusal { text: "I can't help with that.".into() }],
            },
            usage: None,
        }));
        assert_eq!(
            history.messages(),
            vec![json!({"role": "assistant", "content": null, "refusal": "I can't help with that."})]
        );
    }
}
