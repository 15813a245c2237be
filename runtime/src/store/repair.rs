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

/// What the delivery queue knows about a started call's effect (FAILURE-CRASH-REPAIR).
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
/// A call waiting for approval (requested, never dispatched) gets no closer, and a turn with one
/// is paused, not interrupted: it keeps its open step and has no `turn/end`.
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
    let Some(tail) = OpenTurn::of(records) else { return Vec::new() };
    let turn = tail.turn;
    let mut out = Vec::new();
    let mut push = |event: Event, source_seqs: Option<Vec<u64>>| {
        let mut record = Record::new(last_seq + 1 + out.len() as u64, last_time, event);
        record.source_seqs = source_seqs;
        out.push(record);
    };
    if let Some(step) = tail.open_step {
        let mut paused = false;
        for call_id in tail.requested.iter().filter(|id| !tail.answered.contains(*id)) {
            // A call waiting for a person never ran: the turn is paused, not interrupted, and
            // resuming it decides the call (FAILURE-APPROVAL).
            if tail.awaiting(call_id) {
                paused = true;
                continue;
            }
            let started =
                tail.calls.get(call_id).copied().filter(|_| !crate::testing::bugs::planted("repair-not-started"));
            let closer = match started {
                Some(call_seq) => started_closer(&execution_id(session, turn, step, call_id), evidence, call_seq),
                None => Closer {
                    code: Some(ErrorCode::ToolNotStarted),
                    name: "not_started",
                    text: NOT_STARTED_TEXT.to_owned(),
                    sources: None,
                },
            };
            let result = ToolResult {
                turn,
                step,
                call_id: call_id.clone(),
                content: vec![ContentBlock::text(closer.text)],
                is_error: closer.code.is_some(),
                error: closer.code.map(|code| ToolError { name: closer.name.to_owned(), code }),
            };
            push(Event::ToolResult(result), closer.sources);
        }
        if paused {
            return out;
        }
        push(Event::StepEnd(StepRef { turn, step }), None);
    }
    push(Event::TurnEnd(TurnEnd { turn, reason: TurnEndReason::Interrupted }), None);
    out
}

/// The last turn of a log, when it never ended: its open step, the calls its last answer
/// requested, the durable `tool/call`s (by call id, their seqs) and the calls answered.
struct OpenTurn {
    turn: u32,
    open_step: Option<u32>,
    requested: Vec<String>,
    calls: BTreeMap<String, u64>,
    answered: BTreeSet<String>,
    /// Calls with an `approval/requested`: whether each was dispatched.
    approvals: BTreeMap<String, bool>,
}

impl OpenTurn {
    fn of(records: &[Record]) -> Option<OpenTurn> {
        let turn_start = records.iter().rposition(|r| matches!(r.event, Event::TurnStart(_)))?;
        let Event::TurnStart(start) = &records[turn_start].event else { unreachable!("rposition matched turn/start") };
        let mut tail = OpenTurn {
            turn: start.turn,
            open_step: None,
            requested: Vec::new(),
            calls: BTreeMap::new(),
            answered: BTreeSet::new(),
            approvals: BTreeMap::new(),
        };
        for record in &records[turn_start..] {
            match &record.event {
                Event::TurnEnd(_) => return None,
                Event::StepStart(at) => {
                    tail.open_step = Some(at.step);
                    tail.requested.clear();
                    tail.calls.clear();
                    tail.answered.clear();
                    tail.approvals.clear();
                }
                Event::ApprovalRequested(requested) => {
                    tail.approvals.insert(requested.call_id.clone(), false);
                }
                Event::ApprovalDispatched(dispatched) => {
                    tail.approvals.insert(dispatched.call_id.clone(), true);
                }
                Event::StepEnd(_) => tail.open_step = None,
                Event::AssistantMessage(message) => {
                    tail.requested = message.message.tool_calls().map(|(id, _, _)| id.to_owned()).collect();
                }
                Event::ToolCall(call) => {
                    tail.calls.insert(call.call_id.clone(), record.seq);
                }
                Event::ToolResult(result) => {
                    tail.answered.insert(result.call_id.clone());
                }
                _ => {}
            }
        }
        Some(tail)
    }
}

impl OpenTurn {
    /// Whether `call_id` waits for a person: requested and never dispatched. (Planted
    /// `approval-redispatch`: a dispatched call is taken for one still waiting.)
    fn awaiting(&self, call_id: &str) -> bool {
        self.approvals
            .get(call_id)
            .is_some_and(|dispatched| !dispatched || crate::testing::bugs::planted("approval-redispatch"))
    }
}

/// What a closer says of one unanswered call: its error code (none: the real result), the
/// error's name, the text the model reads, and the records it cites.
struct Closer {
    code: Option<ErrorCode>,
    name: &'static str,
    text: String,
    sources: Option<Vec<u64>>,
}

/// The closer of a call whose `tool/call` (at `call_seq`) was durable: unknown, unless the
/// delivery queue's record of its execution id `id` says what happened.
fn started_closer(id: &str, evidence: &dyn OutcomeEvidence, call_seq: u64) -> Closer {
    let closer = |code, name, text| Closer { code, name, text, sources: Some(vec![call_seq]) };
    match evidence.lookup(id) {
        None => closer(Some(ErrorCode::ToolOutcomeUnknown), "outcome_unknown", OUTCOME_UNKNOWN_TEXT.to_owned()),
        Some(Evidence::Delivered(result)) => {
            closer(None, "recovered", format!("[recovered from the delivery record {id}: delivered] {result}"))
        }
        Some(Evidence::Failed(reason)) => closer(
            Some(ErrorCode::ToolFailed),
            "delivery_failed",
            format!("[recovered from the delivery record {id}: failed] {reason}"),
        ),
        Some(Evidence::NeverClaimed) => closer(
            Some(ErrorCode::ToolNotStarted),
            NEVER_CLAIMED_NAME,
            format!(
                "The process stopped before this effect was sent: the delivery record {id} was still queued and never claimed, so it did not happen (the queued copy is cancelled). Retry it if it is still needed."
            ),
        ),
        Some(Evidence::Uncertain { status, detail }) => closer(
            Some(ErrorCode::ToolOutcomeUnknown),
            DELIVERY_UNKNOWN_NAME,
            format!("{OUTCOME_UNKNOWN_TEXT} Evidence: the delivery record {id} is {status} ({detail}); it was not resent."),
        ),
    }
}
