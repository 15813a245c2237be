//! The fleet world: the zombie family (FAILURE-LEASE-EPOCH) in the simulator.
//!
//! Two worker hosts share one session on a leased store ([`MemoryStore::leased`]: the lease
//! rules PostgreSQL's backend uses, judged by one clock, as a database's `now()` is). Worker
//! `a` runs the workload; at the planned instant it is stopped (`pause.rs`) for longer than
//! its lease, so its renewals stop with it. Worker `b` stands by, trying to take the session
//! over every `standby_poll_ms`: refused while `a`'s lease is live, it takes over once the
//! lease ran out, repairs the open turn and finishes the workload. Then `a` wakes, believing
//! it still holds the session.
//!
//! The workload's effects go through one delivery queue shared by both workers, as a
//! database's is (a journal on the database's disk, `database_disk.rs`), fenced by the
//! session's epoch (`outbox/fence.rs`). Each tool call prepares for a while on its worker's
//! clock before it asks the queue: a stop can fall between the durable intent and the
//! enqueue, where only the queue's epoch check keeps the woken zombie's effect out.
//!
//! Each worker reaches the store through a link of the harness's (`store_link.rs`): seeded
//! cuts, answers lost after the store ran a statement, and a failover.
//!
//! The oracle (`oracle/fencing.rs`) reads what the runtime cannot touch: the instant the
//! harness saw `b`'s takeover succeed and the log as `b` found it, every record each worker's
//! agent accepted, every tool body it started and every effect it asked the queue for
//! (stamped by the harness's tool, outside the runtime), the gateway's receipts, the link's
//! record of its faults, the store read by the harness (without the link) right after each
//! turn a worker reported kept and once both workers stopped, and the model server's ledger
//! (the retry rules, each worker told apart by its address).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use faultline_runtime::agent::{Agent, Open};

use faultline_runtime::event::{Event, ToolSchema};
use faultline_runtime::llm::{LiveProvider, StaticCredentials};
use faultline_runtime::outbox::{JournalOutbox, OutboxTool};
use faultline_runtime::seams::{BoxFuture, Clock, Entropy, Seams};
use faultline_runtime::store::{MemoryStore, SessionId, Statement, Store};
use faultline_runtime::tool::{Tool, ToolInvocation, ToolOutput, ToolSet};
use tokio_util::sync::CancellationToken;

use super::conclude::Finished;
use super::evidence::{lock, SharedWorld, World};
use super::fleet_evidence::{Dispatch, FleetEvidence, KeptPromise, TakeoverSeen, Worker};
use super::ledger::{LedgerEntry, RequestLedger};
use super::pause::{Pause, PausedClock, PausedNet};
use super::seeded::Plan;
use super::setup::SESSION;
use super::setup::{gateway_token, resolve_route, sim_secret, SIM_KEY_VAR, SIM_MODEL_ROOT};
use super::store_link::{link_entries, FleetLink};
use super::user::AgentUnderTest;
use super::{gateway, io_trace};
use super::{Service, ServiceReceipt};
use crate::model_server::Exchange;
use crate::scenario::{Scenario, Zombie};

/// How often the standby worker, done with the workload, looks whether the zombie stopped.
const ZOMBIE_WATCH_MS: u64 = 50;

/// Slack on a drawn pause beyond the lease and a standby poll, in ms (a few ticks).
const PAUSE_SLACK_MS: u64 = 50;

/// How long the workload's tool prepares its effect before asking the queue for it, in ms of
/// its worker's clock (a stopped worker's preparation outlasts its stop).
const TOOL_PREPARE_MS: u64 = 300;

/// Where the shared queue's journal lives on the database's disk.
const QUEUE_JOURNAL: &str = "/database/outbox.jsonl";

/// The store's link as the seed resolves it: its cuts, and the failover's instant.
fn resolve_link(zombie: &Zombie, seed: u64) -> FleetLink {
    let failover_at = zombie.failover_at_ms.map(|at_ms| {
        let at_ms = if zombie.from_seed {
            crate::seed::Seed::new(seed).fault("failover").next_u64() % (at_ms + 1)
        } else {
            at_ms
        };
        Duration::from_millis(at_ms)
    });
    FleetLink::new(seed, zombie.cut_percent, failover_at, zombie.takeover_answer_lost)
}

/// The zombie's pause as the seed resolves it.
fn resolve_pause(zombie: &Zombie, seed: u64) -> Pause {
    // Past the lease and one more standby poll (plus slack for ticks): the standby surely
    // sees the lease run out while the zombie is still stopped.
    let shortest_ms = zombie.lease_ms + zombie.standby_poll_ms + PAUSE_SLACK_MS;
    let (at_ms, pause_ms) = if zombie.from_seed {
        let draws = crate::seed::Seed::new(seed).fault("zombie");
        let at = draws.next_u64() % (zombie.pause_at_ms + 1);
        let length = shortest_ms + draws.next_u64() % (zombie.pause_ms.saturating_sub(shortest_ms) + 1);
        (at, length)
    } else {
        (zombie.pause_at_ms, zombie.pause_ms)
    };
    assert!(pause_ms > zombie.lease_ms, "a zombie's pause outlasts its lease");
    Pause { from: Duration::from_millis(at_ms), until: Duration::from_millis(at_ms + pause_ms) }
}

/// What the hosts report, outside the runtime.
#[derive(Default)]
struct Log {
    evidence: FleetEvidence,
    /// Trace lines, with simulated ms.
    trace: Vec<String>,
    a_done: bool,
    b_done: bool,
}

type SharedLog = Arc<Mutex<Log>>;

fn log_of(log: &SharedLog) -> MutexGuard<'_, Log> {
    log.lock().unwrap_or_else(|p| p.into_inner())
}

fn now_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64)
}

fn note(log: &SharedLog, line: String) {
    log_of(log).trace.push(format!("{:>7} {line}", now_ms()));
}

/// Everything a worker host needs.
#[derive(Clone)]
struct WorkerSetup {
    worker: Worker,
    plan: Arc<Plan>,
    seed: u64,
    route: Result<faultline_runtime::llm::ResolvedProvider, String>,
    store: MemoryStore,
    /// The same store without the link: what the harness reads (the takeover's log, each
    /// kept turn's `turn/end`, the final log), never a statement of a worker's.
    witness: MemoryStore,
    /// The shared delivery queue, fenced by `store`'s epochs (each worker uses it as itself).
    queue: JournalOutbox,
    log: SharedLog,
    stamp: super::stamp::Stamp,
    standby_poll_ms: u64,
    /// The zombie's pause (worker `a` only).
    pause: Option<Pause>,
    /// The model server's count of requests: each worker enters its address as its own life.
    ledger: RequestLedger,
    /// An embedder's agent (`--agent`): its tools, built on each worker's seams, and its
    /// config replace the scenario's.
    user: Option<Arc<AgentUnderTest>>,
}

/// Runs the zombie family: `scenario` with two workers and `zombie`'s pause.
pub(super) fn run(
    scenario: &Scenario,
    plan: &Plan,
    (zombie, seed): (&Zombie, u64),
    user: Option<Arc<AgentUnderTest>>,
) -> Finished {
    let pause = resolve_pause(zombie, seed);
    let mut sim = super::hosts::build_sim(plan, seed);
    let world: SharedWorld = Arc::default();
    let recorder = io_trace::IoRecorder::new(false);
    let model_slot = super::hosts::host_model(&mut sim, plan, &world, &recorder);
    let receipts = super::hosts::host_gateway(&mut sim, plan, &world, &recorder);
    let service_receipts = super::hosts::host_services(&mut sim, plan, &world, (seed, user.as_deref()), &recorder);
    let services = user.as_ref().map(|u| u.services.clone()).unwrap_or_default();
    let held_secrets = user.as_ref().map(|u| u.secrets.clone()).unwrap_or_default();
    let order = lock(&world).order.clone();
    let stamp: super::stamp::Stamp = Arc::new(move || order.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1);
    let log: SharedLog = Arc::default();
    let clock: Arc<dyn Clock> = Arc::new(crate::seams::SimClock);
    let database = Arc::new(crate::seams::SimProcess::new("database", 1));
    let link = Arc::new(resolve_link(zombie, seed));
    let witness = MemoryStore::leased(database, clock, zombie.lease_ms).expect("lease within the scenario's range");
    let store = witness.with_link(link.clone());
    let queue = shared_queue(&witness, seed);
    let setup = WorkerSetup {
        worker: Worker::A,
        plan: Arc::new(plan.clone()),
        seed,
        route: resolve_route(plan.format, SIM_MODEL_ROOT, &plan.provider),
        store,
        witness,
        queue,
        log: log.clone(),
        stamp,
        standby_poll_ms: zombie.standby_poll_ms,
        pause: Some(pause),
        ledger: lock(&world).ledger.clone(),
        user,
    };
    note(
        &log,
        format!(
            "worker-a will stop at {} ms for {} ms",
            pause.from.as_millis(),
            (pause.until - pause.from).as_millis()
        ),
    );
    host_workers(&mut sim, &setup, pause);
    drive(&mut sim, plan, &log, &model_slot);
    let end_ms = sim.elapsed().as_millis() as u64;
    let receipts = receipts.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let service_receipts = std::mem::take(&mut *service_receipts.lock().unwrap_or_else(|p| p.into_inner()));
    let (request_bodies, exchanges): (Vec<Arc<str>>, Vec<Exchange>) = {
        let model = model_slot.lock().unwrap_or_else(|p| p.into_inner());
        let bodies = model.as_ref().map_or_else(Vec::new, |m| m.requests().into_iter().map(|r| r.body).collect());
        (bodies, model.as_ref().map_or_else(Vec::new, crate::model_server::ModelServer::exchanges))
    };
    let mut log = std::mem::take(&mut *log_of(&log));
    for receipt in &receipts {
        log.trace.push(format!("{:>7} gateway received {}", receipt.at_ms, receipt.execution_id));
    }
    record_link(&mut log, &link);
    log.trace.sort_by_key(|line| line.split_whitespace().next().and_then(|ms| ms.parse::<u64>().ok()));
    let mut trace = lock(&world).trace.clone();
    trace.extend(log.trace);
    let catalog_reached = lock(&world).catalog_reached.clone();
    let effects = Effects { receipts, service_receipts, services, held_secrets, catalog_reached };
    let judged = judged_by_the_retry_rules(&lock(&world).ledger, &exchanges, pause);
    let model = ModelEvidence { bodies: request_bodies, exchanges, judged };
    conclude(scenario, plan, seed, log.evidence, trace, effects, model, end_ms)
}

/// What the model server saw: every request body (each must be one the API accepts), every
/// exchange, and the ledger and exchanges the retry rules judge.
struct ModelEvidence {
    bodies: Vec<Arc<str>>,
    exchanges: Vec<Exchange>,
    judged: (RequestLedger, Vec<Exchange>),
}

/// The requests the retry rules judge: all but the stopped worker's from its stop on. Its
/// clock stood still while the world's moved, so on waking it may find a stream it never
/// saw finish idle past its timeout and ask again; it cannot be held to timing it could
/// not see. What it does once woken is the fencing checker's to judge.
fn judged_by_the_retry_rules(
    ledger: &RequestLedger,
    exchanges: &[Exchange],
    pause: Pause,
) -> (RequestLedger, Vec<Exchange>) {
    let stopped_from_ms = pause.from.as_millis() as u64;
    let (stopped, kept): (Vec<LedgerEntry>, Vec<LedgerEntry>) = ledger
        .entries()
        .into_iter()
        .partition(|entry| entry.life == Worker::A.life() && entry.at_ms >= stopped_from_ms);
    let stopped: std::collections::BTreeSet<usize> = stopped.iter().map(|entry| entry.n).collect();
    let exchanges = exchanges.iter().filter(|exchange| !stopped.contains(&exchange.n)).cloned().collect();
    (RequestLedger::of(kept), exchanges)
}

/// What reached the world's receivers: the gateway, and an embedder's services.
struct Effects {
    receipts: Vec<gateway::Receipt>,
    service_receipts: Vec<ServiceReceipt>,
    services: Vec<Service>,
    /// Secrets the agent under test holds besides the world's own.
    held_secrets: Vec<(String, String)>,
    /// Catalog entries the services' hosts produced.
    catalog_reached: std::collections::BTreeSet<String>,
}

/// Steps the fleet until the standby is done or the run's end: its budget, or the liveness
/// bound the agent's own settings promise past the heal, whichever is later (as the
/// single-agent world's driver runs it). The model heals at the heal.
fn drive(
    sim: &mut turmoil::Sim<'static>,
    plan: &Plan,
    log: &SharedLog,
    model_slot: &Mutex<Option<crate::model_server::ModelServer>>,
) {
    let (end, heal_at) = (Duration::from_millis(plan.end_ms()), Duration::from_millis(plan.heal_at_ms));
    let mut healed = false;
    loop {
        if log_of(log).b_done || sim.elapsed() >= end {
            break;
        }
        if !healed && sim.elapsed() >= heal_at {
            healed = true;
            if let Some(model) = model_slot.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                model.heal();
            }
            note(log, "fault window over: the model heals".to_owned());
        }
        if let Err(e) = sim.step() {
            note(log, format!("simulation error: {e}"));
            break;
        }
    }
}

/// The link's record of its faults, as evidence and as trace lines.
fn record_link(log: &mut Log, link: &FleetLink) {
    log.evidence.link = link.record();
    for fault in &log.evidence.link {
        let what = if fault.answer_lost_after_write { "answer lost after it ran" } else { "cut" };
        let cause = if fault.failover { " (failover)" } else { "" };
        let statement = fault.statement.name();
        log.trace.push(format!("{:>7} {} store link: {statement} {what}{cause}", fault.at_ms, fault.host));
    }
}

/// The delivery queue both workers share: a journal on the database's disk whose session
/// fences read the store's epochs.
fn shared_queue(store: &MemoryStore, seed: u64) -> JournalOutbox {
    let mut seams = crate::seams::sim_seams(seed, "database", 1);
    seams.fs = Arc::new(super::database_disk::DatabaseDisk::default());
    JournalOutbox::open(seams, QUEUE_JOURNAL)
        .expect("the database's disk never fails")
        .with_epochs(Arc::new(store.clone()))
}

/// Worker `a` (the zombie, stopped by `pause`) and worker `b` (the standby), each on a host
/// of its own, marking the log when it is done.
fn host_workers(sim: &mut turmoil::Sim<'static>, setup: &WorkerSetup, pause: Pause) {
    for worker in [Worker::A, Worker::B] {
        let setup = WorkerSetup { worker, pause: (worker == Worker::A).then_some(pause), ..setup.clone() };
        sim.host(worker.host(), move || {
            let setup = setup.clone();
            async move {
                let log = setup.log.clone();
                let worker = setup.worker;
                setup.ledger.life_at(turmoil::lookup(worker.host()), worker.life());
                let ended = match worker {
                    Worker::A => run_zombie(setup).await,
                    Worker::B => run_standby(setup).await,
                };
                if let Err(why) = ended {
                    note(&log, format!("{} stopped: {why}", worker.host()));
                }
                let mut log = log_of(&log);
                match worker {
                    Worker::A => log.a_done = true,
                    Worker::B => log.b_done = true,
                }
                Ok(())
            }
        });
    }
}

#[allow(clippy::too_many_arguments)]
fn conclude(
    scenario: &Scenario,
    plan: &Plan,
    seed: u64,
    evidence: FleetEvidence,
    trace: Vec<String>,
    Effects { receipts, service_receipts, services, held_secrets, catalog_reached: hosts_reached }: Effects,
    ModelEvidence { bodies: request_bodies, exchanges, judged: (ledger, judged_exchanges) }: ModelEvidence,
    end_ms: u64,
) -> Finished {
    let (faults_fired, mut seen) = fired_and_seen(&evidence);
    // The woken zombie asked the queue for an effect after the takeover, and it never came.
    if let Some(takeover) = &evidence.takeover {
        let late = evidence.asked.iter().filter(|a| a.worker == Worker::A && a.stamp > takeover.stamp);
        if late.clone().next().is_some()
            && late.clone().all(|a| receipts.iter().all(|r| r.execution_id != a.execution_id))
        {
            seen.insert("zombie-effect-fenced".to_owned());
        }
    }
    // The store as the oracle's secrets check reads it: the shared store, read back.
    let shared_store: Vec<u8> =
        evidence.transcript.iter().flatten().flat_map(|r| (r.encode() + "\n").into_bytes()).collect();
    let world = World {
        trace,
        disk: vec![("the shared store".to_owned(), shared_store)],
        transcript: evidence.transcript.clone(),
        ledger,
        held_secrets,
        ..World::default()
    };
    let catalog_reached = super::conclude::catalog_reached(
        &link_entries(&evidence.link).into_iter().chain(hosts_reached).collect(),
        plan,
        &exchanges,
    );
    Finished {
        scenario: scenario.name.clone(),
        plan: plan.clone(),
        seed,
        world,
        receipts,
        service_receipts,
        services,
        model_exchanges: exchanges,
        judged_exchanges: Some(judged_exchanges),
        request_bodies,
        faults_fired,
        seen,
        catalog_reached,
        crash_point_hits: Default::default(),
        fs_ops: 0,
        end_ms,
        durable_batches: Vec::new(),
        slow_recovery: None,
        fleet: Some(evidence),
    }
}

/// The fault families a fleet run fired (the zombie's stop, the store link's cuts and
/// failover) and the coverage the harness's own records show.
fn fired_and_seen(
    evidence: &FleetEvidence,
) -> (std::collections::BTreeSet<String>, std::collections::BTreeSet<String>) {
    let mut seen = std::collections::BTreeSet::new();
    let mut faults_fired = std::collections::BTreeSet::new();
    if evidence.takeover.as_ref().is_some_and(|t| t.from_zombie) {
        faults_fired.insert("zombie".to_owned());
    }
    for fault in &evidence.link {
        faults_fired.insert(if fault.failover { "failover" } else { "link-cut" }.to_owned());
        if fault.answer_lost_after_write {
            let name = match fault.statement {
                Statement::TakeOver => "takeover-answer-lost",
                Statement::Append => "append-answer-lost",
                _ => "write-answer-lost",
            };
            seen.insert(name.to_owned());
        }
    }
    if evidence.zombie_fenced {
        seen.insert("zombie-fenced".to_owned());
    }
    (faults_fired, seen)
}

/// The seams of a worker host: the zombie's clock and network stop with it.
fn worker_seams(setup: &WorkerSetup) -> Seams {
    let mut seams = crate::seams::sim_seams(setup.seed, setup.worker.host(), 1);
    if let Some(pause) = setup.pause {
        let clock = seams.clock.clone();
        seams.net = Arc::new(PausedNet { inner: seams.net.clone(), clock: clock.clone(), pause });
        seams.clock = Arc::new(PausedClock { inner: clock, pause });
    }
    seams.secrets.register(&sim_secret(setup.seed));
    seams
}

/// Renews the worker's leases every third of a lease, on the worker's own clock (a stopped
/// worker stops renewing).
fn renew_leases(store: &MemoryStore, seams: &Seams) -> tokio::task::JoinHandle<()> {
    let (store, clock) = (store.clone(), seams.clock.clone());
    let every = store.renewal_interval().expect("the fleet store is leased");
    tokio::spawn(async move {
        loop {
            clock.sleep(every).await;
            store.renew_leases();
        }
    })
}

/// Builds a worker's agent on `store` (`open`: create the session, or resume it taking over
/// a holder whose lease ran out).
fn start_agent(setup: &WorkerSetup, seams: &Seams, store: &MemoryStore, open: Open) -> Result<Agent, String> {
    let route = setup.route.clone()?;
    let token = gateway_token(setup.seed);
    seams.secrets.register(&token);
    let deliverer = Arc::new(gateway::GatewayDeliverer {
        token,
        net: seams.net.clone(),
        clock: seams.clock.clone(),
        authority: "gateway:80".into(),
        probe: seams.probe.clone(),
    });
    let queue: Arc<dyn faultline_runtime::outbox::Outbox> = Arc::new(setup.queue.as_process(seams.clone()));
    // An embedder's tools, built on this worker's seams as production builds them, each
    // dispatch stamped by the harness.
    let mut tools = ToolSet::new();
    if let Some(user) = &setup.user {
        let built = (user.tools)(seams);
        for schema in built.schemas() {
            let inner = built.get(&schema.name).expect("a schema of the set").clone();
            tools = tools.with(Arc::new(StampedTool { inner, seen: setup.dispatch_log() }));
        }
    }
    for tool in &setup.plan.tools {
        // An embedder's own tool of the same name stands in for the scenario's.
        if tools.get(&tool.name).is_some() {
            continue;
        }
        let parameters = tool.parameters.as_deref().and_then(|p| serde_json::from_str(p).ok());
        let schema = ToolSchema {
            name: tool.name.clone(),
            description: tool.description.clone().unwrap_or_else(|| tool.kind.as_str().to_owned()),
            parameters: parameters.unwrap_or_else(|| serde_json::json!({"type": "object"})),
        };
        tools = tools.with(Arc::new(DispatchTool {
            schema: schema.clone(),
            effect: Arc::new(OutboxTool::new(schema, queue.clone(), deliverer.clone())),
            clock: seams.clock.clone(),
            seen: setup.dispatch_log(),
        }));
    }
    let credentials =
        Arc::new(StaticCredentials([(SIM_KEY_VAR.to_owned(), sim_secret(setup.seed))].into_iter().collect()));
    let config = super::life::agent_config(setup.user.as_deref(), &setup.plan);
    let agent = Agent::builder(Arc::new(LiveProvider::new(route)), credentials)
        .seams(seams.clone())
        .open(open)
        .tools(tools)
        .config(config)
        .start(store, &SessionId::new(SESSION).expect("valid id"))
        .map_err(|e| e.to_string())?;
    report_accepted(&agent, setup);
    Ok(agent)
}

/// Every record the worker's agent accepts, stamped outside the runtime; and whether it was
/// told its writes were fenced.
fn report_accepted(agent: &Agent, setup: &WorkerSetup) {
    let (mut records, mut failures) = (agent.subscribe(), agent.failures());
    let (log, stamp, worker) = (setup.log.clone(), setup.stamp.clone(), setup.worker);
    tokio::spawn(async move {
        while let Ok(record) = records.recv().await {
            let stamp = stamp();
            log_of(&log).evidence.accepted.push((worker, (*record).clone(), stamp));
        }
    });
    let log = setup.log.clone();
    tokio::spawn(async move {
        while let Ok(failure) = failures.recv().await {
            if failure.contains("superseded") {
                log_of(&log).evidence.zombie_fenced |= worker == Worker::A;
            }
            note(&log, format!("{} persistence failure: {failure}", worker.host()));
        }
    });
}

/// Submits `messages` one turn at a time; stops at the first turn not kept (a worker whose
/// writes are refused has lost its session). A turn reported kept is looked up in the store
/// at once, by the harness: its `turn/end`, saying the same, must be there.
async fn submit_all(agent: &Agent, messages: &[String], setup: &WorkerSetup) -> Result<(), String> {
    let (worker, log) = (setup.worker, &setup.log);
    for message in messages {
        agent.submit(message.clone()).map_err(|e| e.to_string())?;
        agent.when_idle().await;
        if let Some(outcome) = agent.last_outcome() {
            note(
                log,
                format!("{} turn {} kept={} {}", worker.host(), outcome.turn, outcome.kept, outcome.reason.kind()),
            );
            if !outcome.kept {
                return Err(format!("turn {} not kept", outcome.turn));
            }
            let id = SessionId::new(SESSION).expect("valid id");
            let stored = setup.witness.inspect(&id).map(|i| i.records).unwrap_or_default();
            let end = stored.iter().find_map(|r| match &r.event {
                Event::TurnEnd(end) if end.turn == outcome.turn => Some(end.reason.kind()),
                _ => None,
            });
            if end != Some(outcome.reason.kind()) {
                let promise = KeptPromise {
                    worker,
                    turn: outcome.turn,
                    reported: outcome.reason.kind(),
                    stored: end,
                    at_ms: now_ms(),
                };
                log_of(log).evidence.broken_promises.push(promise);
            }
        }
    }
    Ok(())
}

/// Worker `a`: creates the session and runs the workload; it is the one stopped.
async fn run_zombie(setup: WorkerSetup) -> Result<(), String> {
    let seams = worker_seams(&setup);
    let store = setup.store.as_process(seams.process.clone());
    let agent = start_agent(&setup, &seams, &store, Open::Create)?;
    let renewing = renew_leases(&store, &seams);
    let worked = submit_all(&agent, &setup.plan.messages, &setup).await;
    agent.when_idle().await;
    let disposed = agent.dispose().await.map_err(|e| e.to_string());
    renewing.abort();
    worked.and(disposed)
}

/// Worker `b`: stands by until the session can be opened (a holder whose lease ran out is
/// taken over), finishes the workload, and once the zombie has stopped reads the store back.
async fn run_standby(setup: WorkerSetup) -> Result<(), String> {
    let seams = worker_seams(&setup);
    let store = setup.store.as_process(seams.process.clone());
    let id = SessionId::new(SESSION).expect("valid id");
    let poll = Duration::from_millis(setup.standby_poll_ms);
    let agent = loop {
        seams.clock.sleep(poll).await;
        if !store.list().map_err(|e| e.to_string())?.contains(&id) {
            continue;
        }
        match start_agent(&setup, &seams, &store, Open::Resume) {
            Ok(agent) => break agent,
            // Held by a live writer: `a` is still renewing its lease (or, if it names this
            // worker, a lease of its own: a takeover whose lost answer was not looked up).
            Err(refused) if refused.contains("held by a live writer") => {
                if refused.contains(&format!(" on {} (", Worker::B.host())) {
                    note(&setup.log, format!("worker-b refused by its own lease: {refused}"));
                    log_of(&setup.log).evidence.refused_by_itself.push(now_ms());
                }
                continue;
            }
            Err(other) => return Err(other),
        }
    };
    let found = setup.witness.inspect(&id).map_err(|e| e.to_string())?.records;
    let from_zombie = !log_of(&setup.log).a_done;
    let stamp = (setup.stamp)();
    let from = if from_zombie { "from the stopped worker-a" } else { "after worker-a released it" };
    note(&setup.log, format!("worker-b opened the session {from} ({} records)", found.len()));
    log_of(&setup.log).evidence.takeover =
        Some(TakeoverSeen { stamp, at_ms: now_ms(), found: found.clone(), from_zombie });
    let renewing = renew_leases(&store, &seams);
    let done = found.iter().filter(|r| matches!(&r.event, Event::UserMessage(_))).count();
    let owed: Vec<String> = setup.plan.messages.iter().skip(done).cloned().collect();
    let worked = submit_all(&agent, &owed, &setup).await;
    agent.when_idle().await;
    let disposed = agent.dispose().await.map_err(|e| e.to_string());
    renewing.abort();
    // The zombie may still be stopped: its late writes are what the oracle looks for.
    while !log_of(&setup.log).a_done {
        seams.clock.sleep(Duration::from_millis(ZOMBIE_WATCH_MS)).await;
    }
    let records = setup.witness.inspect(&id).map_err(|e| e.to_string())?.records;
    log_of(&setup.log).evidence.transcript = Some(records);
    worked.and(disposed)
}

/// Where a worker's tools report what they started, stamped outside the runtime.
#[derive(Clone)]
struct DispatchLog {
    worker: Worker,
    log: SharedLog,
    stamp: super::stamp::Stamp,
}

impl DispatchLog {
    fn seen(&self, execution_id: &str) -> Dispatch {
        Dispatch { worker: self.worker, execution_id: execution_id.to_owned(), stamp: (self.stamp)(), at_ms: now_ms() }
    }

    /// The runtime started a tool body.
    fn dispatched(&self, execution_id: &str) {
        let dispatch = self.seen(execution_id);
        note(&self.log, format!("{} dispatched {}", self.worker.host(), dispatch.execution_id));
        log_of(&self.log).evidence.dispatches.push(dispatch);
    }
}

impl WorkerSetup {
    fn dispatch_log(&self) -> DispatchLog {
        DispatchLog { worker: self.worker, log: self.log.clone(), stamp: self.stamp.clone() }
    }
}

/// An embedder's tool, its dispatch stamped by the harness; otherwise untouched.
struct StampedTool {
    inner: Arc<dyn Tool>,
    seen: DispatchLog,
}

impl Tool for StampedTool {
    fn schema(&self) -> ToolSchema {
        self.inner.schema()
    }

    fn timeout(&self) -> Option<Duration> {
        self.inner.timeout()
    }

    fn approval(&self) -> Option<faultline_runtime::approval::ApprovalPolicy> {
        self.inner.approval()
    }

    fn call(&self, invocation: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        self.seen.dispatched(&invocation.execution_id);
        self.inner.call(invocation, cancel)
    }
}

/// The workload's tool: each call prepares for [`TOOL_PREPARE_MS`], then delivers to the
/// gateway through the shared queue. The harness stamps, outside the runtime, the instant the
/// runtime started its body (the dispatch) and the instant it asked the queue (the effect).
struct DispatchTool {
    schema: ToolSchema,
    effect: Arc<dyn Tool>,
    clock: Arc<dyn Clock>,
    seen: DispatchLog,
}

impl Tool for DispatchTool {
    fn schema(&self) -> ToolSchema {
        self.schema.clone()
    }

    fn call(&self, invocation: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'static, ToolOutput> {
        self.seen.dispatched(&invocation.execution_id);
        let (effect, clock, seen) = (self.effect.clone(), self.clock.clone(), self.seen.clone());
        Box::pin(async move {
            clock.sleep(Duration::from_millis(TOOL_PREPARE_MS)).await;
            let asked = seen.seen(&invocation.execution_id);
            let (host, asked_id) = (seen.worker.host(), asked.execution_id.clone());
            note(&seen.log, format!("{host} asks the queue for {asked_id}"));
            log_of(&seen.log).evidence.asked.push(asked);
            let output = effect.call(invocation, cancel).await;
            let kind = match &output {
                ToolOutput::Ok(_) => "ok",
                ToolOutput::Failed(_) => "failed",
                ToolOutput::Unknown(_) => "unknown",
                _ => "other",
            };
            note(&seen.log, format!("{host} tool output for {asked_id}: {kind}"));
            output
        })
    }
}
