//! What an Anthropic error `type` means, in an HTTP error body or an `error` event inside a
//! 200 stream.

use crate::event::ErrorCode;

/// The code of an Anthropic error `type` (`overloaded_error`, …), in an HTTP error body or an
/// `error` event inside a 200 stream; `None` for a type this reader does not know.
pub(crate) fn code_of_type(kind: &str, message: &str) -> Option<ErrorCode> {
    Some(match kind {
        "overloaded_error" | "api_error" => ErrorCode::Server,
        "rate_limit_error" => ErrorCode::RateLimit,
        "authentication_error" | "permission_error" => ErrorCode::Auth,
        "billing_error" => ErrorCode::Quota,
        "request_too_large" => ErrorCode::InvalidRequest,
        "invalid_request_error" if crate::llm::classify::mentions_context_overflow(message) => {
            ErrorCode::ContextWindowExceeded
        }
        "invalid_request_error" | "not_found_error" => ErrorCode::InvalidRequest,
        _ => return None,
    })
}
