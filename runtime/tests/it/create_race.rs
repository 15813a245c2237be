//! Two writers racing for the same owner token: the loser is told the session is locked and
//! by whom; any other failure to create the record stays an I/O error (an operator must not
//! be sent looking for a rival writer that does not exist).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use faultline_runtime::production::RealFs;
use faultline_runtime::store::{FileStore, Format, Store};
use faultline_runtime::{Error, Fs, FsFile, FsMetadata, OpenOptions};

use crate::fixtures::{seams_with, TestProcess};
use crate::store_contract::sid;
use crate::support::T0;

/// What happens to the first exclusive create of an owner record.
#[derive(Clone, Copy)]
enum Rival {
    /// Another writer creates the same record just before us (we then get `AlreadyExists`).
    WinsTheRace,
    /// The disk fails the create.
    DiskFails,
}

struct RacingFs {
    rival: Rival,
    fired: Arc<std::sync::atomic::AtomicBool>,
}

impl Fs for RacingFs {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>> {
        let owner_record = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("owner."));
        if owner_record && options.create_new && !self.fired.swap(true, std::sync::atomic::Ordering::SeqCst) {
            match self.rival {
                Rival::WinsTheRace => {
                    let token: u64 =
                        path.file_name().unwrap().to_str().unwrap()[6..].trim_end_matches(".json").parse().unwrap();
                    let record = serde_json::json!({
                        "token": token,
                        "owner": {"host": "rival-host", "pid": 4242, "started_at": 7, "instance": "rival"}
                    });
                    crate::fixtures::write(path, record.to_string().as_bytes());
                }
                Rival::DiskFails => return Err(io::Error::other("injected EIO creating the owner record")),
            }
        }
        RealFs.open(path, options)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        RealFs.read(path)
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        RealFs.create_dir(path)
    }
    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
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

fn create_with(rival: Rival) -> Error {
    let dir = tempfile::tempdir().unwrap();
    let world = TestProcess::world();
    let fs = Arc::new(RacingFs { rival, fired: Arc::default() });
    let store = FileStore::new(seams_with(TestProcess::new("us", &world), fs), dir.path(), Format::Jsonl);
    match store.create(&sid("s"), T0) {
        Ok(_) => panic!("the create should have failed"),
        Err(e) => e,
    }
}

#[test]
fn losing_the_race_for_an_owner_token_says_the_session_is_locked_and_by_whom() {
    let error = create_with(Rival::WinsTheRace);
    match &error {
        Error::SessionLocked { holder, .. } => assert!(holder.contains("rival-host"), "{error}"),
        other => panic!("expected SessionLocked, got {other}"),
    }
}

#[test]
fn a_disk_that_fails_the_owner_record_is_an_io_error_not_a_rival() {
    let error = create_with(Rival::DiskFails);
    assert!(!matches!(error, Error::SessionLocked { .. }), "no rival exists: {error}");
    assert!(error.to_string().contains("injected EIO"), "{error}");
}
