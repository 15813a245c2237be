//! Bit rot while the agent host is down: a durable line damaged so that it cannot be taken
//! for a record — overwritten with non-zero garbage (0xFF, never valid UTF-8), or rewritten
//! into well-formed JSON that is not the next record (another seq, a field no record has,
//! nesting deeper than any decoder follows). Zeroed regions are the power-loss signature and
//! belong to the hole fault (`fault_fs.rs`).
//!
//! A zstd session rots a durable frame: garbage flips bytes of its content checksum (the
//! frame's structure stays whole, so the damage cannot pass for a torn tail), and a
//! well-formed rewrite recompresses the frame with the rewritten line under a valid checksum,
//! so only the record decoder and the sequence check stand in its way.

use std::path::Path;

use faultline_runtime::event::Record;
use faultline_runtime::store::Format;
use faultline_runtime::{seams::Entropy, seams::Fs, seams::OpenOptions};

use crate::scenario::{RotKind, RotTarget};
use crate::seams::SimEntropy;

/// Most bytes one garbage rot overwrites.
const ROT_BYTES_MAX: u64 = 8;

/// How deep a `deep-nesting` rot nests its arrays: far past serde_json's recursion limit
/// (128) and deep enough to overflow a thread's stack without it, small enough (200 KB) for
/// a line of either file.
const DEEP_NESTING_LEVELS: usize = 100_000;

/// What a `forged-seq` rot adds to the seq it rewrites, at most.
const FORGED_SEQ_SHIFT_MAX: u64 = 1_000;

/// What a rot did: the file, the offset of the first rotted byte and the file afterwards.
#[derive(Debug, Clone)]
pub struct Rotted {
    /// The damaged file.
    pub path: String,
    /// Offset of the first byte the rot changed.
    pub offset: usize,
    /// What it wrote.
    pub kind: RotKind,
    /// The file's bytes right after the rot: a refusal must leave exactly these.
    pub bytes: Vec<u8>,
}

/// Rots a line of `path` that is certainly durable: for the session, a line of the prefix
/// acknowledged durable (`acked`, contiguous from seq 0); for the journal, any complete line
/// but the last (each journal line is fsynced before the next is written). Returns `None`
/// when the file holds no such line yet.
pub fn rot(
    fs: &dyn Fs,
    path: &Path,
    (target, place): (RotTarget, RotPlace),
    (kind, format): (RotKind, Format),
    acked: &[Record],
    entropy: &SimEntropy,
) -> std::io::Result<Option<Rotted>> {
    let mut bytes = match fs.read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if target == RotTarget::Session && format == Format::Zstd {
        let Some((offset, kind)) = rot_frame(&mut bytes, (kind, place), acked, entropy) else { return Ok(None) };
        return write_back(fs, path, offset, kind, bytes).map(Some);
    }
    // Line spans [start, end) (newline excluded), in file order.
    let mut lines = Vec::new();
    let mut start = 0;
    while let Some(i) = bytes[start..].iter().position(|&b| b == b'\n') {
        lines.push((start, start + i));
        start += i + 1;
    }
    let candidates: Vec<(usize, usize)> = match target {
        // Line 0 is the header; lines 1..=n hold seqs 0..n, durable when acknowledged.
        RotTarget::Session => {
            let durable = acked.iter().enumerate().take_while(|(i, r)| r.seq == *i as u64).count();
            lines.iter().skip(1).take(durable).copied().collect()
        }
        RotTarget::Journal => lines[..lines.len().saturating_sub(1)].to_vec(),
    };
    let candidates: Vec<(usize, usize)> = candidates.into_iter().filter(|(s, e)| e - s >= 2).collect();
    if candidates.is_empty() {
        return Ok(None);
    }
    let (line_start, line_end) = place.pick(&candidates, entropy);
    let (offset, kind) = match rewrite(&bytes[line_start..line_end], kind, entropy) {
        Some((at, line)) => {
            bytes.splice(line_start..line_end, line);
            (line_start + at, kind)
        }
        // A line with nothing to forge (no seq): garbage instead.
        None => {
            let span = (line_end - line_start) as u64;
            let offset = line_start + (entropy.next_u64() % span) as usize;
            let len = (1 + entropy.next_u64() % ROT_BYTES_MAX).min((line_end - offset) as u64) as usize;
            bytes[offset..offset + len].fill(0xFF);
            (offset, RotKind::Garbage)
        }
    };
    write_back(fs, path, offset, kind, bytes).map(Some)
}

/// Which durable line or frame a rot damages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotPlace {
    /// Any of them, drawn.
    Anywhere,
    /// The last one: the unit right in front of whatever the last crash left after it (a
    /// power-loss hole), where a torn rule that looks past the damage would take it for torn.
    LastDurable,
}

impl RotPlace {
    /// The span this place picks among `candidates` (not empty), in file order.
    fn pick(self, candidates: &[(usize, usize)], entropy: &SimEntropy) -> (usize, usize) {
        match self {
            RotPlace::Anywhere => candidates[(entropy.next_u64() % candidates.len() as u64) as usize],
            RotPlace::LastDurable => *candidates.last().expect("a rot picks among durable spans"),
        }
    }
}

/// Writes the rotted file back, durably.
fn write_back(fs: &dyn Fs, path: &Path, offset: usize, kind: RotKind, bytes: Vec<u8>) -> std::io::Result<Rotted> {
    let mut file = fs.open(path, OpenOptions::append())?;
    file.set_len(0)?;
    file.write_all(&bytes)?;
    file.sync()?;
    Ok(Rotted { path: path.display().to_string(), offset, kind, bytes })
}

/// Bytes of a zstd frame's content checksum (its last bytes).
const FRAME_CHECKSUM_BYTES: usize = 4;

/// Rots a durable frame of a zstd session in `bytes` (frame 0 is the header; a frame is
/// durable when every record in it is in the acknowledged prefix). Returns the offset of the
/// first changed byte and the kind applied, or `None` when no frame is durable yet.
fn rot_frame(
    bytes: &mut Vec<u8>,
    (kind, place): (RotKind, RotPlace),
    acked: &[Record],
    entropy: &SimEntropy,
) -> Option<(usize, RotKind)> {
    let durable = acked.iter().enumerate().take_while(|(i, r)| r.seq == *i as u64).count() as u64;
    let mut frames = Vec::new();
    let mut at = 0;
    while let Ok(size) = zstd::zstd_safe::find_frame_compressed_size(&bytes[at..]) {
        frames.push((at, at + size));
        at += size;
    }
    let seqs_durable = |(start, end): (usize, usize)| {
        let Ok(text) = zstd::stream::decode_all(&bytes[start..end]) else { return false };
        text.split(|&b| b == b'\n')
            .filter(|line| !line.is_empty())
            .all(|line| number_after(line, b"\"seq\":").is_some_and(|(_, _, seq)| seq < durable))
    };
    let candidates: Vec<(usize, usize)> =
        frames.iter().skip(1).copied().filter(|&f| f.1 - f.0 > FRAME_CHECKSUM_BYTES && seqs_durable(f)).collect();
    if candidates.is_empty() {
        return None;
    }
    let (start, end) = place.pick(&candidates, entropy);
    let text = zstd::stream::decode_all(&bytes[start..end]).ok()?;
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').filter(|line| !line.is_empty()).collect();
    let chosen = (entropy.next_u64() % lines.len() as u64) as usize;
    let Some((_, rewritten)) = rewrite(lines[chosen], kind, entropy) else {
        // Garbage: the checksum's bytes flipped, so the frame's text no longer matches it
        // (never to zero: zeros are the power-loss signature, which the hole fault owns).
        for byte in &mut bytes[end - FRAME_CHECKSUM_BYTES..end] {
            *byte = match *byte ^ 0xFF {
                0 => 0x01,
                flipped => flipped,
            };
        }
        return Some((end - FRAME_CHECKSUM_BYTES, RotKind::Garbage));
    };
    let mut rotted_text = Vec::with_capacity(text.len() + rewritten.len());
    for (i, line) in lines.iter().enumerate() {
        rotted_text.extend_from_slice(if i == chosen { &rewritten } else { line });
        rotted_text.push(b'\n');
    }
    let mut compressor = zstd::bulk::Compressor::new(3).ok()?;
    compressor.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true)).ok()?;
    let frame = compressor.compress(&rotted_text).ok()?;
    let offset = start + bytes[start..end].iter().zip(&frame).take_while(|(a, b)| a == b).count();
    bytes.splice(start..end, frame);
    Some((offset, kind))
}

/// The line (newline excluded) as a rot of `kind` rewrites it, with the offset of its first
/// changed byte; `None` for garbage, which overwrites in place (and for a forged seq in a
/// line that has none). Each rewrite is valid JSON, so the refusal is the decoder's.
fn rewrite(line: &[u8], kind: RotKind, entropy: &SimEntropy) -> Option<(usize, Vec<u8>)> {
    match kind {
        RotKind::Garbage => None,
        RotKind::ForgedSeq => {
            let (at, digits, seq) = number_after(line, b"\"seq\":")?;
            let forged = seq + 1 + entropy.next_u64() % FORGED_SEQ_SHIFT_MAX;
            let mut out = line[..at].to_vec();
            out.extend_from_slice(forged.to_string().as_bytes());
            out.extend_from_slice(&line[at + digits..]);
            Some((at, out))
        }
        RotKind::UnknownField => {
            let rest = line.strip_prefix(b"{")?;
            let mut out = b"{\"hostile\":true,".to_vec();
            out.extend_from_slice(rest);
            Some((1, out))
        }
        RotKind::DeepNesting => {
            let nested =
                || std::iter::repeat_n(b'[', DEEP_NESTING_LEVELS).chain(std::iter::repeat_n(b']', DEEP_NESTING_LEVELS));
            // A record line becomes an event of a type this build does not know, marked
            // ignorable, in sequence, whose data the decoder must skip: only the recursion
            // limit of that skip stands between the line and a recovery that drops the
            // record it replaced (or a stack overflow). Any other line: bare arrays.
            let out = match (number_after(line, b"\"seq\":"), number_after(line, b"\"time\":")) {
                (Some((_, _, seq)), Some((_, _, time))) => {
                    let mut out =
                        format!("{{\"type\":\"hostile/deep\",\"seq\":{seq},\"time\":{time},\"data\":").into_bytes();
                    out.extend(nested());
                    out.extend_from_slice(b",\"ignorable\":true}");
                    out
                }
                _ => nested().collect(),
            };
            let at = line.iter().zip(&out).take_while(|(a, b)| a == b).count();
            Some((at, out))
        }
    }
}

/// The offset, length and value of the decimal number right after the first `key` in `line`.
fn number_after(line: &[u8], key: &[u8]) -> Option<(usize, usize, u64)> {
    let at = memchr::memmem::find(line, key)? + key.len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    let value = std::str::from_utf8(&line[at..at + digits]).ok()?.parse().ok()?;
    Some((at, digits, value))
}

#[cfg(test)]
mod tests {
    use faultline_runtime::event::{Event, Message, Record, SessionHeader, StepRef, TurnStart, UserMessage};
    use faultline_runtime::store::ScanStatus;

    use super::{rewrite, RotKind};
    use crate::seed::Seed;

    /// A valid session: the header line, then a turn's first records.
    fn session() -> Vec<Vec<u8>> {
        let records = [
            Record::new(0, 1, Event::TurnStart(TurnStart { turn: 1 })),
            Record::new(1, 2, Event::UserMessage(UserMessage { message: Message::user_text("send the report") })),
            Record::new(2, 3, Event::StepStart(StepRef { turn: 1, step: 1 })),
        ];
        let mut lines = vec![SessionHeader::new("sim", 0).encode().into_bytes()];
        lines.extend(records.iter().map(|r| r.encode().into_bytes()));
        lines
    }

    /// What the recovery's scan makes of a session file holding `lines` (a real file: the
    /// scan reads through the file seam).
    #[allow(clippy::disallowed_methods, clippy::disallowed_types)] // a real fixture file
    fn scan(lines: &[Vec<u8>]) -> ScanStatus {
        let bytes: Vec<u8> = lines.iter().flat_map(|l| l.iter().copied().chain([b'\n'])).collect();
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("session.jsonl");
        std::fs::write(&path, bytes).expect("write");
        faultline_runtime::store::inspect_file(&faultline_runtime::production::seams(), &path).expect("inspect").status
    }

    /// Each valid-JSON rot of a line inside the durable prefix (not the last line, so no
    /// torn-tail rule applies either way) is refused by the recovery's scan as corrupt, the
    /// nesting one without exhausting the stack; the untouched file is clean.
    #[test]
    fn every_well_formed_rot_is_refused_as_corrupt() {
        let lines = session();
        assert_eq!(scan(&lines), ScanStatus::Clean);
        for kind in [RotKind::ForgedSeq, RotKind::UnknownField, RotKind::DeepNesting] {
            for line in 1..lines.len() - 1 {
                let entropy = Seed::new(line as u64).fault("rot/test");
                let (at, rewritten) = rewrite(&lines[line], kind, &entropy).expect("a record line can be rewritten");
                assert!(at <= lines[line].len() && rewritten != lines[line], "{kind:?} changed line {line}");
                let json = std::str::from_utf8(&rewritten).expect("UTF-8");
                if kind != RotKind::DeepNesting {
                    serde_json::from_str::<serde_json::Value>(json).expect("well-formed JSON");
                }
                let mut rotted = lines.clone();
                rotted[line] = rewritten;
                assert_eq!(scan(&rotted), ScanStatus::Corrupt, "{kind:?} of line {line}");
            }
        }
    }

    /// The nesting rot of the user message's line is refused by the recursion limit, nothing
    /// else: the same line nested one level deep is an ignorable event of an unknown type, in
    /// sequence, and recovery accepts it in place of the message it replaced (JSONL carries
    /// no checksum; a turn/start so replaced is refused by the turn rules instead).
    #[test]
    fn a_shallow_ignorable_line_in_sequence_is_accepted() {
        let lines = session();
        let entropy = Seed::new(0).fault("rot/test");
        let (_, deep) = rewrite(&lines[2], RotKind::DeepNesting, &entropy).expect("rewritten");
        let (levels, nested_at) = (super::DEEP_NESTING_LEVELS, deep.iter().position(|&b| b == b'[').expect("nested"));
        let shallow = [&deep[..nested_at], b"[]", &deep[nested_at + 2 * levels..]].concat();
        assert!(std::str::from_utf8(&shallow).expect("UTF-8").ends_with("[],\"ignorable\":true}"));
        let mut rotted = lines.clone();
        rotted[2] = shallow;
        assert_eq!(scan(&rotted), ScanStatus::Clean);
    }

    /// Garbage overwrites in place; a line with no seq has nothing to forge.
    #[test]
    fn garbage_and_a_line_without_a_seq_are_not_rewritten() {
        let entropy = Seed::new(0).fault("rot/test");
        assert!(rewrite(b"{\"seq\":1}", RotKind::Garbage, &entropy).is_none());
        assert!(rewrite(b"{\"op\":\"prune\",\"id\":\"a\",\"at\":1}", RotKind::ForgedSeq, &entropy).is_none());
    }
}
