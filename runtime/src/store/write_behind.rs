//! Write-behind persistence for one live session (FAILURE-WRITE-BEHIND,
//! FAILURE-PERSISTENCE-WIRING).
//!
//! `append` copies an event into a bounded pending queue and returns its seq at once: the
//! event is *accepted*. A single writer task turns pending events into durable batches: the
//! first pending event arms a fixed batching window (not reset by later events); when it
//! expires, everything pending is appended as one batch. A full batch (`batch_events_max`
//! pending, or the whole queue when it is smaller) is written at once without waiting out the
//! window: a producer blocked on a full queue must not wait for a timer. `flush` is the barrier: it skips the
//! window, waits for any write in progress and drains until everything accepted before it is
//! *durable*. A failed batch stays at the front of the queue, in order, and pauses the
//! automatic path; the failure is reported at once and surfaced by the next flush, which also
//! retries it. A writer that dies (a log that panics) fails every flush and append, waiting
//! or later, with that cause: nothing waits on a writer that is gone.
//!
//! Work is kept off the writer's critical path (it should be the write and its fsync): each
//! record is encoded when accepted, on the producer's side; when the log has a [`Sealer`]
//! (file stores), the append that fills a batch also *seals* it — concatenates and, for zstd,
//! compresses it into the exact bytes the writer would have made — while the writer is still
//! writing the batch before; and the records of a sealed batch made durable are freed by the
//! next producer. Seals are claimed in seq order and never overlap what the writer takes
//! unsealed, so batches, order and bytes are what they would be without sealing.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{broadcast, watch, Notify};

use super::{EncodedRecord, SealedBatch, Sealer, SessionLog};
use crate::event::{Event, Record};
use crate::seams::{Clock, CrashPoint, Monotonic, Probe};
use crate::{Error, Result};

/// Default batching window (FAILURE-WRITE-BEHIND).
pub const BATCH_WINDOW_MS_DEFAULT: u64 = 200;
/// Default bound of the pending queue, in events. A model streams at most a few hundred
/// chunks per second; 4096 is seconds of slack before producers feel backpressure.
pub const PENDING_EVENTS_MAX_DEFAULT: usize = 4096;
/// Largest batch written at once, in events: bounds one append's size and latency.
pub const BATCH_EVENTS_MAX: usize = 1024;
/// Pending bytes (encoded lines) that make the queue worth writing before its window ends:
/// a fast stream of large deltas (a 15 MiB answer in a tenth of a second) is written as it
/// comes, instead of held whole — its records, their lines and the batch's bytes at once —
/// until the window closes (issue 38: memory in proportion to the answer).
const PENDING_BYTES_FULL: usize = 4 * 1024 * 1024;

/// Why [`WriteBehind::offer`] queued nothing.
enum Refused {
    /// The queue is full: the event, to offer again once there is room.
    Full(Box<(Event, Option<Vec<u64>>)>),
    /// The writer failed or the log is closed.
    Failed(Error),
}

/// Write-behind knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteBehindConfig {
    /// The batching window, armed by the first pending event. Range 0..=60 000.
    pub batch_window_ms: u64,
    /// Bound of the pending queue (accepted, not yet durable). Range 1..=1 000 000.
    pub pending_events_max: usize,
    /// Most events one durable batch holds. Range 1..=[`BATCH_EVENTS_MAX`] (the default).
    pub batch_events_max: usize,
}

impl Default for WriteBehindConfig {
    fn default() -> Self {
        Self {
            batch_window_ms: BATCH_WINDOW_MS_DEFAULT,
            pending_events_max: PENDING_EVENTS_MAX_DEFAULT,
            batch_events_max: BATCH_EVENTS_MAX,
        }
    }
}

impl WriteBehindConfig {
    /// Pending events that make a batch worth writing before its window ends: a whole batch,
    /// or a full queue when the queue is smaller than a batch.
    fn full_batch_events(&self) -> usize {
        self.batch_events_max.min(self.pending_events_max)
    }

    fn validate(&self) {
        assert!(self.batch_window_ms <= 60_000, "batch_window_ms must be at most 60 000");
        assert!((1..=1_000_000).contains(&self.pending_events_max), "pending_events_max must be in 1..=1 000 000");
        assert!(
            (1..=BATCH_EVENTS_MAX).contains(&self.batch_events_max),
            "batch_events_max must be in 1..=BATCH_EVENTS_MAX"
        );
    }
}

/// Called with every failure of the automatic (background) path.
pub type FailureReporter = Arc<dyn Fn(&Error) + Send + Sync>;

#[derive(Debug, Clone, Default)]
struct Progress {
    /// Every record with `seq < durable_through` is durable.
    durable_through: u64,
    /// Incremented on every failed batch.
    failures: u64,
    /// The last failure, for flushes waiting on it.
    last_failure: Option<Arc<Error>>,
}

#[derive(Debug)]
struct State {
    /// Accepted, not yet durable: each record encoded once, at accept (on the producer's
    /// side), and shared with the writer by reference, so the writer's critical path is the
    /// write and its fsync.
    pending: VecDeque<Arc<EncodedRecord>>,
    /// Bytes of the lines in `pending` (each with its newline).
    pending_bytes: usize,
    /// Full batches of `pending` sealed on a producer's side (encoded, compressed), in seq
    /// order, not yet durable.
    sealed: VecDeque<Arc<SealedBatch>>,
    /// First seqs of the batches a producer is sealing right now (between its two lock
    /// sections, with no await in between: a seal cannot be abandoned half-way).
    sealing: Vec<u64>,
    /// Every seq below this is claimed, by a seal (done or under way) or by the writer.
    /// Claims are made in seq order, so the unclaimed records are the tail of `pending`.
    claimed_through: u64,
    /// Sealed batches made durable, left for the next producer to free: freeing a batch's
    /// records is hundreds of deallocations, off the writer's critical path this way. At
    /// most the batches written since the last append (bounded by the queue).
    spent: Vec<Arc<SealedBatch>>,
    next_seq: u64,
    deadline: Option<Monotonic>,
    /// The failure of the batch that paused the automatic path; cleared by an explicit flush.
    paused: Option<Arc<Error>>,
    flush_wanted: bool,
    /// No new events are admitted.
    closed: bool,
    /// The writer task should exit once nothing is pending.
    stopping: bool,
    /// The writer task died (its log panicked): nothing accepted from here on becomes durable,
    /// and every caller is told so instead of waiting for it.
    writer_lost: Option<Arc<Error>>,
}

struct Shared {
    state: Mutex<State>,
    wake_writer: Notify,
    space: Notify,
    progress: watch::Sender<Progress>,
    clock: Arc<dyn Clock>,
    config: WriteBehindConfig,
    reporter: Option<FailureReporter>,
    accepted: broadcast::Sender<Arc<Record>>,
    probe: Arc<dyn Probe>,
    /// The log's sealer, when it writes bytes that can be encoded ahead.
    sealer: Option<Arc<Sealer>>,
}

/// Records buffered for slow subscribers before they start missing some.
const SUBSCRIBER_BACKLOG_MAX: usize = 1024;

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims the unclaimed tail of the queue for sealing once it is a full batch: returns
    /// its first seq and its records.
    fn claim_full_batch(&self, state: &mut State) -> Option<(u64, Vec<Arc<EncodedRecord>>)> {
        self.sealer.as_ref()?;
        let full = self.config.full_batch_events();
        let unclaimed = state.next_seq - state.claimed_through;
        if unclaimed < full as u64 {
            return None;
        }
        debug_assert_eq!(unclaimed, full as u64, "a full batch is claimed the moment it is full");
        let first = state.claimed_through;
        let records: Vec<_> = state.pending.range(state.pending.len() - full..).cloned().collect();
        assert_eq!(records[0].record.seq, first, "the unclaimed records are the tail of the queue");
        state.claimed_through += full as u64;
        state.sealing.push(first);
        Some((first, records))
    }

    /// Seals a claimed batch (no lock held while encoding) and hands it to the writer. A seal
    /// that fails (a record the reader would refuse) leaves the records to the writer, which
    /// meets the same refusal and fails the batch as usual.
    fn seal(&self, first: u64, records: Vec<Arc<EncodedRecord>>) {
        let sealed = self.sealer.as_ref().expect("only a log with a sealer claims").seal(records);
        let mut state = self.lock();
        state.sealing.retain(|&s| s != first);
        if let Some(sealed) = sealed {
            // Claims are disjoint and never written unsealed while claimed, so these records
            // are still pending; two producers may publish out of order.
            debug_assert!(state.pending.front().is_some_and(|r| r.record.seq <= first));
            let at = state.sealed.partition_point(|s| s.records[0].record.seq < first);
            state.sealed.insert(at, Arc::new(sealed));
        }
        drop(state);
        self.wake_writer.notify_one();
    }
}

/// The writer task, which hands the log back when it exits (for the final `close`).
type WriterTask = tokio::task::JoinHandle<Box<dyn SessionLog>>;

/// The write-behind handle of one live session. Cheap to clone; every clone feeds the same
/// queue.
#[derive(Clone)]
pub struct WriteBehind {
    shared: Arc<Shared>,
    writer: Arc<Mutex<Option<WriterTask>>>,
}

impl std::fmt::Debug for WriteBehind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBehind").finish_non_exhaustive()
    }
}

impl WriteBehind {
    /// Starts the writer task for `log` (on the current tokio runtime).
    pub fn start(
        log: Box<dyn SessionLog>,
        clock: Arc<dyn Clock>,
        config: WriteBehindConfig,
        reporter: Option<FailureReporter>,
    ) -> Self {
        Self::start_probed(log, clock, config, reporter, Arc::new(crate::seams::NoProbe))
    }

    /// [`WriteBehind::start`] with a crash-point probe (`mid-flush`, before each batch).
    pub fn start_probed(
        log: Box<dyn SessionLog>,
        clock: Arc<dyn Clock>,
        config: WriteBehindConfig,
        reporter: Option<FailureReporter>,
        probe: Arc<dyn Probe>,
    ) -> Self {
        config.validate();
        let next_seq = log.next_seq();
        let sealer = log.sealer();
        let (progress, _) = watch::channel(Progress { durable_through: next_seq, ..Progress::default() });
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                pending: VecDeque::new(),
                pending_bytes: 0,
                sealed: VecDeque::new(),
                sealing: Vec::new(),
                claimed_through: next_seq,
                spent: Vec::new(),
                next_seq,
                deadline: None,
                paused: None,
                flush_wanted: false,
                closed: false,
                stopping: false,
                writer_lost: None,
            }),
            wake_writer: Notify::new(),
            space: Notify::new(),
            progress,
            clock,
            config,
            reporter,
            accepted: broadcast::channel(SUBSCRIBER_BACKLOG_MAX).0,
            probe,
            sealer,
        });
        let writer = tokio::spawn(run_writer(shared.clone(), log));
        Self { shared, writer: Arc::new(Mutex::new(Some(writer))) }
    }

    /// Accepts `event` (waiting only while the queue is full) and returns its seq. A full
    /// queue whose head batch failed is [`Error::Persist`] with that failure, not a wait:
    /// nothing is accepted, and [`WriteBehind::flush`] retries the batch.
    pub async fn append(&self, event: Event, source_seqs: Option<Vec<u64>>) -> Result<u64> {
        self.append_shared(event, source_seqs).await.map(|record| record.seq)
    }

    /// [`WriteBehind::append`], returning the accepted record itself (shared with the queue and
    /// the subscribers, not copied): what a caller keeps of a 15 MiB answer costs nothing.
    pub async fn append_shared(&self, event: Event, source_seqs: Option<Vec<u64>>) -> Result<Arc<Record>> {
        let mut offered = (event, source_seqs);
        loop {
            let space = self.shared.space.notified();
            match self.offer(offered) {
                Ok(accepted) => return Ok(accepted),
                Err(Refused::Failed(e)) => return Err(e),
                Err(Refused::Full(back)) => offered = *back,
            }
            space.await;
        }
    }

    /// [`WriteBehind::append_shared`] without waiting: `None` when the queue is full (nothing
    /// accepted). What must be queued in the same critical section as a check of the caller's
    /// own state (an approval decision and the paused turn that holds it) goes here.
    pub(crate) fn try_append_shared(&self, event: Event, source_seqs: Option<Vec<u64>>) -> Result<Option<Arc<Record>>> {
        match self.offer((event, source_seqs)) {
            Ok(accepted) => Ok(Some(accepted)),
            Err(Refused::Failed(e)) => Err(e),
            Err(Refused::Full(_)) => Ok(None),
        }
    }

    /// Queues `event` if there is room: its record, or why not (a full queue gives the event
    /// back, to be offered again once there is room).
    fn offer(&self, (event, source_seqs): (Event, Option<Vec<u64>>)) -> std::result::Result<Arc<Record>, Refused> {
        let (accepted, claim, spent) = {
            let mut state = self.shared.lock();
            if let Some(lost) = &state.writer_lost {
                return Err(Refused::Failed(Error::Persist(lost.clone())));
            }
            if state.closed {
                return Err(Refused::Failed(Error::Closed));
            }
            if state.pending.len() >= self.shared.config.pending_events_max {
                // Full, and the batch at its head failed: only an explicit flush makes room,
                // and the caller is the one who would flush. Waiting would wait forever (a turn
                // streaming into a full queue after one EIO hung), so the failure is the answer.
                if let Some(failure) = &state.paused {
                    return Err(Refused::Failed(Error::Persist(failure.clone())));
                }
                return Err(Refused::Full(Box::new((event, source_seqs))));
            }
            let seq = state.next_seq;
            let mut record = Record::new(seq, self.shared.clock.now_ms(), event);
            record.source_seqs = source_seqs;
            let encoded = Arc::new(EncodedRecord::new(record));
            let bytes_before = state.pending_bytes;
            state.pending_bytes += encoded.line.len() + 1;
            // Nobody listening is fine; a lagging listener misses records, not us.
            // Listeners share the queue's record: a 15 MiB answer is not copied.
            let _ = self.shared.accepted.send(encoded.record.clone());
            let accepted = encoded.record.clone();
            state.pending.push_back(encoded);
            state.next_seq += 1;
            if state.deadline.is_none() {
                let window = Duration::from_millis(self.shared.config.batch_window_ms);
                state.deadline = Some(self.shared.clock.now().saturating_add(window));
                self.shared.wake_writer.notify_one();
            } else if state.pending.len() == self.shared.config.full_batch_events()
                || (bytes_before < PENDING_BYTES_FULL && state.pending_bytes >= PENDING_BYTES_FULL)
            {
                self.shared.wake_writer.notify_one();
            }
            debug_assert_eq!(accepted.seq, seq);
            (accepted, self.shared.claim_full_batch(&mut state), std::mem::take(&mut state.spent))
        };
        // Outside the lock: the writer keeps writing the batch before meanwhile.
        drop(spent);
        if let Some((first, records)) = claim {
            self.shared.seal(first, records);
        }
        Ok(accepted)
    }

    /// Every record accepted from now on, in seq order (a subscriber that falls more than
    /// 1024 records behind is told it lagged).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Record>> {
        self.shared.accepted.subscribe()
    }

    /// Every record with a seq below the watched value is durable (the barrier's progress).
    pub fn durable_watermark(&self) -> watch::Receiver<u64> {
        let (tx, rx) = watch::channel(self.shared.progress.borrow().durable_through);
        let mut progress = self.shared.progress.subscribe();
        tokio::spawn(async move {
            while progress.changed().await.is_ok() {
                let through = progress.borrow_and_update().durable_through;
                if tx.send(through).is_err() {
                    return;
                }
            }
        });
        rx
    }

    /// The seq the next accepted event will get.
    pub fn next_seq(&self) -> u64 {
        self.shared.lock().next_seq
    }

    /// Events accepted but not yet durable.
    pub fn pending_len(&self) -> usize {
        self.shared.lock().pending.len()
    }

    /// The barrier: returns once every event accepted before the call is durable, or with
    /// the failure of the batch that held them. Resumes a paused automatic path.
    pub async fn flush(&self) -> Result<()> {
        let mut progress = self.shared.progress.subscribe();
        let (target, failures_before) = {
            let mut state = self.shared.lock();
            let seen = progress.borrow_and_update().clone();
            if seen.durable_through >= state.next_seq {
                return Ok(());
            }
            if let Some(lost) = &state.writer_lost {
                return Err(Error::Persist(lost.clone()));
            }
            state.flush_wanted = true;
            state.paused = None;
            (state.next_seq, seen.failures)
        };
        self.shared.wake_writer.notify_one();
        loop {
            {
                let seen = progress.borrow_and_update();
                if seen.durable_through >= target {
                    return Ok(());
                }
                if seen.failures > failures_before {
                    let failure = seen.last_failure.clone().expect("a counted failure is recorded");
                    return Err(Error::Persist(failure));
                }
            }
            if progress.changed().await.is_err() {
                return Err(Error::Closed);
            }
        }
    }

    /// Ordered teardown: closes admission, makes everything accepted durable, stops the
    /// writer task, then closes the log. A close error never masks an earlier drain error.
    pub async fn close(self) -> Result<()> {
        self.shared.lock().closed = true;
        let drained = self.flush().await;
        self.shared.lock().stopping = true;
        self.shared.wake_writer.notify_one();
        let handle = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(handle) = handle else { return drained };
        match handle.await {
            Ok(log) => drained.and(log.close()),
            // The writer died with the log (see `WriterLost`): the drain already failed.
            Err(e) => drained.and(Err(Error::Persist(Arc::new(writer_lost_error(&e.to_string()))))),
        }
    }
}

enum Action {
    Write(Batch),
    Wait(Option<Monotonic>),
    Exit,
}

/// The batch the writer appends next.
enum Batch {
    /// Records the writer encodes itself (a partial batch, or a log without a sealer).
    Records(Vec<Arc<EncodedRecord>>),
    /// A full batch a producer sealed.
    Sealed(Arc<SealedBatch>),
}

impl Batch {
    fn records(&self) -> &[Arc<EncodedRecord>] {
        match self {
            Batch::Records(records) => records,
            Batch::Sealed(sealed) => sealed.records(),
        }
    }

    /// One past the last seq of the batch.
    fn end_seq(&self) -> u64 {
        self.records().last().expect("batches are non-empty").record.seq + 1
    }
}

fn next_action(shared: &Shared) -> Action {
    let mut state = shared.lock();
    if state.pending.is_empty() {
        state.deadline = None;
        state.flush_wanted = false;
        return if state.stopping { Action::Exit } else { Action::Wait(None) };
    }
    let window_over = state.deadline.is_some_and(|d| shared.clock.now() >= d);
    let batch_full =
        state.pending.len() >= shared.config.full_batch_events() || state.pending_bytes >= PENDING_BYTES_FULL;
    if state.flush_wanted || ((window_over || batch_full) && state.paused.is_none()) {
        let front = state.pending.front().expect("non-empty").record.seq;
        if let Some(sealed) = state.sealed.front().filter(|s| s.records[0].record.seq == front) {
            return Action::Write(Batch::Sealed(sealed.clone()));
        }
        if state.sealing.contains(&front) {
            // Its producer is encoding it right now and wakes the writer when done.
            return Action::Wait(None);
        }
        // Unsealed records: the unclaimed tail, a claimed batch whose seal failed, or a
        // batch taken before that failed. Never into a later sealed or sealing batch.
        let next_claim = state.sealed.iter().map(|s| s.records[0].record.seq).chain(state.sealing.iter().copied());
        let limit = next_claim.filter(|&s| s > front).min().map_or(usize::MAX, |s| (s - front) as usize);
        let n = state.pending.len().min(shared.config.batch_events_max).min(limit);
        let batch: Vec<_> = state.pending.iter().take(n).cloned().collect();
        state.claimed_through = state.claimed_through.max(front + n as u64);
        return Action::Write(Batch::Records(batch));
    }
    if state.stopping && state.paused.is_some() {
        // Teardown after a failed drain: the failure was surfaced; nothing more will succeed.
        return Action::Exit;
    }
    Action::Wait(if state.paused.is_some() { None } else { state.deadline })
}

/// Removes the first `n` records of the queue (written, or dropped by a planted bug), and
/// their bytes from the count.
fn drain_written(state: &mut State, n: usize) {
    let bytes: usize = state.pending.drain(..n).map(|r| r.line.len() + 1).sum();
    state.pending_bytes -= bytes;
    // The count is the queue's lines, exactly: an empty queue holds no bytes.
    debug_assert!(!state.pending.is_empty() || state.pending_bytes == 0, "{} bytes left", state.pending_bytes);
}

/// The failure every caller gets once the writer task died.
fn writer_lost_error(why: &str) -> Error {
    Error::io("write-behind writer", std::io::Error::other(format!("the writer task died: {why}")))
}

/// Held by the writer task: if it unwinds (a log that panicked), nothing pending will ever be
/// durable, so the loss is published — to the barrier, to producers waiting for room, to
/// every later append — instead of leaving them waiting for a writer that is gone.
struct WriterLost(Arc<Shared>);

impl Drop for WriterLost {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let error = Arc::new(writer_lost_error("it panicked"));
        {
            let mut state = self.0.lock();
            state.writer_lost = Some(error.clone());
            state.closed = true;
        }
        self.0.progress.send_modify(|p| {
            p.failures += 1;
            p.last_failure = Some(error);
        });
        self.0.space.notify_waiters();
    }
}

/// Publishes `batch` as durable. What the watermark acknowledges is exactly what was
/// written: a contiguous run of seqs that starts where durability stopped (the two planted
/// bugs break this on purpose, for the oracle to find).
fn acknowledge(shared: &Shared, batch: &Batch) {
    let records = batch.records();
    debug_assert!(
        records.windows(2).all(|w| w[1].record.seq == w[0].record.seq + 1),
        "a batch is a contiguous run of seqs"
    );
    let first = records[0].record.seq;
    let planted =
        crate::testing::bugs::planted("ack-before-fsync") || crate::testing::bugs::planted("drop-failed-batch");
    shared.progress.send_modify(|p| {
        debug_assert!(
            p.durable_through == first || planted,
            "durable through {} yet the written batch starts at {first}",
            p.durable_through
        );
        p.durable_through = batch.end_seq();
    });
    shared.space.notify_waiters();
}

async fn run_writer(shared: Arc<Shared>, mut log: Box<dyn SessionLog>) -> Box<dyn SessionLog> {
    let _lost = WriterLost(shared.clone());
    loop {
        let woken = shared.wake_writer.notified();
        match next_action(&shared) {
            Action::Exit => return log,
            Action::Wait(None) => woken.await,
            Action::Wait(Some(deadline)) => {
                tokio::select! {
                    () = woken => {}
                    () = shared.clock.sleep_until(deadline) => {}
                }
            }
            Action::Write(batch) => {
                crate::seams::crash_point(shared.probe.as_ref(), CrashPoint::MidFlush).await;
                if crate::testing::bugs::planted("ack-before-fsync") {
                    let through = batch.end_seq();
                    shared.progress.send_modify(|p| p.durable_through = through);
                }
                let written = match &batch {
                    Batch::Records(records) => log.append_accepted(records),
                    Batch::Sealed(sealed) => log.append_sealed(sealed),
                };
                let mut state = shared.lock();
                let records = batch.records();
                match written {
                    Ok(()) => {
                        debug_assert_eq!(
                            state.pending.front().map(|r| r.record.seq),
                            records.first().map(|r| r.record.seq)
                        );
                        drain_written(&mut state, records.len());
                        if let Batch::Sealed(sealed) = &batch {
                            let done = state.sealed.pop_front();
                            debug_assert!(done.is_some_and(|d| Arc::ptr_eq(&d, sealed)));
                            state.spent.push(sealed.clone());
                        }
                        if state.pending.is_empty() {
                            state.deadline = None;
                        }
                        drop(state);
                        acknowledge(&shared, &batch);
                    }
                    Err(_) if crate::testing::bugs::planted("drop-failed-batch") => {
                        drain_written(&mut state, records.len());
                        if matches!(batch, Batch::Sealed(_)) {
                            state.sealed.pop_front();
                        }
                    }
                    Err(error) => {
                        // The batch stays at the front of the queue, in order; the automatic
                        // path waits for an explicit flush.
                        let error = Arc::new(error);
                        state.paused = Some(error.clone());
                        state.flush_wanted = false;
                        drop(state);
                        if let Some(report) = &shared.reporter {
                            report(&error);
                        }
                        shared.progress.send_modify(|p| {
                            p.failures += 1;
                            p.last_failure = Some(error);
                        });
                        // A producer waiting for room learns the failure (see `append`).
                        shared.space.notify_waiters();
                    }
                }
            }
        }
    }
}
