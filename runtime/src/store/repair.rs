//! Crash repair: the synthetic records that close an interrupted tail turn
//! (FAILURE-CRASH-REPAIR).

use std::collections::{BTreeMap, BTreeSet};

use crate::event::{ContentBlock, ErrorCode, Event, Record, StepRef, ToolError, ToolResult, TurnEnd, TurnEndReason};

/// Text the model sees for a call that durably started but whose result was lost.
pub const OUTCOME_UNKNOWN_TEXT: &str = "The process stopped after this tool call started and before its result was \
recorded, so its outcome is unknown: it may or may not have taken effect. Verify the external state before \
retrying anything with side effects.";

/// Text the model sees for a call that was requested but never durably started.
pub const NOT_STARTED_TEXT: &str =
    "The process stopped before this tool call started; it did not run. Retry it if it is still needed.";

/// What the delivery queue knows about a started call's effect (seed 004 §15.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evidence {
    /// The receiver confirmed it: the real result.
    Delivered(String),
    /// The receiver refused it: the real failure.
    Failed(String),
    /// Queued and never claimed: it provably did not happen.
    NeverClaimed,
    /// Claimed (delivering) or already unknown: it may have happened.
    Uncertain {
        /// `delivering` or `unknown`.
        status: String,
        /// What the queue recorded.
        detail: String,
    },
}

/// Where crash repair looks for the outcome of a started call before calling it unknown.
pub trait OutcomeEvidence: Send + Sync {
    /// What is known about execution `execution_id`; `None` when the effect did not go
    /// through the queue.
    fn lookup(&self, execution_id: &str) -> Option<Evidence>;

    /// Called after a repair that relied on [`Evidence::NeverClaimed`] was committed: the
    /// queued copy must now never be sent (the model was told it did not happen).
    fn cancel_never_claimed(&self, execution_id: &str);
}

/// No evidence: every started call without a result is `TOOL_OUTCOME_UNKNOWN`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEvidence;

impl OutcomeEvidence for NoEvidence {
    fn lookup(&self, _: &str) -> Option<Evidence> {
        None
    }

    fn cancel_never_claimed(&self, _: &str) {}
}

/// The stable id of a call's effect: the delivery-queue key. Derived from the session, turn,
/// step and call id, so a resumed or duplicated call maps to the same effect.
pub fn execution_id(session: &str, turn: u32, step: u32, call_id: &str) -> String {
    format!("{session}:{turn}:{step}:{call_id}")
}

/// The executions a set of closers settled as "never claimed", which must be cancelled in the
/// queue once the repair is committed.
pub fn never_claimed(session: &str, closers: &[Record]) -> Vec<String> {
    closers
        .iter()
        .filter_map(|r| match &r.event {
            Event::ToolResult(result) if result.error.as_ref().is_some_and(|e| e.name == NEVER_CLAIMED_NAME) => {
                Some(execution_id(session, result.turn, result.step, &result.call_id))
            }
            _ => None,
        })
        .collect()
}

/// Error name of a closer proven "not started" by the delivery queue.
pub const NEVER_CLAIMED_NAME: &str = "not_delivered";

/// Error name of a `TOOL_OUTCOME_UNKNOWN` closer whose uncertainty the delivery queue
/// confirmed (its record was claimed, or already unknown): the queue was consulted and cannot
/// say either, as opposed to `outcome_unknown`, where no queue knows the effect.
pub const DELIVERY_UNKNOWN_NAME: &str = "delivery_unknown";

/// The closers for `records` (the committed log plus any salvaged records), in order:
/// a `tool/result` for every call the open step's `assistant/message` requested and nobody
/// answered (`TOOL_OUTCOME_UNKNOWN` citing its durable `tool/call`, else `TOOL_NOT_STARTED`),
/// then `step/end` if a step is open, then `turn/end {interrupted}`. Empty when no turn is open.
///
/// Seqs continue from the last record and `time` copies its time, so repair is deterministic:
/// the same bytes always repair to the same bytes.
///
/// `evidence` (keyed by [`execution_id`] within `session`) is consulted before a started
/// call's outcome is declared unknown; the closer text names the evidence it used.
pub fn closers_with(records: &[Record], session: &str, evidence: &dyn OutcomeEvidence) -> Vec<Record> {
    closers_after(records, records.last().map(|r| (r.seq, r.time)), session, evidence)
}

/// [`closers_with`] for the records of the last turn, assistant chunks possibly left out
/// (they never matter to repair), given the seq and time of the log's last record.
pub(crate) fn closers_after(
    records: &[Record],
    last: Option<(u64, u64)>,
    session: &str,
    evidence: &dyn OutcomeEvidence,
) -> Vec<Record> {
    let Some((last_seq, last_time)) = last else { return Vec::new() };
    let Some(turn_start) = records.iter().rposition(|r| matches!(r.event, Event::TurnStart(_))) else {
        return Vec::new();
    };
    let Event::TurnStart(start) = &records[turn_start].event else { unreachable!("rposition matched turn/start") };
    let turn = start.turn;

    let mut open_step: Option<u32> = None;
    let mut requested: Vec<String> = Vec::new();
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    let mut answered: BTreeSet<String> = BTreeSet::new();
    for record in &records[turn_start..] {
        match &record.event {
            Event::TurnEnd(_) => return Vec::new(),
            Event::StepStart(at) => {
                open_step = Some(at.step);
                requested.clear();
                calls.clear();
                answered.clear();
            }
            Event::StepEnd(_) => open_step = None,
            Event::AssistantMessage(message) => {
                requested = message.message.tool_calls().map(|(id, _, _)| id.to_owned()).collect();
            }
            Event::ToolCall(call) => {
                calls.insert(call.call_id.clone(), record.seq);
            }
            Event::ToolResult(result) => {
                answered.insert(result.call_id.clone());
            }
            _ => {}
        }
    }

    let mut out = Vec::new();
    let mut push = |event: Event, source_seqs: Option<Vec<u64>>| {
        let mut record = Record::new(last_seq + 1 + out.len() as u64, last_time, event);
        record.source_seqs = source_seqs;
        out.push(record);
    };
    if let Some(step) = open_step {
        for call_id in requested.iter().filter(|id| !answered.contains(*id)) {
            let started = calls.get(call_id).filter(|_| !crate::testing::bugs::planted("repair-not-started"));
            let (code, name, text, sources) = match started {
                Some(&call_seq) => {
                    let id = execution_id(session, turn, step, call_id);
                    match evidence.lookup(&id) {
                        None => (Some(ErrorCode::ToolOutcomeUnknown), "outcome_unknown", OUTCOME_UNKNOWN_TEXT.to_owned(), Some(vec![call_seq])),
                        Some(Evidence::Delivered(result)) => (
                            None,
                            "recovered",
                            format!("[recovered from the delivery record {id}: delivered] {result}"),
                            Some(vec![call_seq]),
                        ),
                        Some(Evidence::Failed(reason)) => (
                            Some(ErrorCode::ToolFailed),
                            "delivery_failed",
                            format!("[recovered from the delivery record {id}: failed] {reason}"),
                            Some(vec![call_seq]),
                        ),
                        Some(Evidence::NeverClaimed) => (
                            Some(ErrorCode::ToolNotStarted),
                            NEVER_CLAIMED_NAME,
                            format!(
                                "The process stopped before this effect was sent: the delivery record {id} was still queued and never claimed, so it did not happen (the queued copy is cancelled). Retry it if it is still needed."
                            ),
                            Some(vec![call_seq]),
                        ),
                        Some(Evidence::Uncertain { status, detail }) => (
                            Some(ErrorCode::ToolOutcomeUnknown),
                            DELIVERY_UNKNOWN_NAME,
                            format!("{OUTCOME_UNKNOWN_TEXT} Evidence: the delivery record {id} is {status} ({detail}); it was not resent."),
                            Some(vec![call_seq]),
                        ),
                    }
                }
                None => (Some(ErrorCode::ToolNotStarted), "not_started", NOT_STARTED_TEXT.to_owned(), None),
            };
            let result = ToolResult {
                turn,
                step,
                call_id: call_id.clone(),
                content: vec![ContentBlock::text(text)],
                is_error: code.is_some(),
                error: code.map(|code| ToolError { name: name.to_owned(), code }),
            };
            push(Event::ToolResult(result), sources);
        }
        push(Event::StepEnd(StepRef { turn, step }), None);
    }
    push(Event::TurnEnd(TurnEnd { turn, reason: TurnEndReason::Interrupted }), None);
    out
}
