//! The effects of an embedder's tools against what its simulated services recorded
//! (FAILURE-USER-HARNESS): each effect attributed to a call by the execution id the runtime
//! stamped on the request, never by what the tool chose to send. Intent before effect (the
//! call's `tool/call` synced strictly before the effect), at most one effect per call and
//! service, and no effect from a call the transcript says never started or failed.
//!
//! Each finding's advice is fitted to what the service saw (FAILURE-FINDINGS): whether the
//! repeats carried no key, different keys, or one key the service was not declared to honour.

use std::collections::{BTreeMap, BTreeSet};

use faultline_runtime::event::{ErrorCode, Event};
use faultline_runtime::tool::EXECUTION_ID_HEADER;

use super::effects::{execution_id, synced_calls, SyncedCall};
use super::evidence::{FoundViolations, RunEvidence};
use super::invariant::Invariant;
use crate::world::{Service, ServiceReceipt, MCP_CALL_MARK, MCP_SERVER_MARK, MCP_TOOL_MARK};

/// Longest key value a finding quotes, in characters.
const KEY_QUOTED_CHARS_MAX: usize = 48;

/// Each call's effects at each service, by (service, execution id).
type Effects<'a> = BTreeMap<(&'a str, &'a str), Vec<&'a ServiceReceipt>>;

/// The services' records against the synced `tool/call`s and the transcript.
pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    if evidence.service_receipts.is_empty() {
        return;
    }
    let calls = synced_calls(evidence);
    for receipt in effects_of(evidence).values().flatten() {
        intent_before_effect(receipt, calls.get(receipt.execution_id.as_str()), found);
    }
    let name_of = |execution: &str| calls.get(execution).map(|(_, call)| call.name.clone());
    let effects = at_most_once(evidence, &name_of, found);
    results_against_effects(evidence, &effects, found);
}

/// The fleet world's services (no disk witness there): each call's effect at most once per
/// service, the tool named from the store read back at the end.
pub(super) fn check_fleet(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    let calls: BTreeMap<String, String> = evidence
        .transcript()
        .unwrap_or_default()
        .iter()
        .filter_map(|record| match &record.event {
            Event::ToolCall(call) => Some((execution_id(call.turn, call.step, &call.call_id), call.name.clone())),
            _ => None,
        })
        .collect();
    at_most_once(evidence, &|execution| calls.get(execution).cloned(), found);
}

fn effects_of<'a>(evidence: &RunEvidence<'a>) -> Effects<'a> {
    let mut effects: Effects<'a> = BTreeMap::new();
    for receipt in evidence.service_receipts.iter().filter(|r| r.fate.is_effect() && !r.read) {
        effects.entry((receipt.service.as_str(), receipt.execution_id.as_str())).or_default().push(receipt);
    }
    effects
}

/// At most one effect per call and service, each repeat advised by what it carried; the
/// effects, for the checks that read them next.
fn at_most_once<'a>(
    evidence: &RunEvidence<'a>,
    name_of: &dyn Fn(&str) -> Option<String>,
    found: &mut FoundViolations,
) -> Effects<'a> {
    let effects = effects_of(evidence);
    for ((service, execution), repeats) in &effects {
        if repeats.len() > 1 {
            let tool = name_of(execution).unwrap_or_else(|| "an unknown tool".to_owned());
            let tool = tool.as_str();
            let times: Vec<String> = repeats.iter().map(|r| format!("{} ms", r.at_ms)).collect();
            let declared = evidence.services.iter().find(|s| s.name == *service);
            found.fail_advised(
                Invariant::AtMostOnce,
                format!(
                    "tool {tool} did its effect on {service} {} times for execution {execution} (at {})",
                    repeats.len(),
                    times.join(", ")
                ),
                mcp_repeat_advice(tool, repeats).unwrap_or_else(|| repeat_advice(tool, service, declared, repeats)),
                repeats.last().map_or(evidence.end_ms, |r| r.at_ms),
            );
        }
    }
    effects
}

/// The effect's `tool/call` was synced strictly before it arrived.
fn intent_before_effect(receipt: &ServiceReceipt, call: Option<&SyncedCall<'_>>, found: &mut FoundViolations) {
    let (service, execution, at_ms) = (receipt.service.as_str(), receipt.execution_id.as_str(), receipt.at_ms);
    match call {
        None if execution.is_empty() => found.fail_advised(
            Invariant::IntentBeforeEffect,
            format!("{service} received an effect from no tool call (no {EXECUTION_ID_HEADER} header) at {at_ms} ms"),
            format!(
                "The request to {service} was made outside any tool call's own task (a task the tool spawned, or \
                 code outside the agent), so no intent was made durable before it: make every request from inside \
                 Tool::call, where the runtime stamps it with the call's execution id."
            ),
            at_ms,
        ),
        None => found.fail_advised(
            Invariant::IntentBeforeEffect,
            format!("{service} received execution {execution} at {at_ms} ms, but no tool/call for it was ever synced"),
            format!(
                "No durable tool/call record names execution {execution}: the request carried an execution id no \
                 call of this session was given (a stale id kept by the tool), or the runtime dispatched a call \
                 whose intent it never wrote; replay the seed and read the trace around {at_ms} ms."
            ),
            at_ms,
        ),
        Some((synced, call)) if synced.stamp > receipt.stamp => found.fail_advised(
            Invariant::IntentBeforeEffect,
            format!(
                "{service} received execution {execution} (call {} of tool {}) at {at_ms} ms, before its tool/call \
                 record (seq {}) was synced at {} ms",
                call.call_id, call.name, synced.record.seq, synced.at_ms
            ),
            format!(
                "The tool/call record seq {} of tool {} was not yet durable when its effect arrived: a runtime \
                 defect (the runtime dispatches a call only after its intent is synced); replay the seed and report \
                 it.",
                synced.record.seq, call.name
            ),
            at_ms,
        ),
        Some(_) => {}
    }
}

/// Advice for an effect that came more than once: what the repeats carried, against what
/// the service was declared to honour.
fn repeat_advice(tool: &str, service: &str, declared: Option<&Service>, repeats: &[&ServiceReceipt]) -> String {
    let dedup = declared.and_then(|s| s.dedup_header.as_deref());
    let Some(header) = dedup.map(str::to_owned).or_else(|| key_like_header(repeats)) else {
        return format!(
            "The repeats carried no idempotency key: send ToolInvocation::execution_id (the same for every attempt \
             of a call, and across restarts) as the key of a service that deduplicates by it, and declare that \
             with Service::dedup_by_header; if {service} honours no key, tool {tool} must not repeat a request \
             whose reply was lost: end the call as ToolOutput::Unknown."
        );
    };
    let values: Vec<Option<&str>> = repeats.iter().map(|r| r.header(&header)).collect();
    let distinct: BTreeSet<&str> = values.iter().flatten().copied().collect();
    if values.iter().any(Option::is_none) {
        return format!(
            "Only some repeats carried the {header} header: tool {tool} must send the key on every attempt, \
             retries included (ToolInvocation::execution_id)."
        );
    }
    if distinct.len() > 1 {
        let quoted: Vec<String> = distinct.iter().map(|v| quote(v)).collect();
        return format!(
            "The repeats carried different keys ({header}: {}): tool {tool} makes a new key per attempt, so \
             {service} cannot tell a repeat from a new request; derive the key from ToolInvocation::execution_id, \
             which is the same for every attempt of a call and across restarts.",
            quoted.join(", ")
        );
    }
    let key = distinct.first().map_or_else(String::new, |v| quote(v));
    match dedup {
        None => format!(
            "The repeats carried the same key ({header}: {key}), but {service} was declared without \
             dedup_by_header, so every repeat is a new effect: if the real {service} deduplicates by {header}, \
             declare Service::new(\"{service}\").dedup_by_header(\"{header}\"); if it does not, tool {tool} must \
             not repeat a request whose reply was lost."
        ),
        Some(_) => format!(
            "{service} deduplicates by {header} and received the same key ({key}) as two effects: a harness \
             defect; replay the seed and report it."
        ),
    }
}

/// Advice for an effect a simulated MCP server did more than once, by which side repeated:
/// one `tools/call` acted on twice is the server's own retry; two calls for one execution
/// are the runtime sending it again. `None` for a service that is not an MCP server.
fn mcp_repeat_advice(tool: &str, repeats: &[&ServiceReceipt]) -> Option<String> {
    let server = repeats.first()?.header(MCP_SERVER_MARK)?;
    let on_server = repeats.first()?.header(MCP_TOOL_MARK).unwrap_or(tool);
    let calls: BTreeSet<&str> = repeats.iter().filter_map(|r| r.header(MCP_CALL_MARK)).collect();
    Some(if calls.len() == 1 {
        format!(
            "MCP server {server} repeated the effect itself: its tool {on_server} acted {} times on one tools/call \
             (its own retry of a step whose reply was lost), and it does not deduplicate. The runtime sent it \
             once. Make {on_server} deduplicate by the execution id in the request's _meta \
             (\"faultline/execution_id\") and declare sim.dedup = \"execution-id\" under \
             [mcp_servers.sim.{on_server}], or set sim.retries = 0.",
            repeats.len()
        )
    } else {
        format!(
            "The runtime sent tools/call for one execution of {tool} to MCP server {server} {} times: a runtime \
             defect (a call whose answer was lost ends TOOL_OUTCOME_UNKNOWN and is never sent again); replay \
             the seed and report it.",
            calls.len()
        )
    })
}

/// The header among the repeats that looks like an idempotency key (`idempotency-key`,
/// `x-request-key`), if one does.
fn key_like_header(repeats: &[&ServiceReceipt]) -> Option<String> {
    repeats
        .iter()
        .flat_map(|r| r.headers.iter().map(|(name, _)| name.as_str()))
        .filter(|name| *name != EXECUTION_ID_HEADER)
        .find(|name| name.contains("idempot") || name.ends_with("key"))
        .map(str::to_owned)
}

fn quote(value: &str) -> String {
    let cut: String = value.chars().take(KEY_QUOTED_CHARS_MAX).collect();
    if cut.len() < value.len() {
        format!("{cut:?}...")
    } else {
        format!("{cut:?}")
    }
}

/// A call the transcript says never started (or was aborted before dispatch) has no effect
/// on any service; a call the tool said failed has none either.
fn results_against_effects(
    evidence: &RunEvidence<'_>,
    effects: &BTreeMap<(&str, &str), Vec<&ServiceReceipt>>,
    found: &mut FoundViolations,
) {
    let Some(records) = evidence.transcript() else { return };
    let mut names: BTreeMap<String, &str> = BTreeMap::new();
    for record in records {
        if let Event::ToolCall(call) = &record.event {
            names.insert(execution_id(call.turn, call.step, &call.call_id), call.name.as_str());
        }
        let Event::ToolResult(result) = &record.event else { continue };
        let Some(code) = result.error.as_ref().map(|e| e.code) else { continue };
        let execution = execution_id(result.turn, result.step, &result.call_id);
        let Some(((service, _), receipts)) = effects.iter().find(|((_, e), _)| *e == execution) else { continue };
        let tool = names.get(&execution).copied().unwrap_or("an unknown tool");
        let at_ms = receipts.first().map_or(evidence.end_ms, |r| r.at_ms);
        match code {
            ErrorCode::ToolNotStarted
            | ErrorCode::AbortedBeforeDispatch
            | ErrorCode::ToolTimeout
            | ErrorCode::Aborted => found.fail_advised(
                Invariant::ResultMatchesReceipt,
                format!(
                    "seq {}: the transcript says execution {execution} ({code}) did not start, but {service} \
                     received its effect at {at_ms} ms",
                    record.seq
                ),
                format!(
                    "The runtime wrote {code} for a call of tool {tool} that had reached {service}: a runtime \
                     defect (a call that may have been dispatched ends TOOL_OUTCOME_UNKNOWN); replay the seed and \
                     report it."
                ),
                evidence.end_ms,
            ),
            ErrorCode::ToolFailed => found.fail_advised(
                Invariant::ResultMatchesReceipt,
                format!(
                    "seq {}: tool {tool} said execution {execution} failed (TOOL_FAILED), but {service} did its \
                     effect at {at_ms} ms",
                    record.seq
                ),
                format!(
                    "Tool {tool} reported a failure for a request that had arrived: when a reply is lost \
                     (HttpFailure::may_have_arrived) end the call as ToolOutput::Unknown, so the transcript says \
                     TOOL_OUTCOME_UNKNOWN and nobody sends it again blindly."
                ),
                evidence.end_ms,
            ),
            _ => {}
        }
    }
}
