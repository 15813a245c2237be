//! faultline-sim: the deterministic simulation harness for the faultline runtime.
//!
//! The same runtime code that runs in production runs here inside turmoil: simulated time,
//! network and filesystem, and randomness derived from one seed. See `ARCHITECTURE.md`.
//!
//! The root is the embedder's front door: [`Harness`] runs an [`AgentUnderTest`] (its tools,
//! its [`Service`]s) over [`Scenario`]s and seeds and reports [`Finding`]s; [`run`] is one run
//! of one scenario. The modules hold what the `faultline` command and the tests reach for: the
//! simulated seams and the fault filesystem, the fake model server, the sweep, hunt and
//! shrink engines, recorded incidents, the real-world harness, and [`twin`], a run's I/O
//! replayed on bare turmoil. What only the command line runs lives in the `faultline-cli`
//! crate.

mod arguments;
pub mod catalog;
mod fault_fs;
mod findings;
pub mod generate;
mod harness;
pub mod hunt;
pub mod incident;
pub mod model_server;
mod oracle;
mod person_plan;
pub mod real;
mod scenario;
pub mod seams;
mod seed;
pub mod shrink;
mod stand_in;
mod stand_in_mcp;
pub mod sweep;
mod tool_sim;
pub mod twin;
mod verdict;
mod world;

pub use findings::{findings, Finding};
pub use harness::{Harness, HarnessReport, GENERATED, HARNESS_SEEDS_DEFAULT};
pub use oracle::{Invariant, Kind as InvariantKind, Violation, SOMETIMES};
pub use person_plan::{Person, PersonDecision, APPROVAL_DEADLINE_MS_DEFAULT, PERSON_THINK_MS_MAX};
pub use scenario::{
    DiskFull, DiskFullRefuses, FsErrorKind, RecordedResult, Regression, RotTarget, Scenario, ScenarioInfo,
    ScenarioTool, SessionFormat, ToolKind, Zombie, BUILT_IN_SCENARIOS, REGRESSION_SCENARIOS,
};
pub use stand_in::agent_from_file;
pub use tool_sim::check_stand_ins;
pub use verdict::{run, run_agent, RunResult};
pub use world::{
    AgentUnderTest, BoundWait, Fate, LivenessBound, McpFaults, McpService, McpServiceTool, Receipt, Service,
    ServiceFaults, ServiceReceipt, SlowRecovery,
};
