//! `faultline shrink`: a failing run's fault plan and workload cut down to a small
//! regression scenario file that replays deterministically.

use crate::exit;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use faultline_sim::hunt::plant;
use faultline_sim::shrink::shrink_agent_with;
use faultline_sim::sweep::load;

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
    /// Shrink a failing run of your agent file (`sweep --agent FILE` found it).
    #[arg(long, value_name = "FILE", conflicts_with = "bug")]
    agent: Option<PathBuf>,
}

/// `faultline shrink`.
pub fn run(args: &ShrinkArgs) -> ExitCode {
    let bugs: Vec<String> = args.bug.iter().cloned().collect();
    let scenario = match load(&args.scenario).and_then(|s| plant(&bugs).map(|()| s)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("faultline shrink: {e}");
            return exit::code(exit::USAGE);
        }
    };
    let agent = match args.agent.as_deref().map(crate::runs::load_agent).transpose() {
        Ok(agent) => agent,
        Err(e) => {
            eprintln!("faultline shrink: {e}");
            return exit::code(exit::USAGE);
        }
    };
    let progress = crate::progress::Progress::new("candidate runs", true);
    let shrunk = shrink_agent_with(&scenario, args.seed, agent.as_ref(), |runs, most| progress.update(runs, most, 0));
    progress.finish();
    let shrunk = match shrunk {
        Ok(shrunk) => shrunk,
        Err(e) => {
            eprintln!("faultline shrink: {e}");
            return exit::code(exit::USAGE);
        }
    };
    let bug = args.bug.clone().unwrap_or_default();
    let name = args.name.clone().unwrap_or_else(|| {
        let tag = if bug.is_empty() { String::new() } else { format!("-{bug}") };
        format!("{}{tag}-seed{}", scenario.name, args.seed)
    });
    let regression = shrunk.regression(&name, &bug, args.seed, &scenario.name);
    let path = match args.out.clone().map_or_else(|| regressions_dir().map(|dir| dir.join(format!("{name}.toml"))), Ok)
    {
        Ok(path) => path,
        Err(e) => {
            eprintln!("faultline shrink: {e}");
            return exit::code(exit::USAGE);
        }
    };
    let text = format!("# {}\n{}", regression.description, regression.to_toml());
    if let Err(e) = std::fs::write(&path, text) {
        eprintln!("faultline shrink: writing {}: {e}", path.display());
        return exit::code(exit::USAGE);
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
    let with_agent = args.agent.as_ref().map(|a| format!(" --agent {}", a.display())).unwrap_or_default();
    println!("replay: faultline run {} --seed {}{with_bug}{with_agent}", path.display(), args.seed);
    ExitCode::SUCCESS
}

/// Where regressions go without `--out`: the `scenarios/regressions` of the checkout this
/// binary was built from (so `shrink` works from any directory), else the one under the
/// current directory.
fn regressions_dir() -> Result<PathBuf, String> {
    let built_from = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/regressions");
    [built_from, PathBuf::from("scenarios/regressions")].into_iter().find(|dir| dir.is_dir()).ok_or_else(|| {
        "no scenarios/regressions directory here or in the checkout it was built from: pass --out PATH".into()
    })
}
