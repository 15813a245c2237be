//! Every log invariant of FAILURE-EVENT-LOG, violated once and reported with its seq and rule.

use faultline_runtime::event::*;

use crate::support::*;

fn validate(log: &Log) -> Result<Validator, LogViolation> {
    Validator::validate_all(&log.records)
}

/// Asserts that the log's last record, and only it, breaks `rule`.
fn assert_last_breaks(log: &Log, rule: Rule) {
    let violation = validate(log).expect_err("the log must be refused");
    assert_eq!(violation, LogViolation { seq: log.records.len() as u64 - 1, rule });
    assert!(violation.to_string().starts_with(&format!("seq {}: ", log.records.len() - 1)));
}

/// A log with turn 1 open and step 1 of it open.
fn open_step() -> Log {
    let mut log = Log::default();
    log.push(Event::TurnStart(TurnStart { turn: 1 }));
    log.push(Event::StepStart(StepRef { turn: 1, step: 1 }));
    log
}

#[test]
fn well_formed_logs_pass() {
    let mut log = Log::default();
    log.tool_turn(1);
    log.tool_turn(2);
    let validator = validate(&log).unwrap();
    assert_eq!(validator.next_seq(), log.records.len() as u64);
    assert_eq!(validator.last_turn(), 2);
    assert_eq!(validator.open_turn(), None);
}

#[test]
fn seq_must_be_contiguous() {
    let mut log = open_step();
    log.records[1].seq = 2;
    let violation = validate(&log).unwrap_err();
    assert_eq!(violation, LogViolation { seq: 2, rule: Rule::SeqGap { expected: 1, found: 2 } });
}

#[test]
fn turns_are_numbered_from_one() {
    let mut log = Log::default();
    log.push(Event::TurnStart(TurnStart { turn: 2 }));
    assert_last_breaks(&log, Rule::TurnNumber { expected: 1, found: 2 });
}

#[test]
fn turns_never_nest() {
    let mut log = Log::default();
    log.push(Event::TurnStart(TurnStart { turn: 1 }));
    log.push(Event::TurnStart(TurnStart { turn: 2 }));
    assert_last_breaks(&log, Rule::NestedTurn { open: 1, found: 2 });
}

#[test]
fn turn_end_names_the_open_turn() {
    let mut log = Log::default();
    log.push(Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Completed }));
    assert_last_breaks(&log, Rule::TurnEndMismatch { open: None, found: 1 });
}

#[test]
fn turn_end_never_while_a_step_is_open() {
    let mut log = open_step();
    log.push(Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Interrupted }));
    assert_last_breaks(&log, Rule::TurnEndWithOpenStep { step: 1 });
}

#[test]
fn steps_are_numbered_from_one_inside_a_turn() {
    let mut log = Log::default();
    log.push(Event::TurnStart(TurnStart { turn: 1 }));
    log.push(Event::StepStart(StepRef { turn: 1, step: 2 }));
    assert_last_breaks(&log, Rule::StepNumber { expected: 1, found: 2 });
}

#[test]
fn steps_never_nest() {
    let mut log = open_step();
    log.push(Event::StepStart(StepRef { turn: 1, step: 2 }));
    assert_last_breaks(&log, Rule::NestedStep { open: 1, found: 2 });
}

#[test]
fn execution_events_only_inside_a_turn() {
    let mut log = Log::default();
    log.push(Event::UserMessage(UserMessage { message: Message::user_text("hi") }));
    assert_last_breaks(&log, Rule::OutsideTurn { type_name: "user/message".into() });
}

#[test]
fn step_events_only_inside_a_step() {
    let mut log = Log::default();
    log.push(Event::TurnStart(TurnStart { turn: 1 }));
    log.push(chunk(1, 1, 1, Chunk::TextDelta { index: 0, text: "x".into() }));
    assert_last_breaks(&log, Rule::OutsideStep { type_name: "assistant/chunk".into() });
}

#[test]
fn step_events_name_the_open_step() {
    let mut log = open_step();
    log.push(Event::ToolCall(tool_call(1, 2, "c1")));
    assert_last_breaks(
        &log,
        Rule::WrongStep { type_name: "tool/call".into(), turn: 1, step: 2, open_turn: 1, open_step: 1 },
    );
}

#[test]
fn one_assistant_message_per_step() {
    let mut log = open_step();
    log.push(Event::AssistantMessage(text_message(1, 1, "a")));
    log.push(Event::AssistantMessage(text_message(1, 1, "b")));
    assert_last_breaks(&log, Rule::DuplicateAssistantMessage);
}

#[test]
fn tool_call_must_be_requested_by_the_committed_message() {
    // Partial tool-call chunks of a failed attempt never become a tool/call.
    let mut log = open_step();
    log.push(chunk(1, 1, 1, tool_delta()));
    log.push(Event::ToolCall(tool_call(1, 1, "c1")));
    assert_last_breaks(&log, Rule::ToolCallNotRequested { call_id: "c1".into() });
}

#[test]
fn tool_call_ids_are_unique_in_a_step() {
    let mut log = open_step();
    log.push(Event::AssistantMessage(tool_message(1, 1, "c1")));
    log.push(Event::ToolCall(tool_call(1, 1, "c1")));
    log.push(Event::ToolCall(tool_call(1, 1, "c1")));
    assert_last_breaks(&log, Rule::DuplicateToolCall { call_id: "c1".into() });
}

#[test]
fn tool_result_needs_a_tool_call_in_the_same_step() {
    let mut log = open_step();
    log.push(Event::AssistantMessage(tool_message(1, 1, "c1")));
    log.push(Event::ToolResult(error_result(1, 1, "c1", ErrorCode::ToolOutcomeUnknown)));
    assert_last_breaks(&log, Rule::ToolResultWithoutCall { call_id: "c1".into() });
}

#[test]
fn tool_not_started_closer_needs_no_tool_call() {
    let mut log = open_step();
    log.push(Event::AssistantMessage(tool_message(1, 1, "c1")));
    log.push(Event::ToolResult(error_result(1, 1, "c1", ErrorCode::ToolNotStarted)));
    log.push(Event::StepEnd(StepRef { turn: 1, step: 1 }));
    log.push(Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Interrupted }));
    validate(&log).unwrap();
}

#[test]
fn one_tool_result_per_call() {
    let mut log = open_step();
    log.push(Event::AssistantMessage(tool_message(1, 1, "c1")));
    log.push(Event::ToolCall(tool_call(1, 1, "c1")));
    log.push(Event::ToolResult(ok_result(1, 1, "c1")));
    log.push(Event::ToolResult(ok_result(1, 1, "c1")));
    assert_last_breaks(&log, Rule::DuplicateToolResult { call_id: "c1".into() });
}

#[test]
fn only_derived_records_cite_sources() {
    let mut log = Log::default();
    log.push_cited(Event::TurnStart(TurnStart { turn: 1 }), vec![]);
    assert_last_breaks(&log, Rule::SourcesNotAllowed { type_name: "turn/start".into() });
}

#[test]
fn assistant_message_never_cites_a_failed_attempt() {
    let mut log = open_step();
    let partial = log.push(chunk(1, 1, 1, tool_delta()));
    let transport = Failure::new(ErrorCode::Transport, "reset");
    log.push(chunk(1, 1, 1, Chunk::finish(FinishReason::Error { failure: transport })));
    log.push_cited(Event::AssistantMessage(text_message(1, 1, "x")), vec![partial]);
    assert_last_breaks(&log, Rule::BadCitation { cited: partial, why: "chunk of a failed attempt" });
}

#[test]
fn assistant_message_cites_one_attempt_of_its_own_step() {
    let mut log = open_step();
    let first = log.push(chunk(1, 1, 1, Chunk::TextDelta { index: 0, text: "a".into() }));
    let second = log.push(chunk(1, 1, 2, Chunk::TextDelta { index: 0, text: "b".into() }));
    log.push_cited(Event::AssistantMessage(text_message(1, 1, "ab")), vec![first, second]);
    assert_last_breaks(&log, Rule::BadCitation { cited: second, why: "chunks of more than one attempt" });

    let mut log = open_step();
    let header = log.push(Event::RequestHeader(request_header()));
    log.push_cited(Event::AssistantMessage(text_message(1, 1, "x")), vec![header]);
    assert_last_breaks(&log, Rule::BadCitation { cited: header, why: "not an assistant/chunk of this step" });
}

/// The validator keeps a step's chunks as runs of consecutive seqs of one attempt: a record
/// between two chunks of one attempt, or a seq past a run's end, is not a chunk, and every
/// chunk of a run, its first and its last included, is one.
#[test]
fn citations_know_every_chunk_and_nothing_between_or_beyond_them() {
    fn text(s: &str) -> Chunk {
        Chunk::TextDelta { index: 0, text: s.into() }
    }
    let mut log = open_step();
    let first = log.push(chunk(1, 1, 1, text("a")));
    let middle = log.push(chunk(1, 1, 1, text("b")));
    let end_of_run = log.push(chunk(1, 1, 1, text("c")));
    let header = log.push(Event::RequestHeader(request_header()));
    let after_gap = log.push(chunk(1, 1, 1, text("d")));
    let prefix = log.clone();
    for cited in [vec![first, middle, end_of_run, after_gap], vec![end_of_run], vec![after_gap]] {
        let mut log = prefix.clone();
        log.push_cited(Event::AssistantMessage(text_message(1, 1, "abcd")), cited);
        validate(&log).expect("every chunk of attempt 1 may be cited");
    }
    let mut log = prefix.clone();
    log.push_cited(Event::AssistantMessage(text_message(1, 1, "x")), vec![first, header]);
    assert_last_breaks(&log, Rule::BadCitation { cited: header, why: "not an assistant/chunk of this step" });
    let mut log = prefix.clone();
    let beyond = after_gap + 1;
    log.push_cited(Event::AssistantMessage(text_message(1, 1, "x")), vec![beyond]);
    assert_last_breaks(&log, Rule::BadCitation { cited: beyond, why: "not an assistant/chunk of this step" });
    let mut log = prefix;
    let second_attempt = log.push(chunk(1, 1, 2, text("e")));
    log.push_cited(Event::AssistantMessage(text_message(1, 1, "x")), vec![after_gap, second_attempt]);
    assert_last_breaks(&log, Rule::BadCitation { cited: second_attempt, why: "chunks of more than one attempt" });
}

#[test]
fn a_refused_record_leaves_the_validator_unchanged() {
    let mut validator = Validator::new();
    let bad = Record::new(0, T0, Event::TurnStart(TurnStart { turn: 5 }));
    assert!(validator.push(&bad).is_err());
    assert_eq!(validator.next_seq(), 0);
    validator.push(&Record::new(0, T0, Event::TurnStart(TurnStart { turn: 1 }))).unwrap();
    assert_eq!(validator.open_turn(), Some(1));
}

#[test]
fn ignorable_unknown_records_constrain_nothing() {
    let mut log = Log::default();
    log.push(Event::TurnStart(TurnStart { turn: 1 }));
    let line = r#"{"type":"future/thing","seq":1,"time":1,"data":{},"ignorable":true}"#;
    log.records.push(Record::decode(line).unwrap());
    log.push(Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Completed }));
    validate(&log).unwrap();
}

/// A log paused on call `c1` of turn 1: its `tool/call` and `approval/requested`.
fn paused_on_c1() -> (Log, String) {
    let mut log = open_step();
    log.push(Event::AssistantMessage(tool_message(1, 1, "c1")));
    let call = tool_call(1, 1, "c1");
    let digest = arguments_digest(&call.arguments);
    log.push(Event::ToolCall(call));
    log.push(Event::ApprovalRequested(ApprovalRequested {
        turn: 1,
        step: 1,
        call_id: "c1".into(),
        name: "send".into(),
        digest: digest.clone(),
        deciders: Vec::new(),
        deadline_ms: None,
    }));
    (log, digest)
}

fn decided(digest: &str, decision: Decision) -> Event {
    Event::ApprovalDecided(ApprovalDecided {
        turn: 1,
        step: 1,
        call_id: "c1".into(),
        digest: digest.to_owned(),
        decision,
        by: "alice".into(),
        reason: None,
    })
}

fn dispatched(digest: &str) -> Event {
    Event::ApprovalDispatched(ApprovalDispatched { turn: 1, step: 1, call_id: "c1".into(), digest: digest.to_owned() })
}

/// FAILURE-APPROVAL as log rules: one request, one decision and one dispatch per call, each
/// bound to the digest of the call's own arguments, in that order; before its dispatch a call
/// that waited may only be answered as never run.
#[test]
fn an_approval_goes_requested_decided_dispatched_bound_to_the_calls_digest() {
    let (mut log, digest) = paused_on_c1();
    validate(&log).unwrap();
    log.push(decided(&digest, Decision::Approved));
    log.push(dispatched(&digest));
    log.push(Event::ToolResult(ok_result(1, 1, "c1")));
    log.push(Event::StepEnd(StepRef { turn: 1, step: 1 }));
    validate(&log).unwrap();

    let (mut other, _) = paused_on_c1();
    other.push(decided(&arguments_digest("{\"amount\":1000}"), Decision::Approved));
    assert_last_breaks(
        &other,
        Rule::ApprovalDigest {
            type_name: "approval/decided".into(),
            call_id: "c1".into(),
            expected: digest.clone(),
            found: arguments_digest("{\"amount\":1000}"),
        },
    );

    let (mut twice, _) = paused_on_c1();
    twice.push(decided(&digest, Decision::Approved));
    twice.push(decided(&digest, Decision::Denied));
    assert_last_breaks(&twice, Rule::DuplicateApproval { type_name: "approval/decided".into(), call_id: "c1".into() });

    let (mut unapproved, _) = paused_on_c1();
    unapproved.push(dispatched(&digest));
    let missing = "an approval";
    let rule = Rule::ApprovalOutOfOrder { type_name: "approval/dispatched".into(), call_id: "c1".into(), missing };
    assert_last_breaks(&unapproved, rule.clone());
    let (mut denied, _) = paused_on_c1();
    denied.push(decided(&digest, Decision::Denied));
    denied.push(dispatched(&digest));
    assert_last_breaks(&denied, rule);

    let (mut again, _) = paused_on_c1();
    again.push(decided(&digest, Decision::Approved));
    again.push(dispatched(&digest));
    again.push(dispatched(&digest));
    assert_last_breaks(
        &again,
        Rule::DuplicateApproval { type_name: "approval/dispatched".into(), call_id: "c1".into() },
    );

    let mut uncalled = open_step();
    uncalled.push(Event::AssistantMessage(tool_message(1, 1, "c1")));
    uncalled.push(decided(&digest, Decision::Approved));
    assert_last_breaks(
        &uncalled,
        Rule::ApprovalWithoutCall { type_name: "approval/decided".into(), call_id: "c1".into() },
    );
}

#[test]
fn a_call_that_waited_is_answered_only_as_never_run_before_its_dispatch() {
    let (_, digest) = paused_on_c1();
    let results = [
        (None, None, Some("ok")),
        (Some(Decision::Approved), Some(ErrorCode::ToolOutcomeUnknown), Some("TOOL_OUTCOME_UNKNOWN")),
        (Some(Decision::Approved), Some(ErrorCode::ApprovalDenied), Some("APPROVAL_DENIED")),
        (None, Some(ErrorCode::ApprovalDenied), Some("APPROVAL_DENIED")),
        (Some(Decision::Denied), Some(ErrorCode::ApprovalExpired), Some("APPROVAL_EXPIRED")),
        (Some(Decision::Denied), Some(ErrorCode::ApprovalDenied), None),
        (None, Some(ErrorCode::ApprovalExpired), None),
        (Some(Decision::Approved), Some(ErrorCode::AbortedBeforeDispatch), None),
    ];
    for (decision, code, refused) in results {
        let (mut log, _) = paused_on_c1();
        if let Some(decision) = decision {
            log.push(decided(&digest, decision));
        }
        log.push(Event::ToolResult(match code {
            None => ok_result(1, 1, "c1"),
            Some(code) => error_result(1, 1, "c1", code),
        }));
        match refused {
            Some(code) => {
                assert_last_breaks(&log, Rule::ResultWithoutApproval { call_id: "c1".into(), code: code.to_owned() })
            }
            None => {
                validate(&log).unwrap_or_else(|v| panic!("{decision:?} {code:?}: {v}"));
            }
        }
    }
}
