//! Draining the queue through a receiver, and waiting for one delivery with a deadline.

use std::sync::Arc;
use std::time::Duration;

use super::{Enqueued, Finish, Outbox};
use crate::seams::{BoxFuture, Clock};
use crate::Result;

/// How often `enqueue_and_wait` looks at the row, in ms.
pub const WAIT_POLL_MS: u64 = 25;
/// Rows one drain delivers at most.
pub const DRAIN_ROWS_MAX: usize = 1024;

/// Why a delivery did not confirm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeliveryError {
    /// The receiver refused it: it did not happen.
    Rejected(String),
    /// The receipt was lost: it may or may not have happened.
    Unknown(String),
}

/// The receiver of side effects (an HTTP gateway, a command, ...).
pub trait Deliverer: Send + Sync {
    /// Performs the effect `payload` identified by `execution_id`; `Ok` carries the receiver's
    /// answer.
    fn deliver(
        &self,
        execution_id: &str,
        payload: &str,
    ) -> BoxFuture<'static, std::result::Result<String, DeliveryError>>;
}

/// What a drain did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DrainReport {
    /// Claims found abandoned (owner gone, or dropped mid-delivery) and made `unknown`.
    pub recovered_unknown: Vec<String>,
    /// Confirmed.
    pub delivered: Vec<String>,
    /// Refused.
    pub failed: Vec<String>,
    /// Receipt lost.
    pub unknown: Vec<String>,
}

/// Releases a claim that its drain stopped handling without finishing it (an error or a
/// panic between the send and `finish`), so the next `recover_abandoned` makes it `unknown`.
struct InFlight<'a> {
    outbox: &'a dyn Outbox,
    execution_id: String,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.outbox.abandon(&self.execution_id);
    }
}

/// Delivers pending rows: first turns abandoned claims into `unknown` (never resending them),
/// then claims, delivers and finishes up to `DRAIN_ROWS_MAX` rows, oldest first.
pub async fn drain(outbox: &dyn Outbox, deliverer: &dyn Deliverer) -> Result<DrainReport> {
    let mut report = DrainReport { recovered_unknown: outbox.recover_abandoned()?, ..DrainReport::default() };
    if !report.recovered_unknown.is_empty() {
        tracing::warn!(count = report.recovered_unknown.len(), "abandoned deliveries are now unknown; never resent");
    }
    for _ in 0..DRAIN_ROWS_MAX {
        let Some(claim) = outbox.claim_next()? else { break };
        let in_flight = InFlight { outbox, execution_id: claim.execution_id.clone() };
        let outcome = match deliverer.deliver(&claim.execution_id, &claim.payload).await {
            Ok(answer) => Finish::Delivered(answer),
            Err(DeliveryError::Rejected(reason)) => Finish::Failed(reason),
            Err(DeliveryError::Unknown(reason)) => Finish::Unknown(reason),
        };
        let list = match &outcome {
            Finish::Delivered(_) => &mut report.delivered,
            Finish::Failed(_) => &mut report.failed,
            Finish::Unknown(_) => &mut report.unknown,
        };
        list.push(claim.execution_id.clone());
        outbox.finish(&claim.execution_id, outcome)?;
        drop(in_flight);
    }
    Ok(report)
}

/// How a wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitOutcome {
    /// Confirmed, with the answer.
    Delivered(String),
    /// Refused.
    Failed(String),
    /// The receipt is lost (or was already): verify the receiver; it is never resent.
    Unknown(String),
    /// Still queued and unclaimed at the deadline: not a failure, it will be sent.
    Deferred,
}

/// Enqueues (idempotently) and waits up to `timeout` for a drain to finish the row. At the
/// deadline a still-`pending` row stays queued (deferred) and a `delivering` row becomes
/// `unknown`.
pub async fn enqueue_and_wait(
    outbox: &Arc<dyn Outbox>,
    clock: &Arc<dyn Clock>,
    execution_id: &str,
    payload: &str,
    timeout: Duration,
) -> Result<WaitOutcome> {
    if let Enqueued::Tombstoned(status) = outbox.enqueue(execution_id, payload)? {
        return Ok(WaitOutcome::Unknown(format!("pruned earlier with status {status}")));
    }
    let deadline = clock.now().saturating_add(timeout);
    loop {
        if let Some(outcome) = settled(outbox.as_ref(), execution_id)? {
            return Ok(outcome);
        }
        if clock.now() >= deadline {
            return match outbox.settle(
                execution_id,
                super::SettleCause::Deadline,
                "no receipt before the wait deadline; outcome unknown; not retried",
            )? {
                Some(super::DeliveryStatus::Pending) | None => Ok(WaitOutcome::Deferred),
                Some(_) => Ok(settled(outbox.as_ref(), execution_id)?.unwrap_or(WaitOutcome::Deferred)),
            };
        }
        let left = deadline.saturating_duration_since(clock.now());
        clock.sleep(left.min(Duration::from_millis(WAIT_POLL_MS))).await;
    }
}

fn settled(outbox: &dyn Outbox, execution_id: &str) -> Result<Option<WaitOutcome>> {
    use super::DeliveryStatus::*;
    let Some(row) = outbox.get(execution_id)? else { return Ok(None) };
    Ok(match row.status {
        Delivered => Some(WaitOutcome::Delivered(row.result.unwrap_or_default())),
        Failed => Some(WaitOutcome::Failed(row.error.unwrap_or_default())),
        Unknown => Some(WaitOutcome::Unknown(row.error.unwrap_or_default())),
        Pending | Delivering => None,
    })
}
