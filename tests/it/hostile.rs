//! The hostile world (issue 14): each defect a new user hit on 055b8a5, reproduced against the
//! real binary — an echoed credential, a tool that reads the key, an answer too large for a
//! record, a line rotted in the middle of a committed file, inspecting commands that wrote,
//! and a bare file name.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes and files

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use faultline_e2e::{agent_run_args, faultline, faultline_bin, logged_requests, stderr, stdout, ModelServerProcess};
use faultline_runtime::event::*;
use serde_json::{json, Value};

/// A key shaped like no known format: only scrubbing by value can catch it.
const KEY: &str = "LEAKCANARY2plainKey";
const KEY_VAR: &str = "FAULTLINE_TEST_KEY";
const T0: u64 = 1_767_225_600_000;

fn write_config(dir: &Path, base_url: &str, tools: &str) -> PathBuf {
    let text = format!(
        r#"
[provider]
preset = "openai-compatible"
base_url = "{base_url}"
model = "test-model"
api_key_env = "{KEY_VAR}"
idle_timeout_ms = 60000

[provider.retry_policy]
mode = "normal"
max_retries = 1
retryable_codes = ["RATE_LIMIT", "SERVER"]

[provider.retry_policy.backoff]
initial_delay_ms = 10
max_delay_ms = 100
jitter_ratio = 0
{tools}"#
    );
    let path = dir.join("agent.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `faultline ARGS` with the key in the environment (and `OTHER_VAR` beside it).
fn run_with_key(args: &[&str], cwd: Option<&Path>) -> Output {
    let mut command = Command::new(faultline_bin());
    command.args(args).env(KEY_VAR, KEY).env("OTHER_VAR", "other-value");
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    command.output().expect("spawn faultline")
}

fn agent_run(config: &Path, sessions: &Path, store: &str, resume: Option<&str>) -> Output {
    let mut extra = vec!["--store", store, "--session", "s1", "--json", "--prompt", "go"];
    extra.extend(resume);
    run_with_key(&agent_run_args(config, sessions, &extra), None)
}

/// Every file under `dir`, with its bytes.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    out
}

fn assert_no_key(place: &str, bytes: &[u8]) {
    let found = bytes.windows(KEY.len()).position(|w| w == KEY.as_bytes());
    assert!(found.is_none(), "the key leaked into {place} at byte {found:?}: {}", String::from_utf8_lossy(bytes));
}

#[test]
fn a_credential_echoed_by_the_server_is_scrubbed_from_every_file_and_output() {
    for store in ["jsonl", "sqlite"] {
        let dir = tempfile::tempdir().unwrap();
        let echo = "Your api key: {{key}} is invalid; Authorization: {{authorization}}";
        let server = ModelServerProcess::start(
            dir.path(),
            &json!({"responses": [
                {"status": 429, "headers": {"retry-after-ms": "10", "x-request-id": "req-{{key}}"},
                 "body": json!({"error": {"message": echo}}).to_string()},
                {"frames": [{"raw": json!({"error": {"message": echo}}).to_string()}]},
            ]}),
        );
        let config = write_config(dir.path(), &server.base_url(), "");
        let sessions = dir.path().join("sessions");
        let output = agent_run(&config, &sessions, store, None);
        assert_eq!(output.status.code(), Some(2), "{store}: {}", stderr(&output));
        let summary: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
        assert!(summary.to_string().contains("***"), "{store}: the echo is there, scrubbed: {summary}");
        assert_no_key(&format!("{store}: stdout"), &output.stdout);
        assert_no_key(&format!("{store}: stderr"), &output.stderr);
        for (path, bytes) in files_under(&sessions) {
            assert_no_key(&format!("{store}: {}", path.display()), &bytes);
        }
        let requests = logged_requests(dir.path());
        assert_eq!(requests.len(), 2, "the 429 was retried once");
    }
}

/// `-vv` turns the runtime's tracing on: the turn and step spans, the classification, the
/// failed attempt and the retry reach stderr — as codes and counts, never the echoed key.
#[test]
fn verbose_logs_show_turns_attempts_and_retries_without_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let echo = "Your api key: {{key}} is invalid";
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"status": 429, "headers": {"retry-after-ms": "10"}, "body": json!({"error": {"message": echo}}).to_string()},
            {"frames": [{"text": "fine"}], "finish": "stop"},
        ]}),
    );
    let config = write_config(dir.path(), &server.base_url(), "");
    let sessions = dir.path().join("sessions");
    let mut args = vec!["-vv"];
    args.extend(agent_run_args(&config, &sessions, &["--session", "s1", "--prompt", "go"]));
    let output = run_with_key(&args, None);
    assert!(output.status.success(), "{}", stderr(&output));
    let logs = stderr(&output);
    for expected in ["response classified", "attempt failed", "RATE_LIMIT", "retrying the step", "turn ended", "turn{"]
    {
        assert!(logs.contains(expected), "{expected:?} missing from the logs:\n{logs}");
    }
    assert_no_key("the verbose logs", &output.stderr);
    let quiet = run_with_key(&agent_run_args(&config, &sessions, &["--session", "s2", "--prompt", "go"]), None);
    assert!(!stderr(&quiet).contains("attempt"), "no logs without -v: {}", stderr(&quiet));
}

#[test]
fn llm_stream_scrubs_an_echoed_key_from_its_finish_line() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [{"status": 401, "body": "{\"error\":{\"message\":\"bad key {{key}} / {{authorization}}\"}}"}]}),
    );
    let output = run_with_key(
        &[
            "llm",
            "stream",
            "--base-url",
            &server.base_url(),
            "--model",
            "m",
            "--api-key-env",
            KEY_VAR,
            "--prompt",
            "hi",
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stdout(&output).contains("AUTH") && stdout(&output).contains("***"), "{}", stdout(&output));
    assert_no_key("llm stream stdout", &output.stdout);
    assert_no_key("llm stream stderr", &output.stderr);
}

#[test]
fn tools_and_receivers_never_see_the_provider_key_and_refusals_are_scrubbed_by_value() {
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": [
                {"tool_call": {"index": 0, "id": "c1", "name": "peek", "arguments": "{}"}},
                {"tool_call": {"index": 1, "id": "c2", "name": "narrow", "arguments": "{}"}},
                {"tool_call": {"index": 2, "id": "c3", "name": "send", "arguments": "{}"}}
            ], "finish": "tool_calls"},
            {"frames": [{"text": "done"}], "finish": "stop"}
        ]}),
    );
    let tools = format!(
        r#"
[[tools]]
name = "peek"
description = "prints what it can see"
command = ["sh", "-c", "echo key=${{{KEY_VAR}:-absent}} deepseek=${{DEEPSEEK_API_KEY:-absent}} other=${{OTHER_VAR:-absent}}"]

[[tools]]
name = "narrow"
description = "an allow list that names the key: the key is still withheld"
command = ["sh", "-c", "echo key=${{{KEY_VAR}:-absent}} other=${{OTHER_VAR:-absent}} home=${{HOME:-absent}}"]
env_allow = ["{KEY_VAR}", "OTHER_VAR"]

[[tools]]
name = "send"
description = "a receiver that refuses, quoting a secret it was handed on its command line"
command = ["sh", "-c", "echo refused: {KEY} >&2; exit 2"]
via_outbox = true
env_deny = ["OTHER_VAR"]
"#
    );
    let config = write_config(dir.path(), &server.base_url(), &tools);
    let sessions = dir.path().join("sessions");
    // The key reaches the process only through the environment, never its config.
    let output = run_with_key(&agent_run_args(&config, &sessions, &["--json", "--prompt", "go"]), None);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let log: String = files_under(&sessions)
        .into_iter()
        .filter(|(p, _)| p.ends_with("session.jsonl"))
        .map(|(_, b)| String::from_utf8(b).unwrap())
        .collect();
    assert!(log.contains("key=absent deepseek=absent other=other-value"), "{log}");
    assert!(log.contains("key=absent other=other-value home=absent"), "allow list narrows: {log}");
    for (path, bytes) in files_under(&sessions) {
        assert_no_key(&path.display().to_string(), &bytes);
    }
    let listed = faultline(&["outbox", "list", "--db", sessions.join("outbox.sqlite").to_str().unwrap(), "--json"]);
    assert!(stdout(&listed).contains("refused: ***"), "{}", stdout(&listed));
    for request in logged_requests(dir.path()) {
        assert_no_key("a model request", request.to_string().as_bytes());
    }
}

#[test]
fn an_answer_too_large_for_a_record_ends_the_attempt_and_the_session_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    // 20 frames of ~1 MB: 20 MB, far under the 64 MiB body limit, over the 16 MiB record.
    let piece = "x".repeat(1_000_000);
    let frames: Vec<Value> = (0..20).map(|_| json!({"text": piece})).collect();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": frames, "finish": "stop"},
            {"frames": [{"text": "small answer"}], "finish": "stop"}
        ]}),
    );
    let config = write_config(dir.path(), &server.base_url(), "");
    let sessions = dir.path().join("sessions");
    let output = agent_run(&config, &sessions, "jsonl", None);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("RESPONSE_TOO_LARGE"), "{}", stderr(&output));
    assert_eq!(logged_requests(dir.path()).len(), 1, "never retried");
    let session = sessions.join("s1").join("session.jsonl");
    let inspected = faultline(&["transcript", "inspect", session.to_str().unwrap(), "--json"]);
    assert_eq!(inspected.status.code(), Some(0), "{}", stdout(&inspected));
    let longest = std::fs::read_to_string(&session).unwrap().lines().map(str::len).max().unwrap();
    assert!(longest <= faultline_runtime::store::RECORD_LINE_BYTES_MAX, "{longest}");
    let resumed = agent_run(&config, &sessions, "jsonl", Some("--resume"));
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert!(stdout(&resumed).contains("small answer"), "{}", stdout(&resumed));
}

fn line(seq: u64, event: Event) -> String {
    Record::new(seq, T0 + seq, event).encode() + "\n"
}

/// 14 lines: two closed turns, then a turn whose tool call is durable (line 12) and open.
fn fourteen_lines() -> Vec<String> {
    let text = |t: &str| Message::user_text(t);
    let call =
        |turn, step, id: &str| ToolCall { turn, step, call_id: id.into(), name: "send".into(), arguments: "{}".into() };
    let assistant = Message { role: Role::Assistant, content: vec![ContentBlock::tool_call("c9", "send", "{}")] };
    let chunk = |seq: u64| AssistantChunk {
        turn: 2,
        step: 1,
        attempt: 1,
        chunk: Chunk::TextDelta { index: 0, text: format!("piece {seq}") },
    };
    vec![
        line(0, Event::TurnStart(TurnStart { turn: 1 })),
        line(1, Event::StepStart(StepRef { turn: 1, step: 1 })),
        line(2, Event::UserMessage(UserMessage { message: text("one") })),
        line(3, Event::StepEnd(StepRef { turn: 1, step: 1 })),
        line(4, Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Completed })),
        line(5, Event::TurnStart(TurnStart { turn: 2 })),
        line(6, Event::StepStart(StepRef { turn: 2, step: 1 })),
        line(7, Event::UserMessage(UserMessage { message: text("two") })),
        line(8, Event::AssistantChunk(chunk(8))),
        {
            let event = Event::AssistantMessage(AssistantMessage { turn: 2, step: 1, message: assistant, usage: None });
            let mut record = Record::new(9, T0 + 9, event);
            record.source_seqs = Some(vec![8]);
            record.encode() + "\n"
        },
        line(10, Event::ToolCall(call(2, 1, "c9"))),
        line(11, Event::AssistantChunk(chunk(11))),
        line(12, Event::AssistantChunk(chunk(12))),
    ]
}

fn session_file(dir: &Path, lines: &[String]) -> PathBuf {
    let path = dir.join("session.jsonl");
    let header = SessionHeader::new("hand-made", T0).encode() + "\n";
    std::fs::write(&path, header + &lines.concat()).unwrap();
    path
}

#[test]
fn a_damaged_line_followed_by_complete_records_is_corrupt_and_nothing_repairs_it() {
    let damaged = [
        // Undecodable: the reproduction of the issue, line 6 of 14.
        "{\"type\":\"assistant/chunk\",\"seq\":5,\"time\":1,\"data\":{GARBAGE\n".to_owned(),
        // A seq gap.
        line(6, Event::TurnStart(TurnStart { turn: 2 })),
        // A wrongly typed seq.
        "{\"type\":\"turn/start\",\"seq\":\"5\",\"time\":1,\"data\":{\"turn\":2}}\n".to_owned(),
    ];
    for bad in damaged {
        let dir = tempfile::tempdir().unwrap();
        let mut lines = fourteen_lines();
        lines[5] = bad.clone();
        let path = session_file(dir.path(), &lines);
        let before = std::fs::read(&path).unwrap();
        let inspected = faultline(&["transcript", "inspect", path.to_str().unwrap(), "--json"]);
        assert_eq!(inspected.status.code(), Some(4), "{bad}: {}", stdout(&inspected));
        let value: Value = serde_json::from_str(stdout(&inspected).trim()).unwrap();
        assert_eq!(value["status"], "corrupt", "{bad}");
        let told = stdout(&faultline(&["transcript", "inspect", path.to_str().unwrap()]));
        assert!(told.contains("verdict:    corrupt (exit 4)") && told.contains("restore the session"), "{told}");
        for command in ["repair", "report", "cat"] {
            let output = faultline(&["transcript", command, path.to_str().unwrap()]);
            assert_ne!(output.status.code(), Some(0), "{command} {bad}: {}", stdout(&output));
        }
        assert_eq!(std::fs::read(&path).unwrap(), before, "{bad}: left byte-identical");
    }
}

#[test]
fn a_hole_of_zero_bytes_in_the_last_unit_is_torn_and_the_repair_says_what_it_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = fourteen_lines();
    // Power loss inside the last write unit: line 11 zeroed, line 12 complete after it.
    lines[11] = "\0".repeat(lines[11].len() - 1) + "\n";
    let path = session_file(dir.path(), &lines);
    let inspected = faultline(&["transcript", "inspect", path.to_str().unwrap(), "--json"]);
    assert_eq!(inspected.status.code(), Some(3), "{}", stdout(&inspected));
    let value: Value = serde_json::from_str(stdout(&inspected).trim()).unwrap();
    assert_eq!((value["status"].as_str(), value["torn_from_seq"].as_u64()), (Some("torn"), Some(11)));
    assert_eq!(value["dropped_records"], 1);
    let told = stdout(&faultline(&["transcript", "inspect", path.to_str().unwrap()]));
    assert!(told.contains("verdict:    needs repair (exit 3): a torn tail of"), "exit 3 says why: {told}");
    let repaired = faultline(&["transcript", "repair", path.to_str().unwrap()]);
    assert_eq!(repaired.status.code(), Some(0), "{}", stderr(&repaired));
    assert!(stdout(&repaired).contains("from seq 11 (1 complete records among them)"), "{}", stdout(&repaired));
    let cat = stdout(&faultline(&["transcript", "cat", path.to_str().unwrap()]));
    assert!(cat.contains("TOOL_OUTCOME_UNKNOWN"), "the durable tool/call is closed as unknown: {cat}");
}

#[test]
fn inspecting_commands_never_create_or_change_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("app.sqlite");
    std::fs::write(&empty, b"").unwrap();
    // Another application's database, made by SQLite itself (no Python needed, nothing skipped).
    let foreign = dir.path().join("foreign.sqlite");
    {
        let connection = rusqlite::Connection::open(&foreign).unwrap();
        connection
            .execute_batch(
                "create table users(id integer primary key, name text); insert into users(name) values ('ada');",
            )
            .unwrap();
    }
    for db in [&empty, &foreign] {
        let before = std::fs::read(db).unwrap();
        for command in ["inspect", "cat", "report"] {
            let output = faultline(&["transcript", command, "--sqlite", db.to_str().unwrap(), "--session", "s1"]);
            assert_eq!(output.status.code(), Some(1), "{command} {}: {}", db.display(), stderr(&output));
            assert!(stderr(&output).contains("not a faultline database"), "{}", stderr(&output));
        }
        let listed = faultline(&["outbox", "list", "--db", db.to_str().unwrap()]);
        assert_eq!(listed.status.code(), Some(1), "{}", stderr(&listed));
        assert_eq!(std::fs::read(db).unwrap(), before, "{} untouched", db.display());
    }
    // A real faultline database: inspecting it leaves the directory as it was (no -wal/-shm).
    let store_dir = dir.path().join("store");
    std::fs::create_dir(&store_dir).unwrap();
    let mut append = Command::new(faultline_bin())
        .args(["transcript", "append", "--dir", store_dir.to_str().unwrap(), "--session", "s1", "--store", "sqlite"])
        .arg("--create")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    append
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n")
        .unwrap();
    assert!(append.wait().unwrap().success());
    let db = store_dir.join("sessions.sqlite");
    let listing = |dir: &Path| {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    };
    let (before_files, before_bytes) = (listing(&store_dir), std::fs::read(&db).unwrap());
    for command in ["inspect", "cat", "report"] {
        let output = faultline(&["transcript", command, "--sqlite", db.to_str().unwrap(), "--session", "s1"]);
        assert!(matches!(output.status.code(), Some(0 | 3)), "{command}: {}", stderr(&output));
    }
    assert_eq!(listing(&store_dir), before_files, "no -wal or -shm left behind");
    assert_eq!(std::fs::read(&db).unwrap(), before_bytes);

    let typo = dir.path().join("typo.sqlite");
    let listed = faultline(&["outbox", "list", "--db", typo.to_str().unwrap()]);
    assert_eq!(listed.status.code(), Some(1), "{}", stderr(&listed));
    assert!(!typo.exists(), "a missing queue is an error, never created");
}

#[test]
fn a_bare_file_name_names_a_file_in_the_current_directory() {
    let dir = tempfile::tempdir().unwrap();
    let lines = fourteen_lines();
    let jsonl = session_file(dir.path(), &lines);
    // The same log as zstd, beside it in its own directory.
    let zdir = dir.path().join("z");
    std::fs::create_dir(&zdir).unwrap();
    let store = faultline_runtime::store::FileStore::new(
        faultline_runtime::production::seams(),
        dir.path().join("zroot"),
        faultline_runtime::store::Format::Zstd,
    );
    use faultline_runtime::store::Store;
    let id = faultline_runtime::store::SessionId::new("z1").unwrap();
    let mut log = store.create(&id, T0).unwrap();
    log.append(&[Record::new(0, T0, Event::TurnStart(TurnStart { turn: 1 }))]).unwrap();
    log.close().unwrap();
    std::fs::copy(store.session_path(&id), zdir.join("session.jsonl.zst")).unwrap();
    for (cwd, name) in [(jsonl.parent().unwrap(), "session.jsonl"), (zdir.as_path(), "session.jsonl.zst")] {
        for command in ["inspect", "cat", "report", "repair"] {
            let output = run_with_key(&["transcript", command, name], Some(cwd));
            assert!(
                matches!(output.status.code(), Some(0 | 3)),
                "{command} {name}: {} {}",
                stdout(&output),
                stderr(&output)
            );
        }
    }
}
