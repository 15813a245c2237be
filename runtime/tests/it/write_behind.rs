//! Write-behind on tokio's paused clock (FAILURE-WRITE-BEHIND, FAILURE-PERSISTENCE-WIRING):
//! no wall-clock sleeps; time moves only when the test advances it.
#![allow(clippy::disallowed_methods)] // the test drives tokio's paused clock directly

use std::sync::{Arc, Mutex};
use std::time::Duration;

use faultline_runtime::event::*;
use faultline_runtime::production::{RealFs, SystemClock};
use faultline_runtime::store::*;
use faultline_runtime::{seams::Clock, Error, Result};

use crate::fixtures::TestProcess;
use crate::store_contract::sid;

/// Each written batch: (clock ms when written, seqs).
type BatchLog = Arc<Mutex<Vec<(u128, Vec<u64>)>>>;

/// A log that records each batch (with the clock time it was written) and fails on demand.
/// It seals batches when the log it wraps does, and records which batches came sealed.
#[derive(Debug)]
struct RecordingLog {
    inner: Box<dyn SessionLog>,
    batches: BatchLog,
    /// The seqs of each batch written as a producer sealed it.
    sealed: Arc<Mutex<Vec<Vec<u64>>>>,
    fail_next: Arc<Mutex<u32>>,
    clock: SystemClock,
    close_fails: bool,
}

impl RecordingLog {
    fn injected_failure(&self) -> Result<()> {
        let mut fail = self.fail_next.lock().unwrap();
        if *fail > 0 {
            *fail -= 1;
            return Err(Error::io("append", std::io::Error::other("injected EIO")));
        }
        Ok(())
    }

    fn record(&self, seqs: Vec<u64>) {
        self.batches.lock().unwrap().push((self.clock.now().as_millis(), seqs));
    }
}

impl SessionLog for RecordingLog {
    fn id(&self) -> &SessionId {
        self.inner.id()
    }
    fn next_seq(&self) -> u64 {
        self.inner.next_seq()
    }
    fn token(&self) -> u64 {
        self.inner.token()
    }
    fn append(&mut self, batch: &[Record]) -> Result<()> {
        self.injected_failure()?;
        self.inner.append(batch)?;
        self.record(batch.iter().map(|r| r.seq).collect());
        Ok(())
    }
    fn sealer(&self) -> Option<Arc<Sealer>> {
        self.inner.sealer()
    }
    fn append_sealed(&mut self, batch: &SealedBatch) -> Result<()> {
        self.injected_failure()?;
        self.inner.append_sealed(batch)?;
        let seqs: Vec<u64> = batch.records().iter().map(|r| r.record.seq).collect();
        self.sealed.lock().unwrap().push(seqs.clone());
        self.record(seqs);
        Ok(())
    }
    fn close(self: Box<Self>) -> Result<()> {
        if self.close_fails {
            return Err(Error::io("close", std::io::Error::other("injected close failure")));
        }
        self.inner.close()
    }
}

struct Rig<S = MemoryStore> {
    wb: WriteBehind,
    store: S,
    batches: BatchLog,
    sealed: Arc<Mutex<Vec<Vec<u64>>>>,
    fail_next: Arc<Mutex<u32>>,
    reported: Arc<Mutex<Vec<String>>>,
}

fn rig(config: WriteBehindConfig, close_fails: bool) -> Rig {
    let world = TestProcess::world();
    rig_on(MemoryStore::new(TestProcess::new("a", &world)), config, close_fails)
}

/// A rig over a JSONL or zstd file store in `dir`: its log seals full batches.
fn file_rig(dir: &std::path::Path, format: Format, config: WriteBehindConfig) -> Rig<FileStore> {
    let seams = crate::fixtures::seams_with(TestProcess::new("a", &TestProcess::world()), Arc::new(RealFs));
    rig_on(FileStore::new(seams, dir, format), config, false)
}

fn rig_on<S: Store>(store: S, config: WriteBehindConfig, close_fails: bool) -> Rig<S> {
    let clock = SystemClock::new();
    let batches = Arc::default();
    let sealed = Arc::default();
    let fail_next = Arc::default();
    let reported: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = RecordingLog {
        inner: store.create(&sid("s"), 0).unwrap(),
        batches: Arc::clone(&batches),
        sealed: Arc::clone(&sealed),
        fail_next: Arc::clone(&fail_next),
        clock,
        close_fails,
    };
    let sink = reported.clone();
    let reporter: FailureReporter = Arc::new(move |e: &Error| sink.lock().unwrap().push(e.to_string()));
    let wb = WriteBehind::start(Box::new(log), Arc::new(clock), config, Some(reporter));
    Rig { wb, store, batches, sealed, fail_next, reported }
}

fn turn_start(turn: u32) -> Event {
    Event::TurnStart(TurnStart { turn })
}

fn turn_end(turn: u32) -> Event {
    Event::TurnEnd(TurnEnd { turn, reason: TurnEndReason::Completed })
}

/// Appends alternating turn/start and turn/end events (always a valid log).
async fn append_n(wb: &WriteBehind, n: u64) {
    for _ in 0..n {
        let seq = wb.next_seq();
        let turn = (seq / 2 + 1) as u32;
        let event = if seq % 2 == 0 { turn_start(turn) } else { turn_end(turn) };
        wb.append(event, None).await.unwrap();
    }
}

/// Advances the paused clock in 1 ms steps, letting the writer task run what became due at
/// each step (a single big `advance` would run it only at the end of the jump).
async fn advance_ms(ms: u64) {
    for _ in 0..ms {
        tokio::time::advance(Duration::from_millis(1)).await;
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn twenty_events_ten_ms_apart_form_exactly_one_batch_at_the_window() {
    let rig = rig(WriteBehindConfig::default(), false);
    for _ in 0..20 {
        append_n(&rig.wb, 1).await;
        advance_ms(10).await;
    }
    // 200 ms have passed since the first event armed the window.
    advance_ms(1).await;
    let batches = rig.batches.lock().unwrap().clone();
    assert_eq!(batches.len(), 1, "{batches:?}");
    assert_eq!(batches[0].0, 200, "written when the window armed by the first event closed");
    assert_eq!(batches[0].1, (0..20).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn the_window_is_not_reset_by_later_events() {
    let rig = rig(WriteBehindConfig::default(), false);
    append_n(&rig.wb, 1).await;
    advance_ms(150).await;
    append_n(&rig.wb, 1).await;
    advance_ms(60).await;
    append_n(&rig.wb, 1).await;
    advance_ms(250).await;
    let batches = rig.batches.lock().unwrap().clone();
    assert_eq!(batches, vec![(200, vec![0, 1]), (410, vec![2])], "the third event (at 210 ms) armed a new window");
}

#[tokio::test(start_paused = true)]
async fn flush_is_a_barrier_that_skips_the_window() {
    let rig = rig(WriteBehindConfig::default(), false);
    append_n(&rig.wb, 3).await;
    assert_eq!(rig.wb.pending_len(), 3, "accepted, not yet durable");
    rig.wb.flush().await.unwrap();
    assert_eq!(rig.wb.pending_len(), 0);
    assert_eq!(rig.batches.lock().unwrap().clone(), vec![(0, vec![0, 1, 2])]);
    rig.wb.flush().await.unwrap();
    assert_eq!(rig.batches.lock().unwrap().len(), 1, "a flush with nothing pending writes nothing");
}

#[tokio::test(start_paused = true)]
async fn a_failed_batch_is_requeued_in_order_and_pauses_the_automatic_path() {
    let rig = rig(WriteBehindConfig::default(), false);
    *rig.fail_next.lock().unwrap() = 1;
    append_n(&rig.wb, 5).await;
    advance_ms(201).await;
    assert_eq!(rig.reported.lock().unwrap().len(), 1, "the background failure is reported");
    assert!(rig.batches.lock().unwrap().is_empty());
    advance_ms(5_000).await;
    assert!(rig.batches.lock().unwrap().is_empty(), "no automatic retry while paused");
    append_n(&rig.wb, 2).await;
    rig.wb.flush().await.unwrap();
    assert_eq!(rig.batches.lock().unwrap().clone(), vec![(5201, (0..7).collect())], "one batch, original order");
}

#[tokio::test(start_paused = true)]
async fn an_explicit_flush_surfaces_the_failure_and_a_later_flush_retries() {
    let rig = rig(WriteBehindConfig::default(), false);
    *rig.fail_next.lock().unwrap() = 1;
    append_n(&rig.wb, 2).await;
    let error = rig.wb.flush().await.unwrap_err();
    assert!(matches!(error, Error::Persist(_)), "{error}");
    assert!(error.to_string().contains("injected EIO"));
    assert_eq!(rig.wb.pending_len(), 2, "nothing accepted is lost");
    rig.wb.flush().await.unwrap();
    assert_eq!(rig.batches.lock().unwrap().clone(), vec![(0, vec![0, 1])]);
}

#[tokio::test(start_paused = true)]
async fn a_full_batch_is_written_without_waiting_out_the_window() {
    let config = WriteBehindConfig { batch_window_ms: 200, pending_events_max: 16, batch_events_max: 4 };
    let rig = rig(config, false);
    append_n(&rig.wb, 4).await;
    let_writer_settle().await;
    assert_eq!(rig.batches.lock().unwrap().clone(), vec![(0, vec![0, 1, 2, 3])], "a whole batch goes at once");
    append_n(&rig.wb, 2).await;
    advance_ms(100).await;
    assert_eq!(rig.batches.lock().unwrap().len(), 1, "a partial batch waits for its window");
    advance_ms(101).await;
    assert_eq!(rig.batches.lock().unwrap().clone(), vec![(0, vec![0, 1, 2, 3]), (200, vec![4, 5])]);
}

/// A fast stream of large deltas is written as it comes, not held whole until its window
/// closes (a 15 MiB answer once sat in memory as records, their lines and one batch at once).
#[tokio::test(start_paused = true)]
async fn megabytes_pending_are_written_without_waiting_out_the_window() {
    let config = WriteBehindConfig { batch_window_ms: 60_000, ..WriteBehindConfig::default() };
    let rig = rig(config, false);
    let opening = [
        turn_start(1),
        Event::StepStart(StepRef { turn: 1, step: 1 }),
        Event::UserMessage(UserMessage { message: Message::user_text("go") }),
        Event::RequestHeader(crate::support::request_header()),
    ];
    for event in opening {
        rig.wb.append(event, None).await.unwrap();
    }
    let delta = || crate::support::chunk(1, 1, 1, Chunk::TextDelta { index: 0, text: "x".repeat(1 << 20) });
    for _ in 0..3 {
        rig.wb.append(delta(), None).await.unwrap();
    }
    let_writer_settle().await;
    assert!(rig.batches.lock().unwrap().is_empty(), "3 MiB pending waits for its window");
    rig.wb.append(delta(), None).await.unwrap();
    let_writer_settle().await;
    assert_eq!(
        rig.batches.lock().unwrap().clone(),
        vec![(0, (0..8).collect::<Vec<u64>>())],
        "past 4 MiB pending, the queue is written at once"
    );
    // Written, those bytes are no longer pending: small events wait for their window again.
    for _ in 0..2 {
        let small = crate::support::chunk(1, 1, 1, Chunk::TextDelta { index: 0, text: "x".into() });
        rig.wb.append(small, None).await.unwrap();
    }
    advance_ms(100).await;
    assert_eq!(rig.batches.lock().unwrap().len(), 1, "a small batch waits for its window");
    rig.wb.flush().await.unwrap();
    assert_eq!(rig.batches.lock().unwrap().last().unwrap().1, vec![8, 9], "and is a valid batch");
}

/// Lets the writer task run until it waits again (on its window or for a wake).
async fn let_writer_settle() {
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_event_that_fills_a_batch_wakes_a_writer_already_waiting_on_its_window() {
    // Each event is appended while the writer already sleeps on the window, so the only
    // thing that can get the full batch written before the window is the wake sent by the
    // append that fills it (a wake left over from an earlier append would hide its absence).
    let config = WriteBehindConfig { batch_window_ms: 200, pending_events_max: 16, batch_events_max: 4 };
    let rig = rig(config, false);
    for _ in 0..3 {
        append_n(&rig.wb, 1).await;
        let_writer_settle().await;
    }
    assert!(rig.batches.lock().unwrap().is_empty(), "three of four: the writer waits for the window");
    append_n(&rig.wb, 1).await;
    let_writer_settle().await;
    assert_eq!(rig.batches.lock().unwrap().clone(), vec![(0, vec![0, 1, 2, 3])], "the fourth event woke the writer");
}

#[tokio::test(start_paused = true)]
async fn a_producer_blocked_on_a_full_queue_never_waits_for_the_timer() {
    let rig =
        rig(WriteBehindConfig { batch_window_ms: 200, pending_events_max: 4, ..WriteBehindConfig::default() }, false);
    // Far more events than the queue holds, with no time passing: every one is accepted
    // because each full queue is written as soon as it fills.
    append_n(&rig.wb, 40).await;
    assert_eq!(rig.wb.next_seq(), 40);
    let batches = rig.batches.lock().unwrap().clone();
    assert!(batches.iter().all(|(ms, _)| *ms == 0), "{batches:?}");
    assert!(batches.len() >= 9, "written as it filled: {batches:?}");
}

/// One failed batch pauses the automatic path until an explicit flush. A producer that meets
/// the full queue then gets the failure instead of waiting for room only its own flush would
/// make (a turn streaming into it hung for good); the flush retries, and nothing accepted is
/// lost or written twice.
#[tokio::test(start_paused = true)]
async fn a_producer_meeting_a_full_queue_behind_a_failed_batch_gets_the_failure() {
    let rig =
        rig(WriteBehindConfig { batch_window_ms: 200, pending_events_max: 4, ..WriteBehindConfig::default() }, false);
    *rig.fail_next.lock().unwrap() = 1;
    let mut accepted = 0u64;
    let error = loop {
        let seq = rig.wb.next_seq();
        let turn = (seq / 2 + 1) as u32;
        let event = if seq % 2 == 0 { turn_start(turn) } else { turn_end(turn) };
        let appended = tokio::time::timeout(Duration::from_secs(60), rig.wb.append(event, None))
            .await
            .expect("a producer never waits for room that only a flush makes");
        match appended {
            Ok(_) => accepted += 1,
            Err(error) => break error,
        }
        assert!(accepted <= 8, "the failed batch pauses the writer; the queue fills");
    };
    assert!(matches!(&error, Error::Persist(_)), "{error}");
    assert!(error.to_string().contains("injected EIO"), "the batch's own failure: {error}");
    assert_eq!(accepted, 4, "the queue's bound was accepted, nothing more");
    assert_eq!(rig.reported.lock().unwrap().len(), 1);

    rig.wb.flush().await.expect("the retried batch lands");
    append_n(&rig.wb, 4).await;
    rig.wb.flush().await.unwrap();
    let written: Vec<u64> = rig.batches.lock().unwrap().iter().flat_map(|(_, seqs)| seqs.clone()).collect();
    assert_eq!(written, (0..8).collect::<Vec<_>>(), "every accepted record once, in order");
}

#[tokio::test(start_paused = true)]
async fn close_drains_then_releases_ownership() {
    let rig = rig(WriteBehindConfig::default(), false);
    append_n(&rig.wb, 4).await;
    let wb = rig.wb.clone();
    rig.wb.close().await.unwrap();
    assert!(matches!(wb.append(turn_start(9), None).await, Err(Error::Closed)), "admission is closed");
    assert_eq!(rig.batches.lock().unwrap().clone(), vec![(0, vec![0, 1, 2, 3])]);
    let world = TestProcess::world();
    let other = rig.store.as_process(TestProcess::new("b", &world));
    let opened = other.open(&sid("s"), Takeover::Never).unwrap();
    assert_eq!(opened.loaded.records.len(), 4, "released: another writer opens without takeover");
    assert!(opened.loaded.repair.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_close_error_never_masks_an_earlier_drain_error() {
    let rig = rig(WriteBehindConfig::default(), true);
    *rig.fail_next.lock().unwrap() = 1;
    append_n(&rig.wb, 1).await;
    let error = rig.wb.close().await.unwrap_err();
    assert!(error.to_string().contains("injected EIO"), "the drain error wins: {error}");

    let rig = self::rig(WriteBehindConfig::default(), true);
    append_n(&rig.wb, 1).await;
    let error = rig.wb.close().await.unwrap_err();
    assert!(error.to_string().contains("injected close failure"), "{error}");
}

/// Each knob's documented range is asserted when the writer starts: the edges start, one
/// step outside each refuses with the knob's name (a zero-sized queue would never accept an
/// event; a zero-sized batch would never write one).
/// A log whose append panics: a bug in an embedder's log (or in ours).
#[derive(Debug)]
struct PanickingLog(Box<dyn SessionLog>);

impl SessionLog for PanickingLog {
    fn id(&self) -> &SessionId {
        self.0.id()
    }
    fn next_seq(&self) -> u64 {
        self.0.next_seq()
    }
    fn token(&self) -> u64 {
        self.0.token()
    }
    fn append(&mut self, _batch: &[Record]) -> Result<()> {
        panic!("the log broke mid-append")
    }
    fn close(self: Box<Self>) -> Result<()> {
        self.0.close()
    }
}

fn panicking_write_behind(config: WriteBehindConfig) -> WriteBehind {
    let store = MemoryStore::new(TestProcess::new("a", &TestProcess::world()));
    let log = PanickingLog(store.create(&sid("s"), 0).unwrap());
    WriteBehind::start(Box::new(log), Arc::new(SystemClock::new()), config, None)
}

#[tokio::test(start_paused = true)]
async fn a_writer_that_dies_fails_the_barrier_instead_of_hanging_it() {
    let wb = panicking_write_behind(WriteBehindConfig::default());
    wb.append(turn_start(1), None).await.unwrap();
    let flushed = tokio::time::timeout(Duration::from_secs(600), wb.flush()).await.expect("the barrier returned");
    assert!(matches!(&flushed, Err(Error::Persist(e)) if e.to_string().contains("writer task died")), "{flushed:?}");
    // From here nothing is accepted, and every barrier says why at once.
    assert!(matches!(wb.append(turn_end(1), None).await, Err(Error::Persist(_))));
    assert!(matches!(wb.flush().await, Err(Error::Persist(_))));
    assert!(matches!(wb.close().await, Err(Error::Persist(_))));
}

#[tokio::test(start_paused = true)]
async fn a_producer_waiting_for_room_learns_that_the_writer_died() {
    let wb = panicking_write_behind(WriteBehindConfig { pending_events_max: 1, ..WriteBehindConfig::default() });
    wb.append(turn_start(1), None).await.unwrap();
    // The queue is full; room would come from the writer, which dies at the window's end.
    let second = tokio::time::timeout(Duration::from_secs(600), wb.append(turn_end(1), None)).await;
    assert!(matches!(second, Ok(Err(Error::Persist(_)))), "{second:?}");
}

#[tokio::test]
async fn each_knob_outside_its_documented_range_is_refused_at_start() {
    let base = WriteBehindConfig::default();
    let edges = [
        WriteBehindConfig { batch_window_ms: 60_000, ..base },
        WriteBehindConfig { pending_events_max: 1, ..base },
        WriteBehindConfig { pending_events_max: 1_000_000, ..base },
        WriteBehindConfig { batch_events_max: 1, ..base },
        WriteBehindConfig { batch_events_max: BATCH_EVENTS_MAX, ..base },
    ];
    for config in edges {
        rig(config, false).wb.close().await.unwrap();
    }
    let outside = [
        (WriteBehindConfig { batch_window_ms: 60_001, ..base }, "batch_window_ms"),
        (WriteBehindConfig { pending_events_max: 0, ..base }, "pending_events_max"),
        (WriteBehindConfig { pending_events_max: 1_000_001, ..base }, "pending_events_max"),
        (WriteBehindConfig { batch_events_max: 0, ..base }, "batch_events_max"),
        (WriteBehindConfig { batch_events_max: BATCH_EVENTS_MAX + 1, ..base }, "batch_events_max"),
    ];
    for (config, knob) in outside {
        let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rig(config, false)))
            .err()
            .unwrap_or_else(|| panic!("{knob} out of range must be refused"));
        let message =
            refused.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| refused.downcast_ref::<String>().cloned());
        assert!(message.as_deref().is_some_and(|m| m.contains(knob)), "{knob}: {message:?}");
    }
}

/// Every batch the rig's log wrote, seqs only.
fn batch_seqs<S>(rig: &Rig<S>) -> Vec<Vec<u64>> {
    rig.batches.lock().unwrap().iter().map(|(_, seqs)| seqs.clone()).collect()
}

/// Closes a file rig and returns its session file's bytes and the records it holds (read
/// back by a load, without the closers the load's repair adds after them).
async fn close_file_rig(rig: Rig<FileStore>) -> (Vec<u8>, Vec<Record>) {
    let Rig { wb, store, .. } = rig;
    let written = wb.next_seq() as usize;
    wb.close().await.unwrap();
    let bytes = crate::fixtures::read(&store.session_path(&sid("s")));
    let mut records = store.load(&sid("s")).unwrap().records;
    records.truncate(written);
    (bytes, records)
}

/// The session file a plain `SessionLog::append` of the same records, cut into the same
/// batches, writes: the oracle for the bytes of sealed batches.
fn appended_directly(format: Format, records: &[Record], batches: &[Vec<u64>]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let seams = crate::fixtures::seams_with(TestProcess::new("b", &TestProcess::world()), Arc::new(RealFs));
    let store = FileStore::new(seams, dir.path(), format);
    let mut log = store.create(&sid("s"), 0).unwrap();
    for batch in batches {
        let batch: Vec<Record> = batch.iter().map(|&seq| records[seq as usize].clone()).collect();
        log.append(&batch).unwrap();
    }
    log.close().unwrap();
    crate::fixtures::read(&store.session_path(&sid("s")))
}

fn four_per_batch() -> WriteBehindConfig {
    WriteBehindConfig { batch_events_max: 4, ..WriteBehindConfig::default() }
}

#[tokio::test(start_paused = true)]
async fn full_batches_are_sealed_by_their_producer_and_written_byte_for_byte_as_the_writer_would() {
    for format in [Format::Jsonl, Format::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let rig = file_rig(dir.path(), format, four_per_batch());
        append_n(&rig.wb, 2).await;
        advance_ms(201).await;
        // Two batches fill (and are sealed as they do), one event is left over.
        append_n(&rig.wb, 9).await;
        rig.wb.flush().await.unwrap();
        let expected: Vec<Vec<u64>> = vec![vec![0, 1], vec![2, 3, 4, 5], vec![6, 7, 8, 9], vec![10]];
        assert_eq!(batch_seqs(&rig), expected, "{format:?}");
        assert_eq!(
            rig.sealed.lock().unwrap().clone(),
            expected[1..3].to_vec(),
            "{format:?}: the full ones came sealed"
        );
        let (bytes, records) = close_file_rig(rig).await;
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), (0..11).collect::<Vec<_>>());
        assert!(bytes == appended_directly(format, &records, &expected), "{format:?}: sealed bytes differ");
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_partial_batch_is_retried_alone_ahead_of_the_batches_sealed_behind_it() {
    let dir = tempfile::tempdir().unwrap();
    let rig = file_rig(dir.path(), Format::Zstd, four_per_batch());
    *rig.fail_next.lock().unwrap() = 1;
    append_n(&rig.wb, 2).await;
    advance_ms(201).await;
    assert_eq!(rig.reported.lock().unwrap().len(), 1, "the partial batch failed");
    // Paused: two more batches fill and are sealed behind the failed one.
    append_n(&rig.wb, 9).await;
    rig.wb.flush().await.unwrap();
    let expected: Vec<Vec<u64>> = vec![vec![0, 1], vec![2, 3, 4, 5], vec![6, 7, 8, 9], vec![10]];
    assert_eq!(batch_seqs(&rig), expected, "the retry must not reach into a sealed batch");
    assert_eq!(rig.sealed.lock().unwrap().clone(), expected[1..3].to_vec());
    let (bytes, records) = close_file_rig(rig).await;
    assert!(bytes == appended_directly(Format::Zstd, &records, &expected));
}

#[tokio::test(start_paused = true)]
async fn a_sealed_batch_that_fails_stays_at_the_front_and_the_next_flush_writes_it_once() {
    for format in [Format::Jsonl, Format::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let rig = file_rig(dir.path(), format, four_per_batch());
        *rig.fail_next.lock().unwrap() = 1;
        append_n(&rig.wb, 4).await;
        let_writer_settle().await;
        assert_eq!(rig.reported.lock().unwrap().len(), 1, "{format:?}: the full batch was tried at once and failed");
        assert_eq!(rig.wb.pending_len(), 4, "nothing accepted is lost");
        append_n(&rig.wb, 1).await;
        rig.wb.flush().await.unwrap();
        let expected: Vec<Vec<u64>> = vec![vec![0, 1, 2, 3], vec![4]];
        assert_eq!(batch_seqs(&rig), expected, "{format:?}");
        assert_eq!(rig.sealed.lock().unwrap().clone(), vec![vec![0, 1, 2, 3]], "{format:?}: retried as sealed");
        let (bytes, records) = close_file_rig(rig).await;
        assert_eq!(records.len(), 5);
        assert!(bytes == appended_directly(format, &records, &expected), "{format:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_full_batch_holding_a_record_too_large_to_read_back_is_refused_by_the_writer_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let rig =
        file_rig(dir.path(), Format::Jsonl, WriteBehindConfig { batch_events_max: 3, ..WriteBehindConfig::default() });
    let header_only = crate::fixtures::read(&rig.store.session_path(&sid("s")));
    rig.wb.append(turn_start(1), None).await.unwrap();
    rig.wb.append(Event::StepStart(StepRef { turn: 1, step: 1 }), None).await.unwrap();
    let huge = "a".repeat(RECORD_LINE_BYTES_MAX);
    rig.wb.append(Event::UserMessage(UserMessage { message: Message::user_text(huge) }), None).await.unwrap();
    let error = rig.wb.flush().await.unwrap_err();
    assert!(error.to_string().contains("record seq 2 is"), "{error}");
    assert!(rig.sealed.lock().unwrap().is_empty(), "the seal was refused, not written");
    assert!(batch_seqs(&rig).is_empty());
    assert_eq!(rig.wb.pending_len(), 3, "the batch stays queued");
    assert_eq!(crate::fixtures::read(&rig.store.session_path(&sid("s"))), header_only);
}

/// What a write-behind made durable on `store`'s own log (no wrapper between them: the
/// writer hands the backend the records it encoded when they were accepted) reads back from
/// the store, record for record.
async fn write_behind_reads_back<S: Store>(store: S) {
    let log = store.create(&sid("wb"), 0).unwrap();
    let wb = WriteBehind::start(log, Arc::new(SystemClock::new()), WriteBehindConfig::default(), None);
    let mut accepted = wb.subscribe();
    append_n(&wb, 6).await;
    wb.flush().await.unwrap();
    wb.close().await.unwrap();
    let mut appended = Vec::new();
    while let Ok(record) = accepted.try_recv() {
        appended.push(Arc::unwrap_or_clone(record));
    }
    assert_eq!(appended.len(), 6);
    assert_eq!(store.inspect(&sid("wb")).unwrap().records, appended);
}

/// The memory and SQLite backends write what they are handed as records (only the file
/// medium writes the accepted lines and sealed bytes itself): a write-behind over them must
/// still land every record. Its lines were once dropped there without any test noticing
/// (cargo-mutants on `store/writer.rs`: the default `write_fenced_accepted` as `Ok(())`).
#[tokio::test]
async fn a_write_behind_over_the_memory_and_sqlite_stores_lands_every_record() {
    write_behind_reads_back(MemoryStore::new(TestProcess::new("a", &TestProcess::world()))).await;
    let dir = tempfile::tempdir().unwrap();
    let sqlite = faultline_runtime::production::SqliteStore::open(
        dir.path().join("sessions.sqlite"),
        TestProcess::new("a", &TestProcess::world()),
    )
    .unwrap();
    write_behind_reads_back(sqlite).await;
}
