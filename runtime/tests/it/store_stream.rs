//! Sessions larger than the scan buffer (`SCAN_CHUNK_BYTES`): the streaming scan reaches the
//! same verdicts at every chunk boundary, keeps what it is asked to keep, and a resumed writer
//! continues from the scan's validator.

use std::path::PathBuf;

use faultline_runtime::event::*;
use faultline_runtime::store::*;

use crate::fixtures::{read, write};
use crate::store_contract::{append_all, sid, Backend, Bench};
use crate::support::*;

/// Poorly compressible text (hex of a xorshift walk: about 2x under zstd), so the zstd file
/// too spans several scan batches.
fn noise(seed: u64, bytes: usize) -> String {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = String::with_capacity(bytes + 16);
    while out.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.push_str(&format!("{state:016x}"));
    }
    out.truncate(bytes);
    out
}

/// Turns with big user messages, in batches of 50, then an interrupted turn left open (so a
/// repair has closers to write): about 3 scan chunks of JSONL and 2 batches of zstd.
fn big_session(backend: Backend) -> (Bench, PathBuf, Log) {
    let bench = Bench::new(backend);
    let mut log = Log::default();
    let turns = 1_300;
    for turn in 1..=turns {
        log.push(Event::TurnStart(TurnStart { turn }));
        log.push(Event::StepStart(StepRef { turn, step: 1 }));
        let text = noise(u64::from(turn), 8 * 1024);
        log.push(Event::UserMessage(UserMessage { message: Message::user_text(text) }));
        let c = log.push(chunk(turn, 1, 1, Chunk::TextDelta { index: 0, text: "ok".into() }));
        log.push_cited(Event::AssistantMessage(text_message(turn, 1, "ok")), vec![c]);
        log.push(Event::StepEnd(StepRef { turn, step: 1 }));
        log.push(Event::TurnEnd(TurnEnd { turn, reason: TurnEndReason::Completed }));
    }
    let open = turns + 1;
    log.push(Event::TurnStart(TurnStart { turn: open }));
    log.push(Event::StepStart(StepRef { turn: open, step: 1 }));
    let c = log.push(chunk(open, 1, 1, tool_delta()));
    log.push_cited(Event::AssistantMessage(tool_message(open, 1, "c1")), vec![c]);
    log.push(Event::ToolCall(tool_call(open, 1, "c1")));
    let a = bench.process("a");
    let mut writer = bench.store(&a).create(&sid("s"), T0).unwrap();
    append_all(writer.as_mut(), &log.records, 50);
    // Released with its last turn open, as a writer that stopped mid-turn.
    writer.close().unwrap();
    let path = bench.session_file(&sid("s")).unwrap();
    (bench, path, log)
}

fn inspect(bench: &Bench) -> Inspection {
    bench.store(&bench.process("inspector")).inspect(&sid("s")).unwrap()
}

#[test]
fn a_session_larger_than_the_scan_buffer_inspects_whole_and_keeps_only_what_is_asked() {
    for backend in [Backend::Jsonl, Backend::Zstd] {
        let (bench, path, log) = big_session(backend);
        let size = read(&path).len();
        let chunks_min = if backend == Backend::Jsonl { 2 } else { 1 };
        assert!(size > chunks_min * SCAN_CHUNK_BYTES, "{backend:?}: {size} bytes span {chunks_min} scan chunks");
        let all = inspect(&bench);
        assert_eq!(all.status, ScanStatus::Clean, "{backend:?}");
        assert_eq!(all.records, log.records, "{backend:?}");
        assert_eq!(all.record_count, log.records.len() as u64);
        assert_eq!(all.closers.len(), 3, "{backend:?}: c1 unknown, step/end, turn/end");

        // Keeping nothing: every record is shown once, in order; the verdict and the closers
        // (computed from the last turn the scan held) are the same.
        let seams = faultline_runtime::production::seams();
        let mut seen = Vec::new();
        let mut visit = |r: &Record| seen.push(r.seq);
        let streamed =
            faultline_runtime::store::inspect_file_keeping(&seams, &path, &NoEvidence, Keep::Visit(&mut visit))
                .unwrap();
        assert!(streamed.records.is_empty(), "{backend:?}");
        assert_eq!(seen, (0..log.records.len() as u64).collect::<Vec<_>>(), "{backend:?}");
        assert_eq!(
            (streamed.status, streamed.record_count, streamed.last_seq),
            (all.status, all.record_count, all.last_seq)
        );
        assert_eq!(streamed.closers, all.closers, "{backend:?}");
    }
}

#[test]
fn damage_in_a_middle_chunk_is_corrupt_at_its_line_and_a_tear_at_the_end_is_torn() {
    // JSONL: garbage in a line of the second chunk, far from the end.
    let (bench, path, log) = big_session(Backend::Jsonl);
    let clean = read(&path);
    let target = clean.len() / 2;
    let line_start = clean[..target].iter().rposition(|&b| b == b'\n').unwrap() + 1;
    let mut rotten = clean.clone();
    rotten[line_start + 1] = b'#';
    write(&path, &rotten);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt);
    assert_eq!(inspection.error.unwrap().offset, line_start as u64);

    // Half a record appended: torn, the committed prefix whole.
    let mut torn = clean.clone();
    let half = b"{\"type\":\"tool/result\",\"seq\":";
    torn.extend_from_slice(half);
    write(&path, &torn);
    let inspection = inspect(&bench);
    assert_eq!((inspection.status, inspection.torn_bytes), (ScanStatus::Torn, half.len() as u64));
    assert_eq!(inspection.records, log.records);

    // zstd: a flipped byte inside a frame of the middle batch is corrupt at that frame.
    let (bench, path, _) = big_session(Backend::Zstd);
    let clean = read(&path);
    let frames = match faultline_runtime::testing::walk_frames(&clean) {
        faultline_runtime::testing::FrameWalk::Complete(frames) => frames,
        other => panic!("{other:?}"),
    };
    let middle = frames[frames.len() / 2];
    let mut rotten = clean.clone();
    rotten[middle.start + (middle.end - middle.start) / 2] ^= 0x55;
    write(&path, &rotten);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt);
    assert_eq!(inspection.error.unwrap().offset, middle.start as u64);

    // zstd: the last frame cut short is torn, and repair makes it whole again.
    let last = *frames.last().unwrap();
    write(&path, &clean[..last.end - 5]);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Torn);
    assert_eq!(inspection.torn_bytes, (last.end - 5 - last.start) as u64);
}

#[test]
fn a_resumed_writer_keeps_only_the_conversation_and_continues_from_the_scan() {
    for backend in [Backend::Jsonl, Backend::Zstd] {
        let (bench, _, log) = big_session(backend);
        let b = bench.process("b");
        let opened = bench.store(&b).open_conversation(&sid("s"), Takeover::IfDead).unwrap();
        let is_plain_chunk =
            |r: &Record| matches!(&r.event, Event::AssistantChunk(c) if !matches!(c.chunk, Chunk::Usage { .. }));
        let expected: Vec<Record> = log.records.iter().filter(|r| !is_plain_chunk(r)).cloned().collect();
        let repair = opened.loaded.repair.clone().expect("the open turn is repaired");
        let records = &opened.loaded.records;
        assert_eq!(&records[..expected.len()], &expected[..], "{backend:?}: no plain chunk kept");
        assert_eq!(&records[expected.len()..], &repair.closers[..], "{backend:?}");
        // The writer continues where the scan left off: the next turn appends and validates.
        let mut log = log;
        log.records.extend(repair.closers.iter().cloned());
        let before = log.records.len();
        log.tool_turn(1_302);
        let next = &log.records[before..];
        let mut writer = opened.log;
        writer.append(next).unwrap();
        writer.close().unwrap();
        let after = inspect(&bench);
        assert_eq!(after.status, ScanStatus::Clean, "{backend:?}");
        assert_eq!(after.records, log.records, "{backend:?}");
        Validator::validate_all(&after.records).unwrap();
    }
}

/// A small closed session (two tool turns), its file and log.
fn small_session() -> (Bench, PathBuf, Log) {
    let bench = Bench::new(Backend::Jsonl);
    let mut log = Log::default();
    log.tool_turn(1);
    log.tool_turn(2);
    let mut writer = bench.store(&bench.process("a")).create(&sid("s"), T0).unwrap();
    append_all(writer.as_mut(), &log.records, 5);
    writer.close().unwrap();
    let path = bench.session_file(&sid("s")).unwrap();
    (bench, path, log)
}

fn record_line(record: &Record) -> Vec<u8> {
    let mut bytes = record.encode().into_bytes();
    bytes.push(b'\n');
    bytes
}

/// A line of `bytes` copies of `fill`, newline-terminated or not.
fn long_line(fill: u8, bytes: usize, terminated: bool) -> Vec<u8> {
    let mut line = vec![fill; bytes];
    if terminated {
        line.push(b'\n');
    }
    line
}

/// The most a scan asks the disk for at once: one record's bound (the buffer grown to hold
/// the longest line the limit allows), however large the damage.
const READ_BYTES_BOUND: u64 = RECORD_LINE_BYTES_MAX as u64 + 2;

#[test]
fn a_line_longer_than_any_record_is_damage_when_terminated_and_torn_when_it_runs_to_the_end() {
    let (bench, path, log) = small_session();
    let clean = read(&path);
    let long = 24 * 1024 * 1024;

    // Ends in a newline: a crash cannot write that, and nothing after it could be one unit.
    write(&path, &[clean.clone(), long_line(b'x', long, true)].concat());
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt);
    let error = inspection.error.unwrap();
    assert_eq!(error.offset, clean.len() as u64);
    assert!(error.reason.contains(&format!("line exceeds the {RECORD_LINE_BYTES_MAX}-byte limit")), "{error:?}");
    assert!(error.reason.contains("the last line damaged"), "{error:?}");
    assert!(bench.fs.largest_read() <= READ_BYTES_BOUND, "read {} bytes at once", bench.fs.largest_read());

    // No newline: an append cut short, however long — torn, the prefix kept.
    write(&path, &[clean.clone(), long_line(b'x', long, false)].concat());
    let inspection = inspect(&bench);
    assert_eq!((inspection.status, inspection.torn_bytes), (ScanStatus::Torn, long as u64));
    assert_eq!(inspection.records, log.records);
}

#[test]
fn a_turn_end_far_past_an_oversize_line_is_found_through_a_bounded_buffer() {
    let (bench, path, _) = small_session();
    let clean = read(&path);
    // After the damage: 6 MiB of complete records (more than one scan buffer, so lines
    // straddle its reads), a line longer than the grown buffer (skipped in pieces), and only
    // then the turn/end that proves the damage is not a torn tail.
    let filler =
        Record::new(900, T0, Event::UserMessage(UserMessage { message: Message::user_text("f".repeat(1000)) }));
    let fillers = record_line(&filler).repeat(6 * 1024);
    let turn_end = Record::new(4242, T0, Event::TurnEnd(TurnEnd { turn: 9, reason: TurnEndReason::Completed }));
    let tampered = [
        clean.clone(),
        long_line(b'x', 17 * 1024 * 1024, true),
        fillers,
        long_line(b'y', 33 * 1024 * 1024, true),
        record_line(&turn_end),
    ]
    .concat();
    write(&path, &tampered);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt);
    let error = inspection.error.unwrap();
    assert_eq!(error.offset, clean.len() as u64);
    assert!(error.reason.contains("a later committed turn/end (seq 4242) rules out a torn tail"), "{error:?}");
    assert!(bench.fs.largest_read() <= READ_BYTES_BOUND, "read {} bytes at once", bench.fs.largest_read());
    assert_eq!(read(&path), tampered, "inspect never writes");

    // The first turn/end after the damage straddles the end of the search's first read, cut
    // after its first 3 bytes (inside its JSON structure, where a byte lost or repeated at
    // the cut cannot go unnoticed): the search carries the cut line into its next read whole.
    let damage = long_line(b'x', 17 * 1024 * 1024, true);
    let first = record_line(&Record { seq: 777, ..turn_end.clone() });
    let filler = long_line(b'f', SCAN_CHUNK_BYTES - 3 - 1, true);
    let (search_from, first_at) = (clean.len() + damage.len(), clean.len() + damage.len() + filler.len());
    assert_eq!(first_at + 3, search_from + SCAN_CHUNK_BYTES);
    let tampered = [clean.clone(), damage, filler, first, record_line(&turn_end)].concat();
    write(&path, &tampered);
    let error = inspect(&bench).error.unwrap();
    assert!(error.reason.contains("a later committed turn/end (seq 777) rules out a torn tail"), "{error:?}");

    // A short damaged line, then a line the search's buffer must grow for: the search reads
    // on from where it is, never the committed records before the damage (whose turn/ends
    // prove nothing about it).
    let tampered =
        [clean.clone(), b"garbage\n".to_vec(), long_line(b'z', 20 * 1024 * 1024, true), record_line(&turn_end)]
            .concat();
    write(&path, &tampered);
    let error = inspect(&bench).error.unwrap();
    assert_eq!(error.offset, clean.len() as u64);
    assert!(error.reason.contains("a later committed turn/end (seq 4242) rules out a torn tail"), "{error:?}");
}

#[test]
fn a_hole_in_the_last_unit_of_a_session_larger_than_the_scan_buffer_is_torn() {
    let (bench, path, log) = big_session(Backend::Jsonl);
    let clean = read(&path);
    assert!(clean.len() > 2 * SCAN_CHUNK_BYTES);
    // A power loss zeroed the second-to-last record (its newline survived): a hole inside the
    // last write unit, with one complete record after it.
    let ends: Vec<usize> = clean.iter().enumerate().filter(|&(_, &b)| b == b'\n').map(|(i, _)| i).collect();
    let (hole_from, hole_to) = (ends[ends.len() - 3] + 1, ends[ends.len() - 2]);
    let mut holed = clean.clone();
    holed[hole_from..hole_to].fill(0);
    write(&path, &holed);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Torn, "{:?}", inspection.error);
    assert_eq!(inspection.records, log.records[..log.records.len() - 2]);
    assert_eq!((inspection.torn_bytes, inspection.dropped_records), ((clean.len() - hole_from) as u64, 1));
}

/// Frames far into a file are judged by their own size: a zstd session of three records of
/// 10 MiB (poorly compressible: ~5 MiB a frame, ~16 MB in all) reads back whole.
#[test]
fn a_zstd_session_of_several_oversize_records_reads_back_whole() {
    let bench = Bench::new(Backend::Zstd);
    let mut log = Log::default();
    for turn in 1..=3 {
        log.push(Event::TurnStart(TurnStart { turn }));
        log.push(Event::StepStart(StepRef { turn, step: 1 }));
        let text = noise(u64::from(turn), 10 * 1024 * 1024);
        log.push(Event::UserMessage(UserMessage { message: Message::user_text(text) }));
        let c = log.push(chunk(turn, 1, 1, Chunk::TextDelta { index: 0, text: "ok".into() }));
        log.push_cited(Event::AssistantMessage(text_message(turn, 1, "ok")), vec![c]);
        log.push(Event::StepEnd(StepRef { turn, step: 1 }));
        log.push(Event::TurnEnd(TurnEnd { turn, reason: TurnEndReason::Completed }));
    }
    let mut writer = bench.store(&bench.process("a")).create(&sid("s"), T0).unwrap();
    append_all(writer.as_mut(), &log.records, 7);
    writer.close().unwrap();
    let size = read(&bench.session_file(&sid("s")).unwrap()).len();
    // Its last frame starts past 8 MiB: its start and end together exceed any frame size.
    assert!(size > 12 * 1024 * 1024, "{size} bytes");
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Clean, "{:?}", inspection.error);
    assert_eq!(inspection.records, log.records);
}
