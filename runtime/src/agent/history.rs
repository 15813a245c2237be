//! The conversation the model sees, rebuilt from committed records: user messages, assistant
//! messages (text, a refusal, tool calls, and the reasoning a provider signed) and tool
//! results — including repair closers, which the model reads as ordinary results. Kept in no
//! provider's shape (`llm::conversation`): each request writes it in its route's format.

use crate::event::{Event, Message, Record, RequestPrefix};
use crate::llm::conversation::Entry;

/// The conversation of a session so far, each message's texts escaped once as it is
/// absorbed: every request of a session sends the whole conversation again, and escaping each
/// message anew per request made a long session's requests quadratic in its text.
#[derive(Debug, Clone, Default)]
pub struct History {
    entries: Vec<Entry>,
    /// The last assistant message, not absorbed yet: absorbed when the next message is pushed
    /// or the next request is built, so an answer that ends its turn is never held twice while
    /// its turn is still being written (the log's queue holds the record meanwhile).
    deferred: Option<std::sync::Arc<Record>>,
    /// The last assistant entry whose tool calls no result has answered yet (its index).
    unanswered: Option<usize>,
    /// The last request prefix written to the log.
    pub last_header: Option<RequestPrefix>,
    /// The last turn number started.
    pub last_turn: u32,
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
            Event::UserMessage(user) => self.push(Entry::user(&user.message)),
            Event::RequestHeader(header) => self.last_header = Some(header.header.clone()),
            Event::AssistantMessage(message) => self.push_assistant(&message.message),
            Event::ToolResult(result) => self.push(Entry::tool(&result.call_id, &result.content, result.is_error)),
            _ => {}
        }
    }

    /// Absorbs a record the log accepted: an assistant message is kept shared and absorbed
    /// later (see `deferred`); anything else as [`History::absorb`] does.
    pub(crate) fn absorb_shared(&mut self, record: &std::sync::Arc<Record>) {
        if matches!(record.event, Event::AssistantMessage(_)) {
            self.settle();
            self.deferred = Some(record.clone());
        } else {
            self.absorb(&record.event);
        }
    }

    /// Absorbs the deferred assistant message, if there is one.
    fn settle(&mut self) {
        if let Some(record) = self.deferred.take() {
            if let Event::AssistantMessage(message) = &record.event {
                self.push_settled(Entry::assistant(&message.message));
            }
        }
    }

    fn push(&mut self, entry: Entry) {
        self.settle();
        self.push_settled(entry);
    }

    fn push_settled(&mut self, entry: Entry) {
        // An answer with nothing to send back (only reasoning no provider signed) is not a
        // message: every API refuses an assistant message without content or calls.
        if matches!(&entry, Entry::Assistant(a) if a.is_empty()) && !crate::testing::bugs::planted("empty-answer-sent")
        {
            return;
        }
        match &entry {
            Entry::Assistant(assistant) if !assistant.calls.is_empty() => self.unanswered = Some(self.entries.len()),
            Entry::Tool { .. } => self.unanswered = None,
            Entry::User { .. } => self.drop_unanswered_calls(),
            Entry::Assistant(_) => {}
        }
        self.entries.push(entry);
    }

    /// A user message follows an assistant message whose calls never ran (its step ended at
    /// the token limit or in a refusal, FAILURE-WIRE-FORMATS): the calls are not sent back —
    /// every provider refuses a call without its result, and a cut call's arguments are not
    /// the model's whole word. The log keeps them as the model streamed them; a message left
    /// with nothing to say is not sent at all. A call that started and was interrupted has its
    /// repair closer as its result, so it is kept.
    fn drop_unanswered_calls(&mut self) {
        let Some(at) = self.unanswered.take() else { return };
        if crate::testing::bugs::planted("cut-calls-sent") {
            return;
        }
        if let Entry::Assistant(assistant) = &mut self.entries[at] {
            assistant.calls.clear();
            if assistant.is_empty() || (assistant.text.is_none() && assistant.refusal.is_none()) {
                self.entries.remove(at);
            }
        }
    }

    fn push_assistant(&mut self, message: &Message) {
        self.push(Entry::assistant(message));
    }

    /// The conversation, in order: what a request sends.
    pub(crate) fn entries(&mut self) -> &[Entry] {
        self.settle();
        &self.entries
    }

    /// The messages in OpenAI's shape, decoded (for a reader; a request writes them itself).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub fn messages(&self) -> Vec<serde_json::Value> {
        let mut settled = self.clone();
        settled.settle();
        crate::llm::openai_messages(&settled.entries)
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
        ContentBlock::tool_call(id, "shell", r#"{"cmd":"ls \"a\""}"#)
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
        let route = crate::llm::ResolvedProvider::openai_compatible("http://127.0.0.1:1/v1", "m").unwrap();
        let body = crate::llm::request_body(
            &route,
            &crate::event::RequestPrefix { model: "m".into(), system: None, tools: Vec::new() },
            history.entries(),
        );
        let trees: Vec<String> = expected.iter().map(|v| serde_json::to_string(v).expect("encode")).collect();
        let expected_body = format!(
            r#"{{"messages":[{}],"model":"m","stream":true,"stream_options":{{"include_usage":true}}}}"#,
            trees.join(",")
        );
        assert_eq!(std::str::from_utf8(&body).unwrap(), expected_body);
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
