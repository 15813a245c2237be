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
//!   write and not others would;
//! - **run out of space** ([`DiskSpace`], shared by every incarnation of a host: a restart
//!   frees nothing): while the disk is full, writes and fsyncs fail with ENOSPC the way the
//!   scenario's [`DiskFullRefuses`] says; an ENOSPC the real disk underneath returns is counted
//!   the same way;
//! - **tear the write mid-line**: when the crash lands on an fsync, the blocks of the write
//!   since the last fsync reach the disk up to the last block boundary that falls inside a
//!   line, and nothing after it: the file ends in a torn line that recovery must truncate.
//!
//! Reads are not numbered: a crash before a read leaves the same disk as a crash after the
//! previous mutation.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use faultline_runtime::{seams::Fs, seams::FsFile, seams::FsMetadata, seams::OpenOptions};

use crate::scenario::DiskFullRefuses;

/// A filesystem block, in bytes: what a file grows by (tmpfs's page).
pub const DISK_BLOCK_BYTES: u64 = 4096;

/// ENOSPC, as the OS reports it (the same text in both worlds).
fn no_space() -> io::Error {
    io::Error::from_raw_os_error(nix::errno::Errno::ENOSPC as i32)
}

/// Whether the disk is full, shared by every incarnation of a host and toggled by the
/// driver; counts what it refused.
#[derive(Debug, Clone, Default)]
pub struct DiskSpace {
    state: Arc<Mutex<SpaceState>>,
}

#[derive(Debug, Default)]
struct SpaceState {
    full: Option<DiskFullRefuses>,
    refusals: u64,
}

impl DiskSpace {
    /// Space left: none, from now on, refusing as `refuses` says.
    pub fn fill(&self, refuses: DiskFullRefuses) {
        self.lock().full = Some(refuses);
    }

    /// Space is back.
    pub fn free(&self) {
        self.lock().full = None;
    }

    /// How the disk refuses now, if it is full.
    pub fn full(&self) -> Option<DiskFullRefuses> {
        self.lock().full
    }

    /// Writes and fsyncs refused for want of space so far (the evidence coverage counts).
    pub fn refusals(&self) -> u64 {
        self.lock().refusals
    }

    fn refused(&self) -> io::Error {
        self.lock().refusals += 1;
        no_space()
    }

    fn lock(&self) -> MutexGuard<'_, SpaceState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

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
    /// Holes are whole disk sectors of this many bytes (aligned), not a line's run.
    hole_sectors: Option<u64>,
    /// The file a hole was left in.
    hole_left: Option<PathBuf>,
    /// Tear the unsynced write at this block size when the crash lands on its fsync.
    tear: Option<u64>,
    /// The write a tear was left in: the file, and the bytes kept of how many.
    torn: Option<(PathBuf, u64, u64)>,
    /// Bytes written but not yet fsynced, per file (what a crash now may tear or lose).
    unsynced_bytes: BTreeMap<PathBuf, u64>,
    /// The injected failures that were returned, in order (coverage counts these, not the plan).
    failures_fired: Vec<io::ErrorKind>,
    /// Called when the planned crash-before-op is reached (a real host kills itself there).
    on_crash: Option<CrashHook>,
    /// Told of every successful fsync, link, rename and removal.
    observer: Option<Observer>,
    /// The disk's space, when a window may fill it.
    space: Option<DiskSpace>,
}

/// What the filesystem made durable or moved, told to an observer as it happens (the disk
/// witness of `world/witness.rs`): evidence of durability that does not come from the runtime.
#[derive(Debug, Clone, Copy)]
pub enum FsEvent<'a> {
    /// An fsync succeeded: the file is now durably `len` bytes long, the same as before from
    /// byte 0 to `from`, then `bytes` (zeros up to `len` if `bytes` ends short of it).
    Synced {
        /// The file.
        path: &'a Path,
        /// Where the bytes written since the previous fsync start.
        from: u64,
        /// Those bytes.
        bytes: &'a [u8],
        /// The file's length.
        len: u64,
    },
    /// `link` now names the file `original` names.
    Linked {
        /// The existing name.
        original: &'a Path,
        /// The new one.
        link: &'a Path,
    },
    /// `from` was renamed to `to`.
    Renamed {
        /// The old name.
        from: &'a Path,
        /// The new one.
        to: &'a Path,
    },
    /// `path` was removed.
    Removed {
        /// The file.
        path: &'a Path,
    },
    /// The directory `path` was synced: the names in it are durable now.
    DirSynced {
        /// The directory.
        path: &'a Path,
    },
}

/// An observer of [`FsEvent`]s.
pub type FsObserver = Arc<dyn Fn(FsEvent<'_>) + Send + Sync>;

#[derive(Clone)]
struct Observer(FsObserver);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
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

    /// Puts this incarnation on `space` (a disk that may fill up).
    pub fn on_disk(&self, space: &DiskSpace) -> &Self {
        self.lock().space = Some(space.clone());
        self
    }

    /// The disk's space, when it may fill.
    fn space(&self) -> Option<DiskSpace> {
        self.lock().space.clone()
    }

    /// Tells `observer` of every successful fsync, link, rename and removal from now on.
    pub fn observe(&self, observer: FsObserver) -> &Self {
        self.lock().observer = Some(Observer(observer));
        self
    }

    /// Tells the observer, if there is one, of `event` (outside the lock).
    fn tell(&self, event: FsEvent<'_>) {
        let observer = self.lock().observer.clone();
        if let Some(Observer(observer)) = observer {
            observer(event);
        }
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

    /// Arms the mid-line tear at `block_size` bytes.
    pub fn tear_on_crash(&self, block_size: u64) -> &Self {
        assert!(block_size > 0, "a block has bytes");
        self.lock().tear = Some(block_size);
        self
    }

    /// The write a crash tore mid-line, if one was: the file, the bytes that reached the disk
    /// and the bytes written.
    pub fn torn(&self) -> Option<(PathBuf, u64, u64)> {
        self.lock().torn.clone()
    }

    /// Makes the hole whole aligned sectors of `sector` bytes, as a power loss loses them (for
    /// a file whose bytes have no lines to follow: zstd frames).
    pub fn holes_in_sectors(&self, sector: u64) -> &Self {
        assert!(sector > 0, "a sector has bytes");
        self.lock().hole_sectors = Some(sector);
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
    /// lines after it are complete), or, with sectors set, one whole aligned sector of zeros.
    /// Done through the inner file and synced, so the crash that follows keeps it.
    fn leave_hole(&mut self, draw: u64) -> io::Result<bool> {
        let sectors = self.faults.lock().hole_sectors;
        let Some((start, mut bytes)) = self.unsynced.take() else { return Ok(false) };
        let (from, to) = match sectors {
            // One whole aligned sector inside the write is lost (or, when none fits, everything
            // from the first sector boundary, or the whole write, to its end).
            Some(sector) => {
                let end = start + bytes.len() as u64;
                let first = start.div_ceil(sector) * sector;
                let whole: Vec<u64> = (0..).map(|k| first + k * sector).take_while(|s| s + sector <= end).collect();
                match whole.as_slice() {
                    [] if first < end => ((first - start) as usize, bytes.len()),
                    [] => (0, bytes.len()),
                    all => {
                        let at = all[(draw % all.len() as u64) as usize];
                        ((at - start) as usize, (at - start + sector) as usize)
                    }
                }
            }
            None => {
                let Some(first_newline) = bytes.iter().position(|&b| b == b'\n').filter(|&nl| nl > 0) else {
                    return Ok(false);
                };
                ((draw % first_newline as u64) as usize, first_newline)
            }
        };
        if from >= to {
            return Ok(false);
        }
        bytes[from..to].fill(0);
        self.inner.set_len(start)?;
        self.inner.write_all(&bytes)?;
        self.inner.sync()?;
        Ok(true)
    }
}

impl FaultFile {
    /// The tear of a crash on this file's fsync: the unsynced write's blocks reach the disk up
    /// to the last block boundary (absolute, every `block` bytes) that falls inside a line, so
    /// the file ends in a torn line. Done through the inner file and synced, so the crash that
    /// follows keeps it. Returns the bytes kept and written, or `None` when no boundary falls
    /// inside a line (nothing to tear: the crash then loses the write whole).
    fn leave_tear(&mut self, block: u64) -> io::Result<Option<(u64, u64)>> {
        let Some((start, bytes)) = self.unsynced.take() else { return Ok(None) };
        let end = start + bytes.len() as u64;
        let mid_line = |cut: u64| cut > start && cut < end && bytes[(cut - start - 1) as usize] != b'\n';
        let last = (end - 1) / block * block;
        let Some(cut) = (0..=last / block).rev().map(|k| k * block).find(|&cut| mid_line(cut)) else {
            return Ok(None);
        };
        self.inner.set_len(start)?;
        self.inner.write_all(&bytes[..(cut - start) as usize])?;
        self.inner.sync()?;
        Ok(Some((cut - start, bytes.len() as u64)))
    }
}

impl FsFile for FaultFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.faults.admit(FsOp::Write, &self.path)?;
        if self.unsynced.is_none() {
            self.unsynced = Some((self.inner.len()?, Vec::new()));
        }
        let space = self.faults.space();
        // A full disk takes what fits the file's last block (a short write), then refuses.
        let (fits, refusal) = match space.as_ref().and_then(DiskSpace::full) {
            Some(DiskFullRefuses::NewBlocks) => {
                let len = self.inner.len()?;
                let room = (len.div_ceil(DISK_BLOCK_BYTES) * DISK_BLOCK_BYTES - len) as usize;
                (buf.len().min(room), (buf.len() > room).then(|| space.as_ref().map(DiskSpace::refused)))
            }
            Some(DiskFullRefuses::Everything) => (0, Some(space.as_ref().map(DiskSpace::refused))),
            Some(DiskFullRefuses::Fsync) | None => (buf.len(), None),
        };
        let written = self.inner.write_all(&buf[..fits]);
        if let Some((_, bytes)) = self.unsynced.as_mut() {
            // What a failed write put on the page cache is unsynced as much as the rest.
            bytes.extend_from_slice(&buf[..if written.is_ok() { fits } else { 0 }]);
        }
        self.note_unsynced();
        match (written, refusal) {
            (Err(e), _) => {
                // The real disk underneath ran out of space: the same refusal, counted.
                if e.kind() == io::ErrorKind::StorageFull {
                    if let Some(space) = &space {
                        space.lock().refusals += 1;
                    }
                }
                Err(e)
            }
            (Ok(()), Some(refused)) => Err(refused.unwrap_or_else(no_space)),
            (Ok(()), None) => Ok(()),
        }
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
            // unsynced write with a hole in it; with a tear armed, its blocks up to one inside
            // a line.
            let crashed_here = !was_crashed && self.faults.crashed();
            let (hole, tear) = {
                let state = self.faults.lock();
                (state.hole.filter(|_| crashed_here), state.tear.filter(|_| crashed_here))
            };
            if let Some(draw) = hole {
                if self.leave_hole(draw)? {
                    let mut state = self.faults.lock();
                    state.hole = None;
                    state.hole_left = Some(self.path.clone());
                }
            } else if let Some(block) = tear {
                if let Some((kept, written)) = self.leave_tear(block)? {
                    let mut state = self.faults.lock();
                    state.tear = None;
                    state.torn = Some((self.path.clone(), kept, written));
                }
            }
            return Err(e);
        }
        let dirty = self.unsynced.as_ref().is_some_and(|(_, bytes)| !bytes.is_empty());
        if let Some(space) =
            self.faults.space().filter(|space| dirty && space.full().is_some_and(|r| r != DiskFullRefuses::NewBlocks))
        {
            return Err(space.refused());
        }
        self.inner.sync()?;
        let len = self.inner.len()?;
        let (from, bytes) = self.unsynced.take().unwrap_or((len, Vec::new()));
        self.faults.tell(FsEvent::Synced { path: &self.path, from: from.min(len), bytes: &bytes, len });
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
        self.inner.hard_link(original, link)?;
        self.faults.tell(FsEvent::Linked { original, link });
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.faults.admit(FsOp::Rename, to)?;
        self.inner.rename(from, to)?;
        {
            let mut state = self.faults.lock();
            if let Some(bytes) = state.unsynced_bytes.remove(from) {
                state.unsynced_bytes.insert(to.to_path_buf(), bytes);
            }
        }
        self.faults.tell(FsEvent::Renamed { from, to });
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.faults.admit(FsOp::Remove, path)?;
        self.inner.remove_file(path)?;
        self.faults.lock().unsynced_bytes.remove(path);
        self.faults.tell(FsEvent::Removed { path });
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
        self.inner.sync_dir(path)?;
        self.faults.tell(FsEvent::DirSynced { path });
        Ok(())
    }
}
