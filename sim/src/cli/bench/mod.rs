//! `faultline bench`: throughput against the physical limit, each figure beside a baseline
//! measured in the same process right before it, reported as a ratio (shared, noisy machines
//! make absolute numbers meaningless across runs).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // measures wall time on real files

mod figures;
pub mod mix;
pub mod twin;

pub use crate::verdict::run_recorded;
pub use crate::world::io_trace::{DiskOp, IoTrace};
pub use figures::{run_all, run_all_with, BenchReport, Figure, GROUPS};
