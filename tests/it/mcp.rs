//! MCP tools for real (FAILURE-MCP-TOOLS): the official Python `mcp` SDK serves a referee of
//! the tests' own (`tests/mcp/referee_server.py`) over stdio and over streamable HTTP; every
//! effect it performs is a line in a file the runtime never touches, the oracle here. The
//! Python is `FAULTLINE_PYTHON`, else `python3`; without the `mcp` package the tests say why
//! and skip, except where `FAULTLINE_REQUIRE_MCP_SDK` is set (CI), where they fail.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes, files, sockets

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use faultline_e2e::{faultline, faultline_bin, repo_root, stderr, stdout, ModelServerProcess};
use serde_json::{json, Value};

const REQUIRE_VAR: &str = "FAULTLINE_REQUIRE_MCP_SDK";

/// The Python with the `mcp` SDK, or `None` (the test skipped, or failed in CI).
fn python() -> Option<String> {
    let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let ok =
        Command::new(&python).args(["-c", "import mcp.server.mcpserver"]).output().is_ok_and(|o| o.status.success());
    if ok {
        Some(python)
    } else {
        faultline_e2e::skip_or_fail(REQUIRE_VAR, &format!("{python} has no `mcp` 2.x package (pip install mcp)"));
        None
    }
}

fn referee() -> String {
    repo_root().join("tests/mcp/referee_server.py").display().to_string()
}

/// A referee over streamable HTTP, killed on drop.
struct HttpReferee {
    child: Child,
    url: String,
}

impl HttpReferee {
    fn start(python: &str, dir: &Path, effects: &Path, extra: &[&str]) -> Self {
        let port_file = dir.join(format!("port-{}", extra.len()));
        let child = Command::new(python)
            .arg(referee())
            .args(["--transport", "http", "--effects"])
            .arg(effects)
            .arg("--port-file")
            .arg(&port_file)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for("the referee's port", || port_file.exists());
        let port = std::fs::read_to_string(&port_file).unwrap().trim().to_owned();
        Self { child, url: format!("http://127.0.0.1:{port}/mcp") }
    }
}

impl Drop for HttpReferee {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The lines of an effects file.
fn effects(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

/// An agent file with `servers` (TOML `[[mcp_servers]]` tables) against `base_url`.
fn agent_file(dir: &Path, base_url: &str, servers: &str) -> PathBuf {
    let text = format!(
        "[provider]\npreset = \"openai-compatible\"\nbase_url = \"{base_url}\"\nmodel = \"m\"\n\
         idle_timeout_ms = 60000\n\n{servers}"
    );
    let path = dir.join("agent.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn stdio_server(python: &str, name: &str, effects: &Path, extra: &str) -> String {
    format!(
        "[[mcp_servers]]\nname = \"{name}\"\ncommand = [\"{python}\", \"{}\", \"--transport\", \"stdio\", \"--effects\", \
         \"{}\"]\n{extra}\n",
        referee(),
        effects.display()
    )
}

fn http_server(name: &str, url: &str, extra: &str) -> String {
    format!("[[mcp_servers]]\nname = \"{name}\"\nurl = \"{url}\"\n{extra}\n")
}

/// A model step calling `calls` (`(id, tool, note)`), then a closing text.
fn calls(calls: &[(&str, &str, &str)]) -> Value {
    let frames: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (id, name, note))| {
            json!({"tool_call": {"index": i, "id": id, "name": name, "arguments": json!({"note": note}).to_string()}})
        })
        .collect();
    json!({"frames": frames, "finish": "tool_calls"})
}

fn text(text: &str) -> Value {
    json!({"frames": [{"text": text}], "finish": "stop"})
}

fn run(config: &Path, sessions: &Path, session: &str, resume: bool) -> std::process::Output {
    let mut args = vec!["agent", "run", "--config", config.to_str().unwrap(), "--session-dir"];
    args.extend([sessions.to_str().unwrap(), "--session", session, "--prompt", "go", "--json"]);
    if resume {
        args.push("--resume");
    }
    faultline(&args)
}

/// The session's records.
fn records(sessions: &Path, session: &str) -> Vec<Value> {
    let output = faultline(&["transcript", "cat", sessions.join(session).to_str().unwrap()]);
    stdout(&output).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// `(error code or "ok", first text)` of each `tool/result`, in order.
fn results(records: &[Value]) -> Vec<(String, String)> {
    records
        .iter()
        .filter(|r| r["type"] == "tool/result")
        .map(|r| {
            let code = r["data"]["error"]["code"].as_str().unwrap_or("ok").to_owned();
            (code, r["data"]["content"][0]["text"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

#[test]
fn an_agent_calls_the_tools_of_a_stdio_and_an_http_server() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (local, remote) = (dir.path().join("local.jsonl"), dir.path().join("remote.jsonl"));
    let http = HttpReferee::start(&python, dir.path(), &remote, &[]);
    let model = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [calls(&[("call_1", "files__record", "a"), ("call_2", "web__record", "b")]), text("Both done.")]}),
    );
    let servers =
        stdio_server(&python, "files", &local, "") + &http_server("web", &http.url, "tools = [\"record\", \"lookup\"]");
    let config = agent_file(dir.path(), &model.base_url(), &servers);
    let sessions = dir.path().join("sessions");
    let output = run(&config, &sessions, "m1", false);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stderr(&output).contains("MCP server web: 2 tool(s) offered"), "{}", stderr(&output));

    // Each effect once, attributed to its call by the runtime's execution id.
    let (local, remote) = (effects(&local), effects(&remote));
    assert_eq!(local.len(), 1, "{local:?}");
    assert_eq!((local[0]["note"].as_str(), local[0]["execution_id"].as_str()), (Some("a"), Some("m1:1:1:call_1")));
    assert_eq!(remote.len(), 1, "{remote:?}");
    assert_eq!(remote[0]["execution_id"], "m1:1:1:call_2");
    assert_eq!(remote[0]["header"], "m1:1:1:call_2", "over HTTP the execution id rides in the header too");

    // The model was offered the listed tools under their servers' names, and read the results.
    let requests = faultline_e2e::logged_requests(dir.path());
    let first: Value = serde_json::from_str(requests[0]["body"].as_str().unwrap()).unwrap();
    let offered: Vec<&str> =
        first["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert!(offered.contains(&"files__record_then_die") && offered.contains(&"web__lookup"), "{offered:?}");
    assert!(!offered.contains(&"web__fail"), "the allow-list holds: {offered:?}");
    let log = records(&sessions, "m1");
    assert_eq!(results(&log), [("ok".into(), "recorded a".into()), ("ok".into(), "recorded b".into())]);
}

#[test]
fn a_sigkill_after_the_server_acted_leaves_the_outcome_unknown_and_resume_never_calls_again() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (local, remote) = (dir.path().join("local.jsonl"), dir.path().join("remote.jsonl"));
    let http = HttpReferee::start(&python, dir.path(), &remote, &[]);
    for (server, effects_file) in [("files", &local), ("web", &remote)] {
        let model = ModelServerProcess::start(
            dir.path(),
            &json!({"responses": [
                calls(&[("call_1", &format!("{server}__record_then_hang"), "once")]),
                text("I will check before sending again."),
            ]}),
        );
        let servers = stdio_server(&python, "files", &local, "") + &http_server("web", &http.url, "");
        let config = agent_file(dir.path(), &model.base_url(), &servers);
        let sessions = dir.path().join(format!("sessions-{server}"));
        let mut child = Command::new(faultline_bin())
            .args(["agent", "run", "--config", config.to_str().unwrap(), "--session-dir"])
            .args([sessions.to_str().unwrap(), "--session", "k1", "--prompt", "go", "--json"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for("the server's effect", || !effects(effects_file).is_empty());
        child.kill().unwrap(); // SIGKILL between the effect and its answer
        child.wait().unwrap();

        let output = run(&config, &sessions, "k1", true);
        assert_eq!(output.status.code(), Some(0), "{server}: {}", stderr(&output));
        let log = records(&sessions, "k1");
        let results = results(&log);
        assert_eq!(results[0].0, "TOOL_OUTCOME_UNKNOWN", "{server}: {results:?}");
        let effects: Vec<Value> = effects(effects_file).into_iter().filter(|e| e.get("note").is_some()).collect();
        assert_eq!(effects.len(), 1, "{server}: the resumed session never called it again: {effects:?}");
    }
}

#[test]
fn a_server_killed_mid_call_is_unknown_and_the_next_call_starts_it_again() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local.jsonl");
    let model = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            calls(&[("call_1", "files__record_then_die", "first")]),
            calls(&[("call_2", "files__record", "second")]),
            text("Done."),
        ]}),
    );
    let config = agent_file(dir.path(), &model.base_url(), &stdio_server(&python, "files", &local, ""));
    let sessions = dir.path().join("sessions");
    let output = run(&config, &sessions, "d1", false);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let results = results(&records(&sessions, "d1"));
    assert_eq!(results[0].0, "TOOL_OUTCOME_UNKNOWN", "{results:?}");
    assert!(results[0].1.contains("exited"), "the cause is named: {results:?}");
    assert_eq!(results[1], ("ok".to_owned(), "recorded second".to_owned()));
    let pids: Vec<i64> = effects(&local).iter().map(|e| e["pid"].as_i64().unwrap()).collect();
    assert_eq!(pids.len(), 2, "each call acted once");
    assert_ne!(pids[0], pids[1], "the second call ran on a server started again");
}

#[test]
fn an_expired_session_is_initialised_again_and_its_call_is_never_resent() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote.jsonl");
    let http = HttpReferee::start(&python, dir.path(), &remote, &["--expire-after-calls", "1"]);
    let model = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            calls(&[("call_1", "web__record", "one")]),
            calls(&[("call_2", "web__record", "two")]),
            calls(&[("call_3", "web__record", "three")]),
            text("Done."),
        ]}),
    );
    let config = agent_file(dir.path(), &model.base_url(), &http_server("web", &http.url, ""));
    let sessions = dir.path().join("sessions");
    let output = run(&config, &sessions, "e1", false);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let results = results(&records(&sessions, "e1"));
    assert_eq!(results[0], ("ok".to_owned(), "recorded one".to_owned()));
    assert_eq!(results[1].0, "TOOL_FAILED", "{results:?}");
    assert!(results[1].1.contains("404") && results[1].1.contains("not run"), "{results:?}");
    assert_eq!(results[2], ("ok".to_owned(), "recorded three".to_owned()), "a new session served the next call");
    let notes: Vec<String> = effects(&remote).iter().map(|e| e["note"].as_str().unwrap().to_owned()).collect();
    assert_eq!(notes, ["one", "three"], "the refused call was not sent again");
}

#[test]
fn a_deadline_sends_the_cancel_to_the_server_and_still_waits_for_it() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (local, remote) = (dir.path().join("local.jsonl"), dir.path().join("remote.jsonl"));
    let http = HttpReferee::start(&python, dir.path(), &remote, &[]);
    let model = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            calls(&[("call_1", "files__record_then_hang", "slow"), ("call_2", "web__record_then_hang", "slow")]),
            text("Timed out."),
        ]}),
    );
    let servers =
        stdio_server(&python, "files", &local, "timeout_ms = 500") + &http_server("web", &http.url, "timeout_ms = 500");
    let config = agent_file(dir.path(), &model.base_url(), &servers);
    let sessions = dir.path().join("sessions");
    let output = run(&config, &sessions, "c1", false);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let results = results(&records(&sessions, "c1"));
    let codes: Vec<&str> = results.iter().map(|(code, _)| code.as_str()).collect();
    // Both servers acted before hanging: a deadline does not say the call did nothing, so the
    // result is unknown (FAILURE-TOOL-TIMEOUT), never "did not finish", which invites a retry.
    // `files` never answered the cancel; `web` answered it with "Request cancelled".
    assert_eq!(codes, ["TOOL_OUTCOME_UNKNOWN", "TOOL_OUTCOME_UNKNOWN"], "{results:?}");
    assert!(results[0].1.contains("no answer came") && results[0].1.contains("may have acted"), "{results:?}");
    assert!(results[1].1.contains("-32800") && results[1].1.contains("may have taken effect"), "{results:?}");
    for (server, file, execution) in [("files", &local, "c1:1:1:call_1"), ("web", &remote, "c1:1:1:call_2")] {
        let lines = effects(file);
        assert!(
            lines.iter().any(|l| l["cancelled"] == "slow" && l["execution_id"] == execution),
            "{server}: the cancel reached the server: {lines:?}"
        );
    }
}

#[test]
fn a_server_that_cannot_start_ends_the_command_before_any_session_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let model = ModelServerProcess::start(dir.path(), &json!({"responses": [text("never asked")]}));
    let servers = "[[mcp_servers]]\nname = \"files\"\ncommand = [\"/nonexistent/mcp-server\"]\n";
    let config = agent_file(dir.path(), &model.base_url(), servers);
    let sessions = dir.path().join("sessions");
    let output = run(&config, &sessions, "n1", false);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("MCP server files") && stderr(&output).contains("could not start"),
        "{}",
        stderr(&output)
    );
    assert!(!sessions.join("n1").exists(), "nothing was created");
    assert!(faultline_e2e::logged_requests(dir.path()).is_empty(), "the model was never asked");
}

#[test]
fn a_header_secret_reaches_its_server_only_and_never_a_tool_or_the_transcript() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote.jsonl");
    let http = HttpReferee::start(&python, dir.path(), &remote, &[]);
    let model = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [calls(&[("call_1", "envdump", "x"), ("call_2", "web__record", "y")]), text("Done.")]}),
    );
    let servers = http_server("web", &http.url, "headers_env = { authorization = \"WEB_MCP_TOKEN\" }")
        + "[[tools]]\nname = \"envdump\"\ndescription = \"d\"\ncommand = [\"env\"]\n";
    let config = agent_file(dir.path(), &model.base_url(), &servers);
    let sessions = dir.path().join("sessions");
    let secret = "Bearer s3cr3t-mcp-token-value";
    let output = Command::new(faultline_bin())
        .args(["agent", "run", "--config", config.to_str().unwrap(), "--session-dir"])
        .args([sessions.to_str().unwrap(), "--session", "h1", "--prompt", "go", "--json"])
        .env("WEB_MCP_TOKEN", secret)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let log = std::fs::read_to_string(sessions.join("h1/session.jsonl")).unwrap();
    assert!(!log.contains("s3cr3t"), "the transcript never holds the secret");
    let results = results(&records(&sessions, "h1"));
    assert!(results[0].1.contains("PATH="), "the command's environment was dumped: {results:?}");
    assert!(!results[0].1.contains("WEB_MCP_TOKEN"), "the variable is hidden from tools: {results:?}");
    assert_eq!(effects(&remote).len(), 1, "the server acted");
}

/// An MCP server's tool named in its entry's `approval` waits for a person: the turn pauses
/// (exit 7) with nothing sent to the server, `approval approve` decides, and the resumed turn
/// calls the server once; its other tools run at once.
#[test]
fn an_mcp_tool_that_needs_approval_waits_and_then_is_called_once() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local.jsonl");
    let model = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [{"frames": [
            {"tool_call": {"index": 0, "id": "call_1", "name": "files__record", "arguments": "{\"note\":\"a\"}"}},
            {"tool_call": {"index": 1, "id": "call_2", "name": "files__lookup", "arguments": "{\"key\":\"b\"}"}}
        ], "finish": "tool_calls"}, text("Done.")]}),
    );
    let servers = stdio_server(&python, "files", &local, "approval = [\"record\"]\napprovers = [\"alice\"]");
    let config = agent_file(dir.path(), &model.base_url(), &servers);
    let sessions = dir.path().join("sessions");
    let paused = run(&config, &sessions, "p1", false);
    assert_eq!(paused.status.code(), Some(7), "{}", stderr(&paused));
    assert!(effects(&local).is_empty(), "nothing reached the server before the decision");
    assert_eq!(results(&records(&sessions, "p1")).len(), 1, "the lookup ran; the record waits");
    let decided = faultline(&[
        "approval",
        "approve",
        "--session-dir",
        sessions.to_str().unwrap(),
        "--session",
        "p1",
        "--call",
        "call_1",
        "--by",
        "alice",
    ]);
    assert_eq!(decided.status.code(), Some(0), "{}", stderr(&decided));
    let args = ["agent", "run", "--config", config.to_str().unwrap(), "--session-dir", sessions.to_str().unwrap()];
    let resumed = faultline(&[&args[..], &["--session", "p1", "--resume"]].concat());
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let effects = effects(&local);
    assert_eq!(effects.len(), 1, "{effects:?}");
    assert_eq!(effects[0]["execution_id"], "p1:1:1:call_1");
    let codes: Vec<String> = results(&records(&sessions, "p1")).into_iter().map(|(code, _)| code).collect();
    assert_eq!(codes, ["ok", "ok"]);

    // A misspelt name would leave the call it meant to guard unguarded: refused before anything.
    let servers = stdio_server(&python, "files", &local, "approval = [\"recrod\"]");
    let config = agent_file(dir.path(), &model.base_url(), &servers);
    let refused = run(&config, &sessions, "p2", false);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("approval names \"recrod\", which the server does not offer"));
    assert!(!sessions.join("p2").exists(), "nothing was created");
}
