//! One fencing rule for everything a session owns (FAILURE-LEASE-EPOCH, issue 54).
//!
//! A delivery enqueued by a session's writer carries the session and the epoch that writer
//! holds. Every transition that could start or record its effect — the enqueue, the claim,
//! the finish — first reads the session's current epoch in the same transaction and refuses
//! when it moved on: a worker whose session was taken over (a zombie: stopped past its lease,
//! then woken) can queue nothing new, no drainer sends what it queued, and no receipt of a
//! claim made before the takeover is recorded over the new owner's repair, which settled the
//! row `unknown` as the transcript says.
//!
//! Backends whose sessions carry no epochs (one host, ownership judged by process liveness:
//! JSONL and SQLite) keep no fence: their zombie is a live process, and a live process's
//! session is never taken over. Nor does a queue whose store does not hold the session (an
//! embedder's sessions kept elsewhere): an epoch means something only in its own store.

use serde::{Deserialize, Serialize};

/// The session a delivery belongs to, at the epoch its writer held when it was enqueued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionFence {
    /// The session id.
    pub session: String,
    /// The epoch (the writer's fencing token) the delivery was enqueued under.
    pub epoch: u64,
}

impl SessionFence {
    /// The fence of a session's writer at `epoch`.
    pub fn new(session: impl Into<String>, epoch: u64) -> Self {
        Self { session: session.into(), epoch }
    }

    /// Whether the session still stands at this epoch, given its `current` one as read in the
    /// transition's transaction (`None`: no such session).
    pub(crate) fn holds(&self, current: Option<u64>) -> bool {
        current == Some(self.epoch) || crate::testing::bugs::planted("queue-epoch-unfenced")
    }
}

/// Reads sessions' current epochs, for a queue kept apart from its sessions' store (the
/// simulator's fleet: a journal beside a leased memory store, one lock order, one thread).
pub trait SessionEpochs: Send + Sync {
    /// The current epoch of `session`; `None` when there is no such session.
    fn epoch(&self, session: &str) -> Option<u64>;
}
