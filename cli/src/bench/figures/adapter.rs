//! The adapter path (adapter, assembler, durable append) against a raw parse of the same SSE
//! bytes from the same loopback server.

use faultline_runtime::event::*;
use faultline_runtime::llm::{chat_body, Adapter, ResolvedProvider, StaticCredentials};
use faultline_runtime::production;
use faultline_runtime::store::{FileStore, Format, SessionId, Store, WriteBehind, WriteBehindConfig};
use faultline_runtime::testing::Assembler;
use faultline_sim::model_server::{sse_body, Frame, Response};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use super::figure::*;

/// Interleaved rounds of the adapter figure (the median round counts).
pub(super) const ADAPTER_ROUNDS: usize = 5;

/// Adapter path (adapter + assembler + durable event append) vs a raw parse of the same SSE
/// bytes, in interleaved rounds.
///
/// Both sides read the same pre-rendered response from the same loopback server, which
/// writes it from memory in one go (no per-frame generation), so what differs is only what
/// each does with the bytes. The adapter side appends every chunk through the write-behind a
/// live agent uses onto a JSONL store on the real disk, and its clock stops when the log is
/// closed (every event durable), not when the last chunk was accepted.
pub(super) async fn adapter(dir: &Path, chunks: usize) -> Vec<Figure> {
    let seams = production::seams();
    let frames: Vec<Frame> = (0..chunks).map(|i| Frame::Text(format!("token{i} "))).collect();
    let response = Response { frames, finish: Some("stop".into()), done: true, ..Response::default() };
    let addr = serve_fixed_sse(sse_body(faultline_runtime::llm::WireFormat::Openai, 0, &response)).await;
    let route = Arc::new(
        ResolvedProvider::openai_compatible(&format!("http://{addr}/v1"), "m")
            .expect("url")
            .with_name("bench")
            .with_idle_timeout(Duration::from_secs(30))
            .expect("an idle timeout in range"),
    );
    let prefix = RequestPrefix { model: "m".into(), system: None, tools: vec![] };
    let body = chat_body(&prefix, &[serde_json::json!({"role": "user", "content": "go"})]);
    let adapter = Adapter::new(seams.net.clone(), seams.clock.clone(), Arc::new(StaticCredentials::default()));
    let store = FileStore::new(seams.clone(), dir.join("adapter"), Format::Jsonl);
    let (mut raw_rates, mut rates, mut raw_first, mut first_ms) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..ADAPTER_ROUNDS {
        // The raw baseline: the same request to the same loopback server, its SSE bytes read
        // by a bare hyper client, split into events, each data line parsed to a JSON value.
        // Both sides pay the same transport and the same server; the ratio is what the
        // adapter, assembler and durable log append add on top of reading and parsing.
        let (raw, raw_first_ms) = raw_sse_client(addr, &body).await;
        raw_rates.push(raw);
        raw_first.push(raw_first_ms);
        let log = store.create(&SessionId::new(format!("adapter-{round}")).expect("id"), 1).expect("create");
        let wb = WriteBehind::start(
            log,
            seams.clock.clone(),
            WriteBehindConfig { batch_window_ms: 200, pending_events_max: 4096, ..WriteBehindConfig::default() },
            None,
        );
        wb.append(Event::TurnStart(TurnStart { turn: 1 }), None).await.expect("append");
        wb.append(Event::StepStart(StepRef { turn: 1, step: 1 }), None).await.expect("append");
        let start = Instant::now();
        let mut stream = adapter.stream(route.clone(), body.clone(), CancellationToken::new());
        let mut assembler = Assembler::new();
        let (mut first, mut seen) = (None, 0usize);
        while let Some(chunk) = stream.next().await {
            first.get_or_insert_with(|| start.elapsed().as_secs_f64() * 1e3);
            assembler.push(&chunk);
            seen += 1;
            wb.append(Event::AssistantChunk(AssistantChunk { turn: 1, step: 1, attempt: 1, chunk }), None)
                .await
                .expect("append");
        }
        wb.close().await.expect("close");
        // Per SSE event (one model token), the unit both sides share; the adapter's own
        // block start and finish chunks ride along uncounted.
        assert!(seen >= chunks, "every token arrived ({seen} of {chunks})");
        rates.push(chunks as f64 / start.elapsed().as_secs_f64());
        first_ms.push(first.unwrap_or(0.0));
    }
    vec![
        figure(
            "adapter: SSE events through adapter+assembler+durable append",
            median(rates),
            "events/s",
            Some(median(raw_rates)),
            Some(("cost ≤ 1.3× raw parse (ratio ≥ 0.77)", 1.0 / 1.3)),
        ),
        figure(
            "adapter: time to first chunk (loopback, incl. connect)",
            median(first_ms),
            "ms",
            Some(median(raw_first)),
            None,
        ),
    ]
}

/// A loopback HTTP server that answers every request with `sse` as one write (the request is
/// read up to its body's declared length first).
pub(super) async fn serve_fixed_sse(sse: String) -> std::net::SocketAddr {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let response =
        format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{sse}", sse.len());
    let response = bytes::Bytes::from(response);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let response = response.clone();
            tokio::spawn(async move {
                stream.set_nodelay(true).ok();
                if faultline_runtime::testing::read_http_request(&mut stream).await.is_none() {
                    return;
                }
                let _ = stream.write_all(&response).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

/// What the baseline decodes of each chunk: the fields the adapter reads, owned as it owns
/// them (a typed decode; a generic `serde_json::Value` would be slower and flatter the ratio).
#[derive(serde::Deserialize)]
pub(super) struct RawChunk {
    #[allow(dead_code)] // decoded, as the adapter decodes it, never read
    choices: Vec<RawChoice>,
}

#[derive(serde::Deserialize)]
#[allow(dead_code)] // decoded, as the adapter decodes it, never read
pub(super) struct RawChoice {
    delta: Option<RawDelta>,
    finish_reason: Option<String>,
}

#[derive(serde::Deserialize)]
#[allow(dead_code)] // decoded, as the adapter decodes it, never read
pub(super) struct RawDelta {
    content: Option<String>,
}

/// The adapter's baseline: POSTs `body` to `addr` with a bare hyper client and decodes every
/// SSE `data:` payload into typed chunks. Returns events/s and the ms to the first event.
pub(super) async fn raw_sse_client(addr: std::net::SocketAddr, body: &bytes::Bytes) -> (f64, f64) {
    use http_body_util::{BodyExt, Full};
    let start = Instant::now();
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.expect("handshake");
    tokio::spawn(connection);
    let request = hyper::Request::post("/v1/chat/completions")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(body.clone()))
        .expect("request");
    let mut response = sender.send_request(request).await.expect("response").into_body();
    let (mut buffer, mut events, mut first) = (Vec::<u8>::new(), 0usize, None);
    while let Some(frame) = response.frame().await {
        let Ok(data) = frame.expect("body frame").into_data() else { continue };
        buffer.extend_from_slice(&data);
        let mut consumed = 0;
        while let Some(end) = memchr::memmem::find(&buffer[consumed..], b"\n\n") {
            let event = &buffer[consumed..consumed + end];
            consumed += end + 2;
            let Some(payload) = event.strip_prefix(b"data: ") else { continue };
            if payload != b"[DONE]" {
                let chunk: RawChunk = serde_json::from_slice(payload).expect("json");
                std::hint::black_box(&chunk);
                events += 1;
                first.get_or_insert_with(|| start.elapsed().as_secs_f64() * 1e3);
            }
        }
        buffer.drain(..consumed);
    }
    (events as f64 / start.elapsed().as_secs_f64(), first.unwrap_or(0.0))
}
