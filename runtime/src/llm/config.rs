//! Provider configuration (FAILURE-CONFIG-RESOLUTION, FAILURE-CREDENTIAL-ROUTE,
//! FAILURE-RETRY-POLICY): a schema that rejects unknown keys by path, a resolver with
//! explicit validation, a live handle that keeps the whole last-good snapshot when an update
//! is invalid, and credentials resolved lazily per request and never printed.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::endpoint::Endpoint;
use super::format::WireFormat;
use crate::event::{ErrorCode, Failure};

/// Default idle watchdog (FAILURE-DEEPSEEK-STREAM).
pub const IDLE_TIMEOUT_MS_DEFAULT: u64 = 300_000;
/// Largest idle timeout accepted: one day.
pub const IDLE_TIMEOUT_MS_MAX: u64 = 86_400_000;
/// The progress bound when it is not set: this many idle timeouts. A provider that queues a
/// request pings meanwhile (DeepSeek's `: keep-alive`, Anthropic's `ping`); the idle watchdog
/// never fires on a pinging stream, so this second, longer bound ends one that only pings.
pub const PROGRESS_TIMEOUTS_PER_IDLE_DEFAULT: u64 = 3;
/// Largest `max_retries` accepted by the `normal` policy.
pub const MAX_RETRIES_MAX: u32 = 100;
/// Upper bound of backoff delays (FAILURE-RETRY-POLICY: `≤ 2^31 - 1`).
pub const DELAY_MS_MAX: u64 = (1 << 31) - 1;

/// A configuration error, naming the key's path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    /// Dotted path of the offending key (`provider.retry_policy.backoff.jitter_ratio`).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    fn at(path: &str, message: impl Into<String>) -> Self {
        Self { path: path.to_owned(), message: message.into() }
    }

    /// The text is not TOML at all (its path is where: `line L, column C`), rather than a
    /// value the schema refuses.
    pub fn is_syntax(&self) -> bool {
        self.path == "(file)" || self.path.starts_with("line ")
    }
}

/// `line L, column C` (both from 1, the column in characters) of byte `offset` of `text`.
fn line_and_column(text: &str, offset: usize) -> String {
    let offset = (0..=offset.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("line {line}, column {column}")
}

/// Deserialises TOML text into `T`, reporting errors with the key path (unknown keys
/// included: `provider.retry_policy.surprise: unknown key`).
pub fn from_toml<T: DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
    let value: toml::Value = toml::from_str(text).map_err(|e| {
        // Where in the file: a parse error's own span, as the line and column an editor shows.
        let at = e.span().map_or_else(|| "(file)".to_owned(), |span| line_and_column(text, span.start));
        ConfigError::at(&at, e.message().trim_end().to_owned())
    })?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        let mut path = e.path().to_string();
        let message = e.inner().to_string();
        if let Some(rest) = message.strip_prefix("unknown field `") {
            // The path usually already ends at the unknown key; make sure it names it.
            let field = rest.split('`').next().unwrap_or_default();
            if path == "." || path.is_empty() {
                path = field.to_owned();
            } else if !path.ends_with(field) {
                path = format!("{path}.{field}");
            }
            return ConfigError::at(&path, "unknown key");
        }
        ConfigError::at(if path == "." { "(root)" } else { &path }, message)
    })
}

/// Which adapter serves the route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Preset {
    /// DeepSeek: `https://api.deepseek.com`, `deepseek-chat`, `DEEPSEEK_API_KEY`.
    Deepseek,
    /// Any OpenAI-compatible `/chat/completions` endpoint.
    OpenaiCompatible,
    /// Anthropic's Messages API: `https://api.anthropic.com` + `/v1/messages`,
    /// `ANTHROPIC_API_KEY`; the model is required.
    Anthropic,
    /// Google's Gemini API: `https://generativelanguage.googleapis.com` +
    /// `/v1beta/models/MODEL:streamGenerateContent`, `GEMINI_API_KEY`; the model is required.
    Gemini,
}

impl Preset {
    /// The wire format its requests and streams are in.
    pub fn format(self) -> WireFormat {
        match self {
            Preset::Deepseek | Preset::OpenaiCompatible => WireFormat::Openai,
            Preset::Anthropic => WireFormat::Anthropic,
            Preset::Gemini => WireFormat::Gemini,
        }
    }
}

/// `[provider]` as written. Its `Debug` hides URL credentials (a user, a password). Made by
/// deserialising a table or by [`ProviderConfig::openai_compatible`]; it can grow keys.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ProviderConfig {
    /// The adapter preset.
    pub preset: Preset,
    /// Route name (default: the preset's name).
    #[serde(default)]
    pub name: Option<String>,
    /// Requests go to `{base_url}/chat/completions`.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Model name.
    #[serde(default)]
    pub model: Option<String>,
    /// Environment variable holding the API key (none: the server needs no key).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Idle watchdog, armed only while a read is outstanding: every byte, comment or ping
    /// re-arms it.
    #[serde(default)]
    pub idle_timeout_ms: Option<u64>,
    /// Longest a stream may go without data (text, reasoning, a tool call, usage): pings and
    /// comments keep it alive but are not progress. Default
    /// [`PROGRESS_TIMEOUTS_PER_IDLE_DEFAULT`] × `idle_timeout_ms`; never below it.
    #[serde(default)]
    pub progress_timeout_ms: Option<u64>,
    /// The route's retry policy.
    #[serde(default)]
    pub retry_policy: Option<RetryPolicyConfig>,
    /// A PEM bundle of extra trusted CAs for an `https://` endpoint (a private CA), on top of
    /// the bundled public roots.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// An HTTP proxy to tunnel through (`http://[user:pass@]host:port`, HTTP CONNECT); it
    /// overrides `HTTPS_PROXY` / `HTTP_PROXY`.
    #[serde(default)]
    pub proxy: Option<String>,
    /// Most tokens an answer may use (`max_tokens`, Gemini's `maxOutputTokens`): required by
    /// Anthropic's API (default [`MAX_TOKENS_DEFAULT`] there), sent to the others only when set.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Turns the provider's reasoning on with this budget (Anthropic's `thinking`, Gemini's
    /// `thinkingConfig`); OpenAI-compatible endpoints reason by model, not by request.
    #[serde(default)]
    pub thinking_budget_tokens: Option<u32>,
}

/// The answer budget sent to Anthropic when `max_tokens` is not set.
pub const MAX_TOKENS_DEFAULT: u32 = 8192;
/// Largest `max_tokens` accepted.
pub const MAX_TOKENS_MAX: u32 = 1_000_000;
/// Smallest thinking budget Anthropic accepts.
pub const THINKING_BUDGET_TOKENS_MIN: u32 = 1024;

/// `[provider.retry_policy]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicyConfig {
    /// `normal` (default) or `always`.
    #[serde(default)]
    pub mode: Option<String>,
    /// `normal` only: retries per step (default 2).
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// `normal` only: codes worth retrying.
    #[serde(default)]
    pub retryable_codes: Option<Vec<String>>,
    /// Delays.
    #[serde(default)]
    pub backoff: Option<BackoffConfig>,
}

/// `[provider.retry_policy.backoff]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackoffConfig {
    /// First delay (default 500).
    #[serde(default)]
    pub initial_delay_ms: Option<u64>,
    /// Cap (default 10 000).
    #[serde(default)]
    pub max_delay_ms: Option<u64>,
    /// Jitter in [0, 1] (default 0.1).
    #[serde(default)]
    pub jitter_ratio: Option<f64>,
}

/// Resolved, immutable backoff.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// First delay.
    pub initial_delay_ms: u64,
    /// Cap.
    pub max_delay_ms: u64,
    /// Jitter ratio in [0, 1].
    pub jitter_ratio: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { initial_delay_ms: 500, max_delay_ms: 10_000, jitter_ratio: 0.1 }
    }
}

/// The default retryable codes of the `normal` policy.
pub const RETRYABLE_CODES_DEFAULT: [ErrorCode; 5] =
    [ErrorCode::EmptyResponse, ErrorCode::RateLimit, ErrorCode::Server, ErrorCode::Timeout, ErrorCode::Transport];

/// A resolved, immutable retry policy (it belongs to a provider route, never to the executor).
#[derive(Debug, Clone, PartialEq)]
pub enum RetryPolicy {
    /// Retry the listed codes up to `max_retries` times per step.
    Normal {
        /// Budget per step.
        max_retries: u32,
        /// Retryable codes, sorted by their spelling.
        codes: Vec<ErrorCode>,
        /// Delays.
        backoff: Backoff,
    },
    /// Retry every code, without bound.
    Always {
        /// Delays.
        backoff: Backoff,
    },
}

impl Default for RetryPolicy {
    fn default() -> Self {
        let mut codes = RETRYABLE_CODES_DEFAULT.to_vec();
        codes.sort_by_key(|c| c.to_string());
        RetryPolicy::Normal { max_retries: 2, codes, backoff: Backoff::default() }
    }
}

impl RetryPolicy {
    /// `normal` or `always`.
    pub fn mode(&self) -> &'static str {
        match self {
            RetryPolicy::Normal { .. } => "normal",
            RetryPolicy::Always { .. } => "always",
        }
    }

    /// The backoff.
    pub fn backoff(&self) -> Backoff {
        match self {
            RetryPolicy::Normal { backoff, .. } | RetryPolicy::Always { backoff } => *backoff,
        }
    }

    /// The canonical JSON array identifying the policy (FAILURE-RETRY-EXECUTOR):
    /// normal → `[mode, max_retries, [sorted codes], initial, max, jitter]`;
    /// always → `[mode, initial, max, jitter]`.
    pub fn policy_key(&self) -> serde_json::Value {
        let b = self.backoff();
        let jitter = serde_json::Number::from_f64(b.jitter_ratio).map_or(serde_json::Value::Null, |n| {
            // Whole numbers print as integers (`0`, `1`) so the key is stable across spellings.
            if b.jitter_ratio.fract() == 0.0 {
                serde_json::Value::from(b.jitter_ratio as u64)
            } else {
                serde_json::Value::Number(n)
            }
        });
        match self {
            RetryPolicy::Normal { max_retries, codes, .. } => {
                let codes: Vec<String> = codes.iter().map(ToString::to_string).collect();
                serde_json::json!(["normal", max_retries, codes, b.initial_delay_ms, b.max_delay_ms, jitter])
            }
            RetryPolicy::Always { .. } => serde_json::json!(["always", b.initial_delay_ms, b.max_delay_ms, jitter]),
        }
    }
}

impl RetryPolicyConfig {
    /// Validates and resolves (`path` is where this table sits, for errors).
    pub fn resolve(&self, path: &str) -> Result<RetryPolicy, ConfigError> {
        let backoff = resolve_backoff(self.backoff.as_ref(), &format!("{path}.backoff"))?;
        match self.mode.as_deref().unwrap_or("normal") {
            "normal" => {
                let max_retries = self.max_retries.unwrap_or(2);
                if max_retries > MAX_RETRIES_MAX {
                    return Err(ConfigError::at(
                        &format!("{path}.max_retries"),
                        format!("must be at most {MAX_RETRIES_MAX}"),
                    ));
                }
                let codes = match &self.retryable_codes {
                    None => RETRYABLE_CODES_DEFAULT.to_vec(),
                    Some(names) => {
                        let at = format!("{path}.retryable_codes");
                        if names.is_empty() {
                            return Err(ConfigError::at(&at, "must name at least one code"));
                        }
                        let mut seen = BTreeSet::new();
                        let mut codes = Vec::new();
                        for name in names {
                            let code: ErrorCode = name
                                .parse()
                                .map_err(|_| ConfigError::at(&at, format!("unknown error code {name:?}")))?;
                            if !seen.insert(name.clone()) {
                                return Err(ConfigError::at(&at, format!("duplicate code {name:?}")));
                            }
                            codes.push(code);
                        }
                        codes
                    }
                };
                let mut codes = codes;
                codes.sort_by_key(|c| c.to_string());
                Ok(RetryPolicy::Normal { max_retries, codes, backoff })
            }
            "always" => {
                if self.max_retries.is_some() || self.retryable_codes.is_some() {
                    return Err(ConfigError::at(
                        path,
                        "mode \"always\" retries every code without bound; remove max_retries and retryable_codes",
                    ));
                }
                Ok(RetryPolicy::Always { backoff })
            }
            other => Err(ConfigError::at(
                &format!("{path}.mode"),
                format!("must be \"normal\" or \"always\", not {other:?}"),
            )),
        }
    }
}

fn resolve_backoff(config: Option<&BackoffConfig>, path: &str) -> Result<Backoff, ConfigError> {
    let default = Backoff::default();
    let Some(config) = config else { return Ok(default) };
    let backoff = Backoff {
        initial_delay_ms: config.initial_delay_ms.unwrap_or(default.initial_delay_ms),
        max_delay_ms: config.max_delay_ms.unwrap_or(default.max_delay_ms),
        jitter_ratio: config.jitter_ratio.unwrap_or(default.jitter_ratio),
    };
    if !(0 < backoff.initial_delay_ms
        && backoff.initial_delay_ms <= backoff.max_delay_ms
        && backoff.max_delay_ms <= DELAY_MS_MAX)
    {
        return Err(ConfigError::at(
            path,
            format!(
                "delays must satisfy 0 < initial_delay_ms ({}) <= max_delay_ms ({}) <= {DELAY_MS_MAX}",
                backoff.initial_delay_ms, backoff.max_delay_ms
            ),
        ));
    }
    if !(0.0..=1.0).contains(&backoff.jitter_ratio) {
        return Err(ConfigError::at(
            &format!("{path}.jitter_ratio"),
            format!("must be within [0, 1], not {}", backoff.jitter_ratio),
        ));
    }
    Ok(backoff)
}

/// A resolved provider route: one immutable snapshot. Its `Debug` hides the proxy's
/// credentials (a user, a password).
///
/// Made by [`ProviderConfig::resolve`] (a `[provider]` table) or, in code, by
/// [`ResolvedProvider::openai_compatible`] and the `with_*` settings; it can grow fields, so
/// it is never written as a struct literal outside the runtime.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct ResolvedProvider {
    /// Route name (`provider` field of `llm/retry`).
    pub name: String,
    /// Adapter preset.
    pub preset: Preset,
    /// Where requests go.
    pub endpoint: Endpoint,
    /// Model name.
    pub model: String,
    /// Environment variable of the key (resolved lazily per request).
    pub api_key_env: Option<String>,
    /// Idle watchdog: no byte at all for this long ends the attempt.
    pub idle_timeout: Duration,
    /// Progress bound: no data (pings and comments aside) for this long ends the attempt.
    pub progress_timeout: Duration,
    /// Retry policy of this route.
    pub retry: RetryPolicy,
    /// Extra trusted CAs (PEM file) for TLS.
    pub ca_file: Option<String>,
    /// The route's own proxy URL (credentials included: never printed).
    pub proxy: Option<String>,
    /// The answer budget, when set (Anthropic's requests always carry one).
    pub max_tokens: Option<u32>,
    /// The reasoning budget, when reasoning is asked for.
    pub thinking_budget_tokens: Option<u32>,
}

/// `url` with whatever sits between `scheme://` and the authority's `@` (a user, a
/// password, a token used as a user name) replaced by `***`: a config printed for debugging
/// — a panic message, a `tracing` field — must not carry a proxy's or endpoint's credentials.
pub(crate) fn hide_userinfo(url: &str) -> String {
    let Some(authority_start) = url.find("://").map(|i| i + 3) else { return url.to_owned() };
    let authority_end = url[authority_start..].find(['/', '?', '#']).map_or(url.len(), |i| authority_start + i);
    match url[authority_start..authority_end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..authority_start], &url[authority_start + at..]),
        None => url.to_owned(),
    }
}

impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("preset", &self.preset)
            .field("name", &self.name)
            .field("base_url", &self.base_url.as_deref().map(hide_userinfo))
            .field("model", &self.model)
            .field("api_key_env", &self.api_key_env)
            .field("idle_timeout_ms", &self.idle_timeout_ms)
            .field("progress_timeout_ms", &self.progress_timeout_ms)
            .field("retry_policy", &self.retry_policy)
            .field("ca_file", &self.ca_file)
            .field("proxy", &self.proxy.as_deref().map(hide_userinfo))
            .field("max_tokens", &self.max_tokens)
            .field("thinking_budget_tokens", &self.thinking_budget_tokens)
            .finish()
    }
}

impl fmt::Debug for ResolvedProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedProvider")
            .field("name", &self.name)
            .field("preset", &self.preset)
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("api_key_env", &self.api_key_env)
            .field("idle_timeout", &self.idle_timeout)
            .field("progress_timeout", &self.progress_timeout)
            .field("retry", &self.retry)
            .field("ca_file", &self.ca_file)
            .field("proxy", &self.proxy.as_deref().map(hide_userinfo))
            .field("max_tokens", &self.max_tokens)
            .field("thinking_budget_tokens", &self.thinking_budget_tokens)
            .finish()
    }
}

impl ResolvedProvider {
    /// An OpenAI-compatible route to `base_url` (`http://127.0.0.1:8080/v1`) serving `model`,
    /// every other setting at its default: named `openai-compatible`, no key, an idle timeout
    /// of [`IDLE_TIMEOUT_MS_DEFAULT`], the default retry policy, no extra CA, no proxy. Refused
    /// exactly as the same `[provider]` table would be.
    pub fn openai_compatible(base_url: &str, model: &str) -> Result<ResolvedProvider, ConfigError> {
        ProviderConfig::openai_compatible(base_url, model).resolve("provider")
    }

    /// [`ProviderConfig::of_format`], resolved.
    pub fn of_format(format: WireFormat, base_url: &str, model: &str) -> Result<ResolvedProvider, ConfigError> {
        ProviderConfig::of_format(format, base_url, model).resolve("provider")
    }

    /// The route's name (the `provider` field of `llm/retry` events).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sends the key held in environment variable `var` (read per request); refused unless
    /// `var` is a variable name (`[A-Za-z0-9_]+`).
    pub fn with_api_key_env(mut self, var: &str) -> Result<Self, ConfigError> {
        check_env_var_name(var, "provider.api_key_env")?;
        self.api_key_env = Some(var.to_owned());
        Ok(self)
    }

    /// The idle watchdog: a stream without a byte this long is `TIMEOUT`; refused outside
    /// `1..=IDLE_TIMEOUT_MS_MAX` milliseconds. The progress bound becomes its default,
    /// [`PROGRESS_TIMEOUTS_PER_IDLE_DEFAULT`] times as long (set it after this to change it).
    pub fn with_idle_timeout(mut self, idle: Duration) -> Result<Self, ConfigError> {
        let ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        check_idle_timeout_ms(ms, "provider.idle_timeout_ms")?;
        self.idle_timeout = Duration::from_millis(ms);
        self.progress_timeout = Duration::from_millis(ms * PROGRESS_TIMEOUTS_PER_IDLE_DEFAULT);
        Ok(self)
    }

    /// The progress bound: a stream without data (pings and comments aside) this long is
    /// `TIMEOUT`; refused below the idle timeout or above [`PROGRESS_TIMEOUTS_PER_IDLE_DEFAULT`]
    /// × [`IDLE_TIMEOUT_MS_MAX`].
    pub fn with_progress_timeout(mut self, progress: Duration) -> Result<Self, ConfigError> {
        let ms = u64::try_from(progress.as_millis()).unwrap_or(u64::MAX);
        let idle_ms = u64::try_from(self.idle_timeout.as_millis()).unwrap_or(u64::MAX);
        let max = IDLE_TIMEOUT_MS_MAX * PROGRESS_TIMEOUTS_PER_IDLE_DEFAULT;
        if !(idle_ms..=max).contains(&ms) {
            return Err(ConfigError::at(
                "provider.progress_timeout_ms",
                format!("must be within idle_timeout_ms ({idle_ms})..={max}"),
            ));
        }
        self.progress_timeout = Duration::from_millis(ms);
        Ok(self)
    }

    /// The route's retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Trusts the CAs of the PEM file at `path` too (read through the `Fs` seam).
    pub fn with_ca_file(mut self, path: impl Into<String>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Tunnels through the proxy at `url` (`http://user:pass@host:port`); refused unless the
    /// URL is one the adapter can use.
    pub fn with_proxy(mut self, url: &str) -> Result<Self, ConfigError> {
        super::proxy::parse(url).map_err(|e| ConfigError::at("provider.proxy", &e))?;
        self.proxy = Some(url.to_owned());
        Ok(self)
    }
}

fn check_env_var_name(var: &str, path: &str) -> Result<(), ConfigError> {
    if var.is_empty() || !var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(ConfigError::at(path, "must be an environment variable name ([A-Za-z0-9_]+)"));
    }
    Ok(())
}

fn check_idle_timeout_ms(ms: u64, path: &str) -> Result<(), ConfigError> {
    if !(1..=IDLE_TIMEOUT_MS_MAX).contains(&ms) {
        return Err(ConfigError::at(path, format!("must be within 1..={IDLE_TIMEOUT_MS_MAX}")));
    }
    Ok(())
}

impl ProviderConfig {
    /// `[provider]` with `preset = "openai-compatible"`, `base_url` and `model`, nothing else.
    pub fn openai_compatible(base_url: &str, model: &str) -> ProviderConfig {
        Self::of_format(WireFormat::Openai, base_url, model)
    }

    /// `[provider]` with the preset of `format` (`openai-compatible`, `anthropic`, `gemini`),
    /// `base_url` (the API root the format appends its path to) and `model`, nothing else.
    pub fn of_format(format: WireFormat, base_url: &str, model: &str) -> ProviderConfig {
        ProviderConfig {
            preset: match format {
                WireFormat::Openai => Preset::OpenaiCompatible,
                WireFormat::Anthropic => Preset::Anthropic,
                WireFormat::Gemini => Preset::Gemini,
            },
            name: None,
            base_url: Some(base_url.to_owned()),
            model: Some(model.to_owned()),
            api_key_env: None,
            idle_timeout_ms: None,
            progress_timeout_ms: None,
            retry_policy: None,
            ca_file: None,
            proxy: None,
            max_tokens: None,
            thinking_budget_tokens: None,
        }
    }

    /// Validates and resolves; `path` is where this table sits (`provider`).
    pub fn resolve(&self, path: &str) -> Result<ResolvedProvider, ConfigError> {
        let (default_url, default_model, default_key, default_name) = match self.preset {
            Preset::Deepseek => {
                (Some("https://api.deepseek.com"), Some("deepseek-chat"), Some("DEEPSEEK_API_KEY"), "deepseek")
            }
            Preset::OpenaiCompatible => (None, None, None, "openai-compatible"),
            Preset::Anthropic => (Some("https://api.anthropic.com"), None, Some("ANTHROPIC_API_KEY"), "anthropic"),
            Preset::Gemini => {
                (Some("https://generativelanguage.googleapis.com"), None, Some("GEMINI_API_KEY"), "gemini")
            }
        };
        let base_url =
            self.base_url.as_deref().or(default_url).ok_or_else(|| {
                ConfigError::at(&format!("{path}.base_url"), "required for preset \"openai-compatible\"")
            })?;
        let endpoint = Endpoint::parse(base_url).map_err(|e| ConfigError::at(&format!("{path}.base_url"), e))?;
        let model = self
            .model
            .as_deref()
            .or(default_model)
            .filter(|m| !m.trim().is_empty())
            .ok_or_else(|| ConfigError::at(&format!("{path}.model"), "required (a non-empty model name)"))?
            .to_owned();
        let api_key_env = self.api_key_env.as_deref().or(default_key).map(str::to_owned);
        if let Some(var) = &api_key_env {
            check_env_var_name(var, &format!("{path}.api_key_env"))?;
        }
        let idle_timeout_ms = self.idle_timeout_ms.unwrap_or(IDLE_TIMEOUT_MS_DEFAULT);
        check_idle_timeout_ms(idle_timeout_ms, &format!("{path}.idle_timeout_ms"))?;
        let progress_timeout_ms = self.progress_timeout_ms(idle_timeout_ms, path)?;
        let retry = match &self.retry_policy {
            Some(policy) => policy.resolve(&format!("{path}.retry_policy"))?,
            None => RetryPolicy::default(),
        };
        if let Some(url) = &self.proxy {
            super::proxy::parse(url).map_err(|e| ConfigError::at(&format!("{path}.proxy"), &e))?;
        }
        self.check_budgets(path, &model)?;
        Ok(ResolvedProvider {
            name: self.name.clone().unwrap_or_else(|| default_name.to_owned()),
            preset: self.preset,
            endpoint,
            model,
            api_key_env,
            idle_timeout: Duration::from_millis(idle_timeout_ms),
            progress_timeout: Duration::from_millis(progress_timeout_ms),
            retry,
            ca_file: self.ca_file.clone(),
            proxy: self.proxy.clone(),
            max_tokens: self.max_tokens,
            thinking_budget_tokens: self.thinking_budget_tokens,
        })
    }

    /// The progress bound: as set (within `idle..=`[`IDLE_TIMEOUT_MS_MAX`] × the default
    /// factor), else [`PROGRESS_TIMEOUTS_PER_IDLE_DEFAULT`] idle timeouts.
    fn progress_timeout_ms(&self, idle_timeout_ms: u64, path: &str) -> Result<u64, ConfigError> {
        let max = IDLE_TIMEOUT_MS_MAX * PROGRESS_TIMEOUTS_PER_IDLE_DEFAULT;
        let Some(ms) = self.progress_timeout_ms else {
            return Ok(idle_timeout_ms * PROGRESS_TIMEOUTS_PER_IDLE_DEFAULT);
        };
        if !(idle_timeout_ms..=max).contains(&ms) {
            return Err(ConfigError::at(
                &format!("{path}.progress_timeout_ms"),
                format!("must be within idle_timeout_ms ({idle_timeout_ms})..={max}"),
            ));
        }
        Ok(ms)
    }

    /// The answer and reasoning budgets, and a model name the format can put in a URL.
    fn check_budgets(&self, path: &str, model: &str) -> Result<(), ConfigError> {
        if let Some(max) = self.max_tokens.filter(|m| !(1..=MAX_TOKENS_MAX).contains(m)) {
            return Err(ConfigError::at(
                &format!("{path}.max_tokens"),
                format!("{max} is outside 1..={MAX_TOKENS_MAX}"),
            ));
        }
        if let Some(budget) = self.thinking_budget_tokens {
            let at = format!("{path}.thinking_budget_tokens");
            if self.preset.format() == WireFormat::Openai {
                return Err(ConfigError::at(
                    &at,
                    "an OpenAI-compatible endpoint reasons by model, not by request: remove it",
                ));
            }
            if budget < THINKING_BUDGET_TOKENS_MIN {
                return Err(ConfigError::at(&at, format!("must be at least {THINKING_BUDGET_TOKENS_MIN}")));
            }
            let max = self.max_tokens.unwrap_or(MAX_TOKENS_DEFAULT);
            if self.preset == Preset::Anthropic && budget >= max {
                return Err(ConfigError::at(&at, format!("must be below max_tokens ({max})")));
            }
        }
        // Gemini names the model in the request path.
        if self.preset == Preset::Gemini
            && !model.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        {
            return Err(ConfigError::at(&format!("{path}.model"), "a Gemini model name is [A-Za-z0-9._-]+"));
        }
        Ok(())
    }
}

/// The live provider route: every call takes one snapshot; an invalid update keeps the whole
/// last-good snapshot (FAILURE-CONFIG-RESOLUTION), and a valid one replaces it atomically, so
/// there is never a window without a route (FAILURE-CREDENTIAL-ROUTE).
#[derive(Debug)]
pub struct LiveProvider {
    current: Mutex<Arc<ResolvedProvider>>,
}

impl LiveProvider {
    /// Starts from a resolved route.
    pub fn new(route: ResolvedProvider) -> Self {
        Self { current: Mutex::new(Arc::new(route)) }
    }

    /// The route for one call; later updates never leak into it.
    pub fn snapshot(&self) -> Arc<ResolvedProvider> {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Applies an update, or reports why not and keeps the last good route.
    pub fn update(&self, config: &ProviderConfig, path: &str) -> Result<(), ConfigError> {
        let route = config.resolve(path)?;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(route);
        Ok(())
    }
}

/// Where credentials come from (production: the environment; tests: a map).
pub trait Credentials: Send + Sync {
    /// The value of credential variable `name`, if set.
    fn lookup(&self, name: &str) -> Option<String>;
}

/// A credential value. Never printed: `Debug` and `Display` show `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the one place that puts it on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Resolves the route's credential for one request. The failure names the variable, never
/// its value.
pub fn resolve_credential(route: &ResolvedProvider, credentials: &dyn Credentials) -> Result<Option<Secret>, Failure> {
    let Some(var) = &route.api_key_env else { return Ok(None) };
    let value = credentials
        .lookup(var)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Failure::new(ErrorCode::MissingCredential, format!("the API key variable {var} is not set")))?;
    if !value.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(Failure::new(
            ErrorCode::InvalidCredential,
            format!("the API key in {var} is not valid header text (spaces, newlines or non-ASCII)"),
        ));
    }
    Ok(Some(Secret::new(value)))
}

/// Credentials from a fixed map (tests, simulation).
#[derive(Debug, Clone, Default)]
pub struct StaticCredentials(pub std::collections::BTreeMap<String, String>);

impl Credentials for StaticCredentials {
    fn lookup(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }
}
