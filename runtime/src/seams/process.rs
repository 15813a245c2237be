use serde::{Deserialize, Serialize};

/// Who holds a session or a delivery: enough to tell a live holder from a dead one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerIdentity {
    /// Host name (production) or turmoil host name (simulation).
    pub host: String,
    /// Process id (production) or 0 (simulation).
    pub pid: u32,
    /// Process start time in clock ticks since boot (production) or the host incarnation
    /// (simulation). Together with `pid` it survives pid reuse.
    pub started_at: u64,
    /// A random id drawn once per process, so two runtimes in one process are distinct.
    pub instance: String,
}

impl std::fmt::Display for OwnerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} on {} (started {}, instance {})", self.pid, self.host, self.started_at, self.instance)
    }
}

/// Whether a recorded owner is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The owner is running (or cannot be proven dead, e.g. it is on another host).
    Alive,
    /// The owner is provably gone: its process exited or its host restarted.
    Dead,
}

/// The running process, as the runtime is allowed to see it: its own identity and whether
/// another identity is still alive.
///
/// Contract: `identity()` is constant for the life of the value; `liveness(identity())` is
/// `Alive`. An owner on another host is `Alive` (it cannot be proven dead from here), so it is
/// never taken over silently.
pub trait Process: Send + Sync {
    /// This process.
    fn identity(&self) -> OwnerIdentity;

    /// Whether `owner` is still running.
    fn liveness(&self, owner: &OwnerIdentity) -> Liveness;
}
