//! Durability, judged from the disk's own witness (the fault filesystem's record of what it
//! synced, `world/witness.rs`), never from the runtime's acknowledgements alone:
//! - the recovered transcript is a valid log, and everything acknowledged durable or synced
//!   survives every crash byte for byte;
//! - an outcome reported kept (FAILURE-OUTCOME-DURABLE) had its `turn/end` synced strictly
//!   before the user was given it;
//! - every record the agent accepted became durable, or the agent reported a persistence
//!   failure after accepting it, or a crash took it.

use std::collections::BTreeSet;

use faultline_runtime::event::{Event, TurnEndReason, Validator};

use super::evidence::{FoundViolations, RunEvidence};
use super::invariant::Invariant;

/// How long after its acceptance a record may still be on its way to the disk when the run
/// ends, in ms: five batching windows of the write-behind's default.
const ACCEPTED_DURABLE_GRACE_MS: u64 = 5 * faultline_runtime::store::BATCH_WINDOW_MS_DEFAULT;

pub(super) fn check(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    if let Some(transcript) = evidence.transcript() {
        // Log invariants of the recovered transcript (which also rules out citing a failed
        // attempt's chunks and results without calls).
        if let Err(v) = Validator::validate_all(transcript) {
            found.fail(Invariant::LogInvariants, v.to_string(), evidence.end_ms);
        }
        durable_prefix(evidence, transcript, found);
    }
    outcomes_durable(evidence, found);
    accepted_kept_or_reported(evidence, found);
}

/// Everything acknowledged durable before a crash, and everything the disk synced, survives
/// byte-identical.
fn durable_prefix(
    evidence: &RunEvidence<'_>,
    transcript: &[faultline_runtime::event::Record],
    found: &mut FoundViolations,
) {
    let world = evidence.world;
    let acked = world.acked.iter().map(|(seq, record)| (*seq, record, "acknowledged durable"));
    let synced = world.synced_records().map(|synced| (synced.record.seq, &synced.record, "synced"));
    for (seq, kept, how) in acked.chain(synced) {
        match transcript.get(seq as usize) {
            // Records encode deterministically, so equal values are equal bytes (and comparing
            // values spares encoding every acknowledged record twice per run).
            Some(recovered) if recovered == kept => {}
            Some(other) => found.fail(
                Invariant::DurablePrefix,
                format!("seq {seq} was {how} as {} but recovered as {}", kept.encode(), other.encode()),
                evidence.end_ms,
            ),
            None => found.fail(
                Invariant::DurablePrefix,
                format!("seq {seq} was {how} but is missing after recovery"),
                evidence.end_ms,
            ),
        }
    }
}

/// Whether two turn ends say the same: the same kind, and for an error the same code.
fn same_end(a: &TurnEndReason, b: &TurnEndReason) -> bool {
    match (a, b) {
        (TurnEndReason::Error { error: a }, TurnEndReason::Error { error: b }) => a.code == b.code,
        _ => a.kind() == b.kind(),
    }
}

fn describe(reason: &TurnEndReason) -> String {
    match reason {
        TurnEndReason::Error { error } => format!("error:{}", error.code),
        other => other.kind().to_owned(),
    }
}

/// FAILURE-OUTCOME-DURABLE: a turn the user was told is kept had its `turn/end`, saying the
/// same, synced strictly before the user was told.
fn outcomes_durable(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    let world = evidence.world;
    let mut judged = BTreeSet::new();
    for outcome in world.outcomes.iter().filter(|o| o.kept) {
        if let TurnEndReason::AwaitingApproval { calls } = &outcome.reason {
            pause_durable(evidence, outcome, calls, found);
            continue;
        }
        if !judged.insert((outcome.life, outcome.turn)) {
            continue;
        }
        let ends: Vec<(&crate::world::evidence::Synced, &TurnEndReason)> = world
            .synced_records()
            .filter_map(|synced| match &synced.record.event {
                Event::TurnEnd(end) if end.turn == outcome.turn => Some((synced, &end.reason)),
                _ => None,
            })
            .collect();
        if ends.iter().any(|(synced, reason)| synced.stamp < outcome.stamp && same_end(reason, &outcome.reason)) {
            continue;
        }
        let told = format!(
            "agent#{} told the user turn {} ended {} (kept) at {} ms",
            outcome.life,
            outcome.turn,
            describe(&outcome.reason),
            outcome.at_ms
        );
        let problem = match ends.iter().find(|(synced, _)| synced.stamp < outcome.stamp) {
            Some((synced, reason)) => {
                format!("the disk's turn/end (seq {}) says {}", synced.record.seq, describe(reason))
            }
            None => match ends.first() {
                None => "its turn/end was never synced".to_owned(),
                Some((synced, reason)) => format!(
                    "no turn/end of it was synced before that: the first (seq {}, {}) was synced at {} ms",
                    synced.record.seq,
                    describe(reason),
                    synced.at_ms
                ),
            },
        };
        found.fail(Invariant::OutcomeDurable, format!("{told}, but {problem}"), outcome.at_ms);
    }
}

/// A turn the user was told is paused, kept: each call it waits on had its
/// `approval/requested` synced strictly before the user was told (FAILURE-APPROVAL).
fn pause_durable(
    evidence: &RunEvidence<'_>,
    outcome: &crate::world::evidence::Outcome,
    calls: &[String],
    found: &mut FoundViolations,
) {
    for call in calls {
        let synced = evidence.world.synced_records().any(|synced| {
            synced.stamp < outcome.stamp
                && matches!(&synced.record.event, Event::ApprovalRequested(r) if r.turn == outcome.turn && r.call_id == *call)
        });
        if !synced {
            found.fail(
                Invariant::OutcomeDurable,
                format!(
                    "agent#{} told the user turn {} waits for approval of {call} (kept) at {} ms, but its \
                     approval/requested was not synced before that",
                    outcome.life, outcome.turn, outcome.at_ms
                ),
                outcome.at_ms,
            );
        }
    }
}

/// Every record an incarnation accepted became durable (the witness saw it synced), or the
/// incarnation reported a persistence failure at or after accepting it, or a crash took the
/// incarnation. A record silently dropped between the queue and the disk is none of these.
fn accepted_kept_or_reported(evidence: &RunEvidence<'_>, found: &mut FoundViolations) {
    let world = evidence.world;
    for (life, lived) in world.lives.iter().filter(|(_, lived)| !lived.crashed) {
        let lost = lived.unacked.iter().find(|(seq, (record, at_ms))| {
            at_ms + ACCEPTED_DURABLE_GRACE_MS <= evidence.end_ms
                && !world.synced.get(seq).is_some_and(|versions| versions.iter().any(|s| s.record == *record))
                && !lived.failures.iter().any(|failed_ms| failed_ms >= at_ms)
        });
        if let Some((seq, (record, at_ms))) = lost {
            found.fail(
                Invariant::AcceptedKeptOrReported,
                format!(
                    "agent#{life} accepted seq {seq} ({}) at {at_ms} ms; it never became durable, no crash took \
                     it, and no persistence failure was reported after it",
                    record.event.type_name()
                ),
                evidence.end_ms,
            );
        }
    }
}
