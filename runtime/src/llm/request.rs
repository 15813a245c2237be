//! The request body of a streaming chat completion.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::event::RequestPrefix;

/// The exact bytes of one request: `stream: true`, usage in the stream, function tools.
/// `messages` are already in the OpenAI shape (`role`, `content`, `tool_calls`,
/// `tool_call_id`). Built once per attempt from the same inputs, so a retry re-sends
/// identical bytes.
pub fn chat_body(prefix: &RequestPrefix, messages: &[Value]) -> Bytes {
    let mut all = Vec::with_capacity(messages.len() + 1);
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
    Bytes::from(serde_json::to_vec(&body).expect("JSON values always serialise"))
}
