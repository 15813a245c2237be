//! The agent's host: one incarnation after another of `life.rs` on the simulator's seams, its
//! disk faults and crash points armed, reporting into the world's state.

use std::path::Path;
use std::sync::{Arc, Mutex};

use faultline_runtime::event::Record;
use faultline_runtime::seams::Fs;

use super::evidence::{lock, sim_ms, trace, Outcome, SharedWorld, ToolAnswer, ToolRun, World};
use super::probe::{CrashControl, SimProbe};
use super::setup::{OUTBOX_PATH, SESSIONS_DIR, SIM_MODEL_ROOT};
use super::user::AgentUnderTest;
use super::{io_trace, life, rot, seeded};
use crate::scenario::{RotKind, RotTarget};
use crate::seams::{sim_seams, FaultFs, FsFaults, SimFs};

/// One incarnation of the agent host.
#[derive(Clone)]
pub(crate) struct AgentLife {
    /// The embedder's agent, when the harness runs one.
    pub(crate) user: Option<Arc<AgentUnderTest>>,
    pub(crate) route: Result<faultline_runtime::llm::ResolvedProvider, String>,
    pub(crate) world: SharedWorld,
    pub(crate) control: Arc<Mutex<CrashControl>>,
    pub(crate) first_life_fs: FsFaults,
    /// The host's disk space.
    pub(crate) space: crate::seams::DiskSpace,
    pub(crate) plan: seeded::Plan,
    pub(crate) seed: u64,
    /// Records the agent's disk and network operations (when the bench asks for them).
    pub(crate) recorder: io_trace::IoRecorder,
}

impl AgentLife {
    /// The agent's host in `sim`: an incarnation per start, until the run is done.
    pub(crate) fn host(self, sim: &mut turmoil::Sim<'static>) {
        sim.host("agent", move || {
            let life = self.clone();
            async move {
                life.run().await;
                Ok(())
            }
        });
    }

    pub(crate) async fn run(self) {
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
            model_url: SIM_MODEL_ROOT.into(),
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

/// An incarnation's reports, straight into the world's shared state at simulated time.
pub(crate) struct SimReport {
    world: SharedWorld,
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

    fn ran(&self, execution_id: &str, arguments: &str) {
        let mut w = lock(&self.world);
        let stamp = w.stamp();
        let (execution_id, arguments) = (execution_id.to_owned(), arguments.to_owned());
        w.tool_runs.push(ToolRun { life: self.life, execution_id, arguments, stamp, at_ms: sim_ms() });
    }

    fn reached(&self, entry: &'static str) {
        lock(&self.world).catalog_reached.insert(entry.to_owned());
    }

    fn answered(&self, execution_id: &str) {
        let execution_id = execution_id.to_owned();
        lock(&self.world).tool_answers.push(ToolAnswer { life: self.life, execution_id, at_ms: sim_ms() });
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

/// The plan's bit rot of a durable file of `fs`, once per run (what a disk does to a host
/// that is down). Returns the line to trace, if the plan has a rot.
pub(crate) fn rot_while_down(
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
    let entropy = crate::seed::Seed::new(seed).fault("rot/where");
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
