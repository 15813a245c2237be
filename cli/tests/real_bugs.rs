//! A bug the simulator cannot see, caught for real: `userspace-buffer-on-sync` lives in the
//! production filesystem (below the seams the simulator replaces), where `sync` fsyncs the
//! file but the last write is still in the process's memory. A real SIGKILL loses it: the
//! records the barrier acknowledged vanish, and the effect is sent twice. The simulator runs
//! the same scenario with the same bug and passes, by construction. Compiled only with the
//! `planted-bugs` feature (`.ci/run` runs it in its planted-bug step).
#![cfg(feature = "planted-bugs")]
#![allow(clippy::disallowed_methods)] // runs the real binary

use serde_json::Value;

/// `faultline run ARGS --json`: the exit status and the verdict.
fn run(args: &[&str]) -> (i32, Value) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(["run", "sigkill-after-side-effect", "--seed", "0", "--json"])
        .args(args)
        .output()
        .unwrap();
    let verdict = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    (output.status.code().unwrap(), verdict)
}

fn invariants(verdict: &Value) -> Vec<String> {
    verdict["violations"].as_array().unwrap().iter().map(|v| v["invariant"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn userspace_buffer_on_sync_passes_the_simulator_and_fails_the_real_run() {
    const BUG: &str = "userspace-buffer-on-sync";
    let (code, simulated) = run(&["--bug", BUG]);
    assert_eq!((code, invariants(&simulated)), (0, vec![]), "the simulator cannot see it");

    let (code, real) = run(&["--real", "--bug", BUG]);
    assert_eq!(code, 2, "ran and failed: {real}");
    let broken = invariants(&real);
    assert!(broken.contains(&"durable-prefix".to_owned()), "acknowledged records were lost: {broken:?}");
    assert!(broken.contains(&"at-most-once".to_owned()), "the effect went out twice: {broken:?}");
    assert_eq!(real["parity"]["equal"], false);

    let (code, clean) = run(&["--real"]);
    assert_eq!((code, invariants(&clean), &clean["parity"]["equal"]), (0, vec![], &Value::Bool(true)));
}
