//! What the fake server writes: the SSE chunks and `chat.completion` objects of a scripted
//! response as real providers shape them, and a hostile provider's echo of the credential.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::json;

use super::request::RequestHead;
use super::script::{Dialect, Frame, Response};

/// What a hostile provider does: `{{authorization}}` in a scripted body, text, raw SSE event
/// or header value becomes the request's `Authorization` header (`Bearer <key>`), `{{key}}`
/// the bare key, `{{key-head}}` / `{{key-tail}}` its first and second half (a key split
/// across two deltas, as a model streams it token by token). The echoed-secret scenarios use it; the client must never store either.
pub fn echo_credential(mut response: Response, authorization: &str) -> Response {
    const WHOLE: &str = "{{authorization}}";
    const KEY: &str = "{{key}}";
    const HEAD: &str = "{{key-head}}";
    const TAIL: &str = "{{key-tail}}";
    const ESCAPED: &str = "{{key-json-escaped}}";
    let key = authorization.strip_prefix("Bearer ").unwrap_or(authorization);
    // The key with its first character as a JSON `\u` escape: the same key to whoever parses
    // the JSON it sits in, invisible to a search of the raw text.
    let escaped = key.chars().next().map_or_else(String::new, |c| {
        let mut units = [0u16; 2];
        let escape: String = c.encode_utf16(&mut units).iter().map(|u| format!("\\u{u:04x}")).collect();
        format!("{escape}{}", &key[c.len_utf8()..])
    });
    // The two halves of the key, for a secret split across two deltas.
    let mut middle = key.len() / 2;
    while !key.is_char_boundary(middle) {
        middle -= 1;
    }
    let (head, tail) = key.split_at(middle);
    let fill = |text: &mut String| {
        if [WHOLE, KEY, HEAD, TAIL, ESCAPED].iter().any(|p| text.contains(p)) {
            *text = text
                .replace(WHOLE, authorization)
                .replace(KEY, key)
                .replace(HEAD, head)
                .replace(TAIL, tail)
                .replace(ESCAPED, &escaped);
        }
    };
    if let Some(body) = response.body.as_mut() {
        fill(body);
    }
    for value in response.headers.values_mut() {
        fill(value);
    }
    for frame in &mut response.frames {
        match frame {
            Frame::Text(text) | Frame::Reasoning(text) | Frame::Refusal(text) | Frame::Raw(text) => fill(text),
            Frame::ErrorEvent { message, .. } => fill(message),
            Frame::ToolCall { arguments, .. } => fill(arguments),
            Frame::Event { data, .. } => fill(data),
            Frame::Filler(_) | Frame::KeepAlive | Frame::DelayMs(_) => {}
        }
    }
    response
}

/// Whether `response` quotes the request's credential back anywhere (see [`echo_credential`]).
pub fn echoes_credential(response: &Response) -> bool {
    let echoes = |text: &str| {
        ["{{authorization}}", "{{key}}", "{{key-head}}", "{{key-tail}}", "{{key-json-escaped}}"]
            .iter()
            .any(|p| text.contains(p))
    };
    response.body.as_deref().is_some_and(echoes)
        || response.headers.values().any(|v| echoes(v))
        || response.frames.iter().any(|f| match f {
            Frame::Text(text) | Frame::Reasoning(text) | Frame::Refusal(text) | Frame::Raw(text) => echoes(text),
            Frame::ErrorEvent { message, .. } => echoes(message),
            Frame::ToolCall { arguments, .. } => echoes(arguments),
            Frame::Event { data, .. } => echoes(data),
            Frame::Filler(_) | Frame::KeepAlive | Frame::DelayMs(_) => false,
        })
}

/// The model id the server reports.
pub(super) const MODEL_ID: &str = "fake-model";

/// What every chunk of one response carries, as real providers send it.
#[derive(Debug, Clone)]
pub(super) struct Meta {
    /// Request number (the chunk id).
    pub(super) n: usize,
    /// Seconds since the epoch when the response started (the server's clock).
    pub(super) created: u64,
    /// The model the request named.
    pub(super) model: String,
    /// The request asked `stream: false`: answer one `chat.completion` object.
    pub(super) whole: bool,
    /// The request asked `stream_options.include_usage`.
    pub(super) include_usage: bool,
}

impl Meta {
    /// The model a request body names (clipped; the server's own id when it names none).
    #[cfg(test)]
    pub(super) fn for_request(n: usize, created: u64, body: &str) -> Meta {
        Meta::of(n, created, &RequestHead::parse(body))
    }

    /// The meta of request `n`, from its head.
    pub(super) fn of(n: usize, created: u64, request: &RequestHead) -> Meta {
        let named = request.model.as_ref().and_then(serde_json::Value::as_str);
        let named = named.map(|m| m.chars().take(MODEL_NAME_CHARS_MAX).collect::<String>());
        let whole = request.stream == Some(json!(false));
        let include_usage = request.stream_options.as_ref().is_some_and(|o| o["include_usage"] == json!(true));
        Meta { n, created, model: named.unwrap_or_else(|| MODEL_ID.to_owned()), whole, include_usage }
    }
}

/// The `chat.completion` object a `stream: false` request gets: the frames' text, reasoning
/// and tool calls put together, the finish reason and the usage.
pub(super) fn completion_json(meta: &Meta, response: &Response) -> serde_json::Value {
    let (mut content, mut reasoning, mut refusal) = (String::new(), String::new(), String::new());
    let mut calls: BTreeMap<u32, (Option<String>, Option<String>, String)> = BTreeMap::new();
    for frame in &response.frames {
        match frame {
            Frame::Text(text) => content.push_str(text),
            Frame::Filler(bytes) => content.push_str(&"x".repeat((*bytes).min(super::script::FILLER_BYTES_MAX))),
            Frame::Reasoning(text) => reasoning.push_str(text),
            Frame::Refusal(text) => refusal.push_str(text),
            Frame::ToolCall { index, id, name, arguments } => {
                let call = calls.entry(*index).or_default();
                call.0 = call.0.take().or_else(|| id.clone());
                call.1 = call.1.take().or_else(|| name.clone());
                call.2.push_str(arguments);
            }
            Frame::KeepAlive | Frame::Raw(_) | Frame::ErrorEvent { .. } | Frame::DelayMs(_) | Frame::Event { .. } => {}
        }
    }
    let mut message = json!({"role": "assistant", "content": content});
    if !refusal.is_empty() {
        message["content"] = serde_json::Value::Null;
        message["refusal"] = json!(refusal);
    }
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning);
    }
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .into_values()
            .map(|(id, name, arguments)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}))
            .collect();
    }
    let usage = response.usage.map(usage_json);
    json!({
        "id": format!("chatcmpl-{}", meta.n),
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "system_fingerprint": "fp_faultline",
        "choices": [{"index": 0, "message": message, "finish_reason": response.finish}],
        "usage": usage,
    })
}

/// Longest model name echoed back, in characters.
pub(super) const MODEL_NAME_CHARS_MAX: usize = 256;

/// The usage object of `[prompt, completion, total]`.
fn usage_json([prompt, completion, total]: [u64; 3]) -> serde_json::Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total})
}

/// One `chat.completion.chunk`. `usage` is set on the chunk that carries it; every other chunk
/// says `"usage": null` when the request asked for usage, as both providers do.
///
/// Written from a typed struct, not a `Value` tree built per frame; its keys are declared in
/// the order a `Value` object writes them (sorted), so the bytes are unchanged.
fn chunk_json(meta: &Meta, delta: serde_json::Value, finish: Option<&str>, usage: Option<serde_json::Value>) -> String {
    let chunk = ChunkJson {
        choices: [ChoiceJson { delta, finish_reason: finish, index: 0 }],
        created: meta.created,
        id: format!("chatcmpl-{}", meta.n),
        model: &meta.model,
        object: "chat.completion.chunk",
        system_fingerprint: "fp_faultline",
        usage: (usage.is_some() || meta.include_usage).then_some(usage),
    };
    serde_json::to_string(&chunk).expect("chunks serialise")
}

/// One `chat.completion.chunk`, keys in sorted order (as `serde_json::Value` writes them).
#[derive(Serialize)]
struct ChunkJson<'a> {
    choices: [ChoiceJson<'a>; 1],
    created: u64,
    id: String,
    model: &'a str,
    object: &'static str,
    system_fingerprint: &'static str,
    /// Absent unless the request asked for usage; then `null` on every chunk but the one
    /// that carries it.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<serde_json::Value>>,
}

#[derive(Serialize)]
struct ChoiceJson<'a> {
    delta: serde_json::Value,
    finish_reason: Option<&'a str>,
    index: u32,
}

fn event(data: &str) -> String {
    format!("data: {data}\n\n")
}

/// Produces the SSE bytes of `response`, honouring its faults.
/// The SSE event of one frame (`None` for a delay marker) and the delay it asks for.
/// The first content frame also carries `delta.role = "assistant"`, as the real APIs' first
/// chunk does.
pub(super) fn frame_event(meta: &Meta, first: bool, frame: &Frame, dialect: Dialect) -> (Option<String>, u64) {
    let delta = |mut value: serde_json::Value| {
        if first {
            value["role"] = json!("assistant");
        }
        value
    };
    let comment = if first && dialect == Dialect::Openrouter { ": OPENROUTER PROCESSING\n\n" } else { "" };
    let data =
        |value: serde_json::Value| Some(format!("{comment}{}", event(&chunk_json(meta, delta(value), None, None))));
    match frame {
        Frame::Text(text) => (data(json!({"content": text})), 0),
        Frame::Filler(bytes) => {
            let text = "x".repeat((*bytes).min(super::script::FILLER_BYTES_MAX));
            (data(json!({"content": text})), 0)
        }
        Frame::Reasoning(text) => {
            let field = if dialect == Dialect::Openrouter { "reasoning" } else { "reasoning_content" };
            (data(json!({ field: text })), 0)
        }
        Frame::Refusal(text) => (data(json!({"content": null, "refusal": text})), 0),
        Frame::ToolCall { index, id, name, arguments } => {
            let mut call = json!({"function": {"arguments": arguments}});
            if dialect != Dialect::Mistral {
                call["index"] = json!(index);
            }
            if let Some(id) = id {
                call["id"] = json!(id);
                call["type"] = json!("function");
            }
            if let Some(name) = name {
                call["function"]["name"] = json!(name);
            }
            (data(json!({"tool_calls": [call]})), 0)
        }
        Frame::KeepAlive => (Some(format!("{comment}: keep-alive\n\n")), 0),
        Frame::Raw(raw) => (Some(format!("{comment}{}", event(raw))), 0),
        Frame::ErrorEvent { status, message } => {
            let error = json!({"error": {"message": message, "type": "server_error", "code": status}});
            (Some(format!("{comment}{}", event(&error.to_string()))), 0)
        }
        Frame::DelayMs(ms) => (None, *ms),
        Frame::Event { name, data } => (Some(format!("{comment}{}", named_event(name.as_deref(), data))), 0),
    }
}

/// One SSE event with its `event:` line when named.
pub(super) fn named_event(name: Option<&str>, data: &str) -> String {
    match name {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => event(data),
    }
}

/// The events after the frames: the finish chunk, usage, `[DONE]`.
pub(super) fn tail_events(meta: &Meta, response: &Response) -> Vec<String> {
    let mut tail = Vec::new();
    let usage = response.usage.map(usage_json);
    if let Some(finish) = &response.finish {
        let in_finish = if response.usage_in_finish { usage.clone() } else { None };
        tail.push(event(&chunk_json(meta, json!({}), Some(finish), in_finish)));
    }
    // OpenRouter sends its usage after the finish chunk whether or not it was asked.
    let asked = meta.include_usage || response.dialect == Dialect::Openrouter;
    if let (Some(usage), false, true) = (usage, response.usage_in_finish, asked) {
        let chunk = json!({
            "id": format!("chatcmpl-{}", meta.n),
            "object": "chat.completion.chunk",
            "created": meta.created,
            "model": meta.model,
            "system_fingerprint": "fp_faultline",
            "choices": [],
            "usage": usage,
        });
        tail.push(event(&chunk.to_string()));
    }
    if response.done {
        tail.push(event("[DONE]"));
    }
    tail
}

/// The SSE events of each frame of `response` in OpenAI's format (with the delay each asks
/// for), and the tail after them.
pub(super) fn openai(meta: &Meta, response: &Response) -> (Vec<(Option<String>, u64)>, Vec<String>) {
    let events = response
        .frames
        .iter()
        .enumerate()
        .map(|(i, frame)| frame_event(meta, i == 0, frame, response.dialect))
        .collect();
    (events, tail_events(meta, response))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `chunk_json` wrote before it was typed: a `Value` tree, serialised.
    fn value_tree_chunk(
        meta: &Meta,
        delta: serde_json::Value,
        finish: Option<&str>,
        usage: Option<serde_json::Value>,
    ) -> String {
        let mut chunk = json!({
            "id": format!("chatcmpl-{}", meta.n),
            "object": "chat.completion.chunk",
            "created": meta.created,
            "model": meta.model,
            "system_fingerprint": "fp_faultline",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        if usage.is_some() || meta.include_usage {
            chunk["usage"] = usage.unwrap_or(serde_json::Value::Null);
        }
        chunk.to_string()
    }

    #[test]
    fn typed_chunk_is_the_value_trees_bytes() {
        for include_usage in [false, true] {
            let meta = Meta { n: 7, created: 1_700_000_000, model: "m \"x\"\n".into(), whole: false, include_usage };
            for finish in [None, Some("stop")] {
                for usage in [None, Some(usage_json([1, 2, 3]))] {
                    let delta = json!({"content": "hé\u{1}", "role": "assistant"});
                    assert_eq!(
                        chunk_json(&meta, delta.clone(), finish, usage.clone()),
                        value_tree_chunk(&meta, delta, finish, usage.clone()),
                        "usage asked {include_usage}, finish {finish:?}, usage {usage:?}"
                    );
                }
            }
        }
    }
}
