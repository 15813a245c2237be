//! Crash-point enumeration (in the style of ALICE/CrashMonkey): a small session workload on
//! turmoil's filesystem, crashed before *every* mutating filesystem operation in turn, with
//! torn writes at 512- and 4096-byte blocks, for both file formats. After each crash the
//! restarted host must find no corruption, every acknowledged batch byte-identical, and a
//! repaired log that passes the validator.
#![allow(clippy::print_stdout)] // reports the number of crash states checked

use std::path::Path;
use std::sync::{Arc, Mutex};

use faultline_runtime::event::*;
use faultline_runtime::store::{FileStore, Format, ScanStatus, SessionId, Store, Takeover};
use faultline_runtime::{seams::Fs, Error};
use faultline_sim::seams::{sim_seams, FaultFs, FsFaults, SimFs};

use crate::support::sim_builder;

const ROOT: &str = "/sessions";
/// Tool arguments large enough that one batch spans several 512-byte blocks.
const ARGUMENT_BYTES: usize = 1500;
/// Torn-write outcomes are drawn from turmoil's RNG: several seeds per crash point.
const SEEDS_PER_POINT: u64 = 4;

fn session() -> SessionId {
    SessionId::new("enum").unwrap()
}

/// The workload's batches: a turn with a user message, a tool call and its result, then a
/// second turn left open.
fn batches() -> Vec<Vec<Event>> {
    let arguments = format!("{{\"text\":\"{}\"}}", "x".repeat(ARGUMENT_BYTES));
    let call = ContentBlock::tool_call("c1", "send", arguments.clone());
    vec![
        vec![
            Event::TurnStart(TurnStart { turn: 1 }),
            Event::StepStart(StepRef { turn: 1, step: 1 }),
            Event::UserMessage(UserMessage { message: Message::user_text("send the report") }),
        ],
        vec![
            Event::AssistantMessage(AssistantMessage {
                turn: 1,
                step: 1,
                message: Message { role: Role::Assistant, content: vec![call] },
                usage: None,
            }),
            Event::ToolCall(ToolCall { turn: 1, step: 1, call_id: "c1".into(), name: "send".into(), arguments }),
        ],
        vec![
            Event::ToolResult(ToolResult {
                turn: 1,
                step: 1,
                call_id: "c1".into(),
                content: vec![ContentBlock::text("y".repeat(ARGUMENT_BYTES))],
                is_error: false,
                error: None,
            }),
            Event::StepEnd(StepRef { turn: 1, step: 1 }),
            Event::TurnEnd(TurnEnd { turn: 1, reason: TurnEndReason::Completed }),
        ],
        vec![
            Event::TurnStart(TurnStart { turn: 2 }),
            Event::StepStart(StepRef { turn: 2, step: 1 }),
            Event::UserMessage(UserMessage { message: Message::user_text("and again") }),
        ],
    ]
}

#[derive(Debug, Default)]
struct FirstLife {
    created: bool,
    acked: Vec<Record>,
    done: bool,
}

/// Runs the workload until it finishes or the filesystem "crashes".
fn workload(store: &FileStore, life: &Mutex<FirstLife>) {
    let Ok(mut log) = store.create(&session(), 1_000) else { return };
    life.lock().unwrap().created = true;
    for events in batches() {
        let start = log.next_seq();
        let batch: Vec<Record> =
            events.into_iter().enumerate().map(|(i, e)| Record::new(start + i as u64, 2_000 + start, e)).collect();
        if log.append(&batch).is_err() {
            return;
        }
        life.lock().unwrap().acked.extend(batch);
    }
}

/// Checks the restarted host's view; `Err` names the broken invariant.
fn recover(store: &FileStore, life: &FirstLife) -> Result<(), String> {
    let inspection = match store.inspect(&session()) {
        Err(Error::SessionNotFound(_)) if !life.created => return Ok(()),
        Err(e) => return Err(format!("inspect failed: {e}")),
        Ok(inspection) => inspection,
    };
    if !matches!(inspection.status, ScanStatus::Clean | ScanStatus::Torn) {
        return Err(format!("crash-induced state reported as {:?}: {:?}", inspection.status, inspection.error));
    }
    let survived: Vec<&Record> = inspection.records.iter().chain(&inspection.recovered).collect();
    if survived.len() < life.acked.len() {
        return Err(format!("{} records acknowledged durable, {} survived", life.acked.len(), survived.len()));
    }
    for (acked, found) in life.acked.iter().zip(&survived) {
        if acked.encode() != found.encode() {
            return Err(format!("acknowledged seq {} changed: {} vs {}", acked.seq, acked.encode(), found.encode()));
        }
    }
    let opened = store.open(&session(), Takeover::IfDead).map_err(|e| format!("open after crash failed: {e}"))?;
    Validator::validate_all(&opened.loaded.records).map_err(|v| format!("repaired log invalid: {v}"))?;
    opened.log.close().map_err(|e| format!("close failed: {e}"))?;
    let again = store.inspect(&session()).map_err(|e| format!("re-inspect failed: {e}"))?;
    if again.needs_repair() || again.status != ScanStatus::Clean {
        return Err(format!("repair did not stick: {:?}", again.status));
    }
    Ok(())
}

/// One crash state; returns the number of mutating operations the first life numbered.
fn crash_state(format: Format, block_size: u64, seed: u64, crash_before: Option<u64>) -> (u64, Result<(), String>) {
    let mut builder = sim_builder(seed);
    builder.fs().block_size(block_size);
    let mut sim = builder.build();
    let faults = FsFaults::new();
    if let Some(op) = crash_before {
        faults.crash_before(op);
    }
    let first = Arc::new(Mutex::new(FirstLife::default()));
    let verdict: Arc<Mutex<Option<Result<(), String>>>> = Arc::default();
    let incarnation = Arc::new(Mutex::new(0u64));
    {
        let (faults, first, verdict, incarnation) =
            (faults.clone(), first.clone(), verdict.clone(), incarnation.clone());
        sim.host("agent", move || {
            let (faults, first, verdict, incarnation) =
                (faults.clone(), first.clone(), verdict.clone(), incarnation.clone());
            async move {
                let life = {
                    let mut n = incarnation.lock().unwrap();
                    *n += 1;
                    *n
                };
                let mut seams = sim_seams(seed, "agent", life);
                if life == 1 {
                    let fs: Arc<dyn Fs> = Arc::new(FaultFs::new(Arc::new(SimFs), faults));
                    seams.fs = fs;
                    workload(&FileStore::new(seams, Path::new(ROOT), format), &first);
                    first.lock().unwrap().done = true;
                } else {
                    let outcome = recover(&FileStore::new(seams, Path::new(ROOT), format), &first.lock().unwrap());
                    *verdict.lock().unwrap() = Some(outcome);
                }
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }
    while !first.lock().unwrap().done {
        sim.step().expect("simulation step");
    }
    sim.crash("agent");
    sim.bounce("agent");
    while verdict.lock().unwrap().is_none() {
        sim.step().expect("simulation step");
    }
    let outcome = verdict.lock().unwrap().take().unwrap();
    (faults.ops(), outcome)
}

#[test]
fn every_crash_point_recovers_without_corruption_or_lost_acknowledged_batches() {
    let mut states = 0u64;
    let mut failures = Vec::new();
    for format in [Format::Jsonl, Format::Zstd] {
        let (ops, clean) = crash_state(format, 512, 0, None);
        assert_eq!(clean, Ok(()), "{format:?}: the crash-free run must recover");
        assert!(ops >= 20, "{format:?}: the workload numbers {ops} operations");
        for crash_before in 0..=ops {
            for block_size in [512, 4096] {
                for seed in 1..=SEEDS_PER_POINT {
                    states += 1;
                    let (_, outcome) = crash_state(format, block_size, seed, Some(crash_before));
                    if let Err(why) = outcome {
                        failures.push(format!(
                            "{format:?} crash before op {crash_before}, block {block_size}, seed {seed}: {why}"
                        ));
                    }
                }
            }
        }
    }
    println!("crash-point enumeration: {states} crash states checked, {} failed", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(states >= 300, "only {states} crash states");
}
