//! Side effects against the evidence the runtime cannot touch: the gateway's receipts (what
//! arrived, when, with which body). Intent before effect, at most once per execution id
//! across restarts, the receipt is what the call asked for, and what the transcript says of
//! each effect agrees with the gateway.

use std::collections::{BTreeMap, BTreeSet};

use faultline_runtime::event::{ErrorCode, Event, Record, ToolCall};

use super::{Evidence, Found, Invariant};

/// The transcript when the run converged; otherwise (no liveness) the records acknowledged
/// durable, which are evidence enough to hold the receipts against: no liveness excuses no
/// safety.
pub(super) fn check(evidence: &Evidence<'_>, found: &mut Found) {
    let acked: Vec<Record>;
    let records = match evidence.transcript() {
        Some(transcript) => transcript,
        None => {
            acked = evidence.world.acked.values().cloned().collect();
            &acked
        }
    };
    let (world, receipts, end_ms) = (evidence.world, evidence.receipts, evidence.end_ms);
    let id = |turn, step, call_id: &str| faultline_runtime::store::repair::execution_id("sim", turn, step, call_id);
    // Intent before effect: every receipt has a durable tool/call.
    let calls: BTreeMap<String, (u64, &ToolCall)> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::ToolCall(call) => Some((id(call.turn, call.step, &call.call_id), (r.seq, call))),
            _ => None,
        })
        .collect();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for receipt in receipts {
        match calls.get(&receipt.execution_id) {
            None => found.fail(
                Invariant::IntentBeforeEffect,
                format!("execution {} reached the gateway without a durable tool/call", receipt.execution_id),
                receipt.at_ms,
            ),
            Some((seq, call)) => {
                // Durable before the effect, by the watermark observed outside the host: not
                // merely present at the end.
                match world.durable_at.get(seq) {
                    Some(&durable_ms) if durable_ms <= receipt.at_ms => {}
                    durable => found.fail(
                        Invariant::IntentBeforeEffect,
                        format!(
                            "execution {} reached the gateway at {} ms, but its tool/call (seq {seq}) was {}",
                            receipt.execution_id,
                            receipt.at_ms,
                            durable.map_or("never acknowledged durable".to_owned(), |ms| format!(
                                "acknowledged durable only at {ms} ms"
                            ))
                        ),
                        receipt.at_ms,
                    ),
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
            found.fail(Invariant::AtMostOnce, format!("execution {id} reached the gateway {count} times"), end_ms);
        }
    }
    // What the transcript says of each side effect agrees with the gateway: an ok result was
    // received; a call that never started, was never dispatched or was refused was not.
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
                    Some(ErrorCode::ToolNotStarted | ErrorCode::AbortedBeforeDispatch | ErrorCode::ToolFailed)
                        if received =>
                    {
                        Some("did not happen, but the gateway received it")
                    }
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
