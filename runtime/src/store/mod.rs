//! Durable session transcripts: one trait, four backends (memory, JSONL, JSONL+zstd, SQLite),
//! one shared contract suite.
//!
//! A backend stores one append-only log per session plus an ownership record that admits a
//! single writer at a time (FAILURE-CRASH-CONTRACT-*, FAILURE-LEASE-EPOCH). Appends are durable
//! when they return `Ok`; loading applies the torn-versus-corrupt rule and commits crash repair.

// No function here grows past clippy's `too-many-lines-threshold` (clippy.toml): the
// simulator's world and the store are read most when something went wrong.
#![warn(clippy::too_many_lines)]

mod file;
mod format;
mod id;
mod lease;
mod limits;
pub(crate) mod lost_answer;
mod memory;
mod owner;
mod repair;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod rows;
pub(crate) mod scan;
mod session;
mod source;
mod write_behind;
mod writer;
pub(crate) mod zstd_frames;

pub(crate) use file::{append_durably, create_dir_all_durable, materialise, truncate_durably};
pub use file::{inspect_file, inspect_file_keeping, inspect_file_with, repair_file, FileStore};
pub(crate) use format::Encoded;
pub use format::Format;
pub use format::{EncodedRecord, SealedBatch, Sealer};
pub use id::{InvalidSessionId, SessionId, SESSION_ID_BYTES_MAX};
pub(crate) use lease::{check_lease_ms, check_lease_takeover, renewal_interval, HeldLeases};
pub use lease::{LEASE_MS_DEFAULT, LEASE_MS_MAX, LEASE_MS_MIN};
pub(crate) use limits::check_record_line;
pub use limits::{
    json_escaped_bytes, torn_unit_bytes_max, ANSWER_BYTES_MAX, RECORD_ENVELOPE_BYTES_MAX, RECORD_LINE_BYTES_MAX,
    WRITE_UNIT_BYTES_MAX,
};
#[cfg_attr(not(feature = "postgres"), allow(unused_imports))]
pub(crate) use lost_answer::again_if_lost;
pub use lost_answer::{Statement, StoreLink};
pub use memory::MemoryStore;
pub(crate) use owner::check_takeover;
pub use repair::{
    closers_with, execution_id, never_claimed, Evidence, NoEvidence, OutcomeEvidence, DELIVERY_UNKNOWN_NAME,
    NEVER_CLAIMED_NAME, NOT_STARTED_TEXT, OUTCOME_UNKNOWN_TEXT,
};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use rows::{encode_rows, inspect_rows};
pub(crate) use scan::Scan;
pub use scan::{Keep, SCAN_CHUNK_BYTES};
pub use scan::{ScanError, ScanStatus, FRAME_CONTENT_BYTES_MAX};
pub(crate) use session::load_through_open;
pub use session::{describe_drop, Inspection, Loaded, Opened, Repair, SessionLog, Store, Takeover};
pub use write_behind::{
    FailureReporter, WriteBehind, WriteBehindConfig, BATCH_EVENTS_MAX, BATCH_WINDOW_MS_DEFAULT,
    PENDING_EVENTS_MAX_DEFAULT,
};
#[cfg_attr(not(feature = "sqlite"), allow(unused_imports))]
pub(crate) use writer::{LogMedium, SessionWriter};
