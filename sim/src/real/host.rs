//! The agent host of a real run: one incarnation in its own process (`faultline
//! real-agent-host`, started by the harness), on the production seams — real files with real
//! fsync, real sockets, the process's own identity — with two harness-side choices: the
//! scenario's time scale on a clock shared with the harness, and the seed's entropy stream for
//! this incarnation (so jitter and temp-file names match the simulator's).
//!
//! A planned crash is a real SIGKILL the process sends itself at the named crash point's
//! planned hit (or before the planned disk operation), armed by the harness through
//! environment variables that only the `faultline` binary reads.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use faultline_runtime::agent::TurnOutcome;
use faultline_runtime::event::Record;
use faultline_runtime::seams::{CrashPoint, Probe};
use faultline_runtime::{seams::Clock, seams::Seams};

use super::clock::ScaledClock;
use super::protocol::{EndOutcome, HostReport, GO_COMMAND, HEAL_COMMAND};
use crate::scenario::FsErrorKind;
use crate::seams::{FaultFs, FsFaults};
use crate::world::life::{self, Earlier, LifeReport, LifeSetup};
use crate::world::seeded;
use crate::world::setup::resolve_route;

/// The variable that arms this incarnation's crash point: `POINT:HIT` (the hit counted within
/// this incarnation), e.g. `after-side-effect:1`.
pub const CRASH_AT_VAR: &str = "FAULTLINE_REAL_CRASH_AT";
/// The variable that arms the first incarnation's disk faults, comma-separated:
/// `crash-before-op:N`, `fail-op:N:eio`, `fail-op:N:enospc`.
pub const FS_FAULT_VAR: &str = "FAULTLINE_REAL_FS_FAULT";

/// A disk fault of the first incarnation, through the `Fs` seam over real files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsFaultArm {
    /// SIGKILL before mutating operation N.
    CrashBeforeOp(u64),
    /// Mutating operation N fails once.
    FailOp(u64, FsErrorKind),
}

impl FsFaultArm {
    /// The variable's text of `faults`.
    pub fn to_env(faults: &[FsFaultArm]) -> String {
        let one = |fault: &FsFaultArm| match *fault {
            FsFaultArm::CrashBeforeOp(op) => format!("crash-before-op:{op}"),
            FsFaultArm::FailOp(op, kind) => format!("fail-op:{op}:{}", kind.family()),
        };
        faults.iter().map(one).collect::<Vec<_>>().join(",")
    }

    /// Parses the variable's text.
    pub fn parse_all(text: &str) -> Result<Vec<Self>, String> {
        text.split(',').map(Self::parse).collect()
    }

    fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split(':').collect();
        let op = |s: &str| s.parse::<u64>().map_err(|e| format!("{FS_FAULT_VAR}={text}: {e}"));
        match parts.as_slice() {
            ["crash-before-op", n] => Ok(FsFaultArm::CrashBeforeOp(op(n)?)),
            ["fail-op", n, "eio"] => Ok(FsFaultArm::FailOp(op(n)?, FsErrorKind::Eio)),
            ["fail-op", n, "enospc"] => Ok(FsFaultArm::FailOp(op(n)?, FsErrorKind::Enospc)),
            _ => Err(format!("{FS_FAULT_VAR}={text}: expected crash-before-op:N or fail-op:N:eio|enospc")),
        }
    }
}

/// Parses [`CRASH_AT_VAR`].
pub fn parse_crash_at(text: &str) -> Result<(CrashPoint, u32), String> {
    let (point, hit) = text.split_once(':').ok_or_else(|| format!("{CRASH_AT_VAR}={text}: expected POINT:HIT"))?;
    let point: CrashPoint = serde_json::from_value(serde_json::Value::String(point.to_owned()))
        .map_err(|_| format!("{CRASH_AT_VAR}={text}: no crash point {point:?}"))?;
    let hit = hit.parse::<u32>().ok().filter(|h| *h >= 1).ok_or_else(|| format!("{CRASH_AT_VAR}={text}: bad hit"))?;
    Ok((point, hit))
}

/// One incarnation's orders, from the harness.
#[derive(Debug, Clone)]
pub struct HostArgs {
    /// The scenario file the harness wrote.
    pub scenario_file: PathBuf,
    /// The run's seed.
    pub seed: u64,
    /// This incarnation (1-based).
    pub life: u64,
    /// The run's working directory (the agent's disk is `DIR/data`).
    pub dir: PathBuf,
    /// The model server's root URL (each format's path goes after it).
    pub model_url: String,
    /// The gateway's `host:port`.
    pub gateway: String,
    /// What earlier incarnations left.
    pub cancel_fired: bool,
    /// ... see [`Earlier`].
    pub extra_refused: bool,
    /// From [`CRASH_AT_VAR`].
    pub crash_at: Option<(CrashPoint, u32)>,
    /// From [`FS_FAULT_VAR`].
    pub fs_faults: Vec<FsFaultArm>,
}

/// Reports down stdout, one flushed line each.
struct PipeReport {
    clock: Arc<ScaledClock>,
}

impl PipeReport {
    fn send(&self, report: &HostReport) {
        Self::send_line(report);
    }

    /// ms of the run's clock now.
    fn now_ms(&self) -> u64 {
        u64::try_from(self.clock.now().as_millis()).unwrap_or(u64::MAX)
    }

    fn send_line(report: &HostReport) {
        let mut line = serde_json::to_string(report).expect("reports serialise");
        line.push('\n');
        let mut out = std::io::stdout().lock();
        // A harness that went away cannot be told anything more; the process goes on and ends.
        let _ = out.write_all(line.as_bytes()).and_then(|()| out.flush());
    }
}

impl LifeReport for PipeReport {
    fn trace(&self, line: String) {
        self.send(&HostReport::Trace { line });
    }

    fn accepted(&self, record: &Record) {
        self.send(&HostReport::Accepted { record: record.encode() });
    }

    fn durable(&self, through: u64) {
        // Stamped here, on the clock the gateway stamps its receipts with, before the task
        // that waits on the barrier can go on to the tool body.
        self.send(&HostReport::Durable { through, at_ms: self.now_ms() });
    }

    fn synced(&self, record: Record) {
        let stamp = super::clock::monotonic_ns();
        self.send(&HostReport::Synced { record: record.encode(), stamp, at_ms: self.now_ms() });
    }

    fn ran(&self, execution_id: &str, arguments: &str) {
        let stamp = super::clock::monotonic_ns();
        let (execution_id, arguments) = (execution_id.to_owned(), arguments.to_owned());
        self.send(&HostReport::Ran { execution_id, arguments, stamp, at_ms: self.now_ms() });
    }

    fn reached(&self, entry: &'static str) {
        self.send(&HostReport::Reached { entry: entry.to_owned() });
    }

    fn answered(&self, execution_id: &str) {
        self.send(&HostReport::Answered { execution_id: execution_id.to_owned(), at_ms: self.now_ms() });
    }

    fn outcome(&self, outcome: &TurnOutcome) {
        let stamp = super::clock::monotonic_ns();
        self.send(&HostReport::Outcome {
            turn: outcome.turn,
            reason: outcome.reason.clone(),
            kept: outcome.kept,
            stamp,
            at_ms: self.now_ms(),
        });
    }

    fn persist_failure(&self) {
        self.send(&HostReport::PersistFailure { at_ms: self.now_ms() });
    }

    fn fault(&self, family: &str) {
        self.send(&HostReport::Fault { family: family.to_owned() });
    }

    fn extra_refused(&self) {
        self.send(&HostReport::ExtraRefused);
    }
}

/// SIGKILL, now. Never returns.
fn kill_self() -> ! {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
    // SIGKILL to oneself is delivered before `kill` returns; this is never reached.
    loop {
        std::thread::park();
    }
}

/// The crash-point probe of a real incarnation: counts hits, reports each, and at the armed
/// hit reports the crash and kills the process.
struct KillProbe {
    /// The armed crash (cleared by the heal).
    armed: Arc<Mutex<Option<(CrashPoint, u32)>>>,
    hits: Mutex<BTreeMap<CrashPoint, u32>>,
    report: Arc<PipeReport>,
    /// The incarnation's disk (its operation count goes into the crash report).
    faults: FsFaults,
}

impl Probe for KillProbe {
    fn hit(&self, point: CrashPoint) -> bool {
        let count = {
            let mut hits = self.hits.lock().unwrap_or_else(|p| p.into_inner());
            let count = hits.entry(point).or_insert(0);
            *count += 1;
            *count
        };
        self.report.send(&HostReport::Hit { point });
        if *self.armed.lock().unwrap_or_else(|p| p.into_inner()) == Some((point, count)) {
            self.report.send(&HostReport::Crash { point: Some(point), fs_op: None, fs_ops: self.faults.ops() });
            kill_self();
        }
        false
    }
}

/// The disk faults the harness armed this incarnation with.
fn armed_faults(arms: &[FsFaultArm]) -> FsFaults {
    let faults = FsFaults::new();
    for fault in arms {
        match *fault {
            FsFaultArm::CrashBeforeOp(op) => {
                faults.crash_before(op);
            }
            FsFaultArm::FailOp(op, kind) => {
                faults.fail(op, kind.io_kind());
            }
        }
    }
    faults
}

/// The harness's words on stdin: `go ORIGIN` starts the workload on the run's clock,
/// `heal` ends the fault window (nothing armed fires after it). A plain thread, detached:
/// a blocking read of stdin cannot be cancelled and must not hold the process up once the
/// workload is done. Returns where `go`'s origin arrives.
fn listen_to_harness(armed: Arc<Mutex<Option<(CrashPoint, u32)>>>, faults: FsFaults) -> std::sync::mpsc::Receiver<u64> {
    let (go_tx, go_rx) = std::sync::mpsc::channel::<u64>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { return };
            let mut words = line.split_whitespace();
            match (words.next(), words.next().and_then(|w| w.parse::<u64>().ok())) {
                (Some(GO_COMMAND), Some(origin)) => {
                    let _ = go_tx.send(origin);
                }
                (Some(HEAL_COMMAND), _) => {
                    *armed.lock().unwrap_or_else(|p| p.into_inner()) = None;
                    faults.heal();
                }
                _ => {}
            }
        }
    });
    go_rx
}

/// The production seams of one incarnation: the scaled clock, the killing probe, the real
/// disk behind the fault filesystem, the seed's entropy.
fn production_seams(args: &HostArgs, clock: Arc<ScaledClock>, probe: Arc<KillProbe>, faults: &FsFaults) -> Seams {
    Seams {
        clock,
        net: Arc::new(faultline_runtime::production::TokioNet),
        fs: Arc::new(FaultFs::new(Arc::new(faultline_runtime::production::RealFs), faults.clone())),
        // Its instance id must differ from every other process's: OS entropy, not the seed's
        // stream (whose draws are the agent's jitter and temp-file names, as in the simulator).
        process: Arc::new(faultline_runtime::production::OsProcess::new(
            &faultline_runtime::production::OsEntropy::new(),
        )),
        entropy: Arc::new(crate::seed::Seed::new(args.seed).host("agent", args.life)),
        probe,
        compute: Arc::new(faultline_runtime::production::Threads::new()),
        secrets: Default::default(),
    }
}

/// The injected disk failures that were returned, and a full disk's refusals: the evidence
/// the oracle counts.
fn report_disk_faults(report: &PipeReport, faults: &FsFaults, space: &crate::seams::DiskSpace) {
    for kind in faults.failures_fired() {
        let family = if kind == std::io::ErrorKind::StorageFull { "enospc" } else { "eio" };
        report.fault(family);
    }
    if space.refusals() > 0 {
        report.fault("disk-full");
    }
}

/// Runs one incarnation; returns the process's exit status (0 done, 3 refused, 4 could not
/// start, 1 bad orders). It sets itself up, says it is ready, and starts its workload only
/// when the harness says `go` with the run's clock origin: the cost of starting a process
/// never shifts the plan's timing.
pub fn agent_host(args: &HostArgs) -> i32 {
    let scenario = match std::fs::read_to_string(&args.scenario_file)
        .map_err(|e| format!("{}: {e}", args.scenario_file.display()))
        .and_then(|text| crate::stand_in::scenario_with_agent(&text))
    {
        Ok(scenario) => scenario,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "real-agent-host: {e}");
            return 1;
        }
    };
    let plan = seeded::resolve(&crate::generate::expand(&scenario, args.seed, None), args.seed);
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "real-agent-host: {e}");
            return 1;
        }
    };
    let faults = armed_faults(&args.fs_faults);
    let armed = Arc::new(Mutex::new(args.crash_at));
    let go_rx = listen_to_harness(armed.clone(), faults.clone());
    PipeReport::send_line(&HostReport::Ready);
    let Ok(origin_ns) = go_rx.recv() else {
        // The harness went away before the start: there is nothing to run.
        return 1;
    };
    let clock = Arc::new(ScaledClock::new(origin_ns, scenario.real.time_scale));
    let report = Arc::new(PipeReport { clock: clock.clone() });
    {
        let report = report.clone();
        // The operation that was refused is not counted: `op` is the count so far.
        faults.on_crash(Arc::new(move |op| {
            report.send(&HostReport::Crash { point: None, fs_op: Some(op), fs_ops: op });
            kill_self();
        }));
    }
    let probe = Arc::new(KillProbe { armed, hits: Mutex::default(), report: report.clone(), faults: faults.clone() });
    let data = args.dir.join("data");
    // The real disk's own ENOSPC refusals are counted the way a simulated full disk's are.
    let space = crate::seams::DiskSpace::default();
    faults.on_disk(&space);
    let seams = production_seams(args, clock, probe, &faults);
    life::watch_disk(&faults, seams.fs.as_ref(), &data.join("sessions"), plan.store.format(), report.clone());
    let outcome = runtime.block_on(async {
        let setup = LifeSetup {
            plan: &plan,
            route: resolve_route(plan.format, &args.model_url, &plan.provider),
            seed: args.seed,
            life: args.life,
            seams,
            sessions_dir: data.join("sessions"),
            outbox_path: data.join("outbox.jsonl"),
            model_url: args.model_url.clone(),
            gateway: args.gateway.clone(),
            earlier: Earlier { cancel_fired: args.cancel_fired, extra_refused: args.extra_refused },
            user: None,
        };
        life::live(setup, report.clone()).await
    });
    report_disk_faults(report.as_ref(), &faults, &space);
    let fs_ops = faults.ops();
    let (outcome, error, status) = match outcome {
        Ok(_) => (EndOutcome::Done, None, 0),
        Err(e) if e.contains("corrupt") => (EndOutcome::Refused, Some(e), 3),
        Err(e) => (EndOutcome::Stopped, Some(e), 4),
    };
    report.send(&HostReport::End { outcome, error, fs_ops });
    status
}
