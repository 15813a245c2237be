//! The delivery queue across real processes: a claim held by a SIGKILLed child becomes
//! `unknown` at the parent's next drain and is never sent; an operator resend goes out once,
//! under a new id.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes and files

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use faultline_e2e::{agent_run_args, faultline, faultline_bin, stderr, stdout};
use serde_json::Value;

/// `faultline outbox enqueue` with `payload` on stdin.
fn enqueue(db: &str, id: &str, payload: &[u8]) {
    let mut child = Command::new(faultline_bin())
        .args(["outbox", "enqueue", "--db", db, id])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(payload).unwrap();
    assert!(child.wait().unwrap().success());
}

/// A `faultline outbox claim` child holding the next row, and what it said.
fn hold_claim(db: &str) -> (std::process::Child, String) {
    let mut holder = Command::new(faultline_bin())
        .args(["outbox", "claim", "--db", db])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    BufReader::new(holder.stdout.take().unwrap()).read_line(&mut said).unwrap();
    (holder, said)
}

#[test]
fn a_claim_held_by_a_sigkilled_process_becomes_unknown_and_is_never_sent() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("outbox.sqlite");
    let db = db.to_str().unwrap();
    let sends = dir.path().join("sends.log");
    let receiver = format!("cat >> {}; echo >> {}; echo posted", sends.display(), sends.display());

    enqueue(db, "s:1:1:c1", b"{\"text\":\"hi\"}");

    let (mut holder, said) = hold_claim(db);
    assert_eq!(said.trim(), "claimed s:1:1:c1");
    holder.kill().unwrap(); // SIGKILL mid-delivery
    holder.wait().unwrap();

    let drained = faultline(&["outbox", "drain", "--db", db, "--", "sh", "-c", &receiver]);
    assert!(drained.status.success(), "{}", stderr(&drained));
    assert!(
        stdout(&drained).contains("unknown    s:1:1:c1  (abandoned mid-delivery; not resent"),
        "{}",
        stdout(&drained)
    );
    assert!(!sends.exists(), "the abandoned claim was never sent");

    let listed = faultline(&["outbox", "list", "--db", db, "--json"]);
    let row: Value = serde_json::from_str(stdout(&listed).lines().next().unwrap()).unwrap();
    assert_eq!(row["status"], "unknown");
    assert_eq!(row["owner"]["pid"].as_u64(), Some(u64::from(holder.id())));

    let again = faultline(&["outbox", "drain", "--db", db, "--", "sh", "-c", &receiver]);
    assert_eq!(stdout(&again), "", "a second drain sends nothing");

    let resolved = faultline(&["outbox", "resolve", "--db", db, "s:1:1:c1", "--resend"]);
    assert_eq!(stdout(&resolved).trim(), "s:1:1:c1: resent as s:1:1:c1#resend-1");
    let drained = faultline(&["outbox", "drain", "--db", db, "--", "sh", "-c", &receiver]);
    assert!(stdout(&drained).contains("delivered  s:1:1:c1#resend-1"), "{}", stdout(&drained));
    assert_eq!(std::fs::read_to_string(&sends).unwrap(), "{\"text\":\"hi\"}\n", "sent exactly once");

    let bad = faultline(&["outbox", "resolve", "--db", db, "s:1:1:c1", "--delivered", "--resend"]);
    assert_eq!(bad.status.code(), Some(1));
}

/// A crashed session: c1 durably started, c2 requested but not started; the queue holds
/// c1's delivery as claimed (delivering) and a deferred c9.
fn crashed_session(dir: &std::path::Path) -> std::path::PathBuf {
    use faultline_runtime::event::*;
    let session = dir.join("s");
    std::fs::create_dir_all(&session).unwrap();
    let mut lines = vec![SessionHeader::new("s", 0).encode()];
    let calls = vec![ContentBlock::tool_call("c1", "send", "{}"), ContentBlock::tool_call("c2", "send", "{}")];
    let events = vec![
        (Event::TurnStart(TurnStart { turn: 1 }), None),
        (Event::StepStart(StepRef { turn: 1, step: 1 }), None),
        (Event::UserMessage(UserMessage { message: Message::user_text("send two") }), None),
        (
            Event::AssistantMessage(AssistantMessage {
                turn: 1,
                step: 1,
                message: Message { role: Role::Assistant, content: calls },
                usage: None,
            }),
            Some(vec![]),
        ),
        (
            Event::ToolCall(ToolCall {
                turn: 1,
                step: 1,
                call_id: "c1".into(),
                name: "send".into(),
                arguments: "{}".into(),
            }),
            None,
        ),
    ];
    for (seq, (event, sources)) in events.into_iter().enumerate() {
        let mut record = Record::new(seq as u64, 1, event);
        record.source_seqs = sources;
        lines.push(record.encode());
    }
    let path = session.join("session.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

#[test]
fn the_recovery_report_names_every_unknown_execution_and_what_to_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = crashed_session(dir.path());
    let db = dir.path().join("outbox.sqlite");
    let db = db.to_str().unwrap();
    for id in ["s:1:1:c1", "s:1:1:c9"] {
        enqueue(db, id, b"{}");
    }
    // c1 was claimed by a process that then died.
    let (mut holder, _) = hold_claim(db);
    holder.kill().unwrap();
    holder.wait().unwrap();

    let output = faultline(&["transcript", "report", path.to_str().unwrap(), "--outbox", db, "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(report["unknown"][0]["execution_id"], "s:1:1:c1");
    assert_eq!(report["unknown"][0]["tool"], "send");
    assert!(report["unknown"][0]["detail"].as_str().unwrap().contains("delivering"), "{report}");
    assert_eq!(report["never_started"][0]["execution_id"], "s:1:1:c2");
    assert_eq!(report["queued"], serde_json::json!([["s:1:1:c1", "delivering"], ["s:1:1:c9", "pending"]]));
    assert_eq!(report["interrupted_turns"], 1);

    let prose = stdout(&faultline(&["transcript", "report", path.to_str().unwrap(), "--outbox", db]));
    assert!(prose.contains("check send's receiver for execution s:1:1:c1"), "{prose}");
    assert!(prose.contains("Nothing was resent"), "{prose}");
    assert!(prose.contains("s:1:1:c9: pending (deferred: will be sent by the next drain)"), "{prose}");
}

#[test]
fn agent_run_routes_a_side_effect_through_the_queue_exactly_once() {
    use faultline_e2e::{logged_requests, ModelServerProcess};
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &serde_json::json!({"responses": [
            {"frames": [{"tool_call": {"index": 0, "id": "call_1", "name": "post", "arguments": "{\"text\":\"hi\"}"}}], "finish": "tool_calls"},
            {"frames": [{"text": "Posted."}], "finish": "stop"}
        ]}),
    );
    let sent = dir.path().join("sent.log");
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[provider]\npreset = \"openai-compatible\"\nbase_url = \"{}\"\nmodel = \"m\"\n\n[[tools]]\nname = \"post\"\ndescription = \"post\"\ncommand = [\"sh\", \"-c\", \"cat >> {}; echo; echo id=$FAULTLINE_EXECUTION_ID\"]\nside_effects = true\nvia_outbox = true\n\n[outbox]\ndb = \"queue.sqlite\"\n",
            server.base_url(),
            sent.display()
        ),
    )
    .unwrap();
    let sessions = dir.path().join("sessions");
    let output = faultline(&agent_run_args(&config, &sessions, &["--session", "s1", "--prompt", "post hi", "--json"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let summary: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(summary["assistant_text"], "Posted.");
    assert_eq!(std::fs::read_to_string(&sent).unwrap(), "{\"text\":\"hi\"}");
    // A relative `[outbox] db` is in the session directory, not wherever the command ran.
    let listed = faultline(&["outbox", "list", "--db", sessions.join("queue.sqlite").to_str().unwrap(), "--json"]);
    let row: Value = serde_json::from_str(stdout(&listed).lines().next().unwrap()).unwrap();
    assert_eq!(row["execution_id"], "s1:1:1:call_1");
    assert_eq!(row["status"], "delivered");
    assert_eq!(row["result"], "id=s1:1:1:call_1");
    assert_eq!(logged_requests(dir.path()).len(), 2);
}

/// Several real processes drain one SQLite queue at once: every row is sent exactly once (the
/// receipt log, written by the receiver, is the evidence), and more than one process did work.
#[test]
fn concurrent_drains_in_separate_processes_send_every_row_exactly_once() {
    const ROWS: usize = 24;
    const DRAINS: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("outbox.sqlite");
    let db = db.to_str().unwrap();
    let receipts = dir.path().join("receipts.log");
    for i in 0..ROWS {
        enqueue(db, &format!("s:{i}:1:c1"), format!("{{\"n\":{i}}}").as_bytes());
    }
    // One short line per send (atomic under O_APPEND): the execution id and the drain's pid.
    let receiver = format!(
        "cat > /dev/null; sleep 0.05; echo \"$FAULTLINE_EXECUTION_ID $PPID\" >> {}; echo ok",
        receipts.display()
    );
    let drains: Vec<std::process::Child> = (0..DRAINS)
        .map(|_| {
            Command::new(faultline_bin())
                .args(["outbox", "drain", "--db", db, "--", "sh", "-c", &receiver])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for drain in drains {
        let out = drain.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let log = std::fs::read_to_string(&receipts).unwrap();
    let mut sent: Vec<&str> = log.lines().map(|l| l.split(' ').next().unwrap()).collect();
    sent.sort_unstable();
    let mut expected: Vec<String> = (0..ROWS).map(|i| format!("s:{i}:1:c1")).collect();
    expected.sort_unstable();
    assert_eq!(sent, expected, "each row sent exactly once");
    let senders: std::collections::BTreeSet<&str> = log.lines().map(|l| l.split(' ').nth(1).unwrap()).collect();
    assert!(senders.len() >= 2, "the drains ran concurrently: senders {senders:?}");
    let listed = faultline(&["outbox", "list", "--db", db, "--json"]);
    let rows: Vec<Value> = stdout(&listed).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), ROWS);
    assert!(rows.iter().all(|r| r["status"] == "delivered"), "{rows:?}");
}
