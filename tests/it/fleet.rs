//! Fleets on PostgreSQL (FAILURE-LEASE-EPOCH), with real processes and a real server started
//! by the test: a session written by one worker is read back clean by another, a worker
//! killed mid-turn is resumed by another, and a worker stopped past its lease wakes up fenced:
//! nothing it tries to write lands.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use faultline_e2e::{
    faultline, faultline_bin, logged_requests, marker_agent_config, markers, skip_or_fail, stderr, stdout,
    ModelServerProcess,
};
use faultline_runtime::testing::{PgServer, REQUIRE_POSTGRES_ENV};

use crate::cutting_proxy::CuttingProxy;
use serde_json::{json, Value};

/// A fresh database on the shared test server, or `None` (skipped) without PostgreSQL.
fn database() -> Option<String> {
    match PgServer::shared() {
        Some(server) => Some(server.fresh_database()),
        None => {
            skip_or_fail(REQUIRE_POSTGRES_ENV, "PostgreSQL is not installed");
            None
        }
    }
}

fn config(dir: &Path, base_url: &str, hang: bool) -> PathBuf {
    marker_agent_config(dir, base_url, false, hang)
}

/// `agent run` of one worker on session `id` of `url` (its own session directory: workers
/// share only the database).
fn worker(config: &Path, worker_dir: &Path, url: &str, id: &str, resume: bool, extra: &[&str]) -> Command {
    let mut command = Command::new(faultline_bin());
    command
        .args(["agent", "run", "--config", config.to_str().unwrap(), "--session-dir", worker_dir.to_str().unwrap()])
        .args(["--store", "postgres", "--session", id, "--prompt", "go", "--json"])
        .env("FAULTLINE_DATABASE_URL", url)
        .args(extra);
    if resume {
        command.arg("--resume");
    }
    command
}

fn spawn(mut command: Command) -> Child {
    command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn transcript(command: &str, url: &str, id: &str, extra: &[&str]) -> Output {
    let mut args = vec!["transcript", command, "--database-url", url, "--session", id];
    args.extend_from_slice(extra);
    faultline(&args)
}

fn cat(url: &str, id: &str) -> Vec<Value> {
    let output = transcript("cat", url, id, &[]);
    assert_eq!(output.status.code(), Some(0), "cat: {}", stderr(&output));
    stdout(&output).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn a_session_written_on_postgres_is_read_back_clean_by_another_process() {
    let Some(url) = database() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Inspecting a database without the schema is refused, and creates nothing.
    let refused = transcript("inspect", &url, "s1", &[]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("no faultline schema"), "{}", stderr(&refused));
    let again = transcript("inspect", &url, "s1", &[]);
    assert!(stderr(&again).contains("no faultline schema"), "the read-only inspection created nothing");

    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": [{"tool_call": {"index": 0, "id": "call_1", "name": "send", "arguments": "{\"text\":\"hi\"}"}}], "finish": "tool_calls"},
            {"frames": [{"text": "Sent"}, {"text": " it."}], "finish": "stop"}
        ]}),
    );
    let config = config(dir.path(), &server.base_url(), false);
    let output = worker(&config, &dir.path().join("w1"), &url, "s1", false, &[]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let summary: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(summary["end_reason"]["kind"], "completed", "{summary}");
    assert_eq!(summary["assistant_text"], "Sent it.");

    let inspected = transcript("inspect", &url, "s1", &["--json"]);
    assert_eq!(inspected.status.code(), Some(0), "clean: {}", stderr(&inspected));
    let inspection: Value = serde_json::from_str(stdout(&inspected).trim()).unwrap();
    assert_eq!(inspection["status"], "clean", "{inspection}");
    let log = cat(&url, "s1");
    let kinds: Vec<&str> = log.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"turn/start"));
    assert_eq!(kinds.last(), Some(&"turn/end"));
    assert!(kinds.contains(&"tool/call") && kinds.contains(&"tool/result"), "{kinds:?}");
    assert_eq!(markers(dir.path()), vec!["s1:1:1:call_1".to_owned()]);
}

#[test]
fn a_worker_killed_mid_turn_is_resumed_by_another_and_the_effect_is_not_repeated() {
    let Some(url) = database() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": [{"tool_call": {"index": 0, "id": "call_1", "name": "send", "arguments": "{\"text\":\"hi\"}"}}], "finish": "tool_calls"},
            {"frames": [{"text": "I will check before sending again."}], "finish": "stop"}
        ]}),
    );
    let hanging = config(dir.path(), &server.base_url(), true);
    let mut first = spawn(worker(&hanging, &dir.path().join("w1"), &url, "k", false, &[]));
    wait_for("the side effect's marker", || !markers(dir.path()).is_empty());
    first.kill().unwrap(); // SIGKILL between the effect and its result
    first.wait().unwrap();

    let inspected = transcript("inspect", &url, "k", &["--json"]);
    assert_eq!(inspected.status.code(), Some(3), "repair needed: {}", stdout(&inspected));
    let inspection: Value = serde_json::from_str(stdout(&inspected).trim()).unwrap();
    assert_eq!(inspection["closers"][0]["data"]["error"]["code"], "TOOL_OUTCOME_UNKNOWN", "{inspection}");

    // Another worker (its own directory, its own process) takes the session over at once:
    // the first worker's lease is live, but its process is provably gone.
    let calm = config(dir.path(), &server.base_url(), false);
    let output = worker(&calm, &dir.path().join("w2"), &url, "k", true, &[]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let summary: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(summary["end_reason"]["kind"], "completed", "{summary}");
    assert_eq!(markers(dir.path()), vec!["k:1:1:call_1".to_owned()], "the effect happened exactly once");
    let unknown = cat(&url, "k").into_iter().find(|r| r["type"] == "tool/result").unwrap();
    assert_eq!(unknown["data"]["error"]["code"], "TOOL_OUTCOME_UNKNOWN", "{unknown}");
}

/// SIGSTOP, SIGCONT.
fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
    assert!(status.success());
}

/// The zombie of both zombie tests: a worker (lease 1 s) streams `first` (the model's first
/// response) into session `id`; `stop_after_ms` after its request it is SIGSTOPped and left
/// 2.5 s, past its lease; a second worker takes the session over and answers the model's
/// second response; then the zombie is SIGCONTed. Holds what both tests need — the takeover
/// succeeded, the zombie ended not kept and was told it was fenced, and nothing it wrote after
/// the takeover landed — and returns the test's directory (the tool's markers) and the second
/// worker's summary.
fn a_zombie_wakes_fenced(id: &str, first: Value, stop_after_ms: u64) -> Option<(tempfile::TempDir, Value)> {
    let url = database()?;
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [first, {"frames": [{"text": "The live worker's answer."}], "finish": "stop"}]}),
    );
    let config = config(dir.path(), &server.base_url(), false);
    let lease = ["--lease-ms", "1000"];
    let zombie = spawn(worker(&config, &dir.path().join("w1"), &url, id, false, &lease));
    wait_for("the zombie's request at the model server", || !logged_requests(dir.path()).is_empty());
    std::thread::sleep(Duration::from_millis(stop_after_ms));
    signal(&zombie, "STOP");
    std::thread::sleep(Duration::from_millis(2_500)); // past the lease: nobody renews it

    let output = worker(&config, &dir.path().join("w2"), &url, id, true, &lease).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "the live worker takes over: {}", stderr(&output));
    let summary: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    let after_takeover = cat(&url, id);

    signal(&zombie, "CONT");
    let woke = zombie.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&woke.stderr);
    assert_ne!(woke.status.code(), Some(0), "the zombie's turn cannot be kept: {said}");
    assert!(said.contains("superseded"), "the zombie is told it was fenced: {said}");
    assert_eq!(cat(&url, id), after_takeover, "nothing the zombie wrote after the takeover landed");
    let inspected = transcript("inspect", &url, id, &[]);
    assert_eq!(inspected.status.code(), Some(0), "{}", stdout(&inspected));
    Some((dir, summary))
}

#[test]
fn a_worker_stopped_past_its_lease_wakes_up_fenced_and_writes_nothing() {
    // The zombie's answer streams slowly: stopped a few chunks in.
    let slow: Vec<Value> = (0..40).map(|i| json!({"text": format!("zombie {i} ")})).collect();
    let first = json!({"frames": slow, "finish": "stop", "frame_delay_ms": 50});
    let Some((_, summary)) = a_zombie_wakes_fenced("z", first, 300) else { return };
    assert_eq!(summary["assistant_text"], "The live worker's answer.", "{summary}");
}

#[test]
fn a_zombie_never_dispatches_the_tool_call_it_streams_after_the_takeover() {
    // The zombie's answer streams text slowly, then calls the tool.
    let mut frames: Vec<Value> = (0..30).map(|i| json!({"text": format!("thinking {i} ")})).collect();
    frames.push(json!({"tool_call": {"index": 0, "id": "call_z", "name": "send", "arguments": "{\"text\":\"hi\"}"}}));
    let first = json!({"frames": frames, "finish": "tool_calls", "frame_delay_ms": 40});
    let Some((dir, _)) = a_zombie_wakes_fenced("d", first, 200) else { return };
    assert!(markers(dir.path()).is_empty(), "no effect from the fenced epoch: {:?}", markers(dir.path()));
}

#[test]
fn eight_workers_drain_one_queue_of_a_thousand_and_each_is_delivered_once() {
    const ITEMS: usize = 1_000;
    const WORKERS: usize = 8;
    let Some(url) = database() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Enqueued through the library on a thread of its own (the blocking client may not run
    // inside a runtime).
    let enqueue_url = url.clone();
    std::thread::spawn(move || {
        let seams = faultline_runtime::production::seams();
        let queue = faultline_runtime::production::PgOutbox::connect(
            &enqueue_url,
            seams.process.clone(),
            seams.clock.clone(),
            seams.entropy.as_ref(),
        )
        .unwrap();
        for i in 0..ITEMS {
            use faultline_runtime::outbox::Outbox as _;
            queue.enqueue(&format!("item-{i:04}"), &format!("payload {i}")).unwrap();
        }
    })
    .join()
    .unwrap();

    let receipts = dir.path().join("receipts.log");
    let receiver = format!("echo \"$FAULTLINE_EXECUTION_ID $(cat)\" >> {}", receipts.display());
    let workers: Vec<Child> = (0..WORKERS)
        .map(|_| {
            let mut command = Command::new(faultline_bin());
            command.args(["outbox", "drain", "--database-url", &url, "--", "sh", "-c", &receiver]);
            spawn(command)
        })
        .collect();
    let mut drained_by = Vec::new();
    for worker in workers {
        let output = worker.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        drained_by.push(String::from_utf8_lossy(&output.stdout).lines().filter(|l| l.starts_with("delivered")).count());
    }
    // The receiver's own log is the oracle: every item exactly once, with its own payload.
    let log = std::fs::read_to_string(&receipts).unwrap();
    let mut seen: Vec<&str> = log.lines().collect();
    assert_eq!(seen.len(), ITEMS, "one receipt per item");
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), ITEMS, "no item delivered twice");
    for (i, line) in seen.iter().enumerate() {
        assert_eq!(*line, format!("item-{i:04} payload {i}"));
    }
    assert_eq!(drained_by.iter().sum::<usize>(), ITEMS, "{drained_by:?}");
    assert!(drained_by.iter().filter(|&&n| n > 0).count() > 1, "the work was shared: {drained_by:?}");
    let listed = faultline(&["outbox", "list", "--database-url", &url, "--status", "delivered"]);
    assert_eq!(stdout(&listed).lines().count(), ITEMS, "{}", stderr(&listed));
}

/// The answer of the database-fault tests: 60 parts, 25 ms apart (1.5 s of streaming).
fn slow_parts() -> String {
    (0..60).map(|i| format!("part {i} ")).collect()
}

/// A worker streams [`slow_parts`] into session `id` of `url` through `reach_url` while
/// `fault` hits the database (once the request reached the model); then the verdict both
/// database-fault tests hold: the turn completed with every part durable, or failed
/// classified (exit 6, the database named); either way another worker resumes the session
/// and what was committed reads back clean.
fn a_turn_survives(url: &str, reach_url: &str, id: &str, fault: impl FnOnce()) {
    let dir = tempfile::tempdir().unwrap();
    let frames: Vec<Value> = (0..60).map(|i| json!({"text": format!("part {i} ")})).collect();
    let model = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": frames, "finish": "stop", "frame_delay_ms": 25},
            {"frames": [{"text": "Resumed."}], "finish": "stop"}
        ]}),
    );
    let config = config(dir.path(), &model.base_url(), false);
    let running = spawn(worker(&config, &dir.path().join("w1"), reach_url, id, false, &[]));
    wait_for("the request at the model server", || !logged_requests(dir.path()).is_empty());
    fault();
    let output = running.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    match output.status.code() {
        Some(0) => {
            let summary: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
            assert_eq!(summary["kept"], true, "{summary}");
            assert_eq!(summary["assistant_text"], slow_parts().as_str());
            let log = cat(url, id);
            let message = log.iter().find(|r| r["type"] == "assistant/message").expect("the answer is durable");
            assert_eq!(message["data"]["message"]["content"][0]["text"], slow_parts().as_str(), "{message}");
        }
        Some(6) => assert!(said.contains("postgres") || said.contains("DATABASE_UNREACHABLE"), "{said}"),
        other => panic!("neither completed nor failed classified ({other:?}): {said}"),
    }
    let resumed = worker(&config, &dir.path().join("w2"), url, id, true, &[]).output().unwrap();
    assert_eq!(resumed.status.code(), Some(0), "resumable: {}", stderr(&resumed));
    let inspected = transcript("inspect", url, id, &[]);
    assert_eq!(inspected.status.code(), Some(0), "{}", stdout(&inspected));
}

#[test]
fn a_server_restarted_mid_turn_loses_nothing_acknowledged() {
    if PgServer::shared().is_none() {
        return skip_or_fail(REQUIRE_POSTGRES_ENV, "PostgreSQL is not installed");
    }
    // A server of its own: this test restarts it.
    let server = PgServer::start().unwrap();
    let url = server.fresh_database();
    a_turn_survives(&url, &url, "r", || {
        std::thread::sleep(Duration::from_millis(300));
        server.restart_immediate().unwrap();
    });
}

#[test]
fn connections_cut_mid_turn_are_classified_and_the_session_resumes() {
    let Some(url) = database() else { return };
    let (proxy, through_proxy) = CuttingProxy::in_front_of(&url);
    a_turn_survives(&url, &through_proxy, "c", || {
        // Cut every connection through the proxy, ten times while the answer streams.
        let mut cut = 0;
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(100));
            cut += proxy.cut();
        }
        assert!(cut > 0, "the worker's connection was cut");
    });
}

#[test]
fn an_agent_file_store_table_puts_the_session_on_postgres_without_flags() {
    let Some(url) = database() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [{"frames": [{"text": "From the file's store."}], "finish": "stop"}]}),
    );
    let base = std::fs::read_to_string(config(dir.path(), &server.base_url(), false)).unwrap();
    let file = dir.path().join("fleet.toml");
    std::fs::write(
        &file,
        format!("{base}\n[store]\nkind = \"postgres\"\ndatabase_url_env = \"FLEET_DB\"\nlease_ms = 5000\n"),
    )
    .unwrap();
    let output = Command::new(faultline_bin())
        .args(["agent", "run", "--config", file.to_str().unwrap(), "--session-dir"])
        .arg(dir.path().join("w"))
        .args(["--session", "f", "--prompt", "go", "--json"])
        .env("FLEET_DB", &url)
        .env_remove("FAULTLINE_DATABASE_URL")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let log = cat(&url, "f");
    assert_eq!(log.last().unwrap()["type"], "turn/end", "the session is in the database");
    assert!(!dir.path().join("w").join("f").exists(), "and not in the session directory");
    // Without the variable the file names, the run is refused before anything is made.
    let missing = Command::new(faultline_bin())
        .args(["agent", "run", "--config", file.to_str().unwrap(), "--session-dir"])
        .arg(dir.path().join("w"))
        .args(["--session", "g", "--prompt", "go"])
        .env_remove("FLEET_DB")
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1), "{}", stderr(&missing));
    assert!(stderr(&missing).contains("FLEET_DB"), "{}", stderr(&missing));
}

/// `agent run --store postgres` and `transcript` over `sslmode=verify-full` with a private CA
/// (FAILURE-DB-TLS), and a worker pointed at the wrong CA refused before any session is made.
#[test]
fn agent_run_and_transcript_work_over_verify_full_and_a_wrong_ca_is_refused() {
    let (pki, other) = (
        faultline_runtime::testing::TestPki::new(&["localhost"]),
        faultline_runtime::testing::TestPki::new(&["localhost"]),
    );
    let server = match PgServer::start_with_tls(&pki.server_cert_pem, &pki.server_key_pem) {
        Ok(server) => server,
        Err(e) => return skip_or_fail(REQUIRE_POSTGRES_ENV, &format!("PostgreSQL could not start: {e}")),
    };
    let dir = tempfile::tempdir().unwrap();
    let (ca, wrong) = (dir.path().join("ca.pem"), dir.path().join("wrong.pem"));
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    std::fs::write(&wrong, &other.ca_pem).unwrap();
    let url_with = |root: &Path| {
        format!(
            "postgresql://faultline@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
            server.port(),
            root.display()
        )
    };
    let model = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [{"frames": [{"text": "over TLS"}], "finish": "stop"}]}),
    );
    let config = config(dir.path(), &model.base_url(), false);
    let output = worker(&config, &dir.path().join("w1"), &url_with(&ca), "tls1", false, &[]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let kinds: Vec<String> =
        cat(&url_with(&ca), "tls1").iter().map(|r| r["type"].as_str().unwrap().to_owned()).collect();
    assert_eq!(kinds.last().map(String::as_str), Some("turn/end"), "{kinds:?}");

    let refused = worker(&config, &dir.path().join("w2"), &url_with(&wrong), "tls2", false, &[]).output().unwrap();
    assert_ne!(refused.status.code(), Some(0));
    assert!(stderr(&refused).contains("TLS_CERTIFICATE"), "{}", stderr(&refused));
    assert_eq!(faultline_e2e::logged_requests(dir.path()).len(), 1, "the refused worker never asked the model");
    server.stop();
}

/// `transcript report|repair --outbox database` read a fleet's queue in the session's own
/// PostgreSQL database as they read a SQLite file (issue 54): a worker killed while its delivery is out leaves the
/// call `delivering`; the report names it, and the repair closes it from that record.
#[test]
fn report_and_repair_reconcile_with_the_queue_in_postgres() {
    let Some(url) = database() else { return };
    let dir = tempfile::tempdir().unwrap();
    let model = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": [{"tool_call": {"index": 0, "id": "call_1", "name": "send", "arguments": "{\"text\":\"hi\"}"}}], "finish": "tool_calls"},
            {"frames": [{"text": "checked"}], "finish": "stop"}
        ]}),
    );
    let config = faultline_e2e::marker_agent_config(dir.path(), &model.base_url(), true, true);
    let mut child = spawn(worker(&config, &dir.path().join("w1"), &url, "q1", false, &[]));
    wait_for("the receiver's marker", || !faultline_e2e::markers(dir.path()).is_empty());
    child.kill().unwrap(); // SIGKILL with the delivery out
    child.wait().unwrap();

    let report = transcript("report", &url, "q1", &["--outbox", "database", "--json"]);
    assert_eq!(report.status.code(), Some(0), "{}", stderr(&report));
    let report: Value = serde_json::from_str(stdout(&report).trim()).unwrap();
    assert_eq!(report["unknown"][0]["execution_id"], "q1:1:1:call_1", "{report}");
    assert!(report["unknown"][0]["detail"].as_str().unwrap().contains("delivering"), "{report}");

    let repaired = transcript("repair", &url, "q1", &["--outbox", "database"]);
    assert_eq!(repaired.status.code(), Some(0), "{}", stderr(&repaired));
    let log = cat(&url, "q1");
    let result = log.iter().find(|r| r["type"] == "tool/result").expect("a closer for the call");
    let text = result["data"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("delivery record q1:1:1:call_1"), "closed from the queue's record: {text}");
    let by_url = transcript("report", &url, "q1", &["--outbox", &url, "--json"]);
    assert_eq!(by_url.status.code(), Some(0), "a URL names the same queue: {}", stderr(&by_url));
    let missing = transcript("report", &url, "q1", &["--outbox", "/nonexistent/outbox.sqlite"]);
    assert_ne!(missing.status.code(), Some(0), "a SQLite path is still a file");
}

/// A worker whose database cannot be reached at start ran and failed (exit 2, said as
/// `DATABASE_UNREACHABLE`), not a usage error: a supervisor retries it later. Nothing is
/// asked of the model, and the URL's password is in no message.
#[test]
fn a_worker_whose_database_cannot_be_reached_exits_2_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let model =
        ModelServerProcess::start(dir.path(), &json!({"responses": [{"frames": [{"text": "no"}], "finish": "stop"}]}));
    let config = config(dir.path(), &model.base_url(), false);
    let url = format!("postgresql://faultline:hunter2-secret@127.0.0.1:{port}/postgres");
    let output = worker(&config, &dir.path().join("w"), &url, "unreachable", false, &[]).output().unwrap();
    let said = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(said.contains("DATABASE_UNREACHABLE"), "{said}");
    assert!(!said.contains("hunter2-secret"), "the password stays out: {said}");
    assert!(faultline_e2e::logged_requests(dir.path()).is_empty(), "the model was never asked");
}

/// How long `agent run` may take to give up on a database that accepts and never answers
/// (FAILURE-DB-SILENT, docs/fleet.md): the connect bound and the reply bound, with room for
/// the one reconnect and the lookup a lost answer gets, and for a loaded machine.
const SILENT_GIVE_UP_S_MAX: u64 = 60;

/// A database that accepts the connection and never answers — in the startup exchange, and
/// in the TLS handshake — ends `agent run` as unreachable (exit 2, `DATABASE_UNREACHABLE`)
/// within its bound, not a hang; the model is never asked.
#[test]
fn a_database_that_never_answers_at_connect_ends_the_worker_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let silent = CuttingProxy::silent();
    let model =
        ModelServerProcess::start(dir.path(), &json!({"responses": [{"frames": [{"text": "no"}], "finish": "stop"}]}));
    let config = config(dir.path(), &model.base_url(), false);
    for sslmode in ["disable", "require"] {
        let url = format!("postgresql://faultline@127.0.0.1:{}/postgres?sslmode={sslmode}", silent.port());
        let started = Instant::now();
        let output = worker(&config, &dir.path().join(sslmode), &url, "silent", false, &[]).output().unwrap();
        let said = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "sslmode={sslmode}: {said}");
        assert!(said.contains("DATABASE_UNREACHABLE") && said.contains("did not answer"), "{said}");
        let took = started.elapsed();
        assert!(took < Duration::from_secs(SILENT_GIVE_UP_S_MAX), "sslmode={sslmode}: gave up after {took:?}");
    }
    assert!(logged_requests(dir.path()).is_empty(), "the model was never asked");
}

/// A database that goes silent mid-turn (it stops answering on the open connection and
/// never answers a new one) ends the turn not kept (exit 6), the database named unreachable,
/// within the bound: the reply bound (the URL's statement_timeout + 5 s) and the connect bound
/// of the one reconnect — not a hang. Another worker resumes the session once the database
/// answers again.
#[test]
#[allow(clippy::print_stderr)] // the figure docs/fleet.md quotes
fn a_database_that_goes_silent_mid_turn_ends_the_turn_within_its_bound() {
    let Some(url) = database() else { return };
    let (proxy, through) = CuttingProxy::in_front_of(&url);
    let bounded = format!("{through}?options=-c%20statement_timeout%3D1000");
    let dir = tempfile::tempdir().unwrap();
    let frames: Vec<Value> = (0..60).map(|i| json!({"text": format!("part {i} ")})).collect();
    let model = ModelServerProcess::start(
        dir.path(),
        &json!({"responses": [
            {"frames": frames, "finish": "stop", "frame_delay_ms": 25},
            {"frames": [{"text": "Resumed."}], "finish": "stop"}
        ]}),
    );
    let config = config(dir.path(), &model.base_url(), false);
    let running = spawn(worker(&config, &dir.path().join("w1"), &bounded, "silent-mid-turn", false, &[]));
    wait_for("the request at the model server", || !logged_requests(dir.path()).is_empty());
    proxy.silence();
    let silenced = Instant::now();
    let output = running.wait_with_output().unwrap();
    let took = silenced.elapsed();
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(6), "not kept: {said}");
    assert!(said.contains("DATABASE_UNREACHABLE") && said.contains("did not answer"), "{said}");
    assert!(took < Duration::from_secs(SILENT_GIVE_UP_S_MAX), "the worker hung: {took:?} after the silence");
    eprintln!("the worker gave up {took:?} after the database went silent");
    let resumed = worker(&config, &dir.path().join("w2"), &url, "silent-mid-turn", true, &[]).output().unwrap();
    assert_eq!(resumed.status.code(), Some(0), "resumable: {}", stderr(&resumed));
}
