//! The disk's own witness: what the fault filesystem made durable, as it happened, record by
//! record — evidence the runtime cannot touch, for the invariants that say "durable before"
//! (intent before effect, an outcome only once its `turn/end` is on disk).
//!
//! The fault filesystem tells the witness of every successful fsync (the bytes it made
//! durable), link, rename, removal and directory sync ([`FsEvent`]). The witness keeps, per
//! file, the bytes a power loss would leave now, and parses the session file's newly durable
//! complete units (a JSONL line, a zstd frame) into records, each reported once with the
//! instant it became durable. A name made by a link or a rename is durable only once its
//! directory is synced: until then nothing in the file counts. Its first image of the
//! session is the file as the incarnation finds it at start, after a crash: the records of
//! its intact prefix are durable from then, whether or not they were synced before.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use faultline_runtime::event::Record;
use faultline_runtime::seams::Fs;
use faultline_runtime::store::Format;

use crate::fault_fs::FsEvent;

/// What the witness calls with each record that became durable.
pub(crate) type OnSynced = Arc<dyn Fn(Record) + Send + Sync>;

/// The witness of one incarnation's disk.
pub(crate) struct DiskWitness {
    session: PathBuf,
    format: Format,
    state: Mutex<State>,
    on_synced: OnSynced,
}

#[derive(Default)]
struct State {
    /// Per file, the bytes that are durable now.
    images: BTreeMap<PathBuf, Vec<u8>>,
    /// How far into the session's image complete units were parsed.
    parsed_to: usize,
    /// Names made by a link or a rename whose directory was not synced since.
    pending_names: std::collections::BTreeSet<PathBuf>,
}

impl DiskWitness {
    /// A witness of `session` (a file of `format`) whose first image is the file as `fs` holds
    /// it now; records already there are not reported again.
    pub fn new(fs: &dyn Fs, session: PathBuf, format: Format, on_synced: OnSynced) -> Arc<Self> {
        let mut state = State::default();
        if let Ok(bytes) = fs.read(&session) {
            let units = complete_units(format, &bytes, 0);
            state.parsed_to = units.last().map_or(0, |unit| unit.end);
            // What survived the last crash is on the disk now, synced before it or not (a
            // torn write may leave an unsynced unit whole): the records of the file's intact
            // prefix are durable from this instant. One synced before is reported again and
            // kept once; the prefix stops at the first damage (a hole, rot, a forged seq).
            let mut next_seq = 0;
            'prefix: for unit in &units {
                for line in lines(unit) {
                    match Record::decode_bytes(line) {
                        Ok(record) if record.seq == next_seq => {
                            next_seq += 1;
                            on_synced(record);
                        }
                        // The header, before any record.
                        Err(_) if next_seq == 0 => {}
                        _ => break 'prefix,
                    }
                }
            }
            state.images.insert(session.clone(), bytes);
        }
        Arc::new(Self { session, format, state: Mutex::new(state), on_synced })
    }

    /// Follows one event of the fault filesystem.
    pub fn observe(&self, event: FsEvent<'_>) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match event {
            FsEvent::Synced { path, from, bytes, len } => {
                let image = state.images.entry(path.to_path_buf()).or_default();
                image.truncate(from as usize);
                image.resize(from as usize, 0);
                image.extend_from_slice(bytes);
                image.resize(len as usize, 0);
                if path == self.session {
                    state.parsed_to = state.parsed_to.min(from as usize);
                    self.parse(&mut state);
                }
            }
            FsEvent::Linked { original: from, link: to } | FsEvent::Renamed { from, to } => {
                // A rename moves the image; only a link keeps a second name for it.
                let image = if matches!(event, FsEvent::Renamed { .. }) {
                    state.images.remove(from)
                } else {
                    state.images.get(from).cloned()
                }
                .unwrap_or_default();
                state.images.insert(to.to_path_buf(), image);
                state.pending_names.insert(to.to_path_buf());
                if to == self.session {
                    state.parsed_to = 0;
                }
            }
            FsEvent::Removed { path } => {
                state.images.remove(path);
                state.pending_names.remove(path);
            }
            FsEvent::DirSynced { path } => {
                state.pending_names.retain(|name| name.parent() != Some(path));
                self.parse(&mut state);
            }
        }
    }

    /// Reports the records of the session's complete units past `parsed_to`.
    fn parse(&self, state: &mut State) {
        if state.pending_names.contains(&self.session) {
            return;
        }
        let Some(image) = state.images.get(&self.session) else { return };
        let units = complete_units(self.format, image, state.parsed_to);
        let Some(end) = units.last().map(|unit| unit.end) else { return };
        for unit in &units {
            for line in lines(unit) {
                // The header and damage are not records: nothing to claim about them.
                if let Ok(record) = Record::decode_bytes(line) {
                    (self.on_synced)(record);
                }
            }
        }
        state.parsed_to = end;
    }
}

/// The non-empty lines of a unit: a JSONL unit is one line; a zstd frame's text is lines,
/// the last maybe unended.
fn lines<'u>(unit: &'u Unit<'_>) -> impl Iterator<Item = &'u [u8]> {
    unit.text.split(|byte| *byte == b'\n').filter(|line| !line.is_empty())
}

/// One complete unit of a session file: its text (a JSONL line borrowed from the image, a
/// zstd frame decompressed) and where it ends.
struct Unit<'a> {
    text: std::borrow::Cow<'a, [u8]>,
    end: usize,
}

/// The complete units of `bytes` from `from`: newline-terminated lines (JSONL) or whole zstd
/// frames, decompressed (zstd). A torn unit at the end is not complete.
fn complete_units(format: Format, bytes: &[u8], from: usize) -> Vec<Unit<'_>> {
    let mut units = Vec::new();
    let mut at = from.min(bytes.len());
    match format {
        Format::Jsonl => {
            while let Some(newline) = memchr::memchr(b'\n', &bytes[at..]) {
                let end = at + newline + 1;
                units.push(Unit { text: bytes[at..end].into(), end });
                at = end;
            }
        }
        Format::Zstd => {
            while at < bytes.len() {
                let Ok(size) = zstd::zstd_safe::find_frame_compressed_size(&bytes[at..]) else { break };
                let end = at + size;
                let Ok(text) = zstd::stream::decode_all(&bytes[at..end]) else { break };
                units.push(Unit { text: text.into(), end });
                at = end;
            }
        }
        other => panic!("the disk witness reads no {other:?} file"),
    }
    units
}
