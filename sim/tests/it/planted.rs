//! The harness finds bugs: every planted bug of the catalog is caught within a fixed seed
//! budget, and the clean build passes the same budget. Compiled only with the `planted-bugs`
//! feature (`.ci/run` runs it as its own step).
#![cfg(feature = "planted-bugs")]
#![allow(clippy::print_stdout)] // reports seeds-to-catch per bug

use faultline_runtime::bugs::CATALOG;
use faultline_sim::cli::sweep::hunt_bug;

/// Seeds per scenario each bug gets (measured: every bug falls at seed 0).
const BUDGET_SEEDS: u64 = 4;

#[test]
fn every_planted_bug_is_caught_within_the_budget_and_the_clean_build_passes_it() {
    let clean = hunt_bug(&[], BUDGET_SEEDS).unwrap();
    assert!(clean.replay.is_none(), "the clean build failed: {:?} ({:?})", clean.replay, clean.invariant);
    for (bug, what) in CATALOG {
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
