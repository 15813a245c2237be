//! FAILURE-LIMITS-AGREE: the writer never accepts a record its reader would refuse. Records at,
//! just under and just over the record limit, with text that JSON escapes at every rate, on
//! every backend: accepted ones are on disk byte for byte and read back equal, refused ones
//! leave nothing behind.

use faultline_runtime::event::*;
use faultline_runtime::store::{RECORD_LINE_BYTES_MAX, WRITE_UNIT_BYTES_MAX};
use faultline_runtime::Error;
use proptest::prelude::*;

use crate::store_contract::{all, sid, Backend, Bench};
use crate::support::T0;

/// The records before the big one: a turn and a step to hold it.
fn opening() -> Vec<Record> {
    vec![
        Record::new(0, T0, Event::TurnStart(TurnStart { turn: 1 })),
        Record::new(1, T0, Event::StepStart(StepRef { turn: 1, step: 1 })),
    ]
}

/// A user message whose encoded line is `line_bytes` long, give or take one escape of `fill`
/// (the line never exceeds `line_bytes`).
fn message_of_line(line_bytes: usize, fill: char) -> Record {
    let record =
        |text: String| Record::new(2, T0, Event::UserMessage(UserMessage { message: Message::user_text(&text) }));
    let envelope = record(String::new()).encode().len();
    let per_char = record(fill.to_string()).encode().len() - envelope;
    let record = record(std::iter::repeat_n(fill, (line_bytes - envelope) / per_char).collect());
    assert!(record.encode().len() <= line_bytes && record.encode().len() + per_char > line_bytes);
    record
}

fn check_round_trip(big: &Record) {
    let line = big.encode().len();
    for backend in all() {
        let bench = Bench::new(backend);
        let store = bench.store(&bench.process("w"));
        let mut log = store.create(&sid("s"), T0).unwrap();
        log.append(&opening()).unwrap();
        let appended = log.append(std::slice::from_ref(big));
        log.close().unwrap();
        let back = store.inspect(&sid("s")).unwrap();
        if line <= RECORD_LINE_BYTES_MAX {
            appended.unwrap_or_else(|e| panic!("{backend:?}: a {line}-byte line is within the limit: {e}"));
            assert_eq!(back.records.len(), 3, "{backend:?}");
            assert_eq!(back.records[2], *big, "{backend:?}: read back equal");
            // What is on disk is the very line, byte for byte: read from the file or the
            // database directly, not re-encoded by the code under test.
            if let Some(stored) = stored_line(&bench, 2) {
                assert_eq!(stored.len(), line, "{backend:?}: the stored line's length");
                assert!(stored == big.encode().as_bytes(), "{backend:?}: the stored bytes are the line");
            }
        } else {
            let refused = appended.expect_err("over the limit");
            assert!(matches!(refused, Error::RecordTooLarge { seq: 2, .. }), "{backend:?}: {refused}");
            assert_eq!(back.records, opening(), "{backend:?}: nothing of the refused batch was written");
        }
        assert!(back.error.is_none(), "{backend:?}: the reader accepts what the writer wrote: {:?}", back.error);
    }
}

/// The bytes stored for seq `seq` of session `s`, read past the store: the file's line
/// (zstd frames decompressed by zstd itself) or the database row's text. `None` for memory.
#[allow(clippy::disallowed_methods)] // reads the test's own files
fn stored_line(bench: &Bench, seq: usize) -> Option<Vec<u8>> {
    match bench.backend {
        Backend::Memory => None,
        Backend::Jsonl | Backend::Zstd => {
            let raw = std::fs::read(bench.session_file(&sid("s")).unwrap()).unwrap();
            let text = if bench.backend == Backend::Zstd { zstd::stream::decode_all(&raw[..]).unwrap() } else { raw };
            // Line 0 is the header; seq n is line n + 1.
            text.split(|&b| b == b'\n').nth(seq + 1).map(<[u8]>::to_vec)
        }
        Backend::Sqlite => {
            let db = rusqlite::Connection::open(bench.dir.path().join("sessions.sqlite")).unwrap();
            let record: String = db
                .query_row("SELECT record FROM events WHERE session_id = 's' AND seq = ?1", [seq as i64], |row| {
                    row.get(0)
                })
                .unwrap();
            Some(record.into_bytes())
        }
        Backend::Postgres => {
            let url = bench.database_url.clone().unwrap();
            // The blocking client on a thread of its own (never inside a runtime).
            let record: String = std::thread::spawn(move || {
                let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                db.query_one(
                    "SELECT record FROM faultline_events WHERE session_id = 's' AND seq = $1",
                    &[&(seq as i64)],
                )
                .unwrap()
                .get(0)
            })
            .join()
            .unwrap();
            Some(record.into_bytes())
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn every_record_the_writer_accepts_around_the_limit_reads_back_identically_on_every_store(
        offset in -8i64..=8,
        fill in prop::sample::select(vec!['a', '"', '\u{1}', '\n', 'é', '😀']),
    ) {
        let line = (RECORD_LINE_BYTES_MAX as i64 + offset) as usize;
        check_round_trip(&message_of_line(line, fill));
    }
}

#[test]
fn a_line_of_exactly_the_limit_is_kept_and_one_byte_more_is_refused() {
    let exact = message_of_line(RECORD_LINE_BYTES_MAX, 'a');
    assert_eq!(exact.encode().len(), RECORD_LINE_BYTES_MAX);
    check_round_trip(&exact);
    let over = message_of_line(RECORD_LINE_BYTES_MAX + 1, 'a');
    assert_eq!(over.encode().len(), RECORD_LINE_BYTES_MAX + 1);
    check_round_trip(&over);
}

#[test]
fn a_record_larger_than_a_write_unit_is_a_unit_of_its_own_and_reads_back() {
    // Two records around one oversize one: three units, each complete on its own.
    let big = message_of_line(WRITE_UNIT_BYTES_MAX * 3, 'b');
    let mut batch = opening();
    batch.push(big);
    batch.push(Record::new(3, T0, Event::StepEnd(StepRef { turn: 1, step: 1 })));
    for backend in all() {
        let bench = Bench::new(backend);
        let store = bench.store(&bench.process("w"));
        let mut log = store.create(&sid("s"), T0).unwrap();
        log.append(&batch).unwrap();
        log.close().unwrap();
        assert_eq!(store.inspect(&sid("s")).unwrap().records, batch, "{backend:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The answer limit counts text as serde_json writes it: every escape at its real width.
    #[test]
    fn json_escaped_bytes_is_the_width_serde_json_writes(text in "(?s).{0,64}") {
        let written = serde_json::to_string(&text).unwrap().len() - 2;
        prop_assert_eq!(faultline_runtime::store::json_escaped_bytes(&text), written);
    }
}

#[test]
fn json_escaped_bytes_counts_every_kind_of_escape() {
    use faultline_runtime::store::json_escaped_bytes;
    assert_eq!(json_escaped_bytes("ab"), 2);
    assert_eq!(json_escaped_bytes("\"\\\n\r\t\u{8}\u{c}"), 14);
    assert_eq!(json_escaped_bytes("\u{1}\u{1f}"), 12);
    assert_eq!(json_escaped_bytes("é"), 2);
}

/// The limit is per line, wherever in a batch the line falls: small records after one of 5/8
/// of the limit (so more than half the limit precedes them) are accepted whole on every
/// backend. Found by the mutation guard: a line length measured from the batch's start
/// (`len + start` for `len - start`) passed every other test.
#[test]
fn a_line_deep_into_a_batch_is_measured_on_its_own() {
    let big = message_of_line(RECORD_LINE_BYTES_MAX / 8 * 5, 'c');
    let mut batch = opening();
    batch.push(big);
    batch.push(Record::new(3, T0, Event::StepEnd(StepRef { turn: 1, step: 1 })));
    batch.push(Record::new(4, T0, Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Completed })));
    let before_last: usize = batch[..4].iter().map(|r| r.encode().len() + 1).sum();
    assert!(2 * before_last > RECORD_LINE_BYTES_MAX, "more than half the limit precedes the last line");
    for backend in all() {
        let bench = Bench::new(backend);
        let store = bench.store(&bench.process("w"));
        let mut log = store.create(&sid("s"), T0).unwrap();
        log.append(&batch).unwrap_or_else(|e| panic!("{backend:?}: every line fits: {e}"));
        log.close().unwrap();
        let back = store.inspect(&sid("s")).unwrap();
        assert_eq!(back.records, batch, "{backend:?}");
        assert_eq!(back.record_count, batch.len() as u64, "{backend:?}");
    }
}

/// A user message at `seq` whose line, newline included, is exactly `bytes` long.
fn message_with_line(seq: u64, bytes: usize) -> Record {
    let record =
        |text: String| Record::new(seq, T0, Event::UserMessage(UserMessage { message: Message::user_text(&text) }));
    let envelope = record(String::new()).encode().len() + 1;
    let record = record("x".repeat(bytes - envelope));
    assert_eq!(record.encode().len() + 1, bytes);
    record
}

/// One append's batch is written in units of at most WRITE_UNIT_BYTES_MAX of text, each cut at
/// a line end and packed full — a unit ends only where the next line would not fit, and a
/// unit of exactly the limit is whole. (The torn-tail rule leans on that bound: a zeroed
/// region farther than one unit from the end is corruption.) In zstd each unit is one frame,
/// so the file itself shows where the writer cut.
#[test]
#[allow(clippy::disallowed_methods)] // reads the written file back
fn one_batch_is_cut_into_full_write_units_at_line_ends() {
    use faultline_runtime::store::{FileStore, Format, Store};
    use faultline_runtime::testing::{walk_frames, FrameWalk};
    let quarter = WRITE_UNIT_BYTES_MAX / 4;
    // Four lines that fill the first unit exactly, then two that start the second.
    let sizes = [quarter, quarter, quarter, WRITE_UNIT_BYTES_MAX - 3 * quarter, quarter, 400];
    let batch: Vec<Record> = sizes.iter().enumerate().map(|(i, &n)| message_with_line(2 + i as u64, n)).collect();
    let dir = tempfile::tempdir().unwrap();
    let process = crate::fixtures::TestProcess::new("w", &crate::fixtures::TestProcess::world());
    let seams = crate::fixtures::seams_with(process, std::sync::Arc::new(crate::fixtures::FaultyFs::default()));
    let store = FileStore::new(seams, dir.path(), Format::Zstd);
    let mut log = store.create(&sid("s"), T0).unwrap();
    log.append(&opening()).unwrap();
    log.append(&batch).unwrap();
    log.close().unwrap();
    let bytes = std::fs::read(store.session_path(&sid("s"))).unwrap();
    let FrameWalk::Complete(frames) = walk_frames(&bytes) else { panic!("a closed file has only whole frames") };
    let units: Vec<usize> =
        frames[2..].iter().map(|f| zstd::decode_all(&bytes[f.start..f.end]).unwrap().len()).collect();
    assert_eq!(units, [WRITE_UNIT_BYTES_MAX, quarter + 400], "frames after the header and the opening batch");
}
