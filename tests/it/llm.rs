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

/// FAILURE-WIRE-FORMATS: one script, one `model-server`, and `llm stream --format` reads each
/// format at its own path with its own credential header: Anthropic's signed thinking and a
/// mid-stream `error` event after the 200 (a failure, exit 2, never a normal end), Gemini's
/// whole function call with a made-up id.
#[test]
fn llm_stream_reads_anthropic_and_gemini_from_one_model_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": [{"reasoning": "think"}, {"text": "Hel"}, {"text": "lo"}], "finish": "stop"},
            {"frames": [{"text": "par"}, {"error_event": {"status": 529, "message": "Overloaded"}}], "done": false},
            {"frames": [{"tool_call": {"index": 0, "name": "send", "arguments": "{\"to\":\"ops\"}"}}], "finish": "tool_calls"}
        ]}),
    );
    let root = server.base_url().trim_end_matches("/v1").to_owned();
    let run = |format: &str| {
        let output = std::process::Command::new(faultline_e2e::faultline_bin())
            .args(["llm", "stream", "--format", format, "--base-url", &root, "--model", "m", "--prompt", "hi"])
            .args(["--api-key-env", "FAULTLINE_WIRE_TEST_KEY"])
            .env("FAULTLINE_WIRE_TEST_KEY", "wire-test-key-not-real")
            .output()
            .unwrap();
        let chunks: Vec<Value> = stdout(&output).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        (output.status.code().unwrap(), chunks)
    };

    let (code, chunks) = run("anthropic");
    assert_eq!(code, 0, "{chunks:?}");
    assert!(chunks.contains(&json!({"type": "reasoning-delta", "index": 0, "text": "think"})), "{chunks:?}");
    assert!(chunks.iter().any(|c| c["type"] == "signature-delta"), "the thinking block is signed: {chunks:?}");
    assert_eq!(chunks.last().unwrap(), &json!({"type": "finish", "reason": {"kind": "stop"}}));

    let (code, chunks) = run("anthropic");
    assert_eq!(code, 2, "an error event after the 200 is a failure: {chunks:?}");
    let failure = &chunks.last().unwrap()["reason"]["failure"];
    assert_eq!(
        (failure["code"].as_str(), chunks.last().unwrap()["reason"]["kind"].as_str()),
        (Some("SERVER"), Some("error"))
    );
    assert!(failure["message"].as_str().unwrap().contains("Overloaded"), "{failure}");

    let (code, chunks) = run("gemini");
    assert_eq!(code, 0, "{chunks:?}");
    let call = chunks.iter().find(|c| c["type"] == "tool-call-delta").unwrap();
    assert_eq!((call["name"].as_str(), call["arguments_delta"].as_str()), (Some("send"), Some("{\"to\":\"ops\"}")));
    assert!(call["id"].as_str().unwrap().starts_with("gemini_call_"), "{call}");
    assert_eq!(chunks.last().unwrap(), &json!({"type": "finish", "reason": {"kind": "tool-calls"}}));

    // Each request went to its format's path with its format's header, and no key was logged.
    let requests = logged_requests(dir.path());
    let paths: Vec<&str> = requests.iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["/v1/messages", "/v1/messages", "/v1beta/models/m:streamGenerateContent"], "{requests:?}");
    assert!(requests.iter().all(|r| r["had_authorization"] == true), "{requests:?}");
    assert!(!std::fs::read_to_string(dir.path().join("requests.jsonl")).unwrap().contains("wire-test-key"));
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

/// The help says what the code does: without `--api-key-env`, the anthropic and gemini formats
/// read their preset's variable (and fail MISSING_CREDENTIAL without it), openai sends no key.
#[test]
fn llm_stream_help_names_each_formats_default_key_and_anthropic_needs_it() {
    let help = faultline(&["llm", "stream", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout).to_string();
    assert!(text.contains("ANTHROPIC_API_KEY") && text.contains("GEMINI_API_KEY"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let server =
        ModelServerProcess::start(dir.path(), &json!({"responses": [{"frames": [{"text": "x"}], "finish": "stop"}]}));
    let output = std::process::Command::new(faultline_e2e::faultline_bin())
        .args(["llm", "stream", "--format", "anthropic", "--base-url", &server.base_url(), "--model", "m"])
        .args(["--prompt", "hi"])
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let chunks: Vec<Value> =
        String::from_utf8_lossy(&output.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert_eq!(chunks.last().unwrap()["reason"]["failure"]["code"], "MISSING_CREDENTIAL", "{chunks:?}");
}

/// One raw HTTP/1.1 request to the model server; returns the status line and the body.
fn raw_request(server: &ModelServerProcess, method: &str, path: &str) -> (String, String) {
    raw_request_with(server, method, path, "{}")
}

/// [`raw_request`] with a body; returns the status line and everything after it.
fn raw_request_with(server: &ModelServerProcess, method: &str, path: &str, body: &str) -> (String, String) {
    use std::io::{Read, Write};
    let authority = server.base_url().trim_start_matches("http://").trim_end_matches("/v1").to_owned();
    let mut socket = std::net::TcpStream::connect(&authority).unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).unwrap();
    let status = response.lines().next().unwrap_or_default().to_owned();
    if method == "POST" && path.ends_with("/chat/completions") {
        return (status, response);
    }
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

/// `llm stream` to an `https://` base URL with a private CA: a TLS terminator on 127.0.0.1
/// (certificate generated now) in front of `faultline model-server`.
#[test]
fn llm_stream_reaches_a_loopback_tls_server_trusting_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [{"frames": [{"text": "secure hello"}], "finish": "stop"}], "repeat_last": true}),
    );
    let pki = faultline_runtime::testing::TestPki::new(&["127.0.0.1"]);
    let ca_file = dir.path().join("test-ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();

    let upstream = server.base_url().trim_start_matches("http://").trim_end_matches("/v1").to_owned();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let port = runtime.block_on(async {
        let acceptor = pki.acceptor();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(&upstream).await else { return };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        port
    });
    let base = format!("https://127.0.0.1:{port}/v1");
    let args = ["llm", "stream", "--base-url", &base, "--model", "m", "--prompt", "hi"];
    let trusted = faultline(&[&args[..], &["--ca-file", ca_file.to_str().unwrap()]].concat());
    assert_eq!(trusted.status.code(), Some(0), "{}", stderr(&trusted));
    assert!(stdout(&trusted).contains("secure hello"), "{}", stdout(&trusted));
    let untrusted = faultline(&args);
    assert_eq!(untrusted.status.code(), Some(2), "{}", stderr(&untrusted));
    assert!(stdout(&untrusted).contains("TLS_CERTIFICATE"), "{}", stdout(&untrusted));
    // The platform's store: the CA installed there (SSL_CERT_FILE, as OpenSSL reads it) is
    // trusted without --ca-file.
    let platform = std::process::Command::new(faultline_e2e::faultline_bin())
        .args(args)
        .env("SSL_CERT_FILE", &ca_file)
        .output()
        .unwrap();
    assert_eq!(platform.status.code(), Some(0), "{}{}", stderr(&platform), stdout(&platform));
    assert!(stdout(&platform).contains("secure hello"), "{}", stdout(&platform));
    drop(runtime);
}

/// The stream's wire shape, field by field, as OpenAI and DeepSeek send it: the first chunk
/// carries `delta.role`, every chunk `id`, `object`, `created` (the server's clock, not 0),
/// `model` (echoing the request) and `system_fingerprint`; the content type names the charset.
#[test]
fn the_model_server_streams_what_the_real_apis_stream() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"repeat_last": true, "responses": [
            {"frames": [{"text": "a"}, {"text": "b"}], "finish": "stop", "usage": [3, 2, 5]},
            {"frames": [{"text": "a"}, {"text": "b"}], "finish": "stop", "usage": [3, 2, 5]},
            {"frames": [{"text": "a"}, {"text": "b"}], "finish": "stop", "usage": [3, 2, 5], "usage_in_finish": true},
            {"frames": [{"text": "a"}, {"text": "b"}], "finish": "stop", "usage": [3, 2, 5], "usage_in_finish": true},
        ]}),
    );
    let chunks_of = |include_usage: bool| -> Vec<Value> {
        let mut body =
            json!({"model": "deepseek-chat", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
        if include_usage {
            body["stream_options"] = json!({"include_usage": true});
        }
        let (status, response) = raw_request_with(&server, "POST", "/v1/chat/completions", &body.to_string());
        assert!(status.contains(" 200 "), "{status}");
        response
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    };
    let total = |chunk: &Value| chunk["usage"]["total_tokens"].as_u64();
    // OpenAI: no usage unless asked; asked, `"usage": null` on every chunk, then a chunk with
    // no choices and the usage.
    let unasked = chunks_of(false);
    assert!(unasked.iter().all(|c| c.get("usage").is_none()), "{unasked:?}");
    let asked = chunks_of(true);
    assert_eq!(asked.len(), 4, "{asked:?}");
    assert!(asked[..3].iter().all(|c| c["usage"].is_null() && c.get("usage").is_some()), "{asked:?}");
    assert_eq!((asked[3]["choices"].as_array().map(Vec::len), total(&asked[3])), (Some(0), Some(5)));
    // DeepSeek: the usage rides the finish chunk, asked for or not.
    for include_usage in [false, true] {
        let chunks = chunks_of(include_usage);
        assert_eq!(chunks.len(), 3, "{chunks:?}");
        assert_eq!((chunks[2]["choices"][0]["finish_reason"].as_str(), total(&chunks[2])), (Some("stop"), Some(5)));
        assert!(chunks[..2].iter().all(|c| c.get("usage").is_some() == include_usage && total(c).is_none()));
    }
    let body = json!({"model": "deepseek-chat", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let (status, response) = raw_request_with(&server, "POST", "/v1/chat/completions", &body.to_string());
    assert!(status.contains(" 200 "), "{status}");
    assert!(response.to_ascii_lowercase().contains("content-type: text/event-stream; charset=utf-8"), "{response}");
    let chunks: Vec<Value> = response
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks.len(), 3, "two deltas and the finish: {chunks:?}");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks[1]["choices"][0]["delta"].get("role").is_none(), "only the first chunk names the role");
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "deepseek-chat");
        assert_eq!(chunk["id"], chunks[0]["id"]);
        assert!(chunk["created"].as_u64().unwrap() > 1_700_000_000, "created from the clock: {chunk}");
        assert!(chunk["system_fingerprint"].is_string());
    }
    assert!(response.contains("data: [DONE]"));
}

/// `stream: false` gets one `chat.completion` object, as from the real APIs; the adapter,
/// which reads streams only, refuses such a reply with a clear error instead of parsing it
/// as an empty stream.
#[test]
fn a_non_streaming_request_gets_a_completion_object_and_the_adapter_refuses_one() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": [{"text": "Hel"}, {"text": "lo"},
                        {"tool_call": {"index": 0, "id": "c1", "name": "send", "arguments": "{\"a\""}},
                        {"tool_call": {"index": 0, "arguments": ":1}"}}],
             "finish": "tool_calls", "usage": [3, 4, 7]},
            {"status": 200, "body": "{\"object\":\"chat.completion\",\"choices\":[]}"}
        ]}),
    );
    let body = json!({"model": "m", "stream": false, "messages": [{"role": "user", "content": "hi"}]});
    let (status, response) = raw_request_with(&server, "POST", "/v1/chat/completions", &body.to_string());
    assert!(status.contains(" 200 "), "{status}");
    let json_body = response.split_once("\r\n\r\n").unwrap().1;
    let completion: Value = serde_json::from_str(json_body).unwrap();
    assert_eq!(completion["object"], "chat.completion");
    let message = &completion["choices"][0]["message"];
    assert_eq!(message["content"], "Hello");
    assert_eq!(message["tool_calls"][0]["function"], json!({"name": "send", "arguments": "{\"a\":1}"}));
    assert_eq!(completion["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(completion["usage"]["total_tokens"], 7);

    let (code, chunks) = stream(&server, &[]);
    assert_eq!(code, 2, "{chunks:?}");
    let finish = chunks.last().unwrap();
    assert_eq!(finish["reason"]["failure"]["code"], "MALFORMED_RESPONSE", "{finish}");
    assert!(finish.to_string().contains("non-streaming"), "{finish}");
}

/// The official `openai` Python SDK as a foreign client: text and tool-call streams, a 429
/// with Retry-After, and a non-streaming completion, parsed by the SDK itself. The Python is
/// `FAULTLINE_PYTHON` (`.ci/run` makes a throw-away venv with `pip install openai`), else
/// `python3`; without the package the test says why and skips, except where
/// `FAULTLINE_REQUIRE_OPENAI_SDK` is set (CI), where it fails.
#[test]
fn the_official_openai_sdk_parses_what_the_model_server_sends() {
    let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let has_sdk =
        std::process::Command::new(&python).args(["-c", "import openai"]).output().is_ok_and(|o| o.status.success());
    if !has_sdk {
        return faultline_e2e::skip_or_fail(
            "FAULTLINE_REQUIRE_OPENAI_SDK",
            &format!("{python} has no `openai` package (pip install openai)"),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": [{"text": "Hel"}, {"text": "lo"}], "finish": "stop"},
            {"frames": [
                {"tool_call": {"index": 0, "id": "call_1", "name": "send", "arguments": "{\"te"}},
                {"tool_call": {"index": 0, "arguments": "xt\":\"hi\"}"}}
            ], "finish": "tool_calls"},
            {"status": 429, "headers": {"retry-after": "2"}, "body": "{\"error\":{\"message\":\"slow down\",\"type\":\"rate_limit\"}}"},
            {"frames": [{"text": "whole answer"}], "finish": "stop", "usage": [3, 2, 5]},
            {"frames": [{"refusal": "I can't"}, {"refusal": " help with that."}], "finish": "stop"},
            {"frames": [{"tool_call": {"index": 0, "id": "Kq3TzW8pA", "name": "send", "arguments": "{\"to\":\"ops\"}"}}],
             "finish": "tool_calls", "dialect": "mistral"},
            {"frames": [{"reasoning": "think "}, {"reasoning": "first"}, {"text": "done"}], "finish": "stop",
             "usage": [4, 3, 7], "dialect": "openrouter"}
        ]}),
    );
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/openai_conformance.py");
    let output = std::process::Command::new(&python).arg(&script).arg(server.base_url()).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let parsed: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(parsed["text"], "Hello");
    assert_eq!(parsed["text_finish"], "stop");
    assert_eq!(parsed["text_model"], "deepseek-chat");
    assert_eq!(parsed["tool_calls"], json!([{"id": "call_1", "name": "send", "arguments": "{\"text\":\"hi\"}"}]));
    assert_eq!(parsed["rate_limit"], json!({"status": 429, "retry_after": "2"}));
    assert_eq!(
        parsed["whole"],
        json!({"object": "chat.completion", "content": "whole answer", "finish": "stop", "total_tokens": 5})
    );
    assert_eq!(
        (parsed["refusal"].as_str(), parsed["refusal_finish"].as_str()),
        (Some("I can't help with that."), Some("stop"))
    );
    assert_eq!(
        parsed["mistral_calls"],
        json!([{"index": null, "id": "Kq3TzW8pA", "name": "send", "arguments": "{\"to\":\"ops\"}"}]),
        "the server speaks Mistral's shape: no index"
    );
    assert_eq!(parsed["openrouter"], json!({"reasoning": "think first", "total_tokens": 7}));
}

/// FAILURE-PROVIDER-SHAPES: every provider stream in the repository — the live recordings and
/// the shapes written here — read by faultline's adapter and by the official `openai` SDK from
/// the same bytes, must agree (`faultline llm conform`): text, reasoning, refusal, tool calls,
/// finish and usage. And the SDK's own reading of each shape is what the shape says.
#[test]
fn every_provider_stream_reads_as_the_official_sdk_reads_it() {
    let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let has_sdk =
        std::process::Command::new(&python).args(["-c", "import openai"]).output().is_ok_and(|o| o.status.success());
    if !has_sdk {
        return faultline_e2e::skip_or_fail(
            "FAULTLINE_REQUIRE_OPENAI_SDK",
            &format!("{python} has no `openai` package (pip install openai)"),
        );
    }
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sim/fixtures");
    let mut sdk = std::collections::BTreeMap::new();
    for dir in ["recorded", "shapes"] {
        let output =
            faultline(&["llm", "conform", fixtures.join(dir).to_str().unwrap(), "--python", &python, "--json"]);
        assert_eq!(output.status.code(), Some(0), "{dir}: {}{}", stdout(&output), stderr(&output));
        for line in stdout(&output).lines() {
            let verdict: Value = serde_json::from_str(line).unwrap();
            assert_eq!(verdict["differences"], json!([]), "{verdict}");
            let file = verdict["file"].as_str().unwrap().rsplit('/').next().unwrap().to_owned();
            sdk.insert(file, verdict["sdk"].clone());
        }
    }
    assert_eq!(sdk.len(), 10, "every stream was read: {:?}", sdk.keys());
    let calls = |file: &str| sdk[file]["tool_calls"].clone();
    assert_eq!(
        calls("mistral-tool-calls-without-index.sse"),
        json!([
            {"id": "Kq3TzW8pA", "name": "get_weather", "arguments": "{\"city\": \"Lyon\", \"unit\": \"celsius\"}"},
            {"id": "Rm7bXc2Ld", "name": "get_time", "arguments": "{\"zone\": \"Europe/Paris\"}"}
        ])
    );
    assert_eq!(sdk["openai-refusal.sse"]["refusal"], "I'm sorry, but I can't help with writing that.");
    assert_eq!(sdk["openai-refusal.sse"]["finish"], "stop");
    assert_eq!(
        sdk["openrouter-reasoning.sse"]["reasoning"],
        "The user wants the capital. It is a short factual answer."
    );
    assert_eq!(sdk["openrouter-reasoning.sse"]["usage"], json!([24, 31, 55]));
    assert_eq!(sdk["openrouter-error-in-stream.sse"]["error"]["code"], 400);
    assert_eq!(sdk["tool-call-without-finish-reason.sse"]["finish"], Value::Null);
    assert_eq!(
        sdk["credential-words-in-prose.sse"]["text"],
        "The basic idea: call f(key=value) with a bearer token, then use Basic auth and password=hunter2."
    );
}

/// FAILURE-WIRE-FORMATS: Anthropic's and Gemini's streams in the repository, read by
/// faultline's adapter and by the official `anthropic` and `google-genai` SDKs from the same
/// bytes, must agree — signed thinking, split `input_json_delta`, a mid-stream `error` event,
/// a refusal, whole `functionCall` parts, a safety stop — and each SDK's own reading is what
/// the recording says.
#[test]
fn claude_and_gemini_streams_read_as_their_official_sdks_read_them() {
    let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let has_sdks = std::process::Command::new(&python)
        .args(["-c", "import anthropic, google.genai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_sdks {
        return faultline_e2e::skip_or_fail(
            "FAULTLINE_REQUIRE_WIRE_SDKS",
            &format!("{python} lacks the `anthropic` or `google-genai` package (pip install anthropic google-genai)"),
        );
    }
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sim/fixtures");
    let mut sdk = std::collections::BTreeMap::new();
    for format in ["anthropic", "gemini"] {
        let dir = fixtures.join(format);
        let output =
            faultline(&["llm", "conform", dir.to_str().unwrap(), "--format", format, "--python", &python, "--json"]);
        assert_eq!(output.status.code(), Some(0), "{format}: {}{}", stdout(&output), stderr(&output));
        for line in stdout(&output).lines() {
            let verdict: Value = serde_json::from_str(line).unwrap();
            assert_eq!(verdict["differences"], json!([]), "{verdict}");
            let file = verdict["file"].as_str().unwrap().rsplit('/').next().unwrap().to_owned();
            sdk.insert(format!("{format}/{file}"), (verdict["sdk"].clone(), verdict["faultline"].clone()));
        }
    }
    assert_eq!(sdk.len(), 8, "every stream was read: {:?}", sdk.keys());
    let (claude, ours) = &sdk["anthropic/thinking-text-and-tool-use.sse"];
    assert_eq!(claude["reasoning"], "The user wants the weather in Paris. I should call get_weather.");
    assert_eq!(claude["tool_calls"][0]["arguments"], "{\"location\": \"Paris, France\"}");
    assert_eq!((&claude["finish"], &claude["usage"]), (&json!("tool_calls"), &json!([600, 89, 689])));
    assert_eq!(ours["finish"]["kind"], "tool-calls");
    let (overloaded, ours) = &sdk["anthropic/overloaded-error-mid-stream.sse"];
    assert_eq!(overloaded["error"]["message"], "Overloaded");
    assert_eq!(ours["finish"]["failure"]["code"], "SERVER", "an error event is a failure, never an end: {ours}");
    assert_eq!(sdk["anthropic/refusal.sse"].0["refusal"], "This request was refused due to policy.");
    let (gemini, ours) = &sdk["gemini/thought-text-and-function-call.sse"];
    assert_eq!(
        gemini["tool_calls"][0],
        json!({"id": null, "name": "get_weather", "arguments": "{\"unit\":\"celsius\",\"city\":\"Shanghai\"}"})
    );
    assert_eq!((&gemini["finish"], &gemini["usage"]), (&json!("tool_calls"), &json!([391, 145, 536])));
    // faultline keeps the arguments as the provider wrote them: keys in their order.
    assert_eq!(ours["tool_calls"][0]["arguments"], "{\"unit\":\"celsius\",\"city\":\"Shanghai\"}");
    assert_eq!(ours["finish"]["kind"], "tool-calls");
    let (safety, ours) = &sdk["gemini/safety-stop.sse"];
    assert_eq!(safety["finish"], "content_filter");
    assert!(ours["finish"]["failure"]["code"].is_string(), "a safety stop ends the attempt as a failure: {ours}");
    assert_eq!(sdk["gemini/unavailable-error-in-stream.sse"].0["error"]["code"], 503);
}

/// Ctrl-C mid-stream ends the stream `aborted` and exits 130, as every command does after
/// Ctrl-C (not 2: nothing failed).
#[test]
fn ctrl_c_mid_stream_ends_it_aborted_and_exits_130() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [{"frames": [{"text": "a"}], "stall_after_frames": 1}]}),
    );
    let mut child = Command::new(faultline_e2e::faultline_bin())
        .args(["llm", "stream", "--base-url", &server.base_url(), "--model", "m", "--prompt", "hi"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // The first chunk is out: the stream is live, and stalls.
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["type"], "block-start");
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let rest: Vec<Value> = lines.map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert_eq!(rest.last().unwrap()["reason"]["kind"], "aborted", "{rest:?}");
}
