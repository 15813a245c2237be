//! Approvals in the log (FAILURE-APPROVAL): crash repair leaves a paused turn paused, a
//! decision is checked against what the session waits for, and `approval::decide` writes it
//! durably as the session's new owner — on a real JSONL file.

use std::sync::Arc;

use faultline_runtime::approval::{awaiting_approval, check_decision, decide, DecisionRequest};
use faultline_runtime::event::*;
use faultline_runtime::secrets::Scrubber;
use faultline_runtime::store::{closers_with, FileStore, Format, NoEvidence, Store};
use faultline_runtime::Error;

use crate::fixtures::{seams_with, FaultyFs, TestProcess};
use crate::store_contract::sid;
use crate::support::*;

/// Turn 1 paused in step 1 on calls `c1` (deciders alice, deadline T0 + 1000) and `c2`.
fn paused() -> Log {
    let mut log = Log::default();
    log.push(Event::TurnStart(TurnStart { turn: 1 }));
    log.push(Event::StepStart(StepRef { turn: 1, step: 1 }));
    let calls = [
        ContentBlock::tool_call("c1", "send", "{\"amount\":10}"),
        ContentBlock::tool_call("c2", "send", "{\"amount\":20}"),
    ];
    let message = Message { role: Role::Assistant, content: calls.to_vec() };
    log.push(Event::AssistantMessage(AssistantMessage { turn: 1, step: 1, message, usage: None }));
    for (id, arguments, deciders, deadline_ms) in
        [("c1", "{\"amount\":10}", vec!["alice".to_owned()], Some(T0 + 1000)), ("c2", "{\"amount\":20}", vec![], None)]
    {
        let call = ToolCall { turn: 1, step: 1, call_id: id.into(), name: "send".into(), arguments: arguments.into() };
        log.push(Event::ToolCall(call));
        log.push(Event::ApprovalRequested(ApprovalRequested {
            turn: 1,
            step: 1,
            call_id: id.into(),
            name: "send".into(),
            digest: arguments_digest(arguments),
            deciders,
            deadline_ms,
        }));
    }
    log
}

fn refused(result: faultline_runtime::Result<faultline_runtime::approval::Decided>) -> String {
    match result {
        Err(Error::ApprovalRefused(why)) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn crash_repair_leaves_a_paused_turn_paused_and_closes_only_a_dispatched_call() {
    let log = paused();
    assert!(closers_with(&log.records, "s", &NoEvidence).is_empty(), "a paused turn is not interrupted");
    let mut crashed = paused();
    let digest = arguments_digest("{\"amount\":10}");
    crashed.push(Event::ApprovalDecided(ApprovalDecided {
        turn: 1,
        step: 1,
        call_id: "c1".into(),
        digest: digest.clone(),
        decision: Decision::Approved,
        by: "alice".into(),
        reason: None,
    }));
    crashed.push(Event::ApprovalDispatched(ApprovalDispatched { turn: 1, step: 1, call_id: "c1".into(), digest }));
    let closers = closers_with(&crashed.records, "s", &NoEvidence);
    let kinds: Vec<String> = closers
        .iter()
        .map(|r| match &r.event {
            Event::ToolResult(t) => format!("{}:{}", t.call_id, t.error.as_ref().unwrap().code),
            other => other.type_name().to_owned(),
        })
        .collect();
    assert_eq!(kinds, ["c1:TOOL_OUTCOME_UNKNOWN"], "no step/end, no turn/end: c2 still waits");
    crashed.records.extend(closers);
    Validator::validate_all(&crashed.records).unwrap();
    let waiting = awaiting_approval(&crashed.records);
    assert_eq!(waiting.iter().map(|w| w.call_id.as_str()).collect::<Vec<_>>(), ["c2"]);
}

#[test]
fn a_decision_is_checked_against_what_the_session_waits_for() {
    let log = paused();
    let alice = |call: &str, decision| DecisionRequest::new(call, decision, "alice");
    let ok = check_decision(&log.records, &alice("c1", Decision::Approved), T0).unwrap();
    assert_eq!(ok.record.digest, arguments_digest("{\"amount\":10}"), "bound to the call's own arguments");
    let why = refused(check_decision(&log.records, &DecisionRequest::new("c1", Decision::Approved, "bob"), T0));
    assert!(why.contains("deciders are alice"), "{why}");
    let why = refused(check_decision(&log.records, &alice("c1", Decision::Approved), T0 + 1000));
    assert!(why.contains("expired"), "{why}");
    let why = refused(check_decision(&log.records, &alice("c3", Decision::Approved), T0));
    assert!(why.contains("no call c3"), "{why}");
    let stale = alice("c2", Decision::Approved).digest_prefix(&arguments_digest("{\"amount\":10}")[..8]);
    assert!(refused(check_decision(&log.records, &stale, T0)).contains("not the ones you saw"));
    let mut decided = log.clone();
    decided.push(Event::ApprovalDecided(ok.record));
    let why = refused(check_decision(&decided.records, &alice("c1", Decision::Denied), T0));
    assert!(why.contains("already approved by alice"), "the refusal names the first decision: {why}");
    // The limits, at their edges: a name of 1..=128 bytes, a reason of at most 4 096.
    let by = |name: String| DecisionRequest::new("c2", Decision::Denied, name);
    assert!(refused(check_decision(&log.records, &by(String::new()), T0)).contains("decider's name"));
    assert!(refused(check_decision(&log.records, &by(" ".into()), T0)).contains("decider's name"));
    assert!(refused(check_decision(&log.records, &by("b".repeat(129)), T0)).contains("decider's name"));
    check_decision(&log.records, &by("b".repeat(128)), T0).unwrap();
    let reason = |bytes: usize| DecisionRequest::new("c2", Decision::Denied, "alice").reason("x".repeat(bytes));
    assert!(refused(check_decision(&log.records, &reason(4097), T0)).contains("reason"));
    check_decision(&log.records, &reason(4096), T0).unwrap();
}

#[test]
fn decide_appends_durably_as_the_new_owner_and_writes_nothing_when_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let world = TestProcess::world();
    let (agent, person) = (TestProcess::new("agent", &world), TestProcess::new("person", &world));
    let fs = FaultyFs::default();
    let store = |process| FileStore::new(seams_with(process, Arc::new(fs.clone())), tmp.path(), Format::Jsonl);
    let mut log = store(agent.clone()).create(&sid("s"), T0).unwrap();
    log.append(&paused().records).unwrap();
    let live = decide(
        &store(person.clone()),
        &sid("s"),
        &DecisionRequest::new("c2", Decision::Approved, "bob"),
        T0,
        &Scrubber::default(),
    );
    assert!(matches!(live, Err(Error::SessionLocked { .. })), "a live owner decides itself: {live:?}");
    drop(log);
    agent.kill();
    let secrets = Scrubber::default();
    secrets.register("sk-secret-123456");
    let request = DecisionRequest::new("c2", Decision::Denied, "bob").reason("key sk-secret-123456 leaked");
    let decided = decide(&store(person.clone()), &sid("s"), &request, T0, &secrets).unwrap();
    assert_eq!(decided.call.call_id, "c2");
    let records = store(person.clone()).inspect(&sid("s")).unwrap().records;
    let Some(Event::ApprovalDecided(written)) = records.last().map(|r| &r.event) else { panic!("{records:?}") };
    assert_eq!(written.decision, Decision::Denied);
    assert!(!written.reason.as_deref().unwrap().contains("sk-secret"), "scrubbed by value: {written:?}");
    let before = store(person.clone()).inspect(&sid("s")).unwrap().records.len();
    let again = DecisionRequest::new("c2", Decision::Approved, "bob");
    assert!(refused(decide(&store(person.clone()), &sid("s"), &again, T0, &secrets)).contains("already denied by bob"));
    assert_eq!(store(person).inspect(&sid("s")).unwrap().records.len(), before, "a refusal writes nothing");
}

/// What a session waits on is read from its records alone: each waiting call with its own
/// arguments, its decision and whether it was dispatched; nothing of a step or a turn that
/// ended.
#[test]
fn what_waits_is_the_open_steps_calls_without_a_result() {
    let mut log = paused();
    let waiting = awaiting_approval(&log.records);
    let args: Vec<(&str, &str)> = waiting.iter().map(|w| (w.call_id.as_str(), w.arguments.as_str())).collect();
    assert_eq!(args, [("c1", "{\"amount\":10}"), ("c2", "{\"amount\":20}")], "each call with its own arguments");
    let digest = arguments_digest("{\"amount\":10}");
    log.push(Event::ApprovalDecided(ApprovalDecided {
        turn: 1,
        step: 1,
        call_id: "c1".into(),
        digest: digest.clone(),
        decision: Decision::Approved,
        by: "alice".into(),
        reason: None,
    }));
    log.push(Event::ApprovalDispatched(ApprovalDispatched { turn: 1, step: 1, call_id: "c1".into(), digest }));
    let waiting = awaiting_approval(&log.records);
    let dispatched: Vec<(&str, bool)> = waiting.iter().map(|w| (w.call_id.as_str(), w.dispatched)).collect();
    assert_eq!(dispatched, [("c1", true), ("c2", false)]);
    assert!(waiting[0].decision.is_some() && waiting[1].decision.is_none());

    // A step that ended with a call unanswered leaves nothing waiting in the next one.
    let mut moved_on = paused();
    moved_on.push(Event::StepEnd(StepRef { turn: 1, step: 1 }));
    moved_on.push(Event::StepStart(StepRef { turn: 1, step: 2 }));
    assert!(awaiting_approval(&moved_on.records).is_empty());
    // Nor does a turn that ended.
    let mut ended = paused();
    ended.push(Event::StepEnd(StepRef { turn: 1, step: 1 }));
    ended.push(Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Interrupted }));
    assert!(awaiting_approval(&ended.records).is_empty());
}
