//! Conformance with the official SDKs (FAILURE-PROVIDER-SHAPES, FAILURE-WIRE-FORMATS): a
//! recorded `.sse` body is served byte for byte on 127.0.0.1 and read twice — by faultline's
//! adapter, and by the format's own SDK (`openai`, `anthropic`, `google-genai`: `referee*.py`,
//! in a Python the caller names) — and the two readings are compared: text, reasoning,
//! refusal, tool calls (ids, names, arguments), finish and usage.
//! `faultline llm conform DIR` runs it over a directory, so a user can check a provider we have
//! never seen from one recording.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real sockets and a real Python

use std::path::{Path, PathBuf};
use std::sync::Arc;

use faultline_runtime::event::{Chunk, FinishReason};
use faultline_runtime::llm::{Adapter, ResolvedProvider, StaticCredentials, WireFormat};
use serde::{Deserialize, Serialize};

use faultline_sim::model_server::{ModelServer, Response, Script};

/// The referee: the SDK's objects, accumulated as its readers do.
pub const REFEREE_PY: &str = include_str!("referee.py");
/// The referee of Anthropic's Messages API: the `anthropic` SDK's events.
pub const REFEREE_ANTHROPIC_PY: &str = include_str!("referee_anthropic.py");
/// The referee of Gemini's API: the `google-genai` SDK's objects.
pub const REFEREE_GEMINI_PY: &str = include_str!("referee_gemini.py");

/// The referee of `format`, and the Python package it needs.
pub fn referee(format: WireFormat) -> (&'static str, &'static str) {
    match format {
        WireFormat::Openai => (REFEREE_PY, "openai"),
        WireFormat::Anthropic => (REFEREE_ANTHROPIC_PY, "anthropic"),
        WireFormat::Gemini => (REFEREE_GEMINI_PY, "google-genai"),
    }
}

/// One tool call, as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    /// The call's id.
    pub id: Option<String>,
    /// The tool's name.
    pub name: Option<String>,
    /// The arguments, joined.
    pub arguments: String,
}

/// What the SDK read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SdkReading {
    /// Text deltas, joined.
    pub text: String,
    /// Reasoning deltas (`reasoning_content` or `reasoning`), joined.
    pub reasoning: String,
    /// Refusal deltas, joined.
    pub refusal: String,
    /// Tool calls, in the order they began.
    pub tool_calls: Vec<Call>,
    /// The last `finish_reason` (`None` when the stream sent none).
    pub finish: Option<String>,
    /// The last usage: prompt, completion, total.
    pub usage: Option<[u64; 3]>,
    /// The error event the SDK raised, if one came.
    pub error: Option<SdkError>,
}

/// An error event the SDK raised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SdkError {
    /// The error's `code` (a number or a word), if it had one.
    pub code: Option<serde_json::Value>,
    /// Its message.
    pub message: String,
}

/// What faultline's adapter read, in the same terms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdapterReading {
    /// Text deltas, joined.
    pub text: String,
    /// Reasoning deltas, joined.
    pub reasoning: String,
    /// Refusal deltas, joined.
    pub refusal: String,
    /// Tool calls, in block order.
    pub tool_calls: Vec<Call>,
    /// The finish, as recorded.
    pub finish: FinishReason,
    /// Whether the finish was inferred (the stream sent no `finish_reason`).
    pub inferred: bool,
    /// The last usage: prompt, completion, total.
    pub usage: Option<[u64; 3]>,
}

impl AdapterReading {
    /// The reading of one attempt's chunks.
    pub fn of(chunks: &[Chunk]) -> AdapterReading {
        let mut reading = AdapterReading {
            text: String::new(),
            reasoning: String::new(),
            refusal: String::new(),
            tool_calls: Vec::new(),
            finish: FinishReason::Stop,
            inferred: false,
            usage: None,
        };
        let mut calls: std::collections::BTreeMap<u32, usize> = std::collections::BTreeMap::new();
        for chunk in chunks {
            match chunk {
                Chunk::TextDelta { text, .. } => reading.text.push_str(text),
                Chunk::ReasoningDelta { text, .. } => reading.reasoning.push_str(text),
                Chunk::RefusalDelta { text, .. } => reading.refusal.push_str(text),
                Chunk::ToolCallDelta { index, id, name, arguments_delta } => {
                    let at = *calls.entry(*index).or_insert_with(|| {
                        reading.tool_calls.push(Call { id: None, name: None, arguments: String::new() });
                        reading.tool_calls.len() - 1
                    });
                    let call = &mut reading.tool_calls[at];
                    call.id = call.id.take().or_else(|| id.clone());
                    call.name = call.name.take().or_else(|| name.clone());
                    call.arguments.push_str(arguments_delta);
                }
                Chunk::Usage { usage } => {
                    reading.usage = Some([usage.prompt_tokens, usage.completion_tokens, usage.total_tokens]);
                }
                Chunk::SignatureDelta { .. } => {}
                Chunk::Finish { reason, inferred } => {
                    reading.finish = reason.clone();
                    reading.inferred = *inferred;
                }
                Chunk::BlockStart { .. } | Chunk::BlockEnd { .. } => {}
            }
        }
        reading
    }
}

/// A call as compared: arguments that are JSON as their value (an SDK re-serialises what it
/// parsed, spacing its own way), anything else as the text it is.
#[derive(Debug, PartialEq)]
struct Compared<'a> {
    id: Option<&'a str>,
    name: Option<&'a str>,
    arguments: Result<serde_json::Value, &'a str>,
}

fn comparable(calls: &[Call]) -> Vec<Compared<'_>> {
    calls
        .iter()
        .map(|c| Compared {
            id: c.id.as_deref(),
            name: c.name.as_deref(),
            arguments: serde_json::from_str(&c.arguments).map_err(|_| c.arguments.as_str()),
        })
        .collect()
}

/// Where the two readings disagree, one line each (empty: they agree).
pub fn differences(ours: &AdapterReading, sdk: &SdkReading) -> Vec<String> {
    let mut out = Vec::new();
    let mut differ = |what: &str, ours: String, sdk: String| {
        if ours != sdk {
            out.push(format!("{what}: faultline {ours}, the SDK {sdk}"));
        }
    };
    differ("text", format!("{:?}", ours.text), format!("{:?}", sdk.text));
    differ("reasoning", format!("{:?}", ours.reasoning), format!("{:?}", sdk.reasoning));
    differ("refusal", format!("{:?}", ours.refusal), format!("{:?}", sdk.refusal));
    differ("tool calls", format!("{:?}", comparable(&ours.tool_calls)), format!("{:?}", comparable(&sdk.tool_calls)));
    // A failed attempt's usage is never recorded: what came before an error is not compared.
    if let (Some(usage), None) = (sdk.usage, &sdk.error) {
        differ("usage", format!("{:?}", ours.usage), format!("{:?}", Some(usage)));
    }
    let finish = match (&ours.finish, &sdk.error) {
        // The SDK raised the stream's error event: faultline must end the attempt in an error
        // that carries the event's own status, when it gave one.
        (FinishReason::Error { failure }, Some(error)) => match error.code.as_ref().and_then(|c| c.as_u64()) {
            Some(status) if failure.status != u16::try_from(status).ok() => {
                Some(format!("error status: faultline {:?} ({}), the SDK {status}", failure.status, failure.code))
            }
            _ => None,
        },
        (_, Some(error)) => Some(format!("finish: faultline {:?}, the SDK raised {:?}", ours.finish, error.message)),
        (finish, None) => {
            let expected = match sdk.finish.as_deref() {
                None if ours.inferred => None,
                None => Some("an inferred finish, since the stream sent none"),
                Some("stop") if *finish == FinishReason::Stop && !ours.inferred => None,
                Some("tool_calls") if *finish == FinishReason::ToolCalls && !ours.inferred => None,
                Some("length") if *finish == FinishReason::MaxTokens => None,
                Some("content_filter") if finish.failure().is_some() => None,
                Some(_) => Some("the finish the stream sent"),
            };
            expected.map(|want| {
                format!("finish: faultline {finish:?} (inferred: {}), the SDK {:?}: {want}", ours.inferred, sdk.finish)
            })
        }
    };
    out.extend(finish);
    out
}

/// The verdict on one recording.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// The file.
    pub file: PathBuf,
    /// Both readings.
    pub faultline: AdapterReading,
    /// See `faultline`.
    pub sdk: SdkReading,
    /// Where they disagree.
    pub differences: Vec<String>,
}

/// Serves `body` byte for byte on 127.0.0.1 and reads it with faultline's adapter, then with
/// `format`'s SDK under `python`.
pub fn conform(python: &Path, format: WireFormat, file: &Path, body: &str) -> Result<Verdict, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a tokio runtime: {e}"))?;
    runtime.block_on(async {
        let seams = faultline_runtime::production::seams();
        let response = Response { body: Some(body.to_owned()), ..Response::default() };
        let script = Script { responses: vec![response], repeat_last: true, ..Script::default() };
        let server = ModelServer::start(seams.net.clone(), seams.clock.clone(), "127.0.0.1:0", script, None)
            .await
            .map_err(|e| format!("serving {}: {e}", file.display()))?;
        // The API root: OpenAI's base URL names its version, the others' paths do.
        let base_url = match format {
            WireFormat::Openai => format!("http://{}/v1", server.addr()),
            _ => format!("http://{}", server.addr()),
        };
        let chunks = read_with_adapter(&seams, format, &base_url).await?;
        let script = tempfile::NamedTempFile::new().map_err(|e| format!("the referee's file: {e}"))?;
        std::fs::write(script.path(), referee(format).0).map_err(|e| format!("the referee's file: {e}"))?;
        let output = tokio::process::Command::new(python)
            .arg(script.path())
            .arg(&base_url)
            .output()
            .await
            .map_err(|e| format!("running {}: {e}", python.display()))?;
        if !output.status.success() {
            return Err(format!(
                "the SDK's referee failed on {}: {}",
                file.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let sdk: SdkReading = serde_json::from_slice(&output.stdout)
            .map_err(|e| format!("the referee's answer: {e}: {}", String::from_utf8_lossy(&output.stdout)))?;
        let mut faultline = AdapterReading::of(&chunks);
        // Gemini's calls may come without ids; faultline names them, the SDK leaves them none.
        for (ours, theirs) in faultline.tool_calls.iter_mut().zip(&sdk.tool_calls) {
            let synthesised =
                ours.id.as_deref().is_some_and(|id| id.starts_with(faultline_runtime::llm::SYNTHESISED_CALL_ID_PREFIX));
            if format == WireFormat::Gemini && theirs.id.is_none() && synthesised {
                ours.id = None;
            }
        }
        let differences = differences(&faultline, &sdk);
        Ok(Verdict { file: file.to_path_buf(), faultline, sdk, differences })
    })
}

/// One attempt of faultline's adapter against `base_url`: every chunk, to the finish.
async fn read_with_adapter(
    seams: &faultline_runtime::seams::Seams,
    format: WireFormat,
    base_url: &str,
) -> Result<Vec<Chunk>, String> {
    let route = ResolvedProvider::of_format(format, base_url, "m").map_err(|e| e.to_string())?;
    // A key in the format's own header (its preset names the variable), as the SDK sends one.
    let keys = route.api_key_env.iter().map(|var| (var.clone(), "referee-not-real".to_owned())).collect();
    let adapter = Adapter::new(seams.net.clone(), seams.clock.clone(), Arc::new(StaticCredentials(keys)));
    let prefix = faultline_runtime::event::RequestPrefix { model: "m".into(), system: None, tools: Vec::new() };
    let body = faultline_runtime::llm::prompt_body(&route, &prefix, "hi");
    let mut stream = adapter.stream(Arc::new(route), body, tokio_util::sync::CancellationToken::new());
    let mut chunks = Vec::new();
    while let Some(chunk) = stream.next().await {
        chunks.push(chunk);
    }
    Ok(chunks)
}

/// The `.sse` files of `dir`, in name order.
pub fn recordings(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "sse"))
        .collect();
    files.sort();
    Ok(files)
}
