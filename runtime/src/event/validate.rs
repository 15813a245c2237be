//! The log-invariant validator (FAILURE-EVENT-LOG, docs/internals/requirements.md). Every test
//! and every simulated run checks the transcripts it produces with it.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    ApprovalDecided, ApprovalDispatched, ApprovalRequested, AssistantMessage, Chunk, Decision, ErrorCode, Event,
    Record, StepRef, ToolCall, ToolResult, TurnEndReason,
};

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rule {
    /// `seq` must be exactly one more than the previous record's.
    #[error("seq must be {expected}, found {found}")]
    SeqGap {
        /// The seq that should have come.
        expected: u64,
        /// The seq that came.
        found: u64,
    },
    /// Turns are numbered 1, 2, ... without gaps.
    #[error("turn/start must open turn {expected}, found turn {found}")]
    TurnNumber {
        /// Expected number.
        expected: u32,
        /// Found number.
        found: u32,
    },
    /// A turn started while another was open.
    #[error("turn {found} started while turn {open} is still open")]
    NestedTurn {
        /// The open turn.
        open: u32,
        /// The turn that tried to start.
        found: u32,
    },
    /// A `turn/end` for a turn that is not the open one.
    #[error("turn/end for turn {found}, but the open turn is {open:?}")]
    TurnEndMismatch {
        /// The open turn, if any.
        open: Option<u32>,
        /// The turn named by `turn/end`.
        found: u32,
    },
    /// A `turn/end` while a step is open.
    #[error("turn/end while step {step} is still open")]
    TurnEndWithOpenStep {
        /// The open step.
        step: u32,
    },
    /// Steps are numbered 1, 2, ... inside a turn.
    #[error("step/start must open step {expected}, found step {found}")]
    StepNumber {
        /// Expected number.
        expected: u32,
        /// Found number.
        found: u32,
    },
    /// A step started while another was open.
    #[error("step {found} started while step {open} is still open")]
    NestedStep {
        /// The open step.
        open: u32,
        /// The step that tried to start.
        found: u32,
    },
    /// An event that belongs inside a turn appeared outside one.
    #[error("{type_name} outside a turn")]
    OutsideTurn {
        /// The event type.
        type_name: String,
    },
    /// An event that belongs to the open step appeared with no step open.
    #[error("{type_name} outside a step")]
    OutsideStep {
        /// The event type.
        type_name: String,
    },
    /// An event names a (turn, step) other than the open one.
    #[error("{type_name} names turn {turn} step {step}, but the open step is turn {open_turn} step {open_step}")]
    WrongStep {
        /// The event type.
        type_name: String,
        /// Turn named by the event.
        turn: u32,
        /// Step named by the event.
        step: u32,
        /// Open turn.
        open_turn: u32,
        /// Open step.
        open_step: u32,
    },
    /// A second `assistant/message` in one step.
    #[error("second assistant/message in one step")]
    DuplicateAssistantMessage,
    /// A `tool/call` whose id the step's `assistant/message` did not request.
    #[error("tool/call {call_id} was not requested by this step's assistant/message")]
    ToolCallNotRequested {
        /// The call id.
        call_id: String,
    },
    /// Two `tool/call`s with one id in one step.
    #[error("duplicate tool/call {call_id}")]
    DuplicateToolCall {
        /// The call id.
        call_id: String,
    },
    /// A `tool/result` without a `tool/call` in the same step (other than the repair closer
    /// `TOOL_NOT_STARTED`).
    #[error("tool/result for {call_id} without a tool/call in the same step")]
    ToolResultWithoutCall {
        /// The call id.
        call_id: String,
    },
    /// Two `tool/result`s for one call.
    #[error("duplicate tool/result for {call_id}")]
    DuplicateToolResult {
        /// The call id.
        call_id: String,
    },
    /// `source_seqs` on a type that may not carry it.
    #[error("{type_name} may not carry source_seqs")]
    SourcesNotAllowed {
        /// The event type.
        type_name: String,
    },
    /// An `approval/…` record for a call with no `tool/call` in the step, or one already
    /// answered.
    #[error("{type_name} for {call_id}, which has no unanswered tool/call in this step")]
    ApprovalWithoutCall {
        /// The event type.
        type_name: String,
        /// The call id.
        call_id: String,
    },
    /// A second `approval/requested`, `approval/decided` or `approval/dispatched` for one call:
    /// one request, one decision, one dispatch.
    #[error("second {type_name} for {call_id}")]
    DuplicateApproval {
        /// The event type.
        type_name: String,
        /// The call id.
        call_id: String,
    },
    /// An approval record whose digest is not the call's (a decision bound to other
    /// arguments).
    #[error("{type_name} for {call_id} carries digest {found}, but the call's is {expected}")]
    ApprovalDigest {
        /// The event type.
        type_name: String,
        /// The call id.
        call_id: String,
        /// The call's digest.
        expected: String,
        /// The record's.
        found: String,
    },
    /// An `approval/decided` without a request, or an `approval/dispatched` without an
    /// approval.
    #[error("{type_name} for {call_id} before {missing}")]
    ApprovalOutOfOrder {
        /// The event type.
        type_name: String,
        /// The call id.
        call_id: String,
        /// What had to come first.
        missing: &'static str,
    },
    /// A `tool/result` for a call waiting for approval that says it ran (or may have) though
    /// it was never dispatched, or that says it was denied without a denial.
    #[error("tool/result for {call_id} ({code}) but the call was never dispatched by an approval")]
    ResultWithoutApproval {
        /// The call id.
        call_id: String,
        /// What the result said (`ok` or its code).
        code: String,
    },
    /// A `turn/end` saying the turn awaits approval: a paused turn has no end.
    #[error("turn/end may not say awaiting-approval: a paused turn stays open")]
    PausedTurnEnd,
    /// `assistant/message` cites something other than one successful attempt's chunks of
    /// its own step.
    #[error("assistant/message cites seq {cited}: {why}")]
    BadCitation {
        /// The cited seq.
        cited: u64,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// A broken invariant and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("seq {seq}: {rule}")]
pub struct LogViolation {
    /// The seq of the offending record.
    pub seq: u64,
    /// The rule it broke.
    pub rule: Rule,
}

/// Where one call's approval is.
#[derive(Debug, Clone)]
struct ApprovalState {
    decided: Option<Decision>,
    dispatched: bool,
}

#[derive(Debug, Default, Clone)]
struct OpenStep {
    step: u32,
    has_message: bool,
    requested: BTreeSet<String>,
    /// Each `tool/call` of the step, with its arguments' digest.
    called: BTreeMap<String, String>,
    answered: BTreeSet<String>,
    /// Calls with an `approval/requested`, by call id.
    approvals: BTreeMap<String, ApprovalState>,
    /// The attempt of each chunk in this step, as runs of consecutive seqs.
    chunk_attempts: ChunkRuns,
    /// Attempts whose terminal chunk was `error`/`aborted`.
    failed_attempts: BTreeSet<u32>,
}

/// Which attempt each of a step's chunks belongs to, kept as runs of consecutive seqs of one
/// attempt. A stream's chunks arrive one attempt at a time, so a step holds a run or two
/// however long it streams: a copy of the validator (a batch checked on a copy before it is
/// written) costs those runs, not one entry per chunk, and recording a chunk extends the last
/// run instead of inserting into a tree.
#[derive(Debug, Default, Clone)]
struct ChunkRuns {
    /// Sorted by seq and disjoint: seqs only grow (the validator checks `seq` first).
    runs: Vec<ChunkRun>,
}

/// Chunks `first..=last` (every seq between them a chunk) of one attempt.
#[derive(Debug, Clone, Copy)]
struct ChunkRun {
    first: u64,
    last: u64,
    attempt: u32,
}

impl ChunkRuns {
    /// Records chunk `seq` of `attempt`; `seq` is above every seq recorded before.
    fn insert(&mut self, seq: u64, attempt: u32) {
        match self.runs.last_mut() {
            Some(run) if run.attempt == attempt && run.last + 1 == seq => run.last = seq,
            last => {
                assert!(last.is_none_or(|run| run.last < seq), "chunk seqs only grow");
                self.runs.push(ChunkRun { first: seq, last: seq, attempt });
            }
        }
    }

    /// The attempt of chunk `seq`, if `seq` is a chunk of this step.
    fn get(&self, seq: u64) -> Option<u32> {
        let after = self.runs.partition_point(|run| run.first <= seq);
        let run = self.runs[..after].last()?;
        (seq <= run.last).then_some(run.attempt)
    }
}

#[derive(Debug, Clone)]
struct OpenTurn {
    turn: u32,
    last_step: u32,
    step: Option<OpenStep>,
}

/// Checks records one at a time, so the same code validates a whole file on load and each
/// batch before it is appended.
#[derive(Debug, Clone, Default)]
pub struct Validator {
    next_seq: u64,
    last_turn: u32,
    open: Option<OpenTurn>,
}

impl Validator {
    /// A validator expecting seq 0 and turn 1.
    pub fn new() -> Self {
        Self::default()
    }

    /// Validates a whole sequence of records.
    pub fn validate_all<'a>(records: impl IntoIterator<Item = &'a Record>) -> Result<Validator, LogViolation> {
        let mut validator = Validator::new();
        for record in records {
            // The validator is dropped on error: no copy per record to keep it unchanged.
            validator.push_in_place(record)?;
        }
        Ok(validator)
    }

    /// The seq the next record must carry.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The open turn, if any.
    pub fn open_turn(&self) -> Option<u32> {
        self.open.as_ref().map(|t| t.turn)
    }

    /// The open step of the open turn, if any.
    pub fn open_step(&self) -> Option<u32> {
        self.open.as_ref().and_then(|t| t.step.as_ref()).map(|s| s.step)
    }

    /// The number of the last turn started (0 if none).
    pub fn last_turn(&self) -> u32 {
        self.last_turn
    }

    /// Checks `record` against everything seen so far and, if it is valid, absorbs it. On
    /// error the validator is unchanged.
    pub fn push(&mut self, record: &Record) -> Result<(), LogViolation> {
        let mut next = self.clone();
        next.apply(record).map_err(|rule| LogViolation { seq: record.seq, rule })?;
        *self = next;
        Ok(())
    }

    /// [`Validator::push`] without the copy that keeps the validator unchanged on error: for
    /// callers that discard it after an error anyway (a batch check on a copy, a scan that
    /// stops at the first problem). Saves a clone of the open step's state per record.
    pub fn push_in_place(&mut self, record: &Record) -> Result<(), LogViolation> {
        self.apply(record).map_err(|rule| LogViolation { seq: record.seq, rule })
    }

    fn apply(&mut self, record: &Record) -> Result<(), Rule> {
        if record.seq != self.next_seq {
            return Err(Rule::SeqGap { expected: self.next_seq, found: record.seq });
        }
        self.next_seq += 1;
        if record.source_seqs.is_some() && !record.event.may_cite_sources() {
            return Err(Rule::SourcesNotAllowed { type_name: record.event.type_name().to_owned() });
        }
        match &record.event {
            Event::TurnStart(start) => self.turn_start(start.turn),
            Event::TurnEnd(end) => {
                if matches!(end.reason, TurnEndReason::AwaitingApproval { .. }) {
                    return Err(Rule::PausedTurnEnd);
                }
                self.turn_end(end.turn)
            }
            Event::StepStart(at) => self.step_start(at),
            Event::StepEnd(at) => {
                self.step_mut("step/end", at.turn, at.step)?;
                if let Some(turn) = self.open.as_mut() {
                    turn.step = None;
                }
                Ok(())
            }
            Event::UserMessage(_) | Event::RequestHeader(_) => self.turn_mut(record.event.type_name()).map(|_| ()),
            Event::AssistantChunk(chunk) => {
                let step = self.step_mut("assistant/chunk", chunk.turn, chunk.step)?;
                step.chunk_attempts.insert(record.seq, chunk.attempt);
                if let Some(ChunkFinish::Failed) = ChunkFinish::of(&chunk.chunk) {
                    step.failed_attempts.insert(chunk.attempt);
                }
                Ok(())
            }
            Event::AssistantMessage(message) => {
                self.assistant_message(message, record.source_seqs.as_deref().unwrap_or_default())
            }
            Event::ToolCall(call) => self.tool_call(call),
            Event::ToolResult(result) => self.tool_result(result),
            Event::LlmRetry(retry) => self.step_mut("llm/retry", retry.turn, retry.step).map(|_| ()),
            Event::LlmRetryStarted(started) => {
                self.step_mut("llm/retry-started", started.turn, started.step).map(|_| ())
            }
            Event::ApprovalRequested(requested) => self.approval_requested(requested),
            Event::ApprovalDecided(decided) => self.approval_decided(decided),
            Event::ApprovalDispatched(dispatched) => self.approval_dispatched(dispatched),
            // An ignorable record of an unknown type constrains nothing.
            Event::Unknown(_) => Ok(()),
        }
    }

    fn turn_start(&mut self, turn: u32) -> Result<(), Rule> {
        if let Some(open) = &self.open {
            return Err(Rule::NestedTurn { open: open.turn, found: turn });
        }
        if turn != self.last_turn + 1 {
            return Err(Rule::TurnNumber { expected: self.last_turn + 1, found: turn });
        }
        self.last_turn = turn;
        self.open = Some(OpenTurn { turn, last_step: 0, step: None });
        Ok(())
    }

    fn turn_end(&mut self, turn: u32) -> Result<(), Rule> {
        let open = self.open.as_ref().filter(|t| t.turn == turn);
        let open = open.ok_or(Rule::TurnEndMismatch { open: self.open_turn(), found: turn })?;
        if let Some(step) = &open.step {
            return Err(Rule::TurnEndWithOpenStep { step: step.step });
        }
        self.open = None;
        Ok(())
    }

    fn step_start(&mut self, at: &StepRef) -> Result<(), Rule> {
        let turn = self.turn_mut("step/start")?;
        check_turn(turn, "step/start", at.turn, at.step)?;
        if let Some(step) = &turn.step {
            return Err(Rule::NestedStep { open: step.step, found: at.step });
        }
        if at.step != turn.last_step + 1 {
            return Err(Rule::StepNumber { expected: turn.last_step + 1, found: at.step });
        }
        turn.last_step = at.step;
        turn.step = Some(OpenStep { step: at.step, ..OpenStep::default() });
        Ok(())
    }

    fn assistant_message(&mut self, message: &AssistantMessage, sources: &[u64]) -> Result<(), Rule> {
        let step = self.step_mut("assistant/message", message.turn, message.step)?;
        if step.has_message {
            return Err(Rule::DuplicateAssistantMessage);
        }
        check_citations(step, sources)?;
        step.has_message = true;
        step.requested = message.message.tool_calls().map(|(id, _, _)| id.to_owned()).collect();
        Ok(())
    }

    fn tool_call(&mut self, call: &ToolCall) -> Result<(), Rule> {
        let step = self.step_mut("tool/call", call.turn, call.step)?;
        if !step.requested.contains(&call.call_id) {
            return Err(Rule::ToolCallNotRequested { call_id: call.call_id.clone() });
        }
        if step.called.contains_key(&call.call_id) {
            return Err(Rule::DuplicateToolCall { call_id: call.call_id.clone() });
        }
        step.called.insert(call.call_id.clone(), super::arguments_digest(&call.arguments));
        Ok(())
    }

    fn approval_requested(&mut self, requested: &ApprovalRequested) -> Result<(), Rule> {
        const TYPE: &str = "approval/requested";
        let step = self.step_mut(TYPE, requested.turn, requested.step)?;
        let call_id = &requested.call_id;
        check_digest(step, TYPE, call_id, &requested.digest)?;
        if step.approvals.contains_key(call_id) {
            return Err(Rule::DuplicateApproval { type_name: TYPE.into(), call_id: call_id.clone() });
        }
        step.approvals.insert(call_id.clone(), ApprovalState { decided: None, dispatched: false });
        Ok(())
    }

    fn approval_decided(&mut self, decided: &ApprovalDecided) -> Result<(), Rule> {
        const TYPE: &str = "approval/decided";
        let step = self.step_mut(TYPE, decided.turn, decided.step)?;
        let call_id = &decided.call_id;
        check_digest(step, TYPE, call_id, &decided.digest)?;
        let out_of_order = || Rule::ApprovalOutOfOrder {
            type_name: TYPE.into(),
            call_id: call_id.clone(),
            missing: "approval/requested",
        };
        let state = step.approvals.get_mut(call_id).ok_or_else(out_of_order)?;
        if state.decided.is_some() {
            return Err(Rule::DuplicateApproval { type_name: TYPE.into(), call_id: call_id.clone() });
        }
        state.decided = Some(decided.decision);
        Ok(())
    }

    fn approval_dispatched(&mut self, dispatched: &ApprovalDispatched) -> Result<(), Rule> {
        const TYPE: &str = "approval/dispatched";
        let step = self.step_mut(TYPE, dispatched.turn, dispatched.step)?;
        let call_id = &dispatched.call_id;
        check_digest(step, TYPE, call_id, &dispatched.digest)?;
        let state =
            step.approvals.get_mut(call_id).filter(|s| s.decided == Some(Decision::Approved)).ok_or_else(|| {
                Rule::ApprovalOutOfOrder { type_name: TYPE.into(), call_id: call_id.clone(), missing: "an approval" }
            })?;
        if state.dispatched {
            return Err(Rule::DuplicateApproval { type_name: TYPE.into(), call_id: call_id.clone() });
        }
        state.dispatched = true;
        Ok(())
    }

    fn tool_result(&mut self, result: &ToolResult) -> Result<(), Rule> {
        let step = self.step_mut("tool/result", result.turn, result.step)?;
        let not_started = result.error.as_ref().is_some_and(|e| e.code == ErrorCode::ToolNotStarted);
        let known =
            step.called.contains_key(&result.call_id) || (not_started && step.requested.contains(&result.call_id));
        if !known {
            return Err(Rule::ToolResultWithoutCall { call_id: result.call_id.clone() });
        }
        if let Some(state) = step.approvals.get(&result.call_id) {
            check_approved_result(state, result)?;
        }
        if !step.answered.insert(result.call_id.clone()) {
            return Err(Rule::DuplicateToolResult { call_id: result.call_id.clone() });
        }
        Ok(())
    }

    fn turn_mut(&mut self, type_name: &str) -> Result<&mut OpenTurn, Rule> {
        self.open.as_mut().ok_or_else(|| Rule::OutsideTurn { type_name: type_name.to_owned() })
    }

    fn step_mut(&mut self, type_name: &str, turn: u32, step: u32) -> Result<&mut OpenStep, Rule> {
        let open = self.turn_mut(type_name)?;
        check_turn(open, type_name, turn, step)?;
        let open_turn = open.turn;
        let open_step = open.step.as_mut().ok_or_else(|| Rule::OutsideStep { type_name: type_name.to_owned() })?;
        if open_step.step != step {
            return Err(Rule::WrongStep {
                type_name: type_name.to_owned(),
                turn,
                step,
                open_turn,
                open_step: open_step.step,
            });
        }
        Ok(open_step)
    }
}

/// An approval record names a called, unanswered call of the step, with that call's digest.
fn check_digest(step: &OpenStep, type_name: &str, call_id: &str, digest: &str) -> Result<(), Rule> {
    let called = step.called.get(call_id).filter(|_| !step.answered.contains(call_id));
    let expected = called
        .ok_or_else(|| Rule::ApprovalWithoutCall { type_name: type_name.to_owned(), call_id: call_id.to_owned() })?;
    if expected != digest {
        return Err(Rule::ApprovalDigest {
            type_name: type_name.to_owned(),
            call_id: call_id.to_owned(),
            expected: expected.clone(),
            found: digest.to_owned(),
        });
    }
    Ok(())
}

/// The result of a call that waited for approval: anything once dispatched; before that only
/// "never ran" — denied (after a denial), expired (undecided), or aborted.
fn check_approved_result(state: &ApprovalState, result: &ToolResult) -> Result<(), Rule> {
    if state.dispatched {
        return Ok(());
    }
    let code = result.error.as_ref().map(|e| e.code);
    let allowed = match code {
        Some(ErrorCode::ApprovalDenied) => state.decided == Some(Decision::Denied),
        Some(ErrorCode::ApprovalExpired) => state.decided.is_none(),
        Some(ErrorCode::AbortedBeforeDispatch) => true,
        _ => false,
    };
    if allowed {
        return Ok(());
    }
    Err(Rule::ResultWithoutApproval {
        call_id: result.call_id.clone(),
        code: code.map_or_else(|| "ok".to_owned(), |c| c.to_string()),
    })
}

fn check_turn(open: &OpenTurn, type_name: &str, turn: u32, step: u32) -> Result<(), Rule> {
    if open.turn == turn {
        return Ok(());
    }
    let open_step = open.step.as_ref().map_or(0, |s| s.step);
    Err(Rule::WrongStep { type_name: type_name.to_owned(), turn, step, open_turn: open.turn, open_step })
}

/// An `assistant/message` cites only chunks of its own step, all from one attempt, and that
/// attempt did not fail (FAILURE-RETRY-SEMANTICS-TEST).
fn check_citations(step: &OpenStep, cited: &[u64]) -> Result<(), Rule> {
    let mut attempt = None;
    for &seq in cited {
        let found = step
            .chunk_attempts
            .get(seq)
            .ok_or(Rule::BadCitation { cited: seq, why: "not an assistant/chunk of this step" })?;
        if step.failed_attempts.contains(&found) {
            return Err(Rule::BadCitation { cited: seq, why: "chunk of a failed attempt" });
        }
        if *attempt.get_or_insert(found) != found {
            return Err(Rule::BadCitation { cited: seq, why: "chunks of more than one attempt" });
        }
    }
    Ok(())
}

/// How an attempt's terminal chunk ended, as far as citations care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkFinish {
    Succeeded,
    Failed,
}

impl ChunkFinish {
    fn of(chunk: &Chunk) -> Option<ChunkFinish> {
        match chunk {
            Chunk::Finish { reason, .. } if reason.failure().is_some() => Some(ChunkFinish::Failed),
            Chunk::Finish { .. } => Some(ChunkFinish::Succeeded),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ChunkRuns;

    /// What makes a copy of the validator cheap: an attempt streamed without interruption is
    /// one run however many chunks it has; an interruption or the next attempt starts
    /// another. (Any split gives the same answers, so only the run count tells.)
    #[test]
    fn an_uninterrupted_attempt_is_one_run() {
        let mut runs = ChunkRuns::default();
        for seq in 10..1_010 {
            runs.insert(seq, 1);
        }
        assert_eq!(runs.runs.len(), 1);
        runs.insert(1_011, 1); // seq 1 010 was another record
        runs.insert(1_012, 2);
        runs.insert(1_013, 2);
        assert_eq!(runs.runs.len(), 3);
        assert_eq!((runs.get(10), runs.get(1_009), runs.get(1_010)), (Some(1), Some(1), None));
        assert_eq!((runs.get(1_011), runs.get(1_013), runs.get(9), runs.get(1_014)), (Some(1), Some(2), None, None));
    }
}
