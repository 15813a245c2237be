//! What the JSONL and zstd readers share: the scan's result, its keep policy, and the
//! parallel line decoder and committer that run each chunk in order.

pub(super) use std::io;

pub(super) use serde::Serialize;

pub(super) use crate::event::{Event, HeaderError, Record, SessionHeader, Validator};
pub(super) use crate::seams::{Compute, FsFile, Sequential};
pub(super) use crate::store::limits::{torn_unit_bytes_max, RECORD_LINE_BYTES_MAX};

pub(crate) use crate::store::source::Source;

/// Why this build refuses a `.jsonl.zst` session: it was compiled without the `zstd` feature.
pub(crate) const ZSTD_NOT_BUILT: &str = "the zstd format needs the `zstd` cargo feature, which this build lacks";

/// What a scan concluded about the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
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

/// Which committed records a scan hands back.
pub enum Keep<'a> {
    /// Every committed record, in the scan's `records`.
    All,
    /// Every committed record but the assistant chunks that carry no usage (what a resumed
    /// agent's next request and token count are built from: the chunks of a long session are
    /// most of its records).
    Conversation,
    /// None: each record is shown to `visit` in order and dropped (a bounded-memory reader:
    /// `transcript cat`, `report`).
    Visit(&'a mut (dyn FnMut(&Record) + Send)),
}

impl std::fmt::Debug for Keep<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Keep::All => "Keep::All",
            Keep::Conversation => "Keep::Conversation",
            Keep::Visit(_) => "Keep::Visit",
        })
    }
}

/// The committed prefix of a session file and what follows it.
#[derive(Debug, Clone)]
pub struct Scan {
    /// Overall verdict.
    pub status: ScanStatus,
    /// The session header, when readable.
    pub header: Option<SessionHeader>,
    /// The committed records the [`Keep`] policy kept, in order.
    pub records: Vec<Record>,
    /// How many records the committed prefix holds (kept or not).
    pub record_count: u64,
    /// The committed records from the last `turn/start` on, chunks left out (what repair
    /// looks at), when the keep policy did not keep them all.
    pub(crate) last_turn: Vec<Record>,
    /// Seq and time of the last committed record.
    pub(crate) last: Option<(u64, u64)>,
    /// The validator after the committed prefix: a writer continues from it without
    /// reading the session again (`None` when the records were not validated here).
    pub(crate) validator: Option<Validator>,
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
    pub(super) fn new(file_len: u64) -> Scan {
        Scan {
            status: ScanStatus::Clean,
            header: None,
            records: Vec::new(),
            record_count: 0,
            last_turn: Vec::new(),
            last: None,
            validator: None,
            committed_len: 0,
            file_len,
            recovered: Vec::new(),
            error: None,
            dropped: Vec::new(),
        }
    }

    /// The scan of a store that cannot tear (memory): its committed records, as they are.
    pub(crate) fn of_records(header: SessionHeader, records: Vec<Record>) -> Scan {
        Scan {
            header: Some(header),
            record_count: records.len() as u64,
            last: records.last().map(|r| (r.seq, r.time)),
            records,
            ..Scan::new(0)
        }
    }

    pub(super) fn refused(status: ScanStatus, offset: u64, reason: impl Into<String>, file_len: u64) -> Scan {
        Scan { status, error: Some(ScanError { offset, reason: reason.into() }), ..Scan::new(file_len) }
    }

    /// Bytes after the committed prefix.
    pub fn torn_bytes(&self) -> u64 {
        match self.status {
            ScanStatus::Torn => self.file_len - self.committed_len,
            _ => 0,
        }
    }

    /// The committed records from the last `turn/start` on plus the salvaged ones (chunks
    /// possibly left out), and the seq and time of the last of them: what repair looks at.
    pub(crate) fn tail_turn(&self) -> (Vec<Record>, Option<(u64, u64)>) {
        let is_turn_start = |r: &Record| matches!(r.event, Event::TurnStart(_));
        let last = self.recovered.last().map(|r| (r.seq, r.time)).or(self.last);
        if let Some(i) = self.recovered.iter().rposition(is_turn_start) {
            return (self.recovered[i..].to_vec(), last);
        }
        let committed: &[Record] = if self.last_turn.is_empty() {
            let from = self.records.iter().rposition(is_turn_start).unwrap_or(self.records.len());
            &self.records[from..]
        } else {
            &self.last_turn
        };
        (committed.iter().chain(&self.recovered).cloned().collect(), last)
    }
}

/// A file opened through the `Fs` seam, its length fixed when the scan starts.
pub(crate) struct FileSource {
    pub(crate) file: Box<dyn FsFile>,
    pub(crate) len: u64,
}

impl Source for FileSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.len.saturating_sub(offset);
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.file.read_at(offset, &mut buf[..want])?;
        if n == 0 && want > 0 {
            // The length was fixed when the scan started; a file that ends before it was cut
            // under the scan (a repair truncating its tail), and no verdict about the bytes
            // it no longer has would be true. Every reader of a source sees this one error.
            return Err(shrank());
        }
        Ok(n)
    }
}

/// The error of a file that ends before the length its scan started with.
pub(super) fn shrank() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the file shrank while it was scanned")
}

/// The bytes `[from, to)` of `source`, whole. A file that ends early is an I/O error: it
/// changed under the scan.
pub(super) fn read_range(source: &mut dyn Source, from: u64, to: u64) -> io::Result<Vec<u8>> {
    let mut out = vec![0u8; usize::try_from(to - from).map_err(|_| io::Error::other("range too large"))?];
    let mut at = 0;
    while at < out.len() {
        let n = source.read_at(from + at as u64, &mut out[at..])?;
        if n == 0 {
            return Err(shrank());
        }
        at += n;
    }
    Ok(out)
}

/// Bytes a scan reads at a time; with the records decoded from them, the bulk of a scan's
/// memory (a line or frame larger than this grows the buffer to hold it, no further).
///
/// 1 MiB, not the 4 MiB it was: a round's text, spans and decoded records are a quarter as
/// much fresh memory, which matters most on a machine another process just churned (a huge
/// page faulted in there may compact memory first). `transcript inspect` of the 100 000-event
/// mix right after the reference harness's Node run: 0.059 → 0.037 s median of the first run,
/// 0.042 → 0.032 s of the later ones; on a quiet machine 0.032 → 0.029 s. 512 KiB was no
/// better (0.030 s). The zstd scan's batch bounds are its own (`scan/zstd.rs`).
pub const SCAN_CHUNK_BYTES: usize = 1024 * 1024;

/// Why one line is not the next committed record.
pub(super) enum LineIssue {
    /// Undecodable or out of sequence: torn unless a later `turn/end` proves otherwise.
    Suspect(String),
    /// Decodable and in sequence but breaks a log invariant: never crash-induced.
    Invalid(String),
}

/// Decodes one newline-stripped line (no order-dependent check: safe on any core).
pub(super) fn decode_line(line: &[u8]) -> Result<Record, String> {
    check_line_len(line.len())?;
    Record::decode_bytes(line).map_err(|e| e.to_string())
}

pub(super) fn check_line_len(bytes: usize) -> Result<(), String> {
    if bytes > RECORD_LINE_BYTES_MAX {
        return Err(format!("line of {bytes} bytes exceeds the {RECORD_LINE_BYTES_MAX}-byte limit"));
    }
    Ok(())
}

/// Decodes the lines `spans` (newline excluded) of `text`, in order. One UTF-8 check covers
/// them all and each line is then read as text (neither the JSON reader nor the delta reader
/// checks a string again); where anything in them is not UTF-8, line by line (the bad line
/// says so). The results replace what `out` held; its room is kept (see [`Recycled`]).
pub(super) fn decode_lines(text: &[u8], spans: &[(usize, usize)], out: &mut Vec<Result<Record, String>>) {
    out.clear();
    let (Some(&(base, _)), Some(&(_, end))) = (spans.first(), spans.last()) else { return };
    out.reserve(spans.len());
    match std::str::from_utf8(&text[base..end]) {
        // Every span starts after a newline and ends before one (ASCII): a char boundary.
        Ok(whole) => out.extend(spans.iter().map(|&(s, e)| {
            check_line_len(e - s)?;
            Record::decode(&whole[s - base..e - base]).map_err(|e| e.to_string())
        })),
        Err(_) => out.extend(spans.iter().map(|&(s, e)| decode_line(&text[s..e]))),
    }
}

/// The committed side of a scan: the validator, the keep policy and the last turn.
pub(super) struct Committer<'k, 'v> {
    validator: Validator,
    keep: &'k mut Keep<'v>,
    kept: Vec<Record>,
    last_turn: Vec<Record>,
    last: Option<(u64, u64)>,
    count: u64,
}

impl<'k, 'v> Committer<'k, 'v> {
    pub(super) fn new(keep: &'k mut Keep<'v>) -> Self {
        Committer { validator: Validator::new(), keep, kept: Vec::new(), last_turn: Vec::new(), last: None, count: 0 }
    }

    /// Room for `n` more kept records (a chunk's worth, so the kept list grows by chunks).
    pub(super) fn reserve(&mut self, n: usize) {
        if matches!(self.keep, Keep::All | Keep::Conversation) {
            self.kept.reserve(n);
        }
    }

    /// Takes `record` as the next committed one, or says why it is not.
    pub(super) fn commit(&mut self, record: Record) -> Result<(), LineIssue> {
        if record.seq != self.validator.next_seq() {
            return Err(LineIssue::Suspect(format!(
                "seq {} where {} was expected",
                record.seq,
                self.validator.next_seq()
            )));
        }
        // A violation ends the scan (corrupt), so the validator need not survive it unchanged.
        self.validator
            .push_in_place(&record)
            .map_err(|v| LineIssue::Invalid(format!("log invariant violated: {v}")))?;
        self.count += 1;
        self.last = Some((record.seq, record.time));
        let chunk = matches!(record.event, Event::AssistantChunk(_));
        match self.keep {
            Keep::All => self.kept.push(record),
            Keep::Conversation => {
                // Usage chunks stay: a resumed session still counts its tokens.
                let usage = matches!(&record.event, Event::AssistantChunk(c) if matches!(c.chunk, crate::event::Chunk::Usage { .. }));
                if !chunk || usage {
                    self.kept.push(record);
                }
            }
            Keep::Visit(visit) => {
                visit(&record);
                // Nothing is kept: hold the current turn (chunks aside) for repair.
                if matches!(record.event, Event::TurnStart(_)) {
                    self.last_turn.clear();
                }
                if !chunk {
                    self.last_turn.push(record);
                }
            }
        }
        Ok(())
    }

    pub(super) fn finish(self, scan: &mut Scan) {
        scan.validator = Some(self.validator);
        scan.records = self.kept;
        scan.last_turn = self.last_turn;
        scan.last = self.last;
        scan.record_count = self.count;
    }
}

/// Text a decode job takes at least: below this, handing it to a thread costs more than it
/// saves (it decodes in ~100 µs). Counted in bytes, not lines: 1 024 lines, the bound before,
/// were 160 KiB of streamed deltas but a whole 1 MiB chunk of long messages, which then
/// decoded on one core.
pub(super) const TEXT_BYTES_PER_JOB_MIN: usize = 32 * 1024;

/// Decode parts per core when there is more than one: the commit of the batch before shares
/// the cores with them, and parts this fine let the cores even out (one part per core left
/// one core idle while the other finished the larger share; measured on the recovery mix).
pub(super) const DECODE_PARTS_PER_CORE: usize = 4;

/// How many parts a batch's decoding is split into on `parallelism` cores.
pub(super) fn decode_parts(parallelism: usize) -> usize {
    if parallelism > 1 {
        parallelism * DECODE_PARTS_PER_CORE
    } else {
        1
    }
}

/// A job for the [`Compute`] seam.
pub(super) type Job<'a> = Box<dyn FnOnce() + Send + 'a>;

/// One job per part of `lines` (each `(start, end)` within `text`, newline excluded), each
/// decoding its part into its slot of `outputs` (results in order across the slots; the
/// slots already there are reused, room and all).
pub(super) fn decode_jobs<'a>(
    text: &'a [u8],
    lines: &'a [(usize, usize)],
    parts: usize,
    outputs: &'a mut Vec<Vec<Result<Record, String>>>,
) -> Vec<Job<'a>> {
    let text_bytes = match (lines.first(), lines.last()) {
        (Some(&(start, _)), Some(&(_, end))) => end - start,
        _ => 0,
    };
    let parts = parts.clamp(1, (text_bytes / TEXT_BYTES_PER_JOB_MIN).max(1));
    let per = lines.len().div_ceil(parts).max(1);
    outputs.resize_with(lines.len().div_ceil(per), Vec::new);
    outputs
        .iter_mut()
        .zip(lines.chunks(per))
        .map(|(out, part)| Box::new(move || decode_lines(text, part, out)) as Job<'a>)
        .collect()
}

/// A chunk's lines, decoded, waiting to be committed: where its text starts in the file, the
/// lines' spans in that text, the results in order.
pub(super) struct DecodedChunk {
    pub(super) at: u64,
    pub(super) spans: Vec<(usize, usize)>,
    pub(super) results: Vec<Vec<Result<Record, String>>>,
}

/// The first line of a chunk that is not the next committed record: its offset, where its
/// line ends, and why.
pub(super) struct Damage {
    pub(super) offset: u64,
    pub(super) line_end: u64,
    pub(super) issue: LineIssue,
}

/// The buffers of a committed chunk, emptied with their room kept, for the next chunk.
///
/// A chunk's decoded records and spans are a few hundred kilobytes. Made afresh per chunk,
/// on a decode thread that is itself new per chunk (its allocator heap empty), they were fresh
/// pages each time, which the kernel zeroes on first touch. Reused, a quiet JSONL inspect of
/// the 100 000-event mix went from 27–31 to 25 ms, and the in-process bench's JSONL recovery
/// from 1.03 to 1.18 of a typed decode.
#[derive(Default)]
pub(super) struct Recycled {
    pub(super) spans: Vec<(usize, usize)>,
    pub(super) results: Vec<Vec<Result<Record, String>>>,
}

/// Commits a decoded chunk's records in order, stopping at the first one that is not the
/// next; hands back its buffers (the next chunk's decode clears them before use).
pub(super) fn commit_chunk(committer: &mut Committer<'_, '_>, mut chunk: DecodedChunk) -> (Option<Damage>, Recycled) {
    let damage = commit_records(committer, &mut chunk);
    (damage, Recycled { spans: chunk.spans, results: chunk.results })
}

pub(super) fn commit_records(committer: &mut Committer<'_, '_>, chunk: &mut DecodedChunk) -> Option<Damage> {
    committer.reserve(chunk.spans.len());
    for (&(start, end), record) in chunk.spans.iter().zip(chunk.results.iter_mut().flat_map(|r| r.drain(..))) {
        let issue = match record {
            Ok(record) => match committer.commit(record) {
                Ok(()) => continue,
                Err(issue) => issue,
            },
            Err(reason) => LineIssue::Suspect(reason),
        };
        return Some(Damage { offset: chunk.at + start as u64, line_end: chunk.at + end as u64, issue });
    }
    None
}

/// The `(start, end)` of each newline-terminated line of `text`, newline excluded.
///
/// Counted first and allocated once: grown by doubling, a chunk's spans were a dozen
/// reallocations into fresh memory, and with mimalloc's huge pages each fresh 2 MiB page
/// faulted in may compact memory synchronously (a tenth of `transcript inspect` on a machine
/// another process had just churned). The count is one more pass of a vectorised search.
pub(super) fn line_spans(text: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    line_spans_into(text, &mut spans);
    spans
}

/// [`line_spans`] into `spans` (cleared; its room reused, grown at most once).
pub(super) fn line_spans_into(text: &[u8], spans: &mut Vec<(usize, usize)>) {
    spans.clear();
    spans.reserve_exact(memchr::memchr_iter(b'\n', text).count());
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', text) {
        spans.push((start, end));
        start = end + 1;
    }
}

pub(super) fn header_of(line: &[u8], file_len: u64) -> Result<SessionHeader, Box<Scan>> {
    let text = std::str::from_utf8(line)
        .map_err(|_| Box::new(Scan::refused(ScanStatus::Corrupt, 0, "session header is not UTF-8", file_len)))?;
    SessionHeader::decode(text).map_err(|e| {
        Box::new(match e {
            HeaderError::Unsupported { .. } => Scan::refused(ScanStatus::Unsupported, 0, e.to_string(), file_len),
            HeaderError::Malformed(_) => Scan::refused(ScanStatus::Corrupt, 0, e.to_string(), file_len),
        })
    })
}

/// Without the `zstd` feature a `.jsonl.zst` file is a format this build does not read: it is
/// refused as unsupported, never guessed at (and never repaired).
#[cfg(not(feature = "zstd"))]
pub fn scan_zstd(bytes: &[u8]) -> Scan {
    without_zstd(bytes.len() as u64)
}

#[cfg(not(feature = "zstd"))]
pub(crate) fn scan_zstd_from(source: &mut dyn Source, _keep: Keep<'_>, _compute: &dyn Compute) -> io::Result<Scan> {
    Ok(without_zstd(source.len()))
}

#[cfg(not(feature = "zstd"))]
pub(super) fn without_zstd(file_len: u64) -> Scan {
    Scan::refused(ScanStatus::Unsupported, 0, ZSTD_NOT_BUILT, file_len)
}

/// Longest decompressed content accepted from one frame: the largest unit the writer makes,
/// one record of [`RECORD_LINE_BYTES_MAX`] and its newline (a unit of several records is at
/// most 1 MiB). Anything longer is garbage or a decompression bomb, and the bound is what a
/// hostile frame can make a scan allocate (per decoding core).
pub const FRAME_CONTENT_BYTES_MAX: u64 = RECORD_LINE_BYTES_MAX as u64 + 1;

#[cfg(test)]
mod tests {
    use super::{decode_jobs, decode_parts, line_spans, TEXT_BYTES_PER_JOB_MIN};

    /// One core decodes a batch in one part (the simulator's `Sequential`: a part more is a
    /// zstd context more, nothing gained); several cores get more parts than cores, a whole
    /// number per core, so the commit of the batch before does not leave a core idle.
    #[test]
    pub(super) fn one_part_on_one_core_and_several_per_core_otherwise() {
        assert_eq!(decode_parts(1), 1);
        for cores in 2..=crate::production::THREADS_MAX {
            let parts = decode_parts(cores);
            assert!(parts > cores && parts % cores == 0, "{cores} cores: {parts} parts");
        }
    }

    /// A chunk's spans are one allocation of exactly its lines (grown by doubling, 1 000 lines
    /// would sit in a 1 024-span buffer after ten reallocations).
    #[test]
    pub(super) fn line_spans_are_allocated_once_at_their_count() {
        let text = "{}\n".repeat(1_000);
        let spans = line_spans(text.as_bytes());
        assert_eq!(spans.len(), 1_000);
        assert_eq!(spans.capacity(), 1_000, "sized from the count, not grown");
        assert_eq!((spans[0], spans[999]), ((0, 2), (2_997, 2_999)));
        assert!(line_spans(b"no newline").is_empty());
    }

    /// A chunk is split by its bytes: a chunk of a thousand 1 KiB lines is as many parts as a
    /// chunk of ten thousand short ones (by a line count it was one part, one core), and a
    /// chunk smaller than one job's worth is one part.
    #[test]
    pub(super) fn a_chunk_of_long_lines_is_decoded_in_as_many_parts() {
        let parts_of = |line_bytes: usize, lines: usize| {
            let text = format!("{}\n", "x".repeat(line_bytes - 1)).repeat(lines);
            let spans = line_spans(text.as_bytes());
            let mut outputs = Vec::new();
            let jobs = decode_jobs(text.as_bytes(), &spans, decode_parts(2), &mut outputs).len();
            jobs
        };
        assert_eq!(parts_of(1024, 1_000), decode_parts(2));
        assert_eq!(parts_of(100, 10_000), decode_parts(2));
        assert_eq!(parts_of(100, TEXT_BYTES_PER_JOB_MIN / 100), 1);
    }

    /// Measured from the first line the job takes, not from the start of the chunk: 30 000
    /// bytes of lines after a megabyte of others are still one job.
    #[test]
    pub(super) fn a_little_text_late_in_a_chunk_is_decoded_in_one_part() {
        let text = format!("{}\n{}", "y".repeat(1 << 20), format!("{}\n", "x".repeat(99)).repeat(300));
        let spans = line_spans(text.as_bytes());
        let mut outputs = Vec::new();
        let jobs = decode_jobs(text.as_bytes(), &spans[1..], decode_parts(2), &mut outputs).len();
        assert_eq!(jobs, 1);
        assert_eq!(outputs.len(), 1);
    }
}
