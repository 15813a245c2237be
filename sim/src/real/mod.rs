//! The same scenario, for real (`faultline run SCENARIO --seed N --real`): the plan the seed
//! draws, executed with real processes, files, sockets and SIGKILL, judged by the same oracle,
//! and compared record by record with the simulator's run of the same seed (`parity.rs`).
//!
//! - The model server and the gateway are the simulator's own servers on 127.0.0.1, serving
//!   the same script, behind a [`PartitionNet`] that realises the plan's partitions.
//! - The agent is a child process (`faultline real-agent-host`, see `host.rs`) with real files
//!   in a working directory, one process per incarnation. A planned crash is a real SIGKILL
//!   the child sends itself at the planned crash point's hit; the harness then restarts it
//!   after the planned delay, and it recovers, repairs and resumes as a simulated host does
//!   after a bounce.
//! - Time runs on one clock for every process of the run ([`ScaledClock`]), compressed by the
//!   scenario's `real.time_scale`.
//! - Faults this machine cannot realise make a scenario `real.sim_only` (the reason is
//!   printed): a torn write needs a power loss, which a SIGKILL is not.
//!
//! The evidence the oracle needs is gathered outside the child, as in the simulator: receipts
//! at the gateway, requests at the model server, the durable watermark reported down a pipe
//! at the instant it moved, the files read back from disk by the harness itself.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)] // real processes, sockets, files and time

mod clock;
mod disk;
pub(crate) mod host;
mod parity;
mod partition;
mod protocol;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use faultline_runtime::event::Record;
use faultline_runtime::seams::CrashPoint;
use faultline_runtime::store::{FileStore, SessionId, Store};
use faultline_runtime::{seams::Clock, seams::Net};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

pub(crate) use clock::{monotonic_ns, ScaledClock};
pub(crate) use disk::tmpfs_unavailable;
pub use disk::REQUIRE_TMPFS_VAR;
pub use host::{agent_host, parse_crash_at, FsFaultArm, HostArgs, CRASH_AT_VAR, FS_FAULT_VAR};
pub use parity::{Difference, Parity, RealRun};
pub(crate) use partition::{PartitionNet, PartitionSwitch};

use self::protocol::{EndOutcome, HostReport, GO_COMMAND, HEAL_COMMAND, REPORT_LINE_BYTES_MAX};
use crate::model_server::ModelServer;
use crate::scenario::Scenario;
use crate::verdict::{result_of, RunResult};
use crate::world::agent_host::rot_while_down;
use crate::world::conclude::{conclude, Concluded};
use crate::world::evidence::{Outcome, ToolAnswer, ToolRun, World};
use crate::world::gateway::{self, Receipts};
use crate::world::setup::SESSION;
use crate::world::stamp::Stamp;
use crate::world::{life, seeded};

/// The signal a planned crash kills the agent with.
const SIGKILL: i32 = nix::sys::signal::Signal::SIGKILL as i32;
/// How often the harness looks at the run's clock (partitions, the heal, the budget), real ms.
const TICK_REAL_MS: u64 = 1;
/// Simulated ms between a failed start and its restart (as the simulator's supervisor).
const SUPERVISOR_RESTART_MS: u64 = 200;

/// How to run for real.
#[derive(Debug, Clone)]
pub struct RealOptions {
    /// The `faultline` binary that runs the agent host (`real-agent-host`).
    pub agent_exe: PathBuf,
    /// Keep the working directory here (session files, journal, each child's stderr);
    /// otherwise a temporary directory is removed at the end.
    pub keep: Option<PathBuf>,
    /// Planted bugs each agent child plants (`--bug`; a build with `planted-bugs` only).
    pub bugs: Vec<String>,
}

/// Why `scenario` cannot run for real on this machine, if it cannot: it is sim-only, or its
/// disk-full window needs a tmpfs this process may not mount (unless [`REQUIRE_TMPFS_VAR`]
/// says a missing tmpfs is a failure, not a skip).
pub fn cannot_run_here(scenario: &Scenario) -> Option<String> {
    if let Some(why) = &scenario.real.sim_only {
        return Some(format!("sim-only: {why}"));
    }
    if scenario.faults.disk_full.is_some() && std::env::var_os(REQUIRE_TMPFS_VAR).is_none() {
        return tmpfs_unavailable().map(|why| format!("its disk-full window needs a tmpfs, and {why}"));
    }
    None
}

/// Runs `scenario` with `seed` for real. Refuses a `sim_only` scenario with its reason.
pub fn run(scenario: &Scenario, seed: u64, options: &RealOptions) -> Result<RealRun, String> {
    if let Some(why) = &scenario.real.sim_only {
        return Err(format!("scenario {} is sim-only: {why}", scenario.name));
    }
    if let Some(full) =
        scenario.faults.disk_full.filter(|full| full.refuses != crate::scenario::DiskFullRefuses::NewBlocks)
    {
        return Err(format!(
            "scenario {}: a full disk that refuses {} cannot be realised (a tmpfs refuses new blocks)",
            scenario.name,
            full.refuses.name()
        ));
    }
    let temp;
    let dir = match &options.keep {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            if std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?.next().is_some() {
                return Err(format!("--keep {}: the directory must be empty", dir.display()));
            }
            dir.clone()
        }
        None => {
            temp = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
            temp.path().to_path_buf()
        }
    };
    let scenario_file = dir.join("scenario.toml");
    std::fs::write(&scenario_file, scenario.to_toml()).map_err(|e| format!("{}: {e}", scenario_file.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("a tokio runtime: {e}"))?;
    let started = monotonic_ns();
    let run = runtime.block_on(RealWorld::new(scenario, seed, options, &dir, scenario_file).run())?;
    let wall_ms = (monotonic_ns() - started) / 1_000_000;
    Ok(RealRun { wall_ms, ..run })
}

/// A real run of `scenario` at `seed`, the simulator's run of the same seed, and their parity.
pub fn run_and_compare(
    scenario: &Scenario,
    seed: u64,
    options: &RealOptions,
) -> Result<(RealRun, parity::Parity), String> {
    let real = run(scenario, seed, options)?;
    let sim = super::run(scenario, seed);
    let parity = parity::compare(&sim, &real);
    Ok((real, parity))
}

/// The real run's result as a sweep counts it: a parity difference is a violation
/// (`parity`), and so is a harness that could not run it at all (`real-run`).
pub fn judged(scenario: &Scenario, seed: u64, options: &RealOptions) -> RunResult {
    match run_and_compare(scenario, seed, options) {
        Ok((real, parity)) => {
            let mut result = real.result;
            if let Some(violation) = parity.violation(result.sim_ms) {
                result.violations.push(violation);
            }
            result
        }
        Err(e) => RunResult {
            scenario: scenario.name.clone(),
            seed,
            format: scenario.format_for(seed),
            real: true,
            violations: vec![super::Violation::new(super::Invariant::RealRun, e, 0)],
            trace: Vec::new(),
            trace_hash: String::new(),
            transcript: Vec::new(),
            refused: None,
            receipts: Vec::new(),
            service_receipts: Vec::new(),
            model_requests: 0,
            crash_point_hits: BTreeMap::new(),
            faults_fired: std::collections::BTreeSet::new(),
            sometimes: std::collections::BTreeSet::new(),
            catalog_reached: std::collections::BTreeSet::new(),
            sim_ms: 0,
            fs_ops: 0,
            gateway_requests: 0,
            model_exchanges: Vec::new(),
            durable_batches: Vec::new(),
            slow_recovery: None,
        },
    }
}

/// One incarnation's process: its stdin (the go and the heal) and its report lines.
struct Child {
    process: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

/// How long a child may take to set itself up, in real ms (a loaded machine is slow to exec).
const READY_REAL_MS_MAX: u64 = 30_000;

/// How one child ended.
enum LifeEnd {
    /// It reported the end of the workload, a refusal or a failed start.
    Finished(EndOutcome, Option<String>),
    /// It SIGKILLed itself at a planned crash.
    Crashed(Option<CrashPoint>, Option<u64>),
    /// The budget ran out with it still running (it was killed).
    OutOfTime,
    /// It died without saying why (a panic, a signal from elsewhere).
    Died(String),
}

struct RealWorld<'a> {
    scenario: &'a Scenario,
    plan: seeded::Plan,
    seed: u64,
    exe: PathBuf,
    bugs: Vec<String>,
    dir: PathBuf,
    scenario_file: PathBuf,
    clock: Arc<ScaledClock>,
    world: World,
    /// Crash-point hits across incarnations (the planned hit counts across restarts).
    hits: BTreeMap<CrashPoint, u32>,
    /// Planned crash points still to fire, in order, and their restart delays.
    crashes: VecDeque<(CrashPoint, u32)>,
    restart_delays: VecDeque<u64>,
    healed: bool,
    /// Which of the plan's partitions is on.
    partitioned: Vec<bool>,
    model_switch: PartitionSwitch,
    gateway_switch: PartitionSwitch,
    /// The agent's disk, when the plan fills it for a window: a tmpfs on `data`.
    disk: Option<disk::FullableDisk>,
    /// Whether the working directory is kept (`--keep`).
    keep: bool,
}

impl<'a> RealWorld<'a> {
    fn new(scenario: &'a Scenario, seed: u64, options: &RealOptions, dir: &Path, scenario_file: PathBuf) -> Self {
        let plan = seeded::resolve(&crate::generate::expand(scenario, seed, None), seed);
        let clock = Arc::new(ScaledClock::new(monotonic_ns(), scenario.real.time_scale));
        Self {
            scenario,
            seed,
            exe: options.agent_exe.clone(),
            bugs: options.bugs.clone(),
            dir: dir.to_path_buf(),
            scenario_file,
            clock,
            world: World::default(),
            hits: BTreeMap::new(),
            crashes: plan.faults.crashes.iter().map(|c| (c.point, c.hit)).collect(),
            restart_delays: plan.faults.crashes.iter().map(|c| c.restart_after_ms).collect(),
            healed: false,
            partitioned: vec![false; plan.faults.partitions.len()],
            model_switch: PartitionSwitch::default(),
            gateway_switch: PartitionSwitch::default(),
            disk: None,
            keep: options.keep.is_some(),
            plan,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.clock.now().as_millis()).unwrap_or(u64::MAX)
    }

    fn trace(&mut self, line: String) {
        let at = self.now_ms();
        self.world.trace.push(format!("{at:>7} {line}"));
    }

    fn session_file(&self) -> PathBuf {
        life::session_file(&self.dir.join("data").join("sessions"), self.plan.store.format())
    }

    fn journal_file(&self) -> PathBuf {
        self.dir.join("data").join("outbox.jsonl")
    }

    /// The plan's bit rot, on the real disk of the incarnation that is down.
    fn rot_while_down(&mut self) {
        let (session, journal) = (self.session_file(), self.journal_file());
        let rotted = faultline_runtime::production::RealFs;
        if let Some(line) = rot_while_down(&mut self.world, &self.plan, self.seed, &rotted, &session, &journal) {
            self.trace(line);
        }
    }

    async fn run(mut self) -> Result<RealRun, String> {
        if let Some(swarm) = &self.plan.swarm {
            self.world.trace.push(format!("{:>7} {swarm}", 0));
        }
        // The ports first: each incarnation is told them at start, before anything serves.
        let (model_net, model_addr) =
            PartitionNet::prebound(self.model_switch.clone()).map_err(|e| format!("the model server: {e}"))?;
        let (gateway_net, gateway_addr) =
            PartitionNet::prebound(self.gateway_switch.clone()).map_err(|e| format!("the gateway: {e}"))?;
        if self.plan.faults.disk_full.is_some() {
            self.disk = Some(disk::FullableDisk::mount(&self.dir.join("data"))?);
        }
        let mut servers: Option<(ModelServer, Receipts)> = None;
        // When the next incarnation starts, on the run's clock (a restart's planned delay).
        let mut start_at = 0;
        let mut fs_ops = 0;
        loop {
            let life = self.world.begin_life();
            let mut child = self.spawn(life, &model_addr, &gateway_addr)?;
            self.ready(life, &mut child).await?;
            if servers.is_none() {
                // The run's clock starts now that the first incarnation is up: the servers and
                // its workload begin together at 0, as in the simulator, whatever the cost of
                // starting a process (the same handshake keeps every restart on time).
                self.clock = Arc::new(ScaledClock::new(monotonic_ns(), self.scenario.real.time_scale));
                servers = Some(self.serve(model_net.clone(), gateway_net.clone()).await?);
            }
            self.pause_until(start_at, None).await;
            self.trace(format!("agent#{life} starts"));
            if life > 1 {
                self.rot_while_down();
            }
            let (end, ops) = self.follow(life, child).await?;
            fs_ops += ops;
            let Some(delay) = self.after_life(life, end)? else { break };
            start_at = self.now_ms() + delay;
        }
        self.world.disk = [self.session_file(), self.journal_file()]
            .into_iter()
            .filter_map(|path| std::fs::read(&path).ok().map(|bytes| (path.display().to_string(), bytes)))
            .collect();
        self.world.done = self.world.transcript.is_some() || self.world.refused.is_some();
        self.unmount_disk()?;
        let (model, receipts) = servers.expect("the servers start with the first incarnation");
        let receipts = receipts.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let end_ms = self.now_ms();
        let crash_point_hits = self.hits.iter().map(|(p, n)| (p.to_string(), *n)).collect();
        let result = result_of(conclude(Concluded {
            scenario: self.scenario,
            plan: self.plan.clone(),
            seed: self.seed,
            world: std::mem::take(&mut self.world),
            receipts,
            service_receipts: Vec::new(),
            services: Vec::new(),
            model: Some(model),
            crash_point_hits,
            fs_ops,
            end_ms,
        }));
        Ok(RealRun {
            result: RunResult { real: true, ..result },
            model_addr: model_addr.to_string(),
            gateway_addr: gateway_addr.to_string(),
            dir: self.dir.clone(),
            wall_ms: 0,
        })
    }

    /// What follows incarnation `life`'s end: `Some(delay)` restarts after it (a planned
    /// crash's delay, or the supervisor's), `None` ends the run.
    fn after_life(&mut self, life: u64, end: LifeEnd) -> Result<Option<u64>, String> {
        Ok(match end {
            LifeEnd::Finished(EndOutcome::Done, _) => {
                self.world.transcript = Some(self.read_back()?);
                None
            }
            LifeEnd::Finished(EndOutcome::Refused, error) => {
                let error = error.unwrap_or_default();
                self.trace(format!("agent#{life} refused: {error}"));
                self.world.refused = Some(error);
                None
            }
            LifeEnd::Finished(EndOutcome::Stopped, error) => {
                let at_ms = self.now_ms();
                self.world.note_failure(life, at_ms);
                self.trace(format!("agent#{life} stopped: {}", error.unwrap_or_default()));
                self.trace("restart after a failed start (SIGKILL)".into());
                self.world.faults_fired.insert("supervisor-restart".into());
                Some(SUPERVISOR_RESTART_MS)
            }
            LifeEnd::Crashed(point, fs_op) => {
                let what = match (point, fs_op) {
                    (Some(point), _) => format!("crash at {point}"),
                    (None, op) => format!("crash before filesystem op {}", op.unwrap_or_default()),
                };
                self.trace(format!("{what} (SIGKILL)"));
                self.world.note_crash();
                self.world.faults_fired.insert("crash-point".into());
                self.world.crashes_fired += 1;
                if point.is_some() {
                    self.crashes.pop_front();
                    Some(self.restart_delays.pop_front().unwrap_or(SUPERVISOR_RESTART_MS))
                } else {
                    Some(SUPERVISOR_RESTART_MS)
                }
            }
            LifeEnd::OutOfTime => {
                self.trace(format!("agent#{life} still running at the budget: killed"));
                None
            }
            LifeEnd::Died(how) => {
                self.trace(format!("agent#{life} died unplanned: {how}"));
                None
            }
        })
    }

    /// Unmounts the run's tmpfs, if it has one, keeping its files under `data` with `--keep`.
    fn unmount_disk(&mut self) -> Result<(), String> {
        let Some(disk) = self.disk.take() else { return Ok(()) };
        let (data, kept) = (self.dir.join("data"), self.dir.join(".data-kept"));
        if self.keep {
            disk.keep_in(&kept).map_err(|e| format!("keeping {}: {e}", data.display()))?;
        }
        drop(disk);
        if self.keep {
            std::fs::remove_dir(&data)
                .and_then(|()| std::fs::rename(&kept, &data))
                .map_err(|e| format!("keeping {}: {e}", data.display()))?;
        }
        Ok(())
    }

    /// The model server and the gateway, on their pre-bound ports and the run's clock.
    async fn serve(
        &self,
        model_net: PartitionNet,
        gateway_net: PartitionNet,
    ) -> Result<(ModelServer, Receipts), String> {
        let clock: Arc<dyn Clock> = self.clock.clone();
        let model = ModelServer::start(
            Arc::new(model_net),
            clock.clone(),
            "127.0.0.1:0",
            self.plan.script.clone(),
            Some(self.world.ledger.observer()),
        )
        .await
        .map_err(|e| format!("the model server: {e}"))?;
        let receipts: Receipts = Arc::default();
        let listener = gateway_net.bind("127.0.0.1:0").await.map_err(|e| format!("the gateway: {e}"))?;
        // Receipts are stamped on the machine's monotonic clock, as the agent's disk witness
        // stamps what it synced: one order of events across the processes.
        let stamp: Stamp = Arc::new(monotonic_ns);
        tokio::spawn(gateway::serve_on(listener, clock, stamp, receipts.clone(), self.plan.faults.gateway_echo));
        Ok((model, receipts))
    }

    /// The recovered transcript, read back from the real disk by the harness itself.
    fn read_back(&self) -> Result<Vec<Record>, String> {
        let store = FileStore::new(
            faultline_runtime::production::seams(),
            self.dir.join("data").join("sessions"),
            self.plan.store.format(),
        );
        let id = SessionId::new(SESSION).expect("valid id");
        store.inspect(&id).map(|inspection| inspection.records).map_err(|e| format!("reading the transcript back: {e}"))
    }

    /// Waits until `until_ms` of the run's clock, keeping partitions and the heal on time
    /// (telling `child`, if one is waiting, of the heal).
    async fn pause_until(&mut self, until_ms: u64, mut child: Option<&mut tokio::process::ChildStdin>) {
        // At least one tick: a partition that is on from 0 is on before anything connects.
        loop {
            self.tick(child.as_deref_mut()).await;
            if self.now_ms() >= until_ms {
                return;
            }
            tokio::time::sleep(Duration::from_millis(TICK_REAL_MS)).await;
        }
    }

    /// Partitions on or off by the clock, and the heal at `heal_at_ms` (told to the running
    /// child through its stdin).
    async fn tick(&mut self, child: Option<&mut tokio::process::ChildStdin>) {
        let now = self.now_ms();
        if now >= self.plan.heal_at_ms && !self.healed {
            // The liveness phase: the fault window is over, everything heals.
            self.healed = true;
            self.crashes.clear();
            self.trace("fault window over: everything heals".into());
            if let Some(stdin) = child {
                let _ = stdin.write_all(format!("{HEAL_COMMAND}\n").as_bytes()).await;
                let _ = stdin.flush().await;
            }
        }
        if let (Some(full), Some(disk)) = (self.plan.faults.disk_full, self.disk.as_mut()) {
            let active = !self.healed && now >= full.from_ms && now < full.to_ms;
            if active != disk.is_full() {
                let (changed, line) = if active {
                    (disk.fill(), format!("the disk is full ({})", full.refuses.name()))
                } else {
                    (disk.free(), "the disk has space again".to_owned())
                };
                match changed {
                    Ok(()) => self.trace(line),
                    Err(e) => self.trace(format!("the harness could not change the disk's space: {e}")),
                }
            }
        }
        for i in 0..self.plan.faults.partitions.len() {
            let p = &self.plan.faults.partitions[i];
            let active = !self.healed && now >= p.from_ms && now < p.to_ms;
            if active == self.partitioned[i] {
                continue;
            }
            let (a, b) = (p.a.clone(), p.b.clone());
            let switch = if b == "gateway" || a == "gateway" { &self.gateway_switch } else { &self.model_switch };
            switch.set(active);
            self.partitioned[i] = active;
            if active {
                self.world.faults_fired.insert("partition".into());
                self.trace(format!("partition {a}<->{b}"));
            } else {
                self.trace(format!("heal {a}<->{b}"));
            }
        }
    }

    /// Starts incarnation `life`'s process, armed with what is left of the plan; it sets
    /// itself up and waits for the word to start.
    fn spawn(&mut self, life: u64, model_addr: &SocketAddr, gateway_addr: &SocketAddr) -> Result<Child, String> {
        let mut command = tokio::process::Command::new(&self.exe);
        command
            .arg("real-agent-host")
            .arg("--scenario-file")
            .arg(&self.scenario_file)
            .args(["--seed", &self.seed.to_string(), "--life", &life.to_string()])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--model-url", &format!("http://{model_addr}"), "--gateway", &gateway_addr.to_string()])
            .env_remove(CRASH_AT_VAR)
            .env_remove(FS_FAULT_VAR)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        for bug in &self.bugs {
            command.args(["--bug", bug]);
        }
        if self.world.faults_fired.contains("cancel") {
            command.arg("--cancel-fired");
        }
        if self.world.extra_refused {
            command.arg("--extra-refused");
        }
        if !self.healed {
            // The next planned crash, counted from this incarnation's first hit.
            if let Some(&(point, hit)) = self.crashes.front() {
                let seen = self.hits.get(&point).copied().unwrap_or(0);
                if hit > seen {
                    command.env(CRASH_AT_VAR, format!("{point}:{}", hit - seen));
                }
            }
            if let (1, Some(fs)) = (life, &self.plan.faults.fs) {
                let mut arms = Vec::new();
                if let (Some(op), Some(kind)) = (fs.fail_op, fs.fail_kind) {
                    arms.push(FsFaultArm::FailOp(op, kind));
                }
                if let Some(op) = fs.crash_before_op {
                    arms.push(FsFaultArm::CrashBeforeOp(op));
                }
                if !arms.is_empty() {
                    command.env(FS_FAULT_VAR, FsFaultArm::to_env(&arms));
                }
            }
        }
        let stderr_path = self.dir.join(format!("agent-{life}.stderr"));
        let stderr = std::fs::File::create(&stderr_path).map_err(|e| format!("{}: {e}", stderr_path.display()))?;
        command.stderr(stderr);
        let mut process = command.spawn().map_err(|e| format!("starting {}: {e}", self.exe.display()))?;
        let stdin = process.stdin.take().expect("piped");
        let stdout = process.stdout.take().expect("piped");
        let lines = tokio::io::BufReader::with_capacity(64 * 1024, stdout).lines();
        Ok(Child { process, stdin, lines })
    }

    /// Waits for incarnation `life` to say it is set up (nothing of it has touched the disk
    /// or the network yet).
    async fn ready(&mut self, life: u64, child: &mut Child) -> Result<(), String> {
        let line = tokio::time::timeout(Duration::from_millis(READY_REAL_MS_MAX), child.lines.next_line())
            .await
            .map_err(|_| format!("agent#{life} did not start within {READY_REAL_MS_MAX} ms"))?
            .map_err(|e| format!("agent#{life}: {e}"))?
            .ok_or_else(|| format!("agent#{life} exited before it was ready (see agent-{life}.stderr)"))?;
        match serde_json::from_str::<HostReport>(&line) {
            Ok(HostReport::Ready) => Ok(()),
            _ => Err(format!("agent#{life} said {line:?} before it was ready")),
        }
    }

    /// Starts incarnation `life` on the run's clock and follows its reports until it ends,
    /// dies or runs out of time.
    async fn follow(&mut self, life: u64, mut child: Child) -> Result<(LifeEnd, u64), String> {
        let go = format!("{GO_COMMAND} {}\n", self.clock.origin_ns());
        child.stdin.write_all(go.as_bytes()).await.map_err(|e| format!("agent#{life}: {e}"))?;
        child.stdin.flush().await.map_err(|e| format!("agent#{life}: {e}"))?;
        let mut end: Option<LifeEnd> = None;
        let mut fs_ops = 0;
        let mut eof = false;
        while !eof {
            if self.now_ms() >= self.plan.end_ms() {
                let _ = child.process.start_kill();
                let _ = child.process.wait().await;
                return Ok((LifeEnd::OutOfTime, fs_ops));
            }
            tokio::select! {
                line = child.lines.next_line() => match line {
                    Ok(Some(line)) => {
                        if line.len() > REPORT_LINE_BYTES_MAX {
                            return Err(format!("agent#{life} sent a report of {} bytes", line.len()));
                        }
                        let report: HostReport = serde_json::from_str(&line)
                            .map_err(|e| format!("agent#{life} sent an unreadable report ({e}): {line}"))?;
                        match report {
                            HostReport::End { outcome, error, fs_ops: ops } => {
                                fs_ops = ops;
                                end = Some(LifeEnd::Finished(outcome, error));
                            }
                            HostReport::Crash { point, fs_op, fs_ops: ops } => {
                                fs_ops = ops;
                                end = Some(LifeEnd::Crashed(point, fs_op));
                            }
                            other => self.on_report(life, other)?,
                        }
                    }
                    Ok(None) | Err(_) => eof = true,
                },
                () = tokio::time::sleep(Duration::from_millis(TICK_REAL_MS)) => {}
            }
            self.tick(Some(&mut child.stdin)).await;
        }
        let status = child.process.wait().await.map_err(|e| format!("agent#{life}: {e}"))?;
        let end = match end {
            // A planned crash is a real SIGKILL, and the OS says so.
            Some(LifeEnd::Crashed(..)) if status.signal() != Some(SIGKILL) => {
                LifeEnd::Died(format!("it reported a planned crash but exited with {status}, not by SIGKILL"))
            }
            Some(end) => end,
            None => LifeEnd::Died(status.to_string()),
        };
        Ok((end, fs_ops))
    }

    fn on_report(&mut self, life: u64, report: HostReport) -> Result<(), String> {
        let now = self.now_ms();
        match report {
            HostReport::Trace { line } => self.trace(line),
            HostReport::Accepted { record } => {
                let record = Record::decode(&record)
                    .map_err(|e| format!("agent#{life} reported an undecodable record ({e}): {record}"))?;
                self.world.note_accepted(now, life, &record);
            }
            HostReport::Durable { through, at_ms } => self.world.note_durable(through, at_ms),
            HostReport::Synced { record, stamp, at_ms } => {
                let record = Record::decode(&record)
                    .map_err(|e| format!("agent#{life} reported an undecodable durable record ({e}): {record}"))?;
                self.world.note_synced(record, stamp, at_ms);
            }
            HostReport::Ran { execution_id, arguments, stamp, at_ms } => {
                self.world.tool_runs.push(ToolRun { life, execution_id, arguments, stamp, at_ms });
            }
            HostReport::Reached { entry } => {
                self.world.catalog_reached.insert(entry);
            }
            HostReport::Answered { execution_id, at_ms } => {
                self.world.tool_answers.push(ToolAnswer { life, execution_id, at_ms });
            }
            HostReport::Outcome { turn, reason, kept, stamp, at_ms } => {
                self.world.outcomes.push(Outcome { life, turn, reason, kept, stamp, at_ms });
            }
            HostReport::PersistFailure { at_ms } => self.world.note_failure(life, at_ms),
            HostReport::Fault { family } => {
                // A returned disk failure is the one fault that may stop the agent.
                self.world.disk_failure_fired |= ["eio", "enospc", "disk-full"].contains(&family.as_str());
                self.world.faults_fired.insert(family);
            }
            HostReport::ExtraRefused => self.world.extra_refused = true,
            HostReport::Hit { point } => *self.hits.entry(point).or_insert(0) += 1,
            HostReport::Ready | HostReport::Crash { .. } | HostReport::End { .. } => {}
        }
        Ok(())
    }
}
