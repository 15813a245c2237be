//! The conversation a request sends, in no provider's shape (FAILURE-WIRE-FORMATS): user
//! messages, assistant messages (text, a refusal, signed reasoning, tool calls) and tool
//! results, each text escaped as a JSON string once, when it is absorbed. Every request of a
//! session sends the whole conversation again; each format's request writer
//! (`request.rs`, `anthropic/request.rs`, `gemini/request.rs`) writes the same escaped texts
//! into its own structure, so no text is escaped twice, whatever the format, and a live
//! change of provider re-shapes the conversation without re-reading the log.

use std::borrow::Cow;

use serde_json::value::RawValue;

use crate::event::{ContentBlock, Message};

/// A text as a JSON string literal, escaped once.
pub(crate) type Escaped = Box<RawValue>;

/// The tool-call id the Gemini reader makes up for a call that came without one: never sent
/// back (Gemini matches such responses by name and order).
pub const SYNTHESISED_CALL_ID_PREFIX: &str = "gemini_call_";

pub(crate) fn escape(text: &str) -> Escaped {
    serde_json::value::to_raw_value(text).expect("a string serialises")
}

/// One message of the conversation.
#[derive(Debug, Clone)]
pub(crate) enum Entry {
    /// What the user said.
    User {
        /// Its text blocks, joined by newlines.
        text: Escaped,
    },
    /// What the model answered.
    Assistant(AssistantEntry),
    /// A tool's result (or a repair's closer).
    Tool {
        /// The call it answers.
        call_id: Box<str>,
        /// Its text blocks, joined by newlines.
        text: Escaped,
        /// It reports a failure.
        is_error: bool,
    },
}

/// An assistant message, as every format sends it back.
#[derive(Debug, Clone, Default)]
pub(crate) struct AssistantEntry {
    /// Reasoning that must go back (signed, or redacted), in the model's order. Unsigned
    /// reasoning is never sent back and is not kept.
    pub reasoning: Vec<Reasoning>,
    /// Its text blocks, joined by newlines (`None`: no text).
    pub text: Option<Escaped>,
    /// A refusal, in the model's words.
    pub refusal: Option<Escaped>,
    /// Its tool calls, in the model's order.
    pub calls: Vec<Call>,
}

/// Reasoning a provider wants back exactly as it came.
#[derive(Debug, Clone)]
pub(crate) enum Reasoning {
    /// Anthropic's `thinking` with its `signature`.
    Signed { text: Escaped, signature: Box<str> },
    /// Anthropic's `redacted_thinking`.
    Redacted { data: Box<str> },
}

/// A tool call.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub id: Box<str>,
    pub name: Box<str>,
    /// The arguments as the model wrote them, escaped as a string (OpenAI sends a string).
    pub arguments: Escaped,
    /// The arguments as a JSON object (Anthropic's `input`, Gemini's `args`); `{}` when the
    /// model's text is not an object (such a call never ran: its result says why).
    pub object: Box<RawValue>,
    /// Gemini's `thoughtSignature` on the call's part.
    pub signature: Option<Box<str>>,
}

impl AssistantEntry {
    /// Whether there is nothing to send back: no text, refusal, reasoning kept, or call.
    pub fn is_empty(&self) -> bool {
        self.text.is_none() && self.refusal.is_none() && self.reasoning.is_empty() && self.calls.is_empty()
    }
}

impl Call {
    /// The id to send back, when the provider gave one (not one the reader made up).
    pub fn provider_id(&self) -> Option<&str> {
        (!self.id.starts_with(SYNTHESISED_CALL_ID_PREFIX)).then_some(&*self.id)
    }
}

/// The text blocks of `content`, joined by newlines: borrowed when there is one.
pub(crate) fn text_of(content: &[ContentBlock]) -> Cow<'_, str> {
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

impl Entry {
    /// A user message.
    pub fn user(message: &Message) -> Entry {
        Entry::User { text: escape(&text_of(&message.content)) }
    }

    /// A tool result.
    pub fn tool(call_id: &str, content: &[ContentBlock], is_error: bool) -> Entry {
        Entry::Tool { call_id: call_id.into(), text: escape(&text_of(content)), is_error }
    }

    /// An assistant message.
    pub fn assistant(message: &Message) -> Entry {
        let text = text_of(&message.content);
        let mut entry = AssistantEntry { text: (!text.is_empty()).then(|| escape(&text)), ..AssistantEntry::default() };
        for block in &message.content {
            match block {
                ContentBlock::Reasoning { text, signature: Some(signature) } => {
                    entry
                        .reasoning
                        .push(Reasoning::Signed { text: escape(text), signature: signature.as_str().into() });
                }
                ContentBlock::RedactedReasoning { data } => {
                    entry.reasoning.push(Reasoning::Redacted { data: data.as_str().into() });
                }
                ContentBlock::Refusal { text } if entry.refusal.is_none() => entry.refusal = Some(escape(text)),
                ContentBlock::ToolCall { id, name, arguments, signature } => {
                    let object = RawValue::from_string(arguments.clone())
                        .ok()
                        .filter(|raw| raw.get().trim_start().starts_with('{'))
                        .unwrap_or_else(|| RawValue::from_string("{}".to_owned()).expect("{} is JSON"));
                    entry.calls.push(Call {
                        id: id.as_str().into(),
                        name: name.as_str().into(),
                        arguments: escape(arguments),
                        object,
                        signature: signature.as_deref().map(Into::into),
                    });
                }
                _ => {}
            }
        }
        Entry::Assistant(entry)
    }

    /// Whether the entry speaks for the user side of the conversation (a user message or a
    /// tool result: every format but OpenAI's sends both as the user's turn).
    pub fn is_user_side(&self) -> bool {
        !matches!(self, Entry::Assistant(_))
    }
}

/// The tool name of the call `call_id`, looked up in the assistant entries before `at`
/// (Gemini answers a call by its name).
pub(crate) fn name_of_call<'a>(entries: &'a [Entry], at: usize, call_id: &str) -> Option<&'a str> {
    entries[..at].iter().rev().find_map(|entry| match entry {
        Entry::Assistant(assistant) => assistant.calls.iter().find(|c| &*c.id == call_id).map(|c| &*c.name),
        _ => None,
    })
}
