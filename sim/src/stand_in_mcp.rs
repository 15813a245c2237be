//! An agent file's `[[mcp_servers]]` under the harness (FAILURE-MCP-TOOLS): the runtime's own
//! MCP client, unchanged, against a simulated server of each entry's tools — reached at
//! `http://mcp-NAME/mcp` for a `url` entry, or started as the stdio program
//! `faultline-sim-mcp mcp-NAME` for a `command` entry. The real server never runs, so its
//! tools come from `[mcp_servers.sim.TOOL]` tables, else from the `tools` allow-list
//! (`side_effects` deciding each one's effect; unknown means it has one).

use std::sync::Arc;

use faultline_runtime::config::McpServerConfig;

use faultline_runtime::mcp::{ListedTool, McpServer, McpTool};
use faultline_runtime::seams::Seams;
use faultline_runtime::tool::Tool;

use crate::tool_sim::{SimDedup, SimEffect, ToolSimConfig};
use crate::world::{McpService, McpServiceTool};

/// Latency of a simulated MCP tool without `latency_ms`, in ms.
const LATENCY_MS_DEFAULT: u64 = 5;

/// One entry as the harness runs it: the entry pointed at its simulated server, that
/// server, and the tools offered.
#[derive(Debug, Clone)]
pub(crate) struct McpStandIn {
    pub config: McpServerConfig,
    pub service: McpService,
    pub tools: Vec<ListedTool>,
    /// The headers the entry sends: its literal `headers` as written, and each `headers_env`
    /// with a value the simulator makes up for it (no environment is read).
    pub headers: Vec<(String, String)>,
}

impl McpStandIn {
    /// The entry's tools on one host incarnation's seams.
    pub fn tools(&self, seams: &Seams) -> Vec<Arc<dyn Tool>> {
        let server = McpServer::new(self.config.clone(), seams.clone(), self.headers.clone(), Vec::new());
        McpTool::all(&server, self.tools.clone())
    }

    /// One line for the report: what stands in for the server.
    pub fn describe(&self) -> String {
        let transport = if self.config.url.is_some() { "streamable HTTP" } else { "stdio" };
        let tools: Vec<String> = self
            .service
            .tools
            .iter()
            .map(|t| {
                let effect = if t.effect { "effect" } else { "read" };
                let dedup = if t.dedup { "dedup by execution id" } else { "no dedup" };
                format!("{} ({effect}, {dedup}, {} retries)", t.name, t.retries)
            })
            .collect();
        format!(
            "MCP server {} ({transport}): simulated at host {}, tools {}; session expiry, lost and malformed replies \
             drawn per seed",
            self.service.server,
            self.service.host,
            tools.join(", ")
        )
    }
}

/// The stand-in of `entry`.
pub(crate) fn stand_in((index, entry): (usize, &McpServerConfig)) -> Result<McpStandIn, String> {
    let host = format!("mcp-{}", entry.name);
    let declared: Vec<(String, ToolSimConfig)> = if entry.sim.is_empty() {
        let allowed = entry.tools.clone().unwrap_or_default();
        allowed.into_iter().map(|t| (t, ToolSimConfig::default())).collect()
    } else {
        crate::tool_sim::mcp_sims(entry, index)?
    };
    if declared.is_empty() {
        return Err(format!(
            "mcp_servers {}: the simulator cannot list a real server's tools: name them in tools = [...] or in \
             [mcp_servers.sim.TOOL] tables",
            entry.name
        ));
    }
    let tools: Vec<McpServiceTool> = declared
        .iter()
        .map(|(name, sim)| {
            let side_effects = entry.side_effects.get(name).copied().unwrap_or(true);
            let effect = sim.effect.unwrap_or(if side_effects { SimEffect::External } else { SimEffect::Read });
            McpServiceTool {
                name: name.clone(),
                effect: effect == SimEffect::External,
                dedup: sim.dedup == Some(SimDedup::ExecutionId),
                retries: sim.retries.unwrap_or(0),
                latency_ms: sim.latency_ms.unwrap_or(LATENCY_MS_DEFAULT),
                failure_rate: sim.failure_rate,
                timeout_rate: sim.timeout_rate,
            }
        })
        .collect();
    let offered = tools.iter().map(|t| ListedTool::declared(&entry.name, &t.name, t.effect)).collect();
    let mut headers: Vec<(String, String)> = entry.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    headers.extend(entry.headers_env.keys().map(|name| (name.clone(), header_env_value(&entry.name, name))));
    let mut config = entry.clone();
    config.env.clear();
    config.headers.clear();
    config.headers_env.clear();
    if config.url.is_some() {
        config.url = Some(format!("http://{host}/mcp"));
    } else {
        config.command = Some(vec![crate::seams::SIM_STDIO_PROGRAM.to_owned(), host.clone()]);
    }
    let service = McpService { host, server: entry.name.clone(), tools, faults: None, timeout_ms: entry.timeout_ms };
    Ok(McpStandIn { config, service, tools: offered, headers })
}

/// The value the simulator sends for `headers_env.NAME` of server `server`: a credential of
/// its own making, held as a secret like the real one would be.
pub(crate) fn header_env_value(server: &str, name: &str) -> String {
    format!("Bearer sim-{server}-{name}-credential")
}
