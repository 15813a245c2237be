//! The end of a run, in either world: the evidence gathered, judged by the oracle, and the
//! result reported.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use faultline_runtime::event::Record;
use serde::Serialize;

use super::evidence::{fnv1a, World};
use super::gateway::Receipt;
use super::seeded;
use super::service::{Fate, ServiceReceipt};
use crate::model_server::ModelServer;
use crate::oracle::{self, Violation};
use crate::scenario::Scenario;
use crate::seams::FsFaults;

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
    pub slow_recovery: Option<super::bound::SlowRecovery>,
}

impl RunResult {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The disk fault families that fired, from the fault filesystem's own record (what it
/// refused, tore or holed), never from what the agent said.
pub(crate) fn note_disk_faults(
    world: &mut World,
    plan: &seeded::Plan,
    first_life_fs: &FsFaults,
    space: &crate::seams::DiskSpace,
) {
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
pub(crate) struct Concluded<'a> {
    pub scenario: &'a Scenario,
    pub plan: &'a seeded::Plan,
    pub seed: u64,
    pub world: World,
    /// What the gateway received.
    pub receipts: Vec<Receipt>,
    /// What the services of an agent under test received.
    pub service_receipts: Vec<ServiceReceipt>,
    /// The services the agent under test declared (empty otherwise).
    pub services: Vec<super::Service>,
    /// The model server (its request log), if it started.
    pub model: Option<ModelServer>,
    /// Crash points reached, across incarnations.
    pub crash_point_hits: BTreeMap<String, u32>,
    pub fs_ops: u64,
    /// The run's end, in ms of its world's clock.
    pub end_ms: u64,
}

/// Judges a finished run: the oracle over the evidence, and the result to report.
pub(crate) fn conclude(run: Concluded<'_>) -> RunResult {
    let Concluded {
        scenario,
        plan,
        seed,
        mut world,
        receipts,
        service_receipts,
        services,
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
    let durable_batches = durable_batches(&world.durable_at);
    let model_requests = request_bodies.len();
    let transcript = world.transcript.clone().unwrap_or_default();
    let faults_fired = faults_fired(&world, plan, &model_exchanges, (&receipts, &service_receipts));
    let violations = oracle::judge(&oracle::RunEvidence {
        plan,
        seed,
        world: &world,
        receipts: &receipts,
        service_receipts: &service_receipts,
        services: &services,
        exchanges: &model_exchanges,
        request_bodies: &request_bodies,
        faults_fired: &faults_fired,
        end_ms,
    });
    let sometimes = oracle::sometimes(&transcript);
    let mut catalog_reached = catalog_reached(&world.catalog_reached, plan, &model_exchanges);
    catalog_reached.extend(disk_entries(&faults_fired, plan));
    let slow_recovery = slow_recovery(scenario, plan, seed, &world, end_ms);
    RunResult {
        scenario: scenario.name.clone(),
        seed,
        format: plan.format,
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
        catalog_reached,
        sim_ms: end_ms,
        fs_ops,
        model_exchanges,
        durable_batches,
        slow_recovery,
    }
}

/// The waits of the agent's settings that made a converged run slow, if it was.
fn slow_recovery(
    scenario: &Scenario,
    plan: &seeded::Plan,
    seed: u64,
    world: &World,
    end_ms: u64,
) -> Option<super::bound::SlowRecovery> {
    let transcript = world.transcript.as_deref().filter(|_| world.refused.is_none())?;
    let (took_ms, waits) = super::bound::slow_recovery(&plan.liveness, transcript, &world.durable_at, end_ms)?;
    Some(super::bound::SlowRecovery {
        scenario: scenario.name.clone(),
        seed,
        took_ms,
        workload_ms: plan.liveness.workload_ms,
        waits,
    })
}

/// When each record became durable, as runs of seqs acknowledged at one instant:
/// `(sim ms, first seq, last seq)`.
fn durable_batches(durable_at: &BTreeMap<u64, u64>) -> Vec<(u64, u64, u64)> {
    let mut batches: Vec<(u64, u64, u64)> = Vec::new();
    for (&seq, &at) in durable_at {
        match batches.last_mut() {
            Some((ms, _, last)) if *ms == at && *last + 1 == seq => *last = seq,
            _ => batches.push((at, seq, seq)),
        }
    }
    batches
}

/// The catalog entries a run reached: those its hosts reported, and the wire entries the model
/// server served (a response scripted and never requested reached nothing).
pub(crate) fn catalog_reached(
    hosts: &BTreeSet<String>,
    plan: &seeded::Plan,
    exchanges: &[crate::model_server::Exchange],
) -> BTreeSet<String> {
    let served = exchanges.iter().filter_map(|e| plan.script.responses.get(e.slot?)?.entry.clone());
    hosts.iter().cloned().chain(served).collect()
}

/// The filesystem catalog entries a run's disk faults reached (`faults_fired` holds what the
/// fault filesystem itself did).
fn disk_entries(faults_fired: &BTreeSet<String>, plan: &seeded::Plan) -> BTreeSet<String> {
    let fired = |family: &str| faults_fired.contains(family);
    let mut out = BTreeSet::new();
    let mut add = |entry: String| {
        out.insert(entry);
    };
    if fired("crash-point") {
        add("filesystem.crash.unsynced-writes-lost".into());
    }
    for (family, entry) in [
        ("torn-write", "filesystem.write.torn-at-block-boundary"),
        ("power-loss-hole", "filesystem.power-loss.zero-filled-hole"),
        ("eio", "filesystem.eio"),
        ("enospc", "filesystem.enospc"),
    ] {
        if fired(family) {
            add(entry.into());
        }
    }
    if let (true, Some(full)) = (fired("disk-full"), &plan.faults.disk_full) {
        add(format!("filesystem.disk-full.{}", full.refuses.name()));
    }
    if fired("bit-rot") {
        for kind in &plan.faults.rot_kinds {
            add(format!("filesystem.bit-rot.{}", kind.name()));
        }
    }
    out
}

/// Coverage is what happened: what the model server served, what the services and the
/// gateway answered, on top of what the hosts reported firing (crashes, partitions, refusals,
/// disk faults).
fn faults_fired(
    world: &World,
    plan: &seeded::Plan,
    exchanges: &[crate::model_server::Exchange],
    (receipts, service_receipts): (&[Receipt], &[ServiceReceipt]),
) -> BTreeSet<String> {
    let mut faults_fired = world.faults_fired.clone();
    for slot in exchanges.iter().filter_map(|e| e.slot) {
        faults_fired.extend(
            seeded::response_families(&plan.script.responses[slot], plan.format).into_iter().map(str::to_owned),
        );
    }
    for receipt in service_receipts {
        match receipt.fate {
            Fate::Refused => faults_fired.insert("service-error".to_owned()),
            Fate::EffectReplyLost => faults_fired.insert("service-lost-reply".to_owned()),
            Fate::Effect | Fate::Deduplicated => false,
        };
    }
    if plan.faults.gateway_echo && !receipts.is_empty() {
        faults_fired.insert("echoed-secret".to_owned());
    }
    faults_fired
}
