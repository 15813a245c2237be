//! The SQLite session store on real files, beyond the shared store contract. Mostly opening
//! it (and the delivery queue) for inspection only — a command that inspects never writes:
//! what it refuses, with which reason, and that it creates nothing beside the database (not
//! the file, not `-wal`/`-shm`, not a journal). Also the repair revision counter.
#![allow(clippy::disallowed_methods)] // real SQLite files in a real directory, as a user has them

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use faultline_runtime::production::{self, SqliteOutbox, SqliteStore};
use faultline_runtime::store::{SessionLog, Store};
use faultline_runtime::Error;

use crate::fixtures::TestProcess;
use crate::store_contract::{append_all, sid};
use crate::support::{Log, T0};

fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

fn process() -> Arc<TestProcess> {
    TestProcess::new("inspector", &TestProcess::world())
}

/// A store at `path` holding one closed session `s` with two tool turns; the writer's
/// connection is closed (SQLite then checkpoints and removes its `-wal` and `-shm`).
fn store_with_one_session(path: &Path) -> Log {
    let mut log = Log::default();
    log.tool_turn(1);
    log.tool_turn(2);
    let store = SqliteStore::open(path, process()).unwrap();
    let mut writer = store.create(&sid("s"), T0).unwrap();
    append_all(writer.as_mut(), &log.records, 3);
    writer.close().unwrap();
    drop(store);
    log
}

/// A store at `path` whose writer is still live, holding one tool turn: its commits sit in the
/// `-wal`, not yet checkpointed into the file.
fn live_writer(path: &Path) -> (Log, Box<dyn SessionLog>) {
    let mut log = Log::default();
    log.tool_turn(1);
    let store = SqliteStore::open(path, process()).unwrap();
    let mut writer = store.create(&sid("s"), T0).unwrap();
    append_all(writer.as_mut(), &log.records, 2);
    (log, writer)
}

fn refusal(result: faultline_runtime::Result<SqliteStore>) -> String {
    match result {
        Err(Error::NotFaultlineDatabase { reason, .. }) => reason,
        Err(other) => panic!("refused for the wrong reason: {other}"),
        Ok(_) => panic!("opened"),
    }
}

#[test]
fn a_directory_a_stranger_file_and_someone_elses_database_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let directory = dir.path().join("sessions.sqlite");
    std::fs::create_dir(&directory).unwrap();
    assert_eq!(refusal(SqliteStore::open_read_only(&directory, process())), "not a regular file");

    let text = dir.path().join("notes.sqlite");
    std::fs::write(&text, "not a database, just words that are long enough to fill a header").unwrap();
    assert!(refusal(SqliteStore::open_read_only(&text, process())).contains("not a database"));

    let stranger = dir.path().join("stranger.sqlite");
    rusqlite::Connection::open(&stranger).unwrap().execute_batch("CREATE TABLE sessions (id TEXT);").unwrap();
    assert_eq!(refusal(SqliteStore::open_read_only(&stranger, process())), "it has no \"events\" table");

    // A delivery queue is not a session store, and a store is not a queue.
    let queue = dir.path().join("outbox.sqlite");
    let seams = production::seams();
    drop(SqliteOutbox::open(&queue, process(), seams.clock.clone(), seams.entropy.as_ref()).unwrap());
    assert_eq!(refusal(SqliteStore::open_read_only(&queue, process())), "it has no \"sessions\" table");
    let store = dir.path().join("store.sqlite");
    store_with_one_session(&store);
    match SqliteOutbox::open_read_only(&store, process(), seams.clock.clone(), seams.entropy.as_ref()) {
        Err(Error::NotFaultlineDatabase { reason, .. }) => assert_eq!(reason, "it has no \"deliveries\" table"),
        other => panic!("{other:?}"),
    }

    let before = listing(dir.path());
    let missing = dir.path().join("missing.sqlite");
    match SqliteStore::open_read_only(&missing, process()) {
        Err(Error::Io { source, .. }) => assert_eq!(source.kind(), std::io::ErrorKind::NotFound),
        other => panic!("{other:?}"),
    }
    for path in [&directory, &text, &stranger, &queue] {
        let _ = SqliteStore::open_read_only(path, process());
    }
    assert_eq!(listing(dir.path()), before, "refusals create nothing (no file, no -wal, no -shm)");
}

#[test]
fn a_store_under_a_path_with_uri_characters_is_read_whole_and_nothing_is_created() {
    let root = tempfile::tempdir().unwrap();
    // Each character a `file:` URI must escape, and a non-ASCII one.
    let dir = root.path().join("odd ?#%20 näme");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("sessions.sqlite");
    let log = store_with_one_session(&path);
    let before = listing(&dir);
    assert_eq!(before, BTreeSet::from(["sessions.sqlite".to_string()]), "the writer left only the database");
    let inspection = SqliteStore::open_read_only(&path, process()).unwrap().inspect(&sid("s")).unwrap();
    assert_eq!(inspection.records, log.records);
    assert_eq!(listing(&dir), before, "an inspection creates nothing beside the database");
}

#[test]
fn an_inspection_beside_a_live_writer_sees_what_it_committed_only_to_its_wal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.sqlite");
    let (log, writer) = live_writer(&path);
    // The writer is live: its commits are in the -wal, not yet checkpointed into the file.
    assert!(listing(dir.path()).contains("sessions.sqlite-wal"));
    let inspection = SqliteStore::open_read_only(&path, process()).unwrap().inspect(&sid("s")).unwrap();
    assert_eq!(inspection.records, log.records, "the read-only view includes the WAL");
    writer.close().unwrap();
}

/// A copy of a live store's database and its `-wal` without the `-shm` (what a user hands
/// over after copying "the database files" by hand): the committed records in the WAL are
/// read, not silently skipped, and the wal-index SQLite needs for them is not created beside
/// the user's files (a private copy is read instead).
#[test]
fn a_copied_database_with_its_wal_but_no_shm_is_read_with_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.sqlite");
    let (log, writer) = live_writer(&path);
    let copy = tempfile::tempdir().unwrap();
    let copied = copy.path().join("sessions.sqlite");
    std::fs::copy(&path, &copied).unwrap();
    std::fs::copy(dir.path().join("sessions.sqlite-wal"), copy.path().join("sessions.sqlite-wal")).unwrap();
    writer.close().unwrap();
    let before = listing(copy.path());
    let inspection = SqliteStore::open_read_only(&copied, process()).unwrap().inspect(&sid("s")).unwrap();
    assert_eq!(inspection.records, log.records, "the records only the WAL holds are read");
    assert_eq!(listing(copy.path()), before, "and no -shm is created beside them");
}

/// A `-shm` left without a `-wal` indexes nothing: the file alone is the database, read as it
/// is, and no `-wal` is created beside it.
#[test]
fn a_stray_shm_without_a_wal_is_ignored_and_the_file_read_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.sqlite");
    let log = store_with_one_session(&path);
    std::fs::write(dir.path().join("sessions.sqlite-shm"), vec![0u8; 32 * 1024]).unwrap();
    let before = listing(dir.path());
    let inspection = SqliteStore::open_read_only(&path, process()).unwrap().inspect(&sid("s")).unwrap();
    assert_eq!(inspection.records, log.records);
    assert_eq!(listing(dir.path()), before, "no -wal is created");
}

/// `revision` counts the rewrites of a session's log by repair (what a report cites as "the
/// transcript was repaired"): one per repair, none for a clean open or an inspection.
#[test]
fn a_repair_bumps_the_revision_once_and_clean_opens_and_inspections_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.sqlite");
    let world = TestProcess::world();
    let crashed = TestProcess::new("crashed", &world);
    let store = SqliteStore::open(&path, crashed.clone()).unwrap();
    let mut writer = store.create(&sid("s"), T0).unwrap();
    append_all(writer.as_mut(), &crate::store_contract::interrupted_turn(2).records, 3);
    crashed.kill();
    drop(writer); // SIGKILL: no close
    let recovery = SqliteStore::open(&path, TestProcess::new("recovery", &world)).unwrap();
    assert_eq!(recovery.revision(&sid("s")).unwrap(), 0, "never repaired");
    recovery.inspect(&sid("s")).unwrap();
    assert_eq!(recovery.revision(&sid("s")).unwrap(), 0, "an inspection repairs nothing");
    let opened = recovery.open(&sid("s"), faultline_runtime::store::Takeover::IfDead).unwrap();
    assert!(opened.loaded.repair.is_some());
    opened.log.close().unwrap();
    assert_eq!(recovery.revision(&sid("s")).unwrap(), 1, "one repair");
    let again = recovery.open(&sid("s"), faultline_runtime::store::Takeover::IfDead).unwrap();
    assert!(again.loaded.repair.is_none());
    again.log.close().unwrap();
    assert_eq!(recovery.revision(&sid("s")).unwrap(), 1, "a clean open is no repair");
}

/// SQLite cannot tear, so a committed row whose key disagrees with the record it holds is
/// corruption at that row — even when the records alone would still read as a valid log.
#[test]
fn a_row_whose_seq_key_disagrees_with_its_record_is_corruption_at_that_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.sqlite");
    let log = store_with_one_session(&path);
    let last = log.records.last().unwrap().seq;
    let changed = rusqlite::Connection::open(&path)
        .unwrap()
        .execute("UPDATE events SET seq = 999 WHERE seq = ?1", [last as i64])
        .unwrap();
    assert_eq!(changed, 1);
    let inspection = SqliteStore::open_read_only(&path, process()).unwrap().inspect(&sid("s")).unwrap();
    assert_eq!(inspection.status, faultline_runtime::store::ScanStatus::Corrupt);
    let error = inspection.error.unwrap();
    assert_eq!(error.offset, 999, "the offset of a row is its seq");
    assert_eq!(error.reason, format!("row seq 999 holds seq {last}"));
}
