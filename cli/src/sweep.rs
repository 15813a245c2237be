//! `faultline scenarios`, `faultline run` and `faultline sweep`: the main job.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;

use faultline_sim::sweep::{hunt_bug, load, plant, replay, sweep, SweepPlan, SweepReport, DEFAULT_SEEDS};
use faultline_sim::world;
use faultline_sim::{Scenario, BUILT_IN_SCENARIOS, REGRESSION_SCENARIOS};

/// Arguments of `faultline run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Scenario name (`faultline scenarios`).
    scenario: String,
    /// The seed.
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
}

/// Arguments of `faultline hunt`.
#[derive(Debug, Args)]
pub struct HuntArgs {
    /// The planted bug to hunt (see `faultline hunt --list`).
    #[arg(long, required_unless_present = "list")]
    bug: Option<String>,
    /// Seeds per scenario to try before giving up.
    #[arg(long, default_value_t = 16)]
    budget_seeds: u64,
    /// List the catalog.
    #[arg(long)]
    list: bool,
}

/// `faultline hunt`.
pub fn hunt(args: &HuntArgs) -> ExitCode {
    if args.list {
        for (name, what) in faultline_runtime::testing::bugs::CATALOG {
            println!("{name:<26} {what}");
        }
        return ExitCode::SUCCESS;
    }
    let bug = args.bug.clone().expect("clap requires --bug without --list");
    match hunt_bug(&[bug], args.budget_seeds) {
        Err(e) => {
            eprintln!("faultline hunt: {e}");
            ExitCode::from(1)
        }
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
                ExitCode::from(1)
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
    /// Seed range `A..B` (B exclusive); default `0..4000`.
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
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
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
            return ExitCode::from(1);
        }
    };
    let result = world::run(&scenario, args.seed);
    let mut divergence = None;
    if args.check_determinism {
        let again = world::run(&scenario, args.seed);
        if again.trace != result.trace {
            let line = result
                .trace
                .iter()
                .zip(&again.trace)
                .position(|(a, b)| a != b)
                .unwrap_or(result.trace.len().min(again.trace.len()));
            divergence = Some(format!(
                "traces diverge at line {line}: {:?} vs {:?}",
                result.trace.get(line).cloned().unwrap_or_default(),
                again.trace.get(line).cloned().unwrap_or_default()
            ));
        }
    }
    if args.json {
        let mut value = serde_json::to_value(&result).expect("results serialise");
        if !args.trace {
            value.as_object_mut().map(|o| o.remove("trace"));
        }
        value["passed"] = serde_json::json!(result.passed());
        value["deterministic"] = serde_json::json!(args.check_determinism.then_some(divergence.is_none()));
        println!("{value}");
    } else {
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
        for v in &result.violations {
            println!("  violated {}: {} (at {} ms)", v.invariant, v.detail, v.at_ms);
        }
        if args.check_determinism {
            match &divergence {
                None => println!("deterministic: the second run produced the same trace"),
                Some(d) => println!("NOT deterministic: {d}"),
            }
        }
    }
    if result.passed() && divergence.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
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

/// Runs the sweep.
pub fn run(args: &SweepArgs) -> ExitCode {
    let bad = |e: String| {
        eprintln!("faultline sweep: {e}");
        ExitCode::from(1)
    };
    let names: Vec<String> = if args.scenarios.is_empty() {
        BUILT_IN_SCENARIOS.iter().map(|s| s.name.to_owned()).collect()
    } else {
        args.scenarios.clone()
    };
    let mut scenarios = Vec::new();
    for name in &names {
        match load(name) {
            Ok(s) => scenarios.push(s),
            Err(e) => return bad(e),
        }
    }
    let seeds = match parse_range(args.seeds.as_deref()) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let (shard, shards) = match parse_shard(args.shard.as_deref()) {
        Ok(s) => s,
        Err(e) => return bad(e),
    };
    let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let plan = SweepPlan {
        scenarios,
        seeds,
        shard,
        shards,
        jobs,
        want_junit: args.junit.is_some(),
        full: args.scenarios.is_empty(),
    };
    let started = Instant::now();
    let report = sweep(&plan, |done, total| {
        if !args.json && (done % (total / 10).max(1) == 0 || done == total) {
            eprintln!("progress: {done}/{total} runs ({:.1} s)", started.elapsed().as_secs_f64());
        }
    });
    let SweepReport {
        per_scenario,
        crash_points,
        families,
        sometimes,
        liveness_only,
        failures,
        junit,
        runs,
        never_fired,
        wall,
    } = &report;
    let jobs = plan.jobs.clamp(1, faultline_sim::sweep::SWEEP_JOBS_MAX);
    if let Some(path) = &args.junit {
        if let Err(e) = write_junit(path, junit, failures.len()) {
            return bad(format!("--junit {}: {e}", path.display()));
        }
    }
    if args.json {
        let value = serde_json::json!({
            "runs": runs,
            "failures": failures.iter().map(|r| serde_json::json!({"scenario": r.scenario, "seed": r.seed, "violations": r.violations, "replay": replay(r)})).collect::<Vec<_>>(),
            "scenarios": per_scenario,
            "crash_point_hits": crash_points,
            "fault_families_fired": families,
            "sometimes_reached": sometimes,
            "liveness_only_failures": liveness_only,
            "never_fired": never_fired,
            "wall_ms": wall.as_millis() as u64,
            "shard": format!("{shard}/{shards}"),
        });
        println!("{value}");
    } else {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{:<36} {:>5} {:>8} {:>12}", "scenario", "runs", "failures", "sim time s");
        for (name, s) in per_scenario {
            let name = name.as_str();
            let _ = writeln!(out, "{name:<36} {:>5} {:>8} {:>12.1}", s.runs, s.failures, s.sim_ms as f64 / 1000.0);
        }
        let _ = writeln!(out, "crash points reached: {}", join(crash_points));
        let _ = writeln!(out, "fault families fired (runs): {}", join(families));
        let _ = writeln!(out, "sometimes reached (runs): {}", join(sometimes));
        for site in never_fired {
            let _ = writeln!(out, "COVERAGE: {site} never fired in this sweep");
        }
        let _ = writeln!(
            out,
            "{} runs, {} failures ({} no-liveness, {} safety), {:.1} s wall, {:.0} runs/s on {jobs} jobs (shard {shard}/{shards})",
            runs,
            failures.len(),
            liveness_only,
            failures.len() - liveness_only,
            wall.as_secs_f64(),
            *runs as f64 / wall.as_secs_f64().max(1e-9)
        );
        for f in failures {
            let _ = writeln!(out, "FAIL {} seed {}: replay with `{}`", f.scenario, f.seed, replay(f));
            for v in &f.violations {
                let _ = writeln!(out, "  violated {}: {}", v.invariant, v.detail);
            }
        }
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn join(counts: &BTreeMap<String, u32>) -> String {
    if counts.is_empty() {
        return "none".into();
    }
    counts.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn write_junit(path: &PathBuf, runs: &[(String, u64, Option<String>)], failures: usize) -> std::io::Result<()> {
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"faultline sweep\" tests=\"{}\" failures=\"{failures}\">\n",
        runs.len()
    );
    let mut sorted: Vec<&(String, u64, Option<String>)> = runs.iter().collect();
    sorted.sort_by(|a, b| (a.0.as_str(), a.1).cmp(&(b.0.as_str(), b.1)));
    for (scenario, seed, failure) in sorted {
        xml.push_str(&format!("  <testcase classname=\"{}\" name=\"seed {seed}\" time=\"0\">", xml_escape(scenario)));
        if let Some(message) = failure {
            let replay = format!("faultline run {scenario} --seed {seed}");
            xml.push_str(&format!(
                "<failure message=\"{}\">replay: {}</failure>",
                xml_escape(message),
                xml_escape(&replay)
            ));
        }
        xml.push_str("</testcase>\n");
    }
    xml.push_str("</testsuite>\n");
    std::fs::write(path, xml)
}
