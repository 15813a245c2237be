//! Helpers for the workspace-level end-to-end tests: finding and running the real `faultline`
//! binary that `cargo test --workspace` builds alongside these tests.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // drives real processes

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// Path of the `faultline` binary built by this `cargo test` run.
///
/// `FAULTLINE_BIN` overrides it (e.g. to test a release build). Otherwise the binary sits in
/// the target profile directory, two levels above this test executable (`target/debug/deps/`).
pub fn faultline_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("FAULTLINE_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps layout");
    let bin = profile_dir.join("faultline");
    assert!(bin.exists(), "{} missing: run the tests with `cargo test --workspace`", bin.display());
    bin
}

/// Runs `faultline ARGS...` to completion and returns its output.
pub fn faultline(args: &[&str]) -> Output {
    Command::new(faultline_bin()).args(args).output().expect("spawn faultline")
}

/// `agent run --config CONFIG --session-dir SESSIONS` followed by `extra`: the arguments every
/// agent test starts from.
pub fn agent_run_args<'a>(config: &'a Path, sessions: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "agent",
        "run",
        "--config",
        config.to_str().expect("UTF-8 path"),
        "--session-dir",
        sessions.to_str().expect("UTF-8 path"),
    ];
    args.extend_from_slice(extra);
    args
}

/// Standard output as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Standard error as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A running `faultline model-server` on 127.0.0.1, killed on drop.
#[derive(Debug)]
pub struct ModelServerProcess {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl ModelServerProcess {
    /// Writes `script` under `dir` and starts a server on a free port; every request is
    /// logged to `dir/requests.jsonl`.
    pub fn start(dir: &Path, script: &serde_json::Value) -> Self {
        let script_path = dir.join("script.json");
        std::fs::write(&script_path, script.to_string()).expect("write script");
        let mut child = Command::new(faultline_bin())
            .args(["model-server", "--listen", "127.0.0.1:0", "--script"])
            .arg(&script_path)
            .arg("--request-log")
            .arg(dir.join("requests.jsonl"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn model-server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read address");
        let addr =
            line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("server said {line:?}")).to_owned();
        Self { child, addr }
    }

    /// `http://ADDR/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

impl Drop for ModelServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The request bodies a server logged, parsed.
pub fn logged_requests(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("request log line"))
        .collect()
}

/// Whether a test may skip for want of `what` (a browser, a Python package, the right to
/// mount): only where the variable `require_var` is unset. CI sets every one of them, so a
/// test that cannot run there fails instead of passing without running.
#[allow(clippy::print_stderr)] // a skipped test says why, where the test runner shows it
pub fn skip_or_fail(require_var: &str, what: &str) {
    assert!(std::env::var_os(require_var).is_none(), "{require_var} is set, but {what}");
    eprintln!("skipped: {what} (set {require_var}=1 to make this a failure)");
}

/// A small tmpfs mounted on a fresh directory, unmounted on drop: a real disk that fills up.
#[derive(Debug)]
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

/// The variable that makes a missing right to mount a tmpfs a test failure (`.ci/run` sets it).
pub const REQUIRE_TMPFS_VAR: &str = "FAULTLINE_REQUIRE_TMPFS";

impl Tmpfs {
    /// Mounts a tmpfs of `size_kib` KiB, or says why it cannot (not root, no `mount`, a
    /// container without the capability).
    pub fn mount(size_kib: u64) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("a mount point: {e}"))?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_kib}k,mode=0700"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !output.status.success() {
            return Err(format!("mount -t tmpfs failed: {}", String::from_utf8_lossy(&output.stderr).trim()));
        }
        Ok(Tmpfs { dir })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Grows (or shrinks) the filesystem to `size_kib` KiB: space comes back.
    pub fn resize(&self, size_kib: u64) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size_kib}k"), "tmpfs"])
            .arg(self.dir.path())
            .status()
            .expect("running mount");
        assert!(status.success(), "remounting {} at {size_kib} KiB", self.dir.path().display());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The command lines of the first `sh` block under `heading` in the repository file `doc`
/// (comments and blank lines left out): what a reader is told to type.
pub fn doc_sh_lines(doc: &str, heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let after = text.split_once(&format!("\n{heading}")).map(|(_, after)| after).expect("the heading");
    let block = after.split_once("```sh\n").map(|(_, block)| block).expect("a sh block under it");
    let block = block.split_once("```").map(|(block, _)| block).expect("a closed block");
    block.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_owned).collect()
}

/// An agent config whose `send` tool appends its execution id to `dir/marker.log` (the
/// receiver's own record of every effect), through the delivery queue when `via_outbox`, and
/// then hangs 30 s when `hang` (so a test can kill the agent right after the effect, before
/// its result). Written to its own file per variant; returns the path.
pub fn marker_agent_config(dir: &Path, base_url: &str, via_outbox: bool, hang: bool) -> PathBuf {
    let name = format!("{}{}.toml", if hang { "hanging" } else { "agent" }, if via_outbox { "-outbox" } else { "" });
    marker_config(dir, base_url, via_outbox, hang.then_some(30_000), &name)
}

/// [`marker_agent_config`] through the queue, its receiver taking `receiver_ms` after it
/// recorded the id (a soak's kills and stops then fall inside deliveries), as `file_name`.
pub fn slow_marker_agent_config(dir: &Path, base_url: &str, receiver_ms: u64, file_name: &str) -> PathBuf {
    marker_config(dir, base_url, true, Some(receiver_ms), file_name)
}

fn marker_config(dir: &Path, base_url: &str, via_outbox: bool, wait_ms: Option<u64>, file_name: &str) -> PathBuf {
    let marker = dir.join("marker.log");
    let wait = wait_ms.map(|ms| format!("; sleep {}", ms as f64 / 1000.0)).unwrap_or_default();
    let text = format!(
        r#"[provider]
preset = "openai-compatible"
base_url = "{base_url}"
model = "m"
idle_timeout_ms = 60000

[[tools]]
name = "send"
description = "send a message"
command = ["sh", "-c", "echo $FAULTLINE_EXECUTION_ID >> {marker}{wait}"]
side_effects = true
via_outbox = {via_outbox}
"#,
        marker = marker.display()
    );
    let path = dir.join(file_name);
    std::fs::write(&path, text).expect("write the agent config");
    path
}

/// The execution ids `marker_agent_config`'s tool recorded in `dir`, in order.
pub fn markers(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("marker.log")).unwrap_or_default().lines().map(str::to_owned).collect()
}
