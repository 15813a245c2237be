//! Scanners that turn a session file's bytes into its committed prefix, applying the
//! torn-versus-corrupt rule (FAILURE-JSONL-RAW-SCAN, FAILURE-JSONL-ZSTD-SCAN,
//! FAILURE-JSONL-PREFIX).

use std::io::Read;

use serde::Serialize;

use super::limits::{torn_unit_bytes_max, RECORD_LINE_BYTES_MAX};
use super::zstd_frames::{walk_frames, FrameSpan, FrameWalk};
use crate::event::{Event, HeaderError, Record, SessionHeader, Validator};

/// What a scan concluded about the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScanStatus {
    /// Every byte belongs to the committed prefix.
    Clean,
    /// A torn tail follows the committed prefix (a crash mid-append); repair truncates it.
    Torn,
    /// The bytes cannot be explained by a crash; nothing is repaired.
    Corrupt,
    /// A well-formed header of a version this build does not read.
    Unsupported,
}

/// Where and why a scan refused the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScanError {
    /// Byte offset in the file.
    pub offset: u64,
    /// What is wrong there.
    pub reason: String,
}

/// The committed prefix of a session file and what follows it.
#[derive(Debug, Clone)]
pub struct Scan {
    /// Overall verdict.
    pub status: ScanStatus,
    /// The session header, when readable.
    pub header: Option<SessionHeader>,
    /// Committed records, in order.
    pub records: Vec<Record>,
    /// Byte length of the committed prefix: repair truncates the file to this.
    pub committed_len: u64,
    /// Byte length of the file.
    pub file_len: u64,
    /// Records salvaged from a torn zstd frame (complete, decodable, contiguous lines); repair
    /// appends them again. Always empty for plain JSONL.
    pub recovered: Vec<Record>,
    /// Why the scan refused the file (corrupt or unsupported).
    pub error: Option<ScanError>,
    /// Complete, decodable records inside a torn tail that a repair drops (they were never
    /// acknowledged: they belong to the write unit a crash or power loss interrupted).
    pub dropped: Vec<Record>,
}

impl Scan {
    fn refused(status: ScanStatus, offset: usize, reason: impl Into<String>, file_len: usize) -> Scan {
        Scan {
            status,
            header: None,
            records: Vec::new(),
            committed_len: 0,
            file_len: file_len as u64,
            recovered: Vec::new(),
            error: Some(ScanError { offset: offset as u64, reason: reason.into() }),
            dropped: Vec::new(),
        }
    }

    /// Bytes after the committed prefix.
    pub fn torn_bytes(&self) -> u64 {
        match self.status {
            ScanStatus::Torn => self.file_len - self.committed_len,
            _ => 0,
        }
    }
}

/// Why one line is not the next committed record.
enum LineIssue {
    /// Undecodable or out of sequence: torn unless a later `turn/end` proves otherwise.
    Suspect(String),
    /// Decodable and in sequence but breaks a log invariant: never crash-induced.
    Invalid(String),
}

/// Decodes one newline-stripped line as the validator's next record.
fn decode_next(line: &[u8], validator: &mut Validator) -> Result<Record, LineIssue> {
    if line.len() > RECORD_LINE_BYTES_MAX {
        return Err(LineIssue::Suspect(format!(
            "line of {} bytes exceeds the {RECORD_LINE_BYTES_MAX}-byte limit",
            line.len()
        )));
    }
    let text = std::str::from_utf8(line).map_err(|e| LineIssue::Suspect(format!("line is not UTF-8: {e}")))?;
    let record = Record::decode(text).map_err(|e| LineIssue::Suspect(e.to_string()))?;
    if record.seq != validator.next_seq() {
        return Err(LineIssue::Suspect(format!("seq {} where {} was expected", record.seq, validator.next_seq())));
    }
    // A violation ends the scan (corrupt), so the validator need not survive it unchanged.
    validator.push_in_place(&record).map_err(|v| LineIssue::Invalid(format!("log invariant violated: {v}")))?;
    Ok(record)
}

fn header_of(line: &[u8], file_len: usize) -> Result<SessionHeader, Box<Scan>> {
    let text = std::str::from_utf8(line)
        .map_err(|_| Box::new(Scan::refused(ScanStatus::Corrupt, 0, "session header is not UTF-8", file_len)))?;
    SessionHeader::decode(text).map_err(|e| {
        Box::new(match e {
            HeaderError::Unsupported { .. } => Scan::refused(ScanStatus::Unsupported, 0, e.to_string(), file_len),
            HeaderError::Malformed(_) => Scan::refused(ScanStatus::Corrupt, 0, e.to_string(), file_len),
        })
    })
}

/// Scans a plain `session.jsonl`.
pub fn scan_jsonl(bytes: &[u8]) -> Scan {
    let Some(header_end) = memchr(bytes, 0) else {
        let reason =
            if bytes.is_empty() { "empty file: no session header" } else { "session header line is unterminated" };
        return Scan::refused(ScanStatus::Corrupt, 0, reason, bytes.len());
    };
    let header = match header_of(&bytes[..header_end], bytes.len()) {
        Ok(header) => header,
        Err(refused) => return *refused,
    };
    let mut validator = Validator::new();
    let mut records = Vec::new();
    let mut offset = header_end + 1;
    let mut scan = Scan {
        status: ScanStatus::Clean,
        header: Some(header),
        records: Vec::new(),
        committed_len: 0,
        file_len: bytes.len() as u64,
        recovered: Vec::new(),
        error: None,
        dropped: Vec::new(),
    };
    while offset < bytes.len() {
        let Some(end) = memchr(bytes, offset) else {
            // An unterminated final line is always torn.
            scan.status = ScanStatus::Torn;
            break;
        };
        match decode_next(&bytes[offset..end], &mut validator) {
            Ok(record) => {
                records.push(record);
                offset = end + 1;
            }
            Err(LineIssue::Invalid(reason)) => {
                scan.status = ScanStatus::Corrupt;
                scan.error = Some(ScanError { offset: offset as u64, reason });
                break;
            }
            Err(LineIssue::Suspect(reason)) => {
                // FAILURE-JSONL-PREFIX: a crash leaves at most an unterminated last line, a power
                // loss a hole of zero bytes inside the last write unit. Damage followed by
                // anything else cannot be explained by either. A turn/end after a hole lies in
                // the same unacknowledged unit (the flush after it never returned), so it proves
                // nothing; after any other damage it is one more reason to refuse.
                // Decoded once: the turn/end check and, for a torn tail, the report of what drops.
                let after = complete_records(&bytes[end + 1..]);
                let turn_end = after.iter().find(|r| matches!(r.event, Event::TurnEnd(_))).map(|r| r.seq);
                let is_last_line = end + 1 == bytes.len();
                let old_rule = crate::testing::bugs::planted("any-damage-is-torn") && turn_end.is_none();
                if is_power_loss_hole(&bytes[offset..], &bytes[offset..end]) || old_rule {
                    scan.status = ScanStatus::Torn;
                    scan.dropped = after;
                } else if let Some(turn_end_seq) = turn_end {
                    scan.status = ScanStatus::Corrupt;
                    let reason =
                        format!("{reason}; a later committed turn/end (seq {turn_end_seq}) rules out a torn tail");
                    scan.error = Some(ScanError { offset: offset as u64, reason });
                } else {
                    scan.status = ScanStatus::Corrupt;
                    let what = if is_last_line { "the last line" } else { "a line followed by complete records" };
                    let reason = format!(
                        "{reason}; {what} damaged without a hole of zero bytes inside the last write unit: not a torn write"
                    );
                    scan.error = Some(ScanError { offset: offset as u64, reason });
                }
                break;
            }
        }
    }
    scan.committed_len = offset as u64;
    scan.records = records;
    if scan.status == ScanStatus::Corrupt {
        scan.committed_len = 0;
    }
    scan
}

/// Whether the damaged region `rest` (from the start of the first bad line, `line`, to the end
/// of the file) is a power-loss hole: the line holds zero bytes and everything from it to the
/// end fits one write unit (a unit of several records, or one oversize record of its own).
fn is_power_loss_hole(rest: &[u8], line: &[u8]) -> bool {
    if !line.contains(&0) || crate::testing::bugs::planted("holes-are-corrupt") {
        return false;
    }
    let single_record = memchr::memchr(b'\n', &rest[..rest.len().saturating_sub(1)]).is_none();
    rest.len() <= torn_unit_bytes_max(single_record)
}

/// The complete lines of `rest` that decode as records (the damaged line's successors: what a
/// torn-tail repair drops, and where a later `turn/end` would prove corruption).
fn complete_records(mut rest: &[u8]) -> Vec<Record> {
    let mut records = Vec::new();
    while let Some(end) = memchr(rest, 0) {
        if let Ok(record) =
            std::str::from_utf8(&rest[..end]).map_err(|_| ()).and_then(|t| Record::decode(t).map_err(|_| ()))
        {
            records.push(record);
        }
        rest = &rest[end + 1..];
    }
    records
}

fn memchr(bytes: &[u8], from: usize) -> Option<usize> {
    memchr::memchr(b'\n', &bytes[from..]).map(|i| from + i)
}

/// Longest decompressed content accepted from one frame: a batch is at most a few thousand
/// records, so 256 MiB is garbage or a decompression bomb.
pub const FRAME_CONTENT_BYTES_MAX: u64 = 256 * 1024 * 1024;

fn decompress_frame(frame: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut decoder = zstd::stream::read::Decoder::with_buffer(frame)?.single_frame();
    let mut out = Vec::new();
    (&mut decoder).take(FRAME_CONTENT_BYTES_MAX + 1).read_to_end(&mut out)?;
    if out.len() as u64 > FRAME_CONTENT_BYTES_MAX {
        return Err(std::io::Error::other("frame content exceeds the size limit"));
    }
    Ok(out)
}

/// Decompresses as much of a torn frame as the decoder yields before the bytes run out.
fn decompress_prefix(frame: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let Ok(decoder) = zstd::stream::read::Decoder::with_buffer(frame) else { return out };
    let mut decoder = decoder.single_frame();
    let mut buf = [0u8; 8192];
    loop {
        match decoder.read(&mut buf) {
            Ok(0) | Err(_) => return out,
            Ok(n) if (out.len() + n) as u64 > FRAME_CONTENT_BYTES_MAX => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// Scans a `session.jsonl.zst`: frame 1 holds exactly the header line, every later frame one
/// durable batch of complete lines, each with a content checksum.
pub fn scan_zstd(bytes: &[u8]) -> Scan {
    let (mut frames, mut torn_at, corrupt) = match walk_frames(bytes) {
        FrameWalk::Complete(frames) => (frames, None, None),
        FrameWalk::Torn { frames, torn_at } => (frames, Some(torn_at), None),
        // Zero bytes after the last complete frame, within one write unit of the end: the
        // signature of a power loss inside the last unit, so a torn tail (FAILURE-JSONL-PREFIX).
        FrameWalk::Corrupt { frames, offset, .. }
            if !frames.is_empty() && is_zstd_power_loss_hole(&bytes[frames.last().map_or(0, |f| f.end)..]) =>
        {
            let at = frames.last().map_or(0, |f| f.end);
            debug_assert!(offset >= at);
            (frames, Some(at), None)
        }
        FrameWalk::Corrupt { frames, offset, reason } => (frames, None, Some((offset, reason))),
    };
    let Some(first) = frames.first() else {
        let reason = corrupt.map_or_else(|| "no complete header frame".to_owned(), |(_, reason)| reason);
        return Scan::refused(ScanStatus::Corrupt, 0, reason, bytes.len());
    };
    let header = match complete_frame_text(bytes, first) {
        Ok(text) if text.iter().filter(|&&b| b == b'\n').count() == 1 => {
            match header_of(&text[..text.len() - 1], bytes.len()) {
                Ok(header) => header,
                Err(refused) => return *refused,
            }
        }
        Ok(_) => return Scan::refused(ScanStatus::Corrupt, 0, "header frame must hold exactly one line", bytes.len()),
        Err(reason) => return Scan::refused(ScanStatus::Corrupt, 0, reason, bytes.len()),
    };
    let mut validator = Validator::new();
    let mut records = Vec::new();
    let mut complete = frames.len();
    let mut salvage = true;
    for (i, frame) in frames.iter().enumerate().skip(1) {
        let text = match complete_frame_text(bytes, frame) {
            Ok(text) => text,
            // A hole of zeros inside the last write unit fails that frame's checksum.
            Err(_) if corrupt.is_none() && is_zstd_power_loss_hole(&bytes[frame.start..]) => {
                complete = i;
                torn_at = Some(frame.start);
                // Its checksum failed: nothing decoded from it can be vouched for.
                salvage = false;
                break;
            }
            Err(reason) => return Scan::refused(ScanStatus::Corrupt, frame.start, reason, bytes.len()),
        };
        let mut offset = 0;
        while offset < text.len() {
            let end = memchr(&text, offset).expect("complete frames end in a newline");
            match decode_next(&text[offset..end], &mut validator) {
                Ok(record) => records.push(record),
                Err(LineIssue::Invalid(reason) | LineIssue::Suspect(reason)) => {
                    // A checksummed, complete frame cannot be torn: anything wrong inside is corruption.
                    let reason = format!("{reason} (line at byte {offset} of the frame's content)");
                    return Scan::refused(ScanStatus::Corrupt, frame.start, reason, bytes.len());
                }
            }
            offset = end + 1;
        }
    }
    frames.truncate(complete);
    let committed_len = frames.last().map_or(0, |f| f.end);
    let mut scan = Scan {
        status: ScanStatus::Clean,
        header: Some(header),
        records,
        committed_len: committed_len as u64,
        file_len: bytes.len() as u64,
        recovered: Vec::new(),
        error: None,
        dropped: Vec::new(),
    };
    // A frame is one write unit: a complete, checksummed frame after the damage is a later
    // unit that was written whole, so the damage is not the last unit's (a flipped bit that
    // makes a frame swallow the next one looks torn to the walk, not to this).
    let corrupt = corrupt.or_else(|| {
        let at = torn_at?;
        let later = complete_frame_after(bytes, at)?;
        Some((at, format!("a complete frame at byte {later} follows the damaged one: not a torn write")))
    });
    if let Some((offset, reason)) = corrupt {
        scan.status = ScanStatus::Corrupt;
        scan.committed_len = 0;
        scan.error = Some(ScanError { offset: offset as u64, reason });
    } else if let Some(torn_at) = torn_at {
        scan.status = ScanStatus::Torn;
        let text = if salvage { decompress_prefix(&bytes[torn_at..]) } else { Vec::new() };
        let mut offset = 0;
        while let Some(end) = memchr(&text, offset) {
            match decode_next(&text[offset..end], &mut validator) {
                Ok(record) => scan.recovered.push(record),
                Err(_) => break,
            }
            offset = end + 1;
        }
    }
    scan
}

/// The offset of the first complete, checksummed frame that starts after `from`, if any.
fn complete_frame_after(bytes: &[u8], from: usize) -> Option<usize> {
    const MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
    let search = from + 1;
    memchr::memmem::find_iter(bytes.get(search..)?, &MAGIC).map(|i| search + i).find(|&start| {
        let first = match walk_frames(&bytes[start..]) {
            FrameWalk::Complete(frames) | FrameWalk::Torn { frames, .. } | FrameWalk::Corrupt { frames, .. } => {
                frames.into_iter().next()
            }
        };
        first.is_some_and(|frame| {
            let frame = FrameSpan { start: start + frame.start, end: start + frame.end, ..frame };
            complete_frame_text(bytes, &frame).is_ok()
        })
    })
}

/// Shortest run of zero bytes inside a zstd tail taken for a power-loss hole. Holes are whole
/// disk blocks (512 bytes and up); 64 zeros in a row do not occur in a frame zstd wrote.
const ZSTD_HOLE_ZERO_BYTES_MIN: usize = 64;

/// Whether `tail` (everything from the end of the last good frame) holds zero bytes and could
/// be one write unit: at most one oversize record's frame.
fn is_zstd_power_loss_hole(tail: &[u8]) -> bool {
    // Compressed bytes hold stray zeros of their own; a hole is a run of them (or a tail of
    // nothing else).
    let zero_run = [0u8; ZSTD_HOLE_ZERO_BYTES_MIN];
    if !(tail.iter().all(|&b| b == 0) || memchr::memmem::find(tail, &zero_run).is_some()) {
        return false;
    }
    !crate::testing::bugs::planted("holes-are-corrupt")
        && tail.len() <= zstd::zstd_safe::compress_bound(torn_unit_bytes_max(true))
}

/// The decompressed content of a complete frame, which must carry a checksum and end in a
/// newline.
fn complete_frame_text(bytes: &[u8], frame: &FrameSpan) -> Result<Vec<u8>, String> {
    if !frame.has_checksum {
        return Err("zstd frame without a content checksum".into());
    }
    let text =
        decompress_frame(&bytes[frame.start..frame.end]).map_err(|e| format!("zstd frame does not decompress: {e}"))?;
    if text.last() != Some(&b'\n') {
        return Err("zstd frame content does not end in a newline".into());
    }
    Ok(text)
}
