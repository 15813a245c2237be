//! Assembles one attempt's chunks into the step's assistant message. A fresh assembler per
//! attempt, so a failed attempt's fragments can never leak into the committed message.

use std::collections::BTreeMap;

use crate::event::{BlockKind, Chunk, ContentBlock, FinishReason, Message, Role, Usage};

#[derive(Debug)]
enum Block {
    Text(String),
    Reasoning(String),
    Refusal(String),
    ToolCall { id: String, name: String, arguments: String },
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
                    BlockKind::Reasoning => Block::Reasoning(String::new()),
                    BlockKind::Refusal => Block::Refusal(String::new()),
                    BlockKind::ToolCall => {
                        Block::ToolCall { id: String::new(), name: String::new(), arguments: String::new() }
                    }
                };
                self.blocks.insert(*index, block);
            }
            Chunk::TextDelta { index, text }
            | Chunk::ReasoningDelta { index, text }
            | Chunk::RefusalDelta { index, text } => match self.blocks.get_mut(index) {
                Some(Block::Text(s) | Block::Reasoning(s) | Block::Refusal(s)) => s.push_str(text),
                _ => {
                    let block = match chunk {
                        Chunk::TextDelta { .. } => Block::Text(text.clone()),
                        Chunk::ReasoningDelta { .. } => Block::Reasoning(text.clone()),
                        _ => Block::Refusal(text.clone()),
                    };
                    self.blocks.insert(*index, block);
                }
            },
            Chunk::ToolCallDelta { index, id, name, arguments_delta } => {
                let block = self.blocks.entry(*index).or_insert_with(|| Block::ToolCall {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
                if let Block::ToolCall { id: block_id, name: block_name, arguments } = block {
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
                Block::Reasoning(text) if !text.is_empty() => Some(ContentBlock::Reasoning { text }),
                Block::Refusal(text) if !text.is_empty() => Some(ContentBlock::Refusal { text }),
                Block::ToolCall { id, name, arguments } => Some(ContentBlock::ToolCall { id, name, arguments }),
                _ => None,
            })
            .collect();
        (Message { role: Role::Assistant, content }, self.usage)
    }
}
