//! A real full disk (FAILURE-OUTCOME-DURABLE): the session directory on a small tmpfs, an
//! answer larger than the space left. `agent run` must never report `completed` for a turn
//! that is not on disk, must exit non-zero naming the disk error, and must leave a session
//! that inspects clean or repairable and resumes once space is back — on every store.
//!
//! Needs the right to mount a tmpfs (root): skipped elsewhere with the reason, a failure where
//! `FAULTLINE_REQUIRE_TMPFS` is set (CI).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes, files and mounts

use std::path::Path;

use faultline_e2e::{agent_run_args, faultline, skip_or_fail, stderr, stdout, ModelServerProcess, Tmpfs};
use serde_json::{json, Value};

/// The tmpfs, in KiB: room for the session's set-up and its first checkpoint, not the answer.
const DISK_KIB: u64 = 160;
/// The tmpfs once space is back, in KiB.
const DISK_BACK_KIB: u64 = 4096;
/// The answer, in bytes: incompressible text, so that zstd cannot make it fit either.
const ANSWER_BYTES: usize = 400_000;

/// Text no compressor shrinks much: letters from a fixed xorshift stream.
fn incompressible(bytes: usize) -> String {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(b'a' + (state % 26) as u8)
        })
        .collect()
}

fn config(dir: &Path, base_url: &str) -> std::path::PathBuf {
    let path = dir.join("agent.toml");
    let text = format!(
        "[provider]\npreset = \"openai-compatible\"\nbase_url = \"{base_url}\"\nmodel = \"m\"\n\
         [provider.retry_policy]\nmax_retries = 0\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn run(config: &Path, sessions: &Path, store: &str, extra: &[&str]) -> (i32, Value, String) {
    let output = faultline(&agent_run_args(config, sessions, &[&["--store", store, "--json"], extra].concat()));
    let summary = serde_json::from_str(stdout(&output).trim()).unwrap_or(Value::Null);
    (output.status.code().unwrap_or(-1), summary, stderr(&output))
}

fn inspect(sessions: &Path, store: &str, session: &str) -> (i32, Value) {
    let (db, dir) = (sessions.join("sessions.sqlite"), sessions.join(session));
    let target: Vec<&str> = match store {
        "sqlite" => vec!["--sqlite", db.to_str().unwrap(), "--session", session],
        _ => vec![dir.to_str().unwrap()],
    };
    let output = faultline(&[&["transcript", "inspect", "--json"], target.as_slice()].concat());
    let code = output.status.code().unwrap_or(-1);
    (code, serde_json::from_str(stdout(&output).trim()).unwrap_or(Value::Null))
}

#[test]
fn a_turn_that_does_not_fit_the_disk_is_never_reported_completed_and_resumes_once_space_is_back() {
    let answer = incompressible(ANSWER_BYTES);
    for store in ["jsonl", "zstd", "sqlite"] {
        let disk = match Tmpfs::mount(DISK_KIB) {
            Ok(disk) => disk,
            Err(why) => return skip_or_fail(faultline_e2e::REQUIRE_TMPFS_VAR, &format!("no tmpfs: {why}")),
        };
        let work = tempfile::tempdir().unwrap();
        let server = ModelServerProcess::start(
            work.path(),
            &json!({"responses": [
                {"frames": [{"text": answer}], "finish": "stop"},
                {"frames": [{"text": "Back again."}], "finish": "stop"}
            ]}),
        );
        let config = config(work.path(), &server.base_url());
        let sessions = disk.path().join("sessions");

        let (code, summary, err) = run(&config, &sessions, store, &["--session", "s1", "--prompt", "write a lot"]);
        assert_eq!(code, 6, "{store}: a turn that is not on disk exits 6 (not kept): {err}");
        assert_eq!(summary["kept"], false, "{store}: {summary}");
        assert_eq!(summary["end_reason"]["kind"], "error", "{store}: never `completed`: {summary}");
        assert_eq!(summary["end_reason"]["error"]["code"], "PERSIST", "{store}: {summary}");
        let disk_error = if store == "sqlite" { "SQLITE_FULL" } else { "ENOSPC" };
        let message = summary["end_reason"]["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(disk_error), "{store}: the disk error is named first: {message}");
        assert_eq!(summary["reached"], json!({"kind": "completed"}), "{store}: what it reached in memory");
        assert_eq!(summary["assistant_text"].as_str().map(str::len), Some(ANSWER_BYTES), "{store}: shown");
        assert!(err.contains("NOT kept") && err.contains("--resume"), "{store}: says what to do: {err}");

        // The session is clean or repairable, never corrupt, while the disk is still full.
        let (code, inspection) = inspect(&sessions, store, "s1");
        assert!(code == 0 || code == 3, "{store}: inspect exits {code}: {inspection}");
        assert_ne!(inspection["status"], "corrupt", "{store}: {inspection}");

        disk.resize(DISK_BACK_KIB);
        let (code, summary, err) =
            run(&config, &sessions, store, &["--session", "s1", "--resume", "--prompt", "and now?"]);
        assert_eq!(code, 0, "{store}: space is back, the session resumes: {err}");
        assert_eq!(summary["kept"], true, "{store}: {summary}");
        assert_eq!(summary["turn"], 2, "{store}: the lost turn was repaired, not replayed: {summary}");
        assert_eq!(summary["assistant_text"], "Back again.", "{store}: {summary}");

        let (code, inspection) = inspect(&sessions, store, "s1");
        assert_eq!(code, 0, "{store}: clean after the resumed turn: {inspection}");
        assert_eq!(inspection["open_turn"], false, "{store}: {inspection}");
    }
}

/// `transcript repair` and the delivery queue's commands on a full disk report the failure
/// and exit non-zero, never "repaired" or "resolved" for what is not on disk; once space is
/// back the same commands succeed.
#[test]
fn repair_and_the_queue_on_a_full_disk_fail_loudly_and_succeed_once_space_is_back() {
    // Room for the queue's database and its write-ahead log once the filler is gone.
    let disk = match Tmpfs::mount(DISK_BACK_KIB) {
        Ok(disk) => disk,
        Err(why) => return skip_or_fail(faultline_e2e::REQUIRE_TMPFS_VAR, &format!("no tmpfs: {why}")),
    };
    let sessions = disk.path().join("sessions");
    // A session left with an open turn by a writer that died (the test writes it whole), its
    // last page exactly full: the repair's closers need a new one.
    let dir = sessions.join("s1");
    std::fs::create_dir_all(&dir).unwrap();
    let header = faultline_runtime::event::SessionHeader::new("s1", 1).encode();
    let open_turn = r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#;
    let message = |text: &str| {
        format!(
            r#"{{"type":"user/message","seq":1,"time":1,"data":{{"message":{{"role":"user","content":[{{"type":"text","text":"{text}"}}]}}}}}}"#
        )
    };
    let without_text = format!("{header}\n{open_turn}\n{}\n", message("")).len();
    let text = "a".repeat(4096 - without_text);
    let session = format!("{header}\n{open_turn}\n{}\n", message(&text));
    assert_eq!(session.len(), 4096);
    std::fs::write(dir.join("session.jsonl"), session).unwrap();
    let queue = disk.path().join("outbox.sqlite");
    let enqueue = |id: &str| {
        let mut child = std::process::Command::new(faultline_e2e::faultline_bin())
            .args(["outbox", "enqueue", "--db", queue.to_str().unwrap(), id])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(&vec![b'x'; 64 * 1024]).unwrap();
        child.wait_with_output().unwrap()
    };
    assert_eq!(enqueue("first").status.code(), Some(0), "the queue is made while there is space");
    // Fill the disk to its last byte.
    let filler = disk.path().join("filler");
    {
        use std::io::Write as _;
        let mut file = std::fs::File::create(&filler).unwrap();
        let mut piece = vec![0u8; 64 * 1024];
        while !piece.is_empty() {
            if file.write_all(&piece).is_err() {
                piece.truncate(piece.len() / 2);
            }
        }
    }
    let before = std::fs::read(dir.join("session.jsonl")).unwrap();
    let repair = faultline(&["transcript", "repair", dir.to_str().unwrap()]);
    assert_ne!(repair.status.code(), Some(0), "no repair is reported on a full disk: {}", stdout(&repair));
    assert!(!stdout(&repair).contains("repaired"), "{}", stdout(&repair));
    assert!(stderr(&repair).contains("No space left on device"), "names the disk error: {}", stderr(&repair));
    let after = std::fs::read(dir.join("session.jsonl")).unwrap();
    assert_eq!(after, before, "a failed repair leaves the session as it was");
    let full = enqueue("second");
    assert_ne!(full.status.code(), Some(0), "no enqueue is reported on a full disk: {}", stdout(&full));
    // SQLite names it "database or disk is full", or "disk I/O error" when the full disk
    // refuses its shared-memory file first.
    assert!(stderr(&full).contains("disk"), "names the disk error: {}", stderr(&full));

    std::fs::remove_file(&filler).unwrap();
    let repair = faultline(&["transcript", "repair", dir.to_str().unwrap()]);
    assert_eq!(repair.status.code(), Some(0), "{}", stderr(&repair));
    assert!(stdout(&repair).contains("appended 1 closers"), "{}", stdout(&repair));
    assert_eq!(enqueue("second").status.code(), Some(0), "space is back");
    let listed = stdout(&faultline(&["outbox", "list", "--db", queue.to_str().unwrap()]));
    let ids: Vec<&str> = listed.lines().filter_map(|l| l.split_whitespace().nth(1)).collect();
    assert_eq!(ids, ["first", "second"], "the refused enqueue left nothing behind");
}
