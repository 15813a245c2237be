//! The end of a run, in either world: the evidence gathered and finished into the record the
//! oracle judges (`crate::verdict` does the judging).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::bound::SlowRecovery;
use super::evidence::World;
use super::fleet_evidence::FleetEvidence;
use super::gateway::Receipt;
use super::seeded;
use super::service::{Fate, ServiceReceipt};
use crate::model_server::{Exchange, ModelServer};
use crate::scenario::Scenario;
use crate::seams::FsFaults;

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

/// What a run left behind, in either world, as its driver hands it over.
pub(crate) struct Concluded<'a> {
    pub scenario: &'a Scenario,
    pub plan: seeded::Plan,
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

/// What a run left, finished and not yet judged: everything the oracle reads and a report
/// shows. The world never judges a run: `crate::verdict` hands this to the oracle.
pub(crate) struct Finished {
    pub scenario: String,
    pub plan: seeded::Plan,
    pub seed: u64,
    pub world: World,
    /// What the gateway received.
    pub receipts: Vec<Receipt>,
    /// What the services of an agent under test received.
    pub service_receipts: Vec<ServiceReceipt>,
    /// The services the agent under test declared (empty otherwise).
    pub services: Vec<super::Service>,
    /// Every model request and what it was served (a report's timeline).
    pub model_exchanges: Vec<Exchange>,
    /// The exchanges the oracle judges when they differ from `model_exchanges` (the fleet's,
    /// each worker's requests told apart by its address).
    pub judged_exchanges: Option<Vec<Exchange>>,
    /// Every request body the model server received.
    pub request_bodies: Vec<Arc<str>>,
    /// The fault families that fired, by what happened.
    pub faults_fired: BTreeSet<String>,
    /// "Sometimes" conditions the world itself saw (the transcript's are the oracle's to read).
    pub seen: BTreeSet<String>,
    /// World catalog entries the run produced.
    pub catalog_reached: BTreeSet<String>,
    /// Crash points reached, across incarnations.
    pub crash_point_hits: BTreeMap<String, u32>,
    pub fs_ops: u64,
    /// The run's end, in ms of its world's clock.
    pub end_ms: u64,
    /// When each record became durable: `(sim ms, first seq, last seq)`.
    pub durable_batches: Vec<(u64, u64, u64)>,
    /// The waits that made a converged run slow, if it was.
    pub slow_recovery: Option<SlowRecovery>,
    /// What the fleet world gathered for its own checker (`None`: one agent's run).
    pub fleet: Option<FleetEvidence>,
}

/// Finishes a run: the trace's last lines, coverage, and the record the oracle judges.
pub(crate) fn conclude(run: Concluded<'_>) -> Finished {
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
    let faults_fired = faults_fired(&world, &plan, &model_exchanges, (&receipts, &service_receipts));
    let mut catalog_reached = catalog_reached(&world.catalog_reached, &plan, &model_exchanges);
    catalog_reached.extend(disk_entries(&faults_fired, &plan));
    let slow_recovery = slow_recovery(scenario, &plan, seed, &world, end_ms);
    Finished {
        scenario: scenario.name.clone(),
        plan,
        seed,
        world,
        receipts,
        service_receipts,
        services,
        model_exchanges,
        judged_exchanges: None,
        request_bodies,
        faults_fired,
        seen: BTreeSet::new(),
        catalog_reached,
        crash_point_hits,
        fs_ops,
        end_ms,
        durable_batches,
        slow_recovery,
        fleet: None,
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
