//! The fleet's database disk: files kept in memory and shared by every worker host, as a
//! database's storage is. The fleet world's shared delivery queue (a journal) lives here.
//!
//! It never loses a byte: the database does not crash in the fleet world (its faults are the
//! workers' — stops, takeovers). A turmoil host's filesystem cannot serve here, because its
//! file handles belong to the host that is running when they are used.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use faultline_runtime::seams::{Fs, FsFile, FsMetadata, OpenOptions};

type Bytes = Arc<Mutex<Vec<u8>>>;

#[derive(Debug, Default)]
struct Disk {
    files: BTreeMap<PathBuf, Bytes>,
    dirs: BTreeSet<PathBuf>,
}

/// A shared in-memory disk (clones see the same files).
#[derive(Debug, Clone, Default)]
pub(crate) struct DatabaseDisk(Arc<Mutex<Disk>>);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{}: no such file", path.display()))
}

impl Disk {
    fn parent_exists(&self, path: &Path) -> bool {
        path.parent().is_none_or(|p| p.as_os_str().is_empty() || p == Path::new("/") || self.dirs.contains(p))
    }
}

#[derive(Debug)]
struct DiskFile {
    bytes: Bytes,
    cursor: u64,
    append: bool,
}

impl FsFile for DiskFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut bytes = lock(&self.bytes);
        let at = if self.append { bytes.len() } else { self.cursor as usize };
        if bytes.len() < at + buf.len() {
            bytes.resize(at + buf.len(), 0);
        }
        bytes[at..at + buf.len()].copy_from_slice(buf);
        self.cursor = (at + buf.len()) as u64;
        Ok(())
    }

    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        Ok(lock(&self.bytes).clone())
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let bytes = lock(&self.bytes);
        let start = (offset as usize).min(bytes.len());
        let n = buf.len().min(bytes.len() - start);
        buf[..n].copy_from_slice(&bytes[start..start + n]);
        Ok(n)
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        lock(&self.bytes).resize(len as usize, 0);
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(lock(&self.bytes).len() as u64)
    }
}

impl Fs for DatabaseDisk {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>> {
        let mut disk = lock(&self.0);
        let bytes = match disk.files.get(path) {
            Some(_) if options.create_new => {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{}: exists", path.display())))
            }
            Some(bytes) => bytes.clone(),
            None if options.create || options.create_new => {
                if !disk.parent_exists(path) {
                    return Err(not_found(path));
                }
                let bytes = Bytes::default();
                disk.files.insert(path.to_owned(), bytes.clone());
                bytes
            }
            None => return Err(not_found(path)),
        };
        Ok(Box::new(DiskFile { bytes, cursor: 0, append: options.append }))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let bytes = lock(&self.0).files.get(path).cloned().ok_or_else(|| not_found(path))?;
        let read = lock(&bytes).clone();
        Ok(read)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        let mut disk = lock(&self.0);
        if !disk.parent_exists(path) {
            return Err(not_found(path));
        }
        if !disk.dirs.insert(path.to_owned()) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{}: exists", path.display())));
        }
        Ok(())
    }

    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        let mut disk = lock(&self.0);
        if disk.files.contains_key(link) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{}: exists", link.display())));
        }
        let bytes = disk.files.get(original).ok_or_else(|| not_found(original))?.clone();
        disk.files.insert(link.to_owned(), bytes);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = lock(&self.0);
        let bytes = disk.files.remove(from).ok_or_else(|| not_found(from))?;
        disk.files.insert(to.to_owned(), bytes);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        lock(&self.0).files.remove(path).map(|_| ()).ok_or_else(|| not_found(path))
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let disk = lock(&self.0);
        let files = disk.files.keys().chain(disk.dirs.iter());
        Ok(files.filter(|p| p.parent() == Some(path)).cloned().collect::<BTreeSet<_>>().into_iter().collect())
    }

    fn metadata(&self, path: &Path) -> io::Result<Option<FsMetadata>> {
        let disk = lock(&self.0);
        if disk.dirs.contains(path) || path == Path::new("/") {
            return Ok(Some(FsMetadata { len: 0, is_dir: true }));
        }
        Ok(disk.files.get(path).map(|bytes| FsMetadata { len: lock(bytes).len() as u64, is_dir: false }))
    }

    fn sync_dir(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
}
