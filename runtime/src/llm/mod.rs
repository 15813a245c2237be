//! The model adapter (docs/internals/requirements.md, "The model adapter" and "Configuration and
//! secrets"): OpenAI-compatible, Anthropic and Gemini streams read into one chunk model
//! (FAILURE-PROVIDER-SHAPES, FAILURE-WIRE-FORMATS), failure classification
//! (FAILURE-DEEPSEEK-HTTP, FAILURE-DEEPSEEK-STREAM, FAILURE-ADAPTER-BOUNDARY), provider
//! configuration and credentials (FAILURE-CONFIG-RESOLUTION, FAILURE-CREDENTIAL-ROUTE).

mod adapter;
mod anthropic;
pub(crate) mod assembler;
mod classify;
mod config;
pub(crate) mod conversation;
mod endpoint;
mod format;
mod format_errors;
mod gemini;
pub(crate) mod normalise;
mod proxy;
pub(crate) mod reading;
mod request;
pub(crate) mod sse;
pub(crate) mod step;
pub(crate) mod tls;

pub use adapter::{Adapter, ModelStream, ERROR_BODY_BYTES_MAX};
pub use classify::{classify_status, request_id, retry_after_ms, ERROR_MESSAGE_BYTES_MAX};
pub use config::{
    from_toml, resolve_credential, Backoff, BackoffConfig, ConfigError, Credentials, LiveProvider, Preset,
    ProviderConfig, ResolvedProvider, RetryPolicy, RetryPolicyConfig, Secret, StaticCredentials, DELAY_MS_MAX,
    IDLE_TIMEOUT_MS_DEFAULT, IDLE_TIMEOUT_MS_MAX, MAX_RETRIES_MAX, MAX_TOKENS_DEFAULT, MAX_TOKENS_MAX,
    PROGRESS_TIMEOUTS_PER_IDLE_DEFAULT, RETRYABLE_CODES_DEFAULT, THINKING_BUDGET_TOKENS_MIN,
};
pub use conversation::SYNTHESISED_CALL_ID_PREFIX;
pub use endpoint::Endpoint;
pub use format::WireFormat;
pub use format_errors::classify_for;
pub use proxy::{ProxyEnv, PROXY_RESPONSE_BYTES_MAX};
pub use request::{chat_body, prompt_body};
pub(crate) use request::{openai_messages, request_body};
pub use sse::{SseError, SSE_BODY_BYTES_MAX, SSE_EVENT_BYTES_MAX, SSE_LINE_BYTES_MAX};
pub use tls::PlatformRoots;
