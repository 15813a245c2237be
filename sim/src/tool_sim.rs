//! `[tools.sim]` (and `[mcp_servers.sim.TOOL]`): what stands in for a tool under the fault
//! harness. The runtime keeps these tables opaque (they are the simulator's knobs, not the
//! runtime's); they are read and checked here, where the harness builds its stand-ins, and by
//! `agent run`, which refuses a file whose tables are wrong before anything runs.

use faultline_runtime::config::{CommandToolConfig, McpServerConfig, ResolvedAgentFile};
use serde::Deserialize;

/// `[tools.sim]`: the simulated stand-in of a command tool. The command itself never runs in
/// the simulator.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolSimConfig {
    /// What the tool does to the world (default: `external` with `side_effects`, else `read`).
    #[serde(default)]
    pub(crate) effect: Option<SimEffect>,
    /// How long the service (or the tool's own work) takes, in ms. Range
    /// 0..=[`SIM_LATENCY_MS_MAX`]; default 5.
    #[serde(default)]
    pub(crate) latency_ms: Option<u64>,
    /// Share of requests the service refuses (503) before any effect, while faults last.
    /// Range 0..=1; default: drawn from the seed.
    #[serde(default)]
    pub(crate) failure_rate: Option<f64>,
    /// Share of requests whose effect happens and whose reply is lost (the tool times out),
    /// while faults last. Range 0..=1; default: drawn from the seed.
    #[serde(default)]
    pub(crate) timeout_rate: Option<f64>,
    /// The tool's own retries of a failed or timed-out call. Range 0..=[`SIM_RETRIES_MAX`];
    /// default 0.
    #[serde(default)]
    pub(crate) retries: Option<u32>,
    /// For an `external` effect: whether the receiving service deduplicates by the execution
    /// id the tool passes on (`FAULTLINE_EXECUTION_ID` as its idempotency key). Default `none`.
    #[serde(default)]
    pub(crate) dedup: Option<SimDedup>,
}

/// Longest `[tools.sim] latency_ms`.
pub(crate) const SIM_LATENCY_MS_MAX: u64 = 60_000;
/// Most `[tools.sim] retries`.
pub(crate) const SIM_RETRIES_MAX: u32 = 10;

/// What a simulated tool does to the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum SimEffect {
    /// Calls a service that does something (an HTTP POST to a simulated receiver).
    External,
    /// Reads a service (an HTTP GET; no effect).
    Read,
    /// Works locally (no network, no effect).
    Local,
}

/// Whether a simulated receiver deduplicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum SimDedup {
    /// By the execution id the tool sends as its idempotency key.
    ExecutionId,
    /// Every request is an effect.
    None,
}

impl SimEffect {
    /// As the file spells it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            SimEffect::External => "external",
            SimEffect::Read => "read",
            SimEffect::Local => "local",
        }
    }
}

impl ToolSimConfig {
    fn check(&self, at: &str) -> Result<(), String> {
        let bad = |field: &str, message: String| Err(format!("{at}.{field}: {message}"));
        if self.latency_ms.is_some_and(|ms| ms > SIM_LATENCY_MS_MAX) {
            return bad("latency_ms", format!("must be within 0..={SIM_LATENCY_MS_MAX}"));
        }
        if self.retries.is_some_and(|n| n > SIM_RETRIES_MAX) {
            return bad("retries", format!("must be within 0..={SIM_RETRIES_MAX}"));
        }
        for (field, rate) in [("failure_rate", self.failure_rate), ("timeout_rate", self.timeout_rate)] {
            if rate.is_some_and(|r| !(0.0..=1.0).contains(&r)) {
                return bad(field, "must be within 0..=1".into());
            }
        }
        if self.dedup.is_some() && self.effect.is_some_and(|e| e != SimEffect::External) {
            return bad("dedup", "applies to effect = \"external\" only".into());
        }
        Ok(())
    }

    /// A stand-in that contradicts the tool's own flags would test another tool than the one
    /// declared: refused, never silently used or silently ignored.
    fn check_against(&self, side_effects: bool, via_outbox: bool, at: &str) -> Result<(), String> {
        let bad = |field: &str, message: String| Err(format!("{at}.{field}: {message}"));
        if via_outbox {
            let unused = [
                ("effect", self.effect.is_some()),
                ("dedup", self.dedup.is_some()),
                ("retries", self.retries.is_some()),
                ("failure_rate", self.failure_rate.is_some()),
                ("timeout_rate", self.timeout_rate.is_some()),
            ];
            if let Some((field, _)) = unused.iter().find(|(_, set)| *set) {
                return bad(
                    field,
                    "a via_outbox = true tool is delivered by the queue, keyed by execution id: this would never be \
                     used (only sim.latency_ms applies)"
                        .into(),
                );
            }
        }
        match self.effect {
            Some(effect @ (SimEffect::Read | SimEffect::Local)) if side_effects => bad(
                "effect",
                format!(
                    "{:?} contradicts side_effects = true: a tool that changes the world cannot stand in as one \
                     that does not",
                    effect.name()
                ),
            ),
            Some(SimEffect::External) if !side_effects => bad(
                "effect",
                "\"external\" contradicts side_effects = false: set side_effects = true if the command changes \
                 the world"
                    .into(),
            ),
            _ => Ok(()),
        }
    }
}

/// Every stand-in table of `file`, read and checked: the first problem, with its path
/// (`tools[0].sim.retries: must be within 0..=10`).
pub fn check_stand_ins(file: &ResolvedAgentFile) -> Result<(), String> {
    for (i, tool) in file.tools.iter().enumerate() {
        tool_sim(tool, i)?;
    }
    for (i, server) in file.mcp_servers.iter().enumerate() {
        mcp_sims(server, i)?;
    }
    Ok(())
}

/// The stand-in table of command tool `index` (the defaults without one).
pub(crate) fn tool_sim(tool: &CommandToolConfig, index: usize) -> Result<ToolSimConfig, String> {
    let Some(table) = &tool.sim else { return Ok(ToolSimConfig::default()) };
    let at = format!("tools[{index}].sim");
    let sim = read(table, &at)?;
    sim.check_against(tool.side_effects, tool.via_outbox, &at)?;
    Ok(sim)
}

/// The stand-in tables of MCP server `index`, by tool name.
pub(crate) fn mcp_sims(server: &McpServerConfig, index: usize) -> Result<Vec<(String, ToolSimConfig)>, String> {
    let mut sims = Vec::new();
    for (tool, table) in &server.sim {
        let at = format!("mcp_servers[{index}].sim.{tool}");
        let sim = read(table, &at)?;
        // Only a stated `side_effects` can contradict the table (a listing's annotations are
        // not known until the server is asked).
        if let Some(&effects) = server.side_effects.get(tool) {
            sim.check_against(effects, false, &at)?;
        }
        sims.push((tool.clone(), sim));
    }
    Ok(sims)
}

/// `table` as a stand-in, its ranges checked.
fn read(table: &toml::Table, at: &str) -> Result<ToolSimConfig, String> {
    let sim: ToolSimConfig = toml::Value::Table(table.clone()).try_into().map_err(|e| format!("{at}: {e}"))?;
    sim.check(at)?;
    Ok(sim)
}

#[cfg(test)]
mod tests {
    use faultline_runtime::config::AgentFile;

    use super::*;

    const FILE: &str = "[provider]\npreset = \"deepseek\"\n\n[[tools]]\nname = \"send\"\ndescription = \"d\"\n\
                        command = [\"true\"]\nside_effects = true\n";

    #[test]
    fn a_sim_table_is_read_and_checked() {
        let file = AgentFile::parse(&format!(
            "{FILE}[tools.sim]\neffect = \"external\"\nretries = 2\ndedup = \"execution-id\"\n"
        ))
        .unwrap();
        let sim = tool_sim(&file.tools[0], 0).unwrap();
        assert_eq!(
            (sim.effect, sim.retries, sim.dedup),
            (Some(SimEffect::External), Some(2), Some(SimDedup::ExecutionId))
        );
        assert_eq!(tool_sim(&AgentFile::parse(FILE).unwrap().tools[0], 0), Ok(ToolSimConfig::default()));
        let refused = |extra: &str| {
            check_stand_ins(&AgentFile::parse(&format!("{FILE}[tools.sim]\n{extra}\n")).unwrap()).unwrap_err()
        };
        assert!(refused("retries = 11").contains("tools[0].sim.retries"), "{}", refused("retries = 11"));
        assert!(refused("failure_rate = -0.1").contains("tools[0].sim.failure_rate"));
        assert!(refused("effect = \"read\"\ndedup = \"none\"").contains("tools[0].sim.dedup"));
        assert!(refused("retry = 1").contains("retry"), "a misspelt key is refused");
        assert!(refused("effect = \"remote\"").contains("remote"));
    }

    #[test]
    fn an_mcp_servers_sim_table_is_checked_with_its_path() {
        let file = AgentFile::parse(
            "[provider]\npreset = \"deepseek\"\n[[mcp_servers]]\nname = \"f\"\nurl = \"http://h/\"\n\
             side_effects = { t = false }\n[mcp_servers.sim.t]\nretries = 99\n",
        )
        .unwrap();
        let error = check_stand_ins(&file).unwrap_err();
        assert!(error.contains("mcp_servers[0].sim.t.retries"), "{error}");
    }
}
