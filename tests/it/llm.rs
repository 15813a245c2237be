//! `faultline llm stream` against `faultline model-server`, both real processes on 127.0.0.1.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes and files

use faultline_e2e::{faultline, logged_requests, stderr, stdout, ModelServerProcess};
use serde_json::{json, Value};

fn stream(server: &ModelServerProcess, extra: &[&str]) -> (i32, Vec<Value>) {
    let base = server.base_url();
    let output =
        faultline(&[&["llm", "stream", "--base-url", &base, "--model", "m", "--prompt", "hi"], extra].concat());
    let chunks = stdout(&output).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (output.status.code().unwrap(), chunks)
}

#[test]
fn llm_stream_reproduces_a_normal_turn_a_tool_call_turn_and_a_rate_limit() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": [{"text": "Hel"}, {"text": "lo"}], "finish": "stop"},
            {"frames": [
                {"tool_call": {"index": 0, "id": "call_1", "name": "send", "arguments": "{\"te"}},
                {"tool_call": {"index": 0, "arguments": "xt\":\"hi\"}"}}
            ], "finish": "tool_calls"},
            {"status": 429, "headers": {"retry-after": "2", "x-request-id": "req-1"}, "body": "{\"error\":{\"message\":\"slow down\"}}"}
        ]}),
    );

    let (code, chunks) = stream(&server, &[]);
    assert_eq!(code, 0);
    assert_eq!(chunks[0], json!({"type": "block-start", "index": 0, "kind": "text"}));
    assert_eq!(chunks[1], json!({"type": "text-delta", "index": 0, "text": "Hel"}));
    assert_eq!(chunks.last().unwrap(), &json!({"type": "finish", "reason": {"kind": "stop"}}));

    let tools = dir.path().join("tools.json");
    std::fs::write(&tools, r#"[{"name":"send","description":"send a message","parameters":{"type":"object"}}]"#)
        .unwrap();
    let (code, chunks) = stream(&server, &["--tools", tools.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(chunks.contains(
        &json!({"type": "tool-call-delta", "index": 0, "id": "call_1", "name": "send", "arguments_delta": "{\"te"})
    ));
    assert!(chunks.contains(&json!({"type": "tool-call-delta", "index": 0, "arguments_delta": "xt\":\"hi\"}"})));
    assert_eq!(chunks.last().unwrap(), &json!({"type": "finish", "reason": {"kind": "tool-calls"}}));

    let (code, chunks) = stream(&server, &[]);
    assert_eq!(code, 2);
    assert_eq!(
        chunks,
        vec![json!({"type": "finish", "reason": {"kind": "error", "failure": {
            "message": "HTTP 429: slow down", "code": "RATE_LIMIT", "status": 429,
            "provider_retry_after_ms": 2000, "request_id": "req-1"
        }}})]
    );

    let requests = logged_requests(dir.path());
    assert_eq!(requests.len(), 3);
    let second: Value = serde_json::from_str(requests[1]["body"].as_str().unwrap()).unwrap();
    assert_eq!(second["tools"][0]["function"]["name"], "send");
    assert_eq!(second["messages"][0], json!({"role": "user", "content": "hi"}));
}

#[test]
fn llm_stream_exits_2_for_a_transport_failure_and_1_for_bad_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [{"frames": [{"text": "x"}], "disconnect_after_frames": 0}]}),
    );
    let (code, chunks) = stream(&server, &[]);
    assert_eq!(code, 2);
    assert_eq!(chunks.last().unwrap()["reason"]["failure"]["code"], "TRANSPORT");

    let output = faultline(&["llm", "stream", "--base-url", "ftp://x", "--model", "m", "--prompt", "hi"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("--base-url"));
    let output = faultline(&["llm", "stream", "--base-url", "http://127.0.0.1:1"]);
    assert_eq!(output.status.code(), Some(1), "missing --model/--prompt");
}

#[test]
fn llm_stream_reports_a_missing_credential_without_sending() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        ModelServerProcess::start(dir.path(), &json!({"responses": [{"frames": [{"text": "x"}], "finish": "stop"}]}));
    let (code, chunks) = stream(&server, &["--api-key-env", "FAULTLINE_TEST_UNSET_KEY"]);
    assert_eq!(code, 2);
    assert_eq!(chunks[0]["reason"]["failure"]["code"], "MISSING_CREDENTIAL");
    assert!(
        !dir.path().join("requests.jsonl").exists()
            || std::fs::read_to_string(dir.path().join("requests.jsonl")).unwrap().is_empty()
    );
}

/// One raw HTTP/1.1 request to the model server; returns the status line and the body.
fn raw_request(server: &ModelServerProcess, method: &str, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let authority = server.base_url().trim_start_matches("http://").trim_end_matches("/v1").to_owned();
    let mut socket = std::net::TcpStream::connect(&authority).unwrap();
    let request =
        format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}");
    socket.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).unwrap();
    let status = response.lines().next().unwrap_or_default().to_owned();
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// As real providers do: `GET /v1/models` lists the model, an unknown path is a 404 — and
/// neither uses up a scripted response or shows in the request log.
#[test]
fn the_model_server_lists_models_and_404s_unknown_paths_without_using_a_script_slot() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [{"frames": [{"text": "first"}], "finish": "stop"}]}),
    );
    let (status, body) = raw_request(&server, "GET", "/v1/models");
    assert!(status.contains(" 200 "), "{status}");
    let models: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["object"], "model");
    let (status, _) = raw_request(&server, "POST", "/v1/completions");
    assert!(status.contains(" 404 "), "{status}");
    let (code, chunks) = stream(&server, &[]);
    assert_eq!(code, 0);
    assert!(chunks.iter().any(|c| c["text"] == "first"), "the first scripted response is still first: {chunks:?}");
    assert_eq!(logged_requests(dir.path()).len(), 1, "only the chat request is logged");
}
