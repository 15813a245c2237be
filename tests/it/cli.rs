//! The command line as a user meets it.

#![allow(clippy::disallowed_methods)] // reads the JUnit file a sweep wrote

use faultline_e2e::{faultline, stderr, stdout};

#[test]
fn sweep_runs_every_scenario_and_reports_coverage() {
    let output = faultline(&["sweep", "--seeds", "0..2"]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains(" 0 failures (0 no-liveness, 0 safety)"), "stdout: {text}");
    assert!(!text.contains("COVERAGE:"), "every declared site fired: {text}");
    let sometimes = text.lines().find(|l| l.starts_with("sometimes reached (runs): ")).expect("a coverage line");
    assert!(sometimes.contains(" interrupted-turn-repaired="), "{sometimes}");
    assert!(sometimes.contains(" takeover-answer-lost="), "{sometimes}");
    assert!(text.contains("crash points reached: after-side-effect="), "{text}");
    for info in faultline_sim::BUILT_IN_SCENARIOS {
        assert!(text.contains(info.name), "{} missing from the summary", info.name);
    }
}

#[test]
fn a_run_is_byte_identical_across_processes() {
    let first = faultline(&["run", "mixed", "--seed", "7", "--json", "--trace"]);
    let second = faultline(&["run", "mixed", "--seed", "7", "--json", "--trace"]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(first.stdout, second.stdout);
    let determinism = faultline(&["run", "sigkill-after-side-effect", "--seed", "4", "--check-determinism"]);
    assert!(
        stdout(&determinism).contains("deterministic: the second run produced the same trace"),
        "{}",
        stdout(&determinism)
    );
}

#[test]
fn shards_split_the_seed_space_and_junit_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let runs = |shard: &str| -> u64 {
        let out = faultline(&[
            "sweep",
            "--scenario",
            "happy-tool-turn",
            "--scenario",
            "auth-401",
            "--seeds",
            "0..7",
            "--shard",
            shard,
            "--json",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let value: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        value["runs"].as_u64().unwrap()
    };
    assert_eq!(runs("1/2") + runs("2/2"), 14);
    let junit = dir.path().join("report.xml");
    let out = faultline(&["sweep", "--scenario", "auth-401", "--seeds", "0..3", "--junit", junit.to_str().unwrap()]);
    assert!(out.status.success());
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(xml.matches("<testcase ").count(), 3);
    assert!(xml.contains("tests=\"3\" failures=\"0\""), "{xml}");
    let bad = faultline(&["sweep", "--shard", "3/2"]);
    assert_eq!(bad.status.code(), Some(1));
}

#[test]
fn scenarios_are_listed_with_descriptions() {
    let output = faultline(&["scenarios"]);
    assert!(output.status.success());
    assert!(stdout(&output).contains("sigkill-after-side-effect"));
    assert!(stdout(&output).lines().count() >= 27);
}

#[test]
fn sweep_refuses_an_unknown_scenario_by_name() {
    let output = faultline(&["sweep", "--scenario", "no-such-scenario"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("no-such-scenario"));
}

#[test]
fn help_names_the_commands() {
    let output = faultline(&["--help"]);
    assert!(output.status.success());
    for command in ["sweep", "scenarios", "run", "transcript", "llm", "model-server", "agent", "outbox"] {
        assert!(stdout(&output).contains(command), "--help lacks {command}");
    }
}

#[test]
fn bad_arguments_exit_non_zero() {
    let output = faultline(&["no-such-command"]);
    assert!(!output.status.success());
}

/// The demo's narration is not the evidence: the receiver's own log (sent.log, appended by
/// the tool's shell command) and the session file, read here as plain JSON, are.
#[test]
fn the_demo_kills_an_agent_at_its_side_effect_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let demo_dir = dir.path().to_str().unwrap();
    let output = faultline(&["demo", "--dir", demo_dir]);
    assert!(output.status.success(), "{}\n{}", stdout(&output), stderr(&output));
    let sent = std::fs::read_to_string(dir.path().join("sent.log")).unwrap();
    assert_eq!(sent.lines().collect::<Vec<_>>(), ["demo:1:1:call_1"], "the effect happened exactly once");
    let session = std::fs::read_to_string(dir.path().join("sessions/demo/session.jsonl")).unwrap();
    let records: Vec<serde_json::Value> =
        session.lines().skip(1).map(|line| serde_json::from_str(line).expect("every line is a record")).collect();
    let of_type = |kind: &'static str| records.iter().filter(move |r| r["type"] == kind);
    assert_eq!(of_type("tool/call").filter(|r| r["data"]["call_id"] == "call_1").count(), 1, "never re-run");
    let results: Vec<_> = of_type("tool/result").filter(|r| r["data"]["call_id"] == "call_1").collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["data"]["error"]["code"], "TOOL_OUTCOME_UNKNOWN", "{}", results[0]);
    let ends: Vec<_> = of_type("turn/end").map(|r| r["data"]["reason"]["kind"].clone()).collect();
    assert_eq!(ends, ["interrupted", "completed"], "the killed turn closed by repair, then the resumed one");
    // A second demo into the same directory would start with a side effect already logged.
    let again = faultline(&["demo", "--dir", demo_dir]);
    assert!(!again.status.success());
    assert!(stderr(&again).contains("already holds a demo"), "{}", stderr(&again));
}

#[test]
fn the_quick_bench_reports_every_figure_with_its_baseline() {
    let output = faultline(&["bench", "--quick", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert!(report["fsync_ms_p50"].as_f64().unwrap() > 0.0);
    let names: Vec<String> =
        report["figures"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap().to_owned()).collect();
    for needle in [
        "durable append jsonl, batch 256",
        "durable append sqlite, batch 1",
        "write-behind flush latency p99",
        "recovery zstd",
        "adapter: SSE events",
        "parse: openai events through its reader",
        "parse: anthropic events through its reader",
        "parse: gemini events through its reader",
        "durable append zstd, batch 256 (write-behind)",
        "ceiling of a serial encode + write + fsync, batch 256",
        "write-behind flat out, durable",
        "recovery mix jsonl: inspect",
        "recovery mix zstd: inspect",
        "transcript inspect of 256 MiB: peak memory",
        "simulator: default mix",
        "simulator: mixed scenario",
    ] {
        assert!(names.iter().any(|n| n.contains(needle)), "missing {needle}: {names:?}");
    }
    // Every stated target is evaluated (holds or MISSED), and a relative one has its ratio.
    let absolute = ["simulator: mixed scenario", "peak memory", "recovery mix"];
    for figure in report["figures"].as_array().unwrap() {
        if figure["target"].is_null() {
            continue;
        }
        assert!(figure["meets_target"].is_boolean(), "a target nobody evaluated: {figure}");
        let name = figure["name"].as_str().unwrap();
        if !absolute.iter().any(|a| name.contains(a)) {
            assert!(figure["ratio"].as_f64().is_some(), "a target without a baseline ratio: {figure}");
        }
    }
}

#[test]
fn shrink_writes_a_small_regression_file_that_replays_the_failure() {
    let dir = tempfile::tempdir().unwrap();
    // A failing run with several faults: the scenario expects a receipt count the workload
    // never produces, so every variant keeps failing and the shrinker cuts all it can.
    let mut text = faultline_sim::Scenario::built_in("mixed").unwrap().to_toml();
    text.push_str("\n[expect]\ngateway_receipts = 99\n");
    let failing = dir.path().join("failing.toml");
    std::fs::write(&failing, text).unwrap();
    let out = dir.path().join("regression.toml");
    let shrink = faultline(&[
        "shrink",
        failing.to_str().unwrap(),
        "--seed",
        "5",
        "--name",
        "wrong-receipt-count",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(shrink.status.success(), "{}\n{}", stdout(&shrink), stderr(&shrink));
    assert!(stdout(&shrink).contains("(expectation): faults "), "{}", stdout(&shrink));
    let written = std::fs::read_to_string(&out).unwrap();
    let scenario = faultline_sim::Scenario::parse(&written).unwrap();
    assert_eq!(scenario.name, "wrong-receipt-count");
    assert_eq!(scenario.messages.len(), 1, "cut to one message: {written}");
    assert_eq!(faultline_sim::shrink::fault_count(&scenario), 0, "every fault cut: {written}");
    let regression = scenario.regression.unwrap();
    assert_eq!((regression.invariant.as_str(), regression.seed), ("expectation", 5));
    let replay = faultline(&["run", out.to_str().unwrap(), "--seed", "5"]);
    assert_eq!(replay.status.code(), Some(2), "the regression still fails: {}", stdout(&replay));
    assert!(stdout(&replay).contains("violated expectation"), "{}", stdout(&replay));
}

#[test]
fn shrink_refuses_a_passing_run() {
    let output = faultline(&["shrink", "happy-tool-turn", "--seed", "1", "--out", "/nonexistent/x.toml"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("nothing to shrink"), "{}", stderr(&output));
}

/// `sweep --merge` of the shards 1/3, 2/3, 3/3 gives the totals and coverage of the unsharded
/// sweep; overlapping shards and shards of another sweep are refused.
#[test]
fn merged_shard_reports_equal_the_unsharded_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = |shard: Option<&str>| -> serde_json::Value {
        let mut args = vec![
            "sweep",
            "--scenario",
            "happy-tool-turn",
            "--scenario",
            "sigkill-after-side-effect",
            "--seeds",
            "0..6",
        ];
        if let Some(shard) = shard {
            args.extend(["--shard", shard]);
        }
        args.push("--json");
        let out = faultline(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_str(stdout(&out).trim()).unwrap()
    };
    let whole = sweep(None);
    let mut files = Vec::new();
    for k in 1..=3 {
        let path = dir.path().join(format!("shard-{k}.json"));
        std::fs::write(&path, sweep(Some(&format!("{k}/3"))).to_string()).unwrap();
        files.push(path.to_str().unwrap().to_owned());
    }
    let html = dir.path().join("merged.html");
    let junit = dir.path().join("merged.xml");
    let mut args =
        vec!["sweep", "--json", "--html", html.to_str().unwrap(), "--junit", junit.to_str().unwrap(), "--merge"];
    args.extend(files.iter().map(String::as_str));
    let out = faultline(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let merged: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    for field in [
        "runs",
        "scenarios",
        "crash_point_hits",
        "fault_families_fired",
        "sometimes_reached",
        "failures",
        "never_fired",
    ] {
        assert_eq!(merged[field], whole[field], "{field}");
    }
    assert_eq!(merged["runs"], 12);
    assert_eq!(merged["shard"], "merged 1,2,3/3");
    assert!(std::fs::read_to_string(&html).unwrap().contains("crash points reached"));
    assert!(
        std::fs::read_to_string(&junit).unwrap().contains("tests=\"2\" failures=\"0\""),
        "per scenario without per-run cases"
    );

    let twice = faultline(&["sweep", "--merge", &files[0], &files[0]]);
    assert_eq!(twice.status.code(), Some(1));
    assert!(stderr(&twice).contains("overlaps"), "{}", stderr(&twice));
    let other = dir.path().join("other.json");
    let out = faultline(&["sweep", "--scenario", "auth-401", "--seeds", "0..6", "--shard", "2/3", "--json"]);
    std::fs::write(&other, stdout(&out)).unwrap();
    let mixed = faultline(&["sweep", "--merge", &files[0], other.to_str().unwrap()]);
    assert_eq!(mixed.status.code(), Some(1));
    assert!(stderr(&mixed).contains("other scenarios"), "{}", stderr(&mixed));
}

#[test]
fn run_writes_an_html_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("t.html");
    let out = faultline(&["run", "sigkill-after-side-effect", "--seed", "0", "--html", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && !html.contains("http://") && !html.contains("https://"), "offline");
    assert!(html.contains("crash at after-side-effect (SIGKILL)") && html.contains("TOOL_OUTCOME_UNKNOWN"));
}
