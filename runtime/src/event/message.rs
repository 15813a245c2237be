use serde::{Deserialize, Serialize};

/// One typed content block of a message or a tool result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ContentBlock {
    /// Visible text.
    Text {
        /// The text.
        text: String,
    },
    /// Model reasoning (`reasoning_content`, Anthropic's `thinking`, Gemini's thought parts).
    Reasoning {
        /// The reasoning text.
        text: String,
        /// The provider's signature of it (Anthropic's `signature`), sent back verbatim: a
        /// provider that signs its reasoning refuses a history whose reasoning was altered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// Reasoning the provider keeps encrypted (Anthropic's `redacted_thinking`): opaque data
    /// that goes back exactly as it came.
    RedactedReasoning {
        /// The encrypted reasoning.
        data: String,
    },
    /// A refusal: the model declined, in its own words (OpenAI's `refusal`).
    Refusal {
        /// The refusal text.
        text: String,
    },
    /// A tool call the model requested.
    ToolCall {
        /// Provider-assigned call id.
        id: String,
        /// Tool name.
        name: String,
        /// The raw JSON string the model produced (kept verbatim, even if invalid).
        arguments: String,
        /// The provider's signature of the reasoning behind the call (Gemini's
        /// `thoughtSignature` on a `functionCall` part), sent back with the call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextFields {
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasoningFields {
    text: String,
    #[serde(default)]
    signature: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RedactedFields {
    data: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallFields {
    id: String,
    name: String,
    arguments: String,
    #[serde(default)]
    signature: Option<String>,
}

impl super::tagged::Tagged for ContentBlock {
    const TAG: &'static str = "type";
    const VARIANTS: &'static [&'static str] = &["text", "reasoning", "redacted-reasoning", "refusal", "tool-call"];
    const NAME: &'static str = "ContentBlock";

    fn variant<'de, D: serde::Deserializer<'de>>(tag: &str, rest: D) -> Result<Self, D::Error> {
        match tag {
            "text" => TextFields::deserialize(rest).map(|f| ContentBlock::Text { text: f.text }),
            "reasoning" => ReasoningFields::deserialize(rest)
                .map(|f| ContentBlock::Reasoning { text: f.text, signature: f.signature }),
            "redacted-reasoning" => {
                RedactedFields::deserialize(rest).map(|f| ContentBlock::RedactedReasoning { data: f.data })
            }
            "refusal" => TextFields::deserialize(rest).map(|f| ContentBlock::Refusal { text: f.text }),
            "tool-call" => ToolCallFields::deserialize(rest).map(|f| ContentBlock::ToolCall {
                id: f.id,
                name: f.name,
                arguments: f.arguments,
                signature: f.signature,
            }),
            other => Err(serde::de::Error::unknown_variant(other, Self::VARIANTS)),
        }
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        super::tagged::deserialize(deserializer)
    }
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    /// A tool call, unsigned.
    pub fn tool_call(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        ContentBlock::ToolCall { id: id.into(), name: name.into(), arguments: arguments.into(), signature: None }
    }
}

/// Who authored a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The user.
    User,
    /// The model.
    Assistant,
}

/// A role-tagged message with typed content blocks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// Author.
    pub role: Role,
    /// Content, in order.
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message holding one text block.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self { role: Role::User, content: vec![ContentBlock::text(text)] }
    }

    /// The tool calls this message requests, in model order.
    pub fn tool_calls(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.content.iter().filter_map(|block| match block {
            ContentBlock::ToolCall { id, name, arguments, .. } => {
                Some((id.as_str(), name.as_str(), arguments.as_str()))
            }
            _ => None,
        })
    }
}
