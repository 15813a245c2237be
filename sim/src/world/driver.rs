//! The simulated run's driver: steps turmoil, keeps the plan's clock-driven windows on time
//! at every step (the heal, partitions, the full disk), and crashes and restarts the agent
//! host when a crash point fires, a crash-before-op is reached or an incarnation stopped.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::evidence::{lock, SharedWorld};
use super::probe::CrashControl;
use super::seeded::Plan;
use crate::model_server::ModelServer;
use crate::seams::{DiskSpace, FsFaults};

/// Simulated ms between a failed start and its restart (a supervisor's back-off).
const SUPERVISOR_RESTART_MS: u64 = 200;

pub(super) struct RunDriver<'a> {
    pub sim: turmoil::Sim<'a>,
    pub plan: &'a Plan,
    pub world: SharedWorld,
    pub control: Arc<Mutex<CrashControl>>,
    pub first_life_fs: FsFaults,
    pub space: DiskSpace,
    pub model_slot: Arc<Mutex<Option<ModelServer>>>,
    /// The planned crashes' restart delays, in order.
    pub restart_delays: VecDeque<u64>,
    /// Which of the plan's partitions is on.
    pub partitioned: BTreeSet<usize>,
    /// Whether the disk-full window is on.
    pub disk_full: bool,
    pub healed: bool,
    pub fs_crash_done: bool,
    /// Crashes before a disk operation that were not also a crash point.
    pub disk_op_crashes: usize,
}

impl<'a> RunDriver<'a> {
    /// The driver of `plan`'s world, nothing on yet.
    pub fn new(
        sim: turmoil::Sim<'a>,
        plan: &'a Plan,
        world: SharedWorld,
        control: Arc<Mutex<CrashControl>>,
        (first_life_fs, space): (FsFaults, DiskSpace),
        model_slot: Arc<Mutex<Option<ModelServer>>>,
    ) -> RunDriver<'a> {
        RunDriver {
            sim,
            plan,
            world,
            control,
            first_life_fs,
            space,
            model_slot,
            restart_delays: plan.faults.crashes.iter().map(|c| c.restart_after_ms).collect(),
            partitioned: BTreeSet::new(),
            disk_full: false,
            healed: false,
            fs_crash_done: false,
            disk_op_crashes: 0,
        }
    }
}

impl RunDriver<'_> {
    /// Runs the world until the workload is done or the budget is spent. Returns the end (sim
    /// ms) and the crashes before a disk operation that fired.
    pub fn drive(mut self) -> (u64, usize) {
        let budget = Duration::from_millis(self.plan.end_ms());
        loop {
            self.keep_windows();
            if lock(&self.world).done || self.sim.elapsed() >= budget {
                break;
            }
            if let Err(e) = self.sim.step() {
                let now = self.sim.elapsed().as_millis();
                lock(&self.world).trace.push(format!("{now:>7} simulation error: {e}"));
                break;
            }
            self.crash_if_asked();
        }
        (self.sim.elapsed().as_millis() as u64, self.disk_op_crashes)
    }

    /// The plan's windows at the current instant: the heal (which ends every other window),
    /// the partitions and the full disk.
    fn keep_windows(&mut self) {
        let now = self.sim.elapsed();
        let at = now.as_millis();
        if now >= Duration::from_millis(self.plan.heal_at_ms) && !self.healed && !lock(&self.world).done {
            // The liveness phase: the fault window is over, everything heals, and from here
            // the workload must converge by the budget.
            self.healed = true;
            self.control.lock().unwrap_or_else(|p| p.into_inner()).plan.clear();
            self.first_life_fs.heal();
            if let Some(model) = self.model_slot.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                model.heal();
            }
            lock(&self.world).trace.push(format!("{at:>7} fault window over: everything heals"));
        }
        let within =
            |from_ms: u64, to_ms: u64| now >= Duration::from_millis(from_ms) && now < Duration::from_millis(to_ms);
        if let Some(full) = &self.plan.faults.disk_full {
            let active = !self.healed && within(full.from_ms, full.to_ms);
            if active != self.disk_full {
                self.disk_full = active;
                let line = if active {
                    self.space.fill(full.refuses);
                    format!("the disk is full ({})", full.refuses.name())
                } else {
                    self.space.free();
                    "the disk has space again".to_owned()
                };
                lock(&self.world).trace.push(format!("{at:>7} {line}"));
            }
        }
        for (i, p) in self.plan.faults.partitions.iter().enumerate() {
            let active = !self.healed && within(p.from_ms, p.to_ms);
            if active && self.partitioned.insert(i) {
                self.sim.partition(p.a.as_str(), p.b.as_str());
                let mut w = lock(&self.world);
                w.faults_fired.insert("partition".into());
                w.trace.push(format!("{at:>7} partition {}<->{}", p.a, p.b));
            } else if !active && self.partitioned.remove(&i) {
                self.sim.repair(p.a.as_str(), p.b.as_str());
                lock(&self.world).trace.push(format!("{at:>7} heal {}<->{}", p.a, p.b));
            }
        }
    }

    /// Crashes the agent host if a crash point fired, a crash-before-op was reached or the
    /// incarnation stopped (a supervisor restarts it), then restarts it after its delay,
    /// keeping the windows on time meanwhile.
    fn crash_if_asked(&mut self) {
        let crash = self.control.lock().unwrap_or_else(|p| p.into_inner()).requested.take();
        let restart = std::mem::take(&mut lock(&self.world).restart_requested);
        // A filesystem-level crash point (crash before a numbered operation) also kills the host.
        let fs_crash = self.first_life_fs.crashed() && lock(&self.world).incarnation == 1 && !self.fs_crash_done;
        if crash.is_none() && !restart && !fs_crash {
            return;
        }
        self.fs_crash_done |= fs_crash;
        // A crash point freezes the disk too: only a crash without one was "before op k".
        self.disk_op_crashes += usize::from(fs_crash && crash.is_none());
        let at = self.sim.elapsed().as_millis();
        let what = match (crash, fs_crash) {
            (Some(p), _) => format!("crash at {p}"),
            (None, true) => format!("crash before filesystem op {}", self.first_life_fs.ops()),
            (None, false) => "restart after a failed start".to_owned(),
        };
        {
            let mut w = lock(&self.world);
            // Torn writes happen to bytes a crash catches unsynced; a crash with none tore
            // nothing, whatever the block size.
            let torn_blocks = self.plan.faults.fs.as_ref().is_some_and(|f| f.block_size.is_some());
            if torn_blocks && w.live_fs.as_ref().is_some_and(|f| f.unsynced_bytes() > 0) {
                w.faults_fired.insert("torn-write".into());
            }
            w.trace.push(format!("{at:>7} {what} (SIGKILL)"));
            // What the power loss of a crash before a disk operation did to the write it
            // caught, as it happened.
            if fs_crash {
                if let Some((path, kept, written)) = self.first_life_fs.torn() {
                    w.trace.push(format!(
                        "{at:>7} the crash tore the unsynced write to {} mid-line: {kept} of its {written} bytes reached the disk",
                        path.display()
                    ));
                }
                if let Some(path) = self.first_life_fs.hole_left() {
                    w.trace.push(format!("{at:>7} the crash left a power-loss hole in {}", path.display()));
                    // What a rot that waits for the hole needs to know while the host is down.
                    w.hole_left_in = Some(path.clone());
                }
            }
            w.note_crash();
            w.faults_fired
                .insert(if crash.is_some() || fs_crash { "crash-point" } else { "supervisor-restart" }.into());
        }
        self.sim.crash("agent");
        let restart_after = match crash {
            Some(_) => self.restart_delays.pop_front().unwrap_or(SUPERVISOR_RESTART_MS),
            None => SUPERVISOR_RESTART_MS,
        };
        let until = self.sim.elapsed() + Duration::from_millis(restart_after);
        while self.sim.elapsed() < until {
            self.keep_windows();
            if self.sim.step().is_err() {
                break;
            }
        }
        self.sim.bounce("agent");
    }
}
