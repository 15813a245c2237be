//! The shared store contract (FAILURE-CRASH-CONTRACT-*): every test runs against every
//! backend — memory, JSONL, JSONL+zstd and SQLite on real files, PostgreSQL on a real
//! throw-away server (skipped, with a note, where PostgreSQL is not installed; required in CI).

use std::path::PathBuf;
use std::sync::Arc;

use faultline_runtime::event::*;
use faultline_runtime::production::{PgStore, SqliteStore};
use faultline_runtime::store::LEASE_MS_DEFAULT;
use faultline_runtime::store::*;
use faultline_runtime::testing::PgServer;
use faultline_runtime::{seams::Process, Error};

use crate::fixtures::{seams_with, FailOp, FaultyFs, TestProcess};
use crate::support::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Jsonl,
    Zstd,
    Sqlite,
    Postgres,
}

/// Every backend this machine can run: PostgreSQL only where its server can be started.
pub fn all() -> Vec<Backend> {
    let mut all = vec![Backend::Memory, Backend::Jsonl, Backend::Zstd, Backend::Sqlite];
    if PgServer::shared().is_some() {
        all.push(Backend::Postgres);
    }
    all
}

/// One backend's storage, shared by any number of simulated processes.
pub struct Bench {
    pub backend: Backend,
    pub dir: tempfile::TempDir,
    pub world: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    pub fs: FaultyFs,
    memory: Option<MemoryStore>,
    /// The fresh database of a PostgreSQL bench.
    pub database_url: Option<String>,
}

impl Bench {
    pub fn new(backend: Backend) -> Self {
        let world = TestProcess::world();
        let memory = (backend == Backend::Memory).then(|| MemoryStore::new(TestProcess::new("seed", &world)));
        let database_url =
            (backend == Backend::Postgres).then(|| PgServer::shared().expect("PostgreSQL is running").fresh_database());
        Self { backend, dir: tempfile::tempdir().unwrap(), world, fs: FaultyFs::default(), memory, database_url }
    }

    pub fn process(&self, name: &str) -> Arc<TestProcess> {
        TestProcess::new(name, &self.world)
    }

    /// The store as seen by `process`.
    pub fn store(&self, process: &Arc<TestProcess>) -> Box<dyn Store> {
        let process: Arc<dyn Process> = process.clone();
        match self.backend {
            Backend::Memory => Box::new(self.memory.as_ref().unwrap().as_process(process)),
            Backend::Jsonl | Backend::Zstd => {
                let format = if self.backend == Backend::Jsonl { Format::Jsonl } else { Format::Zstd };
                Box::new(FileStore::new(seams_with(process, Arc::new(self.fs.clone())), self.dir.path(), format))
            }
            Backend::Sqlite => Box::new(SqliteStore::open(self.dir.path().join("sessions.sqlite"), process).unwrap()),
            Backend::Postgres => {
                Box::new(PgStore::connect(self.database_url.as_ref().unwrap(), process, LEASE_MS_DEFAULT).unwrap())
            }
        }
    }

    /// The session file of a file backend.
    pub fn session_file(&self, id: &SessionId) -> Option<PathBuf> {
        let format = match self.backend {
            Backend::Jsonl => Format::Jsonl,
            Backend::Zstd => Format::Zstd,
            _ => return None,
        };
        Some(self.dir.path().join(id.as_str()).join(format.file_name()))
    }
}

pub fn sid(id: &str) -> SessionId {
    SessionId::new(id).unwrap()
}

/// Appends `log`'s records in batches of `batch` records.
pub fn append_all(writer: &mut dyn SessionLog, records: &[Record], batch: usize) {
    for chunk in records.chunks(batch) {
        writer.append(chunk).unwrap();
    }
}

/// A turn left open mid-tool: c1 has a durable tool/call, c2 was requested but not started.
pub fn interrupted_turn(turn: u32) -> Log {
    let mut log = Log::default();
    log.tool_turn(1);
    log.push(Event::TurnStart(TurnStart { turn }));
    log.push(Event::StepStart(StepRef { turn, step: 1 }));
    log.push(Event::UserMessage(UserMessage { message: Message::user_text("send two") }));
    let c = log.push(chunk(turn, 1, 1, tool_delta()));
    let mut message = tool_message(turn, 1, "c1");
    message.message.content.push(ContentBlock::tool_call("c2", "send", "{}"));
    log.push_cited(Event::AssistantMessage(message), vec![c]);
    log.push(Event::ToolCall(tool_call(turn, 1, "c1")));
    log
}

#[test]
fn appended_batches_survive_reopen_and_seqs_continue() {
    for backend in all() {
        let bench = Bench::new(backend);
        let a = bench.process("a");
        let id = sid("s-1");
        let mut log = Log::default();
        log.tool_turn(1);
        let mut writer = bench.store(&a).create(&id, T0).unwrap();
        append_all(writer.as_mut(), &log.records, 4);
        assert_eq!(writer.next_seq(), log.records.len() as u64, "{backend:?}");
        writer.close().unwrap();

        let opened = bench.store(&a).open(&id, Takeover::Never).unwrap();
        assert_eq!(opened.loaded.records, log.records, "{backend:?}");
        assert_eq!(opened.loaded.header, SessionHeader::new("s-1", T0));
        assert!(opened.loaded.repair.is_none(), "{backend:?}: a closed turn needs no repair");
        let mut writer = opened.log;
        assert_eq!(writer.next_seq(), log.records.len() as u64);
        log.tool_turn(2);
        writer.append(&log.records[writer.next_seq() as usize..]).unwrap();
        writer.close().unwrap();
        let loaded = bench.store(&a).load(&id).unwrap();
        assert_eq!(loaded.records, log.records, "{backend:?}");
        Validator::validate_all(&loaded.records).unwrap();
    }
}

#[test]
fn creating_an_existing_session_is_refused() {
    for backend in all() {
        let bench = Bench::new(backend);
        let a = bench.process("a");
        bench.store(&a).create(&sid("dup"), T0).unwrap().close().unwrap();
        let error = bench.store(&a).create(&sid("dup"), T0).unwrap_err();
        assert!(matches!(error, Error::SessionExists(_)), "{backend:?}: {error}");
    }
}

#[test]
fn a_batch_that_breaks_the_log_writes_nothing_and_leaves_the_log_as_it_was() {
    for backend in all() {
        let bench = Bench::new(backend);
        let a = bench.process("a");
        let mut writer = bench.store(&a).create(&sid("s"), T0).unwrap();
        let gap = Record::new(1, T0, Event::TurnStart(TurnStart { turn: 1 }));
        assert!(matches!(writer.append(&[gap]), Err(Error::BadBatch(_))), "{backend:?}");
        let nested = [
            Record::new(0, T0, Event::TurnStart(TurnStart { turn: 1 })),
            Record::new(1, T0, Event::TurnStart(TurnStart { turn: 2 })),
        ];
        assert!(matches!(writer.append(&nested), Err(Error::Invariant(_))), "{backend:?}");
        assert!(matches!(writer.append(&[]), Err(Error::BadBatch(_))), "{backend:?}");
        assert_eq!(writer.next_seq(), 0);
        // A refused batch leaves no trace in the check either: the valid batch after it is
        // judged from where the log really is (the nested one got one record in).
        let valid = [Record::new(0, T0, Event::TurnStart(TurnStart { turn: 1 }))];
        writer.append(&valid).unwrap();
        assert_eq!(writer.next_seq(), 1);
        writer.close().unwrap();
        let inspected = bench.store(&a).inspect(&sid("s")).unwrap().records;
        assert_eq!(inspected, valid, "{backend:?}");
    }
}

#[test]
fn a_second_live_writer_is_refused_naming_the_holder() {
    for backend in all() {
        let bench = Bench::new(backend);
        let (a, b) = (bench.process("writer-a"), bench.process("writer-b"));
        let _held = bench.store(&a).create(&sid("s"), T0).unwrap();
        let error = bench.store(&b).open(&sid("s"), Takeover::IfDead).unwrap_err();
        assert!(matches!(error, Error::SessionLocked { .. }), "{backend:?}: {error}");
        assert!(error.to_string().contains("writer-a"), "{backend:?}: the error names the holder: {error}");
    }
}

#[test]
fn a_dead_owner_is_taken_over_only_explicitly_and_its_late_writes_are_rejected() {
    for backend in all() {
        let bench = Bench::new(backend);
        let (a, b) = (bench.process("old-run"), bench.process("new-run"));
        let mut log = Log::default();
        log.tool_turn(1);
        let mut old = bench.store(&a).create(&sid("s"), T0).unwrap();
        old.append(&log.records[..3]).unwrap();
        a.kill();

        let error = bench.store(&b).open(&sid("s"), Takeover::Never).unwrap_err();
        assert!(matches!(error, Error::StaleOwner { .. }), "{backend:?}: {error}");
        assert!(error.to_string().contains("old-run"));

        let opened = bench.store(&b).open(&sid("s"), Takeover::IfDead).unwrap();
        let mut new = opened.log;
        assert!(new.token() > old.token(), "{backend:?}: takeover bumps the fencing token");
        let repaired = opened.loaded.records.len();

        // The slow old run wakes up and tries to write: rejected, never interleaved.
        let late = old.append(&log.records[3..4]).unwrap_err();
        assert!(matches!(late, Error::Fenced { .. }), "{backend:?}: {late}");

        let mut more = Log { records: opened.loaded.records.clone() };
        more.tool_turn(2);
        new.append(&more.records[repaired..]).unwrap();
        new.close().unwrap();
        let loaded = bench.store(&b).load(&sid("s")).unwrap();
        assert_eq!(loaded.records, more.records, "{backend:?}: the new run's progress stands");
    }
}

#[test]
fn closers_for_an_interrupted_turn_are_exact() {
    for backend in all() {
        let bench = Bench::new(backend);
        let a = bench.process("crashed");
        let log = interrupted_turn(2);
        let mut writer = bench.store(&a).create(&sid("s"), T0).unwrap();
        append_all(writer.as_mut(), &log.records, 3);
        a.kill();
        drop(writer); // SIGKILL: no close

        let b = bench.process("recovery");
        let inspection = bench.store(&b).inspect(&sid("s")).unwrap();
        assert_eq!(inspection.status, ScanStatus::Clean, "{backend:?}");
        assert!(inspection.open_turn);
        let last = log.records.last().unwrap();
        let call_seq = last.seq;
        let expected = vec![
            {
                let mut r = Record::new(
                    last.seq + 1,
                    last.time,
                    Event::ToolResult(ToolResult {
                        turn: 2,
                        step: 1,
                        call_id: "c1".into(),
                        content: vec![ContentBlock::text(OUTCOME_UNKNOWN_TEXT)],
                        is_error: true,
                        error: Some(ToolError { name: "outcome_unknown".into(), code: ErrorCode::ToolOutcomeUnknown }),
                    }),
                );
                r.source_seqs = Some(vec![call_seq]);
                r
            },
            Record::new(
                last.seq + 2,
                last.time,
                Event::ToolResult(ToolResult {
                    turn: 2,
                    step: 1,
                    call_id: "c2".into(),
                    content: vec![ContentBlock::text(NOT_STARTED_TEXT)],
                    is_error: true,
                    error: Some(ToolError { name: "not_started".into(), code: ErrorCode::ToolNotStarted }),
                }),
            ),
            Record::new(last.seq + 3, last.time, Event::StepEnd(StepRef { turn: 2, step: 1 })),
            Record::new(
                last.seq + 4,
                last.time,
                Event::TurnEnd(TurnEnd { turn: 2, reason: TurnEndReason::Interrupted }),
            ),
        ];
        assert_eq!(inspection.closers, expected, "{backend:?}");

        // inspect never writes.
        let again = bench.store(&b).inspect(&sid("s")).unwrap();
        assert_eq!(again.records, inspection.records);
        assert_eq!(again.closers, expected);
        if let Some(path) = bench.session_file(&sid("s")) {
            let before = crate::fixtures::read(&path);
            bench.store(&b).inspect(&sid("s")).unwrap();
            assert_eq!(crate::fixtures::read(&path), before, "{backend:?}: inspect wrote");
        }

        // A cold load commits the repair, exactly once.
        let loaded = bench.store(&b).load(&sid("s")).unwrap();
        assert_eq!(loaded.repair.as_ref().unwrap().closers, expected, "{backend:?}");
        let all: Vec<Record> = log.records.iter().cloned().chain(expected.iter().cloned()).collect();
        assert_eq!(loaded.records, all);
        Validator::validate_all(&loaded.records).unwrap();
        let after = bench.store(&b).inspect(&sid("s")).unwrap();
        assert!(!after.needs_repair(), "{backend:?}: repaired sessions are clean");
        assert!(bench.store(&b).load(&sid("s")).unwrap().repair.is_none());
    }
}

#[test]
fn a_turn_open_without_a_step_closes_with_turn_end_only() {
    for backend in all() {
        let bench = Bench::new(backend);
        let a = bench.process("a");
        let mut writer = bench.store(&a).create(&sid("s"), T0).unwrap();
        writer.append(&[Record::new(0, T0 + 5, Event::TurnStart(TurnStart { turn: 1 }))]).unwrap();
        a.kill();
        let inspection = bench.store(&bench.process("b")).inspect(&sid("s")).unwrap();
        let expected =
            vec![Record::new(1, T0 + 5, Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Interrupted }))];
        assert_eq!(inspection.closers, expected, "{backend:?}");
    }
}

#[test]
fn a_live_load_of_an_open_turn_is_refused() {
    for backend in all() {
        let bench = Bench::new(backend);
        let a = bench.process("live-writer");
        let mut writer = bench.store(&a).create(&sid("s"), T0).unwrap();
        writer.append(&[Record::new(0, T0, Event::TurnStart(TurnStart { turn: 1 }))]).unwrap();
        let error = bench.store(&bench.process("reader")).load(&sid("s")).unwrap_err();
        assert!(matches!(error, Error::SessionLive { .. }), "{backend:?}: {error}");
        assert!(error.to_string().contains("live-writer"));
        // The running turn is untouched and its writer carries on.
        writer
            .append(&[Record::new(1, T0, Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Completed }))])
            .unwrap();
    }
}

#[test]
fn sessions_are_listed_in_order() {
    for backend in all() {
        let bench = Bench::new(backend);
        let a = bench.process("a");
        for id in ["b-2", "a-1", "c-3"] {
            bench.store(&a).create(&sid(id), T0).unwrap().close().unwrap();
        }
        assert_eq!(bench.store(&a).list().unwrap(), vec![sid("a-1"), sid("b-2"), sid("c-3")], "{backend:?}");
        let missing = bench.store(&a).open(&sid("nope"), Takeover::Never).unwrap_err();
        assert!(matches!(missing, Error::SessionNotFound(_)), "{backend:?}");
    }
}

#[test]
fn session_ids_are_validated() {
    assert_eq!(SessionId::new(""), Err(InvalidSessionId::Empty));
    assert_eq!(SessionId::new("x".repeat(10 * 1024)), Err(InvalidSessionId::TooLong { len: 10 * 1024 }));
    assert_eq!(SessionId::new("../etc"), Err(InvalidSessionId::BadCharacter { found: '.', at: 0 }));
    assert_eq!(SessionId::new("a/b"), Err(InvalidSessionId::BadCharacter { found: '/', at: 1 }));
    assert_eq!(SessionId::new("a b"), Err(InvalidSessionId::BadCharacter { found: ' ', at: 1 }));
    assert!(SessionId::new("2026-11-29.run_7").is_ok());
    let message = SessionId::new("../etc").unwrap_err().to_string();
    assert!(message.contains("allowed"), "{message}");
}

/// File backends: a failed write or fsync truncates back, and the retry leaves seqs gap-free
/// (FAILURE-JSONL-ATOMICITY).
#[test]
fn a_failed_append_is_rolled_back_and_the_retry_is_gap_free() {
    for backend in [Backend::Jsonl, Backend::Zstd] {
        for op in [FailOp::Write, FailOp::Sync] {
            let bench = Bench::new(backend);
            let a = bench.process("a");
            let mut log = Log::default();
            log.tool_turn(1);
            let mut writer = bench.store(&a).create(&sid("s"), T0).unwrap();
            writer.append(&log.records[..5]).unwrap();
            let path = bench.session_file(&sid("s")).unwrap();
            let before = crate::fixtures::read(&path);

            bench.fs.fail(op, 0);
            let error = writer.append(&log.records[5..9]).unwrap_err();
            assert!(matches!(error, Error::AppendFailed { rollback: None, .. }), "{backend:?} {op:?}: {error}");
            assert_eq!(crate::fixtures::read(&path), before, "{backend:?} {op:?}: the failed batch left no bytes");
            assert_eq!(writer.next_seq(), 5);

            writer.append(&log.records[5..9]).unwrap();
            writer.append(&log.records[9..]).unwrap();
            writer.close().unwrap();
            let loaded = bench.store(&a).load(&sid("s")).unwrap();
            assert_eq!(loaded.records, log.records, "{backend:?} {op:?}: no seq duplicated or skipped");
        }
    }
}

#[test]
fn a_failed_rollback_reports_both_errors_and_disables_the_writer() {
    for backend in [Backend::Jsonl, Backend::Zstd] {
        let bench = Bench::new(backend);
        let a = bench.process("a");
        let mut writer = bench.store(&a).create(&sid("s"), T0).unwrap();
        bench.fs.fail(FailOp::Sync, 0);
        bench.fs.fail(FailOp::SetLen, 0);
        let batch = [Record::new(0, T0, Event::TurnStart(TurnStart { turn: 1 }))];
        let error = writer.append(&batch).unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, Error::AppendFailed { rollback: Some(_), .. }), "{backend:?}: {text}");
        assert!(text.contains("Sync") && text.contains("SetLen"), "{backend:?}: both errors reported: {text}");
        assert!(matches!(writer.append(&batch), Err(Error::Poisoned(_))), "{backend:?}");
        // Reopening scans and repairs whatever the failed rollback left.
        drop(writer);
        a.kill();
        let opened = bench.store(&bench.process("b")).open(&sid("s"), Takeover::IfDead).unwrap();
        Validator::validate_all(&opened.loaded.records).unwrap();
    }
}
