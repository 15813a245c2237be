//! Findings a user can act on (FAILURE-FINDINGS), through the embedder's front door: an
//! agent of its own (one HTTP transfer tool, written the way docs/your-agent.md says, in the
//! variants users get wrong) under `Harness`, with the provider settings left at their
//! defaults. Each finding must name what happened and what would prevent it; liveness is
//! judged against the agent's own settings, and the report says which.

use std::sync::Arc;
use std::time::Duration;

use faultline_runtime::event::ToolSchema;
use faultline_runtime::seams::{BoxFuture, Clock, Entropy, Seams};
use faultline_runtime::tool::{HttpFailure, Tool, ToolHttp, ToolInvocation, ToolOutput, ToolSet};
use faultline_sim::{AgentUnderTest, Finding, Harness, HarnessReport, Service, ServiceFaults};
use tokio_util::sync::CancellationToken;

/// The header the bank deduplicates by.
const KEY: &str = "idempotency-key";
/// One attempt's wait for the bank's reply, in ms.
const ATTEMPT_TIMEOUT_MS: u64 = 2_000;
/// The transfer tool's own deadline, in ms.
const CALL_TIMEOUT_MS: u64 = 10_000;

/// How the tool keys its attempts.
#[derive(Clone, Copy, PartialEq)]
enum Keys {
    /// The call's execution id, on every attempt (what docs/your-agent.md says).
    ExecutionId,
    /// A fresh random key per attempt (a common mistake).
    FreshPerAttempt,
    /// No key at all.
    Absent,
}

/// One variant of the transfer tool.
#[derive(Clone, Copy)]
struct Transfer {
    keys: Keys,
    attempts: u32,
    /// A lost reply ends the call as `Unknown` (right) or `Failed` (wrong).
    lost_reply_unknown: bool,
    /// The request is made from a task the tool spawns (it loses the execution id).
    own_task: bool,
}

impl Transfer {
    const CAREFUL: Transfer =
        Transfer { keys: Keys::ExecutionId, attempts: 3, lost_reply_unknown: true, own_task: false };
}

struct TransferTool {
    how: Transfer,
    http: ToolHttp,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
}

impl Tool for TransferTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: "transfer".into(),
            description: "Moves money between two accounts.".into(),
            parameters: serde_json::json!({
                "type": "object",
                "required": ["from", "to", "cents"],
                "properties": {
                    "from": {"type": "string", "minLength": 1, "maxLength": 16},
                    "to": {"type": "string", "minLength": 1, "maxLength": 16},
                    "cents": {"type": "integer", "minimum": 1, "maximum": 1000000}
                }
            }),
        }
    }

    fn timeout(&self) -> Option<Duration> {
        Some(Duration::from_millis(CALL_TIMEOUT_MS))
    }

    fn call(&self, invocation: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        let (how, http, clock, entropy) = (self.how, self.http.clone(), self.clock.clone(), self.entropy.clone());
        Box::pin(async move {
            let work = async move {
                if how.own_task {
                    // Its own task: the runtime's execution id does not ride along.
                    let task = tokio::spawn(async move {
                        transfer(how, &http, clock.as_ref(), entropy.as_ref(), &invocation).await
                    });
                    return task.await.unwrap_or_else(|_| ToolOutput::Failed("the transfer task died".into()));
                }
                transfer(how, &http, clock.as_ref(), entropy.as_ref(), &invocation).await
            };
            tokio::select! {
                output = work => output,
                () = cancel.cancelled() => ToolOutput::Unknown("stopped with a transfer possibly in flight".into()),
            }
        })
    }
}

async fn transfer(
    how: Transfer,
    http: &ToolHttp,
    clock: &dyn Clock,
    entropy: &dyn Entropy,
    invocation: &ToolInvocation,
) -> ToolOutput {
    let mut may_have_arrived = false;
    let mut last = String::new();
    for attempt in 0..how.attempts {
        if attempt > 0 {
            clock.sleep(Duration::from_millis(250)).await;
        }
        let key = match how.keys {
            Keys::ExecutionId => Some(invocation.execution_id.clone()),
            Keys::FreshPerAttempt => Some(format!("{:016x}", entropy.next_u64())),
            Keys::Absent => None,
        };
        let mut headers = vec![("content-type", "application/json")];
        if let Some(key) = &key {
            headers.push((KEY, key.as_str()));
        }
        let body = invocation.arguments.to_string();
        match http.post("http://bank/transfers", &headers, body, Duration::from_millis(ATTEMPT_TIMEOUT_MS)).await {
            Ok(reply) if (200..300).contains(&reply.status) => return ToolOutput::Ok(reply.body),
            Ok(reply) => last = format!("the bank answered {}", reply.status),
            Err(failure @ HttpFailure::Invalid(_)) => return ToolOutput::Failed(failure.to_string()),
            Err(failure) => {
                may_have_arrived |= failure.may_have_arrived();
                last = failure.to_string();
            }
        }
    }
    if may_have_arrived && how.lost_reply_unknown {
        ToolOutput::Unknown(format!("the transfer may have happened: {last}"))
    } else {
        ToolOutput::Failed(format!("the transfer failed: {last}"))
    }
}

/// The agent: the transfer tool as `how` says, the bank as `bank` says, and no provider
/// settings of its own (every default applies: the idle watchdog's 300 000 ms among them).
fn agent(how: Transfer, bank: Service) -> AgentUnderTest {
    AgentUnderTest::new("payments", move |seams: &Seams| {
        ToolSet::new().with(Arc::new(TransferTool {
            how,
            http: ToolHttp::new(seams),
            clock: seams.clock.clone(),
            entropy: seams.entropy.clone(),
        }))
    })
    .service(bank)
}

/// A bank that honours the key, and loses many replies.
fn deduplicating_bank() -> Service {
    Service::new("bank").dedup_by_header(KEY).faults(ServiceFaults { error_rate: 0.2, lost_reply_rate: 0.5 })
}

/// The first finding of `invariant`, or a panic showing the report.
fn finding<'a>(report: &'a HarnessReport, invariant: &str) -> &'a Finding {
    report.finding(invariant).unwrap_or_else(|| panic!("no {invariant} finding:\n{report}"))
}

#[test]
fn a_careful_tool_on_default_provider_settings_passes_within_its_own_bound() {
    let report = Harness::new(agent(Transfer::CAREFUL, deduplicating_bank())).seeds(0..200).run();
    report.assert_passed();
    // The bound is the agent's own: the default progress bound (three idle watchdogs: a
    // stream that pings lasts that long), named as a default.
    let bound = &report.liveness_bounds["generated"];
    let progress = bound.wait("provider.progress_timeout_ms").expect("the progress bound is part of the bound");
    assert_eq!((progress.value_ms, progress.default), (900_000, true), "{bound}");
    assert_eq!(bound.wait("tool transfer timeout").map(|w| w.value_ms), Some(CALL_TIMEOUT_MS), "{bound}");
    assert!(bound.total_ms() > 900_000, "{bound}");
    // Some runs needed it: a stream stalled before the heal waited out the watchdog, and the
    // report says which setting made recovery slow, its value, and how long it took.
    let slow = report
        .slow_recoveries
        .iter()
        .find(|s| s.waits.iter().any(|w| w.contains("a stalled stream waited for the idle watchdog")))
        .unwrap_or_else(|| panic!("no run waited for the idle watchdog:\n{report}"));
    assert!(slow.took_ms > slow.workload_ms && slow.took_ms <= bound.total_ms(), "{slow}");
    assert!(report.to_string().contains("liveness bound of generated: "), "{report}");
}

#[test]
fn repeats_with_a_fresh_key_per_attempt_are_told_their_keys_differed() {
    let how = Transfer { keys: Keys::FreshPerAttempt, ..Transfer::CAREFUL };
    let report = Harness::new(agent(how, deduplicating_bank())).seeds(0..40).run();
    let found = finding(&report, "at-most-once");
    assert_eq!((found.tools.as_slice(), found.service.as_deref()), (&["transfer".to_owned()][..], Some("bank")));
    assert!(found.evidence.contains("tool transfer did its effect on bank"), "{}", found.evidence);
    assert!(found.advice.contains("different keys (idempotency-key: "), "{}", found.advice);
    assert!(found.advice.contains("ToolInvocation::execution_id"), "{}", found.advice);
}

#[test]
fn repeats_without_a_key_are_told_no_key_was_sent() {
    let how = Transfer { keys: Keys::Absent, ..Transfer::CAREFUL };
    let report = Harness::new(agent(how, deduplicating_bank())).seeds(0..40).run();
    let found = finding(&report, "at-most-once");
    assert!(
        found.advice.contains("Only some repeats carried the idempotency-key header")
            || found.advice.contains("carried no idempotency key"),
        "{}",
        found.advice
    );
}

#[test]
fn a_key_the_service_was_not_declared_to_honour_is_named_with_its_header() {
    let bank = Service::new("bank").faults(ServiceFaults { error_rate: 0.2, lost_reply_rate: 0.5 });
    let report = Harness::new(agent(Transfer::CAREFUL, bank)).seeds(0..40).run();
    let found = finding(&report, "at-most-once");
    assert!(found.advice.contains("the same key (idempotency-key: \"sim:"), "{}", found.advice);
    assert!(found.advice.contains("declared without dedup_by_header"), "{}", found.advice);
    assert!(found.advice.contains(".dedup_by_header(\"idempotency-key\")"), "{}", found.advice);
}

#[test]
fn a_lost_reply_reported_as_a_failure_is_told_to_end_unknown() {
    let how = Transfer { attempts: 1, lost_reply_unknown: false, ..Transfer::CAREFUL };
    let report = Harness::new(agent(how, deduplicating_bank())).seeds(0..40).run();
    let found = finding(&report, "result-matches-receipt");
    assert!(found.evidence.contains("tool transfer said execution"), "{}", found.evidence);
    assert!(found.advice.contains("ToolOutput::Unknown"), "{}", found.advice);
}

#[test]
fn a_request_from_a_task_the_tool_spawned_is_told_where_to_make_it() {
    let how = Transfer { own_task: true, ..Transfer::CAREFUL };
    let report = Harness::new(agent(how, deduplicating_bank())).seeds(0..10).run();
    let found = finding(&report, "intent-before-effect");
    assert!(found.evidence.contains("bank received an effect from no tool call"), "{}", found.evidence);
    assert_eq!(found.service.as_deref(), Some("bank"));
    assert!(found.advice.contains("outside any tool call's own task"), "{}", found.advice);
}

/// A tool that waits for a settlement the ledger never reports, and declares no deadline.
struct AwaitSettlement {
    http: ToolHttp,
    clock: Arc<dyn Clock>,
}

impl Tool for AwaitSettlement {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: "await_settlement".into(),
            description: "Waits until a transfer settles.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"id": {"type": "string", "maxLength": 8}}}),
        }
    }

    fn call(&self, _invocation: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        let (http, clock) = (self.http.clone(), self.clock.clone());
        Box::pin(async move {
            loop {
                if cancel.is_cancelled() {
                    return ToolOutput::Aborted("stopped waiting".into());
                }
                let reply = http.get("http://ledger/settled", &[], Duration::from_millis(ATTEMPT_TIMEOUT_MS)).await;
                if reply.is_ok_and(|r| r.body.contains("settled")) {
                    return ToolOutput::Ok("settled".into());
                }
                clock.sleep(Duration::from_millis(1_000)).await;
            }
        })
    }
}

#[test]
fn a_tool_without_a_deadline_that_waits_forever_is_named_in_the_liveness_finding() {
    let agent = AgentUnderTest::new("settlements", |seams: &Seams| {
        ToolSet::new().with(Arc::new(AwaitSettlement { http: ToolHttp::new(seams), clock: seams.clock.clone() }))
    })
    .service(Service::new("ledger").read_only());
    let report = Harness::new(agent).seeds(0..6).run();
    let found = finding(&report, "liveness");
    assert!(found.evidence.contains("did not converge within its bound of "), "{}", found.evidence);
    assert!(found.evidence.contains("provider.progress_timeout_ms = 900 000 ms, the default"), "{}", found.evidence);
    assert!(found.evidence.contains("still waiting on call "), "{}", found.evidence);
    assert!(found.advice.contains("Tool await_settlement declares no deadline"), "{}", found.advice);
    assert_eq!(report.liveness_bounds["generated"].untimed_tools, ["await_settlement"]);
}

#[test]
fn a_scenario_whose_promises_no_longer_hold_is_told_which_key_to_update() {
    let text = include_str!("../../../scenarios/happy-tool-turn.toml")
        .replace("model_requests = 2", "model_requests = 3\ncrashes_fired = 1\nfaults_fired = [\"stall\"]");
    let result = faultline_sim::run(&faultline_sim::Scenario::parse(&text).unwrap(), 0);
    let advice = |invariant: &str| {
        let found = result.violations.iter().find(|v| v.invariant == invariant);
        found.unwrap_or_else(|| panic!("no {invariant}: {:?}", result.violations)).advice.clone()
    };
    assert!(advice("expectation").contains("expect.model_requests"), "{}", advice("expectation"));
    assert!(
        advice("planned-crash-fired").contains("expect.crashes_fired says 1, and 0 fired"),
        "{}",
        advice("planned-crash-fired")
    );
    assert!(
        advice("planned-fault-fired").contains("expect.faults_fired names stall"),
        "{}",
        advice("planned-fault-fired")
    );
}

#[test]
fn a_real_run_that_cannot_start_names_what_is_missing() {
    let scenario = faultline_sim::Scenario::built_in("happy-tool-turn").unwrap();
    let options =
        faultline_sim::real::RealOptions { agent_exe: "/nonexistent/faultline".into(), keep: None, bugs: Vec::new() };
    let result = faultline_sim::real::judged(&scenario, 0, &options);
    let found = result.violations.iter().find(|v| v.invariant == "real-run").expect("the run could not run");
    assert!(found.detail.contains("/nonexistent/faultline"), "{}", found.detail);
    assert!(found.advice.contains("names what is missing"), "{}", found.advice);
}

/// Where each invariant of the catalog has its finding test: a new invariant must get one.
const FINDING_TESTS: [(&str, &str); 40] = [
    ("secret-leak", "planted scrub-by-pattern-only"),
    ("false-corrupt", "planted holes-are-corrupt"),
    ("refusal-left-file-untouched", "oracle::planted_evidence"),
    ("rot-refused", "planted any-damage-is-torn, hole-past-the-damaged-frame"),
    ("unprovoked-stop", "planted cite-failed-attempts"),
    ("liveness", "a_tool_without_a_deadline_that_waits_forever_is_named_in_the_liveness_finding"),
    ("log-invariants", "oracle::planted_evidence"),
    ("turn-closed", "oracle::planted_evidence"),
    ("planned-crash-fired", "a_scenario_whose_promises_no_longer_hold_is_told_which_key_to_update"),
    ("durable-prefix", "planted no-sync-dir-after-link, no-truncate-back, ack-before-fsync"),
    ("outcome-durable", "planted outcome-before-durable"),
    ("accepted-kept-or-reported", "planted drop-failed-batch"),
    ("answer-limit", "planted no-answer-limit"),
    ("tool-output-limit", "oracle::planted_evidence"),
    ("tool-output-as-printed", "oracle::planted_evidence"),
    ("failure-message-bounded", "oracle::planted_evidence"),
    ("intent-before-effect", "planted tool-body-before-flush; a_request_from_a_task_the_tool_spawned_..."),
    ("receipt-matches-call", "oracle::planted_evidence"),
    ("fenced-epoch", "planted zombie-write-unfenced"),
    ("answer-looked-up", "planted lost-answer-rerun"),
    ("at-most-once", "planted unknown-claimable; the three key findings above"),
    ("result-matches-receipt", "planted repair-not-started; a_lost_reply_reported_as_a_failure_..."),
    ("answer-heard", "planted timeout-hides-answer"),
    ("approval-matches-effect", "planted decision-unbound"),
    ("approval-dispatched-once", "planted approval-redispatch"),
    ("denied-never-runs", "oracle::planted_evidence"),
    ("decision-durable-before-dispatch", "planted dispatch-before-durable"),
    ("retry-budget", "oracle::planted_evidence"),
    ("retry-after-honoured", "planted ignore-retry-after"),
    ("final-failure-not-retried", "planted stream-closed-retryable"),
    ("answer-not-retried", "planted refusal-as-empty"),
    ("retry-backoff", "planted unlogged-retry"),
    ("failure-code-as-served", "oracle::planted_evidence; planted error-event-as-end"),
    ("answer-kept", "planted pings-not-activity"),
    ("final-calls-not-run", "planted refused-call-run"),
    ("request-accepted", "planted signature-dropped"),
    ("expectation", "a_scenario_whose_promises_no_longer_hold_is_told_which_key_to_update"),
    ("planned-fault-fired", "a_scenario_whose_promises_no_longer_hold_is_told_which_key_to_update"),
    ("parity", "oracle::planted_evidence"),
    ("real-run", "a_real_run_that_cannot_start_names_what_is_missing"),
];

#[test]
fn every_invariant_in_the_catalog_has_a_finding_test() {
    let listed: Vec<&str> = FINDING_TESTS.iter().map(|(invariant, _)| *invariant).collect();
    let catalog: Vec<&str> = faultline_sim::Invariant::ALL.iter().map(|i| i.name()).collect();
    assert_eq!(listed, catalog, "one row per invariant, in catalog order");
    for invariant in faultline_sim::Invariant::ALL {
        assert!(
            invariant.advice().ends_with('.') && invariant.advice().len() > 40,
            "{invariant}: {}",
            invariant.advice()
        );
    }
}

/// A tool whose parameter schema is not JSON Schema.
struct BadSchema;

impl Tool for BadSchema {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: "transfer".into(),
            description: "Moves money.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"to": {"type": "banana"}}}),
        }
    }

    fn call(&self, _invocation: ToolInvocation, _cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async { ToolOutput::Ok("never".into()) })
    }
}

#[test]
#[should_panic(expected = "tool transfer: its parameter schema at properties.to.type: \"banana\"")]
fn a_tool_schema_that_is_not_json_schema_stops_the_harness_before_any_run() {
    let agent = AgentUnderTest::new("bad", |_: &Seams| ToolSet::new().with(Arc::new(BadSchema)));
    Harness::new(agent).seeds(0..1).run();
}

/// An `--agent` file's tools run in the fleet world too (two workers, a zombie, a store that
/// loses answers): a fleet seed of `generated` finds `send_email` repeating an effect its
/// service cannot deduplicate, advised as anywhere else, and the fixed file
/// passes that seed.
#[test]
fn an_agent_files_tools_run_in_the_fleet_world_and_are_held_to_at_most_once() {
    let text = include_str!("../../../examples/your-agent/agent.toml");
    let generated = faultline_sim::Scenario::built_in("generated").unwrap();
    let buggy = Arc::new(faultline_sim::agent_from_file("your-agent", text).unwrap());
    let result = faultline_sim::run_agent(&generated, 18, &buggy);
    assert!(result.trace.iter().any(|line| line.contains("worker-a will stop")), "seed 18 runs as a fleet");
    let repeat = result.violations.iter().find(|v| v.invariant.name() == "at-most-once").expect("a repeat is found");
    assert!(repeat.detail.contains("tool send_email"), "{}", repeat.detail);
    assert!(repeat.advice.contains("idempotency key"), "{}", repeat.advice);
    let fixed_text = text.replace("dedup = \"none\"", "dedup = \"execution-id\"");
    let fixed = Arc::new(faultline_sim::agent_from_file("your-agent-fixed", &fixed_text).unwrap());
    let result = faultline_sim::run_agent(&generated, 18, &fixed);
    assert!(result.violations.is_empty(), "{:?}", result.violations);
}
