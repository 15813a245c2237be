//! One run, judged: the world runs the scenario (expanded by `crate::generate` when it is
//! generated) and hands back what happened; the oracle judges that record; the result is
//! what every report shows. The world sits below its judge: it never imports the oracle.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use faultline_runtime::event::Record;
use serde::Serialize;

use crate::oracle::{self, RunEvidence, Violation};
use crate::scenario::Scenario;
use crate::world::conclude::Finished;
use crate::world::evidence::fnv1a;
use crate::world::io_trace::{IoRecorder, IoTrace};
use crate::world::{self, AgentUnderTest, Receipt, ServiceReceipt, SlowRecovery};

/// The outcome of one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// Scenario name.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// The wire format the agent spoke to the model in.
    pub format: faultline_runtime::llm::WireFormat,
    /// Run for real (`--real`: real processes, files, sockets, SIGKILL), not simulated.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub real: bool,
    /// Broken invariants (empty: the run passed).
    pub violations: Vec<Violation>,
    /// Every traced line: records, faults, restarts, receipts, with simulated times.
    pub trace: Vec<String>,
    /// FNV-1a of the trace: equal seeds give equal hashes.
    pub trace_hash: String,
    /// The recovered transcript at the end of the run.
    #[serde(skip)]
    pub transcript: Vec<Record>,
    /// Why recovery refused the agent's files as corrupt (then there is no transcript).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Effects the gateway received.
    #[serde(skip)]
    pub receipts: Vec<Receipt>,
    /// Requests the services of an agent under test received (empty otherwise).
    #[serde(skip)]
    pub service_receipts: Vec<ServiceReceipt>,
    /// Model requests served.
    pub model_requests: usize,
    /// Crash points reached (hits), across incarnations.
    pub crash_point_hits: BTreeMap<String, u32>,
    /// Fault families that fired in this run.
    pub faults_fired: BTreeSet<String>,
    /// "Sometimes" conditions this run reached (a retry that succeeded, an unknown outcome
    /// reconciled from the delivery queue, an interrupted turn repaired, ...).
    pub sometimes: BTreeSet<String>,
    /// World catalog entries this run produced (FAILURE-WORLD-CATALOG): what the model server
    /// served, what the MCP servers, the store link, the tools and the disk did.
    pub catalog_reached: BTreeSet<String>,
    /// Simulated time the run took, in ms.
    pub sim_ms: u64,
    /// Mutating filesystem operations the agent host made, across incarnations.
    pub fs_ops: u64,
    /// Side effects delivered to the gateway host (HTTP exchanges besides the model's).
    pub gateway_requests: usize,
    /// Every model request and what it was served (for the timeline).
    #[serde(skip)]
    pub model_exchanges: Vec<crate::model_server::Exchange>,
    /// When each record became durable, as the barrier acknowledged it, recorded outside the
    /// agent host: `(sim ms, first seq, last seq)` per acknowledgement.
    #[serde(skip)]
    pub durable_batches: Vec<(u64, u64, u64)>,
    /// The run converged within its liveness bound, but past the scenario's own window: the
    /// waits of the agent's settings that made it slow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow_recovery: Option<SlowRecovery>,
}

impl RunResult {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Runs `scenario` with `seed` (on the agent file it names, if it names one).
pub fn run(scenario: &Scenario, seed: u64) -> RunResult {
    run_on_its_agent(scenario, seed, IoRecorder::new(false))
}

/// Runs `scenario` with `seed` on an embedder's agent: its tools, config and provider
/// settings (which replace the scenario's), and its services on their own hosts.
pub fn run_agent(scenario: &Scenario, seed: u64, agent: &Arc<AgentUnderTest>) -> RunResult {
    result_of(ended(scenario, seed, IoRecorder::new(false), Some(agent.clone())))
}

/// Runs `scenario` with `seed`, recording the simulated I/O the run made (for the bench's
/// bare turmoil twin, which replays it).
pub fn run_recorded(scenario: &Scenario, seed: u64) -> (RunResult, IoTrace) {
    let recorder = IoRecorder::new(true);
    let result = run_on_its_agent(scenario, seed, recorder.clone());
    (result, recorder.trace().expect("the recorder was on"))
}

/// Runs `scenario` with `seed`, then changes what the run left with `tamper` before the oracle
/// judges it: the oracle's own tests plant evidence of a defect no planted bug produces.
#[cfg(test)]
pub(crate) fn run_tampered(scenario: &Scenario, seed: u64, tamper: &dyn Fn(&mut Finished)) -> RunResult {
    let mut ended = ended(scenario, seed, IoRecorder::new(false), None);
    tamper(&mut ended);
    result_of(ended)
}

/// [`run`], recording or not.
fn run_on_its_agent(scenario: &Scenario, seed: u64, recorder: IoRecorder) -> RunResult {
    result_of(ended(scenario, seed, recorder, world::scenario_agent(scenario)))
}

/// What `scenario` at `seed` left, on `user`'s agent when one is given: the scenario as it
/// runs there, its conversation drawn when it is generated, run by the world.
fn ended(scenario: &Scenario, seed: u64, recorder: IoRecorder, user: Option<Arc<AgentUnderTest>>) -> Finished {
    let on_agent = user.as_deref().map(|agent| world::on_agent(scenario, agent));
    let scenario = crate::generate::expand(on_agent.as_ref().unwrap_or(scenario), seed, user.as_deref());
    world::run(&scenario, seed, recorder, user)
}

/// Judges what a run left (the oracle over its evidence, a fleet's by its own checker too)
/// and makes the result every report shows.
pub(crate) fn result_of(ended: Finished) -> RunResult {
    let Finished {
        scenario,
        plan,
        seed,
        world,
        receipts,
        service_receipts,
        services,
        model_exchanges,
        judged_exchanges,
        request_bodies,
        faults_fired,
        seen,
        catalog_reached,
        crash_point_hits,
        fs_ops,
        end_ms,
        durable_batches,
        slow_recovery,
        fleet,
    } = ended;
    let evidence = RunEvidence {
        plan: &plan,
        seed,
        world: &world,
        receipts: &receipts,
        service_receipts: &service_receipts,
        services: &services,
        exchanges: judged_exchanges.as_deref().unwrap_or(&model_exchanges),
        request_bodies: &request_bodies,
        faults_fired: &faults_fired,
        end_ms,
    };
    let violations = match &fleet {
        Some(gathered) => oracle::judge_fleet(&evidence, gathered),
        None => oracle::judge(&evidence),
    };
    let transcript = world.transcript.clone().unwrap_or_default();
    let mut sometimes = oracle::sometimes(&transcript);
    sometimes.extend(seen);
    RunResult {
        scenario,
        seed,
        format: plan.format,
        real: false,
        violations,
        trace_hash: fnv1a(&world.trace),
        trace: world.trace,
        transcript,
        refused: world.refused,
        gateway_requests: receipts.len(),
        receipts,
        service_receipts,
        model_requests: request_bodies.len(),
        crash_point_hits,
        faults_fired,
        sometimes,
        catalog_reached,
        sim_ms: end_ms,
        fs_ops,
        model_exchanges,
        durable_batches,
        slow_recovery,
    }
}
