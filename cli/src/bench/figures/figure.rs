//! What every group of figures shares: a figure and the report, the ratio and target of a
//! figure, percentiles, a log of events to write, the bench's working directory.

use faultline_runtime::event::*;
use faultline_runtime::production;
use serde::Serialize;

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

pub(super) fn figure(name: &str, value: f64, unit: &str, baseline: Option<f64>, target: Option<(&str, f64)>) -> Figure {
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
pub(super) fn figure_at_most(name: &str, value: f64, unit: &str, (target, max): (&str, f64)) -> Figure {
    Figure {
        target: Some(target.to_owned()),
        meets_target: Some(value <= max),
        ..figure(name, value, unit, None, None)
    }
}

/// A figure held to an absolute floor on its value (not to a ratio).
pub(super) fn figure_at_least(
    name: &str,
    value: f64,
    unit: &str,
    baseline: Option<f64>,
    (target, min): (&str, f64),
) -> Figure {
    Figure {
        target: Some(target.to_owned()),
        meets_target: Some(value >= min),
        ..figure(name, value, unit, baseline, None)
    }
}

pub(super) fn percentile(samples: &mut [f64], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[((samples.len() - 1) as f64 * p).round() as usize]
}

/// Realistic events: user messages of 200–2 000 bytes of prose (compressing as transcripts
/// do, not 80-fold as a rotating alphabet does), a valid log (one open turn and step).
pub(super) fn events(count: usize) -> Vec<Record> {
    let mut records = vec![
        Record::new(0, 1, Event::TurnStart(TurnStart { turn: 1 })),
        Record::new(1, 1, Event::StepStart(StepRef { turn: 1, step: 1 })),
    ];
    for i in 2..count as u64 {
        let size = 200 + (i as usize * 977) % 1800;
        let text = crate::bench::mix::prose(i, size);
        records.push(Record::new(
            i,
            1_767_225_600_000 + i,
            Event::UserMessage(UserMessage { message: Message::user_text(text) }),
        ));
    }
    records
}

pub(super) fn median(mut samples: Vec<f64>) -> f64 {
    percentile(&mut samples, 0.5)
}

pub(super) fn tempfile_dir() -> std::path::PathBuf {
    let seams = production::seams();
    let dir = std::env::temp_dir()
        .join(format!("faultline-bench-{}", faultline_runtime::seams::EntropyExt::hex_id(seams.entropy.as_ref(), 8)));
    std::fs::create_dir_all(&dir).expect("bench dir");
    dir
}
