//! The measurements: one file per bench group, the figures and the run here.

mod adapter;
mod append;
mod memory;
mod postgres;
mod recovery;
mod simulator;
mod write_behind;

use faultline_runtime::event::*;
use faultline_runtime::production;
use serde::Serialize;
use std::path::Path;

use append::{durable_append, fsync_latency};
use memory::inspect_memory;
use recovery::{recovery, recovery_mix};
use simulator::simulator;

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

fn percentile(samples: &mut [f64], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[((samples.len() - 1) as f64 * p).round() as usize]
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
        let text = crate::cli::bench::mix::prose(i, size);
        records.push(Record::new(
            i,
            1_767_225_600_000 + i,
            Event::UserMessage(UserMessage { message: Message::user_text(text) }),
        ));
    }
    records
}

fn median(mut samples: Vec<f64>) -> f64 {
    percentile(&mut samples, 0.5)
}

/// The groups of figures, in the order they run (`faultline bench --only GROUP`).
pub const GROUPS: [&str; 7] = ["memory", "append", "write-behind", "recovery", "adapter", "simulator", "postgres"];

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
        figures.extend(runtime.block_on(write_behind::write_behind(&dir, 20_000 * scale)));
    }
    if wanted("recovery") {
        phase("recovery");
        figures.extend(recovery(&dir, if quick { 100_000 } else { 200_000 }));
        figures.extend(recovery_mix(&dir, 100_000 / crate::cli::bench::mix::EVENTS_PER_TURN));
    }
    if wanted("adapter") {
        phase("adapter");
        figures.extend(runtime.block_on(adapter::adapter(&dir, 20_000 * scale)));
    }
    if wanted("simulator") {
        phase("simulator");
        figures.extend(simulator(if quick { 8 } else { 40 }));
    }
    if wanted("postgres") {
        phase("postgres");
        figures.extend(postgres::postgres(&dir, scale));
    }
    let _ = std::fs::remove_dir_all(&dir);
    BenchReport { cores: std::thread::available_parallelism().map_or(1, |n| n.get()), fsync_ms_p50, figures }
}

fn tempfile_dir() -> std::path::PathBuf {
    let seams = production::seams();
    let dir = std::env::temp_dir()
        .join(format!("faultline-bench-{}", faultline_runtime::seams::EntropyExt::hex_id(seams.entropy.as_ref(), 8)));
    std::fs::create_dir_all(&dir).expect("bench dir");
    dir
}
