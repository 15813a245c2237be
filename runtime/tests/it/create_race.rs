//! Two writers racing to create the same file or directory — a session's owner token, the
//! delivery journal, the store's root. The loser learns who won (the session is locked, and
//! by whom) or uses what the winner published (the journal, the directory); any other
//! failure to create stays an I/O error (an operator must not be sent looking for a rival
//! writer that does not exist).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use faultline_runtime::outbox::{DeliveryStatus, JournalOutbox, Outbox};
use faultline_runtime::production::RealFs;
use faultline_runtime::store::{FileStore, Format, Store};
use faultline_runtime::{seams::Fs, seams::FsFile, seams::FsMetadata, seams::OpenOptions, Error};

use crate::fixtures::{seams_with, TestProcess};
use crate::store_contract::sid;
use crate::support::T0;

/// The step of ours just before which the rival acts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Moment {
    /// Our exclusive create (`create_new`) of the file.
    ExclusiveCreate,
    /// Our publishing of a fully written temp file under the final name (`hard_link`).
    Publish,
    /// Our `create_dir` of a directory.
    CreateDir,
}

/// What happens at that moment, once.
#[derive(Clone, Copy)]
enum Rival {
    /// Another writer puts its own file (these bytes, given the final path) under the name
    /// just before us, so our step meets `AlreadyExists`.
    WinsTheRace(fn(&Path) -> Vec<u8>),
    /// Another writer creates the directory just before us.
    MakesTheDirectory,
    /// The disk fails our step.
    DiskFails,
}

/// The real filesystem, with one rival acting on the first file whose name starts with
/// `name_prefix`.
struct RacingFs {
    name_prefix: &'static str,
    moment: Moment,
    rival: Rival,
    fired: AtomicBool,
}

impl RacingFs {
    fn new(name_prefix: &'static str, moment: Moment, rival: Rival) -> Arc<Self> {
        Arc::new(Self { name_prefix, moment, rival, fired: AtomicBool::new(false) })
    }

    fn strike(&self, moment: Moment, path: &Path) -> io::Result<()> {
        let named = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(self.name_prefix));
        if moment != self.moment || !named || self.fired.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        match self.rival {
            Rival::WinsTheRace(bytes) => {
                crate::fixtures::write(path, &bytes(path));
                Ok(())
            }
            Rival::MakesTheDirectory => RealFs.create_dir(path),
            Rival::DiskFails => Err(io::Error::other("injected EIO creating the file")),
        }
    }
}

impl Fs for RacingFs {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>> {
        if options.create_new {
            self.strike(Moment::ExclusiveCreate, path)?;
        }
        RealFs.open(path, options)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        RealFs.read(path)
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.strike(Moment::CreateDir, path)?;
        RealFs.create_dir(path)
    }
    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        self.strike(Moment::Publish, link)?;
        RealFs.hard_link(original, link)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealFs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        RealFs.remove_file(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        RealFs.read_dir(path)
    }
    fn metadata(&self, path: &Path) -> io::Result<Option<FsMetadata>> {
        RealFs.metadata(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        RealFs.sync_dir(path)
    }
}

/// A rival's owner record for the token its file name carries (`owner.<token>.json`).
fn rival_owner_record(path: &Path) -> Vec<u8> {
    let token: u64 = path.file_name().unwrap().to_str().unwrap()[6..].trim_end_matches(".json").parse().unwrap();
    let record = serde_json::json!({
        "token": token,
        "owner": {"host": "rival-host", "pid": 4242, "started_at": 7, "instance": "rival"}
    });
    record.to_string().into_bytes()
}

fn create_session_with(rival: Rival) -> Error {
    let dir = tempfile::tempdir().unwrap();
    let world = TestProcess::world();
    let fs = RacingFs::new("owner.", Moment::ExclusiveCreate, rival);
    let store = FileStore::new(seams_with(TestProcess::new("us", &world), fs), dir.path(), Format::Jsonl);
    match store.create(&sid("s"), T0) {
        Ok(_) => panic!("the create should have failed"),
        Err(e) => e,
    }
}

#[test]
fn losing_the_race_for_an_owner_token_says_the_session_is_locked_and_by_whom() {
    let error = create_session_with(Rival::WinsTheRace(rival_owner_record));
    match &error {
        Error::SessionLocked { holder, .. } => assert!(holder.contains("rival-host"), "{error}"),
        other => panic!("expected SessionLocked, got {other}"),
    }
}

#[test]
fn a_disk_that_fails_the_owner_record_is_an_io_error_not_a_rival() {
    let error = create_session_with(Rival::DiskFails);
    assert!(!matches!(error, Error::SessionLocked { .. }), "no rival exists: {error}");
    assert!(error.to_string().contains("injected EIO"), "{error}");
}

/// The journal a rival process published first: one delivery it enqueued.
fn rival_journal(_: &Path) -> Vec<u8> {
    b"{\"op\":\"enqueue\",\"id\":\"rival-1\",\"payload\":\"from the rival\",\"at\":1}\n".to_vec()
}

fn open_journal_with(rival: Rival) -> (tempfile::TempDir, faultline_runtime::Result<JournalOutbox>) {
    let dir = tempfile::tempdir().unwrap();
    let fs = RacingFs::new("journal.jsonl", Moment::Publish, rival);
    let seams = seams_with(TestProcess::new("us", &TestProcess::world()), fs);
    let opened = JournalOutbox::open(seams, dir.path().join("outbox").join("journal.jsonl"));
    (dir, opened)
}

#[test]
fn losing_the_race_to_create_the_delivery_journal_opens_the_winners_journal() {
    let (_dir, opened) = open_journal_with(Rival::WinsTheRace(rival_journal));
    let queue = opened.expect("a journal that exists is opened");
    let row = queue.get("rival-1").unwrap().expect("the rival's delivery is in the queue we opened");
    assert_eq!(row.status, DeliveryStatus::Pending);
    assert_eq!(row.payload.as_deref(), Some("from the rival"));
}

#[test]
fn a_disk_that_fails_to_publish_the_delivery_journal_is_an_io_error() {
    let (_dir, opened) = open_journal_with(Rival::DiskFails);
    let error = opened.expect_err("no journal was created");
    assert!(error.to_string().contains("injected EIO"), "the disk's own error is reported: {error}");
}

/// Two processes starting on a fresh machine both create the store's root: the one that
/// finds it made by the other between its look and its create goes on.
#[test]
fn a_rival_creating_the_store_root_first_is_no_error() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sessions");
    let fs = RacingFs::new("sessions", Moment::CreateDir, Rival::MakesTheDirectory);
    let store =
        FileStore::new(seams_with(TestProcess::new("us", &TestProcess::world()), fs.clone()), &root, Format::Jsonl);
    store.create(&sid("s"), T0).expect("the root exists: whoever made it").close().unwrap();
    assert!(fs.fired.load(Ordering::SeqCst), "the rival made the root first");
    assert!(root.join("s").join("session.jsonl").is_file());
}

/// A session header, as a rival that created the same session first would have published.
fn rival_session_file(_: &Path) -> Vec<u8> {
    let header = faultline_runtime::event::SessionHeader::new("s", T0).encode();
    format!("{header}\n").into_bytes()
}

#[test]
fn losing_the_race_to_publish_a_session_file_says_the_session_exists() {
    let dir = tempfile::tempdir().unwrap();
    let fs = RacingFs::new("session.jsonl", Moment::Publish, Rival::WinsTheRace(rival_session_file));
    let store =
        FileStore::new(seams_with(TestProcess::new("us", &TestProcess::world()), fs), dir.path(), Format::Jsonl);
    match store.create(&sid("s"), T0) {
        Err(Error::SessionExists(id)) => assert_eq!(id, "s"),
        Err(other) => panic!("expected SessionExists, got {other}"),
        Ok(_) => panic!("two creates of one session both succeeded"),
    }
}
