//! The two file formats: plain JSONL and JSONL in zstd frames.

use std::path::Path;

use super::scan::{scan_jsonl, scan_zstd, Scan};
use crate::event::{Record, SessionHeader};

/// zstd level for batches: level 3 is zstd's default and compresses JSON ~5x at a speed far
/// above any fsync rate.
const ZSTD_LEVEL: i32 = 3;

/// A session file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `session.jsonl`: one record per line.
    Jsonl,
    /// `session.jsonl.zst`: frame 1 = the header line, then one frame per durable batch, each
    /// with a content checksum.
    Zstd,
}

impl Format {
    /// The session file's name inside its directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Format::Jsonl => "session.jsonl",
            Format::Zstd => "session.jsonl.zst",
        }
    }

    /// The format of a session file, judged by its name.
    pub fn of_path(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_str()?;
        if name.ends_with(".jsonl.zst") {
            Some(Format::Zstd)
        } else if name.ends_with(".jsonl") {
            Some(Format::Jsonl)
        } else {
            None
        }
    }

    /// Scans a whole file.
    pub fn scan(self, bytes: &[u8]) -> Scan {
        match self {
            Format::Jsonl => scan_jsonl(bytes),
            Format::Zstd => scan_zstd(bytes),
        }
    }

    /// The bytes of a freshly materialised file.
    pub fn encode_header(self, header: &SessionHeader) -> Vec<u8> {
        let mut encoder = BatchEncoder::new(self);
        encoder.text = header.encode().into_bytes();
        encoder.text.push(b'\n');
        encoder.frame_text().to_vec()
    }
}

/// Scratch capacity an encoder keeps between batches, in bytes. Reusing the buffers spares
/// every large batch a fresh allocation (above glibc's mmap threshold that is an mmap, a page
/// fault per 4 KiB touched, and an munmap); anything bigger is released after its batch.
const SCRATCH_BYTES_KEPT_MAX: usize = 4 * 1024 * 1024;

/// Encodes batches of records into reused buffers; holds a reusable zstd context for the zstd
/// format.
pub(crate) struct BatchEncoder {
    zstd: Option<Box<zstd::bulk::Compressor<'static>>>,
    /// The batch's JSONL text.
    text: Vec<u8>,
    /// The batch's zstd frame.
    frame: Vec<u8>,
}

impl std::fmt::Debug for BatchEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.zstd.is_some() { "BatchEncoder::Zstd" } else { "BatchEncoder::Jsonl" })
    }
}

impl BatchEncoder {
    pub(crate) fn new(format: Format) -> Self {
        let zstd = match format {
            Format::Jsonl => None,
            Format::Zstd => {
                let mut compressor = zstd::bulk::Compressor::new(ZSTD_LEVEL).expect("zstd context");
                compressor
                    .set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
                    .expect("zstd accepts the checksum flag");
                Some(Box::new(compressor))
            }
        };
        BatchEncoder { zstd, text: Vec::new(), frame: Vec::new() }
    }

    /// The bytes that append `records` as one durable unit (valid until the next call).
    pub(crate) fn encode(&mut self, records: &[Record]) -> &[u8] {
        release_if_oversized(&mut self.text);
        release_if_oversized(&mut self.frame);
        self.text.clear();
        for record in records {
            serde_json::to_writer(&mut self.text, record).expect("records always serialise");
            self.text.push(b'\n');
        }
        self.frame_text()
    }

    fn frame_text(&mut self) -> &[u8] {
        let Some(compressor) = self.zstd.as_mut() else { return &self.text };
        self.frame.clear();
        self.frame.reserve(zstd::zstd_safe::compress_bound(self.text.len()));
        compressor.compress_to_buffer(&self.text, &mut self.frame).expect("zstd compression into a bound-sized buffer");
        &self.frame
    }
}

fn release_if_oversized(buffer: &mut Vec<u8>) {
    if buffer.capacity() > SCRATCH_BYTES_KEPT_MAX {
        *buffer = Vec::new();
    }
}
