//! The recovery report (FAILURE-RECOVERY-REPORT, FAILURE-CRASH-REPAIR): after a crash or a
//! failed run, a checkable account of what is kept, what is unknown and what to verify, what
//! never started, and what is still queued — instead of "failed, please retry".

use std::collections::BTreeMap;

use serde::Serialize;

use crate::event::{ContentBlock, ErrorCode, Event, Record, TurnEndReason};
use crate::outbox::{Delivery, DeliveryStatus};
use crate::store::execution_id;

/// One tool effect in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EffectLine {
    /// Turn.
    pub turn: u32,
    /// The model's call id.
    pub call_id: String,
    /// Tool name (the receiver to check for unknown effects).
    pub tool: String,
    /// The effect's execution id (the delivery-queue key).
    pub execution_id: String,
    /// What the log says (result text, or the closer's evidence).
    pub detail: String,
}

/// A call the session's paused turn waits on, and who may decide it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitingLine {
    /// Turn.
    pub turn: u32,
    /// The model's call id (what `faultline approval approve --call` names).
    pub call_id: String,
    /// Tool name.
    pub tool: String,
    /// Who may decide (empty: anyone who can write the session).
    pub deciders: Vec<String>,
    /// When it expires, epoch ms (none: never).
    pub deadline_ms: Option<u64>,
    /// A decision taken and not yet applied (`approved` / `denied`), if one was.
    pub decided: Option<String>,
}

/// The report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// The session.
    pub session: String,
    /// Turns that completed.
    pub completed_turns: u32,
    /// Turns closed by crash repair.
    pub interrupted_turns: u32,
    /// Turns that ended in error, aborted, or ran out of budget.
    pub other_turns: u32,
    /// Tool effects with results (kept).
    pub kept: Vec<EffectLine>,
    /// Effects whose outcome is unknown: verify the receiver; nothing was resent.
    pub unknown: Vec<EffectLine>,
    /// Calls that never started: safe to retry if still needed.
    pub never_started: Vec<EffectLine>,
    /// This session's deliveries still in the queue (pending, delivering, unknown).
    pub queued: Vec<(String, DeliveryStatus)>,
    /// Calls the paused turn waits on for a person's decision (FAILURE-APPROVAL).
    pub awaiting_approval: Vec<WaitingLine>,
    /// Tokens every attempt reported, per turn and for the session.
    pub usage_per_turn: BTreeMap<u32, crate::event::Usage>,
    /// The session's total.
    pub usage: crate::event::Usage,
}

/// Longest detail per effect in a report, in bytes: long enough for a closer's evidence.
const DETAIL_BYTES_MAX: usize = 600;

fn text(content: &[ContentBlock]) -> String {
    let all: String = content
        .iter()
        .filter_map(|b| if let ContentBlock::Text { text } = b { Some(text.as_str()) } else { None })
        .collect();
    let mut end = all.len().min(DETAIL_BYTES_MAX);
    while !all.is_char_boundary(end) {
        end -= 1;
    }
    all[..end].to_owned()
}

/// A [`RecoveryReport`] in the making.
#[derive(Debug)]
pub struct ReportBuilder {
    report: RecoveryReport,
    /// Tool names by the current turn's call ids (a result names its call's tool).
    names: BTreeMap<String, String>,
    /// Each tool result's line, which list it goes to, and its step (its execution id is
    /// known once the session is).
    effects: Vec<(EffectKind, EffectLine, u32)>,
}

#[derive(Debug, Clone, Copy)]
enum EffectKind {
    Kept,
    Unknown,
    NeverStarted,
}

impl ReportBuilder {
    /// Takes the next record into account.
    pub fn absorb(&mut self, record: &Record) {
        let report = &mut self.report;
        match &record.event {
            Event::TurnStart(_) => {
                self.names.clear();
                report.awaiting_approval.clear();
            }
            Event::StepStart(_) => report.awaiting_approval.clear(),
            Event::ApprovalRequested(requested) => report.awaiting_approval.push(WaitingLine {
                turn: requested.turn,
                call_id: requested.call_id.clone(),
                tool: requested.name.clone(),
                deciders: requested.deciders.clone(),
                deadline_ms: requested.deadline_ms,
                decided: None,
            }),
            Event::ApprovalDecided(decided) => {
                if let Some(w) = report.awaiting_approval.iter_mut().find(|w| w.call_id == decided.call_id) {
                    w.decided = Some(format!("{} by {}", decided.decision.as_str(), decided.by));
                }
            }
            Event::AssistantChunk(chunk) => {
                if let crate::event::Chunk::Usage { usage } = &chunk.chunk {
                    report.usage_per_turn.entry(chunk.turn).or_default().add(usage);
                    report.usage.add(usage);
                }
            }
            Event::ToolCall(call) => {
                self.names.insert(call.call_id.clone(), call.name.clone());
            }
            Event::AssistantMessage(message) => {
                for (id, name, _) in message.message.tool_calls() {
                    self.names.entry(id.to_owned()).or_insert_with(|| name.to_owned());
                }
            }
            Event::TurnEnd(end) => {
                report.awaiting_approval.clear();
                match end.reason {
                    TurnEndReason::Completed | TurnEndReason::MaxTokens => report.completed_turns += 1,
                    TurnEndReason::Interrupted => report.interrupted_turns += 1,
                    _ => report.other_turns += 1,
                }
            }
            Event::ToolResult(result) => {
                report.awaiting_approval.retain(|w| w.call_id != result.call_id);
                let line = EffectLine {
                    turn: result.turn,
                    call_id: result.call_id.clone(),
                    tool: self.names.get(&result.call_id).cloned().unwrap_or_default(),
                    execution_id: String::new(),
                    detail: text(&result.content),
                };
                let kind = match result.error.as_ref().map(|e| e.code) {
                    Some(ErrorCode::ToolOutcomeUnknown) => EffectKind::Unknown,
                    Some(ErrorCode::ToolNotStarted | ErrorCode::AbortedBeforeDispatch) => EffectKind::NeverStarted,
                    _ => EffectKind::Kept,
                };
                self.effects.push((kind, line, result.step));
            }
            _ => {}
        }
    }

    /// The report of session `session`, with the queue's rows of it still in flight.
    pub fn finish(self, session: &str, deliveries: &[Delivery]) -> RecoveryReport {
        let mut report = self.report;
        report.session = session.to_owned();
        for (kind, mut line, step) in self.effects {
            line.execution_id = execution_id(session, line.turn, step, &line.call_id);
            match kind {
                EffectKind::Kept => report.kept.push(line),
                EffectKind::Unknown => report.unknown.push(line),
                EffectKind::NeverStarted => report.never_started.push(line),
            }
        }
        let prefix = format!("{session}:");
        report.queued = deliveries
            .iter()
            .filter(|d| d.execution_id.starts_with(&prefix))
            .filter(|d| {
                matches!(d.status, DeliveryStatus::Pending | DeliveryStatus::Delivering | DeliveryStatus::Unknown)
            })
            .map(|d| (d.execution_id.clone(), d.status))
            .collect();
        report
    }
}

impl RecoveryReport {
    /// Builds the report from a session's records (after repair, or with the closers a repair
    /// would append) and the queue's rows.
    pub fn build(session: &str, records: &[Record], deliveries: &[Delivery]) -> Self {
        let mut builder = Self::builder();
        for record in records {
            builder.absorb(record);
        }
        builder.finish(session, deliveries)
    }

    /// A report built one record at a time (a session streamed from disk is never held
    /// whole): [`ReportBuilder::absorb`] every record in order, then [`ReportBuilder::finish`].
    pub fn builder() -> ReportBuilder {
        ReportBuilder { report: RecoveryReport::default(), names: BTreeMap::new(), effects: Vec::new() }
    }

    /// The report in words, for a person.
    pub fn narrate(&self) -> String {
        let mut out = format!(
            "Session {}: {} turn(s) completed, {} interrupted by a crash, {} ended otherwise.\n",
            self.session, self.completed_turns, self.interrupted_turns, self.other_turns
        );
        out.push_str(&format!(
            "Tokens: {} prompt ({} from cache), {} completion ({} reasoning), {} total.\n",
            self.usage.prompt_tokens,
            self.usage.cache_hit_tokens.unwrap_or(0),
            self.usage.completion_tokens,
            self.usage.reasoning_tokens.unwrap_or(0),
            self.usage.total_tokens
        ));
        out.push_str(&format!("Kept: {} tool effect(s) with recorded results.\n", self.kept.len()));
        for e in &self.kept {
            out.push_str(&format!("  - {} ({}) in turn {}: {}\n", e.tool, e.execution_id, e.turn, e.detail));
        }
        if self.unknown.is_empty() {
            out.push_str("Unknown: none.\n");
        } else {
            out.push_str(&format!("Unknown: {} effect(s) may or may not have happened. Nothing was resent. Verify each at its receiver:\n", self.unknown.len()));
            for e in &self.unknown {
                out.push_str(&format!(
                    "  - check {}'s receiver for execution {} (turn {}, call {})\n",
                    e.tool, e.execution_id, e.turn, e.call_id
                ));
            }
        }
        if self.never_started.is_empty() {
            out.push_str("Never started: none.\n");
        } else {
            out.push_str("Never started (did not happen; safe to retry if still needed):\n");
            for e in &self.never_started {
                out.push_str(&format!("  - {} ({})\n", e.tool, e.execution_id));
            }
        }
        if !self.awaiting_approval.is_empty() {
            out.push_str(&format!(
                "Waiting for approval: {} call(s); the turn is paused until each is decided (faultline approval approve|deny), then continued (agent run --resume):\n",
                self.awaiting_approval.len()
            ));
            for w in &self.awaiting_approval {
                let by = if w.deciders.is_empty() { "anyone".to_owned() } else { w.deciders.join(" or ") };
                let until = w.deadline_ms.map_or_else(String::new, |ms| format!(", until {ms} (epoch ms)"));
                let state = w.decided.as_ref().map_or_else(String::new, |d| format!("; {d}, not applied yet"));
                out.push_str(&format!(
                    "  - {} (call {}, turn {}): for {by}{until}{state}\n",
                    w.tool, w.call_id, w.turn
                ));
            }
        }
        if !self.queued.is_empty() {
            out.push_str("Still in the delivery queue:\n");
            for (id, status) in &self.queued {
                let note = match status {
                    DeliveryStatus::Pending => "deferred: will be sent by the next drain",
                    DeliveryStatus::Delivering => {
                        "being delivered, or abandoned: the next drain marks an abandoned one unknown"
                    }
                    _ => "unknown: resolve by hand after checking the receiver (faultline outbox resolve)",
                };
                out.push_str(&format!("  - {id}: {status} ({note})\n"));
            }
        }
        out
    }
}
