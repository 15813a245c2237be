//! A real full disk for `--real`: the run's `data` directory on a small tmpfs of its own,
//! filled to its last page by a filler file when the plan's disk-full window opens, and
//! freed when it closes. tmpfs refuses as the simulator's `new-blocks` model does: a write
//! fills the file's last page, then fails with ENOSPC; fsync never fails. Mounting needs the
//! right to (root): where it is missing, a scenario with a disk-full window cannot run for
//! real, and says why.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The tmpfs's size, in KiB: room for a run's files many times over, small enough to fill at
/// once.
const TMPFS_KIB: u64 = 16 * 1024;

/// The variable that makes a missing right to mount a tmpfs a failure instead of a skip
/// (`.ci/run` sets it, so CI never passes without running the disk-full scenarios).
pub const REQUIRE_TMPFS_VAR: &str = "FAULTLINE_REQUIRE_TMPFS";

/// Why this machine cannot mount a tmpfs, if it cannot (probed once per process).
pub fn tmpfs_unavailable() -> Option<String> {
    static PROBE: OnceLock<Option<String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let dir = tempfile::tempdir().map_err(|e| e.to_string()).ok()?;
            match Tmpfs::mount(dir.path(), 64) {
                Ok(tmpfs) => {
                    drop(tmpfs);
                    None
                }
                Err(why) => Some(why),
            }
        })
        .clone()
}

/// A mounted tmpfs, unmounted on drop.
#[derive(Debug)]
pub struct Tmpfs {
    at: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `kib` KiB on the existing directory `at`.
    fn mount(at: &Path, kib: u64) -> Result<Self, String> {
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k,mode=0700"), "tmpfs"])
            .arg(at)
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !output.status.success() {
            return Err(format!("mount -t tmpfs: {}", String::from_utf8_lossy(&output.stderr).trim()));
        }
        Ok(Self { at: at.to_path_buf() })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.at).status();
    }
}

/// The run's disk: a tmpfs that a filler file can fill.
#[derive(Debug)]
pub struct FullableDisk {
    tmpfs: Tmpfs,
    filler: PathBuf,
    full: bool,
}

impl FullableDisk {
    /// Creates `data` and mounts the run's tmpfs on it.
    pub fn mount(data: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(data).map_err(|e| format!("{}: {e}", data.display()))?;
        let tmpfs = Tmpfs::mount(data, TMPFS_KIB)
            .map_err(|why| format!("the disk-full window needs a tmpfs of its own, and {why}"))?;
        Ok(Self { filler: data.join(".filler"), tmpfs, full: false })
    }

    /// Whether the filler holds every free page.
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// Takes every free page: writes the filler until the tmpfs refuses, in ever smaller
    /// pieces, down to one byte.
    pub fn fill(&mut self) -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&self.filler)?;
        let mut piece = vec![0u8; 1 << 20];
        while !piece.is_empty() {
            match file.write_all(&piece) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => piece.truncate(piece.len() / 2),
                Err(e) => return Err(e),
            }
        }
        self.full = true;
        Ok(())
    }

    /// Frees the filler's pages: space is back.
    pub fn free(&mut self) -> std::io::Result<()> {
        std::fs::remove_file(&self.filler)?;
        self.full = false;
        Ok(())
    }

    /// Copies what the tmpfs holds (the filler aside) to `into`, before it is unmounted.
    pub fn keep_in(&self, into: &Path) -> std::io::Result<()> {
        copy_tree(&self.tmpfs.at, into, &self.filler)
    }
}

fn copy_tree(from: &Path, to: &Path, skip: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let path = entry?.path();
        if path == skip {
            continue;
        }
        let target = to.join(path.file_name().unwrap_or_default());
        if path.is_dir() {
            copy_tree(&path, &target, skip)?;
        } else {
            std::fs::copy(&path, &target)?;
        }
    }
    Ok(())
}
