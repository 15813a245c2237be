//! Assembles one attempt's chunks into the step's assistant message. A fresh assembler per
//! attempt, so a failed attempt's fragments can never leak into the committed message.

use std::collections::BTreeMap;

use crate::event::{BlockKind, Chunk, ContentBlock, FinishReason, Message, Role, Usage};

#[derive(Debug)]
enum Block {
    Text(String),
    Reasoning { text: String, signature: Option<String> },
    RedactedReasoning(String),
    Refusal(String),
    ToolCall { id: String, name: String, arguments: String, signature: Option<String> },
}

impl Block {
    fn tool_call() -> Block {
        Block::ToolCall { id: String::new(), name: String::new(), arguments: String::new(), signature: None }
    }
}

/// Accumulates chunks by block index.
#[derive(Debug, Default)]
pub struct Assembler {
    blocks: BTreeMap<u32, Block>,
    usage: Option<Usage>,
}

impl Assembler {
    /// A fresh assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Absorbs one chunk; returns the finish reason for the terminal chunk.
    pub fn push(&mut self, chunk: &Chunk) -> Option<FinishReason> {
        match chunk {
            Chunk::BlockStart { index, kind } => {
                let block = match kind {
                    BlockKind::Text => Block::Text(String::new()),
                    BlockKind::Reasoning => Block::Reasoning { text: String::new(), signature: None },
                    BlockKind::RedactedReasoning => Block::RedactedReasoning(String::new()),
                    BlockKind::Refusal => Block::Refusal(String::new()),
                    BlockKind::ToolCall => Block::tool_call(),
                };
                self.blocks.insert(*index, block);
            }
            Chunk::TextDelta { index, text }
            | Chunk::ReasoningDelta { index, text }
            | Chunk::RefusalDelta { index, text } => match self.blocks.get_mut(index) {
                Some(Block::Text(s) | Block::Reasoning { text: s, .. } | Block::Refusal(s)) => s.push_str(text),
                _ => {
                    let block = match chunk {
                        Chunk::TextDelta { .. } => Block::Text(text.clone()),
                        Chunk::ReasoningDelta { .. } => Block::Reasoning { text: text.clone(), signature: None },
                        _ => Block::Refusal(text.clone()),
                    };
                    self.blocks.insert(*index, block);
                }
            },
            Chunk::SignatureDelta { index, signature } => match self.blocks.get_mut(index) {
                Some(Block::Reasoning { signature: held, .. } | Block::ToolCall { signature: held, .. }) => {
                    held.get_or_insert_with(String::new).push_str(signature);
                }
                Some(Block::RedactedReasoning(data)) => data.push_str(signature),
                // A signature of nothing the message holds (the validator refuses such a log).
                _ => {}
            },
            Chunk::ToolCallDelta { index, id, name, arguments_delta } => {
                let block = self.blocks.entry(*index).or_insert_with(Block::tool_call);
                if let Block::ToolCall { id: block_id, name: block_name, arguments, .. } = block {
                    if let Some(id) = id {
                        block_id.clone_from(id);
                    }
                    if let Some(name) = name {
                        block_name.clone_from(name);
                    }
                    arguments.push_str(arguments_delta);
                }
            }
            Chunk::BlockEnd { .. } => {}
            Chunk::Usage { usage } => self.usage = Some(*usage),
            Chunk::Finish { reason, .. } => return Some(reason.clone()),
        }
        None
    }

    /// The assembled message and usage.
    pub fn finish(self) -> (Message, Option<Usage>) {
        let content = self
            .blocks
            .into_values()
            .filter_map(|block| match block {
                Block::Text(text) if !text.is_empty() => Some(ContentBlock::Text { text }),
                // A signed block is kept even when its text is empty: the signature is what a
                // provider checks when it comes back.
                Block::Reasoning { text, signature } if !text.is_empty() || signature.is_some() => {
                    Some(ContentBlock::Reasoning { text, signature })
                }
                Block::RedactedReasoning(data) if !data.is_empty() => Some(ContentBlock::RedactedReasoning { data }),
                Block::Refusal(text) if !text.is_empty() => Some(ContentBlock::Refusal { text }),
                Block::ToolCall { id, name, arguments, signature } => {
                    Some(ContentBlock::ToolCall { id, name, arguments, signature })
                }
                _ => None,
            })
            .collect();
        (Message { role: Role::Assistant, content }, self.usage)
    }
}
