//! What a scenario file says of its own run (`[expect]`), on top of the invariants: turn
//! ends, receipts, requests, the live config update, tool result codes, and the fault
//! families that must fire.

use faultline_runtime::event::{Event, TurnEndReason};

use super::evidence::{FoundViolations, RunEvidence};
use super::invariant::Invariant;

fn end_kind(reason: &TurnEndReason) -> String {
    match reason {
        TurnEndReason::Error { error } => format!("error:{}", error.code),
        other => other.kind().to_owned(),
    }
}

/// The `[expect]` table, against the recovered transcript, the receipts and the requests.
pub(super) fn check_table(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    let Some(transcript) = evidence.transcript() else { return };
    let (plan, world, end_ms) = (evidence.plan, evidence.world, evidence.end_ms);
    let mut fail = |key: &str, detail: String| {
        let advice = format!(
            "The scenario's expect.{key} no longer holds: if the behaviour changed on purpose, update expect.{key} \
             in the scenario file; otherwise the evidence names what regressed."
        );
        found.fail_advised(Invariant::Expectation, detail, advice, end_ms);
    };
    if let Some(expected) = &plan.expect.turn_ends {
        let actual: Vec<String> = transcript
            .iter()
            .filter_map(|r| if let Event::TurnEnd(end) = &r.event { Some(end_kind(&end.reason)) } else { None })
            .collect();
        if &actual != expected {
            fail("turn_ends", format!("turn ends {actual:?}, expected {expected:?}"));
        }
    }
    if let Some(expected) = plan.expect.gateway_receipts {
        if evidence.receipts.len() != expected {
            fail("gateway_receipts", format!("{} gateway receipts, expected {expected}", evidence.receipts.len()));
        }
    }
    if let Some(expected) = plan.expect.model_requests {
        if evidence.exchanges.len() != expected {
            fail("model_requests", format!("{} model requests, expected {expected}", evidence.exchanges.len()));
        }
    }
    if let Some(rejected) = plan.expect.config_update_rejected {
        let family = if rejected { "config-rejected" } else { "config-applied" };
        if !world.faults_fired.contains(family) {
            fail(
                "config_update_rejected",
                format!("the live config update was expected to be {}", if rejected { "rejected" } else { "applied" }),
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
            fail("tool_result_codes", format!("tool results {actual:?}, expected {expected:?}"));
        }
    }
}

/// The fault families a scenario names fired, by the evidence coverage counts (a scenario
/// whose fault silently stopped happening proves nothing).
pub(super) fn check_faults_fired(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    for family in evidence.plan.expect.faults_fired.iter().flatten() {
        if !evidence.faults_fired.contains(family) {
            found.fail_advised(
                Invariant::PlannedFaultFired,
                format!("the scenario's {family} fault never happened (fired: {:?})", evidence.faults_fired),
                format!(
                    "expect.faults_fired names {family}, which never happened, so the scenario no longer tests it: \
                     move the fault's window or crash point to where the workload is now."
                ),
                evidence.end_ms,
            );
        }
    }
}
