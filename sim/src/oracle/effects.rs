//! Side effects against the evidence the runtime cannot touch: the gateway's receipts (what
//! arrived, when, with which body) and the disk's own witness of what was synced when.
//! Intent before effect (the `tool/call` synced strictly before the receipt, in the run's
//! order of events), at most once per execution id across restarts, the receipt is what the
//! call asked for, and what the transcript says of each effect agrees with the gateway.

use std::collections::{BTreeMap, BTreeSet};

use faultline_runtime::event::{ErrorCode, Event};

use super::evidence::{FoundViolations, RunEvidence};
use super::invariant::Invariant;

/// What the gateway's effects owe to the runtime alone: the delivery queue sends them.
const GATEWAY_INTENT_ADVICE: &str = "A runtime defect: the runtime dispatches a call, and the delivery queue \
                                     delivers it, only after the intent's flush made its tool/call durable; replay \
                                     the seed and report it.";

/// The receipts against the synced `tool/call`s, whether or not the run converged or its
/// log was refused: no liveness and no refusal excuse an effect without its intent. What
/// the transcript says of each effect is held to the receipts when there is a transcript.
pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    let (receipts, end_ms) = (evidence.receipts, evidence.end_ms);
    let calls = synced_calls(evidence);
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for receipt in receipts {
        match calls.get(&receipt.execution_id) {
            None => found.fail_advised(
                Invariant::IntentBeforeEffect,
                format!(
                    "execution {} reached the gateway at {} ms, but no tool/call for it was ever synced",
                    receipt.execution_id, receipt.at_ms
                ),
                GATEWAY_INTENT_ADVICE.to_owned(),
                receipt.at_ms,
            ),
            Some((synced, call)) => {
                // Strictly before, in the one order of events: not merely present at the end,
                // and not "in the same tick".
                if synced.stamp > receipt.stamp {
                    found.fail_advised(
                        Invariant::IntentBeforeEffect,
                        format!(
                            "execution {} (call {} of tool {}) reached the gateway at {} ms, before its tool/call \
                             record (seq {}) was synced (at {} ms)",
                            receipt.execution_id,
                            call.call_id,
                            call.name,
                            receipt.at_ms,
                            synced.record.seq,
                            synced.at_ms
                        ),
                        GATEWAY_INTENT_ADVICE.to_owned(),
                        receipt.at_ms,
                    );
                }
                // The gateway received what the call asked for, not something else.
                let asked: Option<serde_json::Value> = serde_json::from_str(&call.arguments).ok();
                let got: Option<serde_json::Value> = serde_json::from_str(&receipt.body).ok();
                if asked.is_none() || asked != got {
                    found.fail(
                        Invariant::ReceiptMatchesCall,
                        format!(
                            "execution {} delivered {:?}, but its tool/call asked for {:?}",
                            receipt.execution_id, receipt.body, call.arguments
                        ),
                        receipt.at_ms,
                    );
                }
            }
        }
        *seen.entry(receipt.execution_id.as_str()).or_default() += 1;
    }
    // At most once per execution id, across restarts (an unknown outcome is never re-run).
    for (id, count) in &seen {
        if *count > 1 {
            found.fail_advised(
                Invariant::AtMostOnce,
                format!("execution {id} reached the gateway {count} times"),
                "The delivery queue sent one entry more than once: a runtime defect (an entry whose receipt was \
                 lost becomes unknown and is never resent blindly); replay the seed and report it."
                    .to_owned(),
                end_ms,
            );
        }
    }
    results_against_receipts(evidence, &seen, found);
}

/// A synced `tool/call` and the record it was synced in.
pub(super) type SyncedCall<'a> = (&'a crate::world::evidence::Synced, &'a faultline_runtime::event::ToolCall);

/// Every `tool/call` the disk witness saw synced, by execution id, at its earliest instant.
pub(super) fn synced_calls<'a>(evidence: &RunEvidence<'a>) -> BTreeMap<String, SyncedCall<'a>> {
    let mut calls: BTreeMap<String, SyncedCall<'a>> = BTreeMap::new();
    for synced in evidence.world.synced_records() {
        if let Event::ToolCall(call) = &synced.record.event {
            let entry = calls.entry(execution_id(call.turn, call.step, &call.call_id)).or_insert((synced, call));
            if synced.stamp < entry.0.stamp {
                *entry = (synced, call);
            }
        }
    }
    calls
}

/// The execution id of a call of the simulated session.
pub(super) fn execution_id(turn: u32, step: u32, call_id: &str) -> String {
    faultline_runtime::store::execution_id(crate::world::setup::SESSION, turn, step, call_id)
}

/// What the transcript says of each side effect agrees with the gateway: an ok result was
/// received; a call that never started, was never dispatched or was refused was not.
fn results_against_receipts(evidence: &RunEvidence<'_>, seen: &BTreeMap<&str, usize>, found: &mut FoundViolations) {
    let Some(records) = evidence.transcript() else { return };
    let end_ms = evidence.end_ms;
    let id = execution_id;
    let gateway_tools: BTreeSet<&str> = evidence
        .plan
        .tools
        .iter()
        .filter(|t| t.kind == crate::scenario::ToolKind::Gateway)
        .map(|t| t.name.as_str())
        .collect();
    let mut names: BTreeMap<String, &str> = BTreeMap::new();
    for r in records {
        match &r.event {
            Event::AssistantMessage(m) => {
                for (call_id, name, _) in m.message.tool_calls() {
                    names.insert(id(m.turn, m.step, call_id), name);
                }
            }
            Event::ToolCall(call) => {
                names.insert(id(call.turn, call.step, &call.call_id), call.name.as_str());
            }
            Event::ToolResult(result) => {
                let execution = id(result.turn, result.step, &result.call_id);
                if !names.get(&execution).is_some_and(|name| gateway_tools.contains(name)) {
                    continue;
                }
                let received = seen.contains_key(execution.as_str());
                let code = result.error.as_ref().map(|e| e.code);
                let contradiction = match code {
                    None => (!received).then_some("succeeded, but the gateway never received it"),
                    // A call stopped at its deadline or by an abort before it acted: so the
                    // result says, and the gateway's receipt says otherwise.
                    Some(
                        ErrorCode::ToolNotStarted
                        | ErrorCode::AbortedBeforeDispatch
                        | ErrorCode::ToolFailed
                        | ErrorCode::ToolTimeout
                        | ErrorCode::Aborted
                        | ErrorCode::ApprovalDenied
                        | ErrorCode::ApprovalExpired,
                    ) if received => Some("did not happen, but the gateway received it"),
                    _ => None,
                };
                if let Some(what) = contradiction {
                    let code = code.map_or_else(|| "ok".to_owned(), |c| c.to_string());
                    found.fail(
                        Invariant::ResultMatchesReceipt,
                        format!("seq {}: the transcript says execution {execution} ({code}) {what}", r.seq),
                        end_ms,
                    );
                }
            }
            _ => {}
        }
    }
}
