//! Anthropic's Messages API (FAILURE-WIRE-FORMATS): the request a conversation becomes
//! (`request.rs`), how its event stream reads into chunks (`stream.rs`), and what its error
//! bodies mean.

mod request;
mod stream;

pub(crate) use request::request_body;
pub(crate) use stream::Reader;

use crate::event::ErrorCode;

/// The `anthropic-version` header every request carries.
pub(crate) const API_VERSION: &str = "2023-06-01";

/// The code of an Anthropic error `type` (`overloaded_error`, …), in an HTTP error body or an
/// `error` event inside a 200 stream; `None` for a type this reader does not know.
pub(crate) fn code_of_type(kind: &str, message: &str) -> Option<ErrorCode> {
    Some(match kind {
        "overloaded_error" | "api_error" => ErrorCode::Server,
        "rate_limit_error" => ErrorCode::RateLimit,
        "authentication_error" | "permission_error" => ErrorCode::Auth,
        "billing_error" => ErrorCode::Quota,
        "request_too_large" => ErrorCode::InvalidRequest,
        "invalid_request_error" if super::classify::mentions_context_overflow(message) => {
            ErrorCode::ContextWindowExceeded
        }
        "invalid_request_error" | "not_found_error" => ErrorCode::InvalidRequest,
        _ => return None,
    })
}
