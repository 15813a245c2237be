//! What a scan reads from: a file through the `Fs` seam, or bytes in memory, by offset.

use std::io;

/// Bytes a scan reads by offset: a file through the `Fs` seam, or bytes in memory.
pub(crate) trait Source {
    /// Bytes in all.
    fn len(&self) -> u64;
    /// Up to `buf.len()` bytes at `offset` (0 only at the end).
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
}

impl Source for &[u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(<[u8]>::len(self));
        let n = buf.len().min(<[u8]>::len(self) - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}
