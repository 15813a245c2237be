//! The agent file's schema (`agent run --config`, `[tools]`, `[mcp]`, `[store]`,
//! `[telemetry]`, approvals), parsed and checked once, below everything that runs it: the
//! agent loop imports no schema, the command line and the builders read this module.

mod agent_file;
mod approval;
mod mcp;

pub use agent_file::{
    hidden_vars, provider_key_vars, AgentFile, AgentSection, CommandToolConfig, OutboxSection, ResolvedAgentFile,
    StoreKindConfig, StoreSection, TelemetrySection, ToolEnv, OTLP_ENDPOINT_BYTES_MAX, PROVIDER_KEY_VARS,
};
pub use approval::ApprovalMode;
pub use mcp::{
    McpServerConfig, McpTransportConfig, MCP_SERVERS_MAX, MCP_SERVER_NAME_BYTES_MAX, MCP_TABLE_ENTRIES_MAX,
    MCP_URL_BYTES_MAX,
};
