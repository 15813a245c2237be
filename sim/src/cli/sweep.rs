//! `faultline scenarios`, `faultline run` and `faultline sweep`: the main job.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use clap::Args;

use crate::scenario::{Scenario, BUILT_IN_SCENARIOS};
use crate::world::{self, RunResult};

/// Seeds per scenario in the default sweep: chosen so the whole default sweep finishes in
/// about a minute on a 2-core machine.
pub const DEFAULT_SEEDS: u64 = 8;

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
}

/// Arguments of `faultline sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Only these scenarios (repeatable); default: all built-in scenarios.
    #[arg(long = "scenario")]
    scenarios: Vec<String>,
    /// Seed range `A..B` (B exclusive); default `0..8`.
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

fn load(name: &str) -> Result<Scenario, String> {
    Scenario::built_in(name).ok_or_else(|| format!("unknown scenario {name:?} (see `faultline scenarios`)"))
}

/// Lists the scenarios.
pub fn list() -> ExitCode {
    for info in BUILT_IN_SCENARIOS {
        let scenario = Scenario::parse(info.text).expect("built-in scenarios parse");
        println!("{:<36} {}", scenario.name, scenario.description);
    }
    ExitCode::SUCCESS
}

fn replay(result: &RunResult) -> String {
    format!("faultline run {} --seed {}", result.scenario, result.seed)
}

/// Runs one seed.
pub fn run_one(args: &RunArgs) -> ExitCode {
    let scenario = match load(&args.scenario) {
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
    let results: Mutex<Vec<RunResult>> = Mutex::new(Vec::with_capacity(work.len()));
    let total = work.len();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&(scenario, seed)) = work.get(i) else { return };
                let mut result = world::run(&scenarios[scenario], seed);
                // The trace is only kept for failures: memory stays flat in the seed count.
                if result.passed() {
                    result.trace = Vec::new();
                }
                let done = finished.fetch_add(1, Ordering::SeqCst) + 1;
                if !args.json && (done % (total / 10).max(1) == 0 || done == total) {
                    eprintln!("progress: {done}/{total} runs ({:.1} s)", started.elapsed().as_secs_f64());
                }
                results.lock().unwrap_or_else(|p| p.into_inner()).push(result);
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by(|a, b| (a.scenario.as_str(), a.seed).cmp(&(b.scenario.as_str(), b.seed)));
    let wall = started.elapsed();

    let mut per_scenario: BTreeMap<&str, ScenarioSummary> = BTreeMap::new();
    let mut crash_points: BTreeMap<String, u32> = BTreeMap::new();
    let mut families: BTreeMap<String, u32> = BTreeMap::new();
    for r in &results {
        let s = per_scenario.entry(r.scenario.as_str()).or_default();
        s.runs += 1;
        s.failures += usize::from(!r.passed());
        s.sim_ms += r.sim_ms;
        for (point, hits) in &r.crash_point_hits {
            *crash_points.entry(point.clone()).or_default() += hits;
        }
        for family in &r.faults_fired {
            *families.entry(family.clone()).or_default() += 1;
        }
    }
    let failures: Vec<&RunResult> = results.iter().filter(|r| !r.passed()).collect();
    if let Some(path) = &args.junit {
        if let Err(e) = write_junit(path, &results) {
            return bad(format!("--junit {}: {e}", path.display()));
        }
    }
    if args.json {
        let value = serde_json::json!({
            "runs": results.len(),
            "failures": failures.iter().map(|r| serde_json::json!({"scenario": r.scenario, "seed": r.seed, "violations": r.violations, "replay": replay(r)})).collect::<Vec<_>>(),
            "scenarios": per_scenario,
            "crash_point_hits": crash_points,
            "fault_families_fired": families,
            "wall_ms": wall.as_millis() as u64,
            "shard": format!("{shard}/{shards}"),
        });
        println!("{value}");
    } else {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{:<36} {:>5} {:>8} {:>12}", "scenario", "runs", "failures", "sim time s");
        for (name, s) in &per_scenario {
            let _ = writeln!(out, "{name:<36} {:>5} {:>8} {:>12.1}", s.runs, s.failures, s.sim_ms as f64 / 1000.0);
        }
        let _ = writeln!(out, "crash points reached: {}", join(&crash_points));
        let _ = writeln!(out, "fault families fired (runs): {}", join(&families));
        let _ = writeln!(
            out,
            "{} runs, {} failures, {:.1} s wall, {:.0} runs/s on {jobs} jobs (shard {shard}/{shards})",
            results.len(),
            failures.len(),
            wall.as_secs_f64(),
            results.len() as f64 / wall.as_secs_f64().max(1e-9)
        );
        for f in &failures {
            let _ = writeln!(out, "FAIL {} seed {}: replay with `{}`", f.scenario, f.seed, replay(f));
            for v in &f.violations {
                let _ = writeln!(out, "  violated {}: {}", v.invariant, v.detail);
            }
        }
    }
    if failures.is_empty() {
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

fn write_junit(path: &PathBuf, results: &[RunResult]) -> std::io::Result<()> {
    let failures = results.iter().filter(|r| !r.passed()).count();
    let mut xml = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"faultline sweep\" tests=\"{}\" failures=\"{failures}\">\n", results.len());
    let scenarios: BTreeSet<&str> = results.iter().map(|r| r.scenario.as_str()).collect();
    for scenario in scenarios {
        for r in results.iter().filter(|r| r.scenario == scenario) {
            xml.push_str(&format!(
                "  <testcase classname=\"{}\" name=\"seed {}\" time=\"0\">",
                xml_escape(&r.scenario),
                r.seed
            ));
            if !r.passed() {
                let message: Vec<String> =
                    r.violations.iter().map(|v| format!("{}: {}", v.invariant, v.detail)).collect();
                xml.push_str(&format!(
                    "<failure message=\"{}\">replay: {}</failure>",
                    xml_escape(&message.join("; ")),
                    xml_escape(&replay(r))
                ));
            }
            xml.push_str("</testcase>\n");
        }
    }
    xml.push_str("</testsuite>\n");
    std::fs::write(path, xml)
}
