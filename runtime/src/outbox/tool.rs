//! Routing a side-effecting tool's effect through the delivery queue, keyed by the call's
//! execution id, so a resumed or duplicated call can never send twice.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{drain, Deliverer, DeliveryStatus, Enqueued, Outbox, SessionFence};
use crate::event::ToolSchema;
use crate::seams::BoxFuture;
use crate::tool::{Tool, ToolInvocation, ToolOutput};

/// A tool whose effect is a delivery: the arguments are the payload, the invocation's
/// execution id the key. The call enqueues (idempotently), drains the queue through the
/// receiver, and answers from the row; an id already finished answers from its record
/// without sending again.
pub struct OutboxTool {
    schema: ToolSchema,
    outbox: Arc<dyn Outbox>,
    deliverer: Arc<dyn Deliverer>,
}

impl std::fmt::Debug for OutboxTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxTool").field("name", &self.schema.name).finish_non_exhaustive()
    }
}

impl OutboxTool {
    /// A tool advertised as `schema` that delivers through `outbox` to `deliverer`.
    pub fn new(schema: ToolSchema, outbox: Arc<dyn Outbox>, deliverer: Arc<dyn Deliverer>) -> Self {
        Self { schema, outbox, deliverer }
    }
}

impl Tool for OutboxTool {
    fn schema(&self) -> ToolSchema {
        self.schema.clone()
    }

    fn call(&self, invocation: ToolInvocation, _cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        let (outbox, deliverer) = (self.outbox.clone(), self.deliverer.clone());
        Box::pin(async move {
            let id = invocation.execution_id.clone();
            let payload = invocation.arguments.to_string();
            let fence = SessionFence::new(invocation.session.clone(), invocation.session_epoch);
            let drained = match outbox.enqueue_fenced(&fence, &id, &payload) {
                Ok(Enqueued::New | Enqueued::Existing(DeliveryStatus::Pending)) => {
                    drain(outbox.as_ref(), deliverer.as_ref()).await.map(|_| ())
                }
                Ok(Enqueued::Existing(_) | Enqueued::Tombstoned(_)) => Ok(()),
                // An append rolled back wrote nothing: the effect cannot happen, now or later.
                Err(e @ crate::Error::AppendFailed { rollback: None, .. }) => {
                    return ToolOutput::Failed(format!("not delivered: the delivery queue refused it ({e})"))
                }
                // The session was taken over: nothing was queued, and this writer's records
                // are refused by the same epoch.
                Err(e @ crate::Error::Fenced { .. }) => {
                    return ToolOutput::Failed(format!("not delivered: this worker lost the session ({e})"))
                }
                // Any other failure may have left the row behind, to be delivered by a later
                // drain: the model must not send it again.
                Err(e) => Err(e),
            };
            // Only the row says what happened. A drain that failed (a receipt that could not be
            // recorded, say) may have delivered: anything short of a settled row is unknown to
            // the model, never a failure it would retry.
            let unsettled = |state: &str| {
                let why = drained.as_ref().err().map(|e| format!("; the queue reported: {e}")).unwrap_or_default();
                ToolOutput::Unknown(format!(
                    "delivery {id} is {state}{why}. It may still happen or may have happened; it will not be sent again from here. Verify the receiver before trying again."
                ))
            };
            match outbox.get(&id) {
                Ok(Some(row)) => match row.status {
                    DeliveryStatus::Delivered => ToolOutput::Ok(row.result.unwrap_or_default()),
                    DeliveryStatus::Failed => {
                        ToolOutput::Failed(format!("delivery {id} failed: {}", row.error.unwrap_or_default()))
                    }
                    DeliveryStatus::Unknown => ToolOutput::Unknown(format!(
                        "delivery {id} outcome unknown ({}); it was not resent. Verify the receiver before trying again.",
                        row.error.unwrap_or_default()
                    )),
                    DeliveryStatus::Pending => unsettled("still queued (it will be delivered through the queue)"),
                    DeliveryStatus::Delivering => unsettled("in flight"),
                },
                // No row after an enqueue that failed: most likely never queued. Only a late
                // commit of that enqueue could still land, and nothing sends it from here.
                Ok(None) => unsettled("not in the queue (never queued, or pruned since)"),
                Err(e) => unsettled(&format!("unreadable ({e})")),
            }
        })
    }
}
