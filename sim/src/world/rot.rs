//! Bit rot while the agent host is down: bytes of a durable line overwritten with non-zero
//! garbage (0xFF, never valid UTF-8, so never a line that still decodes to something else).
//! Zeroed regions are the power-loss signature and belong to the hole fault (`fault_fs.rs`).

use std::path::Path;

use faultline_runtime::event::Record;
use faultline_runtime::{Entropy, Fs, OpenOptions};

use crate::scenario::RotTarget;
use crate::SimEntropy;

/// Most bytes one rot overwrites.
const ROT_BYTES_MAX: u64 = 8;

/// What a rot did: the file, the offset of the first rotted byte and the file afterwards.
#[derive(Debug, Clone)]
pub struct Rotted {
    /// The damaged file.
    pub path: String,
    /// Offset of the first garbage byte.
    pub offset: usize,
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
    target: RotTarget,
    acked: &[Record],
    entropy: &SimEntropy,
) -> std::io::Result<Option<Rotted>> {
    let mut bytes = match fs.read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
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
    let (line_start, line_end) = candidates[(entropy.next_u64() % candidates.len() as u64) as usize];
    let span = (line_end - line_start) as u64;
    let offset = line_start + (entropy.next_u64() % span) as usize;
    let len = (1 + entropy.next_u64() % ROT_BYTES_MAX).min((line_end - offset) as u64) as usize;
    bytes[offset..offset + len].fill(0xFF);
    let mut file = fs.open(path, OpenOptions::append())?;
    file.set_len(0)?;
    file.write_all(&bytes)?;
    file.sync()?;
    Ok(Some(Rotted { path: path.display().to_string(), offset, bytes }))
}
