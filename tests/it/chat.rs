//! `faultline agent chat` with live config reload (FAILURE-HMR-*): add → apply failure →
//! parse failure → recovery → removal, driven through a child's piped stdin.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes and files

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use faultline_e2e::{faultline_bin, logged_requests, ModelServerProcess};
use serde_json::json;

fn config_text(base_url: &str, model: &str, extra: &str) -> String {
    format!("[provider]\npreset = \"openai-compatible\"\nbase_url = \"{base_url}\"\nmodel = \"{model}\"\n{extra}")
}

/// Waits (bounded) for a stdout line containing `needle`.
fn expect_line(lines: &mpsc::Receiver<String>, needle: &str) -> String {
    loop {
        match lines.recv_timeout(Duration::from_secs(20)) {
            Ok(line) if line.contains(needle) => return line,
            Ok(_) => continue,
            Err(_) => panic!("no line containing {needle:?} within 20 s"),
        }
    }
}

/// The child's stdout, a line at a time, read on a thread of its own.
fn stdout_lines(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    let (tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    lines
}

fn models_requested(dir: &Path) -> Vec<String> {
    logged_requests(dir)
        .iter()
        .map(|r| {
            serde_json::from_str::<serde_json::Value>(r["body"].as_str().unwrap()).unwrap()["model"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn chat_reloads_valid_edits_and_keeps_the_last_good_config_through_failures() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [{"frames": [{"text": "ok"}], "finish": "stop"}], "repeat_last": true}),
    );
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, config_text(&server.base_url(), "m1", "")).unwrap();
    let mut child = Command::new(faultline_bin())
        .args([
            "agent",
            "chat",
            "--config",
            config.to_str().unwrap(),
            "--session-dir",
            dir.path().join("sessions").to_str().unwrap(),
        ])
        .args(["--session", "chat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = stdout_lines(&mut child);
    let mut stdin = child.stdin.take().unwrap();
    let mut say = |text: &str, turn: u32| {
        writeln!(stdin, "{text}").unwrap();
        stdin.flush().unwrap();
        expect_line(&lines, &format!("[turn {turn}: completed]"));
    };

    say("one", 1);
    // add: a valid edit applies to the next request
    std::fs::write(&config, config_text(&server.base_url(), "m2", "")).unwrap();
    let applied = expect_line(&lines, "[config]");
    assert!(applied.contains("reloaded: model m2"), "{applied}");
    say("two", 2);
    // apply failure: well-formed but invalid
    std::fs::write(
        &config,
        config_text(&server.base_url(), "m9", "[provider.retry_policy.backoff]\njitter_ratio = 5.0\n"),
    )
    .unwrap();
    let rejected = expect_line(&lines, "[config]");
    assert!(rejected.contains("reload FAILED (invalid") && rejected.contains("jitter_ratio"), "{rejected}");
    say("three", 3);
    // parse failure
    std::fs::write(&config, "[provider\nthis is not toml").unwrap();
    let broken = expect_line(&lines, "[config]");
    assert!(broken.contains("reload FAILED (parse error"), "{broken}");
    say("four", 4);
    // recovery
    std::fs::write(&config, config_text(&server.base_url(), "m3", "")).unwrap();
    assert!(expect_line(&lines, "[config]").contains("reloaded: model m3"));
    say("five", 5);
    // removal
    std::fs::remove_file(&config).unwrap();
    assert!(expect_line(&lines, "[config]").contains("removed: keeping the last good config"));
    say("six", 6);

    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert_eq!(models_requested(dir.path()), vec!["m1", "m2", "m2", "m2", "m3", "m3"]);
}

/// A turn that pauses for approval in `agent chat` asks inline: `y` approves and the call runs
/// once; any other line denies it, and the model reads that line as the reason.
#[test]
fn chat_asks_inline_for_approval_and_a_denial_reason_reaches_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let call = |id: &str, amount: u32| {
        json!({"frames": [{"tool_call": {"index": 0, "id": id, "name": "refund",
            "arguments": format!("{{\"amount\":{amount}}}")}}], "finish": "tool_calls"})
    };
    let text = json!({"frames": [{"text": "ok"}], "finish": "stop"});
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [call("call_1", 10), text, call("call_2", 99), text], "repeat_last": true}),
    );
    let marker = dir.path().join("refunds.log");
    let tool = format!(
        "[[tools]]\nname = \"refund\"\ndescription = \"refund\"\ncommand = [\"sh\", \"-c\", \"cat >> {}\"]\napproval = \"required\"\n",
        marker.display()
    );
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, config_text(&server.base_url(), "m", &tool)).unwrap();
    let mut child = Command::new(faultline_bin())
        .args(["agent", "chat", "--config", config.to_str().unwrap()])
        .args(["--session-dir", dir.path().join("sessions").to_str().unwrap(), "--session", "c1"])
        .env("USER", "alice")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = stdout_lines(&mut child);
    let mut stdin = child.stdin.take().unwrap();
    let mut say = |text: &str| {
        writeln!(stdin, "{text}").unwrap();
        stdin.flush().unwrap();
    };
    say("refund order 7");
    expect_line(&lines, "[approval] refund (call_1) wants to run with {\"amount\":10}");
    say("y");
    expect_line(&lines, "[turn 1: completed]");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "{\"amount\":10}", "approved: ran once");
    say("refund order 8");
    expect_line(&lines, "[approval] refund (call_2) wants to run with {\"amount\":99}");
    say("too much for one order");
    expect_line(&lines, "[turn 2: completed]");
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "{\"amount\":10}", "denied: never ran");
    let last = logged_requests(dir.path()).last().cloned().unwrap();
    let body: serde_json::Value = serde_json::from_str(last["body"].as_str().unwrap()).unwrap();
    let result = body["messages"].as_array().unwrap().last().unwrap().clone();
    let text = result["content"].as_str().unwrap();
    assert!(text.contains("alice denied this call: too much for one order"), "{text}");
}
