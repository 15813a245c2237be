//! The `faultline` binary itself: it names its version, lists its commands, hides the
//! internal one, and refuses what it does not know with the bad-arguments status. This target
//! also makes `cargo test --workspace` build `target/<profile>/faultline` (cargo builds a
//! package's binaries for its integration tests), which the end-to-end tests in `tests/`
//! drive.
#![allow(clippy::disallowed_methods)] // runs the real binary

use std::process::{Command, Output};

fn faultline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_faultline")).args(args).output().unwrap()
}

#[test]
fn the_binary_prints_exactly_its_package_version() {
    let output = faultline(&["--version"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&output.stdout), format!("faultline {}\n", env!("CARGO_PKG_VERSION")));
}

#[test]
fn help_lists_every_public_command_and_hides_the_real_agent_host() {
    let output = faultline(&["--help"]);
    assert_eq!(output.status.code(), Some(0));
    let help = String::from_utf8_lossy(&output.stdout);
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    let expected = [
        "sweep",
        "scenarios",
        "run",
        "hunt",
        "shrink",
        "scenario",
        "transcript",
        "llm",
        "model-server",
        "agent",
        "db",
        "outbox",
        "mcp",
        "approval",
        "demo",
        "bench",
        "help",
    ];
    assert_eq!(listed, expected, "{help}");
}

#[test]
fn an_unknown_command_is_a_bad_argument_named_on_stderr() {
    let output = faultline(&["sweeep"]);
    assert_eq!(output.status.code(), Some(1), "bad arguments exit 1, not clap's 2");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unrecognized subcommand 'sweeep'"), "{stderr}");
    assert!(output.stdout.is_empty());
}
