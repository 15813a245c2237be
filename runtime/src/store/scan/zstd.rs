//! The JSONL+zstd scanner: one checksummed frame per durable batch; a frame a crash cut short
//! (or a power-loss hole of zeros) is a torn tail, a damaged frame with a complete one after it
//! is corruption.

use std::io::Read;

use super::shared::*;
use crate::store::zstd_frames::{walk_one, FrameEnd, FrameSpan};

/// A zstd decompression context kept for many frames: one per decoding job, not one per
/// frame (making one allocates ~100 KiB of workspace, fresh memory every time).
struct Inflater(::zstd::zstd_safe::DCtx<'static>);

impl Inflater {
    fn new() -> Self {
        Inflater(::zstd::zstd_safe::DCtx::create())
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
        .reset(::zstd::zstd_safe::ResetDirective::SessionOnly)
        .map_err(|code| io::Error::other(::zstd::zstd_safe::get_error_name(code)))?;
    let mut decoder = ::zstd::stream::read::Decoder::with_context(frame, &mut inflater.0).single_frame();
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
    let Ok(decoder) = ::zstd::stream::read::Decoder::with_buffer(frame) else { return out };
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
        Ok(text) => {
            let mut lines = Vec::new();
            decode_lines(&text, &line_spans(&text), &mut lines);
            FrameContent::Lines(lines)
        }
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
const ZSTD_BATCH_BYTES: u64 = 512 * 1024;

/// The most content a batch of several frames decodes to (by their declared sizes; a frame
/// that declares none counts as the largest a frame may hold): a few KiB of hostile frames,
/// each expanding to megabytes of valid records, are decoded a budget at a time, not a
/// compressed batch at a time (512 KiB of them held ~100 frames of 16 MiB). The writer's
/// batches (~5 MiB of text) fit; a single frame forms a batch of its own, whatever its size.
const ZSTD_BATCH_CONTENT_BYTES_MAX: u64 = 8 * 1024 * 1024;

/// Walks one batch of frames from `*walked` (structure only, nothing decoded): up to
/// [`ZSTD_BATCH_BYTES`] compressed and [`ZSTD_BATCH_CONTENT_BYTES_MAX`] of declared content,
/// ending early at a torn frame (`torn_at`) or a corrupt one (`corrupt`, with its reason).
fn walk_batch(
    source: &mut dyn Source,
    walked: &mut u64,
    header_seen: bool,
    torn_at: &mut Option<u64>,
    corrupt: &mut Option<(u64, String)>,
) -> io::Result<Vec<FrameSpan>> {
    let mut frames: Vec<FrameSpan> = Vec::new();
    let batch_start = *walked;
    let file_len = source.len();
    let mut batch_content = 0u64;
    while torn_at.is_none()
        && corrupt.is_none()
        && *walked < file_len
        && (frames.is_empty() || *walked - batch_start < ZSTD_BATCH_BYTES)
    {
        match walk_one(source, *walked)? {
            // Over the batch's content budget: the next batch starts with it.
            FrameEnd::Complete(span)
                if !frames.is_empty() && batch_content + frame_content_budget(&span) > ZSTD_BATCH_CONTENT_BYTES_MAX =>
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
                *corrupt = Some((*walked, reason));
            }
            FrameEnd::Complete(span) => {
                *walked = span.end as u64;
                batch_content += frame_content_budget(&span);
                frames.push(span);
            }
            FrameEnd::Torn => *torn_at = Some(*walked),
            FrameEnd::Corrupt(at, reason) => {
                // Zero bytes where the walk broke, within one write unit of the end: the
                // signature of a power loss inside the last unit, so a torn tail.
                if (header_seen || !frames.is_empty()) && hole_explains(source, *walked, structural_damage_end(at))? {
                    *torn_at = Some(*walked);
                } else {
                    *corrupt = Some((at as u64, reason));
                }
            }
        }
    }
    Ok(frames)
}

/// Reads the header frame into `scan`: exactly one line, a valid header; else the refusal.
fn header_frame(
    scan: &mut Scan,
    header: FrameContent,
    bytes: &[u8],
    span: &FrameSpan,
    file_len: u64,
) -> Result<(), Box<Scan>> {
    match header {
        FrameContent::Lines(lines) if lines.len() == 1 => {
            let text = complete_frame_text(bytes, span, &mut Inflater::new()).expect("decoded above");
            scan.header = Some(header_of(&text[..text.len() - 1], file_len)?);
            Ok(())
        }
        FrameContent::Lines(_) => {
            Err(Box::new(Scan::refused(ScanStatus::Corrupt, 0, "header frame must hold exactly one line", file_len)))
        }
        FrameContent::Unusable(reason) => Err(Box::new(Scan::refused(ScanStatus::Corrupt, 0, reason, file_len))),
    }
}

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
        let batch_start = walked;
        let mut frames = walk_batch(source, &mut walked, header_seen, &mut torn_at, &mut corrupt)?;
        let (bytes, local) = read_batch(source, &frames, batch_start, walked)?;
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
            let (header, frame) = (contents.remove(0), frames.remove(0));
            match header_frame(&mut scan, header, &bytes, &local[0], file_len) {
                Ok(()) => offset = frame.end as u64,
                Err(refused) => return Ok(*refused),
            }
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
    judge_tail(source, &mut scan, torn_at, corrupt, salvage)?;
    Ok(scan)
}

/// The verdict on where the frame walk or the commit stopped (`torn_at`, or `corrupt` with its
/// reason), and what a torn frame yields when its content can be vouched for (`salvage`).
fn judge_tail(
    source: &mut dyn Source,
    scan: &mut Scan,
    torn_at: Option<u64>,
    corrupt: Option<(u64, String)>,
    salvage: bool,
) -> io::Result<()> {
    let file_len = scan.file_len;
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
    Ok(())
}

/// The bytes of a walked batch (`from`..`to`), and its frames' spans within them.
fn read_batch(
    source: &mut dyn Source,
    frames: &[FrameSpan],
    from: u64,
    to: u64,
) -> io::Result<(Vec<u8>, Vec<FrameSpan>)> {
    let bytes = if frames.is_empty() { Vec::new() } else { read_range(source, from, to)? };
    let local =
        frames.iter().map(|f| FrameSpan { start: f.start - from as usize, end: f.end - from as usize, ..*f }).collect();
    Ok((bytes, local))
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
            if hole_explains(source, frame.start as u64, frame.end as u64)?
                && walk_ends_torn_or_clean(source, frame.end as u64)? =>
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

/// The disk sector a power loss loses whole, in bytes: zeros that run over one of its
/// boundaries to the end of the file are a lost last sector, however few the end of the file
/// leaves of it.
const POWER_LOSS_SECTOR_BYTES: u64 = 512;

/// The most bytes a structural fault found by the walk at one offset can stand for: a frame's
/// magic (4 bytes) or a block header (3). Zeros anywhere in them explain the fault.
const STRUCTURAL_DAMAGE_BYTES_MAX: u64 = 4;

/// The end of the bytes a structural fault the walk found at `at` can stand for.
fn structural_damage_end(at: usize) -> u64 {
    at as u64 + STRUCTURAL_DAMAGE_BYTES_MAX
}

/// The largest tail that can be one write unit's frame, and the largest frame a scan reads
/// to check it: one oversize record's unit, compressed.
fn zstd_unit_bytes_max() -> u64 {
    ::zstd::zstd_safe::compress_bound(torn_unit_bytes_max(true)) as u64
}

/// Whether the walk from `from` to the end finds no corruption (the frames complete, the last
/// one torn, or a power-loss hole where a frame breaks): what the whole-file walk would have
/// concluded about the rest. Only called on a tail already bounded by one unit.
fn walk_ends_torn_or_clean(source: &mut dyn Source, from: u64) -> io::Result<bool> {
    let file_len = source.len();
    let mut at = from;
    while at < file_len {
        match walk_one(source, at)? {
            FrameEnd::Complete(frame) => at = frame.end as u64,
            FrameEnd::Torn => return Ok(true),
            FrameEnd::Corrupt(bad, _) => return hole_explains(source, at, structural_damage_end(bad)),
        }
    }
    Ok(true)
}

/// Whether a power-loss hole explains damage in the frame that starts at `from`, the first
/// one the scan cannot vouch for, whose damage lies before `damage_end` (its end, when its
/// checksum or decompression failed; past the bytes the walk broke on, otherwise).
///
/// Each write unit is one frame, fsynced before the next is written, so a power loss can
/// leave its zeros in the last frame only: everything from `from` to the end must fit one
/// unit, and the zeros must begin inside the damaged frame itself. Zeros further on (the
/// last unit's hole) say nothing about a frame before it: a complete frame whose checksum
/// fails is corruption wherever it sits, unless it holds the hole.
fn hole_explains(source: &mut dyn Source, from: u64, damage_end: u64) -> io::Result<bool> {
    let file_len = source.len();
    if file_len - from > zstd_unit_bytes_max() {
        return Ok(false);
    }
    let tail = read_range(source, from, file_len)?;
    let within = if crate::testing::bugs::planted("hole-past-the-damaged-frame") {
        tail.len()
    } else {
        usize::try_from(damage_end.saturating_sub(from)).unwrap_or(usize::MAX).min(tail.len())
    };
    Ok(hole_starts_within(&tail, from, within))
}

/// Whether `tail` (which starts at byte `from` of the file and fits one unit) holds a
/// power-loss hole that starts in its first `within` bytes: a run of
/// [`ZSTD_HOLE_ZERO_BYTES_MIN`] zeros, or zeros over a sector boundary to the end of the file
/// (the write's last sector lost, cut short by the end of the file), or nothing but zeros.
fn hole_starts_within(tail: &[u8], from: u64, within: usize) -> bool {
    if crate::testing::bugs::planted("holes-are-corrupt") {
        return false;
    }
    // Compressed bytes hold stray zeros of their own, and a frame's checksum may end in some:
    // the zeros that end the file count from the first of them, and are a lost sector when
    // they cover a sector boundary (stray zeros before the boundary included).
    let trailing_zeros = tail.iter().rev().take_while(|&&b| b == 0).count();
    let zeros_from = tail.len() - trailing_zeros;
    let file_end = from + tail.len() as u64;
    let boundary = (from + zeros_from as u64).next_multiple_of(POWER_LOSS_SECTOR_BYTES);
    let lost_last_sector = trailing_zeros > 0 && boundary < file_end;
    if (zeros_from == 0 || lost_last_sector) && zeros_from < within {
        return true;
    }
    // The earliest run of zeros long enough to be a hole, searched only where it could start.
    let searched = &tail[..within.saturating_add(ZSTD_HOLE_ZERO_BYTES_MIN - 1).min(tail.len())];
    memchr::memmem::find(searched, &[0u8; ZSTD_HOLE_ZERO_BYTES_MIN]).is_some_and(|at| at < within)
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
