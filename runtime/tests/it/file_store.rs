//! The file backends' own directory handling: a store root that does not exist yet is
//! created level by level, each new name made durable in its parent, and a directory that
//! cannot be created is an error that says so.

use std::path::PathBuf;
use std::sync::Arc;

use faultline_runtime::store::{FileStore, Format, Store};
use faultline_runtime::Error;

use crate::fixtures::{seams_with, FailOp, FaultyFs, TestProcess};
use crate::store_contract::sid;
use crate::support::T0;

fn store(fs: &FaultyFs, root: &std::path::Path) -> FileStore {
    let process = TestProcess::new("a", &TestProcess::world());
    FileStore::new(seams_with(process, Arc::new(fs.clone())), root, Format::Jsonl)
}

#[test]
fn a_missing_root_is_created_level_by_level_and_each_new_name_synced_in_its_parent() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("a").join("b").join("sessions");
    let fs = FaultyFs::default();
    store(&fs, &root).create(&sid("s"), T0).unwrap().close().unwrap();
    assert!(root.join("s").join("session.jsonl").is_file());
    let synced = fs.synced_dirs();
    let at = |dir: &PathBuf| {
        synced.iter().position(|d| d == dir).unwrap_or_else(|| panic!("{dir:?} never synced: {synced:?}"))
    };
    let (a, b) = (tmp.path().join("a"), tmp.path().join("a").join("b"));
    // Each directory's parent is synced after the directory is created, outermost first.
    assert!(at(&tmp.path().to_path_buf()) < at(&a), "{synced:?}");
    assert!(at(&a) < at(&b), "{synced:?}");
    assert!(at(&b) < at(&root), "{synced:?}");
    assert!(synced.contains(&root.join("s")), "the session directory's new file names: {synced:?}");
}

#[test]
fn a_root_that_cannot_be_created_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("sessions");
    let fs = FaultyFs::default();
    fs.fail(FailOp::CreateDir, 0);
    match store(&fs, &root).create(&sid("s"), T0) {
        Err(Error::Io { context, source }) => {
            assert_eq!(context, format!("creating directory {}", root.display()));
            assert!(source.to_string().contains("injected EIO"), "{source}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!root.exists());
}

#[test]
fn a_session_directory_that_cannot_be_created_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("sessions");
    faultline_runtime::seams::Fs::create_dir(&faultline_runtime::production::RealFs, &root).unwrap();
    let fs = FaultyFs::default();
    fs.fail(FailOp::CreateDir, 0);
    match store(&fs, &root).create(&sid("s"), T0) {
        Err(Error::Io { context, source }) => {
            assert_eq!(context, format!("creating directory {}", root.join("s").display()));
            assert!(source.to_string().contains("injected EIO"), "{source}");
        }
        other => panic!("{other:?}"),
    }
}

/// Inspecting a file by path: a missing file is "no such session"; any other failure to
/// open it is an I/O error, never mistaken for a missing session.
#[test]
fn inspecting_a_missing_file_is_session_not_found_and_an_unopenable_one_an_io_error() {
    let tmp = tempfile::tempdir().unwrap();
    let seams = seams_with(TestProcess::new("a", &TestProcess::world()), Arc::new(FaultyFs::default()));
    let missing = tmp.path().join("gone").join("session.jsonl");
    match faultline_runtime::store::inspect_file(&seams, &missing) {
        Err(Error::SessionNotFound(path)) => assert_eq!(path, missing.display().to_string()),
        other => panic!("{other:?}"),
    }
    // A regular file where a directory should be: opening below it fails with ENOTDIR.
    let file = tmp.path().join("plain");
    crate::fixtures::write(&file, b"not a directory");
    let below = file.join("session.jsonl");
    match faultline_runtime::store::inspect_file(&seams, &below) {
        Err(Error::Io { context, .. }) => assert_eq!(context, format!("reading {}", below.display())),
        other => panic!("{other:?}"),
    }
}

/// A store whose root does not exist yet lists no sessions; a root that cannot be listed is an
/// I/O error, never an empty store (a caller would conclude there is nothing to recover).
#[test]
fn listing_a_missing_root_is_empty_and_an_unlistable_one_an_io_error() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = FaultyFs::default();
    assert_eq!(store(&fs, &tmp.path().join("not-yet")).list().unwrap(), vec![]);
    let plain = tmp.path().join("plain");
    crate::fixtures::write(&plain, b"a file where the root should be");
    match store(&fs, &plain).list() {
        Err(Error::Io { context, .. }) => assert_eq!(context, format!("listing {}", plain.display())),
        other => panic!("{other:?}"),
    }
}
