//! Traces in the user's own collector (FAILURE-OTEL): `faultline agent run` with an OTLP
//! endpoint exports its turn, steps, model attempts, retry waits and tool calls to a real
//! receiver that decodes them with the official protobuf definitions
//! (`tests/python/otlp_receiver.py`, on `opentelemetry-proto`); a tool gets the trace context
//! of its own span; no prompt text and no key reaches any attribute; and a crash and resume
//! emits no span again for the work it only replays.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes and files

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use faultline_e2e::{agent_run_args, faultline_bin, logged_requests, repo_root, stderr, ModelServerProcess};
use serde_json::{json, Value};

const KEY_VAR: &str = "FAULTLINE_TEST_OTEL_KEY";
const KEY: &str = "sk-otel-canary-0123456789abcdef";
const PROMPT: &str = "PROMPT-CANARY please send the weekly digest";
/// What makes a missing `opentelemetry-proto` a failure instead of a skip (`.ci/run` sets it).
const REQUIRE_VAR: &str = "FAULTLINE_REQUIRE_OTEL_PROTO";

/// The receiver: a Python process decoding OTLP with the official definitions.
struct Receiver {
    child: Child,
    port: u16,
    out: PathBuf,
}

impl Receiver {
    /// Starts one, or says why it cannot (no Python with `opentelemetry-proto`).
    fn start(dir: &Path) -> Option<Self> {
        let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| "python3".to_owned());
        let has_proto = Command::new(&python)
            .args(["-c", "import opentelemetry.proto.collector.trace.v1.trace_service_pb2"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !has_proto {
            faultline_e2e::skip_or_fail(
                REQUIRE_VAR,
                &format!("{python} has no `opentelemetry-proto` package (pip install opentelemetry-proto)"),
            );
            return None;
        }
        let out = dir.join("spans.jsonl");
        let mut child = Command::new(python)
            .arg(repo_root().join("tests/python/otlp_receiver.py"))
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the receiver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read the port");
        let port = line.trim().strip_prefix("listening ").and_then(|p| p.parse().ok()).expect("a port");
        Some(Self { child, port, out })
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far (a line the receiver could not decode fails the test).
    fn spans(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let spans: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
        assert!(spans.iter().all(|s| s.get("error").is_none()), "undecodable export: {spans:?}");
        spans
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(dir: &Path, base_url: &str) -> PathBuf {
    let log = dir.join("tool.log");
    let text = format!(
        r#"
[provider]
preset = "openai-compatible"
base_url = "{base_url}"
model = "test-model"
api_key_env = "{KEY_VAR}"
idle_timeout_ms = 60000

[provider.retry_policy]
max_retries = 2
retryable_codes = ["RATE_LIMIT", "SERVER"]

[provider.retry_policy.backoff]
initial_delay_ms = 10
max_delay_ms = 200
jitter_ratio = 0

[[tools]]
name = "send_digest"
description = "Sends the digest."
parameters = {{ type = "object", properties = {{ to = {{ type = "string" }} }} }}
command = ["sh", "-c", "echo \"traceparent=$TRACEPARENT\" >> {log}; echo sent"]
timeout_ms = 5000
side_effects = true
"#,
        log = log.display()
    );
    let path = dir.join("agent.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `faultline agent run` exporting to `receiver`, with the key in its environment.
fn agent(receiver: &Receiver, args: &[&str]) -> Command {
    let mut command = Command::new(faultline_bin());
    command
        .args(args)
        .env(KEY_VAR, KEY)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_BSP_SCHEDULE_DELAY", "50");
    command
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn run_turn(dir: &Path, receiver: &Receiver, base_url: &str, session: &str, resume: bool) -> Output {
    let (config, sessions) = (config(dir, base_url), dir.join("sessions"));
    let mut extra = vec!["--session", session, "--prompt", PROMPT, "--json"];
    if resume {
        extra.push("--resume");
    }
    agent(receiver, &agent_run_args(&config, &sessions, &extra)).output().expect("run the agent")
}

#[test]
fn agent_run_exports_its_turn_attempts_retries_and_tool_calls_without_text_or_key() {
    let dir = tempfile::tempdir().unwrap();
    let Some(receiver) = Receiver::start(dir.path()) else { return };
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"status": 429, "headers": {"retry-after-ms": "20"}, "body": "{\"error\":{\"message\":\"slow down\"}}"},
            {"frames": [{"tool_call": {"index": 0, "id": "call_1", "name": "send_digest", "arguments": "{\"to\":\"team\"}"}}],
             "finish": "tool_calls", "usage": [11, 7, 18]},
            {"frames": [{"text": "ANSWER-CANARY sent."}], "finish": "stop", "usage": [20, 3, 23]}
        ]}),
    );
    let output = run_turn(dir.path(), &receiver, &server.base_url(), "s1", false);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let spans = receiver.spans();
    let names: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();

    // One trace: the turn, its steps under it, attempts, the retry wait and the tool call under a step.
    let [turn] = named(&spans, "invoke_agent faultline")[..] else { panic!("one turn span: {names:?}") };
    assert_eq!(turn["attributes"]["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(turn["attributes"]["faultline.turn.end"], "completed");
    assert_eq!(turn["attributes"]["gen_ai.usage.input_tokens"], 31, "{turn}");
    assert_eq!(turn["resource"]["service.name"], "faultline");
    let steps = named(&spans, "step");
    assert_eq!(steps.len(), 2, "{names:?}");
    assert!(steps.iter().all(|s| s["parent_span_id"] == turn["span_id"]));
    assert!(spans.iter().all(|s| s["trace_id"] == turn["trace_id"]), "one trace: {spans:?}");
    let chats = named(&spans, "chat test-model");
    assert_eq!(chats.len(), 3, "the 429, the tool call, the answer: {names:?}");
    let rate_limited = chats.iter().find(|s| s["attributes"]["error.type"] == "RATE_LIMIT").expect("the 429 attempt");
    assert_eq!(rate_limited["attributes"]["http.response.status_code"], 429);
    assert_eq!(rate_limited["status"], 2, "STATUS_CODE_ERROR");
    for chat in &chats {
        assert_eq!(chat["attributes"]["gen_ai.operation.name"], "chat");
        assert_eq!(chat["attributes"]["gen_ai.request.model"], "test-model");
        assert_eq!(chat["attributes"]["gen_ai.provider.name"], "openai");
        assert_eq!(chat["kind"], 3, "SPAN_KIND_CLIENT");
    }
    let finishes: Vec<&Value> = chats.iter().map(|s| &s["attributes"]["gen_ai.response.finish_reasons"]).collect();
    assert!(finishes.contains(&&json!(["tool_calls"])) && finishes.contains(&&json!(["stop"])), "{finishes:?}");
    let [wait] = named(&spans, "retry_wait")[..] else { panic!("one retry wait: {names:?}") };
    assert_eq!(wait["attributes"]["error.type"], "RATE_LIMIT");
    assert_eq!(wait["attributes"]["faultline.retry"], 1);
    let [tool] = named(&spans, "execute_tool send_digest")[..] else { panic!("one tool span: {names:?}") };
    assert_eq!(tool["attributes"]["gen_ai.tool.name"], "send_digest");
    assert_eq!(tool["attributes"]["gen_ai.tool.call.id"], "call_1");
    assert!(steps.iter().any(|s| s["span_id"] == tool["parent_span_id"]), "the tool call is a step's child");

    // The tool's own work joins the trace: its TRACEPARENT names the tool call's span.
    let log = std::fs::read_to_string(dir.path().join("tool.log")).unwrap();
    let expected =
        format!("traceparent=00-{}-{}-01", tool["trace_id"].as_str().unwrap(), tool["span_id"].as_str().unwrap());
    assert_eq!(log.trim(), expected);

    // Never message text, never the key.
    let exported = std::fs::read_to_string(&receiver.out).unwrap();
    for secret in [KEY, "PROMPT-CANARY", "ANSWER-CANARY", "weekly digest"] {
        assert!(!exported.contains(secret), "{secret:?} reached the collector:\n{exported}");
    }
}

/// A turn killed mid-stream after its tool ran, then resumed: the spans the first process
/// exported and those of the resume never describe the same work twice.
#[test]
fn a_crash_and_resume_emits_no_span_again_for_replayed_work() {
    let dir = tempfile::tempdir().unwrap();
    let Some(receiver) = Receiver::start(dir.path()) else { return };
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": [{"tool_call": {"index": 0, "id": "call_1", "name": "send_digest", "arguments": "{\"to\":\"team\"}"}}],
             "finish": "tool_calls"},
            {"frames": [{"text": "thinking"}, {"text": "never"}], "stall_after_frames": 1},
            {"frames": [{"text": "done"}], "finish": "stop"}
        ]}),
    );
    let (config, sessions) = (config(dir.path(), &server.base_url()), dir.path().join("sessions"));
    let args = agent_run_args(&config, &sessions, &["--session", "s1", "--prompt", PROMPT, "--json"]);
    let mut child = agent(&receiver, &args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    // Wait (bounded) until the second request is stalled and the tool's span was exported.
    let deadline = Instant::now() + Duration::from_secs(30);
    while logged_requests(dir.path()).len() < 2 || named(&receiver.spans(), "execute_tool send_digest").is_empty() {
        assert!(Instant::now() < deadline, "the turn never reached its second request: {:?}", receiver.spans());
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = receiver.spans().len();
    let output = run_turn(dir.path(), &receiver, &server.base_url(), "s1", true);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let spans = receiver.spans();
    let resumed = &spans[before..];
    let names: Vec<&str> = resumed.iter().filter_map(|s| s["name"].as_str()).collect();
    let [recovery] = named(resumed, "recovery")[..] else { panic!("one recovery span: {names:?}") };
    assert!(recovery["attributes"]["faultline.repair.closers"].as_i64().unwrap_or(0) >= 1, "{recovery}");
    assert!(recovery["attributes"]["faultline.records"].as_i64().unwrap_or(0) > 0, "{recovery}");
    // The tool ran once, and only the first process says so.
    assert_eq!(named(&spans, "execute_tool send_digest").len(), 1, "{spans:?}");
    assert!(resumed.iter().all(|s| s["attributes"]["gen_ai.tool.call.id"].is_null()), "{names:?}");
    // The resume's one turn is the new one, with one step and one attempt.
    assert_eq!(named(resumed, "invoke_agent faultline").len(), 1, "{names:?}");
    assert_eq!(named(resumed, "chat test-model").len(), 1, "{names:?}");
    assert_eq!(named(resumed, "step").len(), 1, "{names:?}");
}
