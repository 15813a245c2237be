//! The measurements.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faultline_runtime::agent::Assembler;
use faultline_runtime::event::*;
use faultline_runtime::llm::{chat_body, Adapter, Endpoint, Preset, ResolvedProvider, RetryPolicy, StaticCredentials};
use faultline_runtime::production::{self, SqliteStore};
use faultline_runtime::store::{FileStore, Format, MemoryStore, SessionId, Store, WriteBehind, WriteBehindConfig};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::model_server::{Frame, ModelServer, Response, Script};

/// One measured figure and its baseline.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// What was measured.
    pub name: String,
    /// The measurement, in `unit`.
    pub value: f64,
    /// Its unit.
    pub unit: String,
    /// The baseline, in the same unit (when there is one).
    pub baseline: Option<f64>,
    /// value / baseline (for throughputs: higher is better).
    pub ratio: Option<f64>,
    /// The target this figure is held to, in words.
    pub target: Option<String>,
    /// Whether the target holds.
    pub meets_target: Option<bool>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// CPU cores available.
    pub cores: usize,
    /// Median latency of a 4 KiB write + fsync on the temp filesystem, in ms.
    pub fsync_ms_p50: f64,
    /// The figures.
    pub figures: Vec<Figure>,
}

fn figure(name: &str, value: f64, unit: &str, baseline: Option<f64>, target: Option<(&str, f64)>) -> Figure {
    let ratio = baseline.map(|b| value / b.max(f64::MIN_POSITIVE));
    Figure {
        name: name.to_owned(),
        value,
        unit: unit.to_owned(),
        baseline,
        ratio,
        target: target.map(|(t, _)| t.to_owned()),
        meets_target: target.and_then(|(_, min)| ratio.map(|r| r >= min)),
    }
}

fn percentile(samples: &mut [f64], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[((samples.len() - 1) as f64 * p).round() as usize]
}

/// Median 4 KiB write+fsync latency, the floor under every durable append.
fn fsync_latency(dir: &Path) -> f64 {
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path).expect("temp file");
    let block = vec![b'x'; 4096];
    let mut samples: Vec<f64> = (0..40)
        .map(|_| {
            let start = Instant::now();
            file.write_all(&block).expect("write");
            file.sync_all().expect("fsync");
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    percentile(&mut samples, 0.5)
}

/// Realistic events: tool results of 200–2 000 bytes, a valid log (one open turn and step).
fn events(count: usize) -> Vec<Record> {
    let mut records = vec![
        Record::new(0, 1, Event::TurnStart(TurnStart { turn: 1 })),
        Record::new(1, 1, Event::StepStart(StepRef { turn: 1, step: 1 })),
    ];
    for i in 2..count as u64 {
        let size = 200 + (i as usize * 977) % 1800;
        let text: String = (0..size).map(|j| (b'a' + ((i as usize + j) % 26) as u8) as char).collect();
        records.push(Record::new(
            i,
            1_767_225_600_000 + i,
            Event::UserMessage(UserMessage { message: Message::user_text(text) }),
        ));
    }
    records
}

/// Durable append: a store vs one write + fsync per batch of the same bytes.
fn durable_append(dir: &Path, batch: usize, batches: usize) -> Vec<Figure> {
    let records = events(batch * batches);
    let lines: Vec<Vec<u8>> = records
        .chunks(batch)
        .map(|chunk| chunk.iter().flat_map(|r| (r.encode() + "\n").into_bytes()).collect())
        .collect();
    let raw = {
        let path = dir.join(format!("raw-{batch}"));
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path).expect("raw file");
        let start = Instant::now();
        for bytes in &lines {
            file.write_all(bytes).expect("write");
            file.sync_all().expect("fsync");
        }
        records.len() as f64 / start.elapsed().as_secs_f64()
    };
    let mut out = Vec::new();
    for (label, kind) in [("jsonl", 0), ("zstd", 1), ("sqlite", 2)] {
        let seams = production::seams();
        let root = dir.join(format!("{label}-{batch}"));
        let store: Box<dyn Store> = match kind {
            0 => Box::new(FileStore::new(seams.clone(), &root, Format::Jsonl)),
            1 => Box::new(FileStore::new(seams.clone(), &root, Format::Zstd)),
            _ => {
                std::fs::create_dir_all(&root).expect("dir");
                Box::new(SqliteStore::open(root.join("s.sqlite"), seams.process.clone()).expect("sqlite"))
            }
        };
        let mut log = store.create(&SessionId::new("bench").expect("id"), 1).expect("create");
        let start = Instant::now();
        for chunk in records.chunks(batch) {
            log.append(chunk).expect("append");
        }
        let rate = records.len() as f64 / start.elapsed().as_secs_f64();
        let target = (kind < 2).then_some(("≥ 0.9× raw", 0.9));
        out.push(figure(&format!("durable append {label}, batch {batch}"), rate, "events/s", Some(raw), target));
    }
    out
}

/// Write-behind under a producer faster than any model: accepted events/s, flush latency,
/// peak queue length (bounded).
async fn write_behind(events_total: usize) -> Vec<Figure> {
    let seams = production::seams();
    let store = MemoryStore::new(seams.process.clone());
    let log = store.create(&SessionId::new("wb").expect("id"), 1).expect("create");
    let config = WriteBehindConfig { batch_window_ms: 200, pending_events_max: 4096 };
    let wb = WriteBehind::start(log, seams.clock.clone(), config, None);
    let chunk = Event::TurnStart(TurnStart { turn: 1 });
    wb.append(chunk, None).await.expect("append");
    let mut flushes = Vec::new();
    let mut peak = 0usize;
    let start = Instant::now();
    for i in 1..events_total {
        // Alternate step/start and step/end (steps 1, 2, ...) so the log stays valid.
        let step = i.div_ceil(2) as u32;
        let event = if i % 2 == 1 {
            Event::StepStart(StepRef { turn: 1, step })
        } else {
            Event::StepEnd(StepRef { turn: 1, step })
        };
        wb.append(event, None).await.expect("append");
        peak = peak.max(wb.pending_len());
        if i % 1000 == 0 {
            let t = Instant::now();
            wb.flush().await.expect("flush");
            flushes.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let rate = events_total as f64 / start.elapsed().as_secs_f64();
    wb.close().await.expect("close");
    vec![
        figure("write-behind accepted", rate, "events/s", None, None),
        figure("write-behind flush latency p50", percentile(&mut flushes.clone(), 0.5), "ms", None, None),
        figure("write-behind flush latency p99", percentile(&mut flushes, 0.99), "ms", None, None),
        figure("write-behind peak queue", peak as f64, "events (bound 4096)", None, None),
    ]
}

/// Recovery: cold load + scan + validate vs reading (and decompressing) and parsing each line
/// to a JSON value.
fn recovery(dir: &Path, count: usize) -> Vec<Figure> {
    let records = events(count);
    let mut out = Vec::new();
    for (label, format) in [("jsonl", Format::Jsonl), ("zstd", Format::Zstd)] {
        let seams = production::seams();
        let root = dir.join(format!("recovery-{label}"));
        let store = FileStore::new(seams.clone(), &root, format);
        let id = SessionId::new("big").expect("id");
        let mut log = store.create(&id, 1).expect("create");
        for chunk in records.chunks(1024) {
            log.append(chunk).expect("append");
        }
        log.close().expect("close");
        let path = store.session_path(&id);
        let size = std::fs::metadata(&path).expect("size").len() as f64;
        let raw = {
            let start = Instant::now();
            let bytes = std::fs::read(&path).expect("read");
            let text = match format {
                Format::Jsonl => bytes,
                Format::Zstd => zstd_decode_all(&bytes),
            };
            let mut n = 0usize;
            for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let _: serde_json::Value = serde_json::from_slice(line).expect("json");
                n += 1;
            }
            n as f64 / start.elapsed().as_secs_f64()
        };
        let start = Instant::now();
        let inspection = store.inspect(&id).expect("inspect");
        let elapsed = start.elapsed().as_secs_f64();
        assert_eq!(inspection.records.len(), records.len());
        let rate = records.len() as f64 / elapsed;
        out.push(figure(
            &format!("recovery {label}: load+scan+validate {count} events"),
            rate,
            "events/s",
            Some(raw),
            Some(("≥ 0.7× raw", 0.7)),
        ));
        out.push(figure(&format!("recovery {label}: bytes"), size / elapsed / 1e6, "MB/s", None, None));
        // A torn tail: half a line (JSONL) or the start of a frame cut short (zstd; bytes that
        // are not a frame start would be corruption, not a tear).
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).expect("open");
        let tail: &[u8] = match format {
            Format::Jsonl => b"{\"type\":\"turn/end\",\"se",
            Format::Zstd => &[0x28, 0xB5, 0x2F],
        };
        file.write_all(tail).expect("tear");
        drop(file);
        let start = Instant::now();
        store.load(&id).expect("repair");
        out.push(figure(
            &format!("repair {label}: torn tail of {count} events"),
            records.len() as f64 / start.elapsed().as_secs_f64(),
            "events/s",
            None,
            None,
        ));
    }
    out
}

fn zstd_decode_all(bytes: &[u8]) -> Vec<u8> {
    zstd::stream::decode_all(bytes).expect("zstd")
}

/// Adapter path (adapter + assembler + event append) vs a raw parse of the same SSE bytes.
async fn adapter(chunks: usize) -> Vec<Figure> {
    let seams = production::seams();
    let frames: Vec<Frame> = (0..chunks).map(|i| Frame::Text(format!("token{i} "))).collect();
    let response = Response { frames: frames.clone(), finish: Some("stop".into()), done: true, ..Response::default() };
    let script = Script { refuse_until_ms: 0, responses: vec![response], repeat_last: true };
    let server =
        ModelServer::start(seams.net.clone(), seams.clock.clone(), "127.0.0.1:0", script, None).await.expect("server");
    let route = Arc::new(ResolvedProvider {
        name: "bench".into(),
        preset: Preset::OpenaiCompatible,
        endpoint: Endpoint::parse(&format!("http://{}/v1", server.addr())).expect("url"),
        model: "m".into(),
        api_key_env: None,
        idle_timeout: Duration::from_secs(30),
        retry: RetryPolicy::default(),
    });
    // The raw baseline: the same SSE bytes, split into events, each data line parsed to JSON.
    let sse: String = frames
        .iter()
        .map(|f| match f {
            Frame::Text(t) => {
                format!("data: {}\n\n", serde_json::json!({"choices": [{"index": 0, "delta": {"content": t}}]}))
            }
            _ => String::new(),
        })
        .collect();
    let raw = {
        let start = Instant::now();
        let mut n = 0usize;
        for event in sse.split("\n\n").filter(|e| !e.is_empty()) {
            let _: serde_json::Value = serde_json::from_str(event.trim_start_matches("data: ")).expect("json");
            n += 1;
        }
        n as f64 / start.elapsed().as_secs_f64()
    };
    let adapter = Adapter::new(seams.net.clone(), seams.clock.clone(), Arc::new(StaticCredentials::default()));
    let store = MemoryStore::new(seams.process.clone());
    let log = store.create(&SessionId::new("adapter").expect("id"), 1).expect("create");
    let wb = WriteBehind::start(
        log,
        seams.clock.clone(),
        WriteBehindConfig { batch_window_ms: 200, pending_events_max: 1_000_000 },
        None,
    );
    wb.append(Event::TurnStart(TurnStart { turn: 1 }), None).await.expect("append");
    wb.append(Event::StepStart(StepRef { turn: 1, step: 1 }), None).await.expect("append");
    let prefix = RequestPrefix { model: "m".into(), system: None, tools: vec![] };
    let body = chat_body(&prefix, &[serde_json::json!({"role": "user", "content": "go"})]);
    let start = Instant::now();
    let mut stream = adapter.stream(route, body, CancellationToken::new());
    let mut assembler = Assembler::new();
    let mut first = None;
    let mut n = 0usize;
    while let Some(chunk) = stream.next().await {
        first.get_or_insert_with(|| start.elapsed().as_secs_f64() * 1e3);
        assembler.push(&chunk);
        wb.append(Event::AssistantChunk(AssistantChunk { turn: 1, step: 1, attempt: 1, chunk }), None)
            .await
            .expect("append");
        n += 1;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    wb.close().await.ok();
    vec![
        figure(
            "adapter: SSE chunks through adapter+assembler+append",
            rate,
            "chunks/s",
            Some(raw),
            Some(("cost ≤ 1.3× raw parse (ratio ≥ 0.77)", 1.0 / 1.3)),
        ),
        figure("adapter: time to first chunk (loopback, incl. connect)", first.unwrap_or(0.0), "ms", None, None),
    ]
}

/// Simulator: runs/s per core for the default mix and `mixed`, simulated/wall time, and a
/// bare turmoil baseline with the same requests, fs appends+fsyncs and simulated time.
fn simulator(seeds: u64) -> Vec<Figure> {
    use crate::scenario::{Scenario, BUILT_IN_SCENARIOS};
    let scenarios: Vec<Scenario> =
        BUILT_IN_SCENARIOS.iter().map(|s| Scenario::parse(s.text).expect("scenario")).collect();
    let start = Instant::now();
    let mut runs = 0u64;
    let mut sim_ms = 0u64;
    let mut requests = 0usize;
    for seed in 0..seeds {
        for scenario in &scenarios {
            let result = crate::world::run(scenario, seed);
            runs += 1;
            sim_ms += result.sim_ms;
            requests += result.model_requests;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let mix_rate = runs as f64 / wall;
    let mixed = Scenario::built_in("mixed").expect("mixed");
    let start = Instant::now();
    for seed in 0..seeds * 4 {
        crate::world::run(&mixed, seed);
    }
    let mixed_rate = (seeds * 4) as f64 / start.elapsed().as_secs_f64();
    // The bare baseline: the same number of requests and the same simulated time per run, on
    // a plain turmoil sim with a hyper server and client and simulated-fs appends+fsyncs.
    let per_run_requests = (requests as f64 / runs as f64).ceil() as usize;
    let per_run_ms = sim_ms / runs.max(1);
    let start = Instant::now();
    for seed in 0..runs {
        bare_turmoil(seed, per_run_requests.max(1), per_run_ms, 24);
    }
    let bare_rate = runs as f64 / start.elapsed().as_secs_f64();
    vec![
        figure(
            "simulator: default mix, runs per second (one core)",
            mix_rate,
            "runs/s",
            Some(bare_rate),
            Some(("≤ 1.5× bare turmoil cost (ratio ≥ 0.67)", 1.0 / 1.5)),
        ),
        figure("simulator: mixed scenario (one core)", mixed_rate, "runs/s", None, Some(("≥ 100 runs/s/core", 0.0))),
        figure("simulator: simulated / wall time", sim_ms as f64 / 1e3 / wall, "×", None, None),
    ]
}

/// A plain turmoil simulation: `requests` HTTP exchanges, `appends` simulated-fs
/// appends+fsyncs, `sim_ms` of simulated time, 10 ms tick (the scenarios' default).
pub fn bare_turmoil(seed: u64, requests: usize, sim_ms: u64, appends: usize) {
    use http_body_util::{BodyExt, Full};
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .tick_duration(Duration::from_millis(10))
        .simulation_duration(Duration::from_millis(sim_ms + 60_000))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(1))
        .build();
    sim.host("server", || async {
        let listener = turmoil::net::TcpListener::bind("0.0.0.0:80").await?;
        loop {
            let (stream, _) = listener.accept().await?;
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(bytes::Bytes::from_static(b"ok"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    sim.client("client", async move {
        for _ in 0..requests {
            let stream = turmoil::net::TcpStream::connect("server:80").await?;
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
            tokio::spawn(connection);
            let response = sender
                .send_request(hyper::Request::get("/").header("host", "server").body(Full::new(bytes::Bytes::new()))?)
                .await?;
            let _ = response.into_body().collect().await?;
        }
        turmoil::fs::shim::std::fs::create_dir_all("/data")?;
        let mut file = turmoil::fs::shim::std::fs::OpenOptions::new().create(true).append(true).open("/data/log")?;
        for _ in 0..appends {
            std::io::Write::write_all(&mut file, &[b'x'; 512])?;
            file.sync_all()?;
        }
        tokio::time::sleep(Duration::from_millis(sim_ms)).await;
        Ok(())
    });
    sim.run().expect("bare sim");
}

/// Runs every figure (`quick`: smaller sizes, same shapes).
pub fn run_all(quick: bool) -> BenchReport {
    let dir = tempfile_dir();
    let fsync_ms_p50 = fsync_latency(&dir);
    let mut figures = Vec::new();
    let scale = if quick { 1 } else { 4 };
    for (batch, batches) in [(1, 100 * scale), (16, 50 * scale), (256, 10 * scale)] {
        figures.extend(durable_append(&dir, batch, batches));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    figures.extend(runtime.block_on(write_behind(20_000 * scale)));
    figures.extend(recovery(&dir, if quick { 100_000 } else { 200_000 }));
    figures.extend(runtime.block_on(adapter(20_000 * scale)));
    figures.extend(simulator(if quick { 8 } else { 40 }));
    let _ = std::fs::remove_dir_all(&dir);
    BenchReport { cores: std::thread::available_parallelism().map_or(1, |n| n.get()), fsync_ms_p50, figures }
}

fn tempfile_dir() -> std::path::PathBuf {
    let seams = production::seams();
    let dir = std::env::temp_dir()
        .join(format!("faultline-bench-{}", faultline_runtime::EntropyExt::hex_id(seams.entropy.as_ref(), 8)));
    std::fs::create_dir_all(&dir).expect("bench dir");
    dir
}
