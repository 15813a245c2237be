//! Deciding: a person's decision checked against what the session waits for, then made a
//! durable record by whoever owns the session.

use super::pending::{awaiting_approval, PendingApproval};
use super::policy::{APPROVAL_NAME_BYTES_MAX, APPROVAL_REASON_BYTES_MAX};
use crate::event::{ApprovalDecided, Decision, Event, Record};
use crate::store::{Opened, SessionId, Store, Takeover};
use crate::{Error, Result};

/// A person's decision on one call. It never carries arguments: it is bound to the digest of
/// the call's own.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecisionRequest {
    /// The call decided.
    pub call_id: String,
    /// Approve or deny.
    pub decision: Decision,
    /// Who decides (1..=[`APPROVAL_NAME_BYTES_MAX`] bytes; one of the call's deciders when it
    /// names any).
    pub by: String,
    /// Why (at most [`APPROVAL_REASON_BYTES_MAX`] bytes); a denial's reason is what the model
    /// reads.
    pub reason: Option<String>,
    /// The start of the digest the person was shown, when they were shown one: a call whose
    /// digest does not start with it is refused (its arguments are not the ones they saw).
    pub digest_prefix: Option<String>,
}

impl DecisionRequest {
    /// `decision` on `call_id` by `by`.
    pub fn new(call_id: impl Into<String>, decision: Decision, by: impl Into<String>) -> Self {
        Self { call_id: call_id.into(), decision, by: by.into(), reason: None, digest_prefix: None }
    }

    /// With a reason.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Bound to the digest the person was shown.
    pub fn digest_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.digest_prefix = Some(prefix.into());
        self
    }
}

/// A decision written: the record, and the call it decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decided {
    /// The `approval/decided` appended.
    pub record: ApprovalDecided,
    /// The call as it waited.
    pub call: PendingApproval,
}

fn refused(why: impl Into<String>) -> Error {
    Error::ApprovalRefused(why.into())
}

/// The `approval/decided` that `request` makes of what `records` wait for at `now_ms`, or why
/// it is refused: a call not waiting (never requested, decided already — the refusal names the
/// first decision —, answered, expired), a decider the call does not name, a digest other than
/// the one the person saw, or malformed text.
pub fn check_decision(records: &[Record], request: &DecisionRequest, now_ms: u64) -> Result<Decided> {
    check_against(awaiting_approval(records), request, now_ms, || not_waiting(records, &request.call_id))
}

/// [`check_decision`] against the calls `waiting`; `gone` says why a call is not among them.
pub(crate) fn check_against(
    waiting: Vec<PendingApproval>,
    request: &DecisionRequest,
    now_ms: u64,
    gone: impl FnOnce() -> String,
) -> Result<Decided> {
    if request.by.trim().is_empty() || request.by.len() > APPROVAL_NAME_BYTES_MAX {
        return Err(refused(format!("the decider's name must be 1..={APPROVAL_NAME_BYTES_MAX} bytes")));
    }
    if request.reason.as_ref().is_some_and(|r| r.len() > APPROVAL_REASON_BYTES_MAX) {
        return Err(refused(format!("the reason is above {APPROVAL_REASON_BYTES_MAX} bytes")));
    }
    let Some(call) = waiting.into_iter().find(|p| p.call_id == request.call_id) else {
        return Err(refused(gone()));
    };
    if let Some((decision, by, reason)) = &call.decision {
        let why = reason.as_deref().map_or_else(String::new, |r| format!(" ({r})"));
        return Err(refused(format!(
            "call {} was already {} by {by}{why}; a call takes one decision",
            call.call_id,
            decision.as_str()
        )));
    }
    if !call.deciders.is_empty() && !call.deciders.contains(&request.by) {
        return Err(refused(format!(
            "{} may not decide call {}: its deciders are {}",
            request.by,
            call.call_id,
            call.deciders.join(", ")
        )));
    }
    if let Some(deadline) = call.deadline_ms.filter(|deadline| now_ms >= *deadline) {
        return Err(refused(format!(
            "call {} expired at {deadline} (epoch ms); continuing the session answers it APPROVAL_EXPIRED",
            call.call_id
        )));
    }
    if let Some(prefix) = &request.digest_prefix {
        if prefix.is_empty() || !call.digest.starts_with(prefix.as_str()) {
            return Err(refused(format!(
                "call {} has digest {}, not the {prefix} you were shown: its arguments are not the ones you saw",
                call.call_id, call.digest
            )));
        }
    }
    let record = ApprovalDecided {
        turn: call.turn,
        step: call.step,
        call_id: call.call_id.clone(),
        digest: call.digest.clone(),
        decision: request.decision,
        by: request.by.clone(),
        reason: request.reason.clone(),
    };
    Ok(Decided { record, call })
}

/// Why `call_id` takes no decision: what became of it, from the records.
fn not_waiting(records: &[Record], call_id: &str) -> String {
    let mut decided: Option<String> = None;
    let mut answered: Option<String> = None;
    let mut requested = false;
    for record in records {
        match &record.event {
            Event::ApprovalRequested(r) if r.call_id == call_id => requested = true,
            Event::ApprovalDecided(d) if d.call_id == call_id => {
                decided = Some(format!("{} by {} in turn {}", d.decision.as_str(), d.by, d.turn));
            }
            Event::ToolResult(r) if r.call_id == call_id => {
                answered = Some(r.error.as_ref().map_or_else(|| "ok".to_owned(), |e| e.code.to_string()));
            }
            _ => {}
        }
    }
    match (requested, decided, answered) {
        (false, _, _) => format!("no call {call_id} waits for approval in this session"),
        (true, Some(decided), Some(result)) => {
            format!("call {call_id} is no longer waiting: it was {decided} and has its result ({result})")
        }
        (true, None, Some(result)) => {
            format!("call {call_id} is no longer waiting: it has its result ({result}) without a decision")
        }
        (true, _, None) => format!("call {call_id} is no longer waiting"),
    }
}

/// Decides a call of session `id` in `store`: refuses a session that needs crash repair,
/// takes the session over from a dead owner (a live one is refused: decide through it), checks `request` against what the session waits
/// for, appends the `approval/decided` durably under this writer's epoch, and releases it.
/// Nothing is written when the decision is refused. `scrub` is applied to the reason.
pub fn decide(
    store: &dyn Store,
    id: &SessionId,
    request: &DecisionRequest,
    now_ms: u64,
    scrub: &crate::secrets::Scrubber,
) -> Result<Decided> {
    // Crash repair belongs to whoever continues the session, with its delivery queue as
    // evidence: a decision never commits one.
    if store.inspect(id)?.needs_repair() {
        return Err(refused(format!(
            "session {id} needs crash repair first (it stopped mid-turn): continue it with `agent run --resume`, or run `transcript repair`"
        )));
    }
    let Opened { mut log, loaded } = store.open(id, Takeover::IfDead)?;
    let mut request = request.clone();
    request.reason = request.reason.map(|r| scrub.scrub(&r));
    let decided = match check_decision(&loaded.records, &request, now_ms) {
        Ok(decided) => decided,
        Err(e) => {
            log.close()?;
            return Err(e);
        }
    };
    let record = Record::new(log.next_seq(), now_ms, Event::ApprovalDecided(decided.record.clone()));
    log.append(std::slice::from_ref(&record))?;
    log.close()?;
    Ok(decided)
}
