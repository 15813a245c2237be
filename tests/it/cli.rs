//! The command line as a user meets it.

use faultline_e2e::{faultline, stderr, stdout};

#[test]
fn sweep_runs_on_a_fresh_build() {
    let output = faultline(&["sweep"]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    assert!(stdout(&output).contains("0 failures"), "stdout: {}", stdout(&output));
}

#[test]
fn sweep_refuses_an_unknown_scenario_by_name() {
    let output = faultline(&["sweep", "--scenario", "no-such-scenario"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("no-such-scenario"));
}

#[test]
fn help_names_the_commands() {
    let output = faultline(&["--help"]);
    assert!(output.status.success());
    for command in ["sweep", "scenarios"] {
        assert!(stdout(&output).contains(command), "--help lacks {command}");
    }
}

#[test]
fn bad_arguments_exit_non_zero() {
    let output = faultline(&["no-such-command"]);
    assert!(!output.status.success());
}
