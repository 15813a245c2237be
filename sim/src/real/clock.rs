//! The real run's clock: production time, optionally compressed, on one timeline shared by
//! every process of the run.
//!
//! `now()` is `CLOCK_MONOTONIC` (system-wide, so the harness and each agent child read the
//! same clock) since the run's origin, times the scenario's `time_scale`; sleeps last
//! `1/time_scale` of what they ask for. `now_ms()` starts at the simulator's fixed epoch, so a
//! scripted HTTP-date `Retry-After` means the same thing in both worlds. The agent's durable
//! watermark and the gateway's receipts are stamped on this one timeline, which is what lets
//! the oracle check intent before effect across a process boundary.

use std::time::Duration;

use faultline_runtime::{seams::BoxFuture, seams::Clock, seams::Monotonic};

/// Nanoseconds of `CLOCK_MONOTONIC`: the same clock in every process of this machine.
pub fn monotonic_ns() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always there");
    let secs = u64::try_from(now.tv_sec()).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec()).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// Production time from `origin_ns`, `scale` times faster.
#[derive(Debug, Clone, Copy)]
pub struct ScaledClock {
    origin_ns: u64,
    scale: u32,
}

impl ScaledClock {
    /// A clock whose origin is `origin_ns` of `CLOCK_MONOTONIC` (`monotonic_ns()` when the run
    /// started), running `scale` times faster than real time.
    pub fn new(origin_ns: u64, scale: u32) -> Self {
        assert!(scale >= 1, "a time scale is at least 1");
        Self { origin_ns, scale }
    }

    /// The run's origin.
    pub fn origin_ns(&self) -> u64 {
        self.origin_ns
    }

    /// How long `duration` of this clock's time lasts in real time.
    pub fn real(&self, duration: Duration) -> Duration {
        duration / self.scale
    }
}

impl Clock for ScaledClock {
    fn now(&self) -> Monotonic {
        let real = monotonic_ns().saturating_sub(self.origin_ns);
        Monotonic(Duration::from_nanos(real.saturating_mul(u64::from(self.scale))))
    }

    fn now_ms(&self) -> u64 {
        crate::seams::SIM_EPOCH_MS + u64::try_from(self.now().as_millis()).unwrap_or(u64::MAX)
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(self.real(duration)))
    }
}
