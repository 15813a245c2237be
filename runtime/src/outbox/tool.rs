//! Routing a side-effecting tool's effect through the delivery queue, keyed by the call's
//! execution id, so a resumed or duplicated call can never send twice.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{drain, Deliverer, DeliveryStatus, Enqueued, Outbox};
use crate::agent::{Tool, ToolInvocation, ToolOutput};
use crate::event::ToolSchema;
use crate::seams::BoxFuture;

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

    fn side_effects(&self) -> bool {
        true
    }

    fn call(&self, invocation: ToolInvocation, _cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        let (outbox, deliverer) = (self.outbox.clone(), self.deliverer.clone());
        Box::pin(async move {
            let id = invocation.execution_id.clone();
            let payload = invocation.arguments.to_string();
            match outbox.enqueue(&id, &payload) {
                Ok(Enqueued::New | Enqueued::Existing(DeliveryStatus::Pending)) => {
                    if let Err(e) = drain(outbox.as_ref(), deliverer.as_ref()).await {
                        return ToolOutput::Failed(format!("delivery queue: {e}"));
                    }
                }
                Ok(Enqueued::Existing(_) | Enqueued::Tombstoned(_)) => {}
                Err(e) => return ToolOutput::Failed(format!("delivery queue: {e}")),
            }
            match outbox.get(&id) {
                Ok(Some(row)) => match row.status {
                    DeliveryStatus::Delivered => ToolOutput::Ok(row.result.unwrap_or_default()),
                    DeliveryStatus::Failed => ToolOutput::Failed(format!("delivery {id} failed: {}", row.error.unwrap_or_default())),
                    DeliveryStatus::Unknown => ToolOutput::Unknown(format!(
                        "delivery {id} outcome unknown ({}); it was not resent. Verify the receiver before trying again.",
                        row.error.unwrap_or_default()
                    )),
                    DeliveryStatus::Pending | DeliveryStatus::Delivering => {
                        ToolOutput::Failed(format!("delivery {id} is still {}; it will complete through the queue", row.status))
                    }
                },
                Ok(None) => ToolOutput::Failed(format!("delivery {id} was pruned; its outcome is in the tombstones")),
                Err(e) => ToolOutput::Failed(format!("delivery queue: {e}")),
            }
        })
    }
}
