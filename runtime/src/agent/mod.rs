//! The embeddable agent: turns and steps over a durable session, retries inside a step
//! (FAILURE-REQUEST-LOOP, FAILURE-RETRY-EXECUTOR), tools with cooperative timeouts and a
//! draining pool (FAILURE-TOOL-TIMEOUT, FAILURE-TOOL-DRAIN), semantic checkpoints
//! (FAILURE-CHECKPOINT-*), cancellation with a wake latch (FAILURE-AGENT-CANCEL), memoised
//! disposal (FAILURE-AGENT-DISPOSAL), and resume after a crash (FAILURE-CRASH-REPAIR); see
//! docs/internals/requirements.md.
//!
//! ```no_run
//! # async fn demo(agent: faultline_runtime::agent::Agent) -> faultline_runtime::Result<()> {
//! agent.submit("summarise the report")?;
//! agent.when_idle().await;
//! println!("{:?}", agent.last_outcome());
//! agent.dispose().await?;
//! # Ok(()) }
//! ```

mod approval_config;
pub(crate) mod assembler;
mod builder;
mod config;
mod handle;
pub(crate) mod history;
mod http;
mod http_url;
mod mcp_config;
mod parameters;
pub(crate) mod retry;
mod sim_config;
mod spans;
mod state;
pub(crate) mod tools;
mod turn;

pub use approval_config::ApprovalMode;
pub use builder::{AgentBuilder, ProviderRoute};
pub use config::{
    hidden_vars, provider_key_vars, AgentFile, AgentSection, CommandToolConfig, OutboxSection, ResolvedAgentFile,
    StoreKindConfig, StoreSection, TelemetrySection, ToolEnv, OTLP_ENDPOINT_BYTES_MAX, PROVIDER_KEY_VARS,
};
pub use handle::{Agent, Open};
pub(crate) use http::Opened;
pub use http::{
    current_execution_id, current_trace_fields, HttpFailure, HttpReply, ToolHttp, EXECUTION_ID_HEADER,
    TOOL_HTTP_REPLY_BYTES_MAX, TOOL_HTTP_REQUEST_BYTES_MAX, TOOL_HTTP_TIMEOUT_MS_MAX,
};
pub use mcp_config::{
    McpServerConfig, McpTransportConfig, MCP_SERVERS_MAX, MCP_SERVER_NAME_BYTES_MAX, MCP_TABLE_ENTRIES_MAX,
    MCP_URL_BYTES_MAX,
};
pub use parameters::{check_parameters, PARAMETERS_BYTES_MAX};
pub use sim_config::{SimDedup, SimEffect, ToolSimConfig, SIM_LATENCY_MS_MAX, SIM_RETRIES_MAX};
pub use state::{AgentConfig, TurnOutcome, INBOX_MESSAGES_MAX, MAX_STEPS_DEFAULT, TOOL_CONCURRENCY_DEFAULT};
pub use tools::{Tool, ToolInvocation, ToolOutput, ToolSet, TOOL_OUTPUT_BYTES_MAX, TOOL_TIMEOUT_MS_MAX};
