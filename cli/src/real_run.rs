//! `faultline run SCENARIO --real` and the hidden `faultline real-agent-host` it starts: the
//! same scenario with real processes, files, sockets and SIGKILL, then parity with the
//! simulator.

use crate::exit;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use faultline_sim::real::{self as host, FsFaultArm, HostArgs};
use faultline_sim::real::{self, Parity, RealOptions};
use faultline_sim::Scenario;

/// Arguments of the hidden `faultline real-agent-host` (one incarnation of a real run's agent;
/// the harness starts it).
#[derive(Debug, Args)]
pub struct AgentHostArgs {
    #[arg(long)]
    scenario_file: PathBuf,
    #[arg(long)]
    seed: u64,
    #[arg(long)]
    life: u64,
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    model_url: String,
    #[arg(long)]
    gateway: String,
    #[arg(long)]
    cancel_fired: bool,
    #[arg(long)]
    extra_refused: bool,
    /// Plant these bugs in this incarnation (a `planted-bugs` build).
    #[arg(long)]
    bug: Vec<String>,
}

/// `faultline real-agent-host`. The crash arming comes from the environment, which only this
/// binary reads: the library never arms a crash by default.
pub fn agent_host(args: &AgentHostArgs) -> ExitCode {
    if let Err(e) = faultline_sim::hunt::plant(&args.bug) {
        return bad(&e);
    }
    let armed = |var: &str| std::env::var(var).ok().filter(|v| !v.is_empty());
    let crash_at = match armed(host::CRASH_AT_VAR).map(|v| host::parse_crash_at(&v)).transpose() {
        Ok(c) => c,
        Err(e) => return bad(&e),
    };
    let fs_faults = match armed(host::FS_FAULT_VAR).map(|v| FsFaultArm::parse_all(&v)).transpose() {
        Ok(f) => f.unwrap_or_default(),
        Err(e) => return bad(&e),
    };
    let host = HostArgs {
        scenario_file: args.scenario_file.clone(),
        seed: args.seed,
        life: args.life,
        dir: args.dir.clone(),
        model_url: args.model_url.clone(),
        gateway: args.gateway.clone(),
        cancel_fired: args.cancel_fired,
        extra_refused: args.extra_refused,
        crash_at,
        fs_faults,
    };
    ExitCode::from(u8::try_from(host::agent_host(&host)).unwrap_or(1))
}

fn bad(e: &str) -> ExitCode {
    eprintln!("faultline real-agent-host: {e}");
    exit::code(exit::USAGE)
}

/// The `faultline` binary itself: the harness starts its agents from it, planting `bugs`.
pub fn options(keep: Option<PathBuf>, bugs: &[String]) -> Result<RealOptions, String> {
    let agent_exe = std::env::current_exe().map_err(|e| format!("finding the faultline binary: {e}"))?;
    Ok(RealOptions { agent_exe, keep, bugs: bugs.to_vec() })
}

/// `faultline run SCENARIO --seed N --real [--json] [--trace] [--keep DIR]`.
pub fn run_one(
    scenario: &Scenario,
    seed: u64,
    json: bool,
    trace: bool,
    keep: Option<PathBuf>,
    bugs: &[String],
) -> ExitCode {
    if let Some(why) = real::cannot_run_here(scenario) {
        eprintln!("faultline run --real: {} cannot run for real here: {why}", scenario.name);
        return exit::code(exit::USAGE);
    }
    let kept = keep.is_some();
    let (real, parity) = match options(keep, bugs).and_then(|options| real::run_and_compare(scenario, seed, &options)) {
        Ok(compared) => compared,
        Err(e) => {
            eprintln!("faultline run --real: {e}");
            return exit::code(exit::USAGE);
        }
    };
    let result = &real.result;
    let passed = result.passed() && parity.equal;
    if json {
        let mut value = serde_json::to_value(result).expect("results serialise");
        if !trace {
            value.as_object_mut().map(|o| o.remove("trace"));
        }
        value["passed"] = serde_json::json!(passed);
        value["parity"] = serde_json::to_value(&parity).expect("parity serialises");
        value["wall_ms"] = serde_json::json!(real.wall_ms);
        println!("{value}");
    } else {
        if trace {
            for line in &result.trace {
                println!("{line}");
            }
        }
        let verdict = if result.passed() { "PASS" } else { "FAIL" };
        println!(
            "{verdict} {} seed {} for real ({} ms wall, {} ms on the run's clock, time scale {})",
            result.scenario, result.seed, real.wall_ms, result.sim_ms, scenario.real.time_scale
        );
        for v in &result.violations {
            println!("  violated {}: {} (at {} ms)", v.invariant, v.detail, v.at_ms);
            println!("    advice: {}", v.advice);
        }
        print_parity(&parity);
        if kept {
            println!("  working directory (kept): {}", real.dir.display());
        } else {
            println!("  working directory: removed after the run (keep it with `--keep DIR`)");
        }
    }
    if passed {
        ExitCode::SUCCESS
    } else {
        exit::code(exit::FAILED)
    }
}

/// The parity verdict, with the first difference whole.
pub fn print_parity(parity: &Parity) {
    match &parity.first_difference {
        None if parity.equal => println!("  parity: equal to the simulator ({} records)", parity.real_records),
        None => println!("  parity: DIFFERS: refused (sim, real) = {:?}", parity.refused),
        Some(d) => {
            println!(
                "  parity: DIFFERS at record {} ({} records simulated, {} real)",
                d.index, parity.sim_records, parity.real_records
            );
            println!("    sim:  {}", d.sim.as_deref().unwrap_or("(no record)"));
            println!("    real: {}", d.real.as_deref().unwrap_or("(no record)"));
        }
    }
}
