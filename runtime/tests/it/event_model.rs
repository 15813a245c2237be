//! The JSON shape of records, headers and failures (FAILURE-EVENT-LOG, docs/internals/requirements.md).

use faultline_runtime::event::*;
use serde_json::json;

use crate::support::*;

fn failure() -> Failure {
    Failure {
        message: "rate limited".into(),
        code: ErrorCode::RateLimit,
        status: Some(429),
        provider_retry_after_ms: Some(2000),
        request_id: Some("req-1".into()),
    }
}

/// One sample of every event type this build knows.
fn samples() -> Vec<Event> {
    vec![
        Event::TurnStart(TurnStart { turn: 1 }),
        Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Completed }),
        Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Aborted { cause: AbortCause::Disposed } }),
        Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Error { error: failure() } }),
        Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::MaxTokens }),
        Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Interrupted }),
        Event::StepStart(StepRef { turn: 1, step: 1 }),
        Event::StepEnd(StepRef { turn: 1, step: 1 }),
        Event::UserMessage(UserMessage { message: Message::user_text("hi") }),
        Event::RequestHeader(request_header()),
        chunk(1, 1, 1, Chunk::BlockStart { index: 0, kind: BlockKind::Reasoning }),
        chunk(1, 1, 1, Chunk::ReasoningDelta { index: 0, text: "thinking".into() }),
        chunk(1, 1, 1, Chunk::TextDelta { index: 1, text: "Hi".into() }),
        chunk(1, 1, 1, tool_delta()),
        chunk(1, 1, 1, Chunk::ToolCallDelta { index: 2, id: None, name: None, arguments_delta: "\"x\"}".into() }),
        chunk(1, 1, 1, Chunk::BlockEnd { index: 0 }),
        chunk(
            1,
            1,
            1,
            Chunk::Usage {
                usage: Usage { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7, ..Usage::default() },
            },
        ),
        chunk(1, 1, 2, Chunk::finish(FinishReason::Aborted { failure: Failure::new(ErrorCode::Aborted, "stop") })),
        chunk(1, 1, 2, Chunk::finish(FinishReason::Error { failure: failure() })),
        chunk(1, 1, 2, Chunk::finish(FinishReason::MaxTokens)),
        Event::AssistantMessage(AssistantMessage { usage: Some(Usage::default()), ..tool_message(1, 1, "c1") }),
        Event::ToolCall(tool_call(1, 1, "c1")),
        Event::ToolResult(ok_result(1, 1, "c1")),
        Event::ToolResult(error_result(1, 1, "c1", ErrorCode::ToolOutcomeUnknown)),
        Event::LlmRetry(Box::new(LlmRetry {
            retry_id: "r1".into(),
            turn: 1,
            step: 1,
            provider: "deepseek".into(),
            mode: "normal".into(),
            policy_key: json!(["normal", 2, ["RATE_LIMIT", "SERVER"], 500, 10000, 0]),
            retry: 1,
            max_retries: Some(2),
            delay_ms: 500,
            failure: failure(),
        })),
        Event::LlmRetryStarted(LlmRetryStarted { retry_id: "r1".into(), turn: 1, step: 1, retry: 1 }),
        Event::ApprovalRequested(ApprovalRequested {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
            name: "send".into(),
            digest: arguments_digest("{}"),
            deciders: vec!["alice".into()],
            deadline_ms: Some(T0 + 60_000),
        }),
        Event::ApprovalRequested(ApprovalRequested {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
            name: "send".into(),
            digest: arguments_digest("{}"),
            deciders: Vec::new(),
            deadline_ms: None,
        }),
        Event::ApprovalDecided(ApprovalDecided {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
            digest: arguments_digest("{}"),
            decision: Decision::Denied,
            by: "alice".into(),
            reason: Some("not paid".into()),
        }),
        Event::ApprovalDispatched(ApprovalDispatched {
            turn: 1,
            step: 1,
            call_id: "c1".into(),
            digest: arguments_digest("{}"),
        }),
        Event::ToolResult(error_result(1, 1, "c1", ErrorCode::ApprovalDenied)),
    ]
}

/// A paused turn says so in its outcome (which the real harness's reports carry, so it reads
/// back), never in its log: the validator refuses a `turn/end` that says it.
#[test]
fn awaiting_approval_is_never_a_turn_end() {
    let paused = TurnEndReason::AwaitingApproval { calls: vec!["c1".into()] };
    let mut open = Validator::new();
    open.push(&Record::new(0, T0, Event::TurnStart(TurnStart { turn: 1 }))).unwrap();
    let refused = open.push(&Record::new(1, T0, Event::TurnEnd(TurnEnd { turn: 1, reason: paused.clone() })));
    assert_eq!(refused.unwrap_err().rule, Rule::PausedTurnEnd);
    let line = serde_json::to_string(&paused).unwrap();
    assert_eq!(line, r#"{"kind":"awaiting-approval","calls":["c1"]}"#);
    assert_eq!(serde_json::from_str::<TurnEndReason>(&line).unwrap(), paused);
}

#[test]
fn every_event_type_round_trips() {
    let samples = samples();
    for name in EVENT_TYPES {
        assert!(samples.iter().any(|e| e.type_name() == *name), "no sample for {name}");
    }
    for (seq, event) in samples.into_iter().enumerate() {
        let mut record = Record::new(seq as u64, T0, event);
        if record.event.may_cite_sources() {
            record.source_seqs = Some(vec![0, 1]);
        }
        let line = record.encode();
        assert!(!line.contains('\n'), "a record is exactly one line: {line}");
        let decoded = Record::decode(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(decoded, record);
        assert_eq!(decoded.encode(), line, "re-encoding is byte-identical");
    }
}

#[test]
fn record_json_shape_matches_the_spec_example() {
    let spec = r#"{"type":"tool/call","seq":12,"time":1767225600123,"data":{"turn":2,"step":1,"call_id":"c1","name":"send","arguments":"{\"to\":\"team\"}"}}"#;
    let record = Record::decode(spec).unwrap();
    assert_eq!(
        record.event,
        Event::ToolCall(ToolCall {
            turn: 2,
            step: 1,
            call_id: "c1".into(),
            name: "send".into(),
            arguments: r#"{"to":"team"}"#.into()
        })
    );
    assert_eq!(record.encode(), spec);
}

#[test]
fn optional_envelope_fields_are_omitted_unless_set() {
    let mut record = Record::new(3, T0, Event::ToolResult(ok_result(1, 1, "c1")));
    assert!(!record.encode().contains("source_seqs"));
    assert!(!record.encode().contains("ignorable"));
    record.source_seqs = Some(vec![2]);
    record.ignorable = true;
    let value: serde_json::Value = serde_json::from_str(&record.encode()).unwrap();
    assert_eq!(value["source_seqs"], json!([2]));
    assert_eq!(value["ignorable"], json!(true));
}

#[test]
fn nested_shapes_are_snake_case_and_tagged() {
    let record =
        Record::new(0, T0, Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Error { error: failure() } }));
    let value: serde_json::Value = serde_json::from_str(&record.encode()).unwrap();
    assert_eq!(
        value["data"],
        json!({"turn":1,"reason":{"kind":"error","error":{"message":"rate limited","code":"RATE_LIMIT","status":429,"provider_retry_after_ms":2000,"request_id":"req-1"}}})
    );
    let chunk = serde_json::to_value(tool_delta()).unwrap();
    assert_eq!(chunk, json!({"type":"tool-call-delta","index":0,"id":"c1","name":"send","arguments_delta":"{}"}));
    let message = serde_json::to_value(tool_message(1, 1, "c1").message).unwrap();
    assert_eq!(
        message,
        json!({"role":"assistant","content":[{"type":"tool-call","id":"c1","name":"send","arguments":"{}"}]})
    );
}

#[test]
fn unknown_type_is_refused_unless_ignorable() {
    let unknown = r#"{"type":"future/thing","seq":4,"time":1,"data":{"x":1}}"#;
    match Record::decode(unknown) {
        Err(RecordError::UnknownType(name)) => assert_eq!(name, "future/thing"),
        other => panic!("expected UnknownType, got {other:?}"),
    }
    let ignorable = r#"{"type":"future/thing","seq":4,"time":1,"data":{"x":1},"ignorable":true}"#;
    let record = Record::decode(ignorable).unwrap();
    assert_eq!(record.event.type_name(), "future/thing");
    assert!(record.ignorable);
    assert_eq!(record.encode(), ignorable);
}

#[test]
fn malformed_records_are_refused_with_a_reason() {
    for (line, expect) in [
        (r#"{"type":"turn/start","seq":0,"time":1}"#, "envelope"),
        (r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":"one"}}"#, "turn/start"),
        (r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"extra":true}}"#, "turn/start"),
        (r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1},"surprise":1}"#, "envelope"),
        (r#"{"type":"turn/start","seq":-1,"time":1,"data":{"turn":1}}"#, "envelope"),
        ("not json", "envelope"),
    ] {
        let error = Record::decode(line).expect_err(line).to_string();
        assert!(error.contains(expect), "{line}: {error}");
    }
}

/// The spellings are the contract's (FAILURE-EVENT-LOG), written out here rather than read back
/// from the code under test (a renamed code must fail this test, not round-trip through its own
/// Display and FromStr). `RESPONSE_TOO_LARGE` and `TLS_CERTIFICATE` are our extensions (ARCHITECTURE).
#[test]
fn error_codes_have_stable_spellings() {
    const SPEC_SPELLINGS: [&str; 26] = [
        "AUTH",
        "QUOTA",
        "RATE_LIMIT",
        "INVALID_REQUEST",
        "CONTEXT_WINDOW_EXCEEDED",
        "SERVER",
        "TRANSPORT",
        "TIMEOUT",
        "ABORTED",
        "EMPTY_RESPONSE",
        "MALFORMED_RESPONSE",
        "STREAM_CLOSED",
        "RESPONSE_TOO_LARGE",
        "TLS_CERTIFICATE",
        "MISSING_CREDENTIAL",
        "INVALID_CREDENTIAL",
        "NO_ADAPTER",
        "UNKNOWN",
        "TOOL_TIMEOUT",
        "ABORTED_BEFORE_DISPATCH",
        "TOOL_OUTCOME_UNKNOWN",
        "TOOL_NOT_STARTED",
        "TOOL_FAILED",
        "PERSIST",
        "APPROVAL_DENIED",
        "APPROVAL_EXPIRED",
    ];
    let spelled: Vec<String> = FIXED_ERROR_CODES.iter().map(ErrorCode::to_string).collect();
    assert_eq!(spelled, SPEC_SPELLINGS, "every fixed code, in order, spelled as FAILURE-EVENT-LOG spells it");
    for (code, text) in FIXED_ERROR_CODES.into_iter().zip(SPEC_SPELLINGS) {
        assert_eq!(text.parse::<ErrorCode>().unwrap(), code, "{text} parses back");
        assert_eq!(serde_json::to_string(&code).unwrap(), format!("\"{text}\""), "on the wire as {text}");
        assert_eq!(serde_json::from_str::<ErrorCode>(&format!("\"{text}\"")).unwrap(), code);
    }
    // The transcript shape, byte for byte, for the code a crash repair writes.
    let closer = serde_json::to_value(ErrorCode::ToolOutcomeUnknown).unwrap();
    assert_eq!(closer, serde_json::json!("TOOL_OUTCOME_UNKNOWN"));
    assert_eq!(ErrorCode::Http(418).to_string(), "HTTP_418");
    assert_eq!("HTTP_418".parse::<ErrorCode>().unwrap(), ErrorCode::Http(418));
    assert_eq!("HTTP_599".parse::<ErrorCode>().unwrap(), ErrorCode::Http(599));
    for bad in ["HTTP_42", "HTTP_0418", "HTTP_099", "HTTP_+12", "rate_limit", "", "Auth", " AUTH"] {
        assert!(bad.parse::<ErrorCode>().is_err(), "{bad} must not parse");
    }
}

#[test]
fn session_header_shape_and_versions() {
    let header = SessionHeader::new("s1", T0);
    let line = header.encode();
    assert_eq!(line, r#"{"type":"session","version":1,"id":"s1","created_at":1767225600000}"#);
    assert_eq!(SessionHeader::decode(&line).unwrap(), header);

    let v2 = r#"{"type":"session","version":2,"id":"s1","created_at":1}"#;
    assert!(matches!(SessionHeader::decode(v2), Err(HeaderError::Unsupported { .. })), "newer version is unsupported");
    let odd = r#"{"type":"session","version":"1","id":"s1","created_at":1}"#;
    assert!(matches!(SessionHeader::decode(odd), Err(HeaderError::Unsupported { .. })));
    for malformed in [r#"{"type":"turn/start","version":1}"#, "{", r#"{"type":"session","version":1}"#] {
        assert!(matches!(SessionHeader::decode(malformed), Err(HeaderError::Malformed(_))), "{malformed}");
    }
}
