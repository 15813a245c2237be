//! An agent that bills customers: one tool, `send_invoice`, that POSTs an invoice to an
//! invoicing service over HTTP. The production code is this file; `tests/faults.rs` puts the
//! same code under every fault faultline knows, in the simulated world.
//!
//! The tool reaches the network only through [`ToolHttp`], which the runtime builds on its
//! `Net` seam: real sockets in production, the simulated network under the harness. It sends
//! the call's execution id as the `Idempotency-Key` and retries a lost reply with the same
//! key, so the service can deduplicate. Built with the `retry-without-key` feature it makes a
//! classic mistake instead — it retries without a key — and the fault test catches the
//! duplicate invoice.

use std::sync::Arc;
use std::time::Duration;

use faultline_runtime::event::ToolSchema;
use faultline_runtime::seams::{BoxFuture, Clock, Seams};
use faultline_runtime::tool::{HttpFailure, Tool, ToolHttp, ToolInvocation, ToolOutput, ToolSet};
use tokio_util::sync::CancellationToken;

/// The tool's name.
pub const SEND_INVOICE: &str = "send_invoice";
/// The header the invoicing service deduplicates by.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Attempts per call (the first and its retries).
pub const ATTEMPTS_MAX: u32 = 3;
/// How long one attempt waits for the service's reply, in ms.
pub const ATTEMPT_TIMEOUT_MS: u64 = 2_000;
/// The pause between attempts, in ms.
pub const RETRY_DELAY_MS: u64 = 250;
/// The tool's own deadline (all attempts), in ms.
pub const CALL_TIMEOUT_MS: u64 = 10_000;

/// The provider settings this agent runs with in production (its retry policy and timeouts).
pub const PROVIDER_TOML: &str = r#"
[provider]
preset = "deepseek"
idle_timeout_ms = 1000

[provider.retry_policy]
max_retries = 6

[provider.retry_policy.backoff]
initial_delay_ms = 100
max_delay_ms = 2000
jitter_ratio = 0.1
"#;

/// The agent's tools, built on `seams`: `invoicing_url` is the service's base URL
/// (`https://invoicing.example.com`; `http://invoices` in the simulated world).
pub fn tools(seams: &Seams, invoicing_url: &str) -> ToolSet {
    ToolSet::new().with(Arc::new(SendInvoice {
        http: ToolHttp::new(seams),
        clock: seams.clock.clone(),
        url: format!("{}/invoices", invoicing_url.trim_end_matches('/')),
    }))
}

/// POSTs an invoice; retries what may be retried.
pub struct SendInvoice {
    http: ToolHttp,
    clock: Arc<dyn Clock>,
    url: String,
}

impl std::fmt::Debug for SendInvoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendInvoice").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Tool for SendInvoice {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: SEND_INVOICE.into(),
            description: "Sends an invoice to a customer.".into(),
            parameters: serde_json::json!({
                "type": "object",
                "required": ["customer", "cents", "currency"],
                "properties": {
                    "customer": {"type": "string", "minLength": 1, "maxLength": 64},
                    "cents": {"type": "integer", "minimum": 1, "maximum": 100000000},
                    "currency": {"enum": ["EUR", "USD", "GBP"]}
                }
            }),
        }
    }

    fn timeout(&self) -> Option<Duration> {
        Some(Duration::from_millis(CALL_TIMEOUT_MS))
    }

    fn call(&self, invocation: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        let (http, clock, url) = (self.http.clone(), self.clock.clone(), self.url.clone());
        Box::pin(async move {
            tokio::select! {
                output = send(&http, clock.as_ref(), &url, &invocation) => output,
                () = cancel.cancelled() => ToolOutput::Unknown(
                    "stopped while an invoice request may have been in flight: check the invoicing service before \
                     sending it again".into(),
                ),
            }
        })
    }
}

async fn send(http: &ToolHttp, clock: &dyn Clock, url: &str, invocation: &ToolInvocation) -> ToolOutput {
    let body = invocation.arguments.to_string();
    let key = invocation.execution_id.as_str();
    let mut may_have_arrived = false;
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS_MAX {
        if attempt > 1 {
            clock.sleep(Duration::from_millis(RETRY_DELAY_MS)).await;
        }
        let mut headers = vec![("content-type", "application/json")];
        // The key makes a retry safe: the service does the effect once per key.
        if cfg!(not(feature = "retry-without-key")) {
            headers.push((IDEMPOTENCY_KEY, key));
        }
        match http.post(url, &headers, body.clone(), Duration::from_millis(ATTEMPT_TIMEOUT_MS)).await {
            Ok(reply) if (200..300).contains(&reply.status) => {
                return ToolOutput::Ok(format!("invoice sent: {}", reply.body))
            }
            Ok(reply) if reply.status >= 500 => last = format!("the service answered {}: {}", reply.status, reply.body),
            Ok(reply) => {
                return ToolOutput::Failed(format!(
                    "the service refused the invoice ({}): {}",
                    reply.status, reply.body
                ))
            }
            Err(failure @ HttpFailure::Invalid(_)) => return ToolOutput::Failed(failure.to_string()),
            Err(failure) => {
                may_have_arrived |= failure.may_have_arrived();
                last = failure.to_string();
            }
        }
    }
    if may_have_arrived {
        ToolOutput::Unknown(format!("the invoice may have been sent ({last}): check before sending it again"))
    } else {
        ToolOutput::Failed(format!("the invoice was not sent after {ATTEMPTS_MAX} attempts: {last}"))
    }
}
