//! Helpers for the workspace-level end-to-end tests: finding and running the real `faultline`
//! binary that `cargo test --workspace` builds alongside these tests.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // drives real processes

use std::path::PathBuf;
use std::process::{Command, Output};

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

/// Standard output as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Standard error as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
