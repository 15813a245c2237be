//! Embedding the faultline agent: a durable JSONL session, an OpenAI-compatible endpoint and
//! one in-process tool.
//!
//! Run a fake model first (from the repository root):
//!
//! ```sh
//! echo '{"responses":[{"frames":[{"tool_call":{"index":0,"id":"c1","name":"clock","arguments":"{}"}}],"finish":"tool_calls"},
//!                     {"frames":[{"text":"It is late."}],"finish":"stop"}]}' > /tmp/script.json
//! cargo run -p faultline-cli -- model-server --listen 127.0.0.1:8080 --script /tmp/script.json
//! cargo run -p faultline-runtime --example embed -- http://127.0.0.1:8080/v1
//! ```
#![allow(clippy::print_stdout, clippy::disallowed_methods)] // an example prints and reads argv

use std::sync::Arc;

use faultline_runtime::agent::Agent;

use faultline_runtime::event::ToolSchema;
use faultline_runtime::llm::ResolvedProvider;
use faultline_runtime::production::{self, EnvCredentials};
use faultline_runtime::seams::BoxFuture;
use faultline_runtime::store::{FileStore, Format, SessionId};
use faultline_runtime::tool::{Tool, ToolInvocation, ToolOutput, ToolSet};
use tokio_util::sync::CancellationToken;

/// A side-effect-free tool: tells the time from the Clock seam.
struct ClockTool(Arc<dyn faultline_runtime::seams::Clock>);

impl Tool for ClockTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: "clock".into(),
            description: "the current time (epoch ms)".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }
    fn call(&self, _: ToolInvocation, _: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        let now = self.0.now_ms();
        Box::pin(async move { ToolOutput::Ok(now.to_string()) })
    }
}

#[tokio::main]
async fn main() -> faultline_runtime::Result<()> {
    let base_url = std::env::args().nth(1).unwrap_or_else(|| "http://127.0.0.1:8080/v1".into());
    let seams = production::seams();
    let dir = std::env::temp_dir().join("faultline-embed-example");
    let store = FileStore::new(seams.clone(), &dir, Format::Jsonl);
    let route = ResolvedProvider::openai_compatible(&base_url, "test-model")
        .expect("a base URL like http://127.0.0.1:8080/v1")
        .with_name("local");
    let id = SessionId::new(format!("embed-{}", seams.clock.now_ms()))?;
    let tools = ToolSet::new().with(Arc::new(ClockTool(seams.clock.clone())));
    let agent = Agent::builder(route, Arc::new(EnvCredentials)).seams(seams.clone()).tools(tools).start(&store, &id)?;
    agent.submit("What time is it?")?;
    agent.when_idle().await;
    println!("{:#?}", agent.last_outcome());
    agent.dispose().await?;
    println!("transcript: {}", store.session_path(&id).display());
    Ok(())
}
