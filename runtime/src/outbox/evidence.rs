//! The delivery queue as crash-repair evidence (reconciliation, seed 004 §15.6).

use std::sync::Arc;

use super::{DeliveryStatus, Outbox};
use crate::store::{Evidence, OutcomeEvidence};

/// Answers crash repair from the queue's rows. Lookups only read; cancelling a never-claimed
/// row happens after the repair that relied on it was committed.
#[derive(Clone)]
pub struct QueueEvidence(pub Arc<dyn Outbox>);

impl std::fmt::Debug for QueueEvidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueueEvidence")
    }
}

impl OutcomeEvidence for QueueEvidence {
    fn lookup(&self, execution_id: &str) -> Option<Evidence> {
        let row = self.0.get(execution_id).ok()??;
        Some(match row.status {
            DeliveryStatus::Delivered => Evidence::Delivered(row.result.unwrap_or_default()),
            DeliveryStatus::Failed => Evidence::Failed(row.error.unwrap_or_default()),
            DeliveryStatus::Pending if !row.claimed => Evidence::NeverClaimed,
            status => Evidence::Uncertain {
                status: status.to_string(),
                detail: row.error.unwrap_or_else(|| "no receipt recorded".into()),
            },
        })
    }

    fn cancel_never_claimed(&self, execution_id: &str) {
        // Best effort: if it fails, the row stays pending and a later drain would send an
        // effect the model was told did not happen, so say so loudly.
        if let Err(e) = self.0.settle(
            execution_id,
            super::SettleCause::CancelledBeforeSend,
            "cancelled by crash repair: its call was closed as not started",
        ) {
            tracing_free_warn(&format!("could not cancel delivery {execution_id}: {e}"));
        }
    }
}

/// The runtime has no logger; a failed cancellation is rare enough for stderr.
#[allow(clippy::print_stderr)]
fn tracing_free_warn(message: &str) {
    eprintln!("faultline: warning: {message}");
}
