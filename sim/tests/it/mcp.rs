//! An agent file's MCP servers under the harness (FAILURE-MCP-TOOLS): the runtime's own MCP
//! client against simulated servers over both transports, with their fault family (sessions
//! expired, replies lost or malformed after the effect, a stdio server killed mid-call).

use std::sync::Arc;

use faultline_sim::{agent_from_file, run_agent, AgentUnderTest, Scenario};

/// Seeds each sweep here runs (the issue's bar for a deduplicating server).
const SEEDS: u64 = 300;

fn agent(dedup: &str) -> Arc<AgentUnderTest> {
    let file = format!(
        r#"
[provider]
preset = "deepseek"

[[mcp_servers]]
name = "billing"
url = "http://127.0.0.1:8931/mcp"
timeout_ms = 5000
[mcp_servers.sim.refund]
retries = 2
dedup = "{dedup}"
[mcp_servers.sim.lookup]
effect = "read"

[[mcp_servers]]
name = "files"
command = ["files-server", "--stdio"]
tools = ["write_note"]
timeout_ms = 5000
"#
    );
    Arc::new(agent_from_file("mcp", &file).unwrap())
}

#[test]
fn a_server_that_repeats_its_own_effect_is_found_and_named_and_dedup_passes() {
    let generated = Scenario::built_in("generated").unwrap();
    let (repeating, deduplicating) = (agent("none"), agent("execution-id"));
    let mut found = None;
    for seed in 0..SEEDS {
        let clean = run_agent(&generated, seed, &deduplicating);
        assert!(clean.passed(), "seed {seed} with dedup: {:?}", clean.violations);
        if found.is_none() {
            let result = run_agent(&generated, seed, &repeating);
            found = result.violations.into_iter().find(|v| v.invariant.name() == "at-most-once");
        }
    }
    let violation = found.expect("a server retrying without dedup repeats an effect within the seeds");
    assert!(violation.detail.contains("billing__refund") && violation.detail.contains("mcp-billing"), "{violation:?}");
    assert!(
        violation.advice.contains("MCP server billing repeated the effect itself")
            && violation.advice.contains("[mcp_servers.sim.refund]"),
        "the advice says which side repeated and what to change: {}",
        violation.advice
    );
}

#[test]
fn every_transport_fault_is_met_and_read_as_the_protocol_says() {
    let generated = Scenario::built_in("generated").unwrap();
    let agent = agent("execution-id");
    let (mut unknown, mut expired) = (0, 0);
    for seed in 0..100 {
        let result = run_agent(&generated, seed, &agent);
        for record in &result.transcript {
            let line = serde_json::to_string(&record).unwrap();
            if line.contains("TOOL_OUTCOME_UNKNOWN") && line.contains("MCP server") {
                unknown += 1;
            }
            if line.contains("HTTP 404") {
                expired += 1;
            }
        }
    }
    assert!(unknown > 0 && expired > 0, "lost answers {unknown}, expired sessions {expired}");
}
