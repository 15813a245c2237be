//! An MCP server's tool as an agent's tool: called once per `tool/call`, its answer read into
//! the one result vocabulary — `isError` is a failure, a lost answer after the request may
//! have left is `TOOL_OUTCOME_UNKNOWN`, a cancel is sent on and still awaited.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::client::{Called, McpServer, MCP_CANCEL_GRACE_MS};
use super::jsonrpc;
use super::listing::ListedTool;
use super::transport::Lost;
use crate::event::ToolSchema;
use crate::seams::BoxFuture;
use crate::tool::cut_marked;
use crate::tool::{Tool, ToolInvocation, ToolOutput};

/// Longest rendering of a non-text content block kept, in bytes.
const BLOCK_RENDERED_BYTES_MAX: usize = 4096;

/// One of an MCP server's tools.
#[derive(Debug, Clone)]
pub struct McpTool {
    server: McpServer,
    listed: ListedTool,
}

impl McpTool {
    /// `listed` on `server`.
    pub fn new(server: McpServer, listed: ListedTool) -> Self {
        Self { server, listed }
    }

    /// Every offered tool of `server`, as tools.
    pub fn all(server: &McpServer, listed: Vec<ListedTool>) -> Vec<Arc<dyn Tool>> {
        listed.into_iter().map(|l| Arc::new(McpTool::new(server.clone(), l)) as Arc<dyn Tool>).collect()
    }

    /// Whether it changes the world (its annotations, or the agent file's word).
    pub fn side_effects(&self) -> bool {
        self.listed.side_effects
    }
}

impl Tool for McpTool {
    fn schema(&self) -> ToolSchema {
        self.listed.schema.clone()
    }

    fn timeout(&self) -> Option<Duration> {
        self.server.config().timeout_ms.map(Duration::from_millis)
    }

    fn approval(&self) -> Option<crate::approval::ApprovalPolicy> {
        self.server.config().approval_policy(&self.listed.name)
    }

    fn call(&self, invocation: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        let (server, name) = (self.server.clone(), self.listed.name.clone());
        Box::pin(async move {
            let grace = Duration::from_millis(MCP_CANCEL_GRACE_MS);
            let called = server.call(&name, invocation.arguments, &invocation.execution_id, &cancel, grace).await;
            output_of(server.name(), &name, called, cancel.is_cancelled())
        })
    }
}

/// The tool result a server call came to.
pub(crate) fn output_of(server: &str, tool: &str, called: Called, cancelled: bool) -> ToolOutput {
    let at = format!("MCP server {server}, tool {tool}");
    match called {
        Called::Answered(Ok(result)) => {
            let text = rendered(&result);
            if result.get("isError").and_then(Value::as_bool) == Some(true) {
                ToolOutput::Failed(text)
            } else {
                ToolOutput::Ok(text)
            }
        }
        // The request refused as a whole (an unknown tool, arguments it refused): nothing ran.
        Called::Answered(Err(error)) if !cancelled && jsonrpc::refused_whole(error.code) => {
            ToolOutput::Failed(format!("{at} refused the call (error {}): {}", error.code, error.message))
        }
        // Any other error (an internal one, one answering our cancel) may follow work begun.
        Called::Answered(Err(error)) => ToolOutput::Unknown(format!(
            "{at} answered error {} ({}); the call may have taken effect in part. Check before calling it again.",
            error.code, error.message
        )),
        Called::Lost(Lost::NotSent(why)) if cancelled => ToolOutput::Aborted(format!("{at}: {why}; it did not run")),
        Called::Lost(Lost::NotSent(why) | Lost::Refused(why)) => {
            ToolOutput::Failed(format!("{at}: the call was not run ({why})"))
        }
        Called::Lost(Lost::SessionExpired) => ToolOutput::Failed(format!(
            "{at}: the server had forgotten the session (HTTP 404), so the call was not run; a new session is made \
             before the next call"
        )),
        Called::Lost(Lost::MaybeArrived(why)) => ToolOutput::Unknown(format!(
            "{at}: the call was sent and no answer came ({why}); it may or may not have taken effect. Check \
             before calling it again."
        )),
    }
}

/// A result's content as the model reads it: text blocks as they are, other blocks as JSON
/// (cut), and `structuredContent` when there is no content at all.
fn rendered(result: &Value) -> String {
    let blocks = result.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
    if blocks.is_empty() {
        return result.get("structuredContent").map(Value::to_string).unwrap_or_default();
    }
    let parts: Vec<String> = blocks
        .iter()
        .map(|block| match (block.get("type").and_then(Value::as_str), block.get("text").and_then(Value::as_str)) {
            (Some("text"), Some(text)) => text.to_owned(),
            _ => cut_marked(block.to_string(), BLOCK_RENDERED_BYTES_MAX, " [block truncated]"),
        })
        .collect();
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::jsonrpc::RpcError;
    use serde_json::json;

    fn out(called: Called, cancelled: bool) -> ToolOutput {
        output_of("billing", "refund", called, cancelled)
    }

    #[test]
    fn only_a_lost_answer_after_sending_is_unknown() {
        let ok = Called::Answered(Ok(json!({"content": [{"type": "text", "text": "done"}]})));
        assert_eq!(out(ok, false), ToolOutput::Ok("done".into()));
        let failed = Called::Answered(Ok(json!({"isError": true, "content": [{"type": "text", "text": "no"}]})));
        assert_eq!(out(failed, false), ToolOutput::Failed("no".into()));
        let refused = Called::Answered(Err(RpcError { code: -32602, message: "unknown tool".into() }));
        assert!(matches!(out(refused.clone(), false), ToolOutput::Failed(_)));
        assert!(matches!(out(refused, true), ToolOutput::Unknown(_)), "an error after a cancel may follow work");
        let internal = Called::Answered(Err(RpcError { code: -32603, message: "boom".into() }));
        assert!(matches!(out(internal, false), ToolOutput::Unknown(_)), "an internal error may follow work");
        assert!(matches!(out(Called::Lost(Lost::NotSent("x".into())), false), ToolOutput::Failed(_)));
        assert!(matches!(out(Called::Lost(Lost::NotSent("x".into())), true), ToolOutput::Aborted(_)));
        assert!(matches!(out(Called::Lost(Lost::Refused("HTTP 400".into())), false), ToolOutput::Failed(_)));
        assert!(matches!(out(Called::Lost(Lost::SessionExpired), false), ToolOutput::Failed(_)));
        for cancelled in [false, true] {
            let lost = out(Called::Lost(Lost::MaybeArrived("reset".into())), cancelled);
            assert!(matches!(lost, ToolOutput::Unknown(ref t) if t.contains("billing")), "{lost:?}");
        }
    }

    #[test]
    fn content_is_read_as_text_and_other_blocks_as_bounded_json() {
        let result = json!({"content": [
            {"type": "text", "text": "a"},
            {"type": "image", "data": "x".repeat(10_000), "mimeType": "image/png"},
        ]});
        let text = rendered(&result);
        assert!(text.starts_with("a\n{"), "{text}");
        assert!(text.ends_with("[block truncated]") && text.len() < 4200);
        assert_eq!(rendered(&json!({"content": [], "structuredContent": {"n": 1}})), r#"{"n":1}"#);
    }
}
