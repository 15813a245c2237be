//! The plain JSONL scanner: one record per line; a damaged last line is a torn tail, a
//! damaged line with a committed one after it is corruption.

use super::shared::*;

/// Scans a plain `session.jsonl` held in memory, keeping every record.
pub fn scan_jsonl(bytes: &[u8]) -> Scan {
    scan_jsonl_from(&mut &*bytes, Keep::All, &Sequential).expect("bytes in memory cannot fail to read")
}

/// Scans a plain `session.jsonl` streamed from `source`.
pub(crate) fn scan_jsonl_from(source: &mut dyn Source, mut keep: Keep<'_>, compute: &dyn Compute) -> io::Result<Scan> {
    let file_len = source.len();
    let mut committer = Committer::new(&mut keep);
    let mut lines = Lines::new(file_len);
    let mut header: Option<SessionHeader> = None;
    let mut scan = Scan::new(file_len);
    let mut pending: Option<DecodedChunk> = None;
    let mut recycled = Recycled::default();
    while let Some(last_newline) = lines.next(source)? {
        let text = &lines.buffer[..=last_newline];
        let Recycled { mut spans, mut results } = std::mem::take(&mut recycled);
        line_spans_into(text, &mut spans);
        if header.is_none() {
            match first_chunk_header(text, &mut spans, file_len, &mut committer) {
                Ok(h) => header = Some(h),
                Err(refused) => return Ok(*refused),
            }
        }
        // The previous chunk is committed (in order, one thread) while this one is decoded
        // (on the others): the order-dependent half of the work overlaps the parallel half.
        let mut damage = None;
        {
            let mut jobs = decode_jobs(text, &spans, decode_parts(compute.parallelism()), &mut results);
            if let Some(chunk) = pending.take() {
                let (committer, damage, recycled) = (&mut committer, &mut damage, &mut recycled);
                jobs.insert(0, Box::new(move || (*damage, *recycled) = commit_chunk(committer, chunk)));
            }
            compute.run(jobs);
        }
        if let Some(damage) = damage {
            return damaged_scan(source, committer, scan, header, damage);
        }
        pending = Some(DecodedChunk { at: lines.at, spans, results });
        if lines.consume(last_newline) {
            break;
        }
    }
    if let Some(damage) = pending.take().and_then(|chunk| commit_chunk(&mut committer, chunk).0) {
        return damaged_scan(source, committer, scan, header, damage);
    }
    committer.finish(&mut scan);
    let Some(header) = header else {
        let reason =
            if file_len == 0 { "empty file: no session header" } else { "session header line is unterminated" };
        return Ok(Scan::refused(ScanStatus::Corrupt, 0, reason, file_len));
    };
    scan.header = Some(header);
    unterminated_tail(source, &mut scan, lines.at, lines.used)?;
    Ok(scan)
}

/// The file from `at`, read in chunks of whole lines through one buffer (`used` bytes of it
/// read), grown only for a line that does not fit.
struct Lines {
    buffer: Vec<u8>,
    at: u64,
    used: usize,
    file_len: u64,
}

impl Lines {
    fn new(file_len: u64) -> Lines {
        let size = SCAN_CHUNK_BYTES.min(usize::try_from(file_len).unwrap_or(usize::MAX)).max(1);
        Lines { buffer: vec![0u8; size], at: 0, used: 0, file_len }
    }

    /// Reads until the buffer holds a whole line: the offset of its last newline; `None` at
    /// the end of the file, or at a line longer than any record may be, with no end in sight.
    fn next(&mut self, source: &mut dyn Source) -> io::Result<Option<usize>> {
        loop {
            if self.used == self.buffer.len() {
                let grown = (self.buffer.len() * 2).min(RECORD_LINE_BYTES_MAX + 2);
                if grown <= self.buffer.len() {
                    return Ok(None);
                }
                self.buffer.resize(grown, 0);
            }
            let n = source.read_at(self.at + self.used as u64, &mut self.buffer[self.used..])?;
            self.used += n;
            // A source returns 0 bytes only at its end (a file that shrank is an error).
            match memchr::memrchr(b'\n', &self.buffer[..self.used]) {
                Some(last_newline) => return Ok(Some(last_newline)),
                None if self.at_end() => return Ok(None),
                None => {}
            }
        }
    }

    /// Moves past the lines up to `last_newline`, keeping the unterminated rest for the next
    /// round: whether the file is read to its end.
    fn consume(&mut self, last_newline: usize) -> bool {
        let consumed = last_newline + 1;
        self.buffer.copy_within(consumed..self.used, 0);
        self.at += consumed as u64;
        self.used -= consumed;
        self.at_end() && self.used == 0
    }

    fn at_end(&self) -> bool {
        self.at + self.used as u64 >= self.file_len
    }
}

/// The header of the file's first chunk (its first line, taken out of `spans`), or the
/// refusal; the committer grown once for as many lines as the first chunk says the file holds.
fn first_chunk_header(
    text: &[u8],
    spans: &mut Vec<(usize, usize)>,
    file_len: u64,
    committer: &mut Committer<'_, '_>,
) -> Result<SessionHeader, Box<Scan>> {
    let (s, e) = spans[0];
    let header = header_of(&text[s..e], file_len)?;
    spans.remove(0);
    let per_byte = spans.len() as f64 / text.len() as f64;
    committer.reserve((per_byte * file_len as f64 * 1.05) as usize);
    Ok(header)
}

/// The scan of a file damaged at `damage`: what was committed before it, then the torn rule.
fn damaged_scan(
    source: &mut dyn Source,
    committer: Committer<'_, '_>,
    mut scan: Scan,
    header: Option<SessionHeader>,
    Damage { offset, line_end, issue }: Damage,
) -> io::Result<Scan> {
    committer.finish(&mut scan);
    scan.header = header;
    damaged_jsonl(source, &mut scan, offset, line_end, issue)?;
    Ok(scan)
}

/// The bytes after the last complete line (from `committed`, of which `read` are read): an
/// unterminated final line is always torn (however long); a line longer than any record with
/// more after it is damage.
fn unterminated_tail(source: &mut dyn Source, scan: &mut Scan, committed: u64, read: usize) -> io::Result<()> {
    scan.committed_len = committed;
    if committed < scan.file_len {
        match next_newline(source, committed + read as u64)? {
            None => scan.status = ScanStatus::Torn,
            Some(line_end) => {
                let reason = format!("line exceeds the {RECORD_LINE_BYTES_MAX}-byte limit");
                damaged_jsonl(source, scan, committed, line_end, LineIssue::Suspect(reason))?;
            }
        }
    }
    Ok(())
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
