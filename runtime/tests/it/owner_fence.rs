//! The fence a writer checks before each append: two lookups (`owner.<t+1>.json` exists or
//! `owner.<t>.json` is gone), exact because the owner records always form one contiguous run
//! of tokens — also when removing old records fails.

use std::path::Path;
use std::sync::Arc;

use faultline_runtime::event::{Event, Record, TurnStart};
use faultline_runtime::production::RealFs;
use faultline_runtime::store::{FileStore, Format, SessionLog, Store, Takeover};
use faultline_runtime::{seams::Fs, Error};

use crate::fixtures::{read, seams_with, FailOp, FaultyFs, TestProcess};
use crate::store_contract::sid;
use crate::support::{Log, T0};

fn store(fs: &FaultyFs, root: &Path, process: &Arc<TestProcess>) -> FileStore {
    FileStore::new(seams_with(process.clone(), Arc::new(fs.clone())), root, Format::Jsonl)
}

fn owner_tokens(root: &Path) -> Vec<u64> {
    let mut tokens: Vec<u64> = RealFs
        .read_dir(&root.join("s"))
        .unwrap()
        .iter()
        .filter_map(|p| p.file_name()?.to_str()?.strip_prefix("owner.")?.strip_suffix(".json")?.parse().ok())
        .collect();
    tokens.sort_unstable();
    tokens
}

/// A record that continues every writer's log here (turn 1 is complete).
fn turn_two(log: &dyn SessionLog) -> Record {
    Record::new(log.next_seq(), T0, Event::TurnStart(TurnStart { turn: 2 }))
}

fn assert_fenced(log: &mut Box<dyn SessionLog>, current: u64) {
    let error = log.append(&[turn_two(log.as_ref())]).unwrap_err();
    assert!(matches!(error, Error::Fenced { current: c, .. } if c == current), "token {}: {error}", log.token());
}

/// Turn 1 of session `s`, written by `process`, which then dies: its writer and the records.
fn written_by_a_writer_that_died(fs: &FaultyFs, root: &Path, process: &Arc<TestProcess>) -> (Box<dyn SessionLog>, Log) {
    let mut log = Log::default();
    log.tool_turn(1);
    let mut writer = store(fs, root, process).create(&sid("s"), T0).unwrap();
    writer.append(&log.records).unwrap();
    process.kill();
    (writer, log)
}

/// `process` takes session `s` over while removing the old owner records fails.
fn take_over_failing_to_remove(fs: &FaultyFs, root: &Path, process: &Arc<TestProcess>) -> Box<dyn SessionLog> {
    fs.fail(FailOp::RemoveFile, 0);
    store(fs, root, process).open(&sid("s"), Takeover::IfDead).unwrap().log
}

#[test]
fn a_failed_removal_of_old_owner_records_never_unfences_their_writers() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = FaultyFs::default();
    let world = TestProcess::world();
    let (a, b, c, d) = (
        TestProcess::new("a", &world),
        TestProcess::new("b", &world),
        TestProcess::new("c", &world),
        TestProcess::new("d", &world),
    );
    let (mut first, log) = written_by_a_writer_that_died(&fs, tmp.path(), &a);

    // B takes over; removing A's record fails, so both remain.
    let mut second = take_over_failing_to_remove(&fs, tmp.path(), &b);
    assert_eq!(owner_tokens(tmp.path()), [1, 2]);
    assert_fenced(&mut first, 2);
    b.kill();

    // C takes over; removing A's record fails again. Removal goes lowest first and stops
    // there, so B's record stays — had it been removed, A (record present, no token 2)
    // would pass its fence and write beside C.
    let mut third = take_over_failing_to_remove(&fs, tmp.path(), &c);
    assert_eq!(owner_tokens(tmp.path()), [1, 2, 3], "the run of records stays contiguous");
    assert_fenced(&mut first, 3);
    assert_fenced(&mut second, 3);
    c.kill();

    // D takes over with removal working: every older record goes, each old writer is still
    // fenced (its own record is gone) and D writes.
    let mut fourth = store(&fs, tmp.path(), &d).open(&sid("s"), Takeover::IfDead).unwrap();
    assert_eq!(owner_tokens(tmp.path()), [4]);
    for old in [&mut first, &mut second, &mut third] {
        assert_fenced(old, 4);
    }
    assert_eq!(fourth.loaded.records, log.records, "nothing was written beside an owner");
    fourth.log.append(&[turn_two(fourth.log.as_ref())]).unwrap();
    fourth.log.close().unwrap();
}

/// Two processes taking over in turn both clean up the old records, lowest first. A record
/// the rival removed first is no reason to stop: the ones after it still go.
#[test]
fn old_owner_records_a_rival_removed_first_do_not_stop_the_cleanup() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = FaultyFs::default();
    let world = TestProcess::world();
    let (a, b, c) = (TestProcess::new("a", &world), TestProcess::new("b", &world), TestProcess::new("c", &world));
    let (_first, _) = written_by_a_writer_that_died(&fs, tmp.path(), &a);
    let _second = take_over_failing_to_remove(&fs, tmp.path(), &b);
    assert_eq!(owner_tokens(tmp.path()), [1, 2]);
    b.kill();

    // C lists records 1 and 2; a rival removes record 1 just before C does.
    fs.rival_removes_first(1);
    let mut third = store(&fs, tmp.path(), &c).open(&sid("s"), Takeover::IfDead).unwrap().log;
    assert_eq!(owner_tokens(tmp.path()), [3], "record 2 is removed although record 1 was already gone");
    third.append(&[turn_two(third.as_ref())]).unwrap();
    third.close().unwrap();
}

#[test]
fn a_writer_whose_own_record_vanished_without_a_newer_owner_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = FaultyFs::default();
    let a = TestProcess::new("a", &TestProcess::world());
    let mut log = Log::default();
    log.tool_turn(1);
    let mut writer = store(&fs, tmp.path(), &a).create(&sid("s"), T0).unwrap();
    writer.append(&log.records[..1]).unwrap();
    let before = read(&tmp.path().join("s").join("session.jsonl"));
    RealFs.remove_file(&tmp.path().join("s").join("owner.1.json")).unwrap();
    let error = writer.append(&log.records[1..2]).unwrap_err();
    assert!(error.to_string().contains("owner record is gone"), "{error}");
    assert_eq!(read(&tmp.path().join("s").join("session.jsonl")), before, "nothing written");
}
