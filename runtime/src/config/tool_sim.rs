//! `[tools.sim]` (and `[mcp_servers.sim.TOOL]`): what stands in for a tool under the fault
//! harness. `agent run` checks these tables and never reads them.

use serde::Deserialize;

use crate::llm::ConfigError;

/// `[tools.sim]`: the simulated stand-in of a command tool. The command itself never runs in
/// the simulator.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ToolSimConfig {
    /// What the tool does to the world (default: `external` with `side_effects`, else `read`).
    #[serde(default)]
    pub effect: Option<SimEffect>,
    /// How long the service (or the tool's own work) takes, in ms. Range
    /// 0..=[`SIM_LATENCY_MS_MAX`]; default 5.
    #[serde(default)]
    pub latency_ms: Option<u64>,
    /// Share of requests the service refuses (503) before any effect, while faults last.
    /// Range 0..=1; default: drawn from the seed.
    #[serde(default)]
    pub failure_rate: Option<f64>,
    /// Share of requests whose effect happens and whose reply is lost (the tool times out),
    /// while faults last. Range 0..=1; default: drawn from the seed.
    #[serde(default)]
    pub timeout_rate: Option<f64>,
    /// The tool's own retries of a failed or timed-out call. Range 0..=[`SIM_RETRIES_MAX`];
    /// default 0.
    #[serde(default)]
    pub retries: Option<u32>,
    /// For an `external` effect: whether the receiving service deduplicates by the execution
    /// id the tool passes on (`FAULTLINE_EXECUTION_ID` as its idempotency key). Default `none`.
    #[serde(default)]
    pub dedup: Option<SimDedup>,
}

/// Longest `[tools.sim] latency_ms`.
pub const SIM_LATENCY_MS_MAX: u64 = 60_000;
/// Most `[tools.sim] retries`.
pub const SIM_RETRIES_MAX: u32 = 10;

/// What a simulated tool does to the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum SimEffect {
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
pub enum SimDedup {
    /// By the execution id the tool sends as its idempotency key.
    ExecutionId,
    /// Every request is an effect.
    None,
}

impl SimEffect {
    /// As the file spells it.
    pub fn name(self) -> &'static str {
        match self {
            SimEffect::External => "external",
            SimEffect::Read => "read",
            SimEffect::Local => "local",
        }
    }
}

impl ToolSimConfig {
    pub(crate) fn check(&self, at: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
        let bad = |field: &str, message: String| Err(ConfigError { path: at(&format!("sim.{field}")), message });
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
    pub(crate) fn check_against(
        &self,
        side_effects: bool,
        via_outbox: bool,
        at: &dyn Fn(&str) -> String,
    ) -> Result<(), ConfigError> {
        let bad = |field: &str, message: String| Err(ConfigError { path: at(&format!("sim.{field}")), message });
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
