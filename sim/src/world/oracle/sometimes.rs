//! "Sometimes" conditions: rare good paths the sweep must see at least once (in the spirit of
//! FoundationDB's `sometimes` assertions). Not invariants: a run that reaches none passes; a
//! full sweep that never reaches one fails its coverage.

use std::collections::BTreeSet;

use faultline_runtime::event::{ContentBlock, ErrorCode, Event, Record, TurnEndReason};

/// Every "sometimes" condition the default sweep must reach.
pub const SOMETIMES: [&str; 6] = [
    "retry-succeeded",
    "interrupted-turn-repaired",
    "unknown-reconciled-from-queue",
    "pool-drained-on-abort",
    "tool-timeout-awaited",
    "side-effect-confirmed",
];

/// The "sometimes" conditions a recovered transcript shows.
pub(in crate::world) fn sometimes(transcript: &[Record]) -> BTreeSet<String> {
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
                let text: String = result
                    .content
                    .iter()
                    .filter_map(|b| if let ContentBlock::Text { text } = b { Some(text.as_str()) } else { None })
                    .collect();
                match result.error.as_ref().map(|e| e.code) {
                    Some(ErrorCode::ToolOutcomeUnknown) if text.contains("delivery record") => {
                        out.insert("unknown-reconciled-from-queue".to_owned());
                    }
                    Some(ErrorCode::AbortedBeforeDispatch) => {
                        out.insert("pool-drained-on-abort".to_owned());
                    }
                    Some(ErrorCode::ToolTimeout) => {
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
