//! Hunting planted bugs: the built-in sweep (or an embedder's generated scenario) with bugs of
//! the catalog planted, stopped at the first failure (`faultline hunt`, the planted-bug tests).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // wall time: the harness, not the runtime

use std::time::Instant;

use crate::scenario::{Scenario, BUILT_IN_SCENARIOS};
use crate::verdict;

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
    hunt_bug_with(bugs, budget, |_, _| {})
}

/// [`hunt_bug`], calling `progress(runs, most)` after every run.
pub fn hunt_bug_with(bugs: &[String], budget: u64, progress: impl Fn(usize, usize)) -> Result<Catch, String> {
    hunt_with(bugs, budget, None, progress)
}

/// Hunts on every built-in scenario, or on `agent` (an embedder's agent under its generated
/// conversation) when given, with `bugs` planted (none: the first failing seed of the build
/// as it is), stopping at the first failure.
pub fn hunt_with(
    bugs: &[String],
    budget: u64,
    agent: Option<&std::sync::Arc<crate::world::AgentUnderTest>>,
    progress: impl Fn(usize, usize),
) -> Result<Catch, String> {
    plant(bugs)?;
    let scenarios: Vec<Scenario> = match agent {
        Some(_) => vec![Scenario::built_in(crate::GENERATED).expect("the generated scenario is built in")],
        None => BUILT_IN_SCENARIOS.iter().map(|s| Scenario::parse(s.text).expect("built-in scenarios parse")).collect(),
    };
    let started = Instant::now();
    let mut runs = 0;
    let name = bugs.join(",");
    for seed in 0..budget {
        for scenario in &scenarios {
            runs += 1;
            let result = match agent {
                Some(agent) => verdict::run_agent(scenario, seed, agent),
                None => verdict::run(scenario, seed),
            };
            progress(runs, budget as usize * scenarios.len());
            if !result.passed() {
                plant(&[])?;
                let mut replay = format!("faultline run {} --seed {seed}", result.scenario);
                for bug in bugs {
                    replay.push_str(&format!(" --bug {bug}"));
                }
                if let Some(agent) = agent {
                    replay.push_str(&format!(" --agent {}", agent.name()));
                }
                return Ok(Catch {
                    bug: name,
                    runs,
                    seeds: seed + 1,
                    wall_ms: started.elapsed().as_millis() as u64,
                    replay: Some(replay),
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
