use faultline_runtime::{seams::Liveness, seams::OwnerIdentity, seams::Process};

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
}
