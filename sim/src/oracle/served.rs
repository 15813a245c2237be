//! The oracle's own reading of what a scripted model response means (FAILURE-DEEPSEEK-HTTP,
//! FAILURE-DEEPSEEK-STREAM, FAILURE-RETRY-POLICY), decided from the script alone. It shares no code with the
//! adapter's classifier on purpose: a classifier that maps `401` to `HTTP_401`, or retries a
//! `400`, must disagree with something it cannot touch.

use faultline_runtime::event::ErrorCode;

use crate::catalog::Reading;
use crate::model_server::{Frame, Response};

/// Longest streamed text, in bytes, for which a clean end without `[DONE]` is certainly
/// `STREAM_CLOSED` (far below every answer limit a scenario may set, so the answer limit
/// cannot end the attempt first).
const CLEAN_EOF_TEXT_BYTES_MAX: usize = 1024;

/// Provider wording that SPEC calls quota exhaustion, as the harness serves it.
const QUOTA_WORDS: [&str; 2] = ["quota", "insufficient balance"];

/// Provider wording that SPEC calls a context overflow, as the harness serves it.
const CONTEXT_WORDS: [&str; 2] = ["maximum context length", "context length"];

/// The code a client must give `response`, when the script alone decides it: an HTTP error
/// status (with its body's wording), a clean end of stream without `[DONE]`, an empty body,
/// an empty completion, an undecodable event. `None` when timing decides (a stall, a cut
/// connection, a slow frame) or the script replays a recorded stream.
pub(super) fn served_code(response: &Response) -> Option<ErrorCode> {
    // A world catalog entry's reading is its specification's, written in the catalog.
    if let Some(reading) = catalog_reading(response) {
        return if let Reading::Failure(code) = reading { Some(code) } else { None };
    }
    if response.recorded.is_some() {
        return None;
    }
    if let Some(status) = response.status {
        let body = response.body.as_deref().unwrap_or("").to_ascii_lowercase();
        let says = |words: &[&str]| words.iter().any(|w| body.contains(w));
        return Some(match status {
            402 => ErrorCode::Quota,
            _ if says(&QUOTA_WORDS) => ErrorCode::Quota,
            401 | 403 => ErrorCode::Auth,
            429 => ErrorCode::RateLimit,
            400 if says(&CONTEXT_WORDS) => ErrorCode::ContextWindowExceeded,
            400 | 422 => ErrorCode::InvalidRequest,
            500..=599 => ErrorCode::Server,
            other => ErrorCode::Http(other),
        });
    }
    let untimed = response.disconnect_after_frames.is_none() && response.stall_after_frames.is_none();
    // An error event inside a 200 stream is the provider's failure, with the status it names,
    // in every format: never a normal end.
    let error_event = response.frames.iter().find_map(|f| match f {
        Frame::ErrorEvent { status, message } => Some((*status, message.as_str())),
        _ => None,
    });
    if let (Some((status, message)), true) = (error_event, untimed) {
        return served_code(&Response::status(status, &[], message));
    }
    let timing_free = response.disconnect_after_frames.is_none()
        && response.stall_after_frames.is_none()
        && response.frame_delay_ms == 0
        && response
            .frames
            .iter()
            .all(|f| matches!(f, Frame::Text(_) | Frame::Refusal(_) | Frame::KeepAlive | Frame::Raw(_)));
    if !timing_free {
        return None;
    }
    // A raw body replaces the stream: empty is "no body"; anything else is not decided here.
    if let Some(body) = &response.body {
        return body.trim().is_empty().then_some(ErrorCode::EmptyResponse);
    }
    let raws: Vec<&str> = response
        .frames
        .iter()
        .filter_map(|f| if let Frame::Raw(raw) = f { Some(raw.as_str()) } else { None })
        .collect();
    if let [raw] = raws.as_slice() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(raw) else {
            let only_frame = response.frames.len() == 1;
            return only_frame.then_some(ErrorCode::MalformedResponse);
        };
        return event.get("error").map(error_event_code);
    }
    if !raws.is_empty() {
        return None;
    }
    // A refusal is the model's answer as much as text is (never an empty completion).
    let text_bytes: usize = response
        .frames
        .iter()
        .map(|f| match f {
            Frame::Text(t) | Frame::Refusal(t) => t.len(),
            _ => 0,
        })
        .sum();
    match (response.done, response.finish.as_deref()) {
        (false, None) if text_bytes <= CLEAN_EOF_TEXT_BYTES_MAX => Some(ErrorCode::StreamClosed),
        (true, Some("stop")) if text_bytes == 0 => Some(ErrorCode::EmptyResponse),
        _ => None,
    }
}

/// Whether `response` is a complete answer a client must take as it is: a whole stream (no
/// status, no raw body, no cut, no stall, no delay that an idle timeout could meet) of text,
/// a refusal or tool calls, ended with `[DONE]`, that the oracle's own reading finds no
/// failure in.
pub(super) fn is_complete_answer(response: &Response) -> bool {
    if let Some(reading) = catalog_reading(response) {
        return !reading.fails();
    }
    let plain = response.status.is_none()
        && response.body.is_none()
        && response.recorded.is_none()
        && response.done
        && response.disconnect_after_frames.is_none()
        && response.stall_after_frames.is_none()
        && response.frame_delay_ms == 0;
    let answered = response.frames.iter().any(|f| match f {
        Frame::Text(text) | Frame::Refusal(text) => !text.is_empty(),
        Frame::ToolCall { .. } => true,
        _ => false,
    });
    let only_content = response.frames.iter().all(|f| {
        matches!(
            f,
            Frame::Text(_) | Frame::Refusal(_) | Frame::Reasoning(_) | Frame::ToolCall { .. } | Frame::KeepAlive
        )
    });
    plain && answered && only_content && served_code(response).is_none()
}

/// The reading the world catalog gives `response`, when it was drawn from one.
pub(super) fn catalog_reading(response: &Response) -> Option<Reading> {
    response.entry.as_deref().and_then(crate::catalog::wire_reading)
}

/// The wait a served failure's Retry-After advises, in ms after the request arrived (server
/// clock): `retry-after-ms` when finite and above zero, else `retry-after` as whole seconds
/// above zero or as an HTTP-date after the arrival. Anything else advises nothing — SPEC's
/// "values ≤ 0 are ignored", read here without the adapter's code. For a date, the agent reads
/// the response later than it arrived, so its own wait is shorter, but its retry still comes
/// no sooner than the date: `advice` ms after the arrival.
pub(super) fn advice_ms(response: &Response, served_at_ms: u64) -> Option<u64> {
    response.status?;
    let header =
        |name: &str| response.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim());
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms > 0.0 {
            return Some(ms.ceil() as u64);
        }
    }
    let value = header("retry-after")?;
    // Delay-seconds is digits only (RFC 9110): no sign, no fraction.
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        let seconds = value.parse::<u64>().unwrap_or(u64::MAX);
        return (seconds > 0).then(|| seconds.saturating_mul(1000));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    let date_ms = u64::try_from(date.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis()).ok()?;
    let arrived_ms = crate::seams::SIM_EPOCH_MS + served_at_ms;
    date_ms.checked_sub(arrived_ms).filter(|&ms| ms > 0)
}

/// The code of an error event inside a 200 stream (FAILURE-PROVIDER-SHAPES):
/// the status it names, read like an HTTP status with its message's wording; else OpenAI's
/// error `type`; else `SERVER`.
fn error_event_code(error: &serde_json::Value) -> ErrorCode {
    let status = ["status_code", "status"]
        .iter()
        .find_map(|key| error.get(*key).and_then(serde_json::Value::as_u64))
        .and_then(|s| u16::try_from(s).ok())
        .filter(|s| (100..=999).contains(s));
    if let Some(status) = status {
        let message = error.get("message").and_then(|m| m.as_str()).unwrap_or("");
        return served_code(&Response::status(status, &[], message)).expect("a status decides its code");
    }
    match error.get("type").and_then(|t| t.as_str()) {
        Some("invalid_request_error") => ErrorCode::InvalidRequest,
        Some("rate_limit_error" | "rate_limit_exceeded" | "tokens") => ErrorCode::RateLimit,
        Some("insufficient_quota") => ErrorCode::Quota,
        Some("authentication_error" | "permission_error") => ErrorCode::Auth,
        _ => ErrorCode::Server,
    }
}
