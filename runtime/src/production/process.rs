use std::fs;

use crate::seams::{EntropyExt, Liveness, OwnerIdentity, Process};

/// The real process: pid, start time from `/proc`, host name, and a random instance id.
#[derive(Debug, Clone)]
pub struct OsProcess {
    me: OwnerIdentity,
}

impl OsProcess {
    /// Identifies the current process, drawing its instance id from `entropy`.
    pub fn new(entropy: &dyn crate::seams::Entropy) -> Self {
        let pid = std::process::id();
        let me = OwnerIdentity {
            host: host_name(),
            pid,
            started_at: start_time(pid).unwrap_or(0),
            instance: entropy.hex_id(16),
        };
        Self { me }
    }
}

fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_owned()).unwrap_or_else(|_| "localhost".into())
}

/// Field 22 of `/proc/<pid>/stat`: start time in clock ticks since boot, or `None` if the
/// process is gone or a zombie (killed, not yet reaped: it will never write again). The
/// command name (field 2) may contain spaces and parentheses, so parse after the last `)`.
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    // Field 3 is the state; field 22 is 19 fields after it.
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

impl Process for OsProcess {
    fn identity(&self) -> OwnerIdentity {
        self.me.clone()
    }

    fn liveness(&self, owner: &OwnerIdentity) -> Liveness {
        if owner == &self.me {
            return Liveness::Alive;
        }
        if owner.host != self.me.host {
            return Liveness::Alive;
        }
        match start_time(owner.pid) {
            Some(started) if started == owner.started_at => Liveness::Alive,
            _ => Liveness::Dead,
        }
    }
}
