//! The agent's spans (FAILURE-OTEL), named and attributed per the GenAI semantic conventions:
//! what a turn, a step, a model attempt, a retry wait, a tool call and a recovery record
//! when they start and what they learn by their end. Codes, counts and names only: never a
//! message's text, and the model's identifiers (tool names, call ids) scrubbed of held
//! secrets first. See `crate::telemetry`.

use tracing::field::Empty;
use tracing::Span;

use crate::event::{ErrorCode, FinishReason, TurnEndReason, Usage};
use crate::secrets::Scrubber;
use crate::telemetry::{finish_reasons, provider_name, AGENT_NAME};

/// A turn: `invoke_agent faultline`.
pub(super) fn turn(secrets: &Scrubber, session: &str, turn: u32) -> Span {
    tracing::info_span!(
        "turn",
        otel.name = format!("invoke_agent {AGENT_NAME}"),
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = AGENT_NAME,
        gen_ai.conversation.id = %secrets.scrub_held(session),
        session = %secrets.scrub_held(session),
        turn = int(turn),
        faultline.turn.end = Empty,
        faultline.turn.kept = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        error.type = Empty,
        otel.status_code = Empty,
    )
}

/// What a turn reached, whether it was kept (its end durable), and its tokens.
pub(super) fn turn_ended(span: &Span, reason: &TurnEndReason, kept: bool, usage: &Usage) {
    span.record("faultline.turn.end", reason.kind());
    span.record("faultline.turn.kept", kept);
    span.record("gen_ai.usage.input_tokens", int(usage.prompt_tokens));
    span.record("gen_ai.usage.output_tokens", int(usage.completion_tokens));
    if let TurnEndReason::Error { error } = reason {
        failed(span, error.code);
    } else if !kept {
        span.record("error.type", "NOT_DURABLE");
        span.record("otel.status_code", "ERROR");
    }
}

/// A step of a turn: its attempts and its tool calls.
pub(super) fn step(turn: u32, step: u32) -> Span {
    tracing::info_span!("step", otel.name = "step", turn = int(turn), step = int(step))
}

/// One model attempt: `chat {model}`, a client call.
pub(super) fn attempt(route: &crate::llm::ResolvedProvider, step: u32, attempt: u32) -> Span {
    tracing::info_span!(
        "attempt",
        otel.name = format!("chat {}", route.model),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider_name(route.preset),
        gen_ai.request.model = %route.model,
        step = int(step),
        attempt = int(attempt),
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        http.response.status_code = Empty,
        error.type = Empty,
        otel.status_code = Empty,
    )
}

/// How an attempt finished, and what it used.
pub(super) fn attempt_ended(span: &Span, finish: &FinishReason, usage: Option<&Usage>) {
    if let Some(usage) = usage {
        span.record("gen_ai.usage.input_tokens", int(usage.prompt_tokens));
        span.record("gen_ai.usage.output_tokens", int(usage.completion_tokens));
    }
    let reason = match finish {
        FinishReason::Stop => "stop",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::MaxTokens => "length",
        FinishReason::Error { failure } | FinishReason::Aborted { failure } => {
            if let Some(status) = failure.status {
                span.record("http.response.status_code", int(status));
            }
            failed(span, failure.code);
            return;
        }
    };
    finish_reasons(span, &[reason]);
}

/// The wait before retry `retry` of a step, after a failure of `code`.
pub(super) fn retry_wait(step: u32, retry: u32, delay_ms: u64, code: ErrorCode) -> Span {
    tracing::info_span!(
        "retry_wait",
        otel.name = "retry_wait",
        step = int(step),
        faultline.retry = int(retry),
        faultline.retry.delay_ms = int(delay_ms),
        error.type = %code,
    )
}

/// One tool call: `execute_tool {name}`.
pub(super) fn tool(secrets: &Scrubber, step: u32, name: &str, call_id: &str, execution_id: &str) -> Span {
    // Field values are computed only when a subscriber wants the span (the simulator's
    // sweeps have none).
    tracing::info_span!(
        "tool",
        otel.name = format!("execute_tool {}", secrets.scrub_held(name)),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %secrets.scrub_held(name),
        gen_ai.tool.call.id = %secrets.scrub_held(call_id),
        faultline.execution_id = %secrets.scrub_held(execution_id),
        step = int(step),
        error.type = Empty,
        otel.status_code = Empty,
    )
}

/// How a tool call ended (`None`: its output, no error).
pub(super) fn tool_ended(span: &Span, code: Option<ErrorCode>) {
    if let Some(code) = code {
        failed(span, code);
    }
}

/// A resume's recovery: what the repair of the session found.
pub(super) fn recovery(secrets: &Scrubber, session: &str) -> Span {
    tracing::info_span!(
        "recovery",
        otel.name = "recovery",
        gen_ai.conversation.id = %secrets.scrub_held(session),
        faultline.records = Empty,
        faultline.repair.closers = Empty,
        faultline.repair.salvaged = Empty,
        faultline.repair.truncated_bytes = Empty,
        faultline.repair.dropped_records = Empty,
    )
}

/// The recovery's findings: records read back, and the repair's work if one was needed.
pub(super) fn recovered(span: &Span, records: usize, repair: Option<&crate::store::Repair>) {
    span.record("faultline.records", int(records));
    let Some(repair) = repair else { return };
    span.record("faultline.repair.closers", int(repair.closers.len()));
    span.record("faultline.repair.salvaged", int(repair.recovered.len()));
    span.record("faultline.repair.truncated_bytes", int(repair.truncated_bytes));
    span.record("faultline.repair.dropped_records", int(repair.dropped_records));
}

/// A count as OpenTelemetry's integer: `tracing` hands an unsigned value to the bridge as
/// text, a signed one as a number.
fn int(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

fn failed(span: &Span, code: ErrorCode) {
    span.record("error.type", tracing::field::display(code));
    span.record("otel.status_code", "ERROR");
}
