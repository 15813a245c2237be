//! Tools served by Model Context Protocol servers (FAILURE-MCP-TOOLS): a small JSON-RPC
//! client over the seams — stdio servers started through the `Process` seam, streamable-HTTP
//! servers reached through the `Net` seam — whose tools become the agent's tools, named
//! `SERVER__TOOL`, and follow the tool protocol like every other: `tool/call` durable before
//! the request is written, the execution id in the request's `_meta`
//! (`faultline/execution_id`) and, over HTTP, in the `faultline-execution-id` header, an
//! `isError` result `TOOL_FAILED`, a lost answer `TOOL_OUTCOME_UNKNOWN`, never a second send.
//!
//! Why not the official Rust SDK (`rmcp`): its client transports start the child process and
//! open the HTTP connections themselves (tokio's `Command`, reqwest), behind the seams the
//! simulator replaces; its line codec reads a message without a size bound; and what a
//! failed exchange may have done — nothing sent, refused, or possibly acted on — is exactly
//! what a tool result here must say and what its errors do not. The protocol a client needs is
//! four requests and two notifications, kept small here.

mod client;
mod http;
mod jsonrpc;
mod listing;
mod stdio;
mod tool;
mod transport;

pub use client::{
    McpServer, MCP_CANCEL_GRACE_MS, MCP_CONNECT_TIMEOUT_MS, MCP_EXECUTION_ID_META, MCP_LIST_PAGES_MAX,
    MCP_PROTOCOL_VERSION, MCP_PROTOCOL_VERSIONS,
};
pub use http::{
    MCP_LAST_EVENT_ID_HEADER, MCP_PROTOCOL_VERSION_HEADER, MCP_RESUME_DELAY_MS_DEFAULT, MCP_RESUME_DELAY_MS_MAX,
    MCP_RESUMPTIONS_MAX, MCP_SESSION_HEADER,
};
pub use jsonrpc::{RpcError, MCP_MESSAGE_BYTES_MAX, RPC_ERROR_MESSAGE_CHARS_MAX};
pub use listing::{
    exposed_name, ListedTool, RefusedTool, MCP_DESCRIPTION_BYTES_MAX, MCP_NAME_SEPARATOR, MCP_TOOLS_MAX,
    TOOL_NAME_CHARS_MAX,
};
pub use tool::McpTool;
