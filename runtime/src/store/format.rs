//! The two file formats: plain JSONL and JSONL in zstd frames.

use std::path::Path;

use super::limits::{check_record_line, WRITE_UNIT_BYTES_MAX};
use super::scan::{scan_jsonl_from, scan_zstd_from, Keep, Scan, Source};
use crate::event::{Record, SessionHeader};
use crate::seams::Compute;
use crate::Result;

/// zstd level for batches: level 3 is zstd's default and compresses JSON ~5x at a speed far
/// above any fsync rate.
#[cfg(feature = "zstd")]
const ZSTD_LEVEL: i32 = 3;

/// A session file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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

    /// Scans a file streamed from `source`.
    pub(crate) fn scan_from(
        self,
        source: &mut dyn Source,
        keep: Keep<'_>,
        compute: &dyn Compute,
    ) -> std::io::Result<Scan> {
        match self {
            Format::Jsonl => scan_jsonl_from(source, keep, compute),
            Format::Zstd => scan_zstd_from(source, keep, compute),
        }
    }

    /// The bytes of a freshly materialised file.
    pub fn encode_header(self, header: &SessionHeader) -> Vec<u8> {
        let mut text = header.encode().into_bytes();
        text.push(b'\n');
        match self {
            Format::Jsonl => text,
            Format::Zstd => {
                let mut frame = Vec::new();
                FrameCompressor::new().compress_into(&text, &mut frame);
                frame
            }
        }
    }
}

/// Scratch capacity an encoder keeps between batches, in bytes. Reusing the buffers spares
/// every large batch a fresh allocation (above glibc's mmap threshold that is an mmap, a page
/// fault per 4 KiB touched, and an munmap); anything bigger is released after its batch.
const SCRATCH_BYTES_KEPT_MAX: usize = 4 * 1024 * 1024;

/// Encodes batches of records into reused buffers; holds a reusable zstd context for the zstd
/// format.
pub(crate) struct BatchEncoder {
    zstd: Option<Box<FrameCompressor>>,
    /// The batch's JSONL text.
    text: Vec<u8>,
    /// The batch's zstd frames.
    frame: Vec<u8>,
    /// End offset of each write unit in the output.
    units: Vec<usize>,
}

/// A record and its line, encoded once when it was accepted (what the write-behind queues).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedRecord {
    /// The record, shared with the write-behind's subscribers (never copied for them).
    pub record: std::sync::Arc<Record>,
    /// `record.encode()`.
    pub line: String,
}

impl EncodedRecord {
    /// Encodes `record`.
    pub fn new(record: Record) -> Self {
        let line = record.encode();
        Self { record: std::sync::Arc::new(record), line }
    }
}

/// A full batch encoded for disk ahead of its write: the write-behind seals a batch on the
/// producer's side as soon as it is full, so the writer's critical path is the fence check,
/// the write and its fsync (not encoding, not compression).
#[derive(Debug)]
pub struct SealedBatch {
    /// The batch, in seq order (contiguous seqs).
    pub(crate) records: Vec<std::sync::Arc<EncodedRecord>>,
    /// The format `bytes` are in.
    pub(crate) format: Format,
    /// Everything the batch appends.
    pub(crate) bytes: Vec<u8>,
    /// End offset in `bytes` of each write unit, ascending; the last is `bytes.len()`.
    pub(crate) unit_ends: Vec<usize>,
}

impl SealedBatch {
    /// The batch's records.
    pub fn records(&self) -> &[std::sync::Arc<EncodedRecord>] {
        &self.records
    }

    /// The bytes as [`append_durably`](super::append_durably) writes them.
    pub(crate) fn encoded(&self) -> Encoded<'_> {
        Encoded { bytes: &self.bytes, unit_ends: &self.unit_ends }
    }
}

/// Seals full batches for a log that writes bytes in one [`Format`] (file stores); see
/// [`SealedBatch`]. One encoder, shared by whichever producer seals (they rarely overlap).
#[derive(Debug)]
pub struct Sealer {
    format: Format,
    encoder: std::sync::Mutex<BatchEncoder>,
}

impl Sealer {
    pub(crate) fn new(format: Format) -> Self {
        Sealer { format, encoder: std::sync::Mutex::new(BatchEncoder::new(format)) }
    }

    /// Encodes `records` (contiguous seqs, non-empty) exactly as the log's own writer would.
    /// `None` when a record's line is one the reader would refuse: the writer then meets the
    /// same refusal itself and fails the batch as usual, before anything is written.
    pub fn seal(&self, records: Vec<std::sync::Arc<EncodedRecord>>) -> Option<SealedBatch> {
        assert!(!records.is_empty(), "a sealed batch is non-empty");
        debug_assert!(records.windows(2).all(|w| w[0].record.seq + 1 == w[1].record.seq));
        let mut encoder = self.encoder.lock().unwrap_or_else(|p| p.into_inner());
        let encoded = encoder.encode_accepted(&records).ok()?;
        let (bytes, unit_ends) = (encoded.bytes.to_vec(), encoded.unit_ends.to_vec());
        drop(encoder);
        Some(SealedBatch { records, format: self.format, bytes, unit_ends })
    }
}

/// A batch encoded for disk: its bytes, cut into write units (each written and fsynced on
/// its own, each one zstd frame).
#[derive(Debug)]
pub(crate) struct Encoded<'a> {
    /// Everything the batch appends.
    pub bytes: &'a [u8],
    /// End offset in `bytes` of each write unit, ascending; the last is `bytes.len()`.
    pub unit_ends: &'a [usize],
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
            Format::Zstd => Some(Box::new(FrameCompressor::new())),
        };
        BatchEncoder { zstd, text: Vec::new(), frame: Vec::new(), units: Vec::new() }
    }

    /// The bytes that append `records` durably, cut into write units of at most
    /// [`WRITE_UNIT_BYTES_MAX`] bytes of text (a larger single record is a unit of its own).
    /// Refuses a record whose line the reader would refuse, before anything is written.
    pub(crate) fn encode(&mut self, records: &[Record]) -> Result<Encoded<'_>> {
        release_if_oversized(&mut self.text);
        self.encode_each(records.len(), |text, i| {
            serde_json::to_writer(&mut *text, &records[i]).expect("records always serialise");
            records[i].seq
        })
    }

    /// [`BatchEncoder::encode`] of records already encoded when they were accepted (the
    /// write-behind encodes on the producer's side, so the writer's critical path is the write
    /// and its fsync).
    pub(crate) fn encode_accepted(&mut self, batch: &[std::sync::Arc<EncodedRecord>]) -> Result<Encoded<'_>> {
        // The batch's exact size, reserved once: a batch holding a 15 MiB answer is not grown
        // by doubling (each step a copy the allocator may hold on to).
        let bytes: usize = batch.iter().map(|e| e.line.len() + 1).sum();
        release_if_oversized(&mut self.text);
        self.text.clear();
        self.text.reserve(bytes);
        self.encode_each(batch.len(), |text, i| {
            text.extend_from_slice(batch[i].line.as_bytes());
            batch[i].record.seq
        })
    }

    /// The batch of `n` records `write_line(text, i)` appends (returning its seq), cut into
    /// write units and, for zstd, compressed.
    /// The caller has released or reserved `self.text` (a reservation must survive here).
    fn encode_each(&mut self, n: usize, mut write_line: impl FnMut(&mut Vec<u8>, usize) -> u64) -> Result<Encoded<'_>> {
        release_if_oversized(&mut self.frame);
        self.text.clear();
        self.units.clear();
        // Text offsets where each unit ends.
        let mut unit_start = 0;
        for i in 0..n {
            let line_start = self.text.len();
            let seq = write_line(&mut self.text, i);
            let line_bytes = self.text.len() - line_start;
            check_record_line(seq, line_bytes)?;
            self.text.push(b'\n');
            if self.text.len() - unit_start > WRITE_UNIT_BYTES_MAX && line_start > unit_start {
                // This record would overflow the unit: close the unit before it.
                self.units.push(line_start);
                unit_start = line_start;
            }
        }
        if self.text.len() > unit_start {
            self.units.push(self.text.len());
        }
        debug_assert!(self.units.windows(2).all(|w| w[0] < w[1]));
        let Some(compressor) = self.zstd.as_mut() else {
            return Ok(Encoded { bytes: &self.text, unit_ends: &self.units });
        };
        self.frame.clear();
        let mut text_start = 0;
        for end in &mut self.units {
            let text = &self.text[text_start..*end];
            text_start = *end;
            compressor.compress_into(text, &mut self.frame);
            *end = self.frame.len();
        }
        Ok(Encoded { bytes: &self.frame, unit_ends: &self.units })
    }
}

/// A zstd context at [`ZSTD_LEVEL`] whose frames carry a content checksum (the scanner
/// refuses frames without one).
#[cfg(feature = "zstd")]
struct FrameCompressor(zstd::bulk::Compressor<'static>);

#[cfg(feature = "zstd")]
impl FrameCompressor {
    fn new() -> Self {
        let mut compressor = zstd::bulk::Compressor::new(ZSTD_LEVEL).expect("zstd context");
        compressor
            .set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
            .expect("zstd accepts the checksum flag");
        FrameCompressor(compressor)
    }

    /// Appends `text` to `out` as one frame.
    fn compress_into(&mut self, text: &[u8], out: &mut Vec<u8>) {
        let at = out.len();
        out.resize(at + zstd::zstd_safe::compress_bound(text.len()), 0);
        let written =
            self.0.compress_to_buffer(text, &mut out[at..]).expect("zstd compression into a bound-sized buffer");
        out.truncate(at + written);
    }
}

/// Without the `zstd` feature no compressor exists: a file store refuses the zstd format
/// before it encodes anything ([`super::scan::ZSTD_NOT_BUILT`]), so none is ever made.
#[cfg(not(feature = "zstd"))]
struct FrameCompressor;

#[cfg(not(feature = "zstd"))]
impl FrameCompressor {
    fn new() -> Self {
        panic!("{}: a file store refuses the zstd format before encoding", super::scan::ZSTD_NOT_BUILT)
    }

    fn compress_into(&mut self, _text: &[u8], _out: &mut Vec<u8>) {
        unreachable!("no FrameCompressor exists without the zstd feature")
    }
}

fn release_if_oversized(buffer: &mut Vec<u8>) {
    if buffer.capacity() > SCRATCH_BYTES_KEPT_MAX {
        *buffer = Vec::new();
    }
}

#[cfg(test)]
mod capacity_tests {
    use std::sync::Arc;

    use super::*;
    use crate::event::{Event, Message, Record, UserMessage};

    /// A batch's bytes are reserved at their exact size, not grown by doubling — also a batch
    /// above the scratch buffer's kept size, whose reservation nothing may release.
    #[test]
    fn a_batch_is_encoded_into_a_buffer_of_its_size() {
        let record = |seq| {
            let message = Message::user_text("y".repeat(2 << 20));
            Arc::new(EncodedRecord::new(Record::new(seq, 5, Event::UserMessage(UserMessage { message }))))
        };
        let batch: Vec<_> = (0..3).map(record).collect();
        let bytes: usize = batch.iter().map(|e| e.line.len() + 1).sum();
        let mut encoder = BatchEncoder::new(Format::Jsonl);
        assert_eq!(encoder.encode_accepted(&batch).unwrap().bytes.len(), bytes);
        assert_eq!(encoder.text.capacity(), bytes, "reserved once, at the batch's size");
    }
}
