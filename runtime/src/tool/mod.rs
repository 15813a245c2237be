//! Tools, below the agent: the `Tool` trait and one call of it under its cooperative deadline
//! (FAILURE-TOOL-TIMEOUT), the set a session runs with, the HTTP client that tools and MCP
//! servers share, and the checks on a tool's parameters. `agent`, `mcp`, `approval`,
//! `outbox` and `production` import this module; it imports none of the agent's loop.

pub(crate) mod call;
mod http;
mod http_url;
mod parameters;

pub(crate) use call::{cut_marked, run_with_deadline, CallOutcome};
pub use call::{Tool, ToolInvocation, ToolOutput, ToolSet, TOOL_OUTPUT_BYTES_MAX, TOOL_TIMEOUT_MS_MAX};
pub(crate) use http::OpenedReply;
pub use http::{
    current_execution_id, current_trace_fields, HttpFailure, HttpReply, ToolHttp, EXECUTION_ID_HEADER,
    TOOL_HTTP_REPLY_BYTES_MAX, TOOL_HTTP_REQUEST_BYTES_MAX, TOOL_HTTP_TIMEOUT_MS_MAX,
};
pub(crate) use http_url::check_http_url;
pub use parameters::{check_parameters, PARAMETERS_BYTES_MAX};
