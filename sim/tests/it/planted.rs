//! The harness finds bugs: every planted bug of the catalog is caught within a fixed seed
//! budget, and the clean build passes the same budget. Compiled only with the `planted-bugs`
//! feature (`.ci/run` runs it as its own step).
#![cfg(feature = "planted-bugs")]
#![allow(clippy::print_stdout)] // reports seeds-to-catch per bug

use faultline_runtime::testing::bugs::{CATALOG, REAL_ONLY};
use faultline_sim::sweep::hunt_bug;

/// Seeds per scenario each bug gets (measured: every bug falls at seed 0).
const BUDGET_SEEDS: u64 = 4;

#[test]
fn every_planted_bug_is_caught_within_the_budget_and_the_clean_build_passes_it() {
    let clean = hunt_bug(&[], BUDGET_SEEDS).unwrap();
    assert!(clean.replay.is_none(), "the clean build failed: {:?} ({:?})", clean.replay, clean.invariant);
    for (bug, what) in CATALOG {
        if REAL_ONLY.contains(&bug) {
            // Below the seams the simulator replaces: it must NOT see it (or it would not be
            // real-only); `cli/tests/real_bugs.rs` catches it for real.
            let catch = hunt_bug(&[bug.to_owned()], 1).unwrap();
            assert!(catch.replay.is_none(), "{bug} is caught in simulation too: {:?}", catch.invariant);
            continue;
        }
        let catch = hunt_bug(&[bug.to_owned()], BUDGET_SEEDS).unwrap();
        assert!(catch.replay.is_some(), "planted bug {bug} ({what}) survived {} runs", catch.runs);
        println!(
            "{bug:<26} caught after {:>3} runs ({} seed/scenario, {} ms): {}",
            catch.runs,
            catch.seeds,
            catch.wall_ms,
            catch.invariant.unwrap_or_default()
        );
    }
}

#[test]
fn every_regression_scenario_fails_with_its_planted_bug_and_the_same_invariant() {
    for info in faultline_sim::REGRESSION_SCENARIOS {
        let scenario = faultline_sim::Scenario::parse(info.text).unwrap();
        let regression = scenario.regression.clone().unwrap();
        faultline_runtime::testing::bugs::plant(&[regression.bug.as_str()]);
        let result = faultline_sim::world::run(&scenario, regression.seed);
        faultline_runtime::testing::bugs::plant(&[]);
        assert!(
            result.violations.iter().any(|v| v.invariant == regression.invariant),
            "{} with {} should break {}: {:?}",
            scenario.name,
            regression.bug,
            regression.invariant,
            result.violations
        );
    }
}

#[test]
fn shrinking_a_planted_bug_failure_leaves_a_handful_of_faults_that_still_fail() {
    let mixed = faultline_sim::Scenario::built_in("mixed").unwrap();
    faultline_runtime::testing::bugs::plant(&["tool-body-before-flush"]);
    let shrunk = faultline_sim::shrink::shrink(&mixed, 1).expect("seed 1 fails with this bug");
    let replay = faultline_sim::world::run(&shrunk.scenario, 1);
    faultline_runtime::testing::bugs::plant(&[]);
    assert_eq!(shrunk.invariant, "intent-before-effect");
    assert!(shrunk.faults.1 < shrunk.faults.0, "fewer faults: {:?}", shrunk.faults);
    assert!(
        shrunk.faults.1 <= 3 && shrunk.messages.1 <= shrunk.messages.0,
        "{:?} {:?}",
        shrunk.faults,
        shrunk.messages
    );
    assert!(replay.violations.iter().any(|v| v.invariant == "intent-before-effect"), "the shrunk case still fails");
    let clean = faultline_sim::world::run(&shrunk.scenario, 1);
    assert!(clean.passed(), "and passes on the clean build: {:?}", clean.violations);
}

/// Seeds of `mixed` and `generated` each bug gets to break an invariant (measured: the
/// slowest, `unlogged-retry`, falls at seed 19).
const INVARIANT_SEEDS: u64 = 64;

/// A hand-written expectation knows the bug it was written for; an invariant must catch it in
/// runs nobody wrote for it.
#[test]
fn every_planted_bug_breaks_an_invariant_in_a_generated_run() {
    let mut missed = Vec::new();
    for (bug, what) in CATALOG {
        if REAL_ONLY.contains(&bug) {
            continue;
        }
        faultline_runtime::testing::bugs::plant(&[bug]);
        let caught = ["mixed", "generated"].iter().find_map(|name| {
            let scenario = faultline_sim::Scenario::built_in(name).unwrap();
            (0..INVARIANT_SEEDS).find_map(|seed| {
                let result = faultline_sim::world::run(&scenario, seed);
                let violation = result.violations.iter().find(|v| v.invariant != "expectation")?;
                Some((*name, seed, violation.invariant))
            })
        });
        faultline_runtime::testing::bugs::plant(&[]);
        match caught {
            Some((name, seed, invariant)) => println!("{bug:<26} {name} seed {seed:>2}: {invariant}"),
            None => missed.push(format!("{bug} ({what})")),
        }
    }
    assert!(
        missed.is_empty(),
        "no invariant caught these in {INVARIANT_SEEDS} seeds of mixed and generated: {missed:?}"
    );
}
