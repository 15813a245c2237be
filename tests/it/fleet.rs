//! Fleets on PostgreSQL (FAILURE-LEASE-EPOCH), with real processes and a real server started
//! by the test: a session written by one worker is read back clean by another, a worker
//! killed mid-turn is resumed by another, and a worker stopped past its lease wakes up fenced:
//! nothing it tries to write lands.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use faultline_e2e::{faultline, faultline_bin, logged_requests, skip_or_fail, stderr, stdout, ModelServerProcess};
use faultline_runtime::testing::{PgServer, REQUIRE_POSTGRES_ENV};
use serde_json::{json, Value};

/// A fresh database on the shared test server, or `None` (skipped) without PostgreSQL.
fn database() -> Option<String> {
    match PgServer::shared() {
        Some(server) => Some(server.fresh_database()),
        None => {
            skip_or_fail(REQUIRE_POSTGRES_ENV, "PostgreSQL is not installed");
            None
        }
    }
}

/// An agent config with a `send` tool that appends its execution id to `marker.log` (and
/// hangs afterwards when `hang`, so the test can kill the worker right after the effect).
fn config(dir: &Path, base_url: &str, hang: bool) -> PathBuf {
    let marker = dir.join("marker.log");
    let hang = if hang { "; sleep 30" } else { "" };
    let text = format!(
        r#"[provider]
preset = "openai-compatible"
base_url = "{base_url}"
model = "m"
idle_timeout_ms = 60000

[[tools]]
name = "send"
description = "send a message"
command = ["sh", "-c", "echo $FAULTLINE_EXECUTION_ID >> {marker}{hang}"]
side_effects = true
"#,
        marker = marker.display()
    );
    let path = dir.join(if hang.is_empty() { "agent.toml" } else { "hanging.toml" });
    std::fs::write(&path, text).unwrap();
    path
}

/// `agent run` of one worker on session `id` of `url` (its own session directory: workers
/// share only the database).
fn worker(config: &Path, worker_dir: &Path, url: &str, id: &str, resume: bool, extra: &[&str]) -> Command {
    let mut command = Command::new(faultline_bin());
    command
        .args(["agent", "run", "--config", config.to_str().unwrap(), "--session-dir", worker_dir.to_str().unwrap()])
        .args(["--store", "postgres", "--session", id, "--prompt", "go", "--json"])
        .env("FAULTLINE_DATABASE_URL", url)
        .args(extra);
    if resume {
        command.arg("--resume");
    }
    command
}

fn spawn(mut command: Command) -> Child {
    command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn transcript(command: &str, url: &str, id: &str, extra: &[&str]) -> Output {
    let mut args = vec!["transcript", command, "--database-url", url, "--session", id];
    args.extend_from_slice(extra);
    faultline(&args)
}

fn cat(url: &str, id: &str) -> Vec<Value> {
    let output = transcript("cat", url, id, &[]);
    assert_eq!(output.status.code(), Some(0), "cat: {}", stderr(&output));
    stdout(&output).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn markers(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("marker.log")).unwrap_or_default().lines().map(str::to_owned).collect()
}

#[test]
fn a_session_written_on_postgres_is_read_back_clean_by_another_process() {
    let Some(url) = database() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Inspecting a database without the schema is refused, and creates nothing.
    let refused = transcript("inspect", &url, "s1", &[]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("no faultline schema"), "{}", stderr(&refused));
    let again = transcript("inspect", &url, "s1", &[]);
    assert!(stderr(&again).contains("no faultline schema"), "the read-only inspection created nothing");

    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": [{"tool_call": {"index": 0, "id": "call_1", "name": "send", "arguments": "{\"text\":\"hi\"}"}}], "finish": "tool_calls"},
            {"frames": [{"text": "Sent"}, {"text": " it."}], "finish": "stop"}
        ]}),
    );
    let config = config(dir.path(), &server.base_url(), false);
    let output = worker(&config, &dir.path().join("w1"), &url, "s1", false, &[]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let summary: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(summary["end_reason"]["kind"], "completed", "{summary}");
    assert_eq!(summary["assistant_text"], "Sent it.");

    let inspected = transcript("inspect", &url, "s1", &["--json"]);
    assert_eq!(inspected.status.code(), Some(0), "clean: {}", stderr(&inspected));
    let inspection: Value = serde_json::from_str(stdout(&inspected).trim()).unwrap();
    assert_eq!(inspection["status"], "clean", "{inspection}");
    let log = cat(&url, "s1");
    let kinds: Vec<&str> = log.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"turn/start"));
    assert_eq!(kinds.last(), Some(&"turn/end"));
    assert!(kinds.contains(&"tool/call") && kinds.contains(&"tool/result"), "{kinds:?}");
    assert_eq!(markers(dir.path()), vec!["s1:1:1:call_1".to_owned()]);
}

#[test]
fn a_worker_killed_mid_turn_is_resumed_by_another_and_the_effect_is_not_repeated() {
    let Some(url) = database() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": [{"tool_call": {"index": 0, "id": "call_1", "name": "send", "arguments": "{\"text\":\"hi\"}"}}], "finish": "tool_calls"},
            {"frames": [{"text": "I will check before sending again."}], "finish": "stop"}
        ]}),
    );
    let hanging = config(dir.path(), &server.base_url(), true);
    let mut first = spawn(worker(&hanging, &dir.path().join("w1"), &url, "k", false, &[]));
    wait_for("the side effect's marker", || !markers(dir.path()).is_empty());
    first.kill().unwrap(); // SIGKILL between the effect and its result
    first.wait().unwrap();

    let inspected = transcript("inspect", &url, "k", &["--json"]);
    assert_eq!(inspected.status.code(), Some(3), "repair needed: {}", stdout(&inspected));
    let inspection: Value = serde_json::from_str(stdout(&inspected).trim()).unwrap();
    assert_eq!(inspection["closers"][0]["data"]["error"]["code"], "TOOL_OUTCOME_UNKNOWN", "{inspection}");

    // Another worker (its own directory, its own process) takes the session over at once:
    // the first worker's lease is live, but its process is provably gone.
    let calm = config(dir.path(), &server.base_url(), false);
    let output = worker(&calm, &dir.path().join("w2"), &url, "k", true, &[]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let summary: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(summary["end_reason"]["kind"], "completed", "{summary}");
    assert_eq!(markers(dir.path()), vec!["k:1:1:call_1".to_owned()], "the effect happened exactly once");
    let unknown = cat(&url, "k").into_iter().find(|r| r["type"] == "tool/result").unwrap();
    assert_eq!(unknown["data"]["error"]["code"], "TOOL_OUTCOME_UNKNOWN", "{unknown}");
}

/// SIGSTOP, SIGCONT.
fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
    assert!(status.success());
}

#[test]
fn a_worker_stopped_past_its_lease_wakes_up_fenced_and_writes_nothing() {
    let Some(url) = database() else { return };
    let dir = tempfile::tempdir().unwrap();
    // The zombie's answer streams slowly; the second worker's comes at once.
    let slow: Vec<Value> = (0..40).map(|i| json!({"text": format!("zombie {i} ")})).collect();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": slow, "finish": "stop", "frame_delay_ms": 50},
            {"frames": [{"text": "The live worker's answer."}], "finish": "stop"}
        ]}),
    );
    let config = config(dir.path(), &server.base_url(), false);
    let lease = ["--lease-ms", "1000"];
    let zombie = spawn(worker(&config, &dir.path().join("w1"), &url, "z", false, &lease));
    wait_for("the zombie's request at the model server", || !logged_requests(dir.path()).is_empty());
    std::thread::sleep(Duration::from_millis(300)); // a few chunks in
    signal(&zombie, "STOP");
    std::thread::sleep(Duration::from_millis(2_500)); // past the lease: nobody renews it

    let output = worker(&config, &dir.path().join("w2"), &url, "z", true, &lease).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "the live worker takes over: {}", stderr(&output));
    let summary: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(summary["assistant_text"], "The live worker's answer.", "{summary}");
    let after_takeover = cat(&url, "z");

    signal(&zombie, "CONT");
    let woke = zombie.wait_with_output().unwrap();
    assert_ne!(woke.status.code(), Some(0), "the zombie's turn cannot be kept: {}", stderr(&woke));
    assert!(
        String::from_utf8_lossy(&woke.stderr).contains("superseded"),
        "the zombie is told it was fenced: {}",
        String::from_utf8_lossy(&woke.stderr)
    );
    assert_eq!(cat(&url, "z"), after_takeover, "nothing the zombie wrote after the takeover landed");
    let inspected = transcript("inspect", &url, "z", &[]);
    assert_eq!(inspected.status.code(), Some(0), "{}", stdout(&inspected));
}

#[test]
fn a_zombie_never_dispatches_the_tool_call_it_streams_after_the_takeover() {
    let Some(url) = database() else { return };
    let dir = tempfile::tempdir().unwrap();
    // The zombie's answer streams text slowly, then calls the tool.
    let mut frames: Vec<Value> = (0..30).map(|i| json!({"text": format!("thinking {i} ")})).collect();
    frames.push(json!({"tool_call": {"index": 0, "id": "call_z", "name": "send", "arguments": "{\"text\":\"hi\"}"}}));
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": frames, "finish": "tool_calls", "frame_delay_ms": 40},
            {"frames": [{"text": "Nothing was sent."}], "finish": "stop"}
        ]}),
    );
    let config = config(dir.path(), &server.base_url(), false);
    let lease = ["--lease-ms", "1000"];
    let zombie = spawn(worker(&config, &dir.path().join("w1"), &url, "d", false, &lease));
    wait_for("the zombie's request at the model server", || !logged_requests(dir.path()).is_empty());
    std::thread::sleep(Duration::from_millis(200));
    signal(&zombie, "STOP");
    std::thread::sleep(Duration::from_millis(2_500));

    let output = worker(&config, &dir.path().join("w2"), &url, "d", true, &lease).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "the live worker takes over: {}", stderr(&output));
    let after_takeover = cat(&url, "d");

    signal(&zombie, "CONT");
    let woke = zombie.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&woke.stderr);
    assert_ne!(woke.status.code(), Some(0), "{said}");
    assert!(said.contains("superseded"), "the zombie is told it was fenced: {said}");
    assert!(markers(dir.path()).is_empty(), "no effect from the fenced epoch: {:?}", markers(dir.path()));
    assert_eq!(cat(&url, "d"), after_takeover, "nothing the zombie wrote after the takeover landed");
}
