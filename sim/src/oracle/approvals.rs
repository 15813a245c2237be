//! Approvals against evidence the runtime cannot touch (FAILURE-APPROVAL): every effect of a
//! call that waited for a person — a gateway receipt, a local tool's own record of its run —
//! is held to the approval records the disk witness saw synced, in the run's one order of
//! events. No effect without an approval bound to the call's own arguments; at most one per
//! call; none for a call denied, expired or cancelled; the decision and the dispatch durable
//! strictly before it.

use std::collections::{BTreeMap, BTreeSet};

use faultline_runtime::event::{arguments_digest, Decision, ErrorCode, Event};

use super::effects::{execution_id, synced_calls};
use super::evidence::{FoundViolations, RunEvidence};
use super::invariant::Invariant;
use crate::world::person::ACCEPTED_WRONGLY;

/// One effect: which execution, with what arguments, when.
struct Effect<'a> {
    /// The incarnation a local tool ran in (a receipt's sender is the queue, not a life).
    life: Option<u64>,
    execution_id: &'a str,
    arguments: &'a str,
    stamp: u64,
    at_ms: u64,
}

/// The approval records of one call the disk witness saw synced, each at its earliest stamp.
#[derive(Default)]
struct CallSynced {
    requested: Option<u64>,
    approved: Option<(u64, String)>,
    denied: bool,
    dispatched: Option<u64>,
}

pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    if evidence.faults_fired.contains(ACCEPTED_WRONGLY) {
        found.fail(
            Invariant::ApprovalMatchesEffect,
            "the person saw the runtime take what it must refuse — a decision, or a turn going on after their \
             cancel (see the trace's person lines)"
                .into(),
            evidence.end_ms,
        );
    }
    let approvals = synced_approvals(evidence);
    if approvals.is_empty() && !plan_has_approval_tools(evidence) {
        return;
    }
    let calls = synced_calls(evidence);
    let approval_tools = approval_tools(evidence);
    let never_ran = never_ran(evidence);
    let mut runs: BTreeMap<&str, usize> = BTreeMap::new();
    for effect in effects(evidence) {
        let Some((_, call)) = calls.get(effect.execution_id) else { continue };
        let synced = approvals.get(effect.execution_id);
        if !approval_tools.contains(call.name.as_str()) && synced.is_none_or(|s| s.requested.is_none()) {
            continue;
        }
        *runs.entry(effect.execution_id).or_default() += 1;
        matches_its_approval(&effect, call, synced, found);
        if let Some(s) = synced.filter(|s| s.approved.is_some()) {
            durable_before(&effect, s, found);
        }
        if synced.is_some_and(|s| s.denied) || never_ran.contains(effect.execution_id) {
            found.fail(
                Invariant::DeniedNeverRuns,
                format!(
                    "execution {} ran at {} ms, but it was denied, expired or cancelled",
                    effect.execution_id, effect.at_ms
                ),
                effect.at_ms,
            );
        }
    }
    for (id, count) in runs.into_iter().filter(|(_, n)| *n > 1) {
        found.fail(
            Invariant::ApprovalDispatchedOnce,
            format!("approved execution {id} ran {count} times"),
            evidence.end_ms,
        );
    }
}

/// Every effect of the run: the gateway's receipts and the local tools' own records.
fn effects<'a>(evidence: &RunEvidence<'a>) -> Vec<Effect<'a>> {
    let receipts = evidence.receipts.iter().map(|r| Effect {
        life: None,
        execution_id: &r.execution_id,
        arguments: &r.body,
        stamp: r.stamp,
        at_ms: r.at_ms,
    });
    let runs = evidence.world.tool_runs.iter().map(|r| Effect {
        life: Some(r.life),
        execution_id: &r.execution_id,
        arguments: &r.arguments,
        stamp: r.stamp,
        at_ms: r.at_ms,
    });
    receipts.chain(runs).collect()
}

/// The effect ran on an approval of its call bound to the call's own arguments, and with them.
fn matches_its_approval(
    effect: &Effect<'_>,
    call: &faultline_runtime::event::ToolCall,
    synced: Option<&CallSynced>,
    found: &mut FoundViolations,
) {
    let id = effect.execution_id;
    match synced.and_then(|s| s.approved.as_ref()) {
        Some((_, approved)) if *approved == arguments_digest(&call.arguments) => {}
        Some(_) => found.fail(
            Invariant::ApprovalMatchesEffect,
            format!("execution {id} ran on an approval bound to other arguments than its tool/call's"),
            effect.at_ms,
        ),
        None => {
            let by = effect.life.map_or_else(|| "the gateway".to_owned(), |life| format!("agent#{life}"));
            found.fail(
                Invariant::ApprovalMatchesEffect,
                format!("execution {id} (tool {}) ran ({by}), and no approval of it was ever synced", call.name),
                effect.at_ms,
            );
        }
    }
    let asked: Option<serde_json::Value> = serde_json::from_str(&call.arguments).ok();
    let got: Option<serde_json::Value> = serde_json::from_str(effect.arguments).ok();
    if asked != got {
        found.fail(
            Invariant::ApprovalMatchesEffect,
            format!(
                "execution {id} ran with {:?}, but the approved call asked for {:?}",
                effect.arguments, call.arguments
            ),
            effect.at_ms,
        );
    }
}

/// The approved effect came strictly after its decision and its dispatch were synced.
fn durable_before(effect: &Effect<'_>, synced: &CallSynced, found: &mut FoundViolations) {
    let decided = synced.approved.as_ref().map(|(stamp, _)| *stamp);
    let late: Vec<&str> = [("approval/decided", decided), ("approval/dispatched", synced.dispatched)]
        .into_iter()
        .filter(|(_, at)| at.is_none_or(|at| at > effect.stamp))
        .map(|(what, _)| what)
        .collect();
    if !late.is_empty() {
        found.fail(
            Invariant::DecisionDurableBeforeDispatch,
            format!(
                "execution {} ran before its {} {} synced",
                effect.execution_id,
                late.join(" and "),
                if late.len() > 1 { "were" } else { "was" }
            ),
            effect.at_ms,
        );
    }
}

fn plan_has_approval_tools(evidence: &RunEvidence<'_>) -> bool {
    evidence.plan.tools.iter().any(|t| t.approval)
}

/// The tools whose calls wait for approval: the scenario's, and any an approval was
/// requested for (an agent under test's).
fn approval_tools<'a>(evidence: &RunEvidence<'a>) -> BTreeSet<&'a str> {
    let mut tools: BTreeSet<&str> =
        evidence.plan.tools.iter().filter(|t| t.approval).map(|t| t.name.as_str()).collect();
    for synced in evidence.world.synced_records() {
        if let Event::ApprovalRequested(requested) = &synced.record.event {
            tools.insert(requested.name.as_str());
        }
    }
    tools
}

/// Every call's synced approval records, by execution id.
fn synced_approvals(evidence: &RunEvidence<'_>) -> BTreeMap<String, CallSynced> {
    let mut calls: BTreeMap<String, CallSynced> = BTreeMap::new();
    let earliest = |slot: &mut Option<u64>, stamp: u64| *slot = Some(slot.map_or(stamp, |s| s.min(stamp)));
    for synced in evidence.world.synced_records() {
        let stamp = synced.stamp;
        match &synced.record.event {
            Event::ApprovalRequested(r) => {
                earliest(&mut calls.entry(execution_id(r.turn, r.step, &r.call_id)).or_default().requested, stamp);
            }
            Event::ApprovalDecided(d) => {
                let call = calls.entry(execution_id(d.turn, d.step, &d.call_id)).or_default();
                match d.decision {
                    Decision::Approved if call.approved.as_ref().is_none_or(|(s, _)| stamp < *s) => {
                        call.approved = Some((stamp, d.digest.clone()));
                    }
                    Decision::Approved => {}
                    Decision::Denied => call.denied = true,
                }
            }
            Event::ApprovalDispatched(d) => {
                earliest(&mut calls.entry(execution_id(d.turn, d.step, &d.call_id)).or_default().dispatched, stamp);
            }
            _ => {}
        }
    }
    calls
}

/// The calls the recovered transcript answers as never run after waiting: denied, expired,
/// or closed while they waited.
fn never_ran(evidence: &RunEvidence<'_>) -> BTreeSet<String> {
    let Some(records) = evidence.transcript() else { return BTreeSet::new() };
    let mut waited = BTreeSet::new();
    let mut dispatched = BTreeSet::new();
    let mut never = BTreeSet::new();
    for record in records {
        match &record.event {
            Event::ApprovalRequested(r) => {
                waited.insert(execution_id(r.turn, r.step, &r.call_id));
            }
            Event::ApprovalDispatched(d) => {
                dispatched.insert(execution_id(d.turn, d.step, &d.call_id));
            }
            Event::ToolResult(result) => {
                let id = execution_id(result.turn, result.step, &result.call_id);
                let code = result.error.as_ref().map(|e| e.code);
                let not_run = matches!(
                    code,
                    Some(ErrorCode::ApprovalDenied | ErrorCode::ApprovalExpired | ErrorCode::AbortedBeforeDispatch)
                );
                if not_run && waited.contains(&id) && !dispatched.contains(&id) {
                    never.insert(id);
                }
            }
            _ => {}
        }
    }
    never
}
