//! A delivery and its lifecycle as the queue's backends share them: statuses, claims, finishes,
//! resolutions, the queue's error and its limits.

use super::fence::SessionFence;
use crate::seams::OwnerIdentity;
use serde::{Deserialize, Serialize};

/// Longest payload accepted, in bytes (1 MiB).
pub const PAYLOAD_BYTES_MAX: usize = 1024 * 1024;
/// Longest stored error or result text, in bytes.
pub const OUTCOME_TEXT_BYTES_MAX: usize = 4096;
/// Longest execution id, in bytes.
pub const EXECUTION_ID_BYTES_MAX: usize = 512;

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Queued, not yet claimed.
    Pending,
    /// Claimed by an owner; the send may be under way.
    Delivering,
    /// The receiver confirmed it.
    Delivered,
    /// The receiver refused it, or it was cancelled before any send.
    Failed,
    /// Claimed, but the receipt was lost: it may or may not have happened. Never retried.
    Unknown,
}

impl DeliveryStatus {
    /// Terminal statuses drop their payload and may be pruned to tombstones.
    pub fn is_terminal(self) -> bool {
        matches!(self, DeliveryStatus::Delivered | DeliveryStatus::Failed | DeliveryStatus::Unknown)
    }

    /// `delivered` and `failed` rows drop their payload. An `unknown` row keeps it until an
    /// operator resolves it, because a resend needs it.
    pub fn drops_payload(self) -> bool {
        matches!(self, DeliveryStatus::Delivered | DeliveryStatus::Failed)
    }

    /// Parses the snake_case name.
    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_value(serde_json::Value::String(text.to_owned())).ok()
    }
}

impl std::fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = serde_json::to_value(self).expect("statuses serialise");
        f.write_str(text.as_str().unwrap_or("?"))
    }
}

/// One row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Delivery {
    /// Stable id of the effect (session:turn:step:call).
    pub execution_id: String,
    /// Status.
    pub status: DeliveryStatus,
    /// The payload (dropped once delivered or failed).
    pub payload: Option<String>,
    /// Who claimed it.
    pub owner: Option<OwnerIdentity>,
    /// The receiver's answer (delivered rows).
    pub result: Option<String>,
    /// Why it failed or is unknown (redacted).
    pub error: Option<String>,
    /// Whether it was ever claimed.
    pub claimed: bool,
    /// The execution id this one re-sends, if it is an operator resend.
    pub resend_of: Option<String>,
    /// Epoch ms of the last transition.
    pub updated_at: u64,
    /// The session and epoch it was enqueued under, when its backend keeps epochs: once the
    /// session moves on, the row is neither claimed nor finished (`fence.rs`).
    pub session: Option<SessionFence>,
}

/// What `enqueue` did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Enqueued {
    /// A new pending row.
    New,
    /// The id exists: nothing changed (the first payload wins).
    Existing(DeliveryStatus),
    /// The id was pruned: its tombstone keeps it from being enqueued again.
    Tombstoned(DeliveryStatus),
}

/// A claimed row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The id.
    pub execution_id: String,
    /// Its payload.
    pub payload: String,
}

/// How a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Finish {
    /// Confirmed, with the receiver's answer.
    Delivered(String),
    /// Refused, with the reason (stored redacted).
    Failed(String),
    /// The receipt was lost (timeout, crash, broken connection after the send).
    Unknown(String),
}

/// An operator's resolution of an `unknown` row, after checking the receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resolution {
    /// It did happen.
    Delivered,
    /// It did not happen and should not.
    Failed(String),
    /// It did not happen: send it again under a new id linked to this one.
    Resend,
}

/// Why a row is settled without a receipt (the closed set `settle` decides on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SettleCause {
    /// A wait deadline passed: a claimed row becomes `unknown`; a pending row stays pending.
    Deadline,
    /// Crash repair closed the row's call as not started: a never-claimed row becomes
    /// `failed` (it must never be sent); a claimed row becomes `unknown`.
    CancelledBeforeSend,
    /// Crash repair takes a row out of the queue before it may say "it did not happen": a
    /// `pending` row never claimed becomes `failed` in the same transaction that reads it; any
    /// other row is left as it is (a claim that won the race is the claimer's to finish).
    TakenByRepair,
    /// Crash repair took the row's session over while the row was being delivered: a
    /// `delivering` row that carries its session's fence becomes `unknown`, as the repaired transcript says (its claimer, fenced
    /// by the new epoch, can no longer finish it); any other row is left as it is.
    TakenOver,
}

/// A delivery-queue request the protocol refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// No row has this execution id.
    #[error("delivery {0} not found")]
    NotFound(String),
    /// Only `unknown` rows are resolved by hand.
    #[error("delivery {id} is {status}; only unknown deliveries are resolved by hand")]
    NotUnknown {
        /// The execution id.
        id: String,
        /// Its status.
        status: DeliveryStatus,
    },
    /// A resend needs the payload, and this row no longer has one.
    #[error("delivery {0} has no payload left to resend")]
    NoPayload(String),
    /// Every resend id up to the limit is taken.
    #[error("delivery {0} was resent too many times")]
    TooManyResends(String),
    /// The execution id is empty, too long or holds control characters.
    #[error("execution id must be 1..={max} printable bytes", max = EXECUTION_ID_BYTES_MAX)]
    BadExecutionId,
    /// The payload is above [`PAYLOAD_BYTES_MAX`].
    #[error("payload is {0} bytes, above the {max}-byte limit", max = PAYLOAD_BYTES_MAX)]
    PayloadTooLarge(usize),
}

/// Truncates stored outcome text (for backends).
pub(crate) fn clip(text: &str) -> String {
    let mut end = text.len().min(OUTCOME_TEXT_BYTES_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Checks an execution id and payload before they are stored.
pub(crate) fn check_enqueue(execution_id: &str, payload: &str) -> std::result::Result<(), OutboxError> {
    if execution_id.is_empty()
        || execution_id.len() > EXECUTION_ID_BYTES_MAX
        || execution_id.chars().any(char::is_control)
    {
        return Err(OutboxError::BadExecutionId);
    }
    if payload.len() > PAYLOAD_BYTES_MAX {
        return Err(OutboxError::PayloadTooLarge(payload.len()));
    }
    Ok(())
}
