//! Every built-in scenario: passes its invariants over several seeds, replays a seed to the
//! same trace, and recovers the transcript its snapshot records.

use faultline_sim::run;
use faultline_sim::{Scenario, BUILT_IN_SCENARIOS};

fn scenarios() -> Vec<Scenario> {
    BUILT_IN_SCENARIOS
        .iter()
        .map(|info| Scenario::parse(info.text).unwrap_or_else(|e| panic!("{}: {e}", info.name)))
        .collect()
}

#[test]
fn every_built_in_scenario_holds_its_invariants_over_several_seeds() {
    for scenario in scenarios() {
        for seed in 0..6 {
            let result = run(&scenario, seed);
            assert!(
                result.passed(),
                "{} seed {seed}: {:?}\nreplay: faultline run {} --seed {seed} --trace",
                scenario.name,
                result.violations,
                scenario.name
            );
        }
    }
}

#[test]
fn a_seed_replays_to_the_same_trace() {
    for scenario in scenarios() {
        let first = run(&scenario, 3);
        let second = run(&scenario, 3);
        assert_eq!(first.trace, second.trace, "{}: same seed, same trace", scenario.name);
        assert_eq!(first.trace_hash, second.trace_hash);
    }
}

#[test]
fn different_seeds_explore_different_mixed_worlds() {
    let mixed = Scenario::built_in("mixed").unwrap();
    let hashes: std::collections::BTreeSet<String> = (0..12).map(|seed| run(&mixed, seed).trace_hash).collect();
    assert!(hashes.len() >= 6, "only {} distinct worlds in 12 seeds", hashes.len());
}

#[test]
fn every_crash_point_and_fault_family_fires_in_the_built_in_scenarios() {
    let mut points = std::collections::BTreeSet::new();
    let mut families = std::collections::BTreeSet::new();
    for scenario in scenarios() {
        let result = run(&scenario, 1);
        points.extend(result.crash_point_hits.keys().cloned());
        families.extend(result.faults_fired.iter().cloned());
    }
    for point in faultline_runtime::seams::CRASH_POINTS {
        assert!(points.contains(&point.to_string()), "crash point {point} never reached");
    }
    for family in [
        "refused",
        "disconnect",
        "partial-eof",
        "stall",
        "http-status",
        "retry-after",
        "empty-completion",
        "empty-body",
        "malformed",
        "torn-write",
        "eio",
        "enospc",
        "partition",
        "crash-point",
        "cancel",
        "config-rejected",
        "supervisor-restart",
        "echoed-secret",
        "power-loss-hole",
        "bit-rot",
        "oversize-output",
        "disk-full",
        "dialect-mistral",
        "dialect-openrouter",
        "refusal",
        "no-finish-reason",
    ] {
        assert!(families.contains(family), "fault family {family} never fired (fired: {families:?})");
    }
}

/// The recovered transcript of seed 1 of every scenario, as readable JSON lines, reviewed
/// like code (`snapshots/`), under each wire format it declares: the first format's is
/// `NAME.snap`; another format gets `NAME-FORMAT.snap` only where its transcript differs.
/// CI runs with INSTA_UPDATE=no: drift fails.
#[test]
fn recovered_transcripts_match_their_snapshots() {
    for scenario in scenarios() {
        let mut first: Option<String> = None;
        for format in scenario.formats.clone() {
            let text = snapshot_text(&Scenario { formats: vec![format], ..scenario.clone() });
            let name = match &first {
                None => scenario.name.clone(),
                Some(first) if *first == text => continue,
                Some(_) => format!("{}-{format}", scenario.name),
            };
            insta::with_settings!({ snapshot_path => "../../../snapshots", prepend_module_to_snapshot => false, omit_expression => true, description => scenario.description.clone() }, {
                insta::assert_snapshot!(name, text);
            });
            first.get_or_insert(text);
        }
    }
}

/// Seed 1's recovered transcript and world events, as the snapshot holds them.
fn snapshot_text(scenario: &Scenario) -> String {
    let result = run(scenario, 1);
    let mut text = match &result.refused {
        // No transcript was recovered: the refusal itself is what a person would read.
        Some(refused) => format!("refused: {refused}\n"),
        None => elide_runs(&result.transcript.iter().map(|r| r.encode() + "\n").collect::<String>()),
    };
    text.push_str(&world_events(&result.trace));
    text
}

/// What happened around the transcript, from the trace: every line that is not a record the
/// agent wrote — restarts, the crash and where it hit, faults, partitions, what recovery did
/// to the delivery queue, what the gateway received. Two scenarios that recover the same
/// transcript by different paths (a crash after the gateway's effect, a crash while its
/// receipt is recorded) differ here, so each snapshot shows what its name says.
fn world_events(trace: &[String]) -> String {
    let is_record_line = |line: &str| {
        let mut words = line.split_whitespace().skip(1);
        words.next().is_some_and(|host| host.starts_with("agent#"))
            && words.next().is_some_and(|seq| seq.bytes().all(|b| b.is_ascii_digit()))
    };
    let events: Vec<&str> = trace.iter().map(String::as_str).filter(|line| !is_record_line(line)).collect();
    // The agent's first event is its first incarnation's start, at 0 (a swarm's line or a
    // partition from 0 may come before it): a trace that starts anywhere else lost its
    // beginning.
    // A fleet run (the zombie family) starts with its workers' plan instead.
    let fleet = events.first().is_some_and(|line| line.trim_start().starts_with("0 worker-a "));
    let first = events.iter().find(|line| line.contains("agent#")).map(|line| line.trim_start());
    assert!(fleet || first == Some("0 agent#1 starts"), "{trace:?}");
    let mut out = String::from("\n# world (ms, from the trace; records omitted)\n");
    for line in events {
        out.push_str(line.trim_start());
        out.push('\n');
    }
    out
}

/// Runs of one repeated character longer than [`RUN_CHARS_SHOWN_MAX`] (the oversize answers
/// and tool outputs; a run of a letter, a digit or any non-ASCII character) shown as
/// `<N × 'c'>`, so a snapshot stays readable; the count is exact, in characters.
fn elide_runs(text: &str) -> String {
    const RUN_CHARS_SHOWN_MAX: usize = 64;
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let mut run = 1;
        while chars.next_if_eq(&c).is_some() {
            run += 1;
        }
        if (c.is_ascii_alphanumeric() || !c.is_ascii()) && run > RUN_CHARS_SHOWN_MAX {
            out.push_str(&format!("<{run} × '{c}'>"));
        } else {
            out.extend(std::iter::repeat_n(c, run));
        }
    }
    out
}

/// Closed sets in scenario files are enums: a typo is a parse error naming the field, not a
/// silently different run (a `gatway` tool used to become a local echo tool).
#[test]
fn a_typo_in_a_tool_kind_or_a_disk_error_fails_to_parse() {
    let base = faultline_sim::Scenario::built_in("torn-write-mid-append").unwrap().to_toml();
    let typo_tool = base.replace("kind = \"gateway\"", "kind = \"gatway\"");
    assert_ne!(typo_tool, base);
    let error = faultline_sim::Scenario::parse(&typo_tool).unwrap_err().to_string();
    assert!(error.contains("gatway") && error.contains("tools"), "{error}");
    let typo_disk = base.replace("[faults.fs]", "[faults.fs]\nfail_op = 3\nfail_kind = \"eoi\"");
    let error = faultline_sim::Scenario::parse(&typo_disk).unwrap_err().to_string();
    assert!(error.contains("eoi") && error.contains("fail_kind"), "{error}");
}

#[test]
fn a_regression_naming_a_bug_outside_the_catalog_fails_to_parse() {
    let info = faultline_sim::REGRESSION_SCENARIOS.iter().find(|s| s.name == "at-most-once-unknown-claimable").unwrap();
    let typo = info.text.replace("bug = \"unknown-claimable\"", "bug = \"unknown-claimabel\"");
    assert_ne!(typo, info.text);
    let error = faultline_sim::Scenario::parse(&typo).unwrap_err();
    assert!(error.contains("unknown-claimabel") && error.contains("catalog"), "{error}");
}
