//! The adapter against the fake model server: every case runs three times, over real HTTP on
//! 127.0.0.1 (production seams), over real HTTPS on 127.0.0.1 (the same server behind TLS with
//! a certificate generated now, trusted through `ca_file`) and inside turmoil (simulated
//! seams), and must classify the same way in every world (FAILURE-DEEPSEEK-HTTP, FAILURE-DEEPSEEK-STREAM,
//! FAILURE-WIRE-RECOVERY-TEST).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // drives a real runtime too

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use faultline_runtime::event::{BlockKind, Chunk, ErrorCode, FinishReason, Message, RequestPrefix};
use faultline_runtime::llm::{chat_body, Adapter, ResolvedProvider, StaticCredentials};
use faultline_runtime::{seams::Clock, seams::Net};
use faultline_sim::model_server::{Frame, ModelServer, Recorded, RecordedRequest, Response, Script};
use tokio_util::sync::CancellationToken;

use crate::support::sim_builder;

const KEY_VAR: &str = "TEST_API_KEY";

#[derive(Debug, Clone)]
struct Case {
    script: Script,
    idle_ms: u64,
    /// The key's value (None: the route needs no key; Some(""): the variable is unset).
    key: Option<&'static str>,
    /// Fire the caller's cancel token after this many chunks.
    cancel_after: Option<usize>,
    /// Drop the stream after this many chunks.
    stop_after: Option<usize>,
    /// Point the route at a port nobody listens on.
    no_server: bool,
}

impl Case {
    fn new(responses: Vec<Response>) -> Self {
        Self {
            script: Script { responses, ..Script::default() },
            idle_ms: 300,
            key: Some("sk-test-123"),
            cancel_after: None,
            stop_after: None,
            no_server: false,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Outcome {
    chunks: Vec<Chunk>,
    requests: Vec<RecordedRequest>,
    abandoned: usize,
}

impl Outcome {
    fn finish(&self) -> &FinishReason {
        match self.chunks.last() {
            Some(Chunk::Finish { reason, .. }) => reason,
            other => panic!("stream did not end in finish: {other:?}"),
        }
    }

    fn code(&self) -> Option<ErrorCode> {
        self.finish().failure().map(|f| f.code)
    }

    fn text(&self) -> String {
        self.chunks
            .iter()
            .filter_map(|c| if let Chunk::TextDelta { text, .. } = c { Some(text.as_str()) } else { None })
            .collect()
    }
}

fn route(base_url: &str, case: &Case) -> Arc<ResolvedProvider> {
    route_trusting(base_url, case, None)
}

fn route_trusting(base_url: &str, case: &Case, ca_file: Option<String>) -> Arc<ResolvedProvider> {
    let mut route = ResolvedProvider::openai_compatible(base_url, "test-model")
        .unwrap()
        .with_name("test")
        .with_idle_timeout(Duration::from_millis(case.idle_ms))
        .unwrap();
    if case.key.is_some() {
        route = route.with_api_key_env(KEY_VAR).unwrap();
    }
    if let Some(ca_file) = ca_file {
        route = route.with_ca_file(ca_file);
    }
    Arc::new(route)
}

fn credentials(case: &Case) -> Arc<StaticCredentials> {
    let mut map = BTreeMap::new();
    if let Some(key) = case.key.filter(|k| !k.is_empty()) {
        map.insert(KEY_VAR.to_owned(), key.to_owned());
    }
    Arc::new(StaticCredentials(map))
}

fn body() -> bytes::Bytes {
    let prefix = RequestPrefix { model: "test-model".into(), system: None, tools: vec![] };
    let user = serde_json::to_value(Message::user_text("hi")).unwrap();
    chat_body(&prefix, &[serde_json::json!({"role": "user", "content": user["content"][0]["text"]})])
}

/// Drives one call to its end (or to the case's early stop).
async fn drive(adapter: Adapter, route: Arc<ResolvedProvider>, case: &Case) -> Vec<Chunk> {
    let cancel = CancellationToken::new();
    let mut stream = adapter.stream(route, body(), cancel.clone());
    let mut chunks = Vec::new();
    while let Some(chunk) = stream.next().await {
        chunks.push(chunk);
        if case.cancel_after == Some(chunks.len()) {
            cancel.cancel();
        }
        if case.stop_after == Some(chunks.len()) {
            break;
        }
    }
    chunks
}

/// Over real sockets: plain HTTP, or with `tls` HTTPS to the same server behind TLS.
fn run_real(case: &Case, tls: bool) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let seams = faultline_runtime::production::seams();
        let loopback = tls.then(crate::support::tls::LoopbackTls::new);
        let server_net = loopback.as_ref().map_or_else(|| seams.net.clone(), |l| l.net());
        let server = ModelServer::start(server_net, seams.clock.clone(), "127.0.0.1:0", case.script.clone(), None)
            .await
            .unwrap();
        let scheme = if tls { "https" } else { "http" };
        let base = if case.no_server {
            let listener = seams.net.bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            drop(listener);
            format!("{scheme}://127.0.0.1:{port}/v1")
        } else {
            format!("{scheme}://{}/v1", server.addr())
        };
        let dir = tempfile::tempdir().unwrap();
        let ca_file = loopback.as_ref().map(|l| {
            let path = dir.path().join("ca.pem");
            std::fs::write(&path, &l.ca_pem).unwrap();
            path.display().to_string()
        });
        let adapter = Adapter::new(seams.net.clone(), seams.clock.clone(), credentials(case)).with_fs(seams.fs.clone());
        let chunks = drive(adapter, route_trusting(&base, case, ca_file), case).await;
        // Let the server notice a connection the client dropped.
        seams.clock.sleep(Duration::from_millis(50)).await;
        Outcome { chunks, requests: server.requests(), abandoned: server.abandoned_streams() }
    })
}

fn run_sim(case: &Case) -> Outcome {
    let mut sim = sim_builder(11).build();
    let server_slot: Arc<Mutex<Option<ModelServer>>> = Arc::default();
    {
        let (script, slot) = (case.script.clone(), server_slot.clone());
        sim.host("model", move || {
            let (script, slot) = (script.clone(), slot.clone());
            async move {
                let net: Arc<dyn Net> = Arc::new(faultline_sim::seams::SimNet);
                let clock: Arc<dyn Clock> = Arc::new(faultline_sim::seams::SimClock);
                let server = ModelServer::start(net, clock, "0.0.0.0:80", script, None).await?;
                *slot.lock().unwrap() = Some(server);
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }
    let result: Arc<Mutex<Vec<Chunk>>> = Arc::default();
    {
        let (case, result) = (case.clone(), result.clone());
        sim.client("agent", async move {
            let seams = faultline_sim::seams::sim_seams(11, "agent", 1);
            let base = if case.no_server { "http://nobody:80/v1" } else { "http://model:80/v1" };
            let adapter = Adapter::new(seams.net.clone(), seams.clock.clone(), credentials(&case));
            let chunks = drive(adapter, route(base, &case), &case).await;
            seams.clock.sleep(Duration::from_millis(50)).await;
            *result.lock().unwrap() = chunks;
            Ok(())
        });
    }
    if case.no_server {
        sim.host("nobody", || async {
            std::future::pending::<()>().await;
            Ok(())
        });
    }
    sim.run().expect("simulation");
    let server = server_slot.lock().unwrap().clone().expect("server started");
    let chunks = result.lock().unwrap().clone();
    Outcome { chunks, requests: server.requests(), abandoned: server.abandoned_streams() }
}

/// Runs `case` in every world (real HTTP, real HTTPS, turmoil) and checks each with `check`.
fn both(case: Case, check: impl Fn(&Outcome, &str)) {
    check(&run_real(&case, false), "real HTTP");
    check(&run_real(&case, true), "real HTTPS");
    check(&run_sim(&case), "turmoil");
}

fn status_case(status: u16, headers: &[(&str, &str)], body: &str) -> Case {
    Case::new(vec![Response::status(status, headers, body)])
}

#[test]
fn a_text_turn_streams_normalised_chunks() {
    let mut response = Response::text(&["Hel", "lo"]);
    response.usage = Some([3, 2, 5]);
    both(Case::new(vec![response]), |out, world| {
        assert_eq!(out.text(), "Hello", "{world}");
        assert_eq!(out.chunks[0], Chunk::BlockStart { index: 0, kind: BlockKind::Text }, "{world}");
        assert!(out.chunks.contains(&Chunk::BlockEnd { index: 0 }), "{world}");
        assert!(out.chunks.iter().any(|c| matches!(c, Chunk::Usage { usage } if usage.total_tokens == 5)), "{world}");
        assert_eq!(out.finish(), &FinishReason::Stop, "{world}");
        assert_eq!(out.requests.len(), 1);
        assert_eq!(out.requests[0].path, "/v1/chat/completions");
        assert!(out.requests[0].had_authorization);
        let sent: serde_json::Value = serde_json::from_str(&out.requests[0].body).unwrap();
        assert_eq!(sent["stream"], true);
        assert_eq!(sent["stream_options"]["include_usage"], true);
    });
}

#[test]
fn tool_call_fragments_carry_id_and_name_only_first() {
    let response = Response {
        frames: vec![
            Frame::Reasoning("think".into()),
            Frame::ToolCall {
                index: 0,
                id: Some("call_1".into()),
                name: Some("send".into()),
                arguments: "{\"te".into(),
            },
            Frame::ToolCall { index: 0, id: None, name: None, arguments: "xt\":1}".into() },
        ],
        finish: Some("tool_calls".into()),
        done: true,
        ..Response::default()
    };
    both(Case::new(vec![response]), |out, world| {
        let deltas: Vec<&Chunk> = out.chunks.iter().filter(|c| matches!(c, Chunk::ToolCallDelta { .. })).collect();
        assert_eq!(
            deltas,
            vec![
                &Chunk::ToolCallDelta {
                    index: 1,
                    id: Some("call_1".into()),
                    name: Some("send".into()),
                    arguments_delta: "{\"te".into()
                },
                &Chunk::ToolCallDelta { index: 1, id: None, name: None, arguments_delta: "xt\":1}".into() },
            ],
            "{world}"
        );
        assert!(out.chunks.contains(&Chunk::ReasoningDelta { index: 0, text: "think".into() }), "{world}");
        assert_eq!(out.finish(), &FinishReason::ToolCalls, "{world}");
    });
}

#[test]
fn crlf_and_byte_by_byte_writes_yield_the_same_chunks() {
    let plain = Case::new(vec![Response::text(&["héllo ", "wörld"])]);
    let mut sloppy = plain.clone();
    sloppy.script.responses[0].crlf = true;
    sloppy.script.responses[0].write_bytes = Some(1);
    let expected = run_real(&plain, false).chunks;
    both(sloppy, |out, world| assert_eq!(out.chunks, expected, "{world}"));
}

#[test]
fn http_statuses_are_classified() {
    let cases: Vec<(Case, ErrorCode)> = vec![
        (status_case(402, &[], "{\"error\":{\"message\":\"Insufficient Balance\"}}"), ErrorCode::Quota),
        (status_case(429, &[], "{\"error\":{\"message\":\"You exceeded your current quota\"}}"), ErrorCode::Quota),
        (status_case(401, &[], "{\"error\":{\"message\":\"bad key\"}}"), ErrorCode::Auth),
        (status_case(403, &[], "forbidden"), ErrorCode::Auth),
        (status_case(429, &[], "slow down"), ErrorCode::RateLimit),
        (
            status_case(400, &[], "{\"error\":{\"message\":\"This model's maximum context length is 65536 tokens\"}}"),
            ErrorCode::ContextWindowExceeded,
        ),
        (status_case(400, &[], "{\"error\":{\"message\":\"messages: field required\"}}"), ErrorCode::InvalidRequest),
        (status_case(422, &[], "unprocessable"), ErrorCode::InvalidRequest),
        (status_case(500, &[], "boom"), ErrorCode::Server),
        (status_case(503, &[], "overloaded"), ErrorCode::Server),
        (status_case(418, &[], "teapot"), ErrorCode::Http(418)),
    ];
    for (case, code) in cases {
        let status = case.script.responses[0].status;
        both(case, |out, world| {
            assert_eq!(out.code(), Some(code), "{world}: status {status:?}");
            assert_eq!(out.finish().failure().unwrap().status, status, "{world}");
            assert_eq!(out.chunks.len(), 1, "{world}: only the terminal chunk");
        });
    }
}

#[test]
fn retry_after_and_request_ids_are_extracted() {
    both(status_case(429, &[("retry-after", "2"), ("x-request-id", "req-1")], "slow down"), |out, world| {
        let failure = out.finish().failure().unwrap();
        assert_eq!(failure.provider_retry_after_ms, Some(2000), "{world}");
        assert_eq!(failure.request_id.as_deref(), Some("req-1"), "{world}");
    });
    both(status_case(429, &[("retry-after-ms", "1500"), ("x-deepseek-request-id", "ds-9")], ""), |out, world| {
        let failure = out.finish().failure().unwrap();
        assert_eq!(failure.provider_retry_after_ms, Some(1500), "{world}");
        assert_eq!(failure.request_id.as_deref(), Some("ds-9"), "{world}");
    });
    both(status_case(429, &[("retry-after", "0")], ""), |out, world| {
        assert_eq!(out.finish().failure().unwrap().provider_retry_after_ms, None, "{world}: values <= 0 are ignored");
    });
}

#[test]
fn retry_after_as_an_http_date_is_measured_against_the_clock() {
    // In turmoil the clock is the fixed simulation epoch (2026-01-01T00:00:00Z).
    let case = status_case(429, &[("retry-after", "Thu, 01 Jan 2026 00:00:07 GMT")], "");
    let out = run_sim(&case);
    let after = out.finish().failure().unwrap().provider_retry_after_ms.unwrap();
    assert!((6_900..=7_000).contains(&after), "{after}");
    // On the real clock that date is long past: ignored.
    assert_eq!(run_real(&case, false).finish().failure().unwrap().provider_retry_after_ms, None);
}

#[test]
fn transport_failures_are_classified() {
    let mut refused = Case::new(vec![Response::text(&["x"])]);
    refused.no_server = true;
    both(refused, |out, world| assert_eq!(out.code(), Some(ErrorCode::Transport), "{world}: refused connection"));

    let mut dropped = Case::new(vec![Response::text(&["x"])]);
    dropped.script.refuse_until_ms = 60_000;
    both(dropped, |out, world| {
        assert_eq!(out.code(), Some(ErrorCode::Transport), "{world}: connection dropped before a response")
    });

    let mut disconnect = Response::text(&["par", "tial"]);
    disconnect.disconnect_after_frames = Some(1);
    both(Case::new(vec![disconnect]), |out, world| {
        assert_eq!(out.text(), "par", "{world}");
        assert_eq!(out.code(), Some(ErrorCode::Transport), "{world}: disconnect mid-stream");
    });
}

#[test]
fn stream_endings_are_classified() {
    let mut eof = Response::text(&["all but"]);
    eof.done = false;
    both(Case::new(vec![eof]), |out, world| assert_eq!(out.code(), Some(ErrorCode::StreamClosed), "{world}"));

    let empty = Response { finish: Some("stop".into()), done: true, ..Response::default() };
    both(Case::new(vec![empty]), |out, world| assert_eq!(out.code(), Some(ErrorCode::EmptyResponse), "{world}"));

    let no_body = Response { body: Some(String::new()), ..Response::default() };
    both(Case::new(vec![no_body]), |out, world| assert_eq!(out.code(), Some(ErrorCode::EmptyResponse), "{world}"));

    let malformed = Response { frames: vec![Frame::Raw("{\"choices\": [".into())], done: true, ..Response::default() };
    both(Case::new(vec![malformed]), |out, world| {
        assert_eq!(out.code(), Some(ErrorCode::MalformedResponse), "{world}")
    });
}

#[test]
fn a_stall_ends_in_timeout_and_keep_alives_are_activity_not_progress() {
    let mut stall = Response::text(&["a", "b"]);
    stall.stall_after_frames = Some(1);
    both(Case::new(vec![stall]), |out, world| {
        assert_eq!(out.code(), Some(ErrorCode::Timeout), "{world}");
        assert_eq!(out.text(), "a");
    });

    // Keep-alives inside data that keeps coming: each 200 ms apart, idle timeout 300 ms.
    let mut frames = Vec::new();
    for i in 0..4 {
        frames.push(Frame::DelayMs(100));
        frames.push(Frame::KeepAlive);
        frames.push(Frame::DelayMs(100));
        frames.push(Frame::Text(format!("{i}")));
    }
    let keep_alive = Response { frames, finish: Some("stop".into()), done: true, ..Response::default() };
    both(Case::new(vec![keep_alive]), |out, world| {
        assert_eq!(out.finish(), &FinishReason::Stop, "{world}");
        assert_eq!(out.text(), "0123");
    });

    // A provider that queues the request: 4 × 200 ms of keep-alives (800 ms, past the 300 ms
    // idle timeout), then the answer. Every ping re-arms the idle watchdog (FAILURE-WIRE-FORMATS,
    // the seed's rule): the answer is heard.
    let pings_then = |pings: usize| {
        let mut frames = Vec::new();
        for _ in 0..pings {
            frames.push(Frame::DelayMs(200));
            frames.push(Frame::KeepAlive);
        }
        frames.push(Frame::Text("queued, then answered".into()));
        Response { frames, finish: Some("stop".into()), done: true, ..Response::default() }
    };
    both(Case::new(vec![pings_then(4)]), |out, world| {
        assert_eq!(out.finish(), &FinishReason::Stop, "{world}");
        assert_eq!(out.text(), "queued, then answered");
    });
    // 6 × 200 ms of keep-alives and no data: past the progress bound (3 × 300 ms). Activity is
    // not progress: a stream that only pings still ends.
    both(Case::new(vec![pings_then(6)]), |out, world| {
        assert_eq!(out.code(), Some(ErrorCode::Timeout), "{world}");
        assert_eq!(out.text(), "");
    });
}

#[test]
fn caller_abort_ends_in_aborted() {
    let mut slow = Response::text(&["a", "b", "c"]);
    slow.frame_delay_ms = 100;
    let mut case = Case::new(vec![slow]);
    case.cancel_after = Some(2);
    both(case, |out, world| {
        assert!(
            matches!(out.finish(), FinishReason::Aborted { failure } if failure.code == ErrorCode::Aborted),
            "{world}"
        );
    });
}

#[test]
fn an_early_consumer_stop_closes_the_connection() {
    let mut slow = Response::text(&["a", "b", "c", "d"]);
    slow.frame_delay_ms = 20;
    let mut case = Case::new(vec![slow]);
    case.stop_after = Some(2);
    both(case, |out, world| {
        assert_eq!(out.chunks.len(), 2, "{world}");
        assert_eq!(out.abandoned, 1, "{world}: the server saw the client go away");
    });
}

#[test]
fn credentials_are_resolved_per_request_and_never_sent_when_missing() {
    let mut missing = Case::new(vec![Response::text(&["x"])]);
    missing.key = Some("");
    both(missing, |out, world| {
        assert_eq!(out.code(), Some(ErrorCode::MissingCredential), "{world}");
        assert!(out.finish().failure().unwrap().message.contains(KEY_VAR));
        assert!(out.requests.is_empty(), "{world}: nothing reached the server");
    });
    let mut invalid = Case::new(vec![Response::text(&["x"])]);
    invalid.key = Some("sk-secret value\n");
    both(invalid, |out, world| {
        let failure = out.finish().failure().unwrap();
        assert_eq!(failure.code, ErrorCode::InvalidCredential, "{world}");
        assert!(!failure.message.contains("sk-secret"), "{world}: the key never appears in a message");
    });
    let mut keyless = Case::new(vec![Response::text(&["x"])]);
    keyless.key = None;
    both(keyless, |out, world| {
        assert_eq!(out.finish(), &FinishReason::Stop, "{world}");
        assert!(!out.requests[0].had_authorization);
    });
}

/// What a recorded stream says, read straight from its bytes (not through the adapter): the
/// expected text, reasoning, tool calls and usage of each fixture.
fn recorded_case(recorded: Recorded, write_bytes: Option<usize>) -> Case {
    let mut case =
        Case::new(vec![Response { recorded: Some(recorded), write_bytes, done: true, ..Response::default() }]);
    // The reasoner's fixture is the longest; a byte-at-a-time replay needs time.
    case.idle_ms = 2_000;
    case
}

fn reasoning(out: &Outcome) -> Vec<String> {
    out.chunks
        .iter()
        .filter_map(|c| if let Chunk::ReasoningDelta { text, .. } = c { Some(text.clone()) } else { None })
        .collect()
}

/// `(id, name, arguments)` of each tool call, the fragments joined.
fn tool_calls(out: &Outcome) -> Vec<(Option<String>, Option<String>, String)> {
    let mut calls: BTreeMap<u32, (Option<String>, Option<String>, String)> = BTreeMap::new();
    for chunk in &out.chunks {
        if let Chunk::ToolCallDelta { index, id, name, arguments_delta } = chunk {
            let call = calls.entry(*index).or_default();
            call.0 = call.0.take().or_else(|| id.clone());
            call.1 = call.1.take().or_else(|| name.clone());
            call.2.push_str(arguments_delta);
        }
    }
    calls.into_values().collect()
}

fn usage(out: &Outcome) -> Vec<faultline_runtime::event::Usage> {
    out.chunks.iter().filter_map(|c| if let Chunk::Usage { usage } = c { Some(*usage) } else { None }).collect()
}

/// The fake server replays a recorded stream byte for byte (status, content type, body).
#[test]
fn the_model_server_replays_recorded_streams_byte_for_byte() {
    use http_body_util::BodyExt;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let seams = faultline_runtime::production::seams();
        for recorded in Recorded::ALL {
            let script = recorded_case(recorded, Some(7)).script;
            let server =
                ModelServer::start(seams.net.clone(), seams.clock.clone(), "127.0.0.1:0", script, None).await.unwrap();
            let stream = seams.net.connect(&server.addr().to_string()).await.unwrap();
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
            tokio::spawn(connection);
            let request = hyper::Request::post("/v1/chat/completions")
                .header("host", "model")
                .body(http_body_util::Full::new(body()))
                .unwrap();
            let response = sender.send_request(request).await.unwrap();
            assert_eq!(response.status(), 200);
            assert_eq!(response.headers()["content-type"], "text/event-stream; charset=utf-8");
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(bytes.as_ref(), recorded.body().as_bytes(), "{}", recorded.file_name());
        }
    });
}

/// DeepSeek `deepseek-chat`, recorded: text, then a tool call whose arguments arrive in six
/// pieces, usage (cache hit and miss) inside the finish chunk. Whole and 7 bytes at a time.
#[test]
fn a_recorded_deepseek_tool_call_stream_normalises_in_every_world() {
    for write_bytes in [None, Some(7)] {
        both(recorded_case(Recorded::DeepseekChatToolCalls, write_bytes), |out, world| {
            assert_eq!(out.text(), "I'll check the current weather in Tokyo for you.", "{world}");
            assert_eq!(
                tool_calls(out),
                vec![(
                    Some("call_00_Sq0n5HVeFHkS1mBrIGbwBQcK".to_owned()),
                    Some("get_weather".to_owned()),
                    r#"{"location": "Tokyo"}"#.to_owned()
                )],
                "{world}"
            );
            let usage = usage(out);
            assert_eq!(usage.len(), 1, "{world}");
            assert_eq!((usage[0].prompt_tokens, usage[0].completion_tokens, usage[0].total_tokens), (161, 25, 186));
            assert_eq!((usage[0].cache_hit_tokens, usage[0].cache_miss_tokens), (Some(128), Some(33)), "{world}");
            assert_eq!(out.finish(), &FinishReason::ToolCalls, "{world}");
        });
    }
}

/// DeepSeek `deepseek-reasoner`, recorded: 39 reasoning deltas (the usage says 39 reasoning
/// tokens), `content: null`, a tool call, `"usage": null` on every chunk but the finish one.
#[test]
fn a_recorded_deepseek_reasoner_stream_keeps_its_reasoning_in_every_world() {
    for write_bytes in [None, Some(1)] {
        both(recorded_case(Recorded::DeepseekReasoner, write_bytes), |out, world| {
            let reasoning = reasoning(out);
            assert_eq!(reasoning.iter().filter(|t| !t.is_empty()).count(), 39, "{world}");
            assert!(reasoning.concat().starts_with("The user"), "{world}");
            assert_eq!(out.text(), "", "{world}: content was null throughout");
            let calls = tool_calls(out);
            assert_eq!(calls.len(), 1, "{world}");
            assert_eq!(calls[0].1.as_deref(), Some("weather"), "{world}");
            assert_eq!(calls[0].2, r#"{"location": "San Francisco"}"#, "{world}");
            let usage = usage(out);
            assert_eq!(usage.len(), 1, "{world}: usage: null is no usage");
            assert_eq!((usage[0].prompt_tokens, usage[0].completion_tokens, usage[0].total_tokens), (339, 83, 422));
            assert_eq!(usage[0].reasoning_tokens, Some(39), "{world}");
            assert_eq!((usage[0].cache_hit_tokens, usage[0].cache_miss_tokens), (Some(320), Some(19)), "{world}");
            assert_eq!(out.finish(), &FinishReason::ToolCalls, "{world}");
        });
    }
}

/// OpenAI with `include_usage`, recorded: `"usage": null` on every chunk, then a `choices: []`
/// chunk with the usage and its `*_tokens_details`.
#[test]
fn a_recorded_openai_stream_with_include_usage_normalises_in_every_world() {
    both(recorded_case(Recorded::OpenaiIncludeUsage, Some(5)), |out, world| {
        assert_eq!(out.text(), "The capital of the UK is London.", "{world}");
        let usage = usage(out);
        assert_eq!(usage.len(), 1, "{world}");
        assert_eq!((usage[0].prompt_tokens, usage[0].completion_tokens, usage[0].total_tokens), (78, 9, 87));
        assert_eq!((usage[0].reasoning_tokens, usage[0].cache_hit_tokens), (Some(0), Some(0)), "{world}");
        assert_eq!(out.finish(), &FinishReason::Stop, "{world}");
    });
}

/// An error event inside a 200 stream, recorded (Groq's OpenAI-compatible API): `event: error`
/// and a body naming status 400. It is the invalid request it says it is, not a retryable
/// server fault, and the text before it is still what the stream said.
#[test]
fn a_recorded_error_event_mid_stream_is_classified_by_its_status_in_every_world() {
    both(recorded_case(Recorded::GroqErrorMidStream, None), |out, world| {
        assert_eq!(out.text(), "maybe", "{world}");
        let failure = out.finish().failure().expect("an error finish");
        assert_eq!(failure.code, ErrorCode::InvalidRequest, "{world}: {failure:?}");
        assert!(failure.message.contains("Tool choice is required"), "{world}: {}", failure.message);
    });
}

/// The inferred flag of the attempt's finish.
fn inferred(out: &Outcome) -> bool {
    out.chunks.iter().any(|c| matches!(c, Chunk::Finish { inferred: true, .. }))
}

fn refusal(out: &Outcome) -> String {
    out.chunks
        .iter()
        .filter_map(|c| if let Chunk::RefusalDelta { text, .. } = c { Some(text.as_str()) } else { None })
        .collect()
}

/// Mistral's shape: two tool calls in one delta, neither with an `index`. Both are kept, with
/// their ids, names and arguments (the adapter used to refuse the stream as malformed).
#[test]
fn tool_calls_without_an_index_are_kept_by_their_ids_in_every_world() {
    for write_bytes in [None, Some(3)] {
        both(recorded_case(Recorded::MistralToolCallsWithoutIndex, write_bytes), |out, world| {
            assert_eq!(
                tool_calls(out),
                vec![
                    (
                        Some("Kq3TzW8pA".into()),
                        Some("get_weather".into()),
                        r#"{"city": "Lyon", "unit": "celsius"}"#.into()
                    ),
                    (Some("Rm7bXc2Ld".into()), Some("get_time".into()), r#"{"zone": "Europe/Paris"}"#.into()),
                ],
                "{world}"
            );
            assert_eq!(out.finish(), &FinishReason::ToolCalls, "{world}");
            let usage = usage(out);
            assert_eq!((usage[0].prompt_tokens, usage[0].completion_tokens, usage[0].total_tokens), (118, 53, 171));
        });
    }
}

/// OpenAI's refusal: `refusal` deltas with `content: null` and finish `stop`. It is the
/// model's answer (its own block), not an empty response.
#[test]
fn a_refusal_is_its_own_content_and_finishes_stop_in_every_world() {
    both(recorded_case(Recorded::OpenaiRefusal, Some(9)), |out, world| {
        assert_eq!(refusal(out), "I'm sorry, but I can't help with writing that.", "{world}");
        assert_eq!(out.text(), "", "{world}");
        assert_eq!(out.finish(), &FinishReason::Stop, "{world}");
        assert!(!inferred(out), "{world}");
    });
}

/// OpenRouter's shape: comments while queued, `reasoning` deltas, the usage after the finish.
#[test]
fn openrouter_reasoning_and_usage_after_the_finish_are_read_in_every_world() {
    both(recorded_case(Recorded::OpenrouterReasoning, None), |out, world| {
        assert_eq!(reasoning(out).concat(), "The user wants the capital. It is a short factual answer.", "{world}");
        assert_eq!(out.text(), "The capital of France is Paris.", "{world}");
        let usage = usage(out);
        assert_eq!(usage.len(), 1, "{world}");
        assert_eq!((usage[0].prompt_tokens, usage[0].completion_tokens, usage[0].total_tokens), (24, 31, 55));
        assert_eq!(out.finish(), &FinishReason::Stop, "{world}");
    });
}

/// OpenRouter's error event with its own `code` 400: the request is at fault, so it is
/// `INVALID_REQUEST` (never retried by default), not a retryable `SERVER`.
#[test]
fn an_error_event_with_a_numeric_code_is_classified_by_it_in_every_world() {
    both(recorded_case(Recorded::OpenrouterErrorInStream, None), |out, world| {
        assert_eq!(out.text(), "Here is the first part", "{world}");
        let failure = out.finish().failure().expect("an error finish");
        assert_eq!((failure.code, failure.status), (ErrorCode::InvalidRequest, Some(400)), "{world}: {failure:?}");
        assert!(failure.message.contains("Token limit reached"), "{world}: {}", failure.message);
    });
}

/// A tool-call stream with no `finish_reason` anywhere: the call is kept, the finish is
/// inferred as tool calls, and the record says it was inferred.
#[test]
fn a_stream_without_a_finish_reason_records_its_finish_as_inferred_in_every_world() {
    both(recorded_case(Recorded::ToolCallWithoutFinishReason, None), |out, world| {
        assert_eq!(
            tool_calls(out),
            vec![(Some("call_7f3a".into()), Some("lookup".into()), r#"{"term": "fault lines"}"#.into())],
            "{world}"
        );
        assert_eq!(out.finish(), &FinishReason::ToolCalls, "{world}");
        assert!(inferred(out), "{world}: the record says the finish was inferred");
    });
}

/// Prose that looks like credentials reaches the caller byte for byte, split as it was.
#[test]
fn prose_that_looks_like_credentials_is_not_rewritten_in_every_world() {
    both(recorded_case(Recorded::CredentialWordsInProse, Some(4)), |out, world| {
        assert_eq!(reasoning(out).concat(), "The most basic representation of a key=value pair", "{world}");
        assert_eq!(
            out.text(),
            "The basic idea: call f(key=value) with a bearer token, then use Basic auth and password=hunter2.",
            "{world}"
        );
    });
}
