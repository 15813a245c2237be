//! Findings (FAILURE-FINDINGS): a broken invariant of one run of an embedder's agent, as
//! data: the evidence that broke it, the advice that fits that evidence, the tools and the
//! service it concerns, and the call that replays it.

use crate::verdict::RunResult;
use crate::world::AgentUnderTest;

/// One broken invariant of one run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// The scenario.
    pub scenario: String,
    /// The seed.
    pub seed: u64,
    /// The invariant's name (`at-most-once`, ...).
    pub invariant: String,
    /// The evidence that broke it, naming the tool and service where there is one.
    pub evidence: String,
    /// What would prevent it, fitted to the evidence: the setting, the line of the agent's
    /// code or file, or the side that repeated what.
    pub advice: String,
    /// The agent's tools the evidence names.
    pub tools: Vec<String>,
    /// The agent's service the evidence names, if one.
    pub service: Option<String>,
    /// The test call that replays it.
    pub replay: String,
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
            // An agent file's own line for the fix, when it gave one, is the advice its user acts on.
            let file_advice = tools.iter().find_map(|t| agent.hint_for(t, v.invariant.name()));
            let words: Vec<&str> =
                v.detail.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).filter(|w| !w.is_empty()).collect();
            let service = agent.services().iter().find(|s| words.contains(&s.name.as_str())).map(|s| s.name.clone());
            Finding {
                scenario: run.scenario.clone(),
                seed: run.seed,
                invariant: v.invariant.name().to_owned(),
                evidence: v.detail.clone(),
                advice: file_advice.map_or_else(|| v.advice.clone(), str::to_owned),
                tools,
                service,
                replay: format!("Harness::replay({:?}, {})", run.scenario, run.seed),
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
