//! Trace context reaches an embedder's tools (FAILURE-OTEL): with an OpenTelemetry layer
//! recording the runtime's spans, every request a tool makes through `ToolHttp` carries the
//! `traceparent` of its own `execute_tool` span, which the simulated service records as it
//! received it. Without a layer, nothing is added.

use std::sync::Arc;
use std::time::Duration;

use faultline_runtime::event::ToolSchema;
use faultline_runtime::seams::{BoxFuture, Seams};
use faultline_runtime::tool::{Tool, ToolHttp, ToolInvocation, ToolOutput, ToolSet};
use faultline_sim::{AgentUnderTest, Harness, Service, ServiceFaults};
use opentelemetry::trace::TracerProvider as _;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt as _;

/// A tool that posts its arguments once.
struct Post {
    http: ToolHttp,
}

impl Tool for Post {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: "post_once".into(),
            description: "Posts once.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}}}),
        }
    }

    fn timeout(&self) -> Option<Duration> {
        Some(Duration::from_secs(5))
    }

    fn call(&self, invocation: ToolInvocation, _cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        let http = self.http.clone();
        Box::pin(async move {
            match http
                .post("http://ledger/entries", &[], invocation.arguments.to_string(), Duration::from_secs(2))
                .await
            {
                Ok(reply) => ToolOutput::Ok(reply.body),
                Err(e) => ToolOutput::Unknown(e.to_string()),
            }
        })
    }
}

fn harness() -> Harness {
    let agent = AgentUnderTest::new("poster", |seams: &Seams| {
        ToolSet::new().with(Arc::new(Post { http: ToolHttp::new(seams) }))
    })
    .service(Service::new("ledger").faults(ServiceFaults::NONE));
    Harness::new(agent).seeds(0..1)
}

#[test]
fn a_tool_http_request_carries_the_trace_context_of_its_call() {
    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let provider =
        opentelemetry_sdk::trace::SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let harness = harness();
    // The first seed whose conversation calls the tool and whose service received the call.
    let run = tracing::subscriber::with_default(subscriber, || {
        // Other tests of this binary run the runtime on other threads with no subscriber:
        // the callsites' cached interest is recomputed now that this one exists.
        tracing::callsite::rebuild_interest_cache();
        (0..20).map(|seed| harness.replay("generated", seed)).find(|run| !run.service_receipts.is_empty())
    })
    .expect("a conversation that calls post_once");
    let spans = exporter.get_finished_spans().expect("spans");
    let tools: Vec<_> = spans.iter().filter(|s| s.name == "execute_tool post_once").collect();
    let names: std::collections::BTreeSet<String> = spans.iter().map(|s| s.name.to_string()).collect();
    assert!(!tools.is_empty(), "{names:?}");
    for receipt in &run.service_receipts {
        let traceparent = receipt.header("traceparent").unwrap_or_else(|| panic!("no traceparent: {receipt:?}"));
        let named = tools.iter().any(|span| {
            let context = &span.span_context;
            traceparent == format!("00-{}-{}-01", context.trace_id(), context.span_id())
        });
        assert!(named, "{traceparent} names no execute_tool span");
    }
}

#[test]
fn without_a_layer_a_tool_http_request_carries_no_trace_context() {
    let harness = harness();
    let run = (0..20).map(|seed| harness.replay("generated", seed)).find(|run| !run.service_receipts.is_empty());
    let run = run.expect("a conversation that calls post_once");
    assert!(run.service_receipts.iter().all(|r| r.header("traceparent").is_none()), "{:?}", run.service_receipts);
}
