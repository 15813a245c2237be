//! The effects of an embedder's tools against what its simulated services recorded
//! (FAILURE-USER-HARNESS): each effect attributed to a call by the execution id the runtime
//! stamped on the request, never by what the tool chose to send. Intent before effect (the
//! call's `tool/call` synced strictly before the effect), at most one effect per call and
//! service, and no effect from a call the transcript says never started.

use std::collections::BTreeMap;

use faultline_runtime::event::{ErrorCode, Event};

use super::effects::{execution_id, synced_calls};
use super::evidence::{Found, RunEvidence};
use super::invariant::Invariant;

/// The services' records against the synced `tool/call`s and the transcript.
pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut Found) {
    if evidence.service_receipts.is_empty() {
        return;
    }
    let calls = synced_calls(evidence);
    let mut effects: BTreeMap<(&str, &str), Vec<u64>> = BTreeMap::new();
    for receipt in evidence.service_receipts.iter().filter(|r| r.fate.is_effect() && !r.read) {
        let (service, execution) = (receipt.service.as_str(), receipt.execution_id.as_str());
        match calls.get(execution) {
            None if execution.is_empty() => found.fail(
                Invariant::IntentBeforeEffect,
                format!("{service} received an effect from no tool call (no execution id) at {} ms", receipt.at_ms),
                receipt.at_ms,
            ),
            None => found.fail(
                Invariant::IntentBeforeEffect,
                format!(
                    "{service} received execution {execution} at {} ms, but no tool/call for it was ever synced",
                    receipt.at_ms
                ),
                receipt.at_ms,
            ),
            Some((synced, call)) if synced.stamp > receipt.stamp => found.fail(
                Invariant::IntentBeforeEffect,
                format!(
                    "{service} received execution {execution} ({}) at {} ms, before its tool/call (seq {}) was \
                     synced at {} ms",
                    call.name, receipt.at_ms, synced.record.seq, synced.at_ms
                ),
                receipt.at_ms,
            ),
            Some(_) => {}
        }
        effects.entry((service, execution)).or_default().push(receipt.at_ms);
    }
    let name_of = |execution: &str| calls.get(execution).map_or("an unknown tool", |(_, call)| call.name.as_str());
    for ((service, execution), at) in &effects {
        if at.len() > 1 {
            let times: Vec<String> = at.iter().map(|ms| format!("{ms} ms")).collect();
            found.fail(
                Invariant::AtMostOnce,
                format!(
                    "tool {} did its effect on {service} {} times for execution {execution} (at {}): the \
                     service did not deduplicate the repeat",
                    name_of(execution),
                    at.len(),
                    times.join(", ")
                ),
                *at.last().unwrap_or(&evidence.end_ms),
            );
        }
    }
    never_started_but_received(evidence, &effects, found);
}

/// A call the transcript says never started (or was aborted before dispatch) has no effect
/// on any service.
fn never_started_but_received(
    evidence: &RunEvidence<'_>,
    effects: &BTreeMap<(&str, &str), Vec<u64>>,
    found: &mut Found,
) {
    let Some(records) = evidence.transcript() else { return };
    for record in records {
        let Event::ToolResult(result) = &record.event else { continue };
        let code = result.error.as_ref().map(|e| e.code);
        if !matches!(code, Some(ErrorCode::ToolNotStarted | ErrorCode::AbortedBeforeDispatch)) {
            continue;
        }
        let execution = execution_id(result.turn, result.step, &result.call_id);
        if let Some(((service, _), _)) = effects.iter().find(|((_, e), _)| *e == execution) {
            found.fail(
                Invariant::ResultMatchesReceipt,
                format!(
                    "seq {}: the transcript says execution {execution} did not start, but {service} received its effect",
                    record.seq
                ),
                evidence.end_ms,
            );
        }
    }
}
