//! A scripted response as Gemini's `streamGenerateContent?alt=sse` streams it: one whole
//! `GenerateContentResponse` per `data:` line (no `event:` lines, no comments, no `[DONE]`),
//! text and thought parts as they come, each function call whole (with no id, as Gemini 2.5
//! sends them) and a `thoughtSignature` on the first call of the response (as Gemini 3 signs
//! them), the `finishReason` and the usage on the last event.

use serde_json::json;

use super::render::Meta;
use super::script::{Frame, Response, FILLER_BYTES_MAX};
use super::signature::sign;

fn event(data: &serde_json::Value) -> String {
    format!("data: {data}\n\n")
}

/// One response object carrying `parts`.
fn parts_event(meta: &Meta, parts: serde_json::Value) -> String {
    event(&json!({
        "candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0}],
        "modelVersion": meta.model,
        "responseId": response_id(meta),
    }))
}

fn response_id(meta: &Meta) -> String {
    format!("fake-response-{}", meta.n)
}

/// The signature the server puts on a call (and checks when the call comes back).
pub(crate) fn call_signature(name: &str, args: &serde_json::Value) -> String {
    sign("call", &format!("{name}{args}"))
}

/// The call the response signs (the first it sends whole) as (name, arguments): what the server
/// remembers so that a history that drops the signature is refused.
pub(crate) fn first_signed_call(response: &Response) -> Option<(String, serde_json::Value)> {
    let frames = &response.frames;
    let mut calls: std::collections::BTreeMap<u32, (String, String)> = std::collections::BTreeMap::new();
    for (at, frame) in frames.iter().enumerate() {
        let Frame::ToolCall { index, name, arguments, .. } = frame else { continue };
        let call = calls.entry(*index).or_default();
        if let Some(name) = name {
            call.0.clone_from(name);
        }
        call.1.push_str(arguments);
        if !frames[at + 1..].iter().any(|f| matches!(f, Frame::ToolCall { index: i, .. } if i == index)) {
            let (name, arguments) = calls.remove(index).unwrap_or_default();
            return Some((name, whole_args(&arguments)));
        }
    }
    None
}

/// A call's joined arguments as the object Gemini sends (`{}` when they are not one).
fn whole_args(arguments: &str) -> serde_json::Value {
    serde_json::from_str(arguments).ok().filter(serde_json::Value::is_object).unwrap_or_else(|| json!({}))
}

/// The SSE events of each frame (with the delay it asks for) and the tail after them.
pub(super) fn render(meta: &Meta, response: &Response) -> (Vec<(Option<String>, u64)>, Vec<String>) {
    let frames = &response.frames;
    let mut groups = Vec::with_capacity(frames.len());
    let mut calls: std::collections::BTreeMap<u32, (String, String)> = std::collections::BTreeMap::new();
    let mut signed = false;
    let mut refusal = String::new();
    for (at, frame) in frames.iter().enumerate() {
        let delay = if let Frame::DelayMs(ms) = frame { *ms } else { 0 };
        let text = match frame {
            Frame::Text(t) => Some(parts_event(meta, json!([{"text": t}]))),
            Frame::Filler(bytes) => {
                Some(parts_event(meta, json!([{"text": "x".repeat((*bytes).min(FILLER_BYTES_MAX))}])))
            }
            Frame::Reasoning(t) => Some(parts_event(meta, json!([{"text": t, "thought": true}]))),
            Frame::ToolCall { index, name, arguments, .. } => {
                let call = calls.entry(*index).or_default();
                if let Some(name) = name {
                    call.0.clone_from(name);
                }
                call.1.push_str(arguments);
                // A call is sent whole, at its last fragment.
                let last =
                    !frames[at + 1..].iter().any(|f| matches!(f, Frame::ToolCall { index: i, .. } if i == index));
                last.then(|| {
                    let (name, arguments) = calls.remove(index).unwrap_or_default();
                    let args = whole_args(&arguments);
                    let mut part = json!({"functionCall": {"name": name, "args": args}});
                    if !signed {
                        signed = true;
                        part["thoughtSignature"] = json!(call_signature(&name, &args));
                    }
                    parts_event(meta, json!([part]))
                })
            }
            Frame::Refusal(t) => {
                refusal.push_str(t);
                None
            }
            // Gemini sends no keep-alives (a comment would break the official SDK's reader).
            Frame::KeepAlive | Frame::DelayMs(_) => None,
            Frame::Raw(raw) => Some(format!("data: {raw}\n\n")),
            Frame::ErrorEvent { status, message } => Some(event(&json!({"error": {
                "code": status, "message": message, "status": status_name(*status)}}))),
            Frame::Event { name, data } => Some(super::render::named_event(name.as_deref(), data)),
        };
        groups.push((text, delay));
    }
    let mut tail = Vec::new();
    if response.done {
        let reason = match response.finish.as_deref() {
            _ if response.stop_reason.is_some() => response.stop_reason.as_deref().unwrap_or_default(),
            _ if !refusal.is_empty() => "SAFETY",
            Some("length") => "MAX_TOKENS",
            Some("content_filter") => "SAFETY",
            _ => "STOP",
        };
        let mut candidate = json!({"finishReason": reason, "index": 0});
        if !refusal.is_empty() {
            candidate["finishMessage"] = json!(refusal);
        }
        let mut last = json!({"candidates": [candidate], "modelVersion": meta.model, "responseId": response_id(meta)});
        if let Some([prompt, completion, total]) = response.usage {
            last["usageMetadata"] =
                json!({"promptTokenCount": prompt, "candidatesTokenCount": completion, "totalTokenCount": total});
        }
        tail.push(event(&last));
    }
    (groups, tail)
}

/// Google's status word for an HTTP status.
pub(super) fn status_name(status: u16) -> &'static str {
    match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_sent_whole_and_signed_once_with_the_finish_and_usage_last() {
        let meta = Meta { n: 1, created: 0, model: "gemini-x".into(), whole: false, include_usage: false };
        let response = Response {
            frames: vec![
                Frame::Reasoning("plan".into()),
                Frame::ToolCall {
                    index: 0,
                    id: Some("c1".into()),
                    name: Some("f".into()),
                    arguments: "{\"a\":".into(),
                },
                Frame::ToolCall { index: 0, id: None, name: None, arguments: "1}".into() },
                Frame::ToolCall { index: 1, id: Some("c2".into()), name: Some("g".into()), arguments: "{}".into() },
            ],
            finish: Some("tool_calls".into()),
            usage: Some([4, 2, 6]),
            done: true,
            ..Response::default()
        };
        let (groups, tail) = render(&meta, &response);
        assert!(groups[1].0.is_none(), "the first fragment waits for the rest of its call");
        let whole = groups[2].0.clone().unwrap();
        assert!(whole.contains(r#""functionCall":{"args":{"a":1},"name":"f"}"#), "{whole}");
        assert!(whole.contains(&call_signature("f", &json!({"a": 1}))), "{whole}");
        assert!(!groups[3].0.clone().unwrap().contains("thoughtSignature"), "only the first call is signed");
        assert!(tail[0].contains(r#""finishReason":"STOP""#) && tail[0].contains(r#""promptTokenCount":4"#));
    }
}
