use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use faultline_runtime::{seams::Fs, seams::FsFile, seams::FsMetadata, seams::OpenOptions};
use turmoil::fs::shim::std::fs as sim_fs;

/// The current turmoil host's simulated filesystem (`unstable-fs`).
///
/// Crash model (turmoil's): unsynced writes are lost or torn at the configured block size,
/// and names whose parent directory was not synced are forgotten.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimFs;

#[derive(Debug)]
struct SimFile {
    file: sim_fs::File,
    path: PathBuf,
}

/// turmoil reports several errors as `ErrorKind::Other` with a POSIX message; give them the
/// kind the production filesystem would, so callers can branch the same way in both worlds.
fn normalise(error: io::Error) -> io::Error {
    if error.kind() != io::ErrorKind::Other {
        return error;
    }
    let message = error.to_string();
    let kind = match message.as_str() {
        "No space left on device" => io::ErrorKind::StorageFull,
        "File exists" => io::ErrorKind::AlreadyExists,
        "No such file or directory" => io::ErrorKind::NotFound,
        _ => return error,
    };
    io::Error::new(kind, message)
}

impl FsFile for SimFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf).map_err(normalise)
    }

    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        sim_fs::read(&self.path).map_err(normalise)
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(&self.file, buf, offset).map_err(normalise)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_all().map_err(normalise)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len).map_err(normalise)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata().map_err(normalise)?.len())
    }
}

impl Fs for SimFs {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>> {
        let mut sim_options = sim_fs::OpenOptions::new();
        sim_options
            .read(options.read)
            .write(options.write)
            .append(options.append)
            .create(options.create)
            .create_new(options.create_new);
        if let Some(mode) = options.mode {
            sim_options.mode(mode);
        }
        let file = sim_options.open(path).map_err(normalise)?;
        Ok(Box::new(SimFile { file, path: path.to_path_buf() }))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        sim_fs::read(path).map_err(normalise)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        sim_fs::create_dir(path).map_err(normalise)
    }

    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        sim_fs::hard_link(original, link).map_err(normalise)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        sim_fs::rename(from, to).map_err(normalise)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        sim_fs::remove_file(path).map_err(normalise)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let mut names = sim_fs::read_dir(path)
            .map_err(normalise)?
            .map(|entry| entry.map(|e| e.path()).map_err(normalise))
            .collect::<io::Result<Vec<_>>>()?;
        names.sort();
        Ok(names)
    }

    fn metadata(&self, path: &Path) -> io::Result<Option<FsMetadata>> {
        match sim_fs::metadata(path) {
            Ok(m) => Ok(Some(FsMetadata { len: if m.is_dir() { 0 } else { m.len() }, is_dir: m.is_dir() })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(normalise(e)),
        }
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        sim_fs::sync_dir(path).map_err(normalise)
    }
}
