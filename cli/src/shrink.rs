//! `faultline shrink`: a failing run's fault plan and workload cut down to a small
//! regression scenario file that replays deterministically.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use faultline_sim::shrink::shrink_with;
use faultline_sim::sweep::{load, plant};

/// Arguments of `faultline shrink`.
#[derive(Debug, Args)]
pub struct ShrinkArgs {
    /// The failing scenario (a built-in name or a `.toml` file).
    scenario: String,
    /// The failing seed.
    #[arg(long)]
    seed: u64,
    /// Plant a bug of the catalog first (builds with `--features planted-bugs`).
    #[arg(long)]
    bug: Option<String>,
    /// The regression's name (default `<scenario>-<bug>-seed<N>`).
    #[arg(long)]
    name: Option<String>,
    /// Where to write it (default `scenarios/regressions/<name>.toml`).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// `faultline shrink`.
pub fn run(args: &ShrinkArgs) -> ExitCode {
    let bugs: Vec<String> = args.bug.iter().cloned().collect();
    let scenario = match load(&args.scenario).and_then(|s| plant(&bugs).map(|()| s)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("faultline shrink: {e}");
            return ExitCode::from(1);
        }
    };
    let progress = crate::progress::Progress::new("candidate runs", true);
    let shrunk = shrink_with(&scenario, args.seed, |runs, most| progress.update(runs, most, 0));
    progress.finish();
    let shrunk = match shrunk {
        Ok(shrunk) => shrunk,
        Err(e) => {
            eprintln!("faultline shrink: {e}");
            return ExitCode::from(1);
        }
    };
    let bug = args.bug.clone().unwrap_or_default();
    let name = args.name.clone().unwrap_or_else(|| {
        let tag = if bug.is_empty() { String::new() } else { format!("-{bug}") };
        format!("{}{tag}-seed{}", scenario.name, args.seed)
    });
    let regression = shrunk.regression(&name, &bug, args.seed, &scenario.name);
    let path = args.out.clone().unwrap_or_else(|| PathBuf::from(format!("scenarios/regressions/{name}.toml")));
    let text = format!("# {}\n{}", regression.description, regression.to_toml());
    if let Err(e) = std::fs::write(&path, text) {
        eprintln!("faultline shrink: writing {}: {e}", path.display());
        return ExitCode::from(1);
    }
    let with_bug = if bug.is_empty() { String::new() } else { format!(" --bug {bug}") };
    println!(
        "shrunk {} at seed {} ({}): faults {} -> {}, messages {} -> {}, in {} runs",
        scenario.name,
        args.seed,
        shrunk.invariant,
        shrunk.faults.0,
        shrunk.faults.1,
        shrunk.messages.0,
        shrunk.messages.1,
        shrunk.runs
    );
    println!("wrote {}", path.display());
    println!("replay: faultline run {} --seed {}{with_bug}", path.display(), args.seed);
    ExitCode::SUCCESS
}
