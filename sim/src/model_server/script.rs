//! The fake model server's script: what each successive request gets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A whole script. Request `n` (0-based) gets `responses[n]`; past the end, the last response
/// repeats if `repeat_last`, else the server answers 500 "script exhausted".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Connections are accepted and dropped at once until this many ms after start (the
    /// client sees a transport failure, as with a refused connection).
    #[serde(default)]
    pub refuse_until_ms: u64,
    /// Responses, in request order.
    pub responses: Vec<Response>,
    /// Repeat the last response forever.
    #[serde(default)]
    pub repeat_last: bool,
    /// A request whose conversation ends with a tool's result gets this response instead of
    /// the next scripted one (OpenAI's format): a model that answers once its tool ran, for a
    /// workload of many sessions whose requests come in any order (the fleet soak).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_tool_result: Option<Response>,
}

/// What one request gets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Response {
    /// A non-2xx status: the response is an error with `headers` and `body`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Extra response headers (`retry-after`, `x-request-id`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Error body (for `status`), or a raw body replacing the SSE stream (e.g. `""`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The stream's frames, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<Frame>,
    /// `finish_reason` of the last chunk (`stop`, `length`, `tool_calls`, ...); none = omit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<String>,
    /// Usage `[prompt, completion, total]`: as OpenAI sends it, a `choices: []` chunk before
    /// `[DONE]` when the request asked (`stream_options.include_usage`), with `"usage": null` on
    /// every other chunk; nothing when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<[u64; 3]>,
    /// DeepSeek's way instead: the usage rides the finish chunk, asked for or not (and the
    /// other chunks carry `"usage": null` when the request asked).
    #[serde(default, skip_serializing_if = "is_false")]
    pub usage_in_finish: bool,
    /// Replay a recorded provider stream byte for byte as the body (`frames`, `finish` and
    /// `usage` are ignored; `write_bytes` still splits it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<super::Recorded>,
    /// End with `data: [DONE]` (default true).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub done: bool,
    /// Abort the connection (no clean end) after this many frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disconnect_after_frames: Option<usize>,
    /// Stop sending, keeping the connection open, after this many frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_after_frames: Option<usize>,
    /// During the stall, ping every this many ms (a ping storm: Anthropic's `ping` events,
    /// OpenAI's keep-alive comments) — alive, and never going on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ping_every_ms: Option<u64>,
    /// Delay before each frame, in ms.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub frame_delay_ms: u64,
    /// Split the SSE bytes into writes of this many bytes (exercises re-chunking).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_bytes: Option<usize>,
    /// Use CRLF line endings.
    #[serde(default, skip_serializing_if = "is_false")]
    pub crlf: bool,
    /// Whose wire shape the frames are written in (default: OpenAI's).
    #[serde(default, skip_serializing_if = "Dialect::is_default")]
    pub dialect: Dialect,
    /// The format's own stop value, verbatim, instead of the one `finish` maps to: Anthropic's
    /// `stop_reason` (`pause_turn`, `model_context_window_exceeded`, ...), Gemini's
    /// `finishReason` (`RECITATION`, `MALFORMED_FUNCTION_CALL`, ...). OpenAI's `finish` is
    /// already verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// The world catalog entry this response was drawn as (FAILURE-WORLD-CATALOG): the sweep
    /// counts it reached when the server serves it, and the oracle reads the entry's reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    /// Whether `entry`'s reading is a failure the client must recover from, set where the
    /// entry is drawn (so the server and its script never read the catalog, which is built
    /// of responses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_fails: Option<bool>,
}

/// A provider's wire shape for the same frames (FAILURE-PROVIDER-SHAPES), so a sweep meets
/// what each provider sends, not only OpenAI's reference shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dialect {
    /// OpenAI's (and DeepSeek's): `index` on every tool-call fragment, `reasoning_content`.
    #[default]
    Openai,
    /// Mistral's (and Ollama's, Gemini's compatible endpoint): tool-call fragments without
    /// `index`.
    Mistral,
    /// OpenRouter's: `: OPENROUTER PROCESSING` comments first, `reasoning` for reasoning, the
    /// usage in a chunk of its own after the finish chunk.
    Openrouter,
}

impl Dialect {
    /// Every dialect.
    pub const ALL: [Dialect; 3] = [Dialect::Openai, Dialect::Mistral, Dialect::Openrouter];

    /// The name scripts use.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Openai => "openai",
            Dialect::Mistral => "mistral",
            Dialect::Openrouter => "openrouter",
        }
    }

    fn is_default(&self) -> bool {
        *self == Dialect::Openai
    }
}

impl Response {
    /// What this response does, in a few words (for timelines).
    pub fn describe(&self) -> String {
        if let Some(status) = self.status {
            return format!("HTTP {status}");
        }
        if self.body.is_some() {
            return "raw body".into();
        }
        if let Some(recorded) = self.recorded {
            return format!("recorded stream {}", recorded.file_name());
        }
        let frames = self.frames.len();
        if let Some(k) = self.disconnect_after_frames {
            return format!("disconnect after {k} of {frames} frames");
        }
        if let Some(k) = self.stall_after_frames {
            return format!("stall after {k} of {frames} frames");
        }
        let finish = self.finish.as_deref().unwrap_or("none");
        let done = if self.done { "" } else { ", no [DONE]" };
        format!("stream of {frames} frames, finish {finish}{done}")
    }
}

fn yes() -> bool {
    true
}

fn is_true(value: &bool) -> bool {
    *value
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// Largest `filler` frame, in bytes: under the adapter's SSE line limit with the JSON around it.
pub const FILLER_BYTES_MAX: usize = 1_000_000;

/// One frame of a scripted stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Frame {
    /// A `content` delta.
    Text(String),
    /// A `reasoning_content` delta (OpenRouter's dialect: `reasoning`).
    Reasoning(String),
    /// A `refusal` delta, with `content: null` (OpenAI's refusal).
    Refusal(String),
    /// A tool-call fragment.
    ToolCall {
        /// Provider tool-call index.
        index: u32,
        /// Call id (first fragment).
        #[serde(default)]
        id: Option<String>,
        /// Function name (first fragment).
        #[serde(default)]
        name: Option<String>,
        /// Arguments fragment.
        #[serde(default)]
        arguments: String,
    },
    /// A `content` delta of this many `x` characters: an oversize answer without an oversize
    /// scenario file. At most [`FILLER_BYTES_MAX`].
    Filler(usize),
    /// A `: keep-alive` comment.
    KeepAlive,
    /// A raw `data:` payload, sent verbatim (malformed JSON, say).
    Raw(String),
    /// An error event inside the 200 stream, in the format's own shape: OpenAI's
    /// `{"error":{…}}` chunk, Anthropic's `event: error`, Gemini's `{"error":{"code":…}}`.
    ErrorEvent {
        /// The HTTP status the error names.
        status: u16,
        /// Its message.
        message: String,
    },
    /// Wait this many ms.
    DelayMs(u64),
    /// One well-formed SSE event sent verbatim (an event kind the other frames do not make:
    /// Anthropic's `redacted_thinking` block, Gemini's `executableCode` part, a usage-only
    /// chunk), with its `event:` line when named. In Anthropic's format `{{index}}` in `data`
    /// becomes the next content block's index (the event opens and closes its own block).
    Event {
        /// The `event:` line, if any.
        #[serde(default)]
        name: Option<String>,
        /// The `data:` payload.
        data: String,
    },
}

impl Response {
    /// Whether this response is a failure the client must recover from (an HTTP error, a
    /// raw or empty body, a disconnect, a stall, no clean end, malformed data, or an empty
    /// completion). A healed model server skips these.
    pub fn fails(&self) -> bool {
        if let Some(fails) = self.entry_fails {
            return fails;
        }
        if let Some(recorded) = self.recorded {
            return recorded.fails() || self.status.is_some();
        }
        self.status.is_some()
            || self.body.is_some()
            || self.disconnect_after_frames.is_some()
            || self.stall_after_frames.is_some()
            || !self.done
            || self.frames.is_empty()
            || self.frames.iter().any(|f| matches!(f, Frame::Raw(_) | Frame::ErrorEvent { .. }))
    }

    /// A plain text completion streamed in `pieces`.
    pub fn text(pieces: &[&str]) -> Self {
        Self {
            frames: pieces.iter().map(|p| Frame::Text((*p).to_owned())).collect(),
            finish: Some("stop".into()),
            done: true,
            ..Self::default()
        }
    }

    /// A completion that calls one tool.
    pub fn tool_call(id: &str, name: &str, arguments: &str) -> Self {
        Self {
            frames: vec![Frame::ToolCall {
                index: 0,
                id: Some(id.into()),
                name: Some(name.into()),
                arguments: arguments.into(),
            }],
            finish: Some("tool_calls".into()),
            done: true,
            ..Self::default()
        }
    }

    /// An HTTP error.
    pub fn status(status: u16, headers: &[(&str, &str)], body: &str) -> Self {
        Self {
            status: Some(status),
            headers: headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            body: Some(body.into()),
            done: true,
            ..Self::default()
        }
    }
}
