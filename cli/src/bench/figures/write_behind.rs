//! Write-behind under streaming load: a model's pace, then flat out, with flush barriers.

use faultline_runtime::event::*;
use faultline_runtime::production;
use faultline_runtime::store::{FileStore, Format, SessionId, Store, WriteBehind, WriteBehindConfig};
use std::path::Path;
use std::time::{Duration, Instant};

use super::figure::*;

/// Chunks a model paced producer emits per second (a fast model streams ~100 tokens/s; this
/// is a few dozen streams at once).
pub(super) const MODEL_PACE_EVENTS_PER_S: u64 = 2_000;
/// Events of the paced phase.
pub(super) const MODEL_PACE_EVENTS: usize = 400;
/// Events between two flush barriers at a model's pace.
pub(super) const EVENTS_PER_FLUSH: usize = 50;
/// Events between two flush barriers flat out.
pub(super) const FLAT_OUT_EVENTS_PER_FLUSH: usize = 1_000;

/// Write-behind under streaming load, onto a JSONL store on the real disk: a producer
/// appending `assistant/chunk` events first at a model's pace, then flat out with a flush
/// every 1 000. Reports the durable rate flat out (against the same events appended directly
/// in batches of 1 000: the same fsyncs, no write-behind), flush-barrier latency (fsync
/// included) in both phases, and the peak queue length (bounded).
pub(super) async fn write_behind(dir: &Path, events_total: usize) -> Vec<Figure> {
    let seams = production::seams();
    let prefix = [Event::TurnStart(TurnStart { turn: 1 }), Event::StepStart(StepRef { turn: 1, step: 1 })];
    let batched_rate = batched_rate(dir, &prefix, events_total);
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
    latency_figures(rate, batched_rate, paced_flushes, flushes, peak)
}

/// Turn 1, step 1, attempt 1: a text block opened once, then one delta per token.
fn chunk(i: usize) -> Event {
    let chunk = if i == 0 {
        Chunk::BlockStart { index: 0, kind: BlockKind::Text }
    } else {
        Chunk::TextDelta { index: 0, text: format!("token{i} ") }
    };
    Event::AssistantChunk(AssistantChunk { turn: 1, step: 1, attempt: 1, chunk })
}

/// The baseline: the same chunk events appended durably in batches of 1 000 with no
/// write-behind, one fsync per batch, as many fsyncs as the flat-out phase's flushes.
fn batched_rate(dir: &Path, prefix: &[Event], events_total: usize) -> f64 {
    let store = FileStore::new(production::seams(), dir.join("wb-direct"), Format::Jsonl);
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
}

/// The rate against its baseline, the flush latencies of both phases, the peak queue.
fn latency_figures(
    rate: f64,
    batched_rate: f64,
    mut paced_flushes: Vec<f64>,
    mut flushes: Vec<f64>,
    peak: usize,
) -> Vec<Figure> {
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
