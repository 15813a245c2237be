use faultline_runtime::seams::{Liveness, OwnerIdentity, Process, SpawnRequest, SpawnedChild};

/// A turmoil host's software incarnation. A crash and restart (`Sim::crash` + `Sim::bounce`)
/// starts a new incarnation, which is how the simulator proves the previous owner dead.
#[derive(Debug, Clone)]
pub struct SimProcess {
    me: OwnerIdentity,
}

impl SimProcess {
    /// Incarnation `incarnation` (1-based) of host `host`.
    pub fn new(host: &str, incarnation: u64) -> Self {
        Self {
            me: OwnerIdentity {
                host: host.to_owned(),
                pid: 0,
                started_at: incarnation,
                instance: format!("{host}#{incarnation}"),
            },
        }
    }
}

impl Process for SimProcess {
    fn identity(&self) -> OwnerIdentity {
        self.me.clone()
    }

    fn liveness(&self, owner: &OwnerIdentity) -> Liveness {
        // Incarnations only grow: an owner from an earlier incarnation of this host is gone.
        if owner.host == self.me.host && owner.started_at < self.me.started_at {
            Liveness::Dead
        } else {
            Liveness::Alive
        }
    }

    fn spawn(&self, request: &SpawnRequest) -> std::io::Result<SpawnedChild> {
        Self::spawn_sim(request)
    }
}

/// The program a simulated stdio MCP server runs as: `faultline-sim-mcp HOST` is the server
/// on turmoil host `HOST`, its pipes carried over a connection to [`SIM_STDIO_PORT`] there.
pub const SIM_STDIO_PROGRAM: &str = "faultline-sim-mcp";
/// The port such a program's pipes reach.
pub const SIM_STDIO_PORT: u16 = 7;
/// Bytes buffered between a simulated child's pipes and its connection.
const SIM_PIPE_BYTES: usize = 64 * 1024;

/// Closes a simulated child's connection.
struct Hangup(tokio::task::AbortHandle);

impl faultline_runtime::seams::ChildControl for Hangup {
    fn kill(&self) {
        self.0.abort();
    }
}

impl SimProcess {
    /// The one program this world starts: [`SIM_STDIO_PROGRAM`]. Its pipes are carried to
    /// its host over the simulated network; a host that is down or a connection that drops
    /// is a server whose output ended, as a dead process's does.
    fn spawn_sim(request: &SpawnRequest) -> std::io::Result<SpawnedChild> {
        let host = match (request.program.as_str(), request.args.as_slice()) {
            (SIM_STDIO_PROGRAM, [host]) => host.clone(),
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("the simulator starts only {SIM_STDIO_PROGRAM} HOST, not {:?}", request.program),
                ))
            }
        };
        let (ours, theirs) = tokio::io::duplex(SIM_PIPE_BYTES);
        let pump = tokio::spawn(async move {
            let addr = format!("{host}:{SIM_STDIO_PORT}");
            let Ok(mut stream) = faultline_runtime::seams::Net::connect(&super::SimNet, &addr).await else { return };
            let mut theirs = theirs;
            let _ = tokio::io::copy_bidirectional(&mut theirs, &mut stream).await;
        });
        let (stdout, stdin) = tokio::io::split(ours);
        Ok(SpawnedChild {
            stdin: Box::new(stdin),
            stdout: Box::new(stdout),
            control: Box::new(Hangup(pump.abort_handle())),
        })
    }
}
