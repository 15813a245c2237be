//! Recovery: cold load, scan, validate and repair a session file, against a typed decode
//! of the same bytes.

use faultline_runtime::event::*;
use faultline_runtime::production;
use faultline_runtime::store::{FileStore, Format, Keep, NoEvidence, SessionId, Store};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use super::figure::*;

/// Recovery on the turn mix (`mix.rs`), as `transcript inspect` does it (stream, scan, decode
/// on every core, validate, closers; nothing kept): against the fastest honest way to read the
/// same events, a typed decode of each line of the same bytes into a `Record` (no scan rule, no
/// validation, one thread), and held to 2 M events/s.
pub(super) fn recovery_mix(dir: &Path, turns: usize) -> Vec<Figure> {
    let records = crate::bench::mix::records(turns);
    let mut out = Vec::new();
    for (label, format) in [("jsonl", Format::Jsonl), ("zstd", Format::Zstd)] {
        let seams = production::seams();
        let root = dir.join(format!("recovery-mix-{label}"));
        let store = FileStore::new(seams.clone(), &root, format);
        let id = SessionId::new("mix").expect("id");
        let mut log = store.create(&id, 1).expect("create");
        for chunk in records.chunks(256) {
            log.append(chunk).expect("append");
        }
        log.close().expect("close");
        let path = store.session_path(&id);
        let size = std::fs::metadata(&path).expect("size").len() as f64;
        let inspect = || {
            // As `transcript inspect` does it: stream the file, keep nothing.
            let start = Instant::now();
            let mut count = 0u64;
            let inspection = faultline_runtime::store::inspect_file_keeping(
                &seams,
                &path,
                &NoEvidence,
                Keep::Visit(&mut |_| count += 1),
            )
            .expect("inspect");
            let elapsed = start.elapsed().as_secs_f64();
            assert_eq!((inspection.record_count, count), (records.len() as u64, records.len() as u64));
            records.len() as f64 / elapsed
        };
        let typed = || typed_decode(&path, format, records.len(), Decoded::Dropped);
        let (mut base, mut ours) = (Vec::new(), Vec::new());
        for _ in 0..RECOVERY_ROUNDS {
            base.push(typed());
            ours.push(inspect());
        }
        let (base, ours) = (median(base), median(ours));
        out.push(figure_at_least(
            &format!("recovery mix {label}: inspect {} events", records.len()),
            ours,
            "events/s",
            Some(base),
            ("≥ 2 M events/s", 2e6),
        ));
        out.push(figure(
            &format!("  recovery mix {label}: bytes"),
            size * ours / records.len() as f64 / 1e6,
            "MB/s",
            None,
            None,
        ));
    }
    out
}

/// Interleaved rounds of each recovery figure (the median is reported).
pub(super) const RECOVERY_ROUNDS: usize = 5;

/// What the typed-decode baseline does with each record it decodes: the same as the side it
/// is the baseline of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decoded {
    /// Dropped at once (`transcript inspect` keeps nothing).
    Dropped,
    /// Kept until the end (`inspect` of a store returns every record, so it pays for the
    /// memory they fill: on these VMs first-touching a few hundred MiB of fresh pages can
    /// cost more than the decoding, and a baseline that never touched them measured the
    /// VM's page faults, not the store — 0.35× on a run right after a build, 1.1× the next).
    Kept,
}

/// The fastest honest way to read the events of a session file: read (and decompress) the
/// file, check it is UTF-8 once, decode each line into a typed `Record`, nothing else (no
/// scan rule, no validation, one thread). Events per second.
pub(super) fn typed_decode(path: &Path, format: Format, expected: usize, decoded: Decoded) -> f64 {
    let start = Instant::now();
    let bytes = std::fs::read(path).expect("read");
    let text = match format {
        Format::Jsonl => bytes,
        Format::Zstd => zstd_decode_all(&bytes),
        other => panic!("the typed-decode baseline reads no {other:?} file"),
    };
    // One UTF-8 check for the whole text, then each line read as text: the fastest way
    // serde_json offers (the recovery does the same per chunk).
    let text = std::str::from_utf8(&text).expect("UTF-8");
    let mut n = 0usize;
    let mut kept: Vec<Record> = Vec::new();
    for line in text.split('\n').skip(1).filter(|l| !l.is_empty()) {
        let record: Record = Record::decode(line).expect("record");
        if decoded == Decoded::Kept {
            kept.push(record);
        }
        n += 1;
    }
    assert_eq!(n, expected);
    let rate = n as f64 / start.elapsed().as_secs_f64();
    // Freed outside the timing, as the store's side frees its records outside its own.
    drop(kept);
    rate
}

/// Recovery: cold load + scan + validate (keeping every record) vs reading (and
/// decompressing) the same bytes and decoding each line into a typed `Record`, kept as the
/// store keeps them.
pub(super) fn recovery(dir: &Path, count: usize) -> Vec<Figure> {
    let records = events(count);
    let mut out = Vec::new();
    for (label, format) in [("jsonl", Format::Jsonl), ("zstd", Format::Zstd)] {
        let seams = production::seams();
        let root = dir.join(format!("recovery-{label}"));
        let store = FileStore::new(seams.clone(), &root, format);
        let id = SessionId::new("big").expect("id");
        let mut log = store.create(&id, 1).expect("create");
        for chunk in records.chunks(1024) {
            log.append(chunk).expect("append");
        }
        log.close().expect("close");
        let path = store.session_path(&id);
        let size = std::fs::metadata(&path).expect("size").len() as f64;
        let (mut typed, mut ours) = (Vec::new(), Vec::new());
        for _ in 0..RECOVERY_ROUNDS {
            typed.push(typed_decode(&path, format, records.len(), Decoded::Kept));
            let start = Instant::now();
            let inspection = store.inspect(&id).expect("inspect");
            ours.push(records.len() as f64 / start.elapsed().as_secs_f64());
            assert_eq!(inspection.records.len(), records.len());
        }
        let (raw, rate) = (median(typed), median(ours));
        let elapsed = records.len() as f64 / rate;
        out.push(figure(
            &format!("recovery {label}: load+scan+validate {count} events"),
            rate,
            "events/s",
            Some(raw),
            Some(("≥ 0.7× a typed decode", 0.7)),
        ));
        out.push(figure(&format!("recovery {label}: bytes"), size / elapsed / 1e6, "MB/s", None, None));
        // A torn tail: half a line (JSONL) or the start of a frame cut short (zstd; bytes that
        // are not a frame start would be corruption, not a tear).
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).expect("open");
        let tail: &[u8] = match format {
            Format::Jsonl => b"{\"type\":\"turn/end\",\"se",
            Format::Zstd => &[0x28, 0xB5, 0x2F],
            other => panic!("no torn tail known for {other:?}"),
        };
        file.write_all(tail).expect("tear");
        drop(file);
        let start = Instant::now();
        store.load(&id).expect("repair");
        out.push(figure(
            &format!("repair {label}: torn tail of {count} events"),
            records.len() as f64 / start.elapsed().as_secs_f64(),
            "events/s",
            None,
            None,
        ));
    }
    out
}

pub(super) fn zstd_decode_all(bytes: &[u8]) -> Vec<u8> {
    zstd::stream::decode_all(bytes).expect("zstd")
}
