use std::time::Duration;

use super::future::BoxFuture;

/// A point on a clock's monotonic timeline, measured from that clock's origin.
///
/// Deliberately not `std::time::Instant`: an `Instant` cannot be constructed without reading
/// the OS clock, while a `Monotonic` is a plain duration that prints, compares and hashes the
/// same way in every run of a simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Monotonic(pub Duration);

impl Monotonic {
    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Monotonic) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// `self + d`, saturating at the far future instead of overflowing.
    pub fn saturating_add(self, d: Duration) -> Monotonic {
        Monotonic(self.0.saturating_add(d))
    }

    /// Milliseconds since the clock's origin (for traces and logs).
    pub fn as_millis(self) -> u128 {
        self.0.as_millis()
    }
}

/// Time, as the runtime is allowed to see it.
///
/// Contract:
/// - `now()` never goes backwards within one process incarnation.
/// - `now_ms()` is wall-clock epoch milliseconds, used only for event timestamps and for
///   interpreting HTTP dates (`Retry-After`); it may jump, so it is never used to measure
///   durations.
/// - `sleep(d)` completes no earlier than `d` after it was called, on this clock's timeline.
///   In simulation that timeline is turmoil's, so a 5 s sleep costs no wall time.
/// - Dropping a sleep future cancels it; nothing keeps running.
pub trait Clock: Send + Sync {
    /// The current monotonic instant.
    fn now(&self) -> Monotonic;

    /// Wall-clock time as milliseconds since the Unix epoch (event `time` fields).
    fn now_ms(&self) -> u64;

    /// A future that completes after `duration` has elapsed on this clock.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;

    /// A future that completes once `now() >= deadline`.
    fn sleep_until(&self, deadline: Monotonic) -> BoxFuture<'static, ()> {
        self.sleep(deadline.saturating_duration_since(self.now()))
    }
}
