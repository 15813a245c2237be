//! Scanners that turn a session file's bytes into its committed prefix, applying the
//! torn-versus-corrupt rule (FAILURE-JSONL-RAW-SCAN, FAILURE-JSONL-ZSTD-SCAN,
//! FAILURE-JSONL-PREFIX).

use std::io::Read;

use serde::Serialize;

use super::zstd_frames::{walk_frames, FrameSpan, FrameWalk};
use crate::event::{Event, HeaderError, Record, SessionHeader, Validator};

/// Longest line a scanner accepts, in bytes. A record is a few KB at most (tool arguments and
/// results are capped upstream); a "line" longer than this is garbage, not a record.
pub const RECORD_LINE_BYTES_MAX: usize = 16 * 1024 * 1024;

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
                if let Some(turn_end_seq) = later_turn_end(&bytes[end + 1..]) {
                    scan.status = ScanStatus::Corrupt;
                    let reason =
                        format!("{reason}; a later committed turn/end (seq {turn_end_seq}) rules out a torn tail");
                    scan.error = Some(ScanError { offset: offset as u64, reason });
                } else {
                    scan.status = ScanStatus::Torn;
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

/// The seq of the first complete line after a suspect one that decodes as a `turn/end`.
fn later_turn_end(mut rest: &[u8]) -> Option<u64> {
    while let Some(end) = memchr(rest, 0) {
        let line = &rest[..end];
        if let Ok(record) = std::str::from_utf8(line).map_err(|_| ()).and_then(|t| Record::decode(t).map_err(|_| ())) {
            if matches!(record.event, Event::TurnEnd(_)) {
                return Some(record.seq);
            }
        }
        rest = &rest[end + 1..];
    }
    None
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
    let (frames, torn_at, corrupt) = match walk_frames(bytes) {
        FrameWalk::Complete(frames) => (frames, None, None),
        FrameWalk::Torn { frames, torn_at } => (frames, Some(torn_at), None),
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
    for frame in &frames[1..] {
        let text = match complete_frame_text(bytes, frame) {
            Ok(text) => text,
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
    let committed_len = frames.last().map_or(0, |f| f.end);
    let mut scan = Scan {
        status: ScanStatus::Clean,
        header: Some(header),
        records,
        committed_len: committed_len as u64,
        file_len: bytes.len() as u64,
        recovered: Vec::new(),
        error: None,
    };
    if let Some((offset, reason)) = corrupt {
        scan.status = ScanStatus::Corrupt;
        scan.committed_len = 0;
        scan.error = Some(ScanError { offset: offset as u64, reason });
    } else if let Some(torn_at) = torn_at {
        scan.status = ScanStatus::Torn;
        let text = decompress_prefix(&bytes[torn_at..]);
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
