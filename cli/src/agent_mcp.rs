//! `[[mcp_servers]]` for `agent run` and `agent chat`: each server started (or dialled),
//! initialised and listed before any session is touched, so a server that cannot be reached
//! ends the command with nothing created; its tools join the file's own (FAILURE-MCP-TOOLS).

use std::sync::Arc;

use faultline_runtime::config::{hidden_vars, ResolvedAgentFile};

use faultline_runtime::mcp::{McpServer, McpTool};
use faultline_runtime::seams::Seams;
use faultline_runtime::tool::Tool;

/// The tools of every server in `config`, or why one could not be listed (secrets scrubbed).
/// Refused tools are said on stderr, by name and reason.
pub async fn mcp_tools(seams: &Seams, config: &ResolvedAgentFile) -> Result<Vec<Arc<dyn Tool>>, String> {
    let hidden = hidden_vars(&config.provider, &config.mcp_servers);
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for server in &config.mcp_servers {
        let mut headers: Vec<(String, String)> = server.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (name, var) in &server.headers_env {
            let value = std::env::var(var).ok().filter(|v| !v.is_empty()).ok_or_else(|| {
                format!("mcp_servers {}: headers_env.{name} names {var}, which is not set: export it", server.name)
            })?;
            seams.secrets.register(&value);
            headers.push((name.clone(), value));
        }
        let handle = McpServer::new(server.clone(), seams.clone(), headers, hidden.clone());
        let (listed, refused) = handle.list_tools().await.map_err(|e| seams.secrets.scrub(&e.to_string()))?;
        for refused in refused {
            // Both came from the server: scrubbed by value like everything else that leaves.
            let (name, why) = (seams.secrets.scrub(&refused.name), seams.secrets.scrub(&refused.why));
            eprintln!("faultline: MCP server {}: tool {name:?} is not offered: {why}", server.name);
        }
        // A name in `approval` the server does not offer would leave a call unguarded that
        // the file meant to guard: refused, like any config mistake, before anything runs.
        if let Some(missing) = server.approval.iter().find(|name| !listed.iter().any(|l| l.name == **name)) {
            return Err(format!(
                "mcp_servers {}: approval names {missing:?}, which the server does not offer: check the name",
                server.name
            ));
        }
        eprintln!("faultline: MCP server {}: {} tool(s) offered", server.name, listed.len());
        tools.extend(McpTool::all(&handle, listed));
    }
    if let Some(clash) = tools.iter().find(|t| config.tools.iter().any(|c| c.name == t.schema().name)) {
        return Err(format!("tool {} is both a [[tools]] command and an MCP server's tool", clash.schema().name));
    }
    Ok(tools)
}
