//! What the fake server reads of a request: the few fields it answers by, and whether the
//! conversation is one the real APIs would refuse.

use std::sync::Arc;

use bytes::Bytes;
/// A request body as text, verbatim when it is UTF-8 (the usual case, checked at once) and
/// with U+FFFD for what is not (checked piece by piece, much slower).
pub(super) fn text_of(bytes: Bytes) -> Arc<str> {
    match std::str::from_utf8(&bytes) {
        Ok(text) => Arc::from(text),
        Err(_) => Arc::from(String::from_utf8_lossy(&bytes)),
    }
}

/// A request header as text (empty when absent or not text).
pub fn header_text(headers: &hyper::HeaderMap, name: &str) -> String {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

/// The fields of a chat request the server answers by; message text and everything else is
/// skipped unread (a resumed conversation's body runs to hundreds of KiB).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub(super) struct RequestHead {
    /// The conversation's shape (`None`: absent, or not a list of message objects).
    messages: Option<Vec<MessageHead>>,
    pub(super) model: Option<serde_json::Value>,
    pub(super) stream: Option<serde_json::Value>,
    pub(super) stream_options: Option<serde_json::Value>,
}

/// What the server checks of one message: who says it and which tool calls it makes or
/// answers.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct MessageHead {
    role: Option<String>,
    tool_call_id: Option<String>,
    tool_calls: Option<Vec<CallHead>>,
    content: Option<serde_json::Value>,
    refusal: Option<serde_json::Value>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct CallHead {
    id: Option<String>,
}

impl RequestHead {
    /// `body`'s head; a body whose messages are not message objects is read again without
    /// them (its model and stream flags still count), and anything that is not JSON has none.
    pub(super) fn parse(body: &str) -> RequestHead {
        #[derive(serde::Deserialize)]
        struct WithoutMessages {
            #[serde(default)]
            model: Option<serde_json::Value>,
            #[serde(default)]
            stream: Option<serde_json::Value>,
            #[serde(default)]
            stream_options: Option<serde_json::Value>,
        }
        serde_json::from_str::<RequestHead>(body).unwrap_or_else(|_| {
            serde_json::from_str::<WithoutMessages>(body).map_or_else(
                |_| RequestHead::default(),
                |w| RequestHead { messages: None, model: w.model, stream: w.stream, stream_options: w.stream_options },
            )
        })
    }

    /// Whether the conversation ends with a tool's result (a `tool` message).
    pub(super) fn ends_with_tool_result(&self) -> bool {
        self.messages.as_ref().and_then(|m| m.last()).is_some_and(|m| m.role.as_deref() == Some("tool"))
    }

    /// Why the real APIs would refuse this conversation, in their words: every `tool` message
    /// answers a call of the assistant message before it (after that message's other
    /// answers), and every call is answered before the conversation goes on.
    pub(super) fn conversation_problem(&self) -> Result<(), String> {
        let Some(messages) = &self.messages else { return Ok(()) };
        // The calls of the last assistant message that made some, not yet answered.
        let mut waiting: Vec<&str> = Vec::new();
        for message in messages {
            if message.role.as_deref() == Some("tool") {
                let answered = message.tool_call_id.as_deref().unwrap_or_default();
                let Some(at) = waiting.iter().position(|call| *call == answered) else {
                    return Err(format!(
                        "messages with role 'tool' must be a response to a preceding message with 'tool_calls' \
                         (no call {answered:?} is waiting for one)"
                    ));
                };
                waiting.remove(at);
                continue;
            }
            unanswered(&waiting)?;
            // openai-python `ChatCompletionAssistantMessageParam`: content is "Required unless
            // `tool_calls` or `function_call` is specified" (a refusal stands in for it).
            let says_something = |v: &Option<serde_json::Value>| v.as_ref().is_some_and(|v| !v.is_null());
            let calls = message.tool_calls.as_ref().is_some_and(|c| !c.is_empty());
            if message.role.as_deref() == Some("assistant")
                && !calls
                && !says_something(&message.content)
                && !says_something(&message.refusal)
            {
                return Err("Invalid value for 'content': expected a string, got null.".into());
            }
            if message.role.as_deref() == Some("assistant") {
                waiting = message.tool_calls.iter().flatten().map(|c| c.id.as_deref().unwrap_or_default()).collect();
            }
        }
        unanswered(&waiting)
    }
}

/// The refusal of a conversation that goes on (or ends) with calls unanswered.
fn unanswered(waiting: &[&str]) -> Result<(), String> {
    if waiting.is_empty() {
        return Ok(());
    }
    Err(format!(
        "an assistant message with 'tool_calls' must be followed by tool messages responding to each \
         'tool_call_id' (not answered: {waiting:?})"
    ))
}

#[cfg(test)]
mod tests {
    use super::super::render::{Meta, MODEL_ID, MODEL_NAME_CHARS_MAX};
    use super::*;
    use serde_json::json;

    #[test]
    fn a_conversation_is_refused_where_the_real_apis_refuse_it() {
        let problem = |messages: serde_json::Value| {
            RequestHead::parse(&json!({"model": "m", "messages": messages}).to_string()).conversation_problem()
        };
        let user = json!({"role": "user", "content": "hi"});
        let calls = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        ]});
        let answer = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "ok"});
        // Both calls answered, in any order, before the conversation goes on.
        assert_eq!(
            problem(json!([user, calls, answer("b"), answer("a"), {"role": "assistant", "content": "done"}, user])),
            Ok(())
        );
        assert_eq!(problem(json!([{"role": "system", "content": "s"}, user])), Ok(()));
        // A result with no call waiting for it: before any call, twice, or an unknown id.
        for messages in [
            json!([user, answer("a")]),
            json!([user, calls, answer("a"), answer("a"), answer("b")]),
            json!([user, calls, answer("c")]),
        ] {
            let refused = problem(messages.clone()).unwrap_err();
            assert!(
                refused.contains("must be a response to a preceding message with 'tool_calls'"),
                "{messages}: {refused}"
            );
        }
        // A call left unanswered when the conversation goes on, or ends.
        for messages in [json!([user, calls, answer("a"), user]), json!([user, calls, answer("b")])] {
            let refused = problem(messages.clone()).unwrap_err();
            assert!(
                refused.contains("must be followed by tool messages") && refused.contains('"'),
                "{messages}: {refused}"
            );
        }
        // Not a conversation the server can read: not refused for its shape (nor is anything
        // without messages).
        assert_eq!(RequestHead::parse(r#"{"messages": [1, 2]}"#).conversation_problem(), Ok(()));
        assert_eq!(RequestHead::parse("not json").conversation_problem(), Ok(()));
        assert_eq!(RequestHead::parse(r#"{"messages": [1], "model": "kept"}"#).model, Some(json!("kept")));
    }

    #[test]
    fn the_request_head_reads_model_stream_and_usage_and_nothing_else() {
        let meta = Meta::for_request(
            0,
            0,
            r#"{"messages":[{"role":"user","content":"x"}],"model":"deepseek-chat","stream":false,"stream_options":{"include_usage":true}}"#,
        );
        assert_eq!((meta.model.as_str(), meta.whole, meta.include_usage), ("deepseek-chat", true, true));
        // Not JSON, not an object, a model that is not a string, `stream` that is not `false`.
        for body in ["not json", "[1]", r#"{"model":7,"stream":"false","stream_options":{"include_usage":"yes"}}"#] {
            let meta = Meta::for_request(0, 0, body);
            assert_eq!((meta.model.as_str(), meta.whole, meta.include_usage), (MODEL_ID, false, false), "{body}");
        }
        let long = format!(r#"{{"model":"{}"}}"#, "é".repeat(MODEL_NAME_CHARS_MAX + 5));
        assert_eq!(Meta::for_request(0, 0, &long).model.chars().count(), MODEL_NAME_CHARS_MAX);
    }
}
