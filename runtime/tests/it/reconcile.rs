//! Reconciliation: crash repair consults the delivery queue before writing a closer for a
//! started call (FAILURE-CRASH-REPAIR), and the resumed model reads the right result.

use std::sync::Arc;

use faultline_runtime::event::*;
use faultline_runtime::outbox::*;
use faultline_runtime::store::*;
use faultline_runtime::testing::History;

use crate::fixtures::{seams_with, FaultyFs, TestProcess};
use crate::store_contract::{append_all, sid};
use crate::support::*;

/// A session whose turn 1 crashed after the durable tool/call of c1 (execution `s:1:1:c1`).
fn crashed_session() -> Log {
    let mut log = Log::default();
    log.push(Event::TurnStart(TurnStart { turn: 1 }));
    log.push(Event::StepStart(StepRef { turn: 1, step: 1 }));
    log.push(Event::UserMessage(UserMessage { message: Message::user_text("send it") }));
    log.push(Event::AssistantMessage(tool_message(1, 1, "c1")));
    log.push(Event::ToolCall(tool_call(1, 1, "c1")));
    log
}

/// Repairs the crashed session with the queue in the state `prepare` leaves it in; returns
/// the closer of c1, the queue, and what the next request would tell the model.
fn repair_with(prepare: impl Fn(&dyn Outbox)) -> (Record, Arc<dyn Outbox>, String) {
    let dir = tempfile::tempdir().unwrap();
    let world = TestProcess::world();
    let crashed = TestProcess::new("crashed", &world);
    let seams = seams_with(crashed.clone(), Arc::new(FaultyFs::default()));
    let outbox: Arc<dyn Outbox> =
        Arc::new(JournalOutbox::open(seams.clone(), dir.path().join("journal.jsonl")).unwrap());
    prepare(outbox.as_ref());
    let store = FileStore::new(seams, dir.path(), Format::Jsonl);
    let mut writer = store.create(&sid("s"), T0).unwrap();
    append_all(writer.as_mut(), &crashed_session().records, 2);
    drop(writer);
    crashed.kill();

    let recovery = seams_with(TestProcess::new("recovery", &world), Arc::new(FaultyFs::default()));
    let store =
        FileStore::new(recovery, dir.path(), Format::Jsonl).with_evidence(Arc::new(QueueEvidence::new(outbox.clone())));
    let opened = store.open(&sid("s"), Takeover::IfDead).unwrap();
    Validator::validate_all(&opened.loaded.records).unwrap();
    let closer = opened.loaded.repair.unwrap().closers[0].clone();
    let history = History::from_records(&opened.loaded.records);
    let told = history.messages().iter().find(|m| m["role"] == "tool").unwrap()["content"].as_str().unwrap().to_owned();
    (closer, outbox, told)
}

fn result_of(record: &Record) -> &ToolResult {
    match &record.event {
        Event::ToolResult(result) => result,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_delivered_record_gives_the_real_result() {
    let (closer, _, told) = repair_with(|q| {
        q.enqueue("s:1:1:c1", "{}").unwrap();
        q.claim_next().unwrap();
        q.finish("s:1:1:c1", Finish::Delivered("message 42 posted".into())).unwrap();
    });
    let result = result_of(&closer);
    assert!(!result.is_error);
    assert_eq!(closer.source_seqs, Some(vec![4]));
    assert_eq!(told, "[recovered from the delivery record s:1:1:c1: delivered] message 42 posted");
}

#[test]
fn a_failed_record_gives_the_real_failure() {
    let (closer, _, told) = repair_with(|q| {
        q.enqueue("s:1:1:c1", "{}").unwrap();
        q.claim_next().unwrap();
        q.finish("s:1:1:c1", Finish::Failed("channel archived".into())).unwrap();
    });
    assert_eq!(result_of(&closer).error.as_ref().unwrap().code, ErrorCode::ToolFailed);
    assert!(told.contains("failed] channel archived"), "{told}");
}

#[test]
fn a_never_claimed_record_proves_the_effect_did_not_happen_and_is_cancelled() {
    let (closer, outbox, told) = repair_with(|q| {
        q.enqueue("s:1:1:c1", "{}").unwrap();
    });
    assert_eq!(result_of(&closer).error.as_ref().unwrap().code, ErrorCode::ToolNotStarted);
    assert!(told.contains("never claimed, so it did not happen"), "{told}");
    let row = outbox.get("s:1:1:c1").unwrap().unwrap();
    assert_eq!(row.status, DeliveryStatus::Failed, "the queued copy can no longer be sent");
    assert!(row.error.unwrap().contains("crash repair"));
}

#[test]
fn delivering_or_unknown_records_stay_unknown_and_name_the_evidence() {
    for settle in [false, true] {
        let (closer, outbox, told) = repair_with(|q| {
            q.enqueue("s:1:1:c1", "{}").unwrap();
            q.claim_next().unwrap();
            if settle {
                q.settle("s:1:1:c1", SettleCause::Deadline, "no receipt before the wait deadline").unwrap();
            }
        });
        assert_eq!(result_of(&closer).error.as_ref().unwrap().code, ErrorCode::ToolOutcomeUnknown);
        let status = if settle { "unknown" } else { "delivering" };
        assert!(told.contains(&format!("the delivery record s:1:1:c1 is {status}")), "{told}");
        assert!(told.contains("not resent"), "{told}");
        // Only a never-claimed copy is cancelled: a claimed one keeps its evidence.
        let row = outbox.get("s:1:1:c1").unwrap().unwrap();
        let kept = if settle { DeliveryStatus::Unknown } else { DeliveryStatus::Delivering };
        assert_eq!(row.status, kept, "repair left the claimed delivery as it found it");
    }
}

#[test]
fn without_a_record_the_closer_is_the_plain_unknown() {
    let (closer, _, told) = repair_with(|_| {});
    assert_eq!(result_of(&closer).error.as_ref().unwrap().code, ErrorCode::ToolOutcomeUnknown);
    assert_eq!(told, OUTCOME_UNKNOWN_TEXT);
}

/// A step that crashed with one of its two calls answered: repair keeps the answer and closes
/// only the other call (a second result for c0 would be refused by the validator on load).
#[test]
fn repair_closes_only_the_calls_nobody_answered() {
    let mut log = Log::default();
    log.push(Event::TurnStart(TurnStart { turn: 1 }));
    log.push(Event::StepStart(StepRef { turn: 1, step: 1 }));
    log.push(Event::UserMessage(UserMessage { message: Message::user_text("both") }));
    let mut message = tool_message(1, 1, "c0");
    message.message.content.push(ContentBlock::tool_call("c1", "send", "{}"));
    log.push(Event::AssistantMessage(message));
    log.push(Event::ToolCall(tool_call(1, 1, "c0")));
    log.push(Event::ToolCall(tool_call(1, 1, "c1")));
    log.push(Event::ToolResult(ok_result(1, 1, "c0")));
    let closers = closers_with(&log.records, "s", &NoEvidence);
    let answered: Vec<&str> = closers
        .iter()
        .filter_map(|r| match &r.event {
            Event::ToolResult(result) => Some(result.call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(answered, vec!["c1"], "only the unanswered call is closed");
    let mut repaired = log.records.clone();
    repaired.extend(closers);
    Validator::validate_all(&repaired).unwrap();
}
