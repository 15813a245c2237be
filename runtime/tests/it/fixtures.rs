//! Real-filesystem fixtures for store tests: production seams with a controllable process
//! identity and a filesystem that fails chosen operations.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // fixtures build real files

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use faultline_runtime::production::RealFs;
use faultline_runtime::{
    seams::Fs, seams::FsFile, seams::FsMetadata, seams::Liveness, seams::OpenOptions, seams::OwnerIdentity,
    seams::Process, seams::Seams,
};

/// A process identity whose liveness the test decides.
#[derive(Debug, Clone)]
pub struct TestProcess {
    me: OwnerIdentity,
    dead: Arc<Mutex<BTreeSet<String>>>,
}

impl TestProcess {
    /// A fresh "world" of processes; `spawn` makes members.
    pub fn world() -> Arc<Mutex<BTreeSet<String>>> {
        Arc::default()
    }

    pub fn new(name: &str, dead: &Arc<Mutex<BTreeSet<String>>>) -> Arc<Self> {
        let me = OwnerIdentity { host: "test-host".into(), pid: 4242, started_at: 1, instance: name.into() };
        Arc::new(Self { me, dead: dead.clone() })
    }

    /// Marks this process as exited.
    pub fn kill(&self) {
        self.dead.lock().unwrap().insert(self.me.instance.clone());
    }
}

impl Process for TestProcess {
    fn identity(&self) -> OwnerIdentity {
        self.me.clone()
    }

    fn liveness(&self, owner: &OwnerIdentity) -> Liveness {
        // Components suffix their own instance ids (`worker-a/outbox-…`); the process is the
        // part before the first `/`, as pid + start time is for the real process.
        let process = owner.instance.split('/').next().unwrap_or_default();
        if self.dead.lock().unwrap().contains(process) {
            Liveness::Dead
        } else {
            Liveness::Alive
        }
    }
}

/// Which operation a [`FaultyFs`] fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOp {
    Write,
    Sync,
    SetLen,
    CreateDir,
    RemoveFile,
}

/// Real files, except that the next `n`-th write/sync/set_len/create_dir/remove_file (armed by the test)
/// fails with EIO, and reads may be made short. Records every directory it syncs.
#[derive(Debug, Clone, Default)]
pub struct FaultyFs {
    armed: Arc<Mutex<Vec<(FailOp, u64)>>>,
    calls: Arc<AtomicU64>,
    synced_dirs: Arc<Mutex<Vec<PathBuf>>>,
    /// Most bytes one `read_at` returns (0: no limit). A positioned read may legally return
    /// fewer bytes than asked (network and FUSE filesystems do); every reader must loop.
    read_bytes_max: Arc<AtomicU64>,
    /// The largest buffer any `read_at` was asked to fill: a reader's memory bound, seen
    /// from the disk's side.
    largest_read: Arc<AtomicU64>,
    /// Armed by [`FaultyFs::shrinks_at_next_read`]: the length a rival cuts the file to.
    shrink_to: Arc<Mutex<Option<u64>>>,
    /// Armed by [`FaultyFs::rival_removes_first`]: how many `remove_file` calls a rival wins.
    rival_removals: Arc<AtomicU64>,
}

impl FaultyFs {
    /// From now on, every `read_at` returns at most `bytes` bytes (0: no limit).
    pub fn short_reads(&self, bytes: u64) {
        self.read_bytes_max.store(bytes, Ordering::Relaxed);
    }

    /// At the next `read_at` of any file, a rival first truncates that file to `len` bytes
    /// (a repair cutting a torn tail while someone reads): the reader opened it longer.
    pub fn shrinks_at_next_read(&self, len: u64) {
        *self.shrink_to.lock().unwrap() = Some(len);
    }

    /// At each of the next `calls` `remove_file` calls, a rival removes the file first (another
    /// process cleaning up the same old records): the caller's removal finds it gone.
    pub fn rival_removes_first(&self, calls: u64) {
        self.rival_removals.store(calls, Ordering::Relaxed);
    }

    /// The largest buffer one `read_at` was asked to fill so far.
    pub fn largest_read(&self) -> u64 {
        self.largest_read.load(Ordering::Relaxed)
    }

    /// Every directory synced so far, in order.
    pub fn synced_dirs(&self) -> Vec<PathBuf> {
        self.synced_dirs.lock().unwrap().clone()
    }

    /// Fails the `after`-th next call of `op` (0 = the very next one).
    pub fn fail(&self, op: FailOp, after: u64) {
        self.armed.lock().unwrap().push((op, after));
    }

    fn check(&self, op: FailOp) -> io::Result<()> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut armed = self.armed.lock().unwrap();
        let mut fire = false;
        armed.retain_mut(|(armed_op, countdown)| {
            if *armed_op != op {
                return true;
            }
            if *countdown == 0 {
                fire = true;
                return false;
            }
            *countdown -= 1;
            true
        });
        if fire {
            Err(io::Error::other(format!("injected EIO on {op:?}")))
        } else {
            Ok(())
        }
    }
}

#[derive(Debug)]
struct FaultyFile {
    inner: Box<dyn FsFile>,
    fs: FaultyFs,
    path: PathBuf,
}

impl FsFile for FaultyFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.fs.check(FailOp::Write)?;
        self.inner.write_all(buf)
    }

    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        self.inner.read_all()
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(len) = self.fs.shrink_to.lock().unwrap().take() {
            std::fs::OpenOptions::new().write(true).open(&self.path)?.set_len(len)?;
        }
        self.fs.largest_read.fetch_max(buf.len() as u64, Ordering::Relaxed);
        let max = usize::try_from(self.fs.read_bytes_max.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        let len = if max == 0 { buf.len() } else { buf.len().min(max) };
        self.inner.read_at(offset, &mut buf[..len])
    }

    fn sync(&mut self) -> io::Result<()> {
        self.fs.check(FailOp::Sync)?;
        self.inner.sync()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.fs.check(FailOp::SetLen)?;
        self.inner.set_len(len)
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
}

impl Fs for FaultyFs {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>> {
        Ok(Box::new(FaultyFile { inner: RealFs.open(path, options)?, fs: self.clone(), path: path.to_owned() }))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        RealFs.read(path)
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.check(FailOp::CreateDir)?;
        RealFs.create_dir(path)
    }
    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        RealFs.hard_link(original, link)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealFs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.check(FailOp::RemoveFile)?;
        let rival = self.rival_removals.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if rival.is_ok() {
            RealFs.remove_file(path)?;
        }
        RealFs.remove_file(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        RealFs.read_dir(path)
    }
    fn metadata(&self, path: &Path) -> io::Result<Option<FsMetadata>> {
        RealFs.metadata(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        RealFs.sync_dir(path)?;
        self.synced_dirs.lock().unwrap().push(path.to_path_buf());
        Ok(())
    }
}

/// Production seams with `process` and `fs` swapped in.
pub fn seams_with(process: Arc<dyn Process>, fs: Arc<dyn Fs>) -> Seams {
    let mut seams = faultline_runtime::production::seams();
    seams.process = process;
    seams.fs = fs;
    seams
}

/// Reads a real file.
pub fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// Overwrites a real file.
pub fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap()
}
