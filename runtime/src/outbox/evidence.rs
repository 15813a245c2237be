//! The delivery queue as crash-repair evidence (reconciliation, FAILURE-CRASH-REPAIR).

use std::sync::Arc;

use super::{DeliveryStatus, Outbox, SettleCause};
use crate::store::{Evidence, OutcomeEvidence};

/// What a queue row that was never claimed is settled with when repair takes it.
const TAKEN_REASON: &str = "taken out of the queue by crash repair: its call was closed as not started";
/// What a row in flight is settled with when repair takes its session over.
const TAKEN_OVER_REASON: &str =
    "its session was taken over during delivery (crash repair); outcome unknown; not retried";

/// Answers crash repair from the queue's rows.
///
/// For repair ([`QueueEvidence::new`]) "it did not happen" is decided only by taking the row
/// out of the queue: a `pending` row never claimed becomes `failed` in the one transaction
/// that reads it, so no drainer can claim and send it after repair told the model it did not
/// happen. A row a drainer claimed first is uncertain. For inspection
/// ([`QueueEvidence::read_only`]) lookups only read, and say what repair would find.
#[derive(Clone)]
pub struct QueueEvidence {
    outbox: Arc<dyn Outbox>,
    take: bool,
}

impl std::fmt::Debug for QueueEvidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueEvidence").field("take", &self.take).finish_non_exhaustive()
    }
}

impl QueueEvidence {
    /// Evidence for crash repair: a never-claimed row is taken out of the queue as it is read.
    pub fn new(outbox: Arc<dyn Outbox>) -> Self {
        Self { outbox, take: true }
    }

    /// Evidence for inspection: nothing is written.
    pub fn read_only(outbox: Arc<dyn Outbox>) -> Self {
        Self { outbox, take: false }
    }
}

impl OutcomeEvidence for QueueEvidence {
    fn lookup(&self, execution_id: &str) -> Option<Evidence> {
        let row = self.outbox.get(execution_id).ok()??;
        if row.status == DeliveryStatus::Pending && !row.claimed && self.take {
            match self.outbox.settle(execution_id, SettleCause::TakenByRepair, TAKEN_REASON) {
                Ok(Some(DeliveryStatus::Failed)) => return Some(Evidence::NeverClaimed),
                // A drainer claimed it between the read and the take: read it again.
                Ok(_) => return self.outbox.get(execution_id).ok()?.map(|row| evidence_of(&row)),
                Err(e) => {
                    return Some(Evidence::Uncertain {
                        status: row.status.to_string(),
                        detail: format!("it could not be taken out of the queue: {e}"),
                    })
                }
            }
        }
        if row.status == DeliveryStatus::Delivering && row.session.is_some() && self.take {
            // Its claimer is fenced by the new epoch and can no longer finish it: the queue
            // says what the repaired transcript will, and nothing resends it.
            if let Err(e) = self.outbox.settle(execution_id, SettleCause::TakenOver, TAKEN_OVER_REASON) {
                return Some(Evidence::Uncertain {
                    status: row.status.to_string(),
                    detail: format!("it could not be settled unknown: {e}"),
                });
            }
            return self.outbox.get(execution_id).ok()?.map(|row| evidence_of(&row));
        }
        Some(evidence_of(&row))
    }

    fn cancel_never_claimed(&self, execution_id: &str) {
        // Already taken when it was looked up (repair); kept for a row some other evidence
        // called never claimed. Best effort: say so loudly if it fails.
        if let Err(e) = self.outbox.settle(
            execution_id,
            SettleCause::CancelledBeforeSend,
            "cancelled by crash repair: its call was closed as not started",
        ) {
            tracing_free_warn(&format!("could not cancel delivery {execution_id}: {e}"));
        }
    }
}

fn evidence_of(row: &super::Delivery) -> Evidence {
    match row.status {
        DeliveryStatus::Delivered => Evidence::Delivered(row.result.clone().unwrap_or_default()),
        DeliveryStatus::Failed => Evidence::Failed(row.error.clone().unwrap_or_default()),
        DeliveryStatus::Pending if !row.claimed => Evidence::NeverClaimed,
        status => Evidence::Uncertain {
            status: status.to_string(),
            detail: row.error.clone().unwrap_or_else(|| "no receipt recorded".into()),
        },
    }
}

/// The runtime has no logger; a failed cancellation is rare enough for stderr.
#[allow(clippy::print_stderr)]
fn tracing_free_warn(message: &str) {
    eprintln!("faultline: warning: {message}");
}
