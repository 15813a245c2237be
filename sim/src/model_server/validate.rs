//! What Anthropic's and Gemini's APIs refuse before any model runs, in their words
//! (FAILURE-WIRE-FORMATS): a history whose tool calls and results do not pair up, and
//! reasoning that did not come back as it was signed. The server's refusals are the oracle's
//! evidence that a request the runtime built — after a retry, a crash and its repair — is one
//! the provider would not accept (`request-accepted`). OpenAI's rules are in `request.rs`.

use std::collections::BTreeSet;

use serde_json::Value;

use super::render_gemini::call_signature;
use super::signature::{same, sign};

/// What the server remembers of what it signed, to tell a dropped signature from one never
/// given.
#[derive(Debug, Default)]
pub(crate) struct Issued {
    /// Anthropic: the ids of the tool calls it streamed after a signed thinking block.
    pub thinking_calls: BTreeSet<String>,
    /// Gemini: the calls (name and arguments) it streamed with a `thoughtSignature`.
    pub signed_calls: BTreeSet<String>,
}

/// The key of a Gemini call: its name and canonical arguments.
pub(crate) fn call_key(name: &str, args: &Value) -> String {
    format!("{name}{args}")
}

/// Why Anthropic's API would refuse `body` (a `messages` request), in its words.
pub(crate) fn anthropic_problem(body: &Value, issued: &Issued) -> Result<(), String> {
    if !body.get("max_tokens").is_some_and(Value::is_u64) {
        return Err("max_tokens: Field required".into());
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Err("messages: Field required".into());
    };
    let merged = merge_roles(messages)?;
    for (n, (role, blocks)) in merged.iter().enumerate() {
        if blocks.is_empty() {
            return Err(format!("messages.{n}: all messages must have non-empty content except for the optional final assistant message"));
        }
        for (m, block) in blocks.iter().enumerate() {
            block_problem(block).map_err(|e| format!("messages.{n}.content.{m}: {e}"))?;
        }
        if role == "assistant" {
            tool_results_follow(&merged, n)?;
        } else if n == 0 || merged[n - 1].0 != "assistant" {
            stray_results(blocks, n)?;
        }
    }
    latest_thinking_kept(&merged, issued)
}

type Merged = Vec<(String, Vec<Value>)>;

/// Consecutive messages of one role combined, as the API combines them.
fn merge_roles(messages: &[Value]) -> Result<Merged, String> {
    let mut merged: Merged = Vec::new();
    for (n, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
        if !matches!(role, "user" | "assistant") {
            return Err(format!("messages.{n}.role: Input should be 'user' or 'assistant'"));
        }
        let blocks = match message.get("content") {
            Some(Value::String(text)) => vec![serde_json::json!({"type": "text", "text": text})],
            Some(Value::Array(blocks)) => blocks.clone(),
            _ => return Err(format!("messages.{n}.content: Field required")),
        };
        match merged.last_mut() {
            Some((last, kept)) if last == role => kept.extend(blocks),
            _ => merged.push((role.to_owned(), blocks)),
        }
    }
    Ok(merged)
}

fn block_problem(block: &Value) -> Result<(), String> {
    let text = |key: &str| block.get(key).and_then(Value::as_str);
    match block.get("type").and_then(Value::as_str) {
        Some("text") if text("text").is_none_or(|t| t.trim().is_empty()) => {
            Err("text content blocks must contain non-whitespace text".into())
        }
        Some("tool_use") => {
            let id = text("id").unwrap_or_default();
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
                return Err("tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'".into());
            }
            if !block.get("input").is_some_and(Value::is_object) {
                return Err("tool_use.input: Input should be a valid dictionary".into());
            }
            Ok(())
        }
        Some("thinking") => {
            let (thought, signature) = (text("thinking").unwrap_or_default(), text("signature").unwrap_or_default());
            if same(signature, &sign("thinking", thought)) {
                Ok(())
            } else {
                Err("Invalid `signature` in `thinking` block".into())
            }
        }
        Some("text" | "tool_result" | "redacted_thinking" | "image") => Ok(()),
        other => Err(format!(
            "Input tag '{}' found using 'type' does not match any of the expected tags",
            other.unwrap_or("")
        )),
    }
}

/// Every `tool_use` of the assistant message `n` is answered by a `tool_result` at the start
/// of the next message, and nothing else is answered there.
fn tool_results_follow(merged: &Merged, n: usize) -> Result<(), String> {
    let calls: Vec<&str> = merged[n]
        .1
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .filter_map(|b| b.get("id").and_then(Value::as_str))
        .collect();
    let next = merged.get(n + 1).map(|(_, blocks)| blocks.as_slice()).unwrap_or_default();
    let leading: Vec<&str> = next
        .iter()
        .take_while(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        .filter_map(|b| b.get("tool_use_id").and_then(Value::as_str))
        .collect();
    let missing: Vec<&str> = calls.iter().copied().filter(|id| !leading.contains(id)).collect();
    if !missing.is_empty() {
        return Err(format!(
            "messages.{n}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each \
             `tool_use` block must have a corresponding `tool_result` block in the next message.",
            missing.join(", ")
        ));
    }
    for (m, block) in next.iter().enumerate() {
        if block.get("type").and_then(Value::as_str) != Some("tool_result") {
            continue;
        }
        let id = block.get("tool_use_id").and_then(Value::as_str).unwrap_or_default();
        if !calls.contains(&id) || m >= leading.len() {
            return Err(format!(
                "messages.{}.content.{m}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each \
                 `tool_result` block must have a corresponding `tool_use` block in the previous message.",
                n + 1
            ));
        }
    }
    Ok(())
}

/// A user message that follows no assistant message answers nothing.
fn stray_results(blocks: &[Value], n: usize) -> Result<(), String> {
    match blocks.iter().position(|b| b.get("type").and_then(Value::as_str) == Some("tool_result")) {
        Some(m) => {
            let id = blocks[m].get("tool_use_id").and_then(Value::as_str).unwrap_or_default();
            Err(format!(
                "messages.{n}.content.{m}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each \
                 `tool_result` block must have a corresponding `tool_use` block in the previous message."
            ))
        }
        None => Ok(()),
    }
}

/// The latest assistant message that called tools keeps the signed thinking it came with.
fn latest_thinking_kept(merged: &Merged, issued: &Issued) -> Result<(), String> {
    let Some((n, (_, blocks))) = merged.iter().enumerate().rev().find(|(_, (role, blocks))| {
        role == "assistant" && blocks.iter().any(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
    }) else {
        return Ok(());
    };
    let thought =
        blocks.iter().any(|b| b.get("id").and_then(Value::as_str).is_some_and(|id| issued.thinking_calls.contains(id)));
    let first = blocks.first().and_then(|b| b.get("type")).and_then(Value::as_str).unwrap_or_default();
    if thought && !matches!(first, "thinking" | "redacted_thinking") {
        return Err(format!(
            "messages.{n}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. When \
             `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the \
             lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from \
             previous turns."
        ));
    }
    Ok(())
}

/// Why Gemini's API would refuse `body` (a `streamGenerateContent` request), in its words.
pub(crate) fn gemini_problem(body: &Value, issued: &Issued) -> Result<(), String> {
    let Some(contents) = body.get("contents").and_then(Value::as_array).filter(|c| !c.is_empty()) else {
        return Err("* GenerateContentRequest.contents: contents is not specified\n".into());
    };
    let mut previous: Option<(&str, usize, usize)> = None;
    for (n, content) in contents.iter().enumerate() {
        let role = content.get("role").and_then(Value::as_str).unwrap_or("user");
        if !matches!(role, "user" | "model") {
            return Err("Please use a valid role: user, model.".into());
        }
        let parts = content.get("parts").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        if parts.is_empty() {
            return Err(format!("* GenerateContentRequest.contents[{n}].parts: contents.parts must not be empty.\n"));
        }
        let count = |key: &str| parts.iter().filter(|p| p.get(key).is_some() || p.get(snake(key)).is_some()).count();
        let (calls, responses) = (count("functionCall"), count("functionResponse"));
        if calls > 0 && responses > 0 {
            return Err("Please ensure that function call turn contains at least one function_call part which can \
                        not be mixed with function_response parts."
                .into());
        }
        if previous.is_some_and(|(r, _, _)| r == role) {
            return Err("Please ensure that multiturn requests alternate between user and model.".into());
        }
        if calls > 0 && previous.is_none() {
            return Err(
                "Please ensure that function call turn comes immediately after a user turn or after a function \
                        response turn."
                    .into(),
            );
        }
        let after_calls = previous.map_or(0, |(_, c, _)| c);
        if responses > 0 && (after_calls == 0 || responses != after_calls) {
            return Err(if after_calls == 0 {
                "Please ensure that function response turn comes immediately after a function call turn.".into()
            } else {
                "Please ensure that the number of function response parts is equal to the number of function call \
                 parts of the function call turn."
                    .into()
            });
        }
        if after_calls > 0 && responses == 0 {
            return Err("Please ensure that the number of function response parts is equal to the number of function \
                        call parts of the function call turn."
                .into());
        }
        previous = Some((role, calls, responses));
    }
    signatures_returned(contents, issued)
}

/// `functionCall` as its snake_case twin (the API accepts both spellings).
fn snake(key: &str) -> &'static str {
    match key {
        "functionCall" => "function_call",
        "functionResponse" => "function_response",
        _ => "thought_signature",
    }
}

/// In the current turn (after the last user content with text), every call the server signed
/// comes back with its signature.
fn signatures_returned(contents: &[Value], issued: &Issued) -> Result<(), String> {
    let parts_of = |c: &Value| c.get("parts").and_then(Value::as_array).cloned().unwrap_or_default();
    let current = contents
        .iter()
        .rposition(|c| {
            c.get("role").and_then(Value::as_str) != Some("model")
                && parts_of(c).iter().any(|p| p.get("text").is_some())
        })
        .unwrap_or(0);
    for (n, content) in contents.iter().enumerate().skip(current) {
        for (position, part) in parts_of(content).iter().enumerate() {
            let Some(call) = part.get("functionCall").or_else(|| part.get("function_call")) else { continue };
            let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
            let args = call.get("args").cloned().unwrap_or(Value::Null);
            let given = part.get("thoughtSignature").or_else(|| part.get("thought_signature")).and_then(Value::as_str);
            if let Some(given) = given {
                if !super::signature::decodes(given) {
                    return Err(format!(
                        "Invalid value at 'contents[{n}].parts[{position}].thought_signature' (TYPE_BYTES), Base64 \
                         decoding failed for \"{given}\""
                    ));
                }
            }
            if issued.signed_calls.contains(&call_key(name, &args))
                && !given.is_some_and(|g| same(g, &call_signature(name, &args)))
            {
                return Err(format!(
                    "Function call is missing a thought_signature in functionCall parts. This is required for tools to \
                     work correctly, and missing thought_signature may lead to degraded model performance. Additional \
                     data, function call `default_api:{name}` , position {position}. Please refer to \
                     https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn anthropic_refuses_unanswered_calls_stray_results_and_altered_thinking() {
        let call = json!({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}});
        let result = |id: &str| json!({"type": "tool_result", "tool_use_id": id, "content": "ok"});
        let user = |content| json!({"role": "user", "content": content});
        let assistant = |content| json!({"role": "assistant", "content": content});
        let body = |messages| json!({"model": "m", "max_tokens": 10, "messages": messages});
        let issued = Issued::default();
        assert_eq!(
            anthropic_problem(
                &body(json!([user(json!("hi")), assistant(json!([call])), user(json!([result("toolu_1")]))])),
                &issued
            ),
            Ok(())
        );
        let unanswered = anthropic_problem(
            &body(json!([user(json!("hi")), assistant(json!([call])), user(json!("next"))])),
            &issued,
        );
        assert!(unanswered
            .unwrap_err()
            .contains("ids were found without `tool_result` blocks immediately after: toolu_1"));
        let stray = anthropic_problem(&body(json!([user(json!([result("toolu_9")]))])), &issued);
        assert!(stray.unwrap_err().contains("unexpected `tool_use_id`"));
        let thought =
            |text: &str, signature: &str| json!({"type": "thinking", "thinking": text, "signature": signature});
        let good = thought("plan", &sign("thinking", "plan"));
        assert_eq!(
            anthropic_problem(
                &body(json!([user(json!("hi")), assistant(json!([good, call])), user(json!([result("toolu_1")]))])),
                &issued
            ),
            Ok(())
        );
        let altered = thought("plan!", &sign("thinking", "plan"));
        let refused = anthropic_problem(
            &body(json!([user(json!("hi")), assistant(json!([altered, call])), user(json!([result("toolu_1")]))])),
            &issued,
        );
        assert!(refused.unwrap_err().contains("Invalid `signature` in `thinking` block"));
        let remembered = Issued { thinking_calls: ["toolu_1".to_owned()].into(), ..Issued::default() };
        let dropped = anthropic_problem(
            &body(json!([user(json!("hi")), assistant(json!([call])), user(json!([result("toolu_1")]))])),
            &remembered,
        );
        assert!(dropped.unwrap_err().contains("Expected `thinking` or `redacted_thinking`, but found `tool_use`"));
    }

    #[test]
    fn gemini_refuses_uneven_responses_and_a_dropped_signature() {
        let call = |name: &str| json!({"functionCall": {"name": name, "args": {}}});
        let response = |name: &str| json!({"functionResponse": {"name": name, "response": {"result": "ok"}}});
        let turn = |role: &str, parts| json!({"role": role, "parts": parts});
        let body = |contents| json!({"contents": contents});
        let issued = Issued::default();
        let user = turn("user", json!([{"text": "hi"}]));
        assert_eq!(
            gemini_problem(
                &body(json!([
                    user,
                    turn("model", json!([call("f"), call("g")])),
                    turn("user", json!([response("f"), response("g")]))
                ])),
                &issued
            ),
            Ok(())
        );
        let uneven = gemini_problem(
            &body(json!([user, turn("model", json!([call("f"), call("g")])), turn("user", json!([response("f")]))])),
            &issued,
        );
        assert!(uneven.unwrap_err().contains("number of function response parts is equal"));
        let first = gemini_problem(&body(json!([turn("model", json!([call("f")]))])), &issued);
        assert!(first.unwrap_err().contains("function call turn comes immediately after a user turn"));
        let signed = Issued { signed_calls: [call_key("f", &json!({}))].into(), ..Issued::default() };
        let dropped = gemini_problem(
            &body(json!([user, turn("model", json!([call("f")])), turn("user", json!([response("f")]))])),
            &signed,
        );
        assert!(dropped.unwrap_err().contains("missing a thought_signature"));
        let mut kept = call("f");
        kept["thoughtSignature"] = json!(call_signature("f", &json!({})));
        assert_eq!(
            gemini_problem(
                &body(json!([user, turn("model", json!([kept])), turn("user", json!([response("f")]))])),
                &signed
            ),
            Ok(())
        );
    }
}
