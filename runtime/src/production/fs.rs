use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::seams::{Fs, FsFile, FsMetadata, OpenOptions};

/// Real files, with real `fsync` on files and directories.
///
/// Operations block the calling thread. Transcript appends are small and rare compared with
/// model latency, and `fsync` must finish before the runtime may acknowledge durability
/// anyway, so blocking here is the honest cost of the guarantee.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

#[derive(Debug)]
struct RealFile {
    file: fs::File,
    /// Only with the planted bug `userspace-buffer-on-sync`: the last write, still in this
    /// process's memory (a buffered writer flushed on the next write or on drop, never by
    /// `sync`). Always empty otherwise.
    held: Vec<u8>,
}

impl FsFile for RealFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if crate::testing::bugs::planted("userspace-buffer-on-sync") {
            self.file.write_all(&std::mem::take(&mut self.held))?;
            self.held = buf.to_vec();
            return Ok(());
        }
        self.file.write_all(buf)
    }

    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut reader = &self.file;
        let cursor = reader.stream_position()?;
        reader.seek(SeekFrom::Start(0))?;
        reader.read_to_end(&mut out)?;
        reader.seek(SeekFrom::Start(cursor))?;
        Ok(out)
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(&self.file, buf, offset)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
}

impl Drop for RealFile {
    fn drop(&mut self) {
        // The planted buffer reaches the kernel when the file is closed, as a buffered
        // writer's does; a SIGKILL never closes it.
        if !self.held.is_empty() {
            let _ = self.file.write_all(&self.held);
        }
    }
}

impl Fs for RealFs {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>> {
        let mut std_options = fs::OpenOptions::new();
        std_options
            .read(options.read)
            .write(options.write)
            .append(options.append)
            .create(options.create)
            .create_new(options.create_new);
        if let Some(mode) = options.mode {
            std_options.mode(mode);
        }
        Ok(Box::new(RealFile { file: std_options.open(path)?, held: Vec::new() }))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        fs::create_dir(path)
    }

    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        fs::hard_link(original, link)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let mut names = fs::read_dir(path)?.map(|entry| entry.map(|e| e.path())).collect::<io::Result<Vec<_>>>()?;
        names.sort();
        Ok(names)
    }

    fn metadata(&self, path: &Path) -> io::Result<Option<FsMetadata>> {
        match fs::metadata(path) {
            Ok(m) => Ok(Some(FsMetadata { len: if m.is_dir() { 0 } else { m.len() }, is_dir: m.is_dir() })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        // On Linux a directory opened read-only can be fsynced; that persists its entries.
        fs::File::open(path)?.sync_all()
    }
}
