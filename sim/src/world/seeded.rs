//! Resolves a scenario and a seed into the concrete plan of one run. Scenarios whose model or
//! faults are `from_seed` draw them here, each fault family from its own named stream of the
//! seed, so adding a knob to one family never reshuffles another.

use std::collections::BTreeSet;

use faultline_runtime::{CrashPoint, Entropy, EntropyExt};

use crate::model_server::{Frame, Response, Script};
use crate::scenario::{CrashFault, Expectations, FaultPlan, FsFault, Scenario, ScenarioTool};
use crate::SimEntropy;

/// The concrete plan of one run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub tick_ms: u64,
    pub budget_ms: u64,
    pub messages: Vec<String>,
    pub provider: String,
    pub tools: Vec<ScenarioTool>,
    pub tool_concurrency: usize,
    pub script: Script,
    pub faults: FaultPlan,
    pub expect: Expectations,
    /// Fault families present in the plan (those that need no firing report).
    pub families: BTreeSet<String>,
}

fn stream(seed: u64, family: &str) -> SimEntropy {
    SimEntropy::new(seed, &format!("faults/{family}"))
}

fn pick<'a, T>(entropy: &SimEntropy, items: &'a [T]) -> &'a T {
    &items[(entropy.next_u64() % items.len() as u64) as usize]
}

/// A failing model response drawn from the `model` stream.
fn failing_response(entropy: &SimEntropy) -> Response {
    match entropy.next_u64() % 6 {
        0 => Response::status(429, &[("retry-after", "1")], "slow down"),
        1 => Response::status(503, &[], "overloaded"),
        2 => Response {
            frames: vec![Frame::Text("par".into()), Frame::Text("tial".into())],
            disconnect_after_frames: Some(1),
            ..Response::default()
        },
        3 => {
            Response { frames: vec![Frame::Text("stalled".into())], stall_after_frames: Some(1), ..Response::default() }
        }
        4 => Response { finish: Some("stop".into()), done: true, ..Response::default() },
        _ => Response { frames: vec![Frame::Raw("{\"choices\": [".into())], done: true, ..Response::default() },
    }
}

/// Resolves `scenario` for `seed`.
pub fn resolve(scenario: &Scenario, seed: u64) -> Plan {
    let mut script = super::script_of(scenario);
    let mut faults = scenario.faults.clone();
    if scenario.model.from_seed {
        let model = stream(seed, "model");
        let mut responses = Vec::new();
        for (turn, _) in scenario.messages.iter().enumerate() {
            for _ in 0..(model.next_u64() % 3) {
                responses.push(failing_response(&model));
            }
            responses.push(Response::tool_call(&format!("call_{turn}"), "send", "{\"text\":\"hi\"}"));
            for _ in 0..(model.next_u64() % 2) {
                responses.push(failing_response(&model));
            }
            responses.push(Response::text(&["Done", " for now."]));
        }
        responses.push(Response::text(&["Nothing left to do."]));
        script =
            Script { refuse_until_ms: if model.unit_f64() < 0.25 { 300 } else { 0 }, responses, repeat_last: true };
    }
    if faults.from_seed {
        let crash = stream(seed, "crash");
        if crash.unit_f64() < 0.6 {
            let points = [
                CrashPoint::BeforeDispatch,
                CrashPoint::MidStream,
                CrashPoint::AfterToolCallFlush,
                CrashPoint::AfterSideEffect,
                CrashPoint::MidFlush,
                CrashPoint::DuringOutboxFinish,
            ];
            let point = *pick(&crash, &points);
            faults.crashes = vec![CrashFault {
                point,
                hit: 1 + (crash.next_u64() % 2) as u32,
                restart_after_ms: 100 + crash.next_u64() % 400,
            }];
        }
        let fs = stream(seed, "fs");
        faults.fs = Some(FsFault { block_size: Some(*pick(&fs, &[512, 4096])), ..FsFault::default() });
    }
    let mut families = BTreeSet::new();
    if script.refuse_until_ms > 0 {
        families.insert("refused".to_owned());
    }
    for r in &script.responses {
        if let Some(status) = r.status {
            families.insert("http-status".to_owned());
            if status == 429 && r.headers.keys().any(|k| k.starts_with("retry-after")) {
                families.insert("retry-after".to_owned());
            }
        }
        if r.disconnect_after_frames.is_some() {
            families.insert("disconnect".to_owned());
        }
        if r.stall_after_frames.is_some() {
            families.insert("stall".to_owned());
        }
        if !r.done && r.status.is_none() && r.body.is_none() {
            families.insert("partial-eof".to_owned());
        }
        if r.body.as_deref() == Some("") && r.status.is_none() {
            families.insert("empty-body".to_owned());
        }
        if r.frames.iter().any(|f| matches!(f, Frame::Raw(_))) {
            families.insert("malformed".to_owned());
        }
        if r.frames.is_empty() && r.status.is_none() && r.body.is_none() && r.done {
            families.insert("empty-completion".to_owned());
        }
    }
    if let Some(fs) = &faults.fs {
        if fs.block_size.is_some() {
            families.insert("torn-write".to_owned());
        }
        match fs.fail_kind.as_deref() {
            Some("enospc") => families.insert("enospc".to_owned()),
            Some(_) => families.insert("eio".to_owned()),
            None => false,
        };
    }
    Plan {
        tick_ms: scenario.tick_ms,
        budget_ms: scenario.budget_ms,
        messages: scenario.messages.clone(),
        provider: scenario.provider.clone(),
        tools: scenario.tools.clone(),
        tool_concurrency: scenario.tool_concurrency.unwrap_or(4),
        script,
        faults,
        expect: scenario.expect.clone(),
        families,
    }
}
