//! What the runtime tells an OpenTelemetry collector (FAILURE-OTEL), and what it passes on to
//! tools so their own spans join the turn's trace.
//!
//! The runtime names its spans and their attributes through `tracing`, per the GenAI semantic
//! conventions: a turn is `invoke_agent`, a model attempt `chat {model}`, a tool call
//! `execute_tool {name}`, with `step`, `retry_wait` and `recovery` besides. It never holds an
//! SDK, an exporter or a clock of OpenTelemetry's: whoever embeds it installs those (the
//! `faultline` binary does when `OTEL_EXPORTER_OTLP_ENDPOINT` or the agent file's
//! `[telemetry]` asks), and without them every span is `tracing`'s alone. Attributes carry
//! names, codes and counts, never message text, and identifiers the model chose (tool names,
//! call ids) pass through the secrets scrubber first.
//!
//! A resumed session replays no work, so it emits no span for what it only read back: one
//! `recovery` span says what the repair found.

use opentelemetry::propagation::Injector;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The instrumentation's name, as `gen_ai.agent.name` and in span names.
pub const AGENT_NAME: &str = "faultline";

/// Most trace-context fields passed on to a tool (W3C's `traceparent` and `tracestate`,
/// and room for a propagator that adds a baggage field).
const TRACE_FIELDS_MAX: usize = 4;
/// Longest trace-context value passed on, in bytes (W3C caps `tracestate` at 512).
const TRACE_FIELD_BYTES_MAX: usize = 1024;

struct Fields(Vec<(String, String)>);

impl Injector for Fields {
    fn set(&mut self, key: &str, value: String) {
        if self.0.len() < TRACE_FIELDS_MAX && value.len() <= TRACE_FIELD_BYTES_MAX {
            self.0.push((key.to_ascii_lowercase(), value));
        }
    }
}

/// The trace-context fields (`traceparent`, `tracestate`, lower case) that make a tool's
/// own work a child of `span`, as the globally installed propagator writes them. Empty when
/// no OpenTelemetry layer records `span`, or no propagator is installed.
pub fn trace_fields(span: &tracing::Span) -> Vec<(String, String)> {
    let context = span.context();
    let mut fields = Fields(Vec::new());
    opentelemetry::global::get_text_map_propagator(|propagator| propagator.inject_context(&context, &mut fields));
    fields.0
}

/// Records `reasons` on `span` as `gen_ai.response.finish_reasons`, the string array the
/// conventions ask for (a `tracing` field could only hold one string).
pub(crate) fn finish_reasons(span: &tracing::Span, reasons: &[&str]) {
    let values: Vec<opentelemetry::StringValue> = reasons.iter().map(|r| (*r).to_owned().into()).collect();
    span.set_attribute("gen_ai.response.finish_reasons", opentelemetry::Value::Array(values.into()));
}

/// The `gen_ai.provider.name` of a preset, as the conventions spell the well-known ones.
pub(crate) fn provider_name(preset: crate::llm::Preset) -> &'static str {
    match preset {
        crate::llm::Preset::Deepseek => "deepseek",
        crate::llm::Preset::OpenaiCompatible => "openai",
        crate::llm::Preset::Anthropic => "anthropic",
        crate::llm::Preset::Gemini => "gcp.gemini",
    }
}
