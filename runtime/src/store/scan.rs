//! Scanners that turn a session file's bytes into its committed prefix, applying the
//! torn-versus-corrupt rule (FAILURE-JSONL-RAW-SCAN, FAILURE-JSONL-ZSTD-SCAN,
//! FAILURE-JSONL-PREFIX).
//!
//! A scan streams the file through a bounded buffer ([`SCAN_CHUNK_BYTES`], grown only to hold
//! one oversize line or frame): the records it commits go to a [`Keep`] policy as they are
//! validated, so inspecting a 1 GiB transcript holds one chunk and one turn, not the file. The
//! lines of a chunk (the frames of a zstd batch) are decoded on the [`Compute`] seam's cores;
//! everything that depends on order — seqs, the validator, the torn rule — runs after, in
//! order, on the caller's thread. Only a damaged tail is read whole, and only when it is small
//! enough to be one write unit (the torn rule's bound).

use std::io::{self, Read};

use serde::Serialize;

use super::limits::{torn_unit_bytes_max, RECORD_LINE_BYTES_MAX};
use super::zstd_frames::{walk_one, FrameEnd, FrameSpan};
use crate::event::{Event, HeaderError, Record, SessionHeader, Validator};
use crate::seams::{Compute, FsFile, Sequential};

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

/// Which committed records a scan hands back.
pub enum Keep<'a> {
    /// Every committed record, in [`Scan::records`].
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
    fn new(file_len: u64) -> Scan {
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

    fn refused(status: ScanStatus, offset: u64, reason: impl Into<String>, file_len: u64) -> Scan {
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
fn shrank() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the file shrank while it was scanned")
}

/// The bytes `[from, to)` of `source`, whole. A file that ends early is an I/O error: it
/// changed under the scan.
fn read_range(source: &mut dyn Source, from: u64, to: u64) -> io::Result<Vec<u8>> {
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
pub const SCAN_CHUNK_BYTES: usize = 4 * 1024 * 1024;

/// Why one line is not the next committed record.
enum LineIssue {
    /// Undecodable or out of sequence: torn unless a later `turn/end` proves otherwise.
    Suspect(String),
    /// Decodable and in sequence but breaks a log invariant: never crash-induced.
    Invalid(String),
}

/// Decodes one newline-stripped line (no order-dependent check: safe on any core).
fn decode_line(line: &[u8]) -> Result<Record, String> {
    check_line_len(line.len())?;
    Record::decode_bytes(line).map_err(|e| e.to_string())
}

fn check_line_len(bytes: usize) -> Result<(), String> {
    if bytes > RECORD_LINE_BYTES_MAX {
        return Err(format!("line of {bytes} bytes exceeds the {RECORD_LINE_BYTES_MAX}-byte limit"));
    }
    Ok(())
}

/// Decodes the lines `spans` (newline excluded) of `text`, in order. One UTF-8 check covers
/// them all and each line is then read as text (the JSON reader checks no string again);
/// where anything in them is not UTF-8, line by line (the bad line says so).
fn decode_lines(text: &[u8], spans: &[(usize, usize)]) -> Vec<Result<Record, String>> {
    let (Some(&(base, _)), Some(&(_, end))) = (spans.first(), spans.last()) else { return Vec::new() };
    match std::str::from_utf8(&text[base..end]) {
        // Every span starts after a newline and ends before one (ASCII): a char boundary.
        Ok(whole) => spans
            .iter()
            .map(|&(s, e)| {
                check_line_len(e - s)?;
                Record::decode(&whole[s - base..e - base]).map_err(|e| e.to_string())
            })
            .collect(),
        Err(_) => spans.iter().map(|&(s, e)| decode_line(&text[s..e])).collect(),
    }
}

/// The committed side of a scan: the validator, the keep policy and the last turn.
struct Committer<'k, 'v> {
    validator: Validator,
    keep: &'k mut Keep<'v>,
    kept: Vec<Record>,
    last_turn: Vec<Record>,
    last: Option<(u64, u64)>,
    count: u64,
}

impl<'k, 'v> Committer<'k, 'v> {
    fn new(keep: &'k mut Keep<'v>) -> Self {
        Committer { validator: Validator::new(), keep, kept: Vec::new(), last_turn: Vec::new(), last: None, count: 0 }
    }

    /// Room for `n` more kept records (a chunk's worth, so the kept list grows by chunks).
    fn reserve(&mut self, n: usize) {
        if matches!(self.keep, Keep::All | Keep::Conversation) {
            self.kept.reserve(n);
        }
    }

    /// Takes `record` as the next committed one, or says why it is not.
    fn commit(&mut self, record: Record) -> Result<(), LineIssue> {
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

    fn finish(self, scan: &mut Scan) {
        scan.validator = Some(self.validator);
        scan.records = self.kept;
        scan.last_turn = self.last_turn;
        scan.last = self.last;
        scan.record_count = self.count;
    }
}

/// Lines a decode job takes at least: below this, a thread costs more than it saves.
const LINES_PER_JOB_MIN: usize = 1024;

/// Decode parts per core when there is more than one: the commit of the batch before shares
/// the cores with them, and parts this fine let the cores even out (one part per core left
/// one core idle while the other finished the larger share; measured on the recovery mix).
const DECODE_PARTS_PER_CORE: usize = 4;

/// How many parts a batch's decoding is split into on `parallelism` cores.
fn decode_parts(parallelism: usize) -> usize {
    if parallelism > 1 {
        parallelism * DECODE_PARTS_PER_CORE
    } else {
        1
    }
}

/// A job for the [`Compute`] seam.
type Job<'a> = Box<dyn FnOnce() + Send + 'a>;

/// One job per part of `lines` (each `(start, end)` within `text`, newline excluded), each
/// decoding its part into its slot of `outputs` (results in order across the slots).
fn decode_jobs<'a>(
    text: &'a [u8],
    lines: &'a [(usize, usize)],
    parts: usize,
    outputs: &'a mut Vec<Vec<Result<Record, String>>>,
) -> Vec<Job<'a>> {
    let parts = parts.clamp(1, lines.len().div_ceil(LINES_PER_JOB_MIN).max(1));
    let per = lines.len().div_ceil(parts).max(1);
    *outputs = (0..lines.len().div_ceil(per)).map(|_| Vec::new()).collect();
    outputs
        .iter_mut()
        .zip(lines.chunks(per))
        .map(|(out, part)| Box::new(move || *out = decode_lines(text, part)) as Job<'a>)
        .collect()
}

/// A chunk's lines, decoded, waiting to be committed: where its text starts in the file, the
/// lines' spans in that text, the results in order.
struct DecodedChunk {
    at: u64,
    spans: Vec<(usize, usize)>,
    results: Vec<Vec<Result<Record, String>>>,
}

/// The first line of a chunk that is not the next committed record: its offset, where its
/// line ends, and why.
struct Damage {
    offset: u64,
    line_end: u64,
    issue: LineIssue,
}

/// Commits a decoded chunk's records in order, stopping at the first one that is not the next.
fn commit_chunk(committer: &mut Committer<'_, '_>, chunk: DecodedChunk) -> Option<Damage> {
    committer.reserve(chunk.spans.len());
    for (&(start, end), record) in chunk.spans.iter().zip(chunk.results.into_iter().flatten()) {
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
fn line_spans(text: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', text) {
        spans.push((start, end));
        start = end + 1;
    }
    spans
}

fn header_of(line: &[u8], file_len: u64) -> Result<SessionHeader, Box<Scan>> {
    let text = std::str::from_utf8(line)
        .map_err(|_| Box::new(Scan::refused(ScanStatus::Corrupt, 0, "session header is not UTF-8", file_len)))?;
    SessionHeader::decode(text).map_err(|e| {
        Box::new(match e {
            HeaderError::Unsupported { .. } => Scan::refused(ScanStatus::Unsupported, 0, e.to_string(), file_len),
            HeaderError::Malformed(_) => Scan::refused(ScanStatus::Corrupt, 0, e.to_string(), file_len),
        })
    })
}

/// Scans a plain `session.jsonl` held in memory, keeping every record.
pub fn scan_jsonl(bytes: &[u8]) -> Scan {
    scan_jsonl_from(&mut &*bytes, Keep::All, &Sequential).expect("bytes in memory cannot fail to read")
}

/// Scans a plain `session.jsonl` streamed from `source`.
pub(crate) fn scan_jsonl_from(source: &mut dyn Source, mut keep: Keep<'_>, compute: &dyn Compute) -> io::Result<Scan> {
    let file_len = source.len();
    let mut committer = Committer::new(&mut keep);
    // `buffer` holds the file from `buffer_at`; `used` bytes of it are read.
    let mut buffer = vec![0u8; SCAN_CHUNK_BYTES.min(usize::try_from(file_len).unwrap_or(usize::MAX)).max(1)];
    let (mut buffer_at, mut used) = (0u64, 0usize);
    let mut header: Option<SessionHeader> = None;
    let mut scan = Scan::new(file_len);
    let mut pending: Option<DecodedChunk> = None;
    loop {
        // Fill the buffer; grow it only when one line does not fit.
        if used == buffer.len() {
            let grown = (buffer.len() * 2).min(RECORD_LINE_BYTES_MAX + 2);
            if grown <= buffer.len() {
                // A line longer than any record may be, with no end in sight: damaged here.
                break;
            }
            buffer.resize(grown, 0);
        }
        let n = source.read_at(buffer_at + used as u64, &mut buffer[used..])?;
        used += n;
        // A source returns 0 bytes only at its end (a file that shrank is an error).
        let at_end = buffer_at + used as u64 >= file_len;
        let Some(last_newline) = memchr::memrchr(b'\n', &buffer[..used]) else {
            if at_end {
                break;
            }
            continue;
        };
        let text = &buffer[..=last_newline];
        let mut spans = line_spans(text);
        if header.is_none() {
            let (s, e) = spans[0];
            match header_of(&text[s..e], file_len) {
                Ok(h) => header = Some(h),
                Err(refused) => return Ok(*refused),
            }
            spans.remove(0);
            // The first chunk's lines say how many the file holds: grow the kept list once.
            let per_byte = spans.len() as f64 / text.len() as f64;
            committer.reserve((per_byte * file_len as f64 * 1.05) as usize);
        }
        // The previous chunk is committed (in order, one thread) while this one is decoded
        // (on the others): the order-dependent half of the work overlaps the parallel half.
        let mut results = Vec::new();
        let mut damage = None;
        {
            let mut jobs = decode_jobs(text, &spans, decode_parts(compute.parallelism()), &mut results);
            if let Some(chunk) = pending.take() {
                let (committer, damage) = (&mut committer, &mut damage);
                jobs.insert(0, Box::new(move || *damage = commit_chunk(committer, chunk)));
            }
            compute.run(jobs);
        }
        if let Some(Damage { offset, line_end, issue }) = damage {
            committer.finish(&mut scan);
            scan.header = header;
            damaged_jsonl(source, &mut scan, offset, line_end, issue)?;
            return Ok(scan);
        }
        pending = Some(DecodedChunk { at: buffer_at, spans, results });
        // Keep the unterminated rest for the next round.
        let consumed = last_newline + 1;
        buffer.copy_within(consumed..used, 0);
        buffer_at += consumed as u64;
        used -= consumed;
        if at_end && used == 0 {
            break;
        }
    }
    if let Some(Damage { offset, line_end, issue }) =
        pending.take().and_then(|chunk| commit_chunk(&mut committer, chunk))
    {
        committer.finish(&mut scan);
        scan.header = header;
        damaged_jsonl(source, &mut scan, offset, line_end, issue)?;
        return Ok(scan);
    }
    committer.finish(&mut scan);
    let committed = buffer_at;
    if header.is_none() {
        let reason =
            if file_len == 0 { "empty file: no session header" } else { "session header line is unterminated" };
        return Ok(Scan::refused(ScanStatus::Corrupt, 0, reason, file_len));
    }
    scan.header = header;
    scan.committed_len = committed;
    if committed < file_len {
        // The bytes after the last complete line: an unterminated final line is always torn
        // (however long); a line longer than any record with more after it is damage.
        match next_newline(source, committed + used as u64)? {
            None => scan.status = ScanStatus::Torn,
            Some(line_end) => {
                let reason = format!("line exceeds the {RECORD_LINE_BYTES_MAX}-byte limit");
                damaged_jsonl(source, &mut scan, committed, line_end, LineIssue::Suspect(reason))?;
            }
        }
    }
    Ok(scan)
}

/// The offset of the first newline at or after `from`, streaming.
fn next_newline(source: &mut dyn Source, from: u64) -> io::Result<Option<u64>> {
    let mut buffer = vec![0u8; SCAN_CHUNK_BYTES];
    let mut at = from;
    loop {
        let n = source.read_at(at, &mut buffer)?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(i) = memchr::memchr(b'\n', &buffer[..n]) {
            return Ok(Some(at + i as u64));
        }
        at += n as u64;
    }
}

/// The torn rule at the first line that is not the next committed record (FAILURE-JSONL-PREFIX):
/// a crash leaves at most an unterminated last line, a power loss a hole of zero bytes inside
/// the last write unit. Damage followed by anything else cannot be explained by either. A
/// turn/end after a hole lies in the same unacknowledged unit (the flush after it never
/// returned), so it proves nothing; after any other damage it is one more reason to refuse.
fn damaged_jsonl(
    source: &mut dyn Source,
    scan: &mut Scan,
    offset: u64,
    line_end: u64,
    issue: LineIssue,
) -> io::Result<()> {
    let file_len = scan.file_len;
    scan.committed_len = offset;
    let reason = match issue {
        LineIssue::Invalid(reason) => {
            scan.status = ScanStatus::Corrupt;
            scan.error = Some(ScanError { offset, reason });
            scan.committed_len = 0;
            return Ok(());
        }
        LineIssue::Suspect(reason) => reason,
    };
    let rest_len = file_len - offset;
    let is_last_line = line_end + 1 >= file_len;
    let (hole, turn_end, after) = if rest_len <= torn_unit_bytes_max(true) as u64 {
        // Small enough to be one write unit: read it whole and judge it.
        let rest = read_range(source, offset, file_len)?;
        let line_len = usize::try_from(line_end - offset).unwrap_or(rest.len()).min(rest.len());
        let after = complete_records(rest.get(line_len + 1..).unwrap_or_default());
        let turn_end = after.iter().find(|r| matches!(r.event, Event::TurnEnd(_))).map(|r| r.seq);
        (is_power_loss_hole(&rest, &rest[..line_len]), turn_end, after)
    } else {
        // Too large to be one write unit: corrupt; a later turn/end only words the refusal.
        (false, first_turn_end_after(source, line_end + 1)?, Vec::new())
    };
    let old_rule = crate::testing::bugs::planted("any-damage-is-torn") && turn_end.is_none();
    if hole || old_rule {
        scan.status = ScanStatus::Torn;
        scan.dropped = after;
    } else if let Some(turn_end_seq) = turn_end {
        scan.status = ScanStatus::Corrupt;
        let reason = format!("{reason}; a later committed turn/end (seq {turn_end_seq}) rules out a torn tail");
        scan.error = Some(ScanError { offset, reason });
    } else {
        scan.status = ScanStatus::Corrupt;
        let what = if is_last_line { "the last line" } else { "a line followed by complete records" };
        let reason = format!(
            "{reason}; {what} damaged without a hole of zero bytes inside the last write unit: not a torn write"
        );
        scan.error = Some(ScanError { offset, reason });
    }
    if scan.status == ScanStatus::Corrupt {
        scan.committed_len = 0;
    }
    Ok(())
}

/// The seq of the first complete line after `from` that decodes as a `turn/end`, streaming
/// the rest of the file through a bounded buffer.
fn first_turn_end_after(source: &mut dyn Source, from: u64) -> io::Result<Option<u64>> {
    let file_len = source.len();
    let mut buffer = vec![0u8; SCAN_CHUNK_BYTES];
    let (mut at, mut used) = (from, 0usize);
    while at < file_len {
        if used == buffer.len() {
            if buffer.len() > RECORD_LINE_BYTES_MAX {
                // An endless line: skip past it.
                at += used as u64;
                used = 0;
                continue;
            }
            buffer.resize(buffer.len() * 2, 0);
        }
        let n = source.read_at(at + used as u64, &mut buffer[used..])?;
        if n == 0 {
            break;
        }
        used += n;
        let Some(last) = memchr::memrchr(b'\n', &buffer[..used]) else { continue };
        if let Some(record) =
            complete_records(&buffer[..=last]).into_iter().find(|r| matches!(r.event, Event::TurnEnd(_)))
        {
            return Ok(Some(record.seq));
        }
        buffer.copy_within(last + 1..used, 0);
        at += last as u64 + 1;
        used -= last + 1;
    }
    Ok(None)
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
fn complete_records(rest: &[u8]) -> Vec<Record> {
    line_spans(rest).into_iter().filter_map(|(s, e)| decode_line(&rest[s..e]).ok()).collect()
}

/// Longest decompressed content accepted from one frame: the largest unit the writer makes,
/// one record of [`RECORD_LINE_BYTES_MAX`] and its newline (a unit of several records is at
/// most 1 MiB). Anything longer is garbage or a decompression bomb, and the bound is what a
/// hostile frame can make a scan allocate (per decoding core).
pub const FRAME_CONTENT_BYTES_MAX: u64 = RECORD_LINE_BYTES_MAX as u64 + 1;

/// A zstd decompression context kept for many frames: one per decoding job, not one per
/// frame (making one allocates ~100 KiB of workspace, fresh memory every time).
struct Inflater(zstd::zstd_safe::DCtx<'static>);

impl Inflater {
    fn new() -> Self {
        Inflater(zstd::zstd_safe::DCtx::create())
    }
}

/// The content of one complete frame. libzstd holds a frame to the content size its header
/// declares (more is "destination buffer too small", less a corruption at its end:
/// `zstd_a_frame_that_decodes_to_other_than_it_declares_is_corrupt`), which is what lets a
/// scan budget a batch's memory by the declared sizes.
fn decompress_frame(inflater: &mut Inflater, frame: &[u8]) -> io::Result<Vec<u8>> {
    // A frame that failed part-way leaves the context mid-frame: start each one clean.
    inflater
        .0
        .reset(zstd::zstd_safe::ResetDirective::SessionOnly)
        .map_err(|code| io::Error::other(zstd::zstd_safe::get_error_name(code)))?;
    let mut decoder = zstd::stream::read::Decoder::with_context(frame, &mut inflater.0).single_frame();
    let mut out = Vec::new();
    (&mut decoder).take(FRAME_CONTENT_BYTES_MAX + 1).read_to_end(&mut out)?;
    if out.len() as u64 > FRAME_CONTENT_BYTES_MAX {
        return Err(io::Error::other("frame content exceeds the size limit"));
    }
    Ok(out)
}

/// The memory a frame may take decoded, for a batch's budget: what its header declares, or
/// the most any frame may hold when it declares nothing.
fn frame_content_budget(frame: &FrameSpan) -> u64 {
    frame.content_bytes.map_or(FRAME_CONTENT_BYTES_MAX, |d| d.min(FRAME_CONTENT_BYTES_MAX))
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

/// The decoded content of one complete frame: its records, or why the frame is unusable
/// (`Err` of the frame text: checksum, decompression, newline) or where a line in it fails.
enum FrameContent {
    /// The frame's text is unusable (checksum, decompression, no final newline).
    Unusable(String),
    /// Its lines, decoded (each may have failed).
    Lines(Vec<Result<Record, String>>),
}

fn frame_content(bytes: &[u8], frame: &FrameSpan, inflater: &mut Inflater) -> FrameContent {
    match complete_frame_text(bytes, frame, inflater) {
        Err(reason) => FrameContent::Unusable(reason),
        Ok(text) => FrameContent::Lines(decode_lines(&text, &line_spans(&text))),
    }
}

/// Scans a `session.jsonl.zst` held in memory, keeping every record.
pub fn scan_zstd(bytes: &[u8]) -> Scan {
    scan_zstd_from(&mut &*bytes, Keep::All, &Sequential).expect("bytes in memory cannot fail to read")
}

/// How far a zstd scan looks ahead of the frame it commits: the frames of one batch, read and
/// decoded together (on several cores), bound its memory. Compressed bytes: 512 KiB holds
/// ~5 MiB of transcript text at the writer's ratio, and a batch this size keeps both cores
/// busy (the next batch decodes while this one is validated; at 4 MiB a 2.6 MB session was
/// one batch, decoded, then validated on one core: 1.4 CPUs used, 1.7 M events/s).
const ZSTD_BATCH_BYTES: u64 = SCAN_CHUNK_BYTES as u64 / 8;

/// The most content a batch of several frames decodes to (by their declared sizes; a frame
/// that declares none counts as the largest a frame may hold): a few KiB of hostile frames,
/// each expanding to megabytes of valid records, are decoded a budget at a time, not a
/// compressed batch at a time (512 KiB of them held ~100 frames of 16 MiB). The writer's
/// batches (~5 MiB of text) fit; a single frame forms a batch of its own, whatever its size.
const ZSTD_BATCH_CONTENT_BYTES_MAX: u64 = 2 * SCAN_CHUNK_BYTES as u64;

/// Scans a `session.jsonl.zst` streamed from `source`: frame 1 holds exactly the header line,
/// every later frame one durable write unit of complete lines, each with a content checksum.
pub(crate) fn scan_zstd_from(source: &mut dyn Source, mut keep: Keep<'_>, compute: &dyn Compute) -> io::Result<Scan> {
    let file_len = source.len();
    let mut scan = Scan::new(file_len);
    let mut committer = Committer::new(&mut keep);
    // The end of the last committed frame.
    let mut offset = 0u64;
    let mut walked = 0u64;
    let mut header_seen = false;
    // How the frame walk ended: torn at an offset, or corrupt at an offset with a reason.
    let mut torn_at: Option<u64> = None;
    let mut corrupt: Option<(u64, String)> = None;
    let mut salvage = true;
    let mut pending: Option<DecodedBatch> = None;
    loop {
        // Walk a batch of frames ahead (structure only), then read and decode them together
        // while the batch before is committed.
        let mut frames: Vec<FrameSpan> = Vec::new();
        let batch_start = walked;
        let mut batch_content = 0u64;
        while torn_at.is_none()
            && corrupt.is_none()
            && walked < file_len
            && (frames.is_empty() || walked - batch_start < ZSTD_BATCH_BYTES)
        {
            match walk_one(source, walked)? {
                // Over the batch's content budget: the next batch starts with it.
                FrameEnd::Complete(span)
                    if !frames.is_empty()
                        && batch_content + frame_content_budget(&span) > ZSTD_BATCH_CONTENT_BYTES_MAX =>
                {
                    break
                }
                // Larger than any unit the writer makes, compressed: refused before it is
                // read, so a hostile frame cannot make the scan hold it whole.
                FrameEnd::Complete(span) if (span.end - span.start) as u64 > zstd_unit_bytes_max() => {
                    let reason = format!(
                        "zstd frame of {} bytes is larger than any unit the writer makes ({} bytes)",
                        span.end - span.start,
                        zstd_unit_bytes_max()
                    );
                    corrupt = Some((walked, reason));
                }
                FrameEnd::Complete(span) => {
                    walked = span.end as u64;
                    batch_content += frame_content_budget(&span);
                    frames.push(span);
                }
                FrameEnd::Torn => torn_at = Some(walked),
                FrameEnd::Corrupt(at, reason) => {
                    // Zero bytes after the last complete frame, within one write unit of the
                    // end: the signature of a power loss inside the last unit, so a torn tail.
                    if (header_seen || !frames.is_empty()) && zstd_tail_is_hole(source, walked)? {
                        torn_at = Some(walked);
                    } else {
                        corrupt = Some((at as u64, reason));
                    }
                }
            }
        }
        let bytes = if frames.is_empty() { Vec::new() } else { read_range(source, batch_start, walked)? };
        let local: Vec<FrameSpan> = frames
            .iter()
            .map(|f| FrameSpan { start: f.start - batch_start as usize, end: f.end - batch_start as usize, ..*f })
            .collect();
        let mut contents: Vec<Vec<FrameContent>> = Vec::new();
        let mut stop = None;
        {
            let mut jobs = decode_frame_jobs(&bytes, &local, decode_parts(compute.parallelism()), &mut contents);
            if let Some(batch) = pending.take() {
                let (committer, stop, offset) = (&mut committer, &mut stop, &mut offset);
                jobs.insert(0, Box::new(move || *stop = commit_batch(committer, batch, offset)));
            }
            compute.run(jobs);
        }
        let mut contents: Vec<FrameContent> = contents.into_iter().flatten().collect();
        if let Some(stop) = stop {
            match zstd_stop(source, stop)? {
                Stopped::Refused(refused) => return Ok(*refused),
                Stopped::Hole(at) => {
                    torn_at = Some(at);
                    // Its checksum failed: nothing decoded from it can be vouched for.
                    salvage = false;
                    corrupt = None;
                    pending = None;
                    break;
                }
            }
        }
        if !header_seen && !frames.is_empty() {
            header_seen = true;
            let header = contents.remove(0);
            let frame = frames.remove(0);
            match header {
                FrameContent::Lines(lines) if lines.len() == 1 => {
                    let text = complete_frame_text(&bytes, &local[0], &mut Inflater::new()).expect("decoded above");
                    match header_of(&text[..text.len() - 1], file_len) {
                        Ok(header) => scan.header = Some(header),
                        Err(refused) => return Ok(*refused),
                    }
                }
                FrameContent::Lines(_) => {
                    return Ok(Scan::refused(
                        ScanStatus::Corrupt,
                        0,
                        "header frame must hold exactly one line",
                        file_len,
                    ))
                }
                FrameContent::Unusable(reason) => return Ok(Scan::refused(ScanStatus::Corrupt, 0, reason, file_len)),
            }
            offset = frame.end as u64;
        }
        if frames.is_empty() {
            break;
        }
        pending = Some(DecodedBatch { frames, contents });
    }
    if let Some(stop) = pending.take().and_then(|batch| commit_batch(&mut committer, batch, &mut offset)) {
        match zstd_stop(source, stop)? {
            Stopped::Refused(refused) => return Ok(*refused),
            Stopped::Hole(at) => {
                torn_at = Some(at);
                salvage = false;
                corrupt = None;
            }
        }
    }
    if !header_seen {
        let reason = corrupt.map_or_else(|| "no complete header frame".to_owned(), |(_, reason)| reason);
        return Ok(Scan::refused(ScanStatus::Corrupt, 0, reason, file_len));
    }
    committer.finish(&mut scan);
    scan.committed_len = offset;
    // A frame is one write unit: a complete, checksummed frame after the damage is a later
    // unit that was written whole, so the damage is not the last unit's (a flipped bit that
    // makes a frame swallow the next one looks torn to the walk, not to this).
    let corrupt = match (corrupt, torn_at) {
        (Some(corrupt), _) => Some(corrupt),
        (None, Some(at)) => complete_frame_after(source, at)?
            .map(|later| (at, format!("a complete frame at byte {later} follows the damaged one: not a torn write"))),
        (None, None) => None,
    };
    if let Some((at, reason)) = corrupt {
        scan.status = ScanStatus::Corrupt;
        scan.committed_len = 0;
        scan.error = Some(ScanError { offset: at, reason });
    } else if let Some(torn_at) = torn_at {
        scan.status = ScanStatus::Torn;
        // The torn frame lies in the last write unit (else it would be corrupt): bounded.
        let text = if salvage { decompress_prefix(&read_range(source, torn_at, file_len)?) } else { Vec::new() };
        let mut validator = scan.validator.clone().expect("a finished committer left its validator");
        for (s, e) in line_spans(&text) {
            let Ok(record) = decode_line(&text[s..e]) else { break };
            if record.seq != validator.next_seq() || validator.push_in_place(&record).is_err() {
                break;
            }
            scan.recovered.push(record);
        }
    }
    Ok(scan)
}

/// One job per part of `frames` (spans within `bytes`), each decompressing and decoding its
/// part into its slot of `outputs` (in order across the slots).
fn decode_frame_jobs<'a>(
    bytes: &'a [u8],
    frames: &'a [FrameSpan],
    parts: usize,
    outputs: &'a mut Vec<Vec<FrameContent>>,
) -> Vec<Job<'a>> {
    if frames.is_empty() {
        return Vec::new();
    }
    let per = frames.len().div_ceil(parts.clamp(1, frames.len()));
    *outputs = (0..frames.len().div_ceil(per)).map(|_| Vec::new()).collect();
    outputs
        .iter_mut()
        .zip(frames.chunks(per))
        .map(|(out, part)| {
            Box::new(move || {
                let mut inflater = Inflater::new();
                *out = part.iter().map(|f| frame_content(bytes, f, &mut inflater)).collect();
            }) as Job<'a>
        })
        .collect()
}

/// A batch of frames, decoded, waiting to be committed.
struct DecodedBatch {
    frames: Vec<FrameSpan>,
    contents: Vec<FrameContent>,
}

/// Why committing a batch stopped.
enum BatchStop {
    /// A frame's text is unusable (checksum, decompression): a power-loss hole, or corruption.
    Unusable(FrameSpan, String),
    /// A line inside a complete, checksummed frame is not the next record: corruption.
    BadLine(FrameSpan, String),
}

/// What a stop means for the scan.
enum Stopped {
    /// The file is refused.
    Refused(Box<Scan>),
    /// A power-loss hole in the last write unit starts at this frame: torn there.
    Hole(u64),
}

/// Commits a batch's records frame by frame, moving `offset` past each committed frame.
fn commit_batch(committer: &mut Committer<'_, '_>, batch: DecodedBatch, offset: &mut u64) -> Option<BatchStop> {
    for (frame, content) in batch.frames.into_iter().zip(batch.contents) {
        let lines = match content {
            FrameContent::Lines(lines) => lines,
            FrameContent::Unusable(reason) => return Some(BatchStop::Unusable(frame, reason)),
        };
        committer.reserve(lines.len());
        for (line_at, line) in lines.into_iter().enumerate() {
            let result = match line {
                Ok(record) => committer.commit(record),
                Err(reason) => Err(LineIssue::Suspect(reason)),
            };
            if let Err(LineIssue::Invalid(reason) | LineIssue::Suspect(reason)) = result {
                // A checksummed, complete frame cannot be torn: anything wrong inside is corruption.
                return Some(BatchStop::BadLine(frame, format!("{reason} (line {line_at} of the frame's content)")));
            }
        }
        *offset = frame.end as u64;
    }
    None
}

/// Judges a stop: a frame whose checksum fails is a torn tail only as a power-loss hole
/// inside the last write unit (and nothing after it is corrupt); anything else is refused.
fn zstd_stop(source: &mut dyn Source, stop: BatchStop) -> io::Result<Stopped> {
    let file_len = source.len();
    Ok(match stop {
        BatchStop::Unusable(frame, _)
            if zstd_rest_is_hole(source, frame.start as u64)? && walk_ends_torn_or_clean(source, frame.end as u64)? =>
        {
            Stopped::Hole(frame.start as u64)
        }
        BatchStop::Unusable(frame, reason) | BatchStop::BadLine(frame, reason) => {
            Stopped::Refused(Box::new(Scan::refused(ScanStatus::Corrupt, frame.start as u64, reason, file_len)))
        }
    })
}

/// The offset of the first complete, checksummed frame that starts after `from`, if any,
/// searching the rest of the file through a bounded buffer.
fn complete_frame_after(source: &mut dyn Source, from: u64) -> io::Result<Option<u64>> {
    const MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
    let file_len = source.len();
    let mut search = from + 1;
    let mut buffer = vec![0u8; SCAN_CHUNK_BYTES];
    while search < file_len {
        let n = source.read_at(search, &mut buffer)?;
        if n == 0 {
            break;
        }
        for i in memchr::memmem::find_iter(&buffer[..n], &MAGIC) {
            let start = search + i as u64;
            if let FrameEnd::Complete(frame) = walk_one(source, start)? {
                if frame.end as u64 - start <= zstd_unit_bytes_max() {
                    let bytes = read_range(source, start, frame.end as u64)?;
                    let local = FrameSpan { start: 0, end: bytes.len(), ..frame };
                    if complete_frame_text(&bytes, &local, &mut Inflater::new()).is_ok() {
                        return Ok(Some(start));
                    }
                }
            }
        }
        // Overlap by the magic's length less one, so a magic across the boundary is found.
        search += (n.saturating_sub(MAGIC.len() - 1)).max(1) as u64;
    }
    Ok(None)
}

/// Shortest run of zero bytes inside a zstd tail taken for a power-loss hole. Holes are whole
/// disk blocks (512 bytes and up); 64 zeros in a row do not occur in a frame zstd wrote.
const ZSTD_HOLE_ZERO_BYTES_MIN: usize = 64;

/// The disk sector a power loss loses whole, in bytes: zeros that start on one of its
/// boundaries and run to the end of the file are a lost last sector, however few the end of
/// the file leaves of it.
const POWER_LOSS_SECTOR_BYTES: u64 = 512;

/// The largest tail that can be one write unit's frame, and the largest frame a scan reads
/// to check it: one oversize record's unit, compressed.
fn zstd_unit_bytes_max() -> u64 {
    zstd::zstd_safe::compress_bound(torn_unit_bytes_max(true)) as u64
}

/// Whether the walk from `from` to the end finds no corruption (the frames complete, the last
/// one torn, or a power-loss hole after the last complete one): what the whole-file walk
/// would have concluded about the rest. Only called on a tail already bounded by one unit.
fn walk_ends_torn_or_clean(source: &mut dyn Source, from: u64) -> io::Result<bool> {
    let file_len = source.len();
    let mut at = from;
    while at < file_len {
        match walk_one(source, at)? {
            FrameEnd::Complete(frame) => at = frame.end as u64,
            FrameEnd::Torn => return Ok(true),
            // As the whole-file walk: bad bytes after the last complete frame are a torn tail
            // only as a power-loss hole.
            FrameEnd::Corrupt(..) => return zstd_tail_is_hole(source, at),
        }
    }
    Ok(true)
}

/// Whether the tail from `from` (the end of the last good frame) is a power-loss hole.
fn zstd_tail_is_hole(source: &mut dyn Source, from: u64) -> io::Result<bool> {
    zstd_rest_is_hole(source, from)
}

/// Whether everything from `from` to the end holds zero bytes and could be one write unit: at
/// most one oversize record's frame.
fn zstd_rest_is_hole(source: &mut dyn Source, from: u64) -> io::Result<bool> {
    let file_len = source.len();
    if file_len - from > zstd_unit_bytes_max() {
        return Ok(false);
    }
    Ok(is_zstd_power_loss_hole(&read_range(source, from, file_len)?, from))
}

/// Whether `tail` (which starts at byte `from` of the file) holds zero bytes and could be one
/// write unit.
fn is_zstd_power_loss_hole(tail: &[u8], from: u64) -> bool {
    // Compressed bytes hold stray zeros of their own; a hole is a run of them (or a tail of
    // nothing else), or zeros from a sector boundary to the end of the file: the write's last
    // sector lost, cut short by the end of the file (a frame's own bytes end in its checksum,
    // whose trailing zeros could start anywhere but a boundary only by chance).
    let zero_run = [0u8; ZSTD_HOLE_ZERO_BYTES_MIN];
    let trailing_zeros = tail.iter().rev().take_while(|&&b| b == 0).count();
    let zeros_from = from + (tail.len() - trailing_zeros) as u64;
    let lost_last_sector = trailing_zeros > 0 && zeros_from % POWER_LOSS_SECTOR_BYTES == 0;
    if !(tail.iter().all(|&b| b == 0) || lost_last_sector || memchr::memmem::find(tail, &zero_run).is_some()) {
        return false;
    }
    !crate::testing::bugs::planted("holes-are-corrupt") && tail.len() as u64 <= zstd_unit_bytes_max()
}

/// The decompressed content of a complete frame, which must carry a checksum and end in a
/// newline.
fn complete_frame_text(bytes: &[u8], frame: &FrameSpan, inflater: &mut Inflater) -> Result<Vec<u8>, String> {
    if !frame.has_checksum {
        return Err("zstd frame without a content checksum".into());
    }
    let text = decompress_frame(inflater, &bytes[frame.start..frame.end])
        .map_err(|e| format!("zstd frame does not decompress: {e}"))?;
    if text.last() != Some(&b'\n') {
        return Err("zstd frame content does not end in a newline".into());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::decode_parts;

    /// One core decodes a batch in one part (the simulator's `Sequential`: a part more is a
    /// zstd context more, nothing gained); several cores get more parts than cores, a whole
    /// number per core, so the commit of the batch before does not leave a core idle.
    #[test]
    fn one_part_on_one_core_and_several_per_core_otherwise() {
        assert_eq!(decode_parts(1), 1);
        for cores in 2..=crate::production::THREADS_MAX {
            let parts = decode_parts(cores);
            assert!(parts > cores && parts % cores == 0, "{cores} cores: {parts} parts");
        }
    }
}
