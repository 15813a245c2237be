//! A person in the loop (FAILURE-APPROVAL): a tool that needs a decision before it runs.
//!
//! The protocol is records in the session, never an in-memory wait: `tool/call` durable →
//! `approval/requested` durable (the arguments' digest, who may decide, a deadline) → the turn
//! pauses. A decision is an `approval/decided` record appended by whoever owns the session
//! then (the paused agent itself, or [`decide`], which takes the session over like any
//! writer, so a stale worker is fenced out). Continuing the turn dispatches an approved call
//! once — `approval/dispatched` durable before the body, so a crash after it is
//! `TOOL_OUTCOME_UNKNOWN`, never a second run — and answers a denied or expired one with
//! `APPROVAL_DENIED` or `APPROVAL_EXPIRED`, which the model reads like any result.

mod decide;
mod needs;
mod pending;
mod policy;

pub(crate) use decide::check_against;
pub use decide::{check_decision, decide, Decided, DecisionRequest};
pub use needs::NeedsApproval;
pub use pending::{awaiting_approval, PendingApproval};
pub use policy::{
    ApprovalPolicy, APPROVAL_DEADLINE_MS_MAX, APPROVAL_DECIDERS_MAX, APPROVAL_NAME_BYTES_MAX, APPROVAL_REASON_BYTES_MAX,
};
