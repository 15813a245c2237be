//! Structural walk over a sequence of zstd frames, without decompressing
//! (FAILURE-JSONL-ZSTD-SCAN).
//!
//! The walk answers one question per frame: does the file hold all of its bytes? A frame the
//! file ends inside is *torn* (a crash during its append); bytes that cannot be the start of a
//! frame are *corrupt*. Whether a complete frame's content is intact is checked afterwards,
//! by decompressing it with its content checksum.

use super::source::Source;

/// Little-endian zstd frame magic `0xFD2FB528`.
const FRAME_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
/// Size of a block header.
const BLOCK_HEADER_BYTES: usize = 3;
/// Size of the optional content checksum.
const CHECKSUM_BYTES: usize = 4;
/// Block type 3 is reserved by RFC 8878: its presence is corruption.
const BLOCK_TYPE_RESERVED: u8 = 3;
/// Block type 1 (RLE) stores one byte regardless of the block size.
const BLOCK_TYPE_RLE: u8 = 1;

/// One frame's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSpan {
    /// Offset of the frame's magic.
    pub start: usize,
    /// Offset just past the frame (checksum included).
    pub end: usize,
    /// Whether the frame header asks for a content checksum.
    pub has_checksum: bool,
    /// The content size its header declares (`None`: not declared). A scan budgets its
    /// memory by it, and holds the frame to it when decompressing.
    pub content_bytes: Option<u64>,
}

/// Result of walking a file's frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameWalk {
    /// Every byte belongs to a complete frame.
    Complete(Vec<FrameSpan>),
    /// The file ends inside the frame starting at `torn_at`.
    Torn {
        /// The complete frames before it.
        frames: Vec<FrameSpan>,
        /// Start of the incomplete frame.
        torn_at: usize,
    },
    /// Bytes at `offset` cannot be a frame.
    Corrupt {
        /// The complete frames before it.
        frames: Vec<FrameSpan>,
        /// Where the problem is.
        offset: usize,
        /// What the problem is.
        reason: String,
    },
}

/// How the frame starting at one offset ends.
pub(crate) enum FrameEnd {
    /// It is whole.
    Complete(FrameSpan),
    /// The file ends inside it.
    Torn,
    /// Bytes at the offset cannot be a frame.
    Corrupt(usize, String),
}

/// Walks `bytes` frame by frame.
pub fn walk_frames(bytes: &[u8]) -> FrameWalk {
    let mut source = bytes;
    let mut frames = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        match walk_one(&mut source, offset as u64).expect("bytes in memory cannot fail to read") {
            FrameEnd::Complete(span) => {
                debug_assert!(span.end > span.start && span.end <= bytes.len());
                offset = span.end;
                frames.push(span);
            }
            FrameEnd::Torn => return FrameWalk::Torn { frames, torn_at: offset },
            FrameEnd::Corrupt(at, reason) => return FrameWalk::Corrupt { frames, offset: at, reason },
        }
    }
    FrameWalk::Complete(frames)
}

/// Up to `N` bytes at `at` (fewer at the end of the source).
fn peek<const N: usize>(source: &mut dyn Source, at: u64) -> std::io::Result<([u8; N], usize)> {
    let mut buf = [0u8; N];
    let mut got = 0;
    while got < N {
        let n = source.read_at(at + got as u64, &mut buf[got..])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok((buf, got))
}

/// The frame starting at `start`, reading only its headers (block bodies are skipped).
pub(crate) fn walk_one(source: &mut dyn Source, start: u64) -> std::io::Result<FrameEnd> {
    let len = source.len();
    let at_usize = |at: u64| usize::try_from(at).unwrap_or(usize::MAX);
    let (head, got) = peek::<5>(source, start)?;
    if got < FRAME_MAGIC.len() {
        // Fewer than four bytes cannot be judged: a frame whose append was cut short.
        return Ok(FrameEnd::Torn);
    }
    if head[..4] != FRAME_MAGIC {
        return Ok(FrameEnd::Corrupt(at_usize(start), format!("bad zstd frame magic {:02x?}", &head[..4])));
    }
    if got < 5 {
        return Ok(FrameEnd::Torn);
    }
    let descriptor = head[4];
    if descriptor & 0b0000_1000 != 0 {
        return Ok(FrameEnd::Corrupt(at_usize(start + 4), "zstd frame descriptor has its reserved bit set".into()));
    }
    let single_segment = descriptor & 0b0010_0000 != 0;
    let has_checksum = descriptor & 0b0000_0100 != 0;
    let dictionary_id_bytes = [0, 1, 2, 4][usize::from(descriptor & 0b11)];
    let content_size_bytes = match descriptor >> 6 {
        0 => u64::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let window_bytes = u64::from(!single_segment);
    let mut at = start + 5 + window_bytes + dictionary_id_bytes + content_size_bytes;
    loop {
        let (header, got) = peek::<BLOCK_HEADER_BYTES>(source, at)?;
        if got < BLOCK_HEADER_BYTES {
            return Ok(FrameEnd::Torn);
        }
        let header = u32::from_le_bytes([header[0], header[1], header[2], 0]);
        let last = header & 1 == 1;
        let block_type = ((header >> 1) & 0b11) as u8;
        let block_size = u64::from(header >> 3);
        if block_type == BLOCK_TYPE_RESERVED {
            return Ok(FrameEnd::Corrupt(at_usize(at), "zstd block of reserved type".into()));
        }
        let stored = if block_type == BLOCK_TYPE_RLE { 1 } else { block_size };
        at += BLOCK_HEADER_BYTES as u64 + stored;
        if at > len {
            return Ok(FrameEnd::Torn);
        }
        if last {
            break;
        }
    }
    if has_checksum {
        at += CHECKSUM_BYTES as u64;
        if at > len {
            return Ok(FrameEnd::Torn);
        }
    }
    // RFC 8878 3.1.1.1.4: 1, 4 or 8 bytes as they are; 2 bytes hold the size less 256.
    let (field, _) = peek::<8>(source, start + 5 + window_bytes + dictionary_id_bytes)?;
    let content_bytes = match content_size_bytes {
        0 => None,
        1 => Some(u64::from(field[0])),
        2 => Some(u64::from(u16::from_le_bytes([field[0], field[1]])) + 256),
        4 => Some(u64::from(u32::from_le_bytes([field[0], field[1], field[2], field[3]]))),
        _ => Some(u64::from_le_bytes(field)),
    };
    Ok(FrameEnd::Complete(FrameSpan { start: at_usize(start), end: at_usize(at), has_checksum, content_bytes }))
}
