//! The harness's reach beyond the hand-written files: generated conversations, the per-seed
//! swarm of faults, the liveness phase, and shrunk regression scenarios replayed against the
//! clean build.

use std::collections::BTreeSet;

use faultline_sim::generate::Swarm;
use faultline_sim::generate::{fault_plan_strategy, workload, workload_strategy};
use faultline_sim::run;
use faultline_sim::shrink::{fault_count, materialise};
use faultline_sim::{Scenario, REGRESSION_SCENARIOS};
use proptest::prelude::*;

fn regressions() -> Vec<Scenario> {
    REGRESSION_SCENARIOS
        .iter()
        .map(|info| Scenario::parse(info.text).unwrap_or_else(|e| panic!("{}: {e}", info.name)))
        .collect()
}

#[test]
fn every_regression_scenario_passes_at_its_seed_on_the_clean_build() {
    assert!(REGRESSION_SCENARIOS.len() >= 3, "the shrunk regressions are missing");
    for scenario in regressions() {
        let regression = scenario.regression.clone().expect("regression files say where they came from");
        assert!(fault_count(&scenario) <= 5, "{} is not small: {} faults", scenario.name, fault_count(&scenario));
        let result = run(&scenario, regression.seed);
        assert!(
            result.passed(),
            "{} at seed {}: {:?}\nreplay: faultline run {} --seed {}",
            scenario.name,
            regression.seed,
            result.violations,
            scenario.name,
            regression.seed
        );
    }
}

#[test]
#[allow(clippy::disallowed_methods)] // lists the real scenarios directory
fn every_regression_file_on_disk_is_registered() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/regressions");
    let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    let registered: BTreeSet<String> = REGRESSION_SCENARIOS.iter().map(|s| s.name.to_owned()).collect();
    assert_eq!(on_disk, registered, "scenarios/regressions/ and the regressions! list differ");
    for scenario in regressions() {
        assert!(registered.contains(&scenario.name), "file name and `name` differ for {}", scenario.name);
    }
}

#[test]
fn a_materialised_plan_replays_the_same_run() {
    for name in ["mixed", "generated"] {
        let scenario = Scenario::built_in(name).unwrap();
        for seed in 0..8 {
            let original = run(&scenario, seed);
            let written = materialise(&scenario, seed);
            let reparsed = Scenario::parse(&written.to_toml()).expect("a materialised scenario parses back");
            let replayed = run(&reparsed, seed);
            // Only the swarm's description line differs: everything it drew is now explicit.
            let body = |trace: &[String]| trace.iter().filter(|l| !l.contains("swarm:")).cloned().collect::<Vec<_>>();
            assert_eq!(body(&original.trace), body(&replayed.trace), "{name} seed {seed}");
            assert_eq!(original.passed(), replayed.passed());
        }
    }
}

#[test]
fn the_swarm_turns_each_fault_family_on_for_some_seeds_and_off_for_others() {
    let swarms: Vec<Swarm> = (0..64).map(Swarm::draw).collect();
    type IsOn = fn(&Swarm) -> bool;
    let families: [(&str, IsOn); 8] = [
        ("model failures", |s| s.model_failures.is_some()),
        ("refused", |s| s.refused),
        ("crash", |s| s.crash.is_some()),
        ("torn writes", |s| s.torn_block.is_some()),
        ("disk error", |s| s.fs_error.is_some()),
        ("crash before a disk op", |s| s.fs_crash_before_op.is_some()),
        ("partitions", |s| !s.partitions.is_empty()),
        ("the zstd store", |s| s.zstd),
    ];
    for (family, on) in families {
        let count = swarms.iter().filter(|s| on(s)).count();
        assert!((8..=56).contains(&count), "{family} is on in {count} of 64 seeds");
    }
    // A full disk is drawn less often (a quarter of the seeds): it ends the turns it catches.
    let full = swarms.iter().filter(|s| s.disk_full.is_some()).count();
    assert!((4..=28).contains(&full), "the disk fills in {full} of 64 seeds");
    let refusals: BTreeSet<&str> = swarms.iter().filter_map(|s| s.disk_full).map(|f| f.refuses.name()).collect();
    assert_eq!(refusals.len(), 3, "every way a full disk refuses is drawn: {refusals:?}");
    let probabilities: BTreeSet<u64> =
        swarms.iter().filter_map(|s| s.model_failures.as_ref()).map(|(p, _)| (p * 100.0) as u64).collect();
    assert!(probabilities.len() > 10, "the failure probability is drawn per seed, not fixed");
    assert_eq!(Swarm::draw(7).describe(), Swarm::draw(7).describe(), "a seed's swarm is fixed");
}

#[test]
fn a_seed_stands_for_one_generated_conversation() {
    assert_eq!(workload(11), workload(11));
    let distinct: BTreeSet<String> = (0..16).map(|seed| format!("{:?}", workload(seed))).collect();
    assert!(distinct.len() >= 12, "only {} distinct conversations in 16 seeds", distinct.len());
}

/// Found by the proptest below: a cancel that lands 1 ms after the last turn ended finds the
/// agent disposed, so the message sent with it is refused, not lost, and owes no turn.
#[test]
fn a_cancel_after_the_workload_ended_owes_no_turn_for_its_refused_message() {
    let workload = faultline_sim::generate::Workload {
        turns: vec![vec![], vec![vec!["slow"]], vec![vec!["send"]]],
        slow_work_ms: 2800,
        slow_timeout_ms: 200,
        slow_ignores_abort: true,
        tool_concurrency: 1,
        cancel: Some((2981, true)),
        person: Default::default(),
    };
    let mut scenario = workload.apply(&Scenario::built_in("generated").unwrap());
    let cancel = (scenario.faults.cancel_at_ms, scenario.faults.cancel_then_submit);
    scenario.faults = Default::default();
    (scenario.faults.cancel_at_ms, scenario.faults.cancel_then_submit) = cancel;
    let result = run(&scenario, 0);
    assert!(result.trace.iter().any(|l| l.ends_with(" cancel")), "the cancel fired");
    assert!(result.passed(), "{:?}", result.violations);
}

/// Found by the proptest below: a crash while a person's approval was being appended left
/// the unsynced `approval/decided` whole on disk (a torn write keeps some unsynced blocks);
/// the next incarnation found it and ran the approved call. The disk witness took its first
/// image of the file as "reported before" and never counted that record durable, so it
/// named a run that was right. What survived the crash is on the disk from the restart on.
#[test]
fn an_approval_that_survived_a_crash_unsynced_is_durable_from_the_restart_on() {
    let person = faultline_sim::Person { think_ms: 10, ..Default::default() };
    let workload = faultline_sim::generate::Workload {
        turns: vec![vec![vec!["refund"]]],
        slow_work_ms: 10,
        slow_timeout_ms: 200,
        slow_ignores_abort: false,
        tool_concurrency: 1,
        cancel: None,
        person,
    };
    let scenario = workload.apply(&Scenario::built_in("generated").unwrap());
    let result = run(&scenario, 1308);
    let refused = "person: deciding call_0_0_0 was refused: persisting the session failed";
    assert!(result.trace.iter().any(|line| line.contains(refused)), "the decision's append met the crash");
    assert!(result.trace.iter().any(|line| line.contains("agent#2") && line.contains("approval/dispatched")));
    assert!(result.passed(), "{:?}", result.violations);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whole generated conversations under a swarm of faults keep every invariant; proptest
    /// shrinks a failing conversation to a small one.
    #[test]
    fn generated_workloads_under_swarm_faults_keep_every_invariant(conversation in workload_strategy(), seed in 0..10_000u64) {
        let base = Scenario::built_in("generated").unwrap();
        let scenario = conversation.apply(&base);
        let result = run(&scenario, seed);
        prop_assert!(result.passed(), "seed {seed}: {:?}", result.violations);
    }

    /// The same with fault plans from a proptest strategy instead of the seed's swarm, so a
    /// failure shrinks to fewer crashes, disk faults and partitions.
    #[test]
    fn generated_workloads_under_generated_fault_plans_keep_every_invariant(
        conversation in workload_strategy(),
        faults in fault_plan_strategy(),
        seed in 0..10_000u64,
    ) {
        let base = Scenario::built_in("generated").unwrap();
        let mut scenario = conversation.apply(&base);
        let cancel = (scenario.faults.cancel_at_ms, scenario.faults.cancel_then_submit);
        scenario.faults = faults;
        (scenario.faults.cancel_at_ms, scenario.faults.cancel_then_submit) = cancel;
        let result = run(&scenario, seed);
        prop_assert!(result.passed(), "seed {seed}, faults {:?}: {:?}", scenario.faults, result.violations);
    }
}

fn liveness_scenario(extra: &str) -> Scenario {
    Scenario::parse(&format!(
        r#"
name = "liveness-phase"
description = "test"
tick_ms = 10
budget_ms = 30000
heal_at_ms = 5000
messages = ["go"]
provider = """
idle_timeout_ms = 500
[provider.retry_policy]
max_retries = 100
[provider.retry_policy.backoff]
initial_delay_ms = 100
max_delay_ms = 500
jitter_ratio = 0
"""
[[model.responses]]
frames = [{{ text = "ok" }}]
finish = "stop"
{extra}
"#
    ))
    .unwrap()
}

#[test]
fn faults_heal_after_the_window_and_the_workload_converges() {
    // The model is unreachable "forever"; only the liveness phase ends the partition.
    let scenario = liveness_scenario(
        "[[faults.partitions]]\na = \"agent\"\nb = \"model\"\nfrom_ms = 0\nto_ms = 1000000\n[expect]\nturn_ends = [\"completed\"]",
    );
    let result = run(&scenario, 1);
    assert!(result.passed(), "{:?}", result.violations);
    assert!(result.trace.iter().any(|l| l.contains("fault window over")), "the heal is traced");
    assert!(result.sim_ms > 5_000 && result.sim_ms < 30_000, "converged after the heal: {} ms", result.sim_ms);
}

#[test]
fn a_workload_that_cannot_converge_is_reported_as_no_liveness_not_as_a_safety_violation() {
    let mut scenario = liveness_scenario("");
    // A tool that never returns and has no deadline: healing the faults cannot help.
    scenario.tools = vec![faultline_sim::ScenarioTool {
        name: "hang".into(),
        kind: faultline_sim::ToolKind::Sleep,
        timeout_ms: None,
        work_ms: 10_000_000,
        ignore_abort: true,
        output_bytes: None,
        output_char: None,
        description: None,
        parameters: None,
        results: Vec::new(),
        approval: false,
        approval_deadline_ms: None,
    }];
    scenario.model.responses.insert(0, faultline_sim::model_server::Response::tool_call("c1", "hang", "{}"));
    let result = run(&scenario, 1);
    let invariants: Vec<&str> = result.violations.iter().map(|v| v.invariant.name()).collect();
    assert_eq!(invariants, ["liveness"], "{:?}", result.violations);
    assert!(result.violations[0].detail.starts_with("no liveness"), "{}", result.violations[0].detail);
}

/// Found by the proptest (seed 5720): the first life dies before the cancel, so the cancel's
/// message is refused; the next life must not resend it (the user saw the refusal).
#[test]
fn a_message_refused_by_a_dead_agent_is_not_resent_after_the_restart() {
    let workload = faultline_sim::generate::Workload {
        turns: vec![vec![]],
        slow_work_ms: 10,
        slow_timeout_ms: 200,
        slow_ignores_abort: false,
        tool_concurrency: 1,
        cancel: Some((1, true)),
        person: Default::default(),
    };
    let scenario = workload.apply(&Scenario::built_in("generated").unwrap());
    let result = run(&scenario, 5720);
    assert!(result.trace.iter().any(|l| l.contains("agent#1 stopped")), "the first life died first");
    assert!(result.trace.iter().any(|l| l.ends_with(" cancel")), "the cancel fired");
    assert!(result.passed(), "{:?}", result.violations);
}
