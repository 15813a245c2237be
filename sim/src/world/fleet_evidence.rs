//! What the fleet world gathers for its judge (FAILURE-LEASE-EPOCH), none of it the runtime's
//! word: the instant the harness saw the takeover succeed and the log as the new worker found
//! it; every record each worker's agent accepted and every tool body the runtime started,
//! stamped by the harness as they happened; the store read back after both workers stopped.

use faultline_runtime::event::Record;

use super::store_link::LinkFault;

/// A worker host of the fleet world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Worker {
    /// Runs the workload first; the one stopped past its lease.
    A,
    /// Stands by and takes over.
    B,
}

impl Worker {
    /// Its life in the model server's ledger (both are alive at once; each is told apart by
    /// its address).
    pub(crate) fn life(self) -> u64 {
        match self {
            Worker::A => 1,
            Worker::B => 2,
        }
    }

    /// Its turmoil host name.
    pub(crate) fn host(self) -> &'static str {
        match self {
            Worker::A => "worker-a",
            Worker::B => "worker-b",
        }
    }
}

/// A tool body the runtime started, as the harness's tool saw it.
#[derive(Debug, Clone)]
pub(crate) struct Dispatch {
    pub worker: Worker,
    pub execution_id: String,
    /// In the run's order of events.
    pub stamp: u64,
    pub at_ms: u64,
}

/// Worker `b`'s open succeeding, as the harness saw it.
#[derive(Debug, Clone)]
pub(crate) struct TakeoverSeen {
    /// In the run's order of events: from here on `a`'s epoch is fenced.
    pub stamp: u64,
    pub at_ms: u64,
    /// The log as `b` found it (repair included).
    pub found: Vec<Record>,
    /// Whether `a` was still running (stopped) rather than done and released.
    pub from_zombie: bool,
}

/// A turn a worker reported kept whose `turn/end` the store did not hold, saying the same,
/// when the harness looked right after the report.
#[derive(Debug, Clone)]
pub(crate) struct KeptPromise {
    pub worker: Worker,
    pub turn: u32,
    pub reported: &'static str,
    /// The reason of the stored `turn/end` (`None`: there was none).
    pub stored: Option<&'static str>,
    pub at_ms: u64,
}

/// What the fleet world gathered.
#[derive(Debug, Clone, Default)]
pub(crate) struct FleetEvidence {
    /// Every record a worker's agent accepted, stamped as its subscriber saw it.
    pub accepted: Vec<(Worker, Record, u64)>,
    pub dispatches: Vec<Dispatch>,
    /// Every effect a worker's tool asked the shared queue for, stamped as it asked.
    pub asked: Vec<Dispatch>,
    pub takeover: Option<TakeoverSeen>,
    /// The store read back once both workers stopped (`None`: the workload never converged).
    pub transcript: Option<Vec<Record>>,
    /// Worker `a` was told a write of its was refused as fenced (coverage only).
    pub zombie_fenced: bool,
    /// Every fault the store's link made, as the link recorded it.
    pub link: Vec<LinkFault>,
    /// When worker `b`'s open was refused by a lease naming worker `b` itself, in ms.
    pub refused_by_itself: Vec<u64>,
    /// Turns reported kept that the store did not hold as reported.
    pub broken_promises: Vec<KeptPromise>,
}
