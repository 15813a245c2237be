//! The delivery-queue protocol, decided once for every backend.
//!
//! Each transition is one pure function from the row as a backend read it (inside its lock,
//! or inside its `BEGIN IMMEDIATE` transaction) to the [`Op`]s that carry the transition out.
//! [`apply`] gives the row an `Op` leaves behind. The journal appends the `Op` as a line and
//! applies it in memory; the SQLite backend applies it to the row it read and writes the
//! result in the same transaction. So the rules — who may claim, the fence on finish, which
//! rows a settle may touch, what a resend creates — exist here and nowhere else, and a planted
//! bug in them is a bug in every backend.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{
    clip, Claim, Delivery, DeliveryStatus, Enqueued, Finish, OutboxError, Resolution, SessionFence, SettleCause,
};
use crate::seams::{Liveness, OwnerIdentity, Process};
use crate::secrets::Scrubber;

/// Why a claimed row whose owner vanished is `unknown` (it may have been sent).
pub(crate) const ABANDONED_REASON: &str = "exited during delivery; outcome unknown; not retried";

/// Longest chain of resends of one execution id (`<id>#resend-<n>`).
pub(crate) const RESENDS_MAX: u32 = 1000;

/// One durable change of the queue. The journal's line format (so its serde shape is stable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Op {
    /// A new pending row.
    Enqueue {
        id: String,
        payload: String,
        at: u64,
        #[serde(default)]
        resend_of: Option<String>,
        /// The session and epoch of the writer that enqueued it (absent: no session's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<SessionFence>,
    },
    /// A pending row is claimed by `owner`.
    Claim { id: String, owner: OwnerIdentity, at: u64 },
    /// A row moves to `status` with its outcome text.
    Finish {
        id: String,
        status: DeliveryStatus,
        #[serde(default)]
        result: Option<String>,
        #[serde(default)]
        error: Option<String>,
        at: u64,
    },
    /// A terminal row becomes a tombstone.
    Prune { id: String, at: u64 },
}

impl Op {
    /// The op's name, as errors and assertions say it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::Enqueue { .. } => "enqueue",
            Op::Claim { .. } => "claim",
            Op::Finish { .. } => "finish",
            Op::Prune { .. } => "prune",
        }
    }

    /// The execution id the op changes.
    pub(crate) fn id(&self) -> &str {
        match self {
            Op::Enqueue { id, .. } | Op::Claim { id, .. } | Op::Finish { id, .. } | Op::Prune { id, .. } => id,
        }
    }
}

/// What is left of a row after an op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum After {
    /// The row, changed (boxed: a row is far larger than a tombstone).
    Row(Box<Delivery>),
    /// The row was pruned: only its final status stays, to block a second enqueue.
    Tombstone(DeliveryStatus),
}

/// Whether `op` is a transition the decisions below can make from `before`: an enqueue of a
/// free id, a claim of a claimable row, a prune of a terminal row, and a finish along one of
/// the queue's edges — `delivering` to any outcome (finish, an abandoned claim, a settle),
/// `pending` to `failed` (a settle before any send) and `unknown` to `delivered` or `failed`
/// (an operator). Nothing ever leaves `delivered` or `failed`, and no finish skips the claim
/// to `delivered` or `unknown`. A journal replay refuses a line outside these as corruption.
pub(crate) fn transition_fits(before: Option<&Delivery>, op: &Op) -> bool {
    use DeliveryStatus::{Delivered, Delivering, Failed, Pending, Unknown};
    match (before, op) {
        (None, Op::Enqueue { .. }) => true,
        (Some(row), Op::Claim { .. }) => claimable_statuses().contains(&row.status),
        (Some(row), Op::Prune { .. }) => row.status.is_terminal(),
        (Some(row), Op::Finish { status, .. }) => matches!(
            (row.status, *status),
            (Delivering, Delivered | Failed | Unknown) | (Pending, Failed) | (Unknown, Delivered | Failed)
        ),
        _ => false,
    }
}

/// The row `op` leaves, given the row before it. An op the decisions below produced always
/// finds the row it expects along one of the queue's edges ([`transition_fits`]); anything
/// else is a backend bug, so it is asserted.
pub(crate) fn apply(before: Option<&Delivery>, op: &Op) -> After {
    assert!(
        transition_fits(before, op),
        "{} of delivery {} does not fit its row ({:?})",
        op.name(),
        op.id(),
        before.map(|row| row.status)
    );
    match op {
        Op::Enqueue { id, payload, at, resend_of, fence } => {
            assert!(before.is_none(), "enqueue of existing delivery {id}");
            After::Row(Box::new(Delivery {
                execution_id: id.clone(),
                status: DeliveryStatus::Pending,
                payload: Some(payload.clone()),
                owner: None,
                result: None,
                error: None,
                claimed: false,
                resend_of: resend_of.clone(),
                updated_at: *at,
                session: fence.clone(),
            }))
        }
        Op::Claim { id, owner, at } => {
            let mut row = before.unwrap_or_else(|| panic!("claim of missing delivery {id}")).clone();
            row.status = DeliveryStatus::Delivering;
            row.owner = Some(owner.clone());
            row.claimed = true;
            row.updated_at = *at;
            After::Row(Box::new(row))
        }
        Op::Finish { id, status, result, error, at } => {
            let mut row = before.unwrap_or_else(|| panic!("finish of missing delivery {id}")).clone();
            row.status = *status;
            row.result.clone_from(result);
            row.error.clone_from(error);
            row.updated_at = *at;
            if status.drops_payload() {
                row.payload = None;
            }
            After::Row(Box::new(row))
        }
        Op::Prune { id, .. } => {
            let row = before.unwrap_or_else(|| panic!("prune of missing delivery {id}"));
            assert!(row.status.is_terminal(), "prune of {} delivery {id}", row.status);
            After::Tombstone(row.status)
        }
    }
}

/// What a backend found under an execution id before an enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// Nothing: the id is free.
    Nothing,
    /// A live row with this status.
    Row(DeliveryStatus),
    /// A tombstone with this final status.
    Tombstone(DeliveryStatus),
}

/// Enqueue: the first payload for an id wins; a tombstoned id inserts nothing. A writer's
/// enqueue carries its `fence` and `current`, its session's epoch as read in the same
/// transaction: once the session moved on, nothing is enqueued ([`crate::Error::Fenced`]). A
/// session the queue's store does not hold (`current` is `None`: its writer's store is
/// another) gives no epoch to compare, and its row keeps no fence.
pub(crate) fn enqueue(
    found: Found,
    id: &str,
    payload: &str,
    fence: Option<(&SessionFence, Option<u64>)>,
    now: u64,
) -> crate::Result<(Enqueued, Option<Op>)> {
    super::check_enqueue(id, payload)?;
    let fence = match fence {
        Some((fence, Some(current))) if !fence.holds(Some(current)) => {
            return Err(crate::Error::Fenced { id: fence.session.clone(), token: fence.epoch, current })
        }
        Some((fence, Some(_))) => Some(fence.clone()),
        Some((_, None)) | None => None,
    };
    Ok(match found {
        Found::Tombstone(status) => (Enqueued::Tombstoned(status), None),
        Found::Row(status) => (Enqueued::Existing(status), None),
        Found::Nothing => (
            Enqueued::New,
            Some(Op::Enqueue { id: id.to_owned(), payload: payload.to_owned(), at: now, resend_of: None, fence }),
        ),
    })
}

/// The statuses a claim may take. Only `pending`: an `unknown` row may have been delivered,
/// and sending it again is the blind resend the queue exists to prevent.
pub(crate) fn claimable_statuses() -> &'static [DeliveryStatus] {
    if crate::testing::bugs::planted("unknown-claimable") {
        &[DeliveryStatus::Pending, DeliveryStatus::Unknown]
    } else {
        &[DeliveryStatus::Pending]
    }
}

/// Whether `row`'s session still stands at the epoch the row was enqueued under (a row of
/// no session always does). `current` is the session's epoch as the backend read it.
fn session_holds(row: &Delivery, current: Option<u64>) -> bool {
    row.session.as_ref().is_none_or(|fence| fence.holds(current))
}

/// Whether a claim may take `row`: its status is claimable and its session (if any) still
/// stands at the row's epoch (`current`, read in the claim's transaction).
pub(crate) fn claimable(row: &Delivery, current: Option<u64>) -> bool {
    claimable_statuses().contains(&row.status) && session_holds(row, current)
}

/// Claim: `row` is the oldest row [`claimable`] says a claim may take.
pub(crate) fn claim(row: &Delivery, me: &OwnerIdentity, now: u64) -> (Claim, Op) {
    assert!(claimable_statuses().contains(&row.status), "claim of a {} delivery", row.status);
    let claim = Claim { execution_id: row.execution_id.clone(), payload: row.payload.clone().unwrap_or_default() };
    (claim, Op::Claim { id: row.execution_id.clone(), owner: me.clone(), at: now })
}

/// Finish, fenced: only the owner of a row still being delivered may finish it, and only
/// while the row's session stands at the row's epoch (`current`, read in the same
/// transaction); otherwise nothing changes (`None`). Outcome text is scrubbed by value, then
/// clipped.
pub(crate) fn finish(
    row: Option<&Delivery>,
    me: &OwnerIdentity,
    outcome: Finish,
    current: Option<u64>,
    secrets: &Scrubber,
    now: u64,
) -> Option<Op> {
    let row = row?;
    if row.status != DeliveryStatus::Delivering || row.owner.as_ref() != Some(me) {
        return None;
    }
    if !session_holds(row, current) {
        return None;
    }
    let text = |t: &str| Some(clip(&secrets.scrub(t)));
    let (status, result, error) = match outcome {
        Finish::Delivered(answer) => (DeliveryStatus::Delivered, text(&answer), None),
        Finish::Failed(reason) => (DeliveryStatus::Failed, None, text(&reason)),
        Finish::Unknown(reason) => (DeliveryStatus::Unknown, None, text(&reason)),
    };
    Some(Op::Finish { id: row.execution_id.clone(), status, result, error, at: now })
}

/// Recover abandoned: a `delivering` row whose owner is gone — a claim of this queue its
/// drain no longer handles, or another process that exited — becomes `unknown`.
pub(crate) fn recover_abandoned(
    row: &Delivery,
    me: &OwnerIdentity,
    in_flight: &BTreeSet<String>,
    process: &dyn Process,
    now: u64,
) -> Option<Op> {
    if row.status != DeliveryStatus::Delivering {
        return None;
    }
    let gone = match &row.owner {
        None => true,
        Some(owner) if owner.instance == me.instance => !in_flight.contains(&row.execution_id),
        Some(owner) => process.liveness(owner) == Liveness::Dead,
    };
    gone.then(|| Op::Finish {
        id: row.execution_id.clone(),
        status: DeliveryStatus::Unknown,
        result: None,
        error: Some(ABANDONED_REASON.to_owned()),
        at: now,
    })
}

/// Settle: a `delivering` row becomes `unknown`; a `pending` row becomes `failed` only when
/// its call was cancelled before any send, or, taken by repair, when it was never claimed
/// (and then nothing else changes). Returns the row's status afterwards.
pub(crate) fn settle(
    row: Option<&Delivery>,
    cause: SettleCause,
    reason: &str,
    secrets: &Scrubber,
    now: u64,
) -> (Option<DeliveryStatus>, Option<Op>) {
    let Some(row) = row else { return (None, None) };
    let next = match (row.status, cause) {
        (DeliveryStatus::Pending, SettleCause::TakenByRepair) if !row.claimed => DeliveryStatus::Failed,
        (other, SettleCause::TakenByRepair) => return (Some(other), None),
        // Only a fenced row: its claimer can no longer finish it. Another's claimer still can.
        (DeliveryStatus::Delivering, SettleCause::TakenOver) if row.session.is_some() => DeliveryStatus::Unknown,
        (other, SettleCause::TakenOver) => return (Some(other), None),
        (DeliveryStatus::Delivering, _) => DeliveryStatus::Unknown,
        (DeliveryStatus::Pending, SettleCause::CancelledBeforeSend) => DeliveryStatus::Failed,
        (other, _) => return (Some(other), None),
    };
    let op = Op::Finish {
        id: row.execution_id.clone(),
        status: next,
        result: None,
        error: Some(clip(&secrets.scrub(reason))),
        at: now,
    };
    (Some(next), Some(op))
}

/// Prune: a terminal row last changed before `before_ms` becomes a tombstone.
pub(crate) fn prune(row: &Delivery, before_ms: u64, now: u64) -> Option<Op> {
    (row.status.is_terminal() && row.updated_at < before_ms)
        .then(|| Op::Prune { id: row.execution_id.clone(), at: now })
}

/// Resolve: an operator settles an `unknown` row. A resend fails the old id and enqueues the
/// payload under `<id>#resend-<n>`, the first `n` that `taken` says is free — never the old id.
pub(crate) fn resolve(
    row: Option<&Delivery>,
    id: &str,
    resolution: Resolution,
    mut taken: impl FnMut(&str) -> crate::Result<bool>,
    secrets: &Scrubber,
    now: u64,
) -> crate::Result<(Option<String>, Vec<Op>)> {
    let row = row.ok_or_else(|| OutboxError::NotFound(id.to_owned()))?;
    if row.status != DeliveryStatus::Unknown {
        return Err(OutboxError::NotUnknown { id: id.to_owned(), status: row.status }.into());
    }
    let fail = |error: String| Op::Finish {
        id: id.to_owned(),
        status: DeliveryStatus::Failed,
        result: None,
        error: Some(error),
        at: now,
    };
    Ok(match resolution {
        Resolution::Delivered => {
            let result = Some("confirmed by an operator".to_owned());
            let op = Op::Finish { id: id.to_owned(), status: DeliveryStatus::Delivered, result, error: None, at: now };
            (None, vec![op])
        }
        Resolution::Failed(reason) => (None, vec![fail(clip(&secrets.scrub(&format!("operator: {reason}"))))]),
        Resolution::Resend => {
            let payload = row.payload.clone().ok_or_else(|| OutboxError::NoPayload(id.to_owned()))?;
            let mut new_id = None;
            for n in 1..=RESENDS_MAX {
                let candidate = format!("{id}#resend-{n}");
                if !taken(&candidate)? {
                    new_id = Some(candidate);
                    break;
                }
            }
            let new_id = new_id.ok_or_else(|| OutboxError::TooManyResends(id.to_owned()))?;
            super::check_enqueue(&new_id, &payload)?;
            let ops = vec![
                fail(format!("operator: resent as {new_id}")),
                // An operator's resend belongs to no session's writer: it carries no fence.
                Op::Enqueue { id: new_id.clone(), payload, at: now, resend_of: Some(id.to_owned()), fence: None },
            ];
            (Some(new_id), ops)
        }
    })
}
