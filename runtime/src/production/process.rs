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

    fn spawn(&self, request: &crate::seams::SpawnRequest) -> std::io::Result<crate::seams::SpawnedChild> {
        spawn_child(request)
    }
}

/// A started child's process group, killed on request and when the last handle goes — but
/// never after its leader was reaped, when the id may name someone else's group.
struct GroupKiller {
    pgid: Option<nix::unistd::Pid>,
    reaped: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl crate::seams::ChildControl for GroupKiller {
    fn kill(&self) {
        if self.reaped.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        if let Some(pgid) = self.pgid {
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        crate::seams::ChildControl::kill(self);
    }
}

/// Starts `request` in a process group of its own, with this process's environment less the
/// hidden variables (and the provider keys, whatever the request says), plus the added ones;
/// stderr is discarded (a server's log is not ours to keep, and may hold what it was given).
/// The child is reaped by a task of its own.
pub(crate) fn spawn_child(request: &crate::seams::SpawnRequest) -> std::io::Result<crate::seams::SpawnedChild> {
    if request.program.is_empty() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "no program named"));
    }
    let mut command = tokio::process::Command::new(&request.program);
    let policy = crate::config::ToolEnv::hiding(request.env_hidden.clone());
    super::command_tool::apply_env(&mut command, &policy);
    command
        .args(&request.args)
        .envs(request.env_added.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let pgid = child.id().map(|id| nix::unistd::Pid::from_raw(id as i32));
    let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
        (Some(stdin), Some(stdout)) => (stdin, stdout),
        _ => return Err(std::io::Error::other("the child's pipes were not opened")),
    };
    let reaped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let marked = reaped.clone();
    tokio::spawn(async move {
        let _ = child.wait().await;
        marked.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    Ok(crate::seams::SpawnedChild {
        stdin: Box::new(stdin),
        stdout: Box::new(stdout),
        control: Box::new(GroupKiller { pgid, reaped }),
    })
}
