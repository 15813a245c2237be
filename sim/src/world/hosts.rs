//! The turmoil simulation of a plan and its server hosts: the model server, the delivery
//! gateway and an embedder's services, each recording what it received outside the agent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use faultline_runtime::seams::{Clock, Entropy};

use super::evidence::{lock, SharedWorld};
use super::gateway::{self, Receipts};
use super::service::{self, ServiceFaults, ServiceReceipts};
use super::setup::{LATENCY_MS, POWER_LOSS_SECTOR_BYTES};
use super::stamp::Stamp;
use super::user::AgentUnderTest;
use super::{io_trace, seeded};
use crate::model_server::ModelServer;
use crate::seams::{sim_epoch, FsFaults};

/// The turmoil simulation of `plan`: its epoch, seed, tick, budget and fixed latency.
pub(crate) fn build_sim(plan: &seeded::Plan, seed: u64) -> turmoil::Sim<'static> {
    let mut builder = turmoil::Builder::new();
    builder
        .epoch(sim_epoch())
        .rng_seed(crate::seed::Seed::new(seed).turmoil())
        .tick_duration(Duration::from_millis(plan.tick_ms))
        .simulation_duration(Duration::from_millis(plan.end_ms() + 60_000))
        .min_message_latency(Duration::from_millis(LATENCY_MS))
        .max_message_latency(Duration::from_millis(LATENCY_MS));
    if let Some(block) = plan.faults.fs.as_ref().and_then(|f| f.block_size) {
        builder.fs().block_size(block);
    }
    builder.build()
}

/// The disk faults the first incarnation meets (later ones get a healthy disk).
pub(crate) fn first_life_faults(plan: &seeded::Plan, seed: u64) -> FsFaults {
    let faults = FsFaults::new();
    let Some(fs) = &plan.faults.fs else { return faults };
    if let (Some(op), Some(kind)) = (fs.fail_op, fs.fail_kind) {
        faults.fail(op, kind.io_kind());
    }
    if let Some(op) = fs.crash_before_op {
        faults.crash_before(op);
    }
    if fs.power_loss_hole {
        faults.hole_on_crash(crate::seed::Seed::new(seed).fault("hole").next_u64());
        if plan.store == crate::scenario::SessionFormat::Zstd {
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
pub(crate) fn host_model(
    sim: &mut turmoil::Sim<'static>,
    plan: &seeded::Plan,
    world: &SharedWorld,
    recorder: &io_trace::IoRecorder,
) -> Arc<Mutex<Option<ModelServer>>> {
    let model_slot: Arc<Mutex<Option<ModelServer>>> = Arc::default();
    let (script, slot, ledger) = (plan.script.clone(), model_slot.clone(), lock(world).ledger.clone());
    let recorder = recorder.clone();
    sim.host("model", move || {
        let (script, slot, ledger) = (script.clone(), slot.clone(), ledger.clone());
        let net = recorder.server_net(Arc::new(crate::seams::SimNet), "model");
        async move {
            let clock: Arc<dyn Clock> = Arc::new(crate::seams::SimClock);
            *slot.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(ModelServer::start(net, clock, "0.0.0.0:80", script, Some(ledger.observer())).await?);
            std::future::pending::<()>().await;
            Ok(())
        }
    });
    model_slot
}

/// The delivery gateway's host; its receipts are what it received, stamped in world order.
pub(crate) fn host_gateway(
    sim: &mut turmoil::Sim<'static>,
    plan: &seeded::Plan,
    world: &SharedWorld,
    recorder: &io_trace::IoRecorder,
) -> Receipts {
    let receipts: Receipts = Arc::default();
    let (kept, echo, recorder) = (receipts.clone(), plan.faults.gateway_echo, recorder.clone());
    let order = lock(world).order.clone();
    let stamp: Stamp = Arc::new(move || order.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1);
    sim.host("gateway", move || {
        let (receipts, stamp) = (kept.clone(), stamp.clone());
        let net = recorder.server_net(Arc::new(crate::seams::SimNet), "gateway");
        async move {
            gateway::serve(net, Arc::new(crate::seams::SimClock), stamp, "0.0.0.0:80", receipts, echo).await?;
            Ok(())
        }
    });
    receipts
}

/// One host per service of the agent under test, serving on port 80.
pub(crate) fn host_services(
    sim: &mut turmoil::Sim<'static>,
    plan: &seeded::Plan,
    world: &SharedWorld,
    (seed, user): (u64, Option<&AgentUnderTest>),
    recorder: &io_trace::IoRecorder,
) -> ServiceReceipts {
    let receipts: ServiceReceipts = Arc::default();
    let order = lock(world).order.clone();
    let stamp: Stamp = Arc::new(move || order.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1);
    for declared in user.map_or(&[][..], |u| &u.services[..]) {
        let faults = ServiceFaults::of(declared, seed);
        let (declared, receipts, stamp, heal_at_ms) =
            (declared.clone(), receipts.clone(), stamp.clone(), plan.heal_at_ms);
        let net = recorder.server_net(Arc::new(crate::seams::SimNet), &declared.name);
        sim.host(declared.name.clone(), move || {
            let net = net.clone();
            let running = service::RunningService {
                service: declared.clone(),
                faults,
                seed,
                clock: Arc::new(crate::seams::SimClock),
                stamp: stamp.clone(),
                receipts: receipts.clone(),
                heal_at_ms,
            };
            async move {
                let listener = net.bind("0.0.0.0:80").await?;
                service::serve(listener, running).await?;
                Ok(())
            }
        });
    }
    host_mcp_services(sim, plan, (seed, user), (&receipts, world), (&stamp, recorder));
    receipts
}

/// One host per simulated MCP server, HTTP on port 80 and stdio lines on port 7, recording
/// into the services' receipts.
fn host_mcp_services(
    sim: &mut turmoil::Sim<'static>,
    plan: &seeded::Plan,
    (seed, user): (u64, Option<&AgentUnderTest>),
    (receipts, world): (&ServiceReceipts, &SharedWorld),
    (stamp, recorder): (&Stamp, &io_trace::IoRecorder),
) {
    for declared in user.map_or(&[][..], |u| &u.mcp_services[..]) {
        let world = world.clone();
        let notes: super::mcp_service::McpNotes = Arc::new(move |note| match note {
            super::mcp_service::McpNote::Reached(entry) => {
                lock(&world).catalog_reached.insert(entry);
            }
            super::mcp_service::McpNote::Answered(answer) => lock(&world).mcp_answers.push(answer),
        });
        let (declared, receipts, stamp, heal_at_ms) =
            (declared.clone(), receipts.clone(), stamp.clone(), plan.heal_at_ms);
        let net = recorder.server_net(Arc::new(crate::seams::SimNet), &declared.host);
        sim.host(declared.host.clone(), move || {
            let net = net.clone();
            let running = Arc::new(super::mcp_service::RunningMcp::new(
                declared.clone(),
                seed,
                stamp.clone(),
                (receipts.clone(), notes.clone()),
                heal_at_ms,
            ));
            async move {
                let http = net.bind("0.0.0.0:80").await?;
                let stdio = net.bind(&format!("0.0.0.0:{}", crate::seams::SIM_STDIO_PORT)).await?;
                super::mcp_service::serve(http, stdio, running).await?;
                Ok(())
            }
        });
    }
}
