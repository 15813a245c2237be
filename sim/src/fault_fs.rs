//! A fault-injecting filesystem over any `Fs` (in the simulator: turmoil's), driven by a
//! shared [`FsFaults`] control.
//!
//! Every *mutating* operation (create/open-for-create, write, fsync, set_len, create_dir,
//! hard_link, rename, remove, sync_dir) gets an index, in program order. The control can:
//! - **crash before operation `k`**: operation `k` and everything after it are refused without
//!   touching the disk, and the control reports `crashed()`; the driver then crashes the host
//!   (`Sim::crash`), so the durable state is exactly "everything synced before op `k`", with
//!   unsynced writes torn by turmoil at the configured block size;
//! - **fail operation `k`** with an error kind (EIO on a write or fsync, ENOSPC), once;
//! - **leave a power-loss hole**: when the crash lands on an fsync, the bytes written since
//!   the file's last fsync reach the disk with a run of zero bytes inside them (from a point
//!   in their first line up to its newline), as a power loss that persisted some blocks of a
//!   write and not others would.
//!
//! Reads are not numbered: a crash before a read leaves the same disk as a crash after the
//! previous mutation.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use faultline_runtime::{Fs, FsFile, FsMetadata, OpenOptions};

/// The kinds of mutating operation, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FsOp {
    /// `open` with `create`/`create_new`.
    Create,
    /// `FsFile::write_all`.
    Write,
    /// `FsFile::sync`.
    Sync,
    /// `FsFile::set_len`.
    SetLen,
    /// `Fs::create_dir`.
    CreateDir,
    /// `Fs::hard_link`.
    HardLink,
    /// `Fs::rename`.
    Rename,
    /// `Fs::remove_file`.
    Remove,
    /// `Fs::sync_dir`.
    SyncDir,
}

#[derive(Debug, Default)]
struct State {
    next_op: u64,
    crash_before: Option<u64>,
    crashed: bool,
    failures: BTreeMap<u64, io::ErrorKind>,
    log: Vec<(FsOp, PathBuf)>,
    /// Leave a hole in the unsynced write when the crash lands on its fsync; the value picks
    /// where the hole starts.
    hole: Option<u64>,
    /// The file a hole was left in.
    hole_left: Option<PathBuf>,
    /// Bytes written but not yet fsynced, per file (what a crash now may tear or lose).
    unsynced_bytes: BTreeMap<PathBuf, u64>,
    /// The injected failures that were returned, in order (coverage counts these, not the plan).
    failures_fired: Vec<io::ErrorKind>,
    /// Called when the planned crash-before-op is reached (a real host kills itself there).
    on_crash: Option<CrashHook>,
}

/// What a real host does at its planned crash-before-op: report and SIGKILL itself.
#[derive(Clone)]
struct CrashHook(Arc<dyn Fn(u64) + Send + Sync>);

impl std::fmt::Debug for CrashHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CrashHook")
    }
}

/// Shared control of one host's filesystem faults.
#[derive(Debug, Clone, Default)]
pub struct FsFaults {
    state: Arc<Mutex<State>>,
}

impl FsFaults {
    /// No faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Crash before mutating operation `op` (0-based).
    pub fn crash_before(&self, op: u64) -> &Self {
        self.lock().crash_before = Some(op);
        self
    }

    /// Calls `hook` with the operation's index when the planned crash-before-op is reached,
    /// before the operation is refused. In the simulator the driver crashes the host after the
    /// fact; a real host (`faultline run --real`) kills itself in the hook, so nothing after
    /// that instant happens either way.
    pub fn on_crash(&self, hook: Arc<dyn Fn(u64) + Send + Sync>) -> &Self {
        self.lock().on_crash = Some(CrashHook(hook));
        self
    }

    /// Fail mutating operation `op` once with `kind`.
    pub fn fail(&self, op: u64, kind: io::ErrorKind) -> &Self {
        self.lock().failures.insert(op, kind);
        self
    }

    /// Arms the power-loss hole; `draw` picks where in the first unsynced line it starts.
    pub fn hole_on_crash(&self, draw: u64) -> &Self {
        self.lock().hole = Some(draw);
        self
    }

    /// The file a power-loss hole was left in, if one was.
    pub fn hole_left(&self) -> Option<PathBuf> {
        self.lock().hole_left.clone()
    }

    /// Disarms the faults not yet fired (the simulator's liveness phase). A crash that
    /// already happened stays: a dead incarnation does not come back.
    pub fn heal(&self) {
        let mut state = self.lock();
        state.crash_before = None;
        state.failures.clear();
    }

    /// Crashes now: every later operation is refused without touching the disk.
    pub fn crash_now(&self) {
        self.lock().crashed = true;
    }

    /// Whether the crash point has been reached.
    pub fn crashed(&self) -> bool {
        self.lock().crashed
    }

    /// Bytes written and not yet fsynced, over every file: a crash now tears or loses them.
    pub fn unsynced_bytes(&self) -> u64 {
        self.lock().unsynced_bytes.values().sum()
    }

    /// The injected failures that were actually returned to the host.
    pub fn failures_fired(&self) -> Vec<io::ErrorKind> {
        self.lock().failures_fired.clone()
    }

    /// How many mutating operations were numbered so far.
    pub fn ops(&self) -> u64 {
        self.lock().next_op
    }

    /// The numbered operations so far, in order.
    pub fn log(&self) -> Vec<(FsOp, PathBuf)> {
        self.lock().log.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Numbers one mutating operation and decides its fate.
    fn admit(&self, op: FsOp, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        if state.crashed {
            return Err(io::Error::other("host crashed (simulated)"));
        }
        let index = state.next_op;
        if state.crash_before == Some(index) {
            state.crashed = true;
            if let Some(CrashHook(hook)) = state.on_crash.clone() {
                drop(state);
                hook(index);
            }
            return Err(io::Error::other("host crashed (simulated)"));
        }
        state.next_op += 1;
        state.log.push((op, path.to_path_buf()));
        let failure = state.failures.remove(&index);
        if let Some(kind) = failure {
            state.failures_fired.push(kind);
        }
        match failure {
            Some(io::ErrorKind::StorageFull) => {
                Err(io::Error::new(io::ErrorKind::StorageFull, "No space left on device"))
            }
            Some(kind) => Err(io::Error::new(kind, format!("injected {op:?} failure (op {index})"))),
            None => Ok(()),
        }
    }

    /// Refuses reads after the crash point, so a "dead" host learns nothing more.
    fn read_allowed(&self) -> io::Result<()> {
        if self.lock().crashed {
            return Err(io::Error::other("host crashed (simulated)"));
        }
        Ok(())
    }
}

/// An `Fs` whose mutations are numbered and can be crashed or failed.
pub struct FaultFs {
    inner: Arc<dyn Fs>,
    faults: FsFaults,
}

impl std::fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultFs").field("faults", &self.faults).finish_non_exhaustive()
    }
}

impl FaultFs {
    /// Wraps `inner`, controlled by `faults`.
    pub fn new(inner: Arc<dyn Fs>, faults: FsFaults) -> Self {
        Self { inner, faults }
    }
}

#[derive(Debug)]
struct FaultFile {
    inner: Box<dyn FsFile>,
    path: PathBuf,
    faults: FsFaults,
    /// The length before the first write since the last fsync, and what was written since.
    unsynced: Option<(u64, Vec<u8>)>,
}

impl FaultFile {
    /// Tells the shared state how many bytes of this file are unsynced now.
    fn note_unsynced(&self) {
        let bytes = self.unsynced.as_ref().map_or(0, |(_, b)| b.len() as u64);
        let mut state = self.faults.lock();
        if bytes == 0 {
            state.unsynced_bytes.remove(&self.path);
        } else {
            state.unsynced_bytes.insert(self.path.clone(), bytes);
        }
    }

    /// The power loss of a crash on this file's fsync: the unsynced bytes reach the disk with
    /// a run of zeros from inside their first line up to its newline (which survives, so the
    /// lines after it are complete). Done through the inner file and synced, so the crash
    /// that follows keeps it.
    fn leave_hole(&mut self, draw: u64) -> io::Result<bool> {
        let Some((start, mut bytes)) = self.unsynced.take() else { return Ok(false) };
        let Some(first_newline) = bytes.iter().position(|&b| b == b'\n').filter(|&nl| nl > 0) else {
            return Ok(false);
        };
        let from = (draw % first_newline as u64) as usize;
        bytes[from..first_newline].fill(0);
        self.inner.set_len(start)?;
        self.inner.write_all(&bytes)?;
        self.inner.sync()?;
        Ok(true)
    }
}

impl FsFile for FaultFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.faults.admit(FsOp::Write, &self.path)?;
        if self.unsynced.is_none() {
            self.unsynced = Some((self.inner.len()?, Vec::new()));
        }
        self.inner.write_all(buf)?;
        if let Some((_, bytes)) = self.unsynced.as_mut() {
            bytes.extend_from_slice(buf);
        }
        self.note_unsynced();
        Ok(())
    }

    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        self.faults.read_allowed()?;
        self.inner.read_all()
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.faults.read_allowed()?;
        self.inner.read_at(offset, buf)
    }

    fn sync(&mut self) -> io::Result<()> {
        let was_crashed = self.faults.crashed();
        if let Err(e) = self.faults.admit(FsOp::Sync, &self.path) {
            // The crash landed on this fsync: with a hole armed, the power loss persists the
            // unsynced write with a hole in it.
            let crashed_here = !was_crashed && self.faults.crashed();
            let hole = self.faults.lock().hole.filter(|_| crashed_here);
            if let Some(draw) = hole {
                if self.leave_hole(draw)? {
                    let mut state = self.faults.lock();
                    state.hole = None;
                    state.hole_left = Some(self.path.clone());
                }
            }
            return Err(e);
        }
        self.inner.sync()?;
        self.unsynced = None;
        self.note_unsynced();
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.faults.admit(FsOp::SetLen, &self.path)?;
        self.inner.set_len(len)?;
        // A truncate-back drops what was unsynced past `len` (or all of it).
        if let Some((start, bytes)) = self.unsynced.as_mut() {
            if len <= *start {
                self.unsynced = None;
            } else {
                bytes.truncate((len - *start) as usize);
            }
        }
        self.note_unsynced();
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        self.faults.read_allowed()?;
        self.inner.len()
    }
}

impl Fs for FaultFs {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>> {
        if options.create || options.create_new {
            self.faults.admit(FsOp::Create, path)?;
        } else {
            self.faults.read_allowed()?;
        }
        let inner = self.inner.open(path, options)?;
        Ok(Box::new(FaultFile { inner, path: path.to_path_buf(), faults: self.faults.clone(), unsynced: None }))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.faults.read_allowed()?;
        self.inner.read(path)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.faults.admit(FsOp::CreateDir, path)?;
        self.inner.create_dir(path)
    }

    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        self.faults.admit(FsOp::HardLink, link)?;
        self.inner.hard_link(original, link)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.faults.admit(FsOp::Rename, to)?;
        self.inner.rename(from, to)?;
        let mut state = self.faults.lock();
        if let Some(bytes) = state.unsynced_bytes.remove(from) {
            state.unsynced_bytes.insert(to.to_path_buf(), bytes);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.faults.admit(FsOp::Remove, path)?;
        self.inner.remove_file(path)?;
        self.faults.lock().unsynced_bytes.remove(path);
        Ok(())
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.faults.read_allowed()?;
        self.inner.read_dir(path)
    }

    fn metadata(&self, path: &Path) -> io::Result<Option<FsMetadata>> {
        self.faults.read_allowed()?;
        self.inner.metadata(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.faults.admit(FsOp::SyncDir, path)?;
        self.inner.sync_dir(path)
    }
}
