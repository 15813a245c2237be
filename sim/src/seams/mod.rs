//! Simulation implementations of the runtime's seams, on turmoil.
//!
//! Everything here runs inside a turmoil host: time is the host's simulated clock, sockets are
//! turmoil's, files live in the host's simulated filesystem (`unstable-fs`), and randomness
//! is a ChaCha8 stream derived from the scenario seed.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod clock;
mod entropy;
mod fs;
mod net;
mod process;

use std::sync::Arc;

use faultline_runtime::seams::Seams;

pub use crate::fault_fs::{DiskSpace, FaultFs, FsEvent, FsFaults, FsObserver, FsOp, DISK_BLOCK_BYTES};
pub use clock::{sim_epoch, SimClock, SIM_EPOCH_MS};
pub use entropy::SimEntropy;
pub use fs::SimFs;
pub use net::SimNet;
pub use process::{SimProcess, SIM_STDIO_PORT, SIM_STDIO_PROGRAM};

/// The seams of incarnation `incarnation` of turmoil host `host`, with entropy drawn from the
/// stream of `seed` named after the host and incarnation.
///
/// Must be called (and its seams used) from inside a turmoil host or client.
pub fn sim_seams(seed: u64, host: &str, incarnation: u64) -> Seams {
    Seams {
        clock: Arc::new(SimClock),
        net: Arc::new(SimNet),
        fs: Arc::new(SimFs),
        entropy: Arc::new(crate::seed::Seed::new(seed).host(host, incarnation)),
        process: Arc::new(SimProcess::new(host, incarnation)),
        probe: Arc::new(faultline_runtime::seams::NoProbe),
        // No OS thread in a simulation: the jobs run in order on the host's thread.
        compute: Arc::new(faultline_runtime::seams::Sequential),
        secrets: Default::default(),
    }
}
