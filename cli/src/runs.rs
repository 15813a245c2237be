//! `faultline scenarios`, `faultline run` and `faultline sweep`: the main job.

use crate::exit;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::report::junit::junit;
use faultline_sim::hunt::{hunt_with, plant};
use faultline_sim::sweep::{load, merge, sweep, SweepPlan, SweepSummary, DEFAULT_SEEDS};

use crate::progress::Progress;
use faultline_sim::{Scenario, BUILT_IN_SCENARIOS, REGRESSION_SCENARIOS};

/// Arguments of `faultline run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Scenario name (`faultline scenarios`).
    scenario: String,
    /// The seed (default 1).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the whole trace.
    #[arg(long)]
    trace: bool,
    /// Run the seed twice and report the first line where the traces diverge.
    #[arg(long)]
    check_determinism: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Plant a bug of the catalog first (builds with `--features planted-bugs`).
    #[arg(long)]
    bug: Vec<String>,
    /// Write the run as a self-contained HTML timeline here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Run it for real (real processes, files, sockets, SIGKILL) and compare the recovered
    /// transcript with the simulator's for the same seed.
    #[arg(long, conflicts_with_all = ["check_determinism", "html"])]
    real: bool,
    /// With `--real`: keep the working directory here (session, journal, each agent's stderr).
    #[arg(long, requires = "real")]
    keep: Option<PathBuf>,
    /// Run your agent file (`agent run`'s format) instead of the scenario's tools: its
    /// provider settings and `[agent]` knobs, a stand-in per tool from its `[tools.sim]`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["real", "bug"])]
    agent: Option<PathBuf>,
}

/// The agent file at `path`, its tools replaced by their stand-ins.
pub(crate) fn load_agent(path: &std::path::Path) -> Result<std::sync::Arc<faultline_sim::AgentUnderTest>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--agent {}: {e}", path.display()))?;
    faultline_sim::agent_from_file(&path.display().to_string(), &text)
        .map(std::sync::Arc::new)
        .map_err(|e| format!("--agent {}: {e}", path.display()))
}

/// Arguments of `faultline hunt`.
#[derive(Debug, Args)]
pub struct HuntArgs {
    /// The planted bug to hunt (see `faultline hunt --list`).
    #[arg(long, required_unless_present_any = ["list", "agent"])]
    bug: Option<String>,
    /// Hunt the first failing seed of your agent file (its generated conversation under
    /// every fault family), with `--bug` planted or without.
    #[arg(long, value_name = "FILE")]
    agent: Option<PathBuf>,
    /// Seeds per scenario to try before giving up (default 16 over every built-in scenario,
    /// 1000 with `--agent`, which hunts one generated scenario).
    #[arg(long)]
    budget_seeds: Option<u64>,
    /// List the catalog.
    #[arg(long)]
    list: bool,
}

/// Seeds per scenario `hunt` tries over the built-in scenarios unless told.
const HUNT_SEEDS_DEFAULT: u64 = 16;
/// Seeds `hunt --agent` tries (one scenario) unless told.
const HUNT_AGENT_SEEDS_DEFAULT: u64 = 1_000;

/// `faultline hunt`.
pub fn hunt(args: &HuntArgs) -> ExitCode {
    if args.list {
        for (name, what) in faultline_runtime::testing::bugs::CATALOG {
            println!("{name:<26} {what}");
        }
        return ExitCode::SUCCESS;
    }
    let agent = match args.agent.as_deref().map(load_agent).transpose() {
        Ok(agent) => agent,
        Err(e) => {
            eprintln!("faultline hunt: {e}");
            return exit::code(exit::USAGE);
        }
    };
    let bugs: Vec<String> = args.bug.iter().cloned().collect();
    let progress = Progress::new("runs", true);
    let budget =
        args.budget_seeds.unwrap_or(if agent.is_some() { HUNT_AGENT_SEEDS_DEFAULT } else { HUNT_SEEDS_DEFAULT });
    let caught = hunt_with(&bugs, budget, agent.as_ref(), |runs, most| progress.update(runs, most, 0));
    progress.finish();
    match caught {
        Err(e) => {
            eprintln!("faultline hunt: {e}");
            exit::code(exit::USAGE)
        }
        // Without a planted bug (your agent as it is), a failure is a finding and a clean
        // budget a pass; with one, catching it is the hunt's success.
        Ok(catch) if catch.bug.is_empty() => match &catch.replay {
            Some(replay) => {
                println!("failed after {} runs ({} seed(s)) in {} ms", catch.runs, catch.seeds, catch.wall_ms);
                println!("  violated {}", catch.invariant.clone().unwrap_or_default());
                println!("  replay: {replay}");
                exit::code(exit::FAILED)
            }
            None => {
                println!("no failure in {} runs ({} seeds)", catch.runs, catch.seeds);
                ExitCode::SUCCESS
            }
        },
        Ok(catch) => match &catch.replay {
            Some(replay) => {
                println!(
                    "caught {} after {} runs ({} seed(s) per scenario) in {} ms",
                    catch.bug, catch.runs, catch.seeds, catch.wall_ms
                );
                println!("  violated {}", catch.invariant.clone().unwrap_or_default());
                println!("  replay: {replay}");
                ExitCode::SUCCESS
            }
            None => {
                println!("NOT caught: {} survived {} runs ({} seeds per scenario)", catch.bug, catch.runs, catch.seeds);
                exit::code(exit::FAILED)
            }
        },
    }
}

/// Arguments of `faultline sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Only these scenarios (repeatable); default: all built-in scenarios.
    #[arg(long = "scenario")]
    scenarios: Vec<String>,
    /// Seed range `A..B` (B exclusive); default `0..4000`, or `0..10` with `--real`.
    #[arg(long)]
    seeds: Option<String>,
    /// Parallel runs (default: the number of CPUs).
    #[arg(long)]
    jobs: Option<usize>,
    /// Only shard K of N (1-based): split the (scenario, seed) space deterministically across
    /// CI machines.
    #[arg(long)]
    shard: Option<String>,
    /// Write a JUnit XML report here.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Write a self-contained HTML summary here (coverage grid, failures, the timeline of
    /// each scenario's first failing seed).
    #[arg(long)]
    html: Option<PathBuf>,
    /// Print one JSON object instead of the table (what `--merge` reads).
    #[arg(long)]
    json: bool,
    /// Run every parity-capable scenario for real (real processes, files, sockets, SIGKILL)
    /// and hold each run to the oracle and to parity with the simulator; sim-only scenarios
    /// are skipped with their reason.
    #[arg(long)]
    real: bool,
    /// Do not sweep: merge these `--json` outputs of shards into one report.
    #[arg(long, num_args = 1.., value_name = "SHARD_JSON", conflicts_with_all = ["scenarios", "seeds", "shard", "jobs", "real"])]
    merge: Vec<PathBuf>,
    /// Sweep your agent file (`agent run`'s format): a conversation over its tools drawn per
    /// seed under every fault family (the `generated` scenario), plus any `--scenario FILE`
    /// of yours; each tool's stand-in comes from its `[tools.sim]`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["real", "merge"])]
    agent: Option<PathBuf>,
}

/// Lists the scenarios.
pub fn list() -> ExitCode {
    for info in BUILT_IN_SCENARIOS {
        let scenario = Scenario::parse(info.text).expect("built-in scenarios parse");
        println!("{:<36} {}", scenario.name, scenario.description);
    }
    if !REGRESSION_SCENARIOS.is_empty() {
        println!("\nregressions (shrunk from failures; `faultline run NAME --seed SEED`):");
    }
    for info in REGRESSION_SCENARIOS {
        let scenario = Scenario::parse(info.text).expect("regression scenarios parse");
        let seed = scenario.regression.as_ref().map_or(0, |r| r.seed);
        println!("{:<36} seed {seed}: {}", scenario.name, scenario.description);
    }
    ExitCode::SUCCESS
}

/// Runs one seed.
pub fn run_one(args: &RunArgs) -> ExitCode {
    let scenario = match load(&args.scenario).and_then(|s| plant(&args.bug).map(|()| s)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("faultline run: {e}");
            return exit::code(exit::USAGE);
        }
    };
    if args.real {
        return crate::real_run::run_one(&scenario, args.seed, args.json, args.trace, args.keep.clone(), &args.bug);
    }
    let agent = match args.agent.as_deref().map(load_agent).transpose() {
        Ok(agent) => agent,
        Err(e) => {
            eprintln!("faultline run: {e}");
            return exit::code(exit::USAGE);
        }
    };
    let run = |scenario: &Scenario, seed| match &agent {
        Some(agent) => faultline_sim::run_agent(scenario, seed, agent),
        None => faultline_sim::run(scenario, seed),
    };
    let result = run(&scenario, args.seed);
    if let Some(path) = &args.html {
        if let Err(e) = std::fs::write(path, crate::report::html::run_page(&result)) {
            eprintln!("faultline run: --html {}: {e}", path.display());
            return exit::code(exit::USAGE);
        }
    }
    let divergence =
        args.check_determinism.then(|| divergence(&result.trace, &run(&scenario, args.seed).trace)).flatten();
    if args.json {
        let mut value = serde_json::to_value(&result).expect("results serialise");
        if !args.trace {
            value.as_object_mut().map(|o| o.remove("trace"));
        }
        value["passed"] = serde_json::json!(result.passed());
        value["deterministic"] = serde_json::json!(args.check_determinism.then_some(divergence.is_none()));
        println!("{value}");
    } else {
        print_run(args, &result, agent.as_deref(), divergence.as_deref());
    }
    if result.passed() && divergence.is_none() {
        ExitCode::SUCCESS
    } else {
        exit::code(exit::FAILED)
    }
}

/// Where a second run's trace first differs from the first's, if it does.
fn divergence(first: &[String], again: &[String]) -> Option<String> {
    if again == first {
        return None;
    }
    let line = first.iter().zip(again).position(|(a, b)| a != b).unwrap_or(first.len().min(again.len()));
    Some(format!(
        "traces diverge at line {line}: {:?} vs {:?}",
        first.get(line).cloned().unwrap_or_default(),
        again.get(line).cloned().unwrap_or_default()
    ))
}

/// A run for a person: the trace if asked, the verdict, each violation, and for an agent file
/// its stand-ins and what would have prevented each finding.
fn print_run(
    args: &RunArgs,
    result: &faultline_sim::RunResult,
    agent: Option<&faultline_sim::AgentUnderTest>,
    divergence: Option<&str>,
) {
    {
        if args.trace {
            for line in &result.trace {
                println!("{line}");
            }
        }
        let verdict = if result.passed() { "PASS" } else { "FAIL" };
        println!(
            "{verdict} {} seed {} trace {} ({} ms simulated)",
            result.scenario, result.seed, result.trace_hash, result.sim_ms
        );
        if let Some(agent) = &agent {
            for line in agent.stand_ins() {
                println!("  stand-in {line}");
            }
            for finding in faultline_sim::findings(result, agent) {
                println!("  violated {}: {}", finding.invariant, finding.evidence);
                println!("    advice: {}", finding.advice);
            }
        } else {
            for v in &result.violations {
                println!("  violated {}: {} (at {} ms)", v.invariant, v.detail, v.at_ms);
                println!("    advice: {}", v.advice);
            }
        }
        if let Some(slow) = &result.slow_recovery {
            println!("  slow recovery: {slow}");
        }
        if args.check_determinism {
            match divergence {
                None => println!("deterministic: the second run produced the same trace"),
                Some(d) => println!("NOT deterministic: {d}"),
            }
        }
    }
}

fn parse_range(text: Option<&str>) -> Result<std::ops::Range<u64>, String> {
    let Some(text) = text else { return Ok(0..DEFAULT_SEEDS) };
    let (a, b) = text.split_once("..").ok_or("--seeds takes A..B")?;
    let (a, b): (u64, u64) =
        (a.parse().map_err(|_| "--seeds: A is not a number")?, b.parse().map_err(|_| "--seeds: B is not a number")?);
    if a >= b {
        return Err("--seeds A..B needs A < B".into());
    }
    Ok(a..b)
}

fn parse_shard(text: Option<&str>) -> Result<(u64, u64), String> {
    let Some(text) = text else { return Ok((1, 1)) };
    let (k, n) = text.split_once('/').ok_or("--shard takes K/N")?;
    let (k, n): (u64, u64) =
        (k.parse().map_err(|_| "--shard: K is not a number")?, n.parse().map_err(|_| "--shard: N is not a number")?);
    if n == 0 || k == 0 || k > n {
        return Err("--shard K/N needs 1 <= K <= N".into());
    }
    Ok((k, n))
}

/// Seeds of a real sweep unless `--seeds` says: seeds 0..9, the parity bar.
const REAL_DEFAULT_SEEDS: u64 = 10;
// The `--seeds` help names both defaults.
const _: () = assert!(DEFAULT_SEEDS == 4_000 && REAL_DEFAULT_SEEDS == 10, "update the --seeds help");

/// Runs the sweep (or merges shard reports).
pub fn run(args: &SweepArgs) -> ExitCode {
    let bad = |e: String| {
        eprintln!("faultline sweep: {e}");
        exit::code(exit::USAGE)
    };
    let (summary, jobs) = if args.merge.is_empty() {
        match sweep_now(args) {
            Ok(done) => done,
            Err(e) => return bad(e),
        }
    } else {
        match merge_files(&args.merge) {
            Ok(summary) => (summary, 0),
            Err(e) => return bad(e),
        }
    };
    if let Some(path) = &args.junit {
        if let Err(e) = std::fs::write(path, junit(&summary)) {
            return bad(format!("--junit {}: {e}", path.display()));
        }
    }
    if let Some(path) = &args.html {
        if let Err(e) = std::fs::write(path, sweep_html(&summary)) {
            return bad(format!("--html {}: {e}", path.display()));
        }
    }
    if args.json {
        println!("{}", serde_json::to_string(&summary).expect("summaries serialise"));
    } else {
        print_table(&summary, jobs);
    }
    if !args.merge.is_empty() && !summary.complete() {
        eprintln!(
            "faultline sweep: the merged reports cover shards {:?} of {}: coverage is not judged",
            summary.shards_covered, summary.shards_total
        );
    }
    if summary.passed() {
        ExitCode::SUCCESS
    } else {
        exit::code(exit::FAILED)
    }
}

/// Runs the sweep the arguments describe, with progress on stderr.
fn sweep_now(args: &SweepArgs) -> Result<(SweepSummary, usize), String> {
    let agent = args.agent.as_deref().map(load_agent).transpose()?;
    let names: Vec<String> = match (&agent, args.scenarios.is_empty()) {
        // Your agent's tools are not the built-in scenarios' tools: the generated conversation
        // calls them, under every fault family.
        (Some(_), true) => vec![faultline_sim::GENERATED.to_owned()],
        (None, true) => BUILT_IN_SCENARIOS.iter().map(|s| s.name.to_owned()).collect(),
        (_, false) => args.scenarios.clone(),
    };
    let mut scenarios = names.iter().map(|name| load(name)).collect::<Result<Vec<_>, _>>()?;
    let real = if args.real {
        // A real run is a few processes and real time: sweep fewer seeds unless told.
        scenarios.retain(|s| match faultline_sim::real::cannot_run_here(s) {
            Some(why) => {
                eprintln!("skipped {}: {why}", s.name);
                false
            }
            None => true,
        });
        Some(crate::real_run::options(None, &[])?)
    } else {
        None
    };
    let seeds = match (&real, args.seeds.as_deref()) {
        (Some(_), None) => 0..REAL_DEFAULT_SEEDS,
        (_, text) => parse_range(text)?,
    };
    let (shard, shards) = parse_shard(args.shard.as_deref())?;
    let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let plan = SweepPlan {
        scenarios,
        seeds,
        shard,
        shards,
        jobs,
        want_junit: args.junit.is_some(),
        // Coverage of every declared site is the simulator's job: a real sweep leaves out the
        // sim-only scenarios.
        full: args.scenarios.is_empty() && real.is_none() && agent.is_none(),
        real,
        agent,
    };
    let progress = Progress::new("runs", !args.json);
    let report = sweep(&plan, |done, total, failed| progress.update(done, total, failed));
    progress.finish();
    Ok((SweepSummary::of(&report, &plan), plan.jobs.clamp(1, faultline_sim::sweep::SWEEP_JOBS_MAX)))
}

/// Reads and merges shard reports.
fn merge_files(paths: &[PathBuf]) -> Result<SweepSummary, String> {
    let mut shards = Vec::with_capacity(paths.len());
    for path in paths {
        let text = std::fs::read_to_string(path).map_err(|e| format!("--merge {}: {e}", path.display()))?;
        let summary: SweepSummary = serde_json::from_str(text.trim())
            .map_err(|e| format!("--merge {}: not a `faultline sweep --json` report: {e}", path.display()))?;
        shards.push(summary);
    }
    merge(&shards)
}

/// Timelines embedded in a sweep page: each failing scenario's first failing seed.
const SWEEP_TIMELINES_MAX: usize = 8;

fn sweep_html(summary: &SweepSummary) -> String {
    let mut shown = std::collections::BTreeSet::new();
    let mut timelines = Vec::new();
    for failure in &summary.failures {
        if timelines.len() >= SWEEP_TIMELINES_MAX || !shown.insert(failure.scenario.clone()) {
            continue;
        }
        // Runs are a function of (scenario, seed): re-running gives the failure back whole.
        if let Ok(scenario) = load(&failure.scenario) {
            timelines.push(faultline_sim::run(&scenario, failure.seed));
        }
    }
    crate::report::html::sweep_page(summary, &timelines)
}

fn print_table(summary: &SweepSummary, jobs: usize) {
    let mut out = std::io::stdout().lock();
    if summary.real {
        let _ = writeln!(
            out,
            "{:<36} {:>5} {:>8} {:>8} {:>12}",
            "scenario (real)", "runs", "failures", "parity", "clock s"
        );
        for (name, s) in &summary.scenarios {
            let parity = format!("{}/{}", s.runs - s.parity_differences, s.runs);
            let clock_s = s.sim_ms as f64 / 1000.0;
            let _ = writeln!(out, "{name:<36} {:>5} {:>8} {parity:>8} {clock_s:>12.1}", s.runs, s.failures);
        }
    } else {
        let _ = writeln!(out, "{:<36} {:>5} {:>8} {:>12}", "scenario", "runs", "failures", "sim time s");
        for (name, s) in &summary.scenarios {
            let name = name.as_str();
            let _ = writeln!(out, "{name:<36} {:>5} {:>8} {:>12.1}", s.runs, s.failures, s.sim_ms as f64 / 1000.0);
        }
    }
    let formats: Vec<String> =
        summary.formats.iter().map(|(name, s)| format!("{name} {} runs {} failures", s.runs, s.failures)).collect();
    let _ = writeln!(out, "wire formats: {}", formats.join(", "));
    print_coverage(&mut out, summary);
    if let Some(first) = summary.slow_recoveries.first() {
        let _ = writeln!(
            out,
            "slow recoveries (within each run's liveness bound): {} runs; the first: {first}",
            summary.slow_recovery_runs
        );
    }
    let wall_s = summary.wall_ms as f64 / 1000.0;
    let rate = if jobs > 0 {
        format!(", {:.0} runs/s on {jobs} jobs", summary.runs as f64 / wall_s.max(1e-9))
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{} runs, {} failures ({} no-liveness, {} safety), {:.1} s wall{rate} (shard {})",
        summary.runs,
        summary.failures.len(),
        summary.liveness_only_failures,
        summary.failures.len() - summary.liveness_only_failures,
        wall_s,
        summary.shard
    );
    if let Some(agent) = &summary.agent {
        let _ = writeln!(out, "agent {agent}:");
        for line in &summary.stand_ins {
            let _ = writeln!(out, "  stand-in {line}");
        }
    }
    for f in &summary.failures {
        let tools = if f.tools.is_empty() { String::new() } else { format!(" (tool {})", f.tools.join(", ")) };
        let _ = writeln!(out, "FAIL {} seed {}{tools}: replay with `{}`", f.scenario, f.seed, f.replay);
        for v in &f.violations {
            let _ = writeln!(out, "  violated {}: {}", v.invariant, v.detail);
            if !v.advice.is_empty() {
                let _ = writeln!(out, "    advice: {}", v.advice);
            }
        }
    }
}

/// What the sweep reached: crash points, fault families, sometimes conditions, the world
/// catalog, and every declared site it never reached.
fn print_coverage(out: &mut impl Write, summary: &SweepSummary) {
    let _ = writeln!(out, "crash points reached: {}", join(&summary.crash_point_hits));
    let _ = writeln!(out, "fault families fired (runs): {}", join(&summary.fault_families_fired));
    let _ = writeln!(out, "sometimes reached (runs): {}", join(&summary.sometimes_reached));
    let catalog_total = faultline_sim::catalog::ids().count();
    let catalog_reached = faultline_sim::catalog::ids().filter(|id| summary.catalog_reached.contains_key(*id)).count();
    let judged = faultline_sim::sweep::CATALOG_COVERAGE_SEEDS_MIN;
    let _ = writeln!(
        out,
        "world catalog entries reached: {catalog_reached} of {catalog_total}, drawn at random: judged from {judged} \
         seeds (docs/internals/world-catalog.md)"
    );
    for site in &summary.never_fired {
        let _ = writeln!(out, "COVERAGE: {site} never fired in this sweep");
    }
}

fn join(counts: &BTreeMap<String, u32>) -> String {
    if counts.is_empty() {
        return "none".into();
    }
    counts.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}
