//! `faultline run --real` and `faultline sweep --real`: scenarios executed with real
//! processes, files, sockets and SIGKILL, held to the oracle and to parity with the simulator.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes and files

use std::path::Path;

use faultline_e2e::{faultline, stderr, stdout};
use serde_json::Value;

/// A transcript as parity compares it: one JSON value per record, `time` zeroed.
fn normalised(lines: &str) -> Vec<Value> {
    lines
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            let mut record: Value = serde_json::from_str(l).unwrap();
            record["time"] = Value::from(0);
            record
        })
        .collect()
}

/// The real run of `sigkill-after-side-effect` at seed 0: a real child is SIGKILLed at the
/// named crash point (and the OS says so), a second one recovers, repairs and resumes, and
/// what it leaves on disk is the snapshot the simulator's run is held to.
#[test]
fn sigkill_after_side_effect_for_real_kills_a_real_child_and_recovers_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("run");
    let output = faultline(&[
        "run",
        "sigkill-after-side-effect",
        "--seed",
        "0",
        "--real",
        "--json",
        "--trace",
        "--keep",
        keep.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}{}", stdout(&output), stderr(&output));
    let verdict: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(verdict["real"], true);
    assert_eq!(verdict["parity"]["equal"], true, "{verdict}");
    assert_eq!(verdict["gateway_requests"], 1, "the effect reached the real gateway once");
    let trace: Vec<&str> = verdict["trace"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    let crash = trace.iter().position(|l| l.ends_with("crash at after-side-effect (SIGKILL)"));
    let restart = trace.iter().position(|l| l.ends_with("agent#2 starts"));
    assert!(crash.is_some() && crash < restart, "killed at the crash point, then restarted: {trace:#?}");
    // Each incarnation was its own process, and left its stderr beside the session.
    assert!(keep.join("agent-1.stderr").exists() && keep.join("agent-2.stderr").exists());

    let session = keep.join("data/sessions/sim/session.jsonl");
    let cat = faultline(&["transcript", "cat", session.to_str().unwrap()]);
    assert_eq!(cat.status.code(), Some(0), "{}", stderr(&cat));
    let snapshot = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../snapshots/sigkill-after-side-effect.snap"),
    )
    .unwrap();
    let recovered = normalised(&stdout(&cat));
    assert_eq!(recovered, normalised(&snapshot), "the real disk holds the snapshot's transcript, times aside");
    let codes: Vec<&Value> =
        recovered.iter().filter(|r| r["type"] == "tool/result").map(|r| &r["data"]["error"]["code"]).collect();
    assert_eq!(codes, vec!["TOOL_OUTCOME_UNKNOWN"], "repaired, never resent");
}

#[test]
fn a_sim_only_scenario_is_refused_for_real_with_its_reason() {
    let output = faultline(&["run", "torn-write-mid-append", "--seed", "0", "--real"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("sim-only") && stderr(&output).contains("power loss"), "{}", stderr(&output));
}

/// Parity is a real check: the same torn-write scenario with its `sim_only` declaration taken
/// out runs for real and differs where the worlds differ (a SIGKILL keeps the unsynced write
/// that the simulator's power loss tears), and the run says where, with both records.
#[test]
fn parity_reports_the_first_record_where_the_worlds_differ() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/torn-write-mid-append.toml"))
            .unwrap();
    // Without its sim-only declaration, and without the torn-write evidence it expects: a
    // real SIGKILL tears nothing, which is the difference this test is about.
    let undeclared: String = text
        .lines()
        .take_while(|l| *l != "[real]")
        .filter(|l| !l.starts_with("faults_fired"))
        .map(|l| format!("{l}\n"))
        .collect();
    let path = dir.path().join("torn-for-real.toml");
    std::fs::write(&path, undeclared).unwrap();
    let output = faultline(&["run", path.to_str().unwrap(), "--seed", "0", "--real"]);
    assert_eq!(output.status.code(), Some(2), "ran and failed (parity): {}", stdout(&output));
    let out = stdout(&output);
    assert!(out.contains("PASS torn-write-mid-append"), "the oracle holds in both worlds: {out}");
    assert!(out.contains("parity: DIFFERS at record"), "{out}");
    assert!(out.contains("    sim:  {") && out.contains("    real: {"), "both sides printed: {out}");
}

#[test]
fn a_real_sweep_holds_each_run_to_parity_and_says_so() {
    let output = faultline(&[
        "sweep",
        "--real",
        "--scenario",
        "happy-tool-turn",
        "--scenario",
        "sigkill-at-dispatch",
        "--scenario",
        "power-loss-hole",
        "--seeds",
        "0..2",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}{}", stdout(&output), stderr(&output));
    assert!(stderr(&output).contains("skipped power-loss-hole: sim-only"), "{}", stderr(&output));
    let summary: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!((summary["real"].as_bool(), summary["runs"].as_u64()), (Some(true), Some(4)));
    for name in ["happy-tool-turn", "sigkill-at-dispatch"] {
        assert_eq!(summary["scenarios"][name]["parity_differences"], 0, "{summary}");
    }
    let table = faultline(&["sweep", "--real", "--scenario", "happy-tool-turn", "--seeds", "0..1"]);
    assert!(stdout(&table).contains("parity") && stdout(&table).contains("1/1"), "{}", stdout(&table));
}
