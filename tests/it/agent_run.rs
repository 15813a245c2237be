//! `faultline agent run` against `faultline model-server`, with a real command tool.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes and files

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use faultline_e2e::{agent_run_args, faultline, faultline_bin, logged_requests, stderr, stdout, ModelServerProcess};
use serde_json::{json, Value};

fn config(dir: &Path, base_url: &str, extra: &str) -> std::path::PathBuf {
    let log = dir.join("sent.log");
    let text = format!(
        r#"
[provider]
preset = "openai-compatible"
base_url = "{base_url}"
model = "test-model"
idle_timeout_ms = 60000

[provider.retry_policy]
mode = "normal"
max_retries = 2
retryable_codes = ["RATE_LIMIT", "SERVER", "TRANSPORT", "TIMEOUT", "EMPTY_RESPONSE"]

[provider.retry_policy.backoff]
initial_delay_ms = 50
max_delay_ms = 1000
jitter_ratio = 0.1

[[tools]]
name = "send_message"
description = "Send a message to the team channel"
parameters = {{ type = "object", properties = {{ text = {{ type = "string" }} }}, required = ["text"] }}
command = ["sh", "-c", "cat >> {log}; echo \" $FAULTLINE_SESSION_ID $FAULTLINE_CALL_ID\" >> {log}; echo delivered"]
timeout_ms = 5000
side_effects = true
{extra}"#,
        log = log.display()
    );
    let path = dir.join("agent.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn agent_run(config: &Path, sessions: &Path, store: &str, extra: &[&str]) -> (i32, Value, String) {
    let output = faultline(&agent_run_args(config, sessions, &[&["--store", store, "--json"], extra].concat()));
    let summary = serde_json::from_str(stdout(&output).trim()).unwrap_or(Value::Null);
    (output.status.code().unwrap(), summary, stderr(&output))
}

/// A two-step tool turn on recorded provider streams (DeepSeek's tool call with usage in its
/// finish chunk, then OpenAI's answer with a `choices: []` usage chunk): the turn's usage is
/// the sum of the figures the recordings carry, read from the fixtures, not from our server.
#[test]
fn agent_run_sums_the_usage_of_recorded_deepseek_and_openai_streams() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [{"recorded": "deepseek-chat-tool-calls"}, {"recorded": "openai-include-usage"}]}),
    );
    let weather = r#"
[[tools]]
name = "get_weather"
description = "Weather for a place"
parameters = { type = "object", properties = { location = { type = "string" } } }
command = ["sh", "-c", "cat > /dev/null; echo sunny"]
"#;
    let config = config(dir.path(), &server.base_url(), weather);
    let (code, summary, err) =
        agent_run(&config, &dir.path().join("sessions"), "jsonl", &["--session", "w", "--prompt", "weather in Tokyo?"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(summary["tool_calls"], json!([{"name": "get_weather", "code": null}]));
    assert_eq!(summary["assistant_text"], "The capital of the UK is London.");
    // 161/25/186 with 128 cached and 33 not (DeepSeek), plus 78/9/87 with 0 cached and 0
    // reasoning (OpenAI's details).
    let summed = json!({"prompt_tokens": 239, "completion_tokens": 34, "total_tokens": 273,
                        "reasoning_tokens": 0, "cache_hit_tokens": 128, "cache_miss_tokens": 33});
    assert_eq!(summary["usage"]["turn"], summed);
    assert_eq!(summary["usage"]["session"], summed);
}

#[test]
fn a_full_tool_calling_turn_then_a_resumed_turn_on_every_store() {
    for store in ["jsonl", "zstd", "sqlite"] {
        let dir = tempfile::tempdir().unwrap();
        let server = ModelServerProcess::start(
            dir.path(),
            &json!({"responses": [
                {"frames": [{"tool_call": {"index": 0, "id": "call_1", "name": "send_message", "arguments": "{\"text\":\"hi team\"}"}}], "finish": "tool_calls", "usage": [10, 5, 15]},
                {"frames": [{"text": "Sent it."}], "finish": "stop", "usage": [20, 7, 27]},
                {"frames": [{"text": "Second answer."}, {"raw": json!({"choices": [], "usage": {
                    "prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45,
                    "prompt_cache_hit_tokens": 32, "prompt_cache_miss_tokens": 8,
                    "completion_tokens_details": {"reasoning_tokens": 2}}}).to_string()}], "finish": "stop"}
            ]}),
        );
        let config = config(dir.path(), &server.base_url(), "");
        let sessions = dir.path().join("sessions");

        let (code, summary, err) =
            agent_run(&config, &sessions, store, &["--session", "s1", "--prompt", "tell the team hi"]);
        assert_eq!(code, 0, "{store}: {err}");
        assert_eq!(summary["session"], "s1");
        assert_eq!(summary["turn"], 1);
        assert_eq!(summary["end_reason"], json!({"kind": "completed"}));
        assert_eq!(summary["assistant_text"], "Sent it.");
        assert_eq!(summary["tool_calls"], json!([{"name": "send_message", "code": null}]));
        let two_steps = json!({"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42});
        assert_eq!(summary["usage"]["turn"], two_steps, "{store}: both steps' usage, summed");
        assert_eq!(summary["usage"]["session"], two_steps);
        let sent = std::fs::read_to_string(dir.path().join("sent.log")).unwrap();
        assert_eq!(
            sent, "{\"text\":\"hi team\"} s1 call_1\n",
            "{store}: the tool ran once with its arguments and environment"
        );

        let (code, summary, err) =
            agent_run(&config, &sessions, store, &["--session", "s1", "--resume", "--prompt", "anything else?"]);
        assert_eq!(code, 0, "{store}: {err}");
        assert_eq!(summary["turn"], 2);
        assert_eq!(summary["assistant_text"], "Second answer.");
        assert_eq!(
            summary["usage"]["turn"],
            json!({"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45,
                   "reasoning_tokens": 2, "cache_hit_tokens": 32, "cache_miss_tokens": 8}),
            "{store}: DeepSeek's cache and reasoning counts"
        );
        assert_eq!(summary["usage"]["session"]["total_tokens"], 87, "{store}: the resumed session's total");
        let requests = logged_requests(dir.path());
        assert_eq!(requests.len(), 3);
        let third: Value = serde_json::from_str(requests[2]["body"].as_str().unwrap()).unwrap();
        let roles: Vec<&str> =
            third["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(
            roles,
            vec!["user", "assistant", "tool", "assistant", "user"],
            "{store}: the resumed request carries the history"
        );
        assert_eq!(std::fs::read_to_string(dir.path().join("sent.log")).unwrap(), sent, "{store}: nothing re-ran");
    }
}

#[test]
fn exit_statuses_for_error_bad_config_and_bad_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [{"status": 401, "body": "{\"error\":{\"message\":\"bad key\"}}"}]}),
    );
    let config = config(dir.path(), &server.base_url(), "");
    let sessions = dir.path().join("sessions");
    let (code, summary, _) = agent_run(&config, &sessions, "jsonl", &["--prompt", "hi"]);
    assert_eq!(code, 2);
    assert_eq!(summary["end_reason"]["kind"], "error");
    assert_eq!(summary["end_reason"]["error"]["code"], "AUTH");

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(&config).unwrap().replace("model = \"test-model\"", "model = \"m\"\nmodle = \"typo\""),
    )
    .unwrap();
    let (code, _, err) = agent_run(&bad, &sessions, "jsonl", &["--prompt", "hi"]);
    assert_eq!(code, 1);
    assert!(err.contains("provider.modle: unknown key"), "{err}");

    let (code, _, err) = agent_run(&config, &sessions, "jsonl", &["--resume", "--prompt", "hi"]);
    assert_eq!(code, 1, "--resume needs --session: {err}");
    let (code, _, err) =
        agent_run(&config, &sessions, "jsonl", &["--session", "missing", "--resume", "--prompt", "hi"]);
    assert_eq!(code, 1);
    assert!(err.contains("not found"), "{err}");

    // A session that exists is continued with --resume, and the error says so.
    let (code, _, _) = agent_run(&config, &sessions, "jsonl", &["--session", "taken", "--prompt", "hi"]);
    assert_eq!(code, 2, "the 401 again");
    let (code, _, err) = agent_run(&config, &sessions, "jsonl", &["--session", "taken", "--prompt", "hi"]);
    assert_eq!(code, 1);
    assert!(err.contains("session taken already exists") && err.contains("--session taken --resume"), "{err}");
}

/// A key the config names but the environment lacks is a config problem: exit 1 before any
/// session, file or request exists (the server's request log and the directory are the
/// evidence), not a failed turn in a session made for nothing.
#[test]
fn a_missing_key_is_refused_before_anything_is_created() {
    const VAR: &str = "FAULTLINE_E2E_KEY_NOBODY_SETS";
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(dir.path(), &json!({"responses": [{"frames": [{"text": "hi"}]}]}));
    let config = config(dir.path(), &server.base_url(), "");
    let keyed = dir.path().join("keyed.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &keyed,
        text.replace("model = \"test-model\"", &format!("model = \"test-model\"\napi_key_env = \"{VAR}\"")),
    )
    .unwrap();
    let sessions = dir.path().join("sessions");
    let output = Command::new(faultline_bin())
        .args(agent_run_args(&keyed, &sessions, &["--prompt", "hi"]))
        .env_remove(VAR)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(err.contains("MISSING_CREDENTIAL") && err.contains(&format!("export {VAR}")), "{err}");
    assert!(!sessions.exists(), "no session directory was made");
    assert!(logged_requests(dir.path()).is_empty(), "no request was sent");
}

/// Starts a turn that stalls, waits until its request reached the server, sends `signal`.
fn signal_mid_turn(signal: &str, session: &str) -> (Option<i32>, Value, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [{"frames": [{"text": "thinking"}, {"text": "never"}], "stall_after_frames": 1}]}),
    );
    let config = config(dir.path(), &server.base_url(), "");
    let sessions = dir.path().join("sessions");
    let child = Command::new(faultline_bin())
        .args(["agent", "run", "--config", config.to_str().unwrap(), "--session-dir", sessions.to_str().unwrap()])
        .args(["--session", session, "--prompt", "take your time", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait (bounded) until the model server has the request: the turn is in flight.
    let deadline = Instant::now() + Duration::from_secs(20);
    while logged_requests(dir.path()).is_empty() {
        assert!(Instant::now() < deadline, "the request never reached the server");
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    let summary: Value = serde_json::from_str(String::from_utf8_lossy(&output.stdout).trim()).unwrap_or(Value::Null);
    drop(server);
    (output.status.code(), summary, sessions.join(session), dir)
}

#[test]
fn ctrl_c_cancels_the_turn_gracefully_and_exits_130() {
    let (code, summary, session_dir, _dir) = signal_mid_turn("-INT", "c1");
    assert_eq!(code, Some(130));
    assert_eq!(summary["end_reason"], json!({"kind": "aborted", "cause": "user"}));
    let inspect = faultline(&["transcript", "inspect", session_dir.to_str().unwrap(), "--json"]);
    assert_eq!(inspect.status.code(), Some(0), "drained and flushed: nothing to repair: {}", stdout(&inspect));
}

#[test]
fn sigterm_aborts_the_turn_gracefully_and_exits_3() {
    let (code, summary, session_dir, _dir) = signal_mid_turn("-TERM", "t1");
    assert_eq!(code, Some(3));
    assert_eq!(summary["end_reason"]["kind"], "aborted");
    let inspect = faultline(&["transcript", "inspect", session_dir.to_str().unwrap(), "--json"]);
    assert_eq!(inspect.status.code(), Some(0), "{}", stdout(&inspect));
}
