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
        let mut line = header.encode().into_bytes();
        line.push(b'\n');
        BatchEncoder::new(self).frame(line)
    }
}

/// Encodes batches of records; holds a reusable zstd context for the zstd format.
pub(crate) enum BatchEncoder {
    Jsonl,
    Zstd(Box<zstd::bulk::Compressor<'static>>),
}

impl std::fmt::Debug for BatchEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BatchEncoder::Jsonl => "BatchEncoder::Jsonl",
            BatchEncoder::Zstd(_) => "BatchEncoder::Zstd",
        })
    }
}

impl BatchEncoder {
    pub(crate) fn new(format: Format) -> Self {
        match format {
            Format::Jsonl => BatchEncoder::Jsonl,
            Format::Zstd => {
                let mut compressor = zstd::bulk::Compressor::new(ZSTD_LEVEL).expect("zstd context");
                compressor
                    .set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
                    .expect("zstd accepts the checksum flag");
                BatchEncoder::Zstd(Box::new(compressor))
            }
        }
    }

    /// The bytes that append `records` as one durable unit.
    pub(crate) fn encode(&mut self, records: &[Record]) -> Vec<u8> {
        let mut text = Vec::with_capacity(records.len() * 256);
        for record in records {
            serde_json::to_writer(&mut text, record).expect("records always serialise");
            text.push(b'\n');
        }
        self.frame(text)
    }

    fn frame(&mut self, text: Vec<u8>) -> Vec<u8> {
        match self {
            BatchEncoder::Jsonl => text,
            BatchEncoder::Zstd(compressor) => {
                compressor.compress(&text).expect("zstd compression of an in-memory buffer")
            }
        }
    }
}
