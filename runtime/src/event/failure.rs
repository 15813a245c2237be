use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Stable error codes (FAILURE-EVENT-LOG, docs/internals/requirements.md). They are strings on
/// the wire and in transcripts; renaming one is a breaking change to every stored session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// 401/403: the credential was refused.
    Auth,
    /// Quota exhausted (402 or quota wording).
    Quota,
    /// 429.
    RateLimit,
    /// 400 (other than context overflow) and 422.
    InvalidRequest,
    /// 400 with context-overflow wording.
    ContextWindowExceeded,
    /// Any status ≥ 500.
    Server,
    /// Any other non-2xx status, e.g. `HTTP_418`.
    Http(u16),
    /// Connect/send failure or a broken stream.
    Transport,
    /// The idle watchdog expired while a read was outstanding.
    Timeout,
    /// The caller aborted.
    Aborted,
    /// No body, or `[DONE]` with no content block and a stop finish.
    EmptyResponse,
    /// Undecodable event JSON or a size limit exceeded.
    MalformedResponse,
    /// Clean EOF without `[DONE]`.
    StreamClosed,
    /// The answer would not fit in one session record (`RECORD_LINE_BYTES_MAX`): the attempt
    /// ends before anything oversize is appended. Never retried: the same request would
    /// produce the same answer.
    ResponseTooLarge,
    /// The server's TLS certificate is not trusted (unknown CA, wrong host name, expired).
    /// Never retried: the same certificate comes back.
    TlsCertificate,
    /// The route needs a credential that is not set.
    MissingCredential,
    /// The credential is present but unusable (e.g. not valid header text).
    InvalidCredential,
    /// No adapter serves the requested provider.
    NoAdapter,
    /// Anything not classified above.
    Unknown,
    /// A tool's own deadline fired first.
    ToolTimeout,
    /// The call was never dispatched because the turn was aborted.
    AbortedBeforeDispatch,
    /// The call was durably started but its outcome was lost in a crash.
    ToolOutcomeUnknown,
    /// The call was requested but never durably started before a crash.
    ToolNotStarted,
    /// The tool ran and reported failure.
    ToolFailed,
    /// What the turn reached could not be made durable (ENOSPC, EIO, SQLITE_FULL, a lost
    /// database connection): it is not kept, whatever was shown while it ran
    /// (FAILURE-OUTCOME-DURABLE). The message names the storage error.
    Persist,
    /// A person denied the call its approval (FAILURE-APPROVAL): it never ran; the result
    /// carries their reason.
    ApprovalDenied,
    /// The call's approval deadline passed with no decision: it never ran.
    ApprovalExpired,
}

/// Every code that has a fixed spelling (all but `HTTP_<status>`), for exhaustive tests.
pub const FIXED_ERROR_CODES: [ErrorCode; 26] = [
    ErrorCode::Auth,
    ErrorCode::Quota,
    ErrorCode::RateLimit,
    ErrorCode::InvalidRequest,
    ErrorCode::ContextWindowExceeded,
    ErrorCode::Server,
    ErrorCode::Transport,
    ErrorCode::Timeout,
    ErrorCode::Aborted,
    ErrorCode::EmptyResponse,
    ErrorCode::MalformedResponse,
    ErrorCode::StreamClosed,
    ErrorCode::ResponseTooLarge,
    ErrorCode::TlsCertificate,
    ErrorCode::MissingCredential,
    ErrorCode::InvalidCredential,
    ErrorCode::NoAdapter,
    ErrorCode::Unknown,
    ErrorCode::ToolTimeout,
    ErrorCode::AbortedBeforeDispatch,
    ErrorCode::ToolOutcomeUnknown,
    ErrorCode::ToolNotStarted,
    ErrorCode::ToolFailed,
    ErrorCode::Persist,
    ErrorCode::ApprovalDenied,
    ErrorCode::ApprovalExpired,
];

impl ErrorCode {
    fn fixed_name(self) -> Option<&'static str> {
        Some(match self {
            ErrorCode::Auth => "AUTH",
            ErrorCode::Quota => "QUOTA",
            ErrorCode::RateLimit => "RATE_LIMIT",
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::ContextWindowExceeded => "CONTEXT_WINDOW_EXCEEDED",
            ErrorCode::Server => "SERVER",
            ErrorCode::Http(_) => return None,
            ErrorCode::Transport => "TRANSPORT",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::Aborted => "ABORTED",
            ErrorCode::EmptyResponse => "EMPTY_RESPONSE",
            ErrorCode::MalformedResponse => "MALFORMED_RESPONSE",
            ErrorCode::StreamClosed => "STREAM_CLOSED",
            ErrorCode::ResponseTooLarge => "RESPONSE_TOO_LARGE",
            ErrorCode::TlsCertificate => "TLS_CERTIFICATE",
            ErrorCode::MissingCredential => "MISSING_CREDENTIAL",
            ErrorCode::InvalidCredential => "INVALID_CREDENTIAL",
            ErrorCode::NoAdapter => "NO_ADAPTER",
            ErrorCode::Unknown => "UNKNOWN",
            ErrorCode::ToolTimeout => "TOOL_TIMEOUT",
            ErrorCode::AbortedBeforeDispatch => "ABORTED_BEFORE_DISPATCH",
            ErrorCode::ToolOutcomeUnknown => "TOOL_OUTCOME_UNKNOWN",
            ErrorCode::ToolNotStarted => "TOOL_NOT_STARTED",
            ErrorCode::ToolFailed => "TOOL_FAILED",
            ErrorCode::Persist => "PERSIST",
            ErrorCode::ApprovalDenied => "APPROVAL_DENIED",
            ErrorCode::ApprovalExpired => "APPROVAL_EXPIRED",
        })
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self, self.fixed_name()) {
            (_, Some(name)) => f.write_str(name),
            (ErrorCode::Http(status), None) => write!(f, "HTTP_{status}"),
            (_, None) => unreachable!("only Http lacks a fixed name"),
        }
    }
}

/// A string that is not one of the stable codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown error code {0:?}")]
pub struct UnknownErrorCode(pub String);

impl FromStr for ErrorCode {
    type Err = UnknownErrorCode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(code) = FIXED_ERROR_CODES.iter().find(|c| c.fixed_name() == Some(s)) {
            return Ok(*code);
        }
        // `HTTP_<status>`: exactly three digits, 100..=999 (what HTTP allows), no sign or padding.
        if let Some(digits) = s.strip_prefix("HTTP_") {
            if digits.len() == 3 && digits.bytes().all(|b| b.is_ascii_digit()) {
                let status: u16 = digits.parse().map_err(|_| UnknownErrorCode(s.to_owned()))?;
                if (100..=999).contains(&status) {
                    return Ok(ErrorCode::Http(status));
                }
            }
        }
        Err(UnknownErrorCode(s.to_owned()))
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A classified failure, as recorded in `turn/end`, `llm/retry` and `finish` chunks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    /// Human-readable explanation. Never contains a credential.
    pub message: String,
    /// The stable code.
    pub code: ErrorCode,
    /// HTTP status, when the failure came from a response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The provider's `Retry-After` advice, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_retry_after_ms: Option<u64>,
    /// The provider's request id (`x-request-id` / `x-deepseek-request-id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl Failure {
    /// A failure with just a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { message: message.into(), code, status: None, provider_retry_after_ms: None, request_id: None }
    }
}
