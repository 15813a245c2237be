//! The torn-versus-corrupt rule on hand-tampered files (FAILURE-JSONL-RAW-SCAN,
//! FAILURE-JSONL-ZSTD-SCAN, FAILURE-JSONL-PREFIX).

use std::path::PathBuf;

use faultline_runtime::event::*;
use faultline_runtime::store::*;
use faultline_runtime::testing::{walk_frames, FrameWalk};
use faultline_runtime::Error;

use crate::fixtures::{read, write};
use crate::store_contract::{append_all, sid, Backend, Bench};
use crate::support::*;

/// A file session holding two complete tool turns, written in batches of 5, closed.
fn two_turns(backend: Backend) -> (Bench, PathBuf, Log) {
    let bench = Bench::new(backend);
    let a = bench.process("a");
    let mut log = Log::default();
    log.tool_turn(1);
    log.tool_turn(2);
    let mut writer = bench.store(&a).create(&sid("s"), T0).unwrap();
    append_all(writer.as_mut(), &log.records, 5);
    writer.close().unwrap();
    let path = bench.session_file(&sid("s")).unwrap();
    (bench, path, log)
}

fn inspect(bench: &Bench) -> Inspection {
    bench.store(&bench.process("inspector")).inspect(&sid("s")).unwrap()
}

fn line(record: &Record) -> Vec<u8> {
    let mut bytes = record.encode().into_bytes();
    bytes.push(b'\n');
    bytes
}

fn frame(text: &[u8], checksum: bool) -> Vec<u8> {
    let mut compressor = zstd::bulk::Compressor::new(3).unwrap();
    compressor.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(checksum)).unwrap();
    compressor.compress(text).unwrap()
}

fn turn_end(seq: u64) -> Record {
    Record::new(seq, T0, Event::TurnEnd(TurnEnd { turn: 3, reason: TurnEndReason::Completed }))
}

#[test]
fn jsonl_unterminated_final_line_is_a_torn_tail_and_repair_restores_the_prefix() {
    let (bench, path, log) = two_turns(Backend::Jsonl);
    let clean = read(&path);
    let mut torn = clean.clone();
    torn.extend_from_slice(&line(&turn_end(log.records.len() as u64))[..20]);
    write(&path, &torn);

    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Torn);
    assert_eq!(inspection.torn_bytes, 20);
    assert_eq!(inspection.records, log.records);
    assert!(!inspection.open_turn);

    let loaded = bench.store(&bench.process("b")).load(&sid("s")).unwrap();
    assert_eq!(loaded.repair.unwrap().truncated_bytes, 20);
    assert_eq!(read(&path), clean, "repair truncates exactly the torn tail");
}

#[test]
fn jsonl_undecodable_line_without_a_later_turn_end_is_torn() {
    let (bench, path, log) = two_turns(Backend::Jsonl);
    let mut bytes = read(&path);
    bytes.extend_from_slice(b"{\"type\":\"turn/st\0\0\0\n");
    bytes.extend_from_slice(&line(&Record::new(
        log.records.len() as u64 + 1,
        T0,
        Event::TurnStart(TurnStart { turn: 3 }),
    )));
    write(&path, &bytes);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Torn);
    assert_eq!(inspection.records, log.records);
}

#[test]
fn jsonl_undecodable_line_before_a_committed_turn_end_is_corrupt_and_left_untouched() {
    let (bench, path, log) = two_turns(Backend::Jsonl);
    let mut bytes = read(&path);
    let garbage_at = bytes.len() as u64;
    bytes.extend_from_slice(b"garbage\n");
    bytes.extend_from_slice(&line(&turn_end(log.records.len() as u64 + 1)));
    write(&path, &bytes);

    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt);
    let error = inspection.error.unwrap();
    assert_eq!(error.offset, garbage_at);
    assert!(error.reason.contains("turn/end"), "{}", error.reason);

    let refused = bench.store(&bench.process("b")).load(&sid("s")).unwrap_err();
    assert!(matches!(refused, Error::Corrupt { offset, .. } if offset == garbage_at), "{refused}");
    assert_eq!(read(&path), bytes, "corruption is refused, never silently dropped");
}

#[test]
fn jsonl_duplicated_final_line_is_corrupt_not_torn() {
    // A crash leaves at most an unterminated last line: a complete line with the wrong seq
    // (what a retry without truncate-back writes) is not a torn write.
    let (bench, path, log) = two_turns(Backend::Jsonl);
    let mut bytes = read(&path);
    bytes.extend_from_slice(&line(log.records.last().unwrap()));
    write(&path, &bytes);
    assert_eq!(inspect(&bench).status, ScanStatus::Corrupt);
}

#[test]
fn jsonl_missing_or_unsupported_header() {
    let (bench, path, _) = two_turns(Backend::Jsonl);
    // What a person reading the refusal is told: which of the two it is.
    let refusal = |bytes: &[u8]| {
        write(&path, bytes);
        let inspection = inspect(&bench);
        assert_eq!(inspection.status, ScanStatus::Corrupt);
        inspection.error.unwrap().reason
    };
    assert_eq!(refusal(b""), "empty file: no session header");
    assert_eq!(refusal(b"{\"type\":\"session\",\"version\":1"), "session header line is unterminated");
    write(&path, b"{\"type\":\"session\",\"version\":9,\"id\":\"s\",\"created_at\":0}\n");
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Unsupported);
    assert!(inspection.error.unwrap().reason.contains("version 9"));
    let refused = bench.store(&bench.process("b")).load(&sid("s")).unwrap_err();
    assert!(matches!(refused, Error::Unsupported { .. }), "{refused}");
}

#[test]
fn zstd_two_stray_magic_bytes_are_dropped_and_repair_is_byte_identical() {
    let (bench, path, log) = two_turns(Backend::Zstd);
    let clean = read(&path);
    let mut bytes = clean.clone();
    bytes.extend_from_slice(&[0x28, 0xB5]);
    write(&path, &bytes);

    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Torn);
    assert_eq!(inspection.torn_bytes, 2);
    assert_eq!(inspection.records, log.records);
    bench.store(&bench.process("b")).load(&sid("s")).unwrap();
    assert_eq!(read(&path), clean);
}

#[test]
fn zstd_frame_torn_only_inside_its_checksum_has_its_events_recovered() {
    let (bench, path, log) = two_turns(Backend::Zstd);
    let clean = read(&path);
    write(&path, &clean[..clean.len() - 2]);
    // Batches were 5 records; the last frame holds the remainder.
    let last_batch = log.records.len() % 5;
    let last_batch = if last_batch == 0 { 5 } else { last_batch };
    let committed = log.records.len() - last_batch;

    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Torn);
    assert_eq!(inspection.records, log.records[..committed]);
    assert_eq!(inspection.recovered, log.records[committed..]);
    assert!(!inspection.open_turn);

    let loaded = bench.store(&bench.process("b")).load(&sid("s")).unwrap();
    assert_eq!(loaded.records, log.records);
    let reloaded = bench.store(&bench.process("c")).inspect(&sid("s")).unwrap();
    assert_eq!(reloaded.status, ScanStatus::Clean);
    assert_eq!(reloaded.records, log.records, "salvaged events are committed as one new frame");
}

#[test]
fn zstd_complete_frame_without_a_final_newline_is_corrupt() {
    let (bench, path, log) = two_turns(Backend::Zstd);
    let mut bytes = read(&path);
    let at = bytes.len() as u64;
    let text = line(&turn_end(log.records.len() as u64));
    bytes.extend_from_slice(&frame(&text[..text.len() - 1], true));
    write(&path, &bytes);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt);
    let error = inspection.error.unwrap();
    assert_eq!(error.offset, at);
    assert!(error.reason.contains("newline"), "{}", error.reason);
}

#[test]
fn zstd_garbage_followed_by_a_later_turn_end_is_corrupt() {
    let (bench, path, log) = two_turns(Backend::Zstd);
    let mut bytes = read(&path);
    let at = bytes.len() as u64;
    bytes.extend_from_slice(b"GARBAGE!");
    bytes.extend_from_slice(&frame(&line(&turn_end(log.records.len() as u64)), true));
    write(&path, &bytes);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt);
    assert_eq!(inspection.error.unwrap().offset, at);
    assert!(bench.store(&bench.process("b")).load(&sid("s")).is_err());
    assert_eq!(read(&path), bytes);
}

#[test]
fn zstd_frames_must_carry_checksums_and_pass_them() {
    let (bench, path, log) = two_turns(Backend::Zstd);
    let clean = read(&path);

    let mut unchecked = clean.clone();
    unchecked.extend_from_slice(&frame(&line(&turn_end(log.records.len() as u64)), false));
    write(&path, &unchecked);
    assert!(inspect(&bench).error.unwrap().reason.contains("checksum"));

    // Flip one byte of the last frame's checksum: complete frame, bad content → corrupt.
    let mut flipped = clean.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0xff;
    write(&path, &flipped);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt);
    assert!(inspection.error.unwrap().reason.contains("decompress"));
}

#[test]
fn zstd_frame_walk_is_structural() {
    let one = frame(b"a\n", true);
    let two = frame(b"bb\n", true);
    let both = [one.clone(), two.clone()].concat();
    let FrameWalk::Complete(spans) = walk_frames(&both) else { panic!() };
    assert_eq!(spans.len(), 2);
    assert_eq!((spans[1].start, spans[1].end), (one.len(), both.len()));
    for cut in 1..two.len() {
        assert_eq!(
            walk_frames(&both[..one.len() + cut]),
            FrameWalk::Torn { frames: vec![spans[0]], torn_at: one.len() },
            "a frame cut after {cut} bytes is torn at its start"
        );
    }
    let mut reserved = one.clone();
    reserved[4] |= 0b1000;
    assert!(matches!(walk_frames(&reserved), FrameWalk::Corrupt { offset: 4, .. }));
}

/// Evidence that knows one execution id (as the delivery queue would).
struct Knows(String);

impl OutcomeEvidence for Knows {
    fn lookup(&self, execution_id: &str) -> Option<Evidence> {
        (execution_id == self.0).then(|| Evidence::Uncertain { status: "unknown".into(), detail: String::new() })
    }

    fn cancel_never_claimed(&self, _: &str) {}
}

#[test]
fn a_hole_before_a_tool_call_the_queue_knows_is_corrupt_not_torn() {
    // Turn 3 opens, a line is zeroed by a "power loss", and a complete tool/call follows. On its
    // own that is a torn tail; but the queue knows the call's execution id, so its unit was
    // durable and dropping it would forget a call that happened.
    let (bench, path, log) = two_turns(Backend::Jsonl);
    let next = log.records.len() as u64;
    let mut bytes = read(&path);
    bytes.extend_from_slice(&line(&Record::new(next, T0, Event::TurnStart(TurnStart { turn: 3 }))));
    bytes.extend_from_slice(&line(&Record::new(next + 1, T0, Event::StepStart(StepRef { turn: 3, step: 1 }))));
    bytes.extend_from_slice(b"\0\0\0\0\0\0\0\0\n");
    bytes.extend_from_slice(&line(&Record::new(next + 3, T0, Event::ToolCall(tool_call(3, 1, "c9")))));
    write(&path, &bytes);
    let seams = faultline_runtime::production::seams();
    let unknown = inspect_file_with(&seams, &path, &NoEvidence).unwrap();
    assert_eq!((unknown.status, unknown.dropped_records, unknown.torn_from_seq), (ScanStatus::Torn, 1, Some(next + 2)));
    let known = Knows(execution_id("s", 3, 1, "c9"));
    let inspection = inspect_file_with(&seams, &path, &known).unwrap();
    assert_eq!(inspection.status, ScanStatus::Corrupt, "{:?}", inspection.error);
    assert!(inspection.error.unwrap().reason.contains("delivery queue"));
    drop(bench);
}

#[test]
fn zstd_damage_that_swallows_a_later_complete_frame_is_corrupt_not_torn() {
    // A frame whose (damaged) block header claims more bytes than the file has left looks torn
    // to the structural walk; but a complete, checksummed frame after it was written whole, as
    // a later write unit, so the damage is not the last unit's.
    let (bench, path, log) = two_turns(Backend::Zstd);
    let clean = read(&path);
    let swallowing: [u8; 9] = [0x28, 0xB5, 0x2F, 0xFD, 0x20, 0x10, 0x41, 0x1F, 0x00];
    let mut torn_only = clean.clone();
    torn_only.extend_from_slice(&swallowing);
    write(&path, &torn_only);
    assert_eq!(inspect(&bench).status, ScanStatus::Torn, "alone at the end it is a torn tail");
    let mut damaged = torn_only.clone();
    let next = log.records.len() as u64;
    damaged.extend_from_slice(&frame(&line(&Record::new(next, T0, Event::TurnStart(TurnStart { turn: 3 }))), true));
    write(&path, &damaged);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt, "{:?}", inspection.error);
    assert_eq!(inspection.error.unwrap().offset, clean.len() as u64);
}

#[test]
fn zstd_zero_bytes_after_the_last_complete_frame_are_a_torn_tail_but_garbage_is_corrupt() {
    let (bench, path, log) = two_turns(Backend::Zstd);
    let clean = read(&path);
    // A power loss that extended the file without writing the unit: zeros after the last frame.
    let mut zeros = clean.clone();
    zeros.extend_from_slice(&[0u8; 512]);
    write(&path, &zeros);
    let inspection = inspect(&bench);
    assert_eq!((inspection.status, inspection.torn_bytes), (ScanStatus::Torn, 512));
    assert_eq!(inspection.records, log.records);
    // The same length of non-zero garbage is no power loss.
    let mut garbage = clean.clone();
    garbage.extend_from_slice(&[0x5Au8; 512]);
    write(&path, &garbage);
    assert_eq!(inspect(&bench).status, ScanStatus::Corrupt);
}

#[test]
fn zstd_a_hole_inside_the_last_frame_is_torn_and_nothing_is_salvaged_from_it() {
    let (bench, path, log) = two_turns(Backend::Zstd);
    let clean = read(&path);
    let next = log.records.len() as u64;
    let text: Vec<u8> = (0..40)
        .flat_map(|i| line(&Record::new(next + i, T0, Event::TurnStart(TurnStart { turn: 3 + i as u32 }))))
        .collect();
    let mut last = frame(&text, true);
    // Zero a run in the middle of the frame: its structure may survive, its checksum cannot.
    let middle = last.len() / 2;
    last[middle - 40..middle + 40].fill(0);
    let mut bytes = clean.clone();
    bytes.extend_from_slice(&last);
    write(&path, &bytes);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Torn, "{:?}", inspection.error);
    assert_eq!(inspection.torn_bytes, last.len() as u64);
    assert!(inspection.recovered.is_empty(), "nothing is salvaged from a frame whose checksum failed");

    // The same hole with garbage after the frame: the rest is no longer what a power loss
    // leaves (zeros, or a torn frame), so the hole proves nothing and the file is refused.
    bytes.extend_from_slice(b"garbage after the holed frame");
    write(&path, &bytes);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt);
    assert_eq!(inspection.error.unwrap().offset, clean.len() as u64);
}

/// Each write unit is one frame fsynced before the next is written, so a power loss leaves
/// its zeros in the last frame only: a durable frame whose checksum fails in front of the last
/// frame's hole is corruption, not part of the hole (a sweep found the old rule, "a hole
/// anywhere after the damage", dropping acknowledged records). Flipping the checksum of the
/// holed frame itself is still the hole's damage.
#[test]
fn zstd_a_checksum_failure_in_front_of_a_hole_is_corrupt_not_torn() {
    let (bench, path, log) = two_turns(Backend::Zstd);
    let clean = read(&path);
    let next = log.records.len() as u64;
    let frame_of = |from: u64, n: u64| {
        let text: Vec<u8> = (from..from + n)
            .flat_map(|seq| {
                let event = match seq {
                    0 => Event::TurnStart(TurnStart { turn: 3 }),
                    _ => Event::UserMessage(UserMessage {
                        message: Message::user_text(format!("entry {seq} of the log")),
                    }),
                };
                line(&Record::new(next + seq, T0, event))
            })
            .collect();
        frame(&text, true)
    };
    let durable = frame_of(0, 10);
    let mut holed = frame_of(10, 40);
    let middle = holed.len() / 2;
    holed[middle - 40..middle + 40].fill(0);
    let flip_checksum = |frame: &mut Vec<u8>| {
        let len = frame.len();
        frame[len - 1] ^= 0x5A;
    };

    let mut rotted = durable.clone();
    flip_checksum(&mut rotted);
    write(&path, &[clean.clone(), rotted, holed.clone()].concat());
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt, "the rot is not the hole's");
    assert_eq!(inspection.error.unwrap().offset, clean.len() as u64, "refused at the rotted frame");

    // The control: the same durable frame intact keeps its records; the hole is torn.
    let mut holed_and_flipped = holed.clone();
    flip_checksum(&mut holed_and_flipped);
    for last in [holed, holed_and_flipped] {
        write(&path, &[clean.clone(), durable.clone(), last.clone()].concat());
        let inspection = inspect(&bench);
        assert_eq!(inspection.status, ScanStatus::Torn, "{:?}", inspection.error);
        assert_eq!(inspection.records.len(), log.records.len() + 10, "the durable frame's records are kept");
        assert_eq!(inspection.torn_bytes, last.len() as u64);
    }
}

#[test]
fn zstd_a_lost_first_append_after_the_header_is_torn() {
    let bench = Bench::new(Backend::Zstd);
    let writer = bench.store(&bench.process("a")).create(&sid("s"), T0).unwrap();
    writer.close().unwrap();
    let path = bench.session_file(&sid("s")).unwrap();
    let mut bytes = read(&path);
    bytes.extend_from_slice(&[0u8; 100]);
    write(&path, &bytes);
    let inspection = inspect(&bench);
    assert_eq!((inspection.status, inspection.torn_bytes), (ScanStatus::Torn, 100));
}

/// A positioned read may return fewer bytes than asked for. Every verdict — clean, torn with
/// records recovered, corrupt — and every record is the same when the disk hands the scanner
/// one byte, or seven, at a time.
#[test]
fn every_verdict_is_the_same_when_the_disk_returns_short_reads() {
    type Damage = fn(&[u8], &Log) -> Vec<u8>;
    let damages: [(&str, Backend, Damage, ScanStatus); 7] = [
        ("jsonl clean", Backend::Jsonl, |b, _| b.to_vec(), ScanStatus::Clean),
        // JSON allows it, the writer never writes it: one record line starting with a space,
        // so not every line starts with the byte the one before it did.
        (
            "jsonl one line with leading whitespace",
            Backend::Jsonl,
            |b, _| {
                let third = b.iter().enumerate().filter(|&(_, &c)| c == b'\n').nth(1).unwrap().0 + 1;
                [&b[..third], b" ", &b[third..]].concat()
            },
            ScanStatus::Clean,
        ),
        ("jsonl unterminated last line", Backend::Jsonl, |b, _| b[..b.len() - 7].to_vec(), ScanStatus::Torn),
        (
            "jsonl duplicated last line",
            Backend::Jsonl,
            |b, log| [b, &line(log.records.last().unwrap())].concat(),
            ScanStatus::Corrupt,
        ),
        ("zstd clean", Backend::Zstd, |b, _| b.to_vec(), ScanStatus::Clean),
        ("zstd torn inside its checksum", Backend::Zstd, |b, _| b[..b.len() - 2].to_vec(), ScanStatus::Torn),
        ("zstd two stray magic bytes", Backend::Zstd, |b, _| [b, &[0x28, 0xB5][..]].concat(), ScanStatus::Torn),
    ];
    for (name, backend, damage, status) in damages {
        let (bench, path, log) = two_turns(backend);
        write(&path, &damage(&read(&path), &log));
        let whole = inspect(&bench);
        assert_eq!(whole.status, status, "{name}");
        let whole = format!("{whole:?}");
        for bytes in [1, 7] {
            bench.fs.short_reads(bytes);
            assert_eq!(format!("{:?}", inspect(&bench)), whole, "{name}: reads of at most {bytes} bytes");
        }
        bench.fs.short_reads(0);
    }
}

/// A rival truncates the file after the scan measured it (a repair cutting a torn tail while
/// someone inspects): the scan says the file changed under it; it never reports a torn tail
/// or a clean prefix of bytes it could not read.
#[test]
fn a_file_that_shrinks_while_it_is_scanned_is_an_io_error_not_a_verdict() {
    for backend in [Backend::Jsonl, Backend::Zstd] {
        let (bench, path, _) = two_turns(backend);
        let len = read(&path).len() as u64;
        bench.fs.shrinks_at_next_read(len / 2);
        let error = bench.store(&bench.process("inspector")).inspect(&sid("s")).unwrap_err();
        assert!(matches!(error, Error::Io { .. }), "{backend:?}: {error:?}");
        assert!(error.to_string().contains("the file shrank while it was scanned"), "{backend:?}: {error}");
        assert_eq!(read(&path).len() as u64, len / 2, "{backend:?}: the rival did cut it");
    }
}

/// A frame that decompresses to more than any unit the writer makes (one record at the line
/// limit and its newline) is refused before it is held whole: a few KiB of zstd cannot make
/// the scan allocate what they expand to.
#[test]
fn zstd_a_frame_that_expands_past_the_largest_unit_is_corrupt() {
    let (bench, path, _) = two_turns(Backend::Zstd);
    let clean = read(&path);
    // One byte over the largest unit: a line of the limit plus one, and its newline.
    let mut text = vec![b'x'; RECORD_LINE_BYTES_MAX + 1];
    text.push(b'\n');
    assert_eq!(text.len() as u64, FRAME_CONTENT_BYTES_MAX + 1);
    let bomb = frame(&text, true);
    assert!(bomb.len() < 64 * 1024, "{} bytes expand to {}", bomb.len(), text.len());
    write(&path, &[clean.clone(), bomb].concat());
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt);
    let error = inspection.error.unwrap();
    assert_eq!(error.offset, clean.len() as u64);
    assert!(error.reason.contains("frame content exceeds the size limit"), "{error:?}");
    // The largest unit the writer does make (a line of exactly the limit) reads back on every
    // store: limits::a_line_of_exactly_the_limit_is_kept_and_one_byte_more_is_refused.
}

/// Frames of a few hundred bytes that each expand to megabytes of valid records are decoded a
/// content budget at a time: the scan reads (and so decodes) a handful of them per batch, not
/// every frame its compressed batch size would hold. Every record still reads back.
#[test]
fn zstd_frames_that_expand_to_megabytes_are_decoded_a_budget_at_a_time() {
    let bench = Bench::new(Backend::Zstd);
    let a = bench.process("a");
    let mut log = Log::default();
    let turns = 24;
    for turn in 1..=turns {
        log.tool_turn(turn);
    }
    // Each turn's user message is 2 MiB of one letter: a frame of its own of a few hundred
    // bytes that declares 2 MiB of content.
    let big = "a".repeat(2 << 20);
    for record in &mut log.records {
        if let Event::UserMessage(user) = &mut record.event {
            user.message = Message::user_text(&big);
        }
    }
    let mut writer = bench.store(&a).create(&sid("s"), T0).unwrap();
    append_all(writer.as_mut(), &log.records, 1);
    writer.close().unwrap();
    let file = read(&bench.session_file(&sid("s")).unwrap());
    assert!(file.len() < 256 * 1024, "{} bytes hold {} MiB of messages", file.len(), 2 * turns);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Clean, "{:?}", inspection.error);
    assert_eq!(inspection.last_seq, Some(log.records.len() as u64 - 1));
    // One read per batch: a batch of at most 8 MiB of content holds three of the big frames
    // and the small ones around them (a fourth would take it past 8 MiB), far from the whole
    // file's 48 MiB; and no fewer (a smaller budget would cut the writer's own batches).
    let per_turn = file.len() as u64 / u64::from(turns);
    let largest = bench.fs.largest_read();
    assert!(
        (2 * per_turn..=4 * per_turn).contains(&largest),
        "read {largest} bytes at once of {} ({per_turn} per turn)",
        file.len()
    );
}

/// A frame whose content is not the size its header declares is corrupt: libzstd holds a
/// frame to its declared size, more or less, and the scan's batch budget relies on it (a
/// frame of several blocks that declares a prefix of its lines must not pass as that prefix,
/// nor one that declares a few bytes expand to megabytes).
#[test]
fn zstd_a_frame_that_decodes_to_other_than_it_declares_is_corrupt() {
    let (bench, path, log) = two_turns(Backend::Zstd);
    let clean = read(&path);
    // Turns 3.. as one frame of several blocks (128 KiB each at most).
    let mut more = Log { records: log.records.clone() };
    let mut turn = 3;
    while more.records.iter().skip(log.records.len()).map(|r| line(r).len()).sum::<usize>() < 300 * 1024 {
        more.tool_turn(turn);
        turn += 1;
    }
    let text: Vec<u8> = more.records[log.records.len()..].iter().flat_map(line).collect();
    let honest = frame(&text, true);
    // The compressor's header: single segment, a four-byte content size. Rewrite it with an
    // 8 MiB window (no longer single segment: the window is not the declared size) that
    // declares a prefix of whole lines, and then more than the content.
    assert_eq!(honest[4], 0b1010_0100, "single segment, 4-byte size, checksum");
    let prefix = text[..100 * 1024].iter().rposition(|&b| b == b'\n').unwrap() + 1;
    for declared in [prefix, text.len() + 1] {
        let declared = u32::try_from(declared).unwrap();
        let lying = [&honest[..4], &[0b1000_0100, 13 << 3], &declared.to_le_bytes(), &honest[9..]].concat();
        assert_eq!(zstd::zstd_safe::get_frame_content_size(&lying).ok(), Some(Some(u64::from(declared))));
        write(&path, &[clean.clone(), lying].concat());
        let inspection = inspect(&bench);
        assert_eq!(inspection.status, ScanStatus::Corrupt, "declared {declared}: {:?}", inspection.last_seq);
        let error = inspection.error.unwrap();
        assert_eq!(error.offset, clean.len() as u64, "{error:?}");
        assert!(error.reason.contains("does not decompress"), "{error:?}");
    }
}

/// The same proof found far from the damage: the search for a later complete frame reads the
/// rest of the file in bounded pieces, so the frame it finds lies beyond the first of them.
#[test]
fn zstd_a_complete_frame_several_scan_buffers_past_the_damage_is_found() {
    let (bench, path, log) = two_turns(Backend::Zstd);
    let clean = read(&path);
    // A frame of raw blocks whose last block claims more than the file has left: torn to the
    // structural walk.
    let mut tampered = [clean.clone(), raw_frame(5, RAW_BLOCK_BYTES_MAX, true)].concat();
    let later = tampered.len() as u64;
    // Past two scan buffers, and past the largest frame's size in bytes from the start.
    assert!(later - clean.len() as u64 > 2 * SCAN_CHUNK_BYTES as u64 && later > RECORD_LINE_BYTES_MAX as u64 / 2 + 1);
    let next = log.records.len() as u64;
    tampered.extend(frame(&line(&Record::new(next, T0, Event::TurnStart(TurnStart { turn: 3 }))), true));
    write(&path, &tampered);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt, "{:?}", inspection.error);
    let error = inspection.error.unwrap();
    assert_eq!(error.offset, clean.len() as u64);
    assert!(error.reason.contains(&format!("a complete frame at byte {later} follows the damaged one")), "{error:?}");
    assert!(bench.fs.largest_read() <= RECORD_LINE_BYTES_MAX as u64 + 2, "read {} at once", bench.fs.largest_read());
}

/// The largest block a zstd block header can describe (21 bits of size).
const RAW_BLOCK_BYTES_MAX: u32 = (1 << 21) - 1;

/// A raw zstd block header saying `size` bytes, with those bytes (`A`s) unless `claim_only`.
fn raw_block(size: u32, last: bool, claim_only: bool) -> Vec<u8> {
    let header = (size << 3) | u32::from(last);
    let mut block = header.to_le_bytes()[..3].to_vec();
    if !claim_only {
        block.extend(std::iter::repeat_n(b'A', size as usize));
    }
    block
}

/// A frame header without a checksum, `full` raw blocks of the largest size, then a last raw
/// block of `last` bytes (only claimed, not written, when `claim_only`: the frame is torn).
fn raw_frame(full: usize, last: u32, claim_only: bool) -> Vec<u8> {
    let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, 0x20, 0x10];
    for _ in 0..full {
        frame.extend(raw_block(RAW_BLOCK_BYTES_MAX, false, false));
    }
    frame.extend(raw_block(last, true, claim_only));
    frame
}

/// A structurally complete frame larger (compressed) than any unit the writer makes is
/// refused from its headers alone: the scan never reads a frame it could not have written.
#[test]
fn zstd_a_frame_larger_than_any_unit_the_writer_makes_is_corrupt_before_it_is_read() {
    let (bench, path, _) = two_turns(Backend::Zstd);
    let clean = read(&path);
    let tampered = [clean.clone(), raw_frame(9, 10, false)].concat();
    let frame_bytes = tampered.len() - clean.len();
    assert!(frame_bytes > RECORD_LINE_BYTES_MAX + 64 * 1024, "{frame_bytes}");
    write(&path, &tampered);
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt);
    let error = inspection.error.unwrap();
    assert_eq!(error.offset, clean.len() as u64);
    assert!(bench.fs.largest_read() < 1024 * 1024, "read {} bytes at once", bench.fs.largest_read());
    assert!(error.reason.contains(&format!("zstd frame of {frame_bytes} bytes is larger than any unit")), "{error:?}");
}

/// A zstd session holding a turn and a step, closed, to which a test appends a torn frame.
fn opened_zstd() -> (Bench, PathBuf, Vec<u8>) {
    let bench = Bench::new(Backend::Zstd);
    let opening = [
        Record::new(0, T0, Event::TurnStart(TurnStart { turn: 1 })),
        Record::new(1, T0, Event::StepStart(StepRef { turn: 1, step: 1 })),
    ];
    let mut writer = bench.store(&bench.process("a")).create(&sid("s"), T0).unwrap();
    writer.append(&opening).unwrap();
    writer.close().unwrap();
    let path = bench.session_file(&sid("s")).unwrap();
    let clean = read(&path);
    (bench, path, clean)
}

/// A frame torn inside its checksum: every block whole, the last 2 checksum bytes lost.
fn torn_frame(text: &[u8]) -> Vec<u8> {
    let whole = frame(text, true);
    whole[..whole.len() - 2].to_vec()
}

/// Salvage from a torn frame keeps everything up to the content bound, exactly: the largest
/// unit the writer makes (one record at the line limit) is salvaged whole.
#[test]
fn zstd_a_torn_frame_of_one_record_at_the_line_limit_is_salvaged_whole() {
    let (bench, path, clean) = opened_zstd();
    let record =
        |text: String| Record::new(2, T0, Event::UserMessage(UserMessage { message: Message::user_text(&text) }));
    let envelope = record(String::new()).encode().len();
    let exact = record("a".repeat(RECORD_LINE_BYTES_MAX - envelope));
    assert_eq!(line(&exact).len() as u64, FRAME_CONTENT_BYTES_MAX);
    write(&path, &[clean, torn_frame(&line(&exact))].concat());
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Torn);
    assert_eq!(inspection.recovered, vec![exact]);
}

/// A torn frame whose content runs past the bound (no writer made it): salvage stops at the
/// bound instead of holding whatever the frame expands to.
#[test]
fn zstd_salvage_from_a_torn_frame_stops_at_the_content_bound() {
    let (bench, path, clean) = opened_zstd();
    let mut text = Vec::new();
    let mut records = Vec::new();
    while text.len() as u64 <= FRAME_CONTENT_BYTES_MAX + 64 * 1024 {
        let delta = Chunk::TextDelta { index: 0, text: "lorem ipsum dolor sit amet ".into() };
        let record = Record::new(2 + records.len() as u64, T0, chunk(1, 1, 1, delta));
        text.extend(line(&record));
        records.push(record);
    }
    write(&path, &[clean, torn_frame(&text)].concat());
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Torn);
    // Exactly the records whose whole lines lie within the frame's first
    // FRAME_CONTENT_BYTES_MAX bytes: the complete lines of the bounded decode, no more, no less.
    let mut within = 0;
    let kept: Vec<Record> = records
        .iter()
        .take_while(|record| {
            within += line(record).len() as u64;
            within <= FRAME_CONTENT_BYTES_MAX
        })
        .cloned()
        .collect();
    assert!(kept.len() < records.len(), "the frame runs past the bound");
    assert_eq!(inspection.recovered, kept);
}

/// The first frame holds exactly the header line: a header frame that also carries a record
/// is refused as such, however well-formed both lines are.
#[test]
fn zstd_a_header_frame_holding_more_than_the_header_line_is_corrupt() {
    let (bench, path, clean) = opened_zstd();
    let first = match walk_frames(&clean) {
        FrameWalk::Complete(frames) => frames[0],
        other => panic!("{other:?}"),
    };
    let header_line = zstd::decode_all(&clean[first.start..first.end]).unwrap();
    let turn_start = Record::new(0, T0, Event::TurnStart(TurnStart { turn: 1 }));
    write(&path, &frame(&[header_line, line(&turn_start)].concat(), true));
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt);
    assert_eq!(inspection.error.unwrap().reason, "header frame must hold exactly one line");
}

/// Zero bytes after the last complete frame are a hole only within one unit of the end: the
/// largest frame the writer can make, compressed (`compress_bound` of a record at the line
/// limit and its newline). Exactly that many is torn; one more is corrupt, decided from the
/// length alone (the scan never reads a tail that could not be one unit).
#[test]
fn zstd_a_zero_tail_is_torn_up_to_exactly_one_unit_and_corrupt_past_it() {
    let unit = zstd::zstd_safe::compress_bound(RECORD_LINE_BYTES_MAX + 1);
    let (bench, path, log) = two_turns(Backend::Zstd);
    let clean = read(&path);
    write(&path, &[clean.clone(), vec![0; unit]].concat());
    let inspection = inspect(&bench);
    assert_eq!((inspection.status, inspection.torn_bytes), (ScanStatus::Torn, unit as u64), "{:?}", inspection.error);
    assert_eq!(inspection.records, log.records);

    let reads_before = bench.fs.largest_read();
    write(&path, &[clean.clone(), vec![0; unit + 1]].concat());
    let inspection = inspect(&bench);
    assert_eq!(inspection.status, ScanStatus::Corrupt);
    assert_eq!(inspection.error.unwrap().offset, clean.len() as u64);
    assert!(bench.fs.largest_read() <= reads_before, "read {} bytes at once", bench.fs.largest_read());
}

/// A byte that is not UTF-8 inside a committed record line is named — the line (JSONL, whose
/// records before it are read) or the frame that holds it (zstd) — as corruption (whole
/// records follow it), however many good lines share its chunk or frame.
#[test]
fn a_record_line_that_is_not_utf8_is_named_as_corruption_wherever_it_sits() {
    for backend in [Backend::Jsonl, Backend::Zstd] {
        let (bench, path, log) = two_turns(backend);
        // The plain text of the session: header line, then one line per record.
        let header_line = {
            let text = match backend {
                Backend::Jsonl => read(&path),
                _ => zstd::stream::decode_all(&read(&path)[..]).unwrap(),
            };
            let end = text.iter().position(|&b| b == b'\n').unwrap() + 1;
            text[..end].to_vec()
        };
        let bad = log.records.iter().position(|r| matches!(r.event, Event::UserMessage(_)) && r.seq > 3).unwrap();
        let mut records_text = Vec::new();
        let mut bad_at = 0;
        for (i, record) in log.records.iter().enumerate() {
            let mut bytes = line(record);
            if i == bad {
                bad_at = records_text.len();
                // Inside the message text: a byte no UTF-8 text holds.
                let at = bytes.windows(4).position(|w| w == b"text").unwrap() + 8;
                bytes[at] = 0xff;
            }
            records_text.extend_from_slice(&bytes);
        }
        let file = match backend {
            Backend::Jsonl => [header_line.clone(), records_text].concat(),
            _ => {
                // A frame is one write unit, read whole or not at all: the lines before the
                // bad one get a frame of their own.
                let header = std::str::from_utf8(&header_line[..header_line.len() - 1]).unwrap();
                let header = Format::Zstd.encode_header(&SessionHeader::decode(header).unwrap());
                [header, frame(&records_text[..bad_at], true), frame(&records_text[bad_at..], true)].concat()
            }
        };
        write(&path, &file);

        let inspection = inspect(&bench);
        assert_eq!(inspection.status, ScanStatus::Corrupt, "{backend:?}: {:?}", inspection.error);
        let error = inspection.error.clone().unwrap();
        assert!(error.reason.contains("not UTF-8"), "{backend:?}: {}", error.reason);
        if backend == Backend::Jsonl {
            assert_eq!(error.offset, (header_line.len() + bad_at) as u64, "{}", error.reason);
            assert_eq!(inspection.records, log.records[..bad], "every line before it is read");
        } else {
            // The frame that holds it (a corrupt zstd session reports no records).
            let FrameWalk::Complete(spans) = walk_frames(&file) else { panic!("three whole frames") };
            assert_eq!(error.offset, spans[2].start as u64, "{}", error.reason);
        }
    }
}

/// A power loss that loses the last sector of the last frame's write leaves zeros from a
/// sector boundary to the end of the file, however few of them the file's end leaves: torn,
/// never corrupt (the simulator's zstd hole, found refused as corrupt at 54 zeros). Zero bytes
/// of the frame's own right before the boundary only lengthen the run (a sweep found one such
/// file refused: `tests/fixtures/power-loss/`). A few zeros that cover no boundary are no power
/// loss's signature.
#[test]
fn zstd_zeros_from_a_sector_boundary_to_the_end_are_a_lost_last_sector() {
    let (bench, path, log) = two_turns(Backend::Zstd);
    let clean = read(&path);
    let next = log.records.len() as u64;
    // A last frame whose end falls a few bytes past a sector boundary: the lost sector's zeros
    // are fewer than the 64 a run inside a frame needs.
    let frame_of = |n: u64| {
        let text: Vec<u8> = (0..n)
            .flat_map(|i| {
                let message = Message::user_text(format!("entry {i} of the log, with a few words of its own"));
                line(&Record::new(next + i, T0, Event::UserMessage(UserMessage { message })))
            })
            .collect();
        frame(&text, true)
    };
    let (last, k) = (1..4000)
        .find_map(|n| {
            let last = frame_of(n);
            let k = (1..last.len()).rev().find(|k| (clean.len() + k) % 512 == 0)?;
            (last.len() - k < 64 && last.len() - k >= 2 && k >= 3).then_some((last, k))
        })
        .expect("some frame ends just past a sector boundary");
    // Zeros from the boundary; from three bytes before it (stray zeros of the frame's own);
    // from one byte after it (no boundary among them).
    for (from, covers_a_boundary) in [(k, true), (k - 3, true), (k + 1, false)] {
        let mut holed = last.clone();
        holed[from..].fill(0);
        write(&path, &[clean.clone(), holed].concat());
        let inspection = inspect(&bench);
        let expected = if covers_a_boundary { ScanStatus::Torn } else { ScanStatus::Corrupt };
        assert_eq!(inspection.status, expected, "zeros from byte {from} of {} (boundary at {k})", last.len());
        if covers_a_boundary {
            assert_eq!(inspection.torn_bytes, last.len() as u64, "the whole frame is the torn tail");
        }
    }
}
