//! `faultline sweep` and `faultline scenarios`.

use std::process::ExitCode;

use clap::Args;

use crate::scenario::BUILT_IN_SCENARIOS;

/// Arguments of `faultline sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Only these scenarios (repeatable); default: all built-in scenarios.
    #[arg(long = "scenario")]
    scenarios: Vec<String>,
}

/// Runs the sweep.
pub fn run(args: &SweepArgs) -> ExitCode {
    for name in &args.scenarios {
        if !BUILT_IN_SCENARIOS.iter().any(|s| s.name == name) {
            eprintln!("faultline sweep: unknown scenario {name:?} (see `faultline scenarios`)");
            return ExitCode::from(1);
        }
    }
    if BUILT_IN_SCENARIOS.is_empty() {
        println!("faultline sweep: no scenarios yet (0 runs, 0 failures)");
    }
    ExitCode::SUCCESS
}

/// Lists the scenarios.
pub fn list() -> ExitCode {
    if BUILT_IN_SCENARIOS.is_empty() {
        println!("no scenarios yet");
    }
    for scenario in BUILT_IN_SCENARIOS {
        println!("{:<24} {}", scenario.name, scenario.description);
    }
    ExitCode::SUCCESS
}
