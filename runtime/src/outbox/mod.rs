//! The delivery queue (outbox) for side effects whose receipt can be lost
//! (FAILURE-DELIVERY-QUEUE, docs/internals/requirements.md).
//!
//! State machine: `pending → delivering → delivered | failed | unknown`. Every transition is
//! durable before it is acknowledged. A row is claimed at most once; a claimed row whose
//! receipt is lost becomes `unknown` and is never claimed again — only an operator resolves
//! it (delivered, failed, or a resend under a *new* execution id).

mod delivery;
mod drain;
mod evidence;
mod fence;
mod journal;
pub(crate) mod machine;
mod queue;
mod redact;
mod tool;

pub(crate) use delivery::{check_enqueue, clip};
pub use delivery::{
    Claim, Delivery, DeliveryStatus, Enqueued, Finish, OutboxError, Resolution, SettleCause, EXECUTION_ID_BYTES_MAX,
    OUTCOME_TEXT_BYTES_MAX, PAYLOAD_BYTES_MAX,
};
pub use drain::{drain, enqueue_and_wait, Deliverer, DeliveryError, DrainReport, WaitOutcome};
pub use evidence::QueueEvidence;
pub use fence::{SessionEpochs, SessionFence};
pub use journal::JournalOutbox;
pub use queue::Outbox;
pub use redact::redact;
pub use tool::OutboxTool;
