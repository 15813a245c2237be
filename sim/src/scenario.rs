//! Scenarios as data: one TOML file each under `scenarios/`, compiled into the binary so a
//! fresh clone's `faultline sweep` needs no paths.

use serde::{Deserialize, Serialize};

use faultline_runtime::llm::WireFormat;

use crate::model_server::Response;

/// A scenario: the workload, the fault plan and what must hold.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Unique name (`faultline run NAME`).
    pub name: String,
    /// One line for `faultline scenarios`.
    pub description: String,
    /// The failure mode of the seeds this scenario exercises.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requirement: Option<String>,
    /// Simulation tick in ms. Simulated time, not work, dominates a run's cost (every simulated
    /// second costs ~5 ms of wall time at 1 ms, ~0.35 ms at 10 ms): timing-exact scenarios use
    /// 1 ms, the rest 10 ms.
    #[serde(default = "default_tick_ms")]
    pub tick_ms: u64,
    /// Simulated-time budget for the whole workload to converge, in ms: the part after the
    /// heal is the scenario's own window, to which the liveness bound adds the waits the
    /// agent's settings allow (`world/bound.rs`).
    #[serde(default = "default_budget_ms")]
    pub budget_ms: u64,
    /// User messages, one turn each.
    pub messages: Vec<String>,
    /// Extra `[provider]` TOML lines (retry policy, idle timeout).
    #[serde(default)]
    #[serde(skip_serializing_if = "is_zero_or_empty")]
    pub provider: String,
    /// Tools the agent has.
    #[serde(default)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ScenarioTool>,
    /// Tool calls run at once (default 4).
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_concurrency: Option<usize>,
    /// Where the session lives (default `jsonl`); a `faults.from_seed` scenario's swarm may
    /// draw `zstd` instead.
    #[serde(default, skip_serializing_if = "SessionFormat::is_default")]
    pub store: SessionFormat,
    /// The wire formats the agent speaks to the model in (FAILURE-WIRE-FORMATS): seed `n`
    /// runs under `formats[n % len]`, so a sweep covers each. Default: all three; a scenario
    /// whose script is one format's own bytes names that one.
    #[serde(default = "all_formats", skip_serializing_if = "is_all_formats")]
    pub formats: Vec<WireFormat>,
    /// The model's script.
    #[serde(default)]
    pub model: ModelPlan,
    /// Faults.
    #[serde(default)]
    pub faults: FaultPlan,
    /// What must hold besides the oracle's invariants.
    #[serde(default, skip_serializing_if = "Expectations::is_empty")]
    pub expect: Expectations,
    /// End of the fault window (simulated ms). Then everything heals: partitions are repaired,
    /// planned crashes and disk faults are disarmed, and the model stops failing; from then on
    /// the workload must converge within the liveness bound (`budget_ms` − `heal_at_ms`, plus
    /// the waits the agent's own settings allow) or the run reports "no liveness" (distinct
    /// from a safety violation). Default: half of `budget_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heal_at_ms: Option<u64>,
    /// Draw the workload itself (messages, tools, the model's script with parallel calls and
    /// failures, a cancel) from the seed with the proptest strategies of `generate.rs`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub generated: bool,
    /// An agent file (`agent run`'s format) the scenario runs on instead of its own tools and
    /// provider settings, as `faultline sweep --agent FILE` would: its MCP servers stand in as
    /// simulated servers, its command tools as their `[tools.sim]` stand-ins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// How the scenario runs for real (`faultline run --real`): its time scale, or why it
    /// cannot.
    #[serde(default, skip_serializing_if = "RealPlan::is_default")]
    pub real: RealPlan,
    /// A regression case written by `faultline shrink`: which planted bug and invariant it
    /// reproduces, at which seed. CI replays it against the clean build (it must pass) and,
    /// with the `planted-bugs` feature, with its bug (it must fail the same invariant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regression: Option<Regression>,
}

/// A scenario's real run (`faultline run SCENARIO --real`): the same plan executed with
/// real processes, files, sockets and SIGKILL, then compared with the simulator's run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RealPlan {
    /// Why this scenario cannot run for real: a fault this machine cannot realise (a torn
    /// write needs a power loss, not a SIGKILL). `--real` skips it and prints the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim_only: Option<String>,
    /// Simulated ms per real ms: backoffs, timeouts, tool work and restarts run this much
    /// faster for real, in the same order. Range 1..=[`REAL_TIME_SCALE_MAX`]; default 1.
    #[serde(default = "one_u32", skip_serializing_if = "is_one")]
    pub time_scale: u32,
}

impl Default for RealPlan {
    fn default() -> Self {
        Self { sim_only: None, time_scale: 1 }
    }
}

impl RealPlan {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

fn one_u32() -> u32 {
    1
}

fn is_one(value: &u32) -> bool {
    *value == 1
}

/// Largest `real.time_scale`: beyond it a millisecond of real scheduling noise is more than
/// the simulator's 10 ms tick, and events of one tick may reorder.
pub const REAL_TIME_SCALE_MAX: u32 = 8;

/// Where a regression scenario came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Regression {
    /// The planted bug it reproduces (empty: a real bug, fixed since).
    pub bug: String,
    /// The invariant the bug breaks.
    pub invariant: String,
    /// The seed to replay.
    pub seed: u64,
    /// The scenario and seed it was shrunk from.
    pub shrunk_from: String,
}

fn all_formats() -> Vec<WireFormat> {
    WireFormat::ALL.to_vec()
}

fn is_all_formats(formats: &Vec<WireFormat>) -> bool {
    *formats == WireFormat::ALL
}

impl Scenario {
    /// The wire format seed `seed` runs under.
    pub fn format_for(&self, seed: u64) -> WireFormat {
        match self.formats.len() {
            0 => WireFormat::Openai,
            n => self.formats[(seed % n as u64) as usize],
        }
    }
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// Serde's `skip_serializing_if` for numbers and strings at their defaults.
trait IsDefault {
    fn is_default(&self) -> bool;
}

impl IsDefault for u64 {
    fn is_default(&self) -> bool {
        *self == 0
    }
}

impl IsDefault for String {
    fn is_default(&self) -> bool {
        self.is_empty()
    }
}

fn is_zero_or_empty<T: IsDefault>(value: &T) -> bool {
    value.is_default()
}

/// Bounds of a scenario's tick, in ms: below 1 ms turmoil cannot step, above 100 ms every
/// timeout in the runtime is coarser than the tick.
pub const TICK_MS_MIN: u64 = 1;
/// See [`TICK_MS_MIN`].
pub const TICK_MS_MAX: u64 = 100;
/// Longest simulated budget, in ms (ten minutes: a run that needs more is stuck).
pub const BUDGET_MS_MAX: u64 = 600_000;
/// Most user messages in one scenario.
pub const MESSAGES_MAX: usize = 32;
/// Most scripted model responses in one scenario.
pub const RESPONSES_MAX: usize = 512;

/// Mutating disk operations a drawn disk fault may land on: the journal and session set-up
/// and the first few appends (both the swarm and the fault-plan strategy draw below this).
pub const FS_OP_MAX: u64 = 40;
/// The first operation a drawn crash-before-op may hit: ops 0–7 create the outbox journal, so
/// earlier crashes only test an empty start.
pub const FS_CRASH_OP_MIN: u64 = 8;
/// Latest start of a drawn partition, in simulated ms.
pub const PARTITION_FROM_MS_MAX: u64 = 3_000;
/// Longest drawn partition beyond its 100 ms minimum, in simulated ms.
pub const PARTITION_MS_MAX: u64 = 3_000;

fn default_tick_ms() -> u64 {
    10
}

fn default_budget_ms() -> u64 {
    60_000
}

/// A tool of the simulated agent (`Default`: an unnamed `echo` tool).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioTool {
    /// Tool name.
    pub name: String,
    /// What the tool does (a closed set: a typo fails to parse).
    pub kind: ToolKind,
    /// The tool's own deadline.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// For `sleep`: how long the work takes; with `ignore_abort` it does not stop early.
    #[serde(default)]
    #[serde(skip_serializing_if = "is_zero_or_empty")]
    pub work_ms: u64,
    /// For `sleep`: keep working after the abort signal (slow cleanup).
    #[serde(default)]
    #[serde(skip_serializing_if = "is_false")]
    pub ignore_abort: bool,
    /// For `echo`/`sleep`: the tool prints this many bytes (an oversize output is truncated
    /// to `TOOL_OUTPUT_BYTES_MAX`). Range 0..=4 MiB.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<usize>,
    /// With `output_bytes`: print one `y`, then this character repeated up to `output_bytes`
    /// bytes (instead of `y`s). A multi-byte character after the one-byte `y` puts a character
    /// across the tool-output limit, where truncation must cut before it.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_char: Option<char>,
    /// What the tool tells the model it does (default: its kind's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its arguments' JSON schema, as JSON text (default: any object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<String>,
    /// For `recorded`: what each call returned in the recorded session, by call id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<RecordedResult>,
    /// Each call waits for the scenario's person (`[faults.person]`) before it runs.
    #[serde(default, skip_serializing_if = "is_false")]
    pub approval: bool,
    /// With `approval`: the request's deadline, in ms (default
    /// [`crate::APPROVAL_DEADLINE_MS_DEFAULT`]; at most `approval::APPROVAL_DEADLINE_MS_MAX`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_deadline_ms: Option<u64>,
}

impl ScenarioTool {
    /// The approval rule of an `approval` tool.
    pub fn approval_policy(&self) -> Option<faultline_runtime::approval::ApprovalPolicy> {
        self.approval.then(|| {
            let deadline = self.approval_deadline_ms.unwrap_or(crate::APPROVAL_DEADLINE_MS_DEFAULT);
            faultline_runtime::approval::ApprovalPolicy::new(Vec::new(), Some(deadline))
        })
    }
}

/// What one call of a `recorded` tool returned (`faultline scenario from-transcript`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedResult {
    /// The model's call id.
    pub call_id: String,
    /// The text the model saw.
    pub text: String,
    /// The error code of an error result (`TOOL_FAILED`, `TOOL_OUTCOME_UNKNOWN`, `ABORTED`;
    /// any other is replayed as `TOOL_FAILED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ScenarioTool {
    /// What an `echo`/`sleep` tool with `output_bytes` prints instead of its usual answer
    /// (the oracle holds each result to it).
    pub fn printed_output(&self) -> Option<String> {
        let bytes = self.output_bytes?;
        let Some(c) = self.output_char.filter(|_| bytes > 0) else { return Some("y".repeat(bytes)) };
        // 'y', then as many whole `c` as fit in the rest (copied, not pushed one by one).
        let mut text = String::with_capacity(bytes);
        text.push('y');
        text.push_str(&c.to_string().repeat((bytes - 1) / c.len_utf8()));
        Some(text)
    }
}

/// The kinds of simulated tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolKind {
    /// A side effect delivered through the outbox to the gateway host.
    Gateway,
    /// A local tool without side effects: echoes its arguments.
    #[default]
    Echo,
    /// Waits `work_ms` (cooperatively, unless `ignore_abort`).
    Sleep,
    /// Prints a secret its process holds (the gateway token), as a careless tool would.
    Leaky,
    /// Answers each call with what it returned in a recorded session (`results`).
    Recorded,
}

impl ToolKind {
    /// The name scenario files use (also the tool's description to the model).
    pub fn as_str(self) -> &'static str {
        match self {
            ToolKind::Gateway => "gateway",
            ToolKind::Echo => "echo",
            ToolKind::Sleep => "sleep",
            ToolKind::Leaky => "leaky",
            ToolKind::Recorded => "recorded",
        }
    }
}

/// The session store the simulated agent uses: the file stores, which run on the `Fs` seam
/// (SQLite does its own file I/O, below any seam the simulator replaces).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionFormat {
    /// `session.jsonl`.
    #[default]
    Jsonl,
    /// `session.jsonl.zst`: one zstd frame per durable batch.
    Zstd,
}

impl SessionFormat {
    /// The file format.
    pub fn format(self) -> faultline_runtime::store::Format {
        match self {
            SessionFormat::Jsonl => faultline_runtime::store::Format::Jsonl,
            SessionFormat::Zstd => faultline_runtime::store::Format::Zstd,
        }
    }

    fn is_default(&self) -> bool {
        *self == SessionFormat::Jsonl
    }
}

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

/// Largest `output_bytes` a scenario tool may print, in bytes.
pub const TOOL_OUTPUT_BYTES_SCENARIO_MAX: usize = 4 * 1024 * 1024;

/// The fake model's behaviour.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPlan {
    /// Connections are dropped until this many ms after start.
    #[serde(default)]
    #[serde(skip_serializing_if = "is_zero_or_empty")]
    pub refuse_until_ms: u64,
    /// Responses in request order.
    #[serde(default)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub responses: Vec<Response>,
    /// Repeat the last response forever.
    #[serde(default)]
    #[serde(skip_serializing_if = "is_false")]
    pub repeat_last: bool,
    /// Draw the responses from the seed instead (the `mixed` scenario).
    #[serde(default)]
    #[serde(skip_serializing_if = "is_false")]
    pub from_seed: bool,
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

/// Scenario-specific expectations.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectations {
    /// End kinds of the turns in the recovered transcript, in order (`completed`,
    /// `interrupted`, `error:CODE`, `aborted`, `budget-exhausted`, `max-tokens`).
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_ends: Option<Vec<String>>,
    /// Number of effects the gateway received.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_receipts: Option<usize>,
    /// Number of model requests.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_requests: Option<usize>,
    /// Whether the live config update must be rejected (true) or applied (false).
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_update_rejected: Option<bool>,
    /// How many planned crashes (crash points and crashes before a disk operation) fire.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crashes_fired: Option<usize>,
    /// Codes of tool results, in order.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_result_codes: Option<Vec<String>>,
    /// Fault families that must fire, by the evidence coverage counts (a scenario whose fault
    /// silently stopped happening proves nothing).
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults_fired: Option<Vec<String>>,
}

impl Expectations {
    /// Whether nothing is expected beyond the oracle's invariants.
    pub fn is_empty(&self) -> bool {
        self.turn_ends.is_none()
            && self.gateway_receipts.is_none()
            && self.model_requests.is_none()
            && self.config_update_rejected.is_none()
            && self.tool_result_codes.is_none()
            && self.crashes_fired.is_none()
            && self.faults_fired.is_none()
    }
}

/// A built-in scenario's listing.
#[derive(Debug, Clone, Copy)]
pub struct ScenarioInfo {
    /// Unique name.
    pub name: &'static str,
    /// The TOML text.
    pub text: &'static str,
}

macro_rules! scenarios {
    ($($name:literal),* $(,)?) => {
        /// Every built-in scenario, in listing order.
        pub const BUILT_IN_SCENARIOS: &[ScenarioInfo] = &[
            $(ScenarioInfo { name: $name, text: include_str!(concat!("../../scenarios/", $name, ".toml")) },)*
        ];
    };
}

scenarios![
    "happy-tool-turn",
    "refused-then-up",
    "disconnect-mid-text",
    "partial-tool-call-then-disconnect",
    "empty-completion",
    "empty-and-malformed-bodies",
    "mid-stream-errors",
    "tool-call-finish-variants",
    "provider-shapes",
    "stalled-body",
    "partial-eof",
    "rate-limit-retry-after-seconds",
    "rate-limit-retry-after-ms",
    "rate-limit-over-cap",
    "retry-after-hostile",
    "mcp-tools",
    "tool-call-cut-by-token-limit",
    "refusal-inside-a-tool-call",
    "keep-alives-while-queued",
    "auth-401",
    "tool-timeout-slow-cleanup",
    "parallel-tools-cancelled",
    "cancel-during-backoff",
    "cancel-keep-inbox-wake",
    "sigkill-at-dispatch",
    "sigkill-mid-stream",
    "sigkill-after-tool-call-flush",
    "sigkill-after-side-effect",
    "crash-mid-flush",
    "crash-during-repair",
    "crash-during-outbox-finish",
    "torn-write-mid-append",
    "fsync-eio-on-append",
    "enospc-first-materialise",
    "disk-full-window",
    "gateway-partition-during-delivery",
    "model-partition-heals",
    "invalid-live-config-update",
    "echoed-secret",
    "power-loss-hole",
    "power-loss-hole-then-rot",
    "bit-rot-session",
    "bit-rot-journal",
    "hostile-session-lines",
    "oversize-output",
    "zombie-takeover",
    "zombie-woken-before-its-effect",
    "takeover-answer-lost",
    "approval-crash-while-waiting",
    "approval-crash-after-decision",
    "approval-crash-after-dispatch",
    "approval-denied",
    "approval-expired",
    "approval-cancelled",
    "approval-cancelled-after-continue",
    "mixed",
    "generated",
];

macro_rules! regressions {
    ($($name:literal),* $(,)?) => {
        /// Regression scenarios written by `faultline shrink` (`scenarios/regressions/`):
        /// replayed by CI at their seed against the clean build, and with their planted bug.
        pub const REGRESSION_SCENARIOS: &[ScenarioInfo] = &[
            $(ScenarioInfo { name: $name, text: include_str!(concat!("../../scenarios/regressions/", $name, ".toml")) },)*
        ];
    };
}

regressions![
    "intent-before-effect-tool-body-before-flush",
    "at-most-once-unknown-claimable",
    "durable-prefix-ack-before-fsync",
    "intent-before-effect-ack-before-fsync",
    "at-most-once-unknown-claimable-refused",
    "outcome-durable-outcome-before-durable",
    "rot-refused-hole-past-the-damaged-frame-generated-5143",
    "rot-refused-hole-past-the-damaged-frame-generated-42582",
    "rot-refused-hole-past-the-damaged-frame-generated-70180",
    "rot-refused-hole-past-the-damaged-frame-mixed-5143",
    "rot-refused-hole-past-the-damaged-frame-mixed-42582",
    "rot-refused-hole-past-the-damaged-frame-mixed-54243",
    "rot-refused-hole-past-the-damaged-frame-mixed-70180",
    "false-corrupt-lost-sector-after-a-stray-zero",
];

impl Scenario {
    /// The script the model host serves.
    pub fn script(&self) -> crate::model_server::Script {
        crate::model_server::Script {
            refuse_until_ms: self.model.refuse_until_ms,
            responses: self.model.responses.clone(),
            repeat_last: self.model.repeat_last,
            after_tool_result: None,
        }
    }

    /// Parses and checks a scenario file.
    pub fn parse(text: &str) -> Result<Scenario, String> {
        let scenario: Scenario = faultline_runtime::llm::from_toml(text).map_err(|e| e.to_string())?;
        scenario.check()?;
        Ok(scenario)
    }

    /// The file text of this scenario (what `faultline shrink` writes).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("scenarios serialise to TOML")
    }

    /// Refuses scenarios the simulator cannot run meaningfully, naming the field.
    pub fn check(&self) -> Result<(), String> {
        self.check_timing()
            .and_then(|()| self.check_faults())
            .and_then(|()| self.check_provenance())
            .and_then(|()| self.check_sizes())
            .and_then(|()| self.check_zombie())
            .and_then(|()| self.check_formats())
            .map_err(|e| format!("scenario {}: {e}", self.name))
    }

    /// At least one wire format, each once.
    fn check_formats(&self) -> Result<(), String> {
        if self.formats.is_empty() {
            return Err("formats: name at least one of openai, anthropic, gemini".into());
        }
        let distinct: std::collections::BTreeSet<_> = self.formats.iter().collect();
        if distinct.len() != self.formats.len() {
            return Err("formats: each format once".into());
        }
        Ok(())
    }

    /// The tick, the budget, the heal time and a workload to run.
    fn check_timing(&self) -> Result<(), String> {
        if !(TICK_MS_MIN..=TICK_MS_MAX).contains(&self.tick_ms) {
            return Err(format!("tick_ms must be {TICK_MS_MIN}..={TICK_MS_MAX}, got {}", self.tick_ms));
        }
        if self.budget_ms == 0 || self.budget_ms > BUDGET_MS_MAX {
            return Err(format!("budget_ms must be 1..={BUDGET_MS_MAX}, got {}", self.budget_ms));
        }
        if let Some(heal) = self.heal_at_ms.filter(|heal| *heal >= self.budget_ms) {
            return Err(format!("heal_at_ms ({heal}) must come before budget_ms ({})", self.budget_ms));
        }
        if self.messages.is_empty() && !self.generated {
            return Err("messages must not be empty".to_owned());
        }
        Ok(())
    }

    /// Fault knobs that only mean something together.
    fn check_faults(&self) -> Result<(), String> {
        // Kinds with no rot to apply them to would be a scenario that tests less than it says.
        if let Some(fs) = self.faults.fs.as_ref().filter(|fs| fs.torn_mid_line) {
            if fs.block_size.is_none() || fs.crash_before_op.is_none() {
                return Err("faults.fs.torn_mid_line needs block_size and crash_before_op".to_owned());
            }
        }
        if self.faults.cancel_at_ms.is_some() && self.faults.cancel_after_first_text_ms.is_some() {
            return Err("give faults.cancel_at_ms or cancel_after_first_text_ms, not both".to_owned());
        }
        if let Some(full) = self.faults.disk_full.filter(|full| full.from_ms >= full.to_ms) {
            return Err(format!("faults.disk_full.from_ms ({}) must come before to_ms ({})", full.from_ms, full.to_ms));
        }
        if !self.faults.rot_kinds.is_empty() && self.faults.bit_rot.is_none() && !self.faults.from_seed {
            return Err("faults.rot_kinds needs faults.bit_rot".to_owned());
        }
        if self.faults.rot_after_hole && self.faults.bit_rot.is_none() {
            return Err("faults.rot_after_hole needs faults.bit_rot".to_owned());
        }
        if let Some(person) = &self.faults.person {
            person.check()?;
        }
        for tool in &self.tools {
            let deadline_max = faultline_runtime::approval::APPROVAL_DEADLINE_MS_MAX;
            if tool.approval_deadline_ms.is_some_and(|ms| !(1..=deadline_max).contains(&ms)) {
                return Err(format!("tools.{}.approval_deadline_ms must be 1..={deadline_max}", tool.name));
            }
            if tool.approval_deadline_ms.is_some() && !tool.approval {
                return Err(format!("tools.{}.approval_deadline_ms needs approval = true", tool.name));
            }
        }
        Ok(())
    }

    /// The regression's planted bug and the real run's settings.
    fn check_provenance(&self) -> Result<(), String> {
        // A misspelt bug would make the regression's "fails with its bug" check plant nothing.
        if let Some(bug) = self.regression.as_ref().map(|r| r.bug.as_str()).filter(|b| !b.is_empty()) {
            if !faultline_runtime::testing::bugs::CATALOG.iter().any(|(known, _)| *known == bug) {
                return Err(format!("regression.bug {bug:?} is not in the planted-bug catalog"));
            }
        }
        if !(1..=REAL_TIME_SCALE_MAX).contains(&self.real.time_scale) {
            return Err(format!("real.time_scale must be 1..={REAL_TIME_SCALE_MAX}, got {}", self.real.time_scale));
        }
        if self.real.sim_only.as_deref().is_some_and(|why| why.trim().is_empty()) {
            return Err("real.sim_only must say why".to_owned());
        }
        Ok(())
    }

    /// The limits on what a scenario holds: messages, responses, answers, tool outputs.
    fn check_sizes(&self) -> Result<(), String> {
        if self.messages.len() > MESSAGES_MAX {
            return Err(format!("at most {MESSAGES_MAX} messages, got {}", self.messages.len()));
        }
        if let Some(max) = self.faults.answer_bytes_max {
            if !(ANSWER_BYTES_MAX_MIN..=faultline_runtime::store::ANSWER_BYTES_MAX).contains(&max) {
                return Err(format!(
                    "faults.answer_bytes_max must be {ANSWER_BYTES_MAX_MIN}..={}, got {max}",
                    faultline_runtime::store::ANSWER_BYTES_MAX
                ));
            }
        }
        if let Some(tool) =
            self.tools.iter().find(|t| t.output_bytes.is_some_and(|n| n > TOOL_OUTPUT_BYTES_SCENARIO_MAX))
        {
            return Err(format!("tools.{}.output_bytes must be at most {TOOL_OUTPUT_BYTES_SCENARIO_MAX}", tool.name));
        }
        for tool in &self.tools {
            let Some(text) = tool.parameters.as_deref() else { continue };
            let schema: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| format!("tools.{}.parameters must be a JSON object's text: {e}", tool.name))?;
            if let Err((path, message)) = faultline_runtime::tool::check_parameters(&schema) {
                let at = if path.is_empty() { String::new() } else { format!(".{path}") };
                return Err(format!("tools.{}.parameters{at}: {message}", tool.name));
            }
        }
        if let Some(tool) = self.tools.iter().find(|t| !t.results.is_empty() && t.kind != ToolKind::Recorded) {
            return Err(format!("tools.{}.results needs kind = \"recorded\"", tool.name));
        }
        if let Some(tool) = self.tools.iter().find(|t| t.output_char.is_some() && t.output_bytes.is_none()) {
            return Err(format!("tools.{}.output_char needs output_bytes", tool.name));
        }
        if self.model.responses.len() > RESPONSES_MAX {
            return Err(format!("at most {RESPONSES_MAX} model responses, got {}", self.model.responses.len()));
        }
        Ok(())
    }

    /// The zombie family: a pause that outlasts the lease, inside the budget, sim-only.
    fn check_zombie(&self) -> Result<(), String> {
        if let Some(zombie) = &self.faults.zombie {
            if !ZOMBIE_LEASE_MS_RANGE.contains(&zombie.lease_ms) {
                return Err(format!(
                    "faults.zombie.lease_ms must be {}..={}, got {}",
                    ZOMBIE_LEASE_MS_RANGE.start(),
                    ZOMBIE_LEASE_MS_RANGE.end(),
                    zombie.lease_ms
                ));
            }
            if zombie.pause_ms <= zombie.lease_ms + zombie.standby_poll_ms {
                return Err("faults.zombie.pause_ms must outlast lease_ms and one standby_poll_ms".to_owned());
            }
            if zombie.pause_at_ms + zombie.pause_ms >= self.budget_ms || zombie.standby_poll_ms == 0 {
                return Err("faults.zombie must end within budget_ms and poll every ≥ 1 ms".to_owned());
            }
            if zombie.cut_percent > ZOMBIE_CUT_PERCENT_MAX {
                return Err(format!(
                    "faults.zombie.cut_percent must be 0..={ZOMBIE_CUT_PERCENT_MAX}, got {}",
                    zombie.cut_percent
                ));
            }
            if zombie.failover_at_ms.is_some_and(|at| at >= self.budget_ms) {
                return Err("faults.zombie.failover_at_ms must fall within budget_ms".to_owned());
            }
            if self.real.sim_only.is_none() {
                return Err("faults.zombie runs in the simulator only: say so in real.sim_only".to_owned());
            }
        }
        Ok(())
    }

    /// A built-in or regression scenario by name.
    pub fn built_in(name: &str) -> Option<Scenario> {
        BUILT_IN_SCENARIOS
            .iter()
            .chain(REGRESSION_SCENARIOS)
            .find(|s| s.name == name)
            .map(|s| Scenario::parse(s.text).expect("built-in scenarios parse"))
    }
}
