//! The store's contract: a session's store and log, and what opening, loading and inspecting a
//! session returns.

use serde::Serialize;

use super::format::{EncodedRecord, SealedBatch, Sealer};
use super::id::SessionId;
use super::repair;
use super::scan::{Scan, ScanError, ScanStatus};

use crate::event::{Record, SessionHeader};
use crate::seams::OwnerIdentity;
use crate::Result;

/// Whether opening a session may take it over from a previous owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Takeover {
    /// Refuse if any owner is recorded, live or dead.
    Never,
    /// Take over from an owner that is provably gone (its process exited, its host restarted).
    /// A live owner is always refused.
    IfDead,
}

/// What an open or a load repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Repair {
    /// Bytes of torn tail truncated.
    pub truncated_bytes: u64,
    /// Complete records inside the truncated tail that were dropped (never acknowledged).
    pub dropped_records: u64,
    /// The first seq the truncated tail could have held, when bytes were truncated.
    pub truncated_from_seq: Option<u64>,
    /// Records salvaged from a torn zstd frame and appended again.
    pub recovered: Vec<Record>,
    /// Synthetic closers appended.
    pub closers: Vec<Record>,
}

/// The sentence that tells a person what a torn-tail repair drops; `None` when it drops
/// nothing. Shared by `repair`, `inspect`, `report` and `agent run --resume`.
pub fn describe_drop(truncated_bytes: u64, dropped_records: u64, from_seq: Option<u64>) -> Option<String> {
    (truncated_bytes > 0).then(|| {
        let from = from_seq.map_or_else(String::new, |seq| format!(" from seq {seq}"));
        format!(
            "dropped {truncated_bytes} bytes{from} ({dropped_records} complete records among them), never acknowledged as durable"
        )
    })
}

impl Repair {
    /// What this repair dropped, for a person; `None` when nothing was truncated.
    pub fn dropped(&self) -> Option<String> {
        describe_drop(self.truncated_bytes, self.dropped_records, self.truncated_from_seq)
    }
}

/// A session loaded (and repaired) from a store.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Loaded {
    /// The header.
    pub header: SessionHeader,
    /// Every record after repair.
    pub records: Vec<Record>,
    /// The repair that was committed, if one was needed.
    pub repair: Option<Repair>,
}

/// A session opened for writing.
#[derive(Debug)]
#[non_exhaustive]
pub struct Opened {
    /// The writer.
    pub log: Box<dyn SessionLog>,
    /// What was on disk, after repair.
    pub loaded: Loaded,
}

/// What `inspect` found, without writing anything.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Inspection {
    /// The scan's verdict.
    pub status: ScanStatus,
    /// The header, when readable.
    pub header: Option<SessionHeader>,
    /// Committed records (header excluded): all of them from [`Store::inspect`]; what a
    /// streaming reader asked to keep otherwise (see [`inspect_file_keeping`](super::inspect_file_keeping)).
    pub records: Vec<Record>,
    /// How many records the committed prefix holds, kept or not.
    pub record_count: u64,
    /// The seq of the last committed record.
    pub last_seq: Option<u64>,
    /// Bytes after the committed prefix.
    pub torn_bytes: u64,
    /// Complete, decodable records inside the torn tail that a repair would drop.
    pub dropped_records: u64,
    /// The seq the torn tail starts at (the first seq a repair would drop), when torn.
    pub torn_from_seq: Option<u64>,
    /// Records a repair would salvage from a torn zstd frame.
    pub recovered: Vec<Record>,
    /// Whether the last turn is open (after salvage).
    pub open_turn: bool,
    /// The closers a repair would append.
    pub closers: Vec<Record>,
    /// Why the bytes were refused (corrupt or unsupported).
    pub error: Option<ScanError>,
    /// The recorded owner, if one holds the session now.
    pub owner: Option<OwnerIdentity>,
    /// The validator after the committed and salvaged records, when the reader kept it: a
    /// writer continues from it instead of validating the session again.
    pub(crate) validator: Option<crate::event::Validator>,
}

impl Inspection {
    /// What a repair would drop, for a person; `None` when nothing would be truncated.
    pub fn would_drop(&self) -> Option<String> {
        describe_drop(self.torn_bytes, self.dropped_records, self.torn_from_seq)
    }

    /// Refuses a scan no repair may touch: corrupt or of an unsupported version.
    pub(crate) fn refuse_unusable(&self, id: &str) -> Result<()> {
        let error = || self.error.clone().unwrap_or_else(|| ScanError { offset: 0, reason: "unreadable".into() });
        match self.status {
            ScanStatus::Corrupt => {
                let e = error();
                Err(crate::Error::Corrupt { id: id.to_owned(), offset: e.offset, reason: e.reason })
            }
            ScanStatus::Unsupported => Err(crate::Error::Unsupported { id: id.to_owned(), reason: error().reason }),
            ScanStatus::Clean | ScanStatus::Torn => Ok(()),
        }
    }

    /// Whether `load`/`repair` would change anything.
    pub fn needs_repair(&self) -> bool {
        self.status == ScanStatus::Torn || !self.closers.is_empty()
    }

    pub(crate) fn from_scan(
        mut scan: Scan,
        owner: Option<OwnerIdentity>,
        evidence: &dyn repair::OutcomeEvidence,
    ) -> Inspection {
        if scan.status == ScanStatus::Torn {
            refuse_drop_of_known_effect(&mut scan, evidence);
        }
        let last_seq = scan.last.map(|(seq, _)| seq);
        let torn_from_seq =
            (scan.status == ScanStatus::Torn).then(|| last_seq.map_or(0, |seq| seq + 1) + scan.recovered.len() as u64);
        let dropped_records = scan.dropped.len() as u64;
        let usable = matches!(scan.status, ScanStatus::Clean | ScanStatus::Torn);
        let closers = if usable {
            // Repair looks only at the last turn: clone from its turn/start on, not the whole
            // session (a 200 000-event session used to be deep-copied here on every load).
            let (last_turn, last) = scan.tail_turn();
            let session = scan.header.as_ref().map_or("", |h| h.id.as_str());
            repair::closers_after(&last_turn, last, session, evidence)
        } else {
            Vec::new()
        };
        // The writer's starting point: the committed prefix, then what repair appends.
        let validator = scan.validator.clone().filter(|_| usable).map(|mut validator| {
            for record in scan.recovered.iter().chain(&closers) {
                validator.push_in_place(record).expect("salvaged records and closers continue the log");
            }
            validator
        });
        Inspection {
            status: scan.status,
            torn_bytes: scan.torn_bytes(),
            header: scan.header,
            records: scan.records,
            record_count: scan.record_count,
            last_seq,
            recovered: scan.recovered,
            open_turn: !closers.is_empty(),
            closers,
            error: scan.error,
            owner,
            dropped_records,
            torn_from_seq,
            validator,
        }
    }
}

/// A complete `tool/call` in a torn tail whose execution id the delivery queue knows was
/// durable before its effect was queued: dropping it would forget a call that happened, so
/// the tail is corruption, not a torn write (FAILURE-JSONL-PREFIX).
fn refuse_drop_of_known_effect(scan: &mut Scan, evidence: &dyn repair::OutcomeEvidence) {
    let session = scan.header.as_ref().map_or("", |h| h.id.as_str()).to_owned();
    let known = scan.dropped.iter().find_map(|r| match &r.event {
        crate::event::Event::ToolCall(call) => {
            let id = repair::execution_id(&session, call.turn, call.step, &call.call_id);
            evidence.lookup(&id).map(|_| (r.seq, id))
        }
        _ => None,
    });
    if let Some((seq, id)) = known {
        scan.status = ScanStatus::Corrupt;
        scan.error = Some(ScanError {
            offset: scan.committed_len,
            reason: format!(
                "the damaged tail holds tool/call seq {seq} whose execution {id} is in the delivery queue, so its write unit was durable: not a torn write"
            ),
        });
        scan.committed_len = 0;
    }
}

/// The cold load of a store whose repair goes through `open`: a session that needs no
/// repair is returned as inspected; one that does is refused while its live owner may still
/// be writing it, otherwise opened (taking over a dead owner), repaired and released.
pub(crate) fn load_through_open(
    store: &dyn Store,
    process: &dyn crate::seams::Process,
    id: &SessionId,
    inspection: Inspection,
) -> Result<Loaded> {
    inspection.refuse_unusable(id.as_str())?;
    if !inspection.needs_repair() {
        let header = inspection.header.expect("usable inspections have a header");
        return Ok(Loaded { header, records: inspection.records, repair: None });
    }
    if let Some(holder) = inspection.owner.filter(|o| process.liveness(o) == crate::seams::Liveness::Alive) {
        return Err(crate::Error::SessionLive { id: id.to_string(), holder: holder.to_string() });
    }
    let Opened { log, loaded } = store.open(id, Takeover::IfDead)?;
    log.close()?;
    Ok(loaded)
}

/// A store of session logs.
///
/// Contract (the shared suite in `runtime/tests/it/store_contract.rs` checks it for every
/// backend):
/// - `create` publishes a new session (header only) and returns its single writer.
/// - `open` takes ownership, commits crash repair, and returns the writer and the records.
/// - `inspect` never writes; `load` commits repair, and refuses a session whose live owner
///   has a turn open (that turn is in progress, not interrupted).
/// - A second live writer is refused with an error naming the holder; a dead owner is taken
///   over only with [`Takeover::IfDead`], after which the old writer's appends are rejected.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Creates a new session and returns its writer.
    fn create(&self, id: &SessionId, created_at: u64) -> Result<Box<dyn SessionLog>>;

    /// Opens an existing session for writing.
    fn open(&self, id: &SessionId, takeover: Takeover) -> Result<Opened>;

    /// [`Store::open`], keeping in `loaded.records` only what a resumed agent builds its next
    /// request from: every record but the assistant chunks that carry no usage (most of a
    /// long session's records). File stores stream the session to do it; others keep all.
    fn open_conversation(&self, id: &SessionId, takeover: Takeover) -> Result<Opened> {
        self.open(id, takeover)
    }

    /// Reports the session's state without writing.
    fn inspect(&self, id: &SessionId) -> Result<Inspection>;

    /// Cold load: reads the session and commits any repair it needs.
    fn load(&self, id: &SessionId) -> Result<Loaded>;

    /// Every session id in the store, sorted.
    fn list(&self) -> Result<Vec<SessionId>>;
}

/// The single writer of one session.
pub trait SessionLog: Send + std::fmt::Debug {
    /// The session.
    fn id(&self) -> &SessionId;

    /// The seq the next appended record must carry.
    fn next_seq(&self) -> u64;

    /// This writer's fencing token.
    fn token(&self) -> u64;

    /// Appends `batch` durably: when this returns `Ok`, every record survives a crash. The
    /// batch must continue the log's seqs and keep its invariants, or nothing is written. On
    /// failure nothing of the batch remains, so retrying the same batch never duplicates or
    /// skips a seq.
    fn append(&mut self, batch: &[Record]) -> Result<()>;

    /// [`SessionLog::append`] of records encoded when they were accepted (shared with the
    /// queue that holds them until they are durable): the same contract, without encoding or
    /// copying the records again on the writer's critical path.
    fn append_accepted(&mut self, batch: &[std::sync::Arc<EncodedRecord>]) -> Result<()> {
        let records: Vec<Record> = batch.iter().map(|e| (*e.record).clone()).collect();
        self.append(&records)
    }

    /// A sealer that encodes full batches for this log ahead of their append (off the
    /// writer's critical path), when the log writes bytes; `None` (the default) otherwise.
    fn sealer(&self) -> Option<std::sync::Arc<Sealer>> {
        None
    }

    /// [`SessionLog::append_accepted`] of `batch.records()`, writing the bytes `batch` was
    /// sealed into (by this log's [`SessionLog::sealer`]): the same contract.
    fn append_sealed(&mut self, batch: &SealedBatch) -> Result<()> {
        self.append_accepted(batch.records())
    }

    /// Releases ownership. The log must not be used afterwards.
    fn close(self: Box<Self>) -> Result<()>;
}
