//! The scenario file's format: a scenario's workload, its tools, the model's script, what must
//! hold, and the bounds each field is checked against (`validate.rs`).

use serde::{Deserialize, Serialize};

use faultline_runtime::llm::WireFormat;

use super::faults::{is_false, FaultPlan};
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
