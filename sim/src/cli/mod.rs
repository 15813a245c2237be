//! What only the `faultline` command runs: the benchmarks, the conformance suite against the
//! official SDKs, the HTML and JUnit reports of a run or a sweep, and the child process of a
//! real run.

pub mod bench;
pub mod conformance;
pub mod html;
pub mod junit;
mod markup;

pub use crate::real::host::{agent_host, parse_crash_at, FsFaultArm, HostArgs, CRASH_AT_VAR, FS_FAULT_VAR};
