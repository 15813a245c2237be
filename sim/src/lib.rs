//! faultline-sim: the deterministic simulation harness for the faultline runtime.
//!
//! The same runtime code that runs in production runs here inside turmoil: simulated time,
//! network and filesystem, and randomness derived from one seed. See `ARCHITECTURE.md`.

mod arguments;
pub mod bench;
pub mod conformance;
mod fault_fs;
pub mod generate;
mod harness;
pub mod html;
pub mod incident;
mod markup;
pub mod model_server;
mod scenario;
mod seams;
mod seed;
pub mod shrink;
mod stand_in;
pub mod sweep;
pub mod world;

pub use fault_fs::{DiskSpace, FaultFs, FsEvent, FsFaults, FsObserver, FsOp, DISK_BLOCK_BYTES};
pub use harness::{findings, Finding, Harness, HarnessReport, GENERATED, HARNESS_SEEDS_DEFAULT};
pub use scenario::{
    DiskFull, DiskFullRefuses, FsErrorKind, RecordedResult, Regression, RotTarget, Scenario, ScenarioInfo,
    ScenarioTool, StoreKind, ToolKind, Zombie, BUILT_IN_SCENARIOS, REGRESSION_SCENARIOS,
};
pub use seams::{sim_epoch, sim_seams, SimClock, SimEntropy, SimFs, SimNet, SimProcess, SIM_EPOCH_MS};
pub use seed::Seed;
pub use stand_in::agent_from_file;
pub use world::{AgentUnderTest, Fate, Service, ServiceFaults, ServiceReceipt};
