use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::seams::{BoxFuture, Clock, Monotonic};

/// Tokio's monotonic clock for instants and sleeps, `SystemTime` for timestamps.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: tokio::time::Instant,
}

impl SystemClock {
    /// A clock whose monotonic origin is "now".
    pub fn new() -> Self {
        Self { origin: tokio::time::Instant::now() }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Monotonic {
        Monotonic(tokio::time::Instant::now().duration_since(self.origin))
    }

    fn now_ms(&self) -> u64 {
        // A clock set before 1970 is a broken machine; 0 keeps timestamps well-formed.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }

    fn sleep_until(&self, deadline: Monotonic) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep_until(self.origin + deadline.0))
    }
}
