//! Liveness and the agent's own stops: once the faults heal, every submitted message ends in
//! a closed turn within the budget; only an injected disk failure may stop the agent; a
//! scenario's planned crashes fire as it says.

use faultline_runtime::event::Event;

use super::evidence::{Found, RunEvidence};
use super::invariant::Invariant;

pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut Found) {
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
            found.fail(
                Invariant::PlannedCrashFired,
                format!("{} planned crashes fired, the scenario expects {expected}", world.crashes_fired),
                end_ms,
            );
        }
    }
    let Some(transcript) = &world.transcript else {
        let last = world.trace.last().cloned().unwrap_or_default();
        found.fail(
            Invariant::Liveness,
            format!(
                "no liveness: the workload did not converge within {} ms of the faults healing at {} ms \
                 (last trace line: {last})",
                plan.budget_ms.saturating_sub(plan.heal_at_ms),
                plan.heal_at_ms
            ),
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

/// The turn a log ends inside, if any (a converged run's log ends none).
pub(super) fn open_turn(transcript: &[faultline_runtime::event::Record]) -> Option<u32> {
    transcript.iter().fold(None, |open, r| match &r.event {
        Event::TurnStart(start) => Some(start.turn),
        Event::TurnEnd(_) => None,
        _ => open,
    })
}
