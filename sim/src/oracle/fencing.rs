//! The fleet's checker (FAILURE-LEASE-EPOCH): once a worker's session was taken over, no
//! record and no tool dispatch of it lands — nothing comes from a fenced epoch. Plus what any
//! converged run owes: a valid log, every turn closed, every message answered, each effect at
//! most once.
//!
//! Evidence, none of it the runtime's word: the instant the harness saw the takeover succeed
//! and the log as the new worker found it; every record each worker's agent accepted and
//! every tool body the runtime started, stamped by the harness as they happened; the
//! gateway's receipts; the store read back after both workers stopped.

use std::collections::BTreeMap;

use faultline_runtime::event::{Event, Record, Validator};

use super::evidence::FoundViolations;
use super::invariant::{Invariant, Violation};
use crate::world::fleet_evidence::{FleetEvidence, TakeoverSeen, Worker};
use crate::world::gateway::Receipt;
use crate::world::seeded::Plan;

/// Judges a fleet run (an embedder's services are judged with the rest of the oracle).
pub(crate) fn check(evidence: &FleetEvidence, plan: &Plan, receipts: &[Receipt], end_ms: u64) -> Vec<Violation> {
    let mut found = FoundViolations::default();
    if let Some(takeover) = &evidence.takeover {
        dispatches_after(evidence, takeover, &mut found);
        effects_after(evidence, takeover, receipts, &mut found);
        if let Some(transcript) = &evidence.transcript {
            records_after(evidence, takeover, transcript, &mut found);
        }
    }
    at_most_once(receipts, &mut found);
    answers_looked_up(evidence, &mut found);
    kept_means_stored(evidence, &mut found);
    converged(evidence, plan, end_ms, &mut found);
    found.0
}

/// No tool body of `a` started after `b` took over (its dispatch would be a fenced one).
fn dispatches_after(evidence: &FleetEvidence, takeover: &TakeoverSeen, found: &mut FoundViolations) {
    for late in evidence.dispatches.iter().filter(|d| d.worker == Worker::A && d.stamp > takeover.stamp) {
        found.fail(
            Invariant::FencedEpoch,
            format!(
                "worker-a dispatched {} at {} ms, after worker-b took the session over at {} ms",
                late.execution_id, late.at_ms, takeover.at_ms
            ),
            late.at_ms,
        );
    }
}

/// No effect worker `a` asked the queue for after `b` took over reached the gateway: the
/// queue's epoch check is the one thing between a woken zombie's tool and the receiver.
fn effects_after(evidence: &FleetEvidence, takeover: &TakeoverSeen, receipts: &[Receipt], found: &mut FoundViolations) {
    let late = evidence.asked.iter().filter(|a| a.worker == Worker::A && a.stamp > takeover.stamp);
    for asked in late {
        if let Some(receipt) = receipts.iter().find(|r| r.execution_id == asked.execution_id) {
            found.fail(
                Invariant::FencedEpoch,
                format!(
                    "worker-a asked the queue for {} at {} ms, after worker-b took the session over at {} ms, \
                     and the gateway received it at {} ms",
                    asked.execution_id, asked.at_ms, takeover.at_ms, receipt.at_ms
                ),
                receipt.at_ms,
            );
        }
    }
}

/// The log keeps what `b` found, and everything after it is a record `b` accepted: none of
/// `a`'s records lands once its epoch is fenced.
fn records_after(
    evidence: &FleetEvidence,
    takeover: &TakeoverSeen,
    transcript: &[Record],
    found: &mut FoundViolations,
) {
    let kept = takeover.found.len().min(transcript.len());
    if transcript[..kept] != takeover.found[..kept] || transcript.len() < takeover.found.len() {
        found.fail(
            Invariant::FencedEpoch,
            format!(
                "the log worker-b found at its takeover ({} records) is not a prefix of the final one ({} records)",
                takeover.found.len(),
                transcript.len()
            ),
            takeover.at_ms,
        );
        return;
    }
    let by = |worker: Worker| -> BTreeMap<u64, Vec<&Record>> {
        let mut by_seq: BTreeMap<u64, Vec<&Record>> = BTreeMap::new();
        for (_, record, _) in evidence.accepted.iter().filter(|(w, _, _)| *w == worker) {
            by_seq.entry(record.seq).or_default().push(record);
        }
        by_seq
    };
    let (from_b, from_a) = (by(Worker::B), by(Worker::A));
    for record in &transcript[kept..] {
        if from_b.get(&record.seq).is_some_and(|rs| rs.contains(&record)) {
            continue;
        }
        let whose = if from_a.get(&record.seq).is_some_and(|rs| rs.contains(&record)) {
            "worker-a's (its epoch fenced by the takeover)"
        } else {
            "no worker's"
        };
        found.fail(
            Invariant::FencedEpoch,
            format!(
                "seq {} ({}) in the final log is {whose} record, landed after the takeover",
                record.seq,
                record.event.type_name()
            ),
            takeover.at_ms,
        );
    }
}

/// A write whose answer the link lost was looked up, not sent again: worker `b` is never
/// refused by its own lease, and no seq lands twice in the final log.
fn answers_looked_up(evidence: &FleetEvidence, found: &mut FoundViolations) {
    let lost = |statement| evidence.link.iter().filter(move |f| f.statement == statement && f.answer_lost_after_write);
    if let Some(at_ms) = evidence.refused_by_itself.first() {
        let cause = lost(faultline_runtime::store::Statement::TakeOver)
            .next()
            .map_or_else(String::new, |f| format!(" (the link lost the answer of its takeover at {} ms)", f.at_ms));
        found.fail(
            Invariant::AnswerLookedUp,
            format!(
                "worker-b's open was refused at {at_ms} ms by a lease of its own{cause}, {} times in all: \
                 a takeover sent again instead of looked up",
                evidence.refused_by_itself.len()
            ),
            *at_ms,
        );
    }
    let Some(transcript) = &evidence.transcript else { return };
    let mut seen = std::collections::BTreeSet::new();
    for record in transcript {
        if !seen.insert(record.seq) {
            let cause = lost(faultline_runtime::store::Statement::Append)
                .next()
                .map_or_else(String::new, |f| format!(" (the link lost an append's answer at {} ms)", f.at_ms));
            found.fail(
                Invariant::AnswerLookedUp,
                format!("seq {} is in the final log twice{cause}: a batch sent again instead of looked up", record.seq),
                0,
            );
        }
    }
}

/// An outcome is a promise about the store: each turn a worker reported kept had its
/// `turn/end`, saying the same, in the store when the harness looked right after the report.
fn kept_means_stored(evidence: &FleetEvidence, found: &mut FoundViolations) {
    for promise in &evidence.broken_promises {
        let stored = promise.stored.map_or_else(|| "no turn/end".to_owned(), |kind| format!("a turn/end {kind}"));
        found.fail(
            Invariant::OutcomeDurable,
            format!(
                "{} reported turn {} kept ({}) at {} ms, and the store held {stored} for it",
                promise.worker.host(),
                promise.turn,
                promise.reported,
                promise.at_ms
            ),
            promise.at_ms,
        );
    }
}

/// Each execution reaches the gateway at most once.
fn at_most_once(receipts: &[Receipt], found: &mut FoundViolations) {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for receipt in receipts {
        let count = seen.entry(receipt.execution_id.as_str()).or_default();
        *count += 1;
        if *count == 2 {
            found.fail(
                Invariant::AtMostOnce,
                format!("execution {} reached the gateway twice", receipt.execution_id),
                receipt.at_ms,
            );
        }
    }
}

/// The final log is valid, every turn closed, every message of the plan in it.
fn converged(evidence: &FleetEvidence, plan: &Plan, end_ms: u64, found: &mut FoundViolations) {
    let Some(transcript) = &evidence.transcript else {
        found.fail(
            Invariant::Liveness,
            format!("no liveness: the standby worker did not finish the workload within {} ms", plan.end_ms()),
            end_ms,
        );
        return;
    };
    if let Err(e) = Validator::validate_all(transcript) {
        found.fail(Invariant::LogInvariants, format!("the final log breaks an invariant: {e}"), end_ms);
    }
    if let Some(turn) = super::liveness::open_turn(transcript) {
        found.fail(Invariant::TurnClosed, format!("turn {turn} is still open at the end"), end_ms);
    }
    let users = transcript.iter().filter(|r| matches!(r.event, Event::UserMessage(_))).count();
    if users != plan.messages.len() {
        found.fail(
            Invariant::Liveness,
            format!("{users} user messages in the final log, the workload has {}", plan.messages.len()),
            end_ms,
        );
    }
}
