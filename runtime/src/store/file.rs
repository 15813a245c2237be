//! The file backends (JSONL and JSONL+zstd) on the `Fs` seam (FAILURE-JSONL-ATOMICITY).
//!
//! Layout: `ROOT/<id>/session.jsonl` (or `.jsonl.zst`) and `ROOT/<id>/owner.<token>.json`.

use std::io;
use std::path::{Path, PathBuf};

use super::format::{BatchEncoder, Encoded, SealedBatch, Sealer};
use super::owner::{self, CurrentOwner};
use super::repair::{never_claimed, NoEvidence, OutcomeEvidence};
use super::scan::FileSource;
use super::writer::{LogMedium, SessionWriter};
use super::{Format, Inspection, Keep, Loaded, Opened, Repair, SessionId, SessionLog, Store, Takeover};
use crate::event::{Record, SessionHeader};
use crate::seams::{EntropyExt, FsFile, Liveness, OpenOptions, Seams};
use crate::{Error, Result};
use std::sync::Arc;

fn io_err(what: &str, path: &Path, e: io::Error) -> Error {
    Error::io(format!("{what} {}", path.display()), e)
}

/// Creates `path` and every missing ancestor, syncing each new directory's parent so the
/// whole chain of names is durable.
pub(crate) fn create_dir_all_durable(seams: &Seams, path: &Path) -> Result<()> {
    if seams.fs.metadata(path).map_err(|e| io_err("inspecting", path, e))?.is_some() {
        return Ok(());
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("/"));
    create_dir_all_durable(seams, parent)?;
    match seams.fs.create_dir(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(io_err("creating directory", path, e)),
    }
    seams.fs.sync_dir(parent).map_err(|e| io_err("syncing directory", parent, e))
}

/// Publishes `bytes` at `path` exactly once: `<path>.<random>.tmp` (create_new, 0600) →
/// write → fsync → `hard_link` (never overwrites: `AlreadyExists` is an error) → fsync the
/// directory → remove the temp. A crash at any point leaves either no `path` or a complete one.
pub(crate) fn materialise(seams: &Seams, path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().expect("session files live in a directory");
    let file_name = path.file_name().and_then(|n| n.to_str()).expect("UTF-8 file name");
    let temp = dir.join(format!("{file_name}.{}.tmp", seams.entropy.hex_id(16)));
    let mut file = seams.fs.open(&temp, OpenOptions::create_new_private()).map_err(|e| io_err("creating", &temp, e))?;
    let written = file.write_all(bytes).and_then(|()| file.sync());
    drop(file);
    if let Err(e) = written {
        let _ = seams.fs.remove_file(&temp);
        return Err(io_err("writing", &temp, e));
    }
    if let Err(e) = seams.fs.hard_link(&temp, path) {
        let _ = seams.fs.remove_file(&temp);
        return Err(io_err("publishing", path, e));
    }
    if !crate::testing::bugs::planted("no-sync-dir-after-link") {
        seams.fs.sync_dir(dir).map_err(|e| io_err("syncing directory", dir, e))?;
    }
    // The temp name is garbage now. Its removal need not be durable: a leftover temp after a
    // crash is ignored by every reader.
    seams.fs.remove_file(&temp).map_err(|e| io_err("removing", &temp, e))
}

/// Truncates `path` to `len` and fsyncs it.
pub(crate) fn truncate_durably(file: &mut dyn FsFile, len: u64) -> io::Result<()> {
    file.set_len(len)?;
    file.sync()
}

/// Appends `encoded`, each write unit written and fsynced on its own (so a power loss can
/// damage only the last unit); on failure truncates back to `prev_len` and fsyncs, reporting
/// both errors if the rollback fails too.
pub(crate) fn append_durably(file: &mut dyn FsFile, prev_len: u64, encoded: &Encoded<'_>) -> Result<()> {
    assert_eq!(encoded.unit_ends.last().copied().unwrap_or(0), encoded.bytes.len(), "units cover the bytes");
    let mut start = 0;
    let write = encoded.unit_ends.iter().try_for_each(|&end| {
        let unit = &encoded.bytes[start..end];
        start = end;
        file.write_all(unit).and_then(|()| file.sync())
    });
    match write {
        Ok(()) => Ok(()),
        Err(write) if crate::testing::bugs::planted("no-truncate-back") => {
            Err(Error::AppendFailed { write, rollback: None })
        }
        Err(write) => {
            let rollback = truncate_durably(file, prev_len).err();
            Err(Error::AppendFailed { write, rollback })
        }
    }
}

/// Inspects a session file on its own (any directory, e.g. a copy handed over by a user).
pub fn inspect_file(seams: &Seams, path: &Path) -> Result<Inspection> {
    inspect_file_with(seams, path, &NoEvidence)
}

/// [`inspect_file`], consulting the delivery queue about started calls.
pub fn inspect_file_with(seams: &Seams, path: &Path, evidence: &dyn OutcomeEvidence) -> Result<Inspection> {
    inspect_file_keeping(seams, path, evidence, Keep::All)
}

/// [`inspect_file_with`], handing the committed records to `keep` as they are read: the file
/// is streamed through a bounded buffer, so a reader that keeps nothing (`Keep::Visit`) holds
/// one chunk and one turn of a session of any size.
pub fn inspect_file_keeping(
    seams: &Seams,
    path: &Path,
    evidence: &dyn OutcomeEvidence,
    keep: Keep<'_>,
) -> Result<Inspection> {
    let format = Format::of_path(path).ok_or_else(|| {
        Error::io(
            format!("inspecting {}", path.display()),
            io::Error::other("not a session.jsonl or session.jsonl.zst file"),
        )
    })?;
    let file = match seams.fs.open(path, OpenOptions::read()) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::SessionNotFound(path.display().to_string()))
        }
        Err(e) => return Err(io_err("reading", path, e)),
    };
    let len = file.len().map_err(|e| io_err("measuring", path, e))?;
    let mut source = FileSource { file, len };
    let scan = format.scan_from(&mut source, keep, seams.compute.as_ref()).map_err(|e| io_err("reading", path, e))?;
    // A bare file name (`session.jsonl`) has an empty parent: its directory is the current one.
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let owner = owner::current(seams, dir)?.and_then(|c| c.owner).flatten();
    Ok(Inspection::from_scan(scan, owner, evidence))
}

/// Commits the repair `inspection` describes to the file at `path`: truncate the torn tail
/// and fsync, then append the salvaged records and the closers as one batch (one zstd frame)
/// and fsync. Corrupt and unsupported files are refused untouched.
pub fn repair_file(seams: &Seams, path: &Path, inspection: &Inspection) -> Result<Option<Repair>> {
    let id = path.display().to_string();
    inspection.refuse_unusable(&id)?;
    if !inspection.needs_repair() {
        return Ok(None);
    }
    let format = Format::of_path(path).expect("inspected files have a known format");
    let mut file = seams.fs.open(path, OpenOptions::append()).map_err(|e| io_err("opening", path, e))?;
    let len = file.len().map_err(|e| io_err("measuring", path, e))?;
    let committed_len = len - inspection.torn_bytes;
    if inspection.torn_bytes > 0 {
        truncate_durably(file.as_mut(), committed_len).map_err(|e| io_err("truncating torn tail of", path, e))?;
    }
    let tail: Vec<Record> = inspection.recovered.iter().chain(&inspection.closers).cloned().collect();
    if !tail.is_empty() && seams.probe.hit(crate::seams::CrashPoint::DuringRepair) {
        return Err(Error::io("repairing", io::Error::other("host crashed (simulated) during repair")));
    }
    if !tail.is_empty() {
        let mut encoder = BatchEncoder::new(format);
        append_durably(file.as_mut(), committed_len, &encoder.encode(&tail)?)?;
    }
    Ok(Some(Repair {
        truncated_bytes: inspection.torn_bytes,
        dropped_records: inspection.dropped_records,
        truncated_from_seq: inspection.torn_from_seq,
        recovered: inspection.recovered.clone(),
        closers: inspection.closers.clone(),
    }))
}

/// Sessions as directories of files on the `Fs` seam.
#[derive(Clone)]
pub struct FileStore {
    seams: Seams,
    root: PathBuf,
    format: Format,
    evidence: Arc<dyn OutcomeEvidence>,
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStore").field("root", &self.root).field("format", &self.format).finish_non_exhaustive()
    }
}

impl FileStore {
    /// A store of `format` sessions under `root` (created on first use).
    pub fn new(seams: Seams, root: impl Into<PathBuf>, format: Format) -> Self {
        Self { seams, root: root.into(), format, evidence: Arc::new(NoEvidence) }
    }

    /// Crash repair consults `evidence` (the delivery queue) before calling a started call's
    /// outcome unknown.
    pub fn with_evidence(mut self, evidence: Arc<dyn OutcomeEvidence>) -> Self {
        self.evidence = evidence;
        self
    }

    /// The session file of `id`.
    pub fn session_path(&self, id: &SessionId) -> PathBuf {
        self.root.join(id.as_str()).join(self.format.file_name())
    }

    fn require_session(&self, id: &SessionId) -> Result<PathBuf> {
        let path = self.session_path(id);
        match self.seams.fs.metadata(&path).map_err(|e| io_err("inspecting", &path, e))? {
            Some(_) => Ok(path),
            None => Err(Error::SessionNotFound(id.to_string())),
        }
    }

    fn loaded(&self, id: &SessionId, inspection: Inspection, repair: Option<Repair>) -> Result<Loaded> {
        inspection.refuse_unusable(id.as_str())?;
        let header = inspection.header.clone().expect("usable scans have a header");
        let mut records = inspection.records;
        if let Some(repair) = &repair {
            records.extend(repair.recovered.iter().cloned());
            records.extend(repair.closers.iter().cloned());
        }
        Ok(Loaded { header, records, repair })
    }

    fn medium(&self, path: &Path) -> Result<Box<dyn LogMedium>> {
        let file = self.seams.fs.open(path, OpenOptions::append()).map_err(|e| io_err("opening", path, e))?;
        let len = file.len().map_err(|e| io_err("measuring", path, e))?;
        Ok(Box::new(FileMedium {
            seams: self.seams.clone(),
            dir: path.parent().expect("session dir").to_path_buf(),
            file,
            len,
            format: self.format,
            encoder: BatchEncoder::new(self.format),
        }))
    }

    /// Takes ownership, commits crash repair and returns the writer, continuing from the
    /// validator of the scan (the session is read once) with the records `keep` kept.
    fn open_keeping(&self, id: &SessionId, takeover: Takeover, keep: Keep<'_>) -> Result<Opened> {
        let path = self.require_session(id)?;
        let dir = path.parent().expect("session dir").to_path_buf();
        let token = owner::acquire(&self.seams, &dir, id.as_str(), takeover)?;
        let opened = (|| {
            let mut inspection = inspect_file_keeping(&self.seams, &path, self.evidence.as_ref(), keep)?;
            let repair = repair_file(&self.seams, &path, &inspection)?;
            if let Some(repair) = &repair {
                for execution in never_claimed(id.as_str(), &repair.closers) {
                    self.evidence.cancel_never_claimed(&execution);
                }
            }
            let validator = inspection.validator.take();
            let loaded = self.loaded(id, inspection, repair)?;
            let validator = validator.expect("usable inspections carry their validator");
            let log = SessionWriter::continuing(id, token, validator, self.medium(&path)?);
            Ok(Opened { log, loaded })
        })();
        if opened.is_err() {
            // Never keep a session locked because it could not be opened.
            let _ = owner::release(&self.seams, &dir, id.as_str(), token);
        }
        opened
    }
}

impl Store for FileStore {
    fn create(&self, id: &SessionId, created_at: u64) -> Result<Box<dyn SessionLog>> {
        if self.format == Format::Zstd && !cfg!(feature = "zstd") {
            return Err(Error::Unsupported { id: id.to_string(), reason: super::scan::ZSTD_NOT_BUILT.into() });
        }
        create_dir_all_durable(&self.seams, &self.root)?;
        let dir = self.root.join(id.as_str());
        let path = self.session_path(id);
        match self.seams.fs.create_dir(&dir) {
            Ok(()) => self.seams.fs.sync_dir(&self.root).map_err(|e| io_err("syncing directory", &self.root, e))?,
            // A create that crashed before publishing its session file leaves an empty
            // directory behind; it may be reused. A published session may not.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if self.seams.fs.metadata(&path).map_err(|e| io_err("inspecting", &path, e))?.is_some() {
                    return Err(Error::SessionExists(id.to_string()));
                }
            }
            Err(e) => return Err(io_err("creating directory", &dir, e)),
        }
        let token = owner::acquire(&self.seams, &dir, id.as_str(), Takeover::IfDead)?;
        let header = SessionHeader::new(id.as_str(), created_at);
        match materialise(&self.seams, &path, &self.format.encode_header(&header)) {
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::AlreadyExists => {
                return Err(Error::SessionExists(id.to_string()))
            }
            other => other?,
        }
        Ok(SessionWriter::continuing(id, token, crate::event::Validator::new(), self.medium(&path)?))
    }

    fn open(&self, id: &SessionId, takeover: Takeover) -> Result<Opened> {
        self.open_keeping(id, takeover, Keep::All)
    }

    fn open_conversation(&self, id: &SessionId, takeover: Takeover) -> Result<Opened> {
        self.open_keeping(id, takeover, Keep::Conversation)
    }

    fn inspect(&self, id: &SessionId) -> Result<Inspection> {
        inspect_file_with(&self.seams, &self.require_session(id)?, self.evidence.as_ref())
    }

    fn load(&self, id: &SessionId) -> Result<Loaded> {
        let path = self.require_session(id)?;
        let dir = path.parent().expect("session dir").to_path_buf();
        let inspection = inspect_file_with(&self.seams, &path, self.evidence.as_ref())?;
        if !inspection.needs_repair() {
            return self.loaded(id, inspection, None);
        }
        inspection.refuse_unusable(id.as_str())?;
        if let Some(CurrentOwner { owner: Some(Some(holder)), .. }) = owner::current(&self.seams, &dir)? {
            if self.seams.process.liveness(&holder) == Liveness::Alive {
                return Err(Error::SessionLive { id: id.to_string(), holder: holder.to_string() });
            }
        }
        let Opened { log, loaded } = self.open(id, Takeover::IfDead)?;
        log.close()?;
        Ok(loaded)
    }

    fn list(&self) -> Result<Vec<SessionId>> {
        let entries = match self.seams.fs.read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("listing", &self.root, e)),
        };
        let mut ids = Vec::new();
        for entry in entries {
            let Some(id) = entry.file_name().and_then(|n| n.to_str()).and_then(|n| SessionId::new(n).ok()) else {
                continue;
            };
            if self.seams.fs.metadata(&self.session_path(&id)).map_err(|e| io_err("inspecting", &entry, e))?.is_some() {
                ids.push(id);
            }
        }
        Ok(ids)
    }
}

/// The medium of one file session: the open file and where its durable prefix ends.
#[derive(Debug)]
struct FileMedium {
    seams: Seams,
    dir: PathBuf,
    file: Box<dyn FsFile>,
    /// Length of the durable prefix: where a failed append truncates back to.
    len: u64,
    format: Format,
    encoder: BatchEncoder,
}

impl LogMedium for FileMedium {
    fn write_fenced(&mut self, id: &SessionId, token: u64, batch: &[Record]) -> Result<()> {
        owner::check_fence(&self.seams, &self.dir, id.as_str(), token)?;
        let encoded = self.encoder.encode(batch)?;
        append_durably(self.file.as_mut(), self.len, &encoded)?;
        self.len += encoded.bytes.len() as u64;
        Ok(())
    }

    fn write_fenced_accepted(
        &mut self,
        id: &SessionId,
        token: u64,
        batch: &[Arc<super::format::EncodedRecord>],
    ) -> Result<()> {
        owner::check_fence(&self.seams, &self.dir, id.as_str(), token)?;
        let encoded = self.encoder.encode_accepted(batch)?;
        append_durably(self.file.as_mut(), self.len, &encoded)?;
        self.len += encoded.bytes.len() as u64;
        Ok(())
    }

    fn sealer(&self) -> Option<Arc<Sealer>> {
        Some(Arc::new(Sealer::new(self.format)))
    }

    fn write_fenced_sealed(&mut self, id: &SessionId, token: u64, batch: &SealedBatch) -> Result<()> {
        // A batch sealed for another format would write bytes this file's reader refuses.
        assert_eq!(batch.format, self.format, "a sealed batch is written in the format it was sealed for");
        owner::check_fence(&self.seams, &self.dir, id.as_str(), token)?;
        let encoded = batch.encoded();
        append_durably(self.file.as_mut(), self.len, &encoded)?;
        self.len += encoded.bytes.len() as u64;
        Ok(())
    }

    fn release(self: Box<Self>, id: &SessionId, token: u64) -> Result<()> {
        owner::release(&self.seams, &self.dir, id.as_str(), token)
    }
}
