//! The sweep engine: many seeds of many scenarios on worker threads, aggregated into a
//! report whose memory grows with the scenarios, not the seeds. The `faultline` command
//! prints it; tests call it directly.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // worker threads and wall time: the harness, not the runtime

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::scenario::{Scenario, BUILT_IN_SCENARIOS};
use crate::world::{self, RunResult};

/// Seeds per scenario in the default sweep: 30 scenarios x 4 000 seeds = 120 000 runs, under a
/// minute on this 2-core machine (measured: 47.7 s, ~2 500 runs/s with 2 jobs, dev profile).
pub const DEFAULT_SEEDS: u64 = 4_000;

/// Plants `bugs` on this thread, or explains why this build cannot.
pub fn plant(bugs: &[String]) -> Result<(), String> {
    #[cfg(feature = "planted-bugs")]
    {
        for bug in bugs {
            if !faultline_runtime::testing::bugs::CATALOG.iter().any(|(name, _)| name == bug) {
                return Err(format!("unknown bug {bug:?} (see `faultline hunt --list`)"));
            }
        }
        let names: Vec<&str> = bugs.iter().map(String::as_str).collect();
        faultline_runtime::testing::bugs::plant(&names);
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

/// A scenario by built-in name, or from a `.toml` file (a shrunk regression, say).
pub fn load(name: &str) -> Result<Scenario, String> {
    if name.ends_with(".toml") {
        let text = std::fs::read_to_string(name).map_err(|e| format!("reading {name}: {e}"))?;
        return Scenario::parse(&text).map_err(|e| format!("{name}: {e}"));
    }
    Scenario::built_in(name).ok_or_else(|| format!("unknown scenario {name:?} (see `faultline scenarios`)"))
}

/// What to sweep.
#[derive(Debug, Clone)]
pub struct SweepPlan {
    /// The scenarios.
    pub scenarios: Vec<Scenario>,
    /// Seeds per scenario.
    pub seeds: std::ops::Range<u64>,
    /// This shard, 1-based, of `shards`: the (scenario, seed) pairs are dealt round robin.
    pub shard: u64,
    /// How many shards the space is split into.
    pub shards: u64,
    /// Worker threads.
    pub jobs: usize,
    /// Keep one short line per run for a JUnit report.
    pub want_junit: bool,
    /// Whether this sweep covers every built-in scenario whole (then a crash point or
    /// sometimes condition that never fired is reported).
    pub full: bool,
}

/// Longest sweep worker pool.
pub const SWEEP_JOBS_MAX: usize = 64;

/// Per-scenario totals.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ScenarioSummary {
    /// Runs.
    pub runs: usize,
    /// Runs that broke an invariant.
    pub failures: usize,
    /// Simulated time, summed.
    pub sim_ms: u64,
}

/// What a sweep found.
#[derive(Debug, Default)]
pub struct SweepReport {
    /// Totals per scenario.
    pub per_scenario: BTreeMap<String, ScenarioSummary>,
    /// Crash point hits.
    pub crash_points: BTreeMap<String, u32>,
    /// Runs in which each fault family fired.
    pub families: BTreeMap<String, u32>,
    /// Runs that reached each sometimes condition.
    pub sometimes: BTreeMap<String, u32>,
    /// Failures that broke only liveness ("no liveness"), apart from safety violations.
    pub liveness_only: usize,
    /// Every failing run, whole, sorted by scenario and seed.
    pub failures: Vec<RunResult>,
    /// (scenario, seed, failure message) per run, when the plan wanted JUnit.
    pub junit: Vec<(String, u64, Option<String>)>,
    /// Runs.
    pub runs: usize,
    /// Declared sites (crash points, sometimes conditions) a full sweep never reached.
    pub never_fired: Vec<String>,
    /// Wall time.
    pub wall: Duration,
}

impl SweepReport {
    fn add(&mut self, result: RunResult, want_junit: bool) {
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
        if want_junit {
            self.junit.push((result.scenario.clone(), result.seed, message));
        }
        if !result.passed() {
            self.failures.push(result);
        }
    }

    /// Whether the sweep passed: no failure, and no declared site left unreached.
    pub fn passed(&self) -> bool {
        self.failures.is_empty() && self.never_fired.is_empty()
    }
}

/// The command that replays one run.
pub fn replay(result: &RunResult) -> String {
    format!("faultline run {} --seed {}", result.scenario, result.seed)
}

/// Runs the plan; `progress(done, total)` is called after every run.
pub fn sweep(plan: &SweepPlan, progress: impl Fn(usize, usize) + Sync) -> SweepReport {
    assert!(plan.shard >= 1 && plan.shard <= plan.shards, "shard {}/{}", plan.shard, plan.shards);
    let work: Vec<(usize, u64)> = (0..plan.scenarios.len())
        .flat_map(|i| plan.seeds.clone().map(move |seed| (i, seed)))
        .enumerate()
        .filter(|(index, _)| *index as u64 % plan.shards == plan.shard - 1)
        .map(|(_, w)| w)
        .collect();
    let jobs = plan.jobs.clamp(1, SWEEP_JOBS_MAX);
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    // Aggregates grow with the number of scenarios, not seeds: only failures are kept whole,
    // so a sweep's memory stays flat however many seeds it runs.
    let report: Mutex<SweepReport> = Mutex::new(SweepReport::default());
    let total = work.len();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&(scenario, seed)) = work.get(i) else { return };
                let result = world::run(&plan.scenarios[scenario], seed);
                report.lock().unwrap_or_else(|p| p.into_inner()).add(result, plan.want_junit);
                progress(finished.fetch_add(1, Ordering::SeqCst) + 1, total);
            });
        }
    });
    let mut report = report.into_inner().unwrap_or_else(|p| p.into_inner());
    report.failures.sort_by(|a, b| (a.scenario.as_str(), a.seed).cmp(&(b.scenario.as_str(), b.seed)));
    report.wall = started.elapsed();
    // Fault-site coverage: a declared crash point or "sometimes" condition that never fires
    // in a full sweep means the harness is not testing what it claims to.
    if plan.full && plan.shards == 1 {
        for point in faultline_runtime::testing::CRASH_POINTS {
            if !report.crash_points.contains_key(&point.to_string()) {
                report.never_fired.push(format!("crash point {point}"));
            }
        }
        for condition in world::SOMETIMES {
            if !report.sometimes.contains_key(condition) {
                report.never_fired.push(format!("sometimes condition {condition}"));
            }
        }
    }
    report
}
