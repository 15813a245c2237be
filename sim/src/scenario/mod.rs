//! Scenarios as data: one TOML file each under `scenarios/`, compiled into the binary so a
//! fresh clone's `faultline sweep` needs no paths. The file format (`schema.rs`), its fault
//! plan (`faults.rs`), its checks (`validate.rs`) and the built-in lists (`built_in.rs`).

mod built_in;
mod faults;
mod schema;
mod validate;

pub use built_in::{ScenarioInfo, BUILT_IN_SCENARIOS, REGRESSION_SCENARIOS};
pub use faults::{
    CrashFault, DiskFull, DiskFullRefuses, FaultPlan, FsErrorKind, FsFault, Partition, RotKind, RotTarget, Zombie,
    ZOMBIE_CUT_PERCENT_MAX,
};
pub use schema::{
    Expectations, ModelPlan, RealPlan, RecordedResult, Regression, Scenario, ScenarioTool, SessionFormat, ToolKind,
    FS_CRASH_OP_MIN, FS_OP_MAX, PARTITION_FROM_MS_MAX, PARTITION_MS_MAX, RESPONSES_MAX,
};
