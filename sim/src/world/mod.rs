//! One simulated run: a world built from a scenario and a seed, driven step by step.
//!
//! Hosts: `model` (the fake model server), `gateway` (records every side effect with its
//! execution id), `agent` (the real runtime on turmoil's filesystem with the sim seams). One
//! `u64` seed fixes everything: turmoil's RNG, the fixed epoch, the entropy streams of every
//! host incarnation, and the faults drawn for the `mixed` scenario (one named stream per fault
//! family, so adding a knob does not reshuffle the others).

// No function here grows past clippy's `too-many-lines-threshold` (clippy.toml): the
// simulator's world and the store are read most when something went wrong.
#![warn(clippy::too_many_lines)]

mod driver;
mod fleet;
pub mod gateway;
pub mod io_trace;
mod ledger;
mod life;
mod oracle;
mod pause;
mod probe;
pub mod real;
mod rot;
pub mod seeded;
pub mod service;
pub mod user;
mod witness;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use faultline_runtime::event::Record;
use faultline_runtime::llm::{from_toml, ProviderConfig};
use faultline_runtime::{seams::Clock, seams::Entropy, seams::Fs};
use serde::Serialize;

pub use gateway::{Receipt, Receipts};
pub use oracle::{Invariant, Kind as InvariantKind, Violation, SOMETIMES};
use probe::{CrashControl, SimProbe};
pub use service::{Fate, Service, ServiceFaults, ServiceReceipt, ServiceReceipts};
pub use user::AgentUnderTest;

use crate::model_server::{ModelServer, Script};
use crate::scenario::{RotKind, RotTarget, Scenario};
use crate::{sim_epoch, sim_seams, FaultFs, FsFaults, SimFs};

/// Where the agent keeps its sessions on the simulated disk.
const SESSIONS_DIR: &str = "/data/sessions";
/// The agent's delivery-queue journal.
const OUTBOX_PATH: &str = "/data/outbox.jsonl";
/// The simulated session id.
const SESSION: &str = "sim";
/// The sector a power loss loses whole, in bytes.
const POWER_LOSS_SECTOR_BYTES: u64 = 512;
/// Simulated network latency per hop.
const LATENCY_MS: u64 = 1;

/// The outcome of one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// Scenario name.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
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
}

impl RunResult {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// One order of events across the hosts of a run: every durability fact, outcome and effect
/// is stamped from it, so "before" means strictly before, never "in the same tick". The
/// simulator counts (its hosts run one at a time, on one thread); a real run reads
/// `CLOCK_MONOTONIC` in each process (one clock for the whole machine).
pub type Stamp = Arc<dyn Fn() -> u64 + Send + Sync>;

/// A record the disk witness saw become durable.
#[derive(Debug, Clone)]
struct Synced {
    record: Record,
    /// When, in the run's order of events and in ms of its clock.
    stamp: u64,
    at_ms: u64,
}

/// An outcome the simulated user was given (`Agent::last_outcome` once the agent was idle).
#[derive(Debug, Clone)]
struct Outcome {
    life: u64,
    turn: u32,
    reason: faultline_runtime::event::TurnEndReason,
    kept: bool,
    stamp: u64,
    at_ms: u64,
}

/// What one incarnation left for the oracle beyond its records.
#[derive(Debug, Clone, Default)]
struct LifeEvidence {
    /// Records it accepted that no acknowledgement covered, with when (ms) they were accepted.
    unacked: BTreeMap<u64, (Record, u64)>,
    /// When (ms) it reported a persistence failure (the agent's failure channel, a stop).
    failures: Vec<u64>,
    /// A crash took it: what it had not made durable died with it, rightly.
    crashed: bool,
}

/// State shared between the driver and the hosts.
#[derive(Default)]
struct World {
    trace: Vec<String>,
    incarnation: u64,
    done: bool,
    transcript: Option<Vec<Record>>,
    /// The raw bytes of the agent's session file and outbox journal at the end of the run.
    disk: Vec<(String, Vec<u8>)>,
    restart_requested: bool,
    faults_fired: BTreeSet<String>,
    /// Records accepted by the current incarnation (by seq), with when (ms).
    accepted: BTreeMap<u64, (Record, u64)>,
    /// Records acknowledged durable by any incarnation: they must survive byte-identical.
    acked: BTreeMap<u64, Record>,
    /// When each seq was first seen acknowledged durable (simulated ms), observed outside the
    /// host: intent before effect compares it with the gateway's receipt times.
    durable_at: BTreeMap<u64, u64>,
    /// Planned crashes (crash points, a crash before a disk operation) that fired.
    crashes_fired: usize,
    /// Mutating filesystem operations of the incarnations that ended.
    fs_ops: u64,
    /// The current incarnation's disk faults (its op count).
    live_fs: Option<FsFaults>,
    /// The bit rot applied while the host was down, if one was.
    rotted: Option<rot::Rotted>,
    /// The file a crash's power loss left a hole in, once it did.
    hole_left_in: Option<std::path::PathBuf>,
    /// A rot that waits for the hole had its one chance (the restart after the hole's crash).
    rot_after_hole_spent: bool,
    /// The message sent with a late cancel was refused (the agent was already disposed).
    extra_refused: bool,
    /// Why an incarnation refused to start on a log it found corrupt (it is not restarted:
    /// an operator must look at the file).
    refused: Option<String>,
    /// Every model request as the model server counted it, by incarnation.
    ledger: ledger::RequestLedger,
    /// Why incarnations stopped on their own (not crashed, not refusing a corrupt log).
    stops: Vec<String>,
    /// Whether an injected disk failure (EIO, ENOSPC) was returned to the agent: the one
    /// fault that may legitimately stop it.
    disk_failure_fired: bool,
    /// The run's order of events, for the simulator's hosts.
    order: Arc<std::sync::atomic::AtomicU64>,
    /// Every record the disk witness saw become durable, by seq: each distinct record once, in
    /// order (a correct runtime syncs one record per seq; a second one means the first was lost).
    synced: BTreeMap<u64, Vec<Synced>>,
    /// Every outcome the simulated user was given.
    outcomes: Vec<Outcome>,
    /// Per incarnation, what the oracle needs of it beyond its records.
    lives: BTreeMap<u64, LifeEvidence>,
}

type Shared = Arc<Mutex<World>>;

fn lock(world: &Shared) -> std::sync::MutexGuard<'_, World> {
    world.lock().unwrap_or_else(|p| p.into_inner())
}

fn trace(world: &Shared, line: String) {
    lock(world).trace.push(format!("{:>7} {line}", sim_ms()));
}

/// FNV-1a 64: stable across builds and platforms.
pub fn fnv1a(lines: &[String]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in lines.iter().flat_map(|l| l.bytes().chain(std::iter::once(b'\n'))) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Runs `scenario` with `seed`.
pub fn run(scenario: &Scenario, seed: u64) -> RunResult {
    run_with(scenario, seed, io_trace::IoRecorder::new(false), None)
}

/// Runs `scenario` with `seed` on an embedder's agent: its tools, config and provider
/// settings (which replace the scenario's), and its services on their own hosts.
pub fn run_agent(scenario: &Scenario, seed: u64, agent: &Arc<AgentUnderTest>) -> RunResult {
    let mut scenario = scenario.clone();
    scenario.provider = agent.provider.clone();
    run_with(&scenario, seed, io_trace::IoRecorder::new(false), Some(agent.clone()))
}

/// Runs `scenario` with `seed`, recording the simulated I/O the run made (for the bench's
/// bare turmoil twin, which replays it).
pub fn run_recorded(scenario: &Scenario, seed: u64) -> (RunResult, io_trace::IoTrace) {
    let recorder = io_trace::IoRecorder::new(true);
    let result = run_with(scenario, seed, recorder.clone(), None);
    (result, recorder.trace().expect("the recorder was on"))
}

fn run_with(
    scenario: &Scenario,
    seed: u64,
    recorder: io_trace::IoRecorder,
    user: Option<Arc<AgentUnderTest>>,
) -> RunResult {
    let plan = seeded::resolve_for(scenario, seed, user.as_deref());
    if let Some(zombie) = &plan.faults.zombie {
        return fleet::run(scenario, &plan, zombie, seed);
    }
    let mut sim = build_sim(&plan, seed);
    let world: Shared = Arc::default();
    if let Some(swarm) = &plan.swarm {
        lock(&world).trace.push(format!("{:>7} {swarm}", 0));
    }
    let control = Arc::new(Mutex::new(CrashControl {
        plan: plan.faults.crashes.iter().map(|c| (c.point, c.hit)).collect(),
        ..CrashControl::default()
    }));
    let restart_delays: std::collections::VecDeque<u64> =
        plan.faults.crashes.iter().map(|c| c.restart_after_ms).collect();
    // The disk: shared by every incarnation (a restart frees no space).
    let space = crate::DiskSpace::default();
    let first_life_fs = first_life_faults(&plan, seed);
    let model_slot = host_model(&mut sim, &plan, &world, &recorder);
    let receipts = host_gateway(&mut sim, &plan, &world, &recorder);
    let service_receipts = host_services(&mut sim, &plan, &world, seed, user.as_deref());
    let life = AgentLife {
        user,
        route: resolve_route(SIM_MODEL_URL, &plan.provider),
        world: world.clone(),
        control: control.clone(),
        first_life_fs: first_life_fs.clone(),
        space: space.clone(),
        plan: plan.clone(),
        seed,
        recorder,
    };
    sim.host("agent", move || {
        let life = life.clone();
        async move {
            life.run().await;
            Ok(())
        }
    });

    let driver = driver::Driver {
        sim,
        plan: &plan,
        world: world.clone(),
        control: control.clone(),
        first_life_fs: first_life_fs.clone(),
        space: space.clone(),
        model_slot: model_slot.clone(),
        restart_delays,
        partitioned: BTreeSet::new(),
        disk_full: false,
        healed: false,
        fs_crash_done: false,
        disk_op_crashes: 0,
    };
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
        plan: &plan,
        seed,
        world,
        receipts,
        service_receipts,
        model,
        crash_point_hits,
        fs_ops,
        end_ms: sim_ms,
    })
}

/// The turmoil simulation of `plan`: its epoch, seed, tick, budget and fixed latency.
fn build_sim(plan: &seeded::Plan, seed: u64) -> turmoil::Sim<'static> {
    let mut builder = turmoil::Builder::new();
    builder
        .epoch(sim_epoch())
        .rng_seed(crate::Seed::new(seed).turmoil())
        .tick_duration(Duration::from_millis(plan.tick_ms))
        .simulation_duration(Duration::from_millis(plan.budget_ms + 60_000))
        .min_message_latency(Duration::from_millis(LATENCY_MS))
        .max_message_latency(Duration::from_millis(LATENCY_MS));
    if let Some(block) = plan.faults.fs.as_ref().and_then(|f| f.block_size) {
        builder.fs().block_size(block);
    }
    builder.build()
}

/// The disk faults the first incarnation meets (later ones get a healthy disk).
fn first_life_faults(plan: &seeded::Plan, seed: u64) -> FsFaults {
    let faults = FsFaults::new();
    let Some(fs) = &plan.faults.fs else { return faults };
    if let (Some(op), Some(kind)) = (fs.fail_op, fs.fail_kind) {
        faults.fail(op, kind.io_kind());
    }
    if let Some(op) = fs.crash_before_op {
        faults.crash_before(op);
    }
    if fs.power_loss_hole {
        faults.hole_on_crash(crate::Seed::new(seed).fault("hole").next_u64());
        if plan.store == crate::StoreKind::Zstd {
            // Compressed bytes have no lines: a power loss loses whole sectors.
            faults.holes_in_sectors(POWER_LOSS_SECTOR_BYTES);
        }
    }
    if let (true, Some(block)) = (fs.torn_mid_line, fs.block_size) {
        faults.tear_on_crash(block);
    }
    faults
}

/// The scripted model server's host; the slot holds the server (its request log) once up.
fn host_model(
    sim: &mut turmoil::Sim<'static>,
    plan: &seeded::Plan,
    world: &Shared,
    recorder: &io_trace::IoRecorder,
) -> Arc<Mutex<Option<ModelServer>>> {
    let model_slot: Arc<Mutex<Option<ModelServer>>> = Arc::default();
    let (script, slot, ledger) = (plan.script.clone(), model_slot.clone(), lock(world).ledger.clone());
    let recorder = recorder.clone();
    sim.host("model", move || {
        let (script, slot, ledger) = (script.clone(), slot.clone(), ledger.clone());
        let net = recorder.server_net(Arc::new(crate::SimNet), "model");
        async move {
            let clock: Arc<dyn Clock> = Arc::new(crate::SimClock);
            *slot.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(ModelServer::start(net, clock, "0.0.0.0:80", script, Some(ledger.observer())).await?);
            std::future::pending::<()>().await;
            Ok(())
        }
    });
    model_slot
}

/// The delivery gateway's host; its receipts are what it received, stamped in world order.
fn host_gateway(
    sim: &mut turmoil::Sim<'static>,
    plan: &seeded::Plan,
    world: &Shared,
    recorder: &io_trace::IoRecorder,
) -> Receipts {
    let receipts: Receipts = Arc::default();
    let (kept, echo, recorder) = (receipts.clone(), plan.faults.gateway_echo, recorder.clone());
    let order = lock(world).order.clone();
    let stamp: Stamp = Arc::new(move || order.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1);
    sim.host("gateway", move || {
        let (receipts, stamp) = (kept.clone(), stamp.clone());
        let net = recorder.server_net(Arc::new(crate::SimNet), "gateway");
        async move {
            gateway::serve(net, Arc::new(crate::SimClock), stamp, "0.0.0.0:80", receipts, echo).await?;
            Ok(())
        }
    });
    receipts
}

/// One host per service of the agent under test, serving on port 80.
fn host_services(
    sim: &mut turmoil::Sim<'static>,
    plan: &seeded::Plan,
    world: &Shared,
    seed: u64,
    user: Option<&AgentUnderTest>,
) -> ServiceReceipts {
    let receipts: ServiceReceipts = Arc::default();
    let order = lock(world).order.clone();
    let stamp: Stamp = Arc::new(move || order.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1);
    for declared in user.map_or(&[][..], |u| &u.services[..]) {
        let faults = ServiceFaults::of(declared, seed);
        let (declared, receipts, stamp, heal_at_ms) =
            (declared.clone(), receipts.clone(), stamp.clone(), plan.heal_at_ms);
        sim.host(declared.name.clone(), move || {
            let running = service::Running {
                service: declared.clone(),
                faults,
                seed,
                clock: Arc::new(crate::SimClock),
                stamp: stamp.clone(),
                receipts: receipts.clone(),
                heal_at_ms,
            };
            async move {
                let listener = faultline_runtime::seams::Net::bind(&crate::SimNet, "0.0.0.0:80").await?;
                service::serve(listener, running).await?;
                Ok(())
            }
        });
    }
    receipts
}

/// The disk fault families that fired, from the fault filesystem's own record (what it
/// refused, tore or holed), never from what the agent said.
fn note_disk_faults(world: &mut World, plan: &seeded::Plan, first_life_fs: &FsFaults, space: &crate::DiskSpace) {
    if let Some(kind) = plan.faults.fs.as_ref().and_then(|f| f.fail_kind) {
        if !first_life_fs.failures_fired().is_empty() {
            world.faults_fired.insert(kind.family().to_owned());
            world.disk_failure_fired = true;
        }
    }
    if first_life_fs.torn().is_some() {
        world.faults_fired.insert("torn-write".into());
    }
    if space.refusals() > 0 {
        // Coverage is what the disk refused, not the window: a full disk nobody wrote to
        // tested nothing.
        world.faults_fired.insert("disk-full".into());
        world.disk_failure_fired = true;
    }
    if first_life_fs.hole_left().is_some() {
        world.faults_fired.insert("power-loss-hole".into());
    }
}

/// What a run left behind, in either world: the evidence the oracle judges.
struct Concluded<'a> {
    pub scenario: &'a Scenario,
    pub plan: &'a seeded::Plan,
    pub seed: u64,
    pub world: World,
    /// What the gateway received.
    pub receipts: Vec<Receipt>,
    /// What the services of an agent under test received.
    pub service_receipts: Vec<ServiceReceipt>,
    /// The model server (its request log), if it started.
    pub model: Option<ModelServer>,
    /// Crash points reached, across incarnations.
    pub crash_point_hits: BTreeMap<String, u32>,
    pub fs_ops: u64,
    /// The run's end, in ms of its world's clock.
    pub end_ms: u64,
}

/// Judges a finished run: the oracle over the evidence, and the result to report.
fn conclude(run: Concluded<'_>) -> RunResult {
    let Concluded {
        scenario,
        plan,
        seed,
        mut world,
        receipts,
        service_receipts,
        model,
        crash_point_hits,
        fs_ops,
        end_ms,
    } = run;
    world.end_life();
    for receipt in &receipts {
        world.trace.push(format!("{:>7} gateway received {}", receipt.at_ms, receipt.execution_id));
    }
    for r in &service_receipts {
        world.trace.push(format!("{:>7} {} received {} ({:?})", r.at_ms, r.service, r.execution_id, r.fate));
    }
    let request_bodies: Vec<Arc<str>> =
        model.as_ref().map_or_else(Vec::new, |s| s.requests().into_iter().map(|r| r.body).collect());
    let model_exchanges = model.as_ref().map_or_else(Vec::new, ModelServer::exchanges);
    let mut durable_batches: Vec<(u64, u64, u64)> = Vec::new();
    for (&seq, &at) in &world.durable_at {
        match durable_batches.last_mut() {
            Some((ms, _, last)) if *ms == at && *last + 1 == seq => *last = seq,
            _ => durable_batches.push((at, seq, seq)),
        }
    }
    let model_requests = request_bodies.len();
    let transcript = world.transcript.clone().unwrap_or_default();
    // Coverage is what happened: what the model server served, what the gateway echoed back,
    // on top of what the hosts reported firing (crashes, partitions, refusals, disk faults).
    let mut faults_fired = world.faults_fired.clone();
    for slot in model_exchanges.iter().filter_map(|e| e.slot) {
        faults_fired.extend(seeded::response_families(&plan.script.responses[slot]).into_iter().map(str::to_owned));
    }
    for receipt in &service_receipts {
        match receipt.fate {
            Fate::Refused => faults_fired.insert("service-error".to_owned()),
            Fate::EffectReplyLost => faults_fired.insert("service-lost-reply".to_owned()),
            Fate::Effect | Fate::Deduplicated => false,
        };
    }
    if plan.faults.gateway_echo && !receipts.is_empty() {
        faults_fired.insert("echoed-secret".to_owned());
    }
    let violations = oracle::judge(&oracle::Evidence {
        plan,
        seed,
        world: &world,
        receipts: &receipts,
        service_receipts: &service_receipts,
        exchanges: &model_exchanges,
        request_bodies: &request_bodies,
        faults_fired: &faults_fired,
        end_ms,
    });
    let sometimes = oracle::sometimes(&transcript);
    RunResult {
        scenario: scenario.name.clone(),
        seed,
        real: false,
        violations,
        trace_hash: fnv1a(&world.trace),
        trace: world.trace,
        transcript,
        refused: world.refused.clone(),
        gateway_requests: receipts.len(),
        receipts,
        service_receipts,
        model_requests,
        crash_point_hits,
        faults_fired,
        sometimes,
        sim_ms: end_ms,
        fs_ops,
        model_exchanges,
        durable_batches,
    }
}

/// The agent's provider configuration file, as the simulated agent reads it.
#[derive(serde::Deserialize)]
struct ProviderFile {
    provider: ProviderConfig,
}

/// The simulated model host's base URL.
const SIM_MODEL_URL: &str = "http://model:80/v1";

/// The agent's provider file: the model host at `base_url` plus the scenario's extra lines.
fn provider_file(base_url: &str, extra: &str) -> String {
    format!(
        "[provider]\npreset = \"openai-compatible\"\nbase_url = \"{base_url}\"\nmodel = \"sim-model\"\napi_key_env = \"{SIM_KEY_VAR}\"\n{extra}"
    )
}

/// The gateway token of a run (what the delivery queue's receiver authenticates with).
pub fn gateway_token(seed: u64) -> String {
    format!("GATEWAYCANARY{seed:016x}token")
}

/// The variable the simulated agent reads its provider key from.
const SIM_KEY_VAR: &str = "SIM_API_KEY";

/// The provider key of a run: derived from the seed, and shaped like no known key format so
/// that only scrubbing by value (never a pattern) can keep it out of what the agent writes.
pub fn sim_secret(seed: u64) -> String {
    format!("LEAKCANARY{seed:016x}plainKey")
}

/// The model route of `provider` (extra `[provider]` lines), or why it is invalid. Resolved
/// once per run: every incarnation reads the same file.
///
/// Parsing the TOML was ~5 % of a sweep (the world, the swarm's draw and the oracle each
/// resolve the same text, thousands of runs over a few dozen distinct files), so each thread
/// keeps what it resolved, keyed by the whole text: the same text always resolves the same.
fn resolve_route(base_url: &str, provider: &str) -> Result<faultline_runtime::llm::ResolvedProvider, String> {
    type Routes = BTreeMap<(String, String), Result<faultline_runtime::llm::ResolvedProvider, String>>;
    thread_local! {
        static RESOLVED: std::cell::RefCell<Routes> = const { std::cell::RefCell::new(BTreeMap::new()) };
    }
    let key = (base_url.to_owned(), provider.to_owned());
    if let Some(route) = RESOLVED.with_borrow(|routes| routes.get(&key).cloned()) {
        return route;
    }
    let route = from_toml::<ProviderFile>(&provider_file(base_url, provider))
        .and_then(|f| f.provider.resolve("provider"))
        .map_err(|e| e.to_string());
    RESOLVED.with_borrow_mut(|routes| {
        // A generated workload draws its own files: the memo is a cache, not a record.
        if routes.len() >= RESOLVED_ROUTES_MAX {
            routes.clear();
        }
        routes.insert(key, route.clone());
    });
    route
}

/// Provider files a sweep thread keeps resolved (the built-in scenarios have a few dozen).
const RESOLVED_ROUTES_MAX: usize = 256;

/// One incarnation of the agent host.
#[derive(Clone)]
struct AgentLife {
    /// The embedder's agent, when the harness runs one.
    user: Option<Arc<AgentUnderTest>>,
    route: Result<faultline_runtime::llm::ResolvedProvider, String>,
    world: Shared,
    control: Arc<Mutex<CrashControl>>,
    first_life_fs: FsFaults,
    /// The host's disk space.
    space: crate::DiskSpace,
    plan: seeded::Plan,
    seed: u64,
    /// Records the agent's disk and network operations (when the bench asks for them).
    recorder: io_trace::IoRecorder,
}

impl AgentLife {
    async fn run(self) {
        let life = lock(&self.world).begin_life();
        trace(&self.world, format!("agent#{life} starts"));
        let faults = if life == 1 { self.first_life_fs.clone() } else { FsFaults::new() };
        faults.on_disk(&self.space);
        {
            let mut w = lock(&self.world);
            let ended = w.live_fs.replace(faults.clone()).map_or(0, |f| f.ops());
            w.fs_ops += ended;
        }
        let mut seams = sim_seams(self.seed, "agent", life);
        if life > 1 {
            self.rot_while_down();
        }
        let fs: Arc<dyn Fs> = Arc::new(FaultFs::new(self.recorder.fs(Arc::new(SimFs)), faults.clone()));
        let report: Arc<dyn life::LifeReport> = Arc::new(SimReport { world: self.world.clone(), life });
        life::watch_disk(&faults, fs.as_ref(), Path::new(SESSIONS_DIR), self.plan.store.format(), report.clone());
        seams.fs = fs;
        seams.net = self.recorder.client_net(seams.net);
        seams.probe = Arc::new(SimProbe { control: self.control.clone(), fs: faults.clone() });
        match self.start(&seams, life, report).await {
            Ok(()) => {}
            Err(e) if e.contains("corrupt") && !faults.crashed() => {
                // A corrupt log is refused, never repaired: the supervisor does not restart
                // into the same refusal. What is on disk now is the oracle's evidence.
                trace(&self.world, format!("agent#{life} refused: {e}"));
                let disk = self.disk_now(&seams);
                let mut w = lock(&self.world);
                w.refused = Some(e);
                w.disk = disk;
                w.done = true;
            }
            Err(e) => {
                trace(&self.world, format!("agent#{life} stopped: {e}"));
                if !faults.crashed() {
                    // A supervisor restarts a process that could not start (ENOSPC, EIO).
                    let mut w = lock(&self.world);
                    w.restart_requested = true;
                    w.stops.push(format!("agent#{life}: {e}"));
                    w.note_failure(life, sim_ms());
                }
            }
        }
        std::future::pending::<()>().await;
    }

    /// The planned bit rot, once, on the disk of a host that is down (before anything of the
    /// new incarnation runs).
    fn rot_while_down(&self) {
        let session = life::session_file(Path::new(SESSIONS_DIR), self.plan.store.format());
        let line =
            rot_while_down(&mut lock(&self.world), &self.plan, self.seed, &SimFs, &session, Path::new(OUTBOX_PATH));
        if let Some(line) = line {
            trace(&self.world, line);
        }
    }

    /// The raw bytes of the session file and the journal, as they are now.
    fn disk_now(&self, seams: &faultline_runtime::seams::Seams) -> Vec<(String, Vec<u8>)> {
        let session = life::session_file(Path::new(SESSIONS_DIR), self.plan.store.format());
        [session, Path::new(OUTBOX_PATH).to_path_buf()]
            .into_iter()
            .filter_map(|path| seams.fs.read(&path).ok().map(|bytes| (path.display().to_string(), bytes)))
            .collect()
    }

    async fn start(
        &self,
        seams: &faultline_runtime::seams::Seams,
        life: u64,
        report: Arc<dyn life::LifeReport>,
    ) -> Result<(), String> {
        let earlier = {
            let w = lock(&self.world);
            life::Earlier { cancel_fired: w.faults_fired.contains("cancel"), extra_refused: w.extra_refused }
        };
        let setup = life::LifeSetup {
            plan: &self.plan,
            route: self.route.clone(),
            seed: self.seed,
            life,
            seams: seams.clone(),
            sessions_dir: SESSIONS_DIR.into(),
            outbox_path: OUTBOX_PATH.into(),
            model_url: SIM_MODEL_URL.into(),
            gateway: "gateway:80".into(),
            earlier,
            user: self.user.clone(),
        };
        let transcript = life::live(setup, report).await?;
        // Every byte the agent left on its disk, for the oracle's secret scan.
        let disk = self.disk_now(seams);
        let mut w = lock(&self.world);
        w.disk = disk;
        w.transcript = Some(transcript);
        w.done = true;
        Ok(())
    }
}

/// Simulated ms now (0 outside the simulation).
fn sim_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64)
}

/// An incarnation's reports, straight into the world's shared state at simulated time.
struct SimReport {
    world: Shared,
    life: u64,
}

impl life::LifeReport for SimReport {
    fn trace(&self, line: String) {
        trace(&self.world, line);
    }

    fn accepted(&self, record: &Record) {
        lock(&self.world).note_accepted(sim_ms(), self.life, record);
    }

    fn durable(&self, through: u64) {
        lock(&self.world).note_durable(through, sim_ms());
    }

    fn synced(&self, record: Record) {
        let mut w = lock(&self.world);
        let stamp = w.stamp();
        w.note_synced(record, stamp, sim_ms());
    }

    fn outcome(&self, outcome: &faultline_runtime::agent::TurnOutcome) {
        let mut w = lock(&self.world);
        let stamp = w.stamp();
        w.outcomes.push(Outcome {
            life: self.life,
            turn: outcome.turn,
            reason: outcome.reason.clone(),
            kept: outcome.kept,
            stamp,
            at_ms: sim_ms(),
        });
    }

    fn persist_failure(&self) {
        lock(&self.world).note_failure(self.life, sim_ms());
    }

    fn fault(&self, family: &str) {
        lock(&self.world).faults_fired.insert(family.to_owned());
    }

    fn extra_refused(&self) {
        lock(&self.world).extra_refused = true;
    }
}

impl World {
    /// A new incarnation starts: its number. Records accepted by the one before it that never
    /// became durable died with it (they stay in its evidence).
    fn begin_life(&mut self) -> u64 {
        self.end_life();
        self.incarnation += 1;
        self.ledger.begin_life(self.incarnation);
        self.lives.entry(self.incarnation).or_default();
        self.incarnation
    }

    /// The current incarnation is over: what it accepted and never saw acknowledged goes into
    /// its evidence.
    fn end_life(&mut self) {
        let unacked = std::mem::take(&mut self.accepted);
        if self.incarnation > 0 {
            self.lives.entry(self.incarnation).or_default().unacked.extend(unacked);
        }
    }

    /// The next instant of the simulator's order of events.
    fn stamp(&self) -> u64 {
        self.order.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1
    }

    /// Incarnation `life` accepted `record` at `at_ms`.
    fn note_accepted(&mut self, at_ms: u64, life: u64, record: &Record) {
        self.trace.push(format!("{at_ms:>7} agent#{life} {} {}", record.seq, life::describe(record)));
        self.accepted.insert(record.seq, (record.clone(), at_ms));
    }

    /// Everything accepted below seq `through` was acknowledged durable at `at_ms`.
    ///
    /// They move from `accepted` to `acked` (not copied: seqs only grow within a life, so a
    /// record acknowledged once is never accepted again by the same incarnation).
    fn note_durable(&mut self, through: u64, at_ms: u64) {
        let later = self.accepted.split_off(&through);
        for (seq, (record, _)) in std::mem::replace(&mut self.accepted, later) {
            self.durable_at.entry(seq).or_insert(at_ms);
            self.acked.insert(seq, record);
        }
    }

    /// The disk witness saw `record` become durable (the first time counts).
    fn note_synced(&mut self, record: Record, stamp: u64, at_ms: u64) {
        let versions = self.synced.entry(record.seq).or_default();
        if !versions.iter().any(|synced| synced.record == record) {
            versions.push(Synced { record, stamp, at_ms });
        }
    }

    /// Every record the disk witness saw become durable, in seq order.
    fn synced_records(&self) -> impl Iterator<Item = &Synced> {
        self.synced.values().flatten()
    }

    /// Incarnation `life` reported a persistence failure at `at_ms`.
    fn note_failure(&mut self, life: u64, at_ms: u64) {
        self.lives.entry(life).or_default().failures.push(at_ms);
    }

    /// A crash took the current incarnation.
    fn note_crash(&mut self) {
        let life = self.incarnation;
        self.lives.entry(life).or_default().crashed = true;
    }
}

/// The plan's bit rot of a durable file of `fs`, once per run (what a disk does to a host
/// that is down). Returns the line to trace, if the plan has a rot.
fn rot_while_down(
    world: &mut World,
    plan: &seeded::Plan,
    seed: u64,
    fs: &dyn Fs,
    session: &Path,
    journal: &Path,
) -> Option<String> {
    let target = plan.faults.bit_rot?;
    if world.rotted.is_some() {
        return None;
    }
    // A rot after the hole has one chance, while the host is down after the hole's crash,
    // and only a hole in the session it rots makes the shape it is for.
    let after_hole = plan.faults.rot_after_hole;
    if after_hole && (world.rot_after_hole_spent || world.hole_left_in.as_deref() != Some(session)) {
        return None;
    }
    world.rot_after_hole_spent = after_hole;
    let acked: Vec<Record> = world.acked.values().cloned().collect();
    let path = match target {
        RotTarget::Session => session,
        RotTarget::Journal => journal,
    };
    let entropy = crate::Seed::new(seed).fault("rot/where");
    let kind = plan.faults.rot_kinds.first().copied().unwrap_or(RotKind::Garbage);
    let place = if after_hole { rot::RotPlace::LastDurable } else { rot::RotPlace::Anywhere };
    Some(match rot::rot(fs, path, (target, place), (kind, plan.store.format()), &acked, &entropy) {
        Ok(Some(rotted)) => {
            let line = format!("bit rot ({}) at byte {} of {}", rotted.kind.name(), rotted.offset, rotted.path);
            world.faults_fired.insert("bit-rot".into());
            if after_hole {
                // The rare shape: a durable unit rotted in front of the last one's hole.
                world.faults_fired.insert("bit-rot-after-hole".into());
            }
            world.rotted = Some(rotted);
            line
        }
        Ok(None) => format!("bit rot found no durable line in {}", path.display()),
        Err(e) => format!("bit rot could not write {}: {e}", path.display()),
    })
}

/// The script the model host serves.
pub fn script_of(scenario: &Scenario) -> Script {
    Script {
        refuse_until_ms: scenario.model.refuse_until_ms,
        responses: scenario.model.responses.clone(),
        repeat_last: scenario.model.repeat_last,
    }
}
