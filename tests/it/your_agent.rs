//! `faultline sweep --agent FILE`: a user's agent file under every fault family, its tools
//! replaced by the stand-ins its `[tools.sim]` tables declare (FAILURE-USER-HARNESS).

#![allow(clippy::disallowed_methods)] // real files: the agent file the CLI reads
use faultline_e2e::{faultline, stdout};

const SHIPPED: &str = include_str!("../../examples/your-agent/agent.toml");

fn sweep(dir: &std::path::Path, file_text: &str) -> std::process::Output {
    let path = dir.join("agent.toml");
    std::fs::write(&path, file_text).unwrap();
    faultline(&["sweep", "--agent", path.to_str().unwrap(), "--seeds", "0..300"])
}

#[test]
fn a_retrying_tool_whose_receiver_does_not_deduplicate_is_found_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let output = sweep(dir.path(), SHIPPED);
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(2), "{out}");
    assert!(out.contains("FAIL generated seed"), "{out}");
    assert!(out.contains("(tool send_email): replay with `faultline run generated --seed"), "{out}");
    assert!(out.contains("violated at-most-once: tool send_email did its effect on svc-send-email"), "{out}");
    // The advice is the file's own fix.
    assert!(out.contains("advice: tools.send_email: it retries (2 times) a call whose reply was lost"), "{out}");
    // The report says what stood in for each tool, and where that came from.
    assert!(
        out.contains("stand-in send_email: external effect on service svc-send-email (no dedup), 2 retries"),
        "{out}"
    );
    assert!(out.contains("stand-in lookup_customer: read from service svc-lookup-customer"), "{out}");
    assert!(out.contains("from side_effects = false, via_outbox = false"), "{out}");
    assert!(out.contains("stand-in queue_refund: delivered through the delivery queue"), "{out}");
    // Every built-in fault family ran against the file.
    for family in ["crash-point", "partition", "disk-full", "torn-write", "http-status", "service-lost-reply"] {
        assert!(out.contains(&format!("{family}=")), "{family} never fired:\n{out}");
    }
    // The replay line reproduces the finding.
    let replay = out.lines().find_map(|l| l.split_once("replay with `")).map(|(_, r)| r.trim_end_matches('`')).unwrap();
    let args: Vec<&str> = replay.split_whitespace().skip(1).collect();
    let again = faultline(&args);
    assert_eq!(again.status.code(), Some(2), "{}", stdout(&again));
    assert!(stdout(&again).contains("violated at-most-once: tool send_email"), "{}", stdout(&again));
}

#[test]
fn with_deduplication_by_execution_id_the_same_sweep_passes() {
    let dir = tempfile::tempdir().unwrap();
    let fixed = SHIPPED.replace("dedup = \"none\"", "dedup = \"execution-id\"");
    assert_ne!(fixed, SHIPPED);
    let output = sweep(dir.path(), &fixed);
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{out}");
    assert!(out.contains("300 runs, 0 failures"), "{out}");
    assert!(out.contains("(dedup by execution id), 2 retries"), "{out}");
}

#[test]
fn a_bad_sim_table_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let output = sweep(dir.path(), &SHIPPED.replace("retries = 2", "retries = 2\ntimeout_rate = 3.0"));
    assert_eq!(output.status.code(), Some(1));
    let err = faultline_e2e::stderr(&output);
    assert!(err.contains("tools[0].sim.timeout_rate") && err.contains("0..=1"), "{err}");
}

#[test]
fn hunt_and_shrink_take_the_agent_file_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.toml");
    std::fs::write(&path, SHIPPED).unwrap();
    let agent = path.to_str().unwrap();
    let hunt = faultline(&["hunt", "--agent", agent, "--budget-seeds", "200"]);
    let out = stdout(&hunt);
    assert_eq!(hunt.status.code(), Some(2), "{out}");
    assert!(out.contains("violated at-most-once: tool send_email"), "{out}");
    let seed = out.split("--seed ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().to_owned();
    let shrunk_path = dir.path().join("shrunk.toml");
    let shrink =
        faultline(&["shrink", "generated", "--seed", &seed, "--agent", agent, "--out", shrunk_path.to_str().unwrap()]);
    assert_eq!(shrink.status.code(), Some(0), "{}", stdout(&shrink));
    assert!(stdout(&shrink).contains(&format!("--agent {agent}")), "{}", stdout(&shrink));
    let replay = faultline(&["run", shrunk_path.to_str().unwrap(), "--seed", &seed, "--agent", agent]);
    assert_eq!(replay.status.code(), Some(2), "{}", stdout(&replay));
    assert!(stdout(&replay).contains("violated at-most-once: tool send_email"), "{}", stdout(&replay));
}
