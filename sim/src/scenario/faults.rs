//! A scenario's fault plan: crashes, disk faults and full disks, partitions, bit rot, the
//! zombie worker, config updates, and their bounds.

use serde::{Deserialize, Serialize};

/// A window of simulated time during which the agent's disk is full, across incarnations (a
/// restart does not free space); it ends at `to_ms` or when the faults heal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskFull {
    /// Start (ms).
    pub from_ms: u64,
    /// End (ms): space comes back.
    pub to_ms: u64,
    /// How the full disk refuses.
    #[serde(default)]
    pub refuses: DiskFullRefuses,
}

/// What a full disk refuses, as filesystems do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiskFullRefuses {
    /// A write that needs a new block: it fills the file's last block, then fails with
    /// ENOSPC (a short write); fsync succeeds. What tmpfs and ext4 do, and what `--real`
    /// realises on a small tmpfs.
    #[default]
    NewBlocks,
    /// Every write (nothing written) and every fsync of written bytes.
    Everything,
    /// The fsync of written bytes: writes land in the page cache, and making them durable
    /// fails (delayed allocation on NFS, thin-provisioned volumes).
    Fsync,
}

impl DiskFullRefuses {
    /// The name scenario files use.
    pub fn name(self) -> &'static str {
        match self {
            DiskFullRefuses::NewBlocks => "new-blocks",
            DiskFullRefuses::Everything => "everything",
            DiskFullRefuses::Fsync => "fsync",
        }
    }
}

/// The disk errors a scenario may inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FsErrorKind {
    /// An I/O error (EIO) on the write or fsync.
    Eio,
    /// No space left on device (ENOSPC).
    Enospc,
}

impl FsErrorKind {
    /// The error the filesystem reports.
    pub fn io_kind(self) -> std::io::ErrorKind {
        match self {
            FsErrorKind::Enospc => std::io::ErrorKind::StorageFull,
            FsErrorKind::Eio => std::io::ErrorKind::Other,
        }
    }

    /// The family name in coverage reports.
    pub fn family(self) -> &'static str {
        match self {
            FsErrorKind::Eio => "eio",
            FsErrorKind::Enospc => "enospc",
        }
    }
}

/// Faults to inject.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultPlan {
    /// Crash the agent host at named points, in order (each at the `hit`-th time its point
    /// is reached, counted across restarts).
    #[serde(default)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub crashes: Vec<CrashFault>,
    /// Filesystem faults of the agent host's first incarnation.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsFault>,
    /// Network partitions by simulated time.
    #[serde(default)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Partition>,
    /// Cancel the running turn at this simulated time (ms).
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_at_ms: Option<u64>,
    /// Cancel the running turn this many ms after the first text of an answer arrives (a
    /// person who reads the first words and presses Ctrl-C): measured from an event both
    /// worlds see, not from the start, so a real run's set-up (a real fsync before the
    /// request) cannot reorder the cancel and the answer.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_after_first_text_ms: Option<u64>,
    /// With `cancel_at_ms`: keep queued input (`cancel_keep_inbox`) and submit the next
    /// message right after the cancel (the wake latch).
    #[serde(default)]
    #[serde(skip_serializing_if = "is_false")]
    pub cancel_then_submit: bool,
    /// A live provider-config update at a simulated time: extra `[provider]` lines replacing
    /// the scenario's. An invalid one must be rejected loudly with the last good route kept.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_update: Option<ConfigUpdate>,
    /// A window during which the disk is full (ENOSPC), across incarnations.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_full: Option<DiskFull>,
    /// Bit rot while the agent host is down after its first crash: bytes of a durable line
    /// of this file overwritten with non-zero garbage. Recovery must refuse (corrupt) and
    /// leave the file as it found it, or keep every durable record.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bit_rot: Option<RotTarget>,
    /// With `bit_rot`: the rot waits for the host to be down after a crash that left a
    /// power-loss hole (not the first crash): a durable unit damaged in front of the last
    /// unit's hole, which recovery must refuse, not take for the hole.
    #[serde(default)]
    #[serde(skip_serializing_if = "is_false")]
    pub rot_after_hole: bool,
    /// What the rot writes, one of these drawn per seed (default: `garbage`). A resolved plan
    /// holds exactly the one drawn.
    #[serde(default)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rot_kinds: Vec<RotKind>,
    /// The agent's answer limit, in bytes (default: the record limit's
    /// `faultline_runtime::store::ANSWER_BYTES_MAX`): small here so that oversize answers cost
    /// little simulated I/O. Range 1024..=ANSWER_BYTES_MAX.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_bytes_max: Option<usize>,
    /// The gateway quotes the delivery's credential back: in every receipt, and in the 403 it
    /// answers a payload containing `refuse` with (before any effect).
    #[serde(default)]
    #[serde(skip_serializing_if = "is_false")]
    pub gateway_echo: bool,
    /// Draw a crash point and fs faults from the seed (the `mixed` scenario).
    #[serde(default)]
    #[serde(skip_serializing_if = "is_false")]
    pub from_seed: bool,
    /// A worker paused past its lease while another takes its session over: the run has two
    /// worker hosts sharing one leased store (the fleet world, `world/fleet.rs`) instead of
    /// one agent on its own disk.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zombie: Option<Zombie>,
    /// The person who decides what a paused turn waits on (default: one who approves at once).
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub person: Option<crate::Person>,
}

/// Shortest and longest lease a zombie scenario may give its workers, in ms.
pub const ZOMBIE_LEASE_MS_RANGE: std::ops::RangeInclusive<u64> = 1_000..=60_000;

/// The zombie family (FAILURE-LEASE-EPOCH): worker `a` runs the workload on a leased store and
/// is stopped (a GC pause, a stopped VM) at `pause_at_ms` for `pause_ms`; worker `b` stands by
/// and takes the session over once `a`'s lease has run out. When `a` wakes, none of its writes
/// and none of its tool dispatches may land.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Zombie {
    /// The workers' lease, in ms (within [`ZOMBIE_LEASE_MS_RANGE`]; renewed every third).
    pub lease_ms: u64,
    /// When worker `a` stops, in simulated ms (with `from_seed`: the latest it may).
    pub pause_at_ms: u64,
    /// How long it stays stopped, in ms: longer than the lease, or there is no zombie (with
    /// `from_seed`: the longest it may, drawn above the lease).
    pub pause_ms: u64,
    /// How often the standby worker tries to take the session over, in ms (default 250).
    #[serde(default = "default_standby_poll_ms")]
    pub standby_poll_ms: u64,
    /// Draw the instant and the length of the pause from the seed (and the failover's).
    #[serde(default)]
    #[serde(skip_serializing_if = "is_false")]
    pub from_seed: bool,
    /// Percent of the store's statements whose connection is cut (at most
    /// [`ZOMBIE_CUT_PERCENT_MAX`]; default 0): half before the store sees them, half after
    /// they ran, their answer lost. A worker's statement after a cut is never cut: the
    /// connection comes back within the one reconnect the client makes.
    #[serde(default)]
    #[serde(skip_serializing_if = "is_zero")]
    pub cut_percent: u8,
    /// The store fails over to a new primary with the same data at this instant, in
    /// simulated ms (with `from_seed`: at a seeded instant up to it): each worker's first
    /// statement after it loses its connection, before or after the store ran it (drawn).
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover_at_ms: Option<u64>,
    /// The takeover that succeeds loses its answer: the one write whose lost answer must be
    /// looked up, not sent again (sent again, the lease it took refuses it).
    #[serde(default)]
    #[serde(skip_serializing_if = "is_false")]
    pub takeover_answer_lost: bool,
}

/// The most a zombie scenario may cut of its store's statements, in percent.
pub const ZOMBIE_CUT_PERCENT_MAX: u8 = 50;

fn is_zero(value: &u8) -> bool {
    *value == 0
}

fn default_standby_poll_ms() -> u64 {
    250
}

/// Which durable file bit rot damages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RotTarget {
    /// The session transcript (`session.jsonl`).
    Session,
    /// The delivery queue's journal.
    Journal,
}

/// What bit rot writes into a durable line. Every kind is one the file's format can tell
/// from a record (JSONL lines carry no checksum: a rewrite into another valid, in-sequence
/// record could not be, and is not simulated); the last three are valid JSON, so only the
/// record decoder and the sequence check stand between them and a recovery that goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RotKind {
    /// A few bytes overwritten with 0xFF (never UTF-8).
    Garbage,
    /// The line's `"seq"` rewritten to another number: a well-formed record out of sequence.
    ForgedSeq,
    /// A field no record has, inserted first: well-formed JSON the schema refuses.
    UnknownField,
    /// The line replaced by an ignorable event of an unknown type, in sequence, whose data
    /// nests arrays far deeper than a decoder's recursion limit: well-formed JSON that must be
    /// refused without exhausting the stack (skipped, it would drop the record it replaced).
    DeepNesting,
}

impl RotKind {
    /// Every kind, in a fixed order (what a seed picks from).
    pub const ALL: [RotKind; 4] = [RotKind::Garbage, RotKind::ForgedSeq, RotKind::UnknownField, RotKind::DeepNesting];

    /// The kind's name, as scenarios write it.
    pub fn name(self) -> &'static str {
        match self {
            RotKind::Garbage => "garbage",
            RotKind::ForgedSeq => "forged-seq",
            RotKind::UnknownField => "unknown-field",
            RotKind::DeepNesting => "deep-nesting",
        }
    }
}

/// Smallest `answer_bytes_max` a scenario may set, in bytes.
pub const ANSWER_BYTES_MAX_MIN: usize = 1024;

/// A live configuration update.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigUpdate {
    /// When (simulated ms).
    pub at_ms: u64,
    /// The new extra `[provider]` lines.
    pub provider: String,
}

/// A planned crash.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrashFault {
    /// The crash point (`before-dispatch`, `mid-stream`, `after-tool-call-flush`,
    /// `after-side-effect`, `mid-flush`, `during-repair`, `during-outbox-finish`).
    pub point: faultline_runtime::seams::CrashPoint,
    /// Which hit of the point crashes (1 = the first).
    #[serde(default = "one")]
    pub hit: u32,
    /// Simulated ms between the crash and the restart.
    #[serde(default = "restart_ms")]
    pub restart_after_ms: u64,
}

fn one() -> u32 {
    1
}

fn restart_ms() -> u64 {
    200
}

/// Filesystem faults.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsFault {
    /// Torn-write block size (512 or 4096).
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u64>,
    /// Fail this mutating operation (0-based) of the first incarnation...
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_op: Option<u64>,
    /// ...with `eio` or `enospc`.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_kind: Option<FsErrorKind>,
    /// Crash the host before this mutating operation of the first incarnation.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash_before_op: Option<u64>,
    /// When the crash lands on an fsync, the power loss leaves a hole: a run of zero bytes
    /// inside the write that fsync would have made durable, with the rest of it on disk.
    #[serde(default)]
    #[serde(skip_serializing_if = "is_false")]
    pub power_loss_hole: bool,
    /// When the crash lands on an fsync, the write it would have made durable reaches the disk
    /// in `block_size` blocks up to the last block boundary inside a line, and no further
    /// (instead of turmoil's draw of how many blocks survive): the file ends in a torn line.
    #[serde(default)]
    #[serde(skip_serializing_if = "is_false")]
    pub torn_mid_line: bool,
}

/// A partition between two hosts during a window of simulated time.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Partition {
    /// One side (`agent`).
    pub a: String,
    /// The other side (`model`, `gateway`).
    pub b: String,
    /// Start (ms).
    pub from_ms: u64,
    /// End (ms): the partition heals.
    pub to_ms: u64,
}

/// Serde's `skip_serializing_if` for a flag at its default.
pub(super) fn is_false(value: &bool) -> bool {
    !*value
}
