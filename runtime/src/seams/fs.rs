use std::io;
use std::path::{Path, PathBuf};

/// How to open a file. A plain struct rather than a builder so a fault-injecting wrapper can
/// inspect and forward it unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenOptions {
    /// Open for reading.
    pub read: bool,
    /// Open for writing at the cursor.
    pub write: bool,
    /// Every write goes to the current end of the file.
    pub append: bool,
    /// Create the file if it does not exist.
    pub create: bool,
    /// Create the file, failing with `AlreadyExists` if it exists (temp files, lock files).
    pub create_new: bool,
    /// Unix permission bits for a newly created file (e.g. `0o600` for transcripts).
    pub mode: Option<u32>,
}

impl OpenOptions {
    /// Read-only.
    pub fn read() -> Self {
        Self { read: true, ..Self::default() }
    }

    /// Append to an existing file (also readable, for length checks).
    pub fn append() -> Self {
        Self { read: true, append: true, ..Self::default() }
    }

    /// Create a brand-new private file (mode 0600) for writing; `AlreadyExists` if present.
    pub fn create_new_private() -> Self {
        Self { write: true, create_new: true, mode: Some(0o600), ..Self::default() }
    }
}

/// What the runtime needs to know about a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsMetadata {
    /// Length in bytes (0 for directories).
    pub len: u64,
    /// Whether the path names a directory.
    pub is_dir: bool,
}

/// An open file.
///
/// Durability contract: bytes written are *accepted* when `write_all` returns and *durable*
/// only after a later `sync` returns `Ok`. A crash may keep any prefix of unsynced writes
/// (torn at block granularity), or none of them. `set_len` is likewise durable only after
/// `sync`.
pub trait FsFile: Send + std::fmt::Debug {
    /// Writes all of `buf` at the cursor (at the end for append-mode files).
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;

    /// Reads the whole file from offset 0, regardless of the cursor.
    fn read_all(&mut self) -> io::Result<Vec<u8>>;

    /// Reads up to `buf.len()` bytes at `offset`, regardless of the cursor; returns how many
    /// (0 only at the end of the file). How a reader streams a file larger than it may hold.
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;

    /// `fsync`: makes every write and `set_len` so far on this file durable. It does **not**
    /// make the file's *name* durable; that takes [`Fs::sync_dir`] on the parent.
    fn sync(&mut self) -> io::Result<()>;

    /// Truncates or extends the file to `len` bytes (durable after `sync`).
    fn set_len(&mut self, len: u64) -> io::Result<()>;

    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;

    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
}

/// The filesystem, as the runtime is allowed to see it.
///
/// Durability contract (POSIX, and turmoil's crash model):
/// - File *contents* become durable through [`FsFile::sync`].
/// - A *name* (created file, created directory, hard link, rename, removal) becomes durable
///   only when the parent directory is synced with [`Fs::sync_dir`]. A crash before that may
///   forget the name even if the file's data was synced.
/// - `hard_link` never overwrites: an existing target is `AlreadyExists`. This is how a
///   transcript is published exactly once.
/// - Errors carry a meaningful `io::ErrorKind` (`NotFound`, `AlreadyExists`, `StorageFull`,
///   ...) in both worlds, so callers can branch on them.
pub trait Fs: Send + Sync {
    /// Opens (or creates) a file.
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>>;

    /// Reads a whole file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;

    /// Creates one directory; its parent must exist. Durable after `sync_dir(parent)`.
    fn create_dir(&self, path: &Path) -> io::Result<()>;

    /// Creates `link` as a second name for `original`; `AlreadyExists` if `link` exists.
    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()>;

    /// Atomically renames `from` to `to`, replacing `to` if present.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Removes a file name. Durable after `sync_dir(parent)`.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Lists the names in a directory, sorted (deterministic iteration).
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>>;

    /// Metadata of a path; `Ok(None)` when nothing is there.
    fn metadata(&self, path: &Path) -> io::Result<Option<FsMetadata>>;

    /// `fsync` of a directory: makes the names created, linked, renamed or removed in it
    /// durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
}
