//! The delivery queue's interface: every transition a backend carries out (as
//! `machine.rs` decides it), durable when it returns `Ok`.

use super::{Claim, Delivery, DeliveryStatus, Enqueued, Finish, Resolution, SessionFence, SettleCause};
use crate::seams::OwnerIdentity;
use crate::Result;

/// A durable delivery queue. Every method's transition is durable when it returns `Ok`.
pub trait Outbox: Send + Sync {
    /// This queue's owner identity (recorded on claims).
    fn identity(&self) -> OwnerIdentity;

    /// Adds a pending row; the first payload for an id wins; a tombstoned id inserts nothing.
    fn enqueue(&self, execution_id: &str, payload: &str) -> Result<Enqueued>;

    /// [`Outbox::enqueue`] for a session's writer holding `fence`: refused with
    /// [`crate::Error::Fenced`], nothing written, when the session's epoch moved on; the row
    /// keeps the fence, so it is never claimed or finished once the session is taken over
    /// (`fence.rs`). A backend whose sessions carry no epochs enqueues as [`Outbox::enqueue`].
    fn enqueue_fenced(&self, fence: &SessionFence, execution_id: &str, payload: &str) -> Result<Enqueued> {
        let _ = fence;
        self.enqueue(execution_id, payload)
    }

    /// Atomically claims the oldest `pending` row for this owner, skipping rows whose session
    /// was taken over since they were enqueued.
    fn claim_next(&self) -> Result<Option<Claim>>;

    /// Finishes a row this owner is delivering. Fenced on `status = delivering AND owner =
    /// me` and on the row's session still standing at its epoch: returns `false` (changing
    /// nothing) otherwise. Delivered and failed rows drop their payload.
    fn finish(&self, execution_id: &str, outcome: Finish) -> Result<bool>;

    /// One row.
    fn get(&self, execution_id: &str) -> Result<Option<Delivery>>;

    /// Rows (optionally of one status), oldest first.
    fn list(&self, status: Option<DeliveryStatus>) -> Result<Vec<Delivery>>;

    /// Turns `delivering` rows whose owner is gone — another process that exited, or a claim
    /// of this queue that its drain dropped unfinished — into `unknown` ("exited during
    /// delivery; outcome unknown; not retried"). Returns their ids.
    fn recover_abandoned(&self) -> Result<Vec<String>>;

    /// Marks a claim of this queue as no longer handled (its drain stopped between the send
    /// and `finish`). The next `recover_abandoned` makes it `unknown`.
    fn abandon(&self, execution_id: &str);

    /// Turns a `delivering` row into `unknown`, or a never-claimed `pending` row into `failed`
    /// when `cause` is [`SettleCause::CancelledBeforeSend`]. Returns the resulting status.
    fn settle(&self, execution_id: &str, cause: SettleCause, reason: &str) -> Result<Option<DeliveryStatus>>;

    /// Moves terminal rows last changed before `before_ms` to tombstones. Returns how many.
    fn prune(&self, before_ms: u64) -> Result<usize>;

    /// An operator resolves an `unknown` row. A resend enqueues `<id>#resend-<n>` (a new id,
    /// never the old one) with the original payload and returns it.
    fn resolve(&self, execution_id: &str, resolution: Resolution) -> Result<Option<String>>;
}
