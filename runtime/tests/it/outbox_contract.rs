//! The delivery-queue contract (FAILURE-DELIVERY-QUEUE, docs/internals/requirements.md): every
//! test runs on the journal (Fs seam), the SQLite backend and the PostgreSQL backend (a real
//! throw-away server; skipped with a note where PostgreSQL is not installed, required in CI),
//! reproducing the delivery-queue experiment table of seed 004.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use faultline_runtime::outbox::*;
use faultline_runtime::production::{self, PgOutbox, SqliteOutbox, SystemClock};
use faultline_runtime::testing::PgServer;
use faultline_runtime::{seams::BoxFuture, seams::Clock, seams::Process};

use crate::fixtures::{seams_with, FaultyFs, TestProcess};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Journal,
    Sqlite,
    Postgres,
}

struct Bench {
    kind: Kind,
    dir: tempfile::TempDir,
    world: Arc<Mutex<std::collections::BTreeSet<String>>>,
    /// The fresh database of a PostgreSQL bench.
    database_url: Option<String>,
}

impl Bench {
    fn new(kind: Kind) -> Self {
        let database_url =
            (kind == Kind::Postgres).then(|| PgServer::shared().expect("PostgreSQL is running").fresh_database());
        Self { kind, dir: tempfile::tempdir().unwrap(), world: TestProcess::world(), database_url }
    }

    fn process(&self, name: &str) -> Arc<TestProcess> {
        TestProcess::new(name, &self.world)
    }

    /// The queue as opened by `process` (a fresh open replays the journal).
    fn open(&self, process: &Arc<TestProcess>) -> Arc<dyn Outbox> {
        let process: Arc<dyn Process> = process.clone();
        match self.kind {
            Kind::Journal => {
                let seams = seams_with(process, Arc::new(FaultyFs::default()));
                Arc::new(JournalOutbox::open(seams, self.dir.path().join("outbox").join("journal.jsonl")).unwrap())
            }
            Kind::Sqlite => {
                let seams = production::seams();
                Arc::new(
                    SqliteOutbox::open(
                        self.dir.path().join("outbox.sqlite"),
                        process,
                        seams.clock,
                        seams.entropy.as_ref(),
                    )
                    .unwrap(),
                )
            }
            Kind::Postgres => {
                let seams = production::seams();
                let url = self.database_url.as_ref().unwrap();
                Arc::new(PgOutbox::connect(url, process, seams.clock, seams.entropy.as_ref()).unwrap())
            }
        }
    }
}

/// Every backend this machine can run: PostgreSQL only where its server can be started.
fn kinds() -> Vec<Kind> {
    let mut kinds = vec![Kind::Journal, Kind::Sqlite];
    if PgServer::shared().is_some() {
        kinds.push(Kind::Postgres);
    }
    kinds
}

/// A receiver that records every send and answers as scripted.
#[derive(Default)]
struct Receiver {
    sends: Mutex<Vec<String>>,
    answers: Mutex<BTreeMap<String, Result<String, DeliveryError>>>,
    panic_after_send: bool,
}

impl Receiver {
    fn sends(&self) -> Vec<String> {
        self.sends.lock().unwrap().clone()
    }
}

struct Shared(Arc<Receiver>);

impl Deliverer for Shared {
    fn deliver(&self, execution_id: &str, payload: &str) -> BoxFuture<'static, Result<String, DeliveryError>> {
        let receiver = self.0.clone();
        receiver.sends.lock().unwrap().push(format!("{execution_id}={payload}"));
        let answer = receiver.answers.lock().unwrap().remove(execution_id).unwrap_or(Ok("ack".into()));
        let panic = receiver.panic_after_send;
        Box::pin(async move {
            if panic {
                panic!("the process blew up after the send, before finish");
            }
            answer
        })
    }
}

fn clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock::new())
}

async fn drain_with(outbox: &Arc<dyn Outbox>, receiver: &Arc<Receiver>) -> DrainReport {
    drain(outbox.as_ref(), &Shared(receiver.clone())).await.unwrap()
}

#[tokio::test]
async fn duplicate_enqueue_keeps_the_first_content() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let q = bench.open(&bench.process("a"));
        assert_eq!(q.enqueue("x1", "first").unwrap(), Enqueued::New);
        assert_eq!(q.enqueue("x1", "second").unwrap(), Enqueued::Existing(DeliveryStatus::Pending), "{kind:?}");
        assert_eq!(q.get("x1").unwrap().unwrap().payload.as_deref(), Some("first"));
    }
}

#[tokio::test]
async fn a_zero_wait_on_an_unclaimed_row_defers_and_the_next_drain_sends_it() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let q = bench.open(&bench.process("a"));
        let waited = enqueue_and_wait(&q, &clock(), "x1", "hello", Duration::ZERO).await.unwrap();
        assert_eq!(waited, WaitOutcome::Deferred, "{kind:?}");
        assert_eq!(q.get("x1").unwrap().unwrap().status, DeliveryStatus::Pending, "a deferral is not a failure");
        let receiver = Arc::new(Receiver::default());
        assert_eq!(drain_with(&q, &receiver).await.delivered, vec!["x1".to_owned()]);
        assert_eq!(receiver.sends(), vec!["x1=hello".to_owned()]);
    }
}

/// `worker-a` enqueues and claims `x1`, then lets go of its queue (no result recorded).
fn claimed_by_worker_a(bench: &Bench) -> Arc<TestProcess> {
    let a = bench.process("worker-a");
    let q = bench.open(&a);
    q.enqueue("x1", "hello").unwrap();
    assert_eq!(q.claim_next().unwrap().unwrap().execution_id, "x1");
    a
}

#[tokio::test]
async fn a_claim_whose_owner_exits_stays_delivering_until_recovery_then_is_unknown() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let a = claimed_by_worker_a(&bench);
        a.kill(); // exited without a result
        let b = bench.open(&bench.process("worker-b"));
        assert_eq!(
            b.get("x1").unwrap().unwrap().status,
            DeliveryStatus::Delivering,
            "{kind:?}: claim and finish are two transitions"
        );
        assert_eq!(b.recover_abandoned().unwrap(), vec!["x1".to_owned()]);
        let row = b.get("x1").unwrap().unwrap();
        assert_eq!(row.status, DeliveryStatus::Unknown);
        assert!(row.error.unwrap().contains("not retried"));
        let receiver = Arc::new(Receiver::default());
        drain_with(&b, &receiver).await;
        assert!(receiver.sends().is_empty(), "{kind:?}: never resent");
    }
}

/// The other half: a claim whose owner is another process still alive is that process's
/// delivery in flight — recovery leaves it `delivering` (it may yet record its receipt).
#[tokio::test]
async fn a_claim_whose_owner_is_alive_is_left_delivering_by_another_processs_recovery() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let a = claimed_by_worker_a(&bench);
        let b = bench.open(&bench.process("worker-b"));
        assert_eq!(b.recover_abandoned().unwrap(), Vec::<String>::new(), "{kind:?}: worker-a is alive");
        assert_eq!(b.get("x1").unwrap().unwrap().status, DeliveryStatus::Delivering, "{kind:?}");
        drop(a);
    }
}

#[tokio::test]
async fn a_zero_wait_on_a_claimed_row_makes_it_unknown() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let q = bench.open(&bench.process("a"));
        q.enqueue("x1", "hello").unwrap();
        q.claim_next().unwrap();
        let waited = enqueue_and_wait(&q, &clock(), "x1", "hello", Duration::ZERO).await.unwrap();
        assert!(matches!(waited, WaitOutcome::Unknown(_)), "{kind:?}: {waited:?}");
        assert_eq!(q.get("x1").unwrap().unwrap().status, DeliveryStatus::Unknown);
        // The late answer of the original delivery is fenced out.
        assert!(!q.finish("x1", Finish::Delivered("late".into())).unwrap(), "{kind:?}");
    }
}

/// Claims a row, loses its receipt, re-enqueues it, and returns what a second claim got.
fn second_claim_after_a_lost_receipt(kind: Kind) -> Option<Claim> {
    let bench = Bench::new(kind);
    let q = bench.open(&bench.process("a"));
    q.enqueue("x1", "hello").unwrap();
    q.claim_next().unwrap();
    q.settle("x1", SettleCause::Deadline, "deadline passed").unwrap();
    assert_eq!(q.enqueue("x1", "hello again").unwrap(), Enqueued::Existing(DeliveryStatus::Unknown), "{kind:?}");
    q.claim_next().unwrap()
}

#[test]
fn re_enqueueing_an_unknown_id_stays_unknown_and_is_never_claimed() {
    for kind in kinds() {
        assert_eq!(second_claim_after_a_lost_receipt(kind), None, "{kind:?}: unknown rows are never claimable");
    }
}

/// The claim rule lives in one place (the shared outbox machine): a bug planted there shows
/// in every backend, SQLite included, not only in the one the simulator runs.
#[cfg(feature = "planted-bugs")]
#[test]
fn planted_unknown_claimable_breaks_every_backend_through_the_shared_machine() {
    faultline_runtime::testing::bugs::plant(&["unknown-claimable"]);
    let claimed: Vec<(Kind, bool)> =
        kinds().into_iter().map(|kind| (kind, second_claim_after_a_lost_receipt(kind).is_some())).collect();
    faultline_runtime::testing::bugs::plant(&[]);
    assert!(claimed.len() >= 2 && claimed.iter().all(|(_, claimed)| *claimed), "{claimed:?}");
}

#[tokio::test]
async fn success_completes_and_clears_the_payload_and_a_second_drain_sends_nothing() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let q = bench.open(&bench.process("a"));
        q.enqueue("x1", "hello").unwrap();
        let receiver = Arc::new(Receiver::default());
        drain_with(&q, &receiver).await;
        let row = q.get("x1").unwrap().unwrap();
        assert_eq!(
            (row.status, row.payload, row.result.as_deref()),
            (DeliveryStatus::Delivered, None, Some("ack")),
            "{kind:?}"
        );
        let second = drain_with(&q, &receiver).await;
        assert_eq!(second, DrainReport::default(), "{kind:?}");
        assert_eq!(receiver.sends().len(), 1);
    }
}

#[tokio::test]
async fn a_rejection_records_failed_with_a_redacted_reason() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let q = bench.open(&bench.process("a"));
        q.enqueue("x1", "hello").unwrap();
        let receiver = Arc::new(Receiver::default());
        receiver.answers.lock().unwrap().insert(
            "x1".into(),
            Err(DeliveryError::Rejected(
                "403 from https://bot:s3cret@hooks.example/x?token=abc123 with Bearer sk-live-ABCDEFGH".into(),
            )),
        );
        assert_eq!(drain_with(&q, &receiver).await.failed, vec!["x1".to_owned()]);
        let row = q.get("x1").unwrap().unwrap();
        assert_eq!(row.status, DeliveryStatus::Failed);
        let error = row.error.unwrap();
        for secret in ["s3cret", "abc123", "sk-live-ABCDEFGH"] {
            assert!(!error.contains(secret), "{kind:?}: {error}");
        }
        assert!(error.contains("403"), "{error}");
        assert_eq!(row.payload, None);
    }
}

/// `prune(before_ms)` takes finished rows last changed strictly before `before_ms`, and
/// never a row that is still pending, however old.
#[tokio::test]
async fn prune_takes_only_finished_rows_changed_before_its_cutoff() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let q = bench.open(&bench.process("a"));
        q.enqueue("x1", "hello").unwrap();
        drain_with(&q, &Arc::new(Receiver::default())).await;
        q.enqueue("x2", "still queued").unwrap();
        let changed = q.get("x1").unwrap().unwrap().updated_at;
        assert_eq!(q.prune(changed).unwrap(), 0, "{kind:?}: changed at the cutoff, not before it");
        assert_eq!(q.prune(changed + 1).unwrap(), 1, "{kind:?}");
        assert_eq!(q.get("x1").unwrap(), None);
        assert_eq!(q.prune(u64::MAX).unwrap(), 0, "{kind:?}: a pending row is never pruned");
        assert!(q.get("x2").unwrap().is_some());
    }
}

#[tokio::test]
async fn a_pruned_id_is_blocked_by_its_tombstone() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let q = bench.open(&bench.process("a"));
        q.enqueue("x1", "hello").unwrap();
        drain_with(&q, &Arc::new(Receiver::default())).await;
        assert_eq!(q.prune(u64::MAX).unwrap(), 1, "{kind:?}");
        assert_eq!(q.get("x1").unwrap(), None);
        assert_eq!(q.enqueue("x1", "again").unwrap(), Enqueued::Tombstoned(DeliveryStatus::Delivered), "{kind:?}");
        assert_eq!(q.claim_next().unwrap(), None);
    }
}

/// "Oldest first" (FAILURE-DELIVERY-QUEUE) holds for every delivery the queue holds, not only the newest:
/// across a prune of an older, finished row and across a reopen (replay).
#[tokio::test]
async fn deliveries_are_listed_and_sent_oldest_first_across_a_prune_and_a_reopen() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let process = bench.process("a");
        let q = bench.open(&process);
        q.enqueue("x1", "one").unwrap();
        drain_with(&q, &Arc::new(Receiver::default())).await;
        for (id, payload) in [("x2", "two"), ("x3", "three"), ("x4", "four")] {
            q.enqueue(id, payload).unwrap();
        }
        let ids = |q: &Arc<dyn Outbox>| -> Vec<String> {
            q.list(None).unwrap().into_iter().map(|r| r.execution_id).collect()
        };
        assert_eq!(ids(&q), ["x1", "x2", "x3", "x4"], "{kind:?}: every row, in enqueue order");
        let with =
            |status| -> Vec<String> { q.list(Some(status)).unwrap().into_iter().map(|r| r.execution_id).collect() };
        assert_eq!(with(DeliveryStatus::Pending), ["x2", "x3", "x4"], "{kind:?}: only the rows of that status");
        assert_eq!(with(DeliveryStatus::Delivered), ["x1"], "{kind:?}");
        assert_eq!(q.prune(u64::MAX).unwrap(), 1, "{kind:?}: only the delivered row is pruned");
        assert_eq!(ids(&q), ["x2", "x3", "x4"], "{kind:?}: a prune removes only its own row");
        drop(q);
        let reopened = bench.open(&process);
        assert_eq!(ids(&reopened), ["x2", "x3", "x4"], "{kind:?}: replay keeps the order");
        let receiver = Arc::new(Receiver::default());
        drain_with(&reopened, &receiver).await;
        assert_eq!(receiver.sends(), ["x2=two", "x3=three", "x4=four"], "{kind:?}: every pending row, oldest first");
    }
}

fn refusal(result: faultline_runtime::Result<Enqueued>) -> OutboxError {
    match result {
        Err(faultline_runtime::Error::Outbox(e)) => e,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The queue's input limits are exact: what is at a limit is queued whole, one byte more is
/// refused before anything is stored.
#[tokio::test]
async fn an_execution_id_and_a_payload_at_their_limits_are_queued_and_one_byte_more_is_refused() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let q = bench.open(&bench.process("a"));
        let id_max = "i".repeat(EXECUTION_ID_BYTES_MAX);
        assert_eq!(q.enqueue(&id_max, "p").unwrap(), Enqueued::New, "{kind:?}");
        for bad in ["i".repeat(EXECUTION_ID_BYTES_MAX + 1), String::new(), "a\nb".to_owned()] {
            assert!(matches!(refusal(q.enqueue(&bad, "p")), OutboxError::BadExecutionId), "{kind:?}: {bad:?}");
            assert_eq!(q.get(&bad).unwrap(), None);
        }
        // The documented limit, spelled out: a constant that shrank would still equal itself.
        assert_eq!(PAYLOAD_BYTES_MAX, 1 << 20, "payloads up to 1 MiB are promised to embedders");
        let payload_max = "p".repeat(1 << 20);
        assert_eq!(q.enqueue("x-max", &payload_max).unwrap(), Enqueued::New, "{kind:?}");
        assert_eq!(q.get("x-max").unwrap().unwrap().payload.map(|p| p.len()), Some(PAYLOAD_BYTES_MAX));
        let over = "p".repeat(PAYLOAD_BYTES_MAX + 1);
        assert!(
            matches!(refusal(q.enqueue("x-over", &over)), OutboxError::PayloadTooLarge(n) if n == PAYLOAD_BYTES_MAX + 1),
            "{kind:?}"
        );
        assert_eq!(q.get("x-over").unwrap(), None);
    }
}

/// A receiver's answer of any size is stored within OUTCOME_TEXT_BYTES_MAX, cut on the last
/// character boundary (never inside a character); one that fits is stored whole.
#[tokio::test]
async fn a_receivers_long_answer_is_stored_cut_on_a_character_boundary() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let q = bench.open(&bench.process("a"));
        // "x" then 2-byte characters: the limit (even) falls inside one.
        let long = format!("x{}", "é".repeat(OUTCOME_TEXT_BYTES_MAX));
        let fits = "é".repeat(OUTCOME_TEXT_BYTES_MAX / 2);
        let receiver = Arc::new(Receiver::default());
        receiver
            .answers
            .lock()
            .unwrap()
            .extend([("long".to_owned(), Ok(long.clone())), ("fits".to_owned(), Ok(fits.clone()))]);
        q.enqueue("long", "p").unwrap();
        q.enqueue("fits", "p").unwrap();
        drain_with(&q, &receiver).await;
        let stored = |id: &str| q.get(id).unwrap().unwrap().result.unwrap();
        assert_eq!(stored("long"), long[..OUTCOME_TEXT_BYTES_MAX - 1], "{kind:?}: cut before the split character");
        assert_eq!(stored("fits"), fits, "{kind:?}: an answer at the limit is kept whole");
    }
}

#[tokio::test]
async fn an_exception_after_the_send_is_marked_unknown_by_the_next_drain_without_resending() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let q = bench.open(&bench.process("a"));
        q.enqueue("x1", "hello").unwrap();
        let exploding = Arc::new(Receiver { panic_after_send: true, ..Receiver::default() });
        let (queue, receiver) = (q.clone(), exploding.clone());
        let crashed = tokio::spawn(async move { drain(queue.as_ref(), &Shared(receiver)).await }).await;
        assert!(crashed.is_err(), "the drain blew up mid-delivery");
        assert_eq!(q.get("x1").unwrap().unwrap().status, DeliveryStatus::Delivering);
        let calm = Arc::new(Receiver::default());
        let report = drain_with(&q, &calm).await;
        assert_eq!(report.recovered_unknown, vec!["x1".to_owned()], "{kind:?}");
        assert!(calm.sends().is_empty(), "{kind:?}: not resent");
        assert_eq!(exploding.sends().len(), 1);
    }
}

#[tokio::test]
async fn an_operator_resolves_unknown_rows_and_a_resend_gets_a_new_id() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let q = bench.open(&bench.process("a"));
        for id in ["x1", "x2", "x3"] {
            q.enqueue(id, &format!("payload-{id}")).unwrap();
            q.claim_next().unwrap();
            q.settle(id, SettleCause::Deadline, "lost receipt").unwrap();
        }
        assert_eq!(q.resolve("x1", Resolution::Delivered).unwrap(), None);
        assert_eq!(q.get("x1").unwrap().unwrap().status, DeliveryStatus::Delivered);
        q.resolve("x2", Resolution::Failed("receiver shows nothing".into())).unwrap();
        assert_eq!(q.get("x2").unwrap().unwrap().status, DeliveryStatus::Failed);
        let resent = q.resolve("x3", Resolution::Resend).unwrap().unwrap();
        assert_eq!(resent, "x3#resend-1", "{kind:?}");
        let row = q.get(&resent).unwrap().unwrap();
        assert_eq!(
            (row.status, row.payload.as_deref(), row.resend_of.as_deref()),
            (DeliveryStatus::Pending, Some("payload-x3"), Some("x3"))
        );
        assert!(q.resolve("x1", Resolution::Delivered).is_err(), "{kind:?}: only unknown rows are resolved by hand");
    }
}

#[tokio::test]
async fn a_pending_row_cancelled_by_repair_never_sends() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let q = bench.open(&bench.process("a"));
        q.enqueue("x1", "hello").unwrap();
        assert_eq!(
            q.settle("x1", SettleCause::CancelledBeforeSend, "cancelled by crash repair").unwrap(),
            Some(DeliveryStatus::Failed),
            "{kind:?}"
        );
        let receiver = Arc::new(Receiver::default());
        drain_with(&q, &receiver).await;
        assert!(receiver.sends().is_empty());
    }
}

/// The `send` tool through `queue` to `receiver`.
fn send_tool(queue: Arc<dyn Outbox>, receiver: &Arc<Receiver>) -> OutboxTool {
    let schema = faultline_runtime::event::ToolSchema {
        name: "send".into(),
        description: String::new(),
        parameters: serde_json::json!({}),
    };
    OutboxTool::new(schema, queue, Arc::new(Shared(receiver.clone())))
}

/// Call c1 of turn 1, step 1 of session `s`.
fn send_invocation() -> faultline_runtime::tool::ToolInvocation {
    faultline_runtime::tool::ToolInvocation {
        session: "s".into(),
        turn: 1,
        step: 1,
        call_id: "c1".into(),
        arguments: serde_json::json!({"text": "hi"}),
        execution_id: "s:1:1:c1".into(),
        session_epoch: 1,
    }
}

#[test]
fn the_outbox_tool_never_sends_one_execution_twice() {
    use faultline_runtime::tool::{Tool, ToolOutput};
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        for kind in kinds() {
            let bench = Bench::new(kind);
            let q = bench.open(&bench.process("a"));
            let receiver = Arc::new(Receiver::default());
            let tool = send_tool(q.clone(), &receiver);
            let invocation = send_invocation();
            let first = tool.call(invocation.clone(), Default::default()).await;
            let again = tool.call(invocation, Default::default()).await;
            assert_eq!(first, ToolOutput::Ok("ack".into()), "{kind:?}");
            assert_eq!(again, first, "{kind:?}: answered from the record");
            assert_eq!(receiver.sends(), vec!["s:1:1:c1={\"text\":\"hi\"}".to_owned()]);
        }
    });
}

#[test]
fn a_delivery_whose_receipt_cannot_be_recorded_is_unknown_to_the_model_never_failed() {
    // Found by the simulator's result-matches-receipt invariant (mixed, seed 251): the
    // receiver took the effect, the journal could not record the receipt (ENOSPC), and the
    // tool answered TOOL_FAILED, which invites the model to send it again.
    use crate::fixtures::FailOp;
    use faultline_runtime::tool::{Tool, ToolOutput};
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let fs = FaultyFs::default();
        let process: Arc<dyn Process> = TestProcess::new("a", &TestProcess::world());
        let journal = dir.path().join("journal.jsonl");
        let queue: Arc<dyn Outbox> =
            Arc::new(JournalOutbox::open(seams_with(process, Arc::new(fs.clone())), &journal).unwrap());
        // Writes from here: the enqueue (0), the claim (1), the receipt (2) fails.
        fs.fail(FailOp::Write, 2);
        let receiver = Arc::new(Receiver::default());
        let tool = send_tool(queue.clone(), &receiver);
        let invocation = send_invocation();
        let outcome = tool.call(invocation, Default::default()).await;
        assert_eq!(receiver.sends().len(), 1, "the effect happened once");
        assert!(matches!(&outcome, ToolOutput::Unknown(text) if text.contains("in flight")), "{outcome:?}");
    });
}

#[test]
fn redaction_covers_tokens_keys_and_url_credentials() {
    let text = redact("Authorization: Bearer abc.def-123; url https://u:p@x.io/a?api_key=K1&x=2; \"token\": \"T2\"; sk-proj-ABCDEF123");
    for secret in ["abc.def-123", ":p@", "K1", "T2", "sk-proj-ABCDEF123"] {
        assert!(!text.contains(secret), "{secret} survived: {text}");
    }
    assert!(text.contains("x=2"), "{text}");
    let _ = AtomicUsize::new(0).load(Ordering::SeqCst);
}

#[test]
#[allow(clippy::disallowed_methods)] // reads real file permissions
fn the_sqlite_queue_is_private_to_its_owner() {
    use std::os::unix::fs::PermissionsExt;
    let bench = Bench::new(Kind::Sqlite);
    bench.open(&bench.process("a"));
    let mode = std::fs::metadata(bench.dir.path().join("outbox.sqlite")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// A failed append whose truncate-back failed too leaves the journal's tail unknown: the
/// queue refuses further transitions (instead of writing a second line for the same change,
/// which replay would refuse), and a reopen replays what is on disk.
#[test]
fn a_journal_whose_rollback_failed_refuses_further_transitions_until_reopened() {
    use crate::fixtures::FailOp;
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::default();
    let world = TestProcess::world();
    let process: Arc<dyn Process> = TestProcess::new("a", &world);
    let journal = dir.path().join("journal.jsonl");
    let queue = JournalOutbox::open(seams_with(process.clone(), Arc::new(fs.clone())), &journal).unwrap();
    fs.fail(FailOp::Sync, 0);
    fs.fail(FailOp::SetLen, 0);
    let first = queue.enqueue("x1", "hello").unwrap_err();
    assert!(matches!(first, faultline_runtime::Error::AppendFailed { rollback: Some(_), .. }), "{first}");
    let second = queue.enqueue("x1", "hello").unwrap_err();
    assert!(second.to_string().contains("writer disabled"), "{second}");
    let reopened = JournalOutbox::open(seams_with(process, Arc::new(FaultyFs::default())), &journal).unwrap();
    assert!(reopened.get("x1").unwrap().is_some_and(|r| r.status == DeliveryStatus::Pending));
}

/// A torn final line (a transition never acknowledged) is cut off at open, so the next
/// transition starts on a line of its own and the journal replays again; left in place,
/// the torn bytes and the next line would read as corruption in the middle of the file.
#[test]
#[allow(clippy::disallowed_methods)] // writes the torn journal as a real file
fn a_torn_final_line_is_cut_off_so_later_transitions_replay() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    let whole = r#"{"op":"enqueue","id":"x1","payload":"p","at":1}"#;
    std::fs::write(&journal, format!("{whole}\n{{\"op\":\"enqueue\",\"id\":\"x2\",\"pay")).unwrap();
    let open = || {
        let process: Arc<dyn Process> = TestProcess::new("a", &TestProcess::world());
        JournalOutbox::open(seams_with(process, Arc::new(FaultyFs::default())), &journal).unwrap()
    };
    let queue = open();
    assert_eq!(std::fs::read(&journal).unwrap(), format!("{whole}\n").into_bytes(), "the torn tail is gone");
    assert_eq!(queue.get("x2").unwrap(), None, "an unacknowledged transition did not happen");
    queue.enqueue("x3", "q").unwrap();
    drop(queue);
    let reopened = open();
    let ids: Vec<String> = reopened.list(None).unwrap().into_iter().map(|r| r.execution_id).collect();
    assert_eq!(ids, ["x1", "x3"]);
}

/// A line that decodes but does not fit the rows before it (a claim of an id never
/// enqueued, a prune of a pending row, a never-claimed row finished as delivered or
/// unknown) is no transition this code wrote: corruption at its offset, never applied.
#[test]
#[allow(clippy::disallowed_methods)] // writes the damaged journal as a real file
fn a_transition_that_does_not_fit_its_row_is_corruption_at_its_offset() {
    let enqueue = r#"{"op":"enqueue","id":"x1","payload":"p","at":1}"#;
    let cases = [
        (
            r#"{"op":"claim","id":"x9","owner":{"host":"h","pid":1,"started_at":1,"instance":"i"},"at":2}"#,
            "claim",
            "x9",
        ),
        (r#"{"op":"prune","id":"x1","at":2}"#, "prune", "x1"),
        (r#"{"op":"finish","id":"x1","status":"delivered","result":"ok","at":2}"#, "finish", "x1"),
        (r#"{"op":"finish","id":"x1","status":"unknown","error":"lost","at":2}"#, "finish", "x1"),
    ];
    for (line, op, id) in cases {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("journal.jsonl");
        std::fs::write(&journal, format!("{enqueue}\n{line}\n{enqueue}\n")).unwrap();
        let process: Arc<dyn Process> = TestProcess::new("a", &TestProcess::world());
        match JournalOutbox::open(seams_with(process, Arc::new(FaultyFs::default())), &journal) {
            Err(faultline_runtime::Error::JournalCorrupt { offset, reason, .. }) => {
                assert_eq!(offset, enqueue.len() as u64 + 1, "{op}: the line's own offset");
                assert!(reason.contains(op) && reason.contains(id), "{op}: {reason}");
            }
            other => panic!("{op} of {id} must be corruption, got {other:?}"),
        }
    }
}

/// Only an unterminated last line, or a last line of zero bytes (a power loss inside the
/// last write), is a tear to drop: a whole last line that does not decode was written as
/// it is — corruption, reported rather than silently dropped with the transition it held.
#[test]
#[allow(clippy::disallowed_methods)] // writes the damaged journal as a real file
fn a_whole_last_line_that_does_not_decode_is_corruption_and_a_zeroed_one_a_tear() {
    let enqueue = r#"{"op":"enqueue","id":"x1","payload":"p","at":1}"#;
    let open = |tail: &[u8]| {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("journal.jsonl");
        std::fs::write(&journal, [format!("{enqueue}\n").as_bytes(), tail].concat()).unwrap();
        let process: Arc<dyn Process> = TestProcess::new("a", &TestProcess::world());
        JournalOutbox::open(seams_with(process, Arc::new(FaultyFs::default())), &journal)
            .map(|q| q.list(None).unwrap().len())
    };
    let garbled = open(b"{\"op\":\"finish\",\"id\":\"x1\",\"stat\n");
    assert!(matches!(garbled, Err(faultline_runtime::Error::JournalCorrupt { .. })), "{garbled:?}");
    assert_eq!(
        open(&[0u8; 40].iter().copied().chain([b'\n']).collect::<Vec<u8>>()).unwrap(),
        1,
        "a zeroed last line is torn"
    );
}

/// Older builds chose resend ids among live rows only, so a journal may enqueue an id that
/// has a tombstone; replay accepts it, and the tombstone keeps blocking later enqueues.
#[test]
#[allow(clippy::disallowed_methods)] // writes the old journal as a real file
fn a_journal_that_enqueues_a_tombstoned_id_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    let lines = [
        r#"{"op":"enqueue","id":"x1","payload":"p","at":1}"#,
        r#"{"op":"finish","id":"x1","status":"failed","error":"no","at":2}"#,
        r#"{"op":"prune","id":"x1","at":3}"#,
        r#"{"op":"enqueue","id":"x1","payload":"again","at":4}"#,
    ];
    std::fs::write(&journal, lines.join("\n") + "\n").unwrap();
    let process: Arc<dyn Process> = TestProcess::new("a", &TestProcess::world());
    let queue = JournalOutbox::open(seams_with(process, Arc::new(FaultyFs::default())), &journal).unwrap();
    assert_eq!(queue.get("x1").unwrap().unwrap().payload.as_deref(), Some("again"));
    assert_eq!(queue.enqueue("x1", "third").unwrap(), Enqueued::Tombstoned(DeliveryStatus::Failed));
}

/// `claimed` is the evidence repair reads to tell "never sent" from "maybe sent": it is false
/// until a worker claims the row, true from then on, and survives a reopen.
#[test]
fn a_row_says_whether_it_was_ever_claimed_and_a_reopen_keeps_it() {
    for kind in kinds() {
        let bench = Bench::new(kind);
        let a = bench.process("a");
        let q = bench.open(&a);
        q.enqueue("x1", "one").unwrap();
        q.enqueue("x2", "two").unwrap();
        let claimed = |q: &Arc<dyn Outbox>| -> Vec<(String, bool)> {
            q.list(None).unwrap().into_iter().map(|d| (d.execution_id, d.claimed)).collect()
        };
        assert_eq!(claimed(&q), [("x1".into(), false), ("x2".into(), false)], "{kind:?}: fresh rows");
        assert_eq!(q.claim_next().unwrap().unwrap().execution_id, "x1");
        assert!(q.finish("x1", Finish::Delivered("ack".into())).unwrap());
        assert_eq!(claimed(&q), [("x1".into(), true), ("x2".into(), false)], "{kind:?}: after a claim");
        let reopened = bench.open(&bench.process("b"));
        assert_eq!(claimed(&reopened), [("x1".into(), true), ("x2".into(), false)], "{kind:?}: after a reopen");
        assert_eq!(reopened.get("x2").unwrap().map(|d| d.claimed), Some(false), "{kind:?}");
    }
}

/// `updated_at` is the queue's clock at the row's last change (prune's cutoff reads it), as
/// bracketed by the same clock read before and after the change.
#[tokio::test]
async fn a_row_is_stamped_with_the_clock_at_each_change() {
    let clock = SystemClock::new();
    for kind in kinds() {
        let bench = Bench::new(kind);
        let q = bench.open(&bench.process("a"));
        let before = clock.now_ms();
        q.enqueue("x1", "one").unwrap();
        let after = clock.now_ms();
        let enqueued = q.get("x1").unwrap().unwrap().updated_at;
        assert!((before..=after).contains(&enqueued), "{kind:?}: enqueued at {enqueued}, not in {before}..={after}");
        clock.sleep(Duration::from_millis(5)).await;
        let before = clock.now_ms();
        drain_with(&q, &Arc::new(Receiver::default())).await;
        let after = clock.now_ms();
        let delivered = q.get("x1").unwrap().unwrap().updated_at;
        assert!((before..=after).contains(&delivered), "{kind:?}: delivered at {delivered}, not in {before}..={after}");
    }
}

/// Crash repair says "it did not happen" only for a row it took out of the queue in the same
/// transaction that read it (issue 54, race 1): a drainer on another connection can no longer
/// claim and send it afterwards. A row a drainer claimed first stays the drainer's (uncertain
/// to repair, never made `unknown` under it), and an inspecting lookup writes nothing. Each
/// process has its own handle (its own connection or file handle), as a fleet has.
#[test]
fn repair_takes_a_never_claimed_delivery_out_of_the_queue_before_calling_it_not_started() {
    use faultline_runtime::store::{Evidence, OutcomeEvidence};
    for kind in kinds().into_iter().filter(|k| *k != Kind::Journal) {
        let bench = Bench::new(kind);
        let (worker, drainer) = (bench.open(&bench.process("worker")), bench.open(&bench.process("drainer")));
        worker.enqueue("s:1:1:a", "pay a").unwrap();
        worker.enqueue("s:1:1:b", "pay b").unwrap();

        let inspected = QueueEvidence::read_only(worker.clone()).lookup("s:1:1:a");
        assert_eq!(inspected, Some(Evidence::NeverClaimed), "{kind:?}");
        assert_eq!(drainer.get("s:1:1:a").unwrap().unwrap().status, DeliveryStatus::Pending, "{kind:?}: read only");

        let repair = QueueEvidence::new(worker.clone());
        assert_eq!(repair.lookup("s:1:1:a"), Some(Evidence::NeverClaimed), "{kind:?}");
        assert_eq!(drainer.get("s:1:1:a").unwrap().unwrap().status, DeliveryStatus::Failed, "{kind:?}: taken");
        let claimed = drainer.claim_next().unwrap().expect("b is still queued");
        assert_eq!(claimed.execution_id, "s:1:1:b", "{kind:?}: the drainer never gets a");

        // b was claimed first: repair may not call it not started, nor take it from under
        // the drainer, whose receipt still lands.
        assert!(matches!(repair.lookup("s:1:1:b"), Some(Evidence::Uncertain { .. })), "{kind:?}");
        assert!(drainer.finish("s:1:1:b", Finish::Delivered("ok".into())).unwrap(), "{kind:?}: the receipt lands");
        assert_eq!(repair.lookup("s:1:1:b"), Some(Evidence::Delivered("ok".into())), "{kind:?}");
    }
}

/// A drain's claims are never taken for abandoned by a `recover_abandoned` of the same
/// process running beside it (issue 54, race 2): parallel outbox tool calls each start a drain
/// with `recover_abandoned`, and one that read the process's in-flight set before another's
/// claim committed marked that live claim `unknown` — its real receipt then discarded. Real
/// threads on one queue handle (one connection), a thousand claims against a recover loop.
/// Before the fix it failed at the first claim on SQLite and on PostgreSQL: the recover's
/// snapshot of the in-flight set, taken while it waited for the connection, missed a claim
/// that committed ahead of it, and `finish` left the set before its own transaction.
#[test]
#[allow(clippy::disallowed_methods)] // real threads race on a real connection
fn a_claim_in_flight_is_never_recovered_as_abandoned_by_its_own_process() {
    const CLAIMS: usize = 1000;
    for kind in kinds() {
        let bench = Bench::new(kind);
        let queue = bench.open(&bench.process("worker"));
        for i in 0..CLAIMS {
            queue.enqueue(&format!("s:1:1:{i}"), "pay").unwrap();
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let recovering = {
            let (queue, stop) = (queue.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut taken = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    taken.extend(queue.recover_abandoned().unwrap());
                }
                taken
            })
        };
        let mut claimed = 0;
        while let Some(claim) = queue.claim_next().unwrap() {
            assert!(queue.finish(&claim.execution_id, Finish::Delivered("ok".into())).unwrap(), "{kind:?}: {claim:?}");
            claimed += 1;
        }
        stop.store(true, Ordering::SeqCst);
        let taken = recovering.join().unwrap();
        assert!(taken.is_empty(), "{kind:?}: live claims of this process were called abandoned: {taken:?}");
        assert_eq!(claimed, CLAIMS, "{kind:?}");
    }
}

/// An id being pruned is never admitted again by an enqueue racing the prune (issue 54,
/// race 3). On PostgreSQL the prune locked the rows and wrote tombstones without the
/// per-execution-id lock; an enqueue that looked for a tombstone before the prune committed,
/// then waited on the row lock, found neither once the prune committed, and queued the id
/// afresh — an effect that already happened, claimable again. Real threads on two
/// connections: one prunes five hundred finished rows, the other enqueues them again.
#[test]
#[allow(clippy::disallowed_methods)] // real threads race on real connections
fn an_enqueue_racing_a_prune_never_admits_a_pruned_id_again() {
    const ROWS: usize = 500;
    // The journal is one process's queue: a second handle does not see the first's rows.
    for kind in kinds().into_iter().filter(|k| *k != Kind::Journal) {
        let bench = Bench::new(kind);
        let (worker, pruner) = (bench.open(&bench.process("worker")), bench.open(&bench.process("pruner")));
        let ids: Vec<String> = (0..ROWS).map(|i| format!("s:1:1:{i}")).collect();
        for id in &ids {
            worker.enqueue(id, "pay").unwrap();
            let claim = worker.claim_next().unwrap().unwrap();
            worker.finish(&claim.execution_id, Finish::Delivered("ok".into())).unwrap();
        }
        let pruning = std::thread::spawn(move || pruner.prune(u64::MAX).unwrap());
        let mut readmitted = Vec::new();
        while !pruning.is_finished() {
            for id in ids.iter().rev() {
                if worker.enqueue(id, "pay again").unwrap() == Enqueued::New {
                    readmitted.push(id.clone());
                }
            }
        }
        assert_eq!(pruning.join().unwrap(), ROWS, "{kind:?}");
        assert!(readmitted.is_empty(), "{kind:?}: pruned ids queued afresh: {readmitted:?}");
        assert_eq!(worker.claim_next().unwrap(), None, "{kind:?}: nothing claimable");
    }
}
