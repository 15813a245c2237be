//! The findings no planted bug produces (FAILURE-FINDINGS): a real run of a built-in
//! scenario whose evidence is changed before the oracle judges it, as a runtime defect
//! would have changed it. Each case checks the invariant breaks and that its advice names
//! the cause. The rest of the catalog is covered by the planted bugs (`tests/it/planted.rs`),
//! the embedder's findings (`tests/it/findings.rs`) and the scenario files' own promises.

use faultline_runtime::event::{ContentBlock, Event, Record};

use crate::scenario::Scenario;
use crate::verdict::run_tampered;
use crate::world::conclude::Finished;

/// Runs `scenario` (seed 0) with `tamper`, and returns the advice of the first violation of
/// `invariant`, or panics with what the run did break.
fn advice_after(scenario: &str, tamper: &dyn Fn(&mut Finished), invariant: &str) -> String {
    let scenario = Scenario::built_in(scenario).expect("a built-in scenario");
    let result = run_tampered(&scenario, 0, tamper);
    result
        .violations
        .iter()
        .find(|v| v.invariant == invariant)
        .map(|v| v.advice.clone())
        .unwrap_or_else(|| panic!("no {invariant} violation; the run broke {:?}", result.violations))
}

/// The recovered transcript of the run, to change.
fn transcript(ended: &mut Finished) -> &mut Vec<Record> {
    ended.world.transcript.as_mut().expect("the run converged")
}

fn first_tool_result(records: &mut [Record]) -> &mut faultline_runtime::event::ToolResult {
    records
        .iter_mut()
        .find_map(|r| if let Event::ToolResult(t) = &mut r.event { Some(t) } else { None })
        .expect("a tool result")
}

#[test]
fn a_log_with_a_seq_gap_is_a_writer_defect() {
    let advice = advice_after("happy-tool-turn", &|c| drop(transcript(c).remove(2)), "log-invariants");
    assert!(advice.contains("the writer must never produce what the reader refuses"), "{advice}");
}

#[test]
fn a_log_ending_inside_a_turn_is_a_repair_defect() {
    let advice = advice_after("happy-tool-turn", &|c| drop(transcript(c).pop()), "turn-closed");
    assert!(advice.contains("closed by a repair record"), "{advice}");
}

#[test]
fn a_tool_output_over_the_limit_names_the_cut() {
    let oversize = "x".repeat(faultline_runtime::tool::TOOL_OUTPUT_BYTES_MAX + 1_000);
    let tamper = move |c: &mut Finished| {
        first_tool_result(transcript(c)).content = vec![ContentBlock::Text { text: oversize.clone() }];
    };
    let advice = advice_after("happy-tool-turn", &tamper, "tool-output-limit");
    assert!(advice.contains("cut it at the limit and mark the cut"), "{advice}");
}

#[test]
fn a_changed_tool_output_names_the_way_to_the_transcript() {
    let tamper = |c: &mut Finished| {
        first_tool_result(transcript(c)).content = vec![ContentBlock::Text { text: "not what it printed".into() }];
    };
    let advice = advice_after("oversize-output", &tamper, "tool-output-as-printed");
    assert!(advice.contains("changed on the way to the transcript"), "{advice}");
}

#[test]
fn an_unbounded_provider_message_names_the_message_limit() {
    let long = "overloaded ".repeat(1_000);
    let tamper = move |c: &mut Finished| {
        for record in transcript(c) {
            if let Event::TurnEnd(end) = &mut record.event {
                if let faultline_runtime::event::TurnEndReason::Error { error } = &mut end.reason {
                    error.message = long.clone();
                }
            }
        }
    };
    let advice = advice_after("auth-401", &tamper, "failure-message-bounded");
    assert!(advice.contains("keeps at most the message limit"), "{advice}");
}

#[test]
fn a_delivery_unlike_its_call_names_the_delivery_queue() {
    let tamper = |c: &mut Finished| c.receipts[0].body = "{\"text\":\"something else\"}".into();
    let advice = advice_after("happy-tool-turn", &tamper, "receipt-matches-call");
    assert!(advice.contains("delivery queue"), "{advice}");
}

#[test]
fn requests_over_the_retry_budget_name_the_setting() {
    let tamper = |c: &mut Finished| {
        let first = c.world.ledger.entries().into_iter().next().expect("a model request");
        for _ in 0..5 {
            c.world.ledger.push(first.clone());
        }
    };
    let advice = advice_after("happy-tool-turn", &tamper, "retry-budget");
    assert!(advice.contains("provider.retry_policy.max_retries"), "{advice}");
}

#[test]
fn a_recorded_code_unlike_what_was_served_names_the_classifier() {
    let tamper = |c: &mut Finished| {
        for record in transcript(c) {
            if let Event::LlmRetry(retry) = &mut record.event {
                retry.failure.code = faultline_runtime::event::ErrorCode::Server;
            }
        }
    };
    let advice = advice_after("rate-limit-retry-after-ms", &tamper, "failure-code-as-served");
    assert!(advice.contains("classifier"), "{advice}");
}

#[test]
fn a_refused_file_that_changed_names_the_read_only_path() {
    let tamper = |c: &mut Finished| {
        let path = c.world.rotted.as_ref().expect("the scenario rots the session").path.clone();
        let bytes = c.world.disk.iter_mut().find(|(p, _)| *p == path).map(|(_, b)| b).expect("the file");
        bytes.push(b'\n');
    };
    let advice = advice_after("bit-rot-session", &tamper, "refusal-left-file-untouched");
    assert!(advice.contains("read-only"), "{advice}");
}

#[test]
fn a_parity_difference_names_the_seams() {
    let parity = crate::real::Parity {
        equal: false,
        sim_records: 3,
        real_records: 3,
        refused: [false, false],
        first_difference: Some(crate::real::Difference { index: 1, sim: Some("a".into()), real: Some("b".into()) }),
    };
    let violation = parity.violation(0).expect("a difference is a violation");
    assert!(violation.advice.contains("simulated seams part from the operating system"), "{}", violation.advice);
}

#[test]
fn an_effect_of_a_denied_call_names_the_results_it_must_have() {
    let tamper = |c: &mut Finished| {
        c.receipts.push(crate::world::Receipt {
            execution_id: "sim:1:1:call_1".into(),
            body: "{\"order\":7,\"amount\":10}".into(),
            at_ms: 1,
            stamp: u64::MAX,
        });
    };
    let advice = advice_after("approval-denied", &tamper, "denied-never-runs");
    assert!(advice.contains("APPROVAL_DENIED") && advice.contains("never started"), "{advice}");
}
