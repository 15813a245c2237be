//! The README's quick start, run as the README shows it: its `sh` block is read from
//! README.md and every command in it is executed (the binary this test run built stands in
//! for `./target/debug/faultline`, a temporary directory for the quick start's `/tmp` one).
//! A README edit that breaks the quick start, or adds a command this test cannot run, fails
//! here.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes and files

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use faultline_e2e::{faultline_bin, stderr, stdout};
use serde_json::Value;

/// The heading whose first `sh` block is the quick start.
const HEADING: &str = "## Quick start";
/// The directory the quick start keeps its session in.
const QUICKSTART_DIR: &str = "/tmp/faultline-quickstart";

/// The command lines of the quick start's `sh` block (comments and blank lines left out).
fn quickstart_lines() -> Vec<String> {
    faultline_e2e::doc_sh_lines("README.md", HEADING)
}

/// Splits a command line as `sh` would for the quoting the README uses ("…" and '…').
fn words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quote, mut started) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (None, '"' | '\'') => (quote, started) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if started {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
            }
            (_, c) => (word, started) = (word + &c.to_string(), true),
        }
    }
    assert!(quote.is_none(), "unbalanced quote in {line:?}");
    if started {
        words.push(word);
    }
    words
}

/// A background job of the quick start (`… &`), killed by `kill %1` or on drop.
struct Job(Child);

impl Drop for Job {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_readme_quick_start_runs_as_written() {
    let lines = quickstart_lines();
    assert!(lines.len() >= 4, "a quick start with commands: {lines:?}");
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("faultline-quickstart");
    let local = |word: &str| word.replace(QUICKSTART_DIR, sessions.to_str().unwrap());
    let mut job: Option<Job> = None;
    let mut outputs = Vec::new();
    for line in &lines {
        let mut argv: Vec<String> = words(line).iter().map(|w| local(w)).collect();
        let background = argv.last().is_some_and(|w| w == "&");
        if background {
            argv.pop();
        }
        match argv.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
            // This test run built the binary already.
            ["cargo", "build", ..] => continue,
            ["rm", "-rf", path] => {
                assert!(path.starts_with(dir.path().to_str().unwrap()), "only the quick start's own directory");
                let _ = std::fs::remove_dir_all(path);
            }
            ["kill", "%1"] => drop(job.take().expect("a background job to kill")),
            ["./target/debug/faultline", args @ ..] => {
                let mut command = Command::new(faultline_bin());
                command.args(args).current_dir(faultline_e2e::repo_root());
                if background {
                    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
                    let mut first = String::new();
                    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
                    assert!(
                        first.starts_with("listening on "),
                        "{line}: the server says where it listens, got {first:?} (is the port taken? its stderr is above)"
                    );
                    job = Some(Job(child));
                } else {
                    let output = command.output().unwrap();
                    assert_eq!(output.status.code(), Some(0), "{line}:\n{}{}", stdout(&output), stderr(&output));
                    outputs.push((line.clone(), stdout(&output)));
                }
            }
            other => panic!("the quick start has a command this test does not run: {other:?} (teach it here)"),
        }
    }
    assert!(job.is_none(), "the quick start stops the server it started");
    let said = |command: &str| {
        outputs.iter().find(|(line, _)| line.contains(command)).map(|(_, out)| out.clone()).unwrap_or_default()
    };
    assert!(said("agent run").contains("The tool says it is quick-start time."), "{outputs:?}");
    assert!(said("transcript inspect").contains("nothing to repair (exit 0)"), "{outputs:?}");
    // What the disk holds, read here and not from the agent: the tool's result and a
    // completed turn.
    let session = sessions.join("quickstart").join("session.jsonl");
    let records: Vec<Value> = std::fs::read_to_string(&session)
        .unwrap_or_else(|e| panic!("{}: {e}", session.display()))
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let result = records.iter().find(|r| r["type"] == "tool/result").expect("the tool ran");
    assert_eq!(result["data"]["content"][0]["text"], "quick-start time\n", "{result}");
    let end = records.last().unwrap();
    assert_eq!((&end["type"], &end["data"]["reason"]["kind"]), (&Value::from("turn/end"), &Value::from("completed")));
}

#[test]
fn quick_start_words_split_as_sh_does() {
    assert_eq!(words(r#"a --prompt "What time is it?" 'x y'"#), ["a", "--prompt", "What time is it?", "x y"]);
    assert_eq!(words("run &"), ["run", "&"]);
    assert_eq!(words(r#"a """#), ["a", ""]);
}
