//! What a Gemini error body means, in an HTTP error body or an event inside a 200 stream.

use crate::event::ErrorCode;

/// The code of a Gemini error (`{"error":{"code":…,"status":…,"details":[…]}}`), in an HTTP
/// error body or an event inside a 200 stream, and its retry advice (`RetryInfo`), in ms.
pub(crate) fn code_of_error(error: &serde_json::Value, message: &str) -> (Option<ErrorCode>, Option<u64>) {
    let status = error.get("status").and_then(|s| s.as_str()).unwrap_or_default();
    let code = error.get("code").and_then(serde_json::Value::as_u64).and_then(|c| u16::try_from(c).ok());
    let details = error.get("details").and_then(|d| d.as_array()).map(Vec::as_slice).unwrap_or_default();
    let retry_after_ms = details.iter().find_map(|d| {
        let kind = d.get("@type").and_then(|t| t.as_str())?;
        kind.ends_with("google.rpc.RetryInfo")
            .then(|| d.get("retryDelay").and_then(|r| r.as_str()).and_then(duration_ms))?
    });
    let reason = |wanted: &str| details.iter().any(|d| d.get("reason").and_then(|r| r.as_str()) == Some(wanted));
    let code = Some(match status {
        // A per-minute quota, with its own wait: a rate limit, whatever its wording.
        "RESOURCE_EXHAUSTED" if retry_after_ms.is_some() => ErrorCode::RateLimit,
        "RESOURCE_EXHAUSTED" if crate::llm::classify::mentions_quota(message) => ErrorCode::Quota,
        "RESOURCE_EXHAUSTED" => ErrorCode::RateLimit,
        // Gemini answers a bad key with 400, not 401.
        "INVALID_ARGUMENT" if reason("API_KEY_INVALID") => ErrorCode::Auth,
        "UNAUTHENTICATED" | "PERMISSION_DENIED" => ErrorCode::Auth,
        "UNAVAILABLE" | "INTERNAL" | "DEADLINE_EXCEEDED" => ErrorCode::Server,
        "FAILED_PRECONDITION" | "NOT_FOUND" => ErrorCode::InvalidRequest,
        // Neither a status nor a code: the HTTP status decides (a proxy's body, not Gemini's).
        _ => return (code.map(|c| crate::llm::classify::code_for_status(c, message)), retry_after_ms),
    });
    (code, retry_after_ms)
}

/// A protobuf `Duration` in JSON (`"26s"`, `"1.5s"`) in ms, rounded up; `None` for anything
/// else or a wait of nothing.
fn duration_ms(text: &str) -> Option<u64> {
    let seconds: f64 = text.strip_suffix('s')?.parse().ok()?;
    (seconds.is_finite() && seconds > 0.0 && seconds < 1e9).then(|| (seconds * 1000.0).ceil() as u64)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_quota_error_with_a_retry_delay_is_a_rate_limit_with_its_wait() {
        let error = json!({"code": 429, "message": "You exceeded your current quota, please check your plan and billing details.",
            "status": "RESOURCE_EXHAUSTED", "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "26s"}]});
        assert_eq!(
            code_of_error(&error, error["message"].as_str().unwrap()),
            (Some(ErrorCode::RateLimit), Some(26_000))
        );
        let no_wait =
            json!({"code": 429, "message": "You exceeded your current quota", "status": "RESOURCE_EXHAUSTED"});
        assert_eq!(code_of_error(&no_wait, "You exceeded your current quota"), (Some(ErrorCode::Quota), None));
    }

    #[test]
    fn statuses_read_as_their_codes() {
        let of = |error: serde_json::Value| code_of_error(&error, "m").0.unwrap();
        assert_eq!(of(json!({"code": 503, "status": "UNAVAILABLE"})), ErrorCode::Server);
        assert_eq!(of(json!({"code": 400, "status": "FAILED_PRECONDITION"})), ErrorCode::InvalidRequest);
        assert_eq!(
            of(json!({"code": 400, "status": "INVALID_ARGUMENT", "details": [{"reason": "API_KEY_INVALID"}]})),
            ErrorCode::Auth
        );
        assert_eq!(of(json!({"code": 400, "status": "INVALID_ARGUMENT"})), ErrorCode::InvalidRequest);
        assert_eq!(of(json!({"code": 403, "status": "PERMISSION_DENIED"})), ErrorCode::Auth);
        // A body that is not Gemini's (a proxy's) says nothing: the HTTP status decides.
        assert_eq!(code_of_error(&json!({"message": "slow down"}), "slow down").0, None);
        assert_eq!(duration_ms("1.5s"), Some(1500));
        assert_eq!(duration_ms("0s"), None);
        assert_eq!(duration_ms("soon"), None);
    }
}
