//! `faultline scenario from-transcript`: a session recorded by `agent run` against
//! `model-server` (a tool call, then a text answer) becomes a scenario whose fault-free run
//! reproduces it record by record, and whose sweep passes the oracle with crash points
//! reached (FAILURE-INCIDENT-SCENARIO).
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes and files

use std::path::Path;

use faultline_e2e::{agent_run_args, faultline, stderr, stdout, ModelServerProcess};
use serde_json::json;

fn record_a_session(dir: &Path, store: &str) {
    let script = json!({"responses": [
        {"frames": [{"reasoning": "The clock tool knows."},
                    {"tool_call": {"index": 0, "id": "call_7", "name": "clock", "arguments": "{\"zone\":"}},
                    {"tool_call": {"index": 0, "arguments": "\"UTC\"}"}}],
         "finish": "tool_calls", "usage": [20, 9, 29]},
        {"frames": [{"text": "It is "}, {"text": "noon UTC."}], "finish": "stop", "usage": [40, 4, 44]}
    ]});
    let server = ModelServerProcess::start(dir, &script);
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[provider]\npreset = \"openai-compatible\"\nbase_url = \"{}\"\nmodel = \"recorded-model\"\n\n\
             [[tools]]\nname = \"clock\"\ndescription = \"Tells the time\"\ncommand = [\"sh\", \"-c\", \"echo noon\"]\n\
             parameters = {{ type = \"object\", properties = {{ zone = {{ type = \"string\" }} }} }}\n",
            server.base_url()
        ),
    )
    .unwrap();
    let sessions = dir.join("sessions");
    let output = faultline(&agent_run_args(
        &config,
        &sessions,
        &["--store", store, "--session", "incident", "--prompt", "What time is it?"],
    ));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

fn from_transcript(dir: &Path, store: &str) -> (std::process::Output, std::path::PathBuf) {
    let out = dir.join("incident.toml");
    let sessions = dir.join("sessions");
    let target: Vec<String> = match store {
        "sqlite" => vec![
            "--sqlite".into(),
            sessions.join("sessions.sqlite").display().to_string(),
            "--session".into(),
            "incident".into(),
        ],
        _ => vec![sessions.join("incident").display().to_string()],
    };
    let mut args = vec!["scenario", "from-transcript"];
    args.extend(target.iter().map(String::as_str));
    args.extend(["--out", out.to_str().unwrap()]);
    (faultline(&args), out)
}

#[test]
fn a_recorded_session_becomes_a_scenario_that_replays_it_on_every_store() {
    for store in ["jsonl", "zstd", "sqlite"] {
        let dir = tempfile::tempdir().unwrap();
        record_a_session(dir.path(), store);
        let (output, out) = from_transcript(dir.path(), store);
        assert_eq!(output.status.code(), Some(0), "{store}: {}{}", stdout(&output), stderr(&output));
        assert!(
            stderr(&output).contains("the fault-free run reproduces the recording"),
            "{store}: {}",
            stderr(&output)
        );
        let text = std::fs::read_to_string(&out).unwrap();
        for expected in [
            "messages = [\"What time is it?\"]",
            "kind = \"recorded\"",
            "reasoning = \"The clock tool knows.\"",
            "usage = [20, 9, 29]",
        ] {
            assert!(text.contains(expected), "{store}: {expected} missing from\n{text}");
        }
    }
}

#[test]
fn the_recorded_conversation_survives_every_fault_family_and_crash_point() {
    let dir = tempfile::tempdir().unwrap();
    record_a_session(dir.path(), "jsonl");
    let (output, out) = from_transcript(dir.path(), "jsonl");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let sweep = faultline(&["sweep", "--scenario", out.to_str().unwrap(), "--seeds", "0..100"]);
    let report = stdout(&sweep);
    assert_eq!(sweep.status.code(), Some(0), "{report}");
    assert!(report.contains("100 runs, 0 failures"), "{report}");
    let reached = report.lines().find(|l| l.starts_with("crash points reached:")).unwrap();
    for point in ["before-dispatch", "after-tool-call-flush", "mid-stream"] {
        assert!(reached.contains(point), "{point} not reached: {reached}");
    }
}

#[test]
fn a_session_that_does_not_exist_or_is_empty_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing-here");
    let output = faultline(&["scenario", "from-transcript", missing.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(!missing.exists(), "an inspecting command created nothing");
}
