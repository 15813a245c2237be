//! Shrinking a failing run into a small regression scenario (`faultline shrink`).
//!
//! The run's plan is first *materialised*: everything the seed drew (the generated
//! conversation, the swarm's faults and failing model attempts) is written out explicitly, so
//! the scenario replays the same run at the same seed without drawing anything. Then a greedy
//! pass tries smaller variants (fewer faults, fewer messages and responses, an earlier crash,
//! a shorter partition) and keeps each one that still breaks the same invariant, until no
//! variant does or the run budget is spent. Every accepted step is a real replay, so the
//! result fails by construction.

use crate::scenario::{ModelPlan, Regression, Scenario};
use crate::verdict::{self, RunResult};
use crate::world;

/// Most simulation runs one shrink may spend.
pub const SHRINK_RUNS_MAX: usize = 4_000;

/// What a shrink produced.
#[derive(Debug, Clone)]
pub struct Shrunk {
    /// The minimal scenario (materialised: nothing is drawn from the seed).
    pub scenario: Scenario,
    /// The invariant it still breaks.
    pub invariant: String,
    /// Faults before and after.
    pub faults: (usize, usize),
    /// User messages before and after.
    pub messages: (usize, usize),
    /// Simulation runs spent.
    pub runs: usize,
}

/// `scenario` at `seed` with everything the seed draws written out.
pub fn materialise(scenario: &Scenario, seed: u64) -> Scenario {
    materialise_for(scenario, seed, None)
}

/// [`materialise`] on `agent` (its generated conversation calls the agent's tools).
pub fn materialise_for(scenario: &Scenario, seed: u64, agent: Option<&world::AgentUnderTest>) -> Scenario {
    // A scenario that names its own agent file materialises on it (and keeps naming it).
    let own = world::scenario_agent(scenario);
    let user = agent.or(own.as_deref());
    let plan = world::seeded::resolve_for(&crate::generate::expand(scenario, seed, user), seed, user);
    Scenario {
        agent: scenario.agent.clone(),
        name: scenario.name.clone(),
        description: scenario.description.clone(),
        requirement: scenario.requirement.clone(),
        tick_ms: plan.tick_ms,
        budget_ms: plan.budget_ms,
        heal_at_ms: Some(plan.heal_at_ms),
        messages: plan.messages,
        provider: plan.provider,
        tools: plan.tools,
        tool_concurrency: Some(plan.tool_concurrency),
        store: plan.store,
        // The seed's format, so that the written plan replays what the seed ran.
        formats: vec![plan.format],
        model: ModelPlan {
            refuse_until_ms: plan.script.refuse_until_ms,
            responses: plan.script.responses,
            repeat_last: plan.script.repeat_last,
            from_seed: false,
        },
        faults: plan.faults,
        expect: plan.expect,
        generated: false,
        real: scenario.real.clone(),
        regression: None,
    }
}

/// The number of separate faults in a (materialised) scenario.
pub fn fault_count(scenario: &Scenario) -> usize {
    let faults = &scenario.faults;
    let fs = faults.fs.as_ref().map_or(0, |fs| {
        usize::from(fs.fail_op.is_some())
            + usize::from(fs.crash_before_op.is_some())
            + usize::from(fs.block_size.is_some())
    });
    faults.crashes.len()
        + faults.partitions.len()
        + usize::from(faults.disk_full.is_some())
        + fs
        + usize::from(faults.cancel_at_ms.is_some() || faults.cancel_after_first_text_ms.is_some())
        + usize::from(faults.config_update.is_some())
        + usize::from(scenario.model.refuse_until_ms > 0)
        + scenario.model.responses.iter().filter(|r| r.fails()).count()
}

/// Smaller variants of `s`, the biggest cuts first.
fn variants(s: &Scenario) -> Vec<Scenario> {
    let mut out = Vec::new();
    let mut with = |change: &dyn Fn(&mut Scenario)| {
        let mut v = s.clone();
        change(&mut v);
        out.push(v);
    };
    if s.messages.len() > 1 {
        with(&|v| {
            v.messages.pop();
        });
    }
    for i in 0..s.faults.crashes.len() {
        with(&|v| {
            v.faults.crashes.remove(i);
        });
    }
    for i in 0..s.faults.partitions.len() {
        with(&|v| {
            v.faults.partitions.remove(i);
        });
    }
    fewer_faults(s, &mut with);
    // An earlier crash: a lower hit, a lower disk operation.
    for i in 0..s.faults.crashes.len() {
        if s.faults.crashes[i].hit > 1 {
            with(&|v| v.faults.crashes[i].hit -= 1);
        }
    }
    if let Some(op) = s.faults.fs.as_ref().and_then(|fs| fs.crash_before_op).filter(|op| *op > 0) {
        with(&|v| v.faults.fs.as_mut().expect("present").crash_before_op = Some(op / 2));
        with(&|v| v.faults.fs.as_mut().expect("present").crash_before_op = Some(op - 1));
    }
    for i in 0..s.faults.partitions.len() {
        let p = &s.faults.partitions[i];
        if p.to_ms - p.from_ms > 100 {
            with(&|v| {
                let p = &mut v.faults.partitions[i];
                p.to_ms = p.from_ms + (p.to_ms - p.from_ms) / 2;
            });
        }
    }
    out
}

/// What takes a change to `s` and keeps the variant it makes.
type AddVariant<'a> = dyn FnMut(&dyn Fn(&mut Scenario)) + 'a;

/// Variants of `s` with one fault (a disk fault, a cancel, a config update, a refusal
/// window, a failing or any response) fewer, each handed to `with`.
fn fewer_faults(s: &Scenario, with: &mut AddVariant<'_>) {
    if let Some(fs) = &s.faults.fs {
        with(&|v| v.faults.fs = None);
        if fs.fail_op.is_some() {
            with(&|v| {
                let fs = v.faults.fs.as_mut().expect("present");
                (fs.fail_op, fs.fail_kind) = (None, None);
            });
        }
        if fs.crash_before_op.is_some() {
            with(&|v| v.faults.fs.as_mut().expect("present").crash_before_op = None);
        }
        if fs.block_size.is_some() {
            with(&|v| v.faults.fs.as_mut().expect("present").block_size = None);
        }
    }
    if s.faults.cancel_at_ms.is_some() || s.faults.cancel_after_first_text_ms.is_some() {
        with(&|v| {
            (v.faults.cancel_at_ms, v.faults.cancel_after_first_text_ms, v.faults.cancel_then_submit) =
                (None, None, false)
        });
    }
    if s.faults.config_update.is_some() {
        with(&|v| v.faults.config_update = None);
    }
    if s.model.refuse_until_ms > 0 {
        with(&|v| v.model.refuse_until_ms = 0);
    }
    for i in (0..s.model.responses.len()).filter(|i| s.model.responses[*i].fails()) {
        with(&|v| {
            v.model.responses.remove(i);
        });
    }
    for i in (0..s.model.responses.len()).rev() {
        with(&|v| {
            v.model.responses.remove(i);
        });
    }
}

/// Shrinks the failing run `scenario` at `seed`. Fails if the run passes, or if its
/// materialised form does not fail the same way (a harness bug worth reporting).
pub fn shrink(scenario: &Scenario, seed: u64) -> Result<Shrunk, String> {
    shrink_with(scenario, seed, |_, _| {})
}

/// [`shrink`], calling `progress(runs, SHRINK_RUNS_MAX)` after every candidate run.
pub fn shrink_with(scenario: &Scenario, seed: u64, progress: impl Fn(usize, usize)) -> Result<Shrunk, String> {
    shrink_agent_with(scenario, seed, None, progress)
}

/// [`shrink_with`] on `agent`, an embedder's agent, when given.
pub fn shrink_agent_with(
    scenario: &Scenario,
    seed: u64,
    agent: Option<&std::sync::Arc<world::AgentUnderTest>>,
    progress: impl Fn(usize, usize),
) -> Result<Shrunk, String> {
    let run = |scenario: &Scenario| match agent {
        Some(agent) => verdict::run_agent(scenario, seed, agent),
        None => verdict::run(scenario, seed),
    };
    let first = run(scenario);
    let Some(violation) = first.violations.first() else {
        return Err(format!("{} passes at seed {seed}: nothing to shrink", scenario.name));
    };
    let invariant = violation.invariant;
    let breaks = |result: &RunResult| result.violations.iter().any(|v| v.invariant == invariant);
    let mut current = materialise_for(scenario, seed, agent.map(|a| &**a));
    if invariant != "expectation" {
        // The oracle's own invariants are what the regression guards; scenario-specific
        // expectations would stop matching as soon as a fault is removed.
        current.expect = Default::default();
    }
    let mut runs = 1;
    if !breaks(&run(&current)) {
        return Err(format!(
            "{} at seed {seed} no longer breaks {invariant} once materialised: the plan is not fully \
             described by the scenario (a harness bug)",
            scenario.name
        ));
    }
    runs += 1;
    let (faults_before, messages_before) = (fault_count(&current), current.messages.len());
    'shrinking: while runs < SHRINK_RUNS_MAX {
        for candidate in variants(&current) {
            if candidate.check().is_err() {
                continue;
            }
            runs += 1;
            progress(runs, SHRINK_RUNS_MAX);
            if breaks(&run(&candidate)) {
                current = candidate;
                continue 'shrinking;
            }
            if runs >= SHRINK_RUNS_MAX {
                break 'shrinking;
            }
        }
        break;
    }
    Ok(Shrunk {
        faults: (faults_before, fault_count(&current)),
        messages: (messages_before, current.messages.len()),
        scenario: current,
        invariant: invariant.name().to_owned(),
        runs,
    })
}

impl Shrunk {
    /// The regression scenario file for this result.
    pub fn regression(&self, name: &str, bug: &str, seed: u64, from: &str) -> Scenario {
        let mut scenario = self.scenario.clone();
        scenario.name = name.to_owned();
        let what = if bug.is_empty() { String::new() } else { format!(" with planted bug {bug}") };
        scenario.description = format!(
            "Regression: {from} at seed {seed}{what} breaks {}; shrunk to {} fault(s) and {} message(s).",
            self.invariant, self.faults.1, self.messages.1
        );
        scenario.regression = Some(Regression {
            bug: bug.to_owned(),
            invariant: self.invariant.clone(),
            seed,
            shrunk_from: format!("{from} --seed {seed}"),
        });
        scenario
    }
}
