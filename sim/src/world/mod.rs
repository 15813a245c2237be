//! One simulated run: a world built from a scenario and a seed, driven step by step.
//!
//! Hosts: `model` (the fake model server), `gateway` (records every side effect with its
//! execution id), `agent` (the real runtime on turmoil's filesystem with the sim seams), and
//! an embedder's services. One `u64` seed fixes everything: turmoil's RNG, the fixed epoch,
//! the entropy streams of every host incarnation, and the faults drawn for the `mixed`
//! scenario (one named stream per fault family, so adding a knob does not reshuffle the
//! others). The world runs an expanded scenario (`crate::generate` draws a generated one
//! first) and hands back what happened ([`conclude::Finished`]); it never judges: the oracle
//! (`crate::oracle`) does, called from above (`crate::verdict`).

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
pub(crate) mod fleet_evidence;
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
pub use gateway::Receipt;
pub use mcp_service::{McpFaults, McpService, McpServiceTool, MCP_CALL_MARK, MCP_SERVER_MARK, MCP_TOOL_MARK};
pub use service::{Fate, Service, ServiceFaults, ServiceReceipt};
pub use user::AgentUnderTest;

use crate::scenario::Scenario;
use agent_host::AgentLife;
use conclude::{conclude, note_disk_faults, Concluded, Finished};
use evidence::{lock, SharedWorld};
use hosts::{build_sim, first_life_faults, host_gateway, host_model, host_services};
use probe::CrashControl;
use setup::{resolve_route, SIM_MODEL_ROOT};

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

/// `scenario` as it runs on `agent`: the agent's provider settings replace the scenario's.
pub(crate) fn on_agent(scenario: &Scenario, agent: &AgentUnderTest) -> Scenario {
    let mut scenario = scenario.clone();
    scenario.provider = agent.provider.clone();
    scenario
}

/// The liveness bound of `scenario` (expanded) on `agent` (the same for every seed: it reads the
/// scenario's window and the agent's settings and tools).
pub(crate) fn liveness_bound(scenario: &Scenario, agent: &AgentUnderTest) -> LivenessBound {
    seeded::resolve_for(&on_agent(scenario, agent), 0, Some(agent)).liveness
}

/// Runs `scenario` (expanded: `generate::expand`) with `seed`, on `user`'s agent when one is
/// given (the scenario as it runs on it: [`on_agent`]), and hands back what happened, for the
/// oracle to judge (`crate::verdict`).
pub(crate) fn run(
    scenario: &Scenario,
    seed: u64,
    recorder: io_trace::IoRecorder,
    user: Option<Arc<AgentUnderTest>>,
) -> Finished {
    let plan = seeded::resolve_for(scenario, seed, user.as_deref());
    if let Some(zombie) = &plan.faults.zombie {
        return fleet::run(scenario, &plan, (zombie, seed), user);
    }
    let services = user.as_ref().map(|u| u.services.clone()).unwrap_or_default();
    let mut sim = build_sim(&plan, seed);
    let world: SharedWorld = Arc::default();
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
    let driver = driver::RunDriver::new(
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
    conclude(Concluded {
        scenario,
        plan,
        seed,
        world,
        receipts,
        service_receipts,
        services,
        model,
        crash_point_hits,
        fs_ops,
        end_ms: sim_ms,
    })
}
