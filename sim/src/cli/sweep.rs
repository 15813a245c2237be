//! `faultline scenarios`, `faultline run` and `faultline sweep`: the main job.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use clap::Args;

use crate::scenario::{Scenario, BUILT_IN_SCENARIOS};
use crate::world::{self, RunResult};

/// Seeds per scenario in the default sweep: 30 scenarios x 4 000 seeds = 120 000 runs, under a
/// minute on this 2-core machine (measured: 47.7 s, ~2 500 runs/s with 2 jobs, dev profile).
pub const DEFAULT_SEEDS: u64 = 4_000;

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

/// Plants `bugs` on this thread, or explains why this build cannot.
pub fn plant(bugs: &[String]) -> Result<(), String> {
    #[cfg(feature = "planted-bugs")]
    {
        for bug in bugs {
            if !faultline_runtime::bugs::CATALOG.iter().any(|(name, _)| name == bug) {
                return Err(format!("unknown bug {bug:?} (see `faultline hunt --list`)"));
            }
        }
        let names: Vec<&str> = bugs.iter().map(String::as_str).collect();
        faultline_runtime::bugs::plant(&names);
        Ok(())
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        if bugs.is_empty() {
            Ok(())
        } else {
            Err("this build has no planted bugs: build with `--features planted-bugs`".into())
        }
    }
}

/// What a hunt found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Catch {
    /// The bug.
    pub bug: String,
    /// Runs until the first failure (or the whole budget).
    pub runs: usize,
    /// Seeds tried (per scenario) until the catch.
    pub seeds: u64,
    /// Wall time, ms.
    pub wall_ms: u64,
    /// The first failure's replay command, if caught.
    pub replay: Option<String>,
    /// The broken invariant.
    pub invariant: Option<String>,
}

/// Runs every scenario over seeds `0..budget` with `bugs` planted, stopping at the first
/// failure. With no bugs this is the clean build's check of the same budget.
pub fn hunt_bug(bugs: &[String], budget: u64) -> Result<Catch, String> {
    plant(bugs)?;
    let scenarios: Vec<Scenario> =
        BUILT_IN_SCENARIOS.iter().map(|s| Scenario::parse(s.text).expect("built-in scenarios parse")).collect();
    let started = Instant::now();
    let mut runs = 0;
    let name = bugs.join(",");
    for seed in 0..budget {
        for scenario in &scenarios {
            runs += 1;
            let result = world::run(scenario, seed);
            if !result.passed() {
                plant(&[])?;
                return Ok(Catch {
                    bug: name,
                    runs,
                    seeds: seed + 1,
                    wall_ms: started.elapsed().as_millis() as u64,
                    replay: Some(format!(
                        "faultline run {} --seed {seed} {}",
                        result.scenario,
                        bugs.iter().map(|b| format!("--bug {b}")).collect::<Vec<_>>().join(" ")
                    )),
                    invariant: result.violations.first().map(|v| format!("{}: {}", v.invariant, v.detail)),
                });
            }
        }
    }
    plant(&[])?;
    Ok(Catch {
        bug: name,
        runs,
        seeds: budget,
        wall_ms: started.elapsed().as_millis() as u64,
        replay: None,
        invariant: None,
    })
}

/// `faultline hunt`.
pub fn hunt(args: &HuntArgs) -> ExitCode {
    if args.list {
        for (name, what) in faultline_runtime::bugs::CATALOG {
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

/// A scenario by built-in name, or from a `.toml` file (a shrunk regression, say).
pub fn load(name: &str) -> Result<Scenario, String> {
    if name.ends_with(".toml") {
        let text = std::fs::read_to_string(name).map_err(|e| format!("reading {name}: {e}"))?;
        return Scenario::parse(&text).map_err(|e| format!("{name}: {e}"));
    }
    Scenario::built_in(name).ok_or_else(|| format!("unknown scenario {name:?} (see `faultline scenarios`)"))
}

/// Lists the scenarios.
pub fn list() -> ExitCode {
    for info in BUILT_IN_SCENARIOS {
        let scenario = Scenario::parse(info.text).expect("built-in scenarios parse");
        println!("{:<36} {}", scenario.name, scenario.description);
    }
    if !crate::REGRESSION_SCENARIOS.is_empty() {
        println!("\nregressions (shrunk from failures; `faultline run NAME --seed SEED`):");
    }
    for info in crate::REGRESSION_SCENARIOS {
        let scenario = Scenario::parse(info.text).expect("regression scenarios parse");
        let seed = scenario.regression.as_ref().map_or(0, |r| r.seed);
        println!("{:<36} seed {seed}: {}", scenario.name, scenario.description);
    }
    ExitCode::SUCCESS
}

fn replay(result: &RunResult) -> String {
    format!("faultline run {} --seed {}", result.scenario, result.seed)
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

#[derive(Debug, Default, serde::Serialize)]
struct ScenarioSummary {
    runs: usize,
    failures: usize,
    sim_ms: u64,
}

/// Running totals of a sweep.
#[derive(Default)]
struct Tally {
    per_scenario: BTreeMap<String, ScenarioSummary>,
    crash_points: BTreeMap<String, u32>,
    families: BTreeMap<String, u32>,
    sometimes: BTreeMap<String, u32>,
    /// Failures that broke only liveness ("no liveness"), apart from safety violations.
    liveness_only: usize,
    failures: Vec<RunResult>,
    /// Collect one short line per run for a JUnit report (only when `--junit` asks for it:
    /// otherwise memory would grow with the seed count).
    want_junit: bool,
    /// (scenario, seed, failure message) per run.
    junit: Vec<(String, u64, Option<String>)>,
    runs: usize,
}

impl Tally {
    fn add(&mut self, result: RunResult) {
        self.runs += 1;
        let s = self.per_scenario.entry(result.scenario.clone()).or_default();
        s.runs += 1;
        s.failures += usize::from(!result.passed());
        s.sim_ms += result.sim_ms;
        for (point, hits) in &result.crash_point_hits {
            *self.crash_points.entry(point.clone()).or_default() += hits;
        }
        for family in &result.faults_fired {
            *self.families.entry(family.clone()).or_default() += 1;
        }
        for condition in &result.sometimes {
            *self.sometimes.entry(condition.clone()).or_default() += 1;
        }
        if !result.passed() && result.violations.iter().all(|v| v.invariant == "liveness") {
            self.liveness_only += 1;
        }
        let message = (!result.passed()).then(|| {
            result.violations.iter().map(|v| format!("{}: {}", v.invariant, v.detail)).collect::<Vec<_>>().join("; ")
        });
        if self.want_junit {
            self.junit.push((result.scenario.clone(), result.seed, message));
        }
        if !result.passed() {
            self.failures.push(result);
        }
    }
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
    let work: Vec<(usize, u64)> = scenarios
        .iter()
        .enumerate()
        .flat_map(|(i, _)| seeds.clone().map(move |seed| (i, seed)))
        .enumerate()
        .filter(|(index, _)| *index as u64 % shards == shard - 1)
        .map(|(_, w)| w)
        .collect();
    let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).clamp(1, 64);
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    // Aggregates grow with the number of scenarios, not seeds: only failures are kept whole,
    // so a sweep's memory stays flat however many seeds it runs.
    let tally: Mutex<Tally> = Mutex::new(Tally { want_junit: args.junit.is_some(), ..Tally::default() });
    let total = work.len();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&(scenario, seed)) = work.get(i) else { return };
                let result = world::run(&scenarios[scenario], seed);
                let done = finished.fetch_add(1, Ordering::SeqCst) + 1;
                if !args.json && (done % (total / 10).max(1) == 0 || done == total) {
                    eprintln!("progress: {done}/{total} runs ({:.1} s)", started.elapsed().as_secs_f64());
                }
                tally.lock().unwrap_or_else(|p| p.into_inner()).add(result);
            });
        }
    });
    let Tally { per_scenario, crash_points, families, sometimes, liveness_only, mut failures, junit, runs, .. } =
        tally.into_inner().unwrap_or_else(|p| p.into_inner());
    failures.sort_by(|a, b| (a.scenario.as_str(), a.seed).cmp(&(b.scenario.as_str(), b.seed)));
    let wall = started.elapsed();
    // Fault-site coverage: a declared crash point or "sometimes" condition that never fires
    // in a full sweep means the harness is not testing what it claims to.
    let mut never = Vec::new();
    if args.scenarios.is_empty() && shards == 1 {
        for point in faultline_runtime::CRASH_POINTS {
            if !crash_points.contains_key(&point.to_string()) {
                never.push(format!("crash point {point}"));
            }
        }
        for condition in world::SOMETIMES {
            if !sometimes.contains_key(condition) {
                never.push(format!("sometimes condition {condition}"));
            }
        }
    }
    if let Some(path) = &args.junit {
        if let Err(e) = write_junit(path, &junit, failures.len()) {
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
            "never_fired": never,
            "wall_ms": wall.as_millis() as u64,
            "shard": format!("{shard}/{shards}"),
        });
        println!("{value}");
    } else {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{:<36} {:>5} {:>8} {:>12}", "scenario", "runs", "failures", "sim time s");
        for (name, s) in &per_scenario {
            let name = name.as_str();
            let _ = writeln!(out, "{name:<36} {:>5} {:>8} {:>12.1}", s.runs, s.failures, s.sim_ms as f64 / 1000.0);
        }
        let _ = writeln!(out, "crash points reached: {}", join(&crash_points));
        let _ = writeln!(out, "fault families fired (runs): {}", join(&families));
        let _ = writeln!(out, "sometimes reached (runs): {}", join(&sometimes));
        for site in &never {
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
            runs as f64 / wall.as_secs_f64().max(1e-9)
        );
        for f in &failures {
            let _ = writeln!(out, "FAIL {} seed {}: replay with `{}`", f.scenario, f.seed, replay(f));
            for v in &f.violations {
                let _ = writeln!(out, "  violated {}: {}", v.invariant, v.detail);
            }
        }
    }
    if failures.is_empty() && never.is_empty() {
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
