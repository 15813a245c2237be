//! A scripted response as Anthropic's Messages API streams it: `message_start`, a content
//! block per run of one kind of frame (`text`, `thinking` closed by its `signature_delta`,
//! `tool_use` with its `input_json_delta` fragments), `message_delta` with the stop reason and
//! the usage, `message_stop`; `ping` for a keep-alive and `error` for a mid-stream error
//! event, each with its `event:` line, as the official SDK requires.
//!
//! The frames of one response are rendered into one group of SSE events per frame, so the
//! script's faults (`disconnect_after_frames`, `stall_after_frames`) fall between the same
//! frames in every format.

use serde_json::json;

use super::render::Meta;
use super::script::{Frame, Response, FILLER_BYTES_MAX};
use super::signature::sign;

fn event(name: &str, data: &serde_json::Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// What kind of block a frame belongs in.
#[derive(Clone, PartialEq, Eq)]
enum OpenBlock {
    Text,
    Thinking(String),
    ToolUse(u32),
}

/// The SSE events of each frame (with the delay it asks for) and the tail after them.
pub(super) fn render(meta: &Meta, response: &Response) -> (Vec<(Option<String>, u64)>, Vec<String>) {
    let mut groups = Vec::with_capacity(response.frames.len());
    let mut blocks = Blocks::default();
    let start = message_start(meta, response);
    for (n, frame) in response.frames.iter().enumerate() {
        let mut text = if n == 0 { start.clone() } else { String::new() };
        let delay = if let Frame::DelayMs(ms) = frame { *ms } else { 0 };
        text.push_str(&blocks.frame(frame));
        groups.push(((!text.is_empty()).then_some(text), delay));
    }
    let mut tail = Vec::new();
    if response.frames.is_empty() {
        tail.push(start);
    }
    if let Some(closing) = blocks.open.take() {
        tail.push(close(blocks.index, &closing));
    }
    if response.done {
        tail.extend(message_end(response, &blocks.refusal));
    }
    (groups, tail)
}

fn message_start(meta: &Meta, response: &Response) -> String {
    event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": format!("msg_{:024}", meta.n), "type": "message", "role": "assistant", "model": meta.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": response.usage.map_or(0, |u| u[0]), "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 1}}}),
    )
}

/// `message_delta` with the stop reason (a refusal's explanation in `stop_details`) and the
/// usage, then `message_stop`.
fn message_end(response: &Response, refusal: &str) -> [String; 2] {
    let stop_reason = match response.finish.as_deref() {
        _ if response.stop_reason.is_some() => response.stop_reason.as_deref().unwrap_or_default(),
        _ if !refusal.is_empty() => "refusal",
        Some("tool_calls") => "tool_use",
        Some("length") => "max_tokens",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    };
    let mut delta = json!({"stop_reason": stop_reason, "stop_sequence": null});
    if !refusal.is_empty() {
        delta["stop_details"] = json!({"type": "refusal", "category": "policy", "explanation": refusal});
    }
    let output = response.usage.map_or(1, |u| u[1]);
    [
        event("message_delta", &json!({"type": "message_delta", "delta": delta, "usage": {"output_tokens": output}})),
        event("message_stop", &json!({"type": "message_stop"})),
    ]
}

/// The content blocks as the frames open and close them.
#[derive(Default)]
struct Blocks {
    open: Option<OpenBlock>,
    index: u32,
    refusal: String,
}

impl Blocks {
    /// The events of one frame: a frame of another kind (or another call) closes the block
    /// before it.
    fn frame(&mut self, frame: &Frame) -> String {
        let mut text = String::new();
        let wants = match frame {
            Frame::Text(_) | Frame::Filler(_) => Some(OpenBlock::Text),
            Frame::Reasoning(_) => Some(OpenBlock::Thinking(String::new())),
            Frame::ToolCall { index: call, .. } => Some(OpenBlock::ToolUse(*call)),
            _ => None,
        };
        let same = match (&self.open, &wants) {
            (Some(OpenBlock::Thinking(_)), Some(OpenBlock::Thinking(_))) => true,
            (a, b) => a.is_some() && a == b,
        };
        if wants.is_some() && !same {
            if let Some(closing) = self.open.take() {
                text.push_str(&close(self.index, &closing));
                self.index += 1;
            }
        }
        let index = self.index;
        match frame {
            Frame::Text(t) => text.push_str(&text_delta(&mut self.open, index, t)),
            Frame::Filler(bytes) => {
                text.push_str(&text_delta(&mut self.open, index, &"x".repeat((*bytes).min(FILLER_BYTES_MAX))));
            }
            Frame::Reasoning(t) => text.push_str(&self.thinking(t)),
            Frame::ToolCall { index: call, id, name, arguments } => {
                if self.open.is_none() {
                    self.open = Some(OpenBlock::ToolUse(*call));
                    let block = json!({"type": "tool_use", "id": tool_use_id(*call, id.as_deref()),
                                       "name": name.clone().unwrap_or_default(), "input": {}});
                    text.push_str(&event(
                        "content_block_start",
                        &json!({"type": "content_block_start", "index": index, "content_block": block}),
                    ));
                }
                if !arguments.is_empty() {
                    let delta = json!({"type": "input_json_delta", "partial_json": arguments});
                    text.push_str(&event(
                        "content_block_delta",
                        &json!({"type": "content_block_delta", "index": index, "delta": delta}),
                    ));
                }
            }
            Frame::Refusal(t) => self.refusal.push_str(t),
            Frame::KeepAlive => text.push_str(&event("ping", &json!({"type": "ping"}))),
            Frame::Raw(raw) => text.push_str(&format!("data: {raw}\n\n")),
            Frame::ErrorEvent { status, message } => {
                text.push_str(&event(
                    "error",
                    &json!({"type": "error", "error": {"type": error_type(*status), "message": message}}),
                ));
            }
            Frame::DelayMs(_) => {}
            Frame::Event { name, data } => {
                // A block of its own (`{{index}}`): whatever is open closes first.
                if data.contains("{{index}}") {
                    if let Some(closing) = self.open.take() {
                        text.push_str(&close(self.index, &closing));
                        self.index += 1;
                    }
                    let data = data.replace("{{index}}", &self.index.to_string());
                    text.push_str(&super::render::named_event(name.as_deref(), &data));
                    self.index += 1;
                } else {
                    text.push_str(&super::render::named_event(name.as_deref(), data));
                }
            }
        }
        text
    }

    /// A thinking delta, opening the thinking block first when none is open.
    fn thinking(&mut self, thought: &str) -> String {
        let mut text = String::new();
        if self.open.is_none() {
            self.open = Some(OpenBlock::Thinking(String::new()));
            let block = json!({"type": "thinking", "thinking": "", "signature": ""});
            text.push_str(&event(
                "content_block_start",
                &json!({"type": "content_block_start", "index": self.index, "content_block": block}),
            ));
        }
        if let Some(OpenBlock::Thinking(so_far)) = &mut self.open {
            so_far.push_str(thought);
        }
        let delta = json!({"type": "thinking_delta", "thinking": thought});
        text.push_str(&event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": self.index, "delta": delta}),
        ));
        text
    }
}

fn text_delta(open: &mut Option<OpenBlock>, index: u32, text: &str) -> String {
    let mut out = String::new();
    if open.is_none() {
        *open = Some(OpenBlock::Text);
        out.push_str(&event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        ));
    }
    let delta = json!({"type": "text_delta", "text": text});
    out.push_str(&event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": index, "delta": delta}),
    ));
    out
}

/// The end of a block: a thinking block's signature first, then `content_block_stop` (a
/// stream cut right after a thinking block's last frame loses its signature).
fn close(index: u32, block: &OpenBlock) -> String {
    let mut out = String::new();
    if let OpenBlock::Thinking(thought) = block {
        let delta = json!({"type": "signature_delta", "signature": sign("thinking", thought)});
        out.push_str(&event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
    }
    out.push_str(&event("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
    out
}

/// The id of the `tool_use` block a call's first frame opens: the script's, or one made of
/// its index.
pub(super) fn tool_use_id(call: u32, id: Option<&str>) -> String {
    id.map_or_else(|| format!("toolu_{call}"), str::to_owned)
}

/// Anthropic's error `type` for an HTTP status.
pub(super) fn error_type(status: u16) -> &'static str {
    match status {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinking_then_a_call_renders_signed_blocks_and_a_tool_use_stop() {
        let meta = Meta { n: 3, created: 0, model: "claude-x".into(), whole: false, include_usage: false };
        let response = Response {
            frames: vec![
                Frame::Reasoning("think".into()),
                Frame::Text("Checking.".into()),
                Frame::ToolCall {
                    index: 0,
                    id: Some("toolu_1".into()),
                    name: Some("f".into()),
                    arguments: "{\"a\":".into(),
                },
                Frame::ToolCall { index: 0, id: None, name: None, arguments: "1}".into() },
            ],
            finish: Some("tool_calls".into()),
            usage: Some([10, 5, 15]),
            done: true,
            ..Response::default()
        };
        let (groups, tail) = render(&meta, &response);
        let all: String = groups.iter().filter_map(|(t, _)| t.clone()).chain(tail).collect();
        assert!(all.starts_with("event: message_start\n"), "{all}");
        assert!(all.contains(&format!("\"signature\":\"{}\"", sign("thinking", "think"))), "{all}");
        assert!(all.contains("\"stop_reason\":\"tool_use\""), "{all}");
        assert_eq!(all.matches("event: content_block_stop").count(), 3, "{all}");
        assert!(all.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
    }
}
