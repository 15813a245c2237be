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

    /// Starts `request`'s program with its standard input and output as pipes (an MCP server
    /// over stdio). An `io::Error` means nothing started. The default world starts no
    /// programs: an embedder's own `Process` needs no change until it wants them.
    fn spawn(&self, request: &SpawnRequest) -> std::io::Result<SpawnedChild> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            format!("this world starts no programs ({:?} was asked)", request.program),
        ))
    }
}

/// A program to start with its standard input and output as pipes (an MCP server over
/// stdio). The environment is decided by the seam's implementation from these rules, because
/// only production may read the real one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnRequest {
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables of this process never passed on (the provider keys, at the least).
    pub env_hidden: Vec<String>,
    /// Variables added (or replaced) on top of what passes.
    pub env_added: Vec<(String, String)>,
}

/// A started child: its pipes and a way to stop it.
pub struct SpawnedChild {
    /// What the child reads.
    pub stdin: Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
    /// What the child writes.
    pub stdout: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    /// Stops it.
    pub control: Box<dyn ChildControl>,
}

impl std::fmt::Debug for SpawnedChild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnedChild").finish_non_exhaustive()
    }
}

/// Stops a started child.
pub trait ChildControl: Send + Sync {
    /// Ends the child and everything it started (production: SIGKILL to its process group).
    /// Idempotent.
    fn kill(&self);
}
