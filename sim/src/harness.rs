//! The embedder's front door (FAILURE-USER-HARNESS): put your own agent — your tools, your
//! retry policy, your services — through every fault the simulator knows, from `cargo test`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use faultline_runtime::tool::ToolSet;
//! use faultline_sim::{AgentUnderTest, Harness, Service};
//!
//! # fn my_tools(_: &faultline_runtime::seams::Seams) -> ToolSet { ToolSet::new() }
//! let agent = AgentUnderTest::new("billing", my_tools)
//!     .service(Service::new("invoices").dedup_by_header("idempotency-key"));
//! let report = Harness::new(agent).seeds(0..200).run();
//! report.assert_passed();
//! ```
//!
//! A run builds the agent's tools on the simulated host's seams (`ToolHttp` over the
//! simulated network), draws a conversation over them from the seed (arguments from each
//! tool's JSON schema) and the seed's swarm of faults: model failures, partitions (to the
//! model and to every service), crashes at every crash point, torn writes, disk errors, a
//! full disk, bit rot, and the services' own errors and lost replies. The oracle judges each
//! run with the services' records as evidence. A finding names the tool, the invariant, the
//! seed and the call that replays it.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use crate::findings::{findings, Finding};
use crate::scenario::Scenario;
use crate::sweep::{sweep, SweepPlan};
use crate::verdict::{run_agent, RunResult};
use crate::world::{AgentUnderTest, LivenessBound, SlowRecovery};

/// Seeds a harness runs unless told (`Harness::seeds`).
pub const HARNESS_SEEDS_DEFAULT: u64 = 100;

/// The name of the scenario that draws a conversation over the agent's tools.
pub const GENERATED: &str = "generated";

/// Runs an agent under test through scenarios and seeds.
#[derive(Debug, Clone)]
pub struct Harness {
    agent: Arc<AgentUnderTest>,
    scenarios: Vec<Scenario>,
    seeds: Range<u64>,
    jobs: usize,
}

impl Harness {
    /// The agent under the built-in `generated` scenario (every fault family, drawn per seed),
    /// seeds `0..100`, one worker per core.
    pub fn new(agent: AgentUnderTest) -> Self {
        Self {
            agent: Arc::new(agent),
            scenarios: vec![Scenario::built_in(GENERATED).expect("the generated scenario is built in")],
            seeds: 0..HARNESS_SEEDS_DEFAULT,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// Seeds to run, per scenario.
    pub fn seeds(mut self, seeds: Range<u64>) -> Self {
        self.seeds = seeds;
        self
    }

    /// Worker threads (1 runs in order on this thread's pool).
    pub fn jobs(mut self, jobs: usize) -> Self {
        self.jobs = jobs.max(1);
        self
    }

    /// Adds a scenario of your own (its script calls your tools by name; a recorded incident
    /// from `faultline scenario from-transcript`, say).
    pub fn scenario(mut self, scenario: Scenario) -> Self {
        self.scenarios.push(scenario);
        self
    }

    /// Parses a scenario file's text and adds it.
    pub fn scenario_toml(self, text: &str) -> Result<Self, String> {
        Ok(self.scenario(crate::stand_in::scenario_with_agent(text)?))
    }

    /// Only your own scenarios, not the generated one.
    pub fn without_generated(mut self) -> Self {
        self.scenarios.retain(|s| s.name != GENERATED);
        self
    }

    /// Runs every (scenario, seed).
    ///
    /// # Panics
    /// When the agent's declaration is invalid (a bad service name, a provider table that does
    /// not resolve, no tools): a test set-up error, not a finding.
    pub fn run(&self) -> HarnessReport {
        if let Err(e) = self.agent.validate() {
            panic!("agent under test {}: {e}", self.agent.name());
        }
        let plan = SweepPlan {
            scenarios: self.scenarios.clone(),
            seeds: self.seeds.clone(),
            shard: 1,
            shards: 1,
            jobs: self.jobs,
            want_junit: false,
            full: false,
            real: None,
            agent: Some(self.agent.clone()),
        };
        let report = sweep(&plan, |_, _, _| {});
        let findings = report.failures.iter().flat_map(|run| findings(run, &self.agent)).collect();
        let liveness_bounds = self.scenarios.iter().map(|s| (s.name.clone(), self.liveness_bound(s))).collect();
        HarnessReport {
            agent: self.agent.name().to_owned(),
            runs: report.runs,
            findings,
            liveness_bounds,
            slow_recovery_runs: report.slow_recovery_runs,
            slow_recoveries: report.slow_recoveries,
            families: report.families,
            crash_points: report.crash_points,
            stand_ins: self.agent.stand_ins().to_vec(),
        }
    }

    /// The liveness bound of `scenario` on this harness's agent (a generated scenario's on
    /// seed 0's conversation).
    fn liveness_bound(&self, scenario: &Scenario) -> LivenessBound {
        let expanded = crate::generate::expand(scenario, 0, Some(&self.agent));
        crate::world::liveness_bound(&expanded, &self.agent)
    }

    /// Runs one (scenario, seed) again, whole: its trace, transcript and the services' records.
    ///
    /// # Panics
    /// When no scenario of this harness is called `scenario`.
    pub fn replay(&self, scenario: &str, seed: u64) -> RunResult {
        let Some(found) = self.scenarios.iter().find(|s| s.name == scenario) else {
            panic!("no scenario {scenario:?} in this harness");
        };
        run_agent(found, seed, &self.agent)
    }
}

/// What a harness found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HarnessReport {
    /// The agent's name.
    pub agent: String,
    /// Runs.
    pub runs: usize,
    /// Every broken invariant, by scenario and seed.
    pub findings: Vec<Finding>,
    /// Per scenario, how long after the faults heal its workload may take on this agent's
    /// own settings: liveness is judged against it.
    pub liveness_bounds: BTreeMap<String, LivenessBound>,
    /// Runs that converged within their bound but past their scenario's own window.
    pub slow_recovery_runs: usize,
    /// The first of them (by scenario and seed), each naming the settings that made it slow.
    pub slow_recoveries: Vec<SlowRecovery>,
    /// Runs in which each fault family fired.
    pub families: BTreeMap<String, u32>,
    /// Crash point hits.
    pub crash_points: BTreeMap<String, u32>,
    /// What stood in for each tool (`--agent FILE`).
    pub stand_ins: Vec<String>,
}

impl HarnessReport {
    /// Whether every run held every invariant.
    pub fn passed(&self) -> bool {
        self.findings.is_empty()
    }

    /// Panics with the report when a run broke an invariant.
    pub fn assert_passed(&self) {
        assert!(self.passed(), "{self}");
    }

    /// The first finding of `invariant`, if any.
    pub fn finding(&self, invariant: &str) -> Option<&Finding> {
        self.findings.iter().find(|f| f.invariant == invariant)
    }
}

/// Findings shown in full by `Display`; the rest are counted.
const FINDINGS_SHOWN_MAX: usize = 10;

impl std::fmt::Display for HarnessReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let failing: std::collections::BTreeSet<(&str, u64)> =
            self.findings.iter().map(|x| (x.scenario.as_str(), x.seed)).collect();
        writeln!(f, "agent {}: {} runs, {} failed", self.agent, self.runs, failing.len())?;
        for line in &self.stand_ins {
            writeln!(f, "  stand-in: {line}")?;
        }
        for finding in self.findings.iter().take(FINDINGS_SHOWN_MAX) {
            let tools =
                if finding.tools.is_empty() { String::new() } else { format!(" [{}]", finding.tools.join(", ")) };
            writeln!(
                f,
                "  {} seed {}: {}{tools}: {}\n    replay: {}",
                finding.scenario, finding.seed, finding.invariant, finding.evidence, finding.replay
            )?;
            writeln!(f, "    advice: {}", finding.advice)?;
        }
        if self.findings.len() > FINDINGS_SHOWN_MAX {
            writeln!(f, "  ... and {} more findings", self.findings.len() - FINDINGS_SHOWN_MAX)?;
        }
        for (scenario, bound) in &self.liveness_bounds {
            writeln!(f, "  liveness bound of {scenario}: {bound}")?;
        }
        if let Some(slow) = self.slow_recoveries.first() {
            writeln!(f, "  {} runs recovered slowly, within their bound; the first: {slow}", self.slow_recovery_runs)?;
        }
        let families: Vec<String> = self.families.iter().map(|(k, n)| format!("{k} {n}")).collect();
        write!(f, "  fault families fired: {}", families.join(", "))
    }
}
