//! A person in the loop, for real (FAILURE-APPROVAL, docs/approvals.md): the real binary pauses
//! a turn for approval (exit 7), `faultline approval` decides, `agent run --resume` runs the
//! call once — on JSONL, SQLite and PostgreSQL. The tool's marker file is the receiver's own
//! record of every effect: the oracle the transcript cannot touch.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use faultline_e2e::{faultline_bin, logged_requests, markers, skip_or_fail, stderr, stdout, ModelServerProcess};
use faultline_runtime::testing::{PgServer, REQUIRE_POSTGRES_ENV};
use serde_json::{json, Value};

/// Where the sessions are: a store kind, its directory, and a database for PostgreSQL.
struct Place {
    store: &'static str,
    sessions: PathBuf,
    url: Option<String>,
}

impl Place {
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(faultline_bin());
        command.args(args).args(["--session-dir", self.sessions.to_str().unwrap(), "--store", self.store]);
        if let Some(url) = &self.url {
            command.env("FAULTLINE_DATABASE_URL", url);
        }
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `agent run` of session `id`, with `extra` (`--prompt`, `--resume`).
    fn agent(&self, config: &Path, id: &str, extra: &[&str]) -> Output {
        let mut args = vec!["agent", "run", "--config", config.to_str().unwrap(), "--session", id, "--json"];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    fn decide(&self, verb: &str, id: &str, call: &str, by: &str, extra: &[&str]) -> Output {
        let mut args = vec!["approval", verb, "--session", id, "--call", call, "--by", by];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    fn list(&self, id: &str) -> Vec<Value> {
        let output = self.run(&["approval", "list", "--session", id, "--json"]);
        assert_eq!(output.status.code(), Some(0), "list: {}", stderr(&output));
        stdout(&output).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    fn cat(&self, id: &str) -> Vec<Value> {
        let output = self.transcript("cat", id);
        stdout(&output).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// `transcript COMMAND` of session `id`, asserted to exit 0.
    fn transcript(&self, what: &str, id: &str) -> Output {
        let mut command = Command::new(faultline_bin());
        command.args(["transcript", what]);
        match (self.store, &self.url) {
            ("sqlite", _) => {
                command.args(["--sqlite", self.sessions.join("sessions.sqlite").to_str().unwrap(), "--session", id])
            }
            ("postgres", Some(url)) => command.args(["--database-url", url, "--session", id]),
            _ => command.arg(self.sessions.join(id)),
        };
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{what}: {}", stderr(&output));
        output
    }
}

/// The places to test: JSONL and SQLite always, PostgreSQL when it is installed.
fn places(dir: &Path) -> Vec<Place> {
    let mut places = vec![
        Place { store: "jsonl", sessions: dir.join("jsonl"), url: None },
        Place { store: "sqlite", sessions: dir.join("sqlite"), url: None },
    ];
    match PgServer::shared() {
        Some(server) => {
            places.push(Place { store: "postgres", sessions: dir.join("pg"), url: Some(server.fresh_database()) })
        }
        None => skip_or_fail(REQUIRE_POSTGRES_ENV, "PostgreSQL is not installed"),
    }
    places
}

/// A `send` tool that needs alice's approval and appends its execution id to `marker.log`,
/// then hangs 30 s when `hang` (so a test can kill the agent after the effect).
fn config(dir: &Path, base_url: &str, hang: bool) -> PathBuf {
    let sleep = if hang { "; sleep 30" } else { "" };
    let text = format!(
        r#"[provider]
preset = "openai-compatible"
base_url = "{base_url}"
model = "m"
idle_timeout_ms = 60000

[[tools]]
name = "send"
description = "send a refund"
command = ["sh", "-c", "echo $FAULTLINE_EXECUTION_ID >> {marker}{sleep}"]
side_effects = true
approval = "required"
approvers = ["alice"]
"#,
        marker = dir.join("marker.log").display()
    );
    let path = dir.join(if hang { "hanging.toml" } else { "agent.toml" });
    std::fs::write(&path, text).unwrap();
    path
}

/// The model asks for one refund, then (once it read the result) answers; a second prompt
/// gets another refund (the same call id, as models reuse them) and an answer.
fn refund_then_answer(dir: &Path) -> ModelServerProcess {
    ModelServerProcess::start(
        dir,
        &json!({"responses": [
            {"frames": [{"tool_call": {"index": 0, "id": "call_1", "name": "send", "arguments": "{\"amount\":10}"}}], "finish": "tool_calls"},
            {"frames": [{"text": "Done."}], "finish": "stop"},
            {"frames": [{"tool_call": {"index": 0, "id": "call_1", "name": "send", "arguments": "{\"amount\":10}"}}], "finish": "tool_calls"},
            {"frames": [{"text": "Done."}], "finish": "stop"}
        ]}),
    )
}

fn types(log: &[Value]) -> Vec<&str> {
    log.iter().map(|r| r["type"].as_str().unwrap()).collect()
}

fn results(log: &[Value]) -> Vec<String> {
    log.iter()
        .filter(|r| r["type"] == "tool/result")
        .map(|r| r["data"]["error"]["code"].as_str().unwrap_or("ok").to_owned())
        .collect()
}

/// Pauses session `id` at its refund: exit 7, nothing run, the call listed with its digest.
fn paused(place: &Place, config: &Path, dir: &Path, id: &str) -> Value {
    let output = place.agent(config, id, &["--prompt", "refund order 7"]);
    let what = format!("{}: {}", place.store, stderr(&output));
    assert_eq!(output.status.code(), Some(7), "paused for approval: {what}");
    assert!(stderr(&output).contains("call_1 (send) waits for approval by alice"), "{what}");
    let summary: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(summary["end_reason"]["kind"], "awaiting-approval", "{what}");
    assert!(markers(dir).is_empty(), "{}: nothing ran before the decision", place.store);
    let listed = place.list(id);
    assert_eq!(listed.len(), 1, "{}: {listed:?}", place.store);
    assert_eq!(listed[0]["call"]["call_id"], "call_1");
    assert_eq!(listed[0]["call"]["arguments"], "{\"amount\":10}");
    // The recovery report says what waits for whom; the transcript needs no repair.
    let report = stdout(&place.transcript("report", id));
    assert!(report.contains("Waiting for approval: 1 call(s)"), "{}: {report}", place.store);
    assert!(report.contains("send (call call_1, turn 1): for alice"), "{}: {report}", place.store);
    place.transcript("inspect", id);
    listed[0]["call"].clone()
}

#[test]
fn an_approved_call_runs_once_on_resume_and_a_second_decision_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for place in places(dir.path()) {
        let work = dir.path().join(format!("work-{}", place.store));
        std::fs::create_dir_all(&work).unwrap();
        let server = refund_then_answer(&work);
        let config = config(&work, &server.base_url(), false);
        let call = paused(&place, &config, &work, "a1");
        let store = place.store;

        // Not a decider, and a digest other than the one shown: refused, nothing written.
        let stranger = place.decide("approve", "a1", "call_1", "mallory", &[]);
        assert_eq!(stranger.status.code(), Some(2), "{store}: {}", stderr(&stranger));
        assert!(stderr(&stranger).contains("deciders are alice"), "{store}: {}", stderr(&stranger));
        let stale = place.decide("approve", "a1", "call_1", "alice", &["--digest", "0000"]);
        assert_eq!(stale.status.code(), Some(2), "{store}: {}", stderr(&stale));

        let digest = call["digest"].as_str().unwrap();
        let approved = place.decide("approve", "a1", "call_1", "alice", &["--digest", &digest[..12]]);
        assert_eq!(approved.status.code(), Some(0), "{store}: {}", stderr(&approved));
        let again = place.decide("deny", "a1", "call_1", "alice", &["--reason", "changed my mind"]);
        assert_eq!(again.status.code(), Some(2), "{store}: a second decision is refused");
        assert!(stderr(&again).contains("already approved by alice"), "{store}: {}", stderr(&again));
        assert!(markers(&work).is_empty(), "{store}: deciding runs nothing");

        let resumed = place.agent(&config, "a1", &["--resume"]);
        assert_eq!(resumed.status.code(), Some(0), "{store}: {}", stderr(&resumed));
        assert_eq!(markers(&work), vec!["a1:1:1:call_1".to_owned()], "{store}: the call ran once");
        let log = place.cat("a1");
        let approval: Vec<&str> = types(&log).into_iter().filter(|t| t.starts_with("approval/")).collect();
        assert_eq!(approval, ["approval/requested", "approval/decided", "approval/dispatched"], "{store}");
        assert_eq!(results(&log), ["ok"], "{store}");
        assert_eq!(log.iter().filter(|r| r["type"] == "turn/end").count(), 1, "{store}: one turn, continued");

        // Nothing waits any more: deciding again is refused and says what became of the call.
        let late = place.decide("approve", "a1", "call_1", "alice", &[]);
        assert_eq!(late.status.code(), Some(2), "{store}");
        assert!(stderr(&late).contains("no longer waiting"), "{store}: {}", stderr(&late));
        assert!(place.list("a1").is_empty(), "{store}");
        let rerun = place.agent(&config, "a1", &["--resume", "--prompt", "again?"]);
        assert_eq!(rerun.status.code(), Some(7), "{store}: the next turn's refund waits too: {}", stderr(&rerun));
        assert_eq!(markers(&work).len(), 1, "{store}: and the first never runs again");
    }
}

#[test]
fn a_denial_reaches_the_model_as_the_calls_result_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    for place in places(dir.path()) {
        let work = dir.path().join(format!("work-{}", place.store));
        std::fs::create_dir_all(&work).unwrap();
        let server = refund_then_answer(&work);
        let config = config(&work, &server.base_url(), false);
        paused(&place, &config, &work, "d1");
        let store = place.store;
        let denied = place.decide("deny", "d1", "call_1", "alice", &["--reason", "the order was never paid"]);
        assert_eq!(denied.status.code(), Some(0), "{store}: {}", stderr(&denied));
        let resumed = place.agent(&config, "d1", &["--resume"]);
        assert_eq!(resumed.status.code(), Some(0), "{store}: {}", stderr(&resumed));
        assert!(markers(&work).is_empty(), "{store}: a denied call never runs");
        assert_eq!(results(&place.cat("d1")), ["APPROVAL_DENIED"], "{store}");
        let requests = logged_requests(&work);
        let body: Value = serde_json::from_str(requests.last().unwrap()["body"].as_str().unwrap()).unwrap();
        let tool = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool")
            .cloned()
            .expect("the model read the call's result");
        let text = tool["content"].as_str().unwrap();
        assert!(text.contains("alice denied") && text.contains("the order was never paid"), "{store}: {text}");
    }
}

fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_kill_after_the_dispatch_is_unknown_on_resume_and_never_a_second_run() {
    let dir = tempfile::tempdir().unwrap();
    for place in places(dir.path()) {
        let work = dir.path().join(format!("work-{}", place.store));
        std::fs::create_dir_all(&work).unwrap();
        let server = refund_then_answer(&work);
        let config = config(&work, &server.base_url(), false);
        let hanging = self::config(&work, &server.base_url(), true);
        paused(&place, &config, &work, "k1");
        let store = place.store;
        assert_eq!(place.decide("approve", "k1", "call_1", "alice", &[]).status.code(), Some(0), "{store}");
        let mut child = place
            .command(&["agent", "run", "--config", hanging.to_str().unwrap(), "--session", "k1", "--resume"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for("the effect", || !markers(&work).is_empty());
        child.kill().unwrap(); // SIGKILL after the effect, before its result
        child.wait().unwrap();
        let resumed = place.agent(&config, "k1", &["--resume", "--prompt", "did it go out?"]);
        assert_eq!(resumed.status.code(), Some(0), "{store}: {}", stderr(&resumed));
        assert_eq!(markers(&work).len(), 1, "{store}: dispatched once, never again");
        let log = place.cat("k1");
        assert_eq!(results(&log), ["TOOL_OUTCOME_UNKNOWN"], "{store}");
        assert_eq!(log.iter().filter(|r| r["type"] == "approval/dispatched").count(), 1, "{store}");
    }
}

/// A SIGKILL between a decision and its dispatch, made to happen: two approved calls, the first
/// of which hangs after its effect. Killed there, the second is decided and not dispatched;
/// resuming answers the first `TOOL_OUTCOME_UNKNOWN` (never run again) and runs the second once.
#[test]
fn a_kill_between_decision_and_dispatch_runs_the_call_once_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    for place in places(dir.path()) {
        let work = dir.path().join(format!("work-{}", place.store));
        std::fs::create_dir_all(&work).unwrap();
        let text = json!({"frames": [{"text": "Done."}], "finish": "stop"});
        let call = |index: u32, id: &str, arguments: &str| json!({"tool_call": {"index": index, "id": id, "name": "send", "arguments": arguments}});
        let server = ModelServerProcess::start(
            &work,
            &json!({"responses": [
                {"frames": [call(0, "call_1", "{\"amount\":10,\"hang\":true}"), call(1, "call_2", "{\"amount\":20}")], "finish": "tool_calls"},
                text, text
            ]}),
        );
        let marker = work.join("marker.log");
        let config = work.join("agent.toml");
        std::fs::write(
            &config,
            format!(
                r#"[provider]
preset = "openai-compatible"
base_url = "{}"
model = "m"

[[tools]]
name = "send"
description = "send a refund"
command = ["sh", "-c", "echo $FAULTLINE_EXECUTION_ID >> {}; case \"$(cat)\" in *hang*) sleep 30;; esac"]
approval = "required"
"#,
                server.base_url(),
                marker.display()
            ),
        )
        .unwrap();
        let store = place.store;
        let output = place.agent(&config, "b1", &["--prompt", "two refunds"]);
        assert_eq!(output.status.code(), Some(7), "{store}: {}", stderr(&output));
        assert_eq!(place.list("b1").len(), 2, "{store}");
        for call in ["call_1", "call_2"] {
            assert_eq!(place.decide("approve", "b1", call, "bob", &[]).status.code(), Some(0), "{store}");
        }
        let mut child = place
            .command(&["agent", "run", "--config", config.to_str().unwrap(), "--session", "b1", "--resume"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for("the first effect", || !markers(&work).is_empty());
        child.kill().unwrap(); // call_1 dispatched and acting; call_2 decided, not dispatched
        child.wait().unwrap();
        let waiting = place.list("b1");
        let states: Vec<(&str, bool)> =
            waiting.iter().map(|w| (w["call"]["call_id"].as_str().unwrap(), w["call"]["dispatched"] == true)).collect();
        assert_eq!(states, [("call_1", true), ("call_2", false)], "{store}: killed between decision and dispatch");
        let resumed = place.agent(&config, "b1", &["--resume"]);
        assert_eq!(resumed.status.code(), Some(0), "{store}: {}", stderr(&resumed));
        assert_eq!(markers(&work), ["b1:1:1:call_1", "b1:1:1:call_2"], "{store}: each call ran once");
        let log = place.cat("b1");
        assert_eq!(results(&log), ["TOOL_OUTCOME_UNKNOWN", "ok"], "{store}");
        assert_eq!(log.iter().filter(|r| r["type"] == "approval/dispatched").count(), 2, "{store}");
    }
}
