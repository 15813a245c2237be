//! The fleet's chaos soak (issue 54): workers — real `agent run --store postgres` processes —
//! work sessions on a real server, reached through a TCP proxy of the test's own, while the
//! test SIGKILLs workers, SIGSTOPs them past their lease (then SIGCONTs them), cuts every
//! connection through the proxy, and restarts the server. Each turn calls a tool that
//! delivers through the fleet's queue to a receiver that records every effect.
//!
//! At the end every session is resumed once more, calmly, and held to what the test and the
//! receiver saw, not to what the workers said: every turn a worker reported kept is in the
//! transcript; every transcript inspects clean; no effect reached the receiver twice; every
//! effect has its durable `tool/call` (an effect without one came from a fenced writer whose
//! intent was refused); no call the transcript says never ran has an effect, and no call it
//! says succeeded lacks one. It prints its counts.
//!
//! Short in CI (`FAULTLINE_SOAK_SECS`, default 40); the long form is in docs/fleet.md.
#![allow(clippy::disallowed_methods, clippy::disallowed_types, clippy::print_stdout)] // real processes

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use faultline_e2e::{faultline, faultline_bin, markers, skip_or_fail, stderr, stdout, ModelServerProcess};
use faultline_runtime::testing::{PgServer, REQUIRE_POSTGRES_ENV};
use serde_json::{json, Value};

use crate::cutting_proxy::CuttingProxy;

/// Every worker's lease, in ms: a stop of twice as long loses the session.
const LEASE_MS: u64 = 1_000;
/// How long a stopped worker stays stopped, in ms.
const STOP_MS: u64 = 2 * LEASE_MS + 500;
/// Between two chaos actions, in ms (drawn up to this).
const CHAOS_GAP_MS_MAX: u64 = 1_200;
/// How long a worker has run before a stop may pick it, in ms (past start-up: it holds its
/// session and streams the model's answer).
const SETTLED_MS: u64 = 250;
/// How long the receiver takes to answer after recording an effect, in ms.
const RECEIVER_MS: u64 = 200;
/// Fewest seconds between two server restarts.
const RESTART_GAP_S_MIN: u64 = 8;

/// The soak's size, from the environment (defaults: the short form CI runs).
struct Settings {
    secs: u64,
    workers: usize,
    sessions: usize,
    seed: u64,
}

fn env_or(name: &str, default: u64, range: std::ops::RangeInclusive<u64>) -> u64 {
    let value = std::env::var(name).ok().map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{name}={v}")));
    assert!(range.contains(&value), "{name}={value} is outside {range:?}");
    value
}

impl Settings {
    fn from_env() -> Self {
        Self {
            secs: env_or("FAULTLINE_SOAK_SECS", 40, 5..=86_400),
            workers: env_or("FAULTLINE_SOAK_WORKERS", 3, 1..=32) as usize,
            sessions: env_or("FAULTLINE_SOAK_SESSIONS", 4, 1..=1_000) as usize,
            seed: env_or("FAULTLINE_SOAK_SEED", 1, 0..=u64::MAX),
        }
    }
}

/// A small deterministic draw for the chaos schedule (the faults' timing still varies with
/// the machine: the schedule is the seed's, what it hits is not).
struct Draw(u64);

impl Draw {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below.max(1)
    }
}

/// What happened, counted by the test.
#[derive(Debug, Default)]
struct Counts {
    runs: usize,
    kept: usize,
    not_kept: usize,
    refused: usize,
    killed: usize,
    stops: usize,
    restarts: usize,
    cuts: usize,
    told_fenced: usize,
}

/// The fleet while it runs: the workers' live processes (worker → pid), the stopped ones, the
/// turns reported kept (session → turns), the counts.
#[derive(Default)]
struct Fleet {
    running: Mutex<BTreeMap<usize, (u32, Instant)>>,
    stopped: Mutex<BTreeSet<u32>>,
    kept: Mutex<BTreeMap<String, BTreeSet<u64>>>,
    counts: Mutex<Counts>,
}

fn signal(pid: u32, signal: &str) {
    // A worker may have ended since it was picked: `kill` then says so, which is no news.
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status();
}

/// One `agent run` on `session`, resuming it unless `create`.
fn run_turn(config: &Path, dir: &Path, url: &str, session: &str, create: bool) -> Command {
    let mut command = Command::new(faultline_bin());
    command
        .args(["agent", "run", "--config", config.to_str().unwrap(), "--session-dir", dir.to_str().unwrap()])
        .args(["--store", "postgres", "--session", session, "--prompt", "go on", "--json"])
        .args(["--lease-ms", &LEASE_MS.to_string()])
        .env("FAULTLINE_DATABASE_URL", url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if !create {
        command.arg("--resume");
    }
    command
}

/// Runs one turn and records what it said: a kept turn with its number, or how it ended.
fn turn_and_record(fleet: &Fleet, worker: usize, mut command: Command, session: &str) {
    let child = command.spawn().unwrap();
    fleet.running.lock().unwrap().insert(worker, (child.id(), Instant::now()));
    let output = child.wait_with_output().unwrap();
    fleet.running.lock().unwrap().remove(&worker);
    let said = String::from_utf8_lossy(&output.stderr);
    let mut counts = fleet.counts.lock().unwrap();
    counts.runs += 1;
    counts.told_fenced += usize::from(said.contains("superseded"));
    match output.status.code() {
        Some(0) => {
            let summary: Value = serde_json::from_str(String::from_utf8_lossy(&output.stdout).trim()).unwrap();
            assert_eq!(summary["kept"], true, "exit 0 is a kept turn: {summary}");
            counts.kept += 1;
            let turn = summary["turn"].as_u64().unwrap();
            fleet.kept.lock().unwrap().entry(session.to_owned()).or_default().insert(turn);
        }
        None => counts.killed += 1,
        Some(_) if said.contains("held by a live writer") => counts.refused += 1,
        Some(_) => counts.not_kept += 1,
    }
}

/// Stops `pid` past its lease on a thread of its own, then lets it go on.
fn stop_past_the_lease(fleet: &Arc<Fleet>, pid: u32) -> Option<std::thread::JoinHandle<()>> {
    if !fleet.stopped.lock().unwrap().insert(pid) {
        return None;
    }
    signal(pid, "STOP");
    fleet.counts.lock().unwrap().stops += 1;
    let fleet = fleet.clone();
    Some(std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(STOP_MS));
        signal(pid, "CONT");
        fleet.stopped.lock().unwrap().remove(&pid);
    }))
}

/// The chaos, until `until`: kills, stops past the lease, connection cuts, server restarts.
/// A stop picks a worker a while into its run (past its start-up: holding its session).
fn chaos(fleet: &Arc<Fleet>, proxy: &CuttingProxy, server: &PgServer, seed: u64, until: Instant) {
    let mut draw = Draw(seed);
    let (started, mut last_restart) = (Instant::now(), Instant::now());
    let mut stopping = Vec::new();
    let halfway = started + until.saturating_duration_since(started) / 2;
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200 + draw.next(CHAOS_GAP_MS_MAX)));
        let running: Vec<(u32, Instant)> = fleet.running.lock().unwrap().values().copied().collect();
        let pick =
            |draw: &mut Draw, among: &[u32]| (!among.is_empty()).then(|| among[draw.next(among.len() as u64) as usize]);
        let all: Vec<u32> = running.iter().map(|(pid, _)| *pid).collect();
        let settled: Vec<u32> = running
            .iter()
            .filter(|(_, since)| since.elapsed() >= Duration::from_millis(SETTLED_MS))
            .map(|(p, _)| *p)
            .collect();
        let roll = draw.next(100);
        match roll {
            0..=24 if !all.is_empty() => signal(pick(&mut draw, &all).unwrap(), "KILL"),
            25..=49 if !settled.is_empty() => {
                if let Some(resume) = stop_past_the_lease(fleet, pick(&mut draw, &settled).unwrap()) {
                    stopping.push(resume);
                }
            }
            // At least one restart, halfway through the shortest soak.
            _ if (roll >= 90 && last_restart.elapsed() >= Duration::from_secs(RESTART_GAP_S_MIN))
                || (Instant::now() >= halfway && fleet.counts.lock().unwrap().restarts == 0) =>
            {
                server.restart_immediate().unwrap();
                last_restart = Instant::now();
                fleet.counts.lock().unwrap().restarts += 1;
            }
            _ => {
                proxy.cut();
                fleet.counts.lock().unwrap().cuts += 1;
            }
        }
    }
    for resume in stopping {
        resume.join().unwrap();
    }
}

/// `session`'s records, read back directly (not through the proxy).
fn records(url: &str, session: &str) -> Vec<Value> {
    let output = faultline(&["transcript", "cat", "--database-url", url, "--session", session]);
    assert_eq!(output.status.code(), Some(0), "cat {session}: {}", stderr(&output));
    stdout(&output).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The execution id of a `tool/call` or `tool/result` record of `session`.
fn execution_of(session: &str, record: &Value) -> String {
    let data = &record["data"];
    format!("{session}:{}:{}:{}", data["turn"], data["step"], data["call_id"].as_str().unwrap())
}

/// Holds one session to the evidence; returns its effects' count, and counts its tool results
/// by error code (`ok` for a success) into `outcomes`.
fn check_session(
    url: &str,
    session: &str,
    kept: &BTreeSet<u64>,
    receipts: &BTreeSet<String>,
    outcomes: &mut BTreeMap<String, usize>,
) -> usize {
    let inspected = faultline(&["transcript", "inspect", "--database-url", url, "--session", session]);
    assert_eq!(inspected.status.code(), Some(0), "{session} inspects clean: {}", stdout(&inspected));
    let log = records(url, session);
    let completed: BTreeSet<u64> = log
        .iter()
        .filter(|r| r["type"] == "turn/end" && r["data"]["reason"]["kind"] == "completed")
        .map(|r| r["data"]["turn"].as_u64().unwrap())
        .collect();
    let lost: Vec<&u64> = kept.difference(&completed).collect();
    assert!(lost.is_empty(), "{session}: turns reported kept are not completed in the transcript: {lost:?}");
    let intents: BTreeSet<String> =
        log.iter().filter(|r| r["type"] == "tool/call").map(|r| execution_of(session, r)).collect();
    let mine: Vec<&String> = receipts.iter().filter(|x| x.starts_with(&format!("{session}:"))).collect();
    for effect in &mine {
        assert!(intents.contains(*effect), "{session}: effect {effect} has no durable tool/call (a fenced writer's)");
    }
    for result in log.iter().filter(|r| r["type"] == "tool/result") {
        let execution = execution_of(session, result);
        let code = result["data"]["error"]["code"].as_str();
        let name = result["data"]["error"]["name"].as_str().unwrap_or("");
        *outcomes.entry(format!("{}/{name}", code.unwrap_or("ok"))).or_default() += 1;
        if code == Some("TOOL_NOT_STARTED") {
            assert!(!receipts.contains(&execution), "{session}: {execution} is called never run, yet it ran: {result}");
        }
        if result["data"]["is_error"] == false {
            assert!(receipts.contains(&execution), "{session}: {execution} is called done, yet nothing ran: {result}");
        }
    }
    mine.len()
}

#[test]
fn a_fleet_under_kills_stops_cuts_and_restarts_loses_no_turn_and_repeats_no_effect() {
    if PgServer::shared().is_none() {
        return skip_or_fail(REQUIRE_POSTGRES_ENV, "PostgreSQL is not installed");
    }
    let settings = Settings::from_env();
    let server = PgServer::start().unwrap(); // a server of its own: the soak restarts it
    let url = server.fresh_database();
    let (proxy, through_proxy) = CuttingProxy::in_front_of(&url);
    let dir = tempfile::tempdir().unwrap();
    let model = ModelServerProcess::start(
        dir.path(),
        &json!({
            // The answer streams for ~0.5 s before its call: a stop falls mid-turn.
            "responses": [{
                "frames": [{"text": "Working"}, {"text": " on"}, {"text": " it."},
                           {"tool_call": {"index": 0, "id": "call_1", "name": "send", "arguments": "{\"text\":\"hi\"}"}}],
                "finish": "tool_calls",
                "frame_delay_ms": 150,
            }],
            "repeat_last": true,
            "after_tool_result": {"frames": [{"text": "done"}], "finish": "stop"},
        }),
    );
    let config = faultline_e2e::slow_marker_agent_config(dir.path(), &model.base_url(), RECEIVER_MS, "soak-agent.toml");
    let sessions: Vec<String> = (0..settings.sessions).map(|i| format!("soak-{i}")).collect();
    let fleet = Arc::new(Fleet::default());
    for session in &sessions {
        turn_and_record(&fleet, 0, run_turn(&config, &dir.path().join("w0"), &url, session, true), session);
    }
    assert_eq!(fleet.counts.lock().unwrap().kept, sessions.len(), "every session starts with a kept turn");

    let until = Instant::now() + Duration::from_secs(settings.secs);
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..settings.workers)
        .map(|worker| {
            let (fleet, next, sessions) = (fleet.clone(), next.clone(), sessions.clone());
            let (config, url, home) = (config.clone(), through_proxy.clone(), dir.path().join(format!("w{worker}")));
            std::thread::spawn(move || {
                while Instant::now() < until {
                    let session = &sessions[next.fetch_add(1, Ordering::Relaxed) % sessions.len()];
                    turn_and_record(&fleet, worker, run_turn(&config, &home, &url, session, false), session);
                }
            })
        })
        .collect();
    chaos(&fleet, &proxy, &server, settings.seed, until);
    for worker in workers {
        worker.join().unwrap();
    }

    // Calm: every session resumes once more, straight to the server, and must be kept.
    for session in &sessions {
        let before = fleet.counts.lock().unwrap().kept;
        turn_and_record(&fleet, 0, run_turn(&config, &dir.path().join("w0"), &url, session, false), session);
        assert_eq!(fleet.counts.lock().unwrap().kept, before + 1, "{session} resumes after the chaos");
    }
    let all = markers(dir.path());
    let receipts: BTreeSet<String> = all.iter().cloned().collect();
    assert_eq!(receipts.len(), all.len(), "no effect reached the receiver twice");
    let kept = fleet.kept.lock().unwrap().clone();
    let mut outcomes = BTreeMap::new();
    let effects: usize = sessions.iter().map(|s| check_session(&url, s, &kept[s], &receipts, &mut outcomes)).sum();
    assert_eq!(effects, receipts.len(), "every effect belongs to a session");

    let counts = fleet.counts.lock().unwrap();
    println!(
        "soak: {} s, {} workers, {} sessions, seed {}: {} runs ({} kept, {} not kept, {} refused while held, \
         {} killed), {} stops past the lease, {} cuts of every connection, {} server restarts, {} workers told they \
         were fenced, {} effects, tool results {outcomes:?}, 0 lost turns, 0 duplicated effects",
        settings.secs,
        settings.workers,
        settings.sessions,
        settings.seed,
        counts.runs,
        counts.kept,
        counts.not_kept,
        counts.refused,
        counts.killed,
        counts.stops,
        counts.cuts,
        counts.restarts,
        counts.told_fenced,
        receipts.len(),
    );
    assert!(
        counts.killed > 0 && counts.stops > 0 && counts.cuts > 0 && counts.restarts > 0,
        "the chaos hit the fleet: {counts:?}"
    );
}
