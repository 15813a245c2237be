//! docs/your-agent.md, run as written: the CLI walkthrough's `sh` block is read from the page
//! and every line runs under `sh` from the repository root (the binary this test run built
//! stands in for `./target/debug/faultline`, a temporary directory for `/tmp/`). A line's
//! `# exits N` comment is its expected exit status (0 without one).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes and files

use std::process::Command;

use faultline_e2e::{doc_sh_lines, faultline_bin, repo_root, stderr, stdout};

#[test]
fn the_your_agent_walkthrough_runs_as_written() {
    let lines = doc_sh_lines("docs/your-agent.md", "## The CLI user: your agent file");
    assert!(lines.len() >= 4, "a walkthrough with commands: {lines:?}");
    let dir = tempfile::tempdir().unwrap();
    let bin = faultline_bin();
    for line in &lines {
        let (command, expected) = match line.split_once("# exits ") {
            Some((command, code)) => (command.trim(), code.trim().parse::<i32>().expect("an exit status")),
            None => (line.as_str(), 0),
        };
        // The page's own `/tmp/` paths first: the binary's path may lie under /tmp too (a clone
        // in /tmp/fresh), and must not be rewritten.
        let command = command
            .replace("/tmp/", &format!("{}/", dir.path().display()))
            .replace("./target/debug/faultline", bin.to_str().unwrap());
        let output = Command::new("sh").arg("-c").arg(&command).current_dir(repo_root()).output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(expected),
            "{line}\nstdout:\n{}\nstderr:\n{}",
            stdout(&output),
            stderr(&output)
        );
        if line.contains("run generated --seed 16") {
            assert!(stdout(&output).contains("violated at-most-once: tool send_email"), "{}", stdout(&output));
        }
    }
}
