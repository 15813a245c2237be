//! Liveness and the agent's own stops: once the faults heal, every submitted message ends in
//! a closed turn within the budget; only an injected disk failure may stop the agent; a
//! scenario's planned crashes fire as it says.

use faultline_runtime::event::Event;

use super::evidence::{FoundViolations, RunEvidence};
use super::invariant::Invariant;

pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    let (plan, world, end_ms) = (evidence.plan, evidence.world, evidence.end_ms);
    // Only a failed disk may stop the agent: a stop with none injected is the runtime
    // failing on its own (its write guard refusing a record it built, say), whatever the
    // recovered transcript looks like afterwards.
    if !world.disk_failure_fired {
        if let Some(stop) = world.stops.first() {
            found.fail(
                Invariant::UnprovokedStop,
                format!("the agent stopped with no disk fault injected: {stop}"),
                end_ms,
            );
        }
    }
    // A scenario that says how many of its planned crashes fire holds to it: one that
    // silently stopped crashing would prove nothing.
    if let Some(expected) = plan.expect.crashes_fired {
        if world.crashes_fired != expected {
            found.fail_advised(
                Invariant::PlannedCrashFired,
                format!("{} planned crashes fired, the scenario expects {expected}", world.crashes_fired),
                format!(
                    "expect.crashes_fired says {expected}, and {} fired: the crash points moved in the code; update \
                     the crashes' hit numbers or expect.crashes_fired, or find out why the path moved.",
                    world.crashes_fired
                ),
                end_ms,
            );
        }
    }
    let Some(transcript) = &world.transcript else {
        // The latest line by its time (the services' receipts are traced after the run).
        let at = |line: &String| line.split_whitespace().next().and_then(|ms| ms.parse::<u64>().ok()).unwrap_or(0);
        let last = world.trace.iter().max_by_key(|line| at(line)).cloned().unwrap_or_default();
        let bound = &plan.liveness;
        let open = open_calls(world);
        found.fail_advised(
            Invariant::Liveness,
            format!(
                "no liveness: the workload did not converge within its bound of {} (last trace line: {last}){}",
                bound,
                if open.is_empty() { String::new() } else { format!("; still waiting on {}", open.join(", ")) }
            ),
            liveness_advice(bound, &open),
            end_ms,
        );
        return;
    };
    // A valid log may still end inside a turn: a converged run may not.
    if let Some(turn) = open_turn(transcript) {
        found.fail(Invariant::TurnClosed, format!("turn {turn} is still open at the end of a converged run"), end_ms);
    }
    let users = transcript.iter().filter(|r| matches!(r.event, Event::UserMessage(_))).count();
    // The cancel's extra message counts only if the cancel fired before the workload ended.
    let extra = plan.faults.cancel_then_submit && world.faults_fired.contains("cancel") && !world.extra_refused;
    let expected_users = plan.messages.len() + usize::from(extra);
    // A plain cancel clears the unclaimed inbox (FAILURE-AGENT-CANCEL): the workload submits
    // one message at a time, so at most that one is cleared, and it is owed no turn.
    let cleared = !plan.faults.cancel_then_submit && world.faults_fired.contains("cancel");
    if users != expected_users && !(cleared && users + 1 == expected_users) {
        found.fail(Invariant::Liveness, format!("{users} user messages recorded, {expected_users} submitted"), end_ms);
    }
}

/// The tool calls the agent accepted or synced without a result: what it was still waiting
/// on when the run ended (`call C of tool T`).
fn open_calls(world: &crate::world::evidence::World) -> Vec<String> {
    let records = world.synced.values().flatten().map(|s| &s.record).chain(world.accepted.values().map(|(r, _)| r));
    let mut calls = std::collections::BTreeMap::new();
    let mut ended = std::collections::BTreeSet::new();
    for record in records {
        match &record.event {
            Event::ToolCall(call) => {
                calls.insert((call.turn, call.step, call.call_id.clone()), call.name.clone());
            }
            Event::ToolResult(result) => {
                ended.insert((result.turn, result.step, result.call_id.clone()));
            }
            _ => {}
        }
    }
    calls
        .into_iter()
        .filter(|(key, _)| !ended.contains(key))
        .map(|((_, _, call_id), name)| format!("call {call_id} of tool {name}"))
        .collect()
}

/// Advice for a run that never converged: a tool that declares no deadline and was still
/// being waited on, or else a wait the agent's own settings do not explain.
fn liveness_advice(bound: &crate::world::LivenessBound, open: &[String]) -> String {
    let untimed: Vec<&String> =
        bound.untimed_tools.iter().filter(|t| open.iter().any(|o| o.ends_with(&format!("of tool {t}")))).collect();
    if let Some(tool) = untimed.first() {
        return format!(
            "Tool {tool} declares no deadline (Tool::timeout returns None, or the agent file sets no timeout_ms), \
             and a call of it was still waiting when the bound ran out: a reply that never comes is waited for \
             without end. Give it a deadline, so a lost reply ends as TOOL_TIMEOUT."
        );
    }
    format!(
        "The run outlived every wait the agent's settings allow ({}): replay the seed and read the trace from the \
         heal on; a wait nothing ends is a runtime defect, or a tool that ignores its cancellation.",
        bound.waits.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    )
}

/// The turn a log ends inside, if any (a converged run's log ends none).
pub(super) fn open_turn(transcript: &[faultline_runtime::event::Record]) -> Option<u32> {
    transcript.iter().fold(None, |open, r| match &r.event {
        Event::TurnStart(start) => Some(start.turn),
        Event::TurnEnd(_) => None,
        _ => open,
    })
}
