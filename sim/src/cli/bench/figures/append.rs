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
    let turns = (per_round * APPEND_ROUNDS).div_ceil(crate::cli::bench::mix::EVENTS_PER_TURN);
    let records: Vec<Record> =
        crate::cli::bench::mix::records(turns).into_iter().take(per_round * APPEND_ROUNDS).collect();
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
