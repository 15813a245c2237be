//! Durable append: the raw write+fsync baseline, each store's append and the write-behind
//! pipelines, interleaved by round.

use faultline_runtime::event::*;
use faultline_runtime::production::{self, SqliteStore};
use faultline_runtime::store::{FileStore, Format, SessionId, Store, WriteBehind, WriteBehindConfig};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use super::figure::*;

/// Median 4 KiB write+fsync latency, the floor under every durable append.
pub(super) fn fsync_latency(dir: &Path) -> f64 {
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

/// Rounds a durable-append figure is measured in. Each round runs the raw baseline and every
/// path over the same number of batches, in a rotating order, so a slow spell of the shared
/// disk hits every side; the figure is the median round.
pub(super) const APPEND_ROUNDS: usize = 5;

/// The sides of a durable-append round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AppendSide {
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
pub(super) fn durable_append(
    dir: &Path,
    batch: usize,
    batches: usize,
    runtime: &tokio::runtime::Runtime,
) -> Vec<Figure> {
    let per_round = batch * batches;
    let mut bench = AppendBench::new(dir, batch, per_round * APPEND_ROUNDS, runtime);
    let sides: Vec<AppendSide> = [AppendSide::Raw, AppendSide::Serial]
        .into_iter()
        .chain((0..bench.logs.len()).map(AppendSide::Direct))
        .chain((0..bench.pipelines.len()).map(AppendSide::Pipelined))
        .collect();
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
    for round in 0..APPEND_ROUNDS {
        let range = round * per_round..(round + 1) * per_round;
        let round_lines = round * batches..(round + 1) * batches;
        // Rotate who goes first each round: an fsync right after another file's fsync can
        // cost more, and that must not always land on the same side.
        for turn in 0..sides.len() {
            let i = (turn + round) % sides.len();
            let seconds = bench.time(sides[i], range.clone(), round_lines.clone(), runtime);
            rates[i].push(per_round as f64 / seconds);
        }
    }
    for pipeline in std::mem::take(&mut bench.pipelines) {
        runtime.block_on(pipeline.close()).expect("close");
    }
    let rate = |side: AppendSide| median(rates[sides.iter().position(|s| *s == side).expect("a side")].clone());
    append_figures(batch, &rate)
}

/// The direct stores' labels, in the order of `AppendSide::Direct`.
const DIRECT_LABELS: [&str; 3] = ["jsonl", "zstd", "sqlite"];

/// What every side of the append bench writes to, and the events and lines it writes.
struct AppendBench {
    batch: usize,
    records: Vec<Record>,
    /// The records' lines, a batch per entry.
    lines: Vec<Vec<u8>>,
    raw_file: std::fs::File,
    serial_file: std::fs::File,
    logs: Vec<Box<dyn faultline_runtime::store::SessionLog>>,
    pipelines: Vec<WriteBehind>,
    /// The serial side's encoding buffer.
    text: Vec<u8>,
}

impl AppendBench {
    fn new(dir: &Path, batch: usize, events: usize, runtime: &tokio::runtime::Runtime) -> AppendBench {
        let turns = events.div_ceil(crate::bench::mix::EVENTS_PER_TURN);
        let records: Vec<Record> = crate::bench::mix::records(turns).into_iter().take(events).collect();
        let lines = records
            .chunks(batch)
            .map(|chunk| chunk.iter().flat_map(|r| (r.encode() + "\n").into_bytes()).collect())
            .collect();
        let open = |name: &str| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(format!("{name}-{batch}")))
                .expect("file")
        };
        let id = SessionId::new("bench").expect("id");
        let logs =
            DIRECT_LABELS.iter().map(|label| direct_store(dir, label, batch).create(&id, 1).expect("create")).collect();
        let config = WriteBehindConfig { batch_window_ms: 1, pending_events_max: batch * 4, batch_events_max: batch };
        let pipelines = [Format::Jsonl, Format::Zstd]
            .into_iter()
            .enumerate()
            .map(|(i, format)| {
                let seams = production::seams();
                let store = FileStore::new(seams.clone(), dir.join(format!("wb-{}-{batch}", DIRECT_LABELS[i])), format);
                let log = store.create(&id, 1).expect("create");
                runtime.block_on(async { WriteBehind::start(log, seams.clock.clone(), config, None) })
            })
            .collect();
        let (raw_file, serial_file) = (open("raw"), open("serial"));
        AppendBench { batch, records, lines, raw_file, serial_file, logs, pipelines, text: Vec::new() }
    }

    /// Seconds `side` takes to make the records of `range` (the lines of `batches`) durable.
    fn time(
        &mut self,
        side: AppendSide,
        range: std::ops::Range<usize>,
        batches: std::ops::Range<usize>,
        runtime: &tokio::runtime::Runtime,
    ) -> f64 {
        // The events a pipelined side hands over, owned as a live producer owns them (built
        // outside the timing: the other sides borrow theirs).
        let owned: Vec<(Event, Option<Vec<u64>>)> = match side {
            AppendSide::Pipelined(_) => {
                self.records[range.clone()].iter().map(|r| (r.event.clone(), r.source_seqs.clone())).collect()
            }
            _ => Vec::new(),
        };
        let start = Instant::now();
        match side {
            AppendSide::Raw => {
                for bytes in &self.lines[batches] {
                    self.raw_file.write_all(bytes).expect("write");
                    self.raw_file.sync_all().expect("fsync");
                }
            }
            AppendSide::Serial => {
                for chunk in self.records[range].chunks(self.batch) {
                    self.text.clear();
                    for record in chunk {
                        serde_json::to_writer(&mut self.text, record).expect("encode");
                        self.text.push(b'\n');
                    }
                    self.serial_file.write_all(&self.text).expect("write");
                    self.serial_file.sync_all().expect("fsync");
                }
            }
            AppendSide::Direct(store) => {
                for chunk in self.records[range].chunks(self.batch) {
                    self.logs[store].append(chunk).expect("append");
                }
            }
            AppendSide::Pipelined(pipeline) => runtime.block_on(async {
                let wb = &self.pipelines[pipeline];
                for (event, source_seqs) in owned {
                    wb.append(event, source_seqs).await.expect("append");
                }
                wb.flush().await.expect("flush");
            }),
        }
        start.elapsed().as_secs_f64()
    }
}

/// The store a direct side appends to, in a directory of its own.
fn direct_store(dir: &Path, label: &str, batch: usize) -> Box<dyn Store> {
    let seams = production::seams();
    let root = dir.join(format!("{label}-{batch}"));
    match label {
        "jsonl" => Box::new(FileStore::new(seams, &root, Format::Jsonl)),
        "zstd" => Box::new(FileStore::new(seams, &root, Format::Zstd)),
        _ => {
            std::fs::create_dir_all(&root).expect("dir");
            Box::new(SqliteStore::open(root.join("s.sqlite"), seams.process.clone()).expect("sqlite"))
        }
    }
}

/// The figures of one batch size from each side's median rate.
fn append_figures(batch: usize, rate: &dyn Fn(AppendSide) -> f64) -> Vec<Figure> {
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
    for (i, label) in DIRECT_LABELS.iter().enumerate() {
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
