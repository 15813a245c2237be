use serde::{Deserialize, Serialize};

/// Named places in the runtime where the simulator can crash the host like a SIGKILL
/// (FAILURE-SIM-HARNESS). Production probes do nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrashPoint {
    /// The request prefix is durable; the model request has not left.
    BeforeDispatch,
    /// At least one chunk of the stream was accepted.
    MidStream,
    /// A `tool/call` is durable; its body has not started.
    AfterToolCallFlush,
    /// The side effect reached its receiver; its receipt is not recorded yet.
    AfterSideEffect,
    /// A write-behind batch is about to be appended (its bytes may be torn).
    MidFlush,
    /// Crash repair truncated the torn tail and is about to append the closers.
    DuringRepair,
    /// A delivery's outcome is recorded durably in the queue, and its caller has not heard:
    /// the session has no result for the call yet.
    DuringOutboxFinish,
    /// A turn paused for approval waits: its requests are durable, and so is any decision
    /// taken in the process since (hit once at the pause and once after each such decision);
    /// nothing of it is dispatched.
    AwaitingApproval,
}

/// Every crash point, for coverage reports.
pub const CRASH_POINTS: [CrashPoint; 8] = [
    CrashPoint::BeforeDispatch,
    CrashPoint::MidStream,
    CrashPoint::AfterToolCallFlush,
    CrashPoint::AfterSideEffect,
    CrashPoint::MidFlush,
    CrashPoint::DuringRepair,
    CrashPoint::DuringOutboxFinish,
    CrashPoint::AwaitingApproval,
];

impl std::fmt::Display for CrashPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = serde_json::to_value(self).expect("crash points serialise");
        f.write_str(text.as_str().unwrap_or("?"))
    }
}

/// The crash-point seam. `hit` returns `true` when the host must stop right here (the
/// simulator has frozen its disk and will crash it); the caller then goes no further:
/// async code parks forever, sync code returns an error.
pub trait Probe: Send + Sync {
    /// Reports that execution reached `point`.
    fn hit(&self, point: CrashPoint) -> bool;
}

/// The production probe: never crashes anything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProbe;

impl Probe for NoProbe {
    #[inline]
    fn hit(&self, _: CrashPoint) -> bool {
        false
    }
}

/// Parks forever if the probe says the host crashes at `point` (async call sites).
pub async fn crash_point(probe: &dyn Probe, point: CrashPoint) {
    if probe.hit(point) {
        std::future::pending::<()>().await;
    }
}
