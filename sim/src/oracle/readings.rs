//! What the client made of each response drawn from a wire catalog (FAILURE-WORLD-CATALOG,
//! FAILURE-USER-VIEW), by the catalog's reading, never the adapter's: an answer is kept as
//! its step's answer, never recorded as a failure; a final answer (cut by the token limit, or
//! a refusal) runs none of its tool calls. The codes of failures are held to what was served
//! with every other failure (`retries.rs`).

use faultline_runtime::event::{ErrorCode, Event, Record};

use super::evidence::{FoundViolations, RunEvidence};
use super::invariant::{Invariant, Violation};
use super::limits::recorded_failure;
use super::retries::model_cut_off;
use super::served::catalog_reading;
use crate::catalog::Reading;

pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    let Some(transcript) = evidence.transcript() else { return };
    let (plan, exchanges) = (evidence.plan, evidence.exchanges);
    for (i, exchange) in exchanges.iter().enumerate() {
        let Some(response) = exchange.slot.and_then(|slot| plan.script.responses.get(slot)) else { continue };
        let Some(reading) = catalog_reading(response).filter(|r| !r.fails()) else { continue };
        let next_ms = exchanges.get(i + 1).map_or(u64::MAX, |e| e.at_ms);
        if model_cut_off(plan, exchange.at_ms, next_ms) {
            continue;
        }
        let entry = response.entry.as_deref().unwrap_or_default();
        let window: Vec<&Record> =
            transcript.iter().filter(|r| (exchange.at_ms..next_ms).contains(&at_ms(r))).collect();
        if let Some(violation) = answer_kept(entry, exchange.n, &window) {
            found.0.push(violation);
        }
        if reading == Reading::Final {
            if let Some(call) = window.iter().find(|r| matches!(r.event, Event::ToolCall(_))) {
                found.0.push(Violation::new(
                    Invariant::FinalCallsNotRun,
                    format!(
                        "model request {} was served {entry} (a final answer: its calls must never run), and seq {} \
                         dispatched a tool call from it",
                        exchange.n, call.seq
                    ),
                    at_ms(call),
                ));
            }
        }
    }
}

/// The answer served at request `n` (entry `entry`) was recorded as a failure: the first
/// record that settles the attempt is a failure, not its `assistant/message`.
fn answer_kept(entry: &str, n: usize, window: &[&Record]) -> Option<Violation> {
    let settled = window.iter().find(|r| {
        matches!(r.event, Event::AssistantMessage(_))
            || recorded_failure(r).is_some_and(|(_, failure)| failure.code != ErrorCode::Aborted)
    })?;
    let (what, failure) = recorded_failure(settled)?;
    Some(Violation::new(
        Invariant::AnswerKept,
        format!(
            "model request {n} was served {entry}, a complete answer by its specification, and seq {} ({what}) \
             records it as a failure: {}",
            settled.seq, failure.code
        ),
        at_ms(settled),
    ))
}

fn at_ms(record: &Record) -> u64 {
    record.time.saturating_sub(crate::seams::SIM_EPOCH_MS)
}
