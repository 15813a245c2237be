//! The measurements.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use faultline_runtime::event::*;
use faultline_runtime::llm::{chat_body, Adapter, ResolvedProvider, StaticCredentials};
use faultline_runtime::production::{self, SqliteStore};
use faultline_runtime::store::{FileStore, Format, Keep, NoEvidence, SessionId, Store, WriteBehind, WriteBehindConfig};
use faultline_runtime::testing::Assembler;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::model_server::{sse_body, Frame, Response};

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

/// A figure held to an absolute ceiling on its value.
fn figure_at_most(name: &str, value: f64, unit: &str, (target, max): (&str, f64)) -> Figure {
    Figure {
        target: Some(target.to_owned()),
        meets_target: Some(value <= max),
        ..figure(name, value, unit, None, None)
    }
}

/// A figure held to an absolute floor on its value (not to a ratio).
fn figure_at_least(name: &str, value: f64, unit: &str, baseline: Option<f64>, (target, min): (&str, f64)) -> Figure {
    Figure {
        target: Some(target.to_owned()),
        meets_target: Some(value >= min),
        ..figure(name, value, unit, baseline, None)
    }
}

/// Recovery on the turn mix (`mix.rs`), as `transcript inspect` does it (stream, scan, decode
/// on every core, validate, closers; nothing kept): against the fastest honest way to read the
/// same events, a typed decode of each line of the same bytes into a `Record` (no scan rule, no
/// validation, one thread), and held to 2 M events/s.
fn recovery_mix(dir: &Path, turns: usize) -> Vec<Figure> {
    let records = super::mix::records(turns);
    let mut out = Vec::new();
    for (label, format) in [("jsonl", Format::Jsonl), ("zstd", Format::Zstd)] {
        let seams = production::seams();
        let root = dir.join(format!("recovery-mix-{label}"));
        let store = FileStore::new(seams.clone(), &root, format);
        let id = SessionId::new("mix").expect("id");
        let mut log = store.create(&id, 1).expect("create");
        for chunk in records.chunks(256) {
            log.append(chunk).expect("append");
        }
        log.close().expect("close");
        let path = store.session_path(&id);
        let size = std::fs::metadata(&path).expect("size").len() as f64;
        let inspect = || {
            // As `transcript inspect` does it: stream the file, keep nothing.
            let start = Instant::now();
            let mut count = 0u64;
            let inspection = faultline_runtime::store::inspect_file_keeping(
                &seams,
                &path,
                &NoEvidence,
                Keep::Visit(&mut |_| count += 1),
            )
            .expect("inspect");
            let elapsed = start.elapsed().as_secs_f64();
            assert_eq!((inspection.record_count, count), (records.len() as u64, records.len() as u64));
            records.len() as f64 / elapsed
        };
        let typed = || typed_decode(&path, format, records.len(), Decoded::Dropped);
        let (mut base, mut ours) = (Vec::new(), Vec::new());
        for _ in 0..RECOVERY_ROUNDS {
            base.push(typed());
            ours.push(inspect());
        }
        let (base, ours) = (median(base), median(ours));
        out.push(figure_at_least(
            &format!("recovery mix {label}: inspect {} events", records.len()),
            ours,
            "events/s",
            Some(base),
            ("≥ 2 M events/s", 2e6),
        ));
        out.push(figure(
            &format!("  recovery mix {label}: bytes"),
            size * ours / records.len() as f64 / 1e6,
            "MB/s",
            None,
            None,
        ));
    }
    out
}

/// Interleaved rounds of each recovery figure (the median is reported).
const RECOVERY_ROUNDS: usize = 5;

/// What the typed-decode baseline does with each record it decodes: the same as the side it
/// is the baseline of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decoded {
    /// Dropped at once (`transcript inspect` keeps nothing).
    Dropped,
    /// Kept until the end (`inspect` of a store returns every record, so it pays for the
    /// memory they fill: on these VMs first-touching a few hundred MiB of fresh pages can
    /// cost more than the decoding, and a baseline that never touched them measured the
    /// VM's page faults, not the store — 0.35× on a run right after a build, 1.1× the next).
    Kept,
}

/// The fastest honest way to read the events of a session file: read (and decompress) the
/// file, check it is UTF-8 once, decode each line into a typed `Record`, nothing else (no
/// scan rule, no validation, one thread). Events per second.
fn typed_decode(path: &Path, format: Format, expected: usize, decoded: Decoded) -> f64 {
    let start = Instant::now();
    let bytes = std::fs::read(path).expect("read");
    let text = match format {
        Format::Jsonl => bytes,
        Format::Zstd => zstd_decode_all(&bytes),
        other => panic!("the typed-decode baseline reads no {other:?} file"),
    };
    // One UTF-8 check for the whole text, then each line read as text: the fastest way
    // serde_json offers (the recovery does the same per chunk).
    let text = std::str::from_utf8(&text).expect("UTF-8");
    let mut n = 0usize;
    let mut kept: Vec<Record> = Vec::new();
    for line in text.split('\n').skip(1).filter(|l| !l.is_empty()) {
        let record: Record = Record::decode(line).expect("record");
        if decoded == Decoded::Kept {
            kept.push(record);
        }
        n += 1;
    }
    assert_eq!(n, expected);
    let rate = n as f64 / start.elapsed().as_secs_f64();
    // Freed outside the timing, as the store's side frees its records outside its own.
    drop(kept);
    rate
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

/// Realistic events: user messages of 200–2 000 bytes of prose (compressing as transcripts
/// do, not 80-fold as a rotating alphabet does), a valid log (one open turn and step).
fn events(count: usize) -> Vec<Record> {
    let mut records = vec![
        Record::new(0, 1, Event::TurnStart(TurnStart { turn: 1 })),
        Record::new(1, 1, Event::StepStart(StepRef { turn: 1, step: 1 })),
    ];
    for i in 2..count as u64 {
        let size = 200 + (i as usize * 977) % 1800;
        let text = super::mix::prose(i, size);
        records.push(Record::new(
            i,
            1_767_225_600_000 + i,
            Event::UserMessage(UserMessage { message: Message::user_text(text) }),
        ));
    }
    records
}

/// Rounds a durable-append figure is measured in. Each round runs the raw baseline and every
/// path over the same number of batches, in a rotating order, so a slow spell of the shared
/// disk hits every side; the figure is the median round.
const APPEND_ROUNDS: usize = 5;

fn median(mut samples: Vec<f64>) -> f64 {
    percentile(&mut samples, 0.5)
}

/// The sides of a durable-append round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AppendSide {
    /// Write + fsync of the pre-encoded JSONL bytes, one fsync per batch: the baseline.
    Raw,
    /// Encode then write + fsync, one after the other, no store: the best a store that
    /// encodes at append can do (measured, not computed).
    Serial,
    /// `SessionLog::append` of each batch on a store.
    Direct(usize),
    /// The write-behind a live agent uses, batches of `batch` events: records encoded on the
    /// producer's side while the writer writes and fsyncs the batch before.
    Pipelined(usize),
}

/// Durable append at `batch` events per fsync, on the turn mix: the raw baseline, the serial
/// ceiling, each store's direct append, and the JSONL and zstd write-behind pipelines (held to
/// ≥ 0.9× raw), interleaved by round. Every side makes the same events durable with the same
/// number of fsyncs.
fn durable_append(dir: &Path, batch: usize, batches: usize, runtime: &tokio::runtime::Runtime) -> Vec<Figure> {
    let per_round = batch * batches;
    let turns = (per_round * APPEND_ROUNDS).div_ceil(super::mix::EVENTS_PER_TURN);
    let records: Vec<Record> = super::mix::records(turns).into_iter().take(per_round * APPEND_ROUNDS).collect();
    let lines: Vec<Vec<u8>> = records
        .chunks(batch)
        .map(|chunk| chunk.iter().flat_map(|r| (r.encode() + "\n").into_bytes()).collect())
        .collect();
    let open = |name: &str| {
        std::fs::OpenOptions::new().create(true).append(true).open(dir.join(format!("{name}-{batch}"))).expect("file")
    };
    let (mut raw_file, mut serial_file) = (open("raw"), open("serial"));
    let labels = ["jsonl", "zstd", "sqlite"];
    let id = SessionId::new("bench").expect("id");
    let stores: Vec<Box<dyn Store>> = labels
        .iter()
        .map(|label| {
            let seams = production::seams();
            let root = dir.join(format!("{label}-{batch}"));
            match *label {
                "jsonl" => Box::new(FileStore::new(seams, &root, Format::Jsonl)) as Box<dyn Store>,
                "zstd" => Box::new(FileStore::new(seams, &root, Format::Zstd)),
                _ => {
                    std::fs::create_dir_all(&root).expect("dir");
                    Box::new(SqliteStore::open(root.join("s.sqlite"), seams.process.clone()).expect("sqlite"))
                }
            }
        })
        .collect();
    let mut logs: Vec<_> = stores.iter().map(|store| store.create(&id, 1).expect("create")).collect();
    let config = WriteBehindConfig { batch_window_ms: 1, pending_events_max: batch * 4, batch_events_max: batch };
    let pipelines: Vec<WriteBehind> = [Format::Jsonl, Format::Zstd]
        .into_iter()
        .enumerate()
        .map(|(i, format)| {
            let seams = production::seams();
            let store = FileStore::new(seams.clone(), dir.join(format!("wb-{}-{batch}", labels[i])), format);
            let log = store.create(&id, 1).expect("create");
            runtime.block_on(async { WriteBehind::start(log, seams.clock.clone(), config, None) })
        })
        .collect();
    let sides: Vec<AppendSide> = [AppendSide::Raw, AppendSide::Serial]
        .into_iter()
        .chain((0..logs.len()).map(AppendSide::Direct))
        .chain((0..pipelines.len()).map(AppendSide::Pipelined))
        .collect();
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
    let mut text = Vec::new();
    for round in 0..APPEND_ROUNDS {
        let range = round * per_round..(round + 1) * per_round;
        let round_lines = &lines[round * batches..(round + 1) * batches];
        // Rotate who goes first each round: an fsync right after another file's fsync can
        // cost more, and that must not always land on the same side.
        for turn in 0..sides.len() {
            let i = (turn + round) % sides.len();
            // The events a pipelined side hands over, owned as a live producer owns them
            // (built outside the timing: the other sides borrow theirs).
            let owned: Vec<(Event, Option<Vec<u64>>)> = match sides[i] {
                AppendSide::Pipelined(_) => {
                    records[range.clone()].iter().map(|r| (r.event.clone(), r.source_seqs.clone())).collect()
                }
                _ => Vec::new(),
            };
            let start = Instant::now();
            match sides[i] {
                AppendSide::Raw => {
                    for bytes in round_lines {
                        raw_file.write_all(bytes).expect("write");
                        raw_file.sync_all().expect("fsync");
                    }
                }
                AppendSide::Serial => {
                    for chunk in records[range.clone()].chunks(batch) {
                        text.clear();
                        for record in chunk {
                            serde_json::to_writer(&mut text, record).expect("encode");
                            text.push(b'\n');
                        }
                        serial_file.write_all(&text).expect("write");
                        serial_file.sync_all().expect("fsync");
                    }
                }
                AppendSide::Direct(store) => {
                    for chunk in records[range.clone()].chunks(batch) {
                        logs[store].append(chunk).expect("append");
                    }
                }
                AppendSide::Pipelined(pipeline) => runtime.block_on(async {
                    let wb = &pipelines[pipeline];
                    for (event, source_seqs) in owned {
                        wb.append(event, source_seqs).await.expect("append");
                    }
                    wb.flush().await.expect("flush");
                }),
            }
            rates[i].push(per_round as f64 / start.elapsed().as_secs_f64());
        }
    }
    for pipeline in pipelines {
        runtime.block_on(pipeline.close()).expect("close");
    }
    let rate = |side: AppendSide| median(rates[sides.iter().position(|s| *s == side).expect("a side")].clone());
    let raw = rate(AppendSide::Raw);
    let mut out = Vec::new();
    for (i, label) in ["jsonl", "zstd"].iter().enumerate() {
        out.push(figure(
            &format!("durable append {label}, batch {batch} (write-behind)"),
            rate(AppendSide::Pipelined(i)),
            "events/s",
            Some(raw),
            Some(("≥ 0.9× raw", 0.9)),
        ));
    }
    for (i, label) in labels.iter().enumerate() {
        out.push(figure(
            &format!("  durable append {label}, batch {batch} (direct append)"),
            rate(AppendSide::Direct(i)),
            "events/s",
            Some(raw),
            None,
        ));
    }
    out.push(figure(
        &format!("  ceiling of a serial encode + write + fsync, batch {batch}"),
        rate(AppendSide::Serial),
        "events/s",
        Some(raw),
        None,
    ));
    out
}

/// Chunks a model paced producer emits per second (a fast model streams ~100 tokens/s; this
/// is a few dozen streams at once).
const MODEL_PACE_EVENTS_PER_S: u64 = 2_000;
/// Events of the paced phase.
const MODEL_PACE_EVENTS: usize = 400;
/// Events between two flush barriers at a model's pace.
const EVENTS_PER_FLUSH: usize = 50;
/// Events between two flush barriers flat out.
const FLAT_OUT_EVENTS_PER_FLUSH: usize = 1_000;

/// Write-behind under streaming load, onto a JSONL store on the real disk: a producer
/// appending `assistant/chunk` events first at a model's pace, then flat out with a flush
/// every 1 000. Reports the durable rate flat out (against the same events appended directly
/// in batches of 1 000: the same fsyncs, no write-behind), flush-barrier latency (fsync
/// included) in both phases, and the peak queue length (bounded).
async fn write_behind(dir: &Path, events_total: usize) -> Vec<Figure> {
    let seams = production::seams();
    // Turn 1, step 1, attempt 1: a text block opened once, then one delta per token.
    let chunk = |i: usize| {
        let chunk = if i == 0 {
            Chunk::BlockStart { index: 0, kind: BlockKind::Text }
        } else {
            Chunk::TextDelta { index: 0, text: format!("token{i} ") }
        };
        Event::AssistantChunk(AssistantChunk { turn: 1, step: 1, attempt: 1, chunk })
    };
    let prefix = [Event::TurnStart(TurnStart { turn: 1 }), Event::StepStart(StepRef { turn: 1, step: 1 })];
    // The baseline: the same chunk events appended durably in batches of 1 000 with no
    // write-behind, one fsync per batch, as many fsyncs as the flat-out phase's flushes.
    let batched_rate = {
        let store = FileStore::new(seams.clone(), dir.join("wb-direct"), Format::Jsonl);
        let mut log = store.create(&SessionId::new("direct").expect("id"), 1).expect("create");
        let records: Vec<Record> = prefix
            .iter()
            .cloned()
            .chain((0..events_total).map(chunk))
            .enumerate()
            .map(|(seq, event)| Record::new(seq as u64, 1, event))
            .collect();
        log.append(&records[..prefix.len()]).expect("append");
        let start = Instant::now();
        for batch in records[prefix.len()..].chunks(FLAT_OUT_EVENTS_PER_FLUSH) {
            log.append(batch).expect("append");
        }
        events_total as f64 / start.elapsed().as_secs_f64()
    };
    let store = FileStore::new(seams.clone(), dir.join("wb"), Format::Jsonl);
    let log = store.create(&SessionId::new("wb").expect("id"), 1).expect("create");
    let config = WriteBehindConfig { batch_window_ms: 200, pending_events_max: 4096, ..WriteBehindConfig::default() };
    let wb = WriteBehind::start(log, seams.clock.clone(), config, None);
    for event in prefix {
        wb.append(event, None).await.expect("append");
    }
    let mut peak = 0usize;
    let mut paced_flushes = Vec::new();
    let pace = Duration::from_micros(1_000_000 / MODEL_PACE_EVENTS_PER_S);
    for i in 0..MODEL_PACE_EVENTS {
        tokio::time::sleep(pace).await;
        wb.append(chunk(i), None).await.expect("append");
        peak = peak.max(wb.pending_len());
        if (i + 1) % EVENTS_PER_FLUSH == 0 {
            let t = Instant::now();
            wb.flush().await.expect("flush");
            paced_flushes.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let mut flushes = Vec::new();
    let start = Instant::now();
    for i in MODEL_PACE_EVENTS..MODEL_PACE_EVENTS + events_total {
        wb.append(chunk(i), None).await.expect("append");
        peak = peak.max(wb.pending_len());
        if (i + 1) % FLAT_OUT_EVENTS_PER_FLUSH == 0 {
            let t = Instant::now();
            wb.flush().await.expect("flush");
            flushes.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    wb.flush().await.expect("flush");
    // Durable, not merely accepted: the clock stops when the last flush returned.
    let rate = events_total as f64 / start.elapsed().as_secs_f64();
    wb.close().await.expect("close");
    vec![
        figure(
            "write-behind flat out, durable (JSONL on disk, flush per 1 000)",
            rate,
            "events/s",
            Some(batched_rate),
            None,
        ),
        figure(
            "write-behind flush latency p50, model pace",
            percentile(&mut paced_flushes.clone(), 0.5),
            "ms",
            None,
            None,
        ),
        figure("write-behind flush latency p99, model pace", percentile(&mut paced_flushes, 0.99), "ms", None, None),
        figure("write-behind flush latency p50, flat out", percentile(&mut flushes.clone(), 0.5), "ms", None, None),
        figure("write-behind flush latency p99, flat out", percentile(&mut flushes, 0.99), "ms", None, None),
        figure("write-behind peak queue", peak as f64, "events (bound 4096)", None, None),
    ]
}

/// Recovery: cold load + scan + validate (keeping every record) vs reading (and
/// decompressing) the same bytes and decoding each line into a typed `Record`, kept as the
/// store keeps them.
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
        let (mut typed, mut ours) = (Vec::new(), Vec::new());
        for _ in 0..RECOVERY_ROUNDS {
            typed.push(typed_decode(&path, format, records.len(), Decoded::Kept));
            let start = Instant::now();
            let inspection = store.inspect(&id).expect("inspect");
            ours.push(records.len() as f64 / start.elapsed().as_secs_f64());
            assert_eq!(inspection.records.len(), records.len());
        }
        let (raw, rate) = (median(typed), median(ours));
        let elapsed = records.len() as f64 / rate;
        out.push(figure(
            &format!("recovery {label}: load+scan+validate {count} events"),
            rate,
            "events/s",
            Some(raw),
            Some(("≥ 0.7× a typed decode", 0.7)),
        ));
        out.push(figure(&format!("recovery {label}: bytes"), size / elapsed / 1e6, "MB/s", None, None));
        // A torn tail: half a line (JSONL) or the start of a frame cut short (zstd; bytes that
        // are not a frame start would be corruption, not a tear).
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).expect("open");
        let tail: &[u8] = match format {
            Format::Jsonl => b"{\"type\":\"turn/end\",\"se",
            Format::Zstd => &[0x28, 0xB5, 0x2F],
            other => panic!("no torn tail known for {other:?}"),
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

/// Interleaved rounds of the adapter figure (the median round counts).
const ADAPTER_ROUNDS: usize = 5;

/// Adapter path (adapter + assembler + durable event append) vs a raw parse of the same SSE
/// bytes, in interleaved rounds.
///
/// Both sides read the same pre-rendered response from the same loopback server, which
/// writes it from memory in one go (no per-frame generation), so what differs is only what
/// each does with the bytes. The adapter side appends every chunk through the write-behind a
/// live agent uses onto a JSONL store on the real disk, and its clock stops when the log is
/// closed (every event durable), not when the last chunk was accepted.
async fn adapter(dir: &Path, chunks: usize) -> Vec<Figure> {
    let seams = production::seams();
    let frames: Vec<Frame> = (0..chunks).map(|i| Frame::Text(format!("token{i} "))).collect();
    let response = Response { frames, finish: Some("stop".into()), done: true, ..Response::default() };
    let addr = serve_fixed_sse(sse_body(0, &response)).await;
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
async fn serve_fixed_sse(sse: String) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Ok(n) = stream.read(&mut buf).await else { return };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request);
                    if let Some(head_end) = text.find("\r\n\r\n") {
                        let length = text[..head_end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                            })
                            .and_then(|v| v.parse::<usize>().ok())
                            .unwrap_or(0);
                        if request.len() >= head_end + 4 + length {
                            break;
                        }
                    }
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
struct RawChunk {
    #[allow(dead_code)] // decoded, as the adapter decodes it, never read
    choices: Vec<RawChoice>,
}

#[derive(serde::Deserialize)]
#[allow(dead_code)] // decoded, as the adapter decodes it, never read
struct RawChoice {
    delta: Option<RawDelta>,
    finish_reason: Option<String>,
}

#[derive(serde::Deserialize)]
#[allow(dead_code)] // decoded, as the adapter decodes it, never read
struct RawDelta {
    content: Option<String>,
}

/// The adapter's baseline: POSTs `body` to `addr` with a bare hyper client and decodes every
/// SSE `data:` payload into typed chunks. Returns events/s and the ms to the first event.
async fn raw_sse_client(addr: std::net::SocketAddr, body: &bytes::Bytes) -> (f64, f64) {
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

/// Simulator: runs/s per core for the default mix and `mixed`, simulated/wall time, and the
/// bare turmoil twin of every run, interleaved run by run (`twin.rs`): a plain turmoil sim
/// with the same topology, tick and simulated time replaying the run's recorded I/O — the same
/// connections with the same writes on each side, the same disk operations on the same paths
/// with the same sizes — and nothing above the seams. The first, byte-less twin (one `GET /`
/// answered `ok` per exchange, a 512-byte append per two disk operations) is measured beside
/// it, for comparison with the figures measured against it before 2026-12-02.
fn simulator(seeds: u64) -> Vec<Figure> {
    use crate::scenario::{Scenario, BUILT_IN_SCENARIOS};
    let scenarios: Vec<Scenario> =
        BUILT_IN_SCENARIOS.iter().map(|s| Scenario::parse(s.text).expect("scenario")).collect();
    let (mut runs, mut sim_ms) = (0u64, 0u64);
    let (mut wall, mut twin_wall, mut byte_less_wall) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    // Per scenario (run, twin): where the ratio is lost.
    let mut by_scenario = vec![(Duration::ZERO, Duration::ZERO); scenarios.len()];
    for seed in 0..seeds {
        for (i, scenario) in scenarios.iter().enumerate() {
            // The I/O to replay comes from a recorded run of the same seed (the same run: one
            // seed fixes it); the timed run records nothing.
            let (recorded, io) = crate::world::run_recorded(scenario, seed);
            let twin = super::twin::Twin { tick_ms: scenario.tick_ms, sim_ms: recorded.sim_ms, io: Arc::new(io) };
            let byte_less = BareWork {
                tick_ms: scenario.tick_ms,
                model_requests: recorded.model_requests,
                gateway_requests: recorded.gateway_requests,
                appends: (recorded.fs_ops / 2) as usize,
                sim_ms: recorded.sim_ms,
            };
            let timed_run = || {
                let start = Instant::now();
                let result = crate::world::run(scenario, seed);
                (start.elapsed(), result)
            };
            let timed_twin = || {
                let start = Instant::now();
                super::twin::replay(seed, &twin);
                start.elapsed()
            };
            // The side that goes first alternates run by run.
            let (took, result, twin_took) = if (seed + i as u64) % 2 == 0 {
                let (took, result) = timed_run();
                (took, result, timed_twin())
            } else {
                let twin_took = timed_twin();
                let (took, result) = timed_run();
                (took, result, twin_took)
            };
            assert_eq!(result.trace_hash, recorded.trace_hash, "a seed replays the same run");
            let start = Instant::now();
            bare_turmoil(seed, byte_less);
            byte_less_wall += start.elapsed();
            wall += took;
            twin_wall += twin_took;
            by_scenario[i].0 += took;
            by_scenario[i].1 += twin_took;
            runs += 1;
            sim_ms += result.sim_ms;
        }
    }
    let mix_rate = runs as f64 / wall.as_secs_f64();
    let twin_rate = runs as f64 / twin_wall.as_secs_f64();
    let byte_less_rate = runs as f64 / byte_less_wall.as_secs_f64();
    let mixed = Scenario::built_in("mixed").expect("mixed");
    let start = Instant::now();
    for seed in 0..seeds * 4 {
        crate::world::run(&mixed, seed);
    }
    let mixed_rate = (seeds * 4) as f64 / start.elapsed().as_secs_f64();
    let mut costliest: Vec<(usize, Duration, Duration)> =
        by_scenario.iter().enumerate().map(|(i, &(run, twin))| (i, run, twin)).collect();
    costliest.sort_by_key(|&(_, run, twin)| std::cmp::Reverse(run.saturating_sub(twin)));
    let mut figures = vec![
        figure(
            "simulator: default mix, runs per second (one core)",
            mix_rate,
            "runs/s",
            Some(twin_rate),
            Some(("≤ 1.5× its bare turmoil twin (ratio ≥ 0.67)", 1.0 / 1.5)),
        ),
        figure(
            "  against the byte-less twin of 055b8a5 (counts only, no bytes)",
            mix_rate,
            "runs/s",
            Some(byte_less_rate),
            None,
        ),
        figure_at_least(
            "simulator: mixed scenario (one core)",
            mixed_rate,
            "runs/s",
            None,
            ("≥ 100 runs/s/core", 100.0),
        ),
        figure("simulator: simulated / wall time", sim_ms as f64 / 1e3 / wall.as_secs_f64(), "×", None, None),
    ];
    // The scenarios whose runs cost the most beyond their twins, and their share of the whole
    // mix's excess: where a cut moves the ratio.
    let excess = wall.saturating_sub(twin_wall).as_secs_f64().max(f64::MIN_POSITIVE);
    for &(i, run, twin) in costliest.iter().take(SIMULATOR_COSTLIEST_SHOWN) {
        let share = run.saturating_sub(twin).as_secs_f64() / excess * 100.0;
        figures.push(figure(
            &format!("  {} ({share:.0} % of the excess)", scenarios[i].name),
            seeds as f64 / run.as_secs_f64(),
            "runs/s",
            Some(seeds as f64 / twin.as_secs_f64()),
            None,
        ));
    }
    figures
}

/// How many scenarios the simulator group names as costliest beyond their twins.
const SIMULATOR_COSTLIEST_SHOWN: usize = 6;

/// The work of one scenario run, for the byte-less twin: counts only.
#[derive(Debug, Clone, Copy)]
pub struct BareWork {
    /// The scenario's tick.
    pub tick_ms: u64,
    /// HTTP exchanges with the model host.
    pub model_requests: usize,
    /// HTTP exchanges with the gateway host.
    pub gateway_requests: usize,
    /// Simulated-fs appends, each followed by an fsync.
    pub appends: usize,
    /// Simulated time the run lasts.
    pub sim_ms: u64,
}

/// The byte-less twin (the bench's baseline until 2026-12-02): a plain turmoil simulation
/// with the scenario's topology (an `agent` client, `model` and `gateway` hyper servers)
/// doing `work` — as many exchanges (`GET /` answered `ok`), a 512-byte append and fsync per
/// two disk operations, the same tick and simulated time — and nothing else.
pub fn bare_turmoil(seed: u64, work: BareWork) {
    use http_body_util::{BodyExt, Full};
    let mut sim = super::twin::twin_sim(seed, work.tick_ms, work.sim_ms);
    for server in ["model", "gateway"] {
        sim.host(server, || async {
            let listener = turmoil::net::TcpListener::bind("0.0.0.0:80").await?;
            loop {
                let (stream, _) = listener.accept().await?;
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|_req| async {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(bytes::Bytes::from_static(
                            b"ok",
                        ))))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    }
    sim.client("agent", async move {
        let targets = std::iter::repeat_n("model", work.model_requests)
            .chain(std::iter::repeat_n("gateway", work.gateway_requests));
        for target in targets {
            let stream = turmoil::net::TcpStream::connect((target, 80)).await?;
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
            tokio::spawn(connection);
            let response = sender
                .send_request(hyper::Request::get("/").header("host", target).body(Full::new(bytes::Bytes::new()))?)
                .await?;
            let _ = response.into_body().collect().await?;
        }
        turmoil::fs::shim::std::fs::create_dir_all("/data")?;
        let mut file = turmoil::fs::shim::std::fs::OpenOptions::new().create(true).append(true).open("/data/log")?;
        for _ in 0..work.appends {
            std::io::Write::write_all(&mut file, &[b'x'; 512])?;
            file.sync_all()?;
        }
        let elapsed = turmoil::sim_elapsed().unwrap_or_default();
        tokio::time::sleep(Duration::from_millis(work.sim_ms).saturating_sub(elapsed)).await;
        Ok(())
    });
    sim.run().expect("bare sim");
}

/// The groups of figures, in the order they run (`faultline bench --only GROUP`).
pub const GROUPS: [&str; 6] = ["memory", "append", "write-behind", "recovery", "adapter", "simulator"];

/// Runs every figure (`quick`: smaller sizes, same shapes); `exe` is the `faultline` binary
/// whose `transcript inspect` the memory figure measures (skipped without one).
pub fn run_all(quick: bool, exe: Option<&Path>) -> BenchReport {
    run_all_with(quick, None, exe, |_| {})
}

/// [`run_all`], only the group `only` if given, calling `phase(name)` as each group starts.
pub fn run_all_with(quick: bool, only: Option<&str>, exe: Option<&Path>, phase: impl Fn(&str)) -> BenchReport {
    let dir = tempfile_dir();
    let wanted = |group: &str| only.is_none_or(|o| o == group);
    phase("fsync latency");
    let fsync_ms_p50 = fsync_latency(&dir);
    let mut figures = Vec::new();
    let scale = if quick { 1 } else { 4 };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    // Memory first: the kernel starts a spawned child's peak RSS from its parent's peak at
    // the spawn (the child shares the parent's pages until it execs), so the figure is only
    // the child's own while this process is still small.
    if let (true, Some(exe)) = (wanted("memory"), exe) {
        phase("memory of transcript inspect");
        figures.extend(inspect_memory(&dir, exe, if quick { 256 } else { 1024 } << 20));
    }
    if wanted("append") {
        phase("durable append");
        for (batch, batches) in [(1, 500 * scale), (16, 300 * scale), (256, 100 * scale)] {
            figures.extend(durable_append(&dir, batch, batches, &runtime));
        }
    }
    if wanted("write-behind") {
        phase("write-behind");
        figures.extend(runtime.block_on(write_behind(&dir, 20_000 * scale)));
    }
    if wanted("recovery") {
        phase("recovery");
        figures.extend(recovery(&dir, if quick { 100_000 } else { 200_000 }));
        figures.extend(recovery_mix(&dir, 100_000 / super::mix::EVENTS_PER_TURN));
    }
    if wanted("adapter") {
        phase("adapter");
        figures.extend(runtime.block_on(adapter(&dir, 20_000 * scale)));
    }
    if wanted("simulator") {
        phase("simulator");
        figures.extend(simulator(if quick { 8 } else { 40 }));
    }
    let _ = std::fs::remove_dir_all(&dir);
    BenchReport { cores: std::thread::available_parallelism().map_or(1, |n| n.get()), fsync_ms_p50, figures }
}

/// Peak memory of `faultline transcript inspect` on a JSONL transcript of about `bytes` bytes
/// (the turn mix, written line by line): measured as the child process's maximum resident set
/// by the kernel, held to 64 MiB plus the largest record.
fn inspect_memory(dir: &Path, exe: &Path, bytes: u64) -> Vec<Figure> {
    let session = dir.join("big").join("session.jsonl");
    std::fs::create_dir_all(session.parent().expect("a directory")).expect("dir");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&session).expect("file"));
    let header = faultline_runtime::event::SessionHeader::new("big", 1);
    writeln!(file, "{}", header.encode()).expect("write");
    let (mut written, mut seq, mut t, mut largest) = (0u64, 0u64, 0u64, 0usize);
    while written < bytes {
        for record in super::mix::turn(t, seq) {
            let line = record.encode();
            largest = largest.max(line.len());
            written += line.len() as u64 + 1;
            writeln!(file, "{line}").expect("write");
        }
        seq += super::mix::EVENTS_PER_TURN as u64;
        t += 1;
    }
    file.flush().expect("flush");
    drop(file);
    let start = Instant::now();
    let output = std::process::Command::new(exe)
        .args(["transcript", "inspect", "--json"])
        .arg(&session)
        .output()
        .expect("transcript inspect");
    let elapsed = start.elapsed().as_secs_f64();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let verdict: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(verdict["records"], seq, "every record inspected");
    // The largest resident set of any child waited for: this one (the bench starts no other).
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    let peak_mib = usage.max_rss() as f64 / 1024.0;
    // An upper bound on how much of that peak the child inherited from this process.
    let own = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).expect("getrusage");
    let inherited_mib = own.max_rss() as f64 / 1024.0;
    let bound = 64.0 + largest as f64 / (1024.0 * 1024.0);
    let _ = std::fs::remove_file(&session);
    vec![
        figure_at_most(
            &format!("transcript inspect of {} MiB: peak memory", bytes >> 20),
            peak_mib,
            "MiB",
            ("≤ 64 MiB + the largest record", bound),
        ),
        figure("  of which at most inherited from the bench process at spawn", inherited_mib, "MiB", None, None),
        figure(
            &format!("  transcript inspect of {} MiB: events/s, whole process", bytes >> 20),
            seq as f64 / elapsed,
            "events/s",
            None,
            None,
        ),
    ]
}

fn tempfile_dir() -> std::path::PathBuf {
    let seams = production::seams();
    let dir = std::env::temp_dir()
        .join(format!("faultline-bench-{}", faultline_runtime::seams::EntropyExt::hex_id(seams.entropy.as_ref(), 8)));
    std::fs::create_dir_all(&dir).expect("bench dir");
    dir
}
