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
