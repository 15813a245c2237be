//! The oracle (SPEC §10): invariants checked after every run. A violation names the
//! invariant, where (seq or execution id) and when (simulated ms).

use std::collections::{BTreeMap, BTreeSet};

use faultline_runtime::event::{ErrorCode, Event, Record, TurnEndReason, Validator};
use serde::Serialize;

use super::seeded::Plan;
use super::{Receipt, World};

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Which invariant.
    pub invariant: &'static str,
    /// Where and what.
    pub detail: String,
    /// Simulated ms at the end of the run (or of the offending event).
    pub at_ms: u64,
}

fn end_kind(reason: &TurnEndReason) -> String {
    match reason {
        TurnEndReason::Completed => "completed".into(),
        TurnEndReason::Aborted { .. } => "aborted".into(),
        TurnEndReason::Error { error } => format!("error:{}", error.code),
        TurnEndReason::MaxTokens => "max-tokens".into(),
        TurnEndReason::Interrupted => "interrupted".into(),
        TurnEndReason::BudgetExhausted { .. } => "budget-exhausted".into(),
    }
}

/// The "sometimes" conditions a run reached: rare good paths the sweep must see at least once
/// (in the spirit of FoundationDB's `sometimes` assertions).
pub(super) fn sometimes(transcript: &[Record]) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut retried_turns = std::collections::BTreeSet::new();
    for r in transcript {
        match &r.event {
            Event::LlmRetryStarted(started) => {
                retried_turns.insert(started.turn);
            }
            Event::TurnEnd(end) => {
                if end.reason == TurnEndReason::Completed && retried_turns.contains(&end.turn) {
                    out.insert("retry-succeeded".to_owned());
                }
                if end.reason == TurnEndReason::Interrupted {
                    out.insert("interrupted-turn-repaired".to_owned());
                }
            }
            Event::ToolResult(result) => {
                let text: String = result
                    .content
                    .iter()
                    .filter_map(|b| {
                        if let faultline_runtime::event::ContentBlock::Text { text } = b {
                            Some(text.as_str())
                        } else {
                            None
                        }
                    })
                    .collect();
                match result.error.as_ref().map(|e| e.code) {
                    Some(faultline_runtime::event::ErrorCode::ToolOutcomeUnknown)
                        if text.contains("delivery record") =>
                    {
                        out.insert("unknown-reconciled-from-queue".to_owned());
                    }
                    Some(faultline_runtime::event::ErrorCode::AbortedBeforeDispatch) => {
                        out.insert("pool-drained-on-abort".to_owned());
                    }
                    Some(faultline_runtime::event::ErrorCode::ToolTimeout) => {
                        out.insert("tool-timeout-awaited".to_owned());
                    }
                    None => {
                        out.insert("side-effect-confirmed".to_owned());
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    out
}

/// Every "sometimes" condition the default sweep must reach.
pub const SOMETIMES: [&str; 6] = [
    "retry-succeeded",
    "interrupted-turn-repaired",
    "unknown-reconciled-from-queue",
    "pool-drained-on-abort",
    "tool-timeout-awaited",
    "side-effect-confirmed",
];

/// The side effects against evidence the runtime cannot touch: the gateway's receipts (what
/// arrived, when, with which body). `records` is the recovered transcript, or for a run that
/// never converged the records acknowledged durable.
fn effect_evidence(
    plan: &Plan,
    world: &World,
    records: &[Record],
    receipts: &[Receipt],
    sim_ms: u64,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut fail =
        |invariant: &'static str, detail: String, at_ms: u64| out.push(Violation { invariant, detail, at_ms });
    let id = |turn, step, call_id: &str| faultline_runtime::store::repair::execution_id("sim", turn, step, call_id);
    // Intent before effect: every receipt has a durable tool/call.
    let calls: BTreeMap<String, (u64, &faultline_runtime::event::ToolCall)> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::ToolCall(call) => Some((id(call.turn, call.step, &call.call_id), (r.seq, call))),
            _ => None,
        })
        .collect();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for receipt in receipts {
        match calls.get(&receipt.execution_id) {
            None => fail(
                "intent-before-effect",
                format!("execution {} reached the gateway without a durable tool/call", receipt.execution_id),
                receipt.at_ms,
            ),
            Some((seq, call)) => {
                // Durable before the effect, by the watermark observed outside the host: not
                // merely present at the end.
                match world.durable_at.get(seq) {
                    Some(&durable_ms) if durable_ms <= receipt.at_ms => {}
                    found => fail(
                        "intent-before-effect",
                        format!(
                            "execution {} reached the gateway at {} ms, but its tool/call (seq {seq}) was {}",
                            receipt.execution_id,
                            receipt.at_ms,
                            found.map_or("never acknowledged durable".to_owned(), |ms| format!(
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
                    fail(
                        "receipt-matches-call",
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
            fail("at-most-once", format!("execution {id} reached the gateway {count} times"), sim_ms);
        }
    }
    // What the transcript says of each side effect agrees with the gateway: an ok result was
    // received; a call that never started, was never dispatched or was refused was not.
    let gateway_tools: BTreeSet<&str> =
        plan.tools.iter().filter(|t| t.kind == crate::scenario::ToolKind::Gateway).map(|t| t.name.as_str()).collect();
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
                    fail(
                        "result-matches-receipt",
                        format!("seq {}: the transcript says execution {execution} ({code}) {what}", r.seq),
                        sim_ms,
                    );
                }
            }
            _ => {}
        }
    }
    out
}

/// A tool that prints a known text (`output_bytes`) is recorded with exactly that text when
/// it fits the tool-output limit, and otherwise with its longest prefix that ends on a
/// character boundary at or below the limit, then only the truncation marker: nothing kept
/// past the limit, nothing cut that fitted. The printed text comes from the scenario, not
/// from the runtime.
fn tool_outputs_as_printed(plan: &Plan, transcript: &[Record], sim_ms: u64) -> Vec<Violation> {
    let limit = faultline_runtime::agent::TOOL_OUTPUT_BYTES_MAX;
    let mut names: BTreeMap<(u32, u32, &str), &str> = BTreeMap::new();
    let mut out = Vec::new();
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
        let Some(printed) = plan.tools.iter().find(|t| t.name == *name).and_then(|t| t.printed_output()) else {
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
            out.push(Violation {
                invariant: "tool-output-as-printed",
                detail: format!(
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
                at_ms: sim_ms,
            });
        }
    }
    out
}

/// Room for the marker a truncated tool output ends with, in bytes.
const TRUNCATION_MARKER_BYTES: usize = 64;

/// The text a content block carries (a tool call's arguments included).
fn block_text(block: &faultline_runtime::event::ContentBlock) -> &str {
    use faultline_runtime::event::ContentBlock;
    match block {
        ContentBlock::Text { text } | ContentBlock::Reasoning { text } => text,
        ContentBlock::ToolCall { arguments, .. } => arguments,
    }
}

/// FAILURE-SECRETS: a secret of the run (the provider key, the gateway token) appears nowhere the agent wrote or sent — not in a
/// byte of its session file or outbox journal (whatever survived the crashes), not in a
/// record it accepted, not in the trace, not in a request body the model server received (a
/// key in a tool's output would ride the next request), not in a payload the gateway received
/// (a key the model wrote into a tool's arguments would leave the process with the effect).
/// Checked whether or not the run converged: a leak is a safety violation, never excused as
/// "no liveness".
pub(super) fn secret_leaks(what: &str, secret: &str, world: &World, sent: Sent<'_>, sim_ms: u64) -> Vec<Violation> {
    let mut out = Vec::new();
    // By halves: a whole secret holds both, and a secret split across two streamed deltas
    // leaks in two records, neither of which holds it whole.
    let (head, tail) = secret.split_at(secret.len() / 2);
    for (part, needle) in [(" (its first half at least)", head), (" (its second half)", tail)] {
        out.extend(leaks_of(&format!("{what}{part}"), needle, world, sent, sim_ms));
        if !out.is_empty() {
            break;
        }
    }
    out
}

/// What left the agent host for the other hosts, as they received it.
#[derive(Clone, Copy)]
pub(super) struct Sent<'a> {
    /// Every request body the model server received.
    pub request_bodies: &'a [std::sync::Arc<str>],
    /// Every delivery the gateway accepted.
    pub receipts: &'a [Receipt],
}

fn leaks_of(what: &str, secret: &str, world: &World, sent: Sent<'_>, sim_ms: u64) -> Vec<Violation> {
    let leak = |place: String| Violation {
        invariant: "secret-leak",
        detail: format!("{what} appears in {place}"),
        at_ms: sim_ms,
    };
    let mut out = Vec::new();
    let finder = memchr::memmem::Finder::new(secret.as_bytes());
    // The disk holds every record that survived; the records accepted by the last
    // incarnation but lost in a crash never left the process.
    for (path, bytes) in &world.disk {
        if let Some(at) = finder.find(bytes) {
            out.push(leak(format!("{path} at byte {at}")));
        }
    }
    if let Some(line) = world.trace.iter().find(|line| finder.find(line.as_bytes()).is_some()) {
        out.push(leak(format!("the trace line {line:?}")));
    }
    if let Some(n) = sent.request_bodies.iter().position(|body| finder.find(body.as_bytes()).is_some()) {
        out.push(leak(format!("the body of model request {n}")));
    }
    if let Some(receipt) = sent.receipts.iter().find(|r| finder.find(r.body.as_bytes()).is_some()) {
        out.push(leak(format!("the payload the gateway received for {}", receipt.execution_id)));
    }
    out
}

pub(super) fn check(
    plan: &Plan,
    world: &World,
    transcript: &[Record],
    receipts: &[Receipt],
    exchanges: &[crate::model_server::Exchange],
    sim_ms: u64,
) -> Vec<Violation> {
    let model_requests = exchanges.len();
    let mut out = Vec::new();
    let mut fail =
        |invariant: &'static str, detail: String, at_ms: u64| out.push(Violation { invariant, detail, at_ms });

    // A refusal is the right answer to bit rot, and only to bit rot: crashes, torn writes and
    // power-loss holes are always recoverable. A refused file is left exactly as it was found.
    if let Some(reason) = &world.refused {
        match &world.rotted {
            Some(rotted) => {
                let now = world.disk.iter().find(|(path, _)| *path == rotted.path).map(|(_, bytes)| bytes);
                if now != Some(&rotted.bytes) {
                    fail(
                        "refusal-left-file-untouched",
                        format!("{} changed after the recovery refused it as corrupt", rotted.path),
                        sim_ms,
                    );
                }
            }
            None => fail(
                "false-corrupt",
                format!("recovery refused a log that only crashes, torn writes or power loss touched: {reason}"),
                sim_ms,
            ),
        }
        return out;
    }
    if let Some(rotted) = &world.rotted {
        fail(
            "rot-refused",
            format!(
                "bit rot ({}) at byte {} of {} (inside the durable prefix) was not refused: recovery went on with a log it cannot vouch for",
                rotted.kind.name(), rotted.offset, rotted.path
            ),
            sim_ms,
        );
    }
    // Only a failed disk may stop the agent: a stop with none injected is the runtime
    // failing on its own (its write guard refusing a record it built, say), whatever the
    // recovered transcript looks like afterwards.
    if !world.disk_failure_fired {
        if let Some(stop) = world.stops.first() {
            fail("unprovoked-stop", format!("the agent stopped with no disk fault injected: {stop}"), sim_ms);
        }
    }
    // Liveness: after the faults heal, every message ends in a closed turn within budget.
    if world.transcript.is_none() {
        let last = world.trace.last().cloned().unwrap_or_default();
        fail(
            "liveness",
            format!(
                "no liveness: the workload did not converge within {} ms of the faults healing at {} ms \
                 (last trace line: {last})",
                plan.budget_ms.saturating_sub(plan.heal_at_ms),
                plan.heal_at_ms
            ),
            sim_ms,
        );
        // No liveness excuses no safety: what was acknowledged durable is evidence enough to
        // hold the gateway's receipts against.
        let acked: Vec<Record> = world.acked.values().cloned().collect();
        out.extend(effect_evidence(plan, world, &acked, receipts, sim_ms));
        return out;
    }
    // Log invariants of the recovered transcript (which also rules out citing a failed
    // attempt's chunks and results without calls).
    if let Err(v) = Validator::validate_all(transcript) {
        fail("log-invariants", v.to_string(), sim_ms);
    }
    // A valid log may still end inside a turn: a converged run may not.
    let open_turn = transcript.iter().fold(None, |open, r| match &r.event {
        Event::TurnStart(start) => Some(start.turn),
        Event::TurnEnd(_) => None,
        _ => open,
    });
    if let Some(turn) = open_turn {
        fail("turn-closed", format!("turn {turn} is still open at the end of a converged run"), sim_ms);
    }
    // A scenario that says how many of its planned crashes fire holds to it: one that
    // silently stopped crashing would prove nothing.
    if let Some(expected) = plan.expect.crashes_fired {
        if world.crashes_fired != expected {
            fail(
                "planned-crash-fired",
                format!("{} planned crashes fired, the scenario expects {expected}", world.crashes_fired),
                sim_ms,
            );
        }
    }
    let users = transcript.iter().filter(|r| matches!(r.event, Event::UserMessage(_))).count();
    // The cancel's extra message counts only if the cancel fired before the workload ended.
    let extra = plan.faults.cancel_then_submit && world.faults_fired.contains("cancel") && !world.extra_refused;
    let expected_users = plan.messages.len() + usize::from(extra);
    // A plain cancel clears the unclaimed inbox (FAILURE-AGENT-CANCEL): the workload submits
    // one message at a time, so at most that one is cleared, and it is owed no turn.
    let cleared = !plan.faults.cancel_then_submit && world.faults_fired.contains("cancel");
    if users != expected_users && !(cleared && users + 1 == expected_users) {
        fail("liveness", format!("{users} user messages recorded, {expected_users} submitted"), sim_ms);
    }
    // Everything acknowledged durable before a crash survives byte-identical.
    for (seq, acked) in &world.acked {
        match transcript.get(*seq as usize) {
            // Records encode deterministically, so equal values are equal bytes (and comparing
            // values spares encoding every acknowledged record twice per run).
            Some(found) if found == acked => {}
            Some(found) => fail(
                "durable-prefix",
                format!("seq {seq} was acknowledged as {} but recovered as {}", acked.encode(), found.encode()),
                sim_ms,
            ),
            None => fail(
                "durable-prefix",
                format!("seq {seq} was acknowledged durable but is missing after recovery"),
                sim_ms,
            ),
        }
    }
    // FAILURE-LIMITS-AGREE: no stored answer is above the agent's answer limit, no tool
    // output above the tool-output limit (plus its truncation marker).
    let answer_max = plan.faults.answer_bytes_max.unwrap_or(faultline_runtime::store::ANSWER_BYTES_MAX);
    for r in transcript {
        let texts: Vec<&str> = match &r.event {
            Event::AssistantMessage(m) => m.message.content.iter().map(block_text).collect(),
            Event::ToolResult(t) => t.content.iter().map(block_text).collect(),
            _ => continue,
        };
        let bytes: usize = texts.iter().map(|t| faultline_runtime::store::json_escaped_bytes(t)).sum();
        let (invariant, max) = match &r.event {
            Event::AssistantMessage(_) => ("answer-limit", answer_max),
            _ => ("tool-output-limit", faultline_runtime::agent::TOOL_OUTPUT_BYTES_MAX + TRUNCATION_MARKER_BYTES),
        };
        if bytes > max {
            fail(invariant, format!("seq {} holds {bytes} bytes of text, above the {max}-byte limit", r.seq), sim_ms);
        }
    }
    for v in tool_outputs_as_printed(plan, transcript, sim_ms) {
        fail(v.invariant, v.detail, v.at_ms);
    }
    for v in effect_evidence(plan, world, transcript, receipts, sim_ms) {
        fail(v.invariant, v.detail, v.at_ms);
    }
    // Retries per step within the scenario's policy, as the model server counted them: a
    // retry the runtime never logged is still a request that arrived.
    if let Some(max) = retries_allowed(plan) {
        let entries = world.ledger.entries();
        for (start, len) in super::ledger::identical_runs(&entries) {
            let retries = len as u32 - 1;
            if retries > max {
                fail(
                    "retry-budget",
                    format!(
                        "agent#{} sent one request {len} times in a row (model requests {start}..{}, by the \
                         server's count): {retries} retries of one step, the policy allows {max}",
                        entries[start].life,
                        start + len
                    ),
                    sim_ms,
                );
            }
        }
    }
    for v in retry_after_honoured(plan, &world.ledger.entries(), exchanges) {
        fail(v.invariant, v.detail, v.at_ms);
    }
    for v in final_failures_not_retried(plan, &world.ledger.entries(), exchanges) {
        fail(v.invariant, v.detail, v.at_ms);
    }
    for v in backoff_respected(plan, &world.ledger.entries(), exchanges) {
        fail(v.invariant, v.detail, v.at_ms);
    }
    let cut_off = |from_ms, to_ms| model_cut_off(plan, from_ms, to_ms);
    for v in super::served::failure_codes_as_served(plan, transcript, exchanges, cut_off) {
        fail(v.invariant, v.detail, v.at_ms);
    }
    for v in super::served::failure_messages_bounded(transcript) {
        fail(v.invariant, v.detail, v.at_ms);
    }
    // Scenario expectations.
    if let Some(expected) = &plan.expect.turn_ends {
        let actual: Vec<String> = transcript
            .iter()
            .filter_map(|r| if let Event::TurnEnd(end) = &r.event { Some(end_kind(&end.reason)) } else { None })
            .collect();
        if &actual != expected {
            fail("expectation", format!("turn ends {actual:?}, expected {expected:?}"), sim_ms);
        }
    }
    if let Some(expected) = plan.expect.gateway_receipts {
        if receipts.len() != expected {
            fail("expectation", format!("{} gateway receipts, expected {expected}", receipts.len()), sim_ms);
        }
    }
    if let Some(expected) = plan.expect.model_requests {
        if model_requests != expected {
            fail("expectation", format!("{model_requests} model requests, expected {expected}"), sim_ms);
        }
    }
    if let Some(rejected) = plan.expect.config_update_rejected {
        let family = if rejected { "config-rejected" } else { "config-applied" };
        if !world.faults_fired.contains(family) {
            fail(
                "expectation",
                format!("the live config update was expected to be {}", if rejected { "rejected" } else { "applied" }),
                sim_ms,
            );
        }
    }
    if let Some(expected) = &plan.expect.tool_result_codes {
        let actual: Vec<String> = transcript
            .iter()
            .filter_map(|r| match &r.event {
                Event::ToolResult(t) => Some(t.error.as_ref().map_or("ok".to_owned(), |e| e.code.to_string())),
                _ => None,
            })
            .collect();
        if &actual != expected {
            fail("expectation", format!("tool results {actual:?}, expected {expected:?}"), sim_ms);
        }
    }
    out
}

/// The most retries per step any policy of the run allows (the scenario's, or a live update's
/// that parses), or `None` when one of them retries without bound (`always`).
fn retries_allowed(plan: &Plan) -> Option<u32> {
    let mut max = 0;
    for policy in run_policies(plan) {
        match policy {
            faultline_runtime::llm::RetryPolicy::Normal { max_retries, .. } => max = max.max(max_retries),
            _ => return None,
        }
    }
    Some(max)
}

/// A retry after a served failure whose Retry-After advice is within every policy's cap
/// arrives no sooner than the advice, by the model server's clock (the runtime's own delay record is not
/// consulted).
fn retry_after_honoured(
    plan: &Plan,
    entries: &[super::ledger::LedgerEntry],
    exchanges: &[crate::model_server::Exchange],
) -> Vec<Violation> {
    let Some(cap_ms) = run_policies(plan).iter().map(|policy| policy.backoff().max_delay_ms).min() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (response, served, next) in retries_of_served(plan, entries, exchanges) {
        let Some(advice_ms) = super::served::advice_ms(response, served.at_ms).filter(|&advice| advice <= cap_ms)
        else {
            continue;
        };
        let waited_ms = next.at_ms.saturating_sub(served.at_ms);
        if waited_ms < advice_ms {
            out.push(Violation {
                invariant: "retry-after-honoured",
                detail: format!(
                    "model request {} was answered {} with a Retry-After of {advice_ms} ms, and its retry \
                     (request {}) arrived {waited_ms} ms later by the server's clock",
                    served.n,
                    response.status.map_or_else(|| "a failure".to_owned(), |s| format!("HTTP {s}")),
                    next.n
                ),
                at_ms: next.at_ms,
            });
        }
    }
    out
}

/// The least any policy of the run waits before retry `retry` (1-based) on its own, by
/// SPEC's formula `min(initial·2^(retry-1), max)·(1 − j)` computed here (not by the runtime's
/// `decide`), rounded down.
fn backoff_floor_ms(plan: &Plan, retry: u32) -> u64 {
    run_policies(plan)
        .iter()
        .map(|policy| {
            let backoff = policy.backoff();
            let doubled = backoff.initial_delay_ms as f64 * 2f64.powi(retry.saturating_sub(1).min(62) as i32);
            (doubled.min(backoff.max_delay_ms as f64) * (1.0 - backoff.jitter_ratio)).floor() as u64
        })
        .min()
        .unwrap_or(0)
}

/// Retry `k` of a step arrives at least the policy's backoff for `k` after the request it
/// repeats, by the model server's clock, unless that request was answered with provider
/// advice (`retry-after*`, held to its own rule above). The server's `k` never exceeds the
/// runtime's retry number (a refused connection is a retry the server never sees), and the
/// backoff only grows with it, so the bound is safe.
fn backoff_respected(
    plan: &Plan,
    entries: &[super::ledger::LedgerEntry],
    exchanges: &[crate::model_server::Exchange],
) -> Vec<Violation> {
    let slots = served_slots(exchanges);
    let advised = |served: &super::ledger::LedgerEntry| {
        slots
            .get(&served.n)
            .and_then(|&slot| plan.script.responses.get(slot))
            .is_some_and(|r| super::served::advice_ms(r, served.at_ms).is_some())
    };
    let mut out = Vec::new();
    for (start, len) in super::ledger::identical_runs(entries) {
        for k in 1..len {
            let (served, next) = (&entries[start + k - 1], &entries[start + k]);
            if advised(served) || model_cut_off(plan, served.at_ms, next.at_ms) {
                continue;
            }
            let floor_ms = backoff_floor_ms(plan, k as u32);
            let waited_ms = next.at_ms.saturating_sub(served.at_ms);
            if waited_ms < floor_ms {
                out.push(Violation {
                    invariant: "retry-backoff",
                    detail: format!(
                        "model request {} repeated request {} after {waited_ms} ms by the server's clock: \
                         retry {k} of a step waits at least {floor_ms} ms under the run's policies",
                        next.n, served.n
                    ),
                    at_ms: next.at_ms,
                });
            }
        }
    }
    out
}

/// A failure whose code no policy of the run lists as retryable ends its step: the next
/// request of that incarnation is not the same request again (by the model server's log).
fn final_failures_not_retried(
    plan: &Plan,
    entries: &[super::ledger::LedgerEntry],
    exchanges: &[crate::model_server::Exchange],
) -> Vec<Violation> {
    let mut retryable: BTreeSet<ErrorCode> = BTreeSet::new();
    for policy in run_policies(plan) {
        match policy {
            faultline_runtime::llm::RetryPolicy::Normal { codes, .. } => retryable.extend(codes),
            // `always` retries everything.
            _ => return Vec::new(),
        }
    }
    let mut out = Vec::new();
    for (response, served, next) in retries_of_served(plan, entries, exchanges) {
        let Some(code) = super::served::served_code(response).filter(|code| !retryable.contains(code)) else {
            continue;
        };
        out.push(Violation {
            invariant: "final-failure-not-retried",
            detail: format!(
                "model request {} was served a {code} failure, which the policy does not retry, and \
                 request {} repeated it",
                served.n, next.n
            ),
            at_ms: next.at_ms,
        });
    }
    out
}

/// Whether a partition between the agent and the model overlapped `[from_ms, to_ms]` (server
/// clock, which starts with the run): a response served then may never have reached the
/// agent, which rightly saw a timeout or a broken stream instead of what was served.
fn model_cut_off(plan: &Plan, from_ms: u64, to_ms: u64) -> bool {
    plan.faults.partitions.iter().any(|p| {
        let pair = [p.a.as_str(), p.b.as_str()];
        pair.contains(&"agent") && pair.contains(&"model") && p.from_ms <= to_ms && p.to_ms >= from_ms
    })
}

/// The retry policies of the run that resolve: the scenario's, and a live update's (an
/// invalid route sends nothing, so it bounds nothing).
fn run_policies(plan: &Plan) -> Vec<faultline_runtime::llm::RetryPolicy> {
    std::iter::once(&plan.provider)
        .chain(plan.faults.config_update.iter().map(|u| &u.provider))
        .filter_map(|provider| super::resolve_route(super::SIM_MODEL_URL, provider).ok())
        .map(|route| route.retry)
        .collect()
}

/// The script slot each model request was served from, by request number.
fn served_slots(exchanges: &[crate::model_server::Exchange]) -> BTreeMap<usize, usize> {
    exchanges.iter().filter_map(|e| Some((e.n, e.slot?))).collect()
}

/// Every request the same incarnation sent again right after it was served a scripted
/// response that reached the agent (no partition to the model in between): the response,
/// the served request and its repeat, by the model server's log.
fn retries_of_served<'a>(
    plan: &'a Plan,
    entries: &'a [super::ledger::LedgerEntry],
    exchanges: &[crate::model_server::Exchange],
) -> Vec<(&'a crate::model_server::Response, &'a super::ledger::LedgerEntry, &'a super::ledger::LedgerEntry)> {
    let slots = served_slots(exchanges);
    entries
        .windows(2)
        .filter(|pair| pair[1].repeats(&pair[0]) && !model_cut_off(plan, pair[0].at_ms, pair[1].at_ms))
        .filter_map(|pair| Some((&plan.script.responses[*slots.get(&pair[0].n)?], &pair[0], &pair[1])))
        .collect()
}
