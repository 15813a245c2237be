//! Findings: a broken invariant of one run of an embedder's agent, named after the tools it
//! concerns, with the call that replays it and, where the harness knows, what would have
//! prevented it.

use crate::world::{AgentUnderTest, RunResult};

/// One broken invariant of one run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// The scenario.
    pub scenario: String,
    /// The seed.
    pub seed: u64,
    /// The invariant's name (`at-most-once`, ...).
    pub invariant: String,
    /// What broke, naming the tool and service where there is one.
    pub detail: String,
    /// The agent's tools the detail names.
    pub tools: Vec<String>,
    /// The test call that replays it.
    pub replay: String,
    /// What in the agent's file would have prevented it, when the harness knows.
    pub hint: Option<String>,
}

/// The findings of one run of `agent`: one per broken invariant.
pub fn findings(run: &RunResult, agent: &AgentUnderTest) -> Vec<Finding> {
    let schemas = agent.schemas();
    run.violations
        .iter()
        .map(|v| {
            let names =
                |name: &str| v.detail.contains(&format!("tool {name}")) || mentions_call_of(run, &v.detail, name);
            let tools: Vec<String> = schemas.iter().filter(|s| names(&s.name)).map(|s| s.name.clone()).collect();
            let hint = tools.iter().find_map(|t| agent.hint_for(t, v.invariant.name())).map(str::to_owned);
            Finding {
                scenario: run.scenario.clone(),
                seed: run.seed,
                invariant: v.invariant.name().to_owned(),
                detail: v.detail.clone(),
                tools,
                replay: format!("Harness::replay({:?}, {})", run.scenario, run.seed),
                hint,
            }
        })
        .collect()
}

/// Whether `detail` names an execution id whose call (in the run's transcript) was of `tool`.
fn mentions_call_of(run: &RunResult, detail: &str, tool: &str) -> bool {
    run.transcript.iter().any(|record| match &record.event {
        faultline_runtime::event::Event::ToolCall(call) if call.name == tool => {
            detail.contains(&faultline_runtime::store::execution_id("sim", call.turn, call.step, &call.call_id))
        }
        _ => false,
    })
}
