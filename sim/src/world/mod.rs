//! One simulated run: a world built from a scenario and a seed, driven step by step.
//!
//! Hosts: `model` (the fake model server), `gateway` (records every side effect with its
//! execution id), `agent` (the real runtime on turmoil's filesystem with the sim seams), and
//! an embedder's services. One `u64` seed fixes everything: turmoil's RNG, the fixed epoch,
//! the entropy streams of every host incarnation, and the faults drawn for the `mixed`
//! scenario (one named stream per fault family, so adding a knob does not reshuffle the
//! others). The oracle (`crate::oracle`) judges what the run left.

// No function here grows past clippy's `too-many-lines-threshold` (clippy.toml): the
// simulator's world is read most when something went wrong.
#![warn(clippy::too_many_lines)]

pub(crate) mod agent_host;
pub(crate) mod bound;
pub(crate) mod conclude;
pub(crate) mod database_disk;
mod driver;
pub(crate) mod evidence;
mod fleet;
pub(crate) mod gateway;
mod hosts;
pub(crate) mod io_trace;
pub(crate) mod ledger;
pub(crate) mod life;
pub(crate) mod life_report;
pub(crate) mod mcp_service;
mod pause;
pub(crate) mod person;
mod probe;
pub(crate) mod rot;
pub(crate) mod seeded;
pub(crate) mod service;
pub(crate) mod setup;
pub(crate) mod stamp;
pub(crate) mod store_link;
pub(crate) mod user;
pub(crate) mod witness;

use std::sync::{Arc, Mutex};

pub use bound::{BoundWait, LivenessBound, SlowRecovery};
pub use conclude::RunResult;
pub use gateway::Receipt;
pub use mcp_service::{McpFaults, McpService, McpServiceTool, MCP_CALL_MARK, MCP_SERVER_MARK, MCP_TOOL_MARK};
pub use service::{Fate, Service, ServiceFaults, ServiceReceipt};
pub use user::AgentUnderTest;

use crate::scenario::Scenario;
use agent_host::AgentLife;
use conclude::{conclude, note_disk_faults, Concluded};
use evidence::{lock, Shared};
use hosts::{build_sim, first_life_faults, host_gateway, host_model, host_services};
use probe::CrashControl;
use setup::{resolve_route, SIM_MODEL_ROOT};

/// Runs `scenario` with `seed` (on the agent file it names, if it names one).
pub fn run(scenario: &Scenario, seed: u64) -> RunResult {
    run_on_its_agent(scenario, seed, io_trace::IoRecorder::new(false))
}

/// [`run`], recording or not.
fn run_on_its_agent(scenario: &Scenario, seed: u64, recorder: io_trace::IoRecorder) -> RunResult {
    match scenario_agent(scenario) {
        Some(agent) => run_with(&on_agent(scenario, &agent), seed, recorder, Some(agent)),
        None => run_with(scenario, seed, recorder, None),
    }
}

/// The agent of a scenario that names an agent file, built once per file.
pub(crate) fn scenario_agent(scenario: &Scenario) -> Option<Arc<AgentUnderTest>> {
    type Agents = std::collections::BTreeMap<String, Arc<AgentUnderTest>>;
    static AGENTS: std::sync::OnceLock<Mutex<Agents>> = std::sync::OnceLock::new();
    let text = scenario.agent.as_ref()?;
    let mut agents = AGENTS.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner());
    let agent = agents.entry(text.clone()).or_insert_with(|| {
        let built = crate::stand_in::agent_from_file(&scenario.name, text);
        Arc::new(built.unwrap_or_else(|e| panic!("scenario {}: its agent file: {e}", scenario.name)))
    });
    Some(agent.clone())
}

/// Runs `scenario` with `seed` on an embedder's agent: its tools, config and provider
/// settings (which replace the scenario's), and its services on their own hosts.
pub fn run_agent(scenario: &Scenario, seed: u64, agent: &Arc<AgentUnderTest>) -> RunResult {
    run_with(&on_agent(scenario, agent), seed, io_trace::IoRecorder::new(false), Some(agent.clone()))
}

/// `scenario` as it runs on `agent`: the agent's provider settings replace the scenario's.
fn on_agent(scenario: &Scenario, agent: &AgentUnderTest) -> Scenario {
    let mut scenario = scenario.clone();
    scenario.provider = agent.provider.clone();
    scenario
}

/// The liveness bound of `scenario` on `agent` (the same for every seed: it reads the
/// scenario's window and the agent's settings and tools).
pub(crate) fn liveness_bound(scenario: &Scenario, agent: &AgentUnderTest) -> LivenessBound {
    seeded::resolve_for(&on_agent(scenario, agent), 0, Some(agent)).liveness
}

/// Runs `scenario` with `seed`, recording the simulated I/O the run made (for the bench's
/// bare turmoil twin, which replays it).
pub fn run_recorded(scenario: &Scenario, seed: u64) -> (RunResult, io_trace::IoTrace) {
    let recorder = io_trace::IoRecorder::new(true);
    let result = run_on_its_agent(scenario, seed, recorder.clone());
    (result, recorder.trace().expect("the recorder was on"))
}

fn run_with(
    scenario: &Scenario,
    seed: u64,
    recorder: io_trace::IoRecorder,
    user: Option<Arc<AgentUnderTest>>,
) -> RunResult {
    run_and_judge(scenario, seed, recorder, user, &|_| {})
}

/// Runs `scenario` with `seed`, then changes what the run left with `tamper` before the oracle
/// judges it: the oracle's own tests plant evidence of a defect no planted bug produces.
#[cfg(test)]
pub(crate) fn run_tampered(scenario: &Scenario, seed: u64, tamper: &dyn Fn(&mut Concluded<'_>)) -> RunResult {
    run_and_judge(scenario, seed, io_trace::IoRecorder::new(false), None, tamper)
}

fn run_and_judge(
    scenario: &Scenario,
    seed: u64,
    recorder: io_trace::IoRecorder,
    user: Option<Arc<AgentUnderTest>>,
    tamper: &dyn Fn(&mut Concluded<'_>),
) -> RunResult {
    let plan = seeded::resolve_for(scenario, seed, user.as_deref());
    if let Some(zombie) = &plan.faults.zombie {
        return fleet::run(scenario, &plan, (zombie, seed), user);
    }
    let services = user.as_ref().map(|u| u.services.clone()).unwrap_or_default();
    let mut sim = build_sim(&plan, seed);
    let world: Shared = Arc::default();
    lock(&world).held_secrets = user.as_ref().map(|u| u.secrets.clone()).unwrap_or_default();
    if let Some(swarm) = &plan.swarm {
        lock(&world).trace.push(format!("{:>7} {swarm}", 0));
    }
    let control = Arc::new(Mutex::new(CrashControl {
        plan: plan.faults.crashes.iter().map(|c| (c.point, c.hit)).collect(),
        ..CrashControl::default()
    }));
    // The disk: shared by every incarnation (a restart frees no space).
    let space = crate::seams::DiskSpace::default();
    let first_life_fs = first_life_faults(&plan, seed);
    let model_slot = host_model(&mut sim, &plan, &world, &recorder);
    let receipts = host_gateway(&mut sim, &plan, &world, &recorder);
    let service_receipts = host_services(&mut sim, &plan, &world, (seed, user.as_deref()), &recorder);
    let life = AgentLife {
        user,
        route: resolve_route(plan.format, SIM_MODEL_ROOT, &plan.provider),
        world: world.clone(),
        control: control.clone(),
        first_life_fs: first_life_fs.clone(),
        space: space.clone(),
        plan: plan.clone(),
        seed,
        recorder,
    };
    life.host(&mut sim);
    let driver = driver::Driver::new(
        sim,
        &plan,
        world.clone(),
        control.clone(),
        (first_life_fs.clone(), space.clone()),
        model_slot.clone(),
    );
    let (sim_ms, disk_op_crashes) = driver.drive();
    let mut world = std::mem::take(&mut *lock(&world));
    note_disk_faults(&mut world, &plan, &first_life_fs, &space);
    let fs_ops = world.fs_ops + world.live_fs.take().map_or(0, |f| f.ops());
    let receipts = receipts.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let service_receipts = std::mem::take(&mut *service_receipts.lock().unwrap_or_else(|p| p.into_inner()));
    let model = model_slot.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let control = control.lock().unwrap_or_else(|p| p.into_inner());
    let crash_point_hits = control.hits.iter().map(|(p, n)| (p.to_string(), *n)).collect();
    world.crashes_fired = control.fired + disk_op_crashes;
    let mut concluded = Concluded {
        scenario,
        plan: &plan,
        seed,
        world,
        receipts,
        service_receipts,
        services,
        model,
        crash_point_hits,
        fs_ops,
        end_ms: sim_ms,
    };
    tamper(&mut concluded);
    conclude(concluded)
}
