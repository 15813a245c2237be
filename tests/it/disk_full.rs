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
