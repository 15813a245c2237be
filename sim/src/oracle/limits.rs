//! FAILURE-LIMITS-AGREE: no stored answer is above the agent's answer limit, no tool output
//! above the tool-output limit (plus its truncation marker); a tool's output is stored as it
//! printed it, or cut exactly at the limit; a provider's error text kept in a failure is
//! bounded.

use std::collections::BTreeMap;

use faultline_runtime::event::{ContentBlock, Event, Failure, Record, TurnEndReason};

use super::evidence::{FoundViolations, RunEvidence};
use super::invariant::Invariant;

/// Room for the marker a truncated tool output ends with, in bytes.
const TRUNCATION_MARKER_BYTES: usize = 64;

/// The runtime's words before a provider's message in a failure, in bytes: `HTTP <status>: `
/// for an error response, longer for an error event inside a stream.
const STATUS_PREFIX_BYTES_MAX: usize = "provider reported an error mid-stream (status 999): ".len();

pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    let Some(transcript) = evidence.transcript() else { return };
    let (plan, end_ms) = (evidence.plan, evidence.end_ms);
    let answer_max = plan.faults.answer_bytes_max.unwrap_or(faultline_runtime::store::ANSWER_BYTES_MAX);
    for r in transcript {
        let texts: Vec<&str> = match &r.event {
            Event::AssistantMessage(m) => m.message.content.iter().map(block_text).collect(),
            Event::ToolResult(t) => t.content.iter().map(block_text).collect(),
            _ => continue,
        };
        let bytes: usize = texts.iter().map(|t| faultline_runtime::store::json_escaped_bytes(t)).sum();
        let (invariant, max) = match &r.event {
            Event::AssistantMessage(_) => (Invariant::AnswerLimit, answer_max),
            _ => (Invariant::ToolOutputLimit, faultline_runtime::tool::TOOL_OUTPUT_BYTES_MAX + TRUNCATION_MARKER_BYTES),
        };
        if bytes > max {
            found.fail(
                invariant,
                format!("seq {} holds {bytes} bytes of text, above the {max}-byte limit", r.seq),
                end_ms,
            );
        }
    }
    tool_outputs_as_printed(evidence, transcript, found);
    failure_messages_bounded(transcript, found);
}

/// A tool that prints a known text (`output_bytes`) is recorded with exactly that text when
/// it fits the tool-output limit, and otherwise with its longest prefix that ends on a
/// character boundary at or below the limit, then only the truncation marker: nothing kept
/// past the limit, nothing cut that fitted. The printed text comes from the scenario, not
/// from the runtime.
fn tool_outputs_as_printed(evidence: &RunEvidence<'_>, transcript: &[Record], found: &mut FoundViolations) {
    let limit = faultline_runtime::tool::TOOL_OUTPUT_BYTES_MAX;
    let mut names: BTreeMap<(u32, u32, &str), &str> = BTreeMap::new();
    for r in transcript {
        let result = match &r.event {
            Event::ToolCall(call) => {
                names.insert((call.turn, call.step, call.call_id.as_str()), call.name.as_str());
                continue;
            }
            Event::ToolResult(result) if result.error.is_none() => result,
            _ => continue,
        };
        let Some(name) = names.get(&(result.turn, result.step, result.call_id.as_str())) else { continue };
        let Some(printed) = evidence.plan.tools.iter().find(|t| t.name == *name).and_then(|t| t.printed_output())
        else {
            continue;
        };
        let text: String = result.content.iter().map(block_text).collect();
        let kept = if printed.len() <= limit {
            text == printed
        } else {
            let cut = (0..=limit).rev().find(|&i| printed.is_char_boundary(i)).unwrap_or(0);
            let next = printed[cut..].chars().next().expect("a text over the limit goes on after the cut");
            let marker = text.get(cut..).unwrap_or("");
            text.as_bytes().get(..cut) == Some(&printed.as_bytes()[..cut])
                && !marker.starts_with(next)
                && marker.len() <= TRUNCATION_MARKER_BYTES
        };
        if !kept {
            found.fail(
                Invariant::ToolOutputAsPrinted,
                format!(
                    "seq {} holds {} bytes for {name}'s {}-byte output (limit {limit}): {}",
                    r.seq,
                    text.len(),
                    printed.len(),
                    if printed.len() <= limit {
                        "an output that fits must be kept whole"
                    } else {
                        "the cut must fall on the last character boundary at or below the limit, then only the marker"
                    }
                ),
                evidence.end_ms,
            );
        }
    }
}

/// Every failure classified from an HTTP status keeps at most
/// [`faultline_runtime::llm::ERROR_MESSAGE_BYTES_MAX`] bytes of the provider's text: a
/// hostile or verbose provider's body (DeepSeek's errors are often Chinese, three bytes a
/// character) never grows a transcript record past the limit, however its characters fall.
fn failure_messages_bounded(transcript: &[Record], found: &mut FoundViolations) {
    let limit = faultline_runtime::llm::ERROR_MESSAGE_BYTES_MAX + STATUS_PREFIX_BYTES_MAX;
    for record in transcript {
        let Some((_, failure)) = recorded_failure(record) else { continue };
        if failure.status.is_some() && failure.message.len() > limit {
            found.fail(
                Invariant::FailureMessageBounded,
                format!(
                    "seq {} keeps a {}-byte provider message, above the {limit}-byte bound",
                    record.seq,
                    failure.message.len()
                ),
                record.time.saturating_sub(crate::seams::SIM_EPOCH_MS),
            );
        }
    }
}

/// The failure a record states, with its record type: an `llm/retry`'s cause or a `turn/end`
/// error.
pub(super) fn recorded_failure(record: &Record) -> Option<(&'static str, &Failure)> {
    match &record.event {
        Event::LlmRetry(retry) => Some(("llm/retry", &retry.failure)),
        Event::TurnEnd(end) => match &end.reason {
            TurnEndReason::Error { error } => Some(("turn/end", error)),
            _ => None,
        },
        _ => None,
    }
}

/// The text a content block carries (a tool call's arguments included).
fn block_text(block: &ContentBlock) -> &str {
    match block {
        ContentBlock::Text { text } | ContentBlock::Reasoning { text, .. } | ContentBlock::Refusal { text } => text,
        ContentBlock::RedactedReasoning { data } => data,
        ContentBlock::ToolCall { arguments, .. } => arguments,
    }
}
