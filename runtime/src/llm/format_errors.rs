//! A failed response read in its wire format's own words: the HTTP status first, then what
//! the format's error body says of itself.

use hyper::HeaderMap;

use super::classify::classify_status;
use super::format::WireFormat;
use crate::event::Failure;

/// Classifies a non-2xx response of a provider speaking `format`: the status and message as
/// [`classify_status`] reads them, then what the format's error body says of itself
/// (Anthropic's error `type`, Gemini's `status`, `reason` and `RetryInfo`).
pub fn classify_for(format: WireFormat, status: u16, headers: &HeaderMap, body: &str, now_ms: u64) -> Failure {
    let mut failure = classify_status(status, headers, body, now_ms);
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    // Gemini has been seen to wrap its error in a one-element array.
    let parsed = match parsed {
        Some(serde_json::Value::Array(mut items)) if items.len() == 1 => items.pop(),
        other => other,
    };
    let Some(error) = parsed.as_ref().and_then(|v| v.get("error")) else { return failure };
    let message = error.get("message").and_then(|m| m.as_str()).unwrap_or_default();
    match format {
        WireFormat::Openai => {}
        WireFormat::Anthropic => {
            let kind = error.get("type").and_then(|t| t.as_str()).unwrap_or_default();
            if let Some(code) = super::anthropic::code_of_type(kind, message) {
                failure.code = code;
            }
        }
        WireFormat::Gemini => {
            let (code, retry_after_ms) = super::gemini::code_of_error(error, message);
            failure.code = code.unwrap_or(failure.code);
            failure.provider_retry_after_ms = failure.provider_retry_after_ms.or(retry_after_ms);
        }
    }
    failure
}
