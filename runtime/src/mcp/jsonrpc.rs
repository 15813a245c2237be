//! JSON-RPC 2.0 as MCP uses it: what a client writes (requests and notifications) and what
//! it reads back (responses, and the server's own requests and notifications), each message
//! bounded before it is parsed.

use serde_json::{json, Value};

/// Largest message read from a server, in bytes: a longer one fails the exchange (the call's
/// outcome is then unknown), never a read without end.
pub const MCP_MESSAGE_BYTES_MAX: usize = crate::tool::TOOL_HTTP_REPLY_BYTES_MAX;

/// The JSON-RPC error code for a method the client does not serve.
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;

/// `message` as bytes, refused above [`MCP_MESSAGE_BYTES_MAX`] (then nothing is sent).
pub(crate) fn encode(message: &Value) -> Result<Vec<u8>, String> {
    let bytes = serde_json::to_vec(message).map_err(|e| e.to_string())?;
    if bytes.len() > MCP_MESSAGE_BYTES_MAX {
        return Err(format!("a message of {} bytes, above the {MCP_MESSAGE_BYTES_MAX}-byte limit", bytes.len()));
    }
    Ok(bytes)
}

/// Whether a JSON-RPC error code says the request was refused as a whole (unparseable,
/// invalid, an unknown method, bad params), so nothing of it was run. Any other error may
/// come after the work began.
pub(crate) fn refused_whole(code: i64) -> bool {
    matches!(code, -32700 | -32600 | -32601 | -32602)
}

/// A request's bytes.
pub(crate) fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A notification's bytes (no id: no reply).
pub(crate) fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// A reply to a server's own request.
pub(crate) fn reply(id: &Value, outcome: Result<Value, (i64, &str)>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
    }
}

/// One message from a server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Incoming {
    /// The answer to our request `id`.
    Response { id: u64, outcome: Result<Value, RpcError> },
    /// The server asks something of us (`ping`, or what we did not offer).
    Request { id: Value, method: String },
    /// The server tells us something; nothing depends on it.
    Notification,
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    /// Its code.
    pub code: i64,
    /// Its message, cut to [`RPC_ERROR_MESSAGE_CHARS_MAX`] characters.
    pub message: String,
}

/// Longest error message kept from a server, in characters.
pub const RPC_ERROR_MESSAGE_CHARS_MAX: usize = 512;

/// Reads one message. `Err` says why the bytes are not one (the caller decides what a
/// malformed message means for whatever was waiting).
pub(crate) fn parse(bytes: &[u8]) -> Result<Incoming, String> {
    if bytes.len() > MCP_MESSAGE_BYTES_MAX {
        return Err(format!("a message of {} bytes, above the {MCP_MESSAGE_BYTES_MAX}-byte limit", bytes.len()));
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(message) = value else { return Err("not a JSON-RPC message (not an object)".into()) };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err("not a JSON-RPC 2.0 message".into());
    }
    if let Some(method) = message.get("method").and_then(Value::as_str) {
        return Ok(match message.get("id") {
            Some(id) if !id.is_null() => Incoming::Request { id: id.clone(), method: cut(method, 128) },
            _ => Incoming::Notification,
        });
    }
    let id = message.get("id").and_then(Value::as_u64).ok_or("a response without a numeric id")?;
    let outcome = match (message.get("result"), message.get("error")) {
        (Some(result), None) => Ok(result.clone()),
        (None, Some(error)) => Err(RpcError {
            code: error.get("code").and_then(Value::as_i64).ok_or("an error without a numeric code")?,
            message: cut(error.get("message").and_then(Value::as_str).unwrap_or_default(), RPC_ERROR_MESSAGE_CHARS_MAX),
        }),
        _ => return Err("a response with neither or both of result and error".into()),
    };
    Ok(Incoming::Response { id, outcome })
}

fn cut(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_requests_and_notifications_are_told_apart() {
        let parsed = |text: &str| parse(text.as_bytes());
        assert_eq!(
            parsed(r#"{"jsonrpc":"2.0","id":3,"result":{"a":1}}"#),
            Ok(Incoming::Response { id: 3, outcome: Ok(json!({"a": 1})) })
        );
        assert_eq!(
            parsed(r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"bad"}}"#),
            Ok(Incoming::Response { id: 4, outcome: Err(RpcError { code: -32602, message: "bad".into() }) })
        );
        assert_eq!(
            parsed(r#"{"jsonrpc":"2.0","id":"s1","method":"ping"}"#),
            Ok(Incoming::Request { id: json!("s1"), method: "ping".into() })
        );
        assert_eq!(parsed(r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#), Ok(Incoming::Notification));
    }

    #[test]
    fn what_is_not_one_message_is_refused_with_its_reason() {
        for (text, reason) in [
            ("{", "not JSON"),
            ("[1]", "not an object"),
            (r#"{"id":1,"result":{}}"#, "2.0"),
            (r#"{"jsonrpc":"2.0","id":"x","result":{}}"#, "numeric id"),
            (r#"{"jsonrpc":"2.0","id":1}"#, "neither or both"),
            (r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1}}"#, "neither or both"),
            (r#"{"jsonrpc":"2.0","id":1,"error":{"message":"m"}}"#, "numeric code"),
        ] {
            let error = parse(text.as_bytes()).unwrap_err();
            assert!(error.contains(reason), "{text}: {error}");
        }
        let huge = vec![b' '; MCP_MESSAGE_BYTES_MAX + 1];
        assert!(parse(&huge).unwrap_err().contains("limit"));
    }
}
