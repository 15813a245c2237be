//! `faultline transcript inspect/repair/cat/append` on hand-made files, every exit status, and
//! two real processes contending for one session.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // builds real fixture files

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use faultline_e2e::{faultline, faultline_bin, stderr, stdout};
use faultline_runtime::event::*;
use faultline_runtime::store::{FileStore, Format, SessionId, Store};
use serde_json::Value;

const T0: u64 = 1_767_225_600_000;

fn header_line(id: &str) -> String {
    SessionHeader::new(id, T0).encode() + "\n"
}

fn line(seq: u64, event: Event) -> String {
    Record::new(seq, T0 + seq, event).encode() + "\n"
}

/// A closed turn and an open one (turn/start + step/start + user message).
fn records() -> Vec<String> {
    vec![
        line(0, Event::TurnStart(TurnStart { turn: 1 })),
        line(1, Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Completed })),
        line(2, Event::TurnStart(TurnStart { turn: 2 })),
        line(3, Event::StepStart(StepRef { turn: 2, step: 1 })),
        line(4, Event::UserMessage(UserMessage { message: Message::user_text("hi") })),
    ]
}

fn jsonl_file(dir: &Path, lines: &[String]) -> PathBuf {
    let path = dir.join("session.jsonl");
    std::fs::write(&path, header_line("hand-made") + &lines.concat()).unwrap();
    path
}

fn inspect_json(path: &Path) -> (i32, Value) {
    let output = faultline(&["transcript", "inspect", path.to_str().unwrap(), "--json"]);
    let value = serde_json::from_str(stdout(&output).trim()).unwrap_or(Value::Null);
    (output.status.code().unwrap(), value)
}

#[test]
fn inspect_reports_a_clean_log_with_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let path = jsonl_file(dir.path(), &records()[..2]);
    let (code, value) = inspect_json(&path);
    assert_eq!(code, 0);
    assert_eq!(value["status"], "clean");
    assert_eq!(value["records"], 2);
    assert_eq!(value["last_seq"], 1);
    assert_eq!(value["torn_bytes"], 0);
    assert_eq!(value["open_turn"], false);
    assert_eq!(value["closers"], serde_json::json!([]));
    assert_eq!(value["error"], Value::Null);
}

#[test]
fn inspect_shows_closers_in_the_logs_own_shape_with_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let path = jsonl_file(dir.path(), &records());
    let (code, value) = inspect_json(&path);
    assert_eq!(code, 3);
    assert_eq!(value["open_turn"], true);
    assert_eq!(
        value["closers"],
        serde_json::json!([
            {"type":"step/end","seq":5,"time":T0 + 4,"data":{"turn":2,"step":1}},
            {"type":"turn/end","seq":6,"time":T0 + 4,"data":{"turn":2,"reason":{"kind":"interrupted"}}},
        ])
    );
    // The directory form names the same file; the summary form is for people.
    let output = faultline(&["transcript", "inspect", dir.path().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(3));
    assert!(stdout(&output).contains("open turn:  yes"), "{}", stdout(&output));
    // A clean file that still exits 3 says why, and what closes it.
    assert!(
        stdout(&output).contains("verdict:    needs repair (exit 3): a turn that never ended")
            && stdout(&output).contains("`faultline transcript repair`"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn repair_commits_closers_and_truncates_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = records();
    let torn = "{\"type\":\"assistant/ch";
    lines.push(torn.into());
    let path = jsonl_file(dir.path(), &lines);
    let (code, value) = inspect_json(&path);
    assert_eq!((code, value["status"].as_str()), (3, Some("torn")));
    assert_eq!(value["torn_bytes"], torn.len());

    let output = faultline(&["transcript", "repair", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stdout(&output).contains(&format!("truncated {} torn bytes", torn.len())), "{}", stdout(&output));
    let (code, value) = inspect_json(&path);
    assert_eq!((code, value["status"].as_str(), value["records"].as_u64()), (0, Some("clean"), Some(7)));

    let output = faultline(&["transcript", "repair", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0));
    assert!(stdout(&output).contains("nothing to repair"));
}

#[test]
fn corrupt_logs_exit_4_and_are_left_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = records()[..2].to_vec();
    lines.push("not json\n".into());
    lines.push(line(3, Event::TurnEnd(TurnEnd { turn: 2, reason: TurnEndReason::Completed })));
    let path = jsonl_file(dir.path(), &lines);
    let before = std::fs::read(&path).unwrap();
    let (code, value) = inspect_json(&path);
    assert_eq!(code, 4);
    assert_eq!(value["status"], "corrupt");
    let offset = (header_line("hand-made").len() + lines[0].len() + lines[1].len()) as u64;
    assert_eq!(value["error"]["offset"], offset);
    let output = faultline(&["transcript", "repair", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(4));
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn an_unsupported_version_exits_5() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl");
    std::fs::write(&path, "{\"type\":\"session\",\"version\":2,\"id\":\"x\",\"created_at\":0}\n").unwrap();
    let (code, value) = inspect_json(&path);
    assert_eq!((code, value["status"].as_str()), (5, Some("unsupported")));
    assert_eq!(faultline(&["transcript", "repair", path.to_str().unwrap()]).status.code(), Some(5));
}

#[test]
fn a_missing_file_exits_1_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    for command in ["inspect", "repair", "cat"] {
        let missing = dir.path().join("session.jsonl");
        let output = faultline(&["transcript", command, missing.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(1), "{command}");
        assert!(stderr(&output).contains("not found"), "{command}: {}", stderr(&output));
    }
    let output = faultline(&["transcript", "inspect", dir.path().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("no session.jsonl"));
}

#[test]
fn cat_prints_committed_events_decompressed() {
    let dir = tempfile::tempdir().unwrap();
    let seams = faultline_runtime::production::seams();
    let store = FileStore::new(seams, dir.path(), Format::Zstd);
    let id = SessionId::new("z").unwrap();
    let mut log = store.create(&id, T0).unwrap();
    let batch: Vec<Record> = records()[..2].iter().map(|l| Record::decode(l.trim_end()).unwrap()).collect();
    log.append(&batch).unwrap();
    log.close().unwrap();
    let path = dir.path().join("z").join("session.jsonl.zst");
    let output = faultline(&["transcript", "cat", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), records()[..2].concat());
}

/// Starts `faultline transcript append` holding session `s`, returns once it holds it.
fn hold(dir: &Path, store: &str, extra: &[&str]) -> std::process::Child {
    let mut child = Command::new(faultline_bin())
        .args(["transcript", "append", "--dir", dir.to_str().unwrap(), "--session", "s", "--store", store])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("holding session s"), "child said {first:?}");
    child
}

#[test]
fn a_second_process_is_refused_and_a_sigkilled_owner_is_taken_over_explicitly() {
    for store in ["jsonl", "zstd", "sqlite"] {
        let dir = tempfile::tempdir().unwrap();
        let mut first = hold(dir.path(), store, &["--create"]);
        first.stdin.as_mut().unwrap().write_all(records()[0].as_bytes()).unwrap();

        let second = Command::new(faultline_bin())
            .args(["transcript", "append", "--dir", dir.path().to_str().unwrap(), "--session", "s", "--store", store])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(second.status.code(), Some(1), "{store}");
        let refusal = stderr(&second);
        assert!(
            refusal.contains("live writer") && refusal.contains(&format!("pid {}", first.id())),
            "{store}: {refusal}"
        );

        first.kill().unwrap(); // SIGKILL
        first.wait().unwrap();

        let stale = Command::new(faultline_bin())
            .args(["transcript", "append", "--dir", dir.path().to_str().unwrap(), "--session", "s", "--store", store])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(stale.status.code(), Some(1), "{store}");
        assert!(stderr(&stale).contains("no longer running"), "{store}: {}", stderr(&stale));

        let mut taker = hold(dir.path(), store, &["--takeover"]);
        let mut said = String::new();
        drop(taker.stdin.take());
        BufReader::new(taker.stdout.as_mut().unwrap()).read_line(&mut said).unwrap();
        assert!(taker.wait().unwrap().success(), "{store}");
    }
}
