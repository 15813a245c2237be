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

/// The closers for `records` (the committed log plus any salvaged records), in order:
/// a `tool/result` for every call the open step's `assistant/message` requested and nobody
/// answered (`TOOL_OUTCOME_UNKNOWN` citing its durable `tool/call`, else `TOOL_NOT_STARTED`),
/// then `step/end` if a step is open, then `turn/end {interrupted}`. Empty when no turn is open.
///
/// Seqs continue from the last record and `time` copies its time, so repair is deterministic:
/// the same bytes always repair to the same bytes.
pub fn closers(records: &[Record]) -> Vec<Record> {
    let Some(last) = records.last() else { return Vec::new() };
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
        let mut record = Record::new(last.seq + 1 + out.len() as u64, last.time, event);
        record.source_seqs = source_seqs;
        out.push(record);
    };
    if let Some(step) = open_step {
        for call_id in requested.iter().filter(|id| !answered.contains(*id)) {
            let (code, name, text, sources) = match calls.get(call_id) {
                Some(&call_seq) => {
                    (ErrorCode::ToolOutcomeUnknown, "outcome_unknown", OUTCOME_UNKNOWN_TEXT, Some(vec![call_seq]))
                }
                None => (ErrorCode::ToolNotStarted, "not_started", NOT_STARTED_TEXT, None),
            };
            let result = ToolResult {
                turn,
                step,
                call_id: call_id.clone(),
                content: vec![ContentBlock::text(text)],
                is_error: true,
                error: Some(ToolError { name: name.to_owned(), code }),
            };
            push(Event::ToolResult(result), sources);
        }
        push(Event::StepEnd(StepRef { turn, step }), None);
    }
    push(Event::TurnEnd(TurnEnd { turn, reason: TurnEndReason::Interrupted }), None);
    out
}
