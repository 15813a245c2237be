//! Real processes, real SIGKILL (FAILURE-CRASH-E2E): the production build on a
//! real filesystem and real TCP, killed at the model dispatch and at a tool's side effect, for
//! every store. The child signals readiness through the server's request log or the tool's
//! marker file; the test observes it and kills (no sleep-and-hope).
#![allow(clippy::disallowed_methods, clippy::disallowed_types, clippy::print_stdout)] // real processes

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use faultline_e2e::{
    agent_run_args, faultline, faultline_bin, logged_requests, marker_agent_config, markers, stderr, stdout,
    ModelServerProcess,
};
use serde_json::{json, Value};

const STORES: [&str; 3] = ["jsonl", "zstd", "sqlite"];

fn config(dir: &Path, base_url: &str, via_outbox: bool, hang: bool) -> PathBuf {
    marker_agent_config(dir, base_url, via_outbox, hang)
}

fn spawn_agent(config: &Path, sessions: &Path, store: &str, session: &str, resume: bool, prompt: &str) -> Child {
    let mut command = Command::new(faultline_bin());
    command
        .args(["agent", "run", "--config", config.to_str().unwrap(), "--session-dir", sessions.to_str().unwrap()])
        .args(["--store", store, "--session", session, "--prompt", prompt, "--json"]);
    if resume {
        command.arg("--resume");
    }
    command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

/// Waits (bounded) until `ready` holds.
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `transcript inspect --json` of session `id`.
fn inspect(sessions: &Path, store: &str, id: &str) -> (i32, Value) {
    let output = match store {
        "sqlite" => faultline(&[
            "transcript",
            "inspect",
            "--sqlite",
            sessions.join("sessions.sqlite").to_str().unwrap(),
            "--session",
            id,
            "--json",
        ]),
        _ => faultline(&["transcript", "inspect", sessions.join(id).to_str().unwrap(), "--json"]),
    };
    (output.status.code().unwrap(), serde_json::from_str(stdout(&output).trim()).unwrap_or(Value::Null))
}

fn cat(sessions: &Path, store: &str, id: &str) -> Vec<Value> {
    let output = match store {
        "sqlite" => faultline(&[
            "transcript",
            "cat",
            "--sqlite",
            sessions.join("sessions.sqlite").to_str().unwrap(),
            "--session",
            id,
        ]),
        _ => faultline(&["transcript", "cat", sessions.join(id).to_str().unwrap()]),
    };
    stdout(&output).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn resume(config: &Path, sessions: &Path, store: &str, id: &str) -> Value {
    let output = faultline(&agent_run_args(
        config,
        sessions,
        &["--store", store, "--session", id, "--resume", "--prompt", "what happened?", "--json"],
    ));
    assert_eq!(output.status.code(), Some(0), "resume failed: {}", stderr(&output));
    serde_json::from_str(stdout(&output).trim()).unwrap()
}

#[test]
fn killed_right_after_the_model_received_the_request() {
    for store in STORES {
        let dir = tempfile::tempdir().unwrap();
        let server = ModelServerProcess::start(
            dir.path(),
            &json!({"responses": [
                {"frames": [{"text": "never sent"}], "stall_after_frames": 0},
                {"frames": [{"text": "Back."}], "finish": "stop"}
            ]}),
        );
        let config = config(dir.path(), &server.base_url(), false, false);
        let sessions = dir.path().join("sessions");
        let mut child = spawn_agent(&config, &sessions, store, "k1", false, "hello");
        wait_for("the request at the model server", || !logged_requests(dir.path()).is_empty());
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let (code, inspection) = inspect(&sessions, store, "k1");
        assert_eq!(code, 3, "{store}: repair needed: {inspection}");
        let types: Vec<&str> =
            inspection["closers"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(types, vec!["step/end", "turn/end"], "{store}");

        let summary = resume(&config, &sessions, store, "k1");
        assert_eq!(summary["turn"], 2);
        let log = cat(&sessions, store, "k1");
        let kinds: Vec<&str> = log.iter().map(|r| r["type"].as_str().unwrap()).collect();
        assert_eq!(
            &kinds[..4],
            &["turn/start", "step/start", "user/message", "request/header"],
            "{store}: the request prefix survived"
        );
        let first_end = log.iter().find(|r| r["type"] == "turn/end").unwrap();
        assert_eq!(first_end["data"]["reason"], json!({"kind": "interrupted"}), "{store}");
    }
}

fn killed_at_the_side_effect(via_outbox: bool) {
    for store in STORES {
        let dir = tempfile::tempdir().unwrap();
        let server = ModelServerProcess::start(
            dir.path(),
            &json!({"responses": [
                {"frames": [{"tool_call": {"index": 0, "id": "call_1", "name": "send", "arguments": "{\"text\":\"hi\"}"}}], "finish": "tool_calls"},
                {"frames": [{"text": "I will check the channel before sending again."}], "finish": "stop"}
            ]}),
        );
        let hanging = config(dir.path(), &server.base_url(), via_outbox, true);
        let sessions = dir.path().join("sessions");
        let mut child = spawn_agent(&hanging, &sessions, store, "k2", false, "tell the team");
        wait_for("the side effect's marker", || !markers(dir.path()).is_empty());
        child.kill().unwrap(); // SIGKILL between the effect and its result
        child.wait().unwrap();

        let (code, inspection) = inspect(&sessions, store, "k2");
        assert_eq!(code, 3, "{store}: {inspection}");
        let closer = &inspection["closers"][0];
        assert_eq!(closer["data"]["error"]["code"], "TOOL_OUTCOME_UNKNOWN", "{store}: {closer}");
        let call_seq = closer["source_seqs"][0].as_u64().unwrap();
        let log = cat(&sessions, store, "k2");
        assert_eq!(log[call_seq as usize]["type"], "tool/call", "{store}: the closer cites the durable tool/call");

        // Resume with a config whose tool would not hang: it must not run again anyway.
        let summary = resume(&config(dir.path(), &server.base_url(), via_outbox, false), &sessions, store, "k2");
        assert_eq!(summary["end_reason"]["kind"], "completed");
        let log = cat(&sessions, store, "k2");
        let result = log.iter().find(|r| r["type"] == "tool/result").unwrap();
        let text = result["data"]["content"][0]["text"].as_str().unwrap();
        if via_outbox {
            assert!(
                text.contains("delivery record k2:1:1:call_1 is unknown"),
                "{store}: reconciled from the delivery record: {text}"
            );
        }
        assert_eq!(markers(dir.path()), vec!["k2:1:1:call_1".to_owned()], "{store}: the effect happened exactly once");
    }
}

#[test]
fn killed_after_the_side_effect_of_a_command_tool() {
    killed_at_the_side_effect(false);
}

#[test]
fn killed_after_the_side_effect_routed_through_the_outbox() {
    killed_at_the_side_effect(true);
}

/// A multi-turn session killed at random moments, recovered and resumed, 30 times per store:
/// never corrupt, always valid after repair, no side effect twice (in the spirit of sled's
/// crash tests). The kill delays come from a fixed-seed generator so a failure replays.
#[test]
fn a_randomly_killed_session_never_corrupts_and_never_repeats_an_effect() {
    const KILLS_PER_STORE: usize = 30;
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for store in STORES {
        let dir = tempfile::tempdir().unwrap();
        let responses: Vec<Value> = (0..200)
            .map(|i| {
                if i % 2 == 0 {
                    json!({"frames": [{"tool_call": {"index": 0, "id": format!("call_{i}"), "name": "send", "arguments": "{\"text\":\"hi\"}"}}], "finish": "tool_calls", "frame_delay_ms": 25})
                } else {
                    json!({"frames": [{"text": "sent"}, {"text": " it"}], "finish": "stop", "frame_delay_ms": 25})
                }
            })
            .collect();
        let server = ModelServerProcess::start(dir.path(), &json!({"responses": responses, "repeat_last": true}));
        let config = config(dir.path(), &server.base_url(), false, false);
        let sessions = dir.path().join("sessions");
        let (mut kills, mut repaired, mut completed, mut round) = (0, 0, 0, 0);
        while kills < KILLS_PER_STORE {
            round += 1;
            assert!(round <= 8 * KILLS_PER_STORE, "{store}: only {kills} kills in {round} rounds");
            let exists = inspect(&sessions, store, "loop").0 != 1;
            let mut child = spawn_agent(&config, &sessions, store, "loop", exists, "go");
            // Turns take ~100 ms (slow frames), so most delays land inside one.
            let delay = 10 + next() % 90;
            std::thread::sleep(Duration::from_millis(delay));
            if child.try_wait().unwrap().is_none() {
                child.kill().unwrap(); // SIGKILL at a random moment
                kills += 1;
            } else {
                completed += 1;
            }
            child.wait().unwrap();
            let (code, inspection) = inspect(&sessions, store, "loop");
            if code == 1 {
                continue; // killed before the session existed: the next round creates it
            }
            assert_ne!(inspection["status"], "corrupt", "{store} round {round} (kill after {delay} ms): {inspection}");
            if code == 3 {
                let repair = match store {
                    "sqlite" => faultline(&[
                        "transcript",
                        "repair",
                        "--sqlite",
                        sessions.join("sessions.sqlite").to_str().unwrap(),
                        "--session",
                        "loop",
                    ]),
                    _ => faultline(&["transcript", "repair", sessions.join("loop").to_str().unwrap()]),
                };
                assert_eq!(repair.status.code(), Some(0), "{store} round {round}: {}", stderr(&repair));
                repaired += 1;
            }
            let (code, after) = inspect(&sessions, store, "loop");
            assert_eq!(code, 0, "{store} round {round}: the repaired log is clean and closed: {after}");
            let effects = markers(dir.path());
            let unique: std::collections::BTreeSet<&String> = effects.iter().collect();
            assert_eq!(unique.len(), effects.len(), "{store} round {round}: a side effect happened twice: {effects:?}");
        }
        let effects = markers(dir.path());
        println!("{store}: {kills} kills, {completed} turns finished before the kill, {repaired} repairs, {} effects, 0 corrupt, 0 duplicates", effects.len());
        // The final transcript against the tool's own marker file (written by the tool
        // process, never by the runtime): every effect had its intent durable, every result
        // the transcript calls done happened, and none it calls not started did.
        let records = cat(&sessions, store, "loop");
        let id = |data: &Value| {
            format!("loop:{}:{}:{}", data["turn"], data["step"], data["call_id"].as_str().unwrap_or_default())
        };
        let calls: std::collections::BTreeSet<String> =
            records.iter().filter(|r| r["type"] == "tool/call").map(|r| id(&r["data"])).collect();
        for effect in &effects {
            assert!(calls.contains(effect), "{store}: effect {effect} without a durable tool/call");
        }
        for result in records.iter().filter(|r| r["type"] == "tool/result") {
            let execution = id(&result["data"]);
            let happened = effects.contains(&execution);
            match result["data"]["error"]["code"].as_str() {
                None => assert!(happened, "{store}: {execution} is recorded done but never happened"),
                Some("TOOL_NOT_STARTED" | "ABORTED_BEFORE_DISPATCH") => {
                    assert!(!happened, "{store}: {execution} is recorded not started but happened")
                }
                Some(_) => {}
            }
        }
        // Each repair closed exactly one interrupted turn, and every interrupted turn on disk is
        // one of them (the agent itself never starts on an open turn here: it is repaired first).
        let interrupted =
            records.iter().filter(|r| r["type"] == "turn/end" && r["data"]["reason"]["kind"] == "interrupted").count();
        assert_eq!(interrupted, repaired, "{store}: repairs and interrupted turns on disk");
        // Kills land inside ~100 ms turns: a run that never needed a repair never tested one.
        assert!(repaired >= KILLS_PER_STORE / 3, "{store}: {kills} kills, only {repaired} interrupted turns to repair");
    }
}
