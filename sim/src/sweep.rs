//! The sweep engine: many seeds of many scenarios on worker threads, aggregated into a
//! report whose memory grows with the scenarios, not the seeds. The `faultline` command
//! prints it; tests call it directly.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // worker threads and wall time: the harness, not the runtime

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::scenario::Scenario;
use crate::verdict::{self, RunResult};

/// Seeds per scenario in the default sweep: 57 scenarios x 4 000 seeds = 228 000 runs (measured
/// on this 2-core machine, dev profile, 2 jobs: 241 s, 947 runs/s; docs/internals/benchmarks.md).
pub const DEFAULT_SEEDS: u64 = 4_000;

/// A scenario by built-in name, or from a `.toml` file (a shrunk regression, say).
pub fn load(name: &str) -> Result<Scenario, String> {
    if name.ends_with(".toml") {
        let text = std::fs::read_to_string(name).map_err(|e| format!("reading {name}: {e}"))?;
        return crate::stand_in::scenario_with_agent(&text).map_err(|e| format!("{name}: {e}"));
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
    /// Run each (scenario, seed) for real and hold it to parity with the simulator
    /// (`sweep --real`); `None` simulates.
    pub real: Option<crate::real::RealOptions>,
    /// Run an embedder's agent (its tools, config, provider and services) instead of the
    /// scenarios' own tools (`--agent FILE`, `faultline_sim::Harness`).
    pub agent: Option<std::sync::Arc<crate::world::AgentUnderTest>>,
}

/// Longest sweep worker pool.
pub const SWEEP_JOBS_MAX: usize = 64;

/// Fewest seeds per scenario from which a full sweep judges the world catalog's coverage.
/// Crash points and sometimes conditions are reached by the scenarios' design, two seeds
/// suffice; catalog entries are drawn at random by the swarm (about one in two seeds of
/// `generated` and `mixed`, one to a few entries each), so a short sweep cannot reach all of
/// them. From 2 000 seeds each entry is drawn about 17 times on average; the default sweep
/// (4 000) reaches every one (`docs/internals/world-catalog.md`).
pub const CATALOG_COVERAGE_SEEDS_MIN: u64 = 2_000;

/// Per-scenario totals.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScenarioSummary {
    /// Runs.
    pub runs: usize,
    /// Runs that broke an invariant.
    pub failures: usize,
    /// Simulated time, summed.
    pub sim_ms: u64,
    /// Real runs whose recovered transcript differed from the simulator's (`sweep --real`).
    #[serde(default)]
    pub parity_differences: usize,
}

impl ScenarioSummary {
    /// Counts `result` in these totals.
    fn add(&mut self, result: &RunResult) {
        self.runs += 1;
        self.failures += usize::from(!result.passed());
        self.sim_ms += result.sim_ms;
        self.parity_differences += usize::from(result.violations.iter().any(|v| v.invariant == "parity"));
    }
}

/// Slow recoveries a sweep keeps whole (the rest are counted).
pub const SLOW_RECOVERIES_KEPT_MAX: usize = 100;

/// What a sweep found.
#[derive(Debug, Default)]
pub struct SweepReport {
    /// Totals per scenario.
    pub per_scenario: BTreeMap<String, ScenarioSummary>,
    /// Totals per wire format (the sweep's format axis).
    pub per_format: BTreeMap<String, ScenarioSummary>,
    /// Crash point hits.
    pub crash_points: BTreeMap<String, u32>,
    /// Runs in which each fault family fired.
    pub families: BTreeMap<String, u32>,
    /// Runs that reached each sometimes condition.
    pub sometimes: BTreeMap<String, u32>,
    /// Runs that reached each world catalog entry (FAILURE-WORLD-CATALOG).
    pub catalog: BTreeMap<String, u32>,
    /// Failures that broke only liveness ("no liveness"), apart from safety violations.
    pub liveness_only: usize,
    /// Every failing run, whole, sorted by scenario and seed.
    pub failures: Vec<RunResult>,
    /// Runs that converged within their liveness bound but past their scenario's own window.
    pub slow_recovery_runs: usize,
    /// The first [`SLOW_RECOVERIES_KEPT_MAX`] of them, each naming the waits that made it slow.
    pub slow_recoveries: Vec<crate::world::SlowRecovery>,
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
        self.per_scenario.entry(result.scenario.clone()).or_default().add(&result);
        self.per_format.entry(result.format.name().to_owned()).or_default().add(&result);
        for (point, hits) in &result.crash_point_hits {
            *self.crash_points.entry(point.clone()).or_default() += hits;
        }
        for family in &result.faults_fired {
            *self.families.entry(family.clone()).or_default() += 1;
        }
        for condition in &result.sometimes {
            *self.sometimes.entry(condition.clone()).or_default() += 1;
        }
        for entry in &result.catalog_reached {
            *self.catalog.entry(entry.clone()).or_default() += 1;
        }
        if let Some(slow) = &result.slow_recovery {
            self.slow_recovery_runs += 1;
            // The first by (scenario, seed), whatever order the workers finish in.
            self.slow_recoveries.push(slow.clone());
            if self.slow_recoveries.len() > 2 * SLOW_RECOVERIES_KEPT_MAX {
                self.keep_first_slow_recoveries();
            }
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

    fn keep_first_slow_recoveries(&mut self) {
        self.slow_recoveries.sort_by(|a, b| (a.scenario.as_str(), a.seed).cmp(&(b.scenario.as_str(), b.seed)));
        self.slow_recoveries.truncate(SLOW_RECOVERIES_KEPT_MAX);
    }

    /// Whether the sweep passed: no failure, and no declared site left unreached.
    pub fn passed(&self) -> bool {
        self.failures.is_empty() && self.never_fired.is_empty()
    }
}

/// The command that replays one run.
pub fn replay(result: &RunResult) -> String {
    let real = if result.real { " --real" } else { "" };
    format!("faultline run {} --seed {}{real}", result.scenario, result.seed)
}

/// Runs the plan; `progress(done, total, failed)` is called after every run.
pub fn sweep(plan: &SweepPlan, progress: impl Fn(usize, usize, usize) + Sync) -> SweepReport {
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
    let failed = AtomicUsize::new(0);
    // Aggregates grow with the number of scenarios, not seeds: only failures are kept whole,
    // so a sweep's memory stays flat however many seeds it runs.
    let report: Mutex<SweepReport> = Mutex::new(SweepReport::default());
    let total = work.len();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&(scenario, seed)) = work.get(i) else { return };
                let result = match (&plan.real, &plan.agent) {
                    (Some(options), _) => crate::real::judged(&plan.scenarios[scenario], seed, options),
                    (None, Some(agent)) => verdict::run_agent(&plan.scenarios[scenario], seed, agent),
                    (None, None) => verdict::run(&plan.scenarios[scenario], seed),
                };
                failed.fetch_add(usize::from(!result.passed()), Ordering::SeqCst);
                report.lock().unwrap_or_else(|p| p.into_inner()).add(result, plan.want_junit);
                progress(finished.fetch_add(1, Ordering::SeqCst) + 1, total, failed.load(Ordering::SeqCst));
            });
        }
    });
    let mut report = report.into_inner().unwrap_or_else(|p| p.into_inner());
    report.failures.sort_by(|a, b| (a.scenario.as_str(), a.seed).cmp(&(b.scenario.as_str(), b.seed)));
    report.keep_first_slow_recoveries();
    report.wall = started.elapsed();
    // Fault-site coverage: a declared crash point or "sometimes" condition that never fires
    // in a full sweep means the harness is not testing what it claims to.
    if plan.full && plan.shards == 1 {
        let catalog = judged_catalog(plan.seeds.end.saturating_sub(plan.seeds.start), &report.catalog);
        report.never_fired = never_fired(&report.crash_points, &report.sometimes, catalog);
    }
    report
}

/// A violation as a sweep report carries it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ViolationSummary {
    /// The invariant.
    pub invariant: String,
    /// What broke: the evidence.
    pub detail: String,
    /// What would prevent it, fitted to the evidence.
    #[serde(default)]
    pub advice: String,
    /// When (simulated ms).
    pub at_ms: u64,
}

/// A failing run as a sweep report carries it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FailureSummary {
    /// Scenario name.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// What broke.
    pub violations: Vec<ViolationSummary>,
    /// The command that replays it.
    pub replay: String,
    /// The agent's tools its violations name (`--agent FILE`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

impl FailureSummary {
    /// A failing run of a sweep, on `agent` when it swept one.
    fn of(run: &RunResult, agent: Option<&crate::world::AgentUnderTest>) -> Self {
        let mut summary = FailureSummary {
            scenario: run.scenario.clone(),
            seed: run.seed,
            violations: run
                .violations
                .iter()
                .map(|v| ViolationSummary {
                    invariant: v.invariant.name().to_owned(),
                    detail: v.detail.clone(),
                    advice: v.advice.clone(),
                    at_ms: v.at_ms,
                })
                .collect(),
            replay: replay(run),
            tools: Vec::new(),
        };
        if let Some(agent) = agent {
            summary.replay = format!("{} --agent {}", summary.replay, agent.name());
            // One finding per violation, in order: its advice is the one fitted to the agent's
            // front door (the agent file's own fix, where the file gave one).
            for (finding, violation) in crate::findings::findings(run, agent).into_iter().zip(&mut summary.violations) {
                summary
                    .tools
                    .extend(finding.tools.into_iter().filter(|t| !summary.tools.contains(t)).collect::<Vec<_>>());
                violation.advice = finding.advice;
            }
        }
        summary
    }
}

/// One run's line of a JUnit report: scenario, seed, failure message.
pub type Case = (String, u64, Option<String>);

/// What `faultline sweep --json` prints, and what `--merge` reads back: a sweep (or a shard of
/// one, or several shards merged) in a form that survives a trip through a file.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SweepSummary {
    /// Runs.
    pub runs: usize,
    /// Failing runs, sorted by scenario and seed.
    pub failures: Vec<FailureSummary>,
    /// Totals per scenario.
    pub scenarios: BTreeMap<String, ScenarioSummary>,
    /// Totals per wire format (the format axis).
    #[serde(default)]
    pub formats: BTreeMap<String, ScenarioSummary>,
    /// Crash point hits.
    pub crash_point_hits: BTreeMap<String, u32>,
    /// Runs in which each fault family fired.
    pub fault_families_fired: BTreeMap<String, u32>,
    /// Runs that reached each sometimes condition.
    pub sometimes_reached: BTreeMap<String, u32>,
    /// Runs that reached each world catalog entry.
    #[serde(default)]
    pub catalog_reached: BTreeMap<String, u32>,
    /// Failures that broke only liveness.
    pub liveness_only_failures: usize,
    /// Runs that converged within their liveness bound but past their scenario's own window.
    #[serde(default)]
    pub slow_recovery_runs: usize,
    /// The first of them by scenario and seed (at most [`SLOW_RECOVERIES_KEPT_MAX`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slow_recoveries: Vec<crate::world::SlowRecovery>,
    /// Declared sites a complete, full sweep never reached.
    pub never_fired: Vec<String>,
    /// Wall time (of the slowest shard, after a merge).
    pub wall_ms: u64,
    /// `K/N`, or `merged K1,K2,…/N`.
    pub shard: String,
    /// The seed range, `A..B`.
    #[serde(default)]
    pub seeds: String,
    /// The scenarios swept, sorted.
    #[serde(default)]
    pub scenario_names: Vec<String>,
    /// Whether every built-in scenario was swept.
    #[serde(default)]
    pub full: bool,
    /// Which shards of `shards_total` this covers.
    #[serde(default)]
    pub shards_covered: Vec<u64>,
    /// How many shards the space was split into.
    #[serde(default)]
    pub shards_total: u64,
    /// One line per run, when the sweep kept them (for a per-run JUnit report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cases: Option<Vec<Case>>,
    /// Run for real and held to parity with the simulator (`sweep --real`).
    #[serde(default)]
    pub real: bool,
    /// The agent file swept (`--agent FILE`), and what stood in for each of its tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// One line per tool of `agent`: its stand-in, and where that came from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stand_ins: Vec<String>,
}

impl SweepSummary {
    /// The summary of `report`, swept by `plan`.
    pub fn of(report: &SweepReport, plan: &SweepPlan) -> Self {
        let mut scenario_names: Vec<String> = plan.scenarios.iter().map(|s| s.name.clone()).collect();
        scenario_names.sort();
        SweepSummary {
            runs: report.runs,
            failures: report.failures.iter().map(|r| FailureSummary::of(r, plan.agent.as_deref())).collect(),
            scenarios: report.per_scenario.clone(),
            formats: report.per_format.clone(),
            crash_point_hits: report.crash_points.clone(),
            fault_families_fired: report.families.clone(),
            sometimes_reached: report.sometimes.clone(),
            catalog_reached: report.catalog.clone(),
            liveness_only_failures: report.liveness_only,
            slow_recovery_runs: report.slow_recovery_runs,
            slow_recoveries: report.slow_recoveries.clone(),
            never_fired: report.never_fired.clone(),
            wall_ms: report.wall.as_millis() as u64,
            shard: format!("{}/{}", plan.shard, plan.shards),
            seeds: format!("{}..{}", plan.seeds.start, plan.seeds.end),
            scenario_names,
            full: plan.full,
            shards_covered: vec![plan.shard],
            shards_total: plan.shards,
            cases: plan.want_junit.then(|| report.junit.clone()),
            real: plan.real.is_some(),
            agent: plan.agent.as_ref().map(|a| a.name().to_owned()),
            stand_ins: plan.agent.as_ref().map_or_else(Vec::new, |a| a.stand_ins().to_vec()),
        }
    }

    /// Whether the sweep passed: no failure and no declared site left unreached.
    pub fn passed(&self) -> bool {
        self.failures.is_empty() && self.never_fired.is_empty()
    }

    /// Whether the shards cover the whole (scenario, seed) space: exactly shards 1..=N.
    pub fn complete(&self) -> bool {
        self.shards_total > 0 && self.shards_covered.iter().copied().eq(1..=self.shards_total)
    }
}

/// Most shard reports one merge reads.
pub const MERGE_SHARDS_MAX: usize = 1024;

/// Merges shard reports of one sweep: totals add up, a site counts as reached if any shard
/// reached it, and a full sweep's "every declared site fired" rule applies to the union once
/// every shard is there. Refuses shards of different sweeps (scenarios, seeds, shard count)
/// and overlapping shards.
pub fn merge(shards: &[SweepSummary]) -> Result<SweepSummary, String> {
    let first = shards.first().ok_or("nothing to merge")?;
    if shards.len() > MERGE_SHARDS_MAX {
        return Err(format!("at most {MERGE_SHARDS_MAX} shard reports, got {}", shards.len()));
    }
    let mut merged = SweepSummary {
        seeds: first.seeds.clone(),
        scenario_names: first.scenario_names.clone(),
        full: first.full,
        shards_total: first.shards_total,
        cases: Some(Vec::new()),
        real: first.real,
        ..SweepSummary::default()
    };
    let mut covered = BTreeSet::new();
    for (i, shard) in shards.iter().enumerate() {
        let which = format!("report {} (shard {})", i + 1, shard.shard);
        same_sweep(&which, shard, first)?;
        for k in &shard.shards_covered {
            if !covered.insert(*k) {
                return Err(format!("{which} overlaps another report: shard {k}/{} appears twice", shard.shards_total));
            }
        }
        merged.runs += shard.runs;
        merged.failures.extend(shard.failures.iter().cloned());
        for (into, from) in [(&mut merged.scenarios, &shard.scenarios), (&mut merged.formats, &shard.formats)] {
            for (name, s) in from {
                let total = into.entry(name.clone()).or_default();
                total.runs += s.runs;
                total.failures += s.failures;
                total.sim_ms += s.sim_ms;
                total.parity_differences += s.parity_differences;
            }
        }
        let add = |into: &mut BTreeMap<String, u32>, from: &BTreeMap<String, u32>| {
            for (k, v) in from {
                *into.entry(k.clone()).or_default() += v;
            }
        };
        add(&mut merged.crash_point_hits, &shard.crash_point_hits);
        add(&mut merged.fault_families_fired, &shard.fault_families_fired);
        add(&mut merged.sometimes_reached, &shard.sometimes_reached);
        add(&mut merged.catalog_reached, &shard.catalog_reached);
        merged.liveness_only_failures += shard.liveness_only_failures;
        merged.slow_recovery_runs += shard.slow_recovery_runs;
        merged.slow_recoveries.extend(shard.slow_recoveries.iter().cloned());
        merged.wall_ms = merged.wall_ms.max(shard.wall_ms);
        match (&mut merged.cases, &shard.cases) {
            (Some(all), Some(cases)) => all.extend(cases.iter().cloned()),
            (cases, _) => *cases = None,
        }
    }
    merged.failures.sort_by(|a, b| (a.scenario.as_str(), a.seed).cmp(&(b.scenario.as_str(), b.seed)));
    merged.slow_recoveries.sort_by(|a, b| (a.scenario.as_str(), a.seed).cmp(&(b.scenario.as_str(), b.seed)));
    merged.slow_recoveries.truncate(SLOW_RECOVERIES_KEPT_MAX);
    if let Some(cases) = &mut merged.cases {
        cases.sort_by(|a, b| (a.0.as_str(), a.1).cmp(&(b.0.as_str(), b.1)));
    }
    merged.shards_covered = covered.into_iter().collect();
    let list: Vec<String> = merged.shards_covered.iter().map(u64::to_string).collect();
    merged.shard = format!("merged {}/{}", list.join(","), merged.shards_total);
    if merged.full && merged.complete() {
        let catalog = judged_catalog(seed_count(&merged.seeds), &merged.catalog_reached);
        merged.never_fired = never_fired(&merged.crash_point_hits, &merged.sometimes_reached, catalog);
    }
    Ok(merged)
}

/// Refuses a shard report (`which`) of another sweep than `first`'s, or one that does not say
/// which slice it covers.
fn same_sweep(which: &str, shard: &SweepSummary, first: &SweepSummary) -> Result<(), String> {
    if shard.shards_total == 0 || shard.shards_covered.is_empty() || shard.seeds.is_empty() {
        return Err(format!("{which} does not say which slice it covers (written by an older faultline?)"));
    }
    if let Some(k) = shard.shards_covered.iter().find(|k| **k == 0 || **k > shard.shards_total) {
        return Err(format!("{which} claims shard {k} of {}", shard.shards_total));
    }
    if shard.real != first.real {
        return Err(format!("{which} differs from report 1 in whether it ran for real"));
    }
    if shard.full != first.full {
        return Err(format!("{which} differs from report 1 in whether it swept every built-in scenario"));
    }
    if shard.scenario_names != first.scenario_names {
        return Err(format!("{which} swept other scenarios than report 1"));
    }
    if shard.seeds != first.seeds || shard.shards_total != first.shards_total {
        return Err(format!(
            "{which} sliced other seeds ({} in {} shards) than report 1 ({} in {} shards)",
            shard.seeds, shard.shards_total, first.seeds, first.shards_total
        ));
    }
    Ok(())
}

/// The catalog entries reached, when a sweep of `seeds` seeds per scenario is long enough to
/// be judged on them ([`CATALOG_COVERAGE_SEEDS_MIN`]).
fn judged_catalog(seeds: u64, reached: &BTreeMap<String, u32>) -> Option<&BTreeMap<String, u32>> {
    (seeds >= CATALOG_COVERAGE_SEEDS_MIN).then_some(reached)
}

/// How many seeds a report's `a..b` range holds (0 when it does not parse).
fn seed_count(range: &str) -> u64 {
    let Some((from, to)) = range.split_once("..") else { return 0 };
    match (from.trim().parse::<u64>(), to.trim().parse::<u64>()) {
        (Ok(from), Ok(to)) => to.saturating_sub(from),
        _ => 0,
    }
}

/// The declared sites (crash points, sometimes conditions, world catalog entries when
/// `catalog` is judged) missing from the hits.
fn never_fired(
    crash_points: &BTreeMap<String, u32>,
    sometimes: &BTreeMap<String, u32>,
    catalog: Option<&BTreeMap<String, u32>>,
) -> Vec<String> {
    let mut never = Vec::new();
    for point in faultline_runtime::seams::CRASH_POINTS {
        if !crash_points.contains_key(&point.to_string()) {
            never.push(format!("crash point {point}"));
        }
    }
    for condition in crate::SOMETIMES {
        if !sometimes.contains_key(condition) {
            never.push(format!("sometimes condition {condition}"));
        }
    }
    for entry in crate::catalog::ids() {
        if catalog.is_some_and(|catalog| !catalog.contains_key(entry)) {
            never.push(format!("catalog entry {entry}"));
        }
    }
    never
}
