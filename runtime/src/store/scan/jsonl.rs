//! The plain JSONL scanner: one record per line; a damaged last line is a torn tail, a
//! damaged line with a committed one after it is corruption.

use super::*;

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
    let mut recycled = Recycled::default();
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
        let Recycled { mut spans, mut results } = std::mem::take(&mut recycled);
        line_spans_into(text, &mut spans);
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
        let mut damage = None;
        {
            let mut jobs = decode_jobs(text, &spans, decode_parts(compute.parallelism()), &mut results);
            if let Some(chunk) = pending.take() {
                let (committer, damage, recycled) = (&mut committer, &mut damage, &mut recycled);
                jobs.insert(0, Box::new(move || (*damage, *recycled) = commit_chunk(committer, chunk)));
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
        pending.take().and_then(|chunk| commit_chunk(&mut committer, chunk).0)
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
