//! Durability: the recovered transcript is a valid log, and everything acknowledged durable
//! before a crash survives it byte for byte.

use faultline_runtime::event::Validator;

use super::{Evidence, Found, Invariant};

pub(super) fn check(evidence: &Evidence<'_>, found: &mut Found) {
    let Some(transcript) = evidence.transcript() else { return };
    let end_ms = evidence.end_ms;
    // Log invariants of the recovered transcript (which also rules out citing a failed
    // attempt's chunks and results without calls).
    if let Err(v) = Validator::validate_all(transcript) {
        found.fail(Invariant::LogInvariants, v.to_string(), end_ms);
    }
    // Everything acknowledged durable before a crash survives byte-identical.
    for (seq, acked) in &evidence.world.acked {
        match transcript.get(*seq as usize) {
            // Records encode deterministically, so equal values are equal bytes (and comparing
            // values spares encoding every acknowledged record twice per run).
            Some(found_record) if found_record == acked => {}
            Some(other) => found.fail(
                Invariant::DurablePrefix,
                format!("seq {seq} was acknowledged as {} but recovered as {}", acked.encode(), other.encode()),
                end_ms,
            ),
            None => found.fail(
                Invariant::DurablePrefix,
                format!("seq {seq} was acknowledged durable but is missing after recovery"),
                end_ms,
            ),
        }
    }
}
