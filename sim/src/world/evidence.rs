//! What a run's hosts report as it happens, kept outside them: the world's shared state (every
//! record accepted, acknowledged and seen synced, the outcomes the user was given, each
//! incarnation's leftovers), the run's one order of events and its trace.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use faultline_runtime::event::Record;

use super::{ledger, life, rot};
use crate::seams::FsFaults;

/// A record the disk witness saw become durable.
#[derive(Debug, Clone)]
pub(crate) struct Synced {
    pub(crate) record: Record,
    /// When, in the run's order of events and in ms of its clock.
    pub(crate) stamp: u64,
    pub(crate) at_ms: u64,
}

/// An outcome the simulated user was given (`Agent::last_outcome` once the agent was idle).
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub(crate) life: u64,
    pub(crate) turn: u32,
    pub(crate) reason: faultline_runtime::event::TurnEndReason,
    pub(crate) kept: bool,
    pub(crate) stamp: u64,
    pub(crate) at_ms: u64,
}

/// A local tool's body ran: the tool's own record of its effect, kept outside the host (the
/// approval checker's evidence for tools that do not go through the gateway).
#[derive(Debug, Clone)]
pub(crate) struct ToolRun {
    pub(crate) life: u64,
    pub(crate) execution_id: String,
    /// The arguments it ran with, as JSON text.
    pub(crate) arguments: String,
    /// When, in the run's order of events and in ms of its clock.
    pub(crate) stamp: u64,
    pub(crate) at_ms: u64,
}

/// A local tool returned an answer: its own record, kept outside the host (the evidence that
/// a result reading "stopped at its deadline" hides an answer that arrived).
#[derive(Debug, Clone)]
pub(crate) struct ToolAnswer {
    pub(crate) life: u64,
    pub(crate) execution_id: String,
    /// When, in ms of the run's clock.
    pub(crate) at_ms: u64,
}

/// What one incarnation left for the oracle beyond its records.
#[derive(Debug, Clone, Default)]
pub(crate) struct LifeEvidence {
    /// Records it accepted that no acknowledgement covered, with when (ms) they were accepted.
    pub(crate) unacked: BTreeMap<u64, (Record, u64)>,
    /// When (ms) it reported a persistence failure (the agent's failure channel, a stop).
    pub(crate) failures: Vec<u64>,
    /// A crash took it: what it had not made durable died with it, rightly.
    pub(crate) crashed: bool,
}

/// State shared between the driver and the hosts.
#[derive(Default)]
pub(crate) struct World {
    pub(crate) trace: Vec<String>,
    pub(crate) incarnation: u64,
    pub(crate) done: bool,
    pub(crate) transcript: Option<Vec<Record>>,
    /// The raw bytes of the agent's session file and outbox journal at the end of the run.
    pub(crate) disk: Vec<(String, Vec<u8>)>,
    pub(crate) restart_requested: bool,
    pub(crate) faults_fired: BTreeSet<String>,
    /// World catalog entries the hosts produced (the model server's are read from its log).
    pub(crate) catalog_reached: BTreeSet<String>,
    /// Records accepted by the current incarnation (by seq), with when (ms).
    pub(crate) accepted: BTreeMap<u64, (Record, u64)>,
    /// Records acknowledged durable by any incarnation: they must survive byte-identical.
    pub(crate) acked: BTreeMap<u64, Record>,
    /// When each seq was first seen acknowledged durable (simulated ms), observed outside the
    /// host: intent before effect compares it with the gateway's receipt times.
    pub(crate) durable_at: BTreeMap<u64, u64>,
    /// Planned crashes (crash points, a crash before a disk operation) that fired.
    pub(crate) crashes_fired: usize,
    /// Mutating filesystem operations of the incarnations that ended.
    pub(crate) fs_ops: u64,
    /// The current incarnation's disk faults (its op count).
    pub(crate) live_fs: Option<FsFaults>,
    /// The bit rot applied while the host was down, if one was.
    pub(crate) rotted: Option<rot::Rotted>,
    /// The file a crash's power loss left a hole in, once it did.
    pub(crate) hole_left_in: Option<std::path::PathBuf>,
    /// A rot that waits for the hole had its one chance (the restart after the hole's crash).
    pub(crate) rot_after_hole_spent: bool,
    /// The message sent with a late cancel was refused (the agent was already disposed).
    pub(crate) extra_refused: bool,
    /// Why an incarnation refused to start on a log it found corrupt (it is not restarted:
    /// an operator must look at the file).
    pub(crate) refused: Option<String>,
    /// Every model request as the model server counted it, by incarnation.
    pub(crate) ledger: ledger::RequestLedger,
    /// Why incarnations stopped on their own (not crashed, not refusing a corrupt log).
    pub(crate) stops: Vec<String>,
    /// Whether an injected disk failure (EIO, ENOSPC) was returned to the agent: the one
    /// fault that may legitimately stop it.
    pub(crate) disk_failure_fired: bool,
    /// The run's order of events, for the simulator's hosts.
    pub(crate) order: Arc<std::sync::atomic::AtomicU64>,
    /// Every record the disk witness saw become durable, by seq: each distinct record once, in
    /// order (a correct runtime syncs one record per seq; a second one means the first was lost).
    pub(crate) synced: BTreeMap<u64, Vec<Synced>>,
    /// Every outcome the simulated user was given.
    pub(crate) outcomes: Vec<Outcome>,
    /// Every run of a local tool's body, in the order they happened.
    pub(crate) tool_runs: Vec<ToolRun>,
    /// Every answer a local tool returned.
    pub(crate) tool_answers: Vec<ToolAnswer>,
    /// Every answer a simulated MCP server gave to a call (written, or held for a resumption).
    pub(crate) mcp_answers: Vec<super::mcp_service::McpAnswer>,
    /// Secrets the agent under test holds besides the world's own (what, value).
    pub(crate) held_secrets: Vec<(String, String)>,
    /// Per incarnation, what the oracle needs of it beyond its records.
    pub(crate) lives: BTreeMap<u64, LifeEvidence>,
}

pub(crate) type SharedWorld = Arc<Mutex<World>>;

pub(crate) fn lock(world: &SharedWorld) -> std::sync::MutexGuard<'_, World> {
    world.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn trace(world: &SharedWorld, line: String) {
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

impl World {
    /// A new incarnation starts: its number. Records accepted by the one before it that never
    /// became durable died with it (they stay in its evidence).
    pub(crate) fn begin_life(&mut self) -> u64 {
        self.end_life();
        self.incarnation += 1;
        self.ledger.begin_life(self.incarnation);
        self.lives.entry(self.incarnation).or_default();
        self.incarnation
    }

    /// The current incarnation is over: what it accepted and never saw acknowledged goes into
    /// its evidence.
    pub(crate) fn end_life(&mut self) {
        let unacked = std::mem::take(&mut self.accepted);
        if self.incarnation > 0 {
            self.lives.entry(self.incarnation).or_default().unacked.extend(unacked);
        }
    }

    /// The next instant of the simulator's order of events.
    pub(crate) fn stamp(&self) -> u64 {
        self.order.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1
    }

    /// Incarnation `life` accepted `record` at `at_ms`.
    pub(crate) fn note_accepted(&mut self, at_ms: u64, life: u64, record: &Record) {
        self.trace.push(format!("{at_ms:>7} agent#{life} {} {}", record.seq, life::describe(record)));
        self.accepted.insert(record.seq, (record.clone(), at_ms));
    }

    /// Everything accepted below seq `through` was acknowledged durable at `at_ms`.
    ///
    /// They move from `accepted` to `acked` (not copied: seqs only grow within a life, so a
    /// record acknowledged once is never accepted again by the same incarnation).
    pub(crate) fn note_durable(&mut self, through: u64, at_ms: u64) {
        let later = self.accepted.split_off(&through);
        for (seq, (record, _)) in std::mem::replace(&mut self.accepted, later) {
            self.durable_at.entry(seq).or_insert(at_ms);
            self.acked.insert(seq, record);
        }
    }

    /// The disk witness saw `record` become durable (the first time counts).
    pub(crate) fn note_synced(&mut self, record: Record, stamp: u64, at_ms: u64) {
        let versions = self.synced.entry(record.seq).or_default();
        if !versions.iter().any(|synced| synced.record == record) {
            versions.push(Synced { record, stamp, at_ms });
        }
    }

    /// Every record the disk witness saw become durable, in seq order.
    pub(crate) fn synced_records(&self) -> impl Iterator<Item = &Synced> {
        self.synced.values().flatten()
    }

    /// Incarnation `life` reported a persistence failure at `at_ms`.
    pub(crate) fn note_failure(&mut self, life: u64, at_ms: u64) {
        self.lives.entry(life).or_default().failures.push(at_ms);
    }

    /// A crash took the current incarnation.
    pub(crate) fn note_crash(&mut self) {
        let life = self.incarnation;
        self.lives.entry(life).or_default().crashed = true;
    }
}

/// Simulated ms now (0 outside the simulation).
pub(crate) fn sim_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64)
}
