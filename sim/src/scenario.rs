//! Scenarios as data: one TOML file each under `scenarios/`, compiled into the binary so a
//! fresh clone's `faultline sweep` needs no paths.

use serde::Deserialize;

use crate::model_server::Response;

/// A scenario: the workload, the fault plan and what must hold.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Unique name (`faultline run NAME`).
    pub name: String,
    /// One line for `faultline scenarios`.
    pub description: String,
    /// The failure mode of the seeds this scenario exercises.
    #[serde(default)]
    pub requirement: Option<String>,
    /// Simulation tick in ms. Simulated time, not work, dominates a run's cost (every simulated
    /// second costs ~5 ms of wall time at 1 ms, ~0.35 ms at 10 ms): timing-exact scenarios use
    /// 1 ms, the rest 10 ms.
    #[serde(default = "default_tick_ms")]
    pub tick_ms: u64,
    /// Simulated-time budget for the whole workload to converge (liveness), in ms.
    #[serde(default = "default_budget_ms")]
    pub budget_ms: u64,
    /// User messages, one turn each.
    pub messages: Vec<String>,
    /// Extra `[provider]` TOML lines (retry policy, idle timeout).
    #[serde(default)]
    pub provider: String,
    /// Tools the agent has.
    #[serde(default)]
    pub tools: Vec<ScenarioTool>,
    /// Tool calls run at once (default 4).
    #[serde(default)]
    pub tool_concurrency: Option<usize>,
    /// The model's script.
    #[serde(default)]
    pub model: ModelPlan,
    /// Faults.
    #[serde(default)]
    pub faults: FaultPlan,
    /// What must hold besides the oracle's invariants.
    #[serde(default)]
    pub expect: Expectations,
}

fn default_tick_ms() -> u64 {
    10
}

fn default_budget_ms() -> u64 {
    60_000
}

/// A tool of the simulated agent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioTool {
    /// Tool name.
    pub name: String,
    /// `gateway`: a side effect delivered through the outbox to the gateway host.
    /// `echo`: a local tool without side effects. `sleep`: waits `work_ms` (cooperatively).
    pub kind: String,
    /// The tool's own deadline.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// For `sleep`: how long the work takes; with `ignore_abort` it does not stop early.
    #[serde(default)]
    pub work_ms: u64,
    /// For `sleep`: keep working after the abort signal (slow cleanup).
    #[serde(default)]
    pub ignore_abort: bool,
}

/// The fake model's behaviour.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPlan {
    /// Connections are dropped until this many ms after start.
    #[serde(default)]
    pub refuse_until_ms: u64,
    /// Responses in request order.
    #[serde(default)]
    pub responses: Vec<Response>,
    /// Repeat the last response forever.
    #[serde(default)]
    pub repeat_last: bool,
    /// Draw the responses from the seed instead (the `mixed` scenario).
    #[serde(default)]
    pub from_seed: bool,
}

/// Faults to inject.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultPlan {
    /// Crash the agent host at named points, in order (each at the `hit`-th time its point
    /// is reached, counted across restarts).
    #[serde(default)]
    pub crashes: Vec<CrashFault>,
    /// Filesystem faults of the agent host's first incarnation.
    #[serde(default)]
    pub fs: Option<FsFault>,
    /// Network partitions by simulated time.
    #[serde(default)]
    pub partitions: Vec<Partition>,
    /// Cancel the running turn at this simulated time (ms).
    #[serde(default)]
    pub cancel_at_ms: Option<u64>,
    /// With `cancel_at_ms`: keep queued input (`cancel_keep_inbox`) and submit the next
    /// message right after the cancel (the wake latch).
    #[serde(default)]
    pub cancel_then_submit: bool,
    /// A live provider-config update at a simulated time: extra `[provider]` lines replacing
    /// the scenario's. An invalid one must be rejected loudly with the last good route kept.
    #[serde(default)]
    pub config_update: Option<ConfigUpdate>,
    /// Draw a crash point and fs faults from the seed (the `mixed` scenario).
    #[serde(default)]
    pub from_seed: bool,
}

/// A live configuration update.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigUpdate {
    /// When (simulated ms).
    pub at_ms: u64,
    /// The new extra `[provider]` lines.
    pub provider: String,
}

/// A planned crash.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrashFault {
    /// The crash point (`before-dispatch`, `mid-stream`, `after-tool-call-flush`,
    /// `after-side-effect`, `mid-flush`, `during-repair`, `during-outbox-finish`).
    pub point: faultline_runtime::CrashPoint,
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
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsFault {
    /// Torn-write block size (512 or 4096).
    #[serde(default)]
    pub block_size: Option<u64>,
    /// Fail this mutating operation (0-based) of the first incarnation...
    #[serde(default)]
    pub fail_op: Option<u64>,
    /// ...with `eio` or `enospc`.
    #[serde(default)]
    pub fail_kind: Option<String>,
    /// Crash the host before this mutating operation of the first incarnation.
    #[serde(default)]
    pub crash_before_op: Option<u64>,
}

/// A partition between two hosts during a window of simulated time.
#[derive(Debug, Clone, Deserialize)]
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
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectations {
    /// End kinds of the turns in the recovered transcript, in order (`completed`,
    /// `interrupted`, `error:CODE`, `aborted`, `budget-exhausted`, `max-tokens`).
    #[serde(default)]
    pub turn_ends: Option<Vec<String>>,
    /// Number of effects the gateway received.
    #[serde(default)]
    pub gateway_receipts: Option<usize>,
    /// Number of model requests.
    #[serde(default)]
    pub model_requests: Option<usize>,
    /// Whether the live config update must be rejected (true) or applied (false).
    #[serde(default)]
    pub config_update_rejected: Option<bool>,
    /// Codes of tool results, in order.
    #[serde(default)]
    pub tool_result_codes: Option<Vec<String>>,
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
    "stalled-body",
    "partial-eof",
    "rate-limit-retry-after-seconds",
    "rate-limit-retry-after-ms",
    "rate-limit-over-cap",
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
    "gateway-partition-during-delivery",
    "model-partition-heals",
    "invalid-live-config-update",
    "mixed",
];

impl Scenario {
    /// Parses a scenario file.
    pub fn parse(text: &str) -> Result<Scenario, String> {
        faultline_runtime::llm::from_toml(text).map_err(|e| e.to_string())
    }

    /// A built-in scenario by name.
    pub fn built_in(name: &str) -> Option<Scenario> {
        BUILT_IN_SCENARIOS
            .iter()
            .find(|s| s.name == name)
            .map(|s| Scenario::parse(s.text).expect("built-in scenarios parse"))
    }
}
