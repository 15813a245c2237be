//! The seams through which the runtime touches the outside world.
//!
//! Everything the runtime does that depends on time, the network, the disk or randomness goes
//! through one of these traits. The production implementations live in
//! [`crate::production`]; the simulation implementations live in the `faultline-sim` crate on
//! top of turmoil. Because the runtime is compiled against the traits only, the very same code
//! runs on a real machine and inside a seeded, deterministic simulation.

mod clock;
mod compute;
mod entropy;
mod fs;
mod future;
mod net;
mod probe;
mod process;

use std::sync::Arc;

pub use clock::{Clock, Monotonic};
pub use compute::{Compute, Sequential};
pub use entropy::{Entropy, EntropyExt};
pub use fs::{Fs, FsFile, FsMetadata, OpenOptions};
pub use future::BoxFuture;
pub use net::{ByteStream, Listener, Net};
pub use probe::{crash_point, CrashPoint, NoProbe, Probe, CRASH_POINTS};
pub use process::{ChildControl, Liveness, OwnerIdentity, Process, SpawnRequest, SpawnedChild};

/// One world's worth of seams, cheap to clone and handed to every runtime component.
#[derive(Clone)]
pub struct Seams {
    /// Time: monotonic instants, epoch milliseconds for event timestamps, sleeping.
    pub clock: Arc<dyn Clock>,
    /// Byte streams to `host:port` and listeners for the servers the project ships.
    pub net: Arc<dyn Net>,
    /// Files and directories with explicit durability (`sync`, `sync_dir`).
    pub fs: Arc<dyn Fs>,
    /// Randomness for jitter, ids and temp-file names.
    pub entropy: Arc<dyn Entropy>,
    /// This process's identity and the liveness of other owners (session and delivery
    /// ownership). A small fifth seam: the SPEC's four cannot tell a dead owner from a live one.
    pub process: Arc<dyn Process>,
    /// Named crash points (a no-op in production; the simulator crashes the host there).
    pub probe: Arc<dyn Probe>,
    /// CPU work on several cores (recovery's decode); one after another in the simulator.
    pub compute: Arc<dyn Compute>,
    /// Every secret this world holds, scrubbed by value from whatever it writes or prints
    /// (FAILURE-SECRETS). Not a seam to the outside: the one set every component shares.
    pub secrets: crate::secrets::Scrubber,
}

impl std::fmt::Debug for Seams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seams").finish_non_exhaustive()
    }
}
