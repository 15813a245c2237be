//! What a session waits for: the calls of its paused turn, read from its records alone.

use serde::Serialize;

use crate::event::{Decision, Event, Record};

/// A call of a paused turn that waits for (or has) a decision and has no result yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PendingApproval {
    /// Turn.
    pub turn: u32,
    /// Step.
    pub step: u32,
    /// The call.
    pub call_id: String,
    /// Its tool.
    pub name: String,
    /// Its arguments, exactly as the model wrote them (scrubbed as every record is).
    pub arguments: String,
    /// The digest a decision is bound to.
    pub digest: String,
    /// Who may decide (empty: anyone).
    pub deciders: Vec<String>,
    /// When it expires, epoch ms (none: never).
    pub deadline_ms: Option<u64>,
    /// The decision taken, if one was: what, by whom, why.
    pub decision: Option<(Decision, String, Option<String>)>,
    /// Whether the approved call was dispatched (its outcome then belongs to crash repair).
    pub dispatched: bool,
}

/// The calls the last turn of `records` waits on, in the order they were requested: empty
/// unless that turn is open with an `approval/requested` call that has no `tool/result`.
pub fn awaiting_approval(records: &[Record]) -> Vec<PendingApproval> {
    let Some(start) = records.iter().rposition(|r| matches!(r.event, Event::TurnStart(_))) else {
        return Vec::new();
    };
    let mut pending: Vec<PendingApproval> = Vec::new();
    let mut arguments: Vec<(String, String)> = Vec::new();
    for record in &records[start..] {
        match &record.event {
            Event::TurnEnd(_) => return Vec::new(),
            Event::StepStart(_) => {
                pending.clear();
                arguments.clear();
            }
            Event::ToolCall(call) => arguments.push((call.call_id.clone(), call.arguments.clone())),
            Event::ApprovalRequested(requested) => pending.push(PendingApproval {
                turn: requested.turn,
                step: requested.step,
                call_id: requested.call_id.clone(),
                name: requested.name.clone(),
                arguments: arguments
                    .iter()
                    .rev()
                    .find(|(id, _)| *id == requested.call_id)
                    .map(|(_, a)| a.clone())
                    .unwrap_or_default(),
                digest: requested.digest.clone(),
                deciders: requested.deciders.clone(),
                deadline_ms: requested.deadline_ms,
                decision: None,
                dispatched: false,
            }),
            Event::ApprovalDecided(decided) => {
                if let Some(p) = pending.iter_mut().find(|p| p.call_id == decided.call_id) {
                    p.decision = Some((decided.decision, decided.by.clone(), decided.reason.clone()));
                }
            }
            Event::ApprovalDispatched(dispatched) => {
                if let Some(p) = pending.iter_mut().find(|p| p.call_id == dispatched.call_id) {
                    p.dispatched = true;
                }
            }
            Event::ToolResult(result) => pending.retain(|p| p.call_id != result.call_id),
            _ => {}
        }
    }
    pending
}
