//! Helpers shared by the integration tests.

use std::time::Duration;

/// A turmoil builder with the project's fixed epoch and seed, and a simulated-time budget
/// generous enough for every test in this binary.
pub fn sim_builder(seed: u64) -> turmoil::Builder {
    sim_builder_with_tick(seed, Duration::from_millis(10))
}

/// The same with an explicit tick (1 ms where a test asserts millisecond timing).
pub fn sim_builder_with_tick(seed: u64, tick: Duration) -> turmoil::Builder {
    let mut builder = turmoil::Builder::new();
    builder
        .epoch(faultline_sim::sim_epoch())
        .rng_seed(seed)
        .simulation_duration(Duration::from_secs(120))
        .tick_duration(tick)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(1));
    builder
}

/// Entropy that replays fixed draws (then zeros): pins jitter samples in tests.
#[derive(Debug, Default)]
pub struct ScriptedEntropy(pub std::sync::Mutex<std::collections::VecDeque<u64>>);

impl faultline_runtime::Entropy for ScriptedEntropy {
    fn next_u64(&self) -> u64 {
        self.0.lock().unwrap().pop_front().unwrap_or(0)
    }
}
