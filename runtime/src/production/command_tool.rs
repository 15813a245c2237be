//! Tools that run external commands (`[[tools]] command = [...]`).

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::config::{CommandToolConfig, ToolEnv};

use crate::event::ToolSchema;
use crate::seams::BoxFuture;
use crate::tool::{Tool, ToolInvocation, ToolOutput, TOOL_OUTPUT_BYTES_MAX};

/// Grace between SIGTERM and SIGKILL when a command is cancelled or times out.
pub const COMMAND_KILL_GRACE_MS: u64 = 2_000;
/// Stderr kept for an error result, in bytes.
const STDERR_BYTES_MAX: usize = 4096;

/// A tool backed by an external command, run in its own process group so that a cancel
/// reaches every process it started.
#[derive(Debug, Clone)]
pub struct CommandTool {
    config: CommandToolConfig,
}

impl CommandTool {
    /// A tool from its declaration.
    pub fn new(config: CommandToolConfig) -> Self {
        Self { config }
    }
}

impl Tool for CommandTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: self.config.name.clone(),
            description: self.config.description.clone(),
            parameters: self.config.parameters.clone(),
        }
    }

    fn timeout(&self) -> Option<Duration> {
        self.config.timeout_ms.map(Duration::from_millis)
    }

    fn call(&self, invocation: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        let config = self.config.clone();
        Box::pin(async move { run(config, invocation, cancel).await })
    }
}

/// Gives `command` the environment `policy` allows: this process's variables that pass it,
/// nothing else (the provider key variables never pass).
pub(crate) fn apply_env(command: &mut tokio::process::Command, policy: &ToolEnv) {
    command.env_clear();
    for (name, value) in std::env::vars_os() {
        if name.to_str().is_some_and(|name| policy.passes(name)) {
            command.env(name, value);
        }
    }
}

async fn run(config: CommandToolConfig, invocation: ToolInvocation, cancel: CancellationToken) -> ToolOutput {
    // The only moment a command provably did nothing: it was never started.
    if cancel.is_cancelled() {
        return ToolOutput::Aborted("the command was not started: the call was stopped first".into());
    }
    let mut child = match command_for(&config, &invocation).spawn() {
        Ok(child) => child,
        Err(e) => return ToolOutput::Failed(format!("could not start {:?}: {e}", config.command[0])),
    };
    let pgid = child.id().map(|id| Pid::from_raw(id as i32));
    let arguments = invocation.arguments.to_string();
    let mut stdin = child.stdin.take();
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let feed = async move {
        if let Some(stdin) = stdin.as_mut() {
            let _ = stdin.write_all(arguments.as_bytes()).await;
            let _ = stdin.shutdown().await;
        }
    };
    let work = async {
        let ((), (out, err)) = tokio::join!(feed, collect(stdout, stderr));
        let status = child.wait().await;
        (status, out, err)
    };
    tokio::pin!(work);
    tokio::select! {
        (status, out, err) = &mut work => output_of(status, &out, &err),
        () = cancel.cancelled() => {
            // SIGTERM the whole group, give it a grace period, then SIGKILL — and still wait
            // for it: an abandoned process may still be performing its side effect.
            if let Some(pgid) = pgid {
                let _ = killpg(pgid, Signal::SIGTERM);
            }
            let grace = tokio::time::sleep(Duration::from_millis(COMMAND_KILL_GRACE_MS));
            tokio::pin!(grace);
            let (signals, (status, out, err)) = tokio::select! {
                ended = &mut work => ("SIGTERM", ended),
                () = &mut grace => {
                    if let Some(pgid) = pgid {
                        let _ = killpg(pgid, Signal::SIGKILL);
                    }
                    ("SIGTERM, then SIGKILL after the grace period", work.await)
                }
            };
            stopped_output(signals, status, &out, &err)
        }
    }
}

/// What a command stopped after it started says: its answer when it still finished cleanly
/// (an answer that arrives within the grace is the call's result), else an unknown outcome —
/// a process stopped mid-run may already have acted, and never reads as not having run.
fn stopped_output(
    signals: &str,
    status: std::io::Result<std::process::ExitStatus>,
    out: &[u8],
    err: &[u8],
) -> ToolOutput {
    match output_of(status, out, err) {
        ToolOutput::Ok(stdout) => ToolOutput::Ok(stdout),
        ToolOutput::Failed(why) | ToolOutput::Aborted(why) | ToolOutput::Unknown(why) => ToolOutput::Unknown(format!(
            "the command was stopped after it started ({signals}); it may have acted: {why}"
        )),
    }
}

/// The tool's command in a process group of its own, with the environment its policy
/// allows, the call's ids and trace context (`TRACEPARENT`), and all three pipes.
fn command_for(config: &CommandToolConfig, invocation: &ToolInvocation) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(&config.command[0]);
    apply_env(&mut command, &config.env());
    command
        .args(&config.command[1..])
        .env("FAULTLINE_SESSION_ID", &invocation.session)
        .env("FAULTLINE_CALL_ID", &invocation.call_id)
        .env("FAULTLINE_EXECUTION_ID", &invocation.execution_id)
        // The call's trace context, as the environment-variable carrier spells it.
        .envs(crate::tool::current_trace_fields().into_iter().map(|(name, value)| (name.to_ascii_uppercase(), value)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    command
}

/// Both pipes drained at once (a command that fills one while we wait on the other would
/// otherwise block forever), each kept up to its cap and read past it, discarding, so the
/// command never blocks on a full pipe.
async fn collect(
    mut stdout: Option<tokio::process::ChildStdout>,
    mut stderr: Option<tokio::process::ChildStderr>,
) -> (Vec<u8>, Vec<u8>) {
    let read_out = async {
        let mut out = Vec::new();
        if let Some(stdout) = stdout.as_mut() {
            let _ = stdout.take((TOOL_OUTPUT_BYTES_MAX + 1) as u64).read_to_end(&mut out).await;
            let _ = tokio::io::copy(stdout, &mut tokio::io::sink()).await;
        }
        out
    };
    let read_err = async {
        let mut err = Vec::new();
        if let Some(stderr) = stderr.as_mut() {
            let _ = stderr.take(STDERR_BYTES_MAX as u64).read_to_end(&mut err).await;
            let _ = tokio::io::copy(stderr, &mut tokio::io::sink()).await;
        }
        err
    };
    tokio::join!(read_out, read_err)
}

/// What a command that ended says: its stdout on success, else its exit status and stderr.
fn output_of(status: std::io::Result<std::process::ExitStatus>, out: &[u8], err: &[u8]) -> ToolOutput {
    let stdout = String::from_utf8_lossy(out).into_owned();
    match status {
        Ok(status) if status.success() => ToolOutput::Ok(stdout),
        Ok(status) => {
            let stderr = String::from_utf8_lossy(err);
            ToolOutput::Failed(format!("command exited with {status}: {}", stderr.trim()))
        }
        Err(e) => ToolOutput::Failed(format!("waiting for the command: {e}")),
    }
}
