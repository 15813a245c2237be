//! `faultline bench`: throughput against the physical limit, each figure beside a baseline
//! measured in the same process right before it, reported as a ratio (shared, noisy machines
//! make absolute numbers meaningless across runs). The figures live in `figures/`; `mix.rs`
//! is the conversation the recovery and write-behind figures replay.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // measures wall time on real files

mod figures;
mod mix;

use std::process::ExitCode;

use clap::Args;

use figures::{run_all_with, GROUPS};

/// Arguments of `faultline bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Smaller sizes (under two minutes here), same shapes.
    #[arg(long)]
    quick: bool,
    /// One JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Only this group of figures (memory, append, write-behind, recovery, adapter, simulator,
    /// postgres).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(GROUPS))]
    only: Option<String>,
}

/// Runs the benchmarks.
pub fn run(args: &BenchArgs) -> ExitCode {
    let progress = crate::progress::Progress::new("figures", !args.json);
    // The memory figure measures this very binary's `transcript inspect` as a child process.
    let exe = std::env::current_exe().ok();
    let report = run_all_with(args.quick, args.only.as_deref(), exe.as_deref(), |phase| progress.phase(phase));
    progress.finish();
    if args.json {
        println!("{}", serde_json::to_string(&report).expect("reports serialise"));
        return ExitCode::SUCCESS;
    }
    println!("machine: {} cores, 4 KiB write+fsync p50 {:.2} ms", report.cores, report.fsync_ms_p50);
    println!("{:<58} {:>14} {:>14} {:>7}  target", "figure", "value", "baseline", "ratio");
    for f in &report.figures {
        let baseline =
            f.baseline.map_or("-".to_owned(), |b| if b < 100.0 { format!("{b:.1}") } else { format!("{b:.0}") });
        let ratio = f.ratio.map_or("-".to_owned(), |r| format!("{r:.2}"));
        let target = match (&f.target, f.meets_target) {
            (Some(t), Some(true)) => format!("{t}: holds"),
            (Some(t), Some(false)) => format!("{t}: MISSED"),
            (Some(t), None) => t.clone(),
            (None, _) => String::new(),
        };
        println!(
            "{:<58} {:>14} {:>14} {:>7}  {target}",
            f.name,
            format!("{:.1} {}", f.value, short(&f.unit)),
            baseline,
            ratio
        );
    }
    ExitCode::SUCCESS
}

fn short(unit: &str) -> &str {
    unit.split_whitespace().next().unwrap_or(unit)
}
