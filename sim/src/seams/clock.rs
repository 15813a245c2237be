use std::time::{Duration, SystemTime};

use faultline_runtime::{seams::BoxFuture, seams::Clock, seams::Monotonic};

/// The fixed epoch of every simulation: 2026-01-01T00:00:00Z. Fixed so that event timestamps,
/// and therefore snapshots and trace hashes, are identical across runs and machines.
pub const SIM_EPOCH_MS: u64 = 1_767_225_600_000;

/// The epoch as a `SystemTime`, for `turmoil::Builder::epoch`.
pub fn sim_epoch() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(SIM_EPOCH_MS)
}

/// turmoil's simulated time.
///
/// `now()` is the simulation's elapsed time, which keeps counting across a host's crash and
/// restart; sleeps run on the host's paused tokio clock, which turmoil advances tick by tick,
/// so a 5 s sleep costs no wall time.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimClock;

impl Clock for SimClock {
    fn now(&self) -> Monotonic {
        Monotonic(turmoil::sim_elapsed().expect("SimClock used outside a turmoil host"))
    }

    fn now_ms(&self) -> u64 {
        let since_epoch = turmoil::since_epoch().expect("SimClock used outside a turmoil host");
        u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}
