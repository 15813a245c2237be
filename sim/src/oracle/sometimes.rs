//! "Sometimes" conditions: rare good paths the sweep must see at least once (in the spirit of
//! FoundationDB's `sometimes` assertions). Not invariants: a run that reaches none passes; a
//! full sweep that never reaches one fails its coverage.

use std::collections::BTreeSet;

use faultline_runtime::event::{ErrorCode, Event, Record, TurnEndReason};
use faultline_runtime::store::DELIVERY_UNKNOWN_NAME;

/// Every "sometimes" condition the default sweep must reach.
pub const SOMETIMES: [&str; 8] = [
    "retry-succeeded",
    "interrupted-turn-repaired",
    "unknown-reconciled-from-queue",
    "pool-drained-on-abort",
    "tool-timeout-awaited",
    "side-effect-confirmed",
    "zombie-fenced",
    "zombie-effect-fenced",
];

/// The "sometimes" conditions a recovered transcript shows.
pub(crate) fn sometimes(transcript: &[Record]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut retried_turns = BTreeSet::new();
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
                // From the structured error, never from the narration text a person reads.
                let error = result.error.as_ref().map(|e| (e.code, e.name.as_str()));
                match error {
                    Some((ErrorCode::ToolOutcomeUnknown, DELIVERY_UNKNOWN_NAME)) => {
                        out.insert("unknown-reconciled-from-queue".to_owned());
                    }
                    Some((ErrorCode::AbortedBeforeDispatch, _)) => {
                        out.insert("pool-drained-on-abort".to_owned());
                    }
                    Some((ErrorCode::ToolTimeout, _)) => {
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

#[cfg(test)]
mod tests {
    use faultline_runtime::event::{ContentBlock, ToolError, ToolResult};

    use super::*;

    fn unknown(name: &str, text: &str) -> Record {
        let result = ToolResult {
            turn: 1,
            step: 1,
            call_id: "c".into(),
            content: vec![ContentBlock::text(text)],
            is_error: true,
            error: Some(ToolError { name: name.into(), code: ErrorCode::ToolOutcomeUnknown }),
        };
        Record::new(0, 0, Event::ToolResult(result))
    }

    #[test]
    fn an_unknown_outcome_counts_as_reconciled_by_its_structured_name_not_its_words() {
        let reconciled = unknown(DELIVERY_UNKNOWN_NAME, "the queue was consulted");
        assert!(sometimes(&[reconciled]).contains("unknown-reconciled-from-queue"));
        let narrated = unknown("outcome_unknown", "RunEvidence: the delivery record x is unknown");
        assert!(!sometimes(&[narrated]).contains("unknown-reconciled-from-queue"));
    }
}
