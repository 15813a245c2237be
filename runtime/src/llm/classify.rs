//! Classification of non-2xx responses (FAILURE-DEEPSEEK-HTTP).

use hyper::HeaderMap;

use crate::event::{ErrorCode, Failure};

/// Longest provider error text kept in a failure message, in bytes.
pub const ERROR_MESSAGE_BYTES_MAX: usize = 512;

/// The provider's request id (`x-request-id`, `x-deepseek-request-id`, or Anthropic's
/// `request-id`).
pub fn request_id(headers: &HeaderMap) -> Option<String> {
    ["x-request-id", "x-deepseek-request-id", "request-id"]
        .iter()
        .find_map(|name| headers.get(*name))
        .and_then(|v| v.to_str().ok())
        .map(|v| v.chars().take(128).collect())
}

/// The provider's retry advice in milliseconds: `retry-after-ms`, else `Retry-After` as
/// seconds or as an HTTP-date relative to `now_ms`. Values ≤ 0 are ignored.
pub fn retry_after_ms(headers: &HeaderMap, now_ms: u64) -> Option<u64> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms > 0.0 {
            return Some(ms.ceil() as u64);
        }
    }
    let value = header("retry-after")?;
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        let seconds: u64 = value.parse().ok()?;
        return (seconds > 0).then(|| seconds.saturating_mul(1000));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    let date_ms = u64::try_from(date.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis()).ok()?;
    let delay = date_ms.checked_sub(now_ms)?;
    (delay > 0).then_some(delay)
}

/// The provider's error message: `error.message` of a JSON body, else the body text,
/// truncated.
fn provider_message(body: &str) -> String {
    let from_json = serde_json::from_str::<serde_json::Value>(body).ok().and_then(|v| {
        v.get("error").and_then(|e| e.get("message").or(Some(e))).and_then(|m| m.as_str().map(str::to_owned))
    });
    bounded(&from_json.unwrap_or_else(|| body.trim().to_owned()))
}

/// A provider's message kept to at most [`ERROR_MESSAGE_BYTES_MAX`] bytes, cut on a character
/// boundary.
pub(crate) fn bounded(text: &str) -> String {
    let mut end = text.len().min(ERROR_MESSAGE_BYTES_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

pub(crate) fn mentions_quota(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    ["quota", "insufficient balance", "insufficient_balance", "billing"].iter().any(|w| lower.contains(w))
}

pub(crate) fn mentions_context_overflow(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    // Gemini: "The input token count (N) exceeds the maximum number of tokens allowed (M)".
    [
        "context length",
        "context_length",
        "maximum context",
        "context window",
        "too many tokens",
        "prompt is too long",
        "exceeds the maximum number of tokens",
    ]
    .iter()
    .any(|w| lower.contains(w))
}

/// The code of an HTTP status and the provider's message (FAILURE-DEEPSEEK-HTTP): also what
/// an error event inside a 200 stream means when it names a status.
pub(crate) fn code_for_status(status: u16, message: &str) -> ErrorCode {
    if status == 402 || mentions_quota(message) {
        return ErrorCode::Quota;
    }
    match status {
        401 | 403 => ErrorCode::Auth,
        429 => ErrorCode::RateLimit,
        400 if mentions_context_overflow(message) => ErrorCode::ContextWindowExceeded,
        400 | 422 => ErrorCode::InvalidRequest,
        500..=599 => ErrorCode::Server,
        other => ErrorCode::Http(other),
    }
}

/// Classifies a non-2xx response.
pub fn classify_status(status: u16, headers: &HeaderMap, body: &str, now_ms: u64) -> Failure {
    let message = provider_message(body);
    let code = code_for_status(status, &message);
    let message = if message.is_empty() { format!("HTTP {status}") } else { format!("HTTP {status}: {message}") };
    tracing::debug!(status, code = %code, "response classified");
    Failure {
        message,
        code,
        status: Some(status),
        provider_retry_after_ms: retry_after_ms(headers, now_ms),
        request_id: request_id(headers),
    }
}
